//! The container's device cgroup on the hook-only path: `libnvc::devcgroup` against real
//! cgroups (v2 through the unified hierarchy, v1 through the `devices` controller) with a
//! child process that tries to open device nodes, and nvc-hook under plain runc, asserted
//! from inside the container. Needs root.
//!
//! A node whose device cgroup denies it fails to open with EPERM ("Operation not
//! permitted") before any driver is asked; an allowed node reaches its driver: it opens
//! where the NVIDIA driver is loaded, and fails with ENXIO ("No such device or address")
//! or ENODEV where it is not (the fake tree's 195:N on a machine without a GPU). The tests
//! assert exactly that distinction.
//!
//! A device node made inside a container for a GPU it was not given is in `hostile`
//! (`device_nodes`).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use libnvc::devcgroup::{self, DevicePolicy, Rule};
use nvc_host::devcgroup::{CharDevice, DevCgroupError, DeviceCgroup, Granted};
use nvc_tests::cgroup::{attach_policy, device_programs, grant, AttachHow};
use nvc_tests::{require_root, Bundle, FakeDriver, Outcome, Runtime, TestRootfs, TestSetup};
use serde_json::{json, Value};

const DENIED: &str = "Operation not permitted";

/// Whether the outcome of opening a device node (and reading a byte) says that the open
/// got past the device cgroup to the driver: it opened (reading may still fail), or the
/// driver is not loaded or has no such minor. Not a missing file, not EPERM.
fn reached_the_driver(outcome: &str) -> bool {
    !outcome.contains(DENIED)
        && (outcome == "ok"
            || outcome.ends_with(": opened")
            || outcome.contains("No such device")
            || outcome.contains("error reading")
            || outcome.contains("read error"))
}

// ---------------------------------------------------------------------------------------
// Real cgroups and a process in them.

/// A cgroup made for one test, removed (after its processes are gone) when dropped.
struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    fn new(parent: &Path, what: &str) -> TestCgroup {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("nvc-test-{what}-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("cannot create the cgroup {}: {e}", path.display()));
        TestCgroup { path }
    }

    fn write(&self, file: &str, line: &str) {
        let path = self.path.join(file);
        std::fs::write(&path, line)
            .unwrap_or_else(|e| panic!("cannot write {line:?} to {}: {e}", path.display()));
    }

    fn programs(&self) -> Vec<u32> {
        device_programs(&self.path).unwrap()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // The processes were killed and reaped first; the kernel may take a moment to
        // notice that the cgroup is empty.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove the test cgroup {}", self.path.display());
    }
}

