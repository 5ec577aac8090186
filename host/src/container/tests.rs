//! Tests of the container-path syscalls, under both resolvers.
//!
//! Tests that mount, unshare or setns run their body in a forked child (`in_child`): the
//! child is single-threaded (as setns into a mount namespace requires), it moves into its
//! own mount namespace with private propagation before doing anything, so no mount ever
//! reaches the host or the test process, and it leaves with `_exit`, its namespace dying
//! with it. Failures in the child are written straight to fd 2 (the harness's output
//! capture lives in the parent) and reported by the parent as a failed exit status.
//!
//! The hostile-rootfs tests check, after every operation, that a sentinel tree outside the
//! rootfs (everything in the sandbox but the rootfs directories) is byte-for-byte and
//! ctime-for-ctime unchanged, that every new mount in the child's `/proc/self/mountinfo`
//! is inside the rootfs, that a returned fd is inside the rootfs, that nothing read
//! carries the sentinel's marker, and that an error names the root and the path.

use super::explain::fs_magic;
use super::submount::read_propagation;
use super::walk::mount_id;
use super::*;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{symlink as host_symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{makedev, FileType, Mode, OFlags, RenameFlags, CWD};
use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::thread::UnshareFlags;

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::FdWalk];
const MARKER: &str = "OUTSIDE-SENTINEL";
const LIB: &str = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";

// ---- harness ------------------------------------------------------------------------

fn need_root(what: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root: {what}"
    );
}

fn raw_stderr(message: &str) {
    // SAFETY: fd 2 is open for the whole life of the process.
    let stderr = unsafe { BorrowedFd::borrow_raw(2) };
    let mut rest = message.as_bytes();
    while !rest.is_empty() {
        match rustix::io::write(stderr, rest) {
            Ok(0) | Err(_) => return,
            Ok(n) => rest = &rest[n..],
        }
    }
}

/// Runs `body` in a forked child in a private mount namespace of its own (see the module
/// doc) and fails if the child fails or runs past five minutes.
pub(crate) fn in_child(what: &str, body: impl FnOnce()) {
    need_root(what);
    // SAFETY: the child runs only this test's code: it never touches locks other harness
    // threads may have held at fork (it writes failures with raw write(2), and glibc's
    // malloc is fork-safe), and it leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", io::Error::last_os_error());
    if pid == 0 {
        // Report and leave at once: unwinding would walk the loaded objects under glibc's
        // loader lock, which another harness thread may have held at fork.
        std::panic::set_hook(Box::new(|info| {
            raw_stderr(&format!("child: {info}\n"));
            // SAFETY: ends the child at once, as a failure.
            unsafe { libc::_exit(101) };
        }));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the child is single-threaded and unshares no fd table.
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }
                .expect("unshare(CLONE_NEWNS)");
            rustix::mount::mount_change(
                "/",
                MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
            )
            .expect("make / private");
            body();
        }));
        // SAFETY: _exit ends the child without running destructors of state copied from
        // the parent (its temp dirs belong to the parent).
        unsafe { libc::_exit(i32::from(result.is_err())) };
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid int.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if ret == pid {
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "{what}: the child failed (wait status {status}); its panic is on stderr"
            );
            return;
        }
        assert_eq!(ret, 0, "waitpid: {}", io::Error::last_os_error());
        if Instant::now() > deadline {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("{what}: the child ran past 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A temp dir holding a sentinel tree `outside/`, trusted host sources `host/`, and
/// rootfs directories `r-N/` made on demand.
struct Sandbox {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    outside: PathBuf,
    host: PathBuf,
    next: std::cell::Cell<usize>,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::Builder::new()
            .prefix("nvc-host-container-")
            .tempdir()
            .unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let outside = base.join("outside");
        for dir in [
            "x86_64-linux-gnu",
            "bin",
            "etc",
            "999.88.77",
            "proc/driver",
            "compat",
            "firmware",
            "nvidia",
            "lib",
            "usr",
            "dev",
        ] {
            std::fs::create_dir_all(outside.join(dir)).unwrap();
        }
        for file in [
            "ld.so.cache",
            "libcuda.so.1",
            "libcuda.so",
            "nvidia0",
            "ld.so.conf",
            "etc/ld.so.cache",
            "etc/ld.so.conf",
            "x86_64-linux-gnu/libcuda.so.1",
            "compat/outside-only",
            "bin/nvidia-smi",
        ] {
            std::fs::write(outside.join(file), format!("{MARKER} {file}\n")).unwrap();
        }
        host_symlink("ld.so.cache", outside.join("a-link")).unwrap();
        let host = base.join("host");
        std::fs::create_dir_all(host.join("firmware")).unwrap();
        std::fs::write(host.join("libcuda.so.999.88.77"), "host libcuda\n").unwrap();
        std::fs::write(host.join("nvidia-smi"), "#!/bin/sh\necho host smi\n").unwrap();
        std::fs::write(host.join("firmware/gsp.bin"), "host firmware\n").unwrap();
        Sandbox {
            _tmp: tmp,
            base,
            outside,
            host,
            next: std::cell::Cell::new(0),
        }
    }

    /// A fresh rootfs with a small distribution-like layout.
    fn rootfs(&self) -> PathBuf {
        let n = self.next.get();
        self.next.set(n + 1);
        let root = self.base.join(format!("r-{n}"));
        for dir in [
            "usr/lib/x86_64-linux-gnu",
            "usr/bin",
            "usr/local/cuda/compat",
            "etc",
            "lib/firmware/nvidia",
            "dev",
            "proc",
            "chain",
            "tmp",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(
            root.join("etc/ld.so.conf"),
            "include /etc/ld.so.conf.d/*.conf\n",
        )
        .unwrap();
        std::fs::write(root.join("usr/local/cuda/compat/libcuda.so.1"), "compat\n").unwrap();
        root
    }

    /// Everything in the sandbox except the rootfs directories: type, mode, size, mtime,
    /// ctime, and content or link target.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        fn walk(dir: &Path, top: bool, out: &mut BTreeMap<PathBuf, String>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for path in entries {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if top && name.starts_with("r-") {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let mut line = format!(
                    "{:o} {} {}.{} {}.{}",
                    meta.mode(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.ctime(),
                    meta.ctime_nsec()
                );
                if meta.file_type().is_symlink() {
                    line += &format!(" -> {}", std::fs::read_link(&path).unwrap().display());
                } else if meta.is_file() {
                    line += &format!(" {:?}", std::fs::read(&path).unwrap());
                }
                out.insert(path.clone(), line);
                if meta.is_dir() {
                    walk(&path, false, out);
                }
            }
        }
        // The sandbox's own mtime changes with every new rootfs; its other entries are
        // listed.
        let mut out = BTreeMap::new();
        walk(&self.base, true, &mut out);
        out
    }
}

/// The mounts of this process's namespace: id -> mount point.
fn mounts() -> BTreeMap<u64, PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (
                fields[0].parse().unwrap(),
                PathBuf::from(unescape(fields[4])),
            )
        })
        .collect()
}

fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Ok(n) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn new_mounts_outside(before: &BTreeMap<u64, PathBuf>, rootfs: &Path) -> Vec<PathBuf> {
    mounts()
        .into_iter()
        .filter(|(id, _)| !before.contains_key(id))
        .map(|(_, at)| at)
        .filter(|at| !at.starts_with(rootfs))
        .collect()
}

fn host_path_of(fd: &OwnedFd) -> PathBuf {
    fd_path(fd.as_fd())
}

fn ro_nosuid_nodev() -> MountAttrs {
    MountAttrs {
        readonly: true,
        nosuid: true,
        nodev: true,
        noexec: false,
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
}

fn mksock(path: &Path) {
    drop(std::os::unix::net::UnixListener::bind(path).unwrap());
}

fn mkchar(path: &Path, major: u32, minor: u32) {
    rustix::fs::mknodat(
        CWD,
        path,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        makedev(major, minor),
    )
    .unwrap();
}

/// Makes the sentinel's path `sub` inside the rootfs too, so that an absolute link to the
/// sentinel resolves (inside the root), and returns it.
fn mirror(sandbox: &Sandbox, rootfs: &Path, sub: &str) -> PathBuf {
    let inside = rootfs
        .join(sandbox.outside.strip_prefix("/").unwrap())
        .join(sub);
    std::fs::create_dir_all(&inside).unwrap();
    inside
}

fn ino(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().ino()
}

// ---- resolution, under both resolvers, in the test process --------------------------

#[test]
fn detect_picks_openat2_where_the_kernel_has_it() {
    // A kernel without openat2 is also modelled by `detect_falls_back_without_openat2`.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = numbers.next().unwrap().parse().unwrap();
    let minor: u32 = numbers.next().unwrap().parse().unwrap();
    let want = if (major, minor) >= (5, 6) {
        Resolver::Openat2
    } else {
        Resolver::FdWalk
    };
    assert_eq!(Resolver::detect(), want, "kernel {}", release.trim());
}

#[test]
fn resolve_stays_inside_the_root() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        assert_eq!(root.resolver(), resolver);
        host_symlink(&sandbox.outside, rootfs.join("abs")).unwrap();
        host_symlink("../../../../../../../../..", rootfs.join("usr/up")).unwrap();
        host_symlink("/etc", rootfs.join("usr/etc-abs")).unwrap();
        host_symlink("../etc", rootfs.join("usr/etc-rel")).unwrap();
        host_symlink("/nonexistent", rootfs.join("dangling")).unwrap();
        std::fs::create_dir_all(rootfs.join(sandbox.outside.strip_prefix("/").unwrap())).unwrap();
        let inside_outside = rootfs.join(sandbox.outside.strip_prefix("/").unwrap());

        let check = |path: &str, want: &Path| {
            let fd = root
                .resolve(Path::new(path))
                .unwrap_or_else(|e| panic!("{resolver:?} {path}: {e}"));
            assert_eq!(host_path_of(&fd), want, "{resolver:?} {path}");
        };
        check("/", &rootfs);
        check("/../../..", &rootfs);
        check("/etc/../../../etc", &rootfs.join("etc"));
        check("/abs", &inside_outside);
        check("/usr/up", &rootfs);
        check("/usr/up/etc", &rootfs.join("etc"));
        check("/usr/etc-abs/ld.so.conf", &rootfs.join("etc/ld.so.conf"));
        check("/usr/etc-rel/ld.so.conf", &rootfs.join("etc/ld.so.conf"));
        check("/usr/etc-abs/..", &rootfs);
        check("/./usr//bin/", &rootfs.join("usr/bin"));

        let err = root.resolve(Path::new("/dangling")).unwrap_err();
        assert!(err.is_not_found(), "{resolver:?}: {err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot resolve /dangling in {}: /dangling is a dangling symbolic link to \
                 /nonexistent, which does not exist inside the container; fix or remove the \
                 link in the image",
                rootfs.display()
            )
        );
        let err = root.resolve(Path::new("/etc/ld.so.conf/x")).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot resolve /etc/ld.so.conf/x in {}",
                rootfs.display()
            )),
            "{err:?}"
        );
        let err = root.resolve(Path::new("etc")).unwrap_err();
        assert!(matches!(err, FsError::InvalidPath { .. }), "{err:?}");

        assert!(root.is_dir(Path::new("/usr/etc-abs")));
        assert!(!root.is_file(Path::new("/usr/etc-abs")));
        assert!(root.is_file(Path::new("/usr/etc-rel/ld.so.conf")));
        assert!(!root.is_dir(Path::new("/dangling")));
        assert!(!root.is_file(Path::new("/missing")));
    }
}

