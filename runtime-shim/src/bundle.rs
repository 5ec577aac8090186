//! `create` and `run`: gives a bundle's spec what a GPU container needs (device nodes,
//! their cgroup rules, the prestart hook) before runc reads it, as the plan
//! (`libnvc::plan`, stage `Runtime`) says. A container that asks for no GPU keeps its
//! config.json untouched, not even rewritten.

use std::path::{Path, PathBuf};

use libnvc::oci::spec;
use libnvc::plan::{ConfigSource, Handed, Plan, PlanError, Stage};
use nvc_config::Config;
use nvc_host::probe::RealHost;

use crate::error::ShimError;

/// Edits `<bundle>/config.json` for the GPUs its environment asks for. `crun`: the
/// runtime sends a hook's stderr nowhere unless told (`spec::route_crun_hook_stderr`).
pub fn prepare(
    bundle: &Path,
    config: &Config,
    source: &ConfigSource,
    crun: bool,
) -> Result<(), ShimError> {
    let spec_path = bundle.join("config.json");
    // A shim killed while saving a spec (SIGKILL runs no cleanup) leaves its temporary
    // file; take it away even when this run writes nothing.
    // The sweep logs what it removes. A symlink is replaced, never followed, so the
    // sweep and the write stay in the bundle.
    if let Err(e) =
        nvc_host::files::remove_stale_temp_files(&spec_path, nvc_host::files::Symlink::Replace)
    {
        log::warn!("{}", libnvc::report::error_chain(&e));
    }
    let plan = Plan::for_bundle(
        bundle,
        config,
        source,
        &RealHost,
        Stage::Runtime,
        &Handed::default(),
    )
    .map_err(PlanError::from)?;
    let Plan {
        gpu,
        spec,
        view,
        request,
        ..
    } = plan;
    let Some(gpu) = gpu else {
        log::debug!("{}: no GPU asked for; left alone", spec_path.display());
        return Ok(());
    };
    let Some(hook) = &gpu.hook else {
        return Ok(());
    };
    // Only the device nodes go into the spec; the hook mounts the files itself, where it
    // sees the image's real library folders.
    let edit_error = |source| ShimError::Edit {
        path: spec_path.clone(),
        source,
    };
    // Nothing is written on error: the spec is edited where it is, not in a copy.
    let (mut spec, mut changed) =
        spec::apply_owned(spec, &gpu.edits, &hook.entry).map_err(edit_error)?;
    // Where the hook is added, crun is told to pass its refusals on; runc does, and every
    // hook reads the annotations, so no other runtime's container gets one it did not ask
    // for.
    if crun && !hook.in_spec {
        changed |= spec::route_crun_hook_stderr(&mut spec).map_err(edit_error)?;
    }
    // The device plugin's mounts, read: the hook gets them in its arguments.
    if gpu.drop_device_mounts {
        changed |= spec::drop_device_mounts(&mut spec).map_err(edit_error)?;
    }
    if changed {
        let bytes = spec::to_bytes(&spec).map_err(edit_error)?;
        // Not synced: the spec lives as long as the container, which a crash ends anyway;
        // the rename keeps runc from reading half of it.
        let options = nvc_host::files::WriteOptions {
            durable: false,
            ..nvc_host::files::WriteOptions::new(0o644)
        };
        nvc_host::files::write_atomic(&spec_path, &bytes, &options).map_err(|source| {
            ShimError::SaveSpec {
                path: spec_path.clone(),
                source,
            }
        })?;
        log::info!(
            "{}: {} device nodes and the hook {} added",
            spec_path.display(),
            gpu.edits.device_nodes.len(),
            hook.entry.path.display()
        );
    } else {
        log::info!(
            "{}: already has the device nodes and a hook",
            spec_path.display()
        );
    }
    // The runtime is exec'd next, and the process's memory goes with it: the spec and
    // the plan are not freed piece by piece first.
    std::mem::forget((spec, gpu, view, request));
    Ok(())
}

/// The bundle of a `create`/`run`: `--bundle` when given, else the current directory.
pub fn bundle_dir(given: Option<&Path>) -> Result<PathBuf, ShimError> {
    match given {
        Some(b) => Ok(b.to_path_buf()),
        None => std::env::current_dir().map_err(ShimError::CurrentDir),
    }
}
