//! No broken GPU handed out: `nvc health update` writes the health record from NVML (the
//! fake tree's libnvidia-ml answers from `nvml-health.txt`), and a container asking for
//! `all` through nvc-runtime, or through nvc-hook alone as Docker's `--gpus` and Podman's
//! hooks.d run it, gets only the healthy GPUs' nodes; one naming the unhealthy GPU is
//! refused with the GPU, the fault and what to do. A stale, foreign or missing record
//! blocks nothing; `[requests] health-check = false` turns the check off. Every test
//! needs root (runc, the fake tree's device nodes, mounts). The pure rules (staleness,
//! filtering) are libnvc's unit tests (`libnvc/src/health/tests.rs`); Podman's start is
//! in `engines/podman.rs`.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

use libnvc::health::Fault;
use nvc_tests::{Outcome, Runtime};
use serde_json::json;

mod common;

use common::containers::{hook_only, nodes_inside, World, LIST_NODES};

/// The file the fake libnvidia-ml reads the GPUs' faults from, in the tree's folder.
const NVML_HEALTH_FILE: &str = "nvml-health.txt";

/// `nvc ARGS` with the world's config; its stdout, failing the test when it fails.
fn nvc(w: &World, args: &[&str]) -> String {
    let out = Command::new(nvc_tests::workspace_bin("nvc"))
        .args(args)
        .env("NVC_CONFIG", config(w))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "nvc {args:?}: {stdout}{stderr}");
    stdout
}

fn config(w: &World) -> PathBuf {
    w.dir.path().join("config.toml")
}

fn record_path(w: &World) -> PathBuf {
    w.dir.path().join("state").join("gpu-health.json")
}

/// Tells the fake NVML that `gpu` has `faults` (none: every GPU healthy).
fn break_gpu(w: &World, gpu: &str, faults: &[&str]) {
    let text = match faults {
        [] => String::new(),
        _ => format!("# what the fake NVML reports\n{gpu} {}\n", faults.join(" ")),
    };
    std::fs::write(w.fake.dir.join(NVML_HEALTH_FILE), text).unwrap();
}

/// The GPU nodes (`/dev/nvidiaN`, not nvidiactl) a container's `LIST_NODES` printed.
fn gpu_nodes(out: &str) -> Vec<String> {
    nodes_inside(out)
        .into_iter()
        .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
        .collect()
}

fn node_of(g: &nvc_tests::FakeGpu) -> String {
    format!("/dev/nvidia{} 195:{}", g.minor, g.minor)
}

/// Every GPU node but that of the GPU at bus-order index `skip`, in `all`'s order.
fn nodes_but(w: &World, skip: Option<usize>) -> Vec<String> {
    let mut want: Vec<String> = w
        .gpus_in_bus_order()
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, g)| node_of(g))
        .collect();
    want.sort();
    want
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// What a refused start told the user: runc's stderr and its log.
fn said(out: &Outcome) -> String {
    format!("{}{}", out.stderr, out.log)
}

