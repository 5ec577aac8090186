//! GPU containers under real runc, through nvc-runtime and nvc-hook, against fake driver
//! trees: asserted from inside the container. Needs root (runc, device nodes, mounts).

#![allow(clippy::unwrap_used)]

use nvc_tests::{
    add_compat_libcuda, tree_digest, Bundle, FakeDriver, FakeDriverSpec, Outcome, RootfsSpec,
    Runtime, TestRootfs, TestSetup,
};
use serde_json::json;

/// One test's world: a fake driver, a rootfs, an nvc config, a runtime.
struct World {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    rootfs: TestRootfs,
    rt: Runtime,
    n: std::cell::Cell<u32>,
}

impl World {
    fn new() -> World {
        Self::with(FakeDriverSpec::default(), RootfsSpec::default())
    }

    fn with(spec: FakeDriverSpec, rootfs: RootfsSpec) -> World {
        let TestSetup {
            dir,
            fake,
            rootfs,
            config,
        } = TestSetup::with(
            "containers need runc, device nodes and mounts",
            spec,
            rootfs,
        );
        let rt = Runtime::nvc(&dir.path().join("state"), &config);
        World {
            dir,
            fake,
            rootfs,
            rt,
            n: std::cell::Cell::new(0),
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

    fn run(&self, env: &[&str], script: &str) -> Outcome {
        let b = self.bundle(env, script);
        let id = format!("nvc-test-{}-{}", std::process::id(), self.n.get());
        self.rt.run(&b, &id)
    }

    fn ok(&self, env: &[&str], script: &str) -> String {
        let out = self.run(env, script);
        assert!(out.success(), "{out:?}\nnvc log:\n{}", self.nvc_log());
        out.stdout
    }

    fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default()
    }

    fn gpus_in_bus_order(&self) -> Vec<nvc_tests::FakeGpu> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect()
    }
}

/// The `/dev/nvidia*` nodes the container has, as "path major:minor" (decimal).
fn nodes_inside(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("node "))
        .map(|l| {
            let mut it = l.split_whitespace();
            let path = it.next().unwrap();
            let (maj, min) = it.next().unwrap().split_once(':').unwrap();
            let maj = u32::from_str_radix(maj, 16).unwrap();
            let min = u32::from_str_radix(min, 16).unwrap();
            format!("{path} {maj}:{min}")
        })
        .collect()
}

const LIST_NODES: &str =
    "for n in /dev/nvidia*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; true";
const LIB: &str = "/usr/lib/x86_64-linux-gnu";

#[test]
fn all_gpus_nodes_libraries_and_nvidia_smi() {
    let w = World::new();
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &format!(
            "{LIST_NODES}; nvc-probe; nvidia-smi -L; ldconfig -p | grep -E 'libcuda|libnvidia-ml'"
        ),
    );
    let mut nodes = nodes_inside(&out);
    nodes.sort();
    let mut want: Vec<String> = w
        .gpus_in_bus_order()
        .iter()
        .map(|g| format!("/dev/nvidia{} 195:{}", g.minor, g.minor))
        .collect();
    want.extend(
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
        ]
        .map(String::from),
    );
    want.sort();
    assert_eq!(nodes, want, "{out}");
    assert!(out.contains("libcuda=ok"), "{out}");
    assert!(out.contains("cuda_version=99010"), "{out}");
    assert!(out.contains("libnvidia-ml=ok"), "{out}");
    assert!(out.contains("driver_version=999.88.77"), "{out}");
    assert!(
        out.contains(&format!("realpath={LIB}/libcuda.so.999.88.77")),
        "{out}"
    );
    // nvidia-smi -L lists every GPU, in bus order, as the host's would.
    let listed: Vec<&str> = out.lines().filter(|l| l.starts_with("GPU ")).collect();
    assert_eq!(listed.len(), w.fake.spec.gpus.len(), "{out}");
    for (i, g) in w.gpus_in_bus_order().iter().enumerate() {
        assert!(listed[i].contains(&g.uuid), "{out}");
    }
    assert!(
        out.contains(&format!(
            "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
        )),
        "{out}"
    );
}

