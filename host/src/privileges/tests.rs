//! Tests of the privilege limits. Dropping capabilities is for good, so every test that
//! drops any runs in a forked child (`container::tests::in_child`: its own mount
//! namespace, failures on stderr, a failed exit status for the parent), and reads what the
//! kernel says from `/proc/thread-self/status` at each phase. They need root, and fail
//! saying so without it.

use super::*;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::cgroup::{CgroupDir, DeviceProgram, Insn, CGROUP2_SUPER_MAGIC};
use crate::container::tests::in_child;
use crate::container::{ContainerRoot, DetachedMount, MountAttrs};

/// A uid that no user of the test machine has: the owner of the "image".
const IMAGE_UID: u32 = 100_000;

fn union_of(kernel: Kernel, phases: &[Phase]) -> CapSet {
    phases
        .iter()
        .fold(CapSet::EMPTY, |all, p| all.union(kernel.needs(*p)))
}

/// The errno an error, or one of its sources, carries.
fn errno_of(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut at = Some(error);
    while let Some(e) = at {
        if let Some(n) = e
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(n);
        }
        at = e.source();
    }
    None
}

#[track_caller]
fn assert_errno<T: fmt::Debug, E: std::error::Error + 'static>(
    result: Result<T, E>,
    errno: i32,
    what: &str,
) {
    match result {
        Ok(v) => panic!("{what}: worked ({v:?}), expected errno {errno}"),
        Err(e) => assert_eq!(
            errno_of(&e),
            Some(errno),
            "{what}: {}",
            libnvc::report::error_chain(&e)
        ),
    }
}

/// For tests that make root's fixtures before `in_child`, which says the same.
fn need_root(what: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root: {what}"
    );
}

#[track_caller]
fn status() -> Status {
    Status::read().unwrap()
}

/// `capset` raising `extra` into the effective and permitted sets.
fn raise(extra: CapSet) -> rustix::io::Result<()> {
    let now = rt::capabilities(None)?;
    rt::set_capabilities(
        None,
        CapabilitySets {
            effective: now.effective | extra.to_rustix(),
            permitted: now.permitted | extra.to_rustix(),
            inheritable: now.inheritable,
        },
    )
}

fn tmpfs() -> Result<DetachedMount, crate::container::FsError> {
    DetachedMount::tmpfs(4096, 0o755)
}

fn load_program() -> Result<DeviceProgram, crate::cgroup::CgroupError> {
    DeviceProgram::load(
        &[
            Insn::mov_imm(libnvc::devcgroup::bpf::Reg::R0, 1),
            Insn::exit(),
        ],
        "nvc_test_caps",
    )
}

// ---- without root --------------------------------------------------------------------

