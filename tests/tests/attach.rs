//! `nvc attach` and `nvc detach` against containers running under plain runc, started
//! with no GPU: the nodes, device cgroup, driver files and ld.so.cache a GPU brings,
//! asserted from inside with `runc exec`; and the containers they refuse. Needs root.
//!
//! As in `cgroup.rs`: an open the device cgroup denies fails with EPERM ("Operation not
//! permitted"); one it allows reaches the driver, which on a host without the NVIDIA
//! module fails with ENXIO ("No such device or address") for the fake tree's nodes.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nvc_tests::{Outcome, Runtime, TestSetup};

const DENIED: &str = "Operation not permitted";
const LIB: &str = "/usr/lib/x86_64-linux-gnu";

/// One test's world: the fake driver and rootfs, runc with its own state directory.
struct World {
    setup: TestSetup,
    rt: Runtime,
}

impl World {
    fn new() -> World {
        let setup = TestSetup::new("attach needs runc, device nodes, mounts and cgroups");
        let rt = Runtime::runc(&setup.dir.path().join("runc-state"));
        World { setup, rt }
    }

    /// Creates a container running `script` with `env` and no GPU; started unless
    /// `start` is false. Returns its id.
    fn container(&self, name: &str, env: &[&str], script: &str, start: bool) -> String {
        let bundle = self.setup.bundle(name, env, script).write().unwrap();
        let id = nvc_tests::container_id("nvc-attach");
        self.rt.create(&bundle, &id).assert_success();
        if start {
            self.rt.start(&id).assert_success();
        }
        id
    }

    /// `nvc <verb> --root <state> <id> --gpus <gpus>`.
    fn nvc(&self, verb: &str, id: &str, gpus: &str) -> Output {
        Command::new(nvc_tests::workspace_bin("nvc"))
            .env("NVC_CONFIG", &self.setup.config)
            .arg(verb)
            .arg("--root")
            .arg(&self.rt.state_root)
            .arg("--runtime")
            .arg(nvc_tests::runc_path())
            .args([id, "--gpus", gpus])
            .output()
            .unwrap()
    }

    #[track_caller]
    fn nvc_ok(&self, verb: &str, id: &str, gpus: &str) -> String {
        let out = self.nvc(verb, id, gpus);
        assert!(
            out.status.success(),
            "nvc {verb} {gpus} failed: {}\n{}\nnvc log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout),
            self.setup.nvc_log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `nvc <verb>` that must fail; returns its stderr.
    #[track_caller]
    fn nvc_refused(&self, verb: &str, id: &str, gpus: &str) -> String {
        let out = self.nvc(verb, id, gpus);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "nvc {verb} {gpus} should fail");
        stderr
    }

    fn exec(&self, id: &str, script: &str) -> Outcome {
        let out = self.rt.command(&["exec", id, "sh", "-c", script]);
        out.assert_success();
        out
    }

    /// The minors of the fake GPUs, by index (bus order).
    fn minors(&self) -> Vec<u32> {
        self.setup
            .fake
            .spec
            .gpus_in_bus_order()
            .iter()
            .map(|g| g.minor)
            .collect()
    }
}

/// A script printing, for each path, `<path>: opened` or `<path>: <error>`, and each
/// NVIDIA node as `node <path> <major>:<minor>` (hex).
fn probe_script(paths: &[String]) -> String {
    let mut script = String::from(
        "for n in /dev/nvidia*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; ",
    );
    for p in paths {
        script.push_str(&format!(
            "if err=$(cat {p} 2>&1 >/dev/null); then echo \"{p}: opened\"; else echo \"{p}: $err\"; fi; "
        ));
    }
    script.push_str("true");
    script
}

fn result_for<'a>(stdout: &'a str, path: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{path}: ")))
        .unwrap_or_else(|| panic!("no result for {path} in:\n{stdout}"))
}

/// The open got past the device cgroup to the (absent) driver.
#[track_caller]
fn assert_reaches_driver(stdout: &str, path: &str) {
    let line = result_for(stdout, path);
    assert!(
        !line.contains(DENIED)
            && (line.ends_with(": opened")
                || line.contains("No such device")
                || line.contains("error reading")),
        "{path} should pass the device cgroup: {line}\n{stdout}"
    );
}

