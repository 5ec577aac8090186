//! The committed driver trees themselves (`testdata/driver-roots`): that they are what
//! `nvc-driver-trees` makes, byte for byte, and that they look like the H100 580.159.04
//! sample host (names, sonames, links, cache, device numbers, `/proc` formats). No root.
//!
//! Regenerating needs gcc (`gcc -m32` for lib32), ldconfig and root or an unprivileged
//! user namespace (for `ldconfig -r`); without them, the regeneration tests say so on
//! stderr and check nothing else. Every other test here needs no tool.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use libnvc::discover::driver_root::resolve_in_root;
use libnvc::discover::proc::parse_fields;
use libnvc::elf::{self, ElfClass};
use libnvc::ldcache::{self, CacheArch};
use libnvc::probe::{FileKind, HostProbe, TreeProbe};
use nvc_tests::trees::{
    self, tiny_program, tiny_shared_object, DriverTree, TreeEntry, OLD_VERSION, SCENARIOS, VERSION,
};
use nvc_tests::{mig_cap_minor, DRIVER_BINARIES, DRIVER_LIBRARIES};

const REGENERATE: &str = "cargo run -p nvc-tests --bin nvc-driver-trees";

/// Fails the test, saying which tool is missing, when the tools to generate `scenario`
/// are not here (`scripts/deps.sh` installs them): a check is never skipped in silence.
#[track_caller]
fn need_tools(scenario: &trees::Scenario, what: &str) {
    if let Some(missing) = trees::missing_tools(scenario) {
        panic!("{what} for {}: {missing}", scenario.name);
    }
}

#[test]
fn committed_trees_are_what_the_generator_makes() {
    let out = tempfile::tempdir().unwrap();
    for scenario in SCENARIOS {
        need_tools(scenario, "the comparison with a fresh tree");
        let fresh = trees::generate(scenario, out.path())
            .unwrap_or_else(|e| panic!("{}: {}", scenario.name, libnvc::report::error_chain(&e)));
        let committed = trees::committed_dir().join(scenario.name);
        let differences = trees::differences(&committed, &fresh.dir).unwrap();
        assert!(
            differences.is_empty(),
            "testdata/driver-roots/{} is not what the generator makes; if the change is \
             intended, run `{REGENERATE}` and commit the result:\n{}",
            scenario.name,
            differences.join("\n")
        );
    }
}