#[test]
fn sets_are_shown_with_the_kernels_names() {
    assert_eq!(CapSet::EMPTY.to_string(), "none");
    assert_eq!(
        Phase::EnterContainer.needs().to_string(),
        "cap_sys_chroot,cap_sys_ptrace,cap_sys_admin"
    );
    assert_eq!(CapSet::of(40).to_string(), "cap_checkpoint_restore");
    // One the kernel may add later.
    assert_eq!(
        CapSet::of(41).union(CapSet::of(0)).to_string(),
        "cap_chown,cap_41"
    );
    assert_eq!(CapSet::of(64), CapSet::EMPTY);
    assert_eq!(
        CapSet::from_bits(0x1f).numbers().collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
}

#[test]
fn status_files_are_read_as_the_kernel_writes_them() {
    let text = "Name:\tnvc-hook\nNoNewPrivs:\t1\nCapInh:\t0000000000000000\n\
                CapPrm:\t0000000000200002\nCapEff:\t0000000000200000\n\
                CapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\nSeccomp:\t0\n";
    let s = Status::parse(text).unwrap();
    assert_eq!(s.effective, CapSet::SYS_ADMIN);
    assert_eq!(s.permitted, CapSet::SYS_ADMIN.union(CapSet::DAC_OVERRIDE));
    assert_eq!(s.bounding.bits(), 0x1ff_feff_ffff);
    assert!(s.no_new_privs && s.inheritable.is_empty() && s.ambient.is_empty());
    assert!(s.to_string().starts_with(
        "effective cap_sys_admin; permitted cap_dac_override,cap_sys_admin; inheritable none"
    ));
    let e = Status::parse("CapEff:\t0\n").unwrap_err();
    assert!(e.to_string().contains("has no CapPrm line"), "{e}");
    let e = Status::parse(&text.replace("0000000000200000", "zz")).unwrap_err();
    assert!(e.to_string().contains("CapEff"), "{e}");
}

#[test]
fn older_kernels_need_more_to_load_a_device_program() {
    let new = Kernel {
        knows_cap_bpf: true,
        charges_memlock: false,
    };
    let old = Kernel {
        knows_cap_bpf: false,
        charges_memlock: true,
    };
    let prepare = Phase::DeviceCgroupPrepare;
    assert_eq!(new.needs(prepare), CapSet::BPF.union(CapSet::NET_ADMIN));
    assert_eq!(
        old.needs(prepare),
        CapSet::SYS_ADMIN
            .union(CapSet::NET_ADMIN)
            .union(CapSet::SYS_RESOURCE)
    );
    for phase in [Phase::Rootfs, Phase::DeviceCgroupApply, Phase::State] {
        assert_eq!(old.needs(phase), phase.needs());
    }
    for (release, before) in [
        ("5.10.0-23-amd64", true),
        ("4.18.0-513.el8.x86_64", true),
        ("5.11.0", false),
        ("6.18.44-fc-v657", false),
        ("10.0", false),
        ("weird", false),
    ] {
        assert_eq!(release_before(release, (5, 11)), before, "{release}");
    }
}

#[test]
fn the_plans_hold_what_their_programs_need_and_no_more() {
    let kernel = Kernel {
        knows_cap_bpf: true,
        charges_memlock: false,
    };
    let hook = CapSet::DAC_READ_SEARCH
        .union(CapSet::DAC_OVERRIDE)
        .union(CapSet::SYS_ADMIN)
        .union(CapSet::SYS_CHROOT)
        .union(CapSet::SYS_PTRACE)
        .union(CapSet::BPF)
        .union(CapSet::NET_ADMIN);
    assert_eq!(union_of(kernel, PRESTART), hook);
    assert_eq!(union_of(kernel, ATTACH), hook);
    assert_eq!(union_of(kernel, DETACH), hook);
    // Taking away what was made needs neither mounts nor namespaces.
    assert_eq!(
        union_of(kernel, POSTSTOP),
        CapSet::DAC_READ_SEARCH.union(CapSet::DAC_OVERRIDE)
    );
    for plan in [PRESTART, POSTSTOP, ATTACH, DETACH] {
        assert_eq!(plan.first(), Some(&Phase::Host));
        for phase in plan {
            let needs = phase.needs();
            for never in [
                CapSet::of(0),
                CapSet::FOWNER,
                CapSet::SETPCAP,
                CapSet::of(27),
            ] {
                assert!(!needs.contains(never), "{phase} needs {never}");
            }
        }
    }
}

// ---- as root, in forked children ------------------------------------------------------

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn bound_keeps_in_every_set_only_what_the_plan_needs() {
    in_child("bound_keeps_in_every_set_only_what_the_plan_needs", || {
        let before = status();
        let all = union_of(Kernel::running(), PRESTART);
        let privileges = Privileges::bound(PRESTART).unwrap();
        let now = status();
        assert!(now.no_new_privs, "{now}");
        assert_eq!(now.bounding, before.bounding.intersection(all), "{now}");
        assert_eq!(now.permitted, before.permitted.intersection(all), "{now}");
        assert_eq!(now.effective, CapSet::EMPTY, "{now}");
        assert_eq!(now.inheritable, CapSet::EMPTY, "{now}");
        assert_eq!(now.ambient, CapSet::EMPTY, "{now}");
        assert_eq!(privileges.effective(), now.effective);
        assert_eq!(privileges.permitted(), now.permitted);
        assert_eq!(privileges.phase(), None);
        assert!(
            privileges
                .to_string()
                .starts_with("bound: effective none; permitted "),
            "{privileges}"
        );
        // Bound for good: a capability outside the plan cannot come back.
        assert_eq!(raise(CapSet::FOWNER), Err(Errno::PERM));
        assert_eq!(raise(CapSet::SETPCAP), Err(Errno::PERM));
    });
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn each_phase_has_exactly_its_needs_and_never_regains_what_was_dropped() {
    in_child(
        "each_phase_has_exactly_its_needs_and_never_regains_what_was_dropped",
        || {
            let kernel = Kernel::running();
            let had = status().permitted;
            let mut privileges = Privileges::bound(PRESTART).unwrap();
            let mut dropped = CapSet::EMPTY;
            let mut last_permitted = status().permitted;
            for (i, phase) in PRESTART.iter().enumerate() {
                privileges.enter(*phase).unwrap();
                let now = status();
                let later = union_of(kernel, &PRESTART[i..]);
                assert_eq!(
                    now.effective,
                    kernel.needs(*phase).intersection(had),
                    "{phase}: {now}"
                );
                assert_eq!(now.permitted, later.intersection(had), "{phase}: {now}");
                assert_eq!(privileges.effective(), now.effective, "{phase}");
                assert_eq!(privileges.permitted(), now.permitted, "{phase}");
                assert_eq!(privileges.phase(), Some(*phase));
                assert_eq!(
                    privileges.to_string(),
                    format!(
                        "phase {phase}: effective {}; permitted {}",
                        now.effective, now.permitted
                    )
                );
                assert!(now.no_new_privs);
                dropped = dropped.union(last_permitted.without(now.permitted));
                last_permitted = now.permitted;
                for n in dropped.numbers() {
                    let cap = CapSet::of(n);
                    assert_eq!(raise(cap), Err(Errno::PERM), "{phase} regained {cap}");
                }
            }
            // By the end, everything the hook needs in its namespaces went.
            assert!(dropped.contains(
                CapSet::SYS_CHROOT
                    .union(CapSet::SYS_PTRACE)
                    .union(CapSet::NET_ADMIN)
                    .union(CapSet::BPF)
                    .intersection(had)
            ));
            // A phase left behind is not entered again, and nothing changes.
            let e = privileges.enter(Phase::EnterContainer).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains("phase enter-container is not in the plan after phase state")
                    && msg.contains("the plan: host, undo, host, sources, device-cgroup-prepare"),
                "{msg}"
            );
            assert_eq!(status().permitted, last_permitted);
            privileges.finish().unwrap();
            let end = status();
            assert_eq!(
                (end.effective, end.permitted),
                (CapSet::EMPTY, CapSet::EMPTY)
            );
            assert_eq!(raise(CapSet::SYS_ADMIN), Err(Errno::PERM));
            assert_eq!(privileges.phase(), None);
            assert_eq!(
                privileges.to_string(),
                "finished: effective none; permitted none"
            );
            let e = privileges.enter(Phase::State).unwrap_err().to_string();
            assert!(e.contains("after the finish"), "{e}");
        },
    );
}

/// A process in a mount namespace of its own, with every capability and not dumpable, as
/// runc's init is while the prestart hook runs. Killed when dropped.
struct Init {
    pid: i32,
}

impl Init {
    /// Forks it from this (single-threaded, still privileged) child.
    fn start() -> Init {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the caller is a single-threaded test child; the new process only makes
        // system calls and never returns.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: plain system calls on this process; it ends with its parent, and
            // never leaves the loop but by a signal.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    libc::_exit(1);
                }
                libc::prctl(libc::PR_SET_DUMPABLE, 0);
                libc::write(fds[1], b"x".as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut byte = [0u8; 1];
        // SAFETY: reads one byte into `byte` from the pipe made above.
        let n = unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 1, "the init process did not start");
        Init { pid }
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        // SAFETY: kills and reaps our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// A rootfs whose files belong to [`IMAGE_UID`], with a `/usr/lib` of mode 0555 (as
/// Fedora's), a host library to mount, and a 0600 file in a 0700 folder of the image's
/// user.
struct Tree {
    _tmp: tempfile::TempDir,
    rootfs: PathBuf,
    host_lib: PathBuf,
    private: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let tmp = tempfile::Builder::new()
            .prefix("nvc-host-privileges-")
            .tempdir()
            .unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let rootfs = base.join("rootfs");
        let lib = rootfs.join("usr/lib");
        std::fs::create_dir_all(&lib).unwrap();
        let private = base.join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::write(private.join("config.json"), "{}").unwrap();
        let host_lib = base.join("libnvc-test.so.1");
        std::fs::write(&host_lib, "host library").unwrap();
        for path in [
            rootfs.as_path(),
            &rootfs.join("usr"),
            &lib,
            &private,
            &private.join("config.json"),
        ] {
            std::os::unix::fs::chown(path, Some(IMAGE_UID), Some(IMAGE_UID)).unwrap();
        }
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&lib, 0o555);
        mode(&private, 0o700);
        mode(&private.join("config.json"), 0o600);
        Tree {
            _tmp: tmp,
            rootfs,
            host_lib,
            private,
        }
    }
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn the_kernel_refuses_what_a_phase_lacks_and_allows_what_it_has() {
    need_root("the_kernel_refuses_what_a_phase_lacks_and_allows_what_it_has");
    let tree = Tree::new();
    in_child(
        "the_kernel_refuses_what_a_phase_lacks_and_allows_what_it_has",
        || {
            let init = Init::start();
            let mut privileges = Privileges::bound(&[
                Phase::Host,
                Phase::Sources,
                Phase::DeviceCgroupPrepare,
                Phase::LeaveContainer,
                Phase::EnterContainer,
                Phase::Rootfs,
                Phase::ProcMask,
                Phase::State,
            ])
            .unwrap();
            let lib = Path::new("/usr/lib/libnvc-test.so.1");

            privileges.enter(Phase::Host).unwrap();
            // A bundle in someone's private folder is read ...
            let mut text = String::new();
            std::fs::File::open(tree.private.join("config.json"))
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, "{}");
            // ... but nothing is written in the image, mounted, or loaded.
            assert_errno(
                std::fs::File::create(tree.rootfs.join("usr/lib/x")),
                libc::EACCES,
                "a file in a 0555 folder, as host",
            );
            assert_errno(tmpfs(), libc::EPERM, "a tmpfs, as host");
            assert_errno(load_program(), libc::EPERM, "a device program, as host");

            privileges.enter(Phase::Sources).unwrap();
            let source = DetachedMount::bind(&tree.host_lib, MountAttrs::default()).unwrap();

            privileges.enter(Phase::DeviceCgroupPrepare).unwrap();
            let _program = load_program().unwrap();
            assert_errno(
                DetachedMount::bind(&tree.host_lib, MountAttrs::default()),
                libc::EPERM,
                "a bind mount, when preparing the device cgroup",
            );

            privileges.enter(Phase::LeaveContainer).unwrap();
            // Without ptrace access to the container's init, its namespace is not seen.
            assert_errno(
                crate::container::enter_mount_namespace(init.pid),
                libc::EACCES,
                "entering the container without cap_sys_ptrace",
            );

            privileges.enter(Phase::EnterContainer).unwrap();
            crate::container::enter_mount_namespace(init.pid).unwrap();

            privileges.enter(Phase::Rootfs).unwrap();
            let root = ContainerRoot::open(&tree.rootfs).unwrap();
            let point = root.file_mount_point(lib, 0o644).unwrap();
            root.attach(source, &point, lib).unwrap();
            assert_eq!(
                std::fs::read(tree.rootfs.join("usr/lib/libnvc-test.so.1")).unwrap(),
                b"host library"
            );

            privileges.enter(Phase::ProcMask).unwrap();
            // The mask as ProcMask makes it: a 0555 tmpfs, filled before it is made
            // read-only.
            let mask = crate::container::DetachedMount::tmpfs(1 << 20, 0o555).unwrap();
            crate::container::write_at(mask.dir_fd(), "version", b"NVRM", 0o444).unwrap();
            crate::container::mkdir_at(mask.dir_fd(), "gpus", 0o555).unwrap();

            privileges.enter(Phase::State).unwrap();
            assert_errno(tmpfs(), libc::EPERM, "a tmpfs, when saving the record");
            drop(init);
        },
    );
}

