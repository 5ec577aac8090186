//! The start of most container tests: one temporary directory holding a fake driver tree
//! (`driver/`), a test rootfs (`rootfs/`) and an nvc config pointing at them, and bundles
//! that let the fake `nvidia-smi` read the fake driver's `/proc` files.

use std::path::PathBuf;

use serde_json::json;

use crate::bundle::Bundle;
use crate::harness::nvc_config_for;
use crate::rootfs::{RootfsSpec, TestRootfs};
use crate::spec::FakeDriverSpec;
use crate::tree::FakeDriver;

/// Where containers see the fake driver's `/proc` tree (runc refuses mounts under
/// `/proc`); `NVC_FAKE_PROC` tells the fake `nvidia-smi`.
pub const FAKE_PROC_MOUNT: &str = "/run/fake-proc";

/// A fake driver, a rootfs and an nvc config in one temporary directory, removed on drop.
pub struct TestSetup {
    /// The directory; nvc's log is `nvc.log` in it.
    pub dir: tempfile::TempDir,
    /// The driver tree under `driver/`.
    pub fake: FakeDriver,
    /// The rootfs under `rootfs/`, with the mount point [`FAKE_PROC_MOUNT`] made (so runc
    /// making it does not count as a change to the rootfs).
    pub rootfs: TestRootfs,
    /// The nvc config (`config.toml` in the directory).
    pub config: PathBuf,
}

impl TestSetup {
    /// The default driver and rootfs; fails the calling test, saying it needs root for
    /// `what`, unless it runs as root.
    #[track_caller]
    pub fn new(what: &str) -> TestSetup {
        Self::with(what, FakeDriverSpec::default(), RootfsSpec::default())
    }

    /// The driver of `spec` and the rootfs of `rootfs`.
    #[track_caller]
    pub fn with(what: &str, spec: FakeDriverSpec, rootfs: RootfsSpec) -> TestSetup {
        crate::require_root(what);
        let dir = tempfile::tempdir().expect("cannot make a temporary directory");
        let driver = dir.path().join("driver");
        std::fs::create_dir(&driver).expect("cannot make the driver directory");
        let fake = spec
            .build(&driver)
            .unwrap_or_else(|e| panic!("cannot build the fake driver: {e}"));
        let rootfs = rootfs
            .build(&dir.path().join("rootfs"))
            .unwrap_or_else(|e| panic!("cannot build the test rootfs: {e}"));
        let mount_point = rootfs.path.join(FAKE_PROC_MOUNT.trim_start_matches('/'));
        std::fs::create_dir_all(&mount_point).expect("cannot make the fake proc mount point");
        let config = nvc_config_for(&fake, dir.path())
            .unwrap_or_else(|e| panic!("cannot write the nvc config: {e}"));
        TestSetup {
            dir,
            fake,
            rootfs,
            config,
        }
    }

    /// A bundle in `<dir>/<name>` for the rootfs, running `sh -c script` with `env` and
    /// the fake proc tree (see [`Bundle::with_fake_proc`]); not yet written.
    pub fn bundle(&self, name: &str, env: &[&str], script: &str) -> Bundle {
        Bundle::new(&self.dir.path().join(name), &self.rootfs.path)
            .unwrap_or_else(|e| panic!("cannot make bundle {name}: {e}"))
            .args(&["sh", "-c", script])
            .env(env)
            .with_fake_proc(&self.fake)
    }

    /// nvc's log so far (empty when there is none).
    pub fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nvc.log")).unwrap_or_default()
    }
}

impl Bundle {
    /// Shows `fake`'s `/proc` tree at [`FAKE_PROC_MOUNT`], read-only, and tells the fake
    /// `nvidia-smi` so through `NVC_FAKE_PROC`.
    pub fn with_fake_proc(self, fake: &FakeDriver) -> Bundle {
        self.env(&[format!("NVC_FAKE_PROC={FAKE_PROC_MOUNT}")]).set(
            "/mounts/-",
            json!({"destination": FAKE_PROC_MOUNT, "type": "bind",
                   "source": fake.proc_root, "options": ["rbind", "ro"]}),
        )
    }
}