/// Asserts that the refusal names GPU `index`, its UUID, the fault and what to do.
fn assert_refused(out: &Outcome, index: usize, uuid: &str, fault: Fault, log: &str) {
    assert!(!out.success(), "started: {out:?}");
    let said = said(out);
    for part in [
        format!("NVIDIA_VISIBLE_DEVICES: GPU {index} ({uuid}"),
        fault.describe().to_string(),
        format!("nvidia-smi -r -i {index}"),
        "health-check = false".to_string(),
    ] {
        assert!(
            said.contains(&part),
            "{part:?} not said: {said}\nnvc log:\n{log}"
        );
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn each_fault_leaves_the_gpu_out_of_all_and_refuses_it_by_name() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    let (index, bad) = (1, &gpus[1]);
    for fault in Fault::ALL {
        break_gpu(&w, &bad.uuid, &[fault.name()]);
        let out = nvc(&w, &["health", "update"]);
        assert!(out.contains("3 GPUs, 1 unhealthy"), "{fault}: {out}");
        assert!(out.contains(&bad.uuid), "{fault}: {out}");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(record_path(&w)).unwrap()).unwrap();
        let entries = record["gpus"].as_array().unwrap();
        assert_eq!(entries.len(), 3);
        for e in entries {
            let want = if e["uuid"] == bad.uuid.as_str() {
                json!([fault.name()])
            } else {
                json!([])
            };
            assert_eq!(e["faults"], want, "{fault}: {record}");
        }

        let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
        assert_eq!(
            sorted(gpu_nodes(&all)),
            nodes_but(&w, Some(index)),
            "{fault}"
        );
        let log = w.nvc_log();
        assert!(
            log.contains(&format!(
                "NVIDIA_VISIBLE_DEVICES=all: left out GPU {index} ({}) {}",
                bad.uuid,
                fault.describe()
            )),
            "{fault}: {log}"
        );

        let by_index = w.run(&[&format!("NVIDIA_VISIBLE_DEVICES={index}")], LIST_NODES);
        assert_refused(&by_index, index, &bad.uuid, fault, &w.nvc_log());
        // The healthy ones are still given by name.
        let other = w.ok(&["NVIDIA_VISIBLE_DEVICES=0,2"], LIST_NODES);
        assert_eq!(
            sorted(gpu_nodes(&other)),
            nodes_but(&w, Some(index)),
            "{fault}"
        );
    }
    // By UUID and by bus id too.
    break_gpu(&w, &bad.uuid, &["lost"]);
    nvc(&w, &["health", "update"]);
    for form in [bad.uuid.clone(), bad.bus_id.clone()] {
        let out = w.run(&[&format!("NVIDIA_VISIBLE_DEVICES={form}")], LIST_NODES);
        assert_refused(&out, index, &bad.uuid, Fault::Lost, &w.nvc_log());
    }
    // Mended and recorded again: given again.
    break_gpu(&w, &bad.uuid, &[]);
    nvc(&w, &["health", "update"]);
    let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
    assert_eq!(sorted(gpu_nodes(&all)), nodes_but(&w, None));
    w.ok(&[&format!("NVIDIA_VISIBLE_DEVICES={index}")], LIST_NODES);
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_hook_alone_leaves_out_and_refuses_the_same() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    break_gpu(
        &w,
        &gpus[2].uuid,
        &["ecc-uncorrected", "retired-pages-pending"],
    );
    nvc(&w, &["health", "update"]);
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    let run = |env: &str, n: u32| {
        let b = w
            .bundle(&[env], LIST_NODES)
            .set("/hooks", hook_only(&config(&w)))
            .write()
            .unwrap();
        rt.run(&b, &format!("nvc-health-hook-{}-{n}", std::process::id()))
    };
    let all = run("NVIDIA_VISIBLE_DEVICES=all", 1);
    assert!(all.success(), "{all:?}\n{}", w.nvc_log());
    assert_eq!(sorted(gpu_nodes(&all.stdout)), nodes_but(&w, Some(2)));
    let named = run("NVIDIA_VISIBLE_DEVICES=2", 2);
    assert_refused(
        &named,
        2,
        &gpus[2].uuid,
        Fault::EccUncorrected,
        &w.nvc_log(),
    );
    assert!(
        said(&named).contains(Fault::RetiredPagesPending.describe()),
        "{named:?}"
    );
}

