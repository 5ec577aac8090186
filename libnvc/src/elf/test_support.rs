//! Helpers shared by the tests of `elf` and of `ldcache`: real objects built by gcc.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "int nvc_test_symbol(void) { return 42; }\n";

/// Runs gcc with `args` in `dir` (where `x.c` is written first); panics with a clear
/// message when gcc is missing or fails, so a missing tool never passes silently.
pub(crate) fn gcc(dir: &Path, args: &[&str]) -> Result<(), String> {
    let source = dir.join("x.c");
    if !source.exists() {
        std::fs::write(&source, SOURCE).expect("write x.c");
    }
    let output = match Command::new("gcc")
        .current_dir(dir)
        .args(args)
        .arg("x.c")
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("gcc is missing: these tests build real shared objects with gcc ({e})")
        }
        Err(e) => panic!("cannot run gcc: {e}"),
    };
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "gcc {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Builds a 64-bit shared object `dir/file` with the given soname (none when `None`).
pub(crate) fn shared_object(dir: &Path, file: &str, soname: Option<&str>) -> PathBuf {
    let soname_flag = soname.map(|s| format!("-Wl,-soname,{s}"));
    let mut args = vec!["-shared", "-fPIC", "-o", file];
    if let Some(flag) = &soname_flag {
        args.push(flag);
    }
    gcc(dir, &args).unwrap_or_else(|e| panic!("{e}"));
    dir.join(file)
}

/// Builds a 32-bit i386 shared object, or says why this machine cannot. It is linked
/// without the C library (no 32-bit libc is needed), but against `stub_libc` when given
/// so that it has a `DT_NEEDED` on `libc.so.6` like a real library.
pub(crate) fn shared_object_32(
    dir: &Path,
    file: &str,
    soname: &str,
    stub_libc: Option<&Path>,
) -> Result<PathBuf, String> {
    let soname_flag = format!("-Wl,-soname,{soname}");
    let mut args = vec![
        "-m32",
        "-nostdlib",
        "-shared",
        "-fPIC",
        "-Wl,--no-as-needed",
        "-o",
        file,
        &soname_flag,
    ];
    let stub = stub_libc.map(|p| p.to_string_lossy().into_owned());
    if let Some(stub) = &stub {
        args.push(stub);
    }
    gcc(dir, &args)?;
    Ok(dir.join(file))
}
