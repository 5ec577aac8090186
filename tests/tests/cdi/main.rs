//! CDI: the specs `libnvc::cdi::generate` writes for the committed driver trees
//! ([`generate`]: goldens, names, determinism; no root); `nvc cdi generate` and
//! `nvc cdi list` through the built binary on fake driver trees ([`cli`]); and the spec
//! applied by real consumers, runc with the spec's edits applied as an engine applies them
//! and Podman 4.3 reading it from its CDI folder, with `nvc-hook`'s createContainer hooks,
//! and the shim honouring CDI names in `NVIDIA_VISIBLE_DEVICES` and `cdi.k8s.io/`
//! annotations ([`containers`]). `cli` and `containers` need root (fake trees have device
//! nodes; containers need runc).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use nvc_tests::{
    nvc_config_for, require_root, workspace_bin, FakeDriver, FakeDriverSpec, FakeGpu, RootfsSpec,
    TestRootfs,
};
use serde_json::Value;

mod cli;
mod containers;
mod generate;
mod mask;

const LIB: &str = "/usr/lib/x86_64-linux-gnu";
const HOOK_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A fake driver and an nvc config pointing at it.
struct Host {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    config: PathBuf,
}

impl Host {
    fn new() -> Host {
        Host::with(FakeDriverSpec::default())
    }

    fn with(spec: FakeDriverSpec) -> Host {
        require_root("fake driver trees have device nodes; containers need runc");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("driver")).unwrap();
        let fake = spec.build(&dir.path().join("driver")).unwrap();
        let config = nvc_config_for(&fake, dir.path()).unwrap();
        Host { dir, fake, config }
    }

    /// `nvc <args>` with this host's config.
    fn nvc(&self, args: &[&str]) -> Output {
        Command::new(workspace_bin("nvc"))
            .args(args)
            .env("NVC_CONFIG", &self.config)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `nvc <args>`'s stdout; panics with stderr when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.nvc(args);
        assert!(
            out.status.success(),
            "nvc {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn gpus_in_bus_order(&self) -> Vec<FakeGpu> {
        self.fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect()
    }

    /// A test rootfs in this host's folder, with the mount point of the fake proc tree.
    fn rootfs(&self, name: &str) -> TestRootfs {
        let rootfs = RootfsSpec::default()
            .build(&self.dir.path().join(name))
            .unwrap();
        std::fs::create_dir_all(rootfs.path.join("run/fake-proc")).unwrap();
        rootfs
    }
}

/// The device nodes of a containerEdits as "path major:minor".
fn spec_nodes(edits: &Value) -> Vec<String> {
    edits["deviceNodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    format!(
                        "{} {}:{}",
                        n["path"].as_str().unwrap(),
                        n["major"],
                        n["minor"]
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn device<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {spec:#}"))
}