#[test]
fn index_uuid_and_bus_id_select_exactly_one_node() {
    let w = World::new();
    for (i, g) in w.gpus_in_bus_order().iter().enumerate() {
        for form in [i.to_string(), g.uuid.clone(), g.bus_id.clone()] {
            let out = w.ok(&[&format!("NVIDIA_VISIBLE_DEVICES={form}")], LIST_NODES);
            let gpus: Vec<String> = nodes_inside(&out)
                .into_iter()
                .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
                .collect();
            assert_eq!(
                gpus,
                [format!("/dev/nvidia{} 195:{}", g.minor, g.minor)],
                "{form}: {out}"
            );
        }
    }
}

#[test]
fn none_gives_driver_files_without_gpus() {
    let w = World::new();
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=none"],
        &format!("{LIST_NODES}; nvc-probe"),
    );
    let nodes = nodes_inside(&out);
    assert!(
        nodes.contains(&"/dev/nvidiactl 195:255".to_string()),
        "{out}"
    );
    assert!(
        !nodes
            .iter()
            .any(|n| n.contains(" 195:") && !n.contains("195:255")),
        "{out}"
    );
    assert!(out.contains("libcuda=ok"), "{out}");
}

#[test]
fn void_and_unset_leave_everything_untouched() {
    let w = World::new();
    for env in [&["NVIDIA_VISIBLE_DEVICES=void"][..], &[]] {
        let before_rootfs = tree_digest(&w.rootfs.path);
        let b = w.bundle(env, &format!("{LIST_NODES}; nvc-probe"));
        let before_config = std::fs::read(b.config_path()).unwrap();
        let out = w.rt.run(&b, &format!("nvc-void-{}", w.n.get()));
        assert!(out.success(), "{out:?}");
        assert!(
            nodes_inside(&out.stdout).is_empty(),
            "{env:?}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("libcuda=missing"), "{}", out.stdout);
        assert_eq!(
            std::fs::read(b.config_path()).unwrap(),
            before_config,
            "config.json changed"
        );
        assert_eq!(tree_digest(&w.rootfs.path), before_rootfs, "rootfs changed");
    }
}

#[test]
fn capabilities_choose_what_is_injected() {
    // Two rootfs: mount points left by one container would shadow the other's view.
    let w = World::new();
    let script = "nvc-probe; ls /usr/bin/nvidia-smi 2>&1; nvidia-smi -L 2>&1; true";
    let utility = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
        script,
    );
    assert!(utility.contains("libnvidia-ml=ok"), "{utility}");
    assert!(utility.contains("libcuda=missing"), "{utility}");
    assert!(
        utility.lines().any(|l| l.starts_with("GPU 0:")),
        "{utility}"
    );
    let w = World::new();
    let compute = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
        script,
    );
    assert!(compute.contains("libcuda=ok"), "{compute}");
    assert!(compute.contains("libnvidia-ml=missing"), "{compute}");
    assert!(
        !compute.lines().any(|l| l.starts_with("GPU 0:")),
        "{compute}"
    );
    assert!(compute.contains("No such file"), "{compute}");
}

#[test]
fn bad_requests_stop_the_container_with_the_reason() {
    let w = World::new();
    for (env, reason) in [
        (&["NVIDIA_VISIBLE_DEVICES=7"][..], "GPU index 7"),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
            ],
            "\"warp\"",
        ),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
            ],
            "cuda>=100.0",
        ),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_REQUIRE_DRIVER=driver<500",
            ],
            "driver<500",
        ),
    ] {
        let out = w.run(env, "echo started");
        assert!(!out.success(), "{env:?} started: {out:?}");
        assert!(!out.stdout.contains("started"), "{out:?}");
        let said = format!("{}{}", out.stderr, out.log);
        assert!(
            said.contains(reason),
            "{env:?}: the user is not told {reason:?}: {out:?}"
        );
    }
}

#[test]
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

#[test]
fn read_only_rootfs() {
    let w = World::new();
    let b = w
        .bundle(
            &["NVIDIA_VISIBLE_DEVICES=all"],
            "nvc-probe; touch /x 2>&1; true",
        )
        .readonly(true)
        .write()
        .unwrap();
    let out = w.rt.run(&b, &format!("nvc-ro-{}", std::process::id()));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert!(out.stdout.contains("libcuda=ok"), "{}", out.stdout);
    assert!(
        out.stdout.contains("Read-only file system"),
        "{}",
        out.stdout
    );
}

#[test]
fn lib64_images_get_libraries_in_usr_lib64() {
    let w = World::with(
        FakeDriverSpec::default(),
        RootfsSpec {
            debian_layout: false,
            merged_usr: true,
        },
    );
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    assert!(
        out.contains("realpath=/usr/lib64/libcuda.so.999.88.77"),
        "{out}"
    );
}

