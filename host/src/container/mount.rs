//! Detached mounts (the new mount API: `open_tree`, `fsopen`/`fsmount`, `mount_setattr`,
//! `move_mount`) and entering a container's mount namespace.

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags};

use super::{fd_path, FileKind, FsError};

/// Mount attributes applied to a [`DetachedMount`]. Each one that is `true` is turned on;
/// one that is `false` is left as it is (never turned off), so applying attributes only
/// ever restricts a mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountAttrs {
    /// `MOUNT_ATTR_RDONLY`.
    pub readonly: bool,
    /// `MOUNT_ATTR_NOSUID`.
    pub nosuid: bool,
    /// `MOUNT_ATTR_NODEV`.
    pub nodev: bool,
    /// `MOUNT_ATTR_NOEXEC`.
    pub noexec: bool,
}

impl From<libnvc::edits::MountPolicy> for MountAttrs {
    fn from(p: libnvc::edits::MountPolicy) -> Self {
        MountAttrs {
            readonly: p.readonly,
            nosuid: p.nosuid,
            nodev: p.nodev,
            noexec: p.noexec,
        }
    }
}

impl MountAttrs {
    fn bits(self) -> u64 {
        let mut bits = 0;
        if self.readonly {
            bits |= MountAttrFlags::MOUNT_ATTR_RDONLY.bits();
        }
        if self.nosuid {
            bits |= MountAttrFlags::MOUNT_ATTR_NOSUID.bits();
        }
        if self.nodev {
            bits |= MountAttrFlags::MOUNT_ATTR_NODEV.bits();
        }
        if self.noexec {
            bits |= MountAttrFlags::MOUNT_ATTR_NOEXEC.bits();
        }
        u64::from(bits)
    }
}

/// `struct mount_attr` of `<linux/mount.h>` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set: attrs, propagation: MS_PRIVATE})`
/// (Linux 5.12): works on a detached mount, which `mount(MS_REMOUNT)` cannot reach. Every
/// mount nvc makes is private before it is attached: nothing mounted on it later, in the
/// container, propagates to a peer such as the host mount it was cloned from.
fn mount_setattr(fd: BorrowedFd<'_>, attrs: MountAttrs) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set: attrs.bits(),
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    // SAFETY: the path is a valid NUL-terminated empty string, `attr` is a valid
    // `struct mount_attr` that outlives the call, and the size passed is its size; the
    // kernel only reads both.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno::from_io_error(&io::Error::last_os_error()).unwrap_or(Errno::INVAL))
    }
}

/// A mount not yet attached anywhere: the fd of an `open_tree(OPEN_TREE_CLONE)` clone or of
/// an `fsmount`. Dropping it unmounts it.
#[derive(Debug)]
pub struct DetachedMount {
    fd: OwnedFd,
    what: String,
    /// A tmpfs nvc made, onto whose folders it may attach more mounts.
    takes_mounts: bool,
}

impl DetachedMount {
    /// Clones the host file or directory at `host_path` (trusted; a symbolic link there is
    /// followed) as a detached, non-recursive bind mount and applies `attrs` to it before
    /// it is attached anywhere, so it is never visible writable. Must be called in the host
    /// mount namespace (before [`enter_mount_namespace`]).
    pub fn bind(host_path: &Path, attrs: MountAttrs) -> Result<Self, FsError> {
        let fd = rustix::mount::open_tree(
            CWD,
            host_path,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|e| FsError::Host {
            op: "clone as a bind mount",
            path: host_path.to_path_buf(),
            source: e.into(),
        })?;
        let mount = DetachedMount {
            fd,
            what: format!("the bind mount of {}", host_path.display()),
            takes_mounts: false,
        };
        mount.set_attrs(attrs)?;
        Ok(mount)
    }

