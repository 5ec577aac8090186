//! Discovery: what the host's driver provides, read once into one [`Driver`] value.
//!
//! Everything is read under the configured roots ([`DriverRoots`]): libraries through
//! `<root>/etc/ld.so.cache`, binaries, firmware and json files under `<root>`, device
//! nodes under `<dev-root>/dev`, the GPU inventory under `<proc-root>/driver/nvidia`.
//! Nothing is read from the real host when the roots point elsewhere. NVML is asked,
//! through the probe, only for what only it knows: the MIG devices' UUIDs when a request
//! names one by UUID ([`DeviceNeeds::mig_uuids`], `mig_uuids.rs`), and on demand
//! [`Driver::gpu_details`].

pub mod driver_root;
mod files;
pub mod files_cache;
mod gpu_details;
mod mig_uuids;
mod nodes;
pub mod proc;
pub mod tables;
pub mod wsl;

pub use nodes::read_majors;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::caps::Capability;
use crate::elf::Arch;
use crate::version::Version;

pub use files_cache::{DriverFiles, FilesCache};
pub use gpu_details::GpuDetails;
pub use mig_uuids::{parse_mig_devices, render_mig_devices, BadMigLine, NvmlMigDevice};
pub use nodes::DeviceNode;
pub use proc::GpuInventory;

use crate::probe::{self as host, HostProbe, ProbeError};

/// The roots discovery reads from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverRoots {
    /// Where the driver's user-space files are.
    pub root: PathBuf,
    /// Device nodes are `<dev_root>/dev/nvidia*`.
    pub dev_root: PathBuf,
    /// The GPU inventory is `<proc_root>/driver/nvidia`.
    pub proc_root: PathBuf,
}

impl DriverRoots {
    /// The roots named by a configuration.
    pub fn from_config(config: &nvc_config::DriverConfig) -> Self {
        DriverRoots {
            root: config.root.clone(),
            dev_root: config.dev_root.clone(),
            proc_root: config.proc_root.clone(),
        }
    }

    /// `<proc_root>/driver/nvidia`.
    pub fn nvidia_proc(&self) -> PathBuf {
        self.proc_root.join("driver/nvidia")
    }
}

/// Everything the host's driver provides.
#[derive(Debug, Clone, Serialize)]
pub struct Driver {
    /// The roots this was read from.
    pub roots: DriverRoots,
    /// The driver version, such as `580.159.04`.
    pub version: String,
    /// The GPUs, in PCI bus order: `gpus[i].index == i`.
    pub gpus: Vec<Gpu>,
    /// Driver libraries, 64-bit first, each once.
    pub libraries: Vec<Library>,
    /// Driver binaries.
    pub binaries: Vec<HostFile>,
    /// GSP firmware files.
    pub firmware: Vec<HostFile>,
    /// Loader configuration (Vulkan ICD, EGL vendor, implicit layers) and other files.
    pub files: Vec<HostFile>,
    /// IPC sockets and pipe directories.
    pub ipc: Vec<HostFile>,
    /// `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`.
    pub control_nodes: Vec<DeviceNode>,
    /// The MIG `config` capability node, when the driver has one.
    pub mig_config: Option<DeviceNode>,
    /// The MIG `monitor` capability node, when the driver has one.
    pub mig_monitor: Option<DeviceNode>,
    /// IMEX channel nodes, by channel number.
    pub imex_channels: Vec<DeviceNode>,
    /// What [`Driver::cuda_version`] answers without loading libcuda: the version an
    /// earlier start had libcuda report, kept with the files in the [`FilesCache`].
    #[serde(skip)]
    pub known_cuda_version: Option<i32>,
    /// Whether the files came from, or went to, a [`FilesCache`], which then keeps the
    /// CUDA version too ([`Driver::files`]).
    #[serde(skip)]
    pub cacheable: bool,
    /// Whether the version came from the kernel module's proc file (else from the
    /// libraries).
    #[serde(skip)]
    pub version_from_proc: bool,
    /// What a WSL2 driver has of its own (`/dev/dxg`, its folders); `None` elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wsl: Option<wsl::Wsl>,
    /// Whether NVML was asked for the MIG devices' UUIDs ([`MigDevice::uuid`]), and how
    /// that went.
    #[serde(skip)]
    pub mig_uuids: MigUuids,
}

