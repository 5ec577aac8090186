//! The pieces container tests stand on: the test rootfs, OCI bundles, and the runtime harness,
//! checked with plain runc, and one container through nvc-runtime that asks for no GPU.
//! Needs root (runc, mounts).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nvc_tests::{
    container_id, elf_interpreter, host_mounts_beside_tests, nvc_config_for, require_root,
    tree_digest, Bundle, FakeDriverSpec, Outcome, RootfsSpec, Runtime, TestRootfs, BUSYBOX_APPLETS,
    LOADER_PATH, PROBE_PATH,
};
use serde_json::json;
use tempfile::TempDir;

const ALL_LAYOUTS: [RootfsSpec; 4] = [
    RootfsSpec {
        debian_layout: true,
        merged_usr: true,
    },
    RootfsSpec {
        debian_layout: true,
        merged_usr: false,
    },
    RootfsSpec {
        debian_layout: false,
        merged_usr: true,
    },
    RootfsSpec {
        debian_layout: false,
        merged_usr: false,
    },
];

/// A rootfs at `<tmp>/rootfs`, a bundle at `<tmp>/bundle` and a runc state dir at `<tmp>/state`.
struct Setup {
    tmp: TempDir,
    rootfs: TestRootfs,
    runtime: Runtime,
}

impl Setup {
    fn new(spec: RootfsSpec, what: &str) -> Setup {
        require_root(what);
        let tmp = tempfile::tempdir().unwrap();
        let rootfs = spec.build(&tmp.path().join("rootfs")).unwrap();
        let runtime = Runtime::runc(&tmp.path().join("state"));
        Setup {
            tmp,
            rootfs,
            runtime,
        }
    }

    fn bundle(&self) -> Bundle {
        Bundle::new(&self.tmp.path().join("bundle"), &self.rootfs.path).unwrap()
    }

    fn run(&self, bundle: Bundle) -> Outcome {
        let bundle = bundle.write().unwrap();
        self.runtime.run(&bundle, &container_id("harness"))
    }

    fn sh(&self, script: &str) -> Outcome {
        self.run(self.bundle().args(&["sh", "-c", script]))
    }
}

#[test]
#[ignore = "needs root: runc container"]
fn plain_runc_runs_the_rootfs() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let outcome = setup.sh("echo hi; ls /usr/bin/nvc-probe; id -u");
    outcome.assert_success();
    assert_eq!(outcome.stdout, "hi\n/usr/bin/nvc-probe\n0\n", "{outcome:?}");
    assert!(!outcome.timed_out);
}

#[test]
#[ignore = "needs root: runc container"]
fn probe_finds_no_driver_in_a_plain_container() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let outcome = setup.run(setup.bundle().args(&[PROBE_PATH, "libm.so.6"]));
    outcome.assert_success();
    let lines: Vec<&str> = outcome.stdout.lines().collect();
    assert!(
        lines[0].starts_with("libcuda=missing error=libcuda.so.1: cannot open shared object"),
        "{outcome:?}"
    );
    assert!(
        lines[1].starts_with("libnvidia-ml=missing error="),
        "{outcome:?}"
    );
    // The container's own glibc is found through its ld.so.cache.
    assert!(
        lines[2].starts_with("libm.so.6=ok path=/lib/x86_64-linux-gnu/libm.so.6 realpath=/usr/lib/x86_64-linux-gnu/libm.so.6"),
        "{outcome:?}"
    );
    assert_eq!(lines[3], "probe=done");
}

