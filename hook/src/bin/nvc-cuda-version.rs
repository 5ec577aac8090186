//! `nvc-cuda-version <libcuda>`: prints the CUDA driver API version the host driver's
//! libcuda reports (`cuDriverGetVersion`, e.g. `13000`). The statically linked hook
//! cannot load libcuda itself and runs this, beside it, when the driver-files cache has
//! no answer; see `nvc_host::probe::HelperHost`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [libcuda] = args.as_slice() else {
        eprintln!("usage: nvc-cuda-version <path of libcuda.so.1>");
        return ExitCode::from(2);
    };
    match nvc_host::cuda_driver_version(libcuda) {
        Ok(version) => {
            println!("{version}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", libnvc::report::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