/// A shell that reads paths on stdin and answers, for each, `ok` when it could open and
/// read it, else the error (`head: cannot open '…' for reading: Operation not permitted`).
struct Opener {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

const OPENER: &str = r#"while IFS= read -r p; do
  if err=$(head -c 1 "$p" 2>&1 >/dev/null); then echo ok; else echo "$err" | tr '\n' ' '; echo; fi
done"#;

impl Opener {
    /// Starts the shell and moves it into `cgroup` before it opens anything.
    fn spawn_in(cgroup: &TestCgroup) -> Opener {
        let mut child = Command::new("sh")
            .args(["-c", OPENER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let opener = Opener {
            child,
            stdin,
            stdout,
        };
        cgroup.write("cgroup.procs", &opener.pid().to_string());
        opener
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    fn open(&mut self, path: &Path) -> String {
        writeln!(self.stdin, "{}", path.display()).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    #[track_caller]
    fn assert_opens(&mut self, path: &Path) {
        let got = self.open(path);
        assert_eq!(got, "ok", "{} should open", path.display());
    }

    #[track_caller]
    fn assert_denied(&mut self, path: &Path) {
        let got = self.open(path);
        assert!(
            got.contains(DENIED),
            "{} should be denied by the device cgroup, got {got:?}",
            path.display()
        );
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Character nodes with the numbers of /dev/null (1:3), /dev/zero (1:5) and /dev/random
/// (1:8), made in a temporary directory, so the host's /dev is never involved.
struct Nodes {
    dir: tempfile::TempDir,
    null: PathBuf,
    zero: PathBuf,
    random: PathBuf,
}

impl Nodes {
    fn new() -> Nodes {
        let dir = tempfile::tempdir().unwrap();
        let make = |name: &str, minor: u32| make_node(dir.path(), name, 1, minor);
        Nodes {
            null: make("null", 3),
            zero: make("zero", 5),
            random: make("random", 8),
            dir,
        }
    }

    /// Another node in the same directory.
    fn make(&self, name: &str, major: u32, minor: u32) -> PathBuf {
        make_node(self.dir.path(), name, major, minor)
    }
}

fn make_node(dir: &Path, name: &str, major: u32, minor: u32) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new("mknod")
        .args(["-m", "666"])
        .arg(&path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "mknod {}: {out:?}", path.display());
    path
}

/// The mount point of a file system of type `fstype` among `candidates`, from
/// /proc/self/mountinfo.
fn mounted(fstype: &str, candidates: &[&str]) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    candidates.iter().map(PathBuf::from).find(|want| {
        info.lines().any(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-");
            fields.get(4).map(Path::new) == Some(want.as_path())
                && sep.and_then(|i| fields.get(i + 1)) == Some(&fstype)
        })
    })
}

/// The unified (cgroup v2) hierarchy: /sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified
/// on a hybrid one.
fn unified_root() -> PathBuf {
    mounted("cgroup2", &["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]).unwrap_or_else(|| {
        panic!("this host mounts no cgroup2 file system at /sys/fs/cgroup or /sys/fs/cgroup/unified: the cgroup v2 path cannot be tested here")
    })
}

/// What runc gives a container whose spec allows /dev/null only.
fn null_only_rules() -> Vec<Rule> {
    devcgroup::spec_rules(&json!({"linux": {"resources": {"devices": [
        {"allow": false, "access": "rwm"},
        {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
    ]}}}))
    .unwrap()
}

const ZERO: CharDevice = CharDevice { major: 1, minor: 5 };

#[test]
#[ignore = "needs root: cgroups and device programs"]
fn cgroup_v2_grant_replaces_the_runtime_program() {
    require_root("cgroups and device programs");
    let root = unified_root();
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&root, "v2");
    let rules = null_only_rules();
    let runtime = attach_policy(
        &cg.path,
        &DevicePolicy::from_rules(&rules).unwrap(),
        AttachHow::Replace,
    )
    .unwrap();
    assert_eq!(cg.programs(), [runtime]);

    let mut child = Opener::spawn_in(&cg);
    child.assert_denied(&nodes.zero);
    child.assert_opens(&nodes.null);
    child.assert_denied(&nodes.random);

    let cgroup = DeviceCgroup {
        cgroup_root: root.clone(),
        rules: rules.clone(),
    };
    let granted = grant(child.pid(), &cgroup, &[ZERO]).unwrap();
    let Granted::Replaced {
        cgroup: dir,
        old,
        new,
    } = granted
    else {
        panic!("expected a replaced program, got {granted:?}");
    };
    assert_eq!((dir.as_path(), old), (cg.path.as_path(), runtime));
    assert_eq!(cg.programs(), [new], "exactly nvc's program is attached");
    child.assert_opens(&nodes.zero);
    child.assert_opens(&nodes.null);
    child.assert_denied(&nodes.random);

    // Granting what the rules already allow changes nothing.
    let again = grant(child.pid(), &cgroup, &[CharDevice { major: 1, minor: 3 }]);
    assert_eq!(again.unwrap(), Granted::AlreadyAllowed);
    assert_eq!(cg.programs(), [new]);
}

#[test]
#[ignore = "needs root: cgroups and device programs"]
fn cgroup_v2_program_of_runc_defaults_and_grants_decides_in_the_kernel() {
    require_root("cgroups and device programs");
    let root = unified_root();
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&root, "v2-runc");
    // What runc installs for `runc spec`'s config.json, plus nvc's grants.
    let mut rules = devcgroup::runtime_rules(&json!({"linux": {"resources": {"devices": [
        {"allow": false, "access": "rwm"}
    ]}}}))
    .unwrap();
    devcgroup::allow(&mut rules, 195, 0);
    devcgroup::allow(&mut rules, 195, 255);
    let policy = DevicePolicy::from_rules(&rules).unwrap();
    attach_policy(&cg.path, &policy, AttachHow::Replace).unwrap();
    let port = nodes.make("port", 1, 4);
    let gpu0 = nodes.make("nvidia0", 195, 0);
    let gpu1 = nodes.make("nvidia1", 195, 1);
    let ctl = nodes.make("nvidiactl", 195, 255);
    let mut child = Opener::spawn_in(&cg);
    for path in [&nodes.null, &nodes.zero, &nodes.random] {
        child.assert_opens(path);
    }
    child.assert_denied(&port);
    child.assert_denied(&gpu1);
    for path in [&gpu0, &ctl] {
        let got = child.open(path);
        assert!(reached_the_driver(&got), "{}: {got}", path.display());
    }
}

#[test]
#[ignore = "needs root: cgroups and device programs"]
fn cgroup_v2_grant_replaces_an_exclusive_program() {
    require_root("cgroups and device programs");
    let root = unified_root();
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&root, "v2-exclusive");
    let rules = null_only_rules();
    let runtime = attach_policy(
        &cg.path,
        &DevicePolicy::from_rules(&rules).unwrap(),
        AttachHow::Exclusive,
    )
    .unwrap();
    let mut child = Opener::spawn_in(&cg);
    child.assert_denied(&nodes.zero);
    let cgroup = DeviceCgroup {
        cgroup_root: root,
        rules,
    };
    let granted = grant(child.pid(), &cgroup, &[ZERO]).unwrap();
    assert!(
        matches!(granted, Granted::Replaced { old, .. } if old == runtime),
        "{granted:?}"
    );
    assert_eq!(cg.programs().len(), 1);
    child.assert_opens(&nodes.zero);
    child.assert_denied(&nodes.random);
}

#[test]
#[ignore = "needs root: cgroups and device programs"]
fn cgroup_v2_grant_refuses_several_programs_and_leaves_them() {
    require_root("cgroups and device programs");
    let root = unified_root();
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&root, "v2-several");
    let rules = null_only_rules();
    let policy = DevicePolicy::from_rules(&rules).unwrap();
    let first = attach_policy(&cg.path, &policy, AttachHow::Replace).unwrap();
    let second = attach_policy(&cg.path, &policy, AttachHow::Add).unwrap();
    assert_eq!(cg.programs(), [first, second]);
    let mut child = Opener::spawn_in(&cg);
    let cgroup = DeviceCgroup {
        cgroup_root: root,
        rules,
    };
    let err = grant(child.pid(), &cgroup, &[ZERO]).unwrap_err();
    assert!(
        matches!(&err, DevCgroupError::SeveralPrograms { ids, .. } if *ids == [first, second]),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&cg.path.display().to_string()), "{msg}");
    assert!(msg.contains("has 2 device programs"), "{msg}");
    assert!(msg.contains("nvc-runtime"), "{msg}");
    assert_eq!(cg.programs(), [first, second]);
    child.assert_denied(&nodes.zero);
}

