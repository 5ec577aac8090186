//! Turning a failed system call on a container path into the [`FsError`] that says why:
//! the dangling or unfollowable link on the way, the other mount the path crosses onto,
//! the path as seen inside the container.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::io::Errno;

use super::{walk, ContainerRoot, FileKind, FsError};

impl ContainerRoot {
    /// `path` as seen inside the container: this root's prefix joined with it.
    pub(super) fn shown(&self, path: &Path) -> PathBuf {
        if self.prefix == Path::new("/") {
            return path.to_path_buf();
        }
        let rest = path.strip_prefix("/").unwrap_or(path);
        if rest.as_os_str().is_empty() {
            self.prefix.clone()
        } else {
            self.prefix.join(rest)
        }
    }
    pub(super) fn read_only_err(&self, op: &'static str, path: &Path) -> FsError {
        FsError::ReadOnly {
            op,
            path: self.shown(path),
            root: self.path.clone(),
        }
    }
    /// Says where `path` leaves the root's mount: the first of its prefixes (links
    /// followed inside the root) that is on another mount, and the link that leads there.
    pub(super) fn other_mount(&self, op: &'static str, path: &Path) -> FsError {
        let mut prefix = PathBuf::from("/");
        let mut at = self.shown(path).display().to_string();
        let mut fs = "another file system";
        for component in path.components() {
            match component {
                Component::Normal(_) | Component::ParentDir => prefix.push(component),
                _ => continue,
            }
            let Ok(fd) = self.lookup_across(&prefix, true) else {
                break;
            };
            if walk::mount_id(fd.as_fd()).is_ok_and(|id| id == self.mount) {
                continue;
            }
            at = self.shown(&prefix).display().to_string();
            if let Ok(link) = self.lookup_across(&prefix, false) {
                if let Ok(target) = rustix::fs::readlinkat(&link, "", Vec::new()) {
                    let target = OsStr::from_bytes(target.as_bytes());
                    at = format!(
                        "{at} (a symbolic link to {})",
                        bounded(&Path::new(target).display().to_string())
                    );
                }
            }
            if let Ok(st) = rustix::fs::fstatfs(&fd) {
                fs = fs_name(fs_magic(&st));
            }
            break;
        }
        FsError::OtherMount {
            op,
            path: self.shown(path),
            root: self.path.clone(),
            at,
            fs,
        }
    }
    pub(super) fn err(&self, op: &'static str, path: &Path, e: Errno) -> FsError {
        if e == Errno::NOENT || e == Errno::LOOP || e == Errno::XDEV {
            if let Some((link, target, why)) = self.broken_link(path) {
                let (root, path) = (self.path.clone(), path.to_path_buf());
                return if why == Errno::NOENT {
                    FsError::DanglingLink {
                        op,
                        path,
                        root,
                        link,
                        target,
                    }
                } else {
                    FsError::UnfollowableLink {
                        op,
                        path,
                        root,
                        link,
                        target,
                    }
                };
            }
        }
        if e == Errno::XDEV {
            self.other_mount(op, path)
        } else if e == Errno::NOENT {
            FsError::NotFound {
                op,
                path: self.shown(path),
                root: self.path.clone(),
            }
        } else {
            FsError::Io {
                op,
                path: self.shown(path),
                root: self.path.clone(),
                source: e.into(),
            }
        }
    }

    /// The first symbolic link along `path` (its directories, then the path itself)
    /// that cannot be followed inside the root, what it says, and why it cannot be
    /// followed (`ENOENT`: dangling, `ELOOP`: a loop, too long a chain or a magic link);
    /// `None` when the path fails for another reason (a plain missing file). Only asked
    /// once an operation has failed, to say why.
    pub(super) fn broken_link(&self, path: &Path) -> Option<(PathBuf, PathBuf, Errno)> {
        let mut prefix = PathBuf::from("/");
        for component in path.components() {
            match component {
                Component::Normal(_) | Component::ParentDir => prefix.push(component),
                _ => continue,
            }
            let Ok(fd) = self.lookup(&prefix, false) else {
                return None;
            };
            let st = rustix::fs::fstat(&fd).ok()?;
            if FileKind::of(&st) != FileKind::Symlink {
                continue;
            }
            // Across mounts: a link to another mount is followable, only not here, which
            // `other_mount` says; a magic link (which crosses one too) is not. One to a
            // process this one may not trace (`/proc/1/root` without cap_sys_ptrace, as
            // `privileges::Phase::Rootfs` has it) fails the kernel's ptrace check with
            // EACCES before it is refused as magic.
            let why = match self.lookup_across(&prefix, true) {
                Ok(_) => continue,
                Err(why @ (Errno::NOENT | Errno::LOOP)) => why,
                Err(Errno::ACCESS) => Errno::LOOP,
                Err(_) => return None,
            };
            let target = rustix::fs::readlinkat(&fd, "", Vec::new()).ok()?;
            let target = bounded(&OsStr::from_bytes(target.as_bytes()).to_string_lossy());
            return Some((self.shown(&prefix), PathBuf::from(target), why));
        }
        None
    }

    pub(super) fn wrong_type(&self, op: &'static str, path: &Path, found: FileKind) -> FsError {
        FsError::WrongType {
            op,
            path: self.shown(path),
            root: self.path.clone(),
            found,
        }
    }

    pub(super) fn raced(&self, op: &'static str, path: &Path) -> FsError {
        FsError::Raced {
            op,
            path: self.shown(path),
            root: self.path.clone(),
        }
    }
}

/// The longest link target quoted in a message, in bytes: a target is the image's text.
const MAX_QUOTED: usize = 256;

/// `text` cut to [`MAX_QUOTED`] bytes, saying how long it was.
pub(super) fn bounded(text: &str) -> String {
    if text.len() <= MAX_QUOTED {
        return text.to_string();
    }
    let mut end = MAX_QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// A `statfs` magic number, whose type differs between architectures, as an `i64`.
#[allow(clippy::unnecessary_cast)]
pub(super) fn fs_magic(st: &rustix::fs::StatFs) -> i64 {
    st.f_type as i64
}

/// A file system's name by its `statfs` magic, for messages.
pub(super) fn fs_name(magic: i64) -> &'static str {
    const NAMES: &[(i64, &str)] = &[
        (0x9fa0, "proc"),
        (0x6265_6572, "sysfs"),
        (0x0102_1994, "tmpfs"),
        (0x1cd1, "devpts"),
        (0x794c_7630, "overlay"),
        (0xef53, "ext4"),
        (0x5846_5342, "xfs"),
        (0x9123_683e, "btrfs"),
        (0x6367_7270, "cgroup2"),
        (0x0027_e0eb, "cgroup"),
        (0x6573_5546, "fuse"),
        (0x7363_6673, "securityfs"),
        (0x6462_6720, "debugfs"),
        (0x5346_544e, "ntfs"),
        (0x6969, "nfs"),
        (0x0102_1997, "9p"),
        (0x1957_4f4d, "mqueue"),
        (0xcafe_4a11, "bpf"),
    ];
    NAMES
        .iter()
        .find(|(m, _)| *m == magic)
        .map_or("another file system", |(_, name)| name)
}

/// The path the kernel gives an fd, for messages only.
pub(super) fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::read_link(&magic).unwrap_or_else(|_| PathBuf::from(magic))
}
