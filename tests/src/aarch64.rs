//! What the aarch64 tests run on an x86-64 machine: Debian's cross compiler for the fake
//! driver's libraries and programs, qemu-user for the aarch64 binaries, and an arm64
//! userland (glibc, `ldconfig`, busybox) from Debian's arm64 packages.
//!
//! `scripts/cross-aarch64.sh` builds nvc for `aarch64-unknown-linux-gnu` into
//! `target/aarch64-unknown-linux-gnu/debug` and unpacks the arm64 userland into
//! [`userland`] once per machine; [`build`] runs it once per test process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::trees::workspace_dir;
use crate::FakeError;

/// Debian's cross compiler (`gcc-aarch64-linux-gnu`).
pub const GCC: &str = "aarch64-linux-gnu-gcc";
/// qemu-user, static (`qemu-user-static`).
pub const QEMU: &str = "qemu-aarch64-static";
/// The aarch64 glibc of `libc6-arm64-cross`: the loader and libraries qemu is given for
/// dynamic aarch64 programs (`-L`).
pub const SYSROOT: &str = "/usr/aarch64-linux-gnu";
/// The Rust target.
pub const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The arm64 userland `scripts/cross-aarch64.sh` unpacks (`NVC_AARCH64_ROOT`, else
/// `aarch64/root` in `NVC_TESTS_CACHE`, `/var/cache/nvc-tests`): Debian's arm64 `libc6`,
/// `libc-bin` (its `/sbin/ldconfig`) and `busybox-static`.
pub fn userland() -> PathBuf {
    if let Some(root) = std::env::var_os("NVC_AARCH64_ROOT") {
        return PathBuf::from(root);
    }
    std::env::var_os("NVC_TESTS_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/nvc-tests"), PathBuf::from)
        .join("aarch64/root")
}

/// aarch64's `ldconfig` (static), from [`userland`].
pub fn ldconfig() -> Result<PathBuf, FakeError> {
    let path = userland().join("sbin/ldconfig");
    if path.is_file() {
        Ok(path)
    } else {
        Err(FakeError::Check {
            what: "aarch64's ldconfig is missing: run scripts/cross-aarch64.sh (as root, with \
                   the network) to unpack Debian's arm64 libc-bin"
                .to_string(),
            path,
        })
    }
}

/// A command that runs the aarch64 program `program` under qemu-user, its loader and
/// libraries from [`SYSROOT`].
pub fn qemu(program: impl AsRef<Path>) -> Command {
    let mut command = Command::new(QEMU);
    command.arg("-L").arg(SYSROOT).arg(program.as_ref());
    command
}

/// Where `scripts/cross-aarch64.sh` puts the aarch64 binaries of this workspace.
pub fn bin_dir() -> PathBuf {
    workspace_dir().join("target").join(TARGET).join("debug")
}

/// Runs `scripts/cross-aarch64.sh` once per process (a build that is up to date takes
/// about a second) and gives [`bin_dir`]; the script's output on failure.
pub fn build() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = workspace_dir().join("scripts/cross-aarch64.sh");
            let output = Command::new("bash")
                .arg(&script)
                .current_dir(workspace_dir())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if output.status.success() {
                Ok(bin_dir())
            } else {
                Err(format!(
                    "{} failed ({}):\n{}\n{}",
                    script.display(),
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ))
            }
        })
        .clone()
}