/// Whether discovery asked NVML for the MIG devices' UUIDs ([`DeviceNeeds::mig_uuids`]).
#[derive(Debug, Clone, Default)]
pub enum MigUuids {
    /// Not asked: nothing needed them, or no GPU has a MIG device.
    #[default]
    NotAsked,
    /// Asked: each MIG device NVML reported has its UUID.
    Known,
    /// NVML could not answer (no libnvidia-ml, or it failed): no MIG device has a UUID.
    Unknown(Arc<ProbeError>),
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Its place in PCI bus order, as nvidia-smi numbers it.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// `0000:06:00.0`.
    pub bus_id: String,
    /// The `N` of `/dev/nvidiaN`; need not equal `index`.
    pub minor: u32,
    /// The model name.
    pub model: String,
    /// `/dev/nvidia<minor>`.
    pub node: DeviceNode,
    /// MIG devices, when the GPU is in MIG mode.
    pub mig: Vec<MigDevice>,
}

/// One MIG device (a compute instance inside a GPU instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDevice {
    /// Its number within the parent GPU, in (gi, ci) order.
    pub index: u32,
    /// The GPU instance id.
    pub gi: u32,
    /// The compute instance id.
    pub ci: u32,
    /// The capability nodes that grant it: the gi's and the ci's `access`.
    pub caps: Vec<DeviceNode>,
    /// Its UUID (`MIG-…`, lowercase), as NVML reports it: only when discovery asked NVML
    /// ([`DeviceNeeds::mig_uuids`], [`Driver::mig_uuids`]).
    pub uuid: Option<String>,
}

/// Whether a library is the 64-bit or the 32-bit build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LibClass {
    /// The native 64-bit build.
    Lib64,
    /// The 32-bit build (capability `compat32`).
    Lib32,
}

/// One driver library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Library {
    /// The capabilities it belongs to.
    pub capabilities: Vec<Capability>,
    /// The architecture of the driver it is a build of, as its ELF header says
    /// (`Lib32`: that architecture's 32-bit build, i386 for x86-64).
    pub arch: Arch,
    /// 64- or 32-bit.
    pub class: LibClass,
    /// `libcuda`.
    pub stem: String,
    /// Its soname, such as `libcuda.so.1`.
    pub soname: String,
    /// The real file on the host (links resolved), such as
    /// `/usr/local/nvidia/lib64/libcuda.so.580.159.04`.
    pub host_path: PathBuf,
    /// The real file's name, such as `libcuda.so.580.159.04`.
    pub file_name: String,
    /// The container folder it goes into when that is not the image's library folder:
    /// on WSL, the library's own folder. `None`: the image's folder for its class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_dir: Option<PathBuf>,
}

/// A driver file other than a library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFile {
    /// The capabilities that get it; empty means every GPU container.
    pub capabilities: Vec<Capability>,
    /// The file on the host.
    pub host_path: PathBuf,
    /// Where it goes in the container.
    pub container_path: PathBuf,
}

impl HostFile {
    /// Whether a container with `caps` gets this file.
    pub fn wanted_by(&self, caps: crate::caps::CapabilitySet) -> bool {
        self.capabilities.is_empty() || self.capabilities.iter().any(|c| caps.contains(*c))
    }
}

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// No driver at the configured roots.
    #[error("no NVIDIA driver found: {reason} (driver root {root}, proc root {proc_root}); install the driver or point [driver] in the nvc config at it")]
    NoDriver {
        /// What is missing.
        reason: String,
        /// The driver root looked at.
        root: PathBuf,
        /// The proc root looked at.
        proc_root: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A proc file lacks what it should hold.
    #[error("unexpected contents in {path}: {what}")]
    BadProcFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The driver root's ld.so.cache could not be read.
    #[error("cannot read the driver root's library cache")]
    LdCache(#[source] crate::ldcache::LdCacheError),
}

impl DiscoverError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        DiscoverError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// How much of the driver to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything: what the hook mounts and what `nvc list` shows.
    Full,
    /// The GPUs and device nodes only, which is all the runtime shim puts into a spec:
    /// no library cache, no ELF header, no file search.
    Devices,
}

/// NVML's soname, as the driver's ld.so.cache lists it.
const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// Reads everything the driver provides under `roots`.
pub fn discover(roots: &DriverRoots, probe: &dyn HostProbe) -> Result<Driver, DiscoverError> {
    discover_scope(roots, probe, Scope::Full)
}