#[test]
fn generation_is_deterministic() {
    for name in ["basic-2gpu", "broken"] {
        let scenario = trees::scenario(name).unwrap();
        need_tools(scenario, "generating twice");
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = trees::generate(scenario, a.path()).unwrap();
        let second = trees::generate(scenario, b.path()).unwrap();
        assert_eq!(
            trees::differences(&first.dir, &second.dir).unwrap(),
            Vec::<String>::new()
        );
        // Into a folder that has it already: refused, naming it.
        let err = trees::generate(scenario, a.path()).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
}

/// Every regular file of a tree, by path relative to it.
fn files(tree: &Path) -> BTreeMap<PathBuf, (bool, Vec<u8>)> {
    trees::snapshot(tree)
        .unwrap()
        .into_iter()
        .filter_map(|(p, e)| match e {
            TreeEntry::File { executable, bytes } => Some((p, (executable, bytes))),
            _ => None,
        })
        .collect()
}

#[test]
fn the_trees_are_small_and_hold_only_what_git_keeps() {
    let mut total = 0;
    for scenario in SCENARIOS {
        let dir = trees::committed_dir().join(scenario.name);
        for (path, entry) in trees::snapshot(&dir).unwrap() {
            match entry {
                TreeEntry::File { bytes, .. } => {
                    assert!(bytes.len() < 128 << 10, "{}", path.display());
                    total += bytes.len();
                }
                TreeEntry::Special => panic!("{}: git cannot hold it", path.display()),
                TreeEntry::Dir | TreeEntry::Link(_) => {}
            }
        }
    }
    assert!(total < 600 << 10, "the trees hold {total} bytes");
}

#[test]
fn elf_files_are_the_generators_tiny_ones() {
    let note = format!("nvc fake driver {VERSION}");
    let mut seen = (0, 0);
    for scenario in SCENARIOS {
        let dir = trees::committed_dir().join(scenario.name);
        for (path, (executable, bytes)) in files(&dir) {
            if !bytes.starts_with(b"\x7fELF") {
                continue;
            }
            assert!(executable, "{}", path.display());
            assert!(bytes.len() < 512, "{}", path.display());
            let info = elf::read_elf_info(&mut std::io::Cursor::new(&bytes)).unwrap();
            let want = match &info.soname {
                Some(soname) if path.to_string_lossy().contains(OLD_VERSION) => tiny_shared_object(
                    info.class,
                    soname,
                    &format!("nvc fake driver {OLD_VERSION}"),
                ),
                Some(soname) => {
                    seen.0 += 1;
                    tiny_shared_object(info.class, soname, &note)
                }
                None => {
                    seen.1 += 1;
                    let name = path.file_name().unwrap().to_string_lossy();
                    tiny_program(&format!("{name}: version {VERSION} (nvc fake driver)\n"))
                }
            };
            assert!(bytes == want, "{}/{}", scenario.name, path.display());
        }
    }
    assert!(seen.0 > 6 * 20 && seen.1 > 6 * 4, "{seen:?}");
}

#[test]
fn tiny_elf_files_read_like_real_ones() {
    for (class, machine) in [
        (ElfClass::Elf64, elf::EM_X86_64),
        (ElfClass::Elf32, elf::EM_386),
    ] {
        let bytes = tiny_shared_object(class, "libcuda.so.1", "note");
        let info = elf::read_elf_info(&mut std::io::Cursor::new(&bytes)).unwrap();
        assert_eq!(
            (
                info.class,
                info.machine,
                info.elf_type,
                info.soname.as_deref()
            ),
            (class, machine, elf::ET_DYN, Some("libcuda.so.1"))
        );
    }
    let program = tiny_program("hello\n");
    let info = elf::read_elf_info(&mut std::io::Cursor::new(&program)).unwrap();
    assert_eq!(
        (info.class, info.machine, info.elf_type, info.soname),
        (ElfClass::Elf64, elf::EM_X86_64, elf::ET_EXEC, None)
    );

    // binutils reads them too, and the program runs.
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libx.so.1");
    fs::write(&lib, tiny_shared_object(ElfClass::Elf32, "libx.so.1", "n")).unwrap();
    match Command::new("readelf").arg("-d").arg(&lib).output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("Library soname: [libx.so.1]"), "{text}");
            assert!(text.contains("Shared library: [libc.so.6]"), "{text}");
        }
        Err(e) => panic!("reading a tiny library with readelf (binutils): {e}"),
    }
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        let exe = dir.path().join("tool");
        fs::write(&exe, &program).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new(&exe).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"hello\n");
    }
}

