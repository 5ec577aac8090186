//! Bad input everywhere: malformed specs, hostile environment values, broken nvc configs,
//! a missing driver, a bundle that cannot be written (read-only, full disk), megabytes of
//! annotations, and a shim killed while it saves the spec. Each refusal names the file,
//! variable or value and what is wrong; config.json is never left half-written; nothing
//! is mounted on the host and no temporary file stays in the bundle.

use std::cell::Cell;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nvc_tests::{
    container_id, dir_names, host_mounts_beside_tests, processes_under, runc_containers,
    runc_delete, workspace_bin, Bundle, FakeDriver, FakeGpu, Outcome, Runtime, TestMount,
    TestRootfs, TestSetup,
};
use serde_json::{json, Value};

/// One test's world: a fake driver, a rootfs, an nvc config, a runtime through the shim.
struct World {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    rootfs: TestRootfs,
    config: PathBuf,
    rt: Runtime,
    n: Cell<u32>,
}

impl World {
    fn new() -> World {
        let TestSetup {
            dir,
            fake,
            rootfs,
            config,
        } = TestSetup::new("containers need runc, device nodes and mounts");
        let rt = Runtime::nvc(&dir.path().join("state"), &config);
        World {
            dir,
            fake,
            rootfs,
            config,
            rt,
            n: Cell::new(0),
        }
    }

    /// A fresh bundle directory under `parent` (the world's directory when `None`) whose
    /// container runs `sh -c true` with `env`.
    fn bundle_in(&self, parent: Option<&Path>, env: &[&str]) -> Bundle {
        self.n.set(self.n.get() + 1);
        let parent = parent.unwrap_or(self.dir.path());
        let dir = parent.join(format!("bundle{}", self.n.get()));
        Bundle::new(&dir, &self.rootfs.path)
            .unwrap()
            .args(&["sh", "-c", "true"])
            .env(env)
            .write()
            .unwrap()
    }

    fn bundle(&self, env: &[&str]) -> Bundle {
        self.bundle_in(None, env)
    }

    /// A runtime through the shim with the nvc config `text`, written next to the good one.
    fn runtime_with_config(&self, name: &str, text: &str) -> (Runtime, PathBuf) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (Runtime::nvc(&self.dir.path().join("state"), &path), path)
    }

    /// A runtime through the shim whose low-level runtime does nothing and succeeds:
    /// what the shim does, without runc's part.
    fn noop_runtime(&self) -> Runtime {
        let noop = self.dir.path().join("noop-runtime");
        std::fs::write(&noop, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&noop, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let text = self.config_text();
        let runtimes = text.lines().find(|l| l.starts_with("runtimes = ")).unwrap();
        let text = text.replace(runtimes, &format!("runtimes = [\"{}\"]", noop.display()));
        self.runtime_with_config("noop.toml", &text).0
    }

    fn config_text(&self) -> String {
        std::fs::read_to_string(&self.config).unwrap()
    }

    fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default()
    }

    fn gpus_in_bus_order(&self) -> Vec<FakeGpu> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect()
    }
}

/// `create` of `bundle` through `rt`, which must be refused: the message (on stderr and
/// in runc's log) holds every one of `needles`, config.json is byte for byte what it was,
/// the bundle holds the same files, nothing was mounted and no container is left.
#[track_caller]
fn refused(rt: &Runtime, bundle: &Path, needles: &[&str]) -> Outcome {
    let config = bundle.join("config.json");
    let before = std::fs::read(&config).unwrap();
    let names = dir_names(bundle);
    let mounts_before = mounts(bundle);
    let id = container_id("nvc-bad");
    let out = rt.command(&[
        OsString::from("create"),
        "--bundle".into(),
        bundle.into(),
        id.clone().into(),
    ]);
    // runc itself: the shim may be what is broken.
    runc_delete(&rt.state_root, &id);
    assert!(!out.success(), "created: {out:?}");
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr lacks {needle:?}: {out:?}"
        );
        assert!(
            out.log_messages().iter().any(|m| m.contains(needle)),
            "runc's log lacks {needle:?}: {out:?}"
        );
    }
    assert!(
        std::fs::read(&config).unwrap() == before,
        "config.json changed: {out:?}"
    );
    assert_eq!(
        dir_names(bundle),
        names,
        "files left in the bundle: {out:?}"
    );
    assert_eq!(
        mounts(bundle),
        mounts_before,
        "the host's mount table changed"
    );
    assert!(runc_containers(&rt.state_root).is_empty());
    out
}

