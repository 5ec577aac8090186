//! Runs the hooks a CDI spec asks the engine to run (`nvc-hook cdi-setup`, and the
//! `cdi-links`, `update-ldcache` and `cdi-mask-proc` of earlier specs; their arguments
//! are [`libnvc::cdi::hooks::CdiHook`]).
//!
//! # No trace
//!
//! `cdi-setup` keeps the prestart hook's record ([`crate::trace`]) of the links it made
//! and of the image's ld.so.cache it replaced, in nvc's state folder (the host's: the new
//! mount namespace is a copy of the runtime's), for the spec's poststop hook, `nvc-hook
//! poststop`, which takes them away when the container ends exactly as it does for the
//! prestart path ([`crate::lifecycle::poststop`]). The same rules decide whether a record
//! is kept (`hook.leave-no-trace`, and a poststop hook of nvc's in the container's
//! spec). The record names the container's init by its pid in the host's PID namespace:
//! at `createRuntime` (`--enter`) the state's `pid`; at `createContainer` the state's
//! `pid` is the init's `getpid()`, 1 in a new PID namespace, so the hook reads its
//! parent, the init that runs it, from `/proc/self/stat` of the host's procfs, still at
//! `/proc`. The mount points the engine made for the spec's mounts, and the
//! mask's mount, are the engine's and go with the container's mounts, not with nvc.
//!
//! # The stage, and why it is safe
//!
//! The spec `libnvc::cdi::generate` writes runs `cdi-setup --enter` at `createRuntime`:
//! the runtime's own process starts it once the container's mounts are made, before
//! `pivot_root`, with the init's host pid in the state; the hook enters the container's
//! mount namespace through that pid ([`crate::container::enter_mount_namespace`], the
//! prestart hook's own: a pidfd, and a namespace that must not be the hook's own) and is
//! then where a `createContainer` hook starts, below. runc runs `createContainer` hooks
//! from its container's init, a Go process held to one thread, which writes the hook's
//! state to its stdin late (2 to 15 ms on the H100); from runc's own process it comes at
//! once.
//!
//! The hooks of earlier specs, and `cdi-setup` without `--enter`, are `createContainer`
//! hooks. The OCI runtime spec runs those *in the container's
//! namespaces*, after the runtime has made the container's mounts (so the driver files the
//! spec bind-mounts are in place) and before `pivot_root`; the hook's path resolves in the
//! runtime's namespace. runc runs them from its `init` process, in the new mount
//! namespace, with the rootfs (`root.path`, a host path) still reachable by that path and
//! the host's `/proc` still at `/proc`.
//!
//! So the hook does not enter any namespace, unlike the prestart hook
//! ([`crate::setup`]), which runs in the runtime's namespace and must `setns` into the
//! container's through its pid. Here that pid is useless: runc reports `getpid()` of its
//! init, which inside a new pid namespace is 1, and `/proc/1` is the *host's* init, whose
//! mount namespace is the host's. The hook instead finds the rootfs as NVIDIA's
//! `nvidia-cdi-hook` does: the state's `bundle`, its `config.json`, `root.path` (joined to
//! the bundle when relative), and works on that path in the namespace it was started in,
//! where the container's mounts are visible. It must therefore only ever run at the
//! `createContainer` stage; the spec `libnvc::cdi::generate` writes puts it nowhere else.
//!
//! The rootfs is hostile, and the hook runs as the runtime's root with every
//! capability. As everywhere in nvc, it touches the rootfs only through
//! [`ContainerRoot`]: opened once as an `O_PATH` fd, every path resolved inside it
//! (`openat2(RESOLVE_IN_ROOT)` or the fd walk), links made by a temporary name and a
//! rename, the cache written to a temporary file and renamed, the old cache read with a
//! size bound and parsed by a bounded parser. Nothing from the image is executed (no
//! `ldconfig`), no ELF file of the image is parsed, and the hook's environment is the
//! spec's fixed `PATH`.
//!
//! # `cdi-mask-proc`
//!
//! At this stage two procfs are in reach: the hook's own `/proc`, the host's procfs (the
//! new mount namespace is a copy of the runtime's), and the container's new one, which
//! runc mounted at `<rootfs>/proc` among the spec's mounts. The mask ([`ProcMask`], the
//! prestart hook's own) is read from the first, `<proc root>/driver/nvidia` with the
//! `--proc-root` the spec names, and goes onto the second, opened through the rootfs and
//! checked to be a procfs mount. Which GPU folders it shows comes from the bundle's
//! `config.json`, which the engine wrote: its `linux.devices`, matched by device number
//! with the host's `gpus/<bus>/information` ([`libnvc::cdi::hooks::visible_gpus`]), never
//! from the container's environment or files.
//!
//! crun runs `createContainer` hooks in the container's mount namespace too, after its
//! mounts and before the pivot, as runc does (and, until its pull request #1925, after it
//! made a read-only rootfs read-only, which the mask does not mind: it writes nothing
//! there). A crun built
//! between its pull requests #2094 and #2168 ran them before any mount, `/proc`
//! included. There the container's `/proc` is still the image's folder when the hook
//! runs and a fresh procfs, the host's whole `/proc/driver/nvidia`, comes after it: the
//! hook refuses the container ([`CdiHookError::ProcNotMounted`]) rather than let it
//! start unmasked. A `/proc` that is a mount of anything but a procfs, or a link, is
//! refused as the prestart hook refuses it; a container whose spec mounts nothing at
//! `/proc` has only the image's folder there, and is left alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libnvc::cdi::hooks::{self, CdiHook, HookArgsError};
use libnvc::discover::{proc, read_majors, DiscoverError};
use libnvc::ldcache::{self, Entry};
use libnvc::oci::spec::{self, SpecError, SpecView};
use log::info;
use serde::Deserialize;

