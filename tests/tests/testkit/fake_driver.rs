//! The fake driver trees built at run time (`FakeDriverSpec::build`): what other tests
//! build on must look like the H100 580.159.04 sample host. Needs root (mknod, `ldconfig
//! -r`). The link chains, caches and `/proc` formats are checked on the committed trees,
//! which the same code makes, in [`super::committed_trees`].

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nvc_tests::{
    mig_cap_minor, require_root, FakeDriver, FakeDriverSpec, FakeError, FakeGpu, DRIVER_BINARIES,
    DRIVER_LIBRARIES, NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR,
};

fn build(spec: &FakeDriverSpec) -> (tempfile::TempDir, FakeDriver) {
    let dir = tempfile::tempdir().unwrap();
    let driver = spec.build(dir.path()).unwrap();
    (dir, driver)
}

fn build_default(what: &str) -> (tempfile::TempDir, FakeDriver) {
    require_root(what);
    build(&FakeDriverSpec::default())
}

fn run(command: &mut Command) -> std::process::Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("failed to run {command:?}: {e}"))
}

/// Resolves `path` (as seen from `root`) the way a chrooted process would: absolute link
/// targets restart at `root`, `..` never leaves it. Returns the host path of the final file.
fn resolve_in_root(root: &Path, path: &str) -> PathBuf {
    let mut pending: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(String::from)
        .collect();
    let mut resolved: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(component) = pending.pop() {
        match component.as_str() {
            "." => continue,
            ".." => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        let host = resolved
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&component);
        match fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                assert!(hops < 40, "too many links resolving {path}");
                let target = fs::read_link(&host).unwrap();
                let target = target.to_string_lossy();
                if target.starts_with('/') {
                    resolved.clear();
                }
                pending.extend(
                    target
                        .split('/')
                        .filter(|c| !c.is_empty())
                        .rev()
                        .map(String::from),
                );
            }
            Ok(_) => resolved.push(component),
            Err(e) => panic!("{path}: {} does not exist in the root: {e}", host.display()),
        }
    }
    resolved.iter().fold(root.to_path_buf(), |p, c| p.join(c))
}

fn readelf_soname(path: &Path) -> Option<String> {
    let output = run(Command::new("readelf").arg("-d").arg("-W").arg(path));
    assert!(output.status.success(), "readelf -d {}", path.display());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| Some(l[l.find('[')? + 1..l.rfind(']')?].to_string()))
}

fn dynamic_symbols(path: &Path) -> BTreeSet<String> {
    let output = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(path));
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.contains(" GLOBAL ") && !l.contains(" UND "))
        .filter_map(|l| l.split_whitespace().last().map(String::from))
        .collect()
}

/// ELF class (1: 32-bit, 2: 64-bit) and type (3: shared object) from the header.
fn elf_class_and_type(path: &Path) -> (u8, u16) {
    let bytes = fs::read(path).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "{} is not ELF", path.display());
    (bytes[4], u16::from_le_bytes([bytes[16], bytes[17]]))
}