/// The unified hierarchy's mount: `/sys/fs/cgroup` on a v2 host, `/sys/fs/cgroup/unified`
/// on a hybrid one.
fn unified_root() -> PathBuf {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| crate::cgroup::filesystem_magic(p).ok() == Some(CGROUP2_SUPER_MAGIC))
        .unwrap_or_else(|| {
            panic!("this host mounts no cgroup2 file system at /sys/fs/cgroup or /sys/fs/cgroup/unified: the v2 device program cannot be tested here")
        })
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn replacing_a_device_program_needs_the_apply_phase() {
    need_root("replacing_a_device_program_needs_the_apply_phase");
    let cgroup = unified_root().join(format!("nvc-test-caps-{}", std::process::id()));
    std::fs::create_dir(&cgroup).unwrap();
    in_child("replacing_a_device_program_needs_the_apply_phase", || {
        let dir = CgroupDir::open_v2(&cgroup).unwrap();
        // The runtime's program, attached as runc attaches it.
        let runtimes = load_program().unwrap();
        dir.attach_device_program(&runtimes, crate::cgroup::Attach::Multi)
            .unwrap();
        let old = runtimes.id().unwrap();
        let mut privileges =
            Privileges::bound(&[Phase::DeviceCgroupPrepare, Phase::DeviceCgroupApply]).unwrap();
        privileges.enter(Phase::DeviceCgroupPrepare).unwrap();
        let ours = load_program().unwrap();
        // The runtime's program is opened by id to be replaced: cap_sys_admin.
        assert_errno(
            crate::devcgroup::put_in_place(&dir, &ours, false),
            libc::EPERM,
            "replacing the program when preparing",
        );
        assert_eq!(dir.device_programs().unwrap().ids, [old]);
        privileges.enter(Phase::DeviceCgroupApply).unwrap();
        assert_eq!(
            crate::devcgroup::put_in_place(&dir, &ours, false).unwrap(),
            Some(old)
        );
        assert_eq!(dir.device_programs().unwrap().ids, [ours.id().unwrap()]);
    });
    // Its programs go with it.
    std::fs::remove_dir(&cgroup).unwrap();
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn a_program_the_hook_runs_gets_no_capability() {
    in_child("a_program_the_hook_runs_gets_no_capability", || {
        let mut privileges = Privileges::bound(&[Phase::Host, Phase::Rootfs]).unwrap();
        privileges.enter(Phase::Rootfs).unwrap();
        let out = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                "grep -E '^(CapEff|CapPrm|CapInh|CapAmb|NoNewPrivs)' /proc/self/status",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        for line in [
            "CapEff:\t0000000000000000",
            "CapPrm:\t0000000000000000",
            "CapInh:\t0000000000000000",
            "CapAmb:\t0000000000000000",
            "NoNewPrivs:\t1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    });
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn without_root_every_phase_is_entered_with_what_there_is() {
    in_child(
        "without_root_every_phase_is_entered_with_what_there_is",
        || {
            // SAFETY: changes this single-threaded child's ids; with every uid non-zero the
            // kernel clears its capabilities.
            unsafe {
                assert_eq!(libc::setresgid(65534, 65534, 65534), 0);
                assert_eq!(libc::setresuid(65534, 65534, 65534), 0);
            }
            let before = status();
            assert_eq!(before.permitted, CapSet::EMPTY);
            let mut privileges = Privileges::bound(PRESTART).unwrap();
            let now = status();
            assert!(now.no_new_privs);
            // No cap_setpcap: the bounding set stays, no_new_privs makes it harmless.
            assert_eq!(now.bounding, before.bounding);
            for phase in PRESTART {
                privileges.enter(*phase).unwrap();
                assert_eq!(status().effective, CapSet::EMPTY, "{phase}");
            }
            privileges.enter(Phase::State).unwrap();
            assert_errno(tmpfs(), libc::EPERM, "a tmpfs, without root");
        },
    );
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn in_a_user_namespace_the_limits_hold_within_it() {
    in_child("in_a_user_namespace_the_limits_hold_within_it", || {
        // As rootless Podman runs the hook: every capability, in a user namespace.
        // SAFETY: the child is single-threaded and shares no fd table.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER) }.unwrap();
        let before = status();
        assert!(before
            .effective
            .contains(CapSet::SYS_ADMIN.union(CapSet::SETPCAP)));
        let mut privileges = Privileges::bound(&[Phase::Rootfs, Phase::Undo]).unwrap();
        let now = status();
        let all = CapSet::SYS_ADMIN.union(CapSet::DAC_OVERRIDE);
        assert_eq!((now.bounding, now.permitted), (all, all), "{now}");
        privileges.enter(Phase::Rootfs).unwrap();
        // SAFETY: as above.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }.unwrap();
        privileges.enter(Phase::Undo).unwrap();
        assert_eq!(status().effective, CapSet::DAC_OVERRIDE);
        // SAFETY: as above.
        let again = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) };
        assert_eq!(again, Err(Errno::PERM));
    });
}

#[test]
#[ignore = "needs root: sets and checks capabilities in a child process"]
fn a_link_to_a_process_out_of_reach_is_named_as_unfollowable() {
    let tmp = tempfile::Builder::new()
        .prefix("nvc-host-privileges-")
        .tempdir()
        .unwrap();
    let rootfs = tmp.path().canonicalize().unwrap();
    std::fs::create_dir(rootfs.join("proc")).unwrap();
    std::os::unix::fs::symlink("/proc/1/root", rootfs.join("etc")).unwrap();
    in_child(
        "a_link_to_a_process_out_of_reach_is_named_as_unfollowable",
        || {
            // The runtime's procfs, whose process 1 (the host's init here) holds every
            // capability: without cap_sys_ptrace, its root link fails with EACCES.
            rustix::mount::mount(
                "proc",
                rootfs.join("proc"),
                "proc",
                rustix::mount::MountFlags::empty(),
                None,
            )
            .unwrap();
            let mut privileges = Privileges::bound(&[Phase::Rootfs]).unwrap();
            privileges.enter(Phase::Rootfs).unwrap();
            for resolver in [
                crate::container::Resolver::Openat2,
                crate::container::Resolver::FdWalk,
            ] {
                let root = ContainerRoot::open_with(&rootfs, resolver).unwrap();
                let e = root
                    .mkdir_all(Path::new("/etc/nvc-test"), 0o755)
                    .unwrap_err();
                assert!(
                    matches!(e, crate::container::FsError::UnfollowableLink { .. }),
                    "{resolver:?}: {e}"
                );
            }
        },
    );
}
