//! Discovery and container edits on fake driver trees: no GPU needed, root needed (the
//! trees have real device nodes and a cache written by `ldconfig -r`).

#![allow(clippy::unwrap_used)]

use std::path::Path;

use libnvc::caps::Capability;
use libnvc::discover::{discover, Driver, DriverRoots};
use libnvc::edits::{self, ContainerEdits, ContainerLayout, MountKind};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::{require_root, FakeDriver, FakeDriverSpec};

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

fn edits_for(driver: &Driver, env: &[&str]) -> ContainerEdits {
    edits::compute(driver, &request(env), &ContainerLayout::debian()).unwrap()
}

fn container_paths(e: &ContainerEdits) -> Vec<String> {
    e.mounts
        .iter()
        .map(|m| m.container_path.display().to_string())
        .chain(e.device_nodes.iter().map(|n| n.path.display().to_string()))
        .chain(e.symlinks.iter().map(|s| s.link.display().to_string()))
        .collect()
}

#[test]
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
fn gpus_are_numbered_in_pci_order_with_their_own_minors() {
    let (_dir, fake, d) = build(FakeDriverSpec::default());
    let mut by_bus = fake.spec.gpus.clone();
    by_bus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    assert_eq!(d.gpus.len(), by_bus.len());
    for (i, (got, want)) in d.gpus.iter().zip(&by_bus).enumerate() {
        assert_eq!(got.index as usize, i);
        assert_eq!(got.bus_id, want.bus_id);
        assert_eq!(got.uuid, want.uuid);
        assert_eq!(got.minor, want.minor);
        assert_eq!(
            got.node.path,
            Path::new(&format!("/dev/nvidia{}", want.minor))
        );
        assert_eq!((got.node.major, got.node.minor), (195, want.minor));
        assert!(got.node.on_host);
    }
    // The fixture must really exercise the mismatch.
    assert!(
        d.gpus.iter().any(|g| g.index != g.minor),
        "minors should differ from indices"
    );
}

#[test]
fn nothing_is_read_from_the_real_host() {
    let (dir, fake, d) = build(FakeDriverSpec {
        split_dev_root: true,
        ..FakeDriverSpec::default()
    });
    assert_ne!(fake.dev_root, fake.root);
    let under = |p: &Path, what: &str| {
        assert!(
            p.starts_with(dir.path()),
            "{what} {} is outside the fake tree",
            p.display()
        );
    };
    for l in &d.libraries {
        under(&l.host_path, "library");
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
        .chain(d.mig_config.iter())
        .chain(d.mig_monitor.iter());
    for n in nodes {
        assert!(
            n.host_path.starts_with(&fake.dev_root),
            "node {} not under the dev root",
            n.host_path.display()
        );
        assert!(
            n.on_host,
            "{} should exist under the split dev root",
            n.host_path.display()
        );
    }
    assert!(
        !fake.root.join("dev/nvidiactl").exists(),
        "split tree must not have nodes under root"
    );
}

#[test]
fn absolute_links_never_reach_the_real_host() {
    let (_dir, fake, _) = build(FakeDriverSpec::default());
    // A driver library whose link points at an absolute path that exists on the real
    // host but not in the tree: it must be skipped, not resolved on the host.
    let lib = fake
        .root
        .join("usr/local/nvidia/lib64/libnvidia-cfg.so.999.88.77");
    std::fs::remove_file(&lib).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &lib).unwrap();
    let d = discover(
        &DriverRoots {
            root: fake.root.clone(),
            dev_root: fake.dev_root.clone(),
            proc_root: fake.proc_root.clone(),
        },
        &nvc_host::probe::RealHost,
    )
    .unwrap();
    assert!(
        d.library("libnvidia-cfg").is_none(),
        "{:#?}",
        d.library("libnvidia-cfg")
    );
    assert!(d.library("libcuda").is_some());
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
fn selection_by_index_uuid_and_bus_id() {
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
    for gpu in &d.gpus {
        let forms = [
            gpu.index.to_string(),
            gpu.uuid.clone(),
            gpu.bus_id.clone(),
            gpu.bus_id[5..].to_string(),
        ];
        for form in forms {
            let env = format!("NVIDIA_VISIBLE_DEVICES={form}");
            let e = edits_for(&d, &[&env]);
            let gpu_nodes: Vec<_> = e
                .device_nodes
                .iter()
                .filter(|n| n.major == 195 && n.minor < 254)
                .map(|n| n.path.display().to_string())
                .collect();
            assert_eq!(gpu_nodes, [format!("/dev/nvidia{}", gpu.minor)], "{form}");
            assert_eq!(e.visible_gpus, std::slice::from_ref(&gpu.bus_id), "{form}");
        }
    }
    let all = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_eq!(all.visible_gpus.len(), d.gpus.len());
    assert_eq!(
        all.device_nodes
            .iter()
            .filter(|n| n.major == 195 && n.minor < 254)
            .count(),
        d.gpus.len()
    );
}

#[test]
fn unknown_devices_are_errors_that_name_them() {
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
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
    }
}

