//! A GPU container's life on the host, in one place: what the prestart hook
//! ([`prestart`]), the poststop hook ([`poststop`]) and `nvc attach` ([`attach`]) do, in
//! which order, and what each failure undoes. The binaries parse their input, call these,
//! and map the error.
//!
//! A start ([`start`], the order written once, over [`StartSteps`]):
//!
//! 1. The plan (libnvc): nothing on the host changes; a container asking for no GPU is
//!    left alone.
//! 2. **Leases before anything is made**: a container refused its GPUs gets nothing.
//! 3. **The rootfs's lock before its record**: a poststop hook of another container on
//!    the same rootfs waits, then sees the record (and hands its own over, see
//!    [`crate::trace`]). Records left by containers that ended without their poststop
//!    hook are taken away first ([`crate::trace::sweep`]).
//! 4. **The record before set-up**: `record.json` names the container; set-up writes each
//!    thing it makes, and the image's ld.so.cache, to its journal as it goes.
//! 5. Set-up ([`crate::setup`]), in the container's mount namespace.
//! 6. Done: the record is written whole, then the lock released. Failed: back in the
//!    host's mount namespace (then the lock taken, where the container keeps no record),
//!    what set-up made is taken away and the record removed, then the lock released, then
//!    the leases given back: a refused start leaves the rootfs and
//!    the state folder as they were.
//!
//! Killed at any point (the runtime's timeout, SIGKILL): its leases name a process that is
//! gone, and later starts remove them; its record names everything made up to the last
//! thing, and the next start or poststop hook on the rootfs takes it away.
//!
//! A container that keeps no record (Kubernetes', or `hook.leave-no-trace = "never"`:
//! nothing runs at its end) takes no lock to start; a failed start of one still takes
//! away what it made, under the lock.
//!
//! The end ([`poststop`]): the rootfs's lock, its record undone (or handed to a container
//! still running on the rootfs), the stale records swept, the lock released (the rootfs's
//! folder goes with its last record), then the leases ended whatever came of that.

// An error here ends a one-shot process (or its attach): returned once, its size costs
// nothing, and boxing it would cost an allocation on the path that succeeds.
#![allow(clippy::result_large_err)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use libnvc::oci::spec;
use libnvc::plan::{ConfigSource, GpuPlan, Handed, Plan, PlanError, Stage};
use nvc_config::Config;

use crate::container::{self, FsError};
use crate::devcgroup::DeviceCgroup;
use crate::files_cache::RunCache;
use crate::leases::{self, LeaseError, Taken};
use crate::phases::Phases;
use crate::privileges::{self, Phase, Privileges, PrivilegesError};
use crate::probe::{HelperHost, RealHost};
use crate::setup::{self, Failed, SetupError, Target};
use crate::state::{RootfsState, StateDir, StateError};
use crate::trace::{self, RecordDir, Trace, TraceError};