/// Rewrites the record's JSON with `edit`.
fn edit_record(w: &World, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = record_path(w);
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut record);
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_missing_stale_or_foreign_record_blocks_nothing() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    // Missing: every GPU, by `all` and by name.
    assert!(!record_path(&w).exists());
    let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
    assert_eq!(sorted(gpu_nodes(&all)), nodes_but(&w, None));
    assert!(
        w.nvc_log()
            .contains("GPU health not checked: there is no health record"),
        "{}",
        w.nvc_log()
    );
    break_gpu(&w, &gpus[0].uuid, &["lost"]);
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 3] = [
        (
            "too old",
            |r| r["written"] = json!(r["written"].as_u64().unwrap() - 301),
            "older than [requests] health-max-age (300 s)",
        ),
        (
            "another boot",
            |r| r["boot-id"] = json!("00000000-0000-0000-0000-000000000000"),
            "the health record is of another boot",
        ),
        (
            "another driver",
            |r| r["driver-version"] = json!("550.54.15"),
            "the health record is of driver 550.54.15, the driver now is 999.88.77",
        ),
    ];
    for (what, edit, logged) in cases {
        nvc(&w, &["health", "update"]);
        edit_record(&w, edit);
        let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
        assert_eq!(sorted(gpu_nodes(&all)), nodes_but(&w, None), "{what}");
        let named = w.ok(&["NVIDIA_VISIBLE_DEVICES=0"], LIST_NODES);
        assert_eq!(gpu_nodes(&named), [node_of(&gpus[0])], "{what}");
        assert!(w.nvc_log().contains(logged), "{what}: {}", w.nvc_log());
        let shown = nvc(&w, &["health"]);
        assert!(
            shown.contains("ignored") && shown.contains("stale: lost"),
            "{what}: {shown}"
        );
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_record_is_never_followed_or_waited_on_and_a_killed_writer_leaves_nothing() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    let record = record_path(&w);
    std::fs::create_dir_all(record.parent().unwrap()).unwrap();
    // A FIFO in the record's place: the start neither waits on it nor takes it for a
    // record.
    let made = Command::new("mkfifo").arg(&record).status().unwrap();
    assert!(made.success(), "mkfifo");
    let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
    assert_eq!(sorted(gpu_nodes(&all)), nodes_but(&w, None));
    std::fs::remove_file(&record).unwrap();

    // A link in the record's place, to a record that says GPU 0 is lost: not followed,
    // so it blocks nothing.
    break_gpu(&w, &gpus[0].uuid, &["lost"]);
    nvc(&w, &["health", "update"]);
    let elsewhere = w.dir.path().join("elsewhere.json");
    std::fs::rename(&record, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
    let named = w.ok(&["NVIDIA_VISIBLE_DEVICES=0"], LIST_NODES);
    assert_eq!(gpu_nodes(&named), [node_of(&gpus[0])]);
    std::fs::remove_file(&record).unwrap();

    // The temporary file of an `nvc health update` killed before its rename (its pid no
    // longer runs) is removed by the next one.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let temp = record.parent().unwrap().join(format!(
        ".gpu-health.json.{dead}-1.0123456789abcdef.nvc-tmp"
    ));
    std::fs::write(&temp, b"{").unwrap();
    nvc(&w, &["health", "update"]);
    assert!(!temp.exists(), "{} is left", temp.display());
    assert!(record.is_file());
    assert!(!w.run(&["NVIDIA_VISIBLE_DEVICES=0"], LIST_NODES).success());
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn health_check_false_turns_it_off() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    break_gpu(&w, &gpus[1].uuid, &["reset-required"]);
    nvc(&w, &["health", "update"]);
    assert!(!w.run(&["NVIDIA_VISIBLE_DEVICES=1"], LIST_NODES).success());
    let mut text = std::fs::read_to_string(config(&w)).unwrap();
    text.push_str("\n[requests]\nhealth-check = false\n");
    std::fs::write(config(&w), text).unwrap();
    let all = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], LIST_NODES);
    assert_eq!(sorted(gpu_nodes(&all)), nodes_but(&w, None));
    let named = w.ok(&["NVIDIA_VISIBLE_DEVICES=1"], LIST_NODES);
    assert_eq!(gpu_nodes(&named), [node_of(&gpus[1])]);
    let shown = nvc(&w, &["health"]);
    assert!(
        shown.contains("health-check = false: not applied"),
        "{shown}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn info_check_and_health_show_each_gpus_health() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    // A GPU without ECC (NVML: not supported) is healthy, not broken.
    std::fs::write(
        w.fake.dir.join(NVML_HEALTH_FILE),
        format!(
            "{} no-ecc\n{} row-remap-failed\n",
            gpus[0].uuid, gpus[2].uuid
        ),
    )
    .unwrap();
    nvc(&w, &["health", "update"]);
    let v: serde_json::Value = serde_json::from_str(&nvc(&w, &["health", "--json"])).unwrap();
    assert_eq!(v["current"], true);
    assert_eq!(v["check"], true);
    let faults: Vec<&serde_json::Value> = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["faults"])
        .collect();
    assert_eq!(
        faults,
        [&json!([]), &json!([]), &json!(["row-remap-failed"])]
    );
    let info = nvc(&w, &["info"]);
    assert!(
        info.contains("Health record:") && info.contains("current"),
        "{info}"
    );
    let row = |uuid: &str| info.lines().find(|l| l.contains(uuid)).unwrap().to_string();
    assert!(row(&gpus[0].uuid).ends_with(" ok"), "{info}");
    assert!(row(&gpus[2].uuid).ends_with(" row-remap-failed"), "{info}");
    let info_json: serde_json::Value = serde_json::from_str(&nvc(&w, &["info", "--json"])).unwrap();
    assert_eq!(info_json["health"]["gpus"][2]["healthy"], false);
    let check = Command::new(nvc_tests::workspace_bin("nvc"))
        .args(["check", "--json"])
        .env("NVC_CONFIG", config(&w))
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let health = rows
        .as_array()
        .or_else(|| rows["checks"].as_array())
        .unwrap()
        .iter()
        .find(|r| r["check"] == "health")
        .unwrap_or_else(|| panic!("no health row: {rows}"))
        .clone();
    assert_eq!(health["status"], "warn", "{health}");
    let detail = health["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("GPU 2 ({}) failed a row remapping", gpus[2].uuid)),
        "{detail}"
    );
}
