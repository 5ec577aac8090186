//! `nvc-runtime` end to end, with a fake low-level runtime: a shell script that records
//! its working directory and argv. Each test has its own temp dir and config
//! (`NVC_CONFIG`), so tests run in parallel.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use tempfile::TempDir;

/// A test's world: a config, a fake runtime, a fake hook, an empty driver root and a
/// bundle.
struct World {
    dir: TempDir,
    config: PathBuf,
    runtime: PathBuf,
    record: PathBuf,
    hook: PathBuf,
    bundle: PathBuf,
}

fn executable(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn toml_string(p: &Path) -> String {
    serde_json::to_string(p.to_str().unwrap()).unwrap()
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let record = root.join("record");
        let runtime = root.join("fake-runc");
        // One line per item, so arguments with spaces survive; NUL-free test args only.
        executable(
            &runtime,
            &format!(
                "#!/bin/sh\n{{ printf 'cwd=%s\\n' \"$(pwd)\"; for a in \"$@\"; do printf 'arg=%s\\n' \"$a\"; done; }} > {}\n",
                toml_string(&record)
            ),
        );
        let hook = root.join("nvc-hook");
        executable(&hook, "#!/bin/sh\nexit 0\n");
        let empty = root.join("no-driver");
        fs::create_dir(&empty).unwrap();
        let bundle = root.join("bundle");
        fs::create_dir(&bundle).unwrap();
        let config = root.join("config.toml");
        let world = World {
            dir,
            config,
            runtime,
            record,
            hook,
            bundle,
        };
        world.write_config(&format!(
            "[driver]\nroot = {e}\ndev-root = {e}\nproc-root = {e}\n\n[log]\nfile = \"\"\n",
            e = toml_string(&empty)
        ));
        world
    }

    /// Writes the config: `driver_and_log` plus `[runtime]` (the fake) and the hook's
    /// `path` (in `driver_and_log`'s `[hook]` where it has one, as a fake tree's config
    /// does).
    fn write_config(&self, driver_and_log: &str) {
        let hook = format!("[hook]\npath = {}\n", toml_string(&self.hook));
        let text = if driver_and_log.contains("[hook]\n") {
            driver_and_log.replace("[hook]\n", &hook)
        } else {
            format!("{driver_and_log}\n{hook}")
        };
        fs::write(
            &self.config,
            format!(
                "{text}\n[runtime]\nruntimes = [{}]\n",
                toml_string(&self.runtime),
            ),
        )
        .unwrap();
    }

    fn spec_path(&self) -> PathBuf {
        self.bundle.join("config.json")
    }

    fn write_spec(&self, spec: &Value) -> Vec<u8> {
        let bytes = serde_json::to_vec_pretty(spec).unwrap();
        fs::write(self.spec_path(), &bytes).unwrap();
        bytes
    }

    fn shim(&self, args: &[&str]) -> Output {
        self.shim_in(self.dir.path(), args.iter().map(OsString::from).collect())
    }

    fn shim_in(&self, cwd: &Path, args: Vec<OsString>) -> Output {
        Command::new(env!("CARGO_BIN_EXE_nvc-runtime"))
            .args(args)
            .current_dir(cwd)
            .env("NVC_CONFIG", &self.config)
            .output()
            .unwrap()
    }

    /// The fake runtime's cwd and argv, when it ran.
    fn recorded(&self) -> Option<(PathBuf, Vec<OsString>)> {
        let text = fs::read(&self.record).ok()?;
        let mut cwd = None;
        let mut args = Vec::new();
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Some(c) = line.strip_prefix(b"cwd=") {
                cwd = Some(PathBuf::from(OsString::from_vec(c.to_vec())));
            } else if let Some(a) = line.strip_prefix(b"arg=") {
                args.push(OsString::from_vec(a.to_vec()));
            }
        }
        Some((cwd.unwrap(), args))
    }
}

