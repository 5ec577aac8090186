//! What only NVML knows (compute capability, brand, memory), loaded on demand from the
//! driver root's libnvidia-ml. Nothing on the container start path needs it unless a
//! requirement names `arch` or `brand`.

use std::path::PathBuf;

use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::Nvml;
use serde::Serialize;

use super::Driver;
use crate::version::Version;

/// NVML's view of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDetails {
    /// The GPU's UUID, which ties it to [`super::Gpu`].
    pub uuid: String,
    /// The compute capability, such as `9.0`.
    pub compute_capability: Option<String>,
    /// The brand, lowercase, as `NVIDIA_REQUIRE_BRAND` names it (`nvidia`, `tesla`, ...).
    pub brand: Option<String>,
    /// Total memory in bytes.
    pub memory_total: Option<u64>,
}

impl GpuDetails {
    /// The compute capability as a version.
    pub fn arch(&self) -> Option<Version> {
        self.compute_capability.as_deref()?.parse().ok()
    }
}

/// Why NVML could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// The driver has no libnvidia-ml.
    #[error("the driver has no libnvidia-ml.so.1")]
    NoLibrary,
    /// Loading or initialising NVML failed.
    #[error("cannot initialise NVML from {path}")]
    Init {
        /// The library.
        path: PathBuf,
        /// NVML's reason.
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
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

/// NVML's details for every discovered GPU, in the driver's GPU order.
pub fn gpu_details(driver: &Driver) -> Result<Vec<GpuDetails>, NvmlError> {
    let lib = driver.library("libnvidia-ml").ok_or(NvmlError::NoLibrary)?;
    let nvml = Nvml::builder()
        .lib_path(lib.host_path.as_os_str())
        .init()
        .map_err(|source| NvmlError::Init {
            path: lib.host_path.clone(),
            source,
        })?;
    Ok(driver
        .gpus
        .iter()
        .map(|g| {
            let dev = nvml.device_by_uuid(g.uuid.as_str()).ok();
            GpuDetails {
                uuid: g.uuid.clone(),
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