/// Why a container could not be started, ended or changed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The plan stopped: the spec, the request, the driver or a requirement.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A GPU is held by another container, or its lease could not be taken.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Setting the container up failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The spec's device cgroup rules are invalid.
    #[error(transparent)]
    DeviceRules(#[from] crate::devcgroup::DevCgroupError),
    /// The state folder could not be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// The record or the rootfs could not be used to take away what nvc made.
    #[error("cannot take away what nvc made in the container's rootfs")]
    Trace(#[source] TraceError),
    /// The bundle's spec could not be read.
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// The running container cannot be changed.
    #[error(transparent)]
    Attach(#[from] crate::attach::AttachError),
    /// The capabilities could not be bounded.
    #[error(transparent)]
    Privileges(#[from] PrivilegesError),
}

/// The container a hook is called for, as the runtime's state on stdin names it.
#[derive(Debug, Clone)]
pub struct Container<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its init process (on the host).
    pub pid: i32,
    /// Its bundle.
    pub bundle: &'a Path,
}

/// One start's effects, in the order [`start`] calls them; the real ones are
/// [`prestart`]'s, a recording fake's in the tests.
pub trait StartSteps {
    /// The GPU leases taken.
    type Leases;
    /// The rootfs's lock, held.
    type Lock;
    /// The container's record, open.
    type Record;
    /// Takes the GPU leases (`None`: nothing to take).
    fn take_leases(&mut self) -> Result<Option<Self::Leases>, LifecycleError>;
    /// Takes the rootfs's lock; `None` when it cannot be had (logged: the start goes on,
    /// keeping no record).
    fn lock(&mut self) -> Option<Self::Lock>;
    /// Sweeps the records of containers that ended without their poststop hook, and
    /// opens this container's; `None` when it cannot be written (logged).
    fn open_record(&mut self, lock: &Self::Lock) -> Option<Self::Record>;
    /// Sets the container up, writing what it makes to `record`'s journal.
    fn set_up(&mut self, record: Option<&Self::Record>) -> Result<Trace, Failed>;
    /// Writes the record whole.
    fn save(&mut self, lock: &Self::Lock, record: Self::Record, trace: &Trace);
    /// Returns to the host's mount namespace after a failed set-up (which may have
    /// entered the container's).
    fn leave(&mut self);
    /// Takes away what a failed set-up made (`made`) and removes its record.
    fn take_back(&mut self, lock: Option<&Self::Lock>, record: Option<Self::Record>, made: &Trace);
    /// Releases the rootfs's lock.
    fn unlock(&mut self, lock: Self::Lock);
    /// Gives the leases back.
    fn release(&mut self, leases: Self::Leases);
}

/// A start, in the order the module doc gives; `keep_record`: whether the container's
/// end runs nvc's poststop hook, which reads a record.
pub fn start<S: StartSteps>(steps: &mut S, keep_record: bool) -> Result<(), LifecycleError> {
    let leases = steps.take_leases()?;
    let lock = keep_record.then(|| steps.lock()).flatten();
    let record = lock.as_ref().and_then(|lock| steps.open_record(lock));
    match steps.set_up(record.as_ref()) {
        Ok(trace) => {
            if let (Some(lock), Some(record)) = (&lock, record) {
                steps.save(lock, record, &trace);
            }
            if let Some(lock) = lock {
                steps.unlock(lock);
            }
            Ok(())
        }
        Err(Failed { error, made }) => {
            steps.leave();
            // Under the lock, as every change to what a rootfs holds of nvc's.
            let lock = lock.or_else(|| steps.lock());
            steps.take_back(lock.as_ref(), record, &made);
            if let Some(lock) = lock {
                steps.unlock(lock);
            }
            if let Some(leases) = leases {
                steps.release(leases);
            }
            Err(error.into())
        }
    }
}

/// The prestart hook's work for `container`: the plan (stage `Hook`, with the arguments
/// `handed` by nvc-runtime), then [`start`]. `config` was read from `config_path`.
pub fn prestart(
    config: &Config,
    config_path: &Path,
    container: &Container<'_>,
    handed: &Handed,
    phases: &mut Phases,
) -> Result<(), LifecycleError> {
    // Before anything of the container is read: each phase holds only what it needs.
    let mut privileges = Privileges::bound(privileges::PRESTART)?;
    privileges.enter(Phase::Host)?;
    let state = StateDir::of(config);
    let source = ConfigSource {
        path: config_path,
        from_env: false,
    };
    // One full discovery serves every start until the driver changes (see
    // crate::files_cache for when an entry is used).
    let cache = RunCache::new(&state);
    let plan = Plan::for_bundle_cached(
        container.bundle,
        config,
        &source,
        // libcuda, when asked at all, is asked in a process of its own: the hook is
        // linked statically.
        &HelperHost,
        Stage::Hook,
        handed,
        Some(&cache),
    )
    .map_err(PlanError::from)?;
    phases.mark("plan");
    let Some(gpu) = &plan.gpu else {
        log::debug!("{}: no GPU requested", container.bundle.display());
        return Ok(());
    };
    let target = Target {
        pid: container.pid,
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
        device_cgroup: Some(DeviceCgroup::from_spec(&plan.spec)?),
        readonly: plan.view.readonly,
        tmpfs_mounts: plan.view.tmpfs_mounts.clone(),
        running: false,
        journal: None,
    };
    // What is made in the rootfs is recorded for the poststop hook to take away, where
    // one runs (the shim adds it unless `hook.leave-no-trace` leaves this container out;
    // Podman runs a hooks.d file's itself; Docker's `--gpus` runs none): a record nothing
    // reads is not kept.
    let keep_record = libnvc::plan::keeps_record_at_prestart(config, &plan.view, &plan.spec);
    let mut steps = HookStart {
        state,
        container,
        plan: &plan,
        gpu,
        target,
        host_namespace: None,
        left_in_container: false,
        privileges,
        phases,
    };
    let result = start(&mut steps, keep_record);
    if let Err(e) = steps.privileges.finish() {
        log::warn!("{}", libnvc::report::error_chain(&e));
    }
    // The process ends next, and its memory with it: the plan is not freed piece by
    // piece first (it alone was 0.12 M instructions).
    let HookStart { target, .. } = steps;
    std::mem::forget((plan, target));
    result
}

/// [`prestart`]'s steps.
struct HookStart<'a, 'c> {
    state: StateDir,
    container: &'a Container<'c>,
    plan: &'a Plan,
    gpu: &'a GpuPlan,
    target: Target,
    /// The host's mount namespace, opened before set-up enters the container's.
    host_namespace: Option<OwnedFd>,
    /// The host's mount namespace could not be entered again after a failed set-up.
    left_in_container: bool,
    privileges: Privileges,
    phases: &'a mut Phases,
}

impl HookStart<'_, '_> {
    /// Enters `phase` ([`crate::privileges`]); a failure is logged: what needs the
    /// capability then fails and says so.
    fn enter(&mut self, phase: Phase) {
        if let Err(e) = self.privileges.enter(phase) {
            log::warn!("{}", libnvc::report::error_chain(&e));
        }
    }
}

impl StartSteps for HookStart<'_, '_> {
    type Leases = Taken;
    type Lock = RootfsState;
    type Record = RecordDir;

    fn take_leases(&mut self) -> Result<Option<Taken>, LifecycleError> {
        let taken = leases::take(
            &self.state,
            self.container.id,
            self.container.pid,
            &self.plan.request,
            &self.gpu.driver,
        )?;
        self.phases.mark("leases");
        Ok(taken)
    }

    fn lock(&mut self) -> Option<RootfsState> {
        // Opened here, in the host's mount namespace: set-up enters the container's.
        untraced(self.state.lock_rootfs(&self.target.rootfs))
    }

    fn open_record(&mut self, lock: &RootfsState) -> Option<RecordDir> {
        let name = RootfsState::record_name(self.container.id, self.container.bundle);
        self.enter(Phase::Undo);
        trace::sweep(lock, &self.target.rootfs, Some(&name));
        self.enter(Phase::Host);
        let record = untraced(RecordDir::create(
            lock,
            self.container.id,
            self.container.bundle,
            &self.target.rootfs,
            self.container.pid,
        ));
        self.phases.mark("record-open");
        record
    }

    fn set_up(&mut self, record: Option<&RecordDir>) -> Result<Trace, Failed> {
        let failed = |error: SetupError| Failed {
            error,
            made: Trace::default(),
        };
        self.host_namespace = Some(container::own_mount_namespace().map_err(|e| failed(e.into()))?);
        self.target.journal = record.map(RecordDir::journal);
        let (_, trace) = setup::set_up_noted(
            &self.gpu.driver,
            &self.gpu.edits,
            &self.target,
            Some(&mut self.privileges),
        )?;
        self.phases.mark("set-up");
        Ok(trace)
    }

    fn save(&mut self, lock: &RootfsState, record: RecordDir, trace: &Trace) {
        self.enter(Phase::State);
        untraced(record.save(lock, trace));
        self.phases.mark("record-save");
    }

    fn leave(&mut self) {
        self.enter(Phase::LeaveContainer);
        if let Some(ns) = self.host_namespace.take() {
            // Unlinking a mount point is refused in the namespace its mount is in; the
            // state folder and the rootfs's lock are the host's.
            if let Err(e) = container::return_to_mount_namespace(&ns) {
                log::warn!(
                    "what nvc made in the rootfs of the refused container stays: {}",
                    libnvc::report::error_chain(&e)
                );
                self.left_in_container = true;
            }
        }
    }

    fn take_back(&mut self, lock: Option<&RootfsState>, record: Option<RecordDir>, made: &Trace) {
        if self.left_in_container {
            return;
        }
        self.enter(Phase::Undo);
        match trace::take_back(&self.target.rootfs, made) {
            Ok(undone) => log::info!(
                "container {} was not started: {} things nvc made taken away, {} left",
                self.container.id,
                undone.removed,
                undone.left.len()
            ),
            Err(e) => log::warn!(
                "what nvc made in the rootfs of the refused container stays: {}",
                libnvc::report::error_chain(&e)
            ),
        }
        self.enter(Phase::State);
        if let (Some(lock), Some(record)) = (lock, record) {
            record.remove(lock);
        }
    }

    fn unlock(&mut self, lock: RootfsState) {
        drop(lock);
    }

    fn release(&mut self, leases: Taken) {
        leases.release();
    }
}

/// `result`'s value; its error only logged: what nvc makes then stays in the rootfs.
pub(crate) fn untraced<T, E: std::error::Error>(result: Result<T, E>) -> Option<T> {
    result
        .map_err(|e| {
            log::warn!(
                "what nvc makes in the rootfs stays after the container: {}",
                libnvc::report::error_chain(&e)
            )
        })
        .ok()
}

/// The poststop hook's work: takes away what was made for container `id` of `bundle`
/// (also the prestart hook's, when a runtime calls it at `poststop` with the same
/// arguments, as a hooks.d file listing both stages does), then ends its GPU leases
/// whatever came of that; marks the phases `spec`, `undo` and `leases`.
pub fn poststop(
    config: &Config,
    id: &str,
    bundle: &Path,
    phases: &mut Phases,
) -> Result<(), LifecycleError> {
    let mut privileges = Privileges::bound(privileges::POSTSTOP)?;
    privileges.enter(Phase::Host)?;
    let state = StateDir::of(config);
    let undone = undo_rootfs(&state, id, bundle, &mut privileges, phases);
    privileges.enter(Phase::State)?;
    end_leases(&state, id);
    phases.mark("leases");
    undone
}

/// Removes the lease file of container `id`. A failure is only logged: the lease is
/// stale anyway now that the container's process has ended, and the next start removes
/// it.
fn end_leases(state: &StateDir, id: &str) {
    match leases::end(state, id) {
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
    state: &StateDir,
    id: &str,
    bundle: &Path,
    privileges: &mut Privileges,
    phases: &mut Phases,
) -> Result<(), LifecycleError> {
    // Only `root.path` of the spec: the rest is not parsed.
    let rootfs = spec::read_rootfs(&RealHost, &bundle.join("config.json"), bundle)?;
    phases.mark("spec");
    if !rootfs.exists() {
        log::debug!(
            "container {id} ended: its rootfs {} is gone, nothing to take away",
            rootfs.display()
        );
        return Ok(());
    }
    // What an image's author wrote is read from here on: only what undoing needs.
    privileges.enter(Phase::Undo)?;
    // Not while another container's hook sets the same rootfs up.
    let lock = state.lock_rootfs(&rootfs)?;
    let undone = trace::undo(&lock, id, bundle, &rootfs).map_err(LifecycleError::Trace)?;
    drop(lock);
    phases.mark("undo");
    log::info!(
        "container {id} ended: {} things nvc made taken away, {} left, ld.so.cache {}{}{}",
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
            .unwrap_or_default(),
        match undone.swept {
            0 => String::new(),
            n => format!("; {n} records of containers that ended without their poststop hook too"),
        }
    );
    Ok(())
}

/// What [`attach`] is asked to do: the running container, the edits, and how.
#[derive(Debug)]
pub struct AttachRequest<'a> {
    /// The container's id.
    pub id: &'a str,
    /// Its bundle.
    pub bundle: &'a Path,
    /// The set-up target ([`Target::running`] set).
    pub target: Target,
    /// The driver.
    pub driver: &'a libnvc::discover::Driver,
    /// The edits.
    pub edits: &'a libnvc::edits::ContainerEdits,
    /// Whether its spec runs nvc's poststop hook, which reads a record.
    pub keep_record: bool,
}

/// What [`attach`] did.
#[derive(Debug)]
pub struct Attached {
    /// The edits made.
    pub edits: libnvc::edits::ContainerEdits,
    /// What was made in the rootfs.
    pub trace: Trace,
    /// Whether it was added to the container's record (for its poststop hook).
    pub recorded: bool,
}

/// `nvc attach`'s effects, once the plan and the grants are known and the container has
/// passed [`guard_running`] (before its grants were recorded): as a start does, the rootfs's lock before the record (the
/// container's own, or a new one), set-up of the running container journaled into it,
/// the record saved. What was made before a failure stays recorded for the container's
/// poststop hook (the container runs on: its mounts may sit on it).
pub fn attach(
    config: &Config,
    request: AttachRequest<'_>,
    privileges: &mut Privileges,
) -> Result<Attached, LifecycleError> {
    let state = StateDir::of(config);
    let mut target = request.target;
    let mut kept = None;
    if request.keep_record {
        match state
            .lock_rootfs(&target.rootfs)
            .map_err(TraceError::from)
            .and_then(|lock| {
                let addition = trace::Addition::open(
                    &lock,
                    request.id,
                    request.bundle,
                    &target.rootfs,
                    target.pid,
                )?;
                Ok((lock, addition))
            }) {
            Ok((lock, addition)) => {
                target.journal = addition.journal().map(RecordDir::journal);
                kept = Some((lock, addition));
            }
            Err(e) => log::warn!("{}", libnvc::report::error_chain(&e)),
        }
    }
    let (edits, trace) = match setup::set_up_noted(
        request.driver,
        request.edits,
        &target,
        Some(&mut *privileges),
    ) {
        Ok(done) => done,
        Err(failed) => {
            privileges.enter(Phase::State)?;
            if let Some((lock, addition)) = kept {
                untraced(addition.save(&lock, &failed.made));
            }
            return Err(failed.error.into());
        }
    };
    privileges.enter(Phase::State)?;
    let recorded = match kept {
        Some((lock, addition)) => untraced(addition.save(&lock, &trace)).is_some(),
        None => false,
    };
    Ok(Attached {
        edits,
        trace,
        recorded,
    })
}

/// The guards a running container passes before nvc changes it, as the prestart hook's:
/// its process is not in a user namespace of its own, has the state's rootfs as its root,
/// and that root is not the host's (the mount namespace is checked when it is entered:
/// never this process's own; and set-up stays on the rootfs's mount).
/// `privileges` enters [`Phase::InspectProcess`] for it, and [`Phase::Host`] after.
pub fn guard_running(
    pid: i32,
    rootfs: &Path,
    privileges: &mut Privileges,
) -> Result<(), LifecycleError> {
    privileges.enter(Phase::InspectProcess)?;
    crate::attach::check_process(pid, rootfs)?;
    container::refuse_host_root(rootfs).map_err(SetupError::from)?;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    container::refuse_host_root(&root).map_err(|e| match e {
        FsError::HostRoot { .. } => SetupError::from(FsError::HostRoot {
            path: rootfs.to_path_buf(),
        }),
        e => SetupError::from(e),
    })?;
    privileges.enter(Phase::Host)?;
    Ok(())
}

#[cfg(test)]
mod tests;