#[test]
#[ignore = "needs root: runc container"]
fn every_layout_runs_the_probe_and_ldconfig() {
    for spec in ALL_LAYOUTS {
        let setup = Setup::new(spec, "runc container");
        let libc = format!("{}/libc.so.6", spec.libc_dir());
        let outcome = setup.sh(&format!(
            "{PROBE_PATH} libc.so.6 && /sbin/ldconfig -p && readlink -f {LOADER_PATH} && \
             readlink -f /bin/sh && test -f {libc} && echo layout-ok"
        ));
        outcome.assert_success();
        let out = &outcome.stdout;
        assert!(out.contains("libcuda=missing"), "{spec:?}\n{outcome:?}");
        assert!(out.contains("libc.so.6=ok path="), "{spec:?}\n{outcome:?}");
        assert!(
            out.contains("libc.so.6 (libc6,x86-64) => "),
            "{spec:?}\n{outcome:?}"
        );
        assert!(
            out.contains(&format!("{}/ld-linux-x86-64.so.2\n", spec.libc_dir())),
            "the loader resolves into the libc dir: {spec:?}\n{outcome:?}"
        );
        assert!(
            out.contains(&format!("{}/busybox\n", spec.bin_dir())),
            "{spec:?}\n{outcome:?}"
        );
        assert!(out.ends_with("layout-ok\n"), "{spec:?}\n{outcome:?}");
        assert!(
            !out.contains("=ok path=/usr/local/nvidia"),
            "no NVIDIA file: {outcome:?}"
        );
    }
}

#[test]
#[ignore = "needs root: test rootfs (ldconfig -r)"]
fn rootfs_layout_on_disk() {
    require_root("test rootfs (ldconfig -r)");
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = RootfsSpec::default().build(tmp.path()).unwrap();
    let p = |s: &str| rootfs.host_path(s);
    assert_eq!(rootfs.lib_dir(), "/usr/lib/x86_64-linux-gnu");
    assert_eq!(fs::read_link(p("/lib")).unwrap(), Path::new("usr/lib"));
    assert_eq!(fs::read_link(p("/lib64")).unwrap(), Path::new("usr/lib64"));
    assert_eq!(
        fs::read_link(p("/usr/lib64/ld-linux-x86-64.so.2")).unwrap(),
        Path::new("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    );
    for name in ["libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6"] {
        let meta = fs::symlink_metadata(p(&format!("/usr/lib/x86_64-linux-gnu/{name}"))).unwrap();
        assert!(meta.is_file(), "{name} is a real file");
    }
    let probe = fs::read(p(PROBE_PATH)).unwrap();
    assert_eq!(
        elf_interpreter(&probe),
        Some(Some(LOADER_PATH.to_string())),
        "the probe is dynamic"
    );
    for static_program in ["/usr/sbin/ldconfig", "/usr/bin/busybox"] {
        let bytes = fs::read(p(static_program)).unwrap();
        assert_eq!(elf_interpreter(&bytes), Some(None), "{static_program}");
    }
    for applet in BUSYBOX_APPLETS {
        assert_eq!(
            fs::read_link(p(&format!("/usr/bin/{applet}"))).unwrap(),
            Path::new("busybox")
        );
    }
    assert_eq!(
        fs::metadata(p("/tmp")).unwrap().permissions().mode() & 0o7777,
        0o1777
    );
    assert!(p("/etc/ld.so.cache").is_file());
    assert!(fs::read_to_string(p("/etc/passwd"))
        .unwrap()
        .starts_with("root:x:0:0:"));
    // No NVIDIA file anywhere.
    assert!(!tree_digest(tmp.path()).to_lowercase().contains("nvidia"));

    // The tarball holds the same tree.
    let out = tempfile::tempdir().unwrap();
    let tar = out.path().join("rootfs.tar");
    rootfs.tarball(&tar).unwrap();
    let listing = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    for entry in [
        "./usr/bin/nvc-probe",
        "./etc/ld.so.cache",
        "./lib64",
        "./tmp/",
    ] {
        assert!(listing.lines().any(|l| l == entry), "{entry}:\n{listing}");
    }
}

#[test]
#[ignore = "needs root: runc container"]
fn ldconfig_inside_lists_the_containers_libraries() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let outcome = setup.sh("/sbin/ldconfig -p");
    outcome.assert_success();
    assert!(
        outcome
            .stdout
            .contains("libc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"),
        "{outcome:?}"
    );
    // Running ldconfig in the container rewrites its cache: it works with the static binary.
    let outcome = setup.sh("/sbin/ldconfig && /sbin/ldconfig -p | grep -c libm.so.6");
    outcome.assert_success();
    assert_eq!(outcome.stdout.trim(), "1", "{outcome:?}");
}

#[test]
#[ignore = "needs root: runc container"]
fn readonly_rootfs() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let script = "touch /newfile 2>/dev/null && echo writable || echo readonly; \
                  touch /tmp/x 2>/dev/null && echo tmp-writable || echo tmp-readonly";
    let outcome = setup.run(setup.bundle().readonly(true).args(&["sh", "-c", script]));
    outcome.assert_success();
    assert_eq!(outcome.stdout, "readonly\ntmp-readonly\n", "{outcome:?}");
    let outcome = setup.sh(script);
    outcome.assert_success();
    assert_eq!(outcome.stdout, "writable\ntmp-writable\n", "{outcome:?}");
}

