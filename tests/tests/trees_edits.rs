//! Container edits, requirement checks and the OCI spec edit on the committed driver trees
//! (`testdata/driver-roots`), read through `libnvc::probe::TreeProbe`: no root, no GPU.
//!
//! The spec test compares with `testdata/driver-roots/golden/oci/*.json`; after an
//! intended change, run `NVC_BLESS=1 cargo test -p nvc-tests --test trees_edits` to
//! rewrite the expected files, and review the diff.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libnvc::caps::Capability;
use libnvc::discover::{discover, Driver, GpuDetails, LibClass};
use libnvc::edits::{self, ContainerEdits, ContainerLayout, EditsError, MountKind};
use libnvc::oci::spec::{self, HookEntry};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::trees::{self, DriverTree, CUDA_VERSION};

const LIB: &str = "/usr/lib/x86_64-linux-gnu";
const LIB32: &str = "/usr/lib/i386-linux-gnu";

fn driver(name: &str) -> (DriverTree, Driver) {
    let tree = DriverTree::committed(name);
    let d = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    (tree, d)
}

fn request(env: &[&str]) -> Request {
    Request::from_env(env.iter().copied(), &RequestPolicy::default()).unwrap()
}

fn edits_for(d: &Driver, env: &[&str]) -> ContainerEdits {
    edits::compute(d, &request(env), &ContainerLayout::debian()).unwrap()
}

fn container_paths(e: &ContainerEdits) -> Vec<String> {
    e.mounts
        .iter()
        .map(|m| m.container_path.display().to_string())
        .chain(e.device_nodes.iter().map(|n| n.path.display().to_string()))
        .chain(e.symlinks.iter().map(|s| s.link.display().to_string()))
        .collect()
}

fn gpu_nodes(e: &ContainerEdits) -> Vec<String> {
    e.device_nodes
        .iter()
        .filter(|n| n.major == 195 && n.minor < 254)
        .map(|n| n.path.display().to_string())
        .collect()
}

fn node_paths(e: &ContainerEdits) -> Vec<String> {
    e.device_nodes
        .iter()
        .map(|n| n.path.display().to_string())
        .collect()
}

#[test]
fn selection_by_index_uuid_and_bus_id() {
    let (_tree, d) = driver("basic-2gpu");
    for gpu in &d.gpus {
        let forms = [
            gpu.index.to_string(),
            gpu.uuid.clone(),
            gpu.uuid.to_uppercase(),
            gpu.bus_id.clone(),
            gpu.bus_id[5..].to_string(),
        ];
        for form in forms {
            let env = format!("NVIDIA_VISIBLE_DEVICES={form}");
            let e = edits_for(&d, &[&env]);
            assert_eq!(
                gpu_nodes(&e),
                [format!("/dev/nvidia{}", gpu.minor)],
                "{form}"
            );
            assert_eq!(e.visible_gpus, std::slice::from_ref(&gpu.bus_id), "{form}");
        }
    }
    // Index 0 is the lowest bus id, whose minor is 1.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia1"]);
    // In the order asked, each once.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=1,0,1"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0", "/dev/nvidia1"]);
    assert_eq!(e.visible_gpus, ["0000:1a:00.0", "0000:06:00.0"]);
    let all = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_eq!(all.visible_gpus, ["0000:06:00.0", "0000:1a:00.0"]);
    assert_eq!(gpu_nodes(&all), ["/dev/nvidia1", "/dev/nvidia0"]);
}

#[test]
fn unknown_devices_are_errors_that_name_them() {
    let (_tree, d) = driver("basic-2gpu");
    for (value, named) in [
        ("7", "GPU index 7"),
        (
            "GPU-00000000-0000-0000-0000-000000000000",
            "GPU-00000000-0000-0000-0000-000000000000",
        ),
        ("0000:99:00.0", "0000:99:00.0"),
        ("0:3", "MIG device 0:3"),
    ] {
        let env = format!("NVIDIA_VISIBLE_DEVICES={value}");
        let err = edits::compute(&d, &request(&[&env]), &ContainerLayout::debian()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(named), "{value}: {msg}");
        assert!(msg.contains("NVIDIA_VISIBLE_DEVICES"), "{value}: {msg}");
        assert!(
            msg.contains("this host has 2 GPUs, indices 0-1") || value == "0:3",
            "{msg}"
        );
    }
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=MIG-5d3a2d1c-0b0a-4c5e-9f00-123456789abc"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(matches!(err, EditsError::Unsupported { .. }), "{err}");
}