/// The links of the sample's `/usr/local/nvidia/lib64` (driver-tree.txt), `{v}` for the
/// version.
const SAMPLE_LIB64_LINKS: &[(&str, &str)] = &[
    ("libEGL_nvidia.so", "libEGL_nvidia.so.0"),
    ("libEGL_nvidia.so.0", "libEGL_nvidia.so.{v}"),
    ("libGLESv1_CM_nvidia.so", "libGLESv1_CM_nvidia.so.1"),
    ("libGLESv1_CM_nvidia.so.1", "libGLESv1_CM_nvidia.so.{v}"),
    ("libGLESv2_nvidia.so", "libGLESv2_nvidia.so.2"),
    ("libGLESv2_nvidia.so.2", "libGLESv2_nvidia.so.{v}"),
    ("libGLX_nvidia.so", "libGLX_nvidia.so.0"),
    ("libGLX_nvidia.so.0", "libGLX_nvidia.so.{v}"),
    ("libcuda.so", "libcuda.so.1"),
    ("libcuda.so.1", "libcuda.so.{v}"),
    ("libcudadebugger.so", "libcudadebugger.so.1"),
    ("libcudadebugger.so.1", "libcudadebugger.so.{v}"),
    ("libnvcuvid.so", "libnvcuvid.so.1"),
    ("libnvcuvid.so.1", "libnvcuvid.so.{v}"),
    ("libnvidia-allocator.so", "libnvidia-allocator.so.1"),
    ("libnvidia-allocator.so.1", "libnvidia-allocator.so.{v}"),
    ("libnvidia-cfg.so", "libnvidia-cfg.so.1"),
    ("libnvidia-cfg.so.1", "libnvidia-cfg.so.{v}"),
    ("libnvidia-eglcore.so", "libnvidia-eglcore.so.{v}"),
    ("libnvidia-encode.so", "libnvidia-encode.so.1"),
    ("libnvidia-encode.so.1", "libnvidia-encode.so.{v}"),
    ("libnvidia-fbc.so", "libnvidia-fbc.so.1"),
    ("libnvidia-fbc.so.1", "libnvidia-fbc.so.{v}"),
    ("libnvidia-glcore.so", "libnvidia-glcore.so.{v}"),
    ("libnvidia-glsi.so", "libnvidia-glsi.so.{v}"),
    ("libnvidia-glvkspirv.so", "libnvidia-glvkspirv.so.{v}"),
    ("libnvidia-gpucomp.so", "libnvidia-gpucomp.so.{v}"),
    ("libnvidia-ml.so", "libnvidia-ml.so.1"),
    ("libnvidia-ml.so.1", "libnvidia-ml.so.{v}"),
    ("libnvidia-nvvm.so", "libnvidia-nvvm.so.4"),
    ("libnvidia-nvvm.so.4", "libnvidia-nvvm.so.{v}"),
    ("libnvidia-opencl.so", "libnvidia-opencl.so.1"),
    ("libnvidia-opencl.so.1", "libnvidia-opencl.so.{v}"),
    ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
    ("libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so.{v}"),
    (
        "libnvidia-pkcs11-openssl3.so",
        "libnvidia-pkcs11-openssl3.so.{v}",
    ),
    (
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-ptxjitcompiler.so.1",
    ),
    (
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-ptxjitcompiler.so.{v}",
    ),
    ("libnvidia-rtcore.so", "libnvidia-rtcore.so.{v}"),
    ("libnvidia-tls.so", "libnvidia-tls.so.{v}"),
    ("libnvoptix.so", "libnvoptix.so.1"),
    ("libnvoptix.so.1", "libnvoptix.so.{v}"),
    ("libvdpau_nvidia.so", "libvdpau_nvidia.so.1"),
    ("libvdpau_nvidia.so.1", "libvdpau_nvidia.so.{v}"),
];

/// The names the sample links from /usr/lib to `/usr/local/nvidia/lib64/<same name>`
/// (lib-links.txt): every library's development link and soname link, never the file.
fn sample_usr_lib_links() -> BTreeSet<String> {
    SAMPLE_LIB64_LINKS
        .iter()
        .map(|(l, _)| l.to_string())
        .filter(|l| !l.ends_with(".so.{v}"))
        .collect()
}

/// Every symlink directly in `dir`, name → target.
fn links_in(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.symlink_metadata().unwrap().file_type().is_symlink())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read_link(&p).unwrap().to_string_lossy().into_owned(),
            )
        })
        .collect()
}

