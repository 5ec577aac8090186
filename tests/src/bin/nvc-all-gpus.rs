//! Runs a runtime for a program that writes its own config.json, with every container
//! asking for all GPUs.
//!
//! `nvc-all-gpus RUNTIME [ARGS]...`: for runc's `create` and `run` (found as the shim
//! finds them, `libnvc::oci::runc_args`), adds `NVIDIA_VISIBLE_DEVICES=all` to
//! `process.env` of the bundle's config.json (`--bundle`, or the current directory);
//! then, for every command, execs RUNTIME with ARGS unchanged. The OCI validation suite
//! (`tests/tests/oci_validation.rs`) runs the runtime-tools programs through it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use libnvc::oci::runc_args;
use serde_json::Value;

const ALL_GPUS: &str = "NVIDIA_VISIBLE_DEVICES=all";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(runtime) = args.next() else {
        eprintln!("usage: nvc-all-gpus RUNTIME [ARGS]...");
        return ExitCode::from(2);
    };
    let args: Vec<OsString> = args.collect();
    let runc = runc_args::scan(&args);
    if runc.creates_container() {
        let bundle = runc.bundle.clone().unwrap_or_else(|| PathBuf::from("."));
        if let Err(e) = ask_for_all_gpus(&bundle.join("config.json")) {
            eprintln!("nvc-all-gpus: {e}");
            return ExitCode::from(1);
        }
    }
    let e = Command::new(&runtime).args(&args).exec();
    eprintln!(
        "nvc-all-gpus: cannot execute {}: {e}",
        runtime.to_string_lossy()
    );
    ExitCode::from(1)
}

/// Adds [`ALL_GPUS`] to `process.env` of the spec at `path`, unless it is there; a spec
/// with no `process` is left as it is (the runtime refuses it).
fn ask_for_all_gpus(path: &Path) -> Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut spec: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let Some(process) = spec.get_mut("process").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let env = process
        .entry("env")
        .or_insert_with(|| Value::Array(Vec::new()));
    if env.is_null() {
        *env = Value::Array(Vec::new());
    }
    let Some(env) = env.as_array_mut() else {
        return Err(format!("process.env of {} is not an array", path.display()));
    };
    if env.iter().any(|v| v.as_str() == Some(ALL_GPUS)) {
        return Ok(());
    }
    env.push(Value::from(ALL_GPUS));
    let bytes = serde_json::to_vec(&spec).map_err(|e| format!("cannot serialize: {e}"))?;
    let temp = path.with_extension("json.nvc-all-gpus");
    std::fs::write(&temp, bytes).map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    std::fs::rename(&temp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}