#[test]
#[ignore = "needs root: runc container"]
fn privileged_bundle() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let script = "grep CapEff /proc/self/status; \
                  mount -t tmpfs none /mnt && echo mounted; \
                  mknod /tmp/null c 1 3 && echo mknod-ok";
    let outcome = setup.run(setup.bundle().privileged().args(&["sh", "-c", script]));
    outcome.assert_success();
    let cap_eff = outcome.stdout.lines().next().unwrap_or_default();
    let mask = u64::from_str_radix(cap_eff.trim_start_matches("CapEff:").trim(), 16).unwrap();
    assert_ne!(mask & (1 << 21), 0, "CAP_SYS_ADMIN: {outcome:?}");
    assert_ne!(mask & (1 << 27), 0, "CAP_MKNOD: {outcome:?}");
    assert!(
        outcome.stdout.contains("mounted\nmknod-ok\n"),
        "{outcome:?}"
    );

    // Unprivileged: no CAP_SYS_ADMIN, so no mount.
    let outcome = setup.sh(script);
    let cap_eff = outcome.stdout.lines().next().unwrap_or_default();
    let mask = u64::from_str_radix(cap_eff.trim_start_matches("CapEff:").trim(), 16).unwrap();
    assert_eq!(mask & (1 << 21), 0, "{outcome:?}");
    assert!(!outcome.stdout.contains("mounted"), "{outcome:?}");
}

#[test]
#[ignore = "needs root: runc container"]
fn env_and_json_pointer_edits_reach_the_container() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let bundle = setup
        .bundle()
        .env(&["NVIDIA_VISIBLE_DEVICES=none", "A=b c"])
        .set("/process/cwd", json!("/tmp"))
        .set("/hostname", json!("edited"))
        .args(&[
            "sh",
            "-c",
            "echo $NVIDIA_VISIBLE_DEVICES; echo $A; pwd; cat /proc/sys/kernel/hostname; echo $PATH",
        ]);
    let outcome = setup.run(bundle);
    outcome.assert_success();
    assert_eq!(
        outcome.stdout,
        "none\nb c\n/tmp\nedited\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        "{outcome:?}"
    );
}