#[test]
fn links_are_the_samples_and_resolve_inside_the_root() {
    let tree = DriverTree::committed("basic-2gpu");
    let probe = TreeProbe::new();
    let lib_dir = tree.root.join("usr/local/nvidia/lib64");
    let expected: BTreeMap<String, String> = SAMPLE_LIB64_LINKS
        .iter()
        .map(|(l, t)| (l.to_string(), t.replace("{v}", VERSION)))
        .collect();
    assert_eq!(links_in(&lib_dir), expected);
    assert_eq!(
        fs::read_link(tree.root.join("usr/local/nvidia/lib")).unwrap(),
        Path::new("lib64")
    );
    let expected: BTreeMap<String, String> = sample_usr_lib_links()
        .into_iter()
        .map(|l| {
            let target = format!("/usr/local/nvidia/lib64/{l}");
            (l.replace("{v}", VERSION), target.replace("{v}", VERSION))
        })
        .collect();
    assert_eq!(
        links_in(&tree.root.join("usr/lib/x86_64-linux-gnu")),
        expected
    );

    // Every name, through every folder, ends at the real file of its library, inside the
    // root; following the absolute links on the host would leave the tree.
    for library in DRIVER_LIBRARIES {
        let real = lib_dir.join(library.file_name(VERSION));
        let soname = library.soname(VERSION);
        let mut paths = Vec::new();
        for dir in ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"] {
            paths.push(format!("{dir}/{}", library.dev_link()));
            paths.push(format!("{dir}/{soname}"));
        }
        // /usr/lib has no link named after the versioned file (sample: libnvidia-tls.so only).
        for dir in ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"] {
            paths.push(format!("{dir}/{}", library.dev_link()));
            if soname != library.file_name(VERSION) {
                paths.push(format!("{dir}/{soname}"));
            }
        }
        for path in paths {
            let got = resolve_in_root(&probe, &tree.root, Path::new(&path)).unwrap();
            assert_eq!(got, real, "{path}");
        }
    }
    for name in DRIVER_BINARIES {
        let got = resolve_in_root(&probe, &tree.root, &Path::new("/usr/bin").join(name)).unwrap();
        assert_eq!(got, tree.root.join("usr/local/nvidia/bin").join(name));
    }
}

#[test]
fn libraries_and_programs_are_elf_with_the_real_sonames() {
    let tree = DriverTree::committed("basic-2gpu");
    let lib_dir = tree.root.join("usr/local/nvidia/lib64");
    assert_eq!(DRIVER_LIBRARIES.len(), 26);
    for library in DRIVER_LIBRARIES {
        let path = lib_dir.join(library.file_name(VERSION));
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "{}", path.display());
        assert_eq!(meta.permissions().mode() & 0o111, 0o111);
        let info = elf::read_elf_info(&mut fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(
            (info.class, info.machine, info.elf_type),
            (ElfClass::Elf64, elf::EM_X86_64, elf::ET_DYN),
            "{}",
            path.display()
        );
        assert_eq!(
            info.soname,
            Some(library.soname(VERSION)),
            "{}",
            path.display()
        );
    }
    let soname = |name: &str| {
        DRIVER_LIBRARIES
            .iter()
            .find(|l| l.name == name)
            .unwrap()
            .soname(VERSION)
    };
    // The sonames the real driver uses, spelled out.
    assert_eq!(soname("libcuda"), "libcuda.so.1");
    assert_eq!(soname("libnvidia-nvvm"), "libnvidia-nvvm.so.4");
    assert_eq!(soname("libEGL_nvidia"), "libEGL_nvidia.so.0");
    assert_eq!(soname("libGLESv2_nvidia"), "libGLESv2_nvidia.so.2");
    assert_eq!(soname("libnvidia-tls"), "libnvidia-tls.so.999.88.77");

    for name in DRIVER_BINARIES {
        let path = tree.root.join("usr/local/nvidia/bin").join(name);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o111,
            0o111,
            "{name}"
        );
        let info = elf::read_elf_info(&mut fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(
            (info.class, info.machine),
            (ElfClass::Elf64, elf::EM_X86_64)
        );
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            let out = Command::new(&path).arg("--version").output().unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("{name}: version 999.88.77 (nvc fake driver)\n")
            );
        }
    }

    // The 32-bit libraries of lib32: i386 objects, relative links.
    let lib32 = DriverTree::committed("lib32")
        .root
        .join("usr/lib/i386-linux-gnu");
    let libcuda = lib32.join("libcuda.so.999.88.77");
    let info = elf::read_elf_info(&mut fs::File::open(&libcuda).unwrap()).unwrap();
    assert_eq!(
        (info.class, info.machine, info.soname.as_deref()),
        (ElfClass::Elf32, elf::EM_386, Some("libcuda.so.1"))
    );
    assert_eq!(
        fs::read_link(lib32.join("libcuda.so.1")).unwrap(),
        Path::new("libcuda.so.999.88.77")
    );
    let n32 = fs::read_dir(&lib32)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".so.999.88.77")
        })
        .count();
    assert_eq!(n32, DRIVER_LIBRARIES.iter().filter(|l| l.lib32).count());
}

