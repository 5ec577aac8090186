//! nvc-host: everything nvc does to the host and to a container, on one side of the line
//! from libnvc's pure pipeline, and the only crate of nvc with `unsafe` (each block with a
//! `// SAFETY:` line).
//!
//! - [`probe::RealHost`]: the host as discovery reads it (libnvc's `HostProbe`), the
//!   driver's libcuda and NVML loaded to ask them what they are ([`nvml`]: the MIG
//!   devices' UUIDs);
//! - [`container`]: the container's rootfs, opened once and resolved inside, mounts and
//!   `setns`; [`setup`] sets a live container up from its prestart hook,
//!   [`cdi_hooks`] runs the CDI spec's hooks, both through the one [`ldcache::update`]
//!   and the one [`proc_mask::ProcMask`];
//! - [`attach`]: GPUs added to and taken from a running container (`nvc attach`);
//! - [`cgroup`] and [`devcgroup`]: the container's device cgroup (v1 file, v2 programs);
//! - [`entry`]: the C entry point of the programs on the start path;
//! - [`files`]: the one atomic file writer, [`logging`]: the log file, [`deadline`]: the
//!   hook's alarm, [`phases`]: where a hook's time goes, in the debug log;
//! - [`leases`]: which running container holds which GPU, shared or exclusively.
//! - [`privileges::Privileges`]: the hook's capabilities, limited phase by phase to what
//!   each needs.
//! - [`files_cache::RunCache`]: the driver's files as the last full discovery found
//!   them, under `/run/nvc`, checked before each use.

use std::path::{Path, PathBuf};

pub mod attach;
pub mod cdi_hooks;
pub mod cgroup;
pub mod compat;
pub mod container;
pub mod deadline;
pub mod devcgroup;
pub mod entry;
pub mod files;
pub mod files_cache;
pub mod health;
pub mod ldcache;
pub mod leases;
pub mod lifecycle;
pub mod logging;
pub mod node;
pub mod nvml;
pub mod phases;
pub mod privileges;
pub mod probe;
pub mod proc_mask;
pub mod process;
pub mod setup;
pub mod state;
pub mod trace;
pub mod usage;

/// Why a driver library could not answer.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// The library could not be loaded.
    #[error("cannot load {path}")]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's reason.
        #[source]
        source: libloading::Error,
    },
    /// The library lacks a symbol it should have.
    #[error("{path} has no symbol {symbol}")]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The missing symbol.
        symbol: &'static str,
        /// The loader's reason.
        #[source]
        source: libloading::Error,
    },
    /// The call returned an error code.
    #[error("{symbol} in {path} failed with CUDA error {code}")]
    Call {
        /// The library.
        path: PathBuf,
        /// The function called.
        symbol: &'static str,
        /// The CUresult.
        code: i32,
    },
    /// A program that asks a driver library (libcuda, NVML) could not be run.
    #[error("cannot run {program} (installed beside nvc-hook; reinstall nvc if it is missing)")]
    HelperSpawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program that asks a driver library failed or printed no answer.
    #[error("{program} {library}: {reason}")]
    Helper {
        /// The program.
        program: PathBuf,
        /// The library it asked.
        library: PathBuf,
        /// Its exit and what it said.
        reason: String,
    },
}

/// Whether this program is linked statically (no program interpreter loaded it: the
/// kernel's `AT_BASE` is 0). Asked at run time: a crate's `cfg(target_feature =
/// "crt-static")` is the crate's own, and `cargo rustc` gives the flag to the program's
/// crate alone. A static program must not load the driver's shared libraries, which need
/// the host's libc beside the copy linked into it.
pub fn statically_linked() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process.
    unsafe { libc::getauxval(libc::AT_BASE) == 0 }
}