#[test]
fn capabilities_choose_the_files() {
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
    let lib = "/usr/lib/x86_64-linux-gnu";
    let utility = container_paths(&edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
    ));
    assert!(
        utility.contains(&format!("{lib}/libnvidia-ml.so.999.88.77")),
        "{utility:#?}"
    );
    assert!(utility.contains(&format!("{lib}/libnvidia-ml.so.1")));
    assert!(utility.contains(&"/usr/bin/nvidia-smi".to_string()));
    assert!(
        !utility.iter().any(|p| p.contains("libcuda")),
        "{utility:#?}"
    );

    let compute = container_paths(&edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
    ));
    assert!(
        compute.contains(&format!("{lib}/libcuda.so.999.88.77")),
        "{compute:#?}"
    );
    assert!(compute.contains(&format!("{lib}/libcuda.so.1")));
    assert!(compute.contains(&format!("{lib}/libcuda.so")));
    assert!(compute.contains(&"/usr/bin/nvidia-cuda-mps-control".to_string()));
    assert!(
        !compute.contains(&"/usr/bin/nvidia-smi".to_string()),
        "{compute:#?}"
    );
    assert!(!compute.iter().any(|p| p.contains("libnvidia-ml")));

    let graphics = edits_for(
        &d,
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=graphics",
        ],
    );
    let gp = container_paths(&graphics);
    assert!(
        gp.contains(&"/usr/share/vulkan/icd.d/nvidia_icd.json".to_string()),
        "{gp:#?}"
    );
    assert!(gp.contains(&"/dev/nvidia-modeset".to_string()));
    assert!(gp.contains(&format!("{lib}/libGLX_indirect.so.0")));
    assert!(!compute.contains(&"/dev/nvidia-modeset".to_string()));

    // Default: utility + compute; firmware always.
    let default = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    let kinds: Vec<MountKind> = default.mounts.iter().map(|m| m.kind).collect();
    assert!(kinds.contains(&MountKind::Firmware));
    let dp = container_paths(&default);
    assert!(
        dp.contains(&format!("{lib}/libcuda.so.1"))
            && dp.contains(&"/usr/bin/nvidia-smi".to_string())
    );
    assert!(!dp.iter().any(|p| p.contains("libGLX")));
    assert_eq!(default.ldcache_dirs, [Path::new(lib)]);

    let rh = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &ContainerLayout::lib64(),
    )
    .unwrap();
    assert!(container_paths(&rh).contains(&"/usr/lib64/libcuda.so.1".to_string()));
    assert!(d
        .libraries
        .iter()
        .all(|l| l.capabilities.iter().all(|c| *c != Capability::Compat32)));
}

#[test]
fn none_void_and_unset() {
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
    let none = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=none"]);
    let paths = container_paths(&none);
    assert!(paths.contains(&"/dev/nvidiactl".to_string()), "{paths:#?}");
    assert!(paths.iter().any(|p| p.ends_with("libcuda.so.1")));
    assert!(
        !none
            .device_nodes
            .iter()
            .any(|n| n.major == 195 && n.minor < 254),
        "{paths:#?}"
    );
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
    let (_dir, _fake, d) = build(FakeDriverSpec::default());
    let env = [
        "NVIDIA_VISIBLE_DEVICES=2,0",
        "NVIDIA_DRIVER_CAPABILITIES=all",
    ];
    let a = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    let b = serde_json::to_string(&edits_for(&d, &env)).unwrap();
    assert_eq!(a, b);
    // Rediscovering gives the same edits too.
    let d2 = discover(&d.roots, &nvc_host::probe::RealHost).unwrap();
    assert_eq!(a, serde_json::to_string(&edits_for(&d2, &env)).unwrap());
}

