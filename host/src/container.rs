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
#[cfg(test)]
use walk::mount_id;

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
    /// The path leaves the container's root filesystem: a component of it, or a symbolic
    /// link on it, is on another mount (a volume, `/proc`, `/sys`, `/dev`, a tmpfs), where
    /// nvc never reads, writes nor mounts.
    #[error("cannot {op} {path} in {root}: {at} is on another mount ({fs}), not the container's root filesystem; nvc reads, writes and mounts only on the image's own filesystem, never in a volume, /proc, /sys, /dev or a tmpfs")]
    OtherMount {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// Where the path leaves the root's mount, with the link that leads there if any.
        at: String,
        /// The file system there.
        fs: &'static str,
    },
    /// A folder nvc mounts into on purpose (`/dev`, `/proc`) is not the mount the runtime
    /// makes there.
    #[error(
        "cannot use {path} in {root}: it is {found}, not {expected} as the runtime mounts it there"
    )]
    WrongMount {
        /// The folder, as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// What is mounted there.
        found: String,
        /// What should be.
        expected: &'static str,
    },
    /// The mount a mount would be attached under is shared: the mount would propagate to
    /// its peers, the host's mount table among them, and outlive the container.
    #[error("cannot mount onto {path} in {root}: it is on a shared mount (mount {mount}), so the mount would propagate out of the container; make the container's root filesystem (and /dev, /proc) private or slave mounts")]
    SharedMount {
        /// The mount point, as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
        /// The mount's id, as in `/proc/self/mountinfo`.
        mount: u64,
    },
    /// The root is read-only (`root.readonly` of the spec) and the operation would write
    /// content.
    #[error("cannot {op} {path} in {root}: the container's root filesystem is read-only (root.readonly): nvc adds only empty mount points to it, as the runtime does for the spec's own mounts, and writes no file or link")]
    ReadOnly {
        /// What was being done.
        op: &'static str,
        /// The path as seen inside the container.
        path: PathBuf,
        /// The container's root filesystem on the host.
        root: PathBuf,
    },
    /// The container's root filesystem is the host's (or the namespace's) root directory.
    #[error("the container's root filesystem {path} is the host's root directory: nvc will not set up a container there (check root.path in the bundle's config.json)")]
    HostRoot {
        /// The rootfs path.
        path: PathBuf,
    },
    /// The process named as the container's is in the caller's own mount namespace: it is
    /// no container's process.
    #[error("process {pid} of the container state is in the hook's own mount namespace, so it is not a container's process (a forged or stale state): nothing was done")]
    OwnNamespace {
        /// The process.
        pid: i32,
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
///
/// Everything it resolves, reads, creates or mounts onto stays on the mount the root is
/// on: a path that crosses onto another mount (a volume the spec mounts, `/proc`, `/sys`,
/// `/dev`, a tmpfs), by a mount point on the way or a symbolic link that leads there, is
/// refused with [`FsError::OtherMount`]. The mounts nvc does mean to work in (the
/// runtime's `/dev` and `/proc`) are reached through [`ContainerRoot::submount`], which
/// checks they are what the runtime mounts there.
#[derive(Debug)]
pub struct ContainerRoot {
    fd: OwnedFd,
    resolver: Resolver,
    path: PathBuf,
    /// The mount everything must be on: the root's.
    mount: u64,
    /// Where this root is as seen inside the container: `/`, or the folder of a
    /// [`ContainerRoot::submount`]. Paths given to a submount's methods are relative to
    /// it; messages name them as seen inside the container.
    prefix: PathBuf,
    /// Nothing may be created: `root.readonly`.
    read_only: bool,
    /// Which mounts of the namespace are shared: read once for a root and its submounts.
    propagation: std::sync::Arc<std::sync::Mutex<Propagation>>,
}

/// What `/proc/thread-self/mountinfo` says of the mounts' propagation, read at most once
/// more for a mount it did not list, and told of the mounts nvc attaches (private).
#[derive(Debug, Default)]
struct Propagation {
    /// Every mount listed or attached, with whether it is shared.
    shared: std::collections::HashMap<u64, bool>,
}

impl Propagation {
    /// Whether mount `id`, which `fd` is on, is shared: asked of the kernel for that mount
    /// alone with `statmount(2)` (Linux 6.8), else read from mountinfo, whose cost grows
    /// with every mount of the host; `ENOENT` when the namespace has no such mount.
    fn is_shared(&mut self, fd: BorrowedFd<'_>, id: u64) -> Result<bool, Errno> {
        if let Some(shared) = self.shared.get(&id) {
            return Ok(*shared);
        }
        if let Some(shared) = walk::statmount_shared(fd) {
            self.shared.insert(id, shared);
            return Ok(shared);
        }
        self.shared.extend(read_propagation()?);
        self.shared.get(&id).copied().ok_or(Errno::NOENT)
    }
}

/// The file systems the runtime mounts at the folders nvc mounts into on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filesystem {
    /// A tmpfs, as runc, crun and every engine mount at `/dev`; the root's own folder is
    /// accepted too (a spec without a `/dev` mount).
    Tmpfs,
    /// A procfs, as the runtime mounts at `/proc`.
    Procfs,
}