#[test]
fn resolve_follows_forty_links_and_refuses_forty_one_and_loops() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        for i in 1..41 {
            host_symlink(
                format!("/chain/{}", i + 1),
                rootfs.join(format!("chain/{i}")),
            )
            .unwrap();
        }
        host_symlink("/etc", rootfs.join("chain/41")).unwrap();
        // /chain/2 -> ... -> /chain/41 -> /etc is 40 links; /chain/1 adds one.
        let fd = root.resolve(Path::new("/chain/2")).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("etc"), "{resolver:?}");
        // The error names the first link that cannot be followed and what it says.
        for path in ["/chain/1", "/chain/1/ld.so.conf"] {
            let err = root.resolve(Path::new(path)).unwrap_err();
            assert!(
                matches!(&err, FsError::UnfollowableLink { link, target, .. }
                    if link == Path::new("/chain/1") && target == Path::new("/chain/2")),
                "{resolver:?} {path}: {err:?}"
            );
        }
        let err = root.resolve(Path::new("/chain/1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot resolve /chain/1 in {}: /chain/1 is a symbolic link to /chain/2, which \
                 cannot be followed inside the container (a loop, more than 40 links, or a \
                 /proc magic link); fix or remove the link in the image",
                rootfs.display()
            )
        );

        host_symlink("b", rootfs.join("a")).unwrap();
        host_symlink("a", rootfs.join("b")).unwrap();
        host_symlink("self", rootfs.join("self")).unwrap();
        for (path, link, target) in [
            ("/a", "/a", "b"),
            ("/b/x", "/b", "a"),
            ("/self", "/self", "self"),
        ] {
            let err = root.resolve(Path::new(path)).unwrap_err();
            assert!(
                matches!(&err, FsError::UnfollowableLink { link: l, target: t, .. }
                    if l == Path::new(link) && t == Path::new(target)),
                "{resolver:?} {path}: {err:?}"
            );
            assert!(!err.is_not_found(), "{resolver:?} {path}: {err:?}");
        }
    }
}

#[test]
#[ignore = "needs root: mounts procfs inside a rootfs"]
fn magic_links_are_refused() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("mounts procfs inside a rootfs", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            rustix::mount::mount(
                "proc",
                rootfs.join("proc"),
                "proc",
                MountFlags::empty(),
                None,
            )
            .unwrap();
            host_symlink("/proc/self/root/etc", rootfs.join("magic")).unwrap();
            host_symlink("/proc/1/cwd", rootfs.join("cwd")).unwrap();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            for path in [
                "/magic",
                "/magic/ld.so.conf",
                "/cwd",
                "/proc/self/root",
                "/proc/self/cwd/etc",
                "/proc/thread-self/root",
                "/proc/1/root/etc",
            ] {
                // ELOOP for a magic link; EACCES where procfs denies reading the link
                // first (pid 1's); and /proc is another mount than the root's anyway.
                let err = root.resolve(Path::new(path)).unwrap_err();
                assert!(
                    matches!(&err, FsError::UnfollowableLink { .. })
                        || matches!(&err, FsError::OtherMount { .. })
                        || matches!(&err, FsError::Io { source, .. }
                            if source.raw_os_error() == Some(libc::EACCES)),
                    "{resolver:?} {path}: {err:?}"
                );
            }
            // The image's own link to a magic link is named, with what it says.
            let err = root
                .mkdir_all(Path::new("/magic/nvidia"), 0o755)
                .unwrap_err();
            assert!(
                matches!(&err, FsError::UnfollowableLink { link, target, .. }
                    if link == Path::new("/magic") && target == Path::new("/proc/self/root/etc")),
                "{resolver:?}: {err:?}"
            );
            // The procfs is another mount: only reached as a submount, where procfs's plain
            // links are still followed.
            let err = root.resolve(Path::new("/proc/self/mountinfo")).unwrap_err();
            assert!(matches!(err, FsError::OtherMount { .. }), "{err:?}");
            let proc = root
                .submount(Path::new("/proc"), Filesystem::Procfs)
                .unwrap()
                .unwrap();
            let fd = proc.resolve(Path::new("/self/mountinfo")).unwrap();
            assert!(
                host_path_of(&fd).starts_with(rootfs.join("proc")),
                "{resolver:?}"
            );
            let mounts = proc.read_file(Path::new("/self/mountinfo"), 1 << 24);
            // procfs files report size 0 but read fine.
            assert!(!mounts.unwrap().is_empty(), "{resolver:?}");
        }
    });
}

// ---- creation, under both resolvers, in the test process ----------------------------

#[test]
fn mkdir_all_makes_missing_directories_inside_the_root() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let fd = root.mkdir_all(Path::new("/a/b/c"), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("a/b/c"));
        assert!(rootfs.join("a/b/c").is_dir());
        // Idempotent.
        let fd = root.mkdir_all(Path::new("/a/b/c"), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("a/b/c"));
        // Links are followed inside the root.
        host_symlink("usr/lib", rootfs.join("lib64")).unwrap();
        host_symlink(&sandbox.outside, rootfs.join("escape")).unwrap();
        let err = root.mkdir_all(Path::new("/escape/new"), 0o755).unwrap_err();
        assert!(
            err.is_not_found(),
            "a link dangling inside the root: {err:?}"
        );
        mirror(&sandbox, &rootfs, "");
        let fd = root.mkdir_all(Path::new("/lib64/vdpau"), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("usr/lib/vdpau"));
        let fd = root.mkdir_all(Path::new("/escape/new"), 0o755).unwrap();
        let inside = rootfs.join(sandbox.outside.strip_prefix("/").unwrap());
        assert_eq!(host_path_of(&fd), inside.join("new"));
        assert!(!sandbox.outside.join("new").exists());
        let fd = root.mkdir_all(Path::new("/x/../y/./z/.."), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("y"));
        assert!(rootfs.join("x").is_dir() && rootfs.join("y/z").is_dir());
        let fd = root.mkdir_all(Path::new("/"), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs);

        host_symlink("/nowhere/deep", rootfs.join("dangling")).unwrap();
        let err = root.mkdir_all(Path::new("/dangling/x"), 0o755).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot create directory /dangling in {}: /dangling is a dangling symbolic \
                 link to /nowhere/deep, which does not exist inside the container; fix or \
                 remove the link in the image",
                rootfs.display()
            )
        );
        assert!(!rootfs.join("nowhere").exists());
        let err = root
            .mkdir_all(Path::new("/etc/ld.so.conf/x"), 0o755)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot create directory /etc/ld.so.conf in {}: it is a regular file",
                rootfs.display()
            )
        );
    }
}

#[test]
fn mkdir_all_resolves_each_folder_once_and_acts_on_what_it_resolved() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        // A folder asked for again is the one resolved (or made) the first time.
        let made = root.mkdir_all(Path::new("/n/m"), 0o755).unwrap();
        let again = root.mkdir_all(Path::new("/n/m"), 0o755).unwrap();
        assert!(Arc::ptr_eq(&made, &again), "{resolver:?}");
        assert!(root.is_dir(Path::new("/n")));
        // The image's tree changes under it (the folder moved, a link to the host's
        // sentinel tree in its place): what is made below goes into the folder resolved
        // before, inside the root, never through the new link.
        std::fs::rename(rootfs.join("n"), rootfs.join("moved")).unwrap();
        host_symlink(&sandbox.outside, rootfs.join("n")).unwrap();
        let fd = root.mkdir_all(Path::new("/n/new"), 0o755).unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("moved/new"), "{resolver:?}");
        assert!(!sandbox.outside.join("new").exists());
        // Many levels made at once, under a link of the image, each made in the one above.
        host_symlink("usr/lib", rootfs.join("lib32")).unwrap();
        let fd = root
            .mkdir_all(Path::new("/lib32/firmware/nvidia/999.88.77"), 0o755)
            .unwrap();
        assert_eq!(
            host_path_of(&fd),
            rootfs.join("usr/lib/firmware/nvidia/999.88.77")
        );
        let noted: Vec<PathBuf> = root.made().iter().map(|m| m.path().to_path_buf()).collect();
        assert_eq!(
            noted,
            [
                "/n",
                "/n/m",
                "/n/new",
                "/lib32/firmware",
                "/lib32/firmware/nvidia",
                "/lib32/firmware/nvidia/999.88.77"
            ]
            .map(PathBuf::from)
            .to_vec(),
            "{resolver:?}: each folder made is noted once"
        );
    }
}

#[test]
fn mkdir_all_under_a_flipping_link_says_why_or_that_it_kept_changing() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let expected = sandbox.snapshot();
        let lib = rootfs.join("usr/lib");
        // Swapped with the real folder again and again: a link dangling inside the root.
        host_symlink(&sandbox.outside, lib.join(".swap")).unwrap();
        let dir = rustix::fs::open(&lib, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let flipper = {
            let (stop, swapped) = (Arc::clone(&stop), Arc::clone(&swapped));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let flags = RenameFlags::EXCHANGE;
                    if rustix::fs::renameat_with(&dir, ".swap", &dir, "x86_64-linux-gnu", flags)
                        .is_ok()
                    {
                        swapped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                swapped.load(Ordering::Relaxed)
            })
        };
        // On a loaded machine the flipper may not run for a while: the walks start once it
        // has, and go on past 5000 until it swapped meanwhile (10 s at most).
        let started = Instant::now();
        while swapped.load(Ordering::Relaxed) == 0 && started.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        let before = swapped.load(Ordering::Relaxed);
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let (mut made, mut dangling, mut raced) = (0, 0, 0);
        let mut walks = 0;
        while walks < 5000
            || (swapped.load(Ordering::Relaxed) == before
                && started.elapsed() < Duration::from_secs(10))
        {
            walks += 1;
            match root.mkdir_all(Path::new("/usr/lib/x86_64-linux-gnu/vdpau"), 0o755) {
                Ok(fd) => {
                    assert!(host_path_of(&fd).starts_with(&rootfs), "{resolver:?}");
                    made += 1;
                }
                Err(FsError::DanglingLink { link, .. }) => {
                    assert_eq!(link, Path::new("/usr/lib/x86_64-linux-gnu"), "{resolver:?}");
                    dangling += 1;
                }
                Err(FsError::Raced { .. }) => raced += 1,
                // A bare "it does not exist" for a folder that exists, or a bare ELOOP,
                // would leave the user guessing.
                Err(e) => panic!("{resolver:?}: {e:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = flipper.join().unwrap();
        assert!(
            swaps > before && made > 0,
            "{resolver:?}: {} swaps during {walks} walks, {made} made",
            swaps - before
        );
        assert_eq!(
            sandbox.snapshot(),
            expected,
            "{resolver:?}: the outside changed"
        );
        eprintln!("{resolver:?}: {made} made, {dangling} dangling, {raced} raced, {swaps} swaps");
    }
}

#[test]
fn file_mount_points_are_created_or_reused_and_never_followed() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let fd = root.file_mount_point(Path::new(LIB), 0o644).unwrap();
        let lib = rootfs.join(LIB.trim_start_matches('/'));
        assert_eq!(host_path_of(&fd), lib);
        assert!(lib.is_file());
        assert_eq!(std::fs::metadata(&lib).unwrap().len(), 0);
        let first = ino(&lib);
        let fd = root.file_mount_point(Path::new(LIB), 0o644).unwrap();
        assert_eq!(host_path_of(&fd), lib);
        assert_eq!(ino(&lib), first, "an existing file is reused");
        // The parent is made.
        let fd = root
            .file_mount_point(Path::new("/usr/share/nvidia/nvoptix.bin"), 0o644)
            .unwrap();
        assert_eq!(
            host_path_of(&fd),
            rootfs.join("usr/share/nvidia/nvoptix.bin")
        );

        let bin = rootfs.join("usr/bin");
        host_symlink(
            sandbox.outside.join("bin/nvidia-smi"),
            bin.join("nvidia-smi"),
        )
        .unwrap();
        std::fs::create_dir(bin.join("a-dir")).unwrap();
        mkfifo(&bin.join("a-fifo"));
        mksock(&bin.join("a-socket"));
        for (name, found) in [
            ("nvidia-smi", "a symbolic link"),
            ("a-dir", "a directory"),
            ("a-fifo", "a fifo"),
            ("a-socket", "a socket"),
        ] {
            let path = format!("/usr/bin/{name}");
            let fd = root.file_mount_point(Path::new(&path), 0o755);
            let err = fd.map(|fd| host_path_of(&fd)).expect_err(&path);
            assert_eq!(
                err.to_string(),
                format!(
                    "cannot create mount point {path} in {}: it is {found}",
                    rootfs.display()
                ),
                "{resolver:?}"
            );
        }
        assert!(std::fs::symlink_metadata(bin.join("nvidia-smi"))
            .unwrap()
            .is_symlink());
        for (path, reason) in [
            ("usr/lib/x", "it is not an absolute path"),
            ("/", "it does not end in a file name"),
            ("/usr/..", "it does not end in a file name"),
            ("/usr/lib/", "it ends in a slash"),
        ] {
            let err = root.file_mount_point(Path::new(path), 0o644).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "cannot create mount point {path} in {}: {reason}",
                    rootfs.display()
                )
            );
        }
    }
}