#[test]
fn capabilities_choose_the_files() {
    let (tree, d) = driver("basic-2gpu");
    let utility = container_paths(&edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
    ));
    assert!(
        utility.contains(&format!("{LIB}/libnvidia-ml.so.999.88.77")),
        "{utility:#?}"
    );
    assert!(utility.contains(&format!("{LIB}/libnvidia-ml.so.1")));
    assert!(utility.contains(&"/usr/bin/nvidia-smi".to_string()));
    assert!(utility.contains(&"/run/nvidia-persistenced/socket".to_string()));
    assert!(
        !utility.iter().any(|p| p.contains("libcuda")),
        "{utility:#?}"
    );
    assert!(!utility.contains(&"/tmp/nvidia-mps".to_string()));

    let compute_edits = edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
    );
    let compute = container_paths(&compute_edits);
    for want in [
        format!("{LIB}/libcuda.so.999.88.77"),
        format!("{LIB}/libcuda.so.1"),
        format!("{LIB}/libcuda.so"),
        format!("{LIB}/libnvidia-gpucomp.so.999.88.77"),
        "/usr/bin/nvidia-cuda-mps-control".to_string(),
        "/run/nvidia-fabricmanager/socket".to_string(),
        "/tmp/nvidia-mps".to_string(),
    ] {
        assert!(compute.contains(&want), "{want} not in {compute:#?}");
    }
    assert!(!compute.contains(&"/usr/bin/nvidia-smi".to_string()));
    assert!(!compute.iter().any(|p| p.contains("libnvidia-ml")));
    // Where each mount comes from, and how it is mounted.
    let mount = |container: &str| {
        compute_edits
            .mounts
            .iter()
            .find(|m| m.container_path == Path::new(container))
            .unwrap()
    };
    let cuda = mount(&format!("{LIB}/libcuda.so.999.88.77"));
    assert_eq!(
        cuda.host_path,
        tree.root
            .join("usr/local/nvidia/lib64/libcuda.so.999.88.77")
    );
    assert_eq!(cuda.kind, MountKind::Library);
    assert_eq!(cuda.options, ["ro", "nosuid", "nodev", "bind"]);
    let socket = mount("/run/nvidia-fabricmanager/socket");
    assert_eq!(socket.kind, MountKind::Socket);
    assert_eq!(socket.options, ["nosuid", "nodev", "noexec", "bind"]);
    assert_eq!(mount("/tmp/nvidia-mps").kind, MountKind::Directory);

    let graphics = container_paths(&edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=graphics",
        ],
    ));
    for want in [
        "/usr/share/vulkan/icd.d/nvidia_icd.json".to_string(),
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json".to_string(),
        "/dev/nvidia-modeset".to_string(),
        format!("{LIB}/libGLX_indirect.so.0"),
        format!("{LIB}/libnvidia-gpucomp.so.999.88.77"),
    ] {
        assert!(graphics.contains(&want), "{want} not in {graphics:#?}");
    }
    assert!(!compute.contains(&"/dev/nvidia-modeset".to_string()));

    let video = container_paths(&edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=video",
        ],
    ));
    assert!(
        video.contains(&format!("{LIB}/libnvcuvid.so.1")),
        "{video:#?}"
    );
    assert!(!video.iter().any(|p| p.contains("libcuda")));

    // Default: utility + compute; firmware always.
    let default = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    let kinds: Vec<MountKind> = default.mounts.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == MountKind::Firmware).count(),
        2
    );
    let dp = container_paths(&default);
    assert!(dp.contains(&format!("{LIB}/libcuda.so.1")));
    assert!(dp.contains(&"/usr/bin/nvidia-smi".to_string()));
    assert!(!dp.iter().any(|p| p.contains("libGLX")));
    assert_eq!(default.ldcache_dirs, [Path::new(LIB)]);

    let rh = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &ContainerLayout::lib64(),
    )
    .unwrap();
    assert!(container_paths(&rh).contains(&"/usr/lib64/libcuda.so.1".to_string()));
    assert_eq!(rh.ldcache_dirs, [Path::new("/usr/lib64")]);

    // Every capability at once: every library, each mounted once.
    let all = edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=all",
        ],
    );
    let libs = all
        .mounts
        .iter()
        .filter(|m| m.kind == MountKind::Library)
        .count();
    assert_eq!(libs, d.libraries.len());
}

