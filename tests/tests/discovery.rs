//! Discovery: what `libnvc::discover` finds of a driver install (libraries with their
//! sonames, classes and capabilities; programs, firmware, support files and IPC
//! endpoints; GPUs in PCI order with their own minors, MIG instances, IMEX channels and
//! control nodes; the version with and without the kernel module), what it skips and why,
//! and that it reads nothing outside the tree.
//!
//! Most tests read the committed driver trees (`testdata/driver-roots`) through
//! `libnvc::probe::TreeProbe`: no root, no GPU, no compiler. Each scenario's README line
//! says what it stands for; these tests check that discovery reads exactly that. The last
//! three run the real host probe (`nvc_host::probe::RealHost`): on an empty folder, and on
//! a fake driver tree built at run time, with real device nodes and a libcuda that answers
//! (root).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libnvc::caps::Capability;
use libnvc::discover::{
    self, discover, discover_devices, DeviceNode, Driver, DriverRoots, LibClass,
};
use libnvc::edits;
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::trees::{self, DriverTree, OLD_VERSION, VERSION};
use nvc_tests::{
    mig_cap_minor, require_root, FakeDriver, FakeDriverSpec, FakeGpu, DRIVER_BINARIES,
    DRIVER_LIBRARIES,
};

fn scenario(name: &str) -> (DriverTree, Driver) {
    let tree = DriverTree::committed(name);
    let probe = tree.probe().unwrap();
    let driver = discover(&tree.roots(), &probe)
        .unwrap_or_else(|e| panic!("discovery of {name}: {}", libnvc::report::error_chain(&e)));
    (tree, driver)
}

/// The scenario's GPUs in bus order, as its spec made them.
fn spec_gpus(name: &str) -> Vec<FakeGpu> {
    let spec = trees::scenario(name).unwrap().spec();
    spec.gpus_in_bus_order().into_iter().cloned().collect()
}

/// A node as (container path, major, minor, mode, on the host).
type NodeFacts = (String, u32, u32, u32, bool);

fn node(n: &DeviceNode) -> NodeFacts {
    (
        n.path.display().to_string(),
        n.major,
        n.minor,
        n.file_mode,
        n.on_host,
    )
}

fn lib_dir(tree: &DriverTree) -> PathBuf {
    tree.root.join("usr/local/nvidia/lib64")
}