use crate::container::{ContainerRoot, FileKind, FsError};
use crate::ldcache::CacheChange;
use crate::lifecycle::untraced;
use crate::phases::Phases;
use crate::probe::RealHost;
use crate::proc_mask::{Masked, ProcMask};
use crate::state::{RootfsState, StateDir};
use crate::trace::{self, RecordDir, Trace};

/// The most entries read from one library folder.
const MAX_DIR_ENTRIES: usize = 1 << 16;

/// Why a CDI hook failed.
#[derive(Debug, thiserror::Error)]
pub enum CdiHookError {
    /// Its arguments are invalid.
    #[error(transparent)]
    Args(#[from] HookArgsError),
    /// The spec's rootfs is read-only and already was when the hook ran: the runtime made
    /// it read-only before the createContainer hooks, which runc and newer crun do after.
    #[error(
        "the container's rootfs is read-only (root.readonly) and the runtime made it so \
         before running nvc's CDI hook, so the driver's soname links cannot be \
         made: older crun releases do this (1.21 does; 1.28 and runc do not); use a newer \
         crun or runc, or a writable rootfs"
    )]
    ReadOnlyBeforeHooks(#[source] FsError),
    /// The state could not be read from stdin.
    #[error(transparent)]
    StateRead(#[from] libnvc::oci::state::StateError),
    /// The state on stdin is not the OCI state.
    #[error("invalid container state on stdin (expected the OCI state JSON with the bundle)")]
    State(#[source] serde_json::Error),
    /// The state's bundle is relative: the hook's working directory is the rootfs, so it
    /// cannot be resolved safely.
    #[error("the container state's bundle {0} is not an absolute path")]
    RelativeBundle(PathBuf),
    /// The bundle's config.json is unusable.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A file-system operation in the container failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The container's ld.so.cache could not be updated.
    #[error(transparent)]
    LdCache(#[from] crate::ldcache::UpdateError),
    /// The host's GPUs could not be read from its `/proc/driver/nvidia`.
    #[error("cannot read the host's GPUs to mask the container's /proc/driver/nvidia")]
    HostGpus(#[source] DiscoverError),
    /// The spec mounts a procfs at `/proc`, but none is there yet: the runtime ran the
    /// hook before its mounts.
    #[error(
        "the container's /proc is not mounted yet ({rootfs}/proc is the image's folder), so \
         its /proc/driver/nvidia cannot be masked: the OCI runtime ran the createContainer \
         hook before the container's mounts (crun between its changes #2094 and #2168 \
         does); use runc or a crun that runs createContainer hooks after the mounts"
    )]
    ProcNotMounted {
        /// The rootfs.
        rootfs: PathBuf,
    },
    /// The container was given a GPU that the health record says is broken.
    #[error(transparent)]
    Unhealthy(#[from] libnvc::health::UnhealthyGpu),
    /// `cdi-setup --enter` got no host pid of the container's init in its state.
    #[error(
        "cdi-setup --enter needs the container's init as the host sees it in the state's \
         pid, and got {0}: the spec runs it at a stage where the runtime reports the pid \
         inside the container (createContainer); run it at createRuntime, as the spec `nvc \
         cdi generate` writes does"
    )]
    EnterPid(i32),
}

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    id: String,
    #[serde(default)]
    pid: i32,
    bundle: PathBuf,
}

