//! WSL2 discovery, selection and refusals on the committed tree
//! `testdata/driver-roots/wsl`, read through `TreeProbe`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use super::*;
use crate::caps::Capability;
use crate::discover::{discover, discover_devices};
use crate::edits::{self, ContainerLayout, EditsError, MountKind};
use crate::probe::TreeProbe;
use crate::request::{Request, RequestPolicy};

const STORE: &str = "/usr/lib/wsl/drivers/nvmdi.inf_amd64_5a1c0e9f3b7d2468";

fn tree() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/driver-roots/wsl")
}

fn roots() -> DriverRoots {
    let dir = tree();
    DriverRoots {
        root: dir.join("root"),
        dev_root: dir.clone(),
        proc_root: dir.join("proc"),
    }
}

fn probe() -> TreeProbe {
    TreeProbe::for_tree(&tree()).unwrap()
}

fn request(env: &[&str]) -> Result<Request, crate::request::RequestError> {
    let policy = RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    };
    Request::from_env(env.iter().copied(), &policy)
}

/// The container paths of the edits' mounts, as strings.
fn mounted(edits: &edits::ContainerEdits) -> Vec<String> {
    edits
        .mounts
        .iter()
        .map(|m| m.container_path.display().to_string())
        .collect()
}

#[test]
fn the_tree_is_found_as_wsl() {
    let roots = roots();
    assert!(detect(&probe(), &roots));
    let driver = discover(&roots, &probe()).unwrap();
    let wsl = driver.wsl.as_ref().unwrap();
    assert_eq!(wsl.dxg, tree().join("dev/dxg"));
    assert_eq!(wsl.lib_dir, roots.root.join("usr/lib/wsl/lib"));
    assert_eq!(
        wsl.driver_store.as_deref(),
        Some(roots.root.join(STORE.trim_start_matches('/')).as_path())
    );
    assert!(driver.gpus.is_empty());
    assert_eq!(driver.version, UNKNOWN_VERSION);
    assert!(!driver.cacheable);
    // The one node, with the numbers devices.txt gives it.
    assert_eq!(driver.control_nodes.len(), 1);
    let dxg = &driver.control_nodes[0];
    assert_eq!(dxg.path, Path::new("/dev/dxg"));
    assert_eq!((dxg.major, dxg.minor, dxg.file_mode), (10, 125, 0o666));
}

#[test]
fn the_libraries_are_found_with_their_sonames_and_folders() {
    let driver = discover(&roots(), &probe()).unwrap();
    let find = |dir: &str, name: &str| {
        driver
            .libraries
            .iter()
            .find(|l| l.container_dir.as_deref() == Some(Path::new(dir)) && l.file_name == name)
            .unwrap_or_else(|| panic!("no {dir}/{name} in {:#?}", driver.libraries))
    };
    let store_cuda = find(STORE, "libcuda.so.1.1");
    assert_eq!(store_cuda.soname, "libcuda.so.1");
    assert_eq!(store_cuda.capabilities, [Capability::Compute]);
    assert_eq!(find(LIB_DIR, "libcuda.so").soname, "libcuda.so.1");
    assert_eq!(
        find(LIB_DIR, "libnvidia-ml.so.1").soname,
        "libnvidia-ml.so.1"
    );
    assert_eq!(
        find(STORE, "libnvidia-nvvm.so.4").soname,
        "libnvidia-nvvm.so.4"
    );
    assert_eq!(find(LIB_DIR, "libdxcore.so").capabilities.len(), 4);
    // The driver store first: the loader takes the first libcuda.so.1 in the cache.
    assert_eq!(
        driver.libraries[0].container_dir.as_deref(),
        Some(Path::new(STORE))
    );
    // The Windows files of the package are not the container's.
    assert!(driver.libraries.iter().all(|l| l.file_name.contains(".so")));
    // One nvidia-smi, on the PATH; nvcubins.bin where the driver store has it.
    assert_eq!(driver.binaries.len(), 1);
    assert_eq!(
        driver.binaries[0].container_path,
        Path::new(SMI_IN_CONTAINER)
    );
    assert_eq!(
        driver.files[0].container_path,
        Path::new(STORE).join("nvcubins.bin")
    );
}

#[test]
fn the_runtime_reads_only_the_node() {
    let driver = discover_devices(&roots(), &probe()).unwrap();
    assert!(driver.wsl.is_some());
    assert_eq!(driver.control_nodes.len(), 1);
    assert!(driver.libraries.is_empty() && driver.binaries.is_empty());
}

