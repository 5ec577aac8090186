//! GPU containers through a private containerd: the config `nvc runtime configure`
//! writes, and `ctr run` with nvc-runtime as its runc.

use std::ffi::OsStr;
use std::process::Command;

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, Containerd, EngineRoot};

use super::{
    assert_gpus, assert_refused, assert_untouched, nvc_configure, run, World, CTR_IMAGE, PROBE,
};

/// A private containerd (CRI plugin off) with NVC_CONFIG in its environment, which it
/// passes to the shim, which passes it to the runc binary: that is how it reaches
/// nvc-runtime here.
fn start_containerd(w: &World) -> Containerd {
    let containerd = Containerd::start(
        &w.path("containerd"),
        &[("NVC_CONFIG", w.config.as_os_str())],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    containerd
        .import(&w.tarball, CTR_IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    containerd
}

/// `ctr run` of PROBE with nvc-runtime as its runc binary, the fake proc tree and `env`.
fn ctr_run(containerd: &Containerd, w: &World, env: &[&str]) -> nvc_tests::Outcome {
    let mut opts: Vec<String> = vec![
        "--runc-binary".into(),
        workspace_bin("nvc-runtime").display().to_string(),
        "--mount".into(),
        format!(
            "type=bind,src={},dst=/run/fake-proc,options=rbind:ro",
            w.fake.proc_root.display()
        ),
        "--env".into(),
        "NVC_FAKE_PROC=/run/fake-proc".into(),
    ];
    for e in env {
        opts.extend(["--env".to_string(), e.to_string()]);
    }
    containerd.run(&opts, CTR_IMAGE, &["sh", "-c", PROBE])
}

/// containerd with a config registered by `nvc runtime configure --runtime containerd`, as
/// a Kubernetes node's would be: containerd reads the "nv" runtime with nvc-runtime as its
/// binary, its CRI plugin loads (it refuses a config whose runtimes lack the default
/// `runc`), and removing nvc again gives the config back. (`ctr` does not use the CRI
/// plugin's runtimes; the test above runs containers with `--runc-binary`, which sets the
/// same shim option, `BinaryName`, that the "nv" runtime sets.)
#[test]
fn containerd_loads_the_config_nvc_writes() {
    let w = World::new();
    let dir = w.path("containerd");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    let original = Containerd::default_config(&dir, true);
    std::fs::write(&config, &original).unwrap();
    let runtime = workspace_bin("nvc-runtime");
    let configure = |extra: &[&str]| {
        let mut args = vec![
            OsStr::new("--runtime"),
            OsStr::new("containerd"),
            OsStr::new("--config"),
            config.as_os_str(),
            OsStr::new("--runtime-path"),
            runtime.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        nvc_configure(&args)
    };
    configure(&[]);
    let dump = run(
        Command::new(nvc_tests::find_program("containerd", "containerd").unwrap())
            .arg("--config")
            .arg(&config)
            .args(["config", "dump"]),
    );
    dump.assert_success();
    let nv = dump
        .stdout
        .split("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv.options]")
        .nth(1)
        .unwrap_or_else(|| panic!("no nv runtime in containerd's view of its config: {dump:?}"));
    assert!(
        nv.contains(&format!("BinaryName = \"{}\"", runtime.display())),
        "{dump:?}"
    );

    let containerd = Containerd::start(&dir, &[]).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let plugins = containerd.ctr(&["plugins", "ls"]);
    let cri_ok = plugins
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .any(|cols| {
            cols.len() == 4
                && cols[0] == "io.containerd.grpc.v1"
                && cols[1] == "cri"
                && cols[3] == "ok"
        });
    let log = containerd.log_tail(200);
    let namespace = containerd.namespace.clone();
    drop(containerd);
    assert!(
        cri_ok,
        "the CRI plugin refused the config nvc wrote: {plugins:?}\n{}",
        log.lines()
            .filter(|l| l.contains("failed to load plugin io.containerd.grpc.v1.cri"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    configure(&["--revert"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert!(!dir.join("conf.d/99-nvc.toml").exists());
    w.assert_clean(&[namespace]);
}

#[test]
fn containerd_ctr_runs_gpu_containers_through_nvc_runtime() {
    let w = World::new();
    let containerd = start_containerd(&w);
    let gpus = w.gpus();
    let run = |env: &[&str]| ctr_run(&containerd, &w, env);
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ncontainerd log:\n{}",
            w.nvc_log(),
            containerd.log_tail(20)
        )
    };

    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("ctr run NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[1].bus_id)]),
        &gpus[1..2],
        &context("ctr run one GPU by bus id"),
    );
    assert_untouched(&run(&[]), "ctr run without NVIDIA_VISIBLE_DEVICES");
    assert_refused(
        &run(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
        ]),
        "cuda>=100.0",
        "ctr run NVIDIA_REQUIRE_CUDA=cuda>=100.0",
    );

    let namespace = containerd.namespace.clone();
    drop(containerd);
    w.assert_clean(&[namespace]);
}

/// Debian 13's containerd 1.7.24 (and its `ctr` and runc) from a root of their own (see
/// `nvc_tests::EngineRoot`), running containers with nvc-runtime as their runc binary.
/// (Its `ctr` has no CDI flag; CDI on 1.7 goes through the CRI plugin, not tested yet.)
#[test]
fn containerd17_ctr_runs_gpu_containers_through_nvc_runtime() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let bin_dir = workspace_bin("nvc-runtime").parent().unwrap().to_path_buf();
    let containerd = Containerd::start_in(
        &root,
        &w.path("containerd17"),
        &[("NVC_CONFIG", w.config.as_os_str())],
        &[w.dir.path(), &bin_dir],
        None,
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let version = containerd.ctr(&["version"]);
    assert!(version.stdout.contains("1.7."), "{version:?}");
    containerd
        .import(&w.tarball, CTR_IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let gpus = w.gpus();
    let run = |env: &[&str]| ctr_run(&containerd, &w, env);
    let context = |what: &str| {
        format!(
            "containerd 1.7: {what}\nnvc log:\n{}\ncontainerd log:\n{}",
            w.nvc_log(),
            containerd.log_tail(20)
        )
    };

    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("ctr run NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[2].uuid)]),
        &gpus[2..3],
        &context("ctr run one GPU by UUID"),
    );
    assert_untouched(
        &run(&[]),
        "containerd 1.7 ctr run without NVIDIA_VISIBLE_DEVICES",
    );
    assert_refused(
        &run(&["NVIDIA_VISIBLE_DEVICES=7"]),
        "GPU index 7",
        "containerd 1.7 ctr run NVIDIA_VISIBLE_DEVICES=7",
    );

    let namespace = containerd.namespace.clone();
    drop(containerd);
    w.assert_clean(&[namespace]);
}
