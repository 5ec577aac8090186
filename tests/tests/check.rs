//! `nvc check` against fake driver trees, and `packaging/nv-docker` against a docker that
//! records its argv.
//!
//! Every `nvc check` here runs with a PATH of its own (a folder of fake engines, empty by
//! default) and with every engine and CDI path pointed into the test's folder, so what
//! is installed on the machine running the tests does not change the outcome.
//!
//! The tests on a fake driver tree need root (its device nodes); the nv-docker tests need
//! nothing.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nvc_tests::{nvc_config_for, require_root, workspace_bin, Bundle, FakeDriver, FakeDriverSpec};
use serde_json::{json, Value};
use tempfile::TempDir;

/// A fake driver tree, an nvc config for it (hook and runc configured), and a sandbox
/// for the engines' files.
struct Host {
    dir: TempDir,
    fake: FakeDriver,
    config: PathBuf,
}

impl Host {
    fn new() -> Host {
        require_root("fake driver trees have device nodes");
        let dir = tempfile::tempdir().unwrap();
        let driver = dir.path().join("driver");
        std::fs::create_dir(&driver).unwrap();
        let fake = FakeDriverSpec::default().build(&driver).unwrap();
        let config = nvc_config_for(&fake, &dir.path().join("nvc")).unwrap();
        for sub in ["bin", "hooks.d", "cdi", "crio"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Host { dir, fake, config }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Puts a fake program on the check's PATH.
    fn install(&self, name: &str) {
        executable(&self.path("bin").join(name), "#!/bin/sh\nexit 0\n");
    }

    /// `nvc check ARGS` with this host's sandboxed paths.
    fn check(&self, args: &[&str]) -> Outcome {
        self.check_with(&self.config, args)
    }

    fn check_with(&self, config: &Path, args: &[&str]) -> Outcome {
        let sandbox = [
            ("--docker-config", "daemon.json"),
            ("--containerd-config", "containerd.toml"),
            ("--crio-config", "crio"),
            ("--hooks-dir", "hooks.d"),
            ("--cdi-dir", "cdi"),
        ];
        let mut cmd = Command::new(workspace_bin("nvc"));
        cmd.arg("check")
            .args(args)
            .env("NVC_CONFIG", config)
            .env("PATH", self.path("bin"));
        for (flag, rel) in sandbox {
            if !args.contains(&flag) {
                cmd.arg(flag).arg(self.path(rel));
            }
        }
        let out = cmd.output().unwrap();
        Outcome {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The GPUs in PCI bus order: index i is `gpus()[i]`.
    fn gpus(&self) -> Vec<nvc_tests::FakeGpu> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect()
    }
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// The mark and detail of the table row of `check`, with its fix line if any.
    fn row(&self, check: &str) -> (String, String) {
        let mut lines = self.stdout.lines().peekable();
        while let Some(line) = lines.next() {
            let Some((mark, rest)) = line.split_once(' ') else {
                continue;
            };
            let Some(detail) = rest.strip_prefix(check) else {
                continue;
            };
            if !detail.starts_with("  ") {
                continue;
            }
            let mut detail = detail.trim().to_string();
            if let Some(next) = lines.peek() {
                if let Some(fix) = next.trim_start().strip_prefix("fix: ") {
                    detail.push_str("\nfix: ");
                    detail.push_str(fix);
                }
            }
            return (mark.to_string(), detail);
        }
        panic!("no row {check:?} in\n{}{}", self.stdout, self.stderr);
    }

    fn assert_row(&self, check: &str, mark: &str, contains: &[&str]) {
        let (got, detail) = self.row(check);
        assert_eq!(got, mark, "row {check}: {detail}\n{}", self.stdout);
        for want in contains {
            assert!(
                detail.contains(want),
                "row {check} lacks {want:?}: {detail}"
            );
        }
    }

    fn marks(&self, mark: &str) -> usize {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{mark} ")))
            .count()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }
}

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn all_good_tree_passes() {
    let host = Host::new();
    let out = host.check(&[]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let root = host.fake.root.display().to_string();
    let gpus = host.gpus();
    out.assert_row("config", "✔", &[&host.config.display().to_string()]);
    out.assert_row("driver", "✔", &["999.88.77"]);
    out.assert_row(
        "driver versions",
        "✔",
        &[
            "kernel module 999.88.77",
            "libcuda.so.999.88.77",
            "CUDA 99.1",
        ],
    );
    out.assert_row("GPUs", "✔", &["3 × NVIDIA Fake H100", &gpus[2].bus_id]);
    let node = format!("{root}/dev/nvidia{} 195:{}", gpus[0].minor, gpus[0].minor);
    out.assert_row("GPU device nodes", "✔", &[&node]);
    out.assert_row(
        "control device nodes",
        "✔",
        &[
            "nvidiactl 195:255",
            "nvidia-uvm 238:0",
            "nvidia-uvm-tools 238:1",
        ],
    );
    out.assert_row("persistence mode", "✔", &["nvidia-persistenced"]);
    out.assert_row("runtime", "✔", &["runc"]);
    out.assert_row("nvc-runtime", "✔", &["nvc-runtime"]);
    out.assert_row("hook", "✔", &["nvc-hook"]);
    // Nothing is installed on this PATH: the engines are information only.
    for engine in ["docker", "containerd", "cri-o", "podman"] {
        out.assert_row(engine, "-", &["not installed"]);
    }
    out.assert_row("CDI spec", "-", &["no nvidia.com/gpu spec"]);
    assert_eq!(out.marks("✘"), 0, "{}", out.stdout);
    assert!(
        out.stdout.ends_with("GPU containers can start.\n")
            || out.stdout.contains("GPU containers can start ("),
        "{}",
        out.stdout
    );

    let json = host.check(&["--json"]);
    assert_eq!(json.code, Some(0));
    let v = json.json();
    assert_eq!(v["ok"], true);
    let checks = v["checks"].as_array().unwrap();
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"))["status"]
            .clone()
    };
    assert_eq!(status("driver"), "ok");
    assert_eq!(status("docker"), "info");
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{v}");
    assert!(checks
        .iter()
        .all(|c| c["fix"].is_null() == (c["status"] == "ok" || c["status"] == "info")));
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn missing_and_wrong_device_nodes_fail_naming_them() {
    let host = Host::new();
    let gpus = host.gpus();
    let dev = host.fake.dev_dir();
    let missing = dev.join(format!("nvidia{}", gpus[1].minor));
    std::fs::remove_file(&missing).unwrap();
    std::fs::remove_file(dev.join("nvidia-uvm-tools")).unwrap();
    // GPU 0's node with another GPU's minor.
    let wrong = dev.join(format!("nvidia{}", gpus[0].minor));
    std::fs::remove_file(&wrong).unwrap();
    let status = Command::new("mknod")
        .arg(&wrong)
        .args(["c", "195", "99"])
        .status()
        .unwrap();
    assert!(status.success());

    let out = host.check(&[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row(
        "GPU device nodes",
        "✘",
        &[
            &format!("{} is missing", missing.display()),
            &format!(
                "{} is 195:99, but the driver registered 195:{}",
                wrong.display(),
                gpus[0].minor
            ),
            "fix: ",
        ],
    );
    out.assert_row(
        "control device nodes",
        "✘",
        &["nvidia-uvm-tools is missing", "nvidia-modprobe -u"],
    );
    assert!(
        out.stdout.contains("GPU containers cannot start"),
        "{}",
        out.stdout
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn unloaded_uvm_and_closed_modes_are_reported() {
    let host = Host::new();
    let devices = host.fake.proc_root.join("devices");
    let text = std::fs::read_to_string(&devices).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.ends_with(" nvidia-uvm"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&devices, text).unwrap();
    let ctl = host.fake.dev_dir().join("nvidiactl");
    std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o660)).unwrap();
    let out = host.check(&[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row(
        "control device nodes",
        "✘",
        &["the nvidia-uvm module is not loaded", "mode 0660"],
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn version_mismatch_fails() {
    let host = Host::new();
    std::fs::write(
        host.fake.proc_root.join("driver/nvidia/version"),
        nvc_tests::proc_version("999.88.76"),
    )
    .unwrap();
    let out = host.check(&[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row(
        "driver versions",
        "✘",
        &[
            "kernel module 999.88.76, but libcuda.so.1 is libcuda.so.999.88.77",
            "fix: reboot or reload the nvidia module after a driver upgrade",
        ],
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn unloaded_kernel_module_fails() {
    let host = Host::new();
    std::fs::remove_file(host.fake.proc_root.join("driver/nvidia/version")).unwrap();
    let out = host.check(&[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row("driver versions", "✘", &["kernel module is not loaded"]);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn no_driver_is_one_failed_row() {
    let host = Host::new();
    let empty = host.path("empty");
    std::fs::create_dir_all(empty.join("proc")).unwrap();
    let text = std::fs::read_to_string(&host.config).unwrap();
    let driver = |p: &Path| format!("\"{}\"", p.display());
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("root =") || l.starts_with("dev-root =") {
                format!("{} = {}", l.split(" =").next().unwrap(), driver(&empty))
            } else if l.starts_with("proc-root =") {
                format!("proc-root = {}", driver(&empty.join("proc")))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let config = host.path("nodriver.toml");
    std::fs::write(&config, text).unwrap();
    let out = host.check_with(&config, &[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row(
        "driver",
        "✘",
        &["no NVIDIA driver found", "fix: install the NVIDIA driver"],
    );
    assert_eq!(out.marks("✘"), 1, "{}", out.stdout);
    // The checks that need no driver still run.
    out.assert_row("hook", "✔", &[]);
    out.assert_row("runtime", "✔", &[]);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn malformed_config_fails() {
    let host = Host::new();
    let config = host.path("bad.toml");
    std::fs::write(&config, "[driver]\nroot = \"/\"\nroott = \"/x\"\n").unwrap();
    let out = host.check_with(&config, &[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row("config", "✘", &["line 3", "driver.roott", "fix: "]);
    assert_eq!(
        out.stdout.lines().filter(|l| !l.trim().is_empty()).count(),
        3,
        "{}",
        out.stdout
    );

    let out = host.check_with(&config, &["--json"]);
    assert_eq!(out.code, Some(1));
    let v = out.json();
    assert_eq!(v["ok"], false);
    assert_eq!(v["checks"][0]["status"], "fail");

    // A missing file is the defaults.
    let out = host.check_with(&host.path("absent.toml"), &["--json"]);
    let v = out.json();
    assert_eq!(v["checks"][0]["status"], "ok");
    assert!(v["checks"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("the defaults"));
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn missing_hook_and_runtime_fail() {
    let host = Host::new();
    let text = std::fs::read_to_string(&host.config).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("path =") {
                "path = \"/nonexistent/nvc-hook\"".to_string()
            } else if l.starts_with("runtimes =") {
                "runtimes = [\"no-such-runc\"]".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let config = host.path("nohook.toml");
    std::fs::write(&config, text).unwrap();
    let out = host.check_with(&config, &[]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row(
        "hook",
        "✘",
        &[
            "/nonexistent/nvc-hook does not exist",
            "fix: install nvc-hook",
        ],
    );
    out.assert_row("runtime", "✘", &["no-such-runc", "fix: install runc"]);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn docker_configured_or_not() {
    let host = Host::new();
    let daemon = host.path("daemon.json");

    // Not installed, not configured: information.
    host.check(&[])
        .assert_row("docker", "-", &["not installed"]);

    host.install("docker");
    let out = host.check(&[]);
    out.assert_row(
        "docker",
        "!",
        &["has no runtime running nvc-runtime", "fix: "],
    );
    assert_eq!(
        out.code,
        Some(0),
        "an engine not set up is a warning:\n{}",
        out.stdout
    );

    std::fs::write(
        &daemon,
        r#"{"runtimes": {"runc2": {"path": "/usr/bin/runc"}}}"#,
    )
    .unwrap();
    host.check(&[])
        .assert_row("docker", "!", &["has no runtime running nvc-runtime"]);

    let shim = workspace_bin("nvc-runtime");
    std::fs::write(
        &daemon,
        json!({"default-runtime": "nv", "runtimes": {"nv": {"path": shim, "args": []}}})
            .to_string(),
    )
    .unwrap();
    host.check(&[]).assert_row(
        "docker",
        "✔",
        &[
            "runtime \"nv\"",
            &shim.display().to_string(),
            "the default runtime",
        ],
    );

    std::fs::write(
        &daemon,
        json!({"runtimes": {"nv": {"path": "/nonexistent/nvc-runtime"}}}).to_string(),
    )
    .unwrap();
    // A runtime path that is not there fails every container that asks for it: a
    // failure with its fix, not a warning.
    let report = host.check(&[]);
    report.assert_row("docker", "✘", &["not an executable file", "do not start"]);
    assert!(
        report
            .stdout
            .contains("install nvc-runtime at /nonexistent/nvc-runtime"),
        "{}",
        report.stdout
    );

    std::fs::write(&daemon, "{ not json").unwrap();
    host.check(&[])
        .assert_row("docker", "!", &["not valid JSON"]);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn containerd_crio_and_podman_setups_are_found() {
    let host = Host::new();
    for engine in ["containerd", "crio", "podman"] {
        host.install(engine);
    }
    let out = host.check(&[]);
    out.assert_row("containerd", "!", &["nor its imports name nvc-runtime"]);
    out.assert_row("cri-o", "!", &["no CRI-O configuration names nvc-runtime"]);
    out.assert_row("podman", "!", &["runs nvc-hook"]);

    // containerd: the runtime is in a drop-in the main file imports by glob.
    let conf_d = host.path("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    std::fs::write(
        conf_d.join("99-nvc.toml"),
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv.options]\nBinaryName = \"/usr/bin/nvc-runtime\"\n",
    )
    .unwrap();
    std::fs::write(
        host.path("containerd.toml"),
        format!("version = 2\nimports = [\"{}/*.toml\"]\n", conf_d.display()),
    )
    .unwrap();
    std::fs::write(
        host.path("crio/99-nvc.conf"),
        "[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvc-runtime\"\n",
    )
    .unwrap();
    std::fs::write(
        host.path("hooks.d/nvc.json"),
        json!({"version": "1.0.0", "hook": {"path": "/usr/bin/nvc-hook", "args": ["nvc-hook", "prestart"]},
               "when": {"always": true}, "stages": ["prestart"]})
        .to_string(),
    )
    .unwrap();
    let out = host.check(&[]);
    out.assert_row("containerd", "✔", &["99-nvc.toml (imported by"]);
    out.assert_row("cri-o", "✔", &["99-nvc.conf"]);
    out.assert_row("podman", "✔", &["runs nvc-hook"]);
    assert_eq!(out.code, Some(0));
}

/// A CDI spec of this host's GPUs, in the shape `nvc cdi generate` writes.
fn cdi_spec(host: &Host, uuids: &[String]) -> Value {
    let devices: Vec<Value> = host
        .gpus()
        .iter()
        .zip(uuids)
        .enumerate()
        .map(|(i, (g, uuid))| {
            json!({
                "name": i.to_string(),
                "annotations": {"uuid": uuid},
                "containerEdits": {"deviceNodes": [{
                    "path": format!("/dev/nvidia{}", g.minor),
                    "hostPath": host.fake.dev_dir().join(format!("nvidia{}", g.minor)),
                    "major": 195, "minor": g.minor,
                }]}
            })
        })
        .collect();
    json!({
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "major": 195, "minor": 255}],
            "mounts": [{
                "hostPath": host.fake.lib_dir().join("libcuda.so.999.88.77"),
                "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }],
            "hooks": [{
                "hookName": "createContainer",
                "path": workspace_bin("nvc-hook"),
                "args": ["nvc-hook", "cdi-mask-proc", "--proc-root", host.fake.proc_root],
            }],
        }
    })
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn cdi_specs_are_compared_with_the_host() {
    let host = Host::new();
    host.install("podman");
    let spec_path = host.path("cdi/nvidia.json");
    let uuids: Vec<String> = host.gpus().iter().map(|g| g.uuid.clone()).collect();

    std::fs::write(&spec_path, cdi_spec(&host, &uuids).to_string()).unwrap();
    let out = host.check(&[]);
    out.assert_row("CDI spec", "✔", &["matches this host"]);
    out.assert_row("podman", "✔", &["CDI spec"]);

    // One GPU replaced by another: stale, a warning with the command that regenerates it.
    let mut other = uuids.clone();
    other[1] = "GPU-00000000-1111-2222-3333-444444444444".to_string();
    std::fs::write(&spec_path, cdi_spec(&host, &other).to_string()).unwrap();
    let out = host.check(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    out.assert_row(
        "CDI spec",
        "!",
        &[
            "is stale",
            "names gpu-00000000-1111-2222-3333-444444444444",
            &format!("lacks this host's {}", uuids[1].to_ascii_lowercase()),
            &format!(
                "fix: regenerate: `nvc cdi generate --output {}`",
                spec_path.display()
            ),
        ],
    );

    // Device numbers and files that changed under it.
    let mut spec = cdi_spec(&host, &uuids);
    spec["containerEdits"]["deviceNodes"][0]["minor"] = json!(254);
    spec["containerEdits"]["mounts"][0]["hostPath"] = json!("/nonexistent/libcuda.so.1.2.3");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    host.check(&[]).assert_row(
        "CDI spec",
        "!",
        &[
            "/dev/nvidiactl is 195:254 in the spec, 195:255 on this host",
            "mounts /nonexistent/libcuda.so.1.2.3, which is gone",
        ],
    );

    // A spec made from another driver tree, or for another driver version, names files
    // that exist but are not this host's driver's: stale, not "matches".
    let other_tree = host.path("other-root/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77");
    let older = host.path("other-root/usr/lib/x86_64-linux-gnu/libcuda.so.470.42.01");
    for f in [&other_tree, &older] {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"\x7fELF").unwrap();
    }
    let mut spec = cdi_spec(&host, &uuids);
    spec["containerEdits"]["mounts"][0]["hostPath"] = json!(other_tree);
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    host.check(&[]).assert_row(
        "CDI spec",
        "!",
        &[&format!(
            "mounts {}, which is no file of this host's driver",
            other_tree.display()
        )],
    );
    // Without the /proc/driver/nvidia mask (an older nvc's spec), or with one that reads
    // another proc root.
    let mut spec = cdi_spec(&host, &uuids);
    spec["containerEdits"]["hooks"] = json!([]);
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    host.check(&[]).assert_row(
        "CDI spec",
        "!",
        &["has no cdi-mask-proc hook, so its containers see every GPU in /proc/driver/nvidia"],
    );
    let mut spec = cdi_spec(&host, &uuids);
    spec["containerEdits"]["hooks"][0]["args"][3] = json!("/proc");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    host.check(&[]).assert_row(
        "CDI spec",
        "!",
        &[&format!(
            "its cdi-mask-proc hook reads the GPUs under /proc, this host's proc root is {}",
            host.fake.proc_root.display()
        )],
    );
    let mut spec = cdi_spec(&host, &uuids);
    spec["containerEdits"]["mounts"][0]["hostPath"] = json!(older);
    spec["containerEdits"]["hooks"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "hookName": "createContainer",
            "path": workspace_bin("nvc-hook"),
            "args": ["nvc-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu",
                     "--cuda-compat-above", "470.42.01"],
        }));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    host.check(&[]).assert_row(
        "CDI spec",
        "!",
        &[
            "is for driver 470.42.01, this host has 999.88.77",
            "compares CUDA compat libraries with driver 470.42.01",
        ],
    );

    // A YAML file of the kind that is no CDI spec.
    std::fs::remove_file(&spec_path).unwrap();
    let yaml = host.path("cdi/nvidia.yaml");
    std::fs::write(&yaml, "kind: nvidia.com/gpu\ndevices: 7\n").unwrap();
    host.check(&[])
        .assert_row("CDI spec", "!", &["not a CDI spec"]);
    std::fs::remove_file(&yaml).unwrap();

    // What `nvc cdi generate` writes, JSON or YAML, matches the host it was made on;
    // a GPU gone since makes it stale.
    for name in ["nvidia.json", "nvidia.yaml"] {
        let file = host.path("cdi").join(name);
        let status = Command::new(workspace_bin("nvc"))
            .args(["cdi", "generate", "--output"])
            .arg(&file)
            .env("NVC_CONFIG", &host.config)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let cdi_rows = |v: &Value| -> Vec<Value> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == "CDI spec")
            .cloned()
            .collect()
    };
    let v = host.check(&["--json"]).json();
    let rows = cdi_rows(&v);
    assert_eq!(rows.len(), 2, "{v}");
    for row in &rows {
        assert_eq!(row["status"], "ok", "{v}");
        assert!(row["detail"]
            .as_str()
            .unwrap()
            .contains("matches this host"));
    }
    let gone = &host.gpus()[2];
    std::fs::remove_dir_all(
        host.fake
            .proc_root
            .join("driver/nvidia/gpus")
            .join(&gone.bus_id),
    )
    .unwrap();
    let v = host.check(&["--json"]).json();
    let rows = cdi_rows(&v);
    assert_eq!(rows.len(), 2, "{v}");
    let node = format!("/dev/nvidia{} is no GPU of this host", gone.minor);
    for row in rows {
        assert_eq!(row["status"], "warn", "{row}");
        assert!(row["detail"].as_str().unwrap().contains(&node), "{row}");
    }
}

fn bundle(host: &Host, env: &[&str]) -> PathBuf {
    let dir = host.path(&format!(
        "bundle-{}",
        env.join("-").replace(['/', '='], "_")
    ));
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib/x86_64-linux-gnu")).unwrap();
    Bundle::new(&dir, &rootfs)
        .unwrap()
        .env(env)
        .write()
        .unwrap();
    dir
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_asking_for_a_missing_gpu_fails_with_the_error() {
    let host = Host::new();
    let dir = bundle(&host, &["NVIDIA_VISIBLE_DEVICES=7"]);
    let out = host.check(&["--bundle", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    out.assert_row("request", "✔", &["devices: GPU 7"]);
    out.assert_row("edits", "✘", &["GPU index 7 does not exist"]);
    assert!(
        out.stdout.contains(
            "The container would not start: nvc-runtime: NVIDIA_VISIBLE_DEVICES: GPU index 7 does not exist (this host has 3 GPUs, indices 0-2)"
        ),
        "{}",
        out.stdout
    );

    let out = host.check(&["--bundle", dir.to_str().unwrap(), "--json"]);
    assert_eq!(out.code, Some(1));
    let v = out.json();
    assert_eq!(v["wouldStart"], false);
    assert!(v["error"].as_str().unwrap().contains("GPU index 7"), "{v}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_the_shim_refuses_is_said_not_to_start() {
    // nvc-runtime refuses a rootfs whose /dev is a link (for any container) and a GPU
    // container whose rootfs is the host's /: `nvc check` says the same, in the same words.
    let host = Host::new();
    for env in [&["NVIDIA_VISIBLE_DEVICES=all"][..], &[]] {
        let dir = bundle(&host, env);
        let dev = dir.join("rootfs/dev");
        let _ = std::fs::remove_dir_all(&dev);
        std::os::unix::fs::symlink("/tmp", &dev).unwrap();
        let out = host.check(&["--bundle", dir.to_str().unwrap()]);
        assert_eq!(out.code, Some(1), "{}", out.stdout);
        assert!(
            out.stdout.contains(
                "The container would not start: nvc-runtime: the image's /dev is a symbolic link (to /tmp)"
            ),
            "{env:?}: {}",
            out.stdout
        );
    }
    let dir = host.path("bundle-host-root");
    std::fs::create_dir_all(&dir).unwrap();
    Bundle::new(&dir, Path::new("/"))
        .unwrap()
        .env(&["NVIDIA_VISIBLE_DEVICES=all"])
        .write()
        .unwrap();
    let out = host.check(&["--bundle", dir.to_str().unwrap(), "--json"]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    let v = out.json();
    assert_eq!(v["wouldStart"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("is the host's root directory"),
        "{v}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_without_a_mount_namespace_of_its_own_is_refused_for_a_gpu() {
    // nvc-runtime refuses a GPU container that shares the runtime's mount namespace or
    // joins another: `nvc check` shows the step, in the same words.
    let host = Host::new();
    for (namespaces, cause) in [
        (json!([{"type": "pid"}]), "has no \"mount\" entry"),
        (
            json!([{"type": "mount", "path": "/proc/1/ns/mnt"}]),
            "joins the one at /proc/1/ns/mnt",
        ),
    ] {
        let dir = host.path("bundle-namespaces");
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        Bundle::new(&dir, &rootfs)
            .unwrap()
            .env(&["NVIDIA_VISIBLE_DEVICES=all"])
            .set("/linux/namespaces", namespaces.clone())
            .write()
            .unwrap();
        let out = host.check(&["--bundle", dir.to_str().unwrap()]);
        assert_eq!(out.code, Some(1), "{}", out.stdout);
        out.assert_row(
            "namespace",
            "✘",
            &["needs a mount namespace of its own", cause],
        );
        assert!(
            out.stdout.contains(
                "The container would not start: nvc-runtime: a GPU container needs a mount \
                 namespace of its own"
            ),
            "{namespaces}: {}",
            out.stdout
        );
        // Without a GPU, the runtime's business.
        Bundle::new(&dir, &rootfs)
            .unwrap()
            .set("/linux/namespaces", namespaces)
            .write()
            .unwrap();
        let out = host.check(&["--bundle", dir.to_str().unwrap()]);
        assert_eq!(out.code, Some(0), "{}", out.stdout);
    }
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_with_a_valid_request_lists_what_it_gets() {
    let host = Host::new();
    let gpus = host.gpus();
    let dir = bundle(
        &host,
        &[
            "NVIDIA_VISIBLE_DEVICES=1",
            "NVIDIA_REQUIRE_DRIVER=driver>=500",
        ],
    );
    let out = host.check(&["--bundle", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    out.assert_row(
        "requirements",
        "✔",
        &["met: NVIDIA_REQUIRE_DRIVER=\"driver>=500\""],
    );
    for want in [
        "/dev/nvidiactl 195:255".to_string(),
        format!("/dev/nvidia{} 195:{}", gpus[1].minor, gpus[1].minor),
        "/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77".to_string(),
    ] {
        assert!(
            out.stdout.contains(&want),
            "missing {want}:\n{}",
            out.stdout
        );
    }
    assert!(
        !out.stdout
            .contains(&format!("/dev/nvidia{} ", gpus[0].minor)),
        "an unselected GPU:\n{}",
        out.stdout
    );
    let v = host
        .check(&["--bundle", dir.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(v["wouldStart"], true);
    assert_eq!(v["gpuSupport"], true);
    assert!(v["edits"]["deviceNodes"].as_array().unwrap().len() >= 2);

    // An unmet requirement is the hook's error.
    let dir = bundle(
        &host,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_DRIVER=driver>=1000",
        ],
    );
    let out = host.check(&["--bundle", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("would not start: nvc-hook: unsatisfied requirement"),
        "{}",
        out.stdout
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_without_a_gpu_request_says_why() {
    let host = Host::new();
    for (env, why) in [
        (&[][..], "NVIDIA_VISIBLE_DEVICES is unset"),
        (
            &["NVIDIA_VISIBLE_DEVICES=void"][..],
            "NVIDIA_VISIBLE_DEVICES=void",
        ),
        (
            &["NVIDIA_VISIBLE_DEVICES="][..],
            "NVIDIA_VISIBLE_DEVICES is empty",
        ),
    ] {
        let dir = bundle(&host, env);
        let out = host.check(&["--bundle", dir.to_str().unwrap()]);
        assert_eq!(out.code, Some(0), "{}", out.stdout);
        out.assert_row("GPU support", "-", &[why]);
    }
    let dir = bundle(&host, &["NVIDIA_VISIBLE_DEVICES=0,zz"]);
    let out = host.check(&["--bundle", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(1));
    out.assert_row("request", "✘", &["unknown device \"zz\""]);
    let out = host.check(&["--bundle", host.path("nowhere").to_str().unwrap()]);
    assert_eq!(out.code, Some(1));
    out.assert_row("spec", "✘", &["config.json"]);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn bundle_reads_cdi_annotations_like_the_shim() {
    let host = Host::new();
    let gpus = host.gpus();
    let dir = host.path("bundle-annotated");
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    Bundle::new(&dir, &rootfs)
        .unwrap()
        .set(
            "/annotations",
            json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=2"}),
        )
        .write()
        .unwrap();
    let out = host.check(&["--bundle", dir.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    out.assert_row(
        "request",
        "✔",
        &[
            "devices: GPU 2",
            "annotation cdi.k8s.io/gpu=nvidia.com/gpu=2",
        ],
    );
    let node = format!("/dev/nvidia{} 195:{}", gpus[2].minor, gpus[2].minor);
    assert!(out.stdout.contains(&node), "{}", out.stdout);
}

// nv-docker ---------------------------------------------------------------------------

fn nv_docker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/nv-docker")
}

/// Runs nv-docker with a docker that prints its argv, one argument a line.
fn nv_docker_argv(args: &[&str], nv_gpu: Option<&str>) -> (Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("docker");
    executable(
        &fake,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n",
    );
    let mut cmd = Command::new(nv_docker());
    cmd.args(args).env("DOCKER", &fake).env_remove("NV_RUNTIME");
    match nv_gpu {
        Some(g) => cmd.env("NV_GPU", g),
        None => cmd.env_remove("NV_GPU"),
    };
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (argv, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn nv_docker_adds_the_runtime_and_gpus() {
    let cases: &[(&[&str], Option<&str>, &[&str])] = &[
        (
            &["run", "--rm", "-it", "ubuntu", "nvidia-smi"],
            None,
            &["run", "--runtime=nv", "--rm", "-it", "ubuntu", "nvidia-smi"],
        ),
        (
            &["run", "--rm", "ubuntu", "sh", "-c", "echo a b"],
            Some("0,1"),
            &[
                "run",
                "--runtime=nv",
                "-e",
                "NVIDIA_VISIBLE_DEVICES=0,1",
                "--rm",
                "ubuntu",
                "sh",
                "-c",
                "echo a b",
            ],
        ),
        (
            &["create", "--name", "x", "ubuntu"],
            Some("0 1"),
            &[
                "create",
                "--runtime=nv",
                "-e",
                "NVIDIA_VISIBLE_DEVICES=0,1",
                "--name",
                "x",
                "ubuntu",
            ],
        ),
        (
            &["create", "ubuntu"],
            None,
            &["create", "--runtime=nv", "ubuntu"],
        ),
        (
            &["run", "ubuntu"],
            Some(""),
            &["run", "--runtime=nv", "ubuntu"],
        ),
        // Global flags, with values apart and attached.
        (
            &[
                "-H",
                "unix:///x",
                "--log-level",
                "debug",
                "-D",
                "--context=c",
                "run",
                "ubuntu",
            ],
            Some("2"),
            &[
                "-H",
                "unix:///x",
                "--log-level",
                "debug",
                "-D",
                "--context=c",
                "run",
                "--runtime=nv",
                "-e",
                "NVIDIA_VISIBLE_DEVICES=2",
                "ubuntu",
            ],
        ),
        // A global flag's value that reads like a subcommand is not one.
        (
            &["--config", "run", "--tlscacert", "create", "ps"],
            Some("1"),
            &["--config", "run", "--tlscacert", "create", "ps"],
        ),
        (
            &["container", "run", "ubuntu"],
            None,
            &["container", "run", "--runtime=nv", "ubuntu"],
        ),
        // Other subcommands, untouched, even when run/create come later.
        (&["ps", "-a"], Some("0"), &["ps", "-a"]),
        (&["images", "run"], Some("0"), &["images", "run"]),
        (
            &["exec", "-it", "c", "create"],
            None,
            &["exec", "-it", "c", "create"],
        ),
        (&["container", "ls"], Some("0"), &["container", "ls"]),
        (&[], Some("0"), &[]),
    ];
    for (args, nv_gpu, want) in cases {
        let (got, _) = nv_docker_argv(args, *nv_gpu);
        assert_eq!(got, *want, "nv-docker {args:?} with NV_GPU={nv_gpu:?}");
    }
}

#[test]
fn nv_docker_leaves_an_explicit_visible_devices_alone() {
    for args in [
        &["run", "-e", "NVIDIA_VISIBLE_DEVICES=3", "ubuntu"][..],
        &["run", "--env=NVIDIA_VISIBLE_DEVICES=3", "ubuntu"],
        &["run", "--env", "NVIDIA_VISIBLE_DEVICES", "ubuntu"],
        &["run", "-ite", "NVIDIA_VISIBLE_DEVICES=3", "ubuntu"],
        &["run", "-eNVIDIA_VISIBLE_DEVICES=3", "ubuntu"],
        &[
            "run",
            "--name",
            "x",
            "-v",
            "/a:/b",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=3",
            "ubuntu",
        ],
    ] {
        let (got, err) = nv_docker_argv(args, Some("0"));
        let mut want = vec![args[0], "--runtime=nv"];
        want.extend(&args[1..]);
        assert_eq!(got, want, "{args:?}");
        assert!(err.contains("NV_GPU=0 ignored"), "{err}");
    }
    // After the image, `-e` belongs to the container's command.
    let (got, _) = nv_docker_argv(
        &[
            "run",
            "--name",
            "x",
            "ubuntu",
            "env",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=3",
        ],
        Some("0"),
    );
    assert_eq!(
        got,
        [
            "run",
            "--runtime=nv",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=0",
            "--name",
            "x",
            "ubuntu",
            "env",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=3"
        ]
    );
}

#[test]
fn nv_docker_honours_nv_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("docker");
    executable(&fake, "#!/bin/sh\nprintf '%s\\n' \"$@\"\n");
    let out = Command::new(nv_docker())
        .args(["run", "ubuntu"])
        .env("DOCKER", &fake)
        .env("NV_RUNTIME", "nvidia")
        .env_remove("NV_GPU")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "run\n--runtime=nvidia\nubuntu\n"
    );
}