impl ContainerRoot {
    /// Opens the rootfs at `rootfs` (a trusted host path, from the bundle's config.json)
    /// with [`Resolver::detect`].
    pub fn open(rootfs: &Path) -> Result<Self, FsError> {
        Self::open_with(rootfs, Resolver::detect())
    }

    /// Opens the rootfs at `rootfs` with the given resolver. A rootfs that is the root
    /// directory of the caller (the host's, or the mount namespace's it entered) is
    /// refused: [`FsError::HostRoot`].
    pub fn open_with(rootfs: &Path, resolver: Resolver) -> Result<Self, FsError> {
        let host = |op: &'static str| {
            let path = rootfs.to_path_buf();
            move |e: Errno| FsError::Host {
                op,
                path,
                source: e.into(),
            }
        };
        let fd = rustix::fs::open(
            rootfs,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(host("open container root"))?;
        refuse_root_dir(&fd, rootfs)?;
        let mount = walk::mount_id(fd.as_fd()).map_err(host("find the mount of"))?;
        Ok(ContainerRoot {
            fd,
            resolver,
            path: rootfs.to_path_buf(),
            mount,
            prefix: PathBuf::from("/"),
            read_only: false,
            propagation: Default::default(),
        })
    }

    /// Makes this root read-only for nvc (`root.readonly`): every operation that writes
    /// content (a file's data, a symbolic link) fails with [`FsError::ReadOnly`]. Empty
    /// mount points, files and folders, are still made where missing, as the runtime
    /// makes them for the spec's own mounts in a read-only rootfs.
    pub fn set_read_only(&mut self) {
        self.read_only = true;
    }

