//! What only NVML knows (compute capability, brand, memory), asked on demand through the
//! probe ([`crate::probe::HostProbe::gpu_details`]). Nothing on the container start path
//! needs it unless a requirement names `arch` or `brand`.

use serde::Serialize;

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
