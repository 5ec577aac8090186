//! What nvc made in a container's rootfs ([`Made`]), noted as it is made, so that it can
//! be taken away again when the container ends ([`crate::trace`]), and the removal of
//! one such thing ([`ContainerRoot::unmake`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use std::ffi::OsStr;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, StatxFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use super::{ContainerRoot, FileKind, FsError};

/// One thing nvc made in a rootfs, by its path as seen inside the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Made {
    /// A directory made where there was nothing.
    Dir {
        /// Its path.
        path: PathBuf,
    },
    /// An empty regular file (a mount point) made where there was nothing.
    File {
        /// Its path.
        path: PathBuf,
    },
    /// A symbolic link made where there was nothing, or in place of the link to
    /// `previous` the image had there.
    Link {
        /// Its path.
        path: PathBuf,
        /// What it points to.
        target: String,
        /// The target of the image's link it replaced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<String>,
    },
}

impl Made {
    /// Its path inside the container.
    pub fn path(&self) -> &Path {
        match self {
            Made::Dir { path } | Made::File { path } | Made::Link { path, .. } => path,
        }
    }
}

/// What became of one [`Made`] when it was to be taken away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmade {
    /// Removed (for a link that replaced one, the image's link is back).
    Removed,
    /// Already gone.
    Gone,
    /// Left: it is no longer what nvc made (written to, replaced, not empty).
    Changed(FileKind),
}

/// Where what a root makes is written down as it is made, besides the root's own list
/// ([`ContainerRoot::made`]): a process killed part way leaves the list of what it made
/// up to the last thing (the container's record, `crate::trace::RecordDir`).
pub trait JournalSink: Send + Sync + std::fmt::Debug {
    /// `made` was just made.
    fn made(&self, made: &Made);
    /// The container's ld.so.cache, `original` (`None`: it had none), is about to be
    /// replaced by `written`; called before the write.
    fn cache(&self, original: Option<&[u8]>, written: &[u8]);
}

/// The things made by a root and its submounts on the same mount, in order.
#[derive(Debug, Default)]
pub(super) struct Journal {
    list: Mutex<Vec<Made>>,
    sink: std::sync::OnceLock<Arc<dyn JournalSink>>,
}

impl Journal {
    pub(super) fn note(&self, made: Made) {
        if let Some(sink) = self.sink.get() {
            sink.made(&made);
        }
        if let Ok(mut list) = self.list.lock() {
            list.push(made);
        }
    }

