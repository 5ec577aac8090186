//! `nvc-hook cdi-setup` (and `cdi-links`, `update-ldcache` and `cdi-mask-proc` of earlier
//! specs): the `createContainer` hooks that nvc's CDI spec asks the engine to run (see
//! `libnvc::cdi::hooks` and `nvc_host::cdi_hooks`, which say why they work on the rootfs
//! path in the namespace they start in, and never enter another).

use libnvc::cdi::hooks::CdiHook;
use nvc_host::cdi_hooks::CdiHookError;

/// Runs `mode` when it is a CDI hook's (`Some(success)`); `None` leaves it to the other
/// modes.
pub fn dispatch(mode: &str) -> Option<bool> {
    if !CdiHook::is_mode(mode) {
        return None;
    }
    // The CDI spec names no nvc config: the default deadline, armed before anything the
    // container controls is read, so that nothing can hold the start.
    let seconds = nvc_config::DEFAULT_HOOK_TIMEOUT;
    if let Err(e) = nvc_host::deadline::arm(
        seconds,
        &format!(
            "nvc-hook {mode}: gave up after {seconds} s: setting the container up took too \
             long (something it points nvc at may block); the container is not started"
        ),
    ) {
        eprintln!("nvc-hook {mode}: cannot set the hook's deadline: {e}");
        return Some(false);
    }
    let args: Vec<String> = std::env::args().skip(2).collect();
    Some(match run(mode, &args) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "nvc-hook {mode}: {}",
                libnvc::report::shorten(&libnvc::report::error_chain(&e))
            );
            false
        }
    })
}

// The error is returned once, at the end of a one-shot process: its size costs nothing.
#[allow(clippy::result_large_err)]
fn run(mode: &str, args: &[String]) -> Result<(), CdiHookError> {
    let mut phases = nvc_host::phases::Phases::start("cdi-setup");
    // The arguments first: a spec with bad ones fails before anything is read.
    let hook = CdiHook::from_args(mode, args)?;
    phases.mark("args");
    let state = libnvc::oci::state::read(std::io::stdin())?;
    phases.mark("state");
    if !matches!(hook, CdiHook::Setup { .. }) {
        return nvc_host::cdi_hooks::run(&hook, &state);
    }
    // `cdi-setup` keeps the record the spec's poststop hook reads, in the state folder of
    // the nvc config (the binaries' own config: the spec names none); a config that
    // cannot be read costs the record, not the container.
    let config = match nvc_config::Config::load_from_env() {
        Ok((config, _)) => {
            nvc_host::logging::init(&config.log, "nvc-hook");
            config
        }
        Err(e) => {
            eprintln!(
                "nvc-hook {mode}: what nvc makes in this container stays after it (no \
                 record kept): {}",
                libnvc::report::error_chain(&e)
            );
            let mut config = nvc_config::Config::default();
            config.hook.leave_no_trace = nvc_config::NoTrace::Never;
            config
        }
    };
    phases.mark("config");
    let result = nvc_host::cdi_hooks::run_recorded(&hook, &state, &config, &mut phases);
    phases.log();
    result
}