#[test]
fn ld_caches_list_the_libraries_as_seen_from_the_root() {
    let probe = TreeProbe::new();
    for scenario in SCENARIOS {
        let tree = DriverTree::committed(scenario.name);
        let bytes = fs::read(tree.root.join("etc/ld.so.cache")).unwrap();
        let cache = ldcache::parse(&bytes).unwrap();
        // libnvc's form: no generator string, the bytes its writer makes.
        assert_eq!(cache.generator, None, "{}", scenario.name);
        assert_eq!(ldcache::write(&cache.entries).unwrap(), bytes);

        if scenario.spec().wsl {
            // ld.wsl.conf's one folder (`the_wsl_tree_has_wsls_layout`).
            assert!(
                cache
                    .entries
                    .iter()
                    .all(|e| e.path.starts_with("/usr/lib/wsl/lib/")),
                "{:?}",
                cache.entries
            );
            continue;
        }
        let lib32 = scenario.spec().lib32;
        let mut entries: HashMap<(String, CacheArch), BTreeSet<String>> = HashMap::new();
        for e in &cache.entries {
            let arch = e.arch().unwrap();
            assert!(
                arch == CacheArch::X86_64 || (lib32 && arch == CacheArch::I386),
                "{}: {e:?}",
                scenario.name
            );
            entries
                .entry((e.name.clone(), arch))
                .or_default()
                .insert(e.path.clone());
            // Paths as seen from the root, never the host's.
            assert!(!e.path.contains("driver-roots"), "{e:?}");
        }
        let mut want = vec![(
            CacheArch::X86_64,
            "x86_64-linux-gnu",
            "/usr/local/nvidia/lib64/",
        )];
        if lib32 {
            want.push((CacheArch::I386, "i386-linux-gnu", ""));
        }
        for (arch, multiarch, driver_dir) in want {
            for name in ["libcuda.so.1", "libnvidia-ml.so.1"] {
                // Like the sample: the driver's folder, and the merged-/usr alias of the
                // multiarch folder that links into it.
                let mut paths = BTreeSet::from([format!("/lib/{multiarch}/{name}")]);
                if !driver_dir.is_empty() {
                    paths.insert(format!("{driver_dir}{name}"));
                }
                assert_eq!(
                    entries.get(&(name.to_string(), arch)),
                    Some(&paths),
                    "{}: {name} {arch:?}",
                    scenario.name
                );
            }
        }
        // Each soname and development link of every library is in the cache.
        for library in DRIVER_LIBRARIES {
            for name in [library.soname(VERSION), library.dev_link()] {
                assert!(
                    entries.contains_key(&(name.clone(), CacheArch::X86_64)),
                    "{}: {name}",
                    scenario.name
                );
            }
        }
        if scenario.name == "broken" {
            continue;
        }
        // Every entry ends at a library file inside the root.
        for e in &cache.entries {
            let real = resolve_in_root(&probe, &tree.root, Path::new(&e.path)).unwrap();
            let dir = match e.arch() {
                Some(CacheArch::I386) => "usr/lib/i386-linux-gnu",
                _ => "usr/local/nvidia/lib64",
            };
            assert!(
                real.starts_with(tree.root.join(dir)),
                "{}: {} -> {}",
                scenario.name,
                e.path,
                real.display()
            );
            assert!(real.is_file());
        }
    }
}