/// The host's mount table as the test owning `path` (a path in its temporary directory)
/// sees it: without the mounts of tests running beside it.
fn mounts(path: &Path) -> Vec<String> {
    let temp = std::env::temp_dir();
    let own = path
        .ancestors()
        .find(|a| a.parent() == Some(temp.as_path()))
        .unwrap_or(path);
    host_mounts_beside_tests(own)
}

/// `create` of `bundle` through `rt`, which must succeed; the container is deleted again
/// and the edited spec returned.
#[track_caller]
fn created(rt: &Runtime, bundle: &Bundle) -> Value {
    let names = dir_names(&bundle.dir);
    let id = container_id("nvc-ok");
    let out = rt.create(bundle, &id);
    rt.delete(&id);
    assert!(out.success(), "{out:?}");
    assert_eq!(dir_names(&bundle.dir), names, "files left in the bundle");
    bundle.read_config().unwrap()
}

/// The `/dev/nvidia<N>` GPU nodes (not nvidiactl and the like) `spec` gives.
fn gpu_nodes(spec: &Value) -> Vec<String> {
    crate::spec_nodes(spec)
        .into_iter()
        .filter(|p| {
            p.strip_prefix("/dev/nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect()
}

/// A real spec of a GPU container, as pretty JSON.
fn real_spec_text(w: &World) -> String {
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"]);
    std::fs::read_to_string(b.config_path()).unwrap()
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn malformed_specs_are_refused_and_left_alone() {
    let w = World::new();
    let real = real_spec_text(&w);
    let real_value: Value = serde_json::from_str(&real).unwrap();
    let with = |pointer: &str, value: Value| {
        let mut v = real_value.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        v.pointer_mut(parent).unwrap()[key] = value;
        serde_json::to_string_pretty(&v).unwrap()
    };
    let mut cases: Vec<(String, String, Vec<&str>)> = Vec::new();
    for cut in [1, 10, real.len() / 3, real.len() / 2, real.len() - 3] {
        cases.push((
            format!("cut at byte {cut}"),
            real[..cut].to_string(),
            vec![
                "invalid JSON in",
                "(it ends early: truncated?)",
                "EOF while parsing",
            ],
        ));
    }
    let plain: [(&str, String, Vec<&str>); 13] = [
        (
            "not JSON",
            "<spec/>".into(),
            vec!["invalid JSON in", "expected value at line 1 column 1"],
        ),
        (
            "empty",
            String::new(),
            vec!["is empty: expected the container's OCI spec"],
        ),
        ("blank", " \n\n".into(), vec!["is empty"]),
        (
            "array",
            "[]".into(),
            vec![
                "invalid OCI spec",
                "the spec's top level is an array, expected an object",
            ],
        ),
        ("string", "\"spec\"".into(), vec!["top level is a string"]),
        ("number", "42".into(), vec!["top level is a number"]),
        ("null", "null".into(), vec!["top level is null"]),
        (
            "process a number",
            with("/process", json!(5)),
            vec!["the spec's process is a number, expected an object"],
        ),
        (
            "env a string",
            with("/process/env", json!("NVIDIA_VISIBLE_DEVICES=all")),
            vec!["the spec's process.env is a string, expected an array"],
        ),
        (
            "env item a number",
            with("/process/env", json!(["NVIDIA_VISIBLE_DEVICES=all", 7])),
            vec!["the spec's process.env[1] is a number, expected a string"],
        ),
        (
            "devices a string",
            with("/linux", json!({"devices": "/dev/nvidia0"})),
            vec!["the spec's linux.devices is a string, expected an array"],
        ),
        (
            "hooks an array",
            with("/hooks", json!([])),
            vec!["the spec's hooks is an array, expected an object"],
        ),
        (
            "prestart an object",
            with("/hooks", json!({"prestart": {"path": "/bin/true"}})),
            vec!["the spec's hooks.prestart is an object, expected an array"],
        ),
    ];
    cases.extend(
        plain
            .into_iter()
            .map(|(what, text, needles)| (what.to_string(), text, needles)),
    );
    // A device entry that is no object, and a major number out of range.
    let mut v = real_value.clone();
    v["linux"]["devices"] = json!([5]);
    cases.push((
        "device a number".into(),
        v.to_string(),
        vec!["the spec's linux.devices[0] is a number, expected an object"],
    ));
    v["linux"]["devices"] = json!([{"path": "/dev/x", "type": "c", "major": -1, "minor": 0}]);
    cases.push((
        "negative major".into(),
        v.to_string(),
        vec!["linux.devices[0].major is a number, expected a 32-bit unsigned number"],
    ));

    for (what, text, needles) in cases {
        let b = w.bundle(&[]);
        std::fs::write(b.config_path(), &text).unwrap();
        let path = b.config_path().display().to_string();
        let mut needles = needles;
        needles.push(&path);
        let out = refused(&w.rt, &b.dir, &needles);
        eprintln!("{what}: {}", out.stderr.trim());
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_spec_without_process_is_passed_to_runc_untouched() {
    let w = World::new();
    let b = w.bundle(&[]);
    let mut v = b.read_config().unwrap();
    v.as_object_mut().unwrap().remove("process");
    std::fs::write(b.config_path(), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    // No environment asks for a GPU: the shim leaves the spec alone and runc, which
    // needs a process to create a container, says so.
    let out = refused(&w.rt, &b.dir, &[]);
    assert!(!out.stderr.contains("nvc-runtime:"), "{out:?}");
    assert!(
        format!("{}{}", out.stderr, out.log).contains("process"),
        "runc does not name the missing process: {out:?}"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn invalid_unicode_in_the_spec_is_named_with_its_place() {
    let w = World::new();
    let real = real_spec_text(&w);
    let at = real.find("NVIDIA_VISIBLE_DEVICES=all").unwrap();
    let line = real[..at].matches('\n').count() + 1;
    // serde_json, like the JSON RFC, takes neither raw bytes that are not UTF-8 nor an
    // escaped lone surrogate (Go's decoder, and so runc, would read both as U+FFFD).
    let mut raw = real.as_bytes().to_vec();
    raw.splice(at..at, b"X=\xff\xfe\",\"".iter().copied());
    let surrogate = real.replacen(
        "NVIDIA_VISIBLE_DEVICES=all",
        "X=\\ud800\", \"NVIDIA_VISIBLE_DEVICES=all",
        1,
    );
    for (what, bytes, cause) in [
        ("raw bytes", raw, "invalid unicode code point"),
        ("lone surrogate", surrogate.into_bytes(), "hex escape"),
    ] {
        let b = w.bundle(&[]);
        std::fs::write(b.config_path(), &bytes).unwrap();
        let path = b.config_path().display().to_string();
        let place = format!("at line {line} column");
        let out = refused(
            &w.rt,
            &b.dir,
            &[
                "invalid JSON in",
                &path,
                cause,
                &place,
                "bytes that are not UTF-8",
            ],
        );
        eprintln!("{what}: {}", out.stderr.trim());
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn huge_environments() {
    let w = World::new();
    let gpus = w.gpus_in_bus_order();
    let first = format!("/dev/nvidia{}", gpus[0].minor);

    // 1 MiB of the same GPU: one device node.
    let mut value = "0,".repeat(1 << 19);
    value.push_str(&gpus[0].uuid);
    let b = w.bundle(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]);
    let started = Instant::now();
    let spec = created(&w.rt, &b);
    assert_eq!(gpu_nodes(&spec), std::slice::from_ref(&first));
    eprintln!("1 MiB NVIDIA_VISIBLE_DEVICES: {:?}", started.elapsed());

    // 1 MiB of garbage: refused, with a message of a readable size that still names the
    // variable.
    let garbage = "x".repeat(1 << 20);
    let b = w.bundle(&[&format!("NVIDIA_VISIBLE_DEVICES={garbage}")]);
    let out = refused(
        &w.rt,
        &b.dir,
        &[
            "NVIDIA_VISIBLE_DEVICES: unknown device \"xxx",
            "(1048576 bytes)",
        ],
    );
    assert!(
        out.stderr.len() < 8192,
        "{} bytes on stderr",
        out.stderr.len()
    );
    assert!(
        out.log.len() < 8192,
        "{} bytes in runc's log",
        out.log.len()
    );

    // 1 MiB of a keyword combined with other items.
    let mixed = format!("{}all", "0,".repeat(1 << 19));
    let b = w.bundle(&[&format!("NVIDIA_VISIBLE_DEVICES={mixed}")]);
    let out = refused(
        &w.rt,
        &b.dir,
        &[
            "NVIDIA_VISIBLE_DEVICES: \"all\" cannot be combined",
            "(1048579 bytes)",
        ],
    );
    assert!(
        out.stderr.len() < 8192,
        "{} bytes on stderr",
        out.stderr.len()
    );

    // 100 000 variables: all kept, in order, and one GPU added. runc itself needs
    // about half a minute for a container with that many (the time grows with the square
    // of the count), so the shim hands this one to a runtime that does nothing; 10 000
    // go through runc.
    let noop_rt = w.noop_runtime();
    for (count, rt) in [(100_000, &noop_rt), (10_000, &w.rt)] {
        let env: Vec<String> = (0..count)
            .map(|i| format!("VAR_{i}=value {i}"))
            .chain(["NVIDIA_VISIBLE_DEVICES=0".to_string()])
            .collect();
        let b = w.bundle(&env.iter().map(String::as_str).collect::<Vec<_>>());
        let before = b.read_config().unwrap();
        let started = Instant::now();
        let spec = created(rt, &b);
        eprintln!("{count} variables: {:?}", started.elapsed());
        assert_eq!(spec["process"]["env"], before["process"]["env"]);
        assert_eq!(gpu_nodes(&spec), std::slice::from_ref(&first));
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn bad_nvidia_variables_are_named() {
    let w = World::new();
    let zero = w.gpus_in_bus_order()[0].clone();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["NVIDIA_VISIBLE_DEVICES=bogus"],
            vec!["NVIDIA_VISIBLE_DEVICES: unknown device \"bogus\""],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=7"],
            vec!["NVIDIA_VISIBLE_DEVICES", "GPU index 7"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=4097"],
            vec!["NVIDIA_VISIBLE_DEVICES: index in \"4097\" is too large"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"],
            vec!["NVIDIA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=0,none"],
            vec!["NVIDIA_VISIBLE_DEVICES: \"none\" cannot be combined with other items in \"0,none\""],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=bogus"],
            vec!["invalid NVIDIA_DRIVER_CAPABILITIES=\"bogus\"", "\"bogus\""],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=garbage"],
            vec!["NVIDIA_REQUIRE_CUDA", "garbage"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DISABLE_REQUIRE=maybe"],
            vec!["NVIDIA_DISABLE_REQUIRE: \"maybe\" is not a boolean"],
        ),
        (
            vec!["CUDA_VERSION=latest"],
            vec!["invalid CUDA_VERSION=\"latest\""],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=all"],
            vec!["NVIDIA_MIG_CONFIG_DEVICES=\"all\" needs a privileged container"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=bogus"],
            vec!["NVIDIA_MIG_MONITOR_DEVICES", "bogus"],
        ),
        (
            vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=bogus"],
            vec!["NVIDIA_IMEX_CHANNELS: unknown channel \"bogus\""],
        ),
    ];
    for (env, needles) in cases {
        let b = w.bundle(&env);
        let out = refused(&w.rt, &b.dir, &needles);
        eprintln!("{env:?}: {}", out.stderr.trim());
    }
    // A bad CDI annotation.
    let b = w
        .bundle(&[])
        .set(
            "/annotations/cdi.k8s.io~1gpus",
            json!("nvidia.com/gpu=bogus"),
        )
        .write()
        .unwrap();
    refused(
        &w.rt,
        &b.dir,
        &["annotation cdi.k8s.io/gpus", "\"nvidia.com/gpu=bogus\""],
    );

    // Duplicates, in every form: the GPU once, with its rule once.
    let b = w.bundle(&[&format!(
        "NVIDIA_VISIBLE_DEVICES=0,0,{},{},{}",
        zero.uuid,
        zero.uuid.to_lowercase(),
        zero.bus_id
    )]);
    let spec = created(&w.rt, &b);
    assert_eq!(gpu_nodes(&spec), [format!("/dev/nvidia{}", zero.minor)]);
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    let gpu_rules = rules
        .iter()
        .filter(|r| r["major"] == 195 && r["minor"] == zero.minor)
        .count();
    assert_eq!(gpu_rules, 1, "{rules:?}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn broken_nvc_configs_are_named() {
    let w = World::new();
    let good = w.config_text();
    let replace = |from: &str, to: &str| {
        assert!(good.contains(from), "{from} not in {good}");
        good.replacen(from, to, 1)
    };
    let hook_line = good.lines().find(|l| l.starts_with("path = ")).unwrap();
    let runtimes_line = good.lines().find(|l| l.starts_with("runtimes = ")).unwrap();
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "wrong type",
            replace(hook_line, "path = 5"),
            vec!["invalid config file", "key `hook.path`", "invalid type"],
        ),
        (
            "unknown key",
            replace("[driver]\n", "[driver]\nroots = \"/\"\n"),
            vec![
                "invalid config file",
                "line 2, key `driver.roots`",
                "unknown field `roots`",
            ],
        ),
        (
            "unknown section",
            format!("{good}\n[gpus]\nall = true\n"),
            vec!["invalid config file", "unknown field `gpus`"],
        ),
        (
            "not TOML",
            "this is { not toml".into(),
            vec!["invalid config file", "line 1"],
        ),
        (
            "bad capability",
            format!("{good}\n[requests]\ndefault-capabilities = [\"warp\"]\n"),
            vec![
                "invalid config file",
                "requests.default-capabilities",
                "\"warp\"",
            ],
        ),
        (
            "no runtime",
            replace(
                runtimes_line,
                "runtimes = [\"/nonexistent/runc\", \"no-such-runtime\"]",
            ),
            vec![
                "no low-level runtime found",
                "/nonexistent/runc",
                "no-such-runtime",
                "set [runtime] runtimes in",
            ],
        ),
        (
            "no hook",
            replace(hook_line, "path = \"/nonexistent/nvc-hook\""),
            vec![
                "the hook /nonexistent/nvc-hook is not an executable file",
                "set [hook] path in",
            ],
        ),
        (
            "relative hook",
            replace(hook_line, "path = \"nvc-hook\""),
            vec!["the hook nvc-hook is not an executable file"],
        ),
    ];
    for (what, text, needles) in cases {
        let (rt, path) = w.runtime_with_config(&format!("{}.toml", what.replace(' ', "-")), &text);
        let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let path = path.display().to_string();
        let mut needles = needles;
        needles.push(&path);
        let out = refused(&rt, &b.dir, &needles);
        eprintln!("{what}: {}", out.stderr.trim());
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_missing_driver_is_named() {
    let w = World::new();
    let good = w.config_text();
    let missing = w.dir.path().join("no-driver");
    let text: String = good
        .lines()
        .map(|l| {
            for key in ["root", "dev-root", "proc-root"] {
                if l.starts_with(&format!("{key} = ")) {
                    return format!("{key} = \"{}\"\n", missing.display());
                }
            }
            format!("{l}\n")
        })
        .collect();
    let (rt, _) = w.runtime_with_config("no-driver.toml", &text);
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let out = refused(&rt, &b.dir, &[&missing.display().to_string()]);
    eprintln!("missing driver: {}", out.stderr.trim());
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_read_only_bundle_is_refused_and_left_alone() {
    let w = World::new();
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"]);
    let mounts_before = mounts(w.dir.path());
    {
        let _ro = TestMount::read_only(&b.dir).unwrap();
        let path = b.config_path().display().to_string();
        let dir = b.dir.display().to_string();
        let out = refused(
            &w.rt,
            &b.dir,
            &[
                &format!("cannot save the edited OCI spec {path} (it was left as it was)"),
                &format!("cannot create a temporary file in {dir}"),
                "Read-only file system",
            ],
        );
        eprintln!("read-only: {}", out.stderr.trim());
    }
    assert_eq!(
        mounts(w.dir.path()),
        mounts_before,
        "the read-only bind mount is still there"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_full_disk_is_refused_and_left_alone() {
    let w = World::new();
    let mounts_before = mounts(w.dir.path());
    {
        let disk = TestMount::tmpfs(&w.dir.path().join("disk"), "size=64k").unwrap();
        let b = w.bundle_in(Some(disk.path()), &["NVIDIA_VISIBLE_DEVICES=all"]);
        let filler = disk.path().join("filler");
        fill(&filler);
        let names = dir_names(disk.path());
        let path = b.config_path().display().to_string();
        let out = refused(
            &w.rt,
            &b.dir,
            &[
                &format!("cannot save the edited OCI spec {path} (it was left as it was)"),
                "No space left on device",
                &b.dir.display().to_string(),
            ],
        );
        eprintln!("full disk: {}", out.stderr.trim());
        assert_eq!(dir_names(disk.path()), names);
        // With room again, the same bundle is edited.
        std::fs::remove_file(&filler).unwrap();
        let spec = created(&w.rt, &b);
        assert_eq!(gpu_nodes(&spec).len(), w.fake.spec.gpus.len());
    }
    assert_eq!(
        mounts(w.dir.path()),
        mounts_before,
        "the tmpfs is still mounted"
    );
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = [0u8; 4096];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("cannot fill {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
}

/// What one killed shim left.
#[derive(Debug, Default)]
struct Tally {
    unchanged: u32,
    edited: u32,
    temp_left: u32,
}

/// The temporary files of config.json in `dir`, with the pid each names.
fn temp_files(dir: &Path) -> Vec<(String, u32)> {
    dir_names(dir)
        .into_iter()
        .filter(|n| n.starts_with(".config.json.") && n.ends_with(".nvc-tmp"))
        .map(|n| {
            let pid = n[".config.json.".len()..]
                .split(['-', '.'])
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("a temporary file without a pid: {n}"));
            (n, pid)
        })
        .collect()
}

/// `nvc-runtime create` of `bundle` as `id` with the nvc config `config`, in its own
/// process group, output discarded.
fn spawn_shim(shim: &Path, config: &Path, state: &Path, bundle: &Path, id: &str) -> Child {
    Command::new(shim)
        .env("NVC_CONFIG", config)
        .arg("--root")
        .arg(state)
        .args(["create", "--bundle"])
        .arg(bundle)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn megabytes_of_annotations_reach_the_hook_in_the_state() {
    let w = World::new();
    // runc copies the annotations into the state it gives the hook on stdin.
    let b = Bundle::new(&w.dir.path().join("annotated"), &w.rootfs.path)
        .unwrap()
        .args(&["sh", "-c", "[ -e /dev/nvidiactl ] && echo gpu-ready"])
        .env(&["NVIDIA_VISIBLE_DEVICES=all"])
        .set("/annotations/org.example.big", json!("a".repeat(3 << 20)))
        .write()
        .unwrap();
    let out = w.rt.run(&b, &container_id("nvc-annotated"));
    assert!(
        out.success() && out.stdout.contains("gpu-ready"),
        "{out:?}\nnvc log:\n{}",
        w.nvc_log()
    );
}

/// A spec nvc-runtime wrote, as JSON, with the time in the `--gpus` list it hands its
/// hook taken out: the one part of its edit that differs from run to run.
fn without_handing_time(spec: &[u8]) -> Value {
    let mut spec: Value = serde_json::from_slice(spec).unwrap();
    for hook in spec["hooks"]["prestart"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let Some(args) = hook["args"].as_array_mut() else {
            continue;
        };
        let at = args.iter().position(|a| a == "--gpus").map(|i| i + 1);
        if let Some(list) = at.and_then(|i| args.get_mut(i)) {
            let mut parsed: Value = serde_json::from_str(list.as_str().unwrap()).unwrap();
            parsed["at_ms"] = Value::Null;
            *list = parsed;
        }
    }
    spec
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_shim_killed_while_saving_never_leaves_a_partial_spec() {
    let w = World::new();
    // A MiB of a field nvc does not know, so that saving takes a while.
    let padding: Vec<String> = (0..1000)
        .map(|i| format!("{i:04}{}", "p".repeat(1000)))
        .collect();
    let b = w
        .bundle(&["NVIDIA_VISIBLE_DEVICES=all"])
        .set("/org.example.padding", json!(padding));
    let b = b.write().unwrap();
    let original = std::fs::read(b.config_path()).unwrap();
    let names = dir_names(&b.dir);
    let state = w.dir.path().join("kill-state");

    // When the shim writes, measured with a runtime that does nothing.
    let shim = workspace_bin("nvc-runtime");
    let noop = w.noop_runtime();
    let noop_config = PathBuf::from(&noop.env[0].1);
    let (mut window, mut total) = (Duration::ZERO, Duration::ZERO);
    // On a loaded machine a poll can miss a short-lived file: try until three runs saw it.
    let mut calibrated = 0;
    for _ in 0..30 {
        if calibrated == 3 {
            break;
        }
        std::fs::write(b.config_path(), &original).unwrap();
        let started = Instant::now();
        let mut child = spawn_shim(&shim, &noop_config, &noop.state_root, &b.dir, "calibrate");
        let mut seen: Option<(Duration, Duration)> = None;
        while child.try_wait().unwrap().is_none() {
            if !temp_files(&b.dir).is_empty() {
                let now = started.elapsed();
                seen = Some((seen.map_or(now, |(first, _)| first), now));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        total = total.max(started.elapsed());
        if let Some((first, last)) = seen {
            window = window.max(last - first);
            calibrated += 1;
        }
    }
    assert!(
        calibrated > 0,
        "in 30 runs the shim never showed a temporary file"
    );
    eprintln!("the shim runs {total:?}, its temporary file lives up to {window:?}");
    std::fs::write(b.config_path(), &original).unwrap();
    let edited_value = created(&w.rt, &b);
    let edited = std::fs::read(b.config_path()).unwrap();
    assert_ne!(edited, original);
    assert_eq!(edited_value["org.example.padding"], json!(padding));

    let mounts_before = mounts(w.dir.path());
    let mut tally = Tally::default();
    let iterations = 250u32;
    let span = total * 6 / 5;
    for i in 0..iterations {
        std::fs::write(b.config_path(), &original).unwrap();
        // Every other kill comes while the shim writes: once its temporary file is
        // there, after a delay spread over the time writing took in the calibration.
        // The others are spread over the shim's whole run.
        let id = container_id("nvc-kill");
        let started = Instant::now();
        let mut child = spawn_shim(&shim, &w.config, &state, &b.dir, &id);
        if i % 2 == 0 {
            while temp_files(&b.dir).is_empty() && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_micros(50));
            }
            std::thread::sleep(window * (i * 7919 % 1000) / 1000);
        } else {
            std::thread::sleep(span * (i * 104_729 % 1000) / 1000);
        }
        let delay = started.elapsed();
        let _ = child.kill();
        let pid = child.id();
        // A runc the shim had become may have started `runc init`: end the group, while
        // the unreaped shim still holds its id.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
        let _ = child.wait();
        runc_delete(&state, &id);

        let now = std::fs::read(b.config_path()).unwrap();
        assert!(
            serde_json::from_slice::<Value>(&now).is_ok(),
            "iteration {i}: config.json is not JSON after a kill at {delay:?}"
        );
        if now == original {
            tally.unchanged += 1;
        } else {
            // Each run's edit differs only in when it handed the hook its GPUs.
            assert!(
                without_handing_time(&now) == without_handing_time(&edited),
                "iteration {i}: config.json is neither the original nor the complete edit \
                 after a kill at {delay:?}"
            );
            tally.edited += 1;
        }
        // A temporary file left behind is the killed shim's, or one an earlier killed
        // shim left and a kill came before this one removed it.
        for (name, writer) in temp_files(&b.dir) {
            assert!(
                !Path::new(&format!("/proc/{writer}")).exists(),
                "iteration {i}: {name} belongs to a live process"
            );
            if writer == pid {
                tally.temp_left += 1;
            }
        }
    }
    eprintln!("{iterations} kills over {span:?}: {tally:?}");
    // Kills landed before, during and after the write.
    assert!(
        tally.unchanged > 0 && tally.edited > 0 && tally.temp_left > 0,
        "{tally:?}"
    );
    // The next run removes what killed shims left.
    std::fs::write(b.config_path(), &original).unwrap();
    let id = container_id("nvc-after-kills");
    let out = w.rt.create(&b, &id);
    w.rt.delete(&id);
    assert!(out.success(), "{out:?}");
    assert!(
        without_handing_time(&std::fs::read(b.config_path()).unwrap())
            == without_handing_time(&edited),
        "the run after the kills did not write the complete edit"
    );
    assert_eq!(dir_names(&b.dir), names, "temporary files left");
    // runc 1.1 binds a copy of its own binary at `<state>/<id>/runc.XXXXXX` while it sets
    // a container up; killed then (the shim execs runc, and some kills land in it), it
    // leaves that mount in its own state folder. It is runc's, not nvc's: taken away
    // here, and every other mount must be as it was.
    let runc_own: Vec<String> = mounts(w.dir.path())
        .into_iter()
        .filter(|m| !mounts_before.contains(m))
        .filter(|m| {
            let m = Path::new(m);
            m.starts_with(&state)
                && m.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("runc."))
        })
        .collect();
    for m in &runc_own {
        let _ = Command::new("umount").args(["-l", m]).status();
    }
    if !runc_own.is_empty() {
        eprintln!("runc's own copies of itself left by killed runs: {runc_own:?}");
    }
    assert_eq!(mounts(w.dir.path()), mounts_before);
    let left = runc_containers(&state);
    assert!(left.is_empty(), "containers left in runc's state: {left:?}");
    let left = processes_under(&w.rootfs.path);
    assert!(left.is_empty(), "processes left in the rootfs: {left:?}");
}
