//! Why an operation on a container path failed ([`FsError`]), and what kind of file was
//! found where something else was expected ([`FileKind`]).

use std::fmt;
use std::io;
use std::path::PathBuf;

use rustix::fs::{FileType, Stat};

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
    pub(super) fn of(st: &Stat) -> FileKind {
        FileKind::of_mode(
            st.st_mode,
            (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)),
        )
    }

    /// The kind of a file of mode `mode` (`st_mode`), with its device numbers `rdev`.
    pub(super) fn of_mode(mode: u32, rdev: (u32, u32)) -> FileKind {
        match FileType::from_raw_mode(mode) {
            FileType::RegularFile => FileKind::RegularFile,
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::Fifo => FileKind::Fifo,
            FileType::Socket => FileKind::Socket,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::CharacterDevice => FileKind::CharDevice(rdev.0, rdev.1),
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
