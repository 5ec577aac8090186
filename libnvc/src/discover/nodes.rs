//! Device nodes under `<dev-root>/dev`: read with their real major:minor, mode and
//! owner; nodes the driver has not created yet get the numbers `/proc/devices` gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::proc::parse_char_majors;
use crate::probe::{self, FileKind, HostProbe};

/// A character device node the container gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceNode {
    /// Its path in the container, such as `/dev/nvidia0`.
    pub path: PathBuf,
    /// Its path on the host (under the dev root).
    pub host_path: PathBuf,
    /// The major number.
    pub major: u32,
    /// The minor number.
    pub minor: u32,
    /// The permission bits, such as `0o666`.
    pub file_mode: u32,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// Whether the node exists on the host (else only its numbers are known).
    pub on_host: bool,
}

/// The majors the driver registered, from `<proc_root>/devices`, with the driver's
/// fixed `nvidia` major as a fallback.
pub fn read_majors(probe: &dyn HostProbe, proc_root: &Path) -> BTreeMap<String, u32> {
    majors(
        probe::read_text(probe, &proc_root.join("devices"))
            .ok()
            .as_deref(),
    )
}

/// The majors of `/proc/devices`' text (`None` when it could not be read), with the
/// driver's fixed `nvidia` major as a fallback.
fn majors(proc_devices: Option<&str>) -> BTreeMap<String, u32> {
    let mut m = proc_devices.map(parse_char_majors).unwrap_or_default();
    m.entry("nvidia".into()).or_insert(195);
    m.entry("nvidiactl".into()).or_insert(195);
    m
}

/// The node `<dev_root>/dev/<rel>`, read from the host when it is a character device.
fn host_node(probe: &dyn HostProbe, dev_root: &Path, rel: &str) -> Option<DeviceNode> {
    let host_path = dev_root.join("dev").join(rel);
    let meta = probe.lstat(&host_path).ok()?;
    if meta.kind != FileKind::CharDevice {
        return None;
    }
    Some(DeviceNode {
        path: Path::new("/dev").join(rel),
        host_path,
        major: meta.major,
        minor: meta.minor,
        file_mode: meta.mode & 0o7777,
        uid: meta.uid,
        gid: meta.gid,
        on_host: true,
    })
}

/// The node `<dev_root>/dev/<rel>` from the host, else one made of the numbers the
/// driver registered (runc creates it in the container from them).
fn node_or(probe: &dyn HostProbe, dev_root: &Path, rel: &str, numbers: (u32, u32)) -> DeviceNode {
    host_node(probe, dev_root, rel).unwrap_or_else(|| DeviceNode {
        path: Path::new("/dev").join(rel),
        host_path: dev_root.join("dev").join(rel),
        major: numbers.0,
        minor: numbers.1,
        file_mode: 0o666,
        uid: 0,
        gid: 0,
        on_host: false,
    })
}

/// `/dev/nvidia<minor>`.
pub fn gpu_node(
    probe: &dyn HostProbe,
    dev_root: &Path,
    majors: &BTreeMap<String, u32>,
    gpu_minor: u32,
) -> DeviceNode {
    let major = majors.get("nvidia").copied().unwrap_or(195);
    node_or(
        probe,
        dev_root,
        &format!("nvidia{gpu_minor}"),
        (major, gpu_minor),
    )
}

/// `/dev/nvidia-caps/nvidia-cap<minor>`, when the node exists or the `nvidia-caps`
/// major is registered.
pub fn cap_node(
    probe: &dyn HostProbe,
    dev_root: &Path,
    majors: &BTreeMap<String, u32>,
    cap_minor: u32,
) -> Option<DeviceNode> {
    let rel = format!("nvidia-caps/nvidia-cap{cap_minor}");
    match majors.get("nvidia-caps") {
        Some(major) => Some(node_or(probe, dev_root, &rel, (*major, cap_minor))),
        None => host_node(probe, dev_root, &rel),
    }
}

/// `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`: those present on
/// the host, plus those the loaded modules registered but that have no node yet.
pub fn control_nodes(
    probe: &dyn HostProbe,
    dev_root: &Path,
    majors: &BTreeMap<String, u32>,
) -> Vec<DeviceNode> {
    let nv = majors.get("nvidia").copied().unwrap_or(195);
    let uvm = majors.get("nvidia-uvm").copied();
    [
        ("nvidiactl", Some((nv, 255))),
        ("nvidia-uvm", uvm.map(|m| (m, 0))),
        ("nvidia-uvm-tools", uvm.map(|m| (m, 1))),
        ("nvidia-modeset", None),
    ]
    .into_iter()
    .filter_map(|(rel, numbers)| match numbers {
        Some(n) => Some(node_or(probe, dev_root, rel, n)),
        None => host_node(probe, dev_root, rel),
    })
    .collect()
}

/// `/dev/nvidia-caps-imex-channels/channel<N>` present on the host, by N.
pub fn imex_channels(probe: &dyn HostProbe, dev_root: &Path) -> Vec<DeviceNode> {
    let dir = dev_root.join("dev/nvidia-caps-imex-channels");
    let Ok(entries) = probe.read_dir(&dir) else {
        return Vec::new();
    };
    let mut numbered: Vec<(u32, String)> = entries
        .into_iter()
        .filter_map(|e| {
            let name = e.into_string().ok()?;
            let n = name.strip_prefix("channel")?.parse().ok()?;
            Some((n, name))
        })
        .collect();
    numbered.sort();
    numbered
        .into_iter()
        .filter_map(|(_, name)| {
            host_node(
                probe,
                dev_root,
                &format!("nvidia-caps-imex-channels/{name}"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::majors;

    #[test]
    fn the_gpu_major_comes_from_proc_devices() {
        let gpu_major = |text: Option<&str>| majors(text)["nvidia"];
        let devices = "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n\nBlock devices:\n  7 nvidia\n";
        assert_eq!(gpu_major(Some(devices)), 195);
        assert_eq!(
            gpu_major(Some("Character devices:\n 10 misc\n507 nvidia\n")),
            507
        );
        assert_eq!(gpu_major(Some("Character devices:\n 10 misc\n")), 195);
        assert_eq!(gpu_major(None), 195);
    }
}
