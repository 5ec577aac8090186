//! `nvc-hook cdi-links` and `nvc-hook update-ldcache`: the `createContainer` hooks that
//! nvc's CDI spec asks the engine to run (see `libnvc::cdi::hooks`, which says why they
//! work on the rootfs path in the namespace they start in, and never enter another).

use std::io::Read;
use std::process::ExitCode;

use libnvc::cdi::hooks::{self, CdiHook, CdiHookError};

/// Runs `mode` when it is a CDI hook's; `None` leaves it to the other modes.
pub fn dispatch(mode: &str) -> Option<ExitCode> {
    if !CdiHook::is_mode(mode) {
        return None;
    }
    let args: Vec<String> = std::env::args().skip(2).collect();
    Some(match run(mode, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "nvc-hook {mode}: {}",
                libnvc::logging::shorten(&libnvc::edits::error_chain(&e))
            );
            ExitCode::FAILURE
        }
    })
}

fn run(mode: &str, args: &[String]) -> Result<(), CdiHookError> {
    // The arguments first: a spec with bad ones fails before anything is read.
    let hook = CdiHook::from_args(mode, args)?;
    let mut state = Vec::new();
    std::io::stdin()
        .take(hooks::MAX_STATE)
        .read_to_end(&mut state)
        .map_err(CdiHookError::StateRead)?;
    hook.run(&state)
}
