//! Editing the OCI spec: the edits are deterministic; applying them to config.json gives
//! the golden file (`testdata/driver-roots/golden/oci/`), is idempotent to the byte, and
//! keeps the fields nvc does not know; the runtime's plan for a bundle gives the same
//! device nodes.
//!
//! All but one test run on the committed driver trees (`testdata/driver-roots`), read
//! through `libnvc::probe::TreeProbe`: no root, no GPU. After an intended change, run
//! `NVC_BLESS=1 cargo test -p nvc-tests --test spec golden` to rewrite the expected files,
//! and review the diff. The last runs nvc-runtime and real runc against a fake driver tree:
//! it needs root (runc, device nodes, mounts).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use libnvc::discover::discover;
use libnvc::edits::{self, ContainerEdits, ContainerLayout};
use libnvc::oci::spec::{self, HookEntry};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::trees::{self, DriverTree, CUDA_VERSION};
use serde_json::json;

mod common;

use common::containers::World;
use common::edits::{driver, edits_for};

// ---------------------------------------------------------------------------------------
// On the committed driver trees.

#[test]
fn edits_are_deterministic() {
    let (tree, d) = driver("basic-2gpu");
    let env = [
        "NVIDIA_VISIBLE_DEVICES=1,0",
        "NVIDIA_DRIVER_CAPABILITIES=all",
    ];
    let a = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    let b = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    assert_eq!(a, b);
    // Rediscovering gives the same edits too.
    let d2 = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    assert_eq!(a, serde_json::to_string(&edits_for(&d2, &env)).unwrap());
}

fn hook() -> HookEntry {
    HookEntry {
        path: PathBuf::from("/usr/bin/nvc-hook"),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        timeout: Some(35),
        poststop: true,
    }
}

/// The JSON file at `path`, its keys in their order.
fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The committed input spec's request, on basic-2gpu: GPU 1, compute and utility.
fn spec_edits() -> (serde_json::Value, ContainerEdits) {
    let (_tree, d) = driver("basic-2gpu");
    let input = read_json(&trees::golden_dir().join("oci/config.json"));
    let view = spec::view(&input, Path::new("/bundle")).unwrap();
    let req = Request::from_env(
        view.env.iter().map(String::as_str),
        &RequestPolicy::default(),
    )
    .unwrap();
    let e = edits::compute(&d, &req, &ContainerLayout::debian()).unwrap();
    (input, e)
}

#[test]
fn spec_apply_matches_the_golden() {
    let (mut spec, mut e) = spec_edits();
    // The nodes where a host has them, in its /dev: the committed tree stands for a host
    // whose dev root is `/`, so the runtime makes them (a node elsewhere on the host is a
    // bind mount instead, which libnvc's spec tests and the container suites cover).
    for node in &mut e.device_nodes {
        node.host_path.clone_from(&node.path);
    }
    assert!(spec::apply(&mut spec, &e, &hook()).unwrap());
    let got = serde_json::to_string_pretty(&spec).unwrap() + "\n";
    trees::assert_golden("oci/config.basic-2gpu.gpu1.json", &got);
    // What it adds, spelled out: the nodes of GPU 1 and the control nodes, their rules
    // (nvidiactl's rule was there already), the hook after the spec's own.
    let devices: Vec<String> = spec["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {}:{}",
                d["path"].as_str().unwrap(),
                d["major"],
                d["minor"]
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
            "/dev/nvidia0 195:0"
        ]
    );
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(rules.len(), 3 + 3);
    assert_eq!(spec["hooks"]["prestart"][1]["path"], "/usr/bin/nvc-hook");
    assert_eq!(spec["vendorExtension"]["untouched"], true);
}

#[test]
fn spec_apply_is_idempotent_to_the_byte() {
    let (mut spec, e) = spec_edits();
    spec::apply(&mut spec, &e, &hook()).unwrap();
    let once = spec::to_bytes(&spec).unwrap();
    assert!(!spec::apply(&mut spec, &e, &hook()).unwrap());
    assert_eq!(spec::to_bytes(&spec).unwrap(), once);
    // Through a file as well: save, read back, apply, the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, &once).unwrap();
    let mut again = read_json(&path);
    assert!(!spec::apply(&mut again, &e, &hook()).unwrap());
    assert_eq!(spec::to_bytes(&again).unwrap(), once);
}

