//! Fake NVIDIA driver trees for tests: every test can run without a GPU against a realistic
//! driver installation.
//!
//! [`FakeDriverSpec::build`] writes, into a directory the caller owns, a root file system with
//! the driver installed the way the H100 580.159.04 sample host has it (`/usr/local/nvidia`
//! with links from `/usr/lib/x86_64-linux-gnu`): real ELF libraries with the real sonames, real
//! programs (a small `nvidia-smi`), a real `ld.so.cache`, real character device nodes, and the
//! driver's `/proc` files. The version is fake (`999.88.77`) so a leak from a real host shows.

// The test kit: a failed step of a test's setup fails the test, loudly, where it is.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod aarch64;
mod bundle;
mod catalog;
pub mod cgroup;
mod compile;
mod devices;
mod engines;
mod error;
mod harness;
mod oci_suite;
mod proc_tree;
mod rootfs;
mod setup;
mod spec;
mod sweep;
mod tree;
pub mod trees;
mod wsl_tree;

pub use bundle::{
    bounding_set, default_config, Bundle, ALL_CAPABILITIES, DEFAULT_CAPABILITIES, DEFAULT_PATH_ENV,
};
pub use catalog::{DriverLibrary, DRIVER_BINARIES, DRIVER_LIBRARIES};
pub use devices::{
    mig_cap_minor, FakeDeviceNode, FakeMigCap, FakeMigDevice, FABRIC_IMEX_MGMT_MINOR,
    MIG_DEVICES_FILE, NVIDIACTL_MINOR, NVIDIA_CAPS_IMEX_MAJOR, NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR,
    NVIDIA_MODESET_MINOR, NVIDIA_UVM_MAJOR,
};
pub use engines::{
    cri, engine_path, find_program, oci_archive, oci_archive_running, remove_cgroups, run_command,
    Containerd, CriSettings, Crio, CrioSettings, Dockerd, EngineError, EngineRoot, Podman,
    RootUser, RootView, CGROUP_PREFIX, CRIO_CONF, CRIO_CONF_D, CRI_NAMESPACE, ENGINE_TIMEOUT,
    MASKED_DIRS, START_TIMEOUT,
};
pub use error::FakeError;
pub use harness::{
    container_id, dir_names, host_mounts, host_mounts_beside_tests, nvc_config_for,
    processes_under, repo_root, runc_containers, runc_delete, runc_path, tree_digest,
    workspace_bin, Outcome, Runtime, TestMount, DEFAULT_TIMEOUT,
};
pub use oci_suite::{oci_runtime_tools, parse_tap, validation_programs, TapLine};
pub use proc_tree::proc_version;
pub use rootfs::{
    add_compat_libcuda, elf_interpreter, RootfsSpec, TestRootfs, BUSYBOX_APPLETS, LOADER_PATH,
    PROBE_PATH,
};
pub use setup::{TestSetup, FAKE_PROC_MOUNT};
pub use spec::{FakeDriverSpec, FakeGpu, FAKE_GPU_MODEL, MAX_GPU_MINOR};
pub use sweep::{
    kill_processes_under, mounts_under, run_with_stdin, unmount_all_under, KillOnDrop, Sweep,
};
pub use tree::{multiarch_lib_dir, FakeDriver, LIB32_DIR, MULTIARCH_LIB_DIR, NVIDIA_PREFIX};
pub use wsl_tree::{DXG_MAJOR, DXG_MINOR, WSL_DRIVER_STORE, WSL_LIB_DIR};

/// Where nvc-hook mounts the driver's file `path` in a container whose `/dev` is the
/// runtime's tmpfs, named at `path` by a link to it (`nvc_host::setup::staged_target`):
/// the library's real path inside the container.
pub fn staged(path: &str) -> String {
    nvc_host::setup::staged_target(std::path::Path::new(path))
        .display()
        .to_string()
}

/// Whether `nvc-probe`'s output shows a library loaded from the file nvc put at `path`:
/// mounted there (CDI, where the engine makes the mounts) or on the runtime's `/dev` and
/// linked from `path` (nvc-hook).
pub fn loaded_from(probe_output: &str, path: &str) -> bool {
    probe_output.contains(&format!("realpath={path} "))
        || probe_output.contains(&format!("realpath={} ", staged(path)))
}

/// Whether this process runs with effective uid 0 (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uids = status.lines().find(|l| l.starts_with("Uid:"))?.to_string();
            // Uid: real effective saved fs
            uids.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// Fails the calling test loudly unless it runs as root: a test that needs a fake tree with
/// device nodes and an ld.so.cache must not quietly pass without one.
#[track_caller]
pub fn require_root(what: &str) {
    if !is_root() {
        panic!(
            "this test needs root (CAP_MKNOD/chroot for ldconfig): {what}; run the test suite as root"
        );
    }
}