#[test]
fn bundle_config_json() {
    let tmp = tempfile::tempdir().unwrap();
    let inside = Bundle::new(tmp.path(), &tmp.path().join("rootfs")).unwrap();
    assert_eq!(inside.read_config().unwrap()["root"]["path"], "rootfs");
    let outside = tempfile::tempdir().unwrap();
    let bundle = Bundle::new(&tmp.path().join("b"), outside.path())
        .unwrap()
        .args(&["true"])
        .readonly(true)
        .set("/linux/namespaces/-", json!({ "type": "cgroup" }))
        .set("/annotations/nvc.test", json!("1"));
    // Not written yet.
    assert_eq!(
        bundle.read_config().unwrap()["process"]["args"],
        json!(["sh"])
    );
    let bundle = bundle.write().unwrap();
    let config = bundle.read_config().unwrap();
    assert_eq!(config, bundle.config);
    assert_eq!(
        config["root"],
        json!({ "path": outside.path().to_str().unwrap(), "readonly": true })
    );
    assert_eq!(config["process"]["terminal"], false);
    assert_eq!(
        config["linux"]["namespaces"][5],
        json!({ "type": "cgroup" })
    );
    assert_eq!(config["annotations"]["nvc.test"], "1");
    let privileged = bundle.clone().privileged();
    let caps = privileged.config["process"]["capabilities"]["effective"]
        .as_array()
        .unwrap();
    assert!(caps.contains(&json!("CAP_SYS_ADMIN")));
    assert_eq!(privileged.config["linux"]["maskedPaths"], json!([]));
    assert!(!bundle.config["process"]["capabilities"]["effective"]
        .as_array()
        .unwrap()
        .contains(&json!("CAP_SYS_ADMIN")));
}

#[test]
#[should_panic(expected = "Bundle::set(\"/process/args/0/x\")")]
fn bundle_set_through_a_string_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let _ = Bundle::new(tmp.path(), &tmp.path().join("rootfs"))
        .unwrap()
        .set("/process/args/0/x", json!(1));
}

#[test]
fn tree_digest_sees_changes_and_only_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::create_dir(dir.join("sub")).unwrap();
    fs::write(dir.join("sub/file"), "one").unwrap();
    std::os::unix::fs::symlink("sub/file", dir.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent", dir.join("dangling")).unwrap();
    let before = tree_digest(dir);
    assert_eq!(tree_digest(dir), before, "stable");
    assert!(before.contains("link -> sub/file"), "{before}");
    assert!(before.contains("link -> /nonexistent"), "{before}");

    // Reading and rewriting the same bytes changes nothing that counts.
    let _ = fs::read(dir.join("sub/file")).unwrap();
    fs::write(dir.join("sub/file"), "one").unwrap();
    assert_eq!(tree_digest(dir), before);

    let changes: [(&str, &dyn Fn()); 5] = [
        ("content", &|| {
            fs::write(dir.join("sub/file"), "two").unwrap()
        }),
        ("mode", &|| {
            fs::set_permissions(dir.join("sub/file"), fs::Permissions::from_mode(0o600)).unwrap()
        }),
        ("link target", &|| {
            fs::remove_file(dir.join("link")).unwrap();
            std::os::unix::fs::symlink("sub", dir.join("link")).unwrap();
        }),
        ("new file", &|| fs::write(dir.join("sub/new"), "").unwrap()),
        ("new dir", &|| fs::create_dir(dir.join("d")).unwrap()),
    ];
    let mut last = before;
    for (what, change) in changes {
        change();
        let now = tree_digest(dir);
        assert_ne!(now, last, "{what} shows");
        last = now;
    }
}

#[test]
#[ignore = "needs root: runc container"]
fn a_plain_container_changes_nothing_outside() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    // Other test programs run beside this one and mount in their own temporary folders.
    let mounts = host_mounts_beside_tests(setup.tmp.path());
    assert!(mounts.iter().any(|m| m == "/"), "{mounts:?}");
    let rootfs = tree_digest(&setup.rootfs.path);
    let outcome = setup.sh("mount | wc -l; ls /dev /proc/self >/dev/null; echo done");
    outcome.assert_success();
    assert!(outcome.stdout.ends_with("done\n"), "{outcome:?}");
    assert_eq!(host_mounts_beside_tests(setup.tmp.path()), mounts);
    assert_eq!(
        tree_digest(&setup.rootfs.path),
        rootfs,
        "runc itself leaves the rootfs as it was"
    );
}