/// A bundle holding the committed input spec, an executable stand-in for nvc-hook, and an
/// nvc config pointing at `tree`.
fn bundle_on(tree: &DriverTree, env: &[&str]) -> (tempfile::TempDir, nvc_config::Config) {
    let dir = tempfile::tempdir().unwrap();
    let mut input = read_json(&trees::golden_dir().join("oci/config.json"));
    if !env.is_empty() {
        input["process"]["env"] = serde_json::json!(env);
    }
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&input).unwrap(),
    )
    .unwrap();
    let hook = dir.path().join("nvc-hook");
    std::fs::write(&hook, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = nvc_config::Config {
        driver: nvc_config::DriverConfig {
            root: tree.root.clone(),
            dev_root: tree.dev_root.clone(),
            proc_root: tree.proc_root.clone(),
        },
        hook: nvc_config::HookConfig {
            path: hook,
            ..nvc_config::HookConfig::default()
        },
        ..nvc_config::Config::default()
    };
    (dir, config)
}

#[test]
fn the_runtime_plan_of_a_bundle_gives_the_same_nodes() {
    use libnvc::plan::{ConfigSource, Handed, Plan, Stage, Step};
    let tree = DriverTree::committed("basic-2gpu");
    let probe = tree.probe().unwrap().with_cuda_version(CUDA_VERSION);
    let (bundle, config) = bundle_on(&tree, &[]);
    let source = ConfigSource {
        path: Path::new("/etc/nvc/config.toml"),
        from_env: false,
    };
    let plan = Plan::for_bundle(
        bundle.path(),
        &config,
        &source,
        &probe,
        Stage::Runtime,
        &Handed::default(),
    )
    .unwrap_or_else(|s| panic!("{}", libnvc::report::error_chain(&s.error)));
    let gpu = plan.gpu.unwrap();
    // The runtime reads the devices only: no file, the nodes of GPU 1.
    assert!(gpu.driver.libraries.is_empty());
    assert!(gpu.edits.mounts.is_empty());
    let (_, e) = spec_edits();
    assert_eq!(gpu.edits.device_nodes, e.device_nodes);
    let hook = gpu.hook.unwrap();
    assert!(!hook.in_spec);
    assert_eq!(hook.entry.path, config.hook.path);

    // The check stage reads everything, and checks the requirements once.
    let (bundle, config) = bundle_on(
        &tree,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
        ],
    );
    let stopped = Plan::for_bundle(
        bundle.path(),
        &config,
        &source,
        &probe,
        Stage::Check,
        &Handed::default(),
    )
    .unwrap_err();
    assert_eq!(stopped.error.step(), Step::Requirements);
    assert!(
        stopped.error.to_string().contains("99.1"),
        "{}",
        stopped.error
    );
    let driver = stopped.progress.driver.unwrap();
    assert_eq!(driver.libraries.len(), nvc_tests::DRIVER_LIBRARIES.len());
    assert_eq!(stopped.progress.edits.unwrap().visible_gpus.len(), 2);
}

#[test]
fn the_runtime_hands_its_gpus_to_the_hook_unless_a_mig_device_is_asked_for() {
    use libnvc::plan::{ConfigSource, Handed, Plan, Stage, GPUS_ARG};
    let tree = DriverTree::committed("mig");
    let probe = tree.probe().unwrap();
    let source = ConfigSource {
        path: Path::new("/etc/nvc/config.toml"),
        from_env: false,
    };
    let plan = |env: &[&str], stage: Stage, handed: &Handed| {
        let (bundle, config) = bundle_on(&tree, env);
        Plan::for_bundle(bundle.path(), &config, &source, &probe, stage, handed)
            .unwrap_or_else(|s| panic!("{}", libnvc::report::error_chain(&s.error)))
            .gpu
            .unwrap()
    };
    let all = ["NVIDIA_VISIBLE_DEVICES=all"];
    let runtime = plan(&all, Stage::Runtime, &Handed::default());
    let args = runtime.hook.unwrap().entry.args;
    assert_eq!(args[2], GPUS_ARG, "{args:?}");
    let handed = Handed::parse(&args[2..]).unwrap();
    // The hook handed the list plans as the one that reads the host.
    let own = plan(&all, Stage::Hook, &Handed::default());
    let from_list = plan(&all, Stage::Hook, &handed);
    assert_eq!(from_list.driver.gpus, own.driver.gpus);
    assert_eq!(from_list.edits, own.edits);
    // A MIG device asked for: the hook is handed nothing, and reads the instances.
    let mig = ["NVIDIA_VISIBLE_DEVICES=0:1"];
    let runtime = plan(&mig, Stage::Runtime, &Handed::default());
    assert_eq!(runtime.hook.unwrap().entry.args, ["nvc-hook", "prestart"]);
    assert!(!plan(&mig, Stage::Hook, &Handed::default()).driver.gpus[0]
        .mig
        .is_empty());
}