    /// Whether nvc may create nothing here.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The folder `path` (a direct child of this root, e.g. `/dev` or `/proc`), where the
    /// runtime mounts `fs`, as a root of its own: paths given to the returned root's
    /// methods are relative to `path` (`/nvidia0` for `/dev/nvidia0`) and stay on the mount
    /// found there. `path` must resolve inside this root without crossing a mount but for
    /// its last component, which must be the root of a mount of `fs`, or, for
    /// [`Filesystem::Tmpfs`], this root's own folder (then read-only as this root is).
    /// `None` when nothing is mounted there for [`Filesystem::Procfs`]: the image's own
    /// folder is no runtime's procfs.
    pub fn submount(&self, path: &Path, fs: Filesystem) -> Result<Option<ContainerRoot>, FsError> {
        const OP: &str = "open";
        let (dir, name) = self.existing_parent(OP, path)?;
        let fd = rustix::fs::openat(
            &dir,
            &name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOTDIR | Errno::LOOP => self.wrong_type(OP, path, FileKind::Symlink),
            e => self.err(OP, path, e),
        })?;
        let mount = walk::mount_id(fd.as_fd()).map_err(|e| self.err(OP, path, e))?;
        let magic = fs_magic(&rustix::fs::fstatfs(&fd).map_err(|e| self.err(OP, path, e))?);
        let expected = match fs {
            Filesystem::Tmpfs => "a tmpfs",
            Filesystem::Procfs => "a procfs",
        };
        let on_root = mount == self.mount;
        let fits = match fs {
            Filesystem::Tmpfs => on_root || magic == i64::from(libc::TMPFS_MAGIC as u32),
            Filesystem::Procfs if on_root => return Ok(None),
            Filesystem::Procfs => magic == i64::from(rustix::fs::PROC_SUPER_MAGIC as u32),
        };
        if !fits {
            return Err(FsError::WrongMount {
                path: self.shown(path),
                root: self.path.clone(),
                found: format!("a mount of {}", fs_name(magic)),
                expected,
            });
        }
        Ok(Some(ContainerRoot {
            fd,
            resolver: self.resolver,
            path: self.path.clone(),
            mount,
            prefix: self.shown(path),
            read_only: self.read_only && on_root,
            propagation: self.propagation.clone(),
        }))
    }

    /// Attaches `mount` onto `point`, a mount point this root made or found (with
    /// [`ContainerRoot::file_mount_point`] and friends). The point must be on this root's
    /// mount, and that mount must not be shared: a mount attached under a shared mount
    /// propagates to its peers (the host's mount table among them) and outlives the
    /// container. `path` names the point in messages.
    pub fn attach(
        &self,
        mount: DetachedMount,
        point: &OwnedFd,
        path: &Path,
    ) -> Result<(), FsError> {
        const OP: &str = "mount onto";
        let on = walk::mount_id(point.as_fd()).map_err(|e| self.err(OP, path, e))?;
        if on != self.mount {
            return Err(self.other_mount(OP, path));
        }
        // The mount attached is private (DetachedMount makes it so): a submount on it, such
        // as the GPU folders on the /proc/driver/nvidia mask, needs no second reading.
        let attached = walk::mount_id(mount.dir_fd()).ok();
        let mut propagation = self
            .propagation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if propagation
            .is_shared(self.fd.as_fd(), self.mount)
            .map_err(|e| self.err(OP, path, e))?
        {
            return Err(FsError::SharedMount {
                path: self.shown(path),
                root: self.path.clone(),
                mount: self.mount,
            });
        }
        mount.attach(point)?;
        if let Some(id) = attached {
            propagation.shared.insert(id, false);
        }
        Ok(())
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
    /// symbolic links inside the root and on its mount, or [`FsError::NotFound`] (or
    /// [`FsError::OtherMount`]).
    pub fn resolve(&self, path: &Path) -> Result<OwnedFd, FsError> {
        const OP: &str = "resolve";
        self.check_absolute(OP, path)?;
        self.lookup(path, true).map_err(|e| self.err(OP, path, e))
    }

    /// What `path` resolves to, links followed inside the root and *across* mounts, as its
    /// kind, device and inode: to tell which names are one file where files are mounts of
    /// their own (the runtime's bind mounts of a CDI spec's libraries). Only an `O_PATH` fd
    /// is opened and only `fstat` is asked of it, so nothing is read and nothing can
    /// block; the answer is for comparing, never for acting on.
    pub fn identify(&self, path: &Path) -> Result<(FileKind, u64, u64), FsError> {
        const OP: &str = "resolve";
        self.check_absolute(OP, path)?;
        let fd = self
            .lookup_across(path, true)
            .map_err(|e| self.err(OP, path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.err(OP, path, e))?;
        Ok((FileKind::of(&st), st.st_dev, st.st_ino))
    }

    /// Whether `path` resolves to a directory inside the root.
    pub fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(FileKind::Directory)
    }

    /// Whether `path` resolves to a regular file inside the root.
    pub fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(FileKind::RegularFile)
    }

    /// What `path` resolves to inside the root (on its mount), if anything.
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
        if self.read_only {
            return Err(self.read_only_err(OP, link));
        }
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
        if self.read_only {
            return Err(self.read_only_err(OP, path));
        }
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
                path: self.shown(path),
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
        // O_NONBLOCK: a regular file never blocks, and this one is checked to be one; the
        // flag makes sure of it should anything else ever get here.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = reopen(&fd, flags).map_err(|e| {
            // Not NotFound even for ENOENT: the file exists, /proc/self/fd may not.
            FsError::Io {
                op: OP,
                path: self.shown(path),
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
                path: self.shown(path),
                root: self.path.clone(),
                source,
            })?;
        if data.len() > max {
            return Err(FsError::TooLarge {
                path: self.shown(path),
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
                    path: self.shown(dir),
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
    /// Fails with `EXDEV` where the path leaves the root's mount.
    fn lookup(&self, path: &Path, follow_final: bool) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_in_root(self.fd.as_fd(), path, follow_final, false),
            Resolver::FdWalk => {
                walk::fd_walk_in_root(self.fd.as_fd(), path, follow_final, Some(self.mount))
            }
        }
    }

    /// [`ContainerRoot::lookup`] that may cross mounts: only to explain a failure, never
    /// to act on what it finds (an `O_PATH` fd opens nothing, so it cannot block).
    fn lookup_across(&self, path: &Path, follow_final: bool) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_in_root(self.fd.as_fd(), path, follow_final, true),
            Resolver::FdWalk => walk::fd_walk_in_root(self.fd.as_fd(), path, follow_final, None),
        }
    }

    /// `path` as seen inside the container: this root's prefix joined with it.
    fn shown(&self, path: &Path) -> PathBuf {
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

    /// The parent directory of `path`, which must exist (nothing is created), and the
    /// final name.
    fn existing_parent(
        &self,
        op: &'static str,
        path: &Path,
    ) -> Result<(OwnedFd, OsString), FsError> {
        self.check_absolute(op, path)?;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(FsError::InvalidPath {
                op,
                path: self.shown(path),
                root: self.path.clone(),
                reason: "it does not end in a file name",
            });
        };
        let dir = self
            .lookup(parent, true)
            .map_err(|e| self.err(op, parent, e))?;
        self.expect_kind(op, parent, &dir, FileKind::Directory)?;
        Ok((dir, name.to_os_string()))
    }

    fn read_only_err(&self, op: &'static str, path: &Path) -> FsError {
        FsError::ReadOnly {
            op,
            path: self.shown(path),
            root: self.path.clone(),
        }
    }

    /// Says where `path` leaves the root's mount: the first of its prefixes (links
    /// followed inside the root) that is on another mount, and the link that leads there.
    fn other_mount(&self, op: &'static str, path: &Path) -> FsError {
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

    fn check_absolute(&self, op: &'static str, path: &Path) -> Result<(), FsError> {
        if path.is_absolute() {
            Ok(())
        } else {
            Err(FsError::InvalidPath {
                op,
                path: self.shown(path),
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
            path: self.shown(path),
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
                // A mount point (a volume, a file the spec binds) is another mount's.
                let mount = walk::mount_id(fd.as_fd()).map_err(|e| self.err(op, path, e))?;
                if mount != self.mount {
                    return Err(self.other_mount(op, path));
                }
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
            // Across mounts: a link to another mount is followable, only not here, which
            // `other_mount` says; a magic link (which crosses one too) is not.
            let why = match self.lookup_across(&prefix, true) {
                Ok(_) => continue,
                Err(why @ (Errno::NOENT | Errno::LOOP)) => why,
                Err(_) => return None,
            };
            let target = rustix::fs::readlinkat(&fd, "", Vec::new()).ok()?;
            let target = bounded(&OsStr::from_bytes(target.as_bytes()).to_string_lossy());
            return Some((self.shown(&prefix), PathBuf::from(target), why));
        }
        None
    }

    fn wrong_type(&self, op: &'static str, path: &Path, found: FileKind) -> FsError {
        FsError::WrongType {
            op,
            path: self.shown(path),
            root: self.path.clone(),
            found,
        }
    }

    fn raced(&self, op: &'static str, path: &Path) -> FsError {
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
fn bounded(text: &str) -> String {
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
fn fs_magic(st: &rustix::fs::StatFs) -> i64 {
    st.f_type as i64
}

/// A file system's name by its `statfs` magic, for messages.
fn fs_name(magic: i64) -> &'static str {
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

/// Refuses `fd` (the rootfs at `path`) when it is the caller's root directory: the
/// host's, or the mount namespace's entered, which before `pivot_root` is a copy of it.
fn refuse_root_dir(fd: &OwnedFd, path: &Path) -> Result<(), FsError> {
    let host = |e: Errno| FsError::Host {
        op: "examine",
        path: path.to_path_buf(),
        source: e.into(),
    };
    let st = rustix::fs::fstat(fd).map_err(host)?;
    let root = rustix::fs::stat("/").map_err(host)?;
    if (st.st_dev, st.st_ino) == (root.st_dev, root.st_ino) {
        return Err(FsError::HostRoot {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Refuses a rootfs that is the caller's root directory, before anything is done with
/// it ([`FsError::HostRoot`]); [`ContainerRoot::open`] checks the same again where it is
/// opened.
pub fn refuse_host_root(rootfs: &Path) -> Result<(), FsError> {
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
    refuse_root_dir(&fd, rootfs)
}

/// The most of `/proc/thread-self/mountinfo` read: room for tens of thousands of mounts.
const MAX_MOUNTINFO: u64 = 64 << 20;

/// Every mount of the caller's mount namespace, with whether it is shared (has a peer
/// group: `shared:N` in `/proc/thread-self/mountinfo`).
fn read_propagation() -> Result<Vec<(u64, bool)>, Errno> {
    let mut info = Vec::new();
    std::fs::File::open("/proc/thread-self/mountinfo")
        .and_then(|f| f.take(MAX_MOUNTINFO).read_to_end(&mut info))
        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    let info = String::from_utf8_lossy(&info);
    Ok(info
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let id = fields.next()?.parse::<u64>().ok()?;
            // id parent major:minor root mount-point options [optional fields...] - fstype
            let shared = fields
                .skip(5)
                .take_while(|f| *f != "-")
                .any(|f| f.starts_with("shared:"));
            Some((id, shared))
        })
        .collect())
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