#[test]
#[ignore = "needs root: runc container"]
fn create_start_delete() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let bundle = setup
        .bundle()
        .args(&["sh", "-c", "echo started"])
        .write()
        .unwrap();
    let id = container_id("lifecycle");
    setup.runtime.create(&bundle, &id).assert_success();
    let state = setup.runtime.state(&id);
    state.assert_success();
    let state: serde_json::Value = serde_json::from_str(&state.stdout).unwrap();
    assert_eq!(state["status"], "created");
    setup.runtime.start(&id).assert_success();
    let deadline = Instant::now() + Duration::from_secs(10);
    while setup.runtime.container_output(&id).0.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(setup.runtime.container_output(&id).0, "started\n");
    setup.runtime.delete(&id).assert_success();
    assert!(!setup.runtime.state(&id).success());
}

#[test]
#[ignore = "needs root: runc container"]
fn dropping_the_runtime_deletes_its_containers() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let bundle = setup.bundle().args(&["sleep", "60"]).write().unwrap();
    let state_dir = setup.tmp.path().join("state2");
    let id = container_id("dropped");
    {
        let runtime = Runtime::runc(&state_dir);
        runtime.create(&bundle, &id).assert_success();
        runtime.start(&id).assert_success();
    }
    let runtime = Runtime::runc(&state_dir);
    let state = runtime.state(&id);
    assert!(!state.success(), "{state:?}");
    assert!(state.stderr.contains("does not exist"), "{state:?}");
}

#[test]
#[ignore = "needs root: runc container"]
fn a_hanging_container_is_killed_and_reported() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let runtime =
        Runtime::runc(&setup.tmp.path().join("slow")).with_timeout(Duration::from_secs(2));
    let bundle = setup.bundle().args(&["sleep", "60"]).write().unwrap();
    let started = Instant::now();
    let outcome = runtime.run(&bundle, &container_id("hang"));
    assert!(outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.status, -1);
    assert!(started.elapsed() < Duration::from_secs(20), "{outcome:?}");
    assert!(format!("{outcome:?}").contains("timed out"));
    let list = runtime.command(&["list", "-q"]);
    assert_eq!(list.stdout, "", "{list:?}");
}

#[test]
#[ignore = "needs root: runc container"]
fn runtime_errors_show_in_the_outcome() {
    let setup = Setup::new(RootfsSpec::default(), "runc container");
    let outcome = setup.run(setup.bundle().args(&["/no/such/program"]));
    assert!(!outcome.success());
    let text = format!("{outcome:?}");
    assert!(text.contains("/no/such/program"), "{text}");
    assert!(
        outcome
            .log_messages()
            .iter()
            .any(|m| m.contains("no such file")),
        "runc's JSON log has the error: {outcome:?}"
    );
}

