//! The two ways of resolving a path inside the root: the kernel's `openat2` and an fd walk
//! with the same semantics for kernels before 5.6.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{FileKind, MAX_LINKS};

/// How often openat2 is retried when the kernel reports a concurrent rename or mount
/// (`EAGAIN`) during a walk through `..`.
const EAGAIN_RETRIES: usize = 128;

/// How many of those retries follow at once; each later one waits a little longer first
/// (50 µs more each time, at most 1 ms; about 0.1 s in all), so that a burst of mounts
/// elsewhere on the host (a busy node, other containers starting) is waited out rather
/// than answered with a failed start.
const EAGAIN_AT_ONCE: usize = 16;

/// `openat2(root, path, O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, with
/// `RESOLVE_NO_XDEV` unless `cross_mounts`: then any step onto another mount (a mount point
/// on the way, or a link whose target is on another mount) fails with `EXDEV`.
pub(super) fn openat2_in_root(
    root: BorrowedFd<'_>,
    path: &Path,
    follow_final: bool,
    cross_mounts: bool,
) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if !follow_final {
        flags |= OFlags::NOFOLLOW;
    }
    let mut how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    if !cross_mounts {
        how |= ResolveFlags::NO_XDEV;
    }
    openat2_retried(root, path, flags, how)
}

/// [`openat2_in_root`] of a folder on the root's mount, links followed: the kernel fails
/// with `ENOTDIR` where `path` is something else (`O_DIRECTORY`).
pub(super) fn openat2_dir_in_root(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV;
    openat2_retried(root, path, flags, how)
}

/// `openat2` of `path` (its leading slashes taken off) under `root`, again after a
/// concurrent rename or mount (`EAGAIN`) or a signal.
fn openat2_retried(
    root: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    how: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let relative = relative(path);
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, relative, flags, Mode::empty(), how) {
            Err(Errno::AGAIN) if tries < EAGAIN_RETRIES => {
                tries += 1;
                if tries > EAGAIN_AT_ONCE {
                    let step = (tries - EAGAIN_AT_ONCE) as u64 * 50;
                    std::thread::sleep(std::time::Duration::from_micros(step.min(1000)));
                }
            }
            Err(Errno::INTR) => {}
            result => return result,
        }
    }
}

/// `path` without its leading slashes, or "." for the root itself.
fn relative(path: &Path) -> &Path {
    let bytes = path.as_os_str().as_bytes();
    let start = bytes.iter().position(|&b| b != b'/').unwrap_or(bytes.len());
    if start == bytes.len() {
        Path::new(".")
    } else {
        Path::new(std::ffi::OsStr::from_bytes(&bytes[start..]))
    }
}

enum Step {
    Parent,
    Name(OsString),
}

/// Puts the components of `path` in front of `queue`, and says whether it was absolute.
fn push_front(queue: &mut VecDeque<Step>, path: &Path) -> bool {
    let mut steps = Vec::new();
    let mut absolute = false;
    for component in path.components() {
        match component {
            Component::RootDir => absolute = true,
            Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => steps.push(Step::Parent),
            Component::Normal(name) => steps.push(Step::Name(name.to_os_string())),
        }
    }
    for step in steps.into_iter().rev() {
        queue.push_front(step);
    }
    absolute
}

/// Resolves `path` inside `root` one component at a time with
/// `openat(O_PATH|O_NOFOLLOW)`. The kernel never follows a link here: each one is read and
/// its target resolved by this loop, relative to `root`. `..` pops the stack of directories
/// walked so far (so it never reaches above the root, and never asks the kernel for `..`,
/// whose answer a concurrent rename could move outside the root). With `mount` set, every
/// component opened must be on that mount (its `STATX_MNT_ID`), else `EXDEV`, as
/// `RESOLVE_NO_XDEV` does.
pub(super) fn fd_walk_in_root(
    root: BorrowedFd<'_>,
    path: &Path,
    follow_final: bool,
    mount: Option<u64>,
) -> Result<OwnedFd, Errno> {
    let mut queue = VecDeque::new();
    push_front(&mut queue, path);
    // The directories below the root that the walk is in; the last is the current one.
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut links = 0u32;
    while let Some(step) = queue.pop_front() {
        let name = match step {
            Step::Parent => {
                stack.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        let current = stack.last().map_or(root, |fd| fd.as_fd());
        let fd = rustix::fs::openat(
            current,
            &name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        if let Some(id) = mount {
            if mount_id(fd.as_fd())? != id {
                return Err(Errno::XDEV);
            }
        }
        let st = rustix::fs::fstat(&fd)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => stack.push(fd),
            FileType::Symlink => {
                if queue.is_empty() && !follow_final {
                    return Ok(fd);
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::LOOP);
                }
                let target = rustix::fs::readlinkat(&fd, "", Vec::new())?;
                let target = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes()));
                if target.as_os_str().is_empty() {
                    return Err(Errno::NOENT);
                }
                if is_magic_link(&fd, target)? {
                    return Err(Errno::LOOP);
                }
                if push_front(&mut queue, target) {
                    stack.clear();
                }
            }
            _ if queue.is_empty() => return Ok(fd),
            _ => return Err(Errno::NOTDIR),
        }
    }
    match stack.pop() {
        Some(fd) => Ok(fd),
        None => rustix::io::fcntl_dupfd_cloexec(root, 0),
    }
}