/// Reads the GPUs and device nodes under `roots`; the file lists stay empty.
pub fn discover_devices(
    roots: &DriverRoots,
    probe: &dyn HostProbe,
) -> Result<Driver, DiscoverError> {
    discover_scope(roots, probe, Scope::Devices)
}

/// What a container start reads of the devices beyond its GPUs' proc files and the
/// control nodes: only what its request can use ([`DeviceNeeds::of`]). Every other
/// reader (`nvc list`, CDI generation, `nvc check`) reads it all ([`DeviceNeeds::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNeeds {
    /// Each GPU's MIG instances (`capabilities/gpu<N>/mig`, five reads a GPU): only a
    /// request that names a MIG device selects one.
    pub mig_devices: bool,
    /// The MIG devices' UUIDs, which only NVML knows (it is loaded, or a helper program
    /// run, and it opens the GPUs): only a request that names a MIG device by its UUID
    /// (`MIG-<uuid>`) needs them. Read only with `mig_devices`.
    pub mig_uuids: bool,
    /// The MIG `config` and `monitor` capability nodes.
    pub mig_caps: bool,
    /// The IMEX channel nodes.
    pub imex_channels: bool,
}

impl DeviceNeeds {
    /// Everything.
    pub const ALL: DeviceNeeds = DeviceNeeds {
        mig_devices: true,
        mig_uuids: true,
        mig_caps: true,
        imex_channels: true,
    };

    /// What `request` can use: its edits ([`crate::edits::build`]) read nothing else.
    pub fn of(request: &crate::request::Request) -> DeviceNeeds {
        use crate::request::{ChannelSelection, DeviceSelection};
        let asked = |s: &DeviceSelection| {
            !matches!(s, DeviceSelection::NotRequested | DeviceSelection::None)
        };
        let selections = [&request.devices, &request.mig_config, &request.mig_monitor];
        DeviceNeeds {
            mig_devices: selections
                .into_iter()
                .any(DeviceSelection::names_mig_device),
            mig_uuids: selections.into_iter().any(DeviceSelection::names_mig_uuid),
            mig_caps: asked(&request.mig_config) || asked(&request.mig_monitor),
            imex_channels: request.imex_channels != ChannelSelection::None,
        }
    }
}

/// How [`discover_with`] reads: the scope, the files cache, the device needs, and the
/// nodes the spec already gives the container.
#[derive(Clone, Copy)]
pub struct Reading<'a> {
    /// How much of the driver.
    pub scope: Scope,
    /// Where the driver's files may come from ([`discover_cached`]).
    pub cache: Option<&'a dyn FilesCache>,
    /// Which of the optional devices.
    pub needs: DeviceNeeds,
    /// The spec's `linux.devices` (path, major, minor), whose nodes the runtime makes
    /// as the spec says: a node with one of these paths is taken from here instead of
    /// the host ([`DeviceNode::in_spec`]). Empty: every node is read from the host.
    pub in_spec: &'a [(PathBuf, u32, u32)],
    /// GPUs read moments ago by another process of the same start (the runtime shim,
    /// for its hook): taken instead of the proc files when their driver is the version
    /// the kernel module reports now.
    pub gpus: Option<&'a GpuInventory>,
}