#[test]
fn none_void_and_unset() {
    let (_tree, d) = driver("basic-2gpu");
    let none = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=none"]);
    let paths = container_paths(&none);
    assert!(paths.contains(&"/dev/nvidiactl".to_string()), "{paths:#?}");
    assert!(paths.iter().any(|p| p.ends_with("libcuda.so.1")));
    assert!(gpu_nodes(&none).is_empty(), "{paths:#?}");
    assert!(none.visible_gpus.is_empty());
    for env in [
        &["NVIDIA_VISIBLE_DEVICES=void"][..],
        &["NVIDIA_VISIBLE_DEVICES="],
        &[],
        &["PATH=/bin"],
    ] {
        assert!(edits_for(&d, env).is_empty(), "{env:?}");
    }
}

#[test]
fn edits_are_deterministic() {
    let (tree, d) = driver("basic-2gpu");
    let env = [
        "NVIDIA_VISIBLE_DEVICES=1,0",
        "NVIDIA_DRIVER_CAPABILITIES=all",
    ];
    let a = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    let b = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    assert_eq!(a, b);
    // Rediscovering gives the same edits too.
    let d2 = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    assert_eq!(a, serde_json::to_string(&edits_for(&d2, &env)).unwrap());
}

#[test]
fn mig_devices_by_gpu_and_instance() {
    let (_tree, d) = driver("mig");
    let gpu0 = &d.gpus[0];
    assert_eq!(gpu0.mig.len(), 2, "the scenario puts GPU 0 in MIG mode");
    for mig in &gpu0.mig {
        let env = format!("NVIDIA_VISIBLE_DEVICES=0:{}", mig.index);
        let e = edits_for(&d, &[&env]);
        let nodes = node_paths(&e);
        assert!(nodes.contains(&"/dev/nvidia1".to_string()), "{nodes:#?}");
        for cap in &mig.caps {
            assert!(
                nodes.contains(&cap.path.display().to_string()),
                "{nodes:#?}"
            );
            assert_eq!(cap.major, 241);
        }
        // The other instance's capabilities are not given.
        let other = &gpu0.mig[1 - mig.index as usize];
        for cap in &other.caps {
            assert!(!nodes.contains(&cap.path.display().to_string()));
        }
        assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    }
    // Both instances and the whole second GPU.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0:0,0:1,1"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0", "/dev/nvidia1"]);
    assert_eq!(e.device_nodes.iter().filter(|n| n.major == 241).count(), 4);
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=1:0"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("GPU 1 has 0 MIG devices"), "{err}");
}

#[test]
fn imex_channels_and_mig_config_for_privileged() {
    let (_tree, d) = driver("imex");
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"]);
    let nodes = node_paths(&e);
    assert!(
        nodes.contains(&"/dev/nvidia-caps-imex-channels/channel1".to_string()),
        "{nodes:#?}"
    );
    assert!(!nodes.contains(&"/dev/nvidia-caps-imex-channels/channel0".to_string()));
    let all = edits_for(
        &d,
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=all"],
    );
    assert_eq!(
        all.device_nodes.iter().filter(|n| n.major == 242).count(),
        3
    );
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=9"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("channel 9"), "{err}");

    let privileged = RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    };
    let req = Request::from_env(
        [
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_MONITOR_DEVICES=0",
        ],
        &privileged,
    )
    .unwrap();
    let e = edits::compute(&d, &req, &ContainerLayout::debian()).unwrap();
    let nodes = node_paths(&e);
    assert!(
        nodes.contains(&"/dev/nvidia-caps/nvidia-cap1".to_string()),
        "{nodes:#?}"
    );
    assert!(
        nodes.contains(&"/dev/nvidia-caps/nvidia-cap2".to_string()),
        "{nodes:#?}"
    );
    // Unprivileged, the MIG variables are refused.
    let err = Request::from_env(
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        &RequestPolicy::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("needs a privileged container"),
        "{err}"
    );
}