#[test]
fn a_mig_uuid_plans_as_gpu_colon_mig_in_the_runtime_and_the_hook() {
    use libnvc::plan::{ConfigSource, Handed, Plan, Stage};
    let tree = DriverTree::committed("mig");
    let probe = tree.probe().unwrap();
    let source = ConfigSource {
        path: Path::new("/etc/nvc/config.toml"),
        from_env: false,
    };
    let plan = |env: &str, stage: Stage| {
        let (bundle, config) = bundle_on(&tree, &[env]);
        Plan::for_bundle(
            bundle.path(),
            &config,
            &source,
            &probe,
            stage,
            &Handed::default(),
        )
        .unwrap_or_else(|s| panic!("{}", libnvc::report::error_chain(&s.error)))
        .gpu
        .unwrap()
    };
    let uuid = &trees::scenario("mig").unwrap().spec().mig_devices()[1].uuid;
    for stage in [Stage::Runtime, Stage::Hook, Stage::Check] {
        let by_index = plan("NVIDIA_VISIBLE_DEVICES=0:1", stage);
        let by_uuid = plan(&format!("NVIDIA_VISIBLE_DEVICES={uuid}"), stage);
        assert_eq!(by_uuid.edits, by_index.edits, "{stage:?}");
        assert_eq!(by_uuid.gpu_nodes, by_index.gpu_nodes, "{stage:?}");
        assert!(by_uuid.names_mig, "{stage:?}");
        assert_eq!(by_uuid.edits.visible_gpus, ["0000:06:00.0"], "{stage:?}");
        // The runtime hands the hook no GPU list: it reads the instances itself.
        if stage == Stage::Runtime {
            let args = by_uuid.hook.unwrap().entry.args;
            assert_eq!(args, ["nvc-hook", "prestart"]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// In containers under runc.

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn unknown_fields_survive_and_a_second_pass_changes_nothing() {
    let w = World::new();
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=0"], "true");
    let b = b
        .set("/vendorExtension", json!({"keep": [1, 2, {"x": null}]}))
        .set("/linux/unknownKnob", json!(42))
        .write()
        .unwrap();
    // `create` edits config.json; a second `create` of the same bundle must not change it again.
    let id = format!("nvc-twice-{}", std::process::id());
    w.rt.create(&b, &id).assert_success();
    let once = std::fs::read(b.config_path()).unwrap();
    w.rt.delete(&id);
    let id2 = format!("{id}-2");
    w.rt.create(&b, &id2).assert_success();
    let twice = std::fs::read(b.config_path()).unwrap();
    w.rt.delete(&id2);
    assert_eq!(once, twice);
    let v: serde_json::Value = serde_json::from_slice(&once).unwrap();
    assert_eq!(v["vendorExtension"], json!({"keep": [1, 2, {"x": null}]}));
    assert_eq!(v["linux"]["unknownKnob"], 42);
    let hooks = v["hooks"]["prestart"].as_array().unwrap();
    assert_eq!(
        hooks
            .iter()
            .filter(|h| h["path"].as_str().unwrap().ends_with("nvc-hook"))
            .count(),
        1
    );
}

/// A GPU container with no mount namespace of its own is refused by nvc-runtime before
/// runc runs, the message naming the cause: none (the OCI validation program
/// `linux_ns_itype`'s spec, every namespace inherited), or one joined by path (another
/// process's). The hook, which would have refused later and for another reason (the
/// state's process in its own mount namespace), never runs.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_gpu_container_without_a_mount_namespace_of_its_own_is_refused_naming_the_cause() {
    let w = World::new();
    let holder = nvc_tests::KillOnDrop(
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "120"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let joined = format!("/proc/{}/ns/mnt", holder.pid());
    let others = [
        json!({"type": "pid"}),
        json!({"type": "network"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
    ];
    let mut with_path = others.to_vec();
    with_path.push(json!({"type": "mount", "path": joined}));
    for (namespaces, cause) in [
        (json!([]), "has no \"mount\" entry".to_string()),
        (json!(others), "has no \"mount\" entry".to_string()),
        (json!(with_path), format!("joins the one at {joined}")),
    ] {
        let b = w
            .bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "true")
            .set("/linux/namespaces", namespaces.clone())
            .write()
            .unwrap();
        let id = nvc_tests::container_id("nvc-no-mntns");
        let out = w.rt.run(&b, &id);
        assert!(
            !out.success()
                && out
                    .stderr
                    .contains("a GPU container needs a mount namespace of its own")
                && out.stderr.contains(&cause),
            "{namespaces}: not refused for its cause ({cause}):\n{out:?}\n{}",
            w.nvc_log()
        );
        assert!(!out.stderr.contains("forged or stale"), "{out:?}");
        assert!(
            nvc_tests::runc_containers(&w.rt.state_root).is_empty(),
            "runc ran: {namespaces}"
        );
    }
    assert!(
        !w.nvc_log().contains(" nvc-hook ["),
        "the hook ran:\n{}",
        w.nvc_log()
    );
}
