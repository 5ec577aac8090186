//! The container's ld.so.cache in real containers: an image's CUDA forward-compatibility
//! libcuda (`/usr/local/cuda/compat`) is the one loaded when it is newer than the driver,
//! and is ignored when it is older. Real runc through nvc-runtime and nvc-hook against fake
//! driver trees, asserted from inside the container: needs root (runc, device nodes,
//! mounts).
//!
//! The same through CDI's createContainer hooks is
//! `cdi::containers::cdi_containers_keep_cuda_forward_compatibility`; caches and compat
//! folders that attack the hook are in `hostile`.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nvc_tests::{add_compat_libcuda, staged};

mod common;

use common::containers::World;
use common::LIB;

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
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
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn older_cuda_compat_libraries_are_ignored() {
    let w = World::new();
    add_compat_libcuda(&w.rootfs.path, w.dir.path(), "500.1.2", 111110);
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    assert!(
        out.contains(&format!(
            "realpath={}",
            staged(&format!("{LIB}/libcuda.so.999.88.77"))
        )),
        "{out}"
    );
    assert!(out.contains("cuda_version=99010"), "{out}");
}
