//! The node installer's record: what a node's watched folders held before nvc was
//! installed on it, and what they held once it was, so that uninstalling puts every
//! file back byte for byte (content, mode, owner) and removes what the install made.
//!
//! Pure: the trees are read and written by `nvc_host::node`; this decides what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One file system entry, as the installer compares and restores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    /// A regular file.
    File {
        /// Permission bits (with set-id and sticky bits).
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Its bytes.
        #[serde(flatten)]
        content: Content,
    },
    /// A folder (its entries are entries of their own).
    Dir {
        /// Permission bits.
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
    /// A symbolic link.
    Symlink {
        /// What it points at.
        target: PathBuf,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
}

/// A file's bytes: as text when they are UTF-8 (config files, readable in the record),
/// else as hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// UTF-8 text.
    Text(String),
    /// Any bytes, two lowercase hex digits each.
    Hex(String),
}

impl Content {
    /// The content of `bytes`.
    pub fn of(bytes: Vec<u8>) -> Content {
        match String::from_utf8(bytes) {
            Ok(text) => Content::Text(text),
            Err(e) => Content::Hex(e.into_bytes().iter().map(|b| format!("{b:02x}")).collect()),
        }
    }

    /// The bytes (`None`: hex that is not hex, a damaged record).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Content::Text(t) => Some(t.as_bytes().to_vec()),
            Content::Hex(h) => (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
                .collect(),
        }
    }
}

/// What a set of folders held: every entry under each, keyed by path; a path that is not
/// a key did not exist.
pub type Tree = BTreeMap<PathBuf, Entry>;

/// The record kept in the install folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Record {
    /// The version of nvc that made it.
    pub version: String,
    /// The engine configured (`containerd`, `crio`).
    pub engine: String,
    /// The folders watched (node paths): the engine's config folder, the CDI spec's.
    pub watched: Vec<PathBuf>,
    /// What they held before the first install.
    pub originals: Tree,
    /// What they held when the last install finished; `None` while one is under way (or
    /// was cut short): uninstalling then puts back every original.
    pub installed: Option<Tree>,
}

/// One thing uninstalling does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Make `path` this entry again (write the file, make the folder or link).
    Restore(PathBuf, Entry),
    /// Remove `path`, which the install made.
    Remove(PathBuf),
    /// Leave `path`: it changed after the install, someone else's change.
    Keep(PathBuf),
}

impl Record {
    /// The steps that take the watched folders from `now` back to the originals: the
    /// paths the install changed (or made, or removed) and nobody touched since, in an
    /// order that works (removals deepest first, then restores shallowest first).
    pub fn uninstall_steps(&self, now: &Tree) -> Vec<Step> {
        let paths: BTreeSet<&PathBuf> = self
            .originals
            .keys()
            .chain(now.keys())
            .chain(self.installed.iter().flat_map(|t| t.keys()))
            .collect();
        let mut removes = Vec::new();
        let mut restores = Vec::new();
        for path in paths {
            let original = self.originals.get(path);
            let current = now.get(path);
            if original == current {
                continue;
            }
            // A change made after the install is not the install's to undo; a path the
            // install never touched (original == installed) is not either.
            if let Some(installed) = &self.installed {
                let left = installed.get(path);
                if left == original || current != left {
                    restores.push(Step::Keep(path.clone()));
                    continue;
                }
            }
            match original {
                None => removes.push(Step::Remove(path.clone())),
                Some(entry) => restores.push(Step::Restore(path.clone(), entry.clone())),
            }
        }
        // Deepest first: a folder's entries go before it.
        removes.sort_by_key(|s| std::cmp::Reverse(depth_key(s)));
        removes.extend(restores);
        removes
    }

    /// Whether a path under `root` differs between the originals and `installed`.
    pub fn changed_under(&self, root: &Path, installed: &Tree) -> bool {
        changed_under(&self.originals, installed, root)
    }
}

/// Whether `a` and `b` differ at or under `root`.
pub fn changed_under(a: &Tree, b: &Tree, root: &Path) -> bool {
    let under = |t: &Tree| -> Vec<(PathBuf, Entry)> {
        t.iter()
            .filter(|(p, _)| p.starts_with(root))
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect()
    };
    under(a) != under(b)
}