impl<'a> Reading<'a> {
    /// Everything `scope` covers, from the host, with `cache`.
    pub fn all(scope: Scope, cache: Option<&'a dyn FilesCache>) -> Reading<'a> {
        Reading {
            scope,
            cache,
            needs: DeviceNeeds::ALL,
            in_spec: &[],
            gpus: None,
        }
    }
}

/// Reads what `scope` asks for under `roots`, through `probe`.
pub fn discover_scope(
    roots: &DriverRoots,
    probe: &dyn HostProbe,
    scope: Scope,
) -> Result<Driver, DiscoverError> {
    discover_cached(roots, probe, scope, None)
}

/// [`discover_scope`], taking the driver's files (libraries, binaries, firmware, loader
/// configuration: the costly part, which changes only when the driver is installed
/// anew) from `cache` when it has them for this driver version, and giving them to it
/// when it had not. The GPUs, device nodes and IPC endpoints are always read afresh.
/// Without a kernel module's version file nothing is cached: the version then comes
/// from the very libraries the cache would stand for.
pub fn discover_cached(
    roots: &DriverRoots,
    probe: &dyn HostProbe,
    scope: Scope,
    cache: Option<&dyn FilesCache>,
) -> Result<Driver, DiscoverError> {
    discover_with(roots, probe, &Reading::all(scope, cache))
}

/// [`discover_cached`] as `reading` says: the devices a request cannot use are left
/// out (empty), and the nodes the spec has are not read from the host.
pub fn discover_with(
    roots: &DriverRoots,
    probe: &dyn HostProbe,
    reading: &Reading<'_>,
) -> Result<Driver, DiscoverError> {
    let Reading {
        scope,
        cache,
        needs,
        in_spec,
        gpus: known_gpus,
    } = *reading;
    // Resolving each driver path walks the same folders again: ask the host once each.
    let memo = host::MemoProbe::new(probe);
    let probe: &dyn HostProbe = &memo;
    let nvidia = roots.nvidia_proc();
    let proc_version = match host::read_text(probe, &nvidia.join("version")) {
        Ok(text) => proc::parse_version_file(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(DiscoverError::io("read", &nvidia.join("version"), e)),
    };
    // WSL2: no kernel module of NVIDIA's, /dev/dxg and /usr/lib/wsl instead.
    if proc_version.is_none() && wsl::detect(probe, roots) {
        return wsl::discover(probe, roots, scope);
    }
    let full = scope == Scope::Full;
    let files_cache = cache.filter(|_| full);
    let cached = match (files_cache, &proc_version) {
        (Some(c), Some(v)) => c.load(roots, v).filter(|f| f.version == *v),
        _ => None,
    };
    // The library cache is read for the files, or for the version when the kernel
    // module's proc file is missing.
    let cache = if (full && cached.is_none()) || proc_version.is_none() {
        files::read_ldcache(probe, &roots.root)?
    } else {
        None
    };
    let from_proc = proc_version.is_some();
    // GPUs read for this very driver need not be read again.
    let known = known_gpus.filter(|k| proc_version.as_ref() == Some(&k.driver));
    let version = match proc_version
        .or_else(|| files::version_from_libraries(probe, &roots.root, cache.as_ref()))
    {
        Some(v) => v,
        None => {
            return Err(DiscoverError::NoDriver {
                reason: format!(
                    "neither {} nor libcuda/libnvidia-ml in {} exist",
                    nvidia.join("version").display(),
                    roots.root.join("etc/ld.so.cache").display()
                ),
                root: roots.root.clone(),
                proc_root: roots.proc_root.clone(),
            })
        }
    };
    let nodes = nodes::Nodes::new(probe, roots, in_spec);
    let proc_gpus = match known {
        Some(known) => known.gpus.clone(),
        None => proc::read_gpus(probe, &nvidia)?,
    };
    let mut gpus: Vec<Gpu> = proc_gpus
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let node = nodes.gpu(g.minor);
            let instances = match needs.mig_devices {
                true => proc::read_mig_instances(probe, &nvidia, g.minor),
                false => Vec::new(),
            };
            let mig = instances
                .into_iter()
                .enumerate()
                .map(|(n, (gi, ci, gi_minor, ci_minor))| MigDevice {
                    index: n as u32,
                    gi,
                    ci,
                    caps: [gi_minor, ci_minor]
                        .into_iter()
                        .filter_map(|m| nodes.cap(m))
                        .collect(),
                    uuid: None,
                })
                .collect();
            Gpu {
                index: i as u32,
                uuid: g.uuid,
                bus_id: g.bus_id,
                minor: g.minor,
                model: g.model,
                node,
                mig,
            }
        })
        .collect();
    let cap_node = |name: &str| {
        let path = nvidia.join("capabilities/mig").join(name);
        needs
            .mig_caps
            .then(|| proc::read_cap_minor(probe, &path))?
            .and_then(|minor| nodes.cap(minor))
    };
    let driver_files = match cached {
        Some(found) => found,
        None if full => {
            let libraries = files::libraries(probe, &roots.root, cache.as_ref(), &version);
            let arch = files::arch_of(&libraries);
            let found = DriverFiles {
                version: version.clone(),
                libraries,
                binaries: files::binaries(probe, &roots.root, arch),
                firmware: files::firmware(probe, &roots.root, &version),
                files: files::config_files(probe, &roots.root, &version),
                cuda_version: None,
            };
            if let (Some(c), true) = (files_cache, from_proc) {
                c.store(roots, &found);
            }
            found
        }
        None => DriverFiles {
            version: version.clone(),
            ..DriverFiles::default()
        },
    };
    let cacheable = files_cache.is_some() && from_proc;
    let asks_nvml = needs.mig_devices && needs.mig_uuids && gpus.iter().any(|g| !g.mig.is_empty());
    let mig_uuids = match asks_nvml {
        true => {
            // The files found it, when they were read; else the driver root's cache.
            let nvml = match driver_files
                .libraries
                .iter()
                .find(|l| l.stem == "libnvidia-ml" && l.class == LibClass::Lib64)
            {
                Some(lib) => Ok(lib.host_path.clone()),
                None => files::library_path(probe, &roots.root, cache.as_ref(), NVML_SONAME),
            };
            mig_uuids::ask(probe, nvml, &mut gpus)
        }
        false => MigUuids::NotAsked,
    };
    Ok(Driver {
        known_cuda_version: driver_files.cuda_version,
        cacheable,
        version_from_proc: from_proc,
        libraries: driver_files.libraries,
        binaries: driver_files.binaries,
        firmware: driver_files.firmware,
        files: driver_files.files,
        ipc: if full {
            files::ipc(probe, &roots.root)
        } else {
            Vec::new()
        },
        control_nodes: nodes.control(),
        mig_config: cap_node("config"),
        mig_monitor: cap_node("monitor"),
        imex_channels: match needs.imex_channels {
            true => nodes::imex_channels(probe, &roots.dev_root),
            false => Vec::new(),
        },
        roots: roots.clone(),
        version,
        gpus,
        wsl: None,
        mig_uuids,
    })
}

