//! GPU containers through podman, with nvc-hook from a hooks.d folder that
//! `nvc runtime configure --runtime podman` writes.

use std::ffi::OsStr;
use std::path::PathBuf;

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, Podman};

use super::{assert_gpus, assert_refused, assert_untouched, nvc_configure, World, IMAGE, PROBE};

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
