//! The hook's one job, end to end: the state on stdin names the bundle; the plan
//! (`libnvc::plan`, stage `Hook`) says what the container gets; its GPU leases are
//! taken (`nvc_host::leases`); nvc-host sets it up.

use std::path::PathBuf;

use libnvc::plan::{ConfigSource, Handed, Plan, PlanError, Stage};
use nvc_config::Config;
use nvc_host::files_cache::RunCache;
use nvc_host::phases::Phases;
use nvc_host::probe::HelperHost;
use nvc_host::setup::{self, Target};
use nvc_host::trace::RecordDir;
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
    /// The plan stopped: the spec, the request, the driver or a requirement.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Setting the container up failed.
    #[error(transparent)]
    Setup(#[from] setup::SetupError),
    /// The spec's device cgroup rules are invalid.
    #[error(transparent)]
    DeviceRules(#[from] nvc_host::devcgroup::DevCgroupError),
    /// Taking away what was made, when the container ended, failed.
    #[error(transparent)]
    Poststop(#[from] crate::poststop::PoststopError),
    /// A GPU is held by another container, or its lease could not be taken.
    #[error(transparent)]
    Lease(#[from] nvc_host::leases::LeaseError),
}

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    id: String,
    #[serde(default)]
    pid: i32,
    #[serde(default)]
    status: String,
    bundle: PathBuf,
}

/// Sets the container described on stdin up; `args`: the arguments after the mode.
// The error is returned once, at the end of a one-shot process: its size costs nothing.
#[allow(clippy::result_large_err)]
pub fn run(args: &[String]) -> Result<(), HookError> {
    let mut phases = Phases::start("prestart");
    let handed = Handed::parse(args)?;
    let (config, config_path) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc-hook");
    phases.mark("config");
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
    if state.status == "stopped" {
        // A hooks.d file that lists both stages runs the same command at poststop.
        return Ok(crate::poststop::undo(
            &config,
            &state.id,
            &state.bundle,
            &mut phases,
        )?);
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

    let source = ConfigSource {
        path: &config_path,
        from_env: false,
    };
    // One full discovery serves every start until the driver changes (see
    // nvc_host::files_cache for when an entry is used).
    let cache = RunCache::new(&config.hook.state_dir);
    let plan = Plan::for_bundle_cached(
        &state.bundle,
        &config,
        &source,
        // libcuda, when asked at all, is asked in a process of its own: the hook is
        // linked statically.
        &HelperHost,
        Stage::Hook,
        &handed,
        Some(&cache),
    )
    .map_err(PlanError::from)?;
    phases.mark("plan");
    let Some(gpu) = &plan.gpu else {
        log::debug!("{}: no GPU requested", state.bundle.display());
        return Ok(());
    };
    let target = Target {
        pid: state.pid,
        rootfs: plan.view.rootfs.clone(),
        // The nodes the runtime makes (`linux.devices`), or binds in a user namespace.
        spec_devices: plan
            .view
            .devices
            .iter()
            .map(|(p, _, _)| p.clone())
            .chain(plan.view.mount_destinations.iter().cloned())
            .collect(),
        update_ldcache: config.ldcache.update,
        device_cgroup: Some(nvc_host::devcgroup::DeviceCgroup::from_spec(&plan.spec)?),
        readonly: plan.view.readonly,
        tmpfs_mounts: plan.view.tmpfs_mounts.clone(),
        running: false,
    };
    // Before anything is set up: a container refused its GPUs gets nothing.
    let leases = nvc_host::leases::take(
        &config.leases.dir,
        &state.id,
        state.pid,
        &plan.request,
        &gpu.driver,
    )?;
    phases.mark("leases");
    // What is made in the rootfs is recorded for the poststop hook to take away, where
    // one runs (the shim adds it unless `hook.leave-no-trace` leaves this container out;
    // Docker's `--gpus` runs none): a record nothing reads is not kept.
    let undone = libnvc::plan::leaves_no_trace(&config, &plan.view)
        && libnvc::oci::spec::has_undo_hook(&plan.spec, &config.hook.path);
    // Held until the record is written: a container ending on the same rootfs waits,
    // then sees this one (nvc_host::trace). The record is opened here, in the host's
    // mount namespace: set_up enters the container's.
    let (_rootfs_lock, record) = match undone {
        false => (None, None),
        true => (
            untraced(nvc_host::trace::lock_rootfs(
                &config.hook.state_dir,
                &target.rootfs,
            )),
            untraced(RecordDir::create(
                &config.hook.state_dir,
                &state.id,
                &state.bundle,
                &target.rootfs,
                state.pid,
            )),
        ),
    };
    phases.mark("record-open");
    let trace = match setup::set_up_noted(&gpu.driver, &gpu.edits, &target) {
        Ok((_, trace)) => trace,
        Err(e) => {
            if let Some(leases) = leases {
                leases.release();
            }
            return Err(e.into());
        }
    };
    phases.mark("set-up");
    if let Some(record) = record {
        untraced(record.save(&trace));
    }
    phases.mark("record-save");
    phases.log();
    // The process ends next, and its memory with it: the plan, the config and the rest
    // are not freed piece by piece first (the plan alone was 0.12 M instructions).
    std::mem::forget((plan, config, target, trace, handed, raw, state));
    Ok(())
}

/// `result`'s value; its error only logged: what nvc makes then stays in the rootfs.
fn untraced<T, E: std::error::Error>(result: Result<T, E>) -> Option<T> {
    result
        .map_err(|e| {
            log::warn!(
                "what nvc makes in the rootfs stays after the container: {}",
                libnvc::report::error_chain(&e)
            )
        })
        .ok()
}