impl Driver {
    /// The driver version as a comparable [`Version`].
    pub fn version(&self) -> Option<Version> {
        self.version.parse().ok()
    }

    /// What NVML reports of every discovered GPU, in the driver's GPU order.
    pub fn gpu_details(&self, probe: &dyn HostProbe) -> Result<Vec<GpuDetails>, ProbeError> {
        let Some(lib) = self.library("libnvidia-ml") else {
            return Err(ProbeError {
                library: self.roots.root.join("libnvidia-ml.so.1"),
                source: "the driver has no libnvidia-ml.so.1".into(),
            });
        };
        let uuids: Vec<&str> = self.gpus.iter().map(|g| g.uuid.as_str()).collect();
        probe.gpu_details(&lib.host_path, &uuids)
    }

    /// The architecture the driver is built for, as its 64-bit libraries' ELF headers
    /// say; `None` when it has none (or only the GPUs were read).
    pub fn arch(&self) -> Option<Arch> {
        files::arch_of(&self.libraries)
    }

    /// The 64-bit library with this stem (`libcuda`), if the driver has it.
    pub fn library(&self, stem: &str) -> Option<&Library> {
        self.libraries
            .iter()
            .find(|l| l.stem == stem && l.class == LibClass::Lib64)
    }

    /// The CUDA driver API version the host's libcuda reports. Loads libcuda into this
    /// process, so it is only asked when needed (a `cuda` requirement, `nvc info`).
    pub fn cuda_version(&self, probe: &dyn HostProbe) -> Result<Version, ProbeError> {
        if let Some(known) = self.known_cuda_version {
            return Ok(Version::from_cuda_int(known));
        }
        self.load_cuda_version(probe).map(Version::from_cuda_int)
    }

    /// What libcuda's `cuDriverGetVersion` reports, asked of the library itself.
    pub fn load_cuda_version(&self, probe: &dyn HostProbe) -> Result<i32, ProbeError> {
        let lib = self
            .library("libcuda")
            .map(|l| l.host_path.clone())
            .unwrap_or_else(|| {
                let arch = self.arch().unwrap_or(Arch::X86_64);
                self.roots
                    .root
                    .join(format!("usr/lib/{}/libcuda.so.1", arch.multiarch()))
            });
        probe.cuda_driver_version(&lib)
    }

    /// The part a [`FilesCache`] keeps, with `cuda_version`.
    pub fn files(&self, cuda_version: Option<i32>) -> DriverFiles {
        DriverFiles {
            version: self.version.clone(),
            libraries: self.libraries.clone(),
            binaries: self.binaries.clone(),
            firmware: self.firmware.clone(),
            files: self.files.clone(),
            cuda_version,
        }
    }
}