/// The id of the mount `fd` is on: `statx(STATX_MNT_ID)` (Linux 5.8), else the `mnt_id`
/// line of `/proc/self/fdinfo/<fd>` (Linux 3.15). The same number as the first field of
/// `/proc/self/mountinfo`.
pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    mount_and_kind(fd).map(|(mount, _)| mount)
}

/// [`mount_id`] and what `fd` is, from the same `statx`.
pub(crate) fn mount_and_kind(fd: BorrowedFd<'_>) -> Result<(u64, FileKind), Errno> {
    use rustix::fs::StatxFlags;
    let stx = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        StatxFlags::MNT_ID | StatxFlags::TYPE,
    )?;
    if stx.stx_mask & StatxFlags::TYPE.bits() == 0 {
        return Err(Errno::NOSYS);
    }
    let kind = FileKind::of_mode(
        u32::from(stx.stx_mode),
        (stx.stx_rdev_major, stx.stx_rdev_minor),
    );
    if stx.stx_mask & StatxFlags::MNT_ID.bits() != 0 {
        return Ok((stx.stx_mnt_id, kind));
    }
    Ok((mount_id_of_fdinfo(fd)?, kind))
}

/// The `mnt_id` line of `/proc/self/fdinfo/<fd>`, for kernels before 5.8.
fn mount_id_of_fdinfo(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    let mut info = String::new();
    std::fs::File::open(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .and_then(|f| f.take(4096).read_to_string(&mut info))
        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::NOSYS))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(Errno::NOSYS)
}

/// `statmount(2)`: the same number on every architecture but alpha (Linux 6.8).
const SYS_STATMOUNT: libc::c_long = 457;
/// `STATMOUNT_MNT_BASIC`: the mount's ids, attributes and propagation.
const STATMOUNT_MNT_BASIC: u64 = 0x2;
/// `STATX_MNT_ID_UNIQUE` (Linux 6.8): the 64-bit mount id that `statmount` takes.
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// `struct mnt_id_req` of `<linux/mount.h>` (`MNT_ID_REQ_SIZE_VER0`).
#[repr(C)]
struct MntIdReq {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
}

/// Whether the mount `fd` is on is shared (`MS_SHARED` in `statmount`'s
/// `mnt_propagation`), asked of the kernel for that one mount; `None` where the kernel has
/// no `statmount` or no unique mount ids (before 6.8), or the mount is not in the caller's
/// namespace, so the caller falls back to mountinfo.
pub(crate) fn statmount_shared(fd: BorrowedFd<'_>) -> Option<bool> {
    let stx = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE),
    )
    .ok()?;
    if stx.stx_mask & STATX_MNT_ID_UNIQUE == 0 {
        return None;
    }
    let req = MntIdReq {
        size: std::mem::size_of::<MntIdReq>() as u32,
        spare: 0,
        mnt_id: stx.stx_mnt_id,
        param: STATMOUNT_MNT_BASIC,
    };
    // `struct statmount`: 512 bytes of fixed fields today, and room for more; only
    // `mask` (offset 8) and `mnt_propagation` (offset 72) are read.
    let mut buf = [0u64; 128];
    // SAFETY: `req` is a valid `struct mnt_id_req` whose size field says its size, and
    // `buf` is writable for the byte length passed; the kernel reads the one and writes at
    // most that many bytes of the other, both of which outlive the call.
    let ret = unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            &req as *const MntIdReq,
            buf.as_mut_ptr(),
            std::mem::size_of_val(&buf),
            0u32,
        )
    };
    if ret != 0 || buf[1] & STATMOUNT_MNT_BASIC == 0 {
        return None;
    }
    Some(buf[9] & libc::MS_SHARED != 0)
}

/// Whether the link `fd` is a procfs magic link (`/proc/N/cwd`, `root`, `exe`, `fd/N`,
/// `ns/*`, `map_files/*`): the kernel would jump to the object behind it rather than
/// resolve its text. Their texts are absolute paths or not paths at all (`pipe:[1]`,
/// `mnt:[4026531840]`, `anon_inode:[eventfd]`), whereas procfs's plain links (`self`,
/// `thread-self`, `mounts`, `net`) are relative.
fn is_magic_link(fd: &OwnedFd, target: &Path) -> Result<bool, Errno> {
    let fs = rustix::fs::fstatfs(fd)?;
    if fs.f_type != rustix::fs::PROC_SUPER_MAGIC {
        return Ok(false);
    }
    Ok(target.is_absolute() || target.as_os_str().as_bytes().contains(&b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_strips_leading_slashes() {
        assert_eq!(relative(Path::new("/")), Path::new("."));
        assert_eq!(relative(Path::new("//")), Path::new("."));
        assert_eq!(relative(Path::new("/a/b")), Path::new("a/b"));
        assert_eq!(relative(Path::new("//a/../b")), Path::new("a/../b"));
    }

    #[test]
    fn push_front_puts_targets_before_the_rest() {
        let mut queue = VecDeque::new();
        assert!(!push_front(&mut queue, Path::new("c/d")));
        assert!(push_front(&mut queue, Path::new("/a/./../b")));
        let names: Vec<String> = queue
            .iter()
            .map(|s| match s {
                Step::Parent => "..".to_owned(),
                Step::Name(n) => n.to_string_lossy().into_owned(),
            })
            .collect();
        assert_eq!(names, ["a", "..", "b", "c", "d"]);
    }
}
