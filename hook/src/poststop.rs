//! `nvc-hook poststop`: when the container has ended, takes away what the prestart hook
//! made in its rootfs and puts the image's ld.so.cache back (`nvc_host::trace`), from the
//! record the prestart hook kept, and ends its GPU leases (`nvc_host::leases::end`).
//! Runs in the runtime's (the host's) mount namespace, where the rootfs is still mounted;
//! nothing of the container is running.

use std::path::PathBuf;

use libnvc::oci::spec;
use nvc_config::Config;
use nvc_host::phases::Phases;
use nvc_host::probe::RealHost;
use nvc_host::trace::{self, TraceError};
use serde::Deserialize;

/// Why the cleanup failed.
#[derive(Debug, thiserror::Error)]
pub enum PoststopError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The deadline could not be set.
    #[error("cannot set the hook's deadline")]
    Deadline(#[source] std::io::Error),
    /// The container state on stdin is unreadable.
    #[error(transparent)]
    StateRead(#[from] libnvc::oci::state::StateError),
    /// The container state is not what an OCI runtime sends.
    #[error("invalid container state on stdin (expected the OCI state JSON with id and bundle)")]
    State(#[source] serde_json::Error),
    /// The bundle's spec could not be read.
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// The record or the rootfs could not be used.
    #[error("cannot take away what nvc made in the container's rootfs")]
    Trace(#[source] TraceError),
}

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    id: String,
    bundle: PathBuf,
}

/// Takes away what the prestart hook made for the container described on stdin.
pub fn run() -> Result<(), PoststopError> {
    let mut phases = Phases::start("poststop");
    let (config, _) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc-hook");
    arm(&config)?;
    phases.mark("config");
    let raw = libnvc::oci::state::read(std::io::stdin())?;
    let state: State = serde_json::from_slice(&raw).map_err(PoststopError::State)?;
    phases.mark("state");
    undo(&config, &state.id, &state.bundle, &mut phases)?;
    phases.log();
    Ok(())
}

/// Takes away what was made for container `id` of `bundle` (the prestart hook's mode
/// when a runtime calls it at `poststop` with the same arguments, as a hooks.d file
/// listing both stages does), then ends its GPU leases whatever came of that; marks the
/// phases `spec`, `undo` and `leases`.
pub fn undo(
    config: &Config,
    id: &str,
    bundle: &std::path::Path,
    phases: &mut Phases,
) -> Result<(), PoststopError> {
    let undone = undo_rootfs(config, id, bundle, phases);
    end_leases(config, id);
    phases.mark("leases");
    undone
}

/// Removes the lease file of container `id`. A failure is only logged: the lease is
/// stale anyway now that the container's process has ended, and the next start removes
/// it.
fn end_leases(config: &Config, id: &str) {
    match nvc_host::leases::end(&config.leases.dir, id) {
        Ok(true) => log::debug!("the GPU leases of container {id} ended with it"),
        Ok(false) => {}
        Err(e) => log::warn!(
            "the GPU leases of container {id} stay until the next GPU container starts: {}",
            libnvc::report::error_chain(&e)
        ),
    }
}

/// Takes away what the prestart hook made in the rootfs of container `id`.
fn undo_rootfs(
    config: &Config,
    id: &str,
    bundle: &std::path::Path,
    phases: &mut Phases,
) -> Result<(), PoststopError> {
    // Only `root.path` of the spec: the rest is not parsed.
    let rootfs = spec::read_rootfs(&RealHost, &bundle.join("config.json"), bundle)?;
    phases.mark("spec");
    // Not while another container's hook sets the same rootfs up (trace::RootfsLock).
    let _lock =
        trace::lock_rootfs(&config.hook.state_dir, &rootfs).map_err(PoststopError::Trace)?;
    let undone =
        trace::undo(&config.hook.state_dir, id, bundle, &rootfs).map_err(PoststopError::Trace)?;
    phases.mark("undo");
    log::info!(
        "container {id} ended: {} things nvc made taken away, {} left, ld.so.cache {}{}",
        undone.removed,
        undone.left.len(),
        if undone.cache_restored {
            "restored"
        } else {
            "unchanged"
        },
        undone
            .handed_to
            .map(|other| format!(" (left to {other}, which still runs on the same rootfs)"))
            .unwrap_or_default()
    );
    Ok(())
}

fn arm(config: &Config) -> Result<(), PoststopError> {
    let seconds = config.hook.timeout;
    nvc_host::deadline::arm(
        seconds,
        &format!(
            "nvc-hook poststop: gave up after {seconds} s taking away what nvc made in the \
             container's rootfs ([hook] timeout in the nvc config)"
        ),
    )
    .map_err(PoststopError::Deadline)
}