    /// A fresh tmpfs of `size_bytes` whose root has `mode`, mounted nosuid, nodev, noexec
    /// and writable, so it can be populated through [`DetachedMount::dir_fd`] (with
    /// [`write_at`] and [`mkdir_at`]) before [`DetachedMount::set_attrs`] makes it
    /// read-only and [`DetachedMount::attach`] puts it in place.
    pub fn tmpfs(size_bytes: u64, mode: u32) -> Result<Self, FsError> {
        let what = "a tmpfs".to_owned();
        let fail = |op: &'static str, e: Errno| FsError::Mount {
            op,
            mount: what.clone(),
            source: e.into(),
        };
        let context = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)
            .map_err(|e| fail("open a filesystem context for", e))?;
        rustix::mount::fsconfig_set_string(&context, "size", size_bytes.to_string())
            .map_err(|e| fail("set the size of", e))?;
        rustix::mount::fsconfig_set_string(&context, "mode", format!("{:o}", mode & 0o7777))
            .map_err(|e| fail("set the mode of", e))?;
        rustix::mount::fsconfig_create(&context).map_err(|e| fail("create", e))?;
        let fd = rustix::mount::fsmount(
            &context,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NOSUID
                | MountAttrFlags::MOUNT_ATTR_NODEV
                | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        )
        .map_err(|e| fail("mount", e))?;
        let mount = DetachedMount {
            fd,
            what,
            takes_mounts: true,
        };
        mount.set_attrs(MountAttrs::default())?;
        Ok(mount)
    }

    /// A read-only, private mount of one file holding `data` with `mode`, on a tmpfs of its
    /// own: to put a file nvc made over one that exists in the container without writing
    /// into the container's file system. `what` names it in messages.
    pub fn file(data: &[u8], mode: u32, what: &str) -> Result<Self, FsError> {
        const NAME: &str = "file";
        let size = (data.len() as u64).div_ceil(4096) * 4096 + 4096;
        let tmpfs = DetachedMount::tmpfs(size, 0o755)?;
        write_at(tmpfs.dir_fd(), NAME, data, mode)?;
        let ro = MountAttrs {
            readonly: true,
            nosuid: true,
            nodev: true,
            noexec: true,
        };
        tmpfs.set_attrs(ro)?;
        let fd = rustix::mount::open_tree(
            tmpfs.dir_fd(),
            NAME,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|e| FsError::Mount {
            op: "clone a file of",
            mount: tmpfs.what.clone(),
            source: e.into(),
        })?;
        let mount = DetachedMount {
            fd,
            what: what.to_string(),
            takes_mounts: false,
        };
        mount.set_attrs(ro)?;
        Ok(mount)
    }

    /// Whether nvc may attach mounts onto this one's folders: a tmpfs it made (as the
    /// `/proc/driver/nvidia` mask, which takes the GPU folders), never a bind mount or a
    /// file.
    pub fn takes_mounts(&self) -> bool {
        self.takes_mounts
    }

    /// The mount's root, to populate it or look inside it.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Turns on `attrs` now (e.g. read-only once a tmpfs is populated). Fails with `EBUSY`
    /// while a file on the mount is open for writing.
    pub fn set_attrs(&self, attrs: MountAttrs) -> Result<(), FsError> {
        mount_setattr(self.fd.as_fd(), attrs).map_err(|e| FsError::Mount {
            op: "set mount attributes of",
            mount: self.what.clone(),
            source: e.into(),
        })
    }

    /// Attaches the mount onto `target`, an already-opened mount point (from
    /// [`ContainerRoot::file_mount_point`](super::ContainerRoot::file_mount_point) and
    /// friends), with `move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`: no
    /// path is looked up. The mount may have been made in another mount namespace (the
    /// host's, before [`enter_mount_namespace`]); `target` must be in the caller's current
    /// one. A file goes onto a non-directory, a directory onto a directory. Prefer
    /// [`ContainerRoot::attach`](super::ContainerRoot::attach), which checks the point is on
    /// the root's mount and that mount is not shared.
    pub fn attach(self, target: &OwnedFd) -> Result<(), FsError> {
        rustix::mount::move_mount(
            self.fd.as_fd(),
            "",
            target.as_fd(),
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(|e| FsError::Attach {
            mount: self.what.clone(),
            target: fd_path(target.as_fd()),
            source: e.into(),
        })
    }
}