#[test]
#[ignore = "needs root: cgroups and device programs"]
fn cgroup_v2_without_a_program_is_left_alone() {
    require_root("cgroups and device programs");
    let root = unified_root();
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&root, "v2-none");
    let mut child = Opener::spawn_in(&cg);
    let cgroup = DeviceCgroup {
        cgroup_root: root,
        rules: null_only_rules(),
    };
    let granted = grant(child.pid(), &cgroup, &[ZERO]).unwrap();
    assert_eq!(
        granted,
        Granted::Unfiltered {
            cgroup: cg.path.clone()
        }
    );
    assert!(cg.programs().is_empty());
    child.assert_opens(&nodes.zero);
    child.assert_opens(&nodes.random);
}

#[test]
#[ignore = "needs root: cgroups"]
fn cgroup_v1_grant_appends_to_devices_allow() {
    require_root("cgroups");
    let Some(devices) = mounted("cgroup", &["/sys/fs/cgroup/devices"]) else {
        panic!(
            "this host has no cgroup v1 devices hierarchy at /sys/fs/cgroup/devices, so the v1 \
             path cannot be tested here (on a cgroup v2 host, run with \
             `--skip cgroup_v1_grant_appends_to_devices_allow`)"
        );
    };
    let nodes = Nodes::new();
    let cg = TestCgroup::new(&devices, "v1");
    // As runc sets up a container whose spec allows /dev/null only.
    cg.write("devices.deny", "a");
    cg.write("devices.allow", "c 1:3 rwm");
    let mut child = Opener::spawn_in(&cg);
    child.assert_denied(&nodes.zero);
    child.assert_opens(&nodes.null);

    let cgroup = DeviceCgroup {
        cgroup_root: devices.parent().unwrap().to_path_buf(),
        rules: null_only_rules(),
    };
    let granted = grant(child.pid(), &cgroup, &[ZERO]).unwrap();
    assert_eq!(
        granted,
        Granted::Appended {
            cgroup: cg.path.clone()
        }
    );
    child.assert_opens(&nodes.zero);
    child.assert_opens(&nodes.null);
    child.assert_denied(&nodes.random);
    let list = std::fs::read_to_string(cg.path.join("devices.list")).unwrap();
    let mut lines: Vec<&str> = list.lines().collect();
    lines.sort();
    assert_eq!(lines, ["c 1:3 rwm", "c 1:5 rwm"]);
}