#[test]
fn requests_from_the_container_take_cdi_annotations() {
    let (_tree, d) = driver("basic-2gpu");
    let policy = RequestPolicy::default();
    let annotations = |value: &str| {
        BTreeMap::from([(
            "cdi.k8s.io/nvidia-device-plugin".to_string(),
            value.to_string(),
        )])
    };
    let edits_of = |env: &[&str], value: &str| {
        let req =
            Request::from_container(env.iter().copied(), &annotations(value), &policy).unwrap();
        edits::compute(&d, &req, &ContainerLayout::debian()).unwrap()
    };
    let e = edits_of(&[], "nvidia.com/gpu=1");
    assert_eq!(e.visible_gpus, ["0000:1a:00.0"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0"]);
    let uuid = d.gpus[0].uuid.clone();
    let e = edits_of(&[], &format!("nvidia.com/gpu={uuid},vendor.com/other=x"));
    assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    assert_eq!(edits_of(&[], "nvidia.com/gpu=all").visible_gpus.len(), 2);
    // The variable decides when set; void (what nvc's CDI spec sets) always wins.
    let e = edits_of(&["NVIDIA_VISIBLE_DEVICES=0"], "nvidia.com/gpu=1");
    assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    assert!(edits_of(&["NVIDIA_VISIBLE_DEVICES=void"], "nvidia.com/gpu=1").is_empty());
    // Without the annotation, nothing is asked.
    let req = Request::from_container(std::iter::empty(), &BTreeMap::new(), &policy).unwrap();
    assert!(!req.wants_gpu_support());
}

#[test]
fn requirements_against_the_fake_driver() {
    let (tree, d) = driver("basic-2gpu");
    let probe = tree.probe().unwrap().with_cuda_version(CUDA_VERSION);
    let check = |env: &[&str]| edits::check_requirements(&d, &probe, &request(env));
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
    ])
    .is_ok());
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_DRIVER=driver>=999.88"
    ])
    .is_ok());
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
    ])
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("cuda>=100.0") && msg.contains("99.1"), "{msg}");
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_DRIVER=driver<500",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("999.88.77"), "{err}");
    // Legacy image: CUDA_VERSION without NVIDIA_REQUIRE_CUDA.
    let err = check(&["CUDA_VERSION=100.2.1"]).unwrap_err();
    assert!(err.to_string().contains("cuda>=100.2"), "{err}");
    assert!(check(&["CUDA_VERSION=100.2.1", "NVIDIA_DISABLE_REQUIRE=1"]).is_ok());
    // An alternative that holds is enough.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_REQUIRE_CUDA=cuda>=100.0 driver>=999"
    ])
    .is_ok());

    // A tree that cannot say its CUDA version: the check cannot be made, and says why.
    let silent = tree.probe().unwrap();
    let err = edits::check_requirements(
        &d,
        &silent,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("cannot check requirement"), "{chain}");
    assert!(chain.contains("libcuda.so.999.88.77"), "{chain}");
}

fn details(uuid: &str, arch: &str, brand: &str) -> GpuDetails {
    GpuDetails {
        uuid: uuid.to_string(),
        compute_capability: Some(arch.to_string()),
        brand: Some(brand.to_string()),
        memory_total: Some(80 << 30),
    }
}