/// Writes a new file `name` (a single component) with `data` and `mode` in `dir`, a
/// directory of a detached mount being populated. The mount is ours and not yet visible,
/// so a plain `openat(O_CREAT|O_EXCL|O_NOFOLLOW)` is enough.
pub fn write_at(dir: BorrowedFd<'_>, name: &str, data: &[u8], mode: u32) -> Result<(), FsError> {
    const OP: &str = "write";
    let fail = |source: io::Error| FsError::Populate {
        op: OP,
        name: name.into(),
        source,
    };
    check_name(name).map_err(|e| fail(e.into()))?;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| fail(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(data).map_err(fail)?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(|e| fail(e.into()))?;
    Ok(())
}

/// Makes the directory `name` (a single component) with `mode` in `dir`, a directory of a
/// detached mount being populated, and returns an `O_PATH` fd of it.
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &str, mode: u32) -> Result<OwnedFd, FsError> {
    const OP: &str = "create directory";
    let fail = |e: Errno| FsError::Populate {
        op: OP,
        name: name.into(),
        source: e.into(),
    };
    check_name(name).map_err(fail)?;
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)).map_err(fail)?;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    rustix::fs::chmodat(
        dir,
        name,
        Mode::from_raw_mode(mode),
        rustix::fs::AtFlags::empty(),
    )
    .map_err(fail)?;
    Ok(fd)
}

fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        Err(Errno::INVAL)
    } else {
        Ok(())
    }
}

/// Moves the calling process into the mount namespace of process `pid`, safe against the
/// pid being reused: the process is pinned with `pidfd_open` first, then
/// `setns(pidfd, CLONE_NEWNS)` (Linux 5.8). On older kernels, where setns refuses a pidfd,
/// `/proc/<pid>/ns/mnt` is opened and the pidfd checked to be still alive
/// (`pidfd_send_signal(0)`) before `setns` on it. Without pidfds (before 5.3) it fails.
///
/// The caller must be single-threaded: the kernel refuses to change the mount namespace
/// of a process whose threads share its filesystem context (`EINVAL`).
pub fn enter_mount_namespace(pid: i32) -> Result<(), FsError> {
    let fail = |op: &'static str, e: Errno| FsError::Namespace {
        op,
        pid,
        source: e.into(),
    };

    let process = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| fail("enter the mount namespace of", Errno::INVAL))?;
    let pidfd = rustix::process::pidfd_open(process, rustix::process::PidfdFlags::empty())
        .map_err(|e| match e {
            Errno::SRCH => FsError::ProcessGone { pid },
            e => fail("open a pidfd for", e),
        })?;
    // A state whose pid is a host process (forged, or stale and reused) would have the
    // driver mounted into the host's own mount namespace.
    let own = namespace_of("/proc/thread-self/ns/mnt")
        .map_err(|e| fail("find the mount namespace of", e))?;
    let theirs = namespace_of(&format!("/proc/{pid}/ns/mnt")).map_err(|e| match e {
        Errno::NOENT | Errno::SRCH => FsError::ProcessGone { pid },
        e => fail("find the mount namespace of", e),
    })?;
    // The pidfd still names a live process, so the pid was not reused in between.
    still_alive(&pidfd).map_err(|e| fail("check it is still the same", e))?;
    if own == theirs {
        return Err(FsError::OwnNamespace { pid });
    }
    // Inside, `/proc` is the container's once it has pivoted (a running container's, for
    // `nvc attach`): files are reopened through the host's, kept from here.
    crate::container::read::keep_host_proc().map_err(|e| fail("open /proc before entering", e))?;
    match rustix::thread::move_into_thread_name_spaces(
        pidfd.as_fd(),
        rustix::thread::ThreadNameSpaceType::MOUNT,
    ) {
        Ok(()) => Ok(()),
        Err(Errno::INVAL) => enter_through_procfs(pid, &pidfd),
        // A zombie: killed, not yet reaped by the runtime.
        Err(Errno::SRCH) => Err(FsError::ProcessGone { pid }),
        Err(e) => Err(fail("enter the mount namespace of", e)),
    }
}

