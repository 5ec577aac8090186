//! `nvc attach` and `nvc detach`: GPUs added to, or taken from, a running container,
//! found through its low-level runtime's state (`runc --root DIR state ID`).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use libnvc::plan::attach::{self, AttachPlan, AttachPlanError};
use nvc_config::Config;
use nvc_host::attach::{AttachError, AttachRecord};
use nvc_host::devcgroup::{DevCgroupError, DeviceCgroup};
use nvc_host::lifecycle::{self, AttachRequest, Attached, LifecycleError};
use nvc_host::privileges::{self, Phase, Privileges};
use nvc_host::probe::RealHost;
use nvc_host::proc_mask::ProcMask;
use nvc_host::setup::{SetupError, Target};
use nvc_host::state::StateDir;
use serde::Deserialize;

/// Options of `nvc attach` and `nvc detach`.
#[derive(Args)]
pub struct AttachArgs {
    /// The runtime's state directory, its `--root` (Docker's for runtime `nv`:
    /// /run/docker/runtime-nv/moby; for runc: /run/docker/runtime-runc/moby).
    #[arg(long)]
    root: Option<PathBuf>,
    /// The low-level runtime asked for the state (default: the first of the config's
    /// `[runtime] runtimes` found on PATH, else runc).
    #[arg(long)]
    runtime: Option<PathBuf>,
    /// The container's id, in full, as the runtime knows it.
    id: String,
    /// The GPUs, as NVIDIA_VISIBLE_DEVICES takes them (indexes, UUIDs, all).
    #[arg(long)]
    gpus: String,
}

/// Why attaching or detaching failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachCliError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The runtime could not be run.
    #[error("cannot run {runtime}: give the runtime with --runtime")]
    Runtime {
        /// The runtime.
        runtime: PathBuf,
        /// The reason.
        #[source]
        source: std::io::Error,
    },
    /// The runtime does not know the container.
    #[error("{runtime} state {id} failed: {stderr}; check the container id (in full) and --root (the runtime's state directory)")]
    State {
        /// The runtime.
        runtime: PathBuf,
        /// The id.
        id: String,
        /// What it said.
        stderr: String,
    },
    /// The runtime's state is not what runc prints.
    #[error(
        "{runtime} state {id} printed no container state (JSON with pid, status, bundle, rootfs)"
    )]
    BadState {
        /// The runtime.
        runtime: PathBuf,
        /// The id.
        id: String,
        /// The reason.
        #[source]
        source: serde_json::Error,
    },
    /// The container does not run.
    #[error("container {id} is {status}, not running: {hint}")]
    NotRunning {
        /// The id.
        id: String,
        /// Its status.
        status: String,
        /// What to do.
        hint: &'static str,
    },
    /// The plan: the spec, the GPUs named, the driver.
    #[error(transparent)]
    Plan(Box<AttachPlanError>),
    /// The container cannot be changed.
    #[error(transparent)]
    Attach(Box<AttachError>),
    /// Setting the container up failed.
    #[error(transparent)]
    Setup(Box<SetupError>),
    /// The guards, the record, or set-up refused the container.
    #[error(transparent)]
    Lifecycle(Box<LifecycleError>),
    /// The spec's device rules are invalid.
    #[error(transparent)]
    DeviceRules(#[from] DevCgroupError),
    /// MIG devices cannot be detached.
    #[error("--gpus names MIG devices: nvc detach takes whole GPUs only (the MIG devices' parent GPU node is shared)")]
    DetachMig,
}

impl From<AttachPlanError> for AttachCliError {
    fn from(e: AttachPlanError) -> Self {
        AttachCliError::Plan(Box::new(e))
    }
}

impl From<AttachError> for AttachCliError {
    fn from(e: AttachError) -> Self {
        AttachCliError::Attach(Box::new(e))
    }
}

impl From<LifecycleError> for AttachCliError {
    fn from(e: LifecycleError) -> Self {
        AttachCliError::Lifecycle(Box::new(e))
    }
}

impl From<SetupError> for AttachCliError {
    fn from(e: SetupError) -> Self {
        AttachCliError::Setup(Box::new(e))
    }
}