#[test]
#[ignore = "needs root: attach needs runc, device nodes, mounts and cgroups"]
fn attach_two_gpus_then_detach_one() {
    let w = World::new();
    let minors = w.minors();
    let (m0, m1) = (minors[0], minors[1]);
    let id = w.container("sleeper", &[], "sleep 600", true);
    let before = w.exec(&id, &probe_script(&[])).stdout.clone();
    assert!(!before.contains("node "), "no GPU yet: {before}");

    let said = w.nvc_ok("attach", &id, "0");
    assert!(said.contains(&format!("/dev/nvidia{m0}")), "{said}");
    // No nvc poststop hook in its spec: the files stay after it, and attach says so.
    assert!(
        said.contains("stay in the container's root filesystem after it ends"),
        "{said}"
    );
    let n0 = format!("/dev/nvidia{m0}");
    let n1 = format!("/dev/nvidia{m1}");
    let out = w
        .exec(
            &id,
            &format!(
                "{}; nvidia-smi -L; ls {LIB}/libcuda.so.1; ldconfig -p | grep -E 'libcuda|libnvidia-ml'",
                probe_script(&[n0.clone(), "/dev/nvidiactl".into()])
            ),
        )
        .stdout
        .clone();
    assert!(
        out.contains(&format!("node {n0} c3:{m0:x}")),
        "{n0} with 195:{m0}: {out}"
    );
    assert!(!out.contains(&format!("node {n1} ")), "{out}");
    assert_reaches_driver(&out, &n0);
    assert_reaches_driver(&out, "/dev/nvidiactl");
    let uuid0 = &w.setup.fake.spec.gpus_in_bus_order()[0].uuid;
    assert!(
        out.contains(uuid0.as_str()),
        "nvidia-smi -L lists GPU 0: {out}"
    );
    assert!(
        out.contains(&format!(
            "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
        )),
        "{out}"
    );

    // A second GPU later: both open, the driver files are not mounted twice.
    w.nvc_ok("attach", &id, "1");
    let out = w
        .exec(
            &id,
            &format!(
                "{}; grep -c libcuda.so /proc/self/mountinfo",
                probe_script(&[n0.clone(), n1.clone()])
            ),
        )
        .stdout
        .clone();
    assert_reaches_driver(&out, &n0);
    assert_reaches_driver(&out, &n1);
    let libcuda_mounts: u32 = out.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(libcuda_mounts, 1, "{out}");

    // Detach GPU 0: its node goes, and a node made again for it is denied.
    let said = w.nvc_ok("detach", &id, "0");
    assert!(said.contains("driver's files stay"), "{said}");
    let out = w
        .exec(&id, &probe_script(&[n0.clone(), n1.clone()]))
        .stdout
        .clone();
    assert!(result_for(&out, &n0).contains("No such file"), "{out}");
    assert_reaches_driver(&out, &n1);
    let out = w
        .exec(
            &id,
            &format!(
                "mknod {n0} c 195 {m0} || echo mknod-failed; {}",
                probe_script(std::slice::from_ref(&n0))
            ),
        )
        .stdout
        .clone();
    let line = result_for(&out, &n0);
    if out.contains("mknod-failed") {
        assert!(line.contains("No such file"), "{out}");
    } else {
        assert!(line.contains(DENIED), "the cgroup revoked {n0}: {out}");
    }
    assert!(w.exec(&id, &format!("ls {LIB}/libcuda.so.1")).success());
}

