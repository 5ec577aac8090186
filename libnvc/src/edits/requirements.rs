//! Checking a request's `NVIDIA_REQUIRE_*` constraints against the host: the host's facts
//! for the selected GPUs ([`HostFacts`]) and the checks that use them.

use crate::discover::{Driver, Gpu};
use crate::probe::HostProbe;
use crate::request::Request;
use crate::require::{self, Fact, FactError, Facts, GpuFacts};
use crate::version::Version;

use super::{select, EditsError, Selected};

/// The host's facts for a requirement check over the selected GPUs; each is looked up
/// only when a constraint asks for it.
pub struct HostFacts<'a> {
    driver: &'a Driver,
    probe: &'a dyn HostProbe,
    gpus: Vec<&'a Gpu>,
    loaded_cuda: std::cell::Cell<Option<i32>>,
}

impl<'a> HostFacts<'a> {
    /// Facts about `driver` and the GPUs in `selected`.
    pub fn new(driver: &'a Driver, probe: &'a dyn HostProbe, selected: &Selected<'a>) -> Self {
        HostFacts {
            driver,
            probe,
            gpus: selected.all_gpus(),
            loaded_cuda: std::cell::Cell::new(None),
        }
    }

    /// The CUDA version libcuda reported when a constraint asked for it and the driver
    /// did not know it ([`Driver::known_cuda_version`]): worth keeping.
    pub fn loaded_cuda_version(&self) -> Option<i32> {
        self.loaded_cuda.get()
    }
}

impl Facts for HostFacts<'_> {
    fn cuda_version(&self) -> Result<Version, FactError> {
        if let Some(known) = self.driver.known_cuda_version {
            return Ok(Version::from_cuda_int(known));
        }
        let loaded = self
            .driver
            .load_cuda_version(self.probe)
            .map_err(|e| FactError::new(Fact::CudaVersion, e))?;
        self.loaded_cuda.set(Some(loaded));
        Ok(Version::from_cuda_int(loaded))
    }

    fn driver_version(&self) -> Result<Version, FactError> {
        self.driver.version().ok_or_else(|| {
            FactError::new(
                Fact::DriverVersion,
                format!("{:?} is not a version", self.driver.version),
            )
        })
    }

    fn gpus(&self) -> Result<Vec<GpuFacts>, FactError> {
        if self.gpus.is_empty() {
            return Ok(Vec::new());
        }
        let details = self
            .driver
            .gpu_details(self.probe)
            .map_err(|e| FactError::new(Fact::Gpus, e))?;
        self.gpus
            .iter()
            .map(|g| {
                let d = details.iter().find(|d| d.uuid == g.uuid);
                let missing = |what: &str| {
                    FactError::new(
                        Fact::Gpus,
                        format!("NVML does not report the {what} of GPU {}", g.index),
                    )
                };
                Ok(GpuFacts {
                    arch: d
                        .and_then(|d| d.arch())
                        .ok_or_else(|| missing("compute capability"))?,
                    brand: d
                        .and_then(|d| d.brand.clone())
                        .ok_or_else(|| missing("brand"))?,
                })
            })
            .collect()
    }
}

/// Checks the request's `NVIDIA_REQUIRE_*` constraints against the host, unless checks
/// are disabled.
pub fn check_requirements(
    driver: &Driver,
    probe: &dyn HostProbe,
    request: &Request,
) -> Result<(), RequirementError> {
    if !request.check_requirements || request.requirements.is_empty() {
        return Ok(());
    }
    let selected = select(driver, &request.devices, "NVIDIA_VISIBLE_DEVICES")?;
    check_selected(driver, probe, request, &selected)?;
    Ok(())
}

/// [`check_requirements`] for GPUs already [`select`](fn@select)ed. `Ok` holds the CUDA
/// version libcuda was loaded to report ([`HostFacts::loaded_cuda_version`]), if it was.
pub fn check_selected(
    driver: &Driver,
    probe: &dyn HostProbe,
    request: &Request,
    selected: &Selected<'_>,
) -> Result<Option<i32>, require::Unmet> {
    if !request.check_requirements || request.requirements.is_empty() {
        return Ok(None);
    }
    let facts = HostFacts::new(driver, probe, selected);
    require::check(&request.requirements, &facts)?;
    Ok(facts.loaded_cuda_version())
}

/// A failed requirement check.
#[derive(Debug, thiserror::Error)]
pub enum RequirementError {
    /// The selection itself is invalid.
    #[error(transparent)]
    Select(#[from] EditsError),
    /// A requirement does not hold.
    #[error(transparent)]
    Unmet(#[from] require::Unmet),
}