fn spec_with_env(env: &[&str]) -> Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": false,
            "args": ["sh"],
            "env": env,
            "cwd": "/",
            "capabilities": {"bounding": ["CAP_KILL"]}
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "runc",
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "mount"}],
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "unknownKnob": 1
        },
        "vendorExtension": {"keep": ["me", 1]}
    })
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn failed(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(stderr.starts_with("nvc-runtime: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr.trim_end().to_string()
}

#[test]
fn other_subcommands_pass_through_untouched() {
    let w = World::new();
    // A spec that would fail if it were read: pass-through reads nothing but the config.
    fs::write(w.spec_path(), "{ not json").unwrap();
    let lines: &[&[&str]] = &[
        &[],
        &["--version"],
        &["state", "ctr"],
        &["start", "ctr"],
        &["delete", "--force", "ctr"],
        &["kill", "ctr", "SIGKILL"],
        &[
            "--root",
            "/run/r",
            "--log",
            "/tmp/l.json",
            "--log-format",
            "json",
            "start",
            "ctr",
        ],
        &["exec", "--tty", "ctr", "sh", "-c", "echo a  b"],
        &["--root", "create", "exec", "create"],
        &["--log=create", "ps", "create"],
        &["features"],
        &["create", "--help"],
        &["create", "--bundle"],
        &["--systemd-cgroup", "update", "--memory", "1g", "ctr"],
    ];
    for args in lines {
        let _ = fs::remove_file(&w.record);
        let out = w.shim_in(&w.bundle, args.iter().map(OsString::from).collect());
        ok(&out);
        let (cwd, got) = w
            .recorded()
            .unwrap_or_else(|| panic!("{args:?}: runtime not run"));
        let want: Vec<OsString> = args.iter().map(OsString::from).collect();
        assert_eq!(got, want, "{args:?}");
        assert_eq!(cwd, w.bundle, "{args:?}");
    }
    assert_eq!(fs::read(w.spec_path()).unwrap(), b"{ not json");

    // Arguments that are not UTF-8 pass through byte for byte.
    let _ = fs::remove_file(&w.record);
    let odd = vec![
        OsString::from("state"),
        OsString::from_vec(b"ctr\xff".to_vec()),
    ];
    ok(&w.shim_in(&w.bundle, odd.clone()));
    assert_eq!(w.recorded().unwrap().1, odd);
}

fn identity(path: &Path) -> (u64, u64, i64, i64) {
    let m = fs::metadata(path).unwrap();
    (m.dev(), m.ino(), m.mtime(), m.mtime_nsec())
}

#[test]
fn containers_without_gpus_keep_their_spec_untouched() {
    let w = World::new();
    let envs: &[&[&str]] = &[
        &["PATH=/bin"],
        &["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"],
        &["PATH=/bin", "NVIDIA_VISIBLE_DEVICES="],
        &["PATH=/bin", "NVIDIA_DRIVER_CAPABILITIES=all"],
    ];
    for env in envs {
        let bytes = w.write_spec(&spec_with_env(env));
        let before = identity(&w.spec_path());
        let bundle = w.bundle.to_str().unwrap();
        let bundle_eq = format!("--bundle={bundle}");
        let forms: Vec<(PathBuf, Vec<&str>)> = vec![
            (
                w.dir.path().into(),
                vec!["create", "--bundle", bundle, "ctr"],
            ),
            (
                w.dir.path().into(),
                vec!["--log", "/dev/null", "run", "-b", bundle, "--detach", "ctr"],
            ),
            (w.dir.path().into(), vec!["create", &bundle_eq, "ctr"]),
            (w.bundle.clone(), vec!["create", "ctr"]),
            (w.bundle.clone(), vec!["run", "--pid-file", "/tmp/p", "ctr"]),
        ];
        for (cwd, args) in forms {
            let _ = fs::remove_file(&w.record);
            let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            ok(&w.shim_in(&cwd, argv.clone()));
            let (ran_in, got) = w.recorded().unwrap();
            assert_eq!((ran_in, got), (cwd.clone(), argv), "{env:?} {args:?}");
            assert_eq!(fs::read(w.spec_path()).unwrap(), bytes, "{env:?} {args:?}");
            assert_eq!(
                identity(&w.spec_path()),
                before,
                "not rewritten: {env:?} {args:?}"
            );
        }
    }
}

/// With `accept-envvar-when-unprivileged = false`, an unprivileged container's
/// `cdi.k8s.io/` annotations select no GPU, as its variables do not: the spec is left
/// alone (with the empty driver root, reading them would have failed discovery), while
/// a privileged container's annotation is read (and fails here for want of a driver).
#[test]
fn strict_policy_ignores_an_unprivileged_containers_annotations() {
    let w = World::new();
    let empty = w.dir.path().join("no-driver");
    w.write_config(&format!(
        "[driver]\nroot = {e}\ndev-root = {e}\nproc-root = {e}\n\n[log]\nfile = \"\"\n\n\
         [requests]\naccept-envvar-when-unprivileged = false\n",
        e = toml_string(&empty)
    ));
    let bundle = w.bundle.to_str().unwrap();
    let mut spec = spec_with_env(&["PATH=/bin"]);
    spec["annotations"] = json!({"cdi.k8s.io/gpu": "nvidia.com/gpu=0"});
    let bytes = w.write_spec(&spec);
    ok(&w.shim(&["create", "--bundle", bundle, "ctr"]));
    assert!(w.recorded().is_some());
    assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);

    spec["process"]["capabilities"]["bounding"] = json!(["CAP_SYS_ADMIN"]);
    let bytes = w.write_spec(&spec);
    let _ = fs::remove_file(&w.record);
    failed(&w.shim(&["create", "--bundle", bundle, "ctr"]));
    assert!(w.recorded().is_none());
    assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
}

#[test]
fn gpu_request_without_a_driver_fails_before_the_runtime() {
    let w = World::new();
    let bytes = w.write_spec(&spec_with_env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]));
    let bundle = w.bundle.to_str().unwrap();

    // No --log: stderr only.
    let err = failed(&w.shim(&["create", "--bundle", bundle, "ctr"]));
    assert!(
        err.starts_with("nvc-runtime: no NVIDIA driver found"),
        "{err}"
    );

    for (format, extra) in [
        ("text", vec![]),
        ("json", vec!["--log-format", "json"]),
        ("text", vec!["--log-format=text"]),
    ] {
        let log = w
            .dir
            .path()
            .join(format!("runc-{format}-{}.log", extra.len()));
        fs::write(&log, "earlier line\n").unwrap();
        let log_s = log.to_str().unwrap();
        let mut args = vec!["--root", "/run/x", "--log", log_s];
        args.extend(extra);
        args.extend(["create", "--bundle", bundle, "ctr"]);
        let err = failed(&w.shim(&args));
        assert!(w.recorded().is_none(), "the runtime must not run");
        assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);

        let text = fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], "earlier line");
        let line = lines[1];
        if format == "json" {
            let v: Value = serde_json::from_str(line).unwrap();
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["level", "msg", "time"], "{line}");
            assert_eq!(v["level"], "error");
            assert_eq!(v["msg"], err.as_str());
            assert_time(v["time"].as_str().unwrap());
        } else {
            let rest = line
                .strip_prefix("time=\"")
                .unwrap_or_else(|| panic!("{line}"));
            let (time, rest) = rest.split_once('"').unwrap();
            assert_time(time);
            assert_eq!(rest, format!(" level=error msg=\"{err}\""));
        }
    }
}