fn depth_key(step: &Step) -> (usize, PathBuf) {
    let path = match step {
        Step::Restore(p, _) | Step::Remove(p) | Step::Keep(p) => p,
    };
    (path.components().count(), path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Entry {
        Entry::File {
            mode: 0o644,
            uid: 0,
            gid: 0,
            content: Content::Text(text.into()),
        }
    }

    fn dir() -> Entry {
        Entry::Dir {
            mode: 0o755,
            uid: 0,
            gid: 0,
        }
    }

    fn tree(entries: &[(&str, Entry)]) -> Tree {
        entries
            .iter()
            .map(|(p, e)| (PathBuf::from(p), e.clone()))
            .collect()
    }

    fn record(originals: Tree, installed: Option<Tree>) -> Record {
        Record {
            version: "0".into(),
            engine: "containerd".into(),
            watched: vec![PathBuf::from("/etc/containerd")],
            originals,
            installed,
        }
    }

    #[test]
    fn content_round_trips_text_and_bytes() {
        let text = Content::of(b"version = 2\n".to_vec());
        assert_eq!(text, Content::Text("version = 2\n".into()));
        assert_eq!(text.bytes().unwrap(), b"version = 2\n");
        let binary = Content::of(vec![0xff, 0x00, 0x7f]);
        assert_eq!(binary, Content::Hex("ff007f".into()));
        assert_eq!(binary.bytes().unwrap(), vec![0xff, 0x00, 0x7f]);
        assert_eq!(Content::Hex("f".into()).bytes(), None);
        assert_eq!(Content::Hex("zz".into()).bytes(), None);
    }

    #[test]
    fn uninstall_restores_changed_files_and_removes_made_ones_deepest_first() {
        let before = tree(&[
            ("/etc/containerd", dir()),
            ("/etc/containerd/config.toml", file("version = 2\n")),
        ]);
        let after = tree(&[
            ("/etc/containerd", dir()),
            (
                "/etc/containerd/config.toml",
                file("version = 2\nimports = []\n"),
            ),
            (
                "/etc/containerd/config.toml.nvc-backup",
                file("version = 2\n"),
            ),
            ("/etc/containerd/conf.d", dir()),
            ("/etc/containerd/conf.d/99-nvc.toml", file("# nvc\n")),
        ]);
        let r = record(before.clone(), Some(after.clone()));
        let steps = r.uninstall_steps(&after);
        assert_eq!(
            steps,
            vec![
                Step::Remove("/etc/containerd/conf.d/99-nvc.toml".into()),
                Step::Remove("/etc/containerd/config.toml.nvc-backup".into()),
                Step::Remove("/etc/containerd/conf.d".into()),
                Step::Restore("/etc/containerd/config.toml".into(), file("version = 2\n")),
            ]
        );
        assert!(r.changed_under(Path::new("/etc/containerd"), &after));
        assert!(!r.changed_under(Path::new("/run/cdi"), &after));
        // Already uninstalled: nothing to do.
        assert!(r.uninstall_steps(&before).is_empty());
    }

    #[test]
    fn a_change_made_after_the_install_is_kept() {
        let before = tree(&[("/etc/containerd/config.toml", file("a\n"))]);
        let after = tree(&[
            ("/etc/containerd/config.toml", file("a\nnvc\n")),
            ("/etc/containerd/conf.d/99-nvc.toml", file("# nvc\n")),
        ]);
        let mut now = after.clone();
        now.insert("/etc/containerd/config.toml".into(), file("admin\n"));
        now.insert("/etc/containerd/site.toml".into(), file("site\n"));
        let steps = record(before, Some(after)).uninstall_steps(&now);
        assert_eq!(
            steps,
            vec![
                Step::Remove("/etc/containerd/conf.d/99-nvc.toml".into()),
                Step::Keep("/etc/containerd/config.toml".into()),
                Step::Keep("/etc/containerd/site.toml".into()),
            ]
        );
    }

    #[test]
    fn an_install_cut_short_is_undone_whole() {
        let before = tree(&[("/etc/crio", dir())]);
        let now = tree(&[
            ("/etc/crio", dir()),
            ("/etc/crio/crio.conf.d", dir()),
            ("/etc/crio/crio.conf.d/99-nvc.conf", file("# nvc\n")),
        ]);
        let steps = record(before, None).uninstall_steps(&now);
        assert_eq!(
            steps,
            vec![
                Step::Remove("/etc/crio/crio.conf.d/99-nvc.conf".into()),
                Step::Remove("/etc/crio/crio.conf.d".into()),
            ]
        );
    }

    #[test]
    fn a_file_removed_by_the_install_comes_back() {
        let before = tree(&[("/run/cdi", dir()), ("/run/cdi/old.yaml", file("x"))]);
        let after = tree(&[("/run/cdi", dir())]);
        let steps = record(before, Some(after.clone())).uninstall_steps(&after);
        assert_eq!(
            steps,
            vec![Step::Restore("/run/cdi/old.yaml".into(), file("x"))]
        );
    }

    #[test]
    fn the_record_round_trips_through_json() {
        let r = record(
            tree(&[
                ("/a", file("x")),
                (
                    "/b",
                    Entry::Symlink {
                        target: "/a".into(),
                        uid: 1,
                        gid: 2,
                    },
                ),
            ]),
            None,
        );
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert!(text.contains("\"kind\": \"symlink\""), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
    }
}
