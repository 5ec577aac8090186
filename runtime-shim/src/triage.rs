//! Telling, from the spec alone, the containers that cannot ask for a GPU: most
//! containers on a node that runs nvc, which should pay no more than reading their spec
//! (no nvc config, no log file, no driver).
//!
//! The test is conservative, checked against the full request parsing
//! (`libnvc::plan`) on many specs and configurations: a container passes it only when
//! no configuration could make the plan give it a GPU or refuse its request.

use std::path::Path;

use libnvc::oci::rootfs;
use libnvc::oci::spec::{self, SpecView};
use libnvc::plan::PlanError;
use libnvc::request::{CDI_ANNOTATION_PREFIX, CUDA_VERSION};
use nvc_host::probe::RealHost;

/// The prefix of every variable `libnvc::request` reads but `CUDA_VERSION`.
const NVIDIA_PREFIX: &str = "NVIDIA_";

/// Reads `<bundle>/config.json` as the plan does, with the same errors, and refuses a
/// rootfs whose `/dev` is a link as the plan does for every container.
pub fn read_view(bundle: &Path) -> Result<SpecView, PlanError> {
    let spec_path = bundle.join("config.json");
    // Typed, the fields the view does not use skipped: the spec is neither edited nor
    // written here.
    let view = spec::read_view(&RealHost, &spec_path, bundle)
        .map_err(PlanError::SpecFile)?
        .map_err(|source| PlanError::BadSpec {
            path: spec_path,
            source,
        })?;
    rootfs::refuse_linked_dev(&RealHost, &view.rootfs)?;
    Ok(view)
}

/// Whether the container may ask for a GPU (or for something its request parsing
/// refuses), under any nvc configuration: an `NVIDIA_*` variable, a `CUDA_VERSION`
/// (a legacy CUDA image asks for every GPU), a `cdi.k8s.io/` annotation, or a mount
/// under `/var/run/nvidia-container-devices`. When not, the plan would leave it
/// untouched whatever the configuration says.
pub fn may_ask_for_gpu(view: &SpecView) -> bool {
    // `KEY=VALUE`: a key with the prefix makes an entry with the prefix; an entry
    // without `=` is no variable at all.
    let cuda_version = format!("{CUDA_VERSION}=");
    view.env
        .iter()
        .any(|e| e.starts_with(NVIDIA_PREFIX) || e.starts_with(&cuda_version))
        || view
            .annotations
            .keys()
            .any(|k| k.starts_with(CDI_ANNOTATION_PREFIX))
        || !view.device_mounts.is_empty()
}

#[cfg(test)]
mod tests;