#[test]
fn mig_devices_by_gpu_and_instance() {
    let (_dir, _fake, d) = build(FakeDriverSpec {
        mig: true,
        ..FakeDriverSpec::default()
    });
    let gpu0 = &d.gpus[0];
    assert!(!gpu0.mig.is_empty(), "fixture should put GPU 0 in MIG mode");
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0:0"]);
    let nodes: Vec<_> = e
        .device_nodes
        .iter()
        .map(|n| n.path.display().to_string())
        .collect();
    assert!(
        nodes.contains(&format!("/dev/nvidia{}", gpu0.minor)),
        "{nodes:#?}"
    );
    for cap in &gpu0.mig[0].caps {
        assert!(
            nodes.contains(&cap.path.display().to_string()),
            "{nodes:#?}"
        );
        assert_eq!(cap.major, 241);
    }
}

#[test]
fn imex_channels_and_mig_config_for_privileged() {
    let (_dir, _fake, d) = build(FakeDriverSpec {
        imex_channels: 3,
        ..FakeDriverSpec::default()
    });
    assert_eq!(d.imex_channels.len(), 3);
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"]);
    let nodes: Vec<_> = e
        .device_nodes
        .iter()
        .map(|n| n.path.display().to_string())
        .collect();
    assert!(
        nodes.contains(&"/dev/nvidia-caps-imex-channels/channel1".to_string()),
        "{nodes:#?}"
    );
    assert!(!nodes.contains(&"/dev/nvidia-caps-imex-channels/channel0".to_string()));
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
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        &privileged,
    )
    .unwrap();
    let e = edits::compute(&d, &req, &ContainerLayout::debian()).unwrap();
    assert!(e
        .device_nodes
        .iter()
        .any(|n| n.path == Path::new("/dev/nvidia-caps/nvidia-cap1")));
}

#[test]
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

#[test]
fn compat32_adds_the_32_bit_libraries() {
    let (_dir, fake, d) = build(FakeDriverSpec {
        lib32: true,
        ..FakeDriverSpec::default()
    });
    assert!(
        fake.lib32_built,
        "this test needs `gcc -m32` to link (apt-get install gcc-multilib; scripts/deps.sh does)"
    );
    let lib32: Vec<_> = d
        .libraries
        .iter()
        .filter(|l| l.class == libnvc::discover::LibClass::Lib32)
        .collect();
    assert!(lib32.iter().any(|l| l.stem == "libcuda"), "{lib32:#?}");
    let without = container_paths(&edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0"]));
    assert!(
        !without
            .iter()
            .any(|p| p.starts_with("/usr/lib/i386-linux-gnu")),
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
        paths.contains(&"/usr/lib/i386-linux-gnu/libcuda.so.1".to_string()),
        "{paths:#?}"
    );
    assert!(paths.contains(&"/usr/lib/i386-linux-gnu/libcuda.so.999.88.77".to_string()));
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("/usr/lib/i386-linux-gnu/libnvidia-ml")),
        "utility not asked"
    );
    assert_eq!(
        with.ldcache_dirs,
        [
            Path::new("/usr/lib/x86_64-linux-gnu"),
            Path::new("/usr/lib/i386-linux-gnu")
        ]
    );
}

#[test]
fn the_devices_scope_reads_only_devices() {
    let (_dir, _fake, full) = build(FakeDriverSpec::default());
    let devices =
        libnvc::discover::discover_devices(&full.roots, &nvc_host::probe::RealHost).unwrap();
    assert_eq!(devices.version, full.version);
    assert_eq!(devices.gpus, full.gpus);
    assert_eq!(devices.control_nodes, full.control_nodes);
    assert!(
        devices.libraries.is_empty() && devices.binaries.is_empty() && devices.files.is_empty()
    );
    // The nodes a request gets are the same either way.
    let env = ["NVIDIA_VISIBLE_DEVICES=2,0"];
    assert_eq!(
        edits_for(&devices, &env).device_nodes,
        edits_for(&full, &env).device_nodes
    );
}