#[test]
fn dir_mount_points_are_created_or_reused_and_never_followed() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let path = Path::new("/lib/firmware/nvidia/999.88.77");
        let fd = root.dir_mount_point(path, 0o755).unwrap();
        let dir = rootfs.join("lib/firmware/nvidia/999.88.77");
        assert_eq!(host_path_of(&fd), dir);
        let first = ino(&dir);
        root.dir_mount_point(path, 0o755).unwrap();
        assert_eq!(ino(&dir), first);
        host_symlink(&sandbox.outside, rootfs.join("lib/firmware/nvidia/1.2.3")).unwrap();
        let err = root
            .dir_mount_point(Path::new("/lib/firmware/nvidia/1.2.3"), 0o755)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot create mount point /lib/firmware/nvidia/1.2.3 in {}: it is a symbolic link",
                rootfs.display()
            )
        );
        let err = root
            .dir_mount_point(Path::new("/etc/ld.so.conf"), 0o755)
            .unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::RegularFile,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[test]
#[ignore = "needs root: makes device nodes"]
fn device_mount_points_check_existing_devices() {
    need_root("makes device nodes");
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let fd = root
            .device_mount_point(Path::new("/dev/nvidia0"), 195, 0)
            .unwrap();
        assert_eq!(host_path_of(&fd), rootfs.join("dev/nvidia0"));
        assert!(rootfs.join("dev/nvidia0").is_file());
        mkchar(&rootfs.join("dev/nvidiactl"), 195, 255);
        let fd = root
            .device_mount_point(Path::new("/dev/nvidiactl"), 195, 255)
            .unwrap();
        check_char_device(fd.as_fd(), 195, 255).unwrap();
        let err = check_char_device(fd.as_fd(), 195, 254).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is the character device 195:255, not the character device 195:254",
                rootfs.join("dev/nvidiactl").display()
            )
        );
        mkchar(&rootfs.join("dev/nvidia-uvm"), 1, 5);
        let err = root
            .device_mount_point(Path::new("/dev/nvidia-uvm"), 510, 0)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot create device mount point /dev/nvidia-uvm in {}: it is the character \
                 device 1:5, not the character device 510:0",
                rootfs.display()
            )
        );
        host_symlink("/dev/null", rootfs.join("dev/nvidia1")).unwrap();
        let err = root
            .device_mount_point(Path::new("/dev/nvidia1"), 195, 1)
            .unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::Symlink,
                    ..
                }
            ),
            "{err:?}"
        );
        let regular = root.resolve(Path::new("/etc/ld.so.conf")).unwrap();
        let err = check_char_device(regular.as_fd(), 1, 3).unwrap_err();
        assert!(err
            .to_string()
            .ends_with("is a regular file, not the character device 1:3"));
    }
}

