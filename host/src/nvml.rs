//! NVML's MIG devices: each MIG device of a GPU with its UUID, GPU instance id and compute
//! instance id (`nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`,
//! `nvmlDeviceGetUUID`, `nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`),
//! which libnvc ties to the instances it read from `/proc` (`discover::MigDevice::uuid`).
//! nvml-wrapper 0.11 has no call for a MIG device's handle, so the driver's libnvidia-ml
//! is asked directly, as [`crate::cuda_driver_version`] asks libcuda.
//!
//! A statically linked program (the runtime shim, the hook, the node image's nvc) cannot
//! load NVML, which needs the host's libc beside its own copy of glibc; it runs
//! [`MIG_DEVICES_HELPER`] instead ([`mig_devices_by`]), a dynamic program installed beside
//! it, as it runs `nvc-cuda-version` for libcuda. The answer is not kept in the
//! driver-files cache, which would have spared that process: a MIG device destroyed and
//! made again under the same ids has a new UUID, and nothing the cache can check (the
//! driver's version, the `/proc` files) tells; a stale UUID would give a container
//! another device than the one it asked for. Only a request that names a MIG device by
//! UUID pays for it.

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use libnvc::discover::{parse_mig_devices, BadMigLine, NvmlMigDevice};

use crate::SysError;

/// The program that prints NVML's MIG devices (`nvc-mig-devices <libnvidia-ml>
/// <GPU-uuid>...`, one `<GPU uuid> <gi> <ci> <MIG uuid>` a line), installed beside
/// `nvc-runtime` and `nvc-hook`.
pub const MIG_DEVICES_HELPER: &str = "nvc-mig-devices";

/// Why the driver's libnvidia-ml could not be loaded and started (`Session::open`).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The library could not be loaded.
    #[error("cannot load {path}")]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's reason.
        #[source]
        source: libloading::Error,
    },
    /// The library lacks a function every NVML has.
    #[error("{path} has no symbol {symbol}: is it the driver's libnvidia-ml?")]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// The loader's reason.
        #[source]
        source: libloading::Error,
    },
    /// NVML could not start.
    #[error("nvmlInit_v2 in {path} failed with NVML error {code}")]
    Init {
        /// The library.
        path: PathBuf,
        /// The `nvmlReturn_t`.
        code: u32,
    },
}

/// The driver's libnvidia-ml, loaded into this process and started (`nvmlInit_v2`);
/// `nvmlShutdown` when dropped. What MIG UUIDs ([`mig_devices`]) and GPU health
/// (`crate::health`) ask it goes through [`Session::function`].
pub(crate) struct Session {
    shutdown: Init,
    path: PathBuf,
    lib: libloading::Library,
}

impl Session {
    /// Loads the libnvidia-ml at `nvml` and starts NVML.
    pub(crate) fn open(nvml: &Path) -> Result<Session, OpenError> {
        // SAFETY: the library is the host driver's libnvidia-ml, found by discovery under
        // the configured (trusted, host-owned) driver root; loading it runs its
        // initialisers, which is what every NVML program on the host does.
        let lib = unsafe { libloading::Library::new(nvml) }.map_err(|source| OpenError::Load {
            path: nvml.to_path_buf(),
            source,
        })?;
        let symbol = |symbol: &'static str| {
            // SAFETY: both functions take no argument and return an nvmlReturn_t (nvml.h);
            // the pointers are used only while `lib` is loaded (it outlives them in Session).
            unsafe { lib.get::<Init>(symbol.as_bytes()) }
                .map(|f| *f)
                .map_err(|source| OpenError::Symbol {
                    path: nvml.to_path_buf(),
                    symbol: symbol.trim_end_matches('\0'),
                    source,
                })
        };
        let init = symbol("nvmlInit_v2\0")?;
        let shutdown = symbol("nvmlShutdown\0")?;
        // SAFETY: nvmlInit_v2 takes no argument; NVML counts its initialisations.
        let code = unsafe { init() };
        if code != NVML_SUCCESS {
            return Err(OpenError::Init {
                path: nvml.to_path_buf(),
                code,
            });
        }
        Ok(Session {
            shutdown,
            path: nvml.to_path_buf(),
            lib,
        })
    }

    /// The library's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The function `name` (NUL-terminated) of the library.
    ///
    /// # Safety
    /// `T` must be the C function pointer type NVML declares for `name` (nvml.h), and the
    /// pointer must not be used after this session is dropped.
    pub(crate) unsafe fn function<T: Copy>(&self, name: &str) -> Result<T, libloading::Error> {
        // SAFETY: the caller vouches for `T` (this function's contract).
        unsafe { self.lib.get::<T>(name.as_bytes()) }.map(|f| *f)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: nvmlShutdown takes no argument and pairs with the nvmlInit_v2 that
        // succeeded in `open`; `lib` is still loaded (fields drop after this).
        let _ = unsafe { (self.shutdown)() };
    }
}

