//! `nvc-hook`: the OCI prestart hook. Reads the container's state on stdin, and puts the
//! driver into the container (see `nvc_host::setup`). Any failure is one line on stderr,
//! which runc shows the user, and a non-zero exit, which makes runc abort the container.

// An error ends the process: returned once, its size costs nothing.
#![allow(clippy::result_large_err)]
// The C runtime enters at nvc_host::c_main!; a unit-test build has the harness's main.
#![cfg_attr(not(test), no_main)]

mod cdi_hooks;
mod poststop;
mod run;

// Entered from the C runtime: see nvc_host::entry.
#[cfg(not(test))]
nvc_host::c_main!(hook_main);

// The unit-test harness replaces it; it keeps the hook's code reachable there.
#[cfg(test)]
fn main() {
    hook_main();
}

/// The hook; `false` when it failed.
fn hook_main() -> bool {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if let Some(ok) = cdi_hooks::dispatch(&mode) {
        return ok;
    }
    let result = match mode.as_str() {
        "prestart" | "createRuntime" => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            run::run(&args)
        }
        "poststop" => poststop::run(),
        other => Err(run::HookError::Usage(other.to_string())),
    };
    match result {
        Ok(()) => true,
        Err(e) => {
            let msg = libnvc::report::error_chain(&e);
            let msg = libnvc::report::shorten(&msg);
            log::error!("{msg}");
            eprintln!("nvc-hook: {msg}");
            false
        }
    }
}