#[test]
#[ignore = "needs root: runc container with a fake driver"]
fn a_fake_drivers_libraries_answer_the_probe_in_a_container() {
    // What nvc will do, done by hand: the fake driver's libraries bind-mounted and found via
    // LD_LIBRARY_PATH. Shows the probe reports a working driver in a container. runc refuses
    // bind mounts under /proc ("cannot be mounted because it is inside /proc"), so the fake
    // /proc/driver/nvidia goes elsewhere and the fake libcuda is told through NVC_FAKE_PROC.
    let setup = Setup::new(RootfsSpec::default(), "runc container with a fake driver");
    let fake_dir = setup.tmp.path().join("fake");
    fs::create_dir(&fake_dir).unwrap();
    let fake = FakeDriverSpec::default().build(&fake_dir).unwrap();
    let bundle = setup
        .bundle()
        .set(
            "/mounts/-",
            json!({
                "destination": "/usr/local/nvidia/lib64",
                "type": "bind",
                "source": fake.lib_dir(),
                "options": ["rbind", "ro", "nosuid", "nodev"]
            }),
        )
        .set(
            "/mounts/-",
            json!({
                "destination": "/run/fake-proc",
                "type": "bind",
                "source": fake.proc_root,
                "options": ["rbind", "ro"]
            }),
        )
        .env(&[
            "LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
            "NVC_FAKE_PROC=/run/fake-proc",
        ])
        .args(&[PROBE_PATH]);
    let outcome = setup.run(bundle);
    outcome.assert_success();
    assert_eq!(
        outcome.stdout,
        "libcuda=ok path=/usr/local/nvidia/lib64/libcuda.so.1 \
         realpath=/usr/local/nvidia/lib64/libcuda.so.999.88.77 init=0 cuda_version=99010 device_count=3\n\
         libnvidia-ml=ok path=/usr/local/nvidia/lib64/libnvidia-ml.so.1 \
         realpath=/usr/local/nvidia/lib64/libnvidia-ml.so.999.88.77 init=0 driver_version=999.88.77\n\
         probe=done\n",
        "{outcome:?}"
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn nvc_config_for_a_fake_driver() {
    require_root("fake driver tree");
    let tmp = tempfile::tempdir().unwrap();
    let fake = FakeDriverSpec::default().build(tmp.path()).unwrap();
    let path = nvc_config_for(&fake, &tmp.path().join("nvc")).unwrap();
    let config = nvc_config::Config::load(&path).unwrap();
    assert_eq!(config.driver.root, fake.root);
    assert_eq!(config.driver.proc_root, fake.proc_root);
    assert!(config.hook.path.ends_with("nvc-hook"), "{config:?}");
    assert!(config.runtime.runtimes[0].ends_with("/runc"), "{config:?}");
    assert_eq!(config.log.file, tmp.path().join("nvc/nvc.log"));
}

#[test]
#[ignore = "needs root: test rootfs (ldconfig -r)"]
fn rootfs_builds_are_fast() {
    require_root("test rootfs (ldconfig -r)");
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    RootfsSpec::default()
        .build(&tmp.path().join("first"))
        .unwrap();
    let first = started.elapsed();
    let mut later = Vec::new();
    for (i, spec) in ALL_LAYOUTS.iter().enumerate() {
        let started = Instant::now();
        spec.build(&tmp.path().join(format!("r{i}"))).unwrap();
        later.push(started.elapsed());
    }
    eprintln!(
        "test rootfs build: first {first:?} (reads the host files, compiles the probe unless \
         another test did), then {later:?}"
    );
    for took in later {
        assert!(
            took < Duration::from_secs(3),
            "a cached build took {took:?}"
        );
    }
}

#[test]
#[ignore = "needs root: container through nvc-runtime"]
fn nvc_runtime_passes_a_container_without_gpus_through() {
    let setup = Setup::new(RootfsSpec::default(), "container through nvc-runtime");
    let fake_dir = setup.tmp.path().join("fake");
    fs::create_dir(&fake_dir).unwrap();
    let fake = FakeDriverSpec::default().build(&fake_dir).unwrap();
    let config = nvc_config_for(&fake, &setup.tmp.path().join("nvc")).unwrap();
    let runtime = Runtime::nvc(&setup.tmp.path().join("nvc-state"), &config);
    let bundle = setup
        .bundle()
        .args(&["sh", "-c", "echo hi; ls /dev; nvc-probe"])
        .write()
        .unwrap();
    let rootfs = tree_digest(&setup.rootfs.path);
    let outcome = runtime.run(&bundle, &container_id("passthrough"));
    outcome.assert_success();
    assert!(outcome.stdout.starts_with("hi\n"), "{outcome:?}");
    assert!(
        !outcome.stdout.lines().any(|l| l.starts_with("nvidia")),
        "no device node: {outcome:?}"
    );
    assert!(outcome.stdout.contains("libcuda=missing"), "{outcome:?}");
    assert_eq!(
        bundle.read_config().unwrap(),
        bundle.config,
        "a container that asks for no GPU keeps its config.json"
    );
    assert_eq!(tree_digest(&setup.rootfs.path), rootfs);
    // It went through the shim: nvc's own log has its lines.
    let log = fs::read_to_string(setup.tmp.path().join("nvc/nvc.log")).unwrap_or_default();
    assert!(log.contains("nvc-runtime"), "nvc.log:\n{log}");
}
