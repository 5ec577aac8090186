//! GPU health on the host: the faults NVML reports of each GPU (`nvc health update`
//! loads the driver's libnvidia-ml; nvml-wrapper 0.11 has no `nvmlDeviceGetRemappedRows`,
//! so the functions are asked directly, as [`crate::nvml`] asks for MIG devices), the
//! record they are written to in the state folder, and what a start reads of it
//! ([`health_inputs`]: one small file, this boot's id, the clock; never NVML).

use std::ffi::{c_char, c_uint, c_void, CString};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use libnvc::health::{Fault, HealthInputs, HealthRecord, RecordFile, MAX_RECORD};

use crate::files::{self, FileError, WriteOptions};
use crate::nvml::{OpenError, Session};
use crate::state::StateDir;

/// Where the kernel tells this boot's id.
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Why NVML could not be asked about the GPUs' health.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// This nvc cannot load a shared library.
    #[error(
        "this nvc is linked statically and cannot load NVML ({path}); run the packaged \
         (dynamic) nvc health update"
    )]
    Static {
        /// The library.
        path: PathBuf,
    },
    /// The library could not be loaded or started, or lacks a function every NVML has.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The record could not be written.
    #[error("cannot write the GPU health record")]
    Write(#[source] FileError),
}

type Device = *mut c_void;
type HandleByUuid = unsafe extern "C" fn(*const c_char, *mut Device) -> u32;
type PendingStatus = unsafe extern "C" fn(Device, *mut c_uint) -> u32;
type RemappedRows =
    unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> u32;
type TotalEcc = unsafe extern "C" fn(Device, c_uint, c_uint, *mut u64) -> u32;

const NVML_SUCCESS: u32 = 0;
/// `NVML_ERROR_NOT_SUPPORTED`: no ECC, no row remapping (a consumer GPU): no fault.
const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
/// `NVML_ERROR_GPU_IS_LOST`: the GPU fell off the bus.
const NVML_ERROR_GPU_IS_LOST: u32 = 15;
/// `NVML_ERROR_RESET_REQUIRED`.
const NVML_ERROR_RESET_REQUIRED: u32 = 16;
/// `NVML_MEMORY_ERROR_TYPE_UNCORRECTED`.
const UNCORRECTED: c_uint = 1;
/// `NVML_VOLATILE_ECC`: since the last reset.
const VOLATILE: c_uint = 0;

/// The fault a failed call's code means, if any: `Err` for an answer that is no fault
/// and no health (an error NVML should not give), logged by the caller.
fn fault_of_code(code: u32) -> Result<Option<Fault>, u32> {
    match code {
        NVML_SUCCESS | NVML_ERROR_NOT_SUPPORTED => Ok(None),
        NVML_ERROR_GPU_IS_LOST => Ok(Some(Fault::Lost)),
        NVML_ERROR_RESET_REQUIRED => Ok(Some(Fault::ResetRequired)),
        code => Err(code),
    }
}