/// The container's spec, as nvc reads it, from the OCI state a hook reads on stdin: the
/// bundle's config.json (`rootfs`: `root.path`, joined to the bundle when relative).
pub fn view_from_state(state: &[u8]) -> Result<SpecView, CdiHookError> {
    let state: State = serde_json::from_slice(state).map_err(CdiHookError::State)?;
    if !state.bundle.is_absolute() {
        return Err(CdiHookError::RelativeBundle(state.bundle));
    }
    let config = spec::read_spec(&RealHost, &state.bundle.join("config.json"))?;
    Ok(spec::view(&config, &state.bundle)?)
}

/// The container's rootfs, as a host path, from the OCI state a hook reads on stdin.
pub fn rootfs_from_state(state: &[u8]) -> Result<PathBuf, CdiHookError> {
    Ok(view_from_state(state)?.rootfs)
}

/// Does `hook`'s work in the container that `state` (the OCI state on the hook's stdin)
/// describes; see the module's documentation for the stage this must run in.
pub fn run(hook: &CdiHook, state: &[u8]) -> Result<(), CdiHookError> {
    let view = view_from_state(state)?;
    let root = ContainerRoot::open(&view.rootfs)?;
    run_in(hook, &view, &root)
}

/// `cdi-setup` ([`run_in`]) in the container that `state` describes, keeping the record
/// of what it makes in `config`'s state folder when the container's end runs nvc's
/// poststop hook ([`libnvc::plan::keeps_record`]); a set-up that fails takes away what it
/// had made, and its record.
pub fn run_recorded(
    hook: &CdiHook,
    state: &[u8],
    config: &nvc_config::Config,
    phases: &mut Phases,
) -> Result<(), CdiHookError> {
    let parsed: State = serde_json::from_slice(state).map_err(CdiHookError::State)?;
    if !parsed.bundle.is_absolute() {
        return Err(CdiHookError::RelativeBundle(parsed.bundle));
    }
    let spec_value = spec::read_spec(&RealHost, &parsed.bundle.join("config.json"))?;
    let view = spec::view(&spec_value, &parsed.bundle)?;
    phases.mark("spec");
    // The container's init in the host's PID namespace: the state's pid where the hook
    // enters its mount namespace (`--enter`, at createRuntime), else the hook's parent.
    let enter = matches!(hook, CdiHook::Setup { enter: true, .. });
    let init = match enter {
        true if parsed.pid > 1 => Some(parsed.pid),
        true => return Err(CdiHookError::EnterPid(parsed.pid)),
        false => init_pid(),
    };
    // The host's GPUs, read once for the health screen and the mask; an error in
    // reading them is the mask's, reported at its step.
    let host_gpus = match hook {
        CdiHook::Setup {
            proc_root: Some(proc_root),
            ..
        } => Some(HostGpus::read(proc_root, &view)),
        _ => None,
    };
    // No broken GPU handed out: refused before anything is made.
    if let Some(Ok(host)) = &host_gpus {
        screen_health(host, config)?;
        phases.mark("health");
    }
    let keep = !parsed.id.is_empty() && libnvc::plan::keeps_record(config, &view, &spec_value);
    let lock = match keep {
        true => untraced(StateDir::of(config).lock_rootfs(&view.rootfs)),
        false => None,
    };
    let record = lock.as_ref().and_then(|lock| {
        let name = RootfsState::record_name(&parsed.id, &parsed.bundle);
        trace::sweep(lock, &view.rootfs, Some(&name));
        untraced(RecordDir::create(
            lock,
            &parsed.id,
            &parsed.bundle,
            &view.rootfs,
            init.unwrap_or(0),
        ))
    });
    if enter {
        if let Err(e) = crate::container::enter_mount_namespace(parsed.pid) {
            if let (Some(lock), Some(record)) = (&lock, record) {
                record.remove(lock);
            }
            return Err(e.into());
        }
        phases.mark("enter");
    }
    let root = ContainerRoot::open(&view.rootfs)?;
    if let Some(record) = &record {
        root.journal_to(record.journal());
    }
    phases.mark("record");
    let mut ldcache = None;
    let result = set_up(hook, &view, &root, host_gpus, &mut ldcache, phases);
    let made = Trace {
        made: root.made(),
        ldcache,
    };
    drop(root);
    match result {
        Ok(()) => {
            if let (Some(lock), Some(record)) = (&lock, record) {
                untraced(record.save(lock, &made));
            }
            phases.mark("save");
            Ok(())
        }
        Err(e) => {
            match trace::take_back(&view.rootfs, &made) {
                Ok(undone) => info!(
                    "the container was not started: {} things nvc made taken away, {} left",
                    undone.removed,
                    undone.left.len()
                ),
                Err(e) => log::warn!(
                    "what nvc made in the rootfs of the refused container stays: {}",
                    libnvc::report::error_chain(&e)
                ),
            }
            if let (Some(lock), Some(record)) = (&lock, record) {
                record.remove(lock);
            }
            Err(e)
        }
    }
}