#[test]
#[ignore = "needs root: libraries are ELF shared objects"]
fn libraries_are_shared_objects_with_the_real_sonames() {
    let (_dir, driver) = build_default("libraries are ELF shared objects");
    let v = &driver.spec.version;
    assert_eq!(DRIVER_LIBRARIES.len(), 26);
    for library in DRIVER_LIBRARIES {
        let path = driver.lib_dir().join(library.file_name(v));
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "{} is a file", path.display());
        assert_eq!(meta.mode() & 0o777, 0o755);
        assert_eq!(elf_class_and_type(&path), (2, 3), "{}", path.display());
        assert_eq!(
            readelf_soname(&path).as_deref(),
            Some(library.soname(v).as_str()),
            "soname of {}",
            path.display()
        );
    }
    let soname = |name: &str| {
        let library = DRIVER_LIBRARIES.iter().find(|l| l.name == name).unwrap();
        library.soname(v)
    };
    // The sonames the real driver uses, spelled out.
    assert_eq!(soname("libcuda"), "libcuda.so.1");
    assert_eq!(soname("libnvidia-nvvm"), "libnvidia-nvvm.so.4");
    assert_eq!(soname("libEGL_nvidia"), "libEGL_nvidia.so.0");
    assert_eq!(soname("libGLESv2_nvidia"), "libGLESv2_nvidia.so.2");
    assert_eq!(soname("libnvidia-tls"), "libnvidia-tls.so.999.88.77");

    let cuda = dynamic_symbols(&driver.lib_dir().join("libcuda.so.999.88.77"));
    for symbol in ["cuInit", "cuDriverGetVersion", "cuDeviceGetCount"] {
        assert!(cuda.contains(symbol), "libcuda lacks {symbol}: {cuda:?}");
    }
    let nvml: BTreeSet<String> =
        dynamic_symbols(&driver.lib_dir().join("libnvidia-ml.so.999.88.77"))
            .into_iter()
            .filter(|s| s.starts_with("nvml"))
            .collect();
    // What nvidia-smi needs, what lists a GPU's MIG devices with their UUIDs, what
    // nvml-wrapper calls for nvc ps's processes and memory (nvml-processes.txt), and the
    // health calls of `nvc health update`.
    assert_eq!(
        nvml,
        BTreeSet::from(
            [
                "nvmlInit_v2",
                "nvmlShutdown",
                "nvmlSystemGetDriverVersion",
                "nvmlDeviceGetHandleByUUID",
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
                "nvmlDeviceGetProcessUtilization",
                "nvmlDeviceGetMemoryInfo_v2",
                "nvmlDeviceGetMaxMigDeviceCount",
                "nvmlDeviceGetMigDeviceHandleByIndex",
                "nvmlDeviceGetUUID",
                "nvmlDeviceGetGpuInstanceId",
                "nvmlDeviceGetComputeInstanceId",
                "nvmlDeviceGetRetiredPagesPendingStatus",
                "nvmlDeviceGetRemappedRows",
                "nvmlDeviceGetTotalEccErrors",
            ]
            .map(String::from)
        )
    );

    for name in DRIVER_BINARIES {
        let path = driver.bin_dir().join(name);
        let (class, kind) = elf_class_and_type(&path);
        // 3 is also what a PIE executable is; it must be runnable.
        assert_eq!((class, kind), (2, 3), "{name}");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o111, 0o111, "{name}");
        let interp = run(Command::new("readelf").arg("-l").arg(&path));
        assert!(String::from_utf8_lossy(&interp.stdout).contains("program interpreter"));
    }
    let output = run(driver.host_command("nvidia-persistenced").arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "nvidia-persistenced: version 999.88.77 (nvc fake driver)\n"
    );
}

/// Major and minor of a device number, as glibc encodes them.
fn major_minor(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major as u32, minor as u32)
}

#[test]
#[ignore = "needs root: mknod device nodes"]
fn device_nodes_are_char_devices_with_the_drivers_numbers() {
    require_root("mknod device nodes");
    let spec = FakeDriverSpec {
        split_dev_root: true,
        mig: true,
        imex_channels: 3,
        ..FakeDriverSpec::default()
    };
    let (_dir, driver) = build(&spec);
    assert_eq!(driver.dev_root, driver.dir.join("devroot"));
    assert!(!driver.root.join("dev/nvidiactl").exists());
    let nodes = spec.device_nodes();
    // nvidiactl, modeset, uvm, uvm-tools, 3 GPUs, cap1, cap2, 4 MIG caps, 3 IMEX channels.
    assert_eq!(nodes.len(), 4 + 3 + 2 + 4 + 3);
    for node in &nodes {
        let path = driver.dev_root.join(&node.path);
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_char_device(), "{}", path.display());
        assert_eq!(
            major_minor(meta.rdev()),
            (node.major, node.minor),
            "{}",
            path.display()
        );
        assert_eq!(meta.mode() & 0o7777, node.mode, "{}", path.display());
    }
    let node = |path: &str| {
        let meta = fs::symlink_metadata(driver.dev_dir().join(path)).unwrap();
        (major_minor(meta.rdev()), meta.mode() & 0o777)
    };
    // The sample's numbers and modes.
    assert_eq!(node("nvidiactl"), ((195, 255), 0o666));
    assert_eq!(node("nvidia-uvm"), ((238, 0), 0o666));
    assert_eq!(node("nvidia-uvm-tools"), ((238, 1), 0o666));
    assert_eq!(node("nvidia-modeset"), ((195, 254), 0o666));
    assert_eq!(node("nvidia-caps/nvidia-cap1"), ((241, 1), 0o400));
    assert_eq!(node("nvidia-caps/nvidia-cap2"), ((241, 2), 0o444));
    assert_eq!(
        node("nvidia-caps-imex-channels/channel2"),
        ((242, 2), 0o666)
    );
    for gpu in &spec.gpus {
        assert_eq!(
            node(&format!("nvidia{}", gpu.minor)),
            ((NVIDIA_MAJOR, gpu.minor), 0o666)
        );
    }
    // MIG on GPU index 0 = lowest bus id = 0000:06:00.0, minor 2.
    assert_eq!(
        node(&format!(
            "nvidia-caps/nvidia-cap{}",
            mig_cap_minor(2, 1, Some(0))
        )),
        ((NVIDIA_CAPS_MAJOR, 3 + 2 * 135 + 9 + 1), 0o444)
    );
}