/// [`cuda_driver_version`] asked by `helper` (`nvc-cuda-version <libcuda>`, which prints
/// the number) in a process of its own, with an empty environment: the driver's code never
/// runs in this one.
pub fn cuda_driver_version_by(helper: &Path, libcuda: &Path) -> Result<i32, SysError> {
    let text = ask_helper(helper, libcuda, &[])?;
    text.trim().parse().map_err(|_| SysError::Helper {
        program: helper.to_path_buf(),
        library: libcuda.to_path_buf(),
        reason: format!("printed {:?}, not a version number", text.trim()),
    })
}

/// What `helper <library> <args>...` prints, run with an empty environment and no
/// input; an error naming it when it cannot be run or fails.
pub(crate) fn ask_helper(helper: &Path, library: &Path, args: &[&str]) -> Result<String, SysError> {
    let output = std::process::Command::new(helper)
        .arg(library)
        .args(args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| SysError::HelperSpawn {
            program: helper.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let said = said.trim();
        return Err(SysError::Helper {
            program: helper.to_path_buf(),
            library: library.to_path_buf(),
            reason: if said.is_empty() {
                output.status.to_string()
            } else {
                format!("{} ({})", said, output.status)
            },
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The CUDA driver API version of the `libcuda` at `path`, as `cuDriverGetVersion`
/// reports it (`13000` for CUDA 13.0). `cuDriverGetVersion` needs no `cuInit` and no
/// GPU, so this does not touch the devices.
pub fn cuda_driver_version(path: &Path) -> Result<i32, SysError> {
    const SYMBOL: &str = "cuDriverGetVersion";
    // SAFETY: the library is the host driver's libcuda, found by discovery under the
    // configured (trusted, host-owned) driver root; loading it runs its initialisers,
    // which is what every CUDA program on the host does.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|source| SysError::Load {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: cuDriverGetVersion has had the C signature `CUresult (int *)` since CUDA 2.2.
    let get: libloading::Symbol<unsafe extern "C" fn(*mut i32) -> i32> =
        unsafe { lib.get(b"cuDriverGetVersion\0") }.map_err(|source| SysError::Symbol {
            path: path.to_path_buf(),
            symbol: SYMBOL,
            source,
        })?;
    let mut version: i32 = 0;
    // SAFETY: `version` is a valid, writable int for the duration of the call.
    let code = unsafe { get(&mut version) };
    if code != 0 {
        return Err(SysError::Call {
            path: path.to_path_buf(),
            symbol: SYMBOL,
            code,
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_test_program_is_not_static() {
        assert!(!statically_linked());
    }

    #[test]
    fn reports_what_libcuda_says() {
        let dir = tempfile_dir();
        let src = dir.join("cuda.c");
        std::fs::write(
            &src,
            "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n",
        )
        .unwrap();
        let lib = dir.join("libcuda.so.1");
        let ok = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("this test needs gcc on PATH");
        assert!(ok.success());
        assert_eq!(cuda_driver_version(&lib).unwrap(), 12040);
        let missing = cuda_driver_version(&dir.join("absent.so")).unwrap_err();
        assert!(missing.to_string().contains("absent.so"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_helpers_answer_is_its_number_and_anything_else_is_an_error_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libcuda.so.1");
        let helper = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        // It is given the library and nothing of this process's environment.
        let good = helper(
            "good",
            &format!(
                "[ \"$1\" = '{}' ] || exit 9; [ -n \"$HOME$LD_PRELOAD\" ] && exit 8; echo 13000",
                lib.display()
            ),
        );
        assert_eq!(cuda_driver_version_by(&good, &lib).unwrap(), 13000);

        let failing = helper("failing", "echo 'cannot load it' >&2; exit 1");
        let e = cuda_driver_version_by(&failing, &lib)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failing") && e.contains("libcuda.so.1") && e.contains("cannot load it"),
            "{e}"
        );
        let garbage = helper("garbage", "echo twelve");
        let e = cuda_driver_version_by(&garbage, &lib)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"twelve\""), "{e}");
        let missing = dir.path().join("nvc-cuda-version");
        let e = cuda_driver_version_by(&missing, &lib)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nvc-cuda-version") && e.contains("reinstall"),
            "{e}"
        );
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvc-host-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
