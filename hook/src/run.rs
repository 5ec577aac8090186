//! The hook's one job, end to end: state → spec → request → driver → container.

use std::path::PathBuf;

use libnvc::discover::{discover, DriverRoots};
use libnvc::edits;
use libnvc::oci::{policy, spec};
use libnvc::request::Request;
use nvc_config::Config;
use nvc_host::setup::{self, Target};
use serde::Deserialize;

/// Why the hook failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The deadline could not be set.
    #[error("cannot set the hook's deadline")]
    Deadline(#[source] std::io::Error),
    /// Called with an unknown mode.
    #[error("unknown hook mode {0:?}: run as `nvc-hook prestart` (or createRuntime) from an OCI runtime")]
    Usage(String),
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The container state on stdin is unreadable or too large.
    #[error(transparent)]
    StateRead(#[from] libnvc::oci::state::StateError),
    /// The container state is not what an OCI runtime sends.
    #[error("invalid container state on stdin (expected the OCI state JSON with pid and bundle)")]
    State(#[source] serde_json::Error),
    /// The state names no running process.
    #[error("the container state has no process id: the hook must run as a prestart or createRuntime hook")]
    NoPid,
    /// The bundle's config.json is unusable.
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// The configuration's request policy is invalid.
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    /// What the container asks for is invalid.
    #[error(transparent)]
    Request(#[from] libnvc::request::RequestError),
    /// The driver could not be found.
    #[error(transparent)]
    Discover(#[from] libnvc::discover::DiscoverError),
    /// A requirement does not hold.
    #[error(transparent)]
    Requirement(#[from] edits::RequirementError),
    /// Setting the container up failed.
    #[error(transparent)]
    Apply(#[from] setup::SetupError),
    /// The spec's device cgroup rules are invalid.
    #[error(transparent)]
    DeviceRules(#[from] nvc_host::devcgroup::DevCgroupError),
}

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    pid: i32,
    bundle: PathBuf,
}

/// Sets the container described on stdin up.
pub fn run() -> Result<(), HookError> {
    let (config, _) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc-hook");
    // First, before anything the container controls is read: nothing may hold the start.
    let seconds = config.hook.timeout;
    nvc_host::deadline::arm(
        seconds,
        &format!(
            "nvc-hook: gave up after {seconds} s: setting the container up took too long \
             (something it points nvc at may block); the container is not started \
             ([hook] timeout in the nvc config)"
        ),
    )
    .map_err(HookError::Deadline)?;

    let raw = libnvc::oci::state::read(std::io::stdin())?;
    let state: State = serde_json::from_slice(&raw).map_err(HookError::State)?;
    if state.pid <= 0 {
        return Err(HookError::NoPid);
    }

    let spec = spec::read_spec(&state.bundle.join("config.json"))?;
    let view = spec::view(&spec, &state.bundle)?;
    let policy = policy::request_policy(&config, view.privileged)?;
    let request = Request::from_container(
        view.env.iter().map(String::as_str),
        &view.annotations,
        &policy,
    )?;
    if !request.wants_gpu_support() {
        log::debug!("{}: no GPU requested", state.bundle.display());
        return Ok(());
    }
    let driver = discover(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    )?;
    edits::check_requirements(&driver, &nvc_host::probe::RealHost, &request)?;
    let target = Target {
        pid: state.pid,
        rootfs: view.rootfs.clone(),
        spec_devices: view.devices.iter().map(|(p, _, _)| p.clone()).collect(),
        update_ldcache: config.ldconfig.update,
        device_cgroup: Some(nvc_host::devcgroup::DeviceCgroup::from_spec(&spec)?),
        readonly: view.readonly,
        tmpfs_mounts: view.tmpfs_mounts.clone(),
    };
    setup::set_up(&driver, &request, &target)?;
    Ok(())
}