#[test]
#[ignore = "needs root: nvidia-smi against a fake tree"]
fn nvidia_smi_lists_the_gpus_in_bus_order() {
    let (_dir, driver) = build_default("nvidia-smi against a fake tree");
    let output = run(driver.host_command("nvidia-smi").arg("-L"));
    assert!(output.status.success(), "{output:?}");
    let expected: String = driver
        .spec
        .gpus_in_bus_order()
        .iter()
        .enumerate()
        .map(|(i, gpu)| format!("GPU {i}: {} (UUID: {})\n", gpu.model, gpu.uuid))
        .collect();
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
    assert!(expected.starts_with("GPU 0: NVIDIA Fake H100 80GB HBM3 (UUID: GPU-fa4ed71e-0000-"));

    let table = run(&mut driver.host_command("nvidia-smi"));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("Driver Version: 999.88.77"), "{table}");
    assert!(table.contains("CUDA Version: 99.1"), "{table}");
    assert!(table.contains("00000000:1A:00.0"), "{table}");

    // Without NVML it fails the way the real one does.
    let output = run(driver
        .host_command("nvidia-smi")
        .env_remove("LD_LIBRARY_PATH")
        .arg("-L"));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("NVIDIA-SMI couldn't find libnvidia-ml.so library"));

    // Without /dev/nvidiactl it cannot talk to the driver.
    let empty = tempfile::tempdir().unwrap();
    let output = run(driver
        .host_command("nvidia-smi")
        .env("NVC_FAKE_DEV", empty.path())
        .arg("-L"));
    assert_eq!(output.status.code(), Some(9));

    // A GPU whose device node is missing is not shown, as in a container given only some GPUs.
    fs::remove_file(driver.dev_dir().join("nvidia0")).unwrap();
    let output = run(driver.host_command("nvidia-smi").arg("-L"));
    let listed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        !listed.contains(&driver.spec.gpus[1].uuid),
        "minor 0 is 0000:1a:00.0"
    );
}