fn assert_time(t: &str) {
    let b = t.as_bytes();
    assert_eq!(b.len(), 20, "{t}");
    for (i, c) in b.iter().enumerate() {
        match i {
            4 | 7 => assert_eq!(*c, b'-', "{t}"),
            10 => assert_eq!(*c, b'T', "{t}"),
            13 | 16 => assert_eq!(*c, b':', "{t}"),
            19 => assert_eq!(*c, b'Z', "{t}"),
            _ => assert!(c.is_ascii_digit(), "{t}"),
        }
    }
}

#[test]
fn no_runtime_found_names_the_candidates() {
    let w = World::new();
    fs::write(
        &w.config,
        "[log]\nfile = \"\"\n[runtime]\nruntimes = [\"/nonexistent/runc\", \"no-such-runtime\"]\n",
    )
    .unwrap();
    let empty_path = w.dir.path().join("empty-bin");
    fs::create_dir(&empty_path).unwrap();
    let log = w.dir.path().join("runc.log");
    let out = Command::new(env!("CARGO_BIN_EXE_nvc-runtime"))
        .args([
            "--log",
            log.to_str().unwrap(),
            "--log-format",
            "json",
            "state",
            "ctr",
        ])
        .env("NVC_CONFIG", &w.config)
        .env("PATH", &empty_path)
        .output()
        .unwrap();
    let err = failed(&out);
    assert!(err.contains("no low-level runtime found"), "{err}");
    assert!(
        err.contains("[/nonexistent/runc, no-such-runtime]"),
        "{err}"
    );
    assert!(err.contains(empty_path.to_str().unwrap()), "{err}");
    assert!(err.contains(w.config.to_str().unwrap()), "{err}");
    let logged: Value = serde_json::from_str(fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(logged["msg"], err.as_str());
}

#[test]
fn invalid_spec_or_request_is_reported() {
    let w = World::new();
    let bundle = w.bundle.to_str().unwrap();

    fs::write(
        w.spec_path(),
        "{\"root\": {\"path\": \"rootfs\"},\n \"process\": [}",
    )
    .unwrap();
    let err = failed(&w.shim(&["create", "-b", bundle, "ctr"]));
    assert!(
        err.contains(&format!("invalid JSON in {}", w.spec_path().display())),
        "{err}"
    );
    assert!(err.contains("line 2 column"), "{err}");

    w.write_spec(&json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}));
    let err = failed(&w.shim(&["create", "-b", bundle, "ctr"]));
    let want = format!(
        "invalid OCI spec {}: the spec has no root",
        w.spec_path().display()
    );
    assert!(err.ends_with(&want), "{err}");

    let bytes = w.write_spec(&spec_with_env(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
    ]));
    let err = failed(&w.shim(&["run", "-b", bundle, "ctr"]));
    assert!(
        err.contains("invalid GPU request in the container's environment"),
        "{err}"
    );
    assert!(err.contains("\"warp\""), "{err}");
    assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
    assert!(w.recorded().is_none());

    // A config that is not valid fails every subcommand, pass-through included.
    fs::write(&w.config, "[runtime]\nruntimes = 1\n").unwrap();
    let err = failed(&w.shim(&["state", "ctr"]));
    assert!(err.contains("invalid config file"), "{err}");
}

