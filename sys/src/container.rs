//! Every system call that touches a path inside a container's root filesystem.
//!
//! The rootfs belongs to whoever built the image: any component of any path in it may be a
//! symbolic link (absolute, `../..`, `/proc/self/root`, a loop, a 41-link chain, dangling),
//! a fifo or a device where a file is expected, or be swapped while we work. So:
//!
//! - the rootfs is opened once as an `O_PATH` directory fd ([`ContainerRoot`]) and every
//!   path is resolved *inside* it, either by `openat2(RESOLVE_IN_ROOT |
//!   RESOLVE_NO_MAGICLINKS)` or, where the kernel lacks openat2, by an fd walk with the
//!   same semantics ([`Resolver`]);
//! - what is resolved is passed on as an fd, never as a path string: directories are made
//!   one component at a time with `mkdirat` on the parent's fd, files are created with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`, symlinks and files are replaced by a temp name and
//!   `renameat`, and mounts are attached onto the opened mount point with `move_mount`;
//! - a final component is never followed when we create or mount on it, and what was opened
//!   is checked with `fstat` (type, and `st_rdev` for devices).
//!
//! The mounts themselves are [`DetachedMount`]s: cloned (`open_tree`) or created
//! (`fsopen`/`fsmount`) in the host's mount namespace, made read-only, nosuid, nodev
//! (`mount_setattr`) while still detached, and attached only after
//! [`enter_mount_namespace`].
//!
//! Kernel: `open_tree`, `move_mount`, `fsopen`/`fsmount` (5.2), `pidfd_open` (5.3) and
//! `mount_setattr` (5.12, without which a detached mount cannot be made read-only before it
//! is visible: there is no fallback, it fails closed). `openat2` (5.6) is used where present,
//! else the fd walk. `setns` on a pidfd (5.8) is used where present, else
//! `/proc/<pid>/ns/mnt` checked against the pidfd. [`ContainerRoot::read_file`] reopens
//! what it resolved through the caller's `/proc/self/fd`.

mod mount;
mod walk;

#[cfg(test)]
mod tests;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

pub use mount::{
    check_char_device, enter_mount_namespace, mkdir_at, write_at, DetachedMount, MountAttrs,
};

/// The most symbolic links one resolution follows, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: u32 = 40;

/// How often an operation that lost a race with a concurrent change is retried before it
/// gives up with [`FsError::Raced`].
const ATTEMPTS: usize = 16;

