//! A tree as git keeps it, and the differences between two.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::FakeError;

/// One entry of a tree, as git keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEntry {
    /// A folder.
    Dir,
    /// A file: whether it is executable, and its bytes.
    File {
        /// Any execute bit set.
        executable: bool,
        /// The contents.
        bytes: Vec<u8>,
    },
    /// A symbolic link and its target.
    Link(PathBuf),
    /// Anything else (a node, a socket): git cannot hold it.
    Special,
}

impl TreeEntry {
    /// What it is, in a few words.
    pub fn describe(&self) -> String {
        match self {
            TreeEntry::Dir => "a folder".to_string(),
            TreeEntry::File { executable, bytes } => format!(
                "a{} file of {} bytes",
                if *executable { "n executable" } else { "" },
                bytes.len()
            ),
            TreeEntry::Link(target) => format!("a link to {}", target.display()),
            TreeEntry::Special => "a special file".to_string(),
        }
    }
}

/// Every entry under `dir`, by path relative to it.
pub fn snapshot(dir: &Path) -> Result<BTreeMap<PathBuf, TreeEntry>, FakeError> {
    fn walk(
        base: &Path,
        dir: &Path,
        out: &mut BTreeMap<PathBuf, TreeEntry>,
    ) -> Result<(), FakeError> {
        for entry in std::fs::read_dir(dir).map_err(FakeError::io("list", dir))? {
            let path = entry.map_err(FakeError::io("list", dir))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(FakeError::io("inspect", &path))?;
            let rel = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
            let kind = meta.file_type();
            let entry = if kind.is_symlink() {
                TreeEntry::Link(
                    std::fs::read_link(&path).map_err(FakeError::io("read link", &path))?,
                )
            } else if kind.is_dir() {
                walk(base, &path, out)?;
                TreeEntry::Dir
            } else if kind.is_file() {
                TreeEntry::File {
                    executable: meta.permissions().mode() & 0o111 != 0,
                    bytes: std::fs::read(&path).map_err(FakeError::io("read", &path))?,
                }
            } else {
                TreeEntry::Special
            };
            out.insert(rel, entry);
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// How the trees `expected` and `got` differ, one line per path; empty when they hold the
/// same files, links and folders.
pub fn differences(expected: &Path, got: &Path) -> Result<Vec<String>, FakeError> {
    let (a, b) = (snapshot(expected)?, snapshot(got)?);
    let mut out = Vec::new();
    for (path, want) in &a {
        let shown = path.display();
        match (want, b.get(path)) {
            (_, None) => out.push(format!("{shown}: only in {}", expected.display())),
            (w, Some(g)) if w == g => {}
            (
                TreeEntry::File {
                    executable: x,
                    bytes: p,
                },
                Some(TreeEntry::File {
                    executable: y,
                    bytes: q,
                }),
            ) => {
                if x != y {
                    out.push(format!("{shown}: executable {x}, regenerated {y}"));
                }
                if p != q {
                    out.push(format!(
                        "{shown}: contents differ ({} bytes, regenerated {})",
                        p.len(),
                        q.len()
                    ));
                }
            }
            (w, Some(g)) => out.push(format!(
                "{shown}: {}, regenerated {}",
                w.describe(),
                g.describe()
            )),
        }
    }
    for path in b.keys().filter(|p| !a.contains_key(*p)) {
        out.push(format!("{}: only in {}", path.display(), got.display()));
    }
    Ok(out)
}