/// A fake driver tree (needs root for its device nodes): the spec gets the hook once,
/// every node with its numbers and allow rule, and keeps everything else; a second run
/// changes nothing.
#[test]
#[ignore = "needs root: the fake driver tree has device nodes"]
fn gpu_container_gets_nodes_rules_and_hook() {
    nvc_tests::require_root("the fake driver tree has device nodes");
    let w = World::new();
    let driver_dir = w.dir.path().join("driver");
    fs::create_dir(&driver_dir).unwrap();
    let fake = nvc_tests::FakeDriverSpec::default()
        .build(&driver_dir)
        .unwrap();
    let driver_and_log = fs::read_to_string(&fake.config).unwrap();
    w.write_config(&driver_and_log);

    let spec = spec_with_env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]);
    w.write_spec(&spec);
    let bundle = w.bundle.to_str().unwrap();
    let args = [
        "--root",
        "/run/x",
        "create",
        "--bundle",
        bundle,
        "--pid-file",
        "/run/p",
        "ctr",
    ];
    ok(&w.shim(&args));
    let (_, ran) = w.recorded().unwrap();
    assert_eq!(ran, args.iter().map(OsString::from).collect::<Vec<_>>());

    let edited: Value = serde_json::from_slice(&fs::read(w.spec_path()).unwrap()).unwrap();
    // The hook, once, with a fixed environment naming the config.
    let prestart = edited["hooks"]["prestart"].as_array().unwrap();
    assert_eq!(prestart.len(), 1);
    assert_eq!(prestart[0]["path"], w.hook.to_str().unwrap());
    // The hook's arguments: its mode, then the GPUs the shim read, handed on.
    let hook_args: Vec<String> = serde_json::from_value(prestart[0]["args"].clone()).unwrap();
    assert_eq!(hook_args[..3], ["nvc-hook", "prestart", "--gpus"]);
    let handed = libnvc::plan::Handed::parse(&hook_args[2..]).unwrap();
    assert!(handed.device_mounts.is_empty());
    let listed = handed
        .gpus
        .unwrap()
        .fresh(Path::new("/proc/driver/nvidia"))
        .unwrap();
    let got: Vec<(String, u32, String, String)> = listed
        .gpus
        .iter()
        .map(|g| (g.bus_id.clone(), g.minor, g.uuid.clone(), g.model.clone()))
        .collect();
    let want: Vec<(String, u32, String, String)> = fake
        .spec
        .gpus_in_bus_order()
        .into_iter()
        .map(|g| (g.bus_id.clone(), g.minor, g.uuid.clone(), g.model.clone()))
        .collect();
    assert_eq!(got, want);
    // runc kills the hook 2 s after its own deadline, hook.timeout (30 s by default).
    assert_eq!(prestart[0]["timeout"], 32);
    assert_eq!(
        prestart[0]["env"],
        json!([
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            format!("NVC_CONFIG={}", w.config.display())
        ])
    );
    // Every node, with the tree's numbers, and its allow rule after the deny-all.
    let mut want = vec![
        (
            "/dev/nvidiactl".to_string(),
            nvc_tests::NVIDIA_MAJOR,
            nvc_tests::NVIDIACTL_MINOR,
        ),
        (
            "/dev/nvidia-uvm".to_string(),
            nvc_tests::NVIDIA_UVM_MAJOR,
            0,
        ),
        (
            "/dev/nvidia-uvm-tools".to_string(),
            nvc_tests::NVIDIA_UVM_MAJOR,
            1,
        ),
    ];
    for gpu in fake.spec.gpus_in_bus_order() {
        want.push((
            format!("/dev/nvidia{}", gpu.minor),
            nvc_tests::NVIDIA_MAJOR,
            gpu.minor,
        ));
    }
    // The fake tree's nodes are not at their own host paths: each is a bind mount from
    // where it is, never a node the runtime makes (runc, refused mknod, would bind it from
    // its container path on the host).
    assert!(edited["linux"].get("devices").is_none(), "{edited}");
    let bound: Vec<(String, String)> = edited["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["destination"]
                .as_str()
                .unwrap()
                .starts_with("/dev/nvidia")
        })
        .map(|m| {
            assert_eq!(m["type"], "bind");
            assert_eq!(m["options"], json!(["bind", "nosuid", "noexec"]));
            let source = m["source"].as_str().unwrap().to_string();
            (m["destination"].as_str().unwrap().to_string(), source)
        })
        .collect();
    let want_bound: Vec<(String, String)> = want
        .iter()
        .map(|(path, _, _)| {
            let source = fake.dev_root.join(path.trim_start_matches('/'));
            (path.clone(), source.display().to_string())
        })
        .collect();
    assert_eq!(bound, want_bound);
    let rules = edited["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(rules[0], json!({"allow": false, "access": "rwm"}));
    for (path, major, minor) in &want {
        let rule =
            json!({"allow": true, "type": "c", "major": major, "minor": minor, "access": "rwm"});
        assert_eq!(rules.iter().filter(|r| **r == rule).count(), 1, "{path}");
    }
    assert_eq!(rules.len(), 1 + want.len());
    // Everything else as it was; no annotation for a runtime that is not crun (see
    // `only_crun_gets_the_hooks_stderr_annotation`).
    assert!(edited.get("annotations").is_none(), "{edited}");
    assert_eq!(edited["vendorExtension"], spec["vendorExtension"]);
    assert_eq!(edited["linux"]["unknownKnob"], 1);
    assert_eq!(edited["process"], spec["process"]);
    assert_eq!(edited["root"], spec["root"]);

    // Again: same bytes, and the file is not even rewritten.
    let bytes = fs::read(w.spec_path()).unwrap();
    let before = identity(&w.spec_path());
    ok(&w.shim(&args));
    assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
    assert_eq!(identity(&w.spec_path()), before);

    // The runtime's timeout follows the configured hook.timeout.
    w.write_config(&driver_and_log);
    let text = fs::read_to_string(&w.config).unwrap();
    fs::write(
        &w.config,
        text.replace("[hook]\n", "[hook]\ntimeout = 100\n"),
    )
    .unwrap();
    w.write_spec(&spec);
    ok(&w.shim(&args));
    let edited: Value = serde_json::from_slice(&fs::read(w.spec_path()).unwrap()).unwrap();
    assert_eq!(edited["hooks"]["prestart"][0]["timeout"], 102);

    // A missing hook is an error, not a spec runc fails on later.
    w.write_spec(&spec);
    fs::remove_file(&w.hook).unwrap();
    let err = failed(&w.shim(&args));
    assert!(
        err.contains(&format!(
            "the hook {} is not an executable file",
            w.hook.display()
        )),
        "{err}"
    );
}

