//! `nvc ps` and `nvc top`: containers started through nvc's runtime shim and real runc
//! (so that nvc has records of them) run `sleep`; their host pids, written into the fake
//! tree's `nvml-processes.txt`, are what the fake NVML lists on the GPUs; `nvc ps --json`
//! must map each to its container's id, its pid inside the container and its memory, and
//! a process of the host's own to the host. `nvc top` prints a frame per iteration and
//! sees the file change between two. Docker's names: `engines/top.rs`. Needs root (runc,
//! device nodes, mounts).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use nvc_tests::{KillOnDrop, Runtime, TestSetup};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The fake tree's file of NVML's processes.
const PROCESSES: &str = "nvml-processes.txt";

struct World {
    setup: TestSetup,
    rt: Runtime,
}

impl World {
    fn new() -> World {
        let setup = TestSetup::new("nvc ps needs runc, device nodes and mounts");
        let rt = Runtime::nvc(&setup.dir.path().join("runc-state"), &setup.config);
        World { setup, rt }
    }

    /// Starts a GPU container running `script` through the shim; its id and init's pid.
    fn container(&self, name: &str, script: &str) -> (String, u32) {
        let bundle = self
            .setup
            .bundle(name, &["NVIDIA_VISIBLE_DEVICES=all"], script)
            .write()
            .unwrap();
        let id = nvc_tests::container_id("nvc-top");
        self.rt.create(&bundle, &id).assert_success();
        self.rt.start(&id).assert_success();
        let state: Value = serde_json::from_str(&self.rt.state(&id).stdout).unwrap();
        let pid = state["pid"].as_u64().unwrap() as u32;
        (id, pid)
    }

    fn uuid(&self, index: usize) -> String {
        self.setup.fake.spec.gpus_in_bus_order()[index].uuid.clone()
    }

    fn write_processes(&self, lines: &[String]) {
        let text = format!(
            "# <GPU uuid> <pid> <bytes> <kind> [sm%]\n{}\n",
            lines.join("\n")
        );
        std::fs::write(self.setup.fake.dir.join(PROCESSES), text).unwrap();
    }

    fn nvc(&self, args: &[&str]) -> Command {
        let mut command = Command::new(nvc_tests::workspace_bin("nvc"));
        command.env("NVC_CONFIG", &self.setup.config).args(args);
        command
    }

