//! GPU containers through podman, with nvc-hook from a hooks.d folder that
//! `nvc runtime configure --runtime podman` writes.

use std::ffi::OsStr;
use std::path::PathBuf;

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, EngineRoot, Podman};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_untouched, nvc_configure, World, IMAGE,
    PROBE,
};

/// `<hooks>/oci-nvc-hook.json`: written by `nvc runtime configure --runtime podman` for the
/// workspace's nvc-hook, plus `NVC_CONFIG` in the hook's environment (the test's config is
/// not /etc/nvc/config.toml).
fn podman_hooks_dir(w: &World) -> PathBuf {
    let dir = w.path("hooks.d");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("oci-nvc-hook.json");
    let hook = workspace_bin("nvc-hook");
    let args = [
        OsStr::new("--runtime"),
        OsStr::new("podman"),
        OsStr::new("--config"),
        path.as_os_str(),
        OsStr::new("--hook-path"),
        hook.as_os_str(),
    ];
    nvc_configure(&args);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        json["hook"]["path"],
        hook.to_string_lossy().as_ref(),
        "{json}"
    );
    let env = json["hook"]["env"].as_array_mut().unwrap();
    env.push(format!("NVC_CONFIG={}", w.config.display()).into());
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    dir
}

#[test]
fn podman_runs_nvc_hook_from_its_hooks_dir() {
    let w = World::new();
    let podman = Podman::new(&w.path("podman"), &podman_hooks_dir(&w))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let gpus = w.gpus();
    let run = |env: &[&str]| {
        // Podman's default capabilities lack CAP_MKNOD, which PROBE's device cgroup check
        // uses.
        let mut opts: Vec<String> = vec!["--cap-add".into(), "MKNOD".into()];
        opts.extend(w.fake_proc_flags());
        for e in env {
            opts.extend(["-e".to_string(), e.to_string()]);
        }
        podman.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());

    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("podman NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=1"]),
        &gpus[1..2],
        &context("podman NVIDIA_VISIBLE_DEVICES=1"),
    );
    assert_untouched(&run(&[]), "podman without NVIDIA_VISIBLE_DEVICES");
    assert_refused(
        &run(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
        ]),
        "warp",
        "podman NVIDIA_DRIVER_CAPABILITIES=compute,warp",
    );

    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

/// Debian 13's Podman 5.4 with runc 1.1.15, from a root of their own (see
/// `nvc_tests::EngineRoot`): nvc-hook from the hooks.d file, and CDI with the spec
/// `nvc cdi generate` writes, by index and by the UUID NVIDIA's device plugin names GPUs
/// by. (Its crun 1.21 refuses this machine's hybrid cgroups; it runs where cgroups are v2.)
#[test]
fn podman5_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let version = root.version("podman");
    assert!(version.contains("podman version 5."), "{version}");
    // CDI: the spec nvc generates for this host, as podman's /etc/cdi.
    let cdi = w.cdi_spec_dir();
    let hooks = podman_hooks_dir(&w);
    let bin_dir = workspace_bin("nvc-hook").parent().unwrap().to_path_buf();
    let podman = Podman::in_root(
        &root,
        "runc",
        &w.path("podman5"),
        &hooks,
        &[w.dir.path(), &bin_dir],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
    .with_cdi_dir(&cdi);
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let gpus = w.gpus();
    let run = |opts: &[&str]| {
        let mut all: Vec<String> = vec!["--cap-add".into(), "MKNOD".into()];
        all.extend(w.fake_proc_flags());
        all.extend(opts.iter().map(|o| o.to_string()));
        podman.run(&all, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| format!("podman 5 ({version}): {what}\nnvc log:\n{}", w.nvc_log());

    assert_gpus(
        &run(&["-e", "NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("hooks.d, NVIDIA_VISIBLE_DEVICES=all"),
    );
    let modeset = ["/dev/nvidia-modeset 195:254"];
    assert_gpus_with(
        &run(&["--device", "nvidia.com/gpu=1"]),
        &gpus[1..2],
        &modeset,
        &context("CDI nvidia.com/gpu=1"),
    );
    let by_uuid = format!("nvidia.com/gpu={}", gpus[2].uuid);
    assert_gpus_with(
        &run(&["--device", &by_uuid]),
        &gpus[2..3],
        &modeset,
        &context(&format!("CDI {by_uuid}")),
    );
    assert_untouched(&run(&[]), "podman 5 without a GPU request");
    assert_refused(
        &run(&["-e", "NVIDIA_VISIBLE_DEVICES=7"]),
        "GPU index 7 does not exist",
        "podman 5 NVIDIA_VISIBLE_DEVICES=7",
    );

    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}