/// crun sends a hook's stderr nowhere unless `run.oci.hooks.stderr` names a file: the
/// shim adds it when the runtime it runs is crun, and for no other runtime, whose hooks
/// would read in the state an annotation the user never wrote.
#[test]
#[ignore = "needs root: the fake driver tree has device nodes"]
fn only_crun_gets_the_hooks_stderr_annotation() {
    nvc_tests::require_root("the fake driver tree has device nodes");
    let mut w = World::new();
    let driver_dir = w.dir.path().join("driver");
    fs::create_dir(&driver_dir).unwrap();
    let fake = nvc_tests::FakeDriverSpec::default()
        .build(&driver_dir)
        .unwrap();
    let driver_and_log = fs::read_to_string(&fake.config).unwrap();
    let mut spec = spec_with_env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]);
    spec["annotations"] = json!({"org.example": "kept"});
    let bundle = w.bundle.to_str().unwrap().to_string();
    let args = ["create", "--bundle", &bundle, "ctr"];
    let annotations = |w: &World| {
        let edited: Value = serde_json::from_slice(&fs::read(w.spec_path()).unwrap()).unwrap();
        edited["annotations"].clone()
    };

    w.write_config(&driver_and_log);
    w.write_spec(&spec);
    ok(&w.shim(&args));
    assert_eq!(annotations(&w), json!({"org.example": "kept"}));

    // The same fake runtime, named crun; and through a link named otherwise.
    let crun = w.dir.path().join("crun");
    fs::copy(&w.runtime, &crun).unwrap();
    let link = w.dir.path().join("oci-runtime");
    std::os::unix::fs::symlink(&crun, &link).unwrap();
    for runtime in [crun, link] {
        w.runtime = runtime;
        w.write_config(&driver_and_log);
        w.write_spec(&spec);
        let _ = fs::remove_file(&w.record);
        ok(&w.shim(&args));
        assert!(w.recorded().is_some());
        assert_eq!(
            annotations(&w),
            json!({"org.example": "kept", "run.oci.hooks.stderr": "/dev/stderr"}),
            "{}",
            w.runtime.display()
        );
        // One the spec names is kept.
        let mut own = spec.clone();
        own["annotations"]["run.oci.hooks.stderr"] = json!("/var/log/hooks.err");
        w.write_spec(&own);
        ok(&w.shim(&args));
        assert_eq!(
            annotations(&w)["run.oci.hooks.stderr"],
            "/var/log/hooks.err"
        );
    }
}

