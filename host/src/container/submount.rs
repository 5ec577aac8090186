//! The runtime's own mounts nvc works in (`/dev`, `/proc`: [`ContainerRoot::submount`]),
//! attaching a detached mount onto a mount point ([`ContainerRoot::attach`]), and the
//! propagation check that keeps such a mount from leaking out of the container.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::explain::{fs_magic, fs_name};
use super::{walk, ContainerRoot, DetachedMount, FileKind, FsError};

/// What `/proc/thread-self/mountinfo` says of the mounts' propagation, read at most once
/// more for a mount it did not list, and told of the mounts nvc attaches (private).
#[derive(Debug, Default)]
pub(super) struct Propagation {
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
            journal: self.journal.clone(),
            journaled: self.journaled && on_root,
            dirs: Default::default(),
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
        // as the GPU folders on the /proc/driver/nvidia mask, needs no second reading. Only
        // a tmpfs of nvc's takes one; a bind mount's id is not asked for.
        let attached = if mount.takes_mounts() {
            walk::mount_id(mount.dir_fd()).ok()
        } else {
            None
        };
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
}

/// The most of `/proc/thread-self/mountinfo` read: room for tens of thousands of mounts.
const MAX_MOUNTINFO: u64 = 64 << 20;

/// Every mount of the caller's mount namespace, with whether it is shared (has a peer
/// group: `shared:N` in `/proc/thread-self/mountinfo`).
pub(super) fn read_propagation() -> Result<Vec<(u64, bool)>, Errno> {
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