#[test]
fn basic_2gpu_finds_the_fake_driver() {
    let (tree, d) = scenario("basic-2gpu");
    assert_eq!(d.version, VERSION);
    assert_eq!(d.roots, tree.roots());
    let cuda = d.library("libcuda").expect("libcuda found");
    assert_eq!(cuda.soname, "libcuda.so.1");
    assert_eq!(cuda.file_name, "libcuda.so.999.88.77");
    assert_eq!(cuda.host_path, lib_dir(&tree).join("libcuda.so.999.88.77"));
    assert_eq!(
        d.library("libnvidia-nvvm").unwrap().soname,
        "libnvidia-nvvm.so.4"
    );
    assert_eq!(
        d.library("libEGL_nvidia").unwrap().soname,
        "libEGL_nvidia.so.0"
    );
    assert_eq!(
        d.library("libnvidia-tls").unwrap().soname,
        "libnvidia-tls.so.999.88.77"
    );

    let smi = d
        .binaries
        .iter()
        .find(|b| b.container_path == Path::new("/usr/bin/nvidia-smi"))
        .unwrap();
    // /usr/bin/nvidia-smi is a link into /usr/local/nvidia/bin.
    assert_eq!(
        smi.host_path,
        tree.root.join("usr/local/nvidia/bin/nvidia-smi")
    );
    assert_eq!(smi.capabilities, [Capability::Utility]);
    let binaries: Vec<String> = d
        .binaries
        .iter()
        .map(|b| b.container_path.display().to_string())
        .collect();
    let want: Vec<String> = DRIVER_BINARIES
        .iter()
        .map(|b| format!("/usr/bin/{b}"))
        .collect();
    assert_eq!(binaries, want);

    let firmware: Vec<(String, String)> = d
        .firmware
        .iter()
        .map(|f| {
            (
                f.container_path.display().to_string(),
                f.host_path
                    .strip_prefix(&tree.root)
                    .unwrap()
                    .display()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        firmware,
        [
            (
                "/lib/firmware/nvidia/999.88.77/gsp_ga10x.bin".to_string(),
                "usr/lib/firmware/nvidia/999.88.77/gsp_ga10x.bin".to_string()
            ),
            (
                "/lib/firmware/nvidia/999.88.77/gsp_tu10x.bin".to_string(),
                "usr/lib/firmware/nvidia/999.88.77/gsp_tu10x.bin".to_string()
            ),
        ]
    );
    assert!(d.firmware.iter().all(|f| f.capabilities.is_empty()));

    let files: Vec<String> = d
        .files
        .iter()
        .map(|f| f.container_path.display().to_string())
        .collect();
    assert_eq!(
        files,
        [
            "/usr/share/vulkan/icd.d/nvidia_icd.json",
            "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        ]
    );

    // The sockets are declared in devices.txt; the MPS folder is a real one.
    let ipc: Vec<(String, Vec<Capability>)> = d
        .ipc
        .iter()
        .map(|f| {
            (
                f.container_path.display().to_string(),
                f.capabilities.clone(),
            )
        })
        .collect();
    assert_eq!(
        ipc,
        [
            (
                "/run/nvidia-persistenced/socket".to_string(),
                vec![Capability::Utility, Capability::Compute]
            ),
            (
                "/run/nvidia-fabricmanager/socket".to_string(),
                vec![Capability::Compute]
            ),
            ("/tmp/nvidia-mps".to_string(), vec![Capability::Compute]),
        ]
    );

    let control: Vec<_> = d.control_nodes.iter().map(node).collect();
    assert_eq!(
        control,
        [
            ("/dev/nvidiactl".to_string(), 195, 255, 0o666, true),
            ("/dev/nvidia-uvm".to_string(), 238, 0, 0o666, true),
            ("/dev/nvidia-uvm-tools".to_string(), 238, 1, 0o666, true),
            ("/dev/nvidia-modeset".to_string(), 195, 254, 0o666, true),
        ]
    );
    for n in &d.control_nodes {
        assert_eq!(
            n.host_path,
            tree.dir.join(n.path.strip_prefix("/").unwrap())
        );
        assert_eq!((n.uid, n.gid), (0, 0));
    }
    assert_eq!(
        d.mig_config.as_ref().map(node),
        Some((
            "/dev/nvidia-caps/nvidia-cap1".to_string(),
            241,
            1,
            0o400,
            true
        ))
    );
    assert_eq!(
        d.mig_monitor.as_ref().map(node),
        Some((
            "/dev/nvidia-caps/nvidia-cap2".to_string(),
            241,
            2,
            0o444,
            true
        ))
    );
    assert!(d.imex_channels.is_empty());
    assert!(d.gpus.iter().all(|g| g.mig.is_empty()));
}

#[test]
fn every_library_once_with_its_soname_and_capabilities() {
    let (tree, d) = scenario("basic-2gpu");
    assert_eq!(
        d.libraries.len(),
        DRIVER_LIBRARIES.len(),
        "{:#?}",
        d.libraries
    );
    for want in DRIVER_LIBRARIES {
        let got = d
            .library(want.name)
            .unwrap_or_else(|| panic!("{} not found", want.name));
        assert_eq!(got.soname, want.soname(VERSION), "{}", want.name);
        assert_eq!(got.file_name, want.file_name(VERSION), "{}", want.name);
        assert_eq!(got.host_path, lib_dir(&tree).join(want.file_name(VERSION)));
        assert_eq!(got.class, LibClass::Lib64);
    }
    let caps = |stem: &str| d.library(stem).unwrap().capabilities.clone();
    use Capability::*;
    assert_eq!(caps("libnvidia-ml"), [Utility]);
    assert_eq!(caps("libnvidia-cfg"), [Utility]);
    assert_eq!(caps("libcuda"), [Compute]);
    assert_eq!(caps("libnvidia-ptxjitcompiler"), [Compute]);
    assert_eq!(caps("libnvidia-gpucomp"), [Compute, Graphics]);
    assert_eq!(caps("libnvcuvid"), [Video]);
    assert_eq!(caps("libnvidia-encode"), [Video]);
    assert_eq!(caps("libGLX_nvidia"), [Graphics]);
    assert_eq!(caps("libnvoptix"), [Graphics]);
    // Sorted by class, then stem.
    let stems: Vec<&str> = d.libraries.iter().map(|l| l.stem.as_str()).collect();
    let mut sorted = stems.clone();
    sorted.sort();
    assert_eq!(stems, sorted);
}

#[test]
fn gpus_are_numbered_in_pci_order_with_their_own_minors() {
    let (tree, d) = scenario("basic-2gpu");
    let want = spec_gpus("basic-2gpu");
    assert_eq!(d.gpus.len(), 2);
    for (i, (got, want)) in d.gpus.iter().zip(&want).enumerate() {
        assert_eq!(got.index as usize, i);
        assert_eq!(got.bus_id, want.bus_id);
        assert_eq!(got.uuid, want.uuid);
        assert_eq!(got.minor, want.minor);
        assert_eq!(got.model, "NVIDIA Fake H100 80GB HBM3");
        assert_eq!(
            node(&got.node),
            (
                format!("/dev/nvidia{}", want.minor),
                195,
                want.minor,
                0o666,
                true
            )
        );
        assert_eq!(
            got.node.host_path,
            tree.dir.join(format!("dev/nvidia{}", want.minor))
        );
    }
    assert_eq!(
        d.gpus
            .iter()
            .map(|g| (g.bus_id.as_str(), g.minor))
            .collect::<Vec<_>>(),
        [("0000:06:00.0", 1), ("0000:1a:00.0", 0)],
        "the fixture must really have minors out of bus order"
    );
}

#[test]
fn nothing_is_read_from_the_real_host() {
    for s in trees::SCENARIOS {
        let (tree, d) = scenario(s.name);
        let under = |p: &Path, what: &str| {
            assert!(
                p.starts_with(&tree.dir),
                "{}: {what} {} is outside the tree",
                s.name,
                p.display()
            );
        };
        for l in &d.libraries {
            under(&l.host_path, "library");
            assert!(
                l.host_path.starts_with(&tree.root),
                "{}",
                l.host_path.display()
            );
        }
        for f in d
            .binaries
            .iter()
            .chain(&d.firmware)
            .chain(&d.files)
            .chain(&d.ipc)
        {
            under(&f.host_path, "file");
        }
        let nodes = d
            .control_nodes
            .iter()
            .chain(d.gpus.iter().map(|g| &g.node))
            .chain(
                d.gpus
                    .iter()
                    .flat_map(|g| g.mig.iter().flat_map(|m| &m.caps)),
            )
            .chain(d.mig_config.iter())
            .chain(d.mig_monitor.iter())
            .chain(&d.imex_channels);
        for n in nodes {
            assert!(
                n.host_path.starts_with(tree.dir.join("dev")),
                "{}: node {} is not under the dev root",
                s.name,
                n.host_path.display()
            );
        }
        // The dev root is the scenario folder, not the driver root.
        assert!(!tree.root.join("dev").exists(), "{}", s.name);
        // WSL's files carry no version.
        let version = match d.wsl {
            Some(_) => libnvc::discover::wsl::UNKNOWN_VERSION,
            None => VERSION,
        };
        assert_eq!(d.version, version, "{}", s.name);
    }
}

#[test]
fn mig_gpu_has_its_instances_and_capability_nodes() {
    let (tree, d) = scenario("mig");
    let gpu0 = &d.gpus[0];
    assert_eq!((gpu0.bus_id.as_str(), gpu0.minor), ("0000:06:00.0", 1));
    let got: Vec<(u32, u32, u32, Vec<NodeFacts>)> = gpu0
        .mig
        .iter()
        .map(|m| (m.index, m.gi, m.ci, m.caps.iter().map(node).collect()))
        .collect();
    let cap = |gi, ci| {
        let minor = mig_cap_minor(1, gi, ci);
        (
            format!("/dev/nvidia-caps/nvidia-cap{minor}"),
            241,
            minor,
            0o444,
            true,
        )
    };
    assert_eq!(
        got,
        [
            (0, 1, 0, vec![cap(1, None), cap(1, Some(0))]),
            (1, 2, 0, vec![cap(2, None), cap(2, Some(0))]),
        ]
    );
    assert_eq!(gpu0.mig[0].caps[1].minor, 3 + 135 + 9 + 1);
    assert!(d.gpus[1].mig.is_empty(), "only GPU 0 is in MIG mode");
    assert!(d.mig_config.is_some() && d.mig_monitor.is_some());
    assert!(tree
        .proc_root
        .join("driver/nvidia/capabilities/gpu1/mig/gi2/ci0/access")
        .is_file());
}

#[test]
fn mig_devices_have_the_uuids_nvml_reports() {
    use discover::{DeviceNeeds, MigUuids, Reading, Scope};
    let (tree, d) = scenario("mig");
    let spec = trees::scenario("mig").unwrap().spec();
    let want: Vec<(u32, u32, Option<String>)> = spec
        .mig_devices()
        .into_iter()
        .map(|m| (m.gi, m.ci, Some(m.uuid)))
        .collect();
    let got = |d: &Driver| -> Vec<(u32, u32, Option<String>)> {
        d.gpus[0]
            .mig
            .iter()
            .map(|m| (m.gi, m.ci, m.uuid.clone()))
            .collect()
    };
    assert_eq!(got(&d), want);
    assert!(matches!(d.mig_uuids, MigUuids::Known));
    // The runtime's discovery reads no library, yet finds NVML through the ld.so.cache.
    let devices = discover_devices(&tree.roots(), &tree.probe().unwrap()).unwrap();
    assert!(devices.libraries.is_empty());
    assert_eq!(got(&devices), want);

    // A MIG device NVML does not report keeps no UUID; one it reports that the driver's
    // proc files do not have is nobody's.
    let mut reported = libnvc::discover::parse_mig_devices(&spec.mig_devices_text()).unwrap();
    reported[1].gpu = d.gpus[1].uuid.clone();
    let probe = tree.probe().unwrap().with_mig_devices(reported);
    let partial = discover(&tree.roots(), &probe).unwrap();
    assert_eq!(got(&partial)[0], want[0]);
    assert_eq!(got(&partial)[1].2, None);

    // No NVML to ask (a driver root without libnvidia-ml): no UUID, and why.
    let reading = Reading {
        needs: DeviceNeeds::ALL,
        ..Reading::all(Scope::Devices, None)
    };
    let empty = tempfile::tempdir().unwrap();
    let mut roots = tree.roots();
    roots.root = empty.path().to_path_buf();
    let without = discover::discover_with(&roots, &tree.probe().unwrap(), &reading).unwrap();
    assert!(without.gpus[0].mig.iter().all(|m| m.uuid.is_none()));
    let MigUuids::Unknown(why) = &without.mig_uuids else {
        panic!("{:?}", without.mig_uuids)
    };
    let why = libnvc::report::error_chain(&**why);
    assert!(why.contains("libnvidia-ml.so.1"), "{why}");
}

#[test]
fn lib32_has_both_classes_and_keeps_them_apart() {
    let (tree, d) = scenario("lib32");
    let lib64: Vec<_> = d
        .libraries
        .iter()
        .filter(|l| l.class == LibClass::Lib64)
        .collect();
    let lib32: Vec<_> = d
        .libraries
        .iter()
        .filter(|l| l.class == LibClass::Lib32)
        .collect();
    assert_eq!(lib64.len(), DRIVER_LIBRARIES.len());
    let want32: Vec<&str> = {
        let mut w: Vec<&str> = DRIVER_LIBRARIES
            .iter()
            .filter(|l| l.lib32)
            .map(|l| l.name)
            .collect();
        w.sort();
        w
    };
    let got32: Vec<&str> = lib32.iter().map(|l| l.stem.as_str()).collect();
    assert_eq!(got32, want32);
    let dir32 = tree.root.join("usr/lib/i386-linux-gnu");
    for l in &lib32 {
        assert!(l.host_path.starts_with(&dir32), "{}", l.host_path.display());
        assert!(l.file_name.ends_with(".so.999.88.77"));
    }
    let cuda32 = lib32.iter().find(|l| l.stem == "libcuda").unwrap();
    assert_eq!(cuda32.soname, "libcuda.so.1");
    assert_eq!(cuda32.capabilities, [Capability::Compute]);
    // 64-bit first, each class sorted by stem.
    let first32 = d
        .libraries
        .iter()
        .position(|l| l.class == LibClass::Lib32)
        .unwrap();
    assert_eq!(first32, lib64.len());
    // The 64-bit libcuda is still the one `library` names.
    assert!(d
        .library("libcuda")
        .unwrap()
        .host_path
        .starts_with(lib_dir(&tree)));
}

#[test]
fn without_the_kernel_module_the_version_comes_from_the_libraries() {
    let (tree, d) = scenario("no-kernel-module");
    assert!(!tree.proc_root.join("driver/nvidia/version").exists());
    assert_eq!(d.version, VERSION);
    assert!(d.gpus.is_empty());
    // Only nvidiactl, from the driver's fixed major: nothing registered the others.
    assert_eq!(
        d.control_nodes.iter().map(node).collect::<Vec<_>>(),
        [("/dev/nvidiactl".to_string(), 195, 255, 0o666, false)]
    );
    assert!(d.mig_config.is_none() && d.mig_monitor.is_none());
    assert!(d.imex_channels.is_empty());
    assert_eq!(d.libraries.len(), DRIVER_LIBRARIES.len());
    assert_eq!(d.firmware.len(), 2);
    // The devices scope needs the cache for the version here, and still lists no file.
    let devices = discover_devices(&tree.roots(), &tree.probe().unwrap()).unwrap();
    assert_eq!(devices.version, VERSION);
    assert!(devices.libraries.is_empty());
}

/// The debug log of this test process, for the reasons discovery gives for what it skips.
fn log_file() -> &'static Path {
    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let (_, path) = tempfile::Builder::new()
            .prefix("nvc-discovery.")
            .suffix(".log")
            .tempfile()
            .unwrap()
            .keep()
            .unwrap();
        let config = nvc_config::LogConfig {
            file: path.clone(),
            level: nvc_config::LogLevel::Debug,
        };
        assert!(
            nvc_host::logging::init(&config, "discovery"),
            "cannot log to {}",
            path.display()
        );
        path
    })
}