/// Why an operation on a container path (or a mount, or a namespace) failed.
///
/// Every variant about a container path names the path as seen inside the container, the
/// root it was resolved in, and the operation.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A system call on a path inside the root failed.
    #[error("cannot {op} {path} in {root}")]
    Io {
        /// What was being done, e.g. "create mount point".
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// The path, or one of its directories, does not exist inside the root (a dangling
    /// symbolic link counts as missing).
    #[error("cannot {op} {path} in {root}: it does not exist")]
    NotFound {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
    },
    /// A symbolic link on the path (the path itself or one of its directories) leads to
    /// nothing inside the root: its target is missing there. It is never followed outside
    /// the root, and nothing is created along it.
    #[error("cannot {op} {path} in {root}: {link} is a dangling symbolic link to {target}, which does not exist inside the container; fix or remove the link in the image")]
    DanglingLink {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The link, as seen inside the container.
        link: PathBuf,
        /// What the link says.
        target: PathBuf,
    },
    /// A symbolic link on the path cannot be followed inside the root: it loops, starts a
    /// chain of more than 40 links, or goes through a procfs magic link (`/proc/N/root`,
    /// `/proc/self/cwd`, `/proc/self/fd/N`), which could lead out of the container.
    #[error("cannot {op} {path} in {root}: {link} is a symbolic link to {target}, which cannot be followed inside the container (a loop, more than 40 links, or a /proc magic link); fix or remove the link in the image")]
    UnfollowableLink {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The link, as seen inside the container.
        link: PathBuf,
        /// What the link says.
        target: PathBuf,
    },
    /// Something of the wrong type is at the path: it is never followed nor replaced.
    #[error("cannot {op} {path} in {root}: it is {found}")]
    WrongType {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// What is there.
        found: FileKind,
    },
    /// A character device is at a device mount point, but not the expected one.
    #[error(
        "cannot {op} {path} in {root}: it is {found}, not the character device {major}:{minor}"
    )]
    WrongDevice {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// What is there.
        found: FileKind,
        /// The expected major number.
        major: u32,
        /// The expected minor number.
        minor: u32,
    },
    /// A file to read is larger than the caller allows.
    #[error("cannot read {path} in {root}: it is larger than {max} bytes")]
    TooLarge {
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The limit.
        max: usize,
    },
    /// A directory to list has more entries than the caller allows.
    #[error("cannot list {path} in {root}: it has more than {max} entries")]
    TooManyEntries {
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The limit.
        max: usize,
    },
    /// The path itself is unusable for the operation (not absolute, no final name).
    #[error("cannot {op} {path} in {root}: {reason}")]
    InvalidPath {
        /// What was being done.
        op: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// Why it is unusable.
        reason: &'static str,
    },
    /// The path kept changing under us (a concurrent rename or unlink) and we gave up.
    #[error("cannot {op} {path} in {root}: it kept changing while being opened")]
    Raced {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
    },
    /// A system call on a (trusted) host path failed.
    #[error("cannot {op} host path {path}")]
    Host {
        /// What was being done, e.g. "clone as a bind mount".
        op: &'static str,
        /// The host path.
        path: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A detached mount could not be created or changed.
    #[error("cannot {op} {mount}")]
    Mount {
        /// What was being done, e.g. "set mount attributes of".
        op: &'static str,
        /// The mount, e.g. "the bind mount of /usr/lib/libcuda.so.1" or "a tmpfs".
        mount: String,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A detached mount could not be attached onto its mount point.
    #[error("cannot attach {mount} onto {target}")]
    Attach {
        /// The mount.
        mount: String,
        /// The mount point, as the kernel names it (`/proc/self/fd`), for messages only.
        target: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A file or directory could not be made in a detached mount being populated.
    #[error("cannot {op} {name} in a detached mount")]
    Populate {
        /// What was being done.
        op: &'static str,
        /// The name inside the mount.
        name: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// An opened file could not be examined.
    #[error("cannot stat {path}")]
    Stat {
        /// The file, as the kernel names it (`/proc/self/fd`).
        path: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// An opened file is not the character device it should be.
    #[error("{path} is {found}, not the character device {major}:{minor}")]
    NotDevice {
        /// The file, as the kernel names it (`/proc/self/fd`).
        path: PathBuf,
        /// What it is.
        found: FileKind,
        /// The expected major number.
        major: u32,
        /// The expected minor number.
        minor: u32,
    },
    /// The mount namespace of a process could not be entered.
    #[error("cannot {op} process {pid}")]
    Namespace {
        /// What was being done, e.g. "enter the mount namespace of".
        op: &'static str,
        /// The process.
        pid: i32,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// The process whose mount namespace was to be entered is gone.
    #[error(
        "the container's process {pid} exited before its mount namespace could be entered \
         (the container was killed or failed while starting)"
    )]
    ProcessGone {
        /// The process.
        pid: i32,
    },
}

impl FsError {
    /// Whether the path does not exist inside the root: [`FsError::NotFound`], or
    /// [`FsError::DanglingLink`] (a link to nothing is a missing file).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            FsError::NotFound { .. } | FsError::DanglingLink { .. }
        )
    }
}

/// What kind of file was found where something else was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    RegularFile,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A unix socket.
    Socket,
    /// A block device.
    BlockDevice,
    /// A character device, with its major and minor numbers.
    CharDevice(u32, u32),
    /// Anything else.
    Unknown,
}