#[test]
#[ignore = "needs root: attach needs runc, device nodes, mounts and cgroups"]
fn attach_refuses_what_it_cannot_change() {
    let w = World::new();
    // Unknown id.
    let err = w.nvc_refused("attach", "nvc-no-such-container", "0");
    assert!(err.contains("check the container id"), "{err}");

    // Created, not started.
    let created = w.container("created", &[], "sleep 600", false);
    let err = w.nvc_refused("attach", &created, "0");
    assert!(err.contains("is created, not running"), "{err}");

    // Paused.
    let paused = w.container("paused", &[], "sleep 600", true);
    w.rt.command(&["pause", &paused]).assert_success();
    let err = w.nvc_refused("attach", &paused, "0");
    assert!(err.contains("is paused, not running"), "{err}");
    assert!(err.contains("resume"), "{err}");
    w.rt.command(&["resume", &paused]).assert_success();

    // Unknown GPU, and a list that names none.
    let err = w.nvc_refused("attach", &paused, "7");
    assert!(err.contains("GPU index 7 does not exist"), "{err}");
    let err = w.nvc_refused("attach", &paused, "none");
    assert!(err.contains("names no GPU"), "{err}");
    let out = w.exec(&paused, "ls /dev/nvidia* 2>&1; true").stdout.clone();
    assert!(!out.contains("/dev/nvidia0\n"), "nothing was added: {out}");

    // Stopped.
    let stopped = w.container("stopped", &[], "true", true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.rt.state(&stopped).stdout.contains("\"stopped\"") {
        assert!(Instant::now() < deadline, "the container did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = w.nvc_refused("attach", &stopped, "0");
    assert!(err.contains("is stopped, not running"), "{err}");
    let err = w.nvc_refused("detach", &stopped, "0");
    assert!(err.contains("is stopped, not running"), "{err}");
    assert!(Path::new(&w.rt.state_root).is_dir());
}

/// A container whose spec runs nvc-hook at prestart and at poststop and asks for no GPU,
/// as Podman's hooks.d file gives every container: what `nvc attach` makes in its rootfs
/// (mount points, links, the ld.so.cache) goes into its no-trace record, and the poststop
/// hook takes it away when the container ends; the rootfs is as it was.
#[test]
#[ignore = "needs root: attach needs runc, device nodes, mounts and cgroups"]
fn what_attach_makes_is_taken_away_when_the_container_ends() {
    let w = World::new();
    // runc's own mount points first, from a container of its own.
    let settle = w.container("settle", &[], "true", true);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !w.rt.state(&settle).stdout.contains("\"stopped\"") {
        assert!(
            Instant::now() < deadline,
            "the settling container never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    w.rt.delete(&settle).assert_success();
    let before = nvc_tests::tree_digest(&w.setup.rootfs.path);

    let hook = nvc_tests::workspace_bin("nvc-hook");
    let entry = |stage: &str| {
        serde_json::json!({
            "path": hook,
            "args": ["nvc-hook", stage],
            "env": [
                libnvc::plan::HOOK_PATH_ENV,
                format!("NVC_CONFIG={}", w.setup.config.display()),
            ],
        })
    };
    let bundle = w
        .setup
        .bundle("hooked", &[], "sleep 600")
        .set(
            "/hooks",
            serde_json::json!({"prestart": [entry("prestart")], "poststop": [entry("poststop")]}),
        )
        .write()
        .unwrap();
    let id = nvc_tests::container_id("nvc-attach");
    w.rt.create(&bundle, &id).assert_success();
    w.rt.start(&id).assert_success();
    let said = w.nvc_ok("attach", &id, "0");
    assert!(!said.contains("stay in the container"), "{said}");
    // The cache lists the driver and keeps the image's own entries (read through the
    // host's procfs: the container's /proc cannot reopen a file for nvc).
    let inside = w
        .exec(&id, &format!("ls {LIB}/libcuda.so.1 && ldconfig -p"))
        .stdout
        .clone();
    assert!(
        inside.contains(&format!(
            "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
        )),
        "{inside}"
    );
    assert!(
        inside.contains("libc.so.6 (libc6,x86-64)"),
        "the image's entries: {inside}"
    );
    assert_ne!(nvc_tests::tree_digest(&w.setup.rootfs.path), before);

    // runc runs the poststop hook when it deletes the container.
    w.rt.delete(&id).assert_success();
    assert_eq!(
        nvc_tests::tree_digest(&w.setup.rootfs.path),
        before,
        "{}",
        w.setup.nvc_log()
    );
}

/// A state that names a process in a mount namespace of its own whose root is the host's
/// `/` (a forged or stale state, here from a stand-in runtime): refused before anything is
/// written, as the prestart hook refuses such a container.
#[test]
#[ignore = "needs root: attach needs runc, device nodes, mounts and cgroups"]
fn a_process_with_the_hosts_root_is_refused() {
    let w = World::new();
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "60"])
        .spawn()
        .unwrap();
    let pid = holder.id();
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ns(&pid.to_string()) == ns("self") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let bundle = w.setup.bundle("host-root", &[], "true").write().unwrap();
    let runtime = w.setup.dir.path().join("stand-in-runtime");
    std::fs::write(
        &runtime,
        format!(
            "#!/bin/sh\necho '{{\"pid\": {pid}, \"status\": \"running\", \"bundle\": \"{}\", \"rootfs\": \"/\"}}'\n",
            bundle.dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Command::new(nvc_tests::workspace_bin("nvc"))
        .env("NVC_CONFIG", &w.setup.config)
        .args(["attach", "--runtime"])
        .arg(&runtime)
        .args(["forged", "--gpus", "0"])
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is the host's root directory"), "{stderr}");
    assert!(
        !w.setup.dir.path().join("state/attached").exists(),
        "nothing recorded: {}",
        w.setup.nvc_log()
    );
}