#[test]
fn arch_and_brand_requirements_ask_nvml_per_selected_gpu() {
    let (tree, d) = driver("basic-2gpu");
    let probe = tree.probe().unwrap().with_gpu_details(vec![
        details(&d.gpus[0].uuid, "9.0", "nvidia"),
        details(&d.gpus[1].uuid, "8.0", "tesla"),
    ]);
    let check = |env: &[&str]| edits::check_requirements(&d, &probe, &request(env));
    assert!(check(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]).is_ok());
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_REQUIRE_BRAND=brand=tesla"
    ])
    .is_ok());
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_ARCH=arch>=9.0",
    ])
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("arch>=9.0") && msg.contains("8.0"), "{msg}");
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_REQUIRE_BRAND=brand=tesla",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("nvidia"), "{err}");
    // Each GPU may meet a different alternative.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_GPU=arch>=9.0 brand=tesla"
    ])
    .is_ok());
    // No GPU selected: per-GPU constraints hold.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=none",
        "NVIDIA_REQUIRE_ARCH=arch>=10.0"
    ])
    .is_ok());
    // The selection is checked first.
    let err = check(&["NVIDIA_VISIBLE_DEVICES=5", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]).unwrap_err();
    assert!(err.to_string().contains("GPU index 5"), "{err}");

    // Without NVML answers, arch and brand cannot be checked.
    let silent = tree.probe().unwrap();
    let err = edits::check_requirements(
        &d,
        &silent,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("NVML"), "{chain}");
    // NVML that does not know a GPU: said so, naming it.
    let partial =
        tree.probe()
            .unwrap()
            .with_gpu_details(vec![details(&d.gpus[0].uuid, "9.0", "nvidia")]);
    let err = edits::check_requirements(
        &d,
        &partial,
        &request(&["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("compute capability of GPU"), "{chain}");
}

#[test]
fn compat32_adds_the_32_bit_libraries() {
    let (tree, d) = driver("lib32");
    let without = container_paths(&edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0"]));
    assert!(
        !without.iter().any(|p| p.starts_with(LIB32)),
        "{without:#?}"
    );
    let with = edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,compat32",
        ],
    );
    let paths = container_paths(&with);
    assert!(
        paths.contains(&format!("{LIB32}/libcuda.so.1")),
        "{paths:#?}"
    );
    assert!(paths.contains(&format!("{LIB32}/libcuda.so.999.88.77")));
    let cuda32 = with
        .mounts
        .iter()
        .find(|m| m.container_path == Path::new(&format!("{LIB32}/libcuda.so.999.88.77")))
        .unwrap();
    assert_eq!(
        cuda32.host_path,
        tree.root
            .join("usr/lib/i386-linux-gnu/libcuda.so.999.88.77")
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with(&format!("{LIB32}/libnvidia-ml"))),
        "utility not asked"
    );
    assert_eq!(with.ldcache_dirs, [Path::new(LIB), Path::new(LIB32)]);
    // Red Hat's folders: /usr/lib for 32-bit.
    let rh = edits::compute(
        &d,
        &request(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,compat32",
        ]),
        &ContainerLayout::lib64(),
    )
    .unwrap();
    assert!(container_paths(&rh).contains(&"/usr/lib/libcuda.so.1".to_string()));
    let n32 = d
        .libraries
        .iter()
        .filter(|l| l.class == LibClass::Lib32 && l.capabilities.contains(&Capability::Compute))
        .count();
    assert_eq!(
        with.mounts
            .iter()
            .filter(|m| m.container_path.starts_with(LIB32))
            .count(),
        n32
    );
}

#[test]
fn no_kernel_module_gives_the_files_but_no_gpu() {
    let (_tree, d) = driver("no-kernel-module");
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert!(e.visible_gpus.is_empty());
    assert!(gpu_nodes(&e).is_empty());
    // nvidiactl is given by its numbers: runc makes it; the libraries are there.
    assert_eq!(node_paths(&e), ["/dev/nvidiactl"]);
    assert!(!e.device_nodes[0].on_host);
    assert!(container_paths(&e).contains(&format!("{LIB}/libcuda.so.1")));
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=0"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("this host has no GPU"), "{err}");
}

#[test]
fn a_broken_install_gives_what_is_whole() {
    let (_tree, d) = driver("broken");
    let e = edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=all",
        ],
    );
    let paths = container_paths(&e);
    for gone in [
        "libnvidia-cfg",
        "libnvidia-fbc",
        "libnvidia-opencl",
        "nvidia-smi",
    ] {
        assert!(
            !paths.iter().any(|p| p.contains(gone)),
            "{gone}: {paths:#?}"
        );
    }
    assert!(paths.contains(&format!("{LIB}/libcuda.so.1")));
    // GPU 1's node is missing on the host: it is still given by its numbers.
    let n = e
        .device_nodes
        .iter()
        .find(|n| n.path == Path::new("/dev/nvidia0"))
        .unwrap();
    assert_eq!((n.major, n.minor, n.on_host), (195, 0, false));
}

fn hook() -> HookEntry {
    HookEntry {
        path: PathBuf::from("/usr/bin/nvc-hook"),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        timeout: Some(35),
    }
}

/// The JSON file at `path`, its keys in their order.
fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The committed input spec's request, on basic-2gpu: GPU 1, compute and utility.
fn spec_edits() -> (serde_json::Value, ContainerEdits) {
    let (_tree, d) = driver("basic-2gpu");
    let input = read_json(&trees::golden_dir().join("oci/config.json"));
    let view = spec::view(&input, Path::new("/bundle")).unwrap();
    let req = Request::from_env(
        view.env.iter().map(String::as_str),
        &RequestPolicy::default(),
    )
    .unwrap();
    let e = edits::compute(&d, &req, &ContainerLayout::debian()).unwrap();
    (input, e)
}

