//! A running container's root (`nvc attach`, `nvc detach`): opened as the root directory
//! of its mount namespace, which after the runtime's `pivot_root` is the container's
//! rootfs; what is already there, told apart from what nvc may still add; and taking a
//! device node back out (unmounted, then removed).

use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::{walk, ContainerRoot, FileKind, FsError, Resolver};

/// What [`ContainerRoot::present`] found at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Present {
    /// Its kind, links followed to the end.
    pub kind: FileKind,
    /// Whether it is on another mount than the root's: a mount of its own (a bind mount
    /// nvc or the runtime made), or inside a volume.
    pub mounted: bool,
}

impl ContainerRoot {
    /// The root directory of the mount namespace the caller has entered with
    /// [`super::enter_mount_namespace`] (which refuses the caller's own namespace, so this
    /// is never the host's root): the running container's rootfs, after its runtime's
    /// `pivot_root`. `shown` names it in messages (the rootfs's host path).
    pub fn open_entered(shown: &Path) -> Result<Self, FsError> {
        let fd = rustix::fs::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::Host {
            op: "open the container's root directory",
            path: shown.to_path_buf(),
            source: e.into(),
        })?;
        Self::from_fd(fd, shown, Resolver::detect())
    }

    /// What is at `path`, links followed inside the root and across mounts, or `None`
    /// when nothing is. Only an `O_PATH` fd is opened and only `fstat` asked of it.
    pub fn present(&self, path: &Path) -> Result<Option<Present>, FsError> {
        const OP: &str = "examine";
        self.check_absolute(OP, path)?;
        let fd = match self.lookup_across(path, true) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.err(OP, path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| self.err(OP, path, e))?;
        let mount = walk::mount_id(fd.as_fd()).map_err(|e| self.err(OP, path, e))?;
        Ok(Some(Present {
            kind: FileKind::of(&st),
            mounted: mount != self.mount,
        }))
    }

    /// Unmounts (lazily, `MNT_DETACH`) the mount whose root `path` is, on top of this
    /// root's mount: a device node or mask nvc bound there. `umount2` takes only a path,
    /// and the container's own `/proc` does not show this process, so the mount is named
    /// as `<host procfs>/self/fd/N` of the fd resolved here, through the host's procfs
    /// that [`super::enter_mount_namespace`] kept open. Returns false when `path` is not
    /// a mount on top of this root's (nothing to unmount).
    pub fn unmount(&self, path: &Path) -> Result<bool, FsError> {
        const OP: &str = "unmount";
        self.check_absolute(OP, path)?;
        let host_proc = super::read::host_proc().ok_or_else(|| FsError::Host {
            op: "find the host's /proc (kept when a mount namespace is entered) to unmount",
            path: path.to_path_buf(),
            source: Errno::BADF.into(),
        })?;
        let fd = match self.lookup_across(path, false) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(self.err(OP, path, e)),
        };
        let mount = walk::mount_id(fd.as_fd()).map_err(|e| self.err(OP, path, e))?;
        if mount == self.mount {
            return Ok(false);
        }
        rustix::process::fchdir(host_proc).map_err(|e| self.err(OP, path, e))?;
        let name = format!("self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        // The kernel unmounts only the mount whose root the fd is (EINVAL for a file
        // inside a volume), and only in the namespace entered.
        rustix::mount::unmount(name.as_str(), rustix::mount::UnmountFlags::DETACH)
            .map_err(|e| self.err(OP, path, e))?;
        Ok(true)
    }

    /// Removes the device node `path` (on this root's mount, no longer mounted over): a
    /// character device numbered `major:minor` (the runtime made it) or an empty regular
    /// file (the mount point nvc made). Anything else is left and is an error. Returns
    /// false when nothing is there.
    pub fn remove_node(&self, path: &Path, major: u32, minor: u32) -> Result<bool, FsError> {
        const OP: &str = "remove device node";
        self.check_absolute(OP, path)?;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(false);
        };
        let dir = match self.lookup(parent, true) {
            Ok(dir) => dir,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(self.err(OP, path, e)),
        };
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(self.err(OP, path, e)),
        };
        let mount = walk::mount_id(fd.as_fd()).map_err(|e| self.err(OP, path, e))?;
        if mount != self.mount {
            return Err(self.other_mount(OP, path));
        }
        let st = rustix::fs::fstat(&fd).map_err(|e| self.err(OP, path, e))?;
        match FileKind::of(&st) {
            FileKind::CharDevice(ma, mi) if (ma, mi) == (major, minor) => {}
            FileKind::RegularFile if st.st_size == 0 => {}
            found => return Err(self.wrong_type(OP, path, found)),
        }
        rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty())
            .map_err(|e| self.err(OP, path, e))?;
        Ok(true)
    }
}