#[test]
fn all_gives_dxg_both_folders_and_their_cache() {
    let driver = discover(&roots(), &probe()).unwrap();
    let req = request(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=all",
    ])
    .unwrap();
    let e = edits::compute(&driver, &req, &ContainerLayout::default()).unwrap();
    let nodes: Vec<_> = e.device_nodes.iter().map(|n| n.path.clone()).collect();
    assert_eq!(nodes, [PathBuf::from("/dev/dxg")]);
    let paths = mounted(&e);
    for want in [
        format!("{STORE}/libcuda.so.1.1"),
        format!("{STORE}/nvcubins.bin"),
        format!("{LIB_DIR}/libcuda.so.1"),
        format!("{LIB_DIR}/libdxcore.so"),
        format!("{LIB_DIR}/libd3d12.so"),
        SMI_IN_CONTAINER.to_string(),
    ] {
        assert!(paths.contains(&want), "{want} not in {paths:#?}");
    }
    // Nothing goes to the image's own library folder.
    assert!(paths
        .iter()
        .all(|p| !p.starts_with("/usr/lib/x86_64-linux-gnu")));
    assert!(e
        .mounts
        .iter()
        .all(|m| m.options.contains(&"ro".to_string())));
    assert_eq!(
        e.ldcache_dirs,
        [PathBuf::from(STORE), PathBuf::from(LIB_DIR)]
    );
    // libcuda.so.1 -> libcuda.so.1.1 in the driver store; no link over a file.
    let links: Vec<_> = e
        .symlinks
        .iter()
        .map(|s| (s.link.display().to_string(), s.target.clone()))
        .collect();
    assert!(links.contains(&(
        format!("{STORE}/libcuda.so.1"),
        "libcuda.so.1.1".to_string()
    )));
    assert!(links.iter().all(|(l, _)| !paths.contains(l)), "{links:?}");
    assert!(e.visible_gpus.is_empty());
}

#[test]
fn capabilities_select_the_libraries() {
    let driver = discover(&roots(), &probe()).unwrap();
    let req = request(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
    ])
    .unwrap();
    let e = edits::compute(&driver, &req, &ContainerLayout::default()).unwrap();
    let paths = mounted(&e);
    assert!(paths.contains(&format!("{LIB_DIR}/libnvidia-ml.so.1")));
    assert!(paths.contains(&format!("{LIB_DIR}/libdxcore.so")));
    assert!(paths.contains(&SMI_IN_CONTAINER.to_string()));
    assert!(!paths.iter().any(|p| p.contains("libcuda")), "{paths:#?}");
    assert!(!paths.iter().any(|p| p.contains("libd3d12")), "{paths:#?}");
    let req = request(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute",
    ])
    .unwrap();
    let e = edits::compute(&driver, &req, &ContainerLayout::default()).unwrap();
    let paths = mounted(&e);
    assert!(paths.contains(&format!("{STORE}/libnvidia-ptxjitcompiler.so.1")));
    assert!(
        !paths.iter().any(|p| p.contains("libnvidia-ml")),
        "{paths:#?}"
    );
    assert!(e.mounts.iter().all(|m| m.kind != MountKind::Binary));
}

#[test]
fn one_gpu_is_refused_saying_what_to_do() {
    let driver = discover(&roots(), &probe()).unwrap();
    for devices in [
        "0",
        "GPU-00000000-0000-0000-0000-000000000000",
        "0,1",
        "0:0",
    ] {
        let req = request(&[&format!("NVIDIA_VISIBLE_DEVICES={devices}")]).unwrap();
        let err = edits::compute(&driver, &req, &ContainerLayout::default()).unwrap_err();
        assert!(
            matches!(err, EditsError::WslCannotIsolate { .. }),
            "{devices}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("WSL cannot give a container one GPU"),
            "{text}"
        );
        assert!(text.contains("NVIDIA_VISIBLE_DEVICES=all"), "{text}");
    }
}

#[test]
fn none_and_void_behave_as_everywhere() {
    let driver = discover(&roots(), &probe()).unwrap();
    let void = request(&["NVIDIA_VISIBLE_DEVICES=void"]).unwrap();
    assert!(edits::compute(&driver, &void, &ContainerLayout::default())
        .unwrap()
        .is_empty());
    // `none`: the driver's files, and no device: /dev/dxg would be every GPU.
    let none = request(&["NVIDIA_VISIBLE_DEVICES=none"]).unwrap();
    let e = edits::compute(&driver, &none, &ContainerLayout::default()).unwrap();
    assert!(!e.mounts.is_empty());
    assert!(e.device_nodes.is_empty(), "{:?}", e.device_nodes);
}

#[test]
fn a_linux_driver_is_not_wsl() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/driver-roots/basic-2gpu");
    let probe = TreeProbe::for_tree(&dir).unwrap();
    let roots = DriverRoots {
        root: dir.join("root"),
        dev_root: dir.clone(),
        proc_root: dir.join("proc"),
    };
    assert!(!detect(&probe, &roots));
    assert!(discover(&roots, &probe).unwrap().wsl.is_none());
}
