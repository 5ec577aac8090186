//! `create` and `run`: gives a bundle's spec what a GPU container needs (device nodes,
//! their cgroup rules, the prestart hook) before runc reads it. A container that asks
//! for no GPU keeps its config.json untouched, not even rewritten.

use std::path::{Path, PathBuf};

use libnvc::discover::{self, DriverRoots};
use libnvc::edits::{self, ContainerLayout};
use libnvc::oci::rootfs;
use libnvc::oci::spec::{self, HookEntry};
use libnvc::request::Request;
use nvc_config::Config;

use crate::error::ShimError;
use crate::runtime;

/// The hook's whole environment: a fixed PATH, nothing from the container.
pub const HOOK_PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the shim's config came from.
pub struct ConfigSource<'a> {
    /// The config file read (or the default path, when none was there).
    pub path: &'a Path,
    /// Whether `NVC_CONFIG` named it; the hook is then told the same file.
    pub from_env: bool,
}

/// The prestart hook entry for `config`.
pub fn hook_entry(config: &Config, source: &ConfigSource) -> HookEntry {
    let mut env = vec![HOOK_PATH_ENV.to_string()];
    if source.from_env {
        // runc does not promise the hook's working directory: pass an absolute path.
        let path = std::path::absolute(source.path).unwrap_or_else(|_| source.path.to_path_buf());
        env.push(format!("{}={}", nvc_config::CONFIG_ENV, path.display()));
    }
    HookEntry {
        path: config.hook.path.clone(),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env,
        // runc kills a hook that outlives this; the hook's own deadline (`timeout`)
        // comes first, so the kill only ends a hook that deadline did not.
        timeout: Some(config.hook.runtime_timeout()),
    }
}

/// Edits `<bundle>/config.json` for the GPUs its environment asks for.
pub fn prepare(bundle: &Path, config: &Config, source: &ConfigSource) -> Result<(), ShimError> {
    let spec_path = bundle.join("config.json");
    // A shim killed while saving a spec (SIGKILL runs no cleanup) leaves its temporary
    // file; take it away even when this run writes nothing.
    match spec::remove_stale_temp_files(&spec_path) {
        Ok(removed) => {
            for temp in removed {
                log::info!("removed {}, left by a killed nvc-runtime", temp.display());
            }
        }
        Err(e) => log::warn!("{}", libnvc::report::error_chain(&e)),
    }
    let mut spec = spec::read_spec(&spec_path).map_err(ShimError::SpecFile)?;
    let bad_spec = |source| ShimError::BadSpec {
        path: spec_path.clone(),
        source,
    };
    let view = spec::view(&spec, bundle).map_err(bad_spec)?;
    rootfs::refuse_linked_dev(&nvc_host::probe::RealHost, &view.rootfs)?;
    let policy =
        libnvc::oci::request_policy(config, view.privileged).map_err(|e| ShimError::Policy {
            path: source.path.to_path_buf(),
            source: e,
        })?;
    // The environment, or the `cdi.k8s.io/` annotations naming `nvidia.com/gpu` devices.
    let request = Request::from_container(
        view.env.iter().map(String::as_str),
        &view.annotations,
        &policy,
    )
    .map_err(ShimError::Request)?;
    if !request.wants_gpu_support() {
        log::debug!("{}: no GPU asked for; left alone", spec_path.display());
        return Ok(());
    }
    rootfs::refuse_host_root(&nvc_host::probe::RealHost, &view.rootfs, &spec_path)?;

    // Only the GPUs and their nodes: the files are the hook's business.
    let driver = discover::discover_devices(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    )?;
    // Only the device nodes go into the spec; the hook mounts the files itself, where it
    // sees the image's real library folders.
    let edits = edits::compute(&driver, &request, &ContainerLayout::default())?;
    let hook = hook_entry(config, source);
    if !spec::has_driver_hook(&spec, &hook).map_err(bad_spec)? && !hook_usable(&hook.path) {
        return Err(ShimError::Hook {
            path: hook.path,
            config: source.path.to_path_buf(),
        });
    }
    let edit_error = |e| ShimError::Edit {
        path: spec_path.clone(),
        source: e,
    };
    if spec::apply(&mut spec, &edits, &hook).map_err(edit_error)? {
        spec::write_spec_atomic(&spec_path, &spec).map_err(|source| ShimError::SaveSpec {
            path: spec_path.clone(),
            source,
        })?;
        log::info!(
            "{}: {} device nodes and the hook {} added",
            spec_path.display(),
            edits.device_nodes.len(),
            hook.path.display()
        );
    } else {
        log::info!(
            "{}: already has the device nodes and a hook",
            spec_path.display()
        );
    }
    Ok(())
}

/// runc runs the hook by absolute path; anything else fails late and obscurely.
fn hook_usable(path: &Path) -> bool {
    path.is_absolute() && runtime::is_executable(path)
}

/// The bundle of a `create`/`run`: `--bundle` when given, else the current directory.
pub fn bundle_dir(given: Option<&Path>) -> Result<PathBuf, ShimError> {
    match given {
        Some(b) => Ok(b.to_path_buf()),
        None => std::env::current_dir().map_err(ShimError::CurrentDir),
    }
}