#[test]
#[ignore = "needs root: reading another process's cgroups"]
fn grant_names_what_it_cannot_find() {
    require_root("reading another process's cgroups");
    let cgroup = DeviceCgroup {
        cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        rules: null_only_rules(),
    };
    let err = grant(i32::MAX, &cgroup, &[ZERO]).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("cannot read /proc/{}/cgroup", i32::MAX)),
        "{err}"
    );
    // A cgroup root that is not one.
    let tmp = tempfile::tempdir().unwrap();
    let cgroup = DeviceCgroup {
        cgroup_root: tmp.path().to_path_buf(),
        rules: null_only_rules(),
    };
    let pid = i32::try_from(std::process::id()).unwrap();
    let err = grant(pid, &cgroup, &[ZERO]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&tmp.path().display().to_string()), "{msg}");
}

// ---------------------------------------------------------------------------------------
// nvc-hook under plain runc.

/// One test's world: a fake driver, a rootfs, an nvc config.
struct World {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    rootfs: TestRootfs,
    config: PathBuf,
}

impl World {
    fn new() -> World {
        let TestSetup {
            dir,
            fake,
            rootfs,
            config,
        } = TestSetup::new("containers need runc, device nodes and mounts");
        World {
            dir,
            fake,
            rootfs,
            config,
        }
    }

    /// A bundle running `script` as Docker's `--gpus` does: the hook in the spec, no
    /// NVIDIA device in `linux.devices`, and runc's deny-all device rules.
    fn hook_only(&self, name: &str, env: &str, script: &str) -> Bundle {
        Bundle::new(&self.dir.path().join(name), &self.rootfs.path)
            .unwrap()
            .args(&["sh", "-c", script])
            .env(&[env])
            .with_fake_proc(&self.fake)
            .set(
                "/hooks",
                json!({"prestart": [{
                    "path": nvc_tests::workspace_bin("nvc-hook"),
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                    "env": [format!("NVC_CONFIG={}", self.config.display())],
                }]}),
            )
    }

    fn run(&self, bundle: Bundle) -> Outcome {
        let bundle = bundle.write().unwrap();
        let rt = Runtime::runc(&self.dir.path().join("runc-state"));
        let id = nvc_tests::container_id("nvc-devcg");
        let out = rt.run(&bundle, &id);
        let log = std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default();
        assert!(out.success(), "{out:?}\nnvc log:\n{log}");
        out
    }

    fn gpu_minors(&self) -> Vec<u32> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .iter()
            .map(|g| g.minor)
            .collect()
    }
}

/// Tries to open each of `paths` in the container; `mknod`s the ones in `make` first.
fn open_script(make: &[u32], paths: &[String]) -> String {
    let mut script = String::new();
    for minor in make {
        script.push_str(&format!(
            "mknod /dev/nvidia{minor} c 195 {minor} || echo mknod-failed; "
        ));
    }
    for p in paths {
        script.push_str(&format!(
            "if err=$(cat {p} 2>&1 >/dev/null); then echo \"{p}: opened\"; else echo \"{p}: $err\"; fi; "
        ));
    }
    script.push_str("echo done");
    script
}