/// The host's GPUs (`<proc_root>/driver/nvidia/gpus`) and the bus ids of those a
/// container was given: the GPUs whose `<nvidia major>:<Device Minor>` is among its
/// `linux.devices` ([`hooks::visible_gpus`]); none where `/proc/devices` names no
/// `nvidia` major.
struct HostGpus {
    /// `<proc_root>/driver/nvidia`.
    nvidia: PathBuf,
    /// The host's GPUs, in index order.
    gpus: Vec<proc::ProcGpu>,
    /// The bus ids of those the container was given.
    given: Vec<String>,
}

impl HostGpus {
    /// The host's GPUs under `proc_root` and those the container of `view` was given.
    fn read(proc_root: &Path, view: &SpecView) -> Result<HostGpus, CdiHookError> {
        let nvidia = proc_root.join("driver/nvidia");
        let gpus = proc::read_gpus(&RealHost, &nvidia).map_err(CdiHookError::HostGpus)?;
        let given = read_majors(&RealHost, proc_root)
            .get("nvidia")
            .map_or_else(Vec::new, |&major| {
                hooks::visible_gpus(&gpus, major, &view.devices)
            });
        Ok(HostGpus {
            nvidia,
            gpus,
            given,
        })
    }
}

/// Refuses the container when one of the GPUs it was given (`host.given`: those the
/// engine took from the CDI devices it asked for) is broken by the current health record,
/// as the prestart path refuses a request naming one ([`libnvc::health`]): the engine
/// resolved the CDI names, `all` included, to these devices, so nvc can only refuse, not
/// leave one out. A record that is missing or not current blocks nothing; nor does
/// `[requests] health-check = false`.
fn screen_health(host: &HostGpus, config: &nvc_config::Config) -> Result<(), CdiHookError> {
    use libnvc::health::{assess, Assessment, UnhealthyGpu};
    use libnvc::probe::HostProbe;
    if !config.requests.health_check || host.given.is_empty() {
        return Ok(());
    }
    let version = libnvc::probe::read_text(&RealHost, &host.nvidia.join("version"))
        .ok()
        .and_then(|text| proc::parse_version_file(&text))
        .unwrap_or_default();
    let record = match assess(
        &RealHost.health_inputs(config),
        &version,
        config.requests.health_max_age,
    ) {
        Assessment::Current { record, .. } => record,
        Assessment::Ignored { reason, .. } => {
            info!("GPU health not checked: {reason}");
            return Ok(());
        }
    };
    for (index, gpu) in host.gpus.iter().enumerate() {
        if !host.given.contains(&gpu.bus_id) {
            continue;
        }
        if let Some(health) = record.gpu(&gpu.uuid).filter(|h| !h.is_healthy()) {
            return Err(UnhealthyGpu {
                variable: "the container's CDI devices",
                index: u32::try_from(index).unwrap_or(u32::MAX),
                uuid: gpu.uuid.clone(),
                bus_id: gpu.bus_id.clone(),
                faults: health.describe(),
            }
            .into());
        }
    }
    Ok(())
}