#[test]
fn symlinks_are_made_by_rename_and_replace_only_links_and_files() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
        let link = Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so");
        root.symlink(link, "libcuda.so.1").unwrap();
        assert_eq!(
            std::fs::read_link(lib.join("libcuda.so")).unwrap(),
            Path::new("libcuda.so.1")
        );
        let first = ino(&lib.join("libcuda.so"));
        root.symlink(link, "libcuda.so.1").unwrap();
        assert_eq!(
            ino(&lib.join("libcuda.so")),
            first,
            "the same link is left alone"
        );
        root.symlink(link, "libcuda.so.999.88.77").unwrap();
        assert_eq!(
            std::fs::read_link(lib.join("libcuda.so")).unwrap(),
            Path::new("libcuda.so.999.88.77")
        );
        std::fs::write(lib.join("libnvidia-ml.so"), "stub").unwrap();
        root.symlink(
            Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"),
            "libnvidia-ml.so.1",
        )
        .unwrap();
        assert!(std::fs::symlink_metadata(lib.join("libnvidia-ml.so"))
            .unwrap()
            .is_symlink());
        std::fs::create_dir(lib.join("adir")).unwrap();
        let err = root
            .symlink(Path::new("/usr/lib/x86_64-linux-gnu/adir"), "x")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot create symbolic link /usr/lib/x86_64-linux-gnu/adir in {}: it is a directory",
                rootfs.display()
            )
        );
        mkfifo(&lib.join("afifo"));
        let err = root
            .symlink(Path::new("/usr/lib/x86_64-linux-gnu/afifo"), "x")
            .unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::Fifo,
                    ..
                }
            ),
            "{err:?}"
        );
        // A link whose parent is a link to outside lands inside the root.
        host_symlink(&sandbox.outside, rootfs.join("usr/lib64")).unwrap();
        mirror(&sandbox, &rootfs, "");
        root.symlink(Path::new("/usr/lib64/libcuda.so"), "libcuda.so.1")
            .unwrap();
        let inside = rootfs.join(sandbox.outside.strip_prefix("/").unwrap());
        assert!(std::fs::symlink_metadata(inside.join("libcuda.so"))
            .unwrap()
            .is_symlink());
        let leftovers: Vec<_> = std::fs::read_dir(&lib)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".nvc-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn write_file_replaces_atomically_and_never_follows() {
    let sandbox = Sandbox::new();
    let before = sandbox.snapshot();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let cache = Path::new("/etc/ld.so.cache");
        root.write_file(cache, b"one", 0o644).unwrap();
        let on_host = rootfs.join("etc/ld.so.cache");
        assert_eq!(std::fs::read(&on_host).unwrap(), b"one");
        assert_eq!(
            std::fs::metadata(&on_host).unwrap().permissions().mode() & 0o7777,
            0o644
        );
        root.write_file(cache, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&on_host).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&on_host).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        // A hard link to the old file keeps its content: the file was replaced.
        std::fs::hard_link(&on_host, rootfs.join("tmp/hard")).unwrap();
        root.write_file(cache, b"three", 0o644).unwrap();
        assert_eq!(std::fs::read(rootfs.join("tmp/hard")).unwrap(), b"two");
        // A link at the path is replaced, not followed.
        std::fs::remove_file(&on_host).unwrap();
        host_symlink(sandbox.outside.join("ld.so.cache"), &on_host).unwrap();
        root.write_file(cache, b"four", 0o644).unwrap();
        assert!(std::fs::symlink_metadata(&on_host).unwrap().is_file());
        assert_eq!(std::fs::read(&on_host).unwrap(), b"four");
        std::fs::create_dir(rootfs.join("etc/adir")).unwrap();
        let err = root
            .write_file(Path::new("/etc/adir"), b"x", 0o644)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot write /etc/adir in {}: it is a directory",
                rootfs.display()
            )
        );
        // Through a parent link to outside: inside the root.
        host_symlink(sandbox.outside.join("etc"), rootfs.join("etc2")).unwrap();
        mirror(&sandbox, &rootfs, "etc");
        root.write_file(Path::new("/etc2/ld.so.cache"), b"five", 0o644)
            .unwrap();
        let inside = rootfs.join(sandbox.outside.strip_prefix("/").unwrap());
        assert_eq!(
            std::fs::read(inside.join("etc/ld.so.cache")).unwrap(),
            b"five"
        );
        let leftovers: Vec<_> = std::fs::read_dir(rootfs.join("etc"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".nvc-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
    assert_eq!(sandbox.snapshot(), before);
}

#[test]
fn read_file_and_read_dir_read_only_regular_files_and_directories() {
    let sandbox = Sandbox::new();
    for resolver in RESOLVERS {
        let rootfs = sandbox.rootfs();
        let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
        let conf = root.read_file(Path::new("/etc/ld.so.conf"), 4096).unwrap();
        assert_eq!(conf, b"include /etc/ld.so.conf.d/*.conf\n");
        let err = root
            .read_file(Path::new("/etc/ld.so.conf"), 10)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read /etc/ld.so.conf in {}: it is larger than 10 bytes",
                rootfs.display()
            )
        );
        assert_eq!(
            root.read_file(Path::new("/etc/ld.so.conf"), 33)
                .unwrap()
                .len(),
            33
        );
        // A fifo is refused without being opened (opening it would block).
        mkfifo(&rootfs.join("etc/fifo"));
        let err = root.read_file(Path::new("/etc/fifo"), 10).unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::Fifo,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = root.read_file(Path::new("/etc"), 10).unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::Directory,
                    ..
                }
            ),
            "{err:?}"
        );
        host_symlink(
            sandbox.outside.join("ld.so.conf"),
            rootfs.join("etc/os-release"),
        )
        .unwrap();
        let err = root
            .read_file(Path::new("/etc/os-release"), 4096)
            .unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        host_symlink("ld.so.conf", rootfs.join("etc/alias")).unwrap();
        assert_eq!(root.read_file(Path::new("/etc/alias"), 4096).unwrap(), conf);

        let compat = Path::new("/usr/local/cuda/compat");
        std::fs::write(
            rootfs.join("usr/local/cuda/compat/libnvidia-ptxjitcompiler.so.1"),
            "",
        )
        .unwrap();
        assert_eq!(
            root.read_dir(compat, 10).unwrap(),
            ["libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"]
        );
        let err = root.read_dir(compat, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot list /usr/local/cuda/compat in {}: it has more than 1 entries",
                rootfs.display()
            )
        );
        host_symlink(
            sandbox.outside.join("compat"),
            rootfs.join("usr/local/cuda/compat2"),
        )
        .unwrap();
        assert!(root
            .read_dir(Path::new("/usr/local/cuda/compat2"), 10)
            .unwrap_err()
            .is_not_found());
        let err = root.read_dir(Path::new("/etc/ld.so.conf"), 10).unwrap_err();
        assert!(
            matches!(
                err,
                FsError::WrongType {
                    found: FileKind::RegularFile,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

// ---- mounts and namespaces, in forked children -------------------------------------

#[test]
#[ignore = "needs root: unmake under mounts"]
fn what_nvc_made_is_not_removed_while_another_mount_sits_on_it() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("unmake under mounts", || {
        let rootfs = sandbox.rootfs();
        rustix::mount::mount_bind(&rootfs, &rootfs).unwrap();
        let root = ContainerRoot::open(&rootfs).unwrap();
        let file = Path::new("/usr/bin/nvidia-smi");
        let dir = Path::new("/lib/firmware/nvidia/999.88.77");
        root.file_mount_point(file, 0o755).unwrap();
        root.dir_mount_point(dir, 0o755).unwrap();
        let made = root.made();
        // A volume or a host mount on each, in this (the host's) namespace.
        for p in [file, dir] {
            let at = rootfs.join(p.strip_prefix("/").unwrap());
            rustix::mount::mount_bind(&at, &at).unwrap();
        }
        for m in made
            .iter()
            .rev()
            .filter(|m| [file, dir].contains(&m.path()))
        {
            let err = root.unmake(m).unwrap_err();
            assert!(matches!(err, FsError::OtherMount { .. }), "{err:?}");
        }
        assert!(rootfs.join("usr/bin/nvidia-smi").is_file());
        assert!(rootfs.join("lib/firmware/nvidia/999.88.77").is_dir());
        // Once the mounts are gone, they are taken away.
        for p in [file, dir] {
            let at = rootfs.join(p.strip_prefix("/").unwrap());
            rustix::mount::unmount(&at, rustix::mount::UnmountFlags::empty()).unwrap();
        }
        for m in made.iter().rev() {
            assert_eq!(root.unmake(m).unwrap(), Unmade::Removed, "{m:?}");
        }
        assert!(!rootfs.join("usr/bin/nvidia-smi").exists());
        assert!(
            rootfs.join("lib/firmware/nvidia").is_dir()
                && !rootfs.join("lib/firmware/nvidia/999.88.77").exists()
        );
        drop(root);
        rustix::mount::unmount(&rootfs, rustix::mount::UnmountFlags::DETACH).unwrap();
    });
}

#[test]
#[ignore = "needs root: bind-mounts"]
fn bind_mounts_are_read_only_nosuid_nodev_before_they_are_attached() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("bind-mounts", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            let before = mounts();
            let lib = DetachedMount::bind(
                &sandbox.host.join("libcuda.so.999.88.77"),
                ro_nosuid_nodev(),
            )
            .unwrap();
            // nvc mounts nothing onto a bind mount.
            assert!(!lib.takes_mounts());
            // Already read-only while detached.
            let err = rustix::fs::openat(lib.dir_fd(), "", OFlags::WRONLY, Mode::empty());
            assert!(err.is_err());
            let vfs = rustix::fs::fstatvfs(lib.dir_fd()).unwrap();
            assert!(vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
            let target = root.file_mount_point(Path::new(LIB), 0o644).unwrap();
            lib.attach(&target).unwrap();

            let on_host = rootfs.join(LIB.trim_start_matches('/'));
            assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "host libcuda\n");
            let err = std::fs::OpenOptions::new()
                .write(true)
                .open(&on_host)
                .unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err:?}");
            let vfs = rustix::fs::statvfs(&on_host).unwrap();
            use rustix::fs::StatVfsMountFlags as F;
            assert!(
                vfs.f_flag.contains(F::RDONLY | F::NOSUID | F::NODEV),
                "{:?}",
                vfs.f_flag
            );
            assert!(!vfs.f_flag.contains(F::NOEXEC));

            let firmware = DetachedMount::bind(
                &sandbox.host.join("firmware"),
                MountAttrs {
                    noexec: true,
                    ..ro_nosuid_nodev()
                },
            )
            .unwrap();
            let target = root
                .dir_mount_point(Path::new("/lib/firmware/nvidia/999.88.77"), 0o755)
                .unwrap();
            firmware.attach(&target).unwrap();
            let gsp = rootfs.join("lib/firmware/nvidia/999.88.77/gsp.bin");
            assert_eq!(std::fs::read_to_string(&gsp).unwrap(), "host firmware\n");
            let vfs = rustix::fs::statvfs(&gsp).unwrap();
            assert!(vfs
                .f_flag
                .contains(F::RDONLY | F::NOSUID | F::NODEV | F::NOEXEC));
            let err =
                std::fs::write(rootfs.join("lib/firmware/nvidia/999.88.77/new"), "x").unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EROFS));

            // A device node: nosuid, noexec, but not nodev.
            let null = DetachedMount::bind(
                Path::new("/dev/null"),
                MountAttrs {
                    nosuid: true,
                    noexec: true,
                    ..MountAttrs::default()
                },
            )
            .unwrap();
            let target = root
                .device_mount_point(Path::new("/dev/nvidia0"), 1, 3)
                .unwrap();
            null.attach(&target).unwrap();
            // A mount point is another mount's: opened by its host path here.
            let dev = rustix::fs::open(
                rootfs.join("dev/nvidia0"),
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            check_char_device(dev.as_fd(), 1, 3).unwrap();
            std::fs::write(rootfs.join("dev/nvidia0"), "written to /dev/null").unwrap();

            // A directory cannot go onto a file.
            let dir =
                DetachedMount::bind(&sandbox.host.join("firmware"), ro_nosuid_nodev()).unwrap();
            let target = root
                .file_mount_point(Path::new("/etc/ld.so.conf"), 0o644)
                .unwrap();
            let err = dir.attach(&target).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!(
                    "cannot attach the bind mount of {} onto {}",
                    sandbox.host.join("firmware").display(),
                    rootfs.join("etc/ld.so.conf").display()
                )),
                "{err:?}"
            );
            assert!(new_mounts_outside(&before, &rootfs).is_empty());
            let err =
                DetachedMount::bind(&sandbox.host.join("missing"), ro_nosuid_nodev()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "cannot clone as a bind mount host path {}",
                    sandbox.host.join("missing").display()
                )
            );
        }
    });
}

#[test]
#[ignore = "needs root: mounts a tmpfs"]
fn tmpfs_is_populated_then_made_read_only_then_attached() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("mounts a tmpfs", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            let mask = DetachedMount::tmpfs(64 * 1024, 0o555).unwrap();
            // nvc's own tmpfs may take mounts (the GPU folders on the mask).
            assert!(mask.takes_mounts());
            write_at(
                mask.dir_fd(),
                "version",
                b"NVRM version: 999.88.77\n",
                0o444,
            )
            .unwrap();
            let gpus = mkdir_at(mask.dir_fd(), "gpus", 0o555).unwrap();
            write_at(gpus.as_fd(), "information", b"Model: fake\n", 0o444).unwrap();
            let err = write_at(mask.dir_fd(), "version", b"again", 0o444).unwrap_err();
            assert_eq!(err.to_string(), "cannot write version in a detached mount");
            let err = write_at(mask.dir_fd(), "../escape", b"x", 0o444).unwrap_err();
            assert!(matches!(err, FsError::Populate { .. }), "{err:?}");
            let err = mkdir_at(mask.dir_fd(), "..", 0o555).unwrap_err();
            assert!(matches!(err, FsError::Populate { .. }), "{err:?}");
            mask.set_attrs(MountAttrs {
                readonly: true,
                ..MountAttrs::default()
            })
            .unwrap();
            let err = write_at(mask.dir_fd(), "late", b"x", 0o444).unwrap_err();
            assert!(
                matches!(&err, FsError::Populate { source, .. } if source.raw_os_error() == Some(libc::EROFS)),
                "{err:?}"
            );
            let target = root
                .dir_mount_point(Path::new("/proc/driver/nvidia"), 0o555)
                .unwrap();
            mask.attach(&target).unwrap();
            let dir = rootfs.join("proc/driver/nvidia");
            assert_eq!(
                std::fs::read_to_string(dir.join("version")).unwrap(),
                "NVRM version: 999.88.77\n"
            );
            assert_eq!(
                std::fs::read_to_string(dir.join("gpus/information")).unwrap(),
                "Model: fake\n"
            );
            assert_eq!(
                std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
                0o555
            );
            let err = std::fs::write(dir.join("version"), "x").unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EROFS));
            use rustix::fs::StatVfsMountFlags as F;
            let vfs = rustix::fs::statvfs(&dir).unwrap();
            assert!(vfs
                .f_flag
                .contains(F::RDONLY | F::NOSUID | F::NODEV | F::NOEXEC));
            let statfs = rustix::fs::statfs(&dir).unwrap();
            assert_eq!(fs_magic(&statfs), i64::from(libc::TMPFS_MAGIC as u32));
        }
    });
}

/// What `readlink /proc/<pid>/ns/mnt` says.
fn mount_ns_of(pid: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap()
}

#[test]
#[ignore = "needs root: unshares mount namespaces"]
fn a_mount_cloned_in_one_namespace_attaches_in_another() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("unshares mount namespaces", || {
        let rootfs = sandbox.rootfs();
        // The clone is made in this namespace, as the hook makes it in the host's ...
        let lib = DetachedMount::bind(
            &sandbox.host.join("libcuda.so.999.88.77"),
            ro_nosuid_nodev(),
        )
        .unwrap();
        let first = rustix::fs::open(
            "/proc/self/ns/mnt",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let first_ns = mount_ns_of("self");
        // ... and attached after moving to another, as the hook does after setns.
        // SAFETY: the child is single-threaded and unshares no fd table.
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.unwrap();
        assert_ne!(mount_ns_of("self"), first_ns);
        let root = ContainerRoot::open(&rootfs).unwrap();
        let target = root.file_mount_point(Path::new(LIB), 0o644).unwrap();
        lib.attach(&target).unwrap();
        let on_host = rootfs.join(LIB.trim_start_matches('/'));
        assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "host libcuda\n");
        assert!(mounts().values().any(|at| at == &on_host));

        // A mount point opened in the first namespace cannot take a mount after moving:
        // open the ContainerRoot after entering the container's namespace.
        rustix::thread::move_into_link_name_space(
            first.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Mount),
        )
        .unwrap();
        assert_eq!(mount_ns_of("self"), first_ns);
        assert!(
            !mounts().values().any(|at| at == &on_host),
            "not in the first namespace"
        );
        assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "");
        let stale =
            DetachedMount::bind(&sandbox.host.join("nvidia-smi"), ro_nosuid_nodev()).unwrap();
        let err = stale.attach(&target).unwrap_err();
        assert!(
            matches!(&err, FsError::Attach { source, .. } if source.raw_os_error().is_some()),
            "{err:?}"
        );
    });
}