/// Why NVML could not list the MIG devices.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// The library could not be loaded or started.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The library lacks a function (a driver before R470 has no MIG device handles).
    #[error("{path} has no symbol {symbol} (a driver older than R470 lists no MIG device)")]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// The loader's reason.
        #[source]
        source: libloading::Error,
    },
    /// [`MIG_DEVICES_HELPER`] could not be run, or failed.
    #[error(transparent)]
    Helper(#[from] SysError),
    /// [`MIG_DEVICES_HELPER`] printed something that is no list of MIG devices.
    #[error("{program} printed no list of MIG devices")]
    HelperOutput {
        /// The program.
        program: PathBuf,
        /// The line that is none.
        #[source]
        source: BadMigLine,
    },
}

/// An NVML device handle (`nvmlDevice_t`).
type Device = *mut c_void;
type Init = unsafe extern "C" fn() -> u32;
type HandleByUuid = unsafe extern "C" fn(*const c_char, *mut Device) -> u32;
type MaxMigCount = unsafe extern "C" fn(Device, *mut c_uint) -> u32;
type MigByIndex = unsafe extern "C" fn(Device, c_uint, *mut Device) -> u32;
type UuidOf = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> u32;
type IdOf = unsafe extern "C" fn(Device, *mut c_uint) -> u32;

const NVML_SUCCESS: u32 = 0;
/// `NVML_ERROR_NOT_SUPPORTED`: a GPU that cannot be in MIG mode.
const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
/// `NVML_ERROR_NOT_FOUND`: no MIG device at that index (they need not be contiguous).
const NVML_ERROR_NOT_FOUND: u32 = 6;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const UUID_BUFFER: usize = 96;

