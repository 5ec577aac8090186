//! The rootfs's own mount: what the hook reads, creates or mounts onto is on the mount
//! `root.path` is, never on another one that a link from the image reaches (a volume,
//! /proc, /sys, runc's /dev tmpfs).

use super::*;

/// What a path the hook reads may lead to instead of an image file: a file that blocks
/// or never ends, another file system's file or folder, a special file in the rootfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocker {
    /// Blocks once the host's kernel log is drained, and reading it drains it.
    Kmsg,
    /// A procfs file: the reader's hostname.
    ProcSysFile,
    /// A procfs file of the container's init.
    ProcEnviron,
    /// A procfs folder.
    ProcDir,
    /// A sysfs file.
    SysFile,
    /// A sysfs folder.
    SysDir,
    /// runc's /dev tmpfs: an endless read.
    DevZero,
    /// A tmpfs folder runc mounts.
    DevShm,
    /// A fifo inside the rootfs: opening it for reading blocks.
    Fifo,
    /// A character device node inside the rootfs (1:5, zero).
    CharDevice,
}

impl Blocker {
    const ALL: [Blocker; 10] = [
        Blocker::Kmsg,
        Blocker::ProcSysFile,
        Blocker::ProcEnviron,
        Blocker::ProcDir,
        Blocker::SysFile,
        Blocker::SysDir,
        Blocker::DevZero,
        Blocker::DevShm,
        Blocker::Fifo,
        Blocker::CharDevice,
    ];

    /// The link's target, as seen in the container.
    fn path(self) -> &'static str {
        match self {
            Blocker::Kmsg => "/proc/kmsg",
            Blocker::ProcSysFile => "/proc/sys/kernel/hostname",
            // Not /proc/self/...: the hook is not in the container's pid namespace, whose
            // procfs runc mounted, so /proc/self leads nowhere for it.
            Blocker::ProcEnviron => "/proc/1/environ",
            Blocker::ProcDir => "/proc/sys/kernel",
            Blocker::SysFile => "/sys/kernel/mm/transparent_hugepage/enabled",
            Blocker::SysDir => "/sys/class",
            Blocker::DevZero => "/dev/zero",
            Blocker::DevShm => "/dev/shm",
            Blocker::Fifo => "/.blockers/fifo",
            Blocker::CharDevice => "/.blockers/zero",
        }
    }

    /// Links `inner` in `rootfs` to it, making the fifo or node first.
    fn plant(self, rootfs: &Path, inner: &str) {
        let made = |program: &str, args: &[&str]| {
            let p = host_path(rootfs, self.path());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let status = Command::new(program).arg(&p).args(args).status().unwrap();
            assert!(status.success(), "{program} {}", p.display());
        };
        match self {
            Blocker::Fifo => made("mkfifo", &[]),
            Blocker::CharDevice => made("mknod", &["c", "1", "5"]),
            _ => {}
        }
        replace_with_link(rootfs, inner, self.path());
    }
}

/// The container's cache is a regular file nvc wrote, not the link.
const CACHE_REPLACED: (&str, &str) = (
    "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
    "cache-replaced",
);
/// The container's loader finds the driver's libcuda through the cache.
const LIBCUDA_FOUND: (&str, &str) = (
    "nvc-probe 2>&1 | grep -q libcuda=ok && echo libcuda-found",
    "libcuda-found",
);

fn lib64_check() -> (String, String) {
    (
        format!("[ -f /usr/lib64/libcuda.so.{VERSION} ] && echo libraries-in-lib64"),
        "libraries-in-lib64".to_string(),
    )
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn links_from_read_paths_to_blockers_are_never_read_and_the_container_starts_in_time() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    for path in ["/etc/ld.so.cache", "/usr/local/cuda/compat", LIB] {
        for blocker in Blocker::ALL {
            let case = Case::new(
                format!("{path} -> {}", blocker.path()),
                path,
                move |rootfs, _| blocker.plant(rootfs, path),
                Expect::Starts,
            );
            cases.push(match path {
                // Not read (a blocking or endless read, the host's kernel log), and
                // replaced by a regular file.
                "/etc/ld.so.cache" => case
                    .checking(CACHE_REPLACED.0, CACHE_REPLACED.1)
                    .checking(LIBCUDA_FOUND.0, LIBCUDA_FOUND.1),
                // Not listed: no compat libraries.
                "/usr/local/cuda/compat" => case.checking(LIBCUDA_FOUND.0, LIBCUDA_FOUND.1),
                // Not a folder on the rootfs's mount: the libraries go to /usr/lib64.
                _ => {
                    let (command, line) = lib64_check();
                    case.checking(&command, &line)
                }
            });
        }
    }
    run_cases(&lab, &cases, Lab::nvc_bounded, "", WORKERS);
}

// ---------------------------------------------------------------------------------------
// Links into a volume.

/// Paths the hook writes or mounts under, and where an image links them into the volume.
const INTO_THE_VOLUME: &[(&str, &str)] = &[
    ("/etc", VOLUME_AT),
    ("/lib/firmware", VOLUME_AT),
    ("/lib/firmware/nvidia/999.88.77", "/data/fw"),
    ("/usr/bin", VOLUME_AT),
    ("/usr/share/vulkan/icd.d", VOLUME_AT),
    ("/run/nvidia-persistenced", VOLUME_AT),
    (LIB, VOLUME_AT),
];

/// The container's user cannot write to a [`Volume::NotTheUsers`] volume.
const USER_CANNOT_WRITE: (&str, &str) = (
    "if touch /data/by-the-user 2>/dev/null; then echo user-wrote; else echo user-cannot-write; fi",
    "user-cannot-write",
);

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn links_into_a_volume_are_refused_and_leave_it_and_the_host_unchanged() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    for kind in [Volume::Private, Volume::Shared, Volume::NotTheUsers] {
        // Controls: without a GPU the volume is mounted, unchanged, nothing is left
        // mounted under it, and its user cannot write to it.
        let control = Case::new(
            format!("[{kind:?} volume] control, no GPU"),
            VOLUME_AT,
            |_, _| {},
            Expect::Starts,
        )
        .without_gpus()
        .with_volume(kind)
        .checking(
            "[ -f /data/volume-file ] && echo volume-mounted",
            "volume-mounted",
        );
        cases.push(match kind {
            Volume::NotTheUsers => control.checking(USER_CANNOT_WRITE.0, USER_CANNOT_WRITE.1),
            _ => control,
        });
        for &(path, target) in INTO_THE_VOLUME {
            let plant = move |rootfs: &Path, _: &Path| replace_with_link(rootfs, path, target);
            let name = format!("[{kind:?} volume] {path} -> {target}");
            let case = if path == LIB {
                let (command, line) = lib64_check();
                Case::new(name, path, plant, Expect::Starts).checking(&command, &line)
            } else {
                Case::new(name, path, plant, Expect::Refused(OTHER_MOUNT))
            };
            let case = case.with_volume(kind);
            cases.push(match kind {
                Volume::NotTheUsers => case.checking(USER_CANNOT_WRITE.0, USER_CANNOT_WRITE.1),
                _ => case,
            });
        }
    }
    // One at a time: a mount that propagates to the host would show in every other
    // case's snapshot of the host's mount table.
    run_cases(&lab, &cases, Lab::nvc_bounded, "", 1);
}