/// The container's init in the host's PID namespace: this hook's parent, read from the
/// host's procfs, which is still at `/proc` at this stage (`getppid` would answer in the
/// container's PID namespace).
fn init_pid() -> Option<i32> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The set-up steps of `hook` (each mode's, or all three of `cdi-setup`), noting the
/// ld.so.cache written in `ldcache`.
fn set_up(
    hook: &CdiHook,
    view: &SpecView,
    root: &ContainerRoot,
    host_gpus: Option<Result<HostGpus, CdiHookError>>,
    ldcache: &mut Option<CacheChange>,
    phases: &mut Phases,
) -> Result<(), CdiHookError> {
    let CdiHook::Setup {
        links,
        folders,
        compat_above,
        proc_root,
        ..
    } = hook
    else {
        return run_in(hook, view, root);
    };
    make_links(links, view, root)?;
    phases.mark("links");
    if !folders.is_empty() {
        let entries = folder_entries_of(root, folders)?;
        phases.mark("folders");
        *ldcache = crate::ldcache::update_noted(root, entries, compat_above.as_ref())?;
        phases.mark("ldcache");
    }
    if let Some(proc_root) = proc_root {
        let host = host_gpus.unwrap_or_else(|| HostGpus::read(proc_root, view))?;
        mask_proc(&host, view, root)?;
        phases.mark("mask");
    }
    Ok(())
}

fn make_links(
    links: &[hooks::Link],
    view: &SpecView,
    root: &ContainerRoot,
) -> Result<(), CdiHookError> {
    for link in links {
        root.symlink(&link.link, &link.target)
            .map_err(|e| read_only_before_hooks(e, view))?;
    }
    Ok(())
}

fn folder_entries_of(
    root: &ContainerRoot,
    folders: &[PathBuf],
) -> Result<Vec<Entry>, CdiHookError> {
    let mut ours = Vec::new();
    for folder in folders {
        ours.extend(folder_entries(root, folder)?);
    }
    Ok(ours)
}

/// `e`, or [`CdiHookError::ReadOnlyBeforeHooks`] when it is the read-only file system of a
/// spec whose rootfs is read-only: the runtime made it so too early.
fn read_only_before_hooks(e: FsError, view: &SpecView) -> CdiHookError {
    let erofs = matches!(&e, FsError::Io { source, .. }
        if source.raw_os_error() == Some(libc::EROFS));
    if erofs && view.readonly {
        CdiHookError::ReadOnlyBeforeHooks(e)
    } else {
        CdiHookError::Fs(e)
    }
}

/// Masks the container's `/proc/driver/nvidia` (the container of `view`, whose rootfs is
/// `root`) to the GPUs it was given (`host.given`).
fn mask_proc(host: &HostGpus, view: &SpecView, root: &ContainerRoot) -> Result<(), CdiHookError> {
    let visible = &host.given;
    let Some(mask) = ProcMask::prepare(&host.nvidia, visible)? else {
        info!("{} does not exist: nothing to mask", host.nvidia.display());
        return Ok(());
    };
    match mask.apply(root)? {
        Masked::NoProcfs if view.mount_destinations.iter().any(|d| is_proc(d)) => {
            Err(CdiHookError::ProcNotMounted {
                rootfs: view.rootfs.clone(),
            })
        }
        masked => {
            info!(
                "{}/proc/driver/nvidia: {masked:?}, showing GPUs {visible:?}",
                view.rootfs.display()
            );
            Ok(())
        }
    }
}

/// Whether a mount destination of the spec is the container's `/proc` (runc takes a
/// relative destination as relative to `/`).
fn is_proc(destination: &Path) -> bool {
    Path::new("/")
        .join(destination)
        .components()
        .eq(Path::new("/proc").components())
}

/// Does `hook`'s work in the container of `view` (its spec) whose rootfs is `root`.
/// Running a `cdi-links` or `update-ldcache` hook again changes nothing.
pub fn run_in(hook: &CdiHook, view: &SpecView, root: &ContainerRoot) -> Result<(), CdiHookError> {
    match hook {
        CdiHook::MaskProc { proc_root } => mask_proc(&HostGpus::read(proc_root, view)?, view, root),
        CdiHook::Links(links) => make_links(links, view, root),
        CdiHook::UpdateLdcache {
            folders,
            compat_above,
        } => {
            let ours = folder_entries_of(root, folders)?;
            crate::ldcache::update(root, ours, compat_above.as_ref())?;
            Ok(())
        }
        CdiHook::Setup { .. } => set_up(
            hook,
            view,
            root,
            None,
            &mut None,
            &mut Phases::start("set up"),
        ),
    }
}

/// How many numeric parts follow `.so` in a library's file name: `libx.so` 0,
/// `libx.so.1` 1, `libx.so.1.2.3` 3; `None` for names that are no shared object's.
fn so_version_parts(name: &str) -> Option<usize> {
    if !name.starts_with("lib") && !name.starts_with("ld") {
        return None;
    }
    let (_, rest) = name.split_once(".so")?;
    if rest.is_empty() {
        return Some(0);
    }
    let version = rest.strip_prefix('.')?;
    let parts: Vec<&str> = version.split('.').collect();
    if parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(parts.len())
    } else {
        None
    }
}