#[test]
fn newer_cuda_compat_libraries_come_first() {
    let w = World::new();
    add_compat_libcuda(&w.rootfs.path, w.dir.path(), "1000.1.2", 123450);
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "nvc-probe; ls -l /usr/local/cuda/compat/",
    );
    assert!(
        out.contains("realpath=/usr/local/cuda/compat/libcuda.so.1000.1.2"),
        "{out}"
    );
    assert!(out.contains("cuda_version=123450"), "{out}");
    // The host's libcuda is still mounted in its own place, and the compat file is the
    // image's own, untouched.
    assert!(
        w.rootfs
            .path
            .join("usr/local/cuda/compat/libcuda.so.1000.1.2")
            .metadata()
            .unwrap()
            .len()
            > 1000
    );
}

#[test]
fn older_cuda_compat_libraries_are_ignored() {
    let w = World::new();
    add_compat_libcuda(&w.rootfs.path, w.dir.path(), "500.1.2", 111110);
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    assert!(
        out.contains(&format!("realpath={LIB}/libcuda.so.999.88.77")),
        "{out}"
    );
    assert!(out.contains("cuda_version=99010"), "{out}");
}

/// The spec's `hooks` as Docker's `--gpus` or a Podman hooks.d file give them: nvc-hook
/// alone, run by its other name, with the nvc config `config`.
fn hook_only(config: &std::path::Path) -> serde_json::Value {
    json!({"prestart": [{
        "path": nvc_tests::workspace_bin("nvc-hook"),
        "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": [format!("NVC_CONFIG={}", config.display())],
    }]})
}

#[test]
fn hook_only_mode_makes_nothing_in_a_dev_bound_from_the_host() {
    // `-v /dev:/dev`: the container's /dev is a volume, not the runtime's fresh tmpfs. The
    // hook, which binds the nodes itself here, refuses rather than make mount points in
    // the host folder behind it.
    let w = World::new();
    let config = w.dir.path().join("config.toml");
    // A tmpfs, as the host's devtmpfs is to statfs: only the spec tells it from the
    // runtime's own /dev.
    let host_dev =
        nvc_tests::TestMount::tmpfs(&w.dir.path().join("host-dev"), "mode=0755").unwrap();
    let volume = host_dev.path().to_path_buf();
    let b = w
        .bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "true")
        .set(
            "/mounts/1",
            json!({"destination": "/dev", "type": "bind", "source": volume,
                   "options": ["rbind", "rprivate"]}),
        )
        .set("/hooks", hook_only(&config))
        .write()
        .unwrap();
    assert_eq!(b.config["mounts"][1]["destination"], "/dev");
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    let out = rt.run(&b, &format!("nvc-hostdev-{}", std::process::id()));
    assert!(!out.success(), "{out:?}");
    let said = format!("{}{}", out.stderr, out.log_messages().join("\n"));
    assert!(
        said.contains("/dev") && said.contains("not the container's root filesystem"),
        "{said}"
    );
    let made: Vec<String> = std::fs::read_dir(&volume)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nvidia"))
        .collect();
    assert!(made.is_empty(), "nvc made {made:?} in the host's folder");
}

#[test]
fn hook_only_mode_binds_the_device_nodes_itself() {
    // As Docker's --gpus or a Podman hooks.d file runs it: plain runc, the hook in the
    // spec, no device in linux.devices.
    let w = World::new();
    let config = w.dir.path().join("config.toml");
    let gpu = w.gpus_in_bus_order()[1].clone();
    let b = w
        .bundle(
            &["NVIDIA_VISIBLE_DEVICES=1"],
            &format!("{LIST_NODES}; nvc-probe"),
        )
        .set("/hooks", hook_only(&config))
        .write()
        .unwrap();
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    let out = rt.run(&b, &format!("nvc-hookonly-{}", std::process::id()));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    let nodes = nodes_inside(&out.stdout);
    assert!(
        nodes.contains(&format!("/dev/nvidia{} 195:{}", gpu.minor, gpu.minor)),
        "{}",
        out.stdout
    );
    assert!(
        nodes.contains(&"/dev/nvidiactl 195:255".to_string()),
        "{}",
        out.stdout
    );
    assert_eq!(
        nodes
            .iter()
            .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
            .count(),
        1,
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("libcuda=ok"), "{}", out.stdout);
}