/// The line the script printed for `path`.
fn result_for<'a>(stdout: &'a str, path: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{path}: ")))
        .unwrap_or_else(|| panic!("no result for {path} in:\n{stdout}"))
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn hook_only_container_opens_its_gpu_and_no_other() {
    let w = World::new();
    let minors = w.gpu_minors();
    let (given, other) = (minors[1], minors[0]);
    let paths = [
        format!("/dev/nvidia{given}"),
        "/dev/nvidiactl".to_string(),
        format!("/dev/nvidia{other}"),
        "/dev/null".to_string(),
        "/dev/zero".to_string(),
    ];
    // /dev/zero would never end: read one byte of it instead.
    let script = open_script(&[other], &paths[..4]).replace(
        "echo done",
        "head -c 1 /dev/zero >/dev/null && echo '/dev/zero: opened'; echo done",
    );
    let out = w.run(w.hook_only("hook-only", "NVIDIA_VISIBLE_DEVICES=1", &script));
    let stdout = &out.stdout;
    assert!(!stdout.contains("mknod-failed"), "{stdout}");
    for granted in [&paths[0], &paths[1]] {
        let line = result_for(stdout, granted);
        assert!(reached_the_driver(line), "{granted} is allowed: {line}");
    }
    let line = result_for(stdout, &paths[2]);
    assert!(
        line.contains(DENIED),
        "{} is not the container's: {line}",
        paths[2]
    );
    // runc's own rules are kept.
    assert_eq!(result_for(stdout, "/dev/null"), "/dev/null: opened");
    assert_eq!(result_for(stdout, "/dev/zero"), "/dev/zero: opened");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn hook_only_privileged_container_keeps_every_device() {
    let w = World::new();
    let minors = w.gpu_minors();
    let (given, other) = (minors[1], minors[0]);
    let paths = [format!("/dev/nvidia{given}"), format!("/dev/nvidia{other}")];
    let bundle = w
        .hook_only(
            "privileged",
            "NVIDIA_VISIBLE_DEVICES=1",
            &open_script(&[other], &paths),
        )
        .privileged();
    let out = w.run(bundle);
    for p in &paths {
        let line = result_for(&out.stdout, p);
        assert!(reached_the_driver(line), "{p} is allowed to all: {line}");
    }
}

/// Rootless: runc started by a user in a user namespace of its own (`unshare -Ur`, as
/// rootless Podman runs it), with nvc-hook from the spec as hooks.d puts it there. The
/// device cgroup is not that user's to change and runc made none; the hook leaves it,
/// says so in its log, and the container gets its nodes. (Before, the hook failed on the
/// cgroup it may not write.)
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn rootless_containers_get_their_nodes_without_device_cgroup_writes() {
    let w = World::new();
    let script = "for n in /dev/nvidia*; do [ -c $n ] && echo node $n; done; echo done";
    let bundle = w
        .hook_only("rootless", "NVIDIA_VISIBLE_DEVICES=all", script)
        .write()
        .unwrap();
    // What a rootless runtime's spec has: a user namespace mapping the user alone, no
    // cgroup settings, no cgroup or sysfs mount of its own, devpts without a gid.
    let mut spec = bundle.read_config().unwrap();
    let linux = spec["linux"].as_object_mut().unwrap();
    linux["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    let mapping = json!([{"containerID": 0, "hostID": 0, "size": 1}]);
    linux.insert("uidMappings".into(), mapping.clone());
    linux.insert("gidMappings".into(), mapping);
    linux.remove("resources");
    let mounts = spec["mounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["type"] != "cgroup");
    for m in mounts.iter_mut() {
        if m["destination"] == "/dev/pts" {
            let options: Vec<Value> = m["options"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|o| !o.as_str().unwrap_or("").starts_with("gid="))
                .cloned()
                .collect();
            m["options"] = Value::Array(options);
        }
        if m["destination"] == "/sys" {
            *m = json!({"destination": "/sys", "type": "bind", "source": "/sys",
                        "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]});
        }
    }
    std::fs::write(bundle.config_path(), spec.to_string()).unwrap();

    let state = w.dir.path().join("rootless-state");
    let id = nvc_tests::container_id("nvc-rootless");
    let out = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--",
            "runc",
            "--rootless=true",
        ])
        .arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(&bundle.dir)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .expect("this test needs unshare (util-linux) and runc on PATH");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(w.dir.path().join("nvc.log")).unwrap_or_default();
    assert!(
        out.status.success() && stdout.contains("done"),
        "{}\nstdout:\n{stdout}\nstderr:\n{}\nnvc log:\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for minor in w.gpu_minors() {
        assert!(
            stdout.contains(&format!("node /dev/nvidia{minor}\n")),
            "{stdout}"
        );
    }
    assert!(stdout.contains("node /dev/nvidiactl\n"), "{stdout}");
    assert!(
        log.contains("user namespace of its own (rootless)"),
        "the hook did not say why it left the device cgroup:\n{log}"
    );
}
