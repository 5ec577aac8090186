//! The hook's prestart: the state on stdin names the container; nvc-host's lifecycle
//! (`nvc_host::lifecycle::prestart`) plans, takes its GPU leases, records and sets it up.

use std::path::PathBuf;

use libnvc::plan::Handed;
use nvc_config::Config;
use nvc_host::lifecycle::{self, Container, LifecycleError};
use nvc_host::phases::Phases;
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
    /// Called with arguments nvc-runtime does not write.
    #[error(transparent)]
    Argument(#[from] libnvc::plan::HandedError),
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
    /// Planning, leases, set-up, or taking away what was made.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
}

/// What the hook reads of the runtime's state.
#[derive(Deserialize)]
pub struct State {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub pid: i32,
    #[serde(default)]
    pub status: String,
    pub bundle: PathBuf,
}

/// Arms the hook's deadline (`[hook] timeout` of `config`), with the message `said`
/// makes of the seconds.
pub fn arm(config: &Config, said: impl Fn(u32) -> String) -> Result<(), HookError> {
    let seconds = config.hook.timeout;
    nvc_host::deadline::arm(seconds, &said(seconds)).map_err(HookError::Deadline)
}

/// Sets the container described on stdin up; `args`: the arguments after the mode.
pub fn run(args: &[String]) -> Result<(), HookError> {
    let mut phases = Phases::start("prestart");
    let handed = Handed::parse(args)?;
    let (config, config_path) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc-hook");
    phases.mark("config");
    // First, before anything the container controls is read: nothing may hold the start.
    arm(&config, |seconds| {
        format!(
            "nvc-hook: gave up after {seconds} s: setting the container up took too long \
             (something it points nvc at may block); the container is not started \
             ([hook] timeout in the nvc config)"
        )
    })?;
    let raw = libnvc::oci::state::read(std::io::stdin())?;
    let state: State = serde_json::from_slice(&raw).map_err(HookError::State)?;
    if state.status == "stopped" {
        // A hooks.d file that lists both stages runs the same command at poststop.
        lifecycle::poststop(&config, &state.id, &state.bundle, &mut phases)?;
        return Ok(());
    }
    if state.pid <= 0 {
        return Err(HookError::NoPid);
    }
    log::debug!(
        "prestart of container {} in {}",
        state.id,
        state.bundle.display()
    );
    phases.mark("state");
    let container = Container {
        id: &state.id,
        pid: state.pid,
        bundle: &state.bundle,
    };
    lifecycle::prestart(&config, &config_path, &container, &handed, &mut phases)?;
    phases.log();
    // The process ends next, and its memory with it (see lifecycle::prestart).
    std::mem::forget((config, handed, raw, state));
    Ok(())
}
