//! `nvc-hook poststop`: when the container has ended, nvc-host's lifecycle
//! (`nvc_host::lifecycle::poststop`) takes away what the prestart hook made in its rootfs
//! and ends its GPU leases. Runs in the runtime's (the host's) mount namespace, where the
//! rootfs is still mounted; nothing of the container is running.

use nvc_config::Config;
use nvc_host::lifecycle;
use nvc_host::phases::Phases;

use crate::run::{HookError, State};

/// Takes away what the prestart hook made for the container described on stdin.
pub fn run() -> Result<(), HookError> {
    let mut phases = Phases::start("poststop");
    let (config, _) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc-hook");
    crate::run::arm(&config, |seconds| {
        format!(
            "nvc-hook poststop: gave up after {seconds} s taking away what nvc made in the \
             container's rootfs ([hook] timeout in the nvc config)"
        )
    })?;
    phases.mark("config");
    let raw = libnvc::oci::state::read(std::io::stdin())?;
    let state: State = serde_json::from_slice(&raw).map_err(HookError::State)?;
    phases.mark("state");
    lifecycle::poststop(&config, &state.id, &state.bundle, &mut phases)?;
    phases.log();
    Ok(())
}
