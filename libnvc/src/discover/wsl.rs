//! WSL2: the NVIDIA driver as Windows lends it to a Linux guest.
//!
//! There is no kernel module of NVIDIA's here: no `/dev/nvidia*`, no `/proc/driver/nvidia`.
//! The GPUs are reached through one character device, `/dev/dxg` (the `dxgkrnl` misc
//! device, major 10), that stands for every GPU the host lends: WSL cannot give a
//! container one GPU and not another. The user-space driver is in two folders the host
//! mounts read-only:
//!
//! - `/usr/lib/wsl/lib`: `libcuda.so.1` and its names, `libdxcore.so`, `libd3d12*.so`,
//!   `libnvidia-ml.so.1`, the video and OptiX libraries, `nvidia-smi`;
//! - the driver store, `/usr/lib/wsl/drivers/<nv….inf_amd64_<hash>>/`: the real
//!   `libcuda.so.1.1` that the first one loads, its loader and JIT libraries,
//!   `nvcubins.bin` and another `nvidia-smi`.
//!
//! A container gets both folders' driver files at the same paths, read-only, with a
//! `libcuda.so.1 -> libcuda.so.1.1` link in the driver store folder, both folders in its
//! ld.so.cache, and `nvidia-smi` on its PATH. WSL is recognised without configuration:
//! `<dev-root>/dev/dxg` and `<root>/usr/lib/wsl/lib` are there, and no
//! `<proc-root>/driver/nvidia/version`.

use std::path::{Path, PathBuf};

use log::{debug, warn};
use serde::Serialize;

use super::driver_root::join_under;
use super::{
    nodes, DiscoverError, Driver, DriverRoots, HostFile, LibClass, Library, MigUuids, Scope,
};
use crate::caps::Capability;
use crate::elf::{self, ElfClass};
use crate::probe::{FileKind, HostProbe};

/// The GPU paravirtualisation device, as the container sees it.
pub const DXG: &str = "/dev/dxg";
/// The folder of the WSL user-space driver, as the host and the container see it.
pub const LIB_DIR: &str = "/usr/lib/wsl/lib";
/// The folder of the driver stores, one folder per installed Windows driver package.
pub const DRIVERS_DIR: &str = "/usr/lib/wsl/drivers";
/// Where the driver's `nvidia-smi` goes in the container.
pub const SMI_IN_CONTAINER: &str = "/usr/bin/nvidia-smi";
/// What stands for the driver version: WSL's files carry none (the Windows driver's
/// version is NVML's to tell).
pub const UNKNOWN_VERSION: &str = "unknown";

/// What is WSL's own in a [`Driver`] found on WSL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wsl {
    /// `/dev/dxg` on the host (under the dev root).
    pub dxg: PathBuf,
    /// `/usr/lib/wsl/lib` on the host (under the driver root).
    pub lib_dir: PathBuf,
    /// The NVIDIA driver store folder on the host, when there is one.
    pub driver_store: Option<PathBuf>,
}

/// What a file of the two folders is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A shared object.
    Library,
    /// A program: goes on the container's PATH.
    Program,
    /// A data file the libraries read (`nvcubins.bin`).
    Data,
}

/// Where a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Folder {
    Lib,
    Store,
}