/// A process in a mount namespace of its own (as runc's container init waits in one),
/// killed on drop.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        let ours = mount_ns_of("self");
        let child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "60"])
            .spawn()
            .expect("this test needs unshare(1) from util-linux on PATH");
        let sleeper = Sleeper(child);
        let pid = sleeper.pid().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
            .ok()
            .as_ref()
            == Some(&ours)
            || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n"
        {
            assert!(Instant::now() < deadline, "unshare did not start sleep");
            std::thread::sleep(Duration::from_millis(5));
        }
        sleeper
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: enters mount namespaces"]
fn enter_mount_namespace_moves_into_the_process_namespace() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("enters mount namespaces", || {
        let rootfs = sandbox.rootfs();
        let test_process = rustix::process::getppid()
            .unwrap()
            .as_raw_nonzero()
            .to_string();
        for enter in [
            enter_mount_namespace as fn(i32) -> Result<(), FsError>,
            mount::enter_through_procfs_for_tests,
        ] {
            let sleeper = Sleeper::start();
            let pid = sleeper.pid();
            let ours = rustix::fs::open(
                "/proc/self/ns/mnt",
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let host_lib = DetachedMount::bind(
                &sandbox.host.join("libcuda.so.999.88.77"),
                ro_nosuid_nodev(),
            )
            .unwrap();
            enter(pid).unwrap();
            assert_eq!(mount_ns_of("self"), mount_ns_of(&pid.to_string()));
            // The hook's sequence: open the root in the container's namespace, make the
            // mount point, attach what was cloned in the host's.
            let root = ContainerRoot::open(&rootfs).unwrap();
            let target = root.file_mount_point(Path::new(LIB), 0o644).unwrap();
            host_lib.attach(&target).unwrap();
            let on_host = rootfs.join(LIB.trim_start_matches('/'));
            let visible = |pid: &str| {
                std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                    .unwrap()
                    .lines()
                    .any(|l| unescape(l.split(' ').nth(4).unwrap()) == on_host.to_string_lossy())
            };
            assert!(visible("self"));
            assert!(visible(&pid.to_string()));
            assert!(!visible(&test_process), "the host's namespace is untouched");
            rustix::thread::move_into_link_name_space(
                ours.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Mount),
            )
            .unwrap();
            assert!(!visible("self"), "the namespace we left is untouched");
            drop(sleeper);
        }
        // A process that is gone.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id() as i32;
        gone.wait().unwrap();
        let err = enter_mount_namespace(pid).unwrap_err();
        assert!(
            matches!(err, FsError::ProcessGone { pid: p } if p == pid),
            "{err:?}"
        );
        assert!(err.to_string().contains("exited before"), "{err}");
        let err = enter_mount_namespace(0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot enter the mount namespace of process 0"
        );
    });
}

#[test]
#[ignore = "needs root: enters mount namespaces"]
fn enter_mount_namespace_refuses_a_multithreaded_caller() {
    in_child("enters mount namespaces", || {
        let sleeper = Sleeper::start();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || rx.recv());
        let err = enter_mount_namespace(sleeper.pid()).unwrap_err();
        assert!(
            matches!(&err, FsError::Namespace { source, .. } if source.raw_os_error() == Some(libc::EINVAL)),
            "{err:?}"
        );
        tx.send(()).unwrap();
        thread.join().unwrap().unwrap();
    });
}

#[test]
#[ignore = "needs root: installs a seccomp filter"]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn detect_falls_back_without_openat2() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("installs a seccomp filter", || {
        // A seccomp filter answering ENOSYS to openat2, as on a kernel before 5.6.
        let filter = [
            libc::sock_filter {
                code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                jt: 0,
                jf: 0,
                k: 0, // offsetof(struct seccomp_data, nr)
            },
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: libc::SYS_openat2 as u32,
            },
            libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
            },
            libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ALLOW,
            },
        ];
        let program = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `program` points at `filter`, both alive for the call; the filter only
        // makes openat2 fail in this (single-threaded) child.
        let ret = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            )
        };
        assert_eq!(ret, 0, "seccomp: {}", io::Error::last_os_error());
        assert_eq!(Resolver::detect(), Resolver::FdWalk);
        let rootfs = sandbox.rootfs();
        host_symlink(
            &sandbox.outside,
            rootfs.join("usr/lib/x86_64-linux-gnu/escape"),
        )
        .unwrap();
        mirror(&sandbox, &rootfs, "");
        let root = ContainerRoot::open(&rootfs).unwrap();
        assert_eq!(root.resolver(), Resolver::FdWalk);
        let fd = root
            .file_mount_point(
                Path::new("/usr/lib/x86_64-linux-gnu/escape/libcuda.so.1"),
                0o644,
            )
            .unwrap();
        assert!(host_path_of(&fd).starts_with(&rootfs));
        root.write_file(Path::new("/etc/ld.so.cache"), b"cache", 0o644)
            .unwrap();
        // With openat2 forced, the same root fails closed.
        let forced = ContainerRoot::open_with(&rootfs, Resolver::Openat2).unwrap();
        let err = forced.resolve(Path::new("/etc")).unwrap_err();
        assert!(
            matches!(&err, FsError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSYS)),
            "{err:?}"
        );
    });
}

// ---- the hostile corpus -------------------------------------------------------------

/// Where in the rootfs a hostile thing is put, and whether a directory belongs there.
const LOCATIONS: &[(&str, bool)] = &[
    ("usr/lib/x86_64-linux-gnu", true),
    ("usr/bin", true),
    ("usr", true),
    ("etc", true),
    ("lib/firmware", true),
    ("lib/firmware/nvidia/999.88.77", true),
    ("proc", true),
    ("dev", true),
    ("usr/local/cuda/compat", true),
    ("etc/ld.so.cache", false),
    ("etc/ld.so.conf", false),
    ("usr/lib/x86_64-linux-gnu/libcuda.so.1", false),
    ("usr/lib/x86_64-linux-gnu/libcuda.so", false),
    ("usr/bin/nvidia-smi", false),
    ("dev/nvidia0", false),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Hostile {
    /// Nothing hostile (and no procfs inside): every operation must succeed.
    Clean,
    /// A link to the same name in the sentinel, by its absolute host path.
    Absolute,
    /// The same, where that path also exists inside the rootfs.
    AbsoluteMirrored,
    /// A link to a name that does not exist in the sentinel (a naive mkdir would make it).
    AbsoluteMissing,
    /// `../../../../…<sentinel>/name`.
    RelativeEscape,
    /// `../../..` (clamped to the root).
    DotDot,
    /// `/proc/self/root<sentinel>/name`.
    ProcSelfRoot,
    /// `/proc/1/cwd<sentinel>/name`.
    ProcOneCwd,
    /// `/proc/self/cwd/name` (the child's cwd is the sentinel).
    ProcSelfCwd,
    /// `/proc/self/fd/N/name`, N an fd of the sentinel.
    ProcSelfFd,
    /// 40 links to a real thing inside the root (allowed).
    Chain40,
    /// 41 links (one too many).
    Chain41,
    /// A link to itself.
    SelfLoop,
    /// Two links pointing at each other.
    Loop,
    /// A link to nowhere.
    Dangling,
    Fifo,
    Socket,
    Directory,
    RegularFile,
    CharDevice,
}

const HOSTILE: &[Hostile] = &[
    Hostile::Clean,
    Hostile::Absolute,
    Hostile::AbsoluteMirrored,
    Hostile::AbsoluteMissing,
    Hostile::RelativeEscape,
    Hostile::DotDot,
    Hostile::ProcSelfRoot,
    Hostile::ProcOneCwd,
    Hostile::ProcSelfCwd,
    Hostile::ProcSelfFd,
    Hostile::Chain40,
    Hostile::Chain41,
    Hostile::SelfLoop,
    Hostile::Loop,
    Hostile::Dangling,
    Hostile::Fifo,
    Hostile::Socket,
    Hostile::Directory,
    Hostile::RegularFile,
    Hostile::CharDevice,
];

/// Replaces `location` in `rootfs` by the hostile thing.
fn plant(
    sandbox: &Sandbox,
    rootfs: &Path,
    location: &str,
    is_dir: bool,
    hostile: Hostile,
    sentinel_fd: i32,
) {
    let at = rootfs.join(location);
    let name = Path::new(location).file_name().unwrap().to_str().unwrap();
    let outside = sandbox.outside.display().to_string();
    if hostile == Hostile::Clean {
        return;
    }
    if let Ok(meta) = std::fs::symlink_metadata(&at) {
        if meta.is_dir() {
            std::fs::remove_dir_all(&at).unwrap();
        } else {
            std::fs::remove_file(&at).unwrap();
        }
    }
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let make_real = |path: &Path| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if is_dir {
            std::fs::create_dir_all(path).unwrap();
        } else {
            std::fs::write(path, "inside\n").unwrap();
        }
    };
    let link = |target: String| host_symlink(target, &at).unwrap();
    match hostile {
        Hostile::Clean => {}
        Hostile::Absolute => link(format!("{outside}/{name}")),
        Hostile::AbsoluteMirrored => {
            make_real(&rootfs.join(format!("{}/{name}", outside.trim_start_matches('/'))));
            link(format!("{outside}/{name}"));
        }
        Hostile::AbsoluteMissing => link(format!("{outside}/missing-{name}")),
        Hostile::RelativeEscape => link(format!("{}{outside}/{name}", "../".repeat(12))),
        Hostile::DotDot => link("../../..".to_owned()),
        Hostile::ProcSelfRoot => link(format!("/proc/self/root{outside}/{name}")),
        Hostile::ProcOneCwd => link(format!("/proc/1/cwd{outside}/{name}")),
        Hostile::ProcSelfCwd => link(format!("/proc/self/cwd/{name}")),
        Hostile::ProcSelfFd => link(format!("/proc/self/fd/{sentinel_fd}/{name}")),
        Hostile::Chain40 | Hostile::Chain41 => {
            let links = if hostile == Hostile::Chain40 { 40 } else { 41 };
            let real = format!("real-{}", location.replace('/', "-"));
            make_real(&rootfs.join(&real));
            let chain = rootfs.join("chain").join(location.replace('/', "-"));
            std::fs::create_dir_all(&chain).unwrap();
            let inside = |i: usize| format!("/chain/{}/{i}", location.replace('/', "-"));
            link(inside(1));
            for i in 1..links {
                let target = if i + 1 == links {
                    format!("/{real}")
                } else {
                    inside(i + 1)
                };
                host_symlink(target, chain.join(i.to_string())).unwrap();
            }
        }
        Hostile::SelfLoop => link(name.to_owned()),
        Hostile::Loop => {
            host_symlink(name, at.with_file_name(format!("{name}.loop"))).unwrap();
            link(format!("{name}.loop"));
        }
        Hostile::Dangling => link(format!("{outside}-nowhere/{name}")),
        Hostile::Fifo => mkfifo(&at),
        Hostile::Socket => mksock(&at),
        Hostile::Directory => std::fs::create_dir(&at).unwrap(),
        Hostile::RegularFile => std::fs::write(&at, "a file\n").unwrap(),
        Hostile::CharDevice => mkchar(&at, 1, 5),
    }
}

type OpResult = Result<Option<OwnedFd>, FsError>;

/// The operations the hook does, each with the container path its error must name.
/// An operation's name, the container path its error must name, and the operation.
type Operation = (
    &'static str,
    &'static str,
    fn(&ContainerRoot, &Sandbox) -> OpResult,
);