/// What `runc state` prints, in the part nvc reads.
#[derive(Deserialize)]
struct State {
    #[serde(default)]
    pid: i32,
    status: String,
    bundle: PathBuf,
    rootfs: PathBuf,
}

/// The runtime to ask: `--runtime`, else the first of the config's runtimes on PATH,
/// else `runc`.
fn runtime_of(args: &AttachArgs, config: &Config) -> PathBuf {
    if let Some(r) = &args.runtime {
        return r.clone();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in &config.runtime.runtimes {
        let name = Path::new(name);
        if name.is_absolute() && name.is_file() {
            return name.to_path_buf();
        }
        if let Some(found) = std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
        {
            return found;
        }
    }
    PathBuf::from("runc")
}

/// The running container's state, from its runtime.
fn running_state(args: &AttachArgs, config: &Config) -> Result<State, AttachCliError> {
    let runtime = runtime_of(args, config);
    let mut cmd = Command::new(&runtime);
    if let Some(root) = &args.root {
        cmd.arg("--root").arg(root);
    }
    let out = cmd
        .args(["state", &args.id])
        .output()
        .map_err(|source| AttachCliError::Runtime {
            runtime: runtime.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(AttachCliError::State {
            runtime,
            id: args.id.clone(),
            stderr: libnvc::report::shorten(String::from_utf8_lossy(&out.stderr).trim())
                .into_owned(),
        });
    }
    let state: State =
        serde_json::from_slice(&out.stdout).map_err(|source| AttachCliError::BadState {
            runtime: runtime.clone(),
            id: args.id.clone(),
            source,
        })?;
    let hint = match state.status.as_str() {
        "running" if state.pid > 0 => return Ok(state),
        "running" => "its state has no process id",
        "paused" => "resume it first (docker unpause, runc resume)",
        "created" => "start it first, or give it the GPUs before (NVIDIA_VISIBLE_DEVICES)",
        _ => "start a new container with the GPUs instead",
    };
    Err(AttachCliError::NotRunning {
        id: args.id.clone(),
        status: state.status,
        hint,
    })
}

/// What both commands start with: the config, the state, the plan, the record.
struct Context {
    state: State,
    plan: AttachPlan,
    record_path: PathBuf,
    record: AttachRecord,
    config: Config,
    privileges: Privileges,
}

fn context(args: &AttachArgs, phases: &[Phase]) -> Result<Context, AttachCliError> {
    let (config, config_path) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc");
    let state = running_state(args, &config)?;
    // After `runc state`, the one program run: each phase from here holds only what it
    // needs (nvc_host::privileges).
    let mut privileges = Privileges::bound(phases).map_err(LifecycleError::from)?;
    privileges
        .enter(Phase::Host)
        .map_err(LifecycleError::from)?;
    let plan = attach::for_attach(&state.bundle, &config, &config_path, &RealHost, &args.gpus)?;
    // Before anything is written: the same guards as the hook's.
    nvc_host::lifecycle::guard_running(state.pid, &state.rootfs, &mut privileges)?;
    // The record is per state directory; runc's default when none is given.
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/run/runc"));
    let root = std::path::absolute(&root).unwrap_or(root);
    let record_path = StateDir::of(&config).attach_record(&root, &args.id);
    let record = AttachRecord::load(&record_path, &args.id, state.pid)?;
    Ok(Context {
        state,
        plan,
        record_path,
        record,
        config,
        privileges,
    })
}

/// The bus ids of `lists`, each once, in their first place: the GPUs a container's
/// `/proc/driver/nvidia` mask shows.
fn union<const N: usize>(lists: [&Vec<String>; N]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    lists
        .into_iter()
        .flatten()
        .filter(|b| seen.insert(b.as_str()))
        .cloned()
        .collect()
}

/// `nvc attach`.
pub fn attach(args: &AttachArgs) -> Result<(), AttachCliError> {
    let Context {
        state,
        plan,
        record_path,
        mut record,
        config,
        mut privileges,
    } = context(args, privileges::ATTACH)?;
    let mut edits = plan.edits.clone();
    // The mask shows the container's own GPUs, those attached before, and these.
    edits.visible_gpus = union([&plan.spec_gpus, &record.gpus, &edits.visible_gpus]);
    let target = Target {
        pid: state.pid,
        rootfs: state.rootfs.clone(),
        spec_devices: Vec::new(),
        update_ldcache: config.ldcache.update,
        device_cgroup: Some(record.device_cgroup(DeviceCgroup::from_spec(&plan.spec)?)),
        readonly: plan.view.readonly,
        tmpfs_mounts: plan.view.tmpfs_mounts.clone(),
        running: true,
        journal: None,
    };
    // Recorded first: a grant the record lacks would be lost by the next change on
    // cgroup v2, a record of one that failed costs nothing.
    for n in edits.device_nodes.iter().filter(|n| n.on_host) {
        if !record.devices.contains(&(n.major, n.minor)) {
            record.devices.push((n.major, n.minor));
        }
    }
    for bus in &plan.edits.visible_gpus {
        if !record.gpus.contains(bus) {
            record.gpus.push(bus.clone());
        }
    }
    record.save(&record_path)?;
    // What is made in the rootfs goes into the container's no-trace record, for its
    // poststop hook to take away.
    let undo_hook = libnvc::plan::keeps_record(&config, &plan.view, &plan.spec);
    let Attached {
        edits: done,
        trace,
        recorded,
    } = lifecycle::attach(
        &config,
        AttachRequest {
            id: &args.id,
            bundle: &state.bundle,
            target,
            driver: &plan.driver,
            edits: &edits,
            keep_record: undo_hook,
        },
        &mut privileges,
    )?;
    privileges.finish().map_err(LifecycleError::from)?;
    let nodes: Vec<String> = done
        .device_nodes
        .iter()
        .map(|n| n.path.display().to_string())
        .collect();
    println!(
        "attached {} to {}: {} (driver files: {} mounts)",
        args.gpus,
        args.id,
        nodes.join(", "),
        done.mounts.len()
    );
    if !trace.made.is_empty() && !recorded {
        println!(
            "note: the mount points and links nvc made stay in the container's root \
             filesystem after it ends{}",
            match undo_hook {
                false => " (it has no nvc poststop hook: it was not started through nvc-runtime with a GPU or NVIDIA_VISIBLE_DEVICES=none)",
                true => " (its record could not be written: see nvc's log)",
            }
        );
    }
    Ok(())
}

/// `nvc detach`.
pub fn detach(args: &AttachArgs) -> Result<(), AttachCliError> {
    let Context {
        state,
        plan,
        record_path,
        mut record,
        mut privileges,
        ..
    } = context(args, privileges::DETACH)?;
    if plan.names_mig {
        return Err(AttachCliError::DetachMig);
    }
    let gone: Vec<(u32, u32)> = plan.gpu_nodes.iter().map(|n| (n.major, n.minor)).collect();
    record.devices.retain(|d| !gone.contains(d));
    let removed_bus: Vec<&String> = plan.edits.visible_gpus.iter().collect();
    record.gpus.retain(|b| !removed_bus.contains(&b));
    let cgroup = record.device_cgroup(DeviceCgroup::from_spec(&plan.spec)?);
    // The GPUs whose folders its /proc/driver/nvidia keeps showing.
    let mut kept = union([&plan.spec_gpus, &record.gpus]);
    kept.retain(|b| !removed_bus.contains(&b));
    privileges
        .enter(Phase::Sources)
        .map_err(LifecycleError::from)?;
    let mask =
        ProcMask::prepare(&plan.driver.roots.nvidia_proc(), &kept).map_err(AttachError::from)?;
    // Saved before detaching, which enters the container's mount namespace: a grant the
    // record still listed would come back with the next change on cgroup v2.
    record.save(&record_path)?;
    let done = nvc_host::attach::detach(
        state.pid,
        &state.rootfs,
        &plan.gpu_nodes,
        &cgroup,
        mask,
        &mut privileges,
    )?;
    privileges.finish().map_err(LifecycleError::from)?;
    let paths: Vec<String> = done.iter().map(|d| d.path.display().to_string()).collect();
    println!(
        "detached {} from {}: removed {} and revoked them in its device cgroup; the driver's files stay in the container",
        args.gpus,
        args.id,
        paths.join(", ")
    );
    Ok(())
}