/// The faults NVML (the libnvidia-ml at `nvml`, loaded into this process) reports of
/// each GPU in `uuids`, in their order. A function the library lacks (an old driver),
/// or that NVML does not support on a GPU, finds no fault.
pub fn nvml_faults(nvml: &Path, uuids: &[&str]) -> Result<Vec<Vec<Fault>>, HealthError> {
    if crate::statically_linked() {
        return Err(HealthError::Static {
            path: nvml.to_path_buf(),
        });
    }
    let session = Session::open(nvml)?;
    macro_rules! function {
        ($name:literal, $type:ty) => {
            // SAFETY: NVML declares the function with this C signature (nvml.h); the
            // pointer is used only while `session` lives.
            unsafe { session.function::<$type>(concat!($name, "\0")) }
        };
    }
    let by_uuid = function!("nvmlDeviceGetHandleByUUID", HandleByUuid).map_err(|source| {
        OpenError::Symbol {
            path: nvml.to_path_buf(),
            symbol: "nvmlDeviceGetHandleByUUID",
            source,
        }
    })?;
    let pending = function!("nvmlDeviceGetRetiredPagesPendingStatus", PendingStatus).ok();
    let remapped = function!("nvmlDeviceGetRemappedRows", RemappedRows).ok();
    let ecc = function!("nvmlDeviceGetTotalEccErrors", TotalEcc).ok();
    let mut out = Vec::new();
    for uuid in uuids {
        let mut faults = Vec::new();
        let note = |what: &str, code: u32, faults: &mut Vec<Fault>| match fault_of_code(code) {
            Ok(Some(f)) if !faults.contains(&f) => faults.push(f),
            Ok(_) => {}
            Err(code) => log::warn!("NVML cannot tell GPU {uuid}'s {what} (NVML error {code})"),
        };
        let Ok(c_uuid) = CString::new(*uuid) else {
            out.push(faults);
            continue;
        };
        let mut dev: Device = std::ptr::null_mut();
        // SAFETY: `c_uuid` is NUL-terminated and outlives the call; `dev` is a writable
        // handle slot.
        let code = unsafe { by_uuid(c_uuid.as_ptr(), &mut dev) };
        if code != NVML_SUCCESS {
            note("handle", code, &mut faults);
            out.push(faults);
            continue;
        }
        if let Some(pending) = pending {
            let mut state: c_uint = 0;
            // SAFETY: `dev` is NVML's handle; `state` is a writable nvmlEnableState_t.
            let code = unsafe { pending(dev, &mut state) };
            note("retired pages", code, &mut faults);
            if code == NVML_SUCCESS && state != 0 {
                faults.push(Fault::RetiredPagesPending);
            }
        }
        if let Some(remapped) = remapped {
            let (mut corr, mut unc, mut is_pending, mut failed): (c_uint, c_uint, c_uint, c_uint) =
                (0, 0, 0, 0);
            // SAFETY: `dev` is NVML's handle; the four are writable unsigned ints.
            let code = unsafe { remapped(dev, &mut corr, &mut unc, &mut is_pending, &mut failed) };
            note("row remapping", code, &mut faults);
            if code == NVML_SUCCESS && failed != 0 {
                faults.push(Fault::RowRemapFailed);
            }
            if code == NVML_SUCCESS && is_pending != 0 {
                faults.push(Fault::RowRemapPending);
            }
        }
        if let Some(ecc) = ecc {
            let mut count: u64 = 0;
            // SAFETY: `dev` is NVML's handle; `count` is a writable unsigned long long.
            let code = unsafe { ecc(dev, UNCORRECTED, VOLATILE, &mut count) };
            note("ECC errors", code, &mut faults);
            if code == NVML_SUCCESS && count > 0 {
                faults.push(Fault::EccUncorrected);
            }
        }
        faults.sort();
        out.push(faults);
    }
    Ok(out)
}

/// This boot's id, trimmed.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The time now, in seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a start reads for the health check: the record in `state`, this boot's id and
/// the time.
pub fn health_inputs(state: &StateDir) -> HealthInputs {
    let path = state.health_record();
    // Never through a link, and never waiting on a FIFO put in its place.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path);
    let record = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => RecordFile::Missing,
        Err(e) => RecordFile::Failed(e),
        Ok(f) => {
            let mut bytes = Vec::with_capacity(4096);
            match f.take(MAX_RECORD as u64).read_to_end(&mut bytes) {
                Ok(_) => RecordFile::Read(bytes),
                Err(e) => RecordFile::Failed(e),
            }
        }
    };
    HealthInputs {
        record,
        boot_id: boot_id(),
        now: now(),
    }
}

/// Writes `record` as the state folder's health record, atomically (temp file +
/// rename), the folder made where missing; first removes the temporary files of writers
/// killed before their rename.
pub fn write_record(state: &StateDir, record: &HealthRecord) -> Result<(), HealthError> {
    let path = state.health_record();
    let options = WriteOptions {
        create_parents: true,
        ..WriteOptions::new(0o644)
    };
    if let Err(e) = files::remove_stale_temp_files(&path, options.symlink) {
        log::warn!("{}", libnvc::report::error_chain(&e));
    }
    files::write_atomic(&path, &record.to_bytes(), &options).map_err(HealthError::Write)
}