fn operations() -> Vec<Operation> {
    fn no_marker(data: &[u8]) {
        assert!(
            !String::from_utf8_lossy(data).contains(MARKER),
            "read the sentinel: {}",
            String::from_utf8_lossy(data)
        );
    }
    vec![
        // Before it is mounted on: a mount point is another mount's.
        (
            "resolve nvidia-smi",
            "/usr/bin/nvidia-smi",
            |root, _| match root.resolve(Path::new("/usr/bin/nvidia-smi")) {
                Err(FsError::NotFound { .. }) => Ok(None),
                other => other.map(Some),
            },
        ),
        ("bind libcuda", LIB, |root, sandbox| {
            let mount = DetachedMount::bind(
                &sandbox.host.join("libcuda.so.999.88.77"),
                ro_nosuid_nodev(),
            )?;
            let target = root.file_mount_point(Path::new(LIB), 0o644)?;
            root.attach(mount, &target, Path::new(LIB))?;
            Ok(Some(target))
        }),
        ("bind nvidia-smi", "/usr/bin/nvidia-smi", |root, sandbox| {
            let mount = DetachedMount::bind(&sandbox.host.join("nvidia-smi"), ro_nosuid_nodev())?;
            let target = root.file_mount_point(Path::new("/usr/bin/nvidia-smi"), 0o755)?;
            root.attach(mount, &target, Path::new("/usr/bin/nvidia-smi"))?;
            Ok(Some(target))
        }),
        (
            "bind firmware",
            "/lib/firmware/nvidia/999.88.77",
            |root, sandbox| {
                let mount = DetachedMount::bind(&sandbox.host.join("firmware"), ro_nosuid_nodev())?;
                let target =
                    root.dir_mount_point(Path::new("/lib/firmware/nvidia/999.88.77"), 0o755)?;
                root.attach(mount, &target, Path::new("/lib/firmware/nvidia/999.88.77"))?;
                Ok(Some(target))
            },
        ),
        ("bind device", "/dev/nvidia0", |root, _| {
            let attrs = MountAttrs {
                nosuid: true,
                noexec: true,
                ..MountAttrs::default()
            };
            let mount = DetachedMount::bind(Path::new("/dev/null"), attrs)?;
            let target = root.device_mount_point(Path::new("/dev/nvidia0"), 1, 3)?;
            root.attach(mount, &target, Path::new("/dev/nvidia0"))?;
            Ok(Some(target))
        }),
        (
            "mask /proc/driver/nvidia",
            "/proc/driver/nvidia",
            |root, _| {
                let mask = DetachedMount::tmpfs(4096, 0o555)?;
                write_at(mask.dir_fd(), "version", b"masked\n", 0o444)?;
                mask.set_attrs(MountAttrs {
                    readonly: true,
                    ..MountAttrs::default()
                })?;
                let target = root.dir_mount_point(Path::new("/proc/driver/nvidia"), 0o555)?;
                root.attach(mask, &target, Path::new("/proc/driver/nvidia"))?;
                Ok(Some(target))
            },
        ),
        (
            "soname link",
            "/usr/lib/x86_64-linux-gnu/libcuda.so",
            |root, _| {
                let link = Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so");
                root.symlink(link, "libcuda.so.1")?;
                Ok(Some(
                    root.lookup(link, false)
                        .map_err(|e| root.err("check", link, e))?,
                ))
            },
        ),
        ("ld.so.cache", "/etc/ld.so.cache", |root, _| {
            let cache = Path::new("/etc/ld.so.cache");
            root.write_file(cache, b"glibc-ld.so.cache1.1", 0o644)?;
            Ok(Some(
                root.lookup(cache, false)
                    .map_err(|e| root.err("check", cache, e))?,
            ))
        }),
        (
            "mkdir vdpau",
            "/usr/lib/x86_64-linux-gnu/vdpau",
            |root, _| {
                let dir = root.mkdir_all(Path::new("/usr/lib/x86_64-linux-gnu/vdpau"), 0o755)?;
                Ok(dir.try_clone().ok())
            },
        ),
        ("read ld.so.conf", "/etc/ld.so.conf", |root, _| {
            no_marker(&root.read_file(Path::new("/etc/ld.so.conf"), 4096)?);
            Ok(None)
        }),
        ("read ld.so.cache", "/etc/ld.so.cache", |root, _| {
            no_marker(&root.read_file(Path::new("/etc/ld.so.cache"), 4096)?);
            Ok(None)
        }),
        ("list compat", "/usr/local/cuda/compat", |root, _| {
            let names = root.read_dir(Path::new("/usr/local/cuda/compat"), 64)?;
            assert!(
                !names.iter().any(|n| n == "outside-only"),
                "listed the sentinel"
            );
            Ok(None)
        }),
        // The poststop hook's removals, after everything above was made: what is not
        // still as made (a mount on it, the corpus's link or folder) is left.
        (
            "remove the soname link",
            "/usr/lib/x86_64-linux-gnu/libcuda.so",
            |root, _| {
                root.unmake(&Made::Link {
                    path: "/usr/lib/x86_64-linux-gnu/libcuda.so".into(),
                    target: "libcuda.so.1".into(),
                    previous: None,
                })?;
                Ok(None)
            },
        ),
        ("remove libcuda's mount point", LIB, |root, _| {
            // "bind libcuda" mounted on it: another mount's, so it stays.
            match root.unmake(&Made::File { path: LIB.into() }) {
                Err(FsError::OtherMount { .. }) | Ok(_) => Ok(None),
                Err(e) => Err(e),
            }
        }),
        (
            "remove the vdpau folder",
            "/usr/lib/x86_64-linux-gnu/vdpau",
            |root, _| {
                root.unmake(&Made::Dir {
                    path: "/usr/lib/x86_64-linux-gnu/vdpau".into(),
                })?;
                Ok(None)
            },
        ),
        ("resolve lib dir", "/usr/lib/x86_64-linux-gnu", |root, _| {
            let path = Path::new("/usr/lib/x86_64-linux-gnu");
            let _ = (root.is_dir(path), root.is_file(path));
            Ok(Some(root.resolve(path)?))
        }),
    ]
}

/// Runs every operation on a rootfs with one hostile thing in one place and checks the
/// sentinel, the mounts, returned fds and errors after each. Returns which succeeded.
fn run_case(
    sandbox: &Sandbox,
    resolver: Resolver,
    location: &str,
    is_dir: bool,
    hostile: Hostile,
    sentinel_fd: i32,
    expected: &BTreeMap<PathBuf, String>,
) -> (Vec<bool>, bool) {
    let rootfs = sandbox.rootfs();
    // A mount of its own, as a container's rootfs is, and detached afterwards with all
    // that was mounted in it, which keeps mountinfo short.
    rustix::mount::mount_bind(&rootfs, &rootfs).unwrap();
    if hostile != Hostile::Clean && location != "proc" {
        // As when the hook runs: runc has mounted the container's procfs.
        rustix::mount::mount(
            "proc",
            rootfs.join("proc"),
            "proc",
            MountFlags::empty(),
            None,
        )
        .unwrap();
    }
    plant(sandbox, &rootfs, location, is_dir, hostile, sentinel_fd);
    let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
    let before = mounts();
    let mut outcomes = Vec::new();
    let mut busy = false;
    for (name, path, op) in operations() {
        let case = format!("{resolver:?} {location} {hostile:?} {name}");
        let result = op(&root, sandbox);
        assert!(
            sandbox.snapshot() == *expected,
            "{case}: the sentinel changed"
        );
        let outside = new_mounts_outside(&before, &rootfs);
        assert!(
            outside.is_empty(),
            "{case}: mounts outside the rootfs: {outside:?}"
        );
        match &result {
            Ok(Some(fd)) => {
                let at = host_path_of(fd);
                assert!(at.starts_with(&rootfs), "{case}: returned {}", at.display());
            }
            Ok(None) => {}
            Err(err) => {
                let message = err.to_string();
                let names_path = Path::new(path)
                    .ancestors()
                    .filter(|a| *a != Path::new("/"))
                    .any(|a| message.contains(&format!("{} in {}", a.display(), rootfs.display())));
                let names_mount_point =
                    matches!(err, FsError::Attach { target, .. } if target.starts_with(&rootfs));
                assert!(
                    names_path || names_mount_point,
                    "{case}: the error does not name the path: {message}"
                );
            }
        }
        if hostile == Hostile::Clean {
            if let Err(err) = &result {
                panic!("{case}: a clean rootfs must work: {err:?}");
            }
        }
        busy |= result.as_ref().err().is_some_and(gave_up_on_eagain);
        outcomes.push(result.is_ok());
    }
    drop(root);
    rustix::mount::unmount(&rootfs, rustix::mount::UnmountFlags::DETACH).unwrap();
    (outcomes, busy)
}

/// Whether `err` is openat2's `EAGAIN` after all its retries: mounts and renames elsewhere
/// on a busy host (other tests) kept the kernel from finishing a walk through `..`, which
/// says nothing about where the path leads.
fn gave_up_on_eagain(err: &FsError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::EAGAIN) {
                return true;
            }
        }
        source = e.source();
    }
    false
}

#[test]
#[ignore = "needs root: mounts into hostile rootfs"]
fn the_hostile_corpus_changes_nothing_outside_the_root() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("mounts into hostile rootfs", || {
        std::env::set_current_dir(&sandbox.outside).unwrap();
        let sentinel = rustix::fs::open(
            &sandbox.outside,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let expected = sandbox.snapshot();
        let mut tables = Vec::new();
        for resolver in RESOLVERS {
            let mut table = Vec::new();
            for &(location, is_dir) in LOCATIONS {
                for &hostile in HOSTILE {
                    // Again while the kernel gave up for a busy host (at most 10 times):
                    // the tables compare where paths lead, not the host's load.
                    let mut tries = 0;
                    let outcomes = loop {
                        let (outcomes, busy) = run_case(
                            &sandbox,
                            resolver,
                            location,
                            is_dir,
                            hostile,
                            sentinel.as_raw_fd(),
                            &expected,
                        );
                        tries += 1;
                        if !busy || tries == 10 {
                            break outcomes;
                        }
                    };
                    table.push(((location, hostile), outcomes));
                }
            }
            tables.push(table);
        }
        // Both resolvers agree on what succeeds.
        let names: Vec<&str> = operations().iter().map(|(n, _, _)| *n).collect();
        let mut differences = Vec::new();
        for (a, b) in tables[0].iter().zip(&tables[1]) {
            for (i, (x, y)) in a.1.iter().zip(&b.1).enumerate() {
                if x != y {
                    differences.push(format!("{:?} {}: openat2 {x}, fd walk {y}", a.0, names[i]));
                }
            }
        }
        assert!(
            differences.is_empty(),
            "the resolvers disagree:\n{}",
            differences.join("\n")
        );
        let total: usize = tables[0].iter().map(|t| t.1.len()).sum();
        let ok: usize = tables[0]
            .iter()
            .map(|t| t.1.iter().filter(|&&x| x).count())
            .sum();
        raw_stderr(&format!(
            "hostile corpus: {ok} of {total} operations succeeded inside the root per resolver\n"
        ));
    });
}

// ---- races --------------------------------------------------------------------------

