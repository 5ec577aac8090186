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
//!
//! The module is split along its jobs: [`FsError`] and [`FileKind`] (`error.rs`); opening
//! the root and resolving paths in it (`resolve.rs`, with the two resolvers in `walk.rs`);
//! making directories, mount points, links and files (`create.rs`); reading files and
//! directories (`read.rs`); the runtime's submounts, attaching mounts and their
//! propagation (`submount.rs`); turning a failed system call into the error that says why
//! (`explain.rs`); detached mounts and entering the mount namespace (`mount.rs`).

mod create;
mod error;
mod explain;
mod journal;
mod mount;
mod read;
mod resolve;
mod running;
mod submount;
mod walk;

#[cfg(test)]
pub(crate) mod tests;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub use create::Staged;
pub use error::{FileKind, FsError};
pub use journal::{JournalSink, Made, Unmade};
pub use mount::{
    check_char_device, enter_mount_namespace, mkdir_at, own_mount_namespace,
    return_to_mount_namespace, write_at, DetachedMount, MountAttrs,
};
pub use resolve::{refuse_host_root, Resolver};
pub use running::Present;
pub use submount::Filesystem;

use explain::fd_path;
use submount::Propagation;

/// The most symbolic links one resolution follows, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: u32 = 40;

/// How often an operation that lost a race with a concurrent change is retried before it
/// gives up with [`FsError::Raced`].
const ATTEMPTS: usize = 16;

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
    /// What was made in the rootfs, shared by a root and its submounts.
    journal: std::sync::Arc<journal::Journal>,
    /// Whether what this root makes is the rootfs's (it is on the rootfs's mount).
    journaled: bool,
    /// The folders resolved so far (by path under this root), each once per root: every
    /// file nvc makes or takes away in a folder reuses the folder's fd. An fd keeps
    /// naming the folder it was resolved to, inside the root and on its mount, whatever
    /// is renamed later.
    dirs: std::sync::Mutex<std::collections::HashMap<PathBuf, std::sync::Arc<OwnedFd>>>,
}