#[test]
fn a_broken_install_is_skipped_piece_by_piece_for_the_right_reason() {
    let log = log_file();
    let (tree, d) = scenario("broken");
    let lib64 = lib_dir(&tree);

    // Each damaged library is left out; the others are all there.
    for stem in ["libnvidia-cfg", "libnvidia-fbc", "libnvidia-opencl"] {
        assert!(d.library(stem).is_none(), "{stem}: {:#?}", d.library(stem));
    }
    assert_eq!(d.libraries.len(), DRIVER_LIBRARIES.len() - 3);
    assert!(d.library("libcuda").is_some());
    assert!(d.library("libnvidia-ml").is_some());

    // nvidia-smi is a shell script: not taken from any folder. Its siblings are.
    let binaries: Vec<String> = d
        .binaries
        .iter()
        .map(|b| b.container_path.display().to_string())
        .collect();
    assert!(
        !binaries.contains(&"/usr/bin/nvidia-smi".to_string()),
        "{binaries:?}"
    );
    assert!(binaries.contains(&"/usr/bin/nvidia-debugdump".to_string()));
    assert!(
        std::fs::read(tree.root.join("usr/local/nvidia/bin/nvidia-smi"))
            .unwrap()
            .starts_with(b"#!/bin/sh")
    );

    // GPU 1 lost its node: its numbers come from /proc/devices, and it is not on the host.
    assert_eq!(d.gpus.len(), 2);
    assert_eq!(
        node(&d.gpus[1].node),
        ("/dev/nvidia0".to_string(), 195, 0, 0o666, false)
    );
    assert!(d.gpus[0].node.on_host);

    let text = std::fs::read_to_string(log).unwrap();
    // The logger keeps its open file; the name goes, so runs leave nothing behind.
    let _ = std::fs::remove_file(log);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("skipping")).collect();
    let has = |needle: &str| {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "no log line with {needle:?} in\n{}",
            lines.join("\n")
        )
    };
    // Linked out of the root: resolved inside it, where /etc/passwd does not exist.
    has("DEBUG: skipping libnvidia-cfg.so.1 => /usr/local/nvidia/lib64/libnvidia-cfg.so.1: No such file or directory");
    // 32-bit where the cache says 64-bit.
    has(&format!(
        "WARN: skipping {}: a 32-bit i386 object, but the driver root's ld.so.cache lists it \
         as a Lib64 library of the x86_64 driver",
        lib64.join("libnvidia-fbc.so.999.88.77").display()
    ));
    // Left over from an older driver.
    has(&format!(
        "DEBUG: skipping {}: not of driver version {VERSION}",
        lib64
            .join(format!("libnvidia-opencl.so.{OLD_VERSION}"))
            .display()
    ));
}