#[test]
#[ignore = "needs root: libcuda"]
fn libcuda_answers_through_dlopen() {
    let (dir, driver) = build_default("libcuda");
    let probe = dir.path().join("cuda_probe");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cuda_probe.c");
    let output = run(Command::new("gcc")
        .arg(&source)
        .arg("-o")
        .arg(&probe)
        .arg("-ldl"));
    assert!(output.status.success(), "{output:?}");
    let output = run(Command::new(&probe)
        .env("LD_LIBRARY_PATH", driver.lib_dir())
        .env("NVC_FAKE_PROC", &driver.proc_root));
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "cuInit 0\ncuDriverGetVersion 0 99010\ncuDeviceGetCount 0 3\n"
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn nvml_lists_the_mig_devices_the_tree_declares() {
    require_root("fake driver tree");
    let (_dir, driver) = build(&FakeDriverSpec {
        mig: true,
        ..FakeDriverSpec::default()
    });
    let nvml = driver
        .lib_dir()
        .join(format!("libnvidia-ml.so.{}", driver.spec.version));
    let gpus: Vec<String> = driver
        .spec
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.uuid.clone())
        .collect();
    // What the program beside the hook prints, from the fake libnvidia-ml: the MIG
    // devices of the GPU in MIG mode, none of the others', as the tree's file says.
    let output = run(Command::new(nvc_tests::workspace_bin("nvc-mig-devices"))
        .arg(&nvml)
        .args(&gpus));
    assert!(output.status.success(), "{output:?}");
    let want: String = driver
        .spec
        .mig_devices()
        .iter()
        .map(|m| format!("{} {} {} {}\n", m.gpu_uuid, m.gi, m.ci, m.uuid))
        .collect();
    assert_eq!(String::from_utf8_lossy(&output.stdout), want);
    assert_eq!(
        fs::read_to_string(driver.dir.join(nvc_tests::MIG_DEVICES_FILE)).unwrap(),
        driver.spec.mig_devices_text()
    );
    let output = run(Command::new(nvc_tests::workspace_bin("nvc-mig-devices"))
        .arg(&nvml)
        .args(&gpus[1..]));
    assert!(
        output.status.success() && output.stdout.is_empty(),
        "{output:?}"
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn support_files_config_and_sockets() {
    let (_dir, driver) = build_default("fake driver tree");
    let root = &driver.root;
    for firmware in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
        let path = format!("/lib/firmware/nvidia/999.88.77/{firmware}");
        assert!(resolve_in_root(root, &path).is_file(), "{path}");
        assert!(root
            .join("usr/local/nvidia/firmware/nvidia/999.88.77")
            .join(firmware)
            .is_file());
    }
    let json = |path: &str| -> serde_json::Value {
        serde_json::from_str(&fs::read_to_string(root.join(path)).unwrap()).unwrap()
    };
    assert_eq!(
        json("usr/share/vulkan/icd.d/nvidia_icd.json")["ICD"]["library_path"],
        "libGLX_nvidia.so.0"
    );
    assert_eq!(
        json("usr/share/glvnd/egl_vendor.d/10_nvidia.json")["ICD"]["library_path"],
        "libEGL_nvidia.so.0"
    );
    assert_eq!(
        json("usr/share/vulkan/implicit_layer.d/nvidia_layers.json")["layer"]["library_path"],
        "libGLX_nvidia.so.0"
    );
    assert_eq!(
        fs::read_to_string(root.join("usr/local/nvidia/version")).unwrap(),
        "999.88.77"
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/ld.so.conf"))
            .unwrap()
            .lines()
            .next(),
        Some("include /etc/ld.so.conf.d/*.conf")
    );
    let conf = fs::read_to_string(root.join("etc/ld.so.conf.d/x86_64-linux-gnu.conf")).unwrap();
    assert!(conf.contains(
        "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"
    ));
    let conf = fs::read_to_string(root.join("etc/ld.so.conf.d/nvidia.conf")).unwrap();
    assert_eq!(conf, "/usr/local/nvidia/lib64\n/usr/local/nvidia/lib\n");

    for socket in [
        "run/nvidia-persistenced/socket",
        "run/nvidia-fabricmanager/socket",
    ] {
        let meta = fs::symlink_metadata(root.join(socket)).unwrap();
        assert!(meta.file_type().is_socket(), "{socket}");
    }
    assert!(root.join("tmp/nvidia-mps").is_dir());

    let config = fs::read_to_string(&driver.config).unwrap();
    assert_eq!(driver.config, driver.dir.join("config.toml"));
    assert_eq!(
        config,
        format!(
            "[driver]\nroot = \"{0}/root\"\ndev-root = \"{0}/root\"\nproc-root = \"{0}/proc\"\n\n\
             [hook]\nstate-dir = \"{0}/state\"\n\n[log]\nfile = \"{0}/nvc.log\"\nlevel = \"debug\"\n\n\
             [leases]\ndir = \"{0}/leases\"\n",
            driver.dir.display()
        )
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn no_ipc_and_no_gpus() {
    require_root("fake driver tree");
    let spec = FakeDriverSpec {
        ipc: false,
        gpus: Vec::new(),
        ..FakeDriverSpec::default()
    };
    let (_dir, driver) = build(&spec);
    assert!(!driver.root.join("run/nvidia-persistenced").exists());
    assert!(!driver.root.join("tmp/nvidia-mps").exists());
    assert_eq!(
        fs::read_dir(driver.proc_root.join("driver/nvidia/gpus"))
            .unwrap()
            .count(),
        0
    );
    let output = run(driver.host_command("nvidia-smi").arg("-L"));
    assert_eq!(output.status.code(), Some(6));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "No devices were found\n"
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn lib32_is_built_exactly_when_gcc_m32_works() {
    require_root("fake driver tree");
    let spec = FakeDriverSpec {
        lib32: true,
        ..FakeDriverSpec::default()
    };
    let (_dir, driver) = build(&spec);
    let probe_dir = tempfile::tempdir().unwrap();
    let src = probe_dir.path().join("p.c");
    fs::write(&src, "int p(void) { return 0; }\n").unwrap();
    let m32_works = run(Command::new("gcc")
        .args(["-m32", "-shared", "-fPIC", "-o"])
        .arg(probe_dir.path().join("p.so"))
        .arg(&src))
    .status
    .success();
    assert_eq!(driver.lib32_built, m32_works);
    let dir = driver.root.join("usr/lib/i386-linux-gnu");
    if !m32_works {
        eprintln!("note: gcc -m32 cannot link here (no gcc-multilib): checked only that no 32-bit libraries were built");
        assert!(!dir.exists());
        return;
    }
    let v = &driver.spec.version;
    let libcuda = dir.join(format!("libcuda.so.{v}"));
    assert_eq!(elf_class_and_type(&libcuda), (1, 3));
    assert_eq!(readelf_soname(&libcuda).as_deref(), Some("libcuda.so.1"));
    assert_eq!(
        fs::read_link(dir.join("libcuda.so.1")).unwrap(),
        Path::new(&format!("libcuda.so.{v}"))
    );
    let output = run(Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(driver.ld_cache()));
    let listing = String::from_utf8_lossy(&output.stdout);
    assert!(
        listing.contains("libcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1"),
        "{listing}"
    );
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn two_trees_build_side_by_side_and_the_second_is_fast() {
    require_root("fake driver tree");
    let spec = FakeDriverSpec::default();
    let first = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let a = spec.build(first.path()).unwrap();
    let first_took = started.elapsed();
    let second = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let b = spec.build(second.path()).unwrap();
    let second_took = started.elapsed();
    eprintln!("fake driver tree: first build {first_took:?}, second {second_took:?}");
    assert!(
        second_took < Duration::from_secs(2),
        "a tree after the first took {second_took:?}"
    );
    assert_ne!(a.root, b.root);
    for driver in [&a, &b] {
        let output = run(driver.host_command("nvidia-smi").arg("-L"));
        assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 3);
    }
    // Building into a used directory fails, naming the path.
    let err = spec.build(first.path()).unwrap_err();
    assert!(matches!(err, FakeError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains(&a.root.display().to_string()),
        "{err}"
    );
}

#[test]
fn invalid_specs_are_refused_before_touching_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let spec = FakeDriverSpec {
        gpus: vec![
            FakeGpu::fake_gpus(2).remove(0),
            FakeGpu {
                minor: 1,
                ..FakeGpu::fake_gpus(2).remove(1)
            },
        ],
        ..FakeDriverSpec::default()
    };
    let err = spec.build(dir.path()).unwrap_err();
    assert!(matches!(err, FakeError::InvalidSpec { .. }), "{err}");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
#[ignore = "needs root: fake driver tree"]
fn the_cli_builds_a_tree_and_prints_its_config() {
    require_root("fake driver tree");
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    let exe = env!("CARGO_BIN_EXE_nvc-fake-driver");
    let output = run(Command::new(exe).arg(&tree).args([
        "--gpus",
        "5",
        "--mig",
        "--imex",
        "2",
        "--split-dev-root",
    ]));
    assert!(output.status.success(), "{output:?}");
    let config = tree.join("config.toml");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", config.display())
    );
    let text = fs::read_to_string(&config).unwrap();
    assert!(text.contains("dev-root = \""), "{text}");
    assert!(text.contains("/tree/devroot\"\n"), "{text}");
    let gpus = fs::read_dir(tree.join("proc/driver/nvidia/gpus"))
        .unwrap()
        .count();
    assert_eq!(gpus, 5);
    assert!(tree
        .join("devroot/dev/nvidia-caps-imex-channels/channel1")
        .exists());

    // A directory that is not empty is refused.
    let output = run(Command::new(exe).arg(&tree));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not empty"));
    let output = run(Command::new(exe).arg(dir.path().join("x")).arg("--bogus"));
    assert_eq!(output.status.code(), Some(2));
}
