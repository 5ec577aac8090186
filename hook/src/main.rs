//! `nvc-hook`: the OCI prestart hook. Not implemented yet: it refuses to run rather
//! than pretend to have set a container up.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("nvc-hook: not implemented yet; GPU containers cannot be set up by this build");
    ExitCode::FAILURE
}
