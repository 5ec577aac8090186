//! Tests of computing edits: selection, libraries and links by capability, layouts.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::caps::Capability;
use crate::discover::{DriverRoots, LibClass, Library};
use crate::elf::Arch;
use crate::request::RequestPolicy;

fn library(stem: &str, class: LibClass, cap: Capability) -> Library {
    let dir = match class {
        LibClass::Lib64 => "/usr/lib/x86_64-linux-gnu",
        LibClass::Lib32 => "/usr/lib/i386-linux-gnu",
    };
    Library {
        capabilities: vec![cap],
        arch: crate::elf::Arch::X86_64,
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
        mig_uuids: crate::discover::MigUuids::NotAsked,
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
    let x86_64 = Arch::X86_64;
    assert_eq!(
        ContainerLayout::of_image(x86_64, has(&[])),
        ContainerLayout::debian()
    );
    assert_eq!(
        ContainerLayout::of_image(x86_64, has(&["/usr/lib64"])),
        ContainerLayout::lib64()
    );
    assert_eq!(
        ContainerLayout::of_image(x86_64, has(&["/usr/lib64", "/usr/lib/x86_64-linux-gnu"])),
        ContainerLayout::debian()
    );
}

#[test]
fn an_aarch64_driver_s_libraries_go_to_the_aarch64_folders() {
    let has =
        |dirs: &'static [&'static str]| move |p: &Path| dirs.iter().any(|d| Path::new(d) == p);
    let arm = ContainerLayout::multiarch(Arch::Aarch64);
    assert_eq!(arm.lib64, Path::new("/usr/lib/aarch64-linux-gnu"));
    assert_eq!(ContainerLayout::of_image(Arch::Aarch64, has(&[])), arm);
    // An arm64 Debian image has no x86-64 folder: its own is used, not /usr/lib64.
    assert_eq!(
        ContainerLayout::of_image(
            Arch::Aarch64,
            has(&["/usr/lib64", "/usr/lib/aarch64-linux-gnu"])
        ),
        arm
    );
    assert_eq!(
        ContainerLayout::of_image(Arch::Aarch64, has(&["/usr/lib64"])),
        ContainerLayout::lib64()
    );

    // The layout follows the driver's libraries, whatever nvc was built for.
    let mut d = driver();
    for lib in &mut d.libraries {
        lib.arch = Arch::Aarch64;
    }
    d.libraries.retain(|l| l.class == LibClass::Lib64);
    assert_eq!(d.arch(), Some(Arch::Aarch64));
    assert_eq!(ContainerLayout::for_driver(&d), arm);
    let request = Request::from_env(
        [
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        ],
        &RequestPolicy::default(),
    )
    .unwrap();
    let edits = compute(&d, &request, &ContainerLayout::for_driver(&d)).unwrap();
    let libs: Vec<_> = edits
        .mounts
        .iter()
        .filter(|m| m.kind == MountKind::Library)
        .map(|m| m.container_path.clone())
        .collect();
    assert!(!libs.is_empty());
    assert!(
        libs.iter()
            .all(|p| p.parent() == Some(Path::new("/usr/lib/aarch64-linux-gnu"))),
        "{libs:?}"
    );
    assert_eq!(
        edits.ldcache_dirs,
        vec![PathBuf::from("/usr/lib/aarch64-linux-gnu")]
    );
    // Planned in the default folders, moved by the hook: the same edits.
    let planned = compute(&d, &request, &ContainerLayout::default()).unwrap();
    assert_eq!(planned.relocated(&ContainerLayout::default(), &arm), edits);
}