/// This thread's mount namespace, opened: to come back to with
/// [`return_to_mount_namespace`] after [`enter_mount_namespace`].
pub fn own_mount_namespace() -> Result<OwnedFd, FsError> {
    rustix::fs::open(
        "/proc/thread-self/ns/mnt",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| FsError::Namespace {
        op: "open the mount namespace of",
        pid: std::process::id() as i32,
        source: e.into(),
    })
}

/// Moves the calling (single-threaded) process back into the mount namespace `ns` that
/// [`own_mount_namespace`] opened before it entered a container's.
pub fn return_to_mount_namespace(ns: &OwnedFd) -> Result<(), FsError> {
    rustix::thread::move_into_link_name_space(
        ns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Mount),
    )
    .map_err(|e| FsError::Namespace {
        op: "return to the mount namespace of",
        pid: std::process::id() as i32,
        source: e.into(),
    })
}

/// The device and inode of the mount namespace file at `path`.
fn namespace_of(path: &str) -> Result<(u64, u64), Errno> {
    let st = rustix::fs::stat(path)?;
    Ok((st.st_dev, st.st_ino))
}

/// Whether the pidfd's process has not been reaped: `pidfd_send_signal(pidfd, 0)`.
fn still_alive(pidfd: &OwnedFd) -> Result<(), Errno> {
    // SAFETY: pidfd_send_signal(pidfd, 0, NULL, 0) sends nothing (signal 0 only checks)
    // and takes no pointer but the NULL siginfo.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno::from_io_error(&io::Error::last_os_error()).unwrap_or(Errno::SRCH))
    }
}

/// The fallback of [`enter_mount_namespace`] for kernels before 5.8.
fn enter_through_procfs(pid: i32, pidfd: &OwnedFd) -> Result<(), FsError> {
    let fail = |op: &'static str, e: Errno| FsError::Namespace {
        op,
        pid,
        source: e.into(),
    };
    let ns = rustix::fs::open(
        format!("/proc/{pid}/ns/mnt"),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail("open the mount namespace of", e))?;
    // The namespace file was opened by pid; if the pidfd's process is still alive, the pid
    // was not reused in between, so it is that process's namespace.
    still_alive(pidfd).map_err(|e| fail("check it is still the same", e))?;
    rustix::thread::move_into_link_name_space(
        ns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Mount),
    )
    .map_err(|e| fail("enter the mount namespace of", e))
}

/// Checks with `fstat` that `fd` is a character device numbered `major:minor`.
pub fn check_char_device(fd: BorrowedFd<'_>, major: u32, minor: u32) -> Result<(), FsError> {
    let st = rustix::fs::fstat(fd).map_err(|e| FsError::Stat {
        path: fd_path(fd),
        source: e.into(),
    })?;
    let found = FileKind::of(&st);
    if found == FileKind::CharDevice(major, minor) {
        Ok(())
    } else {
        Err(FsError::NotDevice {
            path: fd_path(fd),
            found,
            major,
            minor,
        })
    }
}

#[cfg(test)]
pub(super) fn enter_through_procfs_for_tests(pid: i32) -> Result<(), FsError> {
    let process = rustix::process::Pid::from_raw(pid).ok_or(FsError::Namespace {
        op: "enter the mount namespace of",
        pid,
        source: Errno::INVAL.into(),
    })?;
    let pidfd = rustix::process::pidfd_open(process, rustix::process::PidfdFlags::empty())
        .map_err(|e| FsError::Namespace {
            op: "open a pidfd for",
            pid,
            source: e.into(),
        })?;
    enter_through_procfs(pid, &pidfd)
}