/// The cache entries for the libraries in `folder`, without reading any library.
///
/// The names in the folder that resolve (inside the root) to one regular file are one
/// library. Its entries are its names with the fewest version parts, at least one (the
/// soname link `libcuda.so.1` rather than the file `libcuda.so.580.65.06`, or the file
/// itself when it is named by its soname), plus its development names (`libcuda.so`),
/// as `ldconfig` lists them. This is what makes the driver's libraries loadable by
/// soname: `cdi-links` made a link named by the soname for every one whose file is not.
fn folder_entries(root: &ContainerRoot, folder: &Path) -> Result<Vec<Entry>, CdiHookError> {
    let names = match root.read_dir(folder, MAX_DIR_ENTRIES) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut by_file: BTreeMap<(u64, u64), Vec<(usize, String)>> = BTreeMap::new();
    for name in names {
        let Some(parts) = so_version_parts(&name) else {
            continue;
        };
        // The runtime bind-mounted each library of the spec: each is a mount of its own.
        let (kind, dev, ino) = match root.identify(&folder.join(&name)) {
            Ok(found) => found,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        if kind != FileKind::RegularFile {
            continue;
        }
        by_file.entry((dev, ino)).or_default().push((parts, name));
    }
    let dir = folder.to_str().ok_or_else(|| {
        CdiHookError::LdCache(crate::ldcache::UpdateError::Build(
            ldcache::LdCacheError::NonUtf8Dir {
                path: folder.to_path_buf(),
            },
        ))
    })?;
    let dir = dir.trim_end_matches('/');
    // The libraries the runtime mounted from the spec: the host's driver's, of the host's
    // architecture, which is this hook's.
    let flags = crate::ldcache::native_abi().flags();
    let mut entries = Vec::new();
    for names in by_file.values() {
        let fewest = names.iter().map(|(p, _)| *p).filter(|p| *p > 0).min();
        for (parts, name) in names {
            if *parts == 0 || Some(*parts) == fewest {
                entries.push(Entry {
                    name: name.clone(),
                    path: format!("{dir}/{name}"),
                    flags,
                    hwcap: 0,
                });
            }
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use libnvc::ldcache::CacheArch;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn links_and_ldcache_in_a_rootfs_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        for file in [
            "libcuda.so.999.88.77",
            "libnvidia-ml.so.999.88.77",
            "libc.so.6",
            "libfoo.so.1.2",
        ] {
            std::fs::write(lib.join(file), b"\x7fELF").unwrap();
        }
        std::os::unix::fs::symlink("libfoo.so.1.2", lib.join("libfoo.so.1")).unwrap();
        // links that lead outside resolve inside the root, to nothing
        std::fs::write(dir.path().join("secret.so.1"), b"x").unwrap();
        std::os::unix::fs::symlink("../../../../secret.so.1", lib.join("libup.so.1")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.so.1"), lib.join("libabs.so.1"))
            .unwrap();
        std::fs::create_dir(lib.join("libdir.so.1")).unwrap();
        let image = [
            Entry {
                name: "libimage.so.3".into(),
                path: "/lib/libimage.so.3".into(),
                flags: CacheArch::X86_64.flags(),
                hwcap: 0,
            },
            Entry {
                name: "libc.so.6".into(),
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                flags: CacheArch::X86_64.flags(),
                hwcap: 0,
            },
        ];
        std::fs::write(
            rootfs.join("etc/ld.so.cache"),
            ldcache::write(&image).unwrap(),
        )
        .unwrap();

        let d = "/usr/lib/x86_64-linux-gnu";
        let links = CdiHook::from_args(
            libnvc::cdi::hooks::LINKS_MODE,
            &strings(&[
                "--link",
                &format!("libcuda.so.999.88.77::{d}/libcuda.so.1"),
                "--link",
                &format!("libcuda.so.1::{d}/libcuda.so"),
                "--link",
                &format!("libnvidia-ml.so.999.88.77::{d}/libnvidia-ml.so.1"),
            ]),
        )
        .unwrap();
        let ldcache = CdiHook::UpdateLdcache {
            folders: vec![d.into(), "/no/such/dir".into()],
            compat_above: None,
        };
        let root = ContainerRoot::open(&rootfs).unwrap();
        let view =
            spec::view(&serde_json::json!({"root": {"path": "rootfs"}}), dir.path()).unwrap();
        run_in(&links, &view, &root).unwrap();
        run_in(&ldcache, &view, &root).unwrap();
        let first = std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap();
        run_in(&links, &view, &root).unwrap();
        run_in(&ldcache, &view, &root).unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
            first
        );
        assert_eq!(
            std::fs::read_link(lib.join("libcuda.so.1")).unwrap(),
            Path::new("libcuda.so.999.88.77")
        );

        let cache = ldcache::parse(&first).unwrap();
        let mut listed: Vec<(String, String)> = cache
            .entries
            .iter()
            .map(|e| (e.name.clone(), e.path.clone()))
            .collect();
        listed.sort();
        let want: Vec<(String, String)> = [
            ("libc.so.6", format!("{d}/libc.so.6")),
            ("libcuda.so", format!("{d}/libcuda.so")),
            ("libcuda.so.1", format!("{d}/libcuda.so.1")),
            ("libfoo.so.1", format!("{d}/libfoo.so.1")),
            ("libimage.so.3", "/lib/libimage.so.3".to_string()),
            ("libnvidia-ml.so.1", format!("{d}/libnvidia-ml.so.1")),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
        assert_eq!(listed, want);
        assert!(cache
            .entries
            .iter()
            .all(|e| e.arch() == Some(CacheArch::X86_64)));
    }

    #[test]
    fn version_parts() {
        let cases = [
            ("libcuda.so", Some(0)),
            ("libcuda.so.1", Some(1)),
            ("libcuda.so.580.65.06", Some(3)),
            ("ld-linux-x86-64.so.2", Some(1)),
            ("libx.so.1a", None),
            ("libx.so.", None),
            ("libx.so.1..2", None),
            ("libx.sox", None),
            ("nvidia-smi", None),
            ("libfoo.a", None),
            ("README.so.1", None),
        ];
        for (name, want) in cases {
            assert_eq!(so_version_parts(name), want, "{name}");
        }
    }

    #[test]
    fn proc_destinations() {
        for (destination, want) in [
            ("/proc", true),
            ("/proc/", true),
            ("proc", true),
            ("//proc", true),
            ("/proc/driver", false),
            ("/sys", false),
            ("/", false),
        ] {
            assert_eq!(is_proc(Path::new(destination)), want, "{destination}");
        }
    }

    #[test]
    fn rootfs_from_the_state_bundle() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"env":[]}}"#,
        )
        .unwrap();
        let state = serde_json::json!({"ociVersion": "1.0.2", "id": "x", "status": "creating",
            "pid": 1, "bundle": dir.path()});
        let rootfs = rootfs_from_state(state.to_string().as_bytes()).unwrap();
        assert_eq!(rootfs, dir.path().join("rootfs"));

        let relative = serde_json::json!({"bundle": "bundle"});
        assert!(matches!(
            rootfs_from_state(relative.to_string().as_bytes()),
            Err(CdiHookError::RelativeBundle(_))
        ));
        assert!(matches!(
            rootfs_from_state(b"{}"),
            Err(CdiHookError::State(_))
        ));
    }
}
