//! The driver's `/proc/driver/nvidia` tree and `/proc/devices`: driver version, GPUs,
//! capability device minors, character device majors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::DiscoverError;
use crate::probe::{self, HostProbe};

/// One GPU as the kernel module lists it in `gpus/<bus id>/information`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcGpu {
    /// `0000:06:00.0`, lowercase, 4-digit domain.
    pub bus_id: String,
    /// `GPU-…`.
    pub uuid: String,
    /// The `N` of `/dev/nvidiaN`.
    pub minor: u32,
    /// `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// The directory of the GPU's proc files.
    pub dir: PathBuf,
}

/// The GPUs of one driver, as read from its proc files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInventory {
    /// The driver version they were read for.
    pub driver: String,
    /// The GPUs, in PCI bus order, as [`read_gpus`] gives them.
    pub gpus: Vec<ProcGpu>,
}

/// The driver version out of `/proc/driver/nvidia/version`, whose first line reads e.g.
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …`
/// or `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug …`.
pub fn parse_version_file(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split_once("Module")?.1;
    after
        .split_whitespace()
        .find(|t| is_version(t))
        .map(str::to_string)
}

/// Whether `text` has the form of a driver version: dot-separated digits, `580.95.05`.
pub fn is_version(text: &str) -> bool {
    text.contains('.')
        && text
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The `Key: value` pairs of a proc information file; keys and values trimmed.
pub fn parse_fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Normalises a PCI bus id to `dddd:bb:dd.f`, lowercase: accepts a 4- or 8-digit
/// domain or none.
pub fn normalize_bus_id(id: &str) -> Option<String> {
    let id = id.trim().to_ascii_lowercase();
    let parts: Vec<&str> = id.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [bus, devfn] => ("0", *bus, *devfn),
        [domain, bus, devfn] => (*domain, *bus, *devfn),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |s: &str, max: usize| -> Option<u32> {
        if s.is_empty() || s.len() > max || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok()
    };
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let dev = hex(dev, 2)?;
    let func = hex(func, 1)?;
    if domain > 0xffff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// Every GPU under `<nvidia>/gpus`, in PCI bus order (the order nvidia-smi numbers
/// them in). GPUs the module marks `GPU Excluded: Yes` are left out.
pub fn read_gpus(probe: &dyn HostProbe, nvidia: &Path) -> Result<Vec<ProcGpu>, DiscoverError> {
    let gpus_dir = nvidia.join("gpus");
    let entries = match probe.read_dir(&gpus_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DiscoverError::io("list", &gpus_dir, source)),
    };
    let mut gpus = Vec::new();
    for entry in entries {
        let dir = gpus_dir.join(&entry);
        let info_path = dir.join("information");
        let text = probe::read_text(probe, &info_path)
            .map_err(|e| DiscoverError::io("read", &info_path, e))?;
        let fields = parse_fields(&text);
        if fields.get("GPU Excluded").map(String::as_str) == Some("Yes") {
            continue;
        }
        let bad = |what: &str| DiscoverError::BadProcFile {
            path: info_path.clone(),
            what: what.to_string(),
        };
        let name = entry.to_string_lossy().into_owned();
        let bus_id = fields
            .get("Bus Location")
            .and_then(|b| normalize_bus_id(b))
            .or_else(|| normalize_bus_id(&name))
            .ok_or_else(|| bad("no valid Bus Location"))?;
        let minor = fields
            .get("Device Minor")
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| bad("no valid Device Minor"))?;
        let uuid = fields
            .get("GPU UUID")
            .filter(|u| u.starts_with("GPU-"))
            .cloned()
            .ok_or_else(|| bad("no valid GPU UUID"))?;
        let model = fields.get("Model").cloned().unwrap_or_default();
        gpus.push(ProcGpu {
            bus_id,
            uuid,
            minor,
            model,
            dir,
        });
    }
    gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    Ok(gpus)
}

/// The `DeviceFileMinor` of a capability file such as
/// `capabilities/mig/config`, or `None` when the file is absent or has none.
pub fn read_cap_minor(probe: &dyn HostProbe, path: &Path) -> Option<u32> {
    let text = probe::read_text(probe, path).ok()?;
    parse_fields(&text).get("DeviceFileMinor")?.parse().ok()
}

/// The MIG instances of the GPU with device minor `minor`, from
/// `capabilities/gpu<minor>/mig/gi<G>/ci<C>/access`: `(gi, ci, gi access minor, ci
/// access minor)`, sorted by gi then ci.
pub fn read_mig_instances(
    probe: &dyn HostProbe,
    nvidia: &Path,
    minor: u32,
) -> Vec<(u32, u32, u32, u32)> {
    let mig = nvidia.join(format!("capabilities/gpu{minor}/mig"));
    let mut out = Vec::new();
    for (gi, gi_dir) in numbered_dirs(probe, &mig, "gi") {
        let Some(gi_minor) = read_cap_minor(probe, &gi_dir.join("access")) else {
            continue;
        };
        for (ci, ci_dir) in numbered_dirs(probe, &gi_dir, "ci") {
            if let Some(ci_minor) = read_cap_minor(probe, &ci_dir.join("access")) {
                out.push((gi, ci, gi_minor, ci_minor));
            }
        }
    }
    out.sort();
    out
}

fn numbered_dirs(probe: &dyn HostProbe, dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = probe.read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, PathBuf)> = entries
        .into_iter()
        .filter_map(|name| {
            let n = name.to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, dir.join(&name)))
        })
        .collect();
    out.sort();
    out
}

/// Character device majors by name, from `/proc/devices`.
pub fn parse_char_majors(text: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with("Block devices") {
            if line.starts_with("Block devices") {
                break;
            }
            continue;
        }
        let mut it = line.split_whitespace();
        if let (Some(major), Some(name)) = (it.next(), it.next()) {
            if let Ok(major) = major.parse() {
                out.entry(name.to_string()).or_insert(major);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_both_module_flavours() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC)\n";
        assert_eq!(parse_version_file(open).as_deref(), Some("580.159.04"));
        let prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n";
        assert_eq!(parse_version_file(prop).as_deref(), Some("535.104.05"));
        assert_eq!(parse_version_file("garbage"), None);
    }

    #[test]
    fn bus_ids() {
        let cases = [
            ("0000:00:06.0", Some("0000:00:06.0")),
            ("00000000:3B:00.0", Some("0000:3b:00.0")),
            ("3b:00.0", Some("0000:3b:00.0")),
            ("0001:af:1f.7", Some("0001:af:1f.7")),
            ("0000:00:20.0", None),
            ("0000:00:06", None),
            ("zz:00.0", None),
            ("1:2:3:4.0", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_bus_id(input).as_deref(), want, "{input}");
        }
    }

    #[test]
    fn proc_devices() {
        let text = "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n241 nvidia-caps\n\nBlock devices:\n  7 loop\n";
        let m = parse_char_majors(text);
        assert_eq!(m["nvidia"], 195);
        assert_eq!(m["nvidia-uvm"], 238);
        assert_eq!(m["nvidia-caps"], 241);
        assert!(!m.contains_key("loop"));
    }

    #[test]
    fn information_fields() {
        let text = "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-92bfdb8e-0ae7-d882-cef0-4f24bbc28ea8\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n";
        let f = parse_fields(text);
        assert_eq!(f["Model"], "NVIDIA H100 80GB HBM3");
        assert_eq!(f["Bus Location"], "0000:00:06.0");
        assert_eq!(f["Device Minor"], "0");
    }
}
