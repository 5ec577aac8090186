//! GPU health: the faults NVML reports of a GPU that must not be handed to a new
//! container, the health record `nvc health update` keeps of them, when that record is
//! trusted, and the GPUs a selection keeps once it is applied ([`screen`]).
//!
//! The record is written by `nvc` (which loads NVML) into nvc's state folder and read
//! by the runtime shim and the hook at every start through [`HostProbe::health_inputs`]
//! (a file read, never NVML). A record that is missing, unreadable, older than
//! `[requests] health-max-age`, of another boot or of another driver version blocks
//! nothing: [`assess`] says why it is ignored, and the caller logs it once.
//!
//! [`HostProbe::health_inputs`]: crate::probe::HostProbe::health_inputs

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::discover::Gpu;
use crate::edits::Selected;
use crate::request::DeviceSelection;

/// The record format this code writes and reads.
pub const RECORD_FORMAT: u32 = 1;
/// The most bytes of a record that are read.
pub const MAX_RECORD: usize = 1 << 20;

/// A fault that makes a GPU unfit for a new container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The GPU fell off the bus (Xid 79): NVML answers `NVML_ERROR_GPU_IS_LOST`.
    Lost,
    /// NVML answers `NVML_ERROR_RESET_REQUIRED`.
    ResetRequired,
    /// Volatile uncorrectable ECC errors since the last reset.
    EccUncorrected,
    /// Pages are pending retirement (until a reset).
    RetiredPagesPending,
    /// A row remapping failed.
    RowRemapFailed,
    /// A row remapping is pending (until a reset).
    RowRemapPending,
}

impl Fault {
    /// Every fault, in a stable order.
    pub const ALL: [Fault; 6] = [
        Fault::Lost,
        Fault::ResetRequired,
        Fault::EccUncorrected,
        Fault::RetiredPagesPending,
        Fault::RowRemapFailed,
        Fault::RowRemapPending,
    ];

    /// Its name in the record and on the command line (`reset-required`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::Lost => "lost",
            Fault::ResetRequired => "reset-required",
            Fault::EccUncorrected => "ecc-uncorrected",
            Fault::RetiredPagesPending => "retired-pages-pending",
            Fault::RowRemapFailed => "row-remap-failed",
            Fault::RowRemapPending => "row-remap-pending",
        }
    }

    /// The fault named `name` ([`Fault::name`]).
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What it means, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Fault::Lost => "fell off the bus (NVML: GPU is lost, Xid 79)",
            Fault::ResetRequired => "needs a reset (NVML: reset required)",
            Fault::EccUncorrected => "has volatile uncorrectable ECC errors",
            Fault::RetiredPagesPending => "has pages pending retirement",
            Fault::RowRemapFailed => "failed a row remapping",
            Fault::RowRemapPending => "has a row remapping pending",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One GPU's entry in the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GpuHealth {
    /// The GPU's UUID (`GPU-...`).
    pub uuid: String,
    /// Its PCI bus id, as `/proc/driver/nvidia/gpus` names it.
    pub bus_id: String,
    /// What is wrong with it; empty for a healthy GPU.
    pub faults: Vec<Fault>,
}

impl GpuHealth {
    /// Whether nothing is wrong with it.
    pub fn is_healthy(&self) -> bool {
        self.faults.is_empty()
    }

