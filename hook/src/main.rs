//! `nvc-hook`: the OCI prestart hook. Reads the container's state on stdin, and puts the
//! driver into the container (see `nvc_host::setup`). Any failure is one line on stderr,
//! which runc shows the user, and a non-zero exit, which makes runc abort the container.

mod cdi_hooks;
mod poststop;
mod run;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if let Some(status) = cdi_hooks::dispatch(&mode) {
        return status;
    }
    let result = match mode.as_str() {
        "prestart" | "createRuntime" => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            run::run(&args)
        }
        "poststop" => poststop::run().map_err(run::HookError::from),
        other => Err(run::HookError::Usage(other.to_string())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = libnvc::report::error_chain(&e);
            let msg = libnvc::report::shorten(&msg);
            log::error!("{msg}");
            eprintln!("nvc-hook: {msg}");
            ExitCode::FAILURE
        }
    }
}
