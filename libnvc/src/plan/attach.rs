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

use crate::discover::{DeviceNode, Driver};
use crate::edits::{self, ContainerEdits};
use crate::oci::request_policy;
use crate::oci::spec::SpecView;
use crate::probe::HostProbe;
use crate::request::{DeviceSelection, Request, RequestPolicy, DRIVER_CAPABILITIES};

use super::{PlanError, Stage};

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
/// `config` (read from `config_path`), reading the host through `probe`: the plan's one
/// pipeline ([`super::Plan`]) at [`Stage::Attach`], with the same refusals as a start.
pub fn for_attach(
    bundle: &Path,
    config: &Config,
    config_path: &Path,
    probe: &dyn HostProbe,
    gpus: &str,
) -> Result<AttachPlan, AttachPlanError> {
    let inputs = super::Inputs {
        bundle,
        config,
        source: &super::ConfigSource {
            path: config_path,
            from_env: false,
        },
        probe,
        stage: Stage::Attach,
        handed: &super::Handed::default(),
        cache: None,
        gpus: Some(gpus),
    };
    let plan = super::plan_of(&inputs).map_err(|stopped| stopped.error)?;
    let Some(gpu) = plan.gpu.filter(|_| {
        !matches!(
            plan.request.devices,
            DeviceSelection::NotRequested | DeviceSelection::None
        )
    }) else {
        return Err(AttachPlanError::NoGpu(gpus.to_string()));
    };
    let policy = request_policy(config, plan.view.privileged).map_err(|e| PlanError::Policy {
        path: config_path.to_path_buf(),
        source: e,
    })?;
    let spec_gpus = spec_gpus(&plan.view, &gpu.driver, policy);
    Ok(AttachPlan {
        spec_path: plan.spec_path,
        spec: plan.spec,
        view: plan.view,
        driver: gpu.driver,
        edits: gpu.edits,
        gpu_nodes: gpu.gpu_nodes,
        spec_gpus,
        names_mig: gpu.names_mig,
    })
}

/// The request of `nvc attach --gpus <gpus>` for the container whose spec is `view`: the
/// GPUs named, whatever the container's privileges (the administrator names them), with
/// the container's own `NVIDIA_DRIVER_CAPABILITIES`; requirements are not checked (the
/// container already runs).
pub(super) fn request(
    gpus: &str,
    view: &SpecView,
    config: &Config,
    config_path: &Path,
) -> Result<Request, PlanError> {
    let base = request_policy(config, true).map_err(|e| PlanError::Policy {
        path: config_path.to_path_buf(),
        source: e,
    })?;
    let policy = RequestPolicy {
        accept_envvar_unprivileged: true,
        disable_require: true,
        ..base
    };
    let mut env = vec![format!("{}={gpus}", crate::request::VISIBLE_DEVICES)];
    let caps_prefix = format!("{DRIVER_CAPABILITIES}=");
    env.extend(
        view.env
            .iter()
            .filter(|e| e.starts_with(&caps_prefix))
            .cloned(),
    );
    Request::from_env(env.iter().map(String::as_str), &policy).map_err(PlanError::Request)
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
