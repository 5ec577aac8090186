//! `nvc-mig-devices <libnvidia-ml> <GPU-uuid>...`: prints the MIG devices NVML reports for
//! those GPUs, one `<GPU uuid> <gpu instance> <compute instance> <MIG uuid>` a line. The
//! statically linked runtime shim and hook cannot load NVML themselves and run this,
//! beside them, when a container names a MIG device by UUID; see `nvc_host::nvml`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(nvml) = args.next().map(PathBuf::from) else {
        eprintln!("usage: nvc-mig-devices <path of libnvidia-ml.so.1> <GPU-uuid>...");
        return ExitCode::from(2);
    };
    let gpus: Vec<String> = args.collect();
    let gpus: Vec<&str> = gpus.iter().map(String::as_str).collect();
    match nvc_host::nvml::mig_devices(&nvml, &gpus) {
        Ok(devices) => {
            print!("{}", libnvc::discover::render_mig_devices(&devices));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", libnvc::report::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