#[test]
fn devices_txt_declares_the_drivers_nodes() {
    for name in ["mig", "imex", "basic-2gpu"] {
        let scenario = trees::scenario(name).unwrap();
        let tree = DriverTree::committed(name);
        let probe = tree.probe().unwrap();
        let spec = scenario.spec();
        for node in spec.device_nodes() {
            let path = tree.dir.join(&node.path);
            assert_eq!(fs::read(&path).unwrap(), b"", "{}", path.display());
            let stat = probe.lstat(&path).unwrap();
            assert_eq!(
                (stat.kind, stat.major, stat.minor, stat.mode),
                (FileKind::CharDevice, node.major, node.minor, node.mode),
                "{}",
                path.display()
            );
        }
        let node = |rel: &str| {
            let s = probe.lstat(&tree.dir.join("dev").join(rel)).unwrap();
            ((s.major, s.minor), s.mode)
        };
        // The sample's numbers and modes.
        assert_eq!(node("nvidiactl"), ((195, 255), 0o666));
        assert_eq!(node("nvidia-uvm"), ((238, 0), 0o666));
        assert_eq!(node("nvidia-uvm-tools"), ((238, 1), 0o666));
        assert_eq!(node("nvidia-modeset"), ((195, 254), 0o666));
        assert_eq!(node("nvidia-caps/nvidia-cap1"), ((241, 1), 0o400));
        assert_eq!(node("nvidia-caps/nvidia-cap2"), ((241, 2), 0o444));
        for gpu in &spec.gpus {
            assert_eq!(
                node(&format!("nvidia{}", gpu.minor)),
                ((195, gpu.minor), 0o666)
            );
        }
        if name == "imex" {
            assert_eq!(
                node("nvidia-caps-imex-channels/channel2"),
                ((242, 2), 0o666)
            );
        }
        if name == "mig" {
            // MIG on GPU index 0 = lowest bus id = 0000:06:00.0, minor 1.
            assert_eq!(
                node(&format!(
                    "nvidia-caps/nvidia-cap{}",
                    mig_cap_minor(1, 1, Some(0))
                )),
                ((241, 3 + 135 + 9 + 1), 0o444)
            );
        }
    }
    let tree = DriverTree::committed("basic-2gpu");
    let probe = tree.probe().unwrap();
    for socket in [
        "root/run/nvidia-persistenced/socket",
        "root/run/nvidia-fabricmanager/socket",
    ] {
        let stat = probe.stat(&tree.dir.join(socket)).unwrap();
        assert_eq!(
            (stat.kind, stat.mode),
            (FileKind::Socket, 0o777),
            "{socket}"
        );
    }
}