#[test]
fn imex_channels_are_found_by_number() {
    let (_tree, d) = scenario("imex");
    assert_eq!(
        d.imex_channels.iter().map(node).collect::<Vec<_>>(),
        (0..3)
            .map(|n| (
                format!("/dev/nvidia-caps-imex-channels/channel{n}"),
                242,
                n,
                0o666,
                true
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(d.gpus.len(), 1);
}

#[test]
fn the_devices_scope_reads_only_devices() {
    for name in ["basic-2gpu", "mig", "imex"] {
        let (tree, full) = scenario(name);
        let devices = discover_devices(&tree.roots(), &tree.probe().unwrap()).unwrap();
        assert_eq!(devices.version, full.version);
        assert_eq!(devices.gpus, full.gpus);
        assert_eq!(devices.control_nodes, full.control_nodes);
        assert_eq!(devices.imex_channels, full.imex_channels);
        assert!(
            devices.libraries.is_empty()
                && devices.binaries.is_empty()
                && devices.firmware.is_empty()
                && devices.files.is_empty()
                && devices.ipc.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn rediscovery_gives_the_same_driver() {
    for s in trees::SCENARIOS {
        let (_tree, a) = scenario(s.name);
        let (_tree, b) = scenario(s.name);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap(),
            "{}",
            s.name
        );
    }
}

#[test]
fn without_devices_txt_nodes_are_plain_files_and_not_taken() {
    // The placeholders alone are no nodes: a probe that declares nothing sees files.
    let tree = DriverTree::committed("basic-2gpu");
    let d = discover(&tree.roots(), &libnvc::probe::TreeProbe::new()).unwrap();
    assert!(d.gpus.iter().all(|g| !g.node.on_host));
    assert!(d.control_nodes.iter().all(|n| !n.on_host));
    assert!(d
        .ipc
        .iter()
        .all(|f| f.container_path == Path::new("/tmp/nvidia-mps")));
    // Numbers still come from the driver's /proc/devices.
    assert_eq!(d.gpus[0].node.major, 195);
}

#[test]
fn cuda_version_and_nvml_come_from_the_probe() {
    let tree = DriverTree::committed("basic-2gpu");
    let d = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    // The tree cannot answer: a clear error naming the library.
    let err = d.cuda_version(&tree.probe().unwrap()).unwrap_err();
    assert!(err.library.ends_with("libcuda.so.999.88.77"), "{err}");
    let probe = tree.probe().unwrap().with_cuda_version(trees::CUDA_VERSION);
    assert_eq!(d.cuda_version(&probe).unwrap().to_string(), "99.1");

    let details = vec![discover::GpuDetails {
        uuid: d.gpus[1].uuid.clone(),
        compute_capability: Some("9.0".into()),
        brand: Some("nvidia".into()),
        memory_total: Some(80 << 30),
    }];
    let probe = tree.probe().unwrap().with_gpu_details(details.clone());
    let got = d.gpu_details(&probe).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1], details[0]);
    assert_eq!(got[0].uuid, d.gpus[0].uuid);
    assert_eq!(got[0].compute_capability, None);
}

// ---------------------------------------------------------------------------------------
// The real host probe, on an empty folder and on a fake driver tree built at run time.

fn build(spec: FakeDriverSpec) -> (tempfile::TempDir, FakeDriver, Driver) {
    require_root("fake driver trees have device nodes and an ldconfig-written cache");
    let dir = tempfile::tempdir().unwrap();
    let fake = spec.build(dir.path()).unwrap();
    let roots = DriverRoots {
        root: fake.root.clone(),
        dev_root: fake.dev_root.clone(),
        proc_root: fake.proc_root.clone(),
    };
    let driver = discover(&roots, &nvc_host::probe::RealHost).unwrap();
    (dir, fake, driver)
}

fn request(env: &[&str]) -> Request {
    Request::from_env(env.iter().copied(), &RequestPolicy::default()).unwrap()
}

#[test]
fn no_driver_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = discover(
        &DriverRoots {
            root: dir.path().to_path_buf(),
            dev_root: dir.path().to_path_buf(),
            proc_root: dir.path().join("proc"),
        },
        &nvc_host::probe::RealHost,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("no NVIDIA driver found"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes and an ldconfig-written cache"]
fn finds_the_fake_driver() {
    let (_dir, fake, d) = build(FakeDriverSpec::default());
    assert_eq!(d.version, "999.88.77");
    let cuda = d.library("libcuda").expect("libcuda found");
    assert_eq!(cuda.soname, "libcuda.so.1");
    assert_eq!(cuda.file_name, "libcuda.so.999.88.77");
    assert_eq!(
        cuda.host_path,
        fake.root
            .join("usr/local/nvidia/lib64/libcuda.so.999.88.77")
    );
    assert_eq!(
        d.library("libnvidia-nvvm").unwrap().soname,
        "libnvidia-nvvm.so.4"
    );
    assert_eq!(
        d.library("libEGL_nvidia").unwrap().soname,
        "libEGL_nvidia.so.0"
    );
    // Every driver library of the tree is found once.
    assert!(d.libraries.len() >= 25, "{:#?}", d.libraries);
    let mut stems: Vec<_> = d.libraries.iter().map(|l| (&l.stem, l.class)).collect();
    stems.dedup();
    assert_eq!(stems.len(), d.libraries.len());

    let smi = d
        .binaries
        .iter()
        .find(|b| b.container_path == Path::new("/usr/bin/nvidia-smi"));
    assert_eq!(
        smi.unwrap().host_path,
        fake.root.join("usr/local/nvidia/bin/nvidia-smi")
    );
    assert_eq!(d.firmware.len(), 2, "{:#?}", d.firmware);
    assert!(d.firmware.iter().all(|f| f
        .container_path
        .starts_with("/lib/firmware/nvidia/999.88.77")));
    let icd = d
        .files
        .iter()
        .find(|f| f.container_path.ends_with("nvidia_icd.json"));
    assert_eq!(
        icd.unwrap().container_path,
        Path::new("/usr/share/vulkan/icd.d/nvidia_icd.json")
    );
    assert_eq!(d.ipc.len(), 3, "{:#?}", d.ipc);

    let nodes: Vec<_> = d
        .control_nodes
        .iter()
        .map(|n| (n.path.display().to_string(), n.major, n.minor, n.on_host))
        .collect();
    assert_eq!(
        nodes,
        [
            ("/dev/nvidiactl".to_string(), 195, 255, true),
            ("/dev/nvidia-uvm".to_string(), 238, 0, true),
            ("/dev/nvidia-uvm-tools".to_string(), 238, 1, true),
            ("/dev/nvidia-modeset".to_string(), 195, 254, true),
        ]
    );
    assert_eq!(
        d.mig_config.as_ref().map(|n| (n.major, n.minor)),
        Some((241, 1))
    );
    assert_eq!(
        d.mig_monitor.as_ref().map(|n| (n.major, n.minor)),
        Some((241, 2))
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes and an ldconfig-written cache"]
fn requirements_against_the_fake_driver() {
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
    let check =
        |env: &[&str]| edits::check_requirements(&d, &nvc_host::probe::RealHost, &request(env));
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
}

// ---------------------------------------------------------------------------------------
// The driver's files from a cache: the same driver as a full discovery, or a full one.

/// The whole driver as JSON, to compare two discoveries.
fn json(d: &Driver) -> serde_json::Value {
    serde_json::to_value(d).unwrap()
}

/// A cache in memory that counts what it is asked.
#[derive(Default)]
struct MemoryCache {
    kept: std::cell::RefCell<Option<discover::DriverFiles>>,
    loads: std::cell::Cell<usize>,
    stores: std::cell::Cell<usize>,
}

impl discover::FilesCache for MemoryCache {
    fn load(&self, _: &DriverRoots, _: &str) -> Option<discover::DriverFiles> {
        self.loads.set(self.loads.get() + 1);
        self.kept.borrow().clone()
    }
    fn store(&self, _: &DriverRoots, files: &discover::DriverFiles) {
        self.stores.set(self.stores.get() + 1);
        *self.kept.borrow_mut() = Some(files.clone());
    }
}

#[test]
fn a_cached_discovery_is_the_full_one() {
    let tree = DriverTree::committed("basic-2gpu");
    let probe = tree.probe().unwrap();
    let full = discover(&tree.roots(), &probe).unwrap();
    let cache = MemoryCache::default();
    let scope = discover::Scope::Full;
    let first = discover::discover_cached(&tree.roots(), &probe, scope, Some(&cache)).unwrap();
    assert_eq!((cache.loads.get(), cache.stores.get()), (1, 1));
    let second = discover::discover_cached(&tree.roots(), &probe, scope, Some(&cache)).unwrap();
    assert_eq!((cache.loads.get(), cache.stores.get()), (2, 1));
    assert_eq!(json(&first), json(&full));
    assert_eq!(json(&second), json(&full));
    // An answer for another driver version is not taken: discovery reads the host.
    cache.kept.borrow_mut().as_mut().unwrap().version = OLD_VERSION.to_string();
    let third = discover::discover_cached(&tree.roots(), &probe, scope, Some(&cache)).unwrap();
    assert_eq!(json(&third), json(&full));
    assert_eq!(cache.stores.get(), 2);
    // The device-only scope neither asks nor tells.
    discover::discover_cached(
        &tree.roots(),
        &probe,
        discover::Scope::Devices,
        Some(&cache),
    )
    .unwrap();
    assert_eq!((cache.loads.get(), cache.stores.get()), (3, 2));
}

#[test]
fn without_a_kernel_module_nothing_is_cached() {
    let tree = DriverTree::committed("no-kernel-module");
    let probe = tree.probe().unwrap();
    let cache = MemoryCache::default();
    let d = discover::discover_cached(&tree.roots(), &probe, discover::Scope::Full, Some(&cache))
        .unwrap();
    assert_eq!(json(&d), json(&discover(&tree.roots(), &probe).unwrap()));
    assert_eq!((cache.loads.get(), cache.stores.get()), (0, 0));
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes and an ldconfig-written cache"]
fn the_run_cache_serves_the_fake_driver_and_falls_back_when_it_must() {
    use nvc_host::files_cache::RunCache;
    let (dir, fake, full) = build(FakeDriverSpec::default());
    let roots = full.roots.clone();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let cache = RunCache::new(&nvc_host::state::StateDir::new(
        &run.join("nvc"),
        &run.join("nvc/leases"),
    ));
    let host = &nvc_host::probe::RealHost;
    let scope = discover::Scope::Full;
    let cached = |c: &RunCache| discover::discover_cached(&roots, host, scope, Some(c)).unwrap();
    // Missing: discovered, then kept; then read back.
    assert_eq!(json(&cached(&cache)), json(&full));
    let entry = cache.path_for(&roots);
    assert!(entry.is_file());
    assert!(cache.read(&roots, &full.version).is_ok());
    assert_eq!(json(&cached(&cache)), json(&full));
    // Hostile or damaged entries: each is refused, the driver discovered in full, and the
    // entry written anew.
    type Spoil = Box<dyn Fn(&Path)>;
    let spoilers: Vec<(&str, Spoil)> = vec![
        (
            "garbage",
            Box::new(|p| std::fs::write(p, b"\0garbage").unwrap()),
        ),
        (
            "writable by others",
            Box::new(|p| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap()
            }),
        ),
        (
            "another owner",
            Box::new(|p| std::os::unix::fs::chown(p, Some(65534), None).unwrap()),
        ),
        (
            "a symlink",
            Box::new(|p| {
                let real = p.with_extension("real");
                std::fs::rename(p, &real).unwrap();
                std::os::unix::fs::symlink(&real, p).unwrap();
            }),
        ),
        (
            "another driver version",
            Box::new(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                std::fs::write(p, text.replace(VERSION, "580.1.2")).unwrap();
            }),
        ),
        (
            "a library named outside the driver root",
            Box::new(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                std::fs::write(
                    p,
                    text.replace("/usr/local/nvidia/lib64/", "/../../../../lib/"),
                )
                .unwrap();
            }),
        ),
    ];
    for (what, spoil) in spoilers {
        spoil(&entry);
        assert!(
            cache.read(&roots, &full.version).is_err(),
            "{what}: not refused"
        );
        assert_eq!(json(&cached(&cache)), json(&full), "{what}");
        assert!(
            cache.read(&roots, &full.version).is_ok(),
            "{what}: not written anew"
        );
    }
    // Stale: the driver root's ld.so.cache replaced (as ldconfig does), or a library
    // rebuilt in place.
    let ldcache = fake.root.join("etc/ld.so.cache");
    let copy = ldcache.with_extension("copy");
    std::fs::copy(&ldcache, &copy).unwrap();
    std::fs::rename(&copy, &ldcache).unwrap();
    assert!(cache.read(&roots, &full.version).is_err());
    assert_eq!(json(&cached(&cache)), json(&full));
    let cuda = full.library("libcuda").unwrap().host_path.clone();
    let bytes = std::fs::read(&cuda).unwrap();
    std::fs::write(&cuda, &bytes).unwrap();
    assert!(cache.read(&roots, &full.version).is_err());
    assert_eq!(json(&cached(&cache)), json(&full));
}

/// A probe that lists every path it was asked about, in front of another, and the NVML
/// libraries and GPUs it was asked the MIG devices of.
struct Recording<'a> {
    inner: &'a dyn libnvc::probe::HostProbe,
    asked: std::cell::RefCell<Vec<PathBuf>>,
    mig_asked: std::cell::RefCell<Vec<(PathBuf, Vec<String>)>>,
}

impl<'a> Recording<'a> {
    fn new(inner: &'a dyn libnvc::probe::HostProbe) -> Self {
        Recording {
            inner,
            asked: Default::default(),
            mig_asked: Default::default(),
        }
    }

    fn note(&self, path: &Path) {
        self.asked.borrow_mut().push(path.to_path_buf());
    }

    /// Whether a path it was asked about starts with `prefix`.
    fn asked_under(&self, prefix: &Path) -> bool {
        self.asked.borrow().iter().any(|p| p.starts_with(prefix))
    }
}

impl libnvc::probe::HostProbe for Recording<'_> {
    fn read(&self, path: &Path, limit: usize) -> std::io::Result<(Vec<u8>, bool)> {
        self.note(path);
        self.inner.read(path, limit)
    }
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.note(path);
        self.inner.read_dir(path)
    }
    fn stat(&self, path: &Path) -> std::io::Result<libnvc::probe::Stat> {
        self.note(path);
        self.inner.stat(path)
    }
    fn lstat(&self, path: &Path) -> std::io::Result<libnvc::probe::Stat> {
        self.note(path);
        self.inner.lstat(path)
    }
    fn read_link(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.note(path);
        self.inner.read_link(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<std::fs::File> {
        self.note(path);
        self.inner.open(path)
    }
    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, libnvc::probe::ProbeError> {
        self.inner.cuda_driver_version(libcuda)
    }
    fn is_host_root(&self, path: &Path) -> bool {
        self.inner.is_host_root(path)
    }
    fn gpu_details(
        &self,
        nvml: &Path,
        uuids: &[&str],
    ) -> Result<Vec<libnvc::discover::GpuDetails>, libnvc::probe::ProbeError> {
        self.inner.gpu_details(nvml, uuids)
    }
    fn mig_devices(
        &self,
        nvml: &Path,
        gpus: &[&str],
    ) -> Result<Vec<libnvc::discover::NvmlMigDevice>, libnvc::probe::ProbeError> {
        let gpus_asked = gpus.iter().map(|g| g.to_string()).collect();
        self.mig_asked
            .borrow_mut()
            .push((nvml.to_path_buf(), gpus_asked));
        self.inner.mig_devices(nvml, gpus)
    }

    fn health_inputs(&self, config: &nvc_config::Config) -> libnvc::health::HealthInputs {
        self.inner.health_inputs(config)
    }
}

#[test]
fn a_start_reads_only_the_devices_its_request_can_use() {
    use discover::{DeviceNeeds, Reading, Scope};
    let tree = DriverTree::committed("mig");
    let probe = tree.probe().unwrap();
    let full = discover(&tree.roots(), &probe).unwrap();
    assert!(!full.gpus[0].mig.is_empty() && full.mig_config.is_some());
    let policy = RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    };
    let nvidia = tree.proc_root.join("driver/nvidia");
    let read = |env: &[&str], in_spec: &[(PathBuf, u32, u32)]| {
        let request = Request::from_env(env.iter().copied(), &policy).unwrap();
        let recording = Recording::new(&probe);
        let reading = Reading {
            scope: Scope::Full,
            cache: None,
            needs: DeviceNeeds::of(&request),
            in_spec,
            gpus: None,
        };
        let driver = discover::discover_with(&tree.roots(), &recording, &reading).unwrap();
        (driver, recording)
    };
    let without_mig = |d: &Driver| -> Vec<libnvc::discover::Gpu> {
        d.gpus
            .iter()
            .map(|g| libnvc::discover::Gpu {
                mig: Vec::new(),
                ..g.clone()
            })
            .collect()
    };
    let without_uuids = |d: &Driver| -> Vec<libnvc::discover::Gpu> {
        let mut gpus = d.gpus.clone();
        for m in gpus.iter_mut().flat_map(|g| &mut g.mig) {
            m.uuid = None;
        }
        gpus
    };
    assert!(full.gpus[0].mig.iter().all(|m| m.uuid.is_some()));

    // Every GPU whole: no MIG folder, capability or IMEX folder is read; the rest is
    // what a full discovery finds.
    let (all, asked) = read(&["NVIDIA_VISIBLE_DEVICES=all"], &[]);
    assert!(!asked.asked_under(&nvidia.join("capabilities")));
    assert!(!asked.asked_under(&tree.dir.join("dev/nvidia-caps-imex-channels")));
    assert!(all.gpus.iter().all(|g| g.mig.is_empty()));
    assert_eq!(all.gpus, without_mig(&full));
    assert_eq!((all.mig_config, all.mig_monitor), (None, None));
    assert_eq!(all.libraries, full.libraries);
    assert_eq!(all.control_nodes, full.control_nodes);
    assert!(asked.mig_asked.borrow().is_empty(), "NVML asked for all");
    // A MIG device asked for: the instances are read, as in full, but NVML is not asked
    // their UUIDs.
    let (mig, asked) = read(&["NVIDIA_VISIBLE_DEVICES=0:1"], &[]);
    assert!(asked.asked_under(&nvidia.join("capabilities/gpu1/mig")));
    assert_eq!(mig.gpus, without_uuids(&full));
    assert!(asked.mig_asked.borrow().is_empty(), "NVML asked for 0:1");
    assert!(edits::select(&mig, &request(&["NVIDIA_VISIBLE_DEVICES=0:1"]).devices, "V").is_ok());
    // A MIG device named by UUID: NVML is asked once, for the GPU in MIG mode only; the
    // old form, which names its instances, needs no NVML.
    let uuid = full.gpus[0].mig[1].uuid.clone().unwrap();
    let by_uuid = format!("NVIDIA_VISIBLE_DEVICES={uuid}");
    let (named, asked) = read(&[&by_uuid], &[]);
    assert_eq!(named.gpus, full.gpus);
    assert_eq!(
        *asked.mig_asked.borrow(),
        [(
            lib_dir(&tree).join(format!("libnvidia-ml.so.{VERSION}")),
            vec![full.gpus[0].uuid.clone()]
        )]
    );
    let old = format!(
        "NVIDIA_VISIBLE_DEVICES=MIG-{}/2/0",
        full.gpus[0].uuid.to_uppercase()
    );
    let (old_form, asked) = read(&[&old], &[]);
    assert!(asked.mig_asked.borrow().is_empty(), "NVML asked for {old}");
    for (env, d) in [(&by_uuid, &named), (&old, &old_form)] {
        let selected = edits::select(d, &request(&[env]).devices, "V").unwrap();
        assert_eq!(selected.mig.len(), 1, "{env}");
        assert_eq!(selected.mig[0].1.index, 1, "{env}");
    }
    // The MIG capabilities asked for: their nodes, not the instances.
    let (caps, _) = read(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        &[],
    );
    assert_eq!(caps.mig_config, full.mig_config);
    assert_eq!(caps.mig_monitor, full.mig_monitor);
    assert!(caps.gpus.iter().all(|g| g.mig.is_empty()));

    // The nodes the spec has come from the spec: not one is looked at on the host.
    let in_spec: Vec<(PathBuf, u32, u32)> = full
        .gpus
        .iter()
        .map(|g| &g.node)
        .chain(&full.control_nodes)
        .map(|n| (n.path.clone(), n.major, n.minor))
        .collect();
    let (spec, asked) = read(&["NVIDIA_VISIBLE_DEVICES=all"], &in_spec);
    assert!(
        !asked.asked_under(&tree.dir.join("dev")),
        "{:?}",
        asked.asked.borrow()
    );
    assert!(
        !asked.asked_under(&tree.proc_root.join("devices")),
        "no node needs the registered majors"
    );
    let numbers = |d: &Driver| -> Vec<(PathBuf, PathBuf, u32, u32)> {
        d.gpus
            .iter()
            .map(|g| &g.node)
            .chain(&d.control_nodes)
            .map(|n| (n.path.clone(), n.host_path.clone(), n.major, n.minor))
            .collect()
    };
    assert_eq!(numbers(&spec), numbers(&full));
    // A node the spec lacks is still the host's.
    let (partial, asked) = read(&["NVIDIA_VISIBLE_DEVICES=all"], &in_spec[1..]);
    assert!(asked.asked_under(&full.gpus[0].node.host_path));
    assert_eq!(partial.gpus[0].node, full.gpus[0].node);
}
