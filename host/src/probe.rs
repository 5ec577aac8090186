//! The real host behind [`HostProbe`]: files through `std::fs`, device numbers through
//! `lstat`, and the driver's own libraries loaded to ask them what they are.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use libnvc::discover::{GpuDetails, NvmlMigDevice};
use libnvc::probe::{HostProbe, ProbeError, Stat};
use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::Nvml;

/// The host this process runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

impl HostProbe for RealHost {
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        let file = File::open(path)?;
        // Room for the usual file up front: procfs files report no size, and an empty
        // buffer is grown from 32 bytes, one read(2) per doubling.
        let mut data = Vec::with_capacity((limit + 1).min(16 * 1024));
        file.take(limit as u64 + 1).read_to_end(&mut data)?;
        let more = data.len() > limit;
        data.truncate(limit);
        Ok((data, more))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::metadata(path).map(|m| Stat::of(&m))
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::symlink_metadata(path).map(|m| Stat::of(&m))
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    fn is_host_root(&self, path: &Path) -> bool {
        matches!(
            crate::container::refuse_host_root(path),
            Err(crate::container::FsError::HostRoot { .. })
        )
    }

    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError> {
        // A static nvc asks nvc-cuda-version beside it (dynamic, the host's libc) instead
        // of loading libcuda itself.
        let asked = if crate::statically_linked() {
            crate::cuda_driver_version_by(&beside_this_program(CUDA_VERSION_HELPER), libcuda)
        } else {
            crate::cuda_driver_version(libcuda)
        };
        asked.map_err(|e| ProbeError {
            library: libcuda.to_path_buf(),
            source: Box::new(e),
        })
    }

    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
        // A static nvc (the node installer's) cannot load a shared library that needs the
        // host's libc beside its own copy of glibc: it goes without NVML's columns.
        if crate::statically_linked() {
            return Err(ProbeError {
                library: nvml.to_path_buf(),
                source: "this nvc is linked statically and does not load NVML; the \
                         packaged (dynamic) nvc does"
                    .into(),
            });
        }
        let lib = Nvml::builder()
            .lib_path(nvml.as_os_str())
            .init()
            .map_err(|e| ProbeError {
                library: nvml.to_path_buf(),
                source: Box::new(e),
            })?;
        Ok(uuids
            .iter()
            .map(|uuid| {
                let dev = lib.device_by_uuid(*uuid).ok();
                GpuDetails {
                    uuid: uuid.to_string(),
                    compute_capability: dev
                        .as_ref()
                        .and_then(|d| d.cuda_compute_capability().ok())
                        .map(|c| format!("{}.{}", c.major, c.minor)),
                    brand: dev.as_ref().and_then(|d| d.brand().ok()).map(brand_name),
                    memory_total: dev
                        .as_ref()
                        .and_then(|d| d.memory_info().ok())
                        .map(|m| m.total),
                }
            })
            .collect())
    }

    fn mig_devices(&self, nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError> {
        // A static program (the shim, the node image's nvc) cannot load NVML: it asks
        // nvc-mig-devices beside it, as it asks nvc-cuda-version for libcuda.
        let asked = if crate::statically_linked() {
            crate::nvml::mig_devices_by(&beside_this_program(MIG_DEVICES_HELPER), nvml, gpus)
        } else {
            crate::nvml::mig_devices(nvml, gpus)
        };
        asked.map_err(|e| ProbeError {
            library: nvml.to_path_buf(),
            source: Box::new(e),
        })
    }
    fn health_inputs(&self, config: &nvc_config::Config) -> libnvc::health::HealthInputs {
        crate::health::health_inputs(&crate::state::StateDir::of(config))
    }
}

/// The program `name` in the folder of the running program (the host's file, read from
/// `/proc/self/exe`; never one of a container's), looked up only when asked.
fn beside_this_program(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The host as [`RealHost`] reads it, but libcuda and NVML are asked by programs of their
/// own beside the running one ([`CUDA_VERSION_HELPER`] its version, [`MIG_DEVICES_HELPER`]
/// the MIG devices' UUIDs), never loaded here: for a statically linked program (the
/// hook), which cannot load a shared library reliably, and which then keeps no driver
/// code in its own process. Only a start that finds no CUDA version in the driver-files
/// cache asks libcuda, and only one that names a MIG device by UUID asks NVML.
#[derive(Debug, Clone, Copy, Default)]
pub struct HelperHost;

/// The name of the program that prints a libcuda's CUDA driver API version
/// (`nvc-cuda-version <libcuda>`), installed beside `nvc-hook`.
pub const CUDA_VERSION_HELPER: &str = "nvc-cuda-version";

pub use crate::nvml::MIG_DEVICES_HELPER;

impl HostProbe for HelperHost {
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        RealHost.read(path, limit)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        RealHost.read_dir(path)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        RealHost.stat(path)
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        RealHost.lstat(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        RealHost.read_link(path)
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        RealHost.open(path)
    }

    fn is_host_root(&self, path: &Path) -> bool {
        RealHost.is_host_root(path)
    }

    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError> {
        let helper = beside_this_program(CUDA_VERSION_HELPER);
        crate::cuda_driver_version_by(&helper, libcuda).map_err(|e| ProbeError {
            library: libcuda.to_path_buf(),
            source: Box::new(e),
        })
    }

    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
        RealHost.gpu_details(nvml, uuids)
    }

    fn mig_devices(&self, nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError> {
        let helper = beside_this_program(MIG_DEVICES_HELPER);
        crate::nvml::mig_devices_by(&helper, nvml, gpus).map_err(|e| ProbeError {
            library: nvml.to_path_buf(),
            source: Box::new(e),
        })
    }
    fn health_inputs(&self, config: &nvc_config::Config) -> libnvc::health::HealthInputs {
        RealHost.health_inputs(config)
    }
}

/// The brand's name as the requirement language spells it.
fn brand_name(b: Brand) -> String {
    match b {
        Brand::NvidiaRTX => "nvidiartx".into(),
        Brand::QuadroRTX => "quadrortx".into(),
        Brand::GeForceRTX => "geforcertx".into(),
        Brand::TitanRTX => "titanrtx".into(),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::probe::FileKind;

    #[test]
    fn reads_are_cut_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(RealHost.read(&f, 4).unwrap(), (b"0123".to_vec(), true));
        assert_eq!(
            RealHost.read(&f, 10).unwrap(),
            (b"0123456789".to_vec(), false)
        );
        assert_eq!(RealHost.lstat(&f).unwrap().kind, FileKind::File);
        assert_eq!(RealHost.stat(dir.path()).unwrap().kind, FileKind::Dir);
    }
}