#[test]
#[ignore = "needs root: mounts while racing"]
fn racing_directory_and_symlink_swaps_change_nothing_outside() {
    // Made here, so the parent removes it: the child leaves with _exit.
    let sandbox = Sandbox::new();
    in_child("mounts while racing", || {
        std::env::set_current_dir(&sandbox.outside).unwrap();
        let expected = sandbox.snapshot();
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            rustix::mount::mount(
                "proc",
                rootfs.join("proc"),
                "proc",
                MountFlags::empty(),
                None,
            )
            .unwrap();
            let outside = sandbox.outside.display().to_string();
            // Each flipper swaps a real directory with a link to outside, atomically
            // (RENAME_EXCHANGE), in a tight loop.
            let flips = [
                (
                    "usr/lib",
                    "x86_64-linux-gnu",
                    format!("{outside}/x86_64-linux-gnu"),
                ),
                (
                    "usr/lib",
                    "x86_64-linux-gnu",
                    format!("{}{outside}", "../".repeat(12)),
                ),
                ("", "etc", format!("{outside}/etc")),
                ("", "etc", format!("/proc/self/root{outside}/etc")),
                ("usr/bin", "nvidia-smi", format!("{outside}/bin/nvidia-smi")),
                ("", "usr", format!("{outside}/usr")),
            ];
            // The absolute links also resolve inside the root, to these.
            for dir in ["x86_64-linux-gnu", "etc", "usr/lib", "usr/bin"] {
                mirror(&sandbox, &rootfs, dir);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let mut flippers = Vec::new();
            // Open every flipped directory before any flipper starts: a path through a
            // flipped one could lead outside.
            let mut flipped = Vec::new();
            for (i, (dir, name, target)) in flips.into_iter().enumerate() {
                let dir = rootfs.join(dir);
                let swap = format!(".swap-{i}");
                host_symlink(&target, dir.join(&swap)).unwrap();
                if !dir.join(name).exists() {
                    std::fs::write(dir.join(name), "inside\n").unwrap();
                }
                let dir = rustix::fs::open(&dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                    .unwrap();
                flipped.push((dir, swap, name.to_owned()));
            }
            for (dir, swap, name) in flipped {
                let stop = Arc::clone(&stop);
                flippers.push(std::thread::spawn(move || {
                    let mut swaps = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if rustix::fs::renameat_with(
                            &dir,
                            &swap,
                            &dir,
                            &name,
                            RenameFlags::EXCHANGE,
                        )
                        .is_ok()
                        {
                            swaps += 1;
                        }
                    }
                    swaps
                }));
            }
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            let before = mounts();
            let mut succeeded = 0;
            let mut attempted = 0;
            let check = |what: &str, result: Result<Option<OwnedFd>, FsError>| -> bool {
                match result {
                    Ok(Some(fd)) => {
                        let at = host_path_of(&fd);
                        assert!(
                            at.starts_with(&rootfs),
                            "{resolver:?} {what}: {}",
                            at.display()
                        );
                        true
                    }
                    Ok(None) => true,
                    Err(err) => {
                        assert!(
                            err.to_string()
                                .contains(&format!(" in {}", rootfs.display()))
                                || matches!(err, FsError::Attach { ref target, .. } if target.starts_with(&rootfs)),
                            "{resolver:?} {what}: {err:?}"
                        );
                        false
                    }
                }
            };
            for i in 0..3000 {
                let lib = root.file_mount_point(Path::new(LIB), 0o644);
                if i % 25 == 0 {
                    if let Ok(target) = &lib {
                        let mount = DetachedMount::bind(
                            &sandbox.host.join("libcuda.so.999.88.77"),
                            ro_nosuid_nodev(),
                        )
                        .unwrap();
                        let attached = mount.attach(target);
                        attempted += 1;
                        succeeded += usize::from(check("attach", attached.map(|()| None)));
                    }
                }
                attempted += 1;
                succeeded += usize::from(check("file_mount_point", lib.map(Some)));
                attempted += 1;
                succeeded += usize::from(check(
                    "bin",
                    root.file_mount_point(Path::new("/usr/bin/nvidia-smi"), 0o755)
                        .map(Some),
                ));
                attempted += 1;
                succeeded += usize::from(check(
                    "symlink",
                    root.symlink(
                        Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so"),
                        "libcuda.so.1",
                    )
                    .map(|()| None),
                ));
                attempted += 1;
                succeeded += usize::from(check(
                    "write_file",
                    root.write_file(Path::new("/etc/ld.so.cache"), b"cache", 0o644)
                        .map(|()| None),
                ));
                attempted += 1;
                succeeded += usize::from(check(
                    "mkdir_all",
                    root.mkdir_all(Path::new("/usr/lib/x86_64-linux-gnu/vdpau"), 0o755)
                        .map(|dir| dir.try_clone().ok()),
                ));
                attempted += 1;
                succeeded += usize::from(check(
                    "dir_mount_point",
                    root.dir_mount_point(Path::new("/etc/nvidia"), 0o755)
                        .map(Some),
                ));
                if let Ok(data) = root.read_file(Path::new("/etc/ld.so.conf"), 4096) {
                    assert!(!String::from_utf8_lossy(&data).contains(MARKER));
                }
            }
            stop.store(true, Ordering::Relaxed);
            let swaps: u64 = flippers.into_iter().map(|t| t.join().unwrap()).sum();
            assert!(
                sandbox.snapshot() == expected,
                "{resolver:?}: the sentinel changed"
            );
            let outside = new_mounts_outside(&before, &rootfs);
            assert!(
                outside.is_empty(),
                "{resolver:?}: mounts outside: {outside:?}"
            );
            assert!(
                swaps > 1000,
                "{resolver:?}: the flippers hardly ran ({swaps})"
            );
            assert!(
                succeeded > 1000,
                "{resolver:?}: too few operations succeeded ({succeeded})"
            );
            raw_stderr(&format!(
                "race {resolver:?}: {swaps} swaps, {succeeded} of {attempted} operations succeeded\n"
            ));
        }
    });
}

// ---- the rootfs's own mount: nothing read, made or mounted on another --------------

/// Mounts a tmpfs at `at` (in the child's private namespace).
fn mount_tmpfs(at: &Path) {
    std::fs::create_dir_all(at).unwrap();
    rustix::mount::mount(
        "tmpfs",
        at,
        "tmpfs",
        MountFlags::empty(),
        None::<&std::ffi::CStr>,
    )
    .unwrap();
}

#[track_caller]
fn assert_other_mount(err: FsError, path: &str, at: &str) {
    let text = err.to_string();
    assert!(matches!(err, FsError::OtherMount { .. }), "{err:?}");
    assert!(text.contains(path), "{text}");
    assert!(text.contains(at), "{text}");
    assert!(
        text.contains("not the container's root filesystem"),
        "{text}"
    );
}

#[test]
#[ignore = "needs root: mounts volumes inside a rootfs"]
fn nothing_is_read_made_or_mounted_on_another_mount() {
    let sandbox = Sandbox::new();
    in_child("mounts volumes inside a rootfs", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            let volume = rootfs.join("data");
            mount_tmpfs(&volume);
            std::fs::write(volume.join("ld.so.cache"), MARKER).unwrap();
            std::fs::create_dir(volume.join("fw")).unwrap();
            let volume_before = std::fs::read_dir(&volume).unwrap().count();
            // The image links its folders into the volume.
            std::fs::remove_dir_all(rootfs.join("etc")).unwrap();
            host_symlink("/data", rootfs.join("etc")).unwrap();
            std::fs::remove_dir_all(rootfs.join("lib/firmware/nvidia")).unwrap();
            host_symlink("../../data/fw", rootfs.join("lib/firmware/nvidia")).unwrap();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();

            let err = root
                .read_file(Path::new("/etc/ld.so.cache"), 1 << 20)
                .unwrap_err();
            assert_other_mount(err, "/etc/ld.so.cache", "/etc (a symbolic link to /data)");
            let err = root
                .write_file(Path::new("/etc/ld.so.cache"), b"new", 0o644)
                .unwrap_err();
            assert_other_mount(err, "/etc", "tmpfs");
            let err = root
                .file_mount_point(Path::new("/lib/firmware/nvidia/gsp.bin"), 0o644)
                .unwrap_err();
            assert_other_mount(err, "/lib/firmware/nvidia", "../../data/fw");
            let err = root
                .dir_mount_point(Path::new("/data/x"), 0o755)
                .unwrap_err();
            assert_other_mount(err, "/data", "/data");
            // The mount point itself, and whatever is below it.
            assert_other_mount(
                root.resolve(Path::new("/data")).unwrap_err(),
                "/data",
                "/data",
            );
            let err = root
                .file_mount_point(Path::new("/data"), 0o644)
                .unwrap_err();
            assert_other_mount(err, "/data", "/data");
            assert!(!root.is_dir(Path::new("/etc")));
            assert!(root.read_dir(Path::new("/data"), 10).is_err());
            assert_eq!(
                std::fs::read(volume.join("ld.so.cache")).unwrap(),
                MARKER.as_bytes()
            );
            assert_eq!(std::fs::read_dir(&volume).unwrap().count(), volume_before);
        }
    });
}

#[test]
#[ignore = "needs root: mounts procfs and sysfs inside a rootfs"]
fn procfs_and_sysfs_files_behind_links_are_never_read() {
    let sandbox = Sandbox::new();
    in_child("mounts procfs and sysfs inside a rootfs", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            rustix::mount::mount(
                "proc",
                rootfs.join("proc"),
                "proc",
                MountFlags::empty(),
                None::<&std::ffi::CStr>,
            )
            .unwrap();
            std::fs::create_dir_all(rootfs.join("sys")).unwrap();
            rustix::mount::mount(
                "sysfs",
                rootfs.join("sys"),
                "sysfs",
                MountFlags::empty(),
                None::<&std::ffi::CStr>,
            )
            .unwrap();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            for (target, fs) in [
                ("/proc/kmsg", "proc"),
                ("/proc/sys/kernel/hostname", "proc"),
                ("/sys/kernel/mm/transparent_hugepage/enabled", "sysfs"),
            ] {
                std::fs::remove_file(rootfs.join("etc/ld.so.cache")).ok();
                host_symlink(target, rootfs.join("etc/ld.so.cache")).unwrap();
                let start = Instant::now();
                let err = root
                    .read_file(Path::new("/etc/ld.so.cache"), 1 << 20)
                    .unwrap_err();
                assert!(start.elapsed() < Duration::from_secs(2), "{target} blocked");
                assert_other_mount(err, "/etc/ld.so.cache", fs);
                // Replaced, never written through.
                root.write_file(Path::new("/etc/ld.so.cache"), b"new", 0o644)
                    .unwrap();
                assert_eq!(
                    std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
                    b"new"
                );
            }
            std::fs::remove_dir_all(rootfs.join("usr/local/cuda/compat")).unwrap();
            host_symlink("/proc/self", rootfs.join("usr/local/cuda/compat")).unwrap();
            let err = root
                .read_dir(Path::new("/usr/local/cuda/compat"), 100)
                .unwrap_err();
            assert_other_mount(err, "/usr/local/cuda/compat", "proc");
        }
    });
}

