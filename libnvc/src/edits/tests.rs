//! Tests of computing edits: selection, libraries and links by capability, layouts.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::caps::Capability;
use crate::discover::{DriverRoots, LibClass, Library};
use crate::request::RequestPolicy;

fn library(stem: &str, class: LibClass, cap: Capability) -> Library {
    let dir = match class {
        LibClass::Lib64 => "/usr/lib/x86_64-linux-gnu",
        LibClass::Lib32 => "/usr/lib/i386-linux-gnu",
    };
    Library {
        capabilities: vec![cap],
        class,
        stem: stem.to_string(),
        soname: format!("{stem}.so.1"),
        host_path: PathBuf::from(format!("{dir}/{stem}.so.999.88.77")),
        file_name: format!("{stem}.so.999.88.77"),
        container_dir: None,
    }
}

fn driver() -> Driver {
    Driver {
        roots: DriverRoots {
            root: "/".into(),
            dev_root: "/".into(),
            proc_root: "/proc".into(),
        },
        version: "999.88.77".into(),
        gpus: Vec::new(),
        libraries: vec![
            library("libcuda", LibClass::Lib64, Capability::Compute),
            library("libnvidia-ml", LibClass::Lib64, Capability::Utility),
            library("libcuda", LibClass::Lib32, Capability::Compute),
        ],
        binaries: Vec::new(),
        firmware: Vec::new(),
        files: Vec::new(),
        ipc: Vec::new(),
        control_nodes: Vec::new(),
        mig_config: None,
        mig_monitor: None,
        imex_channels: Vec::new(),
        known_cuda_version: None,
        cacheable: false,
        version_from_proc: false,
        wsl: None,
    }
}

#[test]
fn relocating_equals_computing_for_the_other_layout() {
    let request = Request::from_env(
        [
            "NVIDIA_VISIBLE_DEVICES=void",
            "NVIDIA_VISIBLE_DEVICES=none",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
        ],
        &RequestPolicy::default(),
    )
    .unwrap();
    let d = driver();
    let debian = compute(&d, &request, &ContainerLayout::debian()).unwrap();
    assert_eq!(debian.ldcache_dirs.len(), 2, "{debian:#?}");
    for (from, to) in [
        (ContainerLayout::debian(), ContainerLayout::lib64()),
        (ContainerLayout::lib64(), ContainerLayout::debian()),
    ] {
        let planned = compute(&d, &request, &from).unwrap();
        assert_eq!(
            planned.relocated(&from, &to),
            compute(&d, &request, &to).unwrap()
        );
        assert_eq!(planned.relocated(&from, &from), planned);
    }
}

#[test]
fn one_mount_policy_for_spec_options_and_mount_attributes() {
    let cases = [
        (MountKind::Library, "ro,nosuid,nodev,bind"),
        (MountKind::Binary, "ro,nosuid,nodev,bind"),
        (MountKind::Firmware, "ro,nosuid,nodev,noexec,bind"),
        (MountKind::Config, "ro,nosuid,nodev,noexec,bind"),
        (MountKind::Socket, "nosuid,nodev,noexec,bind"),
        (MountKind::Directory, "nosuid,nodev,noexec,bind"),
    ];
    for (kind, options) in cases {
        assert_eq!(kind.policy().oci_options().join(","), options, "{kind:?}");
    }
}

#[test]
fn the_image_layout_follows_its_folders() {
    let has =
        |dirs: &'static [&'static str]| move |p: &Path| dirs.iter().any(|d| Path::new(d) == p);
    assert_eq!(
        ContainerLayout::of_image(has(&[])),
        ContainerLayout::debian()
    );
    assert_eq!(
        ContainerLayout::of_image(has(&["/usr/lib64"])),
        ContainerLayout::lib64()
    );
    assert_eq!(
        ContainerLayout::of_image(has(&["/usr/lib64", "/usr/lib/x86_64-linux-gnu"])),
        ContainerLayout::debian()
    );
}
