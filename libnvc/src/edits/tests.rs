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

fn node(path: &str, major: u32, minor: u32) -> DeviceNode {
    DeviceNode {
        path: PathBuf::from(path),
        host_path: PathBuf::from(path),
        major,
        minor,
        file_mode: 0o444,
        uid: 0,
        gid: 0,
        on_host: true,
    }
}

const MIG_A: &str = "MIG-5fa4ed71-e001-4001-9000-a1b2c3d4e5f6";
const MIG_B: &str = "MIG-5fa4ed71-e001-4002-9000-a1b2c3d4e5f6";

/// Two GPUs, the second in MIG mode with GPU instances 1 and 2 (compute instance 0
/// each), whose UUIDs NVML gave.
fn mig_driver() -> Driver {
    let gpu = |index: u32, minor: u32| crate::discover::Gpu {
        index,
        uuid: format!("GPU-00000000-0000-0000-0000-00000000000{index}"),
        bus_id: format!("0000:0{index}:00.0"),
        minor,
        model: "Fake".into(),
        node: node(&format!("/dev/nvidia{minor}"), 195, minor),
        mig: Vec::new(),
    };
    let mig = |index: u32, gi: u32, uuid: &str| crate::discover::MigDevice {
        index,
        gi,
        ci: 0,
        caps: vec![
            node(
                &format!("/dev/nvidia-caps/nvidia-cap{}", 10 * gi),
                241,
                10 * gi,
            ),
            node(
                &format!("/dev/nvidia-caps/nvidia-cap{}", 10 * gi + 1),
                241,
                10 * gi + 1,
            ),
        ],
        uuid: Some(uuid.to_string()),
    };
    let mut second = gpu(1, 0);
    second.mig = vec![mig(0, 1, MIG_A), mig(1, 2, MIG_B)];
    Driver {
        gpus: vec![gpu(0, 1), second],
        control_nodes: vec![node("/dev/nvidiactl", 195, 255)],
        mig_uuids: crate::discover::MigUuids::Known,
        ..driver()
    }
}

fn mig_edits(d: &Driver, devices: &str) -> Result<ContainerEdits, EditsError> {
    let env = format!("NVIDIA_VISIBLE_DEVICES={devices}");
    let request = Request::from_env([env.as_str()], &RequestPolicy::default()).unwrap();
    compute(d, &request, &ContainerLayout::debian())
}

#[test]
fn a_mig_uuid_selects_what_gpu_colon_mig_selects() {
    let d = mig_driver();
    let by_index = mig_edits(&d, "1:1").unwrap();
    let nodes: Vec<_> = by_index.device_nodes.iter().map(|n| n.minor).collect();
    assert_eq!(nodes, [255, 0, 20, 21]);
    assert_eq!(by_index.visible_gpus, ["0000:01:00.0"]);
    let old = "MIG-GPU-00000000-0000-0000-0000-000000000001/2/0".to_string();
    for form in [
        MIG_B.to_string(),
        MIG_B.to_uppercase().replacen("MIG-", "mig-", 1),
        format!("nvidia.com/gpu={MIG_B}"),
        old.clone(),
        old.to_uppercase(),
        format!("{MIG_B},1:1,{old}"),
    ] {
        assert_eq!(mig_edits(&d, &form).unwrap(), by_index, "{form}");
    }
    let both = mig_edits(&d, &format!("{MIG_A},{MIG_B}")).unwrap();
    assert_eq!(both, mig_edits(&d, "1:0,1:1").unwrap());
}

#[test]
fn an_unknown_mig_uuid_is_named_with_the_hosts_mig_devices() {
    let d = mig_driver();
    let unknown = "MIG-00000000-0000-4000-8000-000000000000";
    let err = mig_edits(&d, unknown).unwrap_err();
    assert!(matches!(err, EditsError::UnknownDevice { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "NVIDIA_VISIBLE_DEVICES: MIG device {unknown} does not exist (this host's MIG \
             devices are {MIG_A} (1:0), {MIG_B} (1:1))"
        )
    );
    let old = "MIG-GPU-00000000-0000-0000-0000-000000000001/3/0";
    let err = mig_edits(&d, old).unwrap_err().to_string();
    assert!(
        err.contains(old) && err.contains("has MIG devices <gi>/<ci> 1/0, 2/0"),
        "{err}"
    );
    let err = mig_edits(&d, "MIG-GPU-00000000-0000-0000-0000-000000000000/1/0")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU 0 (GPU-00000000-0000-0000-0000-000000000000) has no MIG device"),
        "{err}"
    );
    let err = mig_edits(&d, "MIG-GPU-00000000-0000-0000-0000-000000000009/1/0")
        .unwrap_err()
        .to_string();
    assert!(err.contains("this host has 2 GPUs"), "{err}");

    let unread = Driver {
        mig_uuids: crate::discover::MigUuids::NotAsked,
        ..d.clone()
    };
    let err = mig_edits(&unread, unknown).unwrap_err().to_string();
    assert!(
        err.contains("2 MIG devices, whose UUIDs were not read"),
        "{err}"
    );
}

#[test]
fn a_mig_uuid_nvml_could_not_list_says_why_and_what_to_name_instead() {
    let mut d = mig_driver();
    for m in &mut d.gpus[1].mig {
        m.uuid = None;
    }
    d.mig_uuids =
        crate::discover::MigUuids::Unknown(std::sync::Arc::new(crate::probe::ProbeError {
            library: PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.999.88.77"),
            source: "NVML is gone".into(),
        }));
    let err = mig_edits(&d, MIG_A).unwrap_err();
    let chain = crate::report::error_chain(&err);
    assert!(matches!(err, EditsError::MigUuidsUnknown { .. }), "{err:?}");
    assert!(
        chain.contains(MIG_A)
            && chain.contains("<gpu>:<mig>")
            && chain.contains("libnvidia-ml.so.999.88.77")
            && chain.contains("NVML is gone"),
        "{chain}"
    );
    // The other forms need no UUID.
    assert!(mig_edits(&d, "1:0").is_ok());
    assert!(mig_edits(&d, "MIG-GPU-00000000-0000-0000-0000-000000000001/1/0").is_ok());
}