#[test]
#[ignore = "needs root: mounts /dev and /proc inside a rootfs"]
fn submounts_are_the_runtime_mounts_or_refused() {
    let sandbox = Sandbox::new();
    in_child("mounts /dev and /proc inside a rootfs", || {
        for resolver in RESOLVERS {
            // No /dev mount: the rootfs's own folder; no /proc mount: no procfs.
            let rootfs = sandbox.rootfs();
            let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            let dev = root
                .submount(Path::new("/dev"), Filesystem::Tmpfs)
                .unwrap()
                .unwrap();
            let point = dev
                .device_mount_point(Path::new("/nvidia0"), 195, 0)
                .unwrap();
            assert_eq!(host_path_of(&point), rootfs.join("dev/nvidia0"));
            assert!(root
                .submount(Path::new("/proc"), Filesystem::Procfs)
                .unwrap()
                .is_none());

            // The runtime's tmpfs at /dev and procfs at /proc.
            mount_tmpfs(&rootfs.join("dev"));
            rustix::mount::mount(
                "proc",
                rootfs.join("proc"),
                "proc",
                MountFlags::empty(),
                None::<&std::ffi::CStr>,
            )
            .unwrap();
            let dev = root
                .submount(Path::new("/dev"), Filesystem::Tmpfs)
                .unwrap()
                .unwrap();
            let point = dev
                .device_mount_point(Path::new("/nvidia-caps/nvidia-cap1"), 511, 1)
                .unwrap();
            assert_eq!(
                host_path_of(&point),
                rootfs.join("dev/nvidia-caps/nvidia-cap1")
            );
            // Messages name the path as seen in the container.
            let err = dev.resolve(Path::new("/missing")).unwrap_err();
            assert!(err.to_string().contains("/dev/missing"), "{err}");
            let proc = root
                .submount(Path::new("/proc"), Filesystem::Procfs)
                .unwrap()
                .unwrap();
            assert!(proc.is_dir(Path::new("/sys/kernel")));
            // Not past the procfs: /proc/sys/fs/binfmt_misc may be a mount of its own.
            assert!(!proc.is_dir(Path::new("/../etc")) || root.is_dir(Path::new("/etc")));

            // Something else at /dev (a volume: here a bind of an ext4 folder).
            let other = sandbox.rootfs();
            rustix::mount::mount_bind(&sandbox.host, other.join("dev")).unwrap();
            let root = ContainerRoot::open_with(&other, resolver).unwrap();
            let err = root
                .submount(Path::new("/dev"), Filesystem::Tmpfs)
                .unwrap_err();
            assert!(matches!(err, FsError::WrongMount { .. }), "{err:?}");
            assert!(err.to_string().contains("not a tmpfs"), "{err}");
            // /dev as a link is never followed.
            let linked = sandbox.rootfs();
            std::fs::remove_dir(linked.join("dev")).unwrap();
            host_symlink("/tmp", linked.join("dev")).unwrap();
            let root = ContainerRoot::open_with(&linked, resolver).unwrap();
            assert!(root.submount(Path::new("/dev"), Filesystem::Tmpfs).is_err());
        }
    });
}

/// The optional fields of mount `id` in this namespace's mountinfo.
fn propagation_of(id: u64) -> String {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = text
        .lines()
        .find(|l| l.split(' ').next() == Some(&id.to_string()))
        .unwrap();
    line.split(' ')
        .skip(6)
        .take_while(|f| *f != "-")
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
#[ignore = "needs root: makes shared mounts"]
fn mounts_are_private_and_never_attached_under_a_shared_mount() {
    let sandbox = Sandbox::new();
    in_child("makes shared mounts", || {
        // A shared host source: its clone must not be its peer.
        rustix::mount::mount_bind(&sandbox.host, &sandbox.host).unwrap();
        rustix::mount::mount_change(&sandbox.host, MountPropagationFlags::SHARED).unwrap();
        let rootfs = sandbox.rootfs();
        rustix::mount::mount_bind(&rootfs, &rootfs).unwrap();
        let root = ContainerRoot::open(&rootfs).unwrap();
        let src = DetachedMount::bind(&sandbox.host.join("firmware"), ro_nosuid_nodev()).unwrap();
        let point = root
            .dir_mount_point(Path::new("/lib/firmware/nvidia/999.88.77"), 0o755)
            .unwrap();
        root.attach(src, &point, Path::new("/lib/firmware/nvidia/999.88.77"))
            .unwrap();
        let attached = mount_id(
            root.resolve(Path::new("/lib"))
                .map(|_| {
                    rustix::fs::open(
                        rootfs.join("lib/firmware/nvidia/999.88.77"),
                        OFlags::PATH | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .unwrap()
                })
                .unwrap()
                .as_fd(),
        )
        .unwrap();
        assert!(
            !propagation_of(attached).contains("shared:"),
            "{}",
            propagation_of(attached)
        );
        // The same rootfs made shared: nothing is attached under it.
        rustix::mount::mount_change(&rootfs, MountPropagationFlags::SHARED).unwrap();
        let root = ContainerRoot::open(&rootfs).unwrap();
        let src = DetachedMount::bind(&sandbox.host.join("nvidia-smi"), ro_nosuid_nodev()).unwrap();
        let point = root
            .file_mount_point(Path::new("/usr/bin/nvidia-smi"), 0o644)
            .unwrap();
        let err = root
            .attach(src, &point, Path::new("/usr/bin/nvidia-smi"))
            .unwrap_err();
        assert!(matches!(err, FsError::SharedMount { .. }), "{err:?}");
        assert!(err.to_string().contains("/usr/bin/nvidia-smi"), "{err}");
        assert!(!mounts()
            .values()
            .any(|m| m == &rootfs.join("usr/bin/nvidia-smi")));
    });
}

#[test]
#[ignore = "needs root: makes mount points"]
fn a_read_only_root_gets_only_empty_mount_points() {
    let sandbox = Sandbox::new();
    let before = sandbox.snapshot();
    in_child("makes mount points", || {
        for resolver in RESOLVERS {
            let rootfs = sandbox.rootfs();
            std::fs::write(rootfs.join("etc/ld.so.cache"), "image cache").unwrap();
            let was = walk_tree(&rootfs);
            let mut root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
            root.set_read_only();
            let read_only = |e: FsError| {
                assert!(matches!(e, FsError::ReadOnly { .. }), "{e:?}");
                assert!(e.to_string().contains("read-only (root.readonly)"), "{e}");
            };
            read_only(root.symlink(Path::new("/usr/bin/x"), "y").unwrap_err());
            read_only(
                root.write_file(Path::new("/etc/ld.so.cache"), b"x", 0o644)
                    .unwrap_err(),
            );
            assert_eq!(
                std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
                b"image cache"
            );
            // Empty mount points are made, as the runtime makes them.
            root.file_mount_point(Path::new(LIB), 0o644).unwrap();
            root.dir_mount_point(Path::new("/run/nvidia-persistenced"), 0o755)
                .unwrap();
            let now = walk_tree(&rootfs);
            for path in now.iter().filter(|p| !was.contains(p)) {
                let meta = std::fs::symlink_metadata(path).unwrap();
                assert!(
                    meta.is_dir() || (meta.is_file() && meta.len() == 0),
                    "{} is neither an empty file nor a folder",
                    path.display()
                );
            }
            assert_eq!(now.len(), was.len() + 3, "{now:?}");
        }
    });
    assert_eq!(sandbox.snapshot(), before);
}

fn walk_tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            out.extend(walk_tree(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
#[ignore = "needs root: enters mount namespaces"]
fn the_host_root_and_the_own_namespace_are_refused() {
    let err = ContainerRoot::open(Path::new("/")).unwrap_err();
    assert!(matches!(err, FsError::HostRoot { .. }), "{err:?}");
    assert!(
        err.to_string().contains("is the host's root directory"),
        "{err}"
    );
    assert!(matches!(
        refuse_host_root(Path::new("/")),
        Err(FsError::HostRoot { .. })
    ));
    // Another path to the same directory.
    let tmp = tempfile::tempdir().unwrap();
    host_symlink("/", tmp.path().join("root")).unwrap();
    assert!(matches!(
        refuse_host_root(&tmp.path().join("root")),
        Err(FsError::HostRoot { .. })
    ));
    refuse_host_root(tmp.path()).unwrap();

    in_child("enters mount namespaces", || {
        // A process in the caller's own namespace: a forged state's pid.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let err = enter_mount_namespace(sleeper.id() as i32).unwrap_err();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(matches!(err, FsError::OwnNamespace { .. }), "{err:?}");
        assert!(
            err.to_string().contains("the hook's own mount namespace"),
            "{err}"
        );
        let me = rustix::process::getpid().as_raw_nonzero().get();
        assert!(matches!(
            enter_mount_namespace(me),
            Err(FsError::OwnNamespace { .. })
        ));
    });
}

#[test]
#[ignore = "needs root: mounts a file"]
fn a_file_mount_covers_a_file_without_writing_it() {
    let sandbox = Sandbox::new();
    in_child("mounts a file", || {
        let rootfs = sandbox.rootfs();
        std::fs::write(rootfs.join("etc/ld.so.cache"), "old").unwrap();
        let mut root = ContainerRoot::open(&rootfs).unwrap();
        root.set_read_only();
        let point = root
            .file_mount_point(Path::new("/etc/ld.so.cache"), 0o644)
            .unwrap();
        let file = DetachedMount::file(b"new cache", 0o644, "a cache").unwrap();
        root.attach(file, &point, Path::new("/etc/ld.so.cache"))
            .unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
            b"new cache"
        );
        assert!(std::fs::write(rootfs.join("etc/ld.so.cache"), "x").is_err());
        rustix::mount::unmount(
            rootfs.join("etc/ld.so.cache"),
            rustix::mount::UnmountFlags::empty(),
        )
        .unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
            b"old"
        );
    });
}

#[test]
#[ignore = "needs root: makes shared and slave mounts"]
fn statmount_and_mountinfo_agree_on_what_is_shared() {
    let sandbox = Sandbox::new();
    in_child("makes shared and slave mounts", || {
        let base = sandbox.rootfs();
        let (private, shared, slave) = (base.join("tmp"), base.join("usr"), base.join("etc"));
        mount_tmpfs(&private);
        mount_tmpfs(&shared);
        rustix::mount::mount_change(&shared, MountPropagationFlags::SHARED).unwrap();
        rustix::mount::mount_bind(&shared, &slave).unwrap();
        rustix::mount::mount_change(&slave, MountPropagationFlags::DOWNSTREAM).unwrap();
        let listed: BTreeMap<u64, bool> = read_propagation().unwrap().into_iter().collect();
        for (dir, want) in [(&private, false), (&shared, true), (&slave, false)] {
            let fd = rustix::fs::open(dir, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
            let id = mount_id(fd.as_fd()).unwrap();
            assert_eq!(listed.get(&id), Some(&want), "mountinfo, {}", dir.display());
            // Kernels from 6.8 have statmount; older ones fall back to mountinfo.
            match walk::statmount_shared(fd.as_fd()) {
                Some(shared) => assert_eq!(shared, want, "statmount, {}", dir.display()),
                None => {
                    assert!(!kernel_at_least(6, 8), "statmount failed on a 6.8+ kernel");
                    raw_stderr("statmount(2) is not available: only mountinfo was checked\n");
                }
            }
        }
    });
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}
