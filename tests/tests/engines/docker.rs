//! GPU containers through a private dockerd: `--runtime=nv` with nvc-runtime, and `--gpus`
//! with nvc-hook as the NVIDIA hook.

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, Dockerd, EngineRoot};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_untouched, configure_docker,
    start_dockerd, World, IMAGE, PROBE,
};

#[test]
fn docker_runtime_nv_gives_the_requested_gpus() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let gpus = w.gpus();
    let run = |env: &[&str]| {
        let mut opts: Vec<String> = vec!["--runtime=nv".into()];
        opts.extend(w.fake_proc_flags());
        for e in env {
            opts.extend(["-e".to_string(), e.to_string()]);
        }
        dockerd.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };

    let out = run(&["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_gpus(
        &out,
        &gpus,
        &context("--runtime=nv NVIDIA_VISIBLE_DEVICES=all"),
    );
    let out = run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[2].uuid)]);
    assert_gpus(&out, &gpus[2..3], &context("--runtime=nv one GPU by UUID"));
    let out = run(&[]);
    assert_untouched(&out, "--runtime=nv without NVIDIA_VISIBLE_DEVICES");
    let out = run(&["NVIDIA_VISIBLE_DEVICES=7"]);
    assert_refused(&out, "GPU index 7", "--runtime=nv NVIDIA_VISIBLE_DEVICES=7");

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

#[test]
fn docker_gpus_flag_runs_nvc_hook() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let gpus = w.gpus();
    let run = |gpus_flag: &str| {
        let mut opts: Vec<String> = vec!["--gpus".into(), gpus_flag.into()];
        opts.extend(w.fake_proc_flags());
        dockerd.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };

    assert_gpus(&run("all"), &gpus, &context("--gpus all"));
    assert_gpus(&run("device=1"), &gpus[1..2], &context("--gpus device=1"));
    assert_gpus(&run("2"), &gpus[0..2], &context("--gpus 2"));
    let out = dockerd.run(&w.fake_proc_flags(), IMAGE, &["sh", "-c", PROBE]);
    assert_untouched(&out, "no --gpus, no --runtime");

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

/// Debian 13's Docker 26.1 (its containerd 1.7 and runc 1.1.15) from a root of their own
/// (see `nvc_tests::EngineRoot`), set up by `nvc runtime configure`: `--runtime=nv`,
/// `--gpus`, and Docker's own CDI (`features.cdi`, `--device nvidia.com/gpu=...`) with the
/// spec `nvc cdi generate` writes, by the UUID NVIDIA's device plugin names GPUs by.
#[test]
fn docker26_runs_gpu_containers_through_nv_gpus_and_cdi() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let (daemon_json, alias_dir) = configure_docker(&w);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&daemon_json).unwrap()).unwrap();
    json["features"] = serde_json::json!({"cdi": true});
    std::fs::write(&daemon_json, json.to_string()).unwrap();
    let cdi = w.cdi_spec_dir();
    let path = std::env::join_paths(
        std::iter::once(alias_dir).chain(std::env::split_paths(&nvc_tests::engine_path())),
    )
    .unwrap();
    let bin_dir = workspace_bin("nvc-hook").parent().unwrap().to_path_buf();
    let dockerd = Dockerd::start_in(
        &root,
        &w.path("docker26"),
        &daemon_json,
        &[("PATH", &path), ("NVC_CONFIG", w.config.as_os_str())],
        &[w.dir.path(), &bin_dir],
        Some(&cdi),
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let version = dockerd.docker(&["version", "--format", "{{.Server.Version}}"]);
    assert!(version.stdout.trim().starts_with("26."), "{version:?}");
    dockerd
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let gpus = w.gpus();
    let run = |opts: &[&str]| {
        let mut all: Vec<String> = opts.iter().map(|o| o.to_string()).collect();
        all.extend(w.fake_proc_flags());
        dockerd.run(&all, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| {
        format!(
            "Docker {}: {what}\nnvc log:\n{}\ndockerd log:\n{}",
            version.stdout.trim(),
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };

    assert_gpus(
        &run(&["--runtime=nv", "-e", "NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("--runtime=nv NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&["--gpus", "device=1"]),
        &gpus[1..2],
        &context("--gpus device=1"),
    );
    let by_uuid = format!("nvidia.com/gpu={}", gpus[2].uuid);
    assert_gpus_with(
        &run(&["--device", &by_uuid]),
        &gpus[2..3],
        &["/dev/nvidia-modeset 195:254"],
        &context(&format!("CDI {by_uuid}")),
    );
    assert_untouched(
        &run(&["--runtime=nv"]),
        "Docker 26 --runtime=nv, no GPU asked for",
    );
    assert_refused(
        &run(&["--runtime=nv", "-e", "NVIDIA_VISIBLE_DEVICES=7"]),
        "GPU index 7",
        "Docker 26 --runtime=nv NVIDIA_VISIBLE_DEVICES=7",
    );

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}
