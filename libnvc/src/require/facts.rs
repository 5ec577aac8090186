//! What a check may ask of the host and the selected GPUs ([`Facts`]), and why a fact
//! could not be told ([`FactError`]).

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::version::Version;

/// A fact about the host or the GPUs that a constraint can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fact {
    /// [`Facts::cuda_version`].
    CudaVersion,
    /// [`Facts::driver_version`].
    DriverVersion,
    /// [`Facts::gpus`].
    Gpus,
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fact::CudaVersion => "cuda version",
            Fact::DriverVersion => "driver version",
            Fact::Gpus => "architecture and brand of the selected GPUs",
        })
    }
}

/// A fact that could not be determined, such as the CUDA version when libcuda does not
/// load.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot tell the {fact}")]
pub struct FactError {
    /// Which fact.
    pub fact: Fact,
    /// Why it could not be determined. Shared so one failure can be reported by every
    /// requirement that needed the fact.
    #[source]
    pub source: Arc<dyn StdError + Send + Sync>,
}

impl FactError {
    /// A failure to determine `fact`, caused by `source` (an error, or a message).
    pub fn new(fact: Fact, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        FactError {
            fact,
            source: Arc::from(source.into()),
        }
    }
}

/// What one selected GPU offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// The compute capability, such as `9.0`.
    pub arch: Version,
    /// The brand, such as `nvidia`, `tesla` or `geforce`; compared case-insensitively.
    pub brand: String,
}

/// What the host and the selected GPUs offer. [`check`](super::check) calls each method only when a
/// constraint needs it and at most once per call, so implementations need not cache.
pub trait Facts {
    /// The highest CUDA version the driver supports; needs loading libcuda.
    fn cuda_version(&self) -> Result<Version, FactError>;
    /// The kernel driver's version.
    fn driver_version(&self) -> Result<Version, FactError>;
    /// One entry per selected GPU, in selection order (error messages call entry `n`
    /// "GPU n"); empty when the container asked for no GPU. Needs NVML.
    fn gpus(&self) -> Result<Vec<GpuFacts>, FactError>;
}