    fn list(&self) -> Vec<Made> {
        self.list.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl ContainerRoot {
    /// Notes that `made` was made here, when this root's mount is the rootfs's (what is
    /// made on a runtime tmpfs goes with it).
    pub(super) fn note(&self, made: Made) {
        if self.journaled {
            self.journal.note(made);
        }
    }

    /// Writes everything this root (and its submounts) makes from now on to `sink` too,
    /// as it is made; a sink set already stays.
    pub fn journal_to(&self, sink: Arc<dyn JournalSink>) {
        let _ = self.journal.sink.set(sink);
    }

    /// Tells the journal's sink that the container's ld.so.cache, `original`, is about to
    /// be replaced by `written`.
    pub fn note_cache(&self, original: Option<&[u8]>, written: &[u8]) {
        if let Some(sink) = self.journal.sink.get() {
            sink.cache(original, written);
        }
    }

    /// Everything this root (and its submounts on the rootfs's mount) made so far, in
    /// the order made.
    pub fn made(&self) -> Vec<Made> {
        self.journal.list()
    }

    /// Takes away what `made` describes if it is still what nvc made: an empty regular
    /// file, an empty directory, a symbolic link to the same target (then the image's
    /// link it replaced, if any, is put back). Anything else there is left as it is and
    /// said so. Parents are resolved inside the root, as everywhere.
    pub fn unmake(&self, made: &Made) -> Result<Unmade, FsError> {
        const OP: &str = "remove";
        let path = made.path();
        let (dir, name) = match self.existing_parent(OP, path) {
            Ok(found) => found,
            Err(FsError::NotFound { .. }) => return Ok(Unmade::Gone),
            Err(e) => return Err(e),
        };
        let Some((kind, size)) = self.existing_entry(OP, path, &dir, &name)? else {
            return Ok(Unmade::Gone);
        };
        let flags = match (made, kind) {
            (Made::File { .. }, FileKind::RegularFile) => {
                if size != 0 {
                    return Ok(Unmade::Changed(kind));
                }
                AtFlags::empty()
            }
            (Made::Dir { .. }, FileKind::Directory) => AtFlags::REMOVEDIR,
            (Made::Link { target, .. }, FileKind::Symlink) => {
                // By name in the folder: a link is never a mount point, and what is
                // unlinked below is whatever the name holds then, as with an fd.
                let now = match rustix::fs::readlinkat(&dir, &name, Vec::new()) {
                    Ok(now) => now,
                    Err(Errno::NOENT) => return Ok(Unmade::Gone),
                    Err(Errno::INVAL) => return Ok(Unmade::Changed(kind)),
                    Err(e) => return Err(self.err(OP, path, e)),
                };
                if now.as_bytes() != target.as_bytes() {
                    return Ok(Unmade::Changed(kind));
                }
                AtFlags::empty()
            }
            _ => return Ok(Unmade::Changed(kind)),
        };
        match rustix::fs::unlinkat(&dir, &name, flags) {
            Ok(()) => {}
            // Something was put in the folder, or it is still a mount point.
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::BUSY) => {
                return Ok(Unmade::Changed(kind));
            }
            Err(Errno::NOENT) => return Ok(Unmade::Gone),
            Err(e) => return Err(self.err(OP, path, e)),
        }
        if let Made::Link {
            previous: Some(previous),
            ..
        } = made
        {
            rustix::fs::symlinkat(previous.as_str(), &dir, &name)
                .map_err(|e| self.err("restore symbolic link", path, e))?;
        }
        Ok(Unmade::Removed)
    }

    /// The kind and size of what `name` in `dir` (the parent of `path`) is, without
    /// following a link, or `None` when nothing is there: one `statx` by name, where
    /// [`ContainerRoot::existing`] opens the entry first (which it falls back to on a
    /// kernel whose `statx` has no mount id). A mount point is another mount's: an error.
    fn existing_entry(
        &self,
        op: &'static str,
        path: &Path,
        dir: &OwnedFd,
        name: &OsStr,
    ) -> Result<Option<(FileKind, u64)>, FsError> {
        let mask = StatxFlags::TYPE | StatxFlags::MNT_ID | StatxFlags::SIZE;
        let stx = match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask) {
            Ok(stx) => stx,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.err(op, path, e)),
        };
        let reported = stx.stx_mask;
        if reported & mask.bits() != mask.bits() {
            let Some((fd, kind)) = self.existing(op, path, dir, name)? else {
                return Ok(None);
            };
            let st = rustix::fs::fstat(&fd).map_err(|e| self.err(op, path, e))?;
            return Ok(Some((kind, st.st_size as u64)));
        }
        if stx.stx_mnt_id != self.mount {
            return Err(self.other_mount(op, path));
        }
        let kind = FileKind::of_mode(
            u32::from(stx.stx_mode),
            (stx.stx_rdev_major, stx.stx_rdev_minor),
        );
        Ok(Some((kind, stx.stx_size)))
    }

    /// Removes the regular file `path` (a file nvc wrote, checked by its caller), not
    /// following a link at it; what is there otherwise is left.
    pub fn remove_regular_file(&self, path: &Path) -> Result<Unmade, FsError> {
        const OP: &str = "remove";
        let (dir, name) = match self.existing_parent(OP, path) {
            Ok(found) => found,
            Err(FsError::NotFound { .. }) => return Ok(Unmade::Gone),
            Err(e) => return Err(e),
        };
        match self.existing(OP, path, &dir, &name)? {
            None => Ok(Unmade::Gone),
            Some((_, FileKind::RegularFile)) => {
                match rustix::fs::unlinkat(&dir, &name, AtFlags::empty()) {
                    Ok(()) => Ok(Unmade::Removed),
                    Err(Errno::NOENT) => Ok(Unmade::Gone),
                    Err(e) => Err(self.err(OP, path, e)),
                }
            }
            Some((_, kind)) => Ok(Unmade::Changed(kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use super::*;

    fn root() -> (tempfile::TempDir, ContainerRoot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("rootfs")).unwrap();
        let root = ContainerRoot::open(&dir.path().join("rootfs")).unwrap();
        (dir, root)
    }

    #[test]
    fn what_is_made_is_noted_in_order_and_only_when_made() {
        let (dir, root) = root();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
        std::fs::write(rootfs.join("usr/lib/there.so"), b"x").unwrap();
        root.file_mount_point(Path::new("/usr/lib/there.so"), 0o644)
            .unwrap();
        root.file_mount_point(Path::new("/usr/lib/x86_64/libcuda.so.1.2"), 0o644)
            .unwrap();
        root.symlink(Path::new("/usr/lib/x86_64/libcuda.so.1"), "libcuda.so.1.2")
            .unwrap();
        root.symlink(Path::new("/usr/lib/x86_64/libcuda.so.1"), "libcuda.so.1.2")
            .unwrap();
        assert_eq!(
            root.made(),
            vec![
                Made::Dir {
                    path: "/usr/lib/x86_64".into()
                },
                Made::File {
                    path: "/usr/lib/x86_64/libcuda.so.1.2".into()
                },
                Made::Link {
                    path: "/usr/lib/x86_64/libcuda.so.1".into(),
                    target: "libcuda.so.1.2".into(),
                    previous: None
                },
            ]
        );
    }

    #[test]
    fn only_what_is_still_as_made_is_taken_away() {
        let (dir, root) = root();
        let rootfs = dir.path().join("rootfs");
        let outside = dir.path().join("host-file");
        std::fs::write(&outside, b"host").unwrap();
        for p in ["/a/empty", "/a/written", "/a/swapped", "/a/gone"] {
            root.file_mount_point(Path::new(p), 0o644).unwrap();
        }
        root.dir_mount_point(Path::new("/a/dir"), 0o755).unwrap();
        root.dir_mount_point(Path::new("/a/filled"), 0o755).unwrap();
        std::fs::create_dir_all(rootfs.join("b")).unwrap();
        symlink("old-target", rootfs.join("b/link")).unwrap();
        root.symlink(Path::new("/b/link"), "new-target").unwrap();
        root.symlink(Path::new("/b/relinked"), "mine").unwrap();
        // The container changes some of it.
        std::fs::write(rootfs.join("a/written"), b"data").unwrap();
        std::fs::remove_file(rootfs.join("a/swapped")).unwrap();
        symlink(&outside, rootfs.join("a/swapped")).unwrap();
        std::fs::remove_file(rootfs.join("a/gone")).unwrap();
        std::fs::write(rootfs.join("a/filled/new"), b"").unwrap();
        std::fs::remove_file(rootfs.join("b/relinked")).unwrap();
        symlink("theirs", rootfs.join("b/relinked")).unwrap();

        let results: Vec<(PathBuf, Unmade)> = root
            .made()
            .iter()
            .rev()
            .map(|m| (m.path().to_path_buf(), root.unmake(m).unwrap()))
            .collect();
        let of = |p: &str| {
            results
                .iter()
                .find(|(path, _)| path == Path::new(p))
                .map(|(_, u)| u.clone())
                .unwrap()
        };
        assert_eq!(of("/a/empty"), Unmade::Removed);
        assert_eq!(of("/a/dir"), Unmade::Removed);
        assert_eq!(of("/a/gone"), Unmade::Gone);
        assert_eq!(of("/a/written"), Unmade::Changed(FileKind::RegularFile));
        assert_eq!(of("/a/swapped"), Unmade::Changed(FileKind::Symlink));
        assert_eq!(of("/a/filled"), Unmade::Changed(FileKind::Directory));
        assert_eq!(of("/b/relinked"), Unmade::Changed(FileKind::Symlink));
        assert_eq!(of("/b/link"), Unmade::Removed);
        // The image's link is back; what the container put there stays; the host's file
        // a swapped-in link points to is untouched.
        assert_eq!(
            std::fs::read_link(rootfs.join("b/link")).unwrap(),
            Path::new("old-target")
        );
        assert_eq!(std::fs::read(rootfs.join("a/written")).unwrap(), b"data");
        assert_eq!(std::fs::read(&outside).unwrap(), b"host");
        assert!(rootfs.join("a/filled/new").exists());
        // The folder `a` itself was made too: it is not empty, so it stays.
        assert!(rootfs.join("a").is_dir());
    }
}