/// The driver's files in the two folders, by name, with their capabilities; a file not
/// named here (the Windows files of the driver store, other vendors' libraries) is left
/// out. The names of NVIDIA's Windows drivers as NVIDIA's Container Toolkit and listings
/// of WSL2 hosts give them.
const FILES: &[(Folder, &str, Kind, &[Capability])] = {
    use Capability::{Compute, Graphics, Utility, Video};
    use Folder::{Lib, Store};
    use Kind::{Data, Library, Program};
    &[
        // DirectX's core, which every NVIDIA library here talks to /dev/dxg through.
        (
            Lib,
            "libdxcore.so",
            Library,
            &[Utility, Compute, Video, Graphics],
        ),
        (Lib, "libcuda.so", Library, &[Compute]),
        (Lib, "libcuda.so.1", Library, &[Compute]),
        (Lib, "libcuda.so.1.1", Library, &[Compute]),
        (Lib, "libnvidia-ml.so.1", Library, &[Utility]),
        (Lib, "libnvidia-ml.so", Library, &[Utility]),
        (Lib, "libnvidia-encode.so.1", Library, &[Video]),
        (Lib, "libnvidia-encode.so", Library, &[Video]),
        (Lib, "libnvcuvid.so.1", Library, &[Video]),
        (Lib, "libnvcuvid.so", Library, &[Video]),
        (Lib, "libnvoptix.so.1", Library, &[Graphics]),
        (Lib, "libnvoptix_loader.so.1", Library, &[Graphics]),
        (Lib, "libd3d12.so", Library, &[Graphics]),
        (Lib, "libd3d12core.so", Library, &[Graphics]),
        (Lib, "nvidia-smi", Program, &[Utility]),
        (Store, "libcuda.so.1.1", Library, &[Compute]),
        (Store, "libcuda_loader.so", Library, &[Compute]),
        (Store, "libnvdxgdmal.so.1", Library, &[Compute]),
        (Store, "libnvidia-gpucomp.so", Library, &[Compute]),
        (Store, "libnvidia-nvvm.so.4", Library, &[Compute]),
        (Store, "libnvidia-ptxjitcompiler.so.1", Library, &[Compute]),
        (Store, "libnvidia-ml.so.1", Library, &[Utility]),
        (Store, "libnvidia-ml_loader.so", Library, &[Utility]),
        (Store, "libnvwgf2umx.so", Library, &[Graphics]),
        (Store, "nvcubins.bin", Data, &[Compute]),
        (Store, "nvidia-smi", Program, &[Utility]),
    ]
};

/// Whether the roots hold a WSL driver: `/dev/dxg` under the dev root and
/// `/usr/lib/wsl/lib` under the driver root. A kernel module's version file wins: a
/// host with both is an ordinary Linux host.
pub fn detect(probe: &dyn HostProbe, roots: &DriverRoots) -> bool {
    let is = |path: &Path, kind: FileKind| probe.stat(path).is_ok_and(|s| s.kind == kind);
    is(&dxg_path(roots), FileKind::CharDevice)
        && is(&join_under(&roots.root, Path::new(LIB_DIR)), FileKind::Dir)
        && probe.lstat(&roots.nvidia_proc().join("version")).is_err()
}

fn dxg_path(roots: &DriverRoots) -> PathBuf {
    join_under(&roots.dev_root, Path::new(DXG))
}

/// The driver store folder under `<root>/usr/lib/wsl/drivers`: the one whose name starts
/// with `nv` and that holds `libcuda.so.1.1`, first by name when there are several.
pub fn driver_store(probe: &dyn HostProbe, root: &Path) -> Option<PathBuf> {
    let drivers = join_under(root, Path::new(DRIVERS_DIR));
    let mut names: Vec<String> = probe
        .read_dir(&drivers)
        .ok()?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.starts_with("nv") && n.contains(".inf_amd64_"))
        .collect();
    names.sort();
    names.into_iter().map(|n| drivers.join(n)).find(|dir| {
        probe
            .stat(&dir.join("libcuda.so.1.1"))
            .is_ok_and(|s| s.kind == FileKind::File)
    })
}

