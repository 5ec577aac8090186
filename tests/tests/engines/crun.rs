//! crun as podman's low-level runtime: Debian 13's crun 1.21 under Podman 5.4 and Debian
//! 14's crun 1.28 under Podman 5.8, with nvc-hook from hooks.d and with CDI, and crun as
//! the real runtime of nvc-runtime.
//!
//! Rootless podman with crun is here too (see `rootless.rs` for what a rootless container
//! can be asked).
//!
//! crun refuses this machine's hybrid cgroups (v1 controllers, and a cgroup2 mount at
//! `/sys/fs/cgroup/unified` that holds the hugetlb controller): "cgroups in hybrid mode not
//! supported, drop all controllers from cgroupv2". Its engines therefore run with the
//! cgroup2 mount hidden from their mount namespace (`Podman::with_legacy_cgroups`), which is
//! what a host with systemd's legacy hierarchy shows; the v1 device cgroup is the host's and
//! is enforced: PROBE's `open 195:M` lines must show exactly the selected GPUs allowed.

use std::path::Path;

use nvc_tests::workspace_bin;

use super::podman::{
    assert_podman5_gpu_containers, check_podman5, podman5, Refusal, User, DEBIAN13, DEBIAN14,
};
use super::World;

#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn podman5_with_crun_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN13, "crun", User::Root);
}

#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn podman58_with_crun_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN14, "crun", User::Root);
}

/// Rootless podman (see `rootless.rs`) with crun, Debian's default runtime for podman.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn rootless_podman58_with_crun_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN14, "crun", User::Rootless);
}

/// Podman 5.8 running nvc-runtime (`--runtime`), whose config, at the path a user's is
/// (`/etc/nvc/config.toml`: podman passes its environment, and with it `NVC_CONFIG`, to
/// the runtime's `create` alone, not to `start` or `delete`), names crun by name as the
/// runtime; no hooks.d. The same checks: the `NVIDIA_VISIBLE_DEVICES` requests are now
/// nvc-runtime's, which puts the devices in the spec for crun to make and allow; the log
/// shows crun was what it ran.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn nvc_runtime_runs_gpu_containers_with_crun_under_podman58() {
    let w = World::new();
    let root = DEBIAN14.root();
    let label = DEBIAN14
        .label(&root, "crun")
        .replace(" with ", " with nvc-runtime over ");
    let etc_nvc = w.path("etc-nvc");
    std::fs::create_dir_all(&etc_nvc).unwrap();
    let text = std::fs::read_to_string(&w.config).unwrap();
    let runtimes = text
        .lines()
        .find(|l| l.starts_with("runtimes = "))
        .unwrap_or_else(|| panic!("no runtimes line in {text}"));
    let crun_config = text.replace(runtimes, "runtimes = [\"crun\"]");
    std::fs::write(etc_nvc.join("config.toml"), crun_config).unwrap();
    let no_hooks = w.path("no-hooks.d");
    std::fs::create_dir_all(&no_hooks).unwrap();

    // What crun needs here (see `podman5`); podman's runtime is nvc-runtime.
    let engine = podman5(
        &w,
        &root,
        &workspace_bin("nvc-runtime").to_string_lossy(),
        &no_hooks,
    )
    .with_legacy_cgroups()
    .with_bind_at(&etc_nvc, Path::new("/etc/nvc"));
    assert_podman5_gpu_containers(&w, engine, Refusal::OnStderr, &label);
    let log = w.nvc_log();
    assert!(
        log.contains("exec /usr/bin/crun") && !log.contains("exec /usr/bin/runc"),
        "{label}: nvc-runtime did not run crun alone:\n{log}"
    );
}
