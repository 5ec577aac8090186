//! GPU containers through a private dockerd: `--runtime=nv` with nvc-runtime, and `--gpus`
//! with nvc-hook as the NVIDIA hook.

use super::{assert_gpus, assert_refused, assert_untouched, start_dockerd, World, IMAGE, PROBE};

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
