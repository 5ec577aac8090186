//! `nvc-runtime`: the runc-compatible shim. Not implemented yet: it refuses to run
//! rather than start containers without their GPUs.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("nvc-runtime: not implemented yet; use runc directly");
    ExitCode::FAILURE
}