/// `Key: value` lines of a driver proc file, in order.
fn proc_fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|l| {
            let (k, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("no colon: {l:?}"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

#[test]
fn proc_tree_has_the_drivers_formats() {
    let scenario = trees::scenario("mig").unwrap();
    let spec = scenario.spec();
    let tree = DriverTree::committed("mig");
    let nvidia = tree.proc_root.join("driver/nvidia");

    let version = fs::read_to_string(nvidia.join("version")).unwrap();
    assert!(version.starts_with(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  999.88.77  Release Build"
    ));
    assert_eq!(version.lines().count(), 2);
    let params = parse_fields(&fs::read_to_string(nvidia.join("params")).unwrap());
    assert_eq!(params["ModifyDeviceFiles"], "1");
    assert_eq!(params["DeviceFileMode"], "438");

    let mut bus_ids: Vec<String> = fs::read_dir(nvidia.join("gpus"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    bus_ids.sort();
    assert_eq!(bus_ids, ["0000:06:00.0", "0000:1a:00.0"]);
    for gpu in &spec.gpus {
        let text =
            fs::read_to_string(nvidia.join("gpus").join(&gpu.bus_id).join("information")).unwrap();
        let fields = proc_fields(&text);
        let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "Model",
                "IRQ",
                "GPU UUID",
                "Video BIOS",
                "Bus Type",
                "DMA Size",
                "DMA Mask",
                "Bus Location",
                "Device Minor",
                "GPU Firmware",
                "GPU Excluded"
            ]
        );
        let field = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(field("Model"), gpu.model);
        assert_eq!(field("GPU UUID"), gpu.uuid);
        assert_eq!(field("Bus Location"), gpu.bus_id);
        assert_eq!(field("Device Minor"), gpu.minor.to_string());
        assert_eq!(field("GPU Firmware"), VERSION);
        // Whitespace exactly as the driver prints it.
        assert!(text.starts_with(&format!("Model: \t\t {}\nIRQ:   \t\t ", gpu.model)));
        assert!(text.ends_with("GPU Excluded:\t No\n"));
    }

    let caps = nvidia.join("capabilities");
    let cap = |path: &str| proc_fields(&fs::read_to_string(caps.join(path)).unwrap());
    let expect = |minor: u32, mode: u32| {
        vec![
            ("DeviceFileMinor".to_string(), minor.to_string()),
            ("DeviceFileMode".to_string(), mode.to_string()),
            ("DeviceFileModify".to_string(), "1".to_string()),
        ]
    };
    assert_eq!(cap("mig/config"), expect(1, 256));
    assert_eq!(cap("mig/monitor"), expect(2, 292));
    let mig_caps = spec.mig_caps();
    assert_eq!(mig_caps.len(), 4);
    let mig_minors =
        fs::read_to_string(tree.proc_root.join("driver/nvidia-caps/mig-minors")).unwrap();
    for mig in &mig_caps {
        assert_eq!(mig.gpu_minor, 1, "GPU index 0 is 0000:06:00.0, minor 1");
        assert_eq!(
            cap(&mig.proc_path().to_string_lossy()),
            expect(mig.minor, 292)
        );
        let name = mig.proc_path().to_string_lossy().replace("/mig/", "/");
        assert!(
            mig_minors
                .lines()
                .any(|l| l == format!("{name} {}", mig.minor)),
            "{name} {}",
            mig.minor
        );
    }
    assert!(caps.join("gpu1/mig/gi1/ci0/access").is_file());
    assert!(!caps.join("gpu0/mig/gi1").exists());

    let devices = fs::read_to_string(tree.proc_root.join("devices")).unwrap();
    for line in [
        "195 nvidia",
        "195 nvidiactl",
        "238 nvidia-uvm",
        "241 nvidia-caps",
        "242 nvidia-caps-imex-channels",
    ] {
        assert!(devices.lines().any(|l| l.trim() == line), "{line}");
    }
    // The 110 KiB table is kept where MIG is on only.
    assert!(!DriverTree::committed("basic-2gpu")
        .proc_root
        .join("driver/nvidia-caps")
        .exists());
}

#[test]
fn support_files_are_where_the_sample_has_them() {
    let tree = DriverTree::committed("basic-2gpu");
    let root = &tree.root;
    let probe = TreeProbe::new();
    for firmware in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
        let path = format!("/lib/firmware/nvidia/999.88.77/{firmware}");
        assert!(resolve_in_root(&probe, root, Path::new(&path))
            .unwrap()
            .is_file());
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
    let conf = fs::read_to_string(root.join("etc/ld.so.conf.d/nvidia.conf")).unwrap();
    assert_eq!(conf, "/usr/local/nvidia/lib64\n/usr/local/nvidia/lib\n");
    // The merged-/usr links of Ubuntu 24.04.
    for (link, target) in [
        ("lib", "usr/lib"),
        ("bin", "usr/bin"),
        ("lib64", "usr/lib64"),
    ] {
        assert_eq!(fs::read_link(root.join(link)).unwrap(), Path::new(target));
    }
    // What the generator leaves out: the config of a temporary tree, ldconfig's aux cache.
    assert!(!tree.dir.join("config.toml").exists());
    assert!(!root.join("var/cache/ldconfig").exists());
}

#[test]
fn the_readme_describes_every_scenario() {
    let readme = fs::read_to_string(trees::committed_dir().join("README.md")).unwrap();
    assert!(
        readme.contains(REGENERATE),
        "the README must say how to regenerate"
    );
    assert!(readme.contains("NVC_BLESS=1"));
    for scenario in SCENARIOS {
        assert!(
            readme.contains(&format!("`{}`", scenario.name)),
            "the README does not describe {}",
            scenario.name
        );
    }
    // Nothing in the folder but the README, the goldens and the scenarios.
    let mut names: Vec<String> = fs::read_dir(trees::committed_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = SCENARIOS.iter().map(|s| s.name.to_string()).collect();
    want.extend(["README.md".to_string(), "golden".to_string()]);
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn the_generator_cli_writes_checks_and_refuses() {
    let exe = env!("CARGO_BIN_EXE_nvc-driver-trees");
    let run = |args: &[&str]| Command::new(exe).args(args).output().unwrap();
    let out = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["no-such-scenario"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("known: basic-2gpu, mig"));
    let imex = trees::scenario("imex").unwrap();
    need_tools(imex, "running nvc-driver-trees");
    // Writes the scenario into a folder, leaving what else is there alone.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("README.md"), "keep me\n").unwrap();
    let out = run(&["--out", dir.path().to_str().unwrap(), "imex"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        trees::differences(
            &trees::committed_dir().join("imex"),
            &dir.path().join("imex")
        )
        .unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("README.md")).unwrap(),
        "keep me\n"
    );
    // Over an old copy too; --check then finds nothing, and a change.
    let out = run(&["--out", dir.path().to_str().unwrap(), "imex"]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["--check", "--out", dir.path().to_str().unwrap(), "imex"]);
    assert!(out.status.success(), "{out:?}");
    fs::write(dir.path().join("imex/proc/devices"), "changed\n").unwrap();
    let out = run(&["--check", "--out", dir.path().to_str().unwrap(), "imex"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("imex: proc/devices: contents differ"),
        "{out:?}"
    );
    // Nothing left behind but the scenario and the README.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["README.md", "imex"]);
}

#[test]
fn the_wsl_tree_has_wsls_layout() {
    let tree = DriverTree::committed("wsl");
    let probe = tree.probe().unwrap();
    // /dev/dxg, a misc device; no kernel module of NVIDIA's.
    let dxg = probe.lstat(&tree.dir.join("dev/dxg")).unwrap();
    assert_eq!(
        (dxg.kind, dxg.major, dxg.minor, dxg.mode),
        (FileKind::CharDevice, 10, nvc_tests::DXG_MINOR, 0o666)
    );
    assert!(!tree.proc_root.join("driver/nvidia").exists());
    assert!(fs::read_to_string(tree.proc_root.join("devices"))
        .unwrap()
        .contains(" 10 misc\n"));
    // The files of both folders, with their sonames: copies of one library under several
    // names in /usr/lib/wsl/lib, the real libcuda.so.1.1 in the driver store.
    let soname = |path: &str| {
        let file = tree.root.join(path.trim_start_matches('/'));
        assert!(fs::symlink_metadata(&file).unwrap().is_file(), "{path}");
        elf::read_elf_info(&mut fs::File::open(&file).unwrap())
            .unwrap()
            .soname
    };
    let lib = nvc_tests::WSL_LIB_DIR;
    let store = nvc_tests::WSL_DRIVER_STORE;
    for (path, want) in [
        (format!("{lib}/libcuda.so"), "libcuda.so.1"),
        (format!("{lib}/libcuda.so.1"), "libcuda.so.1"),
        (format!("{lib}/libcuda.so.1.1"), "libcuda.so.1"),
        (format!("{lib}/libnvidia-ml.so.1"), "libnvidia-ml.so.1"),
        (format!("{lib}/libdxcore.so"), "libdxcore.so"),
        (format!("{store}/libcuda.so.1.1"), "libcuda.so.1"),
        (
            format!("{store}/libnvidia-ptxjitcompiler.so.1"),
            "libnvidia-ptxjitcompiler.so.1",
        ),
        (
            format!("{store}/libnvidia-nvvm.so.4"),
            "libnvidia-nvvm.so.4",
        ),
    ] {
        assert_eq!(soname(&path).as_deref(), Some(want), "{path}");
    }
    assert_eq!(soname(&format!("{store}/nvidia-smi")), None);
    // The loader's configuration names the folder, and the cache lists it.
    let conf = fs::read_to_string(tree.root.join("etc/ld.so.conf.d/ld.wsl.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "/usr/lib/wsl/lib"), "{conf}");
    let cache = ldcache::parse(&fs::read(tree.root.join("etc/ld.so.cache")).unwrap()).unwrap();
    let cuda: Vec<&str> = cache
        .entries
        .iter()
        .filter(|e| e.name == "libcuda.so.1")
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(cuda, ["/usr/lib/wsl/lib/libcuda.so.1"]);
}
