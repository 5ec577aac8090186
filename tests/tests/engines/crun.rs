//! crun as podman's low-level runtime: Debian 13's crun 1.21 under Podman 5.4 and Debian
//! 14's crun 1.28 under Podman 5.8, with nvc-hook from hooks.d and with CDI, and crun as
//! the real runtime of nvc-runtime.
//!
//! crun refuses this machine's hybrid cgroups (v1 controllers, and a cgroup2 mount at
//! `/sys/fs/cgroup/unified` that holds the hugetlb controller): "cgroups in hybrid mode not
//! supported, drop all controllers from cgroupv2". Its engines therefore run with the
//! cgroup2 mount hidden from their mount namespace (`Podman::with_legacy_cgroups`), which is
//! what a host with systemd's legacy hierarchy shows; the v1 device cgroup is the host's and
//! is enforced: PROBE's `open 195:M` lines must show exactly the selected GPUs allowed.

use std::path::Path;

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, EngineRoot};

use super::podman::{
    assert_podman5_gpu_containers, podman5, podman_hooks_dir, version_in, Refusal,
};
use super::World;

/// `root`'s podman (whose version has `podman`) with its crun (`crun`), nvc-hook from
/// hooks.d and nvc's CDI spec: the checks of [`assert_podman5_gpu_containers`].
fn crun_under_podman(root: &EngineRoot, podman: &str, crun: &str) {
    let w = World::new();
    let label = format!(
        "{} with {}",
        version_in(root, "podman", podman),
        version_in(root, "crun", crun)
    );
    let engine = podman5(&w, root, "crun", &podman_hooks_dir(&w)).with_legacy_cgroups();
    assert_podman5_gpu_containers(&w, engine, Refusal::InLog, &label);
}

#[test]
fn podman5_with_crun_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    crun_under_podman(&root, "podman version 5.4.", "crun version 1.21");
}

#[test]
fn podman58_with_crun_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    crun_under_podman(&root, "podman version 5.8.", "crun version 1.28");
}

/// Podman 5.8 running nvc-runtime (`--runtime`), whose config, at the path a user's is
/// (`/etc/nvc/config.toml`: podman passes its environment, and with it `NVC_CONFIG`, to
/// the runtime's `create` alone, not to `start` or `delete`), names crun by name as the
/// runtime; no hooks.d. The same checks: the `NVIDIA_VISIBLE_DEVICES` requests are now
/// nvc-runtime's, which puts the devices in the spec for crun to make and allow; the log
/// shows crun was what it ran.
#[test]
fn nvc_runtime_runs_gpu_containers_with_crun_under_podman58() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let label = format!(
        "{} with nvc-runtime over {}",
        version_in(&root, "podman", "podman version 5.8."),
        version_in(&root, "crun", "crun version 1.28")
    );
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
