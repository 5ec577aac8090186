//! Faults while GPU containers start: the container's init killed before or while the hook
//! runs, the hook killed mid-way, the low-level runtime failing after the shim edited the
//! spec, a hundred containers at once, and a hook that hangs past its configured timeout.

use std::cell::Cell;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nvc_tests::{
    container_id, host_mounts_beside_tests, processes_under, runc_containers, tree_digest,
    workspace_bin, Bundle, FakeDriver, Outcome, Runtime, TestRootfs, TestSetup,
};
use serde_json::Value;

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

    /// A bundle running `script` with `env` and the fake proc tree.
    fn bundle(&self, env: &[&str], script: &str) -> Bundle {
        self.n.set(self.n.get() + 1);
        let dir = self.dir.path().join(format!("bundle{}", self.n.get()));
        Bundle::new(&dir, &self.rootfs.path)
            .unwrap()
            .args(&["sh", "-c", script])
            .env(env)
            .with_fake_proc(&self.fake)
            .write()
            .unwrap()
    }

    /// The nvc config with one `key = value` line of it replaced, saved as `name`.
    fn config_with(&self, name: &str, key: &str, value: &Path) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap();
        let value = match key {
            "runtimes" => format!("[\"{}\"]", value.display()),
            _ => format!("\"{}\"", value.display()),
        };
        let path = self.dir.path().join(name);
        std::fs::write(&path, text.replace(line, &format!("{key} = {value}"))).unwrap();
        path
    }

    /// A runtime through the shim whose `[hook] path` is the shell script `body`, which
    /// `$HOOK` in it naming the real nvc-hook.
    fn runtime_with_hook(&self, name: &str, body: &str) -> Runtime {
        let script = self.script(name, body);
        let config = self.config_with(&format!("{name}.toml"), "path", &script);
        Runtime::nvc(&self.dir.path().join("state"), &config)
    }

    /// An executable shell script `body` in the world's directory; `$HOOK` is the real
    /// nvc-hook.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let hook = workspace_bin("nvc-hook");
        let text = format!("#!/bin/sh\nHOOK='{}'\n{body}\n", hook.display());
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default()
    }
}

/// What must be the same after every start, failed or not.
struct Host {
    mounts: Vec<String>,
    sentinel: PathBuf,
    sentinel_digest: String,
    driver_digest: String,
}

impl Host {
    fn new(w: &World) -> Host {
        let sentinel = w.dir.path().join("outside");
        std::fs::create_dir_all(sentinel.join("etc")).unwrap();
        std::fs::write(sentinel.join("etc/ld.so.cache"), b"sentinel").unwrap();
        std::fs::write(sentinel.join("libcuda.so.1"), b"sentinel").unwrap();
        Host {
            mounts: host_mounts_beside_tests(w.dir.path()),
            sentinel_digest: tree_digest(&sentinel),
            driver_digest: tree_digest(&w.fake.root),
            sentinel,
        }
    }