impl FileKind {
    fn of(st: &Stat) -> FileKind {
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => FileKind::RegularFile,
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::Fifo => FileKind::Fifo,
            FileType::Socket => FileKind::Socket,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::CharacterDevice => {
                FileKind::CharDevice(rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev))
            }
            _ => FileKind::Unknown,
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileKind::RegularFile => f.write_str("a regular file"),
            FileKind::Directory => f.write_str("a directory"),
            FileKind::Symlink => f.write_str("a symbolic link"),
            FileKind::Fifo => f.write_str("a fifo"),
            FileKind::Socket => f.write_str("a socket"),
            FileKind::BlockDevice => f.write_str("a block device"),
            FileKind::CharDevice(major, minor) => write!(f, "the character device {major}:{minor}"),
            FileKind::Unknown => f.write_str("a file of unknown type"),
        }
    }
}

/// How paths are resolved inside the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` (Linux 5.6): the kernel keeps the
    /// walk inside the root, `..` stops at it, absolute symlinks restart at it, and
    /// procfs magic links are refused.
    Openat2,
    /// For kernels without openat2: a component-by-component walk with
    /// `openat(O_PATH|O_NOFOLLOW)`, following symbolic links by reading them and resolving
    /// their targets with the same root-relative semantics (absolute targets restart at the
    /// root fd, `..` is lexical and never goes above the root, at most 40 links). A link
    /// on procfs whose target is absolute or not a path (`/proc/N/cwd`, `fd/N`, `ns/mnt`)
    /// is a magic link and is refused, as openat2 refuses it.
    FdWalk,
}

impl Resolver {
    /// [`Resolver::Openat2`] when the kernel has a working openat2, else
    /// [`Resolver::FdWalk`]. Any failure of the probe (ENOSYS on old kernels, EPERM from a
    /// seccomp filter) picks the walk, which is as safe, only slower.
    pub fn detect() -> Resolver {
        let how = rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(
            CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        ) {
            Ok(_) => Resolver::Openat2,
            Err(_) => Resolver::FdWalk,
        }
    }
}

/// A container's root filesystem, opened once, in which every path is resolved.
///
/// Open it *after* [`enter_mount_namespace`]: a mount point resolved in one mount namespace
/// cannot take a mount in another.
#[derive(Debug)]
pub struct ContainerRoot {
    fd: OwnedFd,
    resolver: Resolver,
    path: PathBuf,
}

impl ContainerRoot {
    /// Opens the rootfs at `rootfs` (a trusted host path, from the bundle's config.json)
    /// with [`Resolver::detect`].
    pub fn open(rootfs: &Path) -> Result<Self, FsError> {
        Self::open_with(rootfs, Resolver::detect())
    }

    /// Opens the rootfs at `rootfs` with the given resolver.
    pub fn open_with(rootfs: &Path, resolver: Resolver) -> Result<Self, FsError> {
        let fd = rustix::fs::open(
            rootfs,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::Host {
            op: "open container root",
            path: rootfs.to_path_buf(),
            source: e.into(),
        })?;
        Ok(ContainerRoot {
            fd,
            resolver,
            path: rootfs.to_path_buf(),
        })
    }

    /// The rootfs on the host, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The resolver in use.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// An `O_PATH` fd of `path` (absolute, as seen from inside the container), following
    /// symbolic links inside the root, or [`FsError::NotFound`].
    pub fn resolve(&self, path: &Path) -> Result<OwnedFd, FsError> {
        const OP: &str = "resolve";
        self.check_absolute(OP, path)?;
        self.lookup(path, true).map_err(|e| self.err(OP, path, e))
    }

