//! `nvc-runtime`: the runc-compatible shim that Docker, containerd and Podman call
//! instead of runc. For `create` and `run` it adds a GPU container's device nodes,
//! cgroup rules and prestart hook to the bundle's config.json; then, for every
//! subcommand, it execs the real runtime with the original arguments.
//!
//! Every container on a node pays for the shim, so what it does is in proportion: a
//! subcommand other than `create`/`run` reads no bundle; a container whose spec cannot
//! ask for a GPU (`triage`) gets its spec read and nothing else; nvc's log file is
//! opened only when something is logged.
//!
//! It never writes to stdout (runc's caller owns it). A failure is one line on stderr,
//! in runc's `--log` file in runc's format, and in nvc's log; the exit status is 1.

// The C runtime enters at nvc_host::c_main!; a unit-test build has the harness's main.
#![cfg_attr(not(test), no_main)]

mod bundle;
mod error;
mod report;
mod runtime;
mod triage;

use std::convert::Infallible;
use std::ffi::OsString;

use libnvc::oci::runc_args::{self, RuncArgs};
use nvc_config::Config;

use crate::error::ShimError;
use libnvc::plan::ConfigSource;

// Entered from the C runtime: see nvc_host::entry.
#[cfg(not(test))]
nvc_host::c_main!(shim_main);

// The unit-test harness replaces it; it keeps the shim's code reachable there.
#[cfg(test)]
fn main() {
    shim_main();
}

/// The shim; `false` when it failed (it execs the runtime otherwise).
fn shim_main() -> bool {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let runc = runc_args::scan(&args);
    match run(&runc, &args) {
        Ok(never) => match never {},
        Err(e) => {
            report::error(&e, &runc);
            false
        }
    }
}

/// Prepares the bundle when runc is about to create a container that may ask for a
/// GPU, then becomes the runtime; returns only on failure.
fn run(runc: &RuncArgs, args: &[OsString]) -> Result<Infallible, ShimError> {
    // The spec first: a container that cannot ask for a GPU needs nothing more of it.
    let gpu_bundle = match runc.creates_container() {
        true => {
            let bundle = bundle::bundle_dir(runc.bundle.as_deref())?;
            let view = triage::read_view(&bundle)?;
            triage::may_ask_for_gpu(&view).then_some(bundle)
        }
        false => None,
    };
    let Some(bundle) = gpu_bundle else {
        // Only the runtime and the log of the config.
        let (keys, config_path) = Config::load_shim_keys_from_env()?;
        start_logging(&keys.log, runc);
        let runtime = runtime::find_from_env(&keys.runtime.runtimes, &config_path)?;
        if runc.creates_container() {
            log::debug!("no GPU can be asked for; the spec is left alone");
        } else if let Some(flag) = &runc.missing_value {
            log::warn!("{flag} lacks its value; passing the command line to the runtime as it is");
        }
        return Err(runtime::exec(&runtime, args));
    };
    let (config, config_path) = Config::load_from_env()?;
    start_logging(&config.log, runc);
    let runtime = runtime::find_from_env(&config.runtime.runtimes, &config_path)?;
    // runc does not promise the hook's working directory: pass an absolute path.
    let config_path = std::path::absolute(&config_path).unwrap_or(config_path);
    let source = ConfigSource {
        path: &config_path,
        // NVC_CONFIG's file, or the install's own beside the shim: the hook is told it.
        from_env: config_path != std::path::Path::new(nvc_config::DEFAULT_PATH),
    };
    bundle::prepare(
        &bundle,
        &config,
        &source,
        runtime::drops_hook_stderr(&runtime),
    )?;
    Err(runtime::exec(&runtime, args))
}

/// Logging to nvc's log, the file opened only if something is logged.
fn start_logging(log: &nvc_config::LogConfig, runc: &RuncArgs) {
    nvc_host::logging::init_lazy(log, "nvc-runtime");
    for flag in &runc.unknown_global_flags {
        log::warn!("unknown runc flag {flag:?} taken as a boolean");
    }
}