    #[track_caller]
    fn nvc_ok(&self, args: &[&str]) -> String {
        let out = self.nvc(args).output().unwrap();
        assert!(
            out.status.success(),
            "nvc {args:?} failed: {}\nnvc log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.setup.nvc_log()
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The one child of process `pid` (`/proc/<pid>/task/<pid>/children`), waited for.
fn only_child(pid: u32) -> u32 {
    let path = format!("/proc/{pid}/task/{pid}/children");
    for _ in 0..200 {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(child) = text.split_whitespace().next() {
            return child.parse().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("process {pid} has no child");
}

/// The process `pid` in the JSON of `nvc ps` for the GPU `uuid`.
fn process<'a>(ps: &'a Value, uuid: &str, pid: u32) -> &'a Value {
    let gpu = ps["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uuid"] == uuid)
        .unwrap_or_else(|| panic!("no GPU {uuid} in {ps:#}"));
    gpu["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} on {uuid} in {ps:#}"))
}

fn host_sleep() -> KillOnDrop {
    KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
#[ignore = "needs root: nvc ps needs runc, device nodes and mounts"]
fn ps_maps_each_gpu_process_to_its_container_and_the_host() {
    let w = World::new();
    let (a, a_init) = w.container("a", "exec sleep 600");
    // A process that is not the container's init; it says its pid inside.
    let (b, b_init) = w.container("b", "sleep 600 & echo child $!; wait");
    let b_sleep = only_child(b_init);
    let b_inside: u32 = {
        let mut said = String::new();
        for _ in 0..200 {
            said = w.rt.container_output(&b).0;
            if said.ends_with('\n') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        said.trim().strip_prefix("child ").unwrap().parse().unwrap()
    };
    assert_ne!(b_inside, b_sleep);
    let host = host_sleep();
    let (gpu0, gpu1) = (w.uuid(0), w.uuid(1));
    w.write_processes(&[
        format!("{gpu0} {a_init} {} compute 37", GIB),
        format!("{gpu1} {b_sleep} {} compute", 512 * MIB),
        format!("{gpu0} {} 4096 graphics", host.pid()),
    ]);

    let ps: Value = serde_json::from_str(&w.nvc_ok(&["ps", "--json"])).unwrap();
    let pa = process(&ps, &gpu0, a_init);
    assert_eq!(pa["owner"], "container", "{pa:#}");
    assert_eq!(pa["container"]["id"], a.as_str(), "{pa:#}");
    assert_eq!(pa["container"]["recorded"], true, "{pa:#}");
    assert_eq!(
        pa["container"]["bundle"],
        w.setup.dir.path().join("a").to_str().unwrap(),
        "{pa:#}"
    );
    assert_eq!(pa["containerPid"], 1, "{pa:#}");
    assert_eq!(pa["usedMemory"], GIB, "{pa:#}");
    assert_eq!(pa["smUtil"], 37, "{pa:#}");
    assert_eq!(pa["kind"], "compute", "{pa:#}");
    assert_eq!(pa["command"], "sleep", "{pa:#}");

    let pb = process(&ps, &gpu1, b_sleep);
    assert_eq!(pb["owner"], "container", "{pb:#}");
    assert_eq!(pb["container"]["id"], b.as_str(), "{pb:#}");
    assert_eq!(pb["containerPid"], b_inside, "{pb:#}");
    assert_eq!(pb["usedMemory"], 512 * MIB, "{pb:#}");
    // No sm% in its line: the fake NVML gives no sample on that GPU.
    assert_eq!(pb["smUtil"], Value::Null, "{pb:#}");

    let ph = process(&ps, &gpu0, host.pid());
    assert_eq!(ph["owner"], "host", "{ph:#}");
    assert_eq!(ph["container"], Value::Null, "{ph:#}");
    assert_eq!(ph["containerPid"], host.pid(), "{ph:#}");
    assert_eq!(ph["kind"], "graphics", "{ph:#}");
    assert_eq!(ph["smUtil"], Value::Null, "{ph:#}");

    let g0 = ps["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uuid"] == gpu0.as_str())
        .unwrap();
    assert_eq!(g0["memoryUsed"], GIB + 4096, "{g0:#}");
    assert_eq!(g0["memoryTotal"], 80 * GIB, "{g0:#}");
    assert_eq!(g0["busId"], w.setup.fake.spec.gpus_in_bus_order()[0].bus_id);
    assert_eq!(g0["processes"].as_array().unwrap().len(), 2);

    // The table says the same.
    let table = w.nvc_ok(&["ps"]);
    let row = |pid: u32| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no row for {pid} in:\n{table}"))
            .to_string()
    };
    assert!(row(a_init).contains(&a[..12]), "{table}");
    assert!(
        row(a_init).contains("1024 MiB") && row(a_init).contains("37%"),
        "{table}"
    );
    assert!(row(b_sleep).contains(&b[..12]), "{table}");
    let host_row = row(host.pid());
    assert!(host_row.contains(" host "), "{table}");
    assert!(table.contains(&format!("GPU 0  {gpu0}")), "{table}");
    assert!(table.contains("memory 1024 MiB / 81920 MiB"), "{table}");
}

#[test]
#[ignore = "needs root: nvc ps needs runc, device nodes and mounts"]
fn ps_says_what_it_cannot_see_and_shows_the_rest() {
    let w = World::new();
    let host = host_sleep();
    let gpu0 = w.uuid(0);
    // A process that is gone (pid_max is at most 2^22).
    let gone = 1u32 << 23;
    w.write_processes(&[
        format!("{gpu0} {gone} 100 compute"),
        format!("{gpu0} {} 200 compute 5", host.pid()),
    ]);
    let ps: Value = serde_json::from_str(&w.nvc_ok(&["ps", "--json"])).unwrap();
    let lost = process(&ps, &gpu0, gone);
    assert_eq!(lost["owner"], "unknown", "{lost:#}");
    assert!(
        lost["notes"][0]
            .as_str()
            .unwrap()
            .contains("the process ended"),
        "{lost:#}"
    );
    assert_eq!(process(&ps, &gpu0, host.pid())["owner"], "host");
    let table = w.nvc_ok(&["ps"]);
    assert!(
        table.contains(&format!("(pid {gone}: no /proc/{gone}")),
        "{table}"
    );

    // No processes file: NVML lists none, and the memory is unknown.
    std::fs::remove_file(w.setup.fake.dir.join(PROCESSES)).unwrap();
    let ps: Value = serde_json::from_str(&w.nvc_ok(&["ps", "--json"])).unwrap();
    for gpu in ps["gpus"].as_array().unwrap() {
        assert_eq!(gpu["processes"].as_array().unwrap().len(), 0, "{gpu:#}");
        assert_eq!(gpu["memoryUsed"], Value::Null, "{gpu:#}");
        assert!(
            gpu["unseen"][0].as_str().unwrap().contains("memory"),
            "{gpu:#}"
        );
    }
    assert!(w.nvc_ok(&["ps"]).contains("(no process)"));
}

#[test]
#[ignore = "needs root: nvc ps needs runc, device nodes and mounts"]
fn top_prints_a_frame_per_iteration_and_reads_nvml_anew_each_time() {
    let w = World::new();
    let (a, a_init) = w.container("a", "exec sleep 600");
    let host = host_sleep();
    let gpu0 = w.uuid(0);
    w.write_processes(&[
        format!("{gpu0} {a_init} {} compute 50", GIB),
        format!("{gpu0} {} 4096 compute", host.pid()),
    ]);

    let text = w.nvc_ok(&["top", "-n", "2", "-d", "0.1"]);
    let frames: Vec<&str> = text.lines().filter(|l| l.starts_with("nvc top ")).collect();
    assert_eq!(frames.len(), 2, "{text}");
    assert_eq!(text.matches(&a[..12]).count(), 2, "{text}");
    // Not a terminal: no escape sequence to clear it.
    assert!(!text.contains('\x1b'), "{text:?}");

    // One JSON object a line; the second frame sees the file as changed after the first.
    let mut child = w
        .nvc(&["top", "--json", "-n", "2", "-d", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    w.write_processes(&[format!("{gpu0} {a_init} {} compute 50", 2 * GIB)]);
    let second: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(lines.next().is_none());
    assert!(child.wait().unwrap().success());
    let count = |frame: &Value| frame["gpus"][0]["processes"].as_array().unwrap().len();
    assert_eq!((count(&first), count(&second)), (2, 1));
    assert_eq!(process(&second, &gpu0, a_init)["usedMemory"], 2 * GIB);
    assert_eq!(
        process(&second, &gpu0, a_init)["container"]["id"],
        a.as_str()
    );

    let bad = w.nvc(&["top", "-n", "1", "-d", "-1"]).output().unwrap();
    assert!(!bad.status.success());
}