    /// The host is as it was, and runc knows no container of `rt`'s.
    #[track_caller]
    fn assert_unchanged(&self, w: &World, rt: &Runtime, what: &str) {
        assert_eq!(
            host_mounts_beside_tests(w.dir.path()),
            self.mounts,
            "{what}: the host's mount table changed"
        );
        assert_eq!(
            tree_digest(&self.sentinel),
            self.sentinel_digest,
            "{what}: the sentinel tree changed"
        );
        assert_eq!(
            tree_digest(&w.fake.root),
            self.driver_digest,
            "{what}: the driver tree changed"
        );
        assert_eq!(
            runc_containers(&rt.state_root),
            Vec::<String>::new(),
            "{what}: runc still has containers"
        );
        // A killed container's processes take a moment to be reaped.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = processes_under(&w.rootfs.path);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: processes left in the rootfs: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The start succeeded, or failed saying why.
#[track_caller]
fn succeeded_or_said_why(out: &Outcome, what: &str) -> bool {
    assert!(!out.timed_out, "{what}: hung: {out:?}");
    if out.success() {
        return true;
    }
    let said = format!("{}{}", out.stderr, out.log);
    assert!(
        !said.trim().is_empty(),
        "{what}: failed without a message: {out:?}"
    );
    false
}

/// `pid` from the OCI state on stdin, in a shell script.
const READ_STATE: &str = "state=$(cat)\n\
     pid=$(printf '%s' \"$state\" | sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p')\n\
     [ -n \"$pid\" ] || { echo \"no pid in the state: $state\" >&2; exit 1; }";

/// Waits until `$pid` has died (a zombie: runc, its parent, reaps it only after the hooks).
/// `kill` returns before a killed process is gone, and a hook that no longer rediscovers
/// the driver can reach its `setns` while the process is still exiting.
const AWAIT_ZOMBIE: &str = "i=0\n\
     while [ \"$(sed -n 's/^[0-9]* (.*) \\([A-Z]\\).*/\\1/p' /proc/$pid/stat 2>/dev/null)\" != Z ] \
     && [ -e /proc/$pid ] && [ $i -lt 500 ]; do i=$((i+1)); sleep 0.01; done";

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn init_killed_before_the_hook_runs() {
    let w = World::new();
    let host = Host::new(&w);
    let rt = w.runtime_with_hook(
        "kill-init-first",
        &format!(
            "{READ_STATE}\nkill -KILL \"$pid\"\n{AWAIT_ZOMBIE}\nprintf '%s' \"$state\" | exec \"$HOOK\" \"$@\""
        ),
    );
    for i in 0..5 {
        let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "echo started");
        let out = rt.run(&b, &container_id("nvc-fault-init"));
        let what = format!("init killed before the hook, run {i}");
        assert!(!out.success(), "{what}: started: {out:?}");
        assert!(!out.stdout.contains("started"), "{what}: {out:?}");
        succeeded_or_said_why(&out, &what);
        assert!(
            out.stderr
                .contains("exited before its mount namespace could be entered"),
            "{what}: {out:?}"
        );
        eprintln!("{what}: {}", out.stderr.trim());
        host.assert_unchanged(&w, &rt, &what);
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn init_killed_while_the_hook_runs() {
    let w = World::new();
    let host = Host::new(&w);
    let (mut ok, mut failed) = (0, 0);
    for (i, delay) in [
        "0", "0.002", "0.005", "0.01", "0.02", "0.04", "0.08", "0.15",
    ]
    .iter()
    .enumerate()
    {
        let rt = w.runtime_with_hook(
            &format!("kill-init-after-{i}"),
            &format!(
                "{READ_STATE}\n(sleep {delay}; kill -KILL \"$pid\") &\n\
                 printf '%s' \"$state\" | \"$HOOK\" \"$@\"\nstatus=$?\nwait\nexit $status"
            ),
        );
        let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "echo started");
        let out = rt.run(&b, &container_id("nvc-fault-init"));
        let what = format!("init killed {delay} s into the hook");
        // The container's process never runs: the script waits for its killer, so the
        // kill always comes before runc, which waits for the hook, starts the container.
        assert!(!out.stdout.contains("started"), "{what}: {out:?}");
        if succeeded_or_said_why(&out, &what) {
            ok += 1;
        } else {
            failed += 1;
        }
        eprintln!("{what}: status {} {}", out.status, out.stderr.trim());
        host.assert_unchanged(&w, &rt, &what);
    }
    eprintln!("{ok} exited 0, {failed} failed");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn hook_killed_midway() {
    let w = World::new();
    let host = Host::new(&w);
    let (mut ok, mut failed) = (0, 0);
    for i in 0..60u32 {
        // 0 to 29 ms in steps of 1 ms, then to 87 ms in steps of 2 ms: from before the
        // hook reads its input to after it is done (about 15 ms here).
        let ms = if i < 30 { i } else { 30 + (i - 30) * 2 };
        let delay = format!("0.{ms:03}");
        let rt = w.runtime_with_hook(
            &format!("kill-hook-{i}"),
            &format!(
                "state=$(cat)\nprintf '%s' \"$state\" | \"$HOOK\" \"$@\" &\nhook=$!\n\
                 sleep {delay}\nkill -KILL $hook 2>/dev/null\nwait $hook"
            ),
        );
        let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
        let out = rt.run(&b, &container_id("nvc-fault-hook"));
        let what = format!("hook killed after {delay} s");
        if succeeded_or_said_why(&out, &what) {
            assert!(out.stdout.contains("libcuda=ok"), "{what}: {out:?}");
            ok += 1;
        } else {
            assert!(!out.stdout.contains("libcuda="), "{what}: ran: {out:?}");
            failed += 1;
        }
        eprintln!("{what}: status {} {}", out.status, out.stderr.trim());
        host.assert_unchanged(&w, &rt, &what);
    }
    eprintln!("{ok} started, {failed} failed");
    assert!(failed > 0, "no kill landed while the hook ran");
}

/// Each path in a list, with how many times it is there.
type PathCounts = Vec<(String, usize)>;

/// How many times `spec` holds each hook path and each device node's path.
fn counts(spec: &Value) -> (PathCounts, PathCounts) {
    let tally = |keys: Vec<String>| {
        let mut seen = PathCounts::new();
        for key in keys {
            match seen.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => seen.push((key, 1)),
            }
        }
        seen
    };
    let hooks = spec["hooks"]["prestart"].as_array().into_iter().flatten();
    (
        tally(
            hooks
                .map(|h| h["path"].as_str().unwrap_or_default().to_string())
                .collect(),
        ),
        tally(crate::spec_nodes(spec)),
    )
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn failing_runtime_then_real_runc() {
    let w = World::new();
    let host = Host::new(&w);
    let broken = w.script(
        "broken-runc",
        "echo \"broken-runc: cannot create the container: out of luck\" >&2\nexit 1",
    );
    let config = w.config_with("broken.toml", "runtimes", &broken);
    let broken_rt = Runtime::nvc(&w.dir.path().join("state"), &config);
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    let original = b.read_config().unwrap();

    let out = broken_rt.run(&b, &container_id("nvc-fault-rt"));
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr
            .contains("broken-runc: cannot create the container: out of luck"),
        "{out:?}"
    );
    host.assert_unchanged(&w, &broken_rt, "failing runtime");
    // The shim had edited the spec before the runtime failed.
    let edited = b.read_config().unwrap();
    assert_ne!(edited, original);
    let once = std::fs::read(b.config_path()).unwrap();

    // Twice more through the real runc: the same spec, nothing added twice.
    for run in 0..2 {
        let out = w.rt.run(&b, &container_id("nvc-fault-rt"));
        assert!(
            out.success() && out.stdout.contains("libcuda=ok"),
            "{out:?}\n{}",
            w.nvc_log()
        );
        assert_eq!(
            std::fs::read(b.config_path()).unwrap(),
            once,
            "run {run} changed the spec again"
        );
        host.assert_unchanged(&w, &w.rt, "real runc after a failing one");
    }
    let (hooks, devices) = counts(&edited);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert!(hooks.iter().all(|(_, n)| *n == 1), "{hooks:?}");
    assert!(
        devices.iter().all(|(_, n)| *n == 1),
        "duplicate devices: {devices:?}"
    );
    assert_eq!(
        devices.len(),
        w.fake.spec.gpus.len() + 3,
        "the GPUs, nvidiactl, nvidia-uvm, nvidia-uvm-tools: {devices:?}"
    );
    let rules = edited["linux"]["resources"]["devices"].as_array().unwrap();
    for (i, rule) in rules.iter().enumerate() {
        assert!(!rules[..i].contains(rule), "rule {rule} twice in {rules:?}");
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_hundred_gpu_containers_in_parallel() {
    let w = World::new();
    let host = Host::new(&w);
    // Two cores start a hundred containers; each may wait its turn a while.
    let rt =
        Runtime::nvc(&w.dir.path().join("state"), &w.config).with_timeout(Duration::from_secs(240));
    let bundles: Vec<Bundle> = (0..100)
        .map(|_| w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe"))
        .collect();
    let started = Instant::now();
    let outs: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = bundles
            .iter()
            .map(|b| {
                let rt = &rt;
                s.spawn(move || rt.run(b, &container_id("nvc-par")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("100 containers in {:?}", started.elapsed());
    for out in &outs {
        assert!(
            out.success() && out.stdout.contains("libcuda=ok"),
            "{out:?}"
        );
    }
    host.assert_unchanged(&w, &rt, "100 in parallel");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_hook_gives_up_after_its_configured_timeout() {
    let w = World::new();
    let host = Host::new(&w);
    let text = std::fs::read_to_string(&w.config).unwrap();
    assert!(text.contains("[hook]\n"), "no [hook] section in {text}");
    let config = w.dir.path().join("deadline.toml");
    std::fs::write(&config, text.replace("[hook]\n", "[hook]\ntimeout = 1\n")).unwrap();
    // stdin is a pipe nobody writes to and nobody closes: the hook waits for its state
    // until its own deadline, as it would behind a runtime that hangs.
    let mut child = nvc_tests::KillOnDrop(
        std::process::Command::new(workspace_bin("nvc-hook"))
            .arg("prestart")
            .env("NVC_CONFIG", &config)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let _stdin = child.0.stdin.take().unwrap();
    let begun = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break Some(status);
        }
        if begun.elapsed() > Duration::from_secs(5) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = begun.elapsed();
    let mut stderr = String::new();
    if status.is_some() {
        std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    }
    drop(child);
    let status = status.unwrap_or_else(|| panic!("the hook still waited after {took:?}"));
    assert!(
        !status.success(),
        "the hook exited 0 without a state: {stderr}"
    );
    assert!(
        stderr.contains("gave up after"),
        "the hook exited after {took:?} ({status}) without saying it gave up: {stderr}"
    );
    host.assert_unchanged(&w, &w.rt, "the hook's deadline");
}
