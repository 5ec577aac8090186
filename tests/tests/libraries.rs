//! Libraries, programs and files: what each driver capability (`utility`, `compute`,
//! `graphics`, `video`, `compat32`) injects and where (Debian's and Red Hat's library
//! folders, each library mounted once), what a broken install still gives, and in real
//! containers: the driver's libraries found by the loader and answering, `nvidia-smi`
//! listing the GPUs, images whose libraries live in `/usr/lib64`, and a read-only rootfs.
//!
//! The edits are computed on the committed driver trees (`testdata/driver-roots`), read
//! through `libnvc::probe::TreeProbe`: no root, no GPU. The containers run under real
//! runc, through nvc-runtime and nvc-hook against fake driver trees, and are asserted from
//! inside: they need root (runc, device nodes, mounts).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use libnvc::caps::Capability;
use libnvc::discover::LibClass;
use libnvc::edits::{self, ContainerLayout, MountKind};
use nvc_tests::{staged, FakeDriverSpec, RootfsSpec};

mod common;

use common::containers::{nodes_inside, World, LIST_NODES};
use common::edits::{container_paths, driver, edits_for, request};
use common::LIB;

const LIB32: &str = "/usr/lib/i386-linux-gnu";

// ---------------------------------------------------------------------------------------
// On the committed driver trees.

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

// ---------------------------------------------------------------------------------------
// In containers under runc.

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn all_gpus_nodes_libraries_and_nvidia_smi() {
    let w = World::new();
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &format!(
            "{LIST_NODES}; nvc-probe; nvidia-smi -L; ldconfig -p | grep -E 'libcuda|libnvidia-ml'"
        ),
    );
    let mut nodes = nodes_inside(&out);
    nodes.sort();
    let mut want: Vec<String> = w
        .gpus_in_bus_order()
        .iter()
        .map(|g| format!("/dev/nvidia{} 195:{}", g.minor, g.minor))
        .collect();
    want.extend(
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
        ]
        .map(String::from),
    );
    want.sort();
    assert_eq!(nodes, want, "{out}");
    assert!(out.contains("libcuda=ok"), "{out}");
    assert!(out.contains("cuda_version=99010"), "{out}");
    assert!(out.contains("libnvidia-ml=ok"), "{out}");
    assert!(out.contains("driver_version=999.88.77"), "{out}");
    assert!(
        out.contains(&format!(
            "realpath={}",
            staged(&format!("{LIB}/libcuda.so.999.88.77"))
        )),
        "{out}"
    );
    // nvidia-smi -L lists every GPU, in bus order, as the host's would.
    let listed: Vec<&str> = out.lines().filter(|l| l.starts_with("GPU ")).collect();
    assert_eq!(listed.len(), w.fake.spec.gpus.len(), "{out}");
    for (i, g) in w.gpus_in_bus_order().iter().enumerate() {
        assert!(listed[i].contains(&g.uuid), "{out}");
    }
    assert!(
        out.contains(&format!(
            "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
        )),
        "{out}"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn capabilities_choose_what_is_injected() {
    // Two rootfs: mount points left by one container would shadow the other's view.
    let w = World::new();
    let script = "nvc-probe; ls /usr/bin/nvidia-smi 2>&1; nvidia-smi -L 2>&1; true";
    let utility = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
        script,
    );
    assert!(utility.contains("libnvidia-ml=ok"), "{utility}");
    assert!(utility.contains("libcuda=missing"), "{utility}");
    assert!(
        utility.lines().any(|l| l.starts_with("GPU 0:")),
        "{utility}"
    );
    let w = World::new();
    let compute = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ],
        script,
    );
    assert!(compute.contains("libcuda=ok"), "{compute}");
    assert!(compute.contains("libnvidia-ml=missing"), "{compute}");
    assert!(
        !compute.lines().any(|l| l.starts_with("GPU 0:")),
        "{compute}"
    );
    assert!(compute.contains("No such file"), "{compute}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn read_only_rootfs() {
    let w = World::new();
    let b = w
        .bundle(
            &["NVIDIA_VISIBLE_DEVICES=all"],
            "nvc-probe; touch /x 2>&1; true",
        )
        .readonly(true)
        .write()
        .unwrap();
    let out = w.rt.run(&b, &format!("nvc-ro-{}", std::process::id()));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert!(out.stdout.contains("libcuda=ok"), "{}", out.stdout);
    assert!(
        out.stdout.contains("Read-only file system"),
        "{}",
        out.stdout
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn lib64_images_get_libraries_in_usr_lib64() {
    let w = World::with(
        FakeDriverSpec::default(),
        RootfsSpec {
            debian_layout: false,
            merged_usr: true,
        },
    );
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    assert!(
        out.contains(&format!(
            "realpath={}",
            staged("/usr/lib64/libcuda.so.999.88.77")
        )),
        "{out}"
    );
}