    /// Its faults, in words, joined by `; `.
    pub fn describe(&self) -> String {
        self.faults
            .iter()
            .map(|f| f.describe())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The health record: what NVML reported of each GPU, when, on which boot and driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HealthRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// When it was written, in seconds since the Unix epoch.
    pub written: u64,
    /// The boot it was written in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// The driver version it was written for.
    pub driver_version: String,
    /// Every GPU NVML was asked about.
    pub gpus: Vec<GpuHealth>,
}

impl HealthRecord {
    /// The record's bytes, as written (pretty JSON, a final newline).
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings, numbers and unit enums always serialises.
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The record in `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<HealthRecord, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The entry of the GPU with `uuid`.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuHealth> {
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(uuid))
    }
}

/// The record file as the probe found it.
#[derive(Debug)]
pub enum RecordFile {
    /// There is none.
    Missing,
    /// Its bytes (at most [`MAX_RECORD`]).
    Read(Vec<u8>),
    /// It could not be read.
    Failed(std::io::Error),
}

/// What the health check reads of the host: the record, this boot's id and the time.
#[derive(Debug)]
pub struct HealthInputs {
    /// The record file.
    pub record: RecordFile,
    /// This boot's id, when it could be read.
    pub boot_id: Option<String>,
    /// The time now, in seconds since the Unix epoch.
    pub now: u64,
}

/// Why a record is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// There is no record.
    #[error("there is no health record (run `nvc health update`, or enable nvc-health.timer)")]
    Missing,
    /// It could not be read.
    #[error("the health record cannot be read: {0}")]
    Unreadable(String),
    /// It is not a record of this format.
    #[error("the health record is not one this nvc reads: {0}")]
    Malformed(String),
    /// It is older than the configured maximum age.
    #[error(
        "the health record is {age} s old, older than [requests] health-max-age ({max} s): \
         is nvc-health.timer running?"
    )]
    TooOld {
        /// Its age in seconds.
        age: u64,
        /// The maximum.
        max: u64,
    },
    /// It was written in another boot.
    #[error("the health record is of another boot (boot id {record}, this boot {now})")]
    OtherBoot {
        /// The record's boot id.
        record: String,
        /// This boot's.
        now: String,
    },
    /// It was written for another driver version.
    #[error("the health record is of driver {record}, the driver now is {now}")]
    OtherDriver {
        /// The record's driver version.
        record: String,
        /// The driver's version now.
        now: String,
    },
}

/// The record, trusted or not, and its age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// It is current: its faults count.
    Current {
        /// The record.
        record: HealthRecord,
        /// Its age in seconds.
        age: u64,
    },
    /// It is ignored, for this reason; the record is kept when it could be parsed (to show).
    Ignored {
        /// Why.
        reason: Ignored,
        /// The record, when there is one that parses.
        record: Option<HealthRecord>,
    },
}

impl Assessment {
    /// The record, when it is current.
    pub fn current(&self) -> Option<&HealthRecord> {
        match self {
            Assessment::Current { record, .. } => Some(record),
            Assessment::Ignored { .. } => None,
        }
    }
}

/// Whether the record in `inputs` is current for the driver at `driver_version` (empty:
/// not known, not compared) with at most `max_age` seconds of age (0: no limit).
pub fn assess(inputs: &HealthInputs, driver_version: &str, max_age: u64) -> Assessment {
    let ignored = |reason, record| Assessment::Ignored { reason, record };
    let bytes = match &inputs.record {
        RecordFile::Missing => return ignored(Ignored::Missing, None),
        RecordFile::Failed(e) => return ignored(Ignored::Unreadable(e.to_string()), None),
        RecordFile::Read(b) => b,
    };
    let record = match HealthRecord::parse(bytes) {
        Ok(r) if r.format == RECORD_FORMAT => r,
        Ok(r) => {
            return ignored(
                Ignored::Malformed(format!("format {}, not {RECORD_FORMAT}", r.format)),
                None,
            )
        }
        Err(e) => return ignored(Ignored::Malformed(e.to_string()), None),
    };
    // A record from the future (a clock set back) is as old as it can be proven to be: 0.
    let age = inputs.now.saturating_sub(record.written);
    if max_age > 0 && age > max_age {
        return ignored(Ignored::TooOld { age, max: max_age }, Some(record));
    }
    match &inputs.boot_id {
        Some(now) if now.trim() != record.boot_id.trim() => {
            let reason = Ignored::OtherBoot {
                record: record.boot_id.clone(),
                now: now.trim().to_string(),
            };
            return ignored(reason, Some(record));
        }
        Some(_) => {}
        // Without this boot's id, a record cannot be shown to be of this boot.
        None => {
            let reason = Ignored::OtherBoot {
                record: record.boot_id.clone(),
                now: "unknown".to_string(),
            };
            return ignored(reason, Some(record));
        }
    }
    if !driver_version.is_empty() && driver_version != record.driver_version {
        let reason = Ignored::OtherDriver {
            record: record.driver_version.clone(),
            now: driver_version.to_string(),
        };
        return ignored(reason, Some(record));
    }
    Assessment::Current { record, age }
}

/// A GPU that must not be handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{variable}: GPU {index} ({uuid}, bus {bus_id}) {faults}: nvc gives no container a broken GPU; \
     reset it (`nvidia-smi -r -i {index}`, then `nvc health update`), or set \
     [requests] health-check = false in the nvc config"
)]
pub struct UnhealthyGpu {
    /// The variable or option that named it.
    pub variable: &'static str,
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its bus id.
    pub bus_id: String,
    /// Its faults, in words.
    pub faults: String,
}

/// A GPU that `all` left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its faults.
    pub faults: Vec<Fault>,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: Vec<&str> = self.faults.iter().map(|x| x.describe()).collect();
        write!(
            f,
            "GPU {} ({}) {}",
            self.index,
            self.uuid,
            faults.join("; ")
        )
    }
}

fn faults_of<'r>(record: &'r HealthRecord, gpu: &Gpu) -> Option<&'r GpuHealth> {
    record.gpu(&gpu.uuid).filter(|h| !h.is_healthy())
}

/// Applies the current `record` to the GPUs `selection` selected: `all` loses its
/// unhealthy GPUs (returned, for the log); a list that names an unhealthy GPU (whole or
/// through one of its MIG devices) is refused. A GPU the record does not know counts
/// as healthy.
pub fn screen(
    selected: &mut Selected<'_>,
    selection: &DeviceSelection,
    record: &HealthRecord,
    variable: &'static str,
) -> Result<Vec<LeftOut>, UnhealthyGpu> {
    if matches!(selection, DeviceSelection::All) {
        let mut left_out = Vec::new();
        selected.gpus.retain(|g| match faults_of(record, g) {
            Some(h) => {
                left_out.push(LeftOut {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    faults: h.faults.clone(),
                });
                false
            }
            None => true,
        });
        return Ok(left_out);
    }
    for gpu in selected.all_gpus() {
        if let Some(h) = faults_of(record, gpu) {
            return Err(UnhealthyGpu {
                variable,
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                bus_id: gpu.bus_id.clone(),
                faults: h.describe(),
            });
        }
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests;