/// A GPU container needs a mount namespace of its own: one with no `mount` namespace, or
/// one that joins an existing one, is refused before the runtime runs (and before the
/// driver is read: this world has none), its spec untouched, with the cause named; a
/// container that asks for no GPU is left to the runtime.
#[test]
fn a_gpu_container_without_a_mount_namespace_of_its_own_is_refused_before_the_runtime() {
    let w = World::new();
    let bundle = w.bundle.to_str().unwrap();
    for (namespaces, cause) in [
        (
            json!([{"type": "pid"}]),
            "has no \"mount\" entry".to_string(),
        ),
        (json!(null), "has no \"mount\" entry".to_string()),
        (
            json!([{"type": "mount", "path": "/proc/1/ns/mnt"}]),
            "joins the one at /proc/1/ns/mnt".to_string(),
        ),
    ] {
        let mut spec = spec_with_env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]);
        spec["linux"]["namespaces"] = namespaces.clone();
        let bytes = w.write_spec(&spec);
        let _ = fs::remove_file(&w.record);
        let err = failed(&w.shim(&["create", "--bundle", bundle, "ctr"]));
        let want = format!(
            "nvc-runtime: a GPU container needs a mount namespace of its own, and \
             linux.namespaces in {} {cause}",
            w.spec_path().display()
        );
        assert!(err.starts_with(&want), "{namespaces}: {err}");
        assert!(w.recorded().is_none(), "the runtime ran: {namespaces}");
        assert_eq!(fs::read(w.spec_path()).unwrap(), bytes, "{namespaces}");

        spec["process"]["env"] = json!(["PATH=/bin"]);
        let bytes = w.write_spec(&spec);
        ok(&w.shim(&["create", "--bundle", bundle, "ctr"]));
        assert!(w.recorded().is_some());
        assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
    }
}

