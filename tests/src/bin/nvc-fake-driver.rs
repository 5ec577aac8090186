//! Builds a fake NVIDIA driver tree and prints the path of its nvc config.
//!
//! `nvc-fake-driver DIR [--gpus N] [--split-dev-root] [--no-device-nodes] [--mig] [--imex N] [--lib32]`

use std::path::PathBuf;
use std::process::ExitCode;

use nvc_tests::{FakeDriverSpec, FakeGpu};

const USAGE: &str = "usage: nvc-fake-driver DIR [--gpus N] [--split-dev-root] [--no-device-nodes] [--mig] [--imex N] [--lib32]

Builds a fake NVIDIA driver tree (driver 999.88.77, fake GPUs) into DIR, which must be
empty or absent, and prints the path of the nvc config.toml that points at it.";

fn parse(args: &[String]) -> Result<(PathBuf, FakeDriverSpec), String> {
    let mut spec = FakeDriverSpec::default();
    let mut dir = None;
    let mut args = args.iter();
    let number = |flag: &str, value: Option<&String>| -> Result<u32, String> {
        value
            .ok_or_else(|| format!("{flag} needs a number"))?
            .parse()
            .map_err(|_| format!("{flag} needs a number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--gpus" => spec.gpus = FakeGpu::fake_gpus(number("--gpus", args.next())?),
            "--imex" => spec.imex_channels = number("--imex", args.next())?,
            "--split-dev-root" => spec.split_dev_root = true,
            "--no-device-nodes" => spec.device_nodes = false,
            "--mig" => spec.mig = true,
            "--lib32" => spec.lib32 = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => return Err(format!("unexpected argument {extra}")),
        }
    }
    Ok((dir.ok_or("missing DIR")?, spec))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let (dir, spec) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("nvc-fake-driver: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("nvc-fake-driver: failed to create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    match std::fs::read_dir(&dir).map(|mut entries| entries.next().is_none()) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("nvc-fake-driver: {} is not empty", dir.display());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("nvc-fake-driver: failed to read {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    match spec.build(&dir) {
        Ok(driver) => {
            if spec.lib32 && !driver.lib32_built {
                eprintln!(
                    "nvc-fake-driver: gcc -m32 does not work here; built without 32-bit libraries"
                );
            }
            println!("{}", driver.config.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("nvc-fake-driver: {message}");
            ExitCode::FAILURE
        }
    }
}