/// The MIG devices of the GPUs with `gpus` (their UUIDs), asked of the libnvidia-ml at
/// `nvml` loaded into this process. A GPU NVML cannot open, or that has no MIG device,
/// adds none; so does a MIG device whose UUID or ids it cannot tell.
pub fn mig_devices(nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, NvmlError> {
    let session = Session::open(nvml)?;
    macro_rules! function {
        ($name:literal, $type:ty) => {
            // SAFETY: NVML has declared the function with this C signature since R470
            // (nvml.h); the pointer is used only while `session` lives.
            unsafe { session.function::<$type>(concat!($name, "\0")) }.map_err(|source| {
                NvmlError::Symbol {
                    path: session.path().to_path_buf(),
                    symbol: $name,
                    source,
                }
            })?
        };
    }
    let by_uuid = function!("nvmlDeviceGetHandleByUUID", HandleByUuid);
    let max_count = function!("nvmlDeviceGetMaxMigDeviceCount", MaxMigCount);
    let by_index = function!("nvmlDeviceGetMigDeviceHandleByIndex", MigByIndex);
    let uuid_of = function!("nvmlDeviceGetUUID", UuidOf);
    let gi_of = function!("nvmlDeviceGetGpuInstanceId", IdOf);
    let ci_of = function!("nvmlDeviceGetComputeInstanceId", IdOf);
    let id = |f: IdOf, dev: Device| {
        let mut id: c_uint = 0;
        // SAFETY: `dev` is a handle NVML gave for this initialisation, `id` a writable
        // unsigned int for the call.
        (unsafe { f(dev, &mut id) } == NVML_SUCCESS).then_some(id)
    };
    let mut out = Vec::new();
    for gpu in gpus {
        let Ok(c_uuid) = CString::new(*gpu) else {
            continue;
        };
        let mut dev: Device = std::ptr::null_mut();
        // SAFETY: `c_uuid` is NUL-terminated and outlives the call; `dev` is a writable
        // handle slot.
        let code = unsafe { by_uuid(c_uuid.as_ptr(), &mut dev) };
        if code != NVML_SUCCESS {
            log::warn!(
                "NVML cannot open GPU {gpu} (NVML error {code}): its MIG devices have no UUID"
            );
            continue;
        }
        let mut count: c_uint = 0;
        // SAFETY: `dev` is the handle NVML just gave; `count` is writable.
        match unsafe { max_count(dev, &mut count) } {
            NVML_SUCCESS => {}
            NVML_ERROR_NOT_SUPPORTED => continue,
            code => {
                log::warn!("NVML cannot count GPU {gpu}'s MIG devices (NVML error {code})");
                continue;
            }
        }
        for index in 0..count {
            let mut mig: Device = std::ptr::null_mut();
            // SAFETY: `dev` is NVML's handle, `index` below the count it gave, `mig`
            // a writable handle slot.
            match unsafe { by_index(dev, index, &mut mig) } {
                NVML_SUCCESS => {}
                NVML_ERROR_NOT_FOUND => continue,
                code => {
                    log::warn!(
                        "NVML cannot open MIG device {index} of GPU {gpu} (NVML error {code})"
                    );
                    continue;
                }
            }
            let mut buf = [0u8; UUID_BUFFER];
            // SAFETY: `mig` is NVML's handle; `buf` holds UUID_BUFFER writable bytes, the
            // length given.
            let code = unsafe { uuid_of(mig, buf.as_mut_ptr().cast(), UUID_BUFFER as c_uint) };
            let uuid = match code {
                NVML_SUCCESS => CStr::from_bytes_until_nul(&buf)
                    .ok()
                    .and_then(|s| s.to_str().ok()),
                _ => None,
            };
            let device = match (uuid, id(gi_of, mig), id(ci_of, mig)) {
                (Some(uuid), Some(gi), Some(ci)) => NvmlMigDevice::new(gpu, gi, ci, uuid),
                _ => None,
            };
            match device {
                Some(device) => out.push(device),
                None => {
                    log::warn!("NVML cannot tell MIG device {index} of GPU {gpu}'s UUID and ids")
                }
            }
        }
    }
    Ok(out)
}

/// [`mig_devices`] asked by `helper` ([`MIG_DEVICES_HELPER`]) in a process of its own, with
/// an empty environment: for a static program, and to keep the driver's code out of one.
pub fn mig_devices_by(
    helper: &Path,
    nvml: &Path,
    gpus: &[&str],
) -> Result<Vec<NvmlMigDevice>, NvmlError> {
    let text = crate::ask_helper(helper, nvml, gpus)?;
    parse_mig_devices(&text).map_err(|source| NvmlError::HelperOutput {
        program: helper.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A libnvidia-ml with GPU `GPU-…0001` in MIG mode: MIG devices at indices 0 and 2 (1
    /// empty), and one at 3 whose UUID NVML cannot tell; `GPU-…0002` not in MIG mode;
    /// any other GPU unknown.
    const NVML: &str = r#"
#include <string.h>
static int gpu1, gpu2, migs[4];
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByUUID(const char *u, void **d) {
    if (!strcmp(u, "GPU-00000000-0000-0000-0000-000000000001")) { *d = &gpu1; return 0; }
    if (!strcmp(u, "GPU-00000000-0000-0000-0000-000000000002")) { *d = &gpu2; return 0; }
    return 6;
}
int nvmlDeviceGetMaxMigDeviceCount(void *d, unsigned *n) {
    if (d == &gpu2) return 3;
    *n = 4; return 0;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void *d, unsigned i, void **m) {
    if (i == 1) return 6;
    *m = &migs[i]; return 0;
}
int nvmlDeviceGetUUID(void *d, char *u, unsigned len) {
    int i = (int *)d - migs;
    if (i == 3) return 999;
    strcpy(u, i == 0 ? "MIG-AAAAAAAA-0000-4000-8000-000000000000"
                     : "MIG-bbbbbbbb-0000-4000-8000-000000000000");
    return 0;
}
int nvmlDeviceGetGpuInstanceId(void *d, unsigned *id) { *id = 1 + ((int *)d - migs); return 0; }
int nvmlDeviceGetComputeInstanceId(void *d, unsigned *id) { *id = 0; return 0; }
"#;

    fn build(dir: &Path, source: &str) -> PathBuf {
        let src = dir.join("nvml.c");
        std::fs::write(&src, source).unwrap();
        let lib = dir.join("libnvidia-ml.so.1");
        let ok = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("this test needs gcc on PATH");
        assert!(ok.success());
        lib
    }

    #[test]
    fn lists_each_mig_device_nvml_can_name_skipping_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let lib = build(dir.path(), NVML);
        let gpu1 = "GPU-00000000-0000-0000-0000-000000000001";
        let gpus = [
            gpu1,
            "GPU-00000000-0000-0000-0000-000000000002",
            "GPU-00000000-0000-0000-0000-000000000003",
        ];
        let got = mig_devices(&lib, &gpus).unwrap();
        assert_eq!(
            got,
            [
                NvmlMigDevice::new(gpu1, 1, 0, "MIG-aaaaaaaa-0000-4000-8000-000000000000").unwrap(),
                NvmlMigDevice::new(gpu1, 3, 0, "MIG-bbbbbbbb-0000-4000-8000-000000000000").unwrap(),
            ]
        );
        assert!(mig_devices(&lib, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_library_without_the_mig_calls_or_that_cannot_start_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let old = build(
            dir.path(),
            "int nvmlInit_v2(void) { return 0; }\nint nvmlShutdown(void) { return 0; }\n",
        );
        let e = libnvc::report::error_chain(&mig_devices(&old, &[]).unwrap_err());
        assert!(
            e.contains("nvmlDeviceGetHandleByUUID") && e.contains("R470"),
            "{e}"
        );
        let failing = build(
            dir.path(),
            &NVML.replace(
                "int nvmlInit_v2(void) { return 0; }",
                "int nvmlInit_v2(void) { return 9; }",
            ),
        );
        let e = mig_devices(&failing, &[]).unwrap_err().to_string();
        assert!(
            e.contains("nvmlInit_v2") && e.contains("NVML error 9"),
            "{e}"
        );
        let e = mig_devices(&dir.path().join("absent.so"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("absent.so"), "{e}");
    }

    #[test]
    fn a_helpers_lines_are_read_and_anything_else_is_an_error_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        let helper = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let gpu = "GPU-00000000-0000-0000-0000-000000000001";
        let mig = "MIG-aaaaaaaa-0000-4000-8000-000000000000";
        // It is given the library and the GPUs, and nothing of this process's environment.
        let good = helper(
            "good",
            &format!(
                "[ \"$1 $2\" = '{} {gpu}' ] || exit 9; [ -n \"$HOME$LD_PRELOAD\" ] && exit 8; \
                 echo '{gpu} 1 0 {mig}'",
                lib.display()
            ),
        );
        assert_eq!(
            mig_devices_by(&good, &lib, &[gpu]).unwrap(),
            [NvmlMigDevice::new(gpu, 1, 0, mig).unwrap()]
        );
        let garbage = helper("garbage", "echo 'no devices here'");
        let e = libnvc::report::error_chain(&mig_devices_by(&garbage, &lib, &[]).unwrap_err());
        assert!(e.contains("garbage") && e.contains("line 1"), "{e}");
        let failing = helper("failing", "echo 'cannot load it' >&2; exit 1");
        let e = mig_devices_by(&failing, &lib, &[]).unwrap_err().to_string();
        assert!(e.contains("failing") && e.contains("cannot load it"), "{e}");
        let missing = dir.path().join(MIG_DEVICES_HELPER);
        let e = mig_devices_by(&missing, &lib, &[]).unwrap_err().to_string();
        assert!(
            e.contains(MIG_DEVICES_HELPER) && e.contains("reinstall"),
            "{e}"
        );
    }
}