#[test]
fn a_rootfs_whose_dev_is_a_link_is_refused_before_the_runtime() {
    let w = World::new();
    let rootfs = w.bundle.join("rootfs");
    fs::create_dir(&rootfs).unwrap();
    std::os::unix::fs::symlink("/somewhere/outside", rootfs.join("dev")).unwrap();
    for env in [
        &["PATH=/bin"][..],
        &["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"],
    ] {
        let bytes = w.write_spec(&spec_with_env(env));
        let _ = fs::remove_file(&w.record);
        let bundle = w.bundle.to_str().unwrap();
        let err = failed(&w.shim(&["create", "--bundle", bundle, "ctr"]));
        assert!(err.contains("/dev is a symbolic link"), "{err}");
        assert!(err.contains("/somewhere/outside"), "{err}");
        assert!(err.contains(&rootfs.display().to_string()), "{err}");
        assert!(w.recorded().is_none(), "the runtime ran: {env:?}");
        assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
    }
    // A real directory is fine; other commands never look.
    fs::remove_file(rootfs.join("dev")).unwrap();
    fs::create_dir(rootfs.join("dev")).unwrap();
    w.write_spec(&spec_with_env(&["PATH=/bin"]));
    ok(&w.shim(&["create", "--bundle", w.bundle.to_str().unwrap(), "ctr"]));
}

/// A GPU container whose rootfs is the host's `/` (by name, through a link, or a bind
/// mount: compared by device and inode) is refused before the runtime runs, its spec
/// untouched; a container that asks for no GPU is left to the runtime.
#[test]
fn a_gpu_container_on_the_host_root_is_refused_before_the_runtime() {
    let w = World::new();
    let link = w.bundle.join("host-root");
    std::os::unix::fs::symlink("/", &link).unwrap();
    let bundle = w.bundle.to_str().unwrap();
    for root in ["/", link.to_str().unwrap(), "host-root"] {
        let mut spec = spec_with_env(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]);
        spec["root"]["path"] = json!(root);
        let bytes = w.write_spec(&spec);
        let _ = fs::remove_file(&w.record);
        let err = failed(&w.shim(&["create", "--bundle", bundle, "ctr"]));
        let shown = if root == "host-root" {
            link.display().to_string()
        } else {
            root.to_string()
        };
        assert_eq!(
            err,
            format!(
                "nvc-runtime: the container's root filesystem {shown} is the host's root \
                 directory: nvc will not set up a GPU container there (root.path in {})",
                w.spec_path().display()
            )
        );
        assert!(w.recorded().is_none(), "the runtime ran: {root}");
        assert_eq!(fs::read(w.spec_path()).unwrap(), bytes, "{root}");
    }
    // No GPU asked for: the runtime decides.
    let mut spec = spec_with_env(&["PATH=/bin"]);
    spec["root"]["path"] = json!("/");
    let bytes = w.write_spec(&spec);
    ok(&w.shim(&["create", "--bundle", bundle, "ctr"]));
    assert!(w.recorded().is_some());
    assert_eq!(fs::read(w.spec_path()).unwrap(), bytes);
}

/// Control characters from the spec (here in the rootfs path a message names) reach
/// stderr and runc's log escaped: one line, no terminal escape codes.
#[test]
fn messages_quoting_the_spec_are_escaped() {
    let w = World::new();
    let name = "root\nfs\u{1b}[2J";
    let rootfs = w.bundle.join(name);
    fs::create_dir(&rootfs).unwrap();
    std::os::unix::fs::symlink("/outside\r\n", rootfs.join("dev")).unwrap();
    let mut spec = spec_with_env(&["PATH=/bin"]);
    spec["root"]["path"] = json!(name);
    w.write_spec(&spec);
    let log = w.dir.path().join("runc.log");
    let bundle = w.bundle.to_str().unwrap();
    let log_arg = log.to_str().unwrap();
    let err = failed(&w.shim(&["--log", log_arg, "create", "--bundle", bundle, "ctr"]));
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert!(err.contains("/outside\\r\\n"), "{err}");
    assert!(err.contains("root\\nfs\\u{1b}[2J"), "{err}");
    let line = fs::read_to_string(&log).unwrap();
    assert_eq!(line.lines().count(), 1, "{line:?}");
    assert!(line.contains("root\\\\nfs\\\\u{1b}[2J"), "{line}");
}