/// Reads the WSL driver under `roots`: `/dev/dxg` (its real numbers), and for
/// [`Scope::Full`] the files of the two folders.
pub fn discover(
    probe: &dyn HostProbe,
    roots: &DriverRoots,
    scope: Scope,
) -> Result<Driver, DiscoverError> {
    let dxg_host = dxg_path(roots);
    let dxg =
        nodes::host_node(probe, &roots.dev_root, "dxg").ok_or_else(|| DiscoverError::NoDriver {
            reason: format!("{} is not a character device", dxg_host.display()),
            root: roots.root.clone(),
            proc_root: roots.proc_root.clone(),
        })?;
    let lib_dir = join_under(&roots.root, Path::new(LIB_DIR));
    let store = driver_store(probe, &roots.root);
    if store.is_none() {
        warn!(
            "no NVIDIA driver store with libcuda.so.1.1 under {}: CUDA will not load",
            join_under(&roots.root, Path::new(DRIVERS_DIR)).display()
        );
    }
    let mut driver = Driver {
        roots: roots.clone(),
        version: UNKNOWN_VERSION.to_string(),
        gpus: Vec::new(),
        libraries: Vec::new(),
        binaries: Vec::new(),
        firmware: Vec::new(),
        files: Vec::new(),
        ipc: Vec::new(),
        control_nodes: vec![dxg],
        mig_config: None,
        mig_monitor: None,
        imex_channels: Vec::new(),
        known_cuda_version: None,
        cacheable: false,
        version_from_proc: false,
        wsl: Some(Wsl {
            dxg: dxg_host,
            lib_dir: lib_dir.clone(),
            driver_store: store.clone(),
        }),
        mig_uuids: MigUuids::NotAsked,
    };
    if scope == Scope::Devices {
        return Ok(driver);
    }
    // The driver store first: its libcuda.so.1 is the one the loader wants.
    let folders = [
        (Folder::Store, store.as_deref()),
        (Folder::Lib, Some(&*lib_dir)),
    ];
    for (folder, host_dir) in folders {
        let Some(host_dir) = host_dir else { continue };
        let Some(container_dir) = in_container(&roots.root, host_dir) else {
            continue;
        };
        for (_, name, kind, caps) in FILES.iter().filter(|f| f.0 == folder) {
            let host_path = host_dir.join(name);
            match probe.stat(&host_path) {
                Ok(s) if s.kind == FileKind::File => {}
                _ => continue,
            }
            let capabilities = caps.to_vec();
            match kind {
                Kind::Library => match library(probe, &host_path, name) {
                    Some((stem, soname)) => driver.libraries.push(Library {
                        capabilities,
                        class: LibClass::Lib64,
                        // `library` takes only x86-64 objects: WSL2's driver is x86-64's.
                        arch: elf::Arch::X86_64,
                        stem,
                        soname,
                        host_path,
                        file_name: name.to_string(),
                        container_dir: Some(container_dir.clone()),
                    }),
                    None => continue,
                },
                // One nvidia-smi on the PATH: the first found, /usr/lib/wsl/lib's where
                // the driver store has none.
                Kind::Program => {
                    if driver
                        .binaries
                        .iter()
                        .all(|b| b.container_path != Path::new(SMI_IN_CONTAINER))
                    {
                        driver.binaries.push(HostFile {
                            capabilities,
                            host_path,
                            container_path: PathBuf::from(SMI_IN_CONTAINER),
                        });
                    }
                }
                Kind::Data => driver.files.push(HostFile {
                    capabilities,
                    host_path,
                    container_path: container_dir.join(name),
                }),
            }
        }
    }
    Ok(driver)
}

/// The container path of the host folder `dir` under `root`: the same path.
fn in_container(root: &Path, dir: &Path) -> Option<PathBuf> {
    let rel = dir.strip_prefix(root).ok()?;
    Some(Path::new("/").join(rel))
}

/// The stem and soname of the 64-bit shared object at `path` (named `name`); `None`, with
/// a warning, when it is not one. A library without a soname is known by its name.
fn library(probe: &dyn HostProbe, path: &Path, name: &str) -> Option<(String, String)> {
    let info = probe
        .open(path)
        .map_err(|source| elf::ElfError::Open {
            path: path.to_path_buf(),
            source,
        })
        .and_then(|file| elf::read_elf_info_file(file, path));
    let info = match info {
        Ok(info) => info,
        Err(e) => {
            warn!("skipping {}: {e}", path.display());
            return None;
        }
    };
    if info.class != ElfClass::Elf64
        || info.machine != elf::EM_X86_64
        || info.elf_type != elf::ET_DYN
    {
        warn!("skipping {}: not a 64-bit shared object", path.display());
        return None;
    }
    let stem = name.split_once(".so").map_or(name, |(s, _)| s).to_string();
    let soname = info.soname.unwrap_or_else(|| name.to_string());
    debug!("{}: soname {soname}", path.display());
    Some((stem, soname))
}

#[cfg(test)]
mod tests;