    /// Whether `path` resolves to a directory inside the root.
    pub fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(FileKind::Directory)
    }

    /// Whether `path` resolves to a regular file inside the root.
    pub fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(FileKind::RegularFile)
    }

    fn kind(&self, path: &Path) -> Option<FileKind> {
        let fd = self.resolve(path).ok()?;
        rustix::fs::fstat(&fd).ok().map(|st| FileKind::of(&st))
    }

    /// Creates every missing directory of `dir` (absolute, inside the container), one
    /// component at a time: each is made with `mkdirat` on its parent's fd and then
    /// re-resolved. Existing components that are symbolic links are followed inside the
    /// root; a dangling one is an error. Returns an `O_PATH` fd of the directory.
    pub fn mkdir_all(&self, dir: &Path, mode: u32) -> Result<OwnedFd, FsError> {
        const OP: &str = "create directory";
        self.check_absolute(OP, dir)?;
        let mut current = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0)
            .map_err(|e| self.err(OP, Path::new("/"), e))?;
        let mut prefix = PathBuf::from("/");
        for component in dir.components() {
            let name = match component {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
                Component::ParentDir => None,
                Component::Normal(name) => Some(name),
            };
            prefix.push(component);
            current = self.dir_component(OP, &current, &prefix, name, mode)?;
        }
        Ok(current)
    }

    /// The directory `prefix` resolves to, made first with `mkdirat(parent, name)` when
    /// it is missing. A failure that a link on the way explains (dangling, a loop, a magic
    /// link) is returned; one that nothing explains any more (`ENOENT` for what `mkdirat`
    /// found, `ELOOP` from a link since gone) means the tree changed in between, and the
    /// component is resolved again, at most [`ATTEMPTS`] times.
    fn dir_component(
        &self,
        op: &'static str,
        parent: &OwnedFd,
        prefix: &Path,
        name: Option<&OsStr>,
        mode: u32,
    ) -> Result<OwnedFd, FsError> {
        for _ in 0..ATTEMPTS {
            let found = match (self.lookup(prefix, true), name) {
                (Ok(fd), _) => Ok(fd),
                (Err(Errno::NOENT), Some(name)) => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.err(op, prefix, e)),
                    }
                    self.lookup(prefix, true)
                }
                (Err(e), _) => Err(e),
            };
            match found {
                Ok(fd) => {
                    self.expect_kind(op, prefix, &fd, FileKind::Directory)?;
                    return Ok(fd);
                }
                Err(e @ (Errno::NOENT | Errno::LOOP)) => match self.err(op, prefix, e) {
                    FsError::NotFound { .. } | FsError::Io { .. } => continue,
                    explained => return Err(explained),
                },
                Err(e) => return Err(self.err(op, prefix, e)),
            }
        }
        Err(self.raced(op, prefix))
    }

    /// A regular-file mount point at `path`: created empty with `O_CREAT|O_EXCL|O_NOFOLLOW`
    /// (and `mode`) in its parent (made by [`ContainerRoot::mkdir_all`]), or an existing
    /// regular file reused. Anything else at the final component (a symbolic link, a
    /// directory, a fifo, a socket, a device) is an error naming it: it is never followed
    /// nor replaced. Returns an `O_PATH` fd of the file, to attach a mount onto.
    pub fn file_mount_point(&self, path: &Path, mode: u32) -> Result<OwnedFd, FsError> {
        self.new_file_or_existing("create mount point", path, mode, |_| false)
    }

    /// A directory mount point at `path`: made with `mkdirat` in its parent, or an existing
    /// directory reused. A symbolic link (or anything else) at the final component is an
    /// error. Returns an `O_PATH` fd of the directory.
    pub fn dir_mount_point(&self, path: &Path, mode: u32) -> Result<OwnedFd, FsError> {
        const OP: &str = "create mount point";
        let (dir, name) = self.parent_of(OP, path)?;
        for _ in 0..ATTEMPTS {
            match rustix::fs::mkdirat(&dir, &name, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(self.err(OP, path, e)),
            }
            match self.existing(OP, path, &dir, &name)? {
                Some((fd, FileKind::Directory)) => return Ok(fd),
                Some((_, found)) => return Err(self.wrong_type(OP, path, found)),
                None => continue,
            }
        }
        Err(self.raced(OP, path))
    }

    /// A device-node mount point at `path`: an empty regular file made as by
    /// [`ContainerRoot::file_mount_point`] (a regular file already there is reused too),
    /// onto which the host's device node is bind-mounted. An existing character device is
    /// reused only if its `st_rdev` is `major:minor`; anything else is an error.
    pub fn device_mount_point(
        &self,
        path: &Path,
        major: u32,
        minor: u32,
    ) -> Result<OwnedFd, FsError> {
        const OP: &str = "create device mount point";
        self.new_file_or_existing(OP, path, 0o644, |found| match found {
            FileKind::CharDevice(ma, mi) => ma == major && mi == minor,
            _ => false,
        })
        .map_err(|e| match e {
            FsError::WrongType {
                op,
                path,
                root,
                found: found @ FileKind::CharDevice(..),
            } => FsError::WrongDevice {
                op,
                path,
                root,
                found,
                major,
                minor,
            },
            e => e,
        })
    }

    /// Creates the regular file `path` with `O_CREAT|O_EXCL|O_NOFOLLOW` or reuses what is
    /// there if it is a regular file or `also_reuse` accepts it.
    fn new_file_or_existing(
        &self,
        op: &'static str,
        path: &Path,
        mode: u32,
        also_reuse: impl Fn(FileKind) -> bool,
    ) -> Result<OwnedFd, FsError> {
        let (dir, name) = self.parent_of(op, path)?;
        for _ in 0..ATTEMPTS {
            let flags = OFlags::RDONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::NOCTTY
                | OFlags::CLOEXEC;
            match rustix::fs::openat(&dir, &name, flags, Mode::from_raw_mode(mode)) {
                Ok(created) => {
                    let made = rustix::fs::fstat(&created).map_err(|e| self.err(op, path, e))?;
                    // Reopen as O_PATH by name and check it is still the file we made: a
                    // racing rename may have put something else there.
                    match self.existing(op, path, &dir, &name)? {
                        Some((fd, FileKind::RegularFile)) => {
                            let st = rustix::fs::fstat(&fd).map_err(|e| self.err(op, path, e))?;
                            if (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino) {
                                return Ok(fd);
                            }
                        }
                        Some((_, found)) => return Err(self.wrong_type(op, path, found)),
                        None => {}
                    }
                }
                Err(Errno::EXIST) => match self.existing(op, path, &dir, &name)? {
                    Some((fd, FileKind::RegularFile)) => return Ok(fd),
                    Some((fd, found)) if also_reuse(found) => return Ok(fd),
                    Some((_, found)) => return Err(self.wrong_type(op, path, found)),
                    None => {}
                },
                Err(e) => return Err(self.err(op, path, e)),
            }
        }
        Err(self.raced(op, path))
    }

    /// Creates or replaces the symbolic link `link` -> `target`: `symlinkat` to a random
    /// temporary name in the resolved parent directory, then `renameat` over `link`. An
    /// existing symbolic link or regular file is replaced, anything else (a directory, a
    /// fifo, a device) is an error; an existing link with the same target is left alone.
    pub fn symlink(&self, link: &Path, target: &str) -> Result<(), FsError> {
        const OP: &str = "create symbolic link";
        let (dir, name) = self.parent_of(OP, link)?;
        match self.existing(OP, link, &dir, &name)? {
            Some((fd, FileKind::Symlink)) => {
                let current = rustix::fs::readlinkat(&fd, "", Vec::new())
                    .map_err(|e| self.err(OP, link, e))?;
                if current.as_bytes() == target.as_bytes() {
                    return Ok(());
                }
            }
            Some((_, FileKind::RegularFile)) | None => {}
            Some((_, found)) => return Err(self.wrong_type(OP, link, found)),
        }
        let (tmp, ()) =
            self.with_temp_name(OP, link, |tmp| rustix::fs::symlinkat(target, &dir, tmp))?;
        self.rename_into_place(OP, link, &dir, &tmp, &name)
    }

    /// Writes `data` to `path` atomically: a temporary file made with
    /// `O_CREAT|O_EXCL|O_NOFOLLOW` in the resolved parent directory, written, fsynced,
    /// `fchmod`ed to `mode`, then renamed over `path`. A symbolic link at `path` is
    /// replaced, never followed; an existing regular file is replaced, never written into
    /// (it may be a hard link to a file elsewhere); anything else is an error.
    pub fn write_file(&self, path: &Path, data: &[u8], mode: u32) -> Result<(), FsError> {
        const OP: &str = "write";
        let (dir, name) = self.parent_of(OP, path)?;
        match self.existing(OP, path, &dir, &name)? {
            Some((_, FileKind::RegularFile | FileKind::Symlink)) | None => {}
            Some((_, found)) => return Err(self.wrong_type(OP, path, found)),
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (tmp, fd) = self.with_temp_name(OP, path, |tmp| {
            rustix::fs::openat(&dir, tmp, flags, Mode::from_raw_mode(0o600))
        })?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(data)
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(io::Error::from)
            });
        drop(file);
        if let Err(source) = written {
            let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
            return Err(FsError::Io {
                op: OP,
                path: path.to_path_buf(),
                root: self.path.clone(),
                source,
            });
        }
        self.rename_into_place(OP, path, &dir, &tmp, &name)
    }

    /// Reads the regular file at `path` (symbolic links followed inside the root), at most
    /// `max` bytes: a larger file is an error, and so is anything but a regular file (a
    /// fifo or a device is never opened for reading).
    pub fn read_file(&self, path: &Path, max: usize) -> Result<Vec<u8>, FsError> {
        const OP: &str = "read";
        let fd = self.resolve(path)?;
        let st = self.expect_kind(OP, path, &fd, FileKind::RegularFile)?;
        // An O_PATH fd cannot be read; reopen the very inode it holds through procfs (the
        // host's /proc: never a path inside the root), so a file swapped in after the
        // check above is never opened.
        let file = reopen(&fd, OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC).map_err(|e| {
            // Not NotFound even for ENOENT: the file exists, /proc/self/fd may not.
            FsError::Io {
                op: OP,
                path: path.to_path_buf(),
                root: self.path.clone(),
                source: e.into(),
            }
        })?;
        let again = rustix::fs::fstat(&file).map_err(|e| self.err(OP, path, e))?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(self.raced(OP, path));
        }
        let mut data = Vec::new();
        std::fs::File::from(file)
            .take(max as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|source| FsError::Io {
                op: OP,
                path: path.to_path_buf(),
                root: self.path.clone(),
                source,
            })?;
        if data.len() > max {
            return Err(FsError::TooLarge {
                path: path.to_path_buf(),
                root: self.path.clone(),
                max,
            });
        }
        Ok(data)
    }

    /// The names in the directory `dir` (symbolic links followed inside the root), sorted,
    /// without `.` and `..`, at most `max` of them (more is an error). Names that are not
    /// UTF-8 are left out: nothing nvc looks for has one.
    pub fn read_dir(&self, dir: &Path, max: usize) -> Result<Vec<String>, FsError> {
        const OP: &str = "list";
        let fd = self.resolve(dir)?;
        self.expect_kind(OP, dir, &fd, FileKind::Directory)?;
        // "." of an O_PATH directory fd is that directory: no lookup in the root happens.
        let readable = rustix::fs::openat(
            &fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.err(OP, dir, e))?;
        let mut entries = rustix::fs::Dir::new(readable).map_err(|e| self.err(OP, dir, e))?;
        let mut names = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| self.err(OP, dir, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == max {
                return Err(FsError::TooManyEntries {
                    path: dir.to_path_buf(),
                    root: self.path.clone(),
                    max,
                });
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    // ---- helpers -------------------------------------------------------------------

    /// Resolves `path` with this root's resolver; `follow_final` says whether a symbolic
    /// link at the last component is followed or returned itself.
    fn lookup(&self, path: &Path, follow_final: bool) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_in_root(self.fd.as_fd(), path, follow_final),
            Resolver::FdWalk => walk::fd_walk_in_root(self.fd.as_fd(), path, follow_final),
        }
    }

    fn check_absolute(&self, op: &'static str, path: &Path) -> Result<(), FsError> {
        if path.is_absolute() {
            Ok(())
        } else {
            Err(FsError::InvalidPath {
                op,
                path: path.to_path_buf(),
                root: self.path.clone(),
                reason: "it is not an absolute path",
            })
        }
    }

    /// Makes (or finds) the parent directory of `path` and returns its fd and the final
    /// name, which must be a plain name (not `.` or `..`).
    fn parent_of(&self, op: &'static str, path: &Path) -> Result<(OwnedFd, OsString), FsError> {
        self.check_absolute(op, path)?;
        let invalid = |reason| FsError::InvalidPath {
            op,
            path: path.to_path_buf(),
            root: self.path.clone(),
            reason,
        };
        let mut components: Vec<Component<'_>> = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        let name = match components.pop() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => return Err(invalid("it does not end in a file name")),
        };
        if path.as_os_str().as_bytes().ends_with(b"/") {
            return Err(invalid("it ends in a slash"));
        }
        let parent: PathBuf = components.iter().collect();
        let dir = self.mkdir_all(&parent, 0o755)?;
        Ok((dir, name))
    }

    /// What is at `name` in `dir`, not following a symbolic link, or None.
    fn existing(
        &self,
        op: &'static str,
        path: &Path,
        dir: &OwnedFd,
        name: &OsStr,
    ) -> Result<Option<(OwnedFd, FileKind)>, FsError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).map_err(|e| self.err(op, path, e))?;
                Ok(Some((fd, FileKind::of(&st))))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.err(op, path, e)),
        }
    }

    fn expect_kind(
        &self,
        op: &'static str,
        path: &Path,
        fd: &OwnedFd,
        want: FileKind,
    ) -> Result<Stat, FsError> {
        let st = rustix::fs::fstat(fd).map_err(|e| self.err(op, path, e))?;
        let found = FileKind::of(&st);
        if found == want {
            Ok(st)
        } else {
            Err(self.wrong_type(op, path, found))
        }
    }

    /// Calls `make` with fresh random names `.nvc-<hex>` until one does not exist yet.
    fn with_temp_name<T>(
        &self,
        op: &'static str,
        path: &Path,
        mut make: impl FnMut(&OsStr) -> Result<T, Errno>,
    ) -> Result<(OsString, T), FsError> {
        for _ in 0..ATTEMPTS {
            let mut bytes = [0u8; 8];
            rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
                .map_err(|e| self.err(op, path, e))?;
            let name = OsString::from(format!(".nvc-{:016x}", u64::from_ne_bytes(bytes)));
            match make(&name) {
                Ok(made) => return Ok((name, made)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(self.err(op, path, e)),
            }
        }
        Err(self.raced(op, path))
    }

    fn rename_into_place(
        &self,
        op: &'static str,
        path: &Path,
        dir: &OwnedFd,
        tmp: &OsStr,
        name: &OsStr,
    ) -> Result<(), FsError> {
        rustix::fs::renameat(dir, tmp, dir, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(dir, tmp, rustix::fs::AtFlags::empty());
            match e {
                Errno::ISDIR | Errno::NOTEMPTY => self.wrong_type(op, path, FileKind::Directory),
                e => self.err(op, path, e),
            }
        })
    }

    fn err(&self, op: &'static str, path: &Path, e: Errno) -> FsError {
        if e == Errno::NOENT || e == Errno::LOOP {
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
        if e == Errno::NOENT {
            FsError::NotFound {
                op,
                path: path.to_path_buf(),
                root: self.path.clone(),
            }
        } else {
            FsError::Io {
                op,
                path: path.to_path_buf(),
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
    fn broken_link(&self, path: &Path) -> Option<(PathBuf, PathBuf, Errno)> {
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
            let why = match self.lookup(&prefix, true) {
                Ok(_) => continue,
                Err(why @ (Errno::NOENT | Errno::LOOP)) => why,
                Err(_) => return None,
            };
            let target = rustix::fs::readlinkat(&fd, "", Vec::new()).ok()?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            return Some((prefix, target, why));
        }
        None
    }

    fn wrong_type(&self, op: &'static str, path: &Path, found: FileKind) -> FsError {
        FsError::WrongType {
            op,
            path: path.to_path_buf(),
            root: self.path.clone(),
            found,
        }
    }

    fn raced(&self, op: &'static str, path: &Path) -> FsError {
        FsError::Raced {
            op,
            path: path.to_path_buf(),
            root: self.path.clone(),
        }
    }
}

/// Opens the inode an `O_PATH` fd holds, with `flags`, through the host's procfs.
fn reopen(fd: &OwnedFd, flags: OFlags) -> Result<OwnedFd, Errno> {
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(magic, flags, Mode::empty())
}

/// The path the kernel gives an fd, for messages only.
fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::read_link(&magic).unwrap_or_else(|_| PathBuf::from(magic))
}
