//! MIG devices as NVML names them. Only NVML knows a MIG device's UUID (`MIG-<uuid>`, what
//! NVIDIA's device plugin puts in `NVIDIA_VISIBLE_DEVICES` under its mixed strategy): the
//! kernel module's `capabilities/gpu<N>/mig` folders list the instances without one. NVML
//! is asked through the probe ([`crate::probe::HostProbe::mig_devices`]) only when a
//! request names a MIG device by UUID ([`super::DeviceNeeds::mig_uuids`]), and each answer
//! is tied to the instance discovery read by its parent GPU, GPU instance id and compute
//! instance id ([`super::MigDevice::uuid`]).
//!
//! The answers are never kept across starts (not in the driver-files cache): a MIG device
//! destroyed and made again has a new UUID under the same ids, and a stale UUID would give
//! a container another tenant's device.
//!
//! Their text form, one device a line, `<GPU uuid> <gpu instance> <compute instance>
//! <MIG uuid>`, is what `nvc-mig-devices` prints for the static programs, which do not load
//! NVML themselves, and what a test tree declares (`TreeProbe::MIG_DEVICES_FILE`).

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::{Gpu, MigUuids};
use crate::probe::{HostProbe, ProbeError};
use crate::request::is_uuid;

/// One MIG device as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlMigDevice {
    /// Its parent GPU's UUID (`GPU-…`, lowercase).
    pub gpu: String,
    /// Its GPU instance id.
    pub gi: u32,
    /// Its compute instance id.
    pub ci: u32,
    /// Its own UUID (`MIG-…`, lowercase).
    pub uuid: String,
}

/// A line of the text form that is not one ([`parse_mig_devices`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} is not `<GPU-uuid> <gpu instance> <compute instance> <MIG-uuid>`: {text:?}")]
pub struct BadMigLine {
    /// Its number, from 1.
    pub line: usize,
    /// The line, cut to 120 characters.
    pub text: String,
}

impl NvmlMigDevice {
    /// The device, lowercased where NVML's spelling may differ (`GPU-`/`MIG-` and hex).
    pub fn new(gpu: &str, gi: u32, ci: u32, uuid: &str) -> Option<NvmlMigDevice> {
        let gpu = normal_uuid(gpu, "GPU-")?;
        let uuid = normal_uuid(uuid, "MIG-")?;
        Some(NvmlMigDevice { gpu, gi, ci, uuid })
    }

    /// Its line of the text form (no newline).
    pub fn line(&self) -> String {
        format!("{} {} {} {}", self.gpu, self.gi, self.ci, self.uuid)
    }
}

/// `text` as `prefix` and a UUID, lowercase; `None` when it is not that.
fn normal_uuid(text: &str, prefix: &str) -> Option<String> {
    let head = text.get(..prefix.len())?;
    let rest = text.get(prefix.len()..)?;
    (head.eq_ignore_ascii_case(prefix) && is_uuid(rest))
        .then(|| format!("{prefix}{}", rest.to_ascii_lowercase()))
}

/// The devices of the text form: one a line, blank lines and `#` comments skipped.
pub fn parse_mig_devices(text: &str) -> Result<Vec<NvmlMigDevice>, BadMigLine> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || BadMigLine {
            line: n + 1,
            text: raw.chars().take(120).collect(),
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [gpu, gi, ci, uuid] = fields.as_slice() else {
            return Err(bad());
        };
        let id = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
        };
        let device = match (id(gi), id(ci)) {
            (Some(gi), Some(ci)) => NvmlMigDevice::new(gpu, gi, ci, uuid),
            _ => None,
        };
        out.push(device.ok_or_else(bad)?);
    }
    Ok(out)
}

/// Asks NVML (`nvml`, or why there is none) for the MIG devices of `gpus` that have any,
/// and gives each MIG device NVML reports its UUID. A MIG device NVML does not report
/// (made after it answered, or on a GPU it cannot open) keeps none.
pub(super) fn ask(
    probe: &dyn HostProbe,
    nvml: Result<PathBuf, ProbeError>,
    gpus: &mut [Gpu],
) -> MigUuids {
    let asked = nvml.and_then(|nvml| {
        let parents: Vec<&str> = gpus
            .iter()
            .filter(|g| !g.mig.is_empty())
            .map(|g| g.uuid.as_str())
            .collect();
        probe.mig_devices(&nvml, &parents)
    });
    let reported = match asked {
        Ok(reported) => reported,
        Err(e) => {
            // Said where it matters: by the selection that needs a UUID, or CDI generation.
            log::debug!(
                "no MIG device has a UUID: {}",
                crate::report::error_chain(&e)
            );
            return MigUuids::Unknown(Arc::new(e));
        }
    };
    for gpu in gpus.iter_mut() {
        for mig in &mut gpu.mig {
            mig.uuid = reported
                .iter()
                .find(|d| d.gpu.eq_ignore_ascii_case(&gpu.uuid) && (d.gi, d.ci) == (mig.gi, mig.ci))
                .map(|d| d.uuid.clone());
        }
    }
    MigUuids::Known
}

/// The text form of `devices`, one line each.
pub fn render_mig_devices(devices: &[NvmlMigDevice]) -> String {
    devices.iter().map(|d| d.line() + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "GPU-fa4ed71e-0000-4e57-8fa4-ed71e0000000";
    const MIG: &str = "MIG-5fa4ed71-e001-4001-9000-a1b2c3d4e5f6";

    #[test]
    fn lines_read_back_as_written_and_lowercased() {
        let upper = format!(
            "# gpu gi ci mig\n\n{} 1 0 {}  # one\n{GPU} 2 0 MIG-5fa4ed71-e001-4002-9000-a1b2c3d4e5f6\n",
            GPU.to_uppercase().replacen("GPU-", "gpu-", 1),
            MIG.to_uppercase()
        );
        let got = parse_mig_devices(&upper).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], NvmlMigDevice::new(GPU, 1, 0, MIG).unwrap());
        assert_eq!((got[0].gpu.as_str(), got[0].uuid.as_str()), (GPU, MIG));
        assert_eq!(parse_mig_devices(&render_mig_devices(&got)).unwrap(), got);
        assert_eq!(parse_mig_devices("").unwrap(), []);
    }

    #[test]
    fn anything_else_names_its_line() {
        for bad in [
            format!("{GPU} 1 0"),
            format!("{GPU} 1 0 {MIG} extra"),
            format!("{GPU} x 0 {MIG}"),
            format!("{GPU} 1 -1 {MIG}"),
            format!("{GPU} +1 0 {MIG}"),
            format!("{GPU} 1 0 {GPU}"),
            format!("{MIG} 1 0 {MIG}"),
            format!("{GPU} 1 0 MIG-GPU-{}/1/0", &GPU[4..]),
            format!("{GPU} 99999999999 0 {MIG}"),
        ] {
            let err = parse_mig_devices(&format!("\n{bad}\n")).unwrap_err();
            assert_eq!(err.line, 2, "{bad}");
            assert!(err.to_string().contains("line 2"), "{err}");
        }
    }
}
