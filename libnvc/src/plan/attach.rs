//! The plan of `nvc attach` and `nvc detach`: what a running container gets, or loses,
//! when GPUs are added to it or taken from it after its start.
//!
//! The GPUs come from the command line (`--gpus`, in the forms `NVIDIA_VISIBLE_DEVICES`
//! takes, read by the one request parser); the capabilities from the container's own
//! `NVIDIA_DRIVER_CAPABILITIES`, else the configured default; the rootfs, the spec's
//! devices and tmpfs mounts from the bundle's config.json, as for the hook. Requirements
//! are not checked: the container is already running.

use std::path::{Path, PathBuf};

use nvc_config::Config;
use serde_json::Value;

use crate::discover::{self, DeviceNode, Driver, DriverRoots, Scope};
use crate::edits::{self, ContainerEdits, ContainerLayout};
use crate::oci::request_policy;
use crate::oci::spec::SpecView;
use crate::probe::HostProbe;
use crate::request::{DeviceSelection, Request, RequestPolicy, DRIVER_CAPABILITIES};

use super::PlanError;

/// The option that names the GPUs, in messages.
pub const GPUS_OPTION: &str = "--gpus";

/// What `nvc attach` or `nvc detach` does to one running container.
#[derive(Debug, Clone)]
pub struct AttachPlan {
    /// The bundle's config.json.
    pub spec_path: PathBuf,
    /// The spec, as read.
    pub spec: Value,
    /// What nvc reads of it.
    pub view: SpecView,
    /// The driver, discovered in full.
    pub driver: Driver,
    /// The edits for the GPUs named (default library folders; the image's own are known
    /// only inside the container).
    pub edits: ContainerEdits,
    /// The nodes of the GPUs named alone (`/dev/nvidiaN`), without the nodes every GPU
    /// shares (`/dev/nvidiactl`, `/dev/nvidia-uvm`): what `nvc detach` removes.
    pub gpu_nodes: Vec<DeviceNode>,
    /// The bus ids of the GPUs the spec itself gives the container (its own request),
    /// which its `/proc/driver/nvidia` keeps showing.
    pub spec_gpus: Vec<String>,
    /// Whether a MIG device was named.
    pub names_mig: bool,
}

/// Why the GPU list given is not one attach can act on.
#[derive(Debug, thiserror::Error)]
pub enum AttachPlanError {
    /// The plan's steps: the spec, the config, the request, the driver, the edits.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The list names no GPU (`none`, `void`, empty).
    #[error("{GPUS_OPTION} {0:?} names no GPU: give indexes, UUIDs or `all`")]
    NoGpu(String),
}

/// Plans attaching (or detaching) the GPUs `gpus` to the container of `bundle`, under
/// `config` (read from `config_path`), reading the host through `probe`.
pub fn for_attach(
    bundle: &Path,
    config: &Config,
    config_path: &Path,
    probe: &dyn HostProbe,
    gpus: &str,
) -> Result<AttachPlan, AttachPlanError> {
    let (spec_path, spec, view) = super::read_bundle_spec(probe, bundle)?;
    let policy_of = |privileged| {
        request_policy(config, privileged).map_err(|e| PlanError::Policy {
            path: config_path.to_path_buf(),
            source: e,
        })
    };
    // The administrator names the GPUs: accepted whatever the container's privileges.
    let policy = RequestPolicy {
        accept_envvar_unprivileged: true,
        disable_require: true,
        ..policy_of(true)?
    };
    let mut env = vec![format!("{}={gpus}", crate::request::VISIBLE_DEVICES)];
    let caps_prefix = format!("{DRIVER_CAPABILITIES}=");
    env.extend(
        view.env
            .iter()
            .filter(|e| e.starts_with(&caps_prefix))
            .cloned(),
    );
    let request =
        Request::from_env(env.iter().map(String::as_str), &policy).map_err(PlanError::Request)?;
    if matches!(
        request.devices,
        DeviceSelection::NotRequested | DeviceSelection::None
    ) {
        return Err(AttachPlanError::NoGpu(gpus.to_string()));
    }
    let roots = DriverRoots::from_config(&config.driver);
    let driver = discover::discover_scope(&roots, probe, Scope::Full).map_err(PlanError::from)?;
    let selected =
        edits::select(&driver, &request.devices, GPUS_OPTION).map_err(PlanError::from)?;
    let edits = edits::build(&driver, &request, &selected, &ContainerLayout::default())
        .map_err(PlanError::from)?;
    let gpu_nodes = selected.gpus.iter().map(|g| g.node.clone()).collect();
    let names_mig = !selected.mig.is_empty();
    let spec_gpus = spec_gpus(&view, &driver, policy_of(view.privileged)?);
    Ok(AttachPlan {
        spec_path,
        spec,
        view,
        driver,
        edits,
        gpu_nodes,
        spec_gpus,
        names_mig,
    })
}

/// The bus ids of the GPUs the container's own request selects; none when it asks for
/// none or its request cannot be met (it then got none at its start either).
fn spec_gpus(view: &SpecView, driver: &Driver, policy: RequestPolicy) -> Vec<String> {
    let Ok(request) = Request::from_container(
        view.env.iter().map(String::as_str),
        &view.annotations,
        &view.device_mounts,
        &policy,
    ) else {
        return Vec::new();
    };
    match edits::select(driver, &request.devices, crate::request::VISIBLE_DEVICES) {
        Ok(selected) => selected
            .all_gpus()
            .iter()
            .map(|g| g.bus_id.clone())
            .collect(),
        Err(_) => Vec::new(),
    }
}
