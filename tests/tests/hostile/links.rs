//! Links at every path nvc touches: out of the rootfs, through /proc, chains, loops,
//! dangling; with and without openat2.

use super::*;

/// Every path inside the image that nvc reads, writes, lists or mounts onto (or that
/// holds one), the folders of the loaders' json files, and the IPC endpoints' folders.
const LINKED_PATHS: &[&str] = &[
    LIB,
    "/usr/bin",
    "/lib/firmware",
    "/lib/firmware/nvidia/999.88.77",
    "/etc",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf.d",
    "/usr/local/cuda/compat",
    "/dev",
    "/proc/driver/nvidia",
    "/usr/share/vulkan/icd.d",
    "/usr/share/vulkan/implicit_layer.d",
    "/usr/share/glvnd/egl_vendor.d",
    "/usr/share/egl/egl_external_platform.d",
    "/etc/vulkan/icd.d",
    "/run/nvidia-persistenced",
    "/run/nvidia-fabricmanager",
    "/tmp/nvidia-mps",
    "/var/run",
];

/// What a link of `kind` at `path` must end in, and what the container then checks.
fn link_case(path: &'static str, kind: LinkKind) -> Case {
    let name = format!("{path} -> {}", kind.name());
    let plant = move |rootfs: &Path, outside: &Path| kind.plant(rootfs, path, outside);
    match path {
        // runc (1.1) makes its /dev links by joining the rootfs path, which follows a
        // linked /dev out of the rootfs before any hook runs: nvc-runtime refuses it.
        "/dev" => Case::new(
            name,
            path,
            plant,
            Expect::Refused("/dev is a symbolic link"),
        ),
        // A link is never a mount point.
        "/tmp/nvidia-mps" => Case::new(name, path, plant, Expect::Refused("it is a symbolic link")),
        // The library folder is a directory only if it resolves to one inside the rootfs;
        // else the libraries go to /usr/lib64, which the image has.
        LIB => Case::new(name, path, plant, Expect::Starts).checking(
            &format!("[ -f /usr/lib64/libcuda.so.{VERSION} ] && echo libraries-in-lib64"),
            "libraries-in-lib64",
        ),
        // The cache is read through the link (inside the rootfs) and written by
        // replacing the link, never through it.
        "/etc/ld.so.cache" => Case::new(name, path, plant, Expect::Starts).checking(
            "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
            "cache-replaced",
        ),
        // Listed inside the rootfs (compat), or never touched by nvc (the image's own
        // configuration; /proc, over which runc mounts procfs).
        "/etc/ld.so.conf.d"
        | "/usr/local/cuda/compat"
        | "/proc/driver/nvidia"
        | "/etc/vulkan/icd.d"
        | "/var/run" => Case::new(name, path, plant, Expect::Starts),
        // A folder nvc mounts into: nothing is made along the link.
        _ if kind.unfollowable() => Case::new(
            name,
            path,
            plant,
            Expect::Refused("cannot be followed inside the container"),
        ),
        _ => Case::new(
            name,
            path,
            plant,
            Expect::Refused("is a dangling symbolic link"),
        ),
    }
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn hostile_links_never_reach_outside_the_rootfs() {
    let lab = Lab::new();
    let cases: Vec<Case> = LINKED_PATHS
        .iter()
        .flat_map(|path| LinkKind::ALL.map(|kind| link_case(path, kind)))
        .collect();
    run_all(&lab, &cases);
    // The same with the hook's fd walk, as on kernels without openat2: the same outcomes.
    run_all_with(&lab, &cases, Lab::nvc_without_openat2, "[no openat2] ");
    assert!(
        lab.nvc_log().contains("paths resolved with FdWalk"),
        "the hook never ran without openat2"
    );
}
