//! GPU containers under real runc, through nvc-runtime and nvc-hook, against fake driver
//! trees, asserted from inside the container. Needs root (runc, device nodes, mounts).

use nvc_tests::{
    Bundle, FakeDriver, FakeDriverSpec, Outcome, RootfsSpec, Runtime, TestRootfs, TestSetup,
};

/// One test's world: a fake driver, a rootfs, an nvc config, a runtime.
pub struct World {
    pub dir: tempfile::TempDir,
    pub fake: FakeDriver,
    pub rootfs: TestRootfs,
    pub rt: Runtime,
    pub n: std::cell::Cell<u32>,
}

impl World {
    pub fn new() -> World {
        Self::with(FakeDriverSpec::default(), RootfsSpec::default())
    }

    pub fn with(spec: FakeDriverSpec, rootfs: RootfsSpec) -> World {
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
    pub fn bundle(&self, env: &[&str], script: &str) -> Bundle {
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

    pub fn run(&self, env: &[&str], script: &str) -> Outcome {
        let b = self.bundle(env, script);
        let id = format!("nvc-test-{}-{}", std::process::id(), self.n.get());
        self.rt.run(&b, &id)
    }

    pub fn ok(&self, env: &[&str], script: &str) -> String {
        let out = self.run(env, script);
        assert!(out.success(), "{out:?}\nnvc log:\n{}", self.nvc_log());
        out.stdout
    }

    pub fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default()
    }

    pub fn gpus_in_bus_order(&self) -> Vec<nvc_tests::FakeGpu> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect()
    }
}

/// The spec's `hooks` as Docker's `--gpus` or a Podman hooks.d file give them: nvc-hook
/// alone, run by its other name, with the nvc config `config`.
pub fn hook_only(config: &std::path::Path) -> serde_json::Value {
    serde_json::json!({"prestart": [{
        "path": nvc_tests::workspace_bin("nvc-hook"),
        "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": [format!("NVC_CONFIG={}", config.display())],
    }]})
}

/// The `/dev/nvidia*` nodes the container has, as "path major:minor" (decimal).
pub fn nodes_inside(out: &str) -> Vec<String> {
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

pub const LIST_NODES: &str =
    "for n in /dev/nvidia*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; true";