#[test]
fn spec_apply_matches_the_golden() {
    let (mut spec, e) = spec_edits();
    assert!(spec::apply(&mut spec, &e, &hook()).unwrap());
    let got = serde_json::to_string_pretty(&spec).unwrap() + "\n";
    trees::assert_golden("oci/config.basic-2gpu.gpu1.json", &got);
    // What it adds, spelled out: the nodes of GPU 1 and the control nodes, their rules
    // (nvidiactl's rule was there already), the hook after the spec's own.
    let devices: Vec<String> = spec["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {}:{}",
                d["path"].as_str().unwrap(),
                d["major"],
                d["minor"]
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
            "/dev/nvidia0 195:0"
        ]
    );
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(rules.len(), 3 + 3);
    assert_eq!(spec["hooks"]["prestart"][1]["path"], "/usr/bin/nvc-hook");
    assert_eq!(spec["vendorExtension"]["untouched"], true);
}

#[test]
fn spec_apply_is_idempotent_to_the_byte() {
    let (mut spec, e) = spec_edits();
    spec::apply(&mut spec, &e, &hook()).unwrap();
    let once = spec::to_bytes(&spec).unwrap();
    assert!(!spec::apply(&mut spec, &e, &hook()).unwrap());
    assert_eq!(spec::to_bytes(&spec).unwrap(), once);
    // Through a file as well: save, read back, apply, the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, &once).unwrap();
    let mut again = read_json(&path);
    assert!(!spec::apply(&mut again, &e, &hook()).unwrap());
    assert_eq!(spec::to_bytes(&again).unwrap(), once);
}

/// A bundle holding the committed input spec, an executable stand-in for nvc-hook, and an
/// nvc config pointing at `tree`.
fn bundle_on(tree: &DriverTree, env: &[&str]) -> (tempfile::TempDir, nvc_config::Config) {
    let dir = tempfile::tempdir().unwrap();
    let mut input = read_json(&trees::golden_dir().join("oci/config.json"));
    if !env.is_empty() {
        input["process"]["env"] = serde_json::json!(env);
    }
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&input).unwrap(),
    )
    .unwrap();
    let hook = dir.path().join("nvc-hook");
    std::fs::write(&hook, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = nvc_config::Config {
        driver: nvc_config::DriverConfig {
            root: tree.root.clone(),
            dev_root: tree.dev_root.clone(),
            proc_root: tree.proc_root.clone(),
        },
        hook: nvc_config::HookConfig {
            path: hook,
            ..nvc_config::HookConfig::default()
        },
        ..nvc_config::Config::default()
    };
    (dir, config)
}

#[test]
fn the_runtime_plan_of_a_bundle_gives_the_same_nodes() {
    use libnvc::plan::{ConfigSource, Plan, Stage, Step};
    let tree = DriverTree::committed("basic-2gpu");
    let probe = tree.probe().unwrap().with_cuda_version(CUDA_VERSION);
    let (bundle, config) = bundle_on(&tree, &[]);
    let source = ConfigSource {
        path: Path::new("/etc/nvc/config.toml"),
        from_env: false,
    };
    let plan = Plan::for_bundle(bundle.path(), &config, &source, &probe, Stage::Runtime)
        .unwrap_or_else(|s| panic!("{}", libnvc::report::error_chain(&s.error)));
    let gpu = plan.gpu.unwrap();
    // The runtime reads the devices only: no file, the nodes of GPU 1.
    assert!(gpu.driver.libraries.is_empty());
    assert!(gpu.edits.mounts.is_empty());
    let (_, e) = spec_edits();
    assert_eq!(gpu.edits.device_nodes, e.device_nodes);
    let hook = gpu.hook.unwrap();
    assert!(!hook.in_spec);
    assert_eq!(hook.entry.path, config.hook.path);

    // The check stage reads everything, and checks the requirements once.
    let (bundle, config) = bundle_on(
        &tree,
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
        ],
    );
    let stopped =
        Plan::for_bundle(bundle.path(), &config, &source, &probe, Stage::Check).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Requirements);
    assert!(
        stopped.error.to_string().contains("99.1"),
        "{}",
        stopped.error
    );
    let driver = stopped.progress.driver.unwrap();
    assert_eq!(driver.libraries.len(), nvc_tests::DRIVER_LIBRARIES.len());
    assert_eq!(stopped.progress.edits.unwrap().visible_gpus.len(), 2);
}
