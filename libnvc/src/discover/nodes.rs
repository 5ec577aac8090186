//! Device nodes under `<dev-root>/dev`: read with their real major:minor, mode and
//! owner; nodes the driver has not created yet get the numbers `/proc/devices` gives.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::proc::parse_char_majors;
use super::DriverRoots;
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

impl DeviceNode {
    /// The node at `path` in the container that the spec's `linux.devices` already has,
    /// with the spec's numbers: the runtime makes it as the spec says, so its host node
    /// is not read. Its mode and owner are the spec's business; they stand here as
    /// `0666`, root's.
    pub fn in_spec(path: &Path, dev_root: &Path, major: u32, minor: u32) -> DeviceNode {
        let rel = path.strip_prefix("/dev").unwrap_or(path);
        DeviceNode {
            path: path.to_path_buf(),
            host_path: dev_root.join("dev").join(rel),
            major,
            minor,
            file_mode: 0o666,
            uid: 0,
            gid: 0,
            on_host: true,
        }
    }
}

/// Reads the device nodes under a dev root: from the spec when it has them
/// ([`DeviceNode::in_spec`]), else from the host, with the majors of `/proc/devices`
/// read once, when a node first needs them.
pub(super) struct Nodes<'a> {
    probe: &'a dyn HostProbe,
    dev_root: &'a Path,
    proc_root: &'a Path,
    in_spec: BTreeMap<&'a Path, (u32, u32)>,
    majors: OnceCell<BTreeMap<String, u32>>,
}

impl<'a> Nodes<'a> {
    pub(super) fn new(
        probe: &'a dyn HostProbe,
        roots: &'a DriverRoots,
        in_spec: &'a [(PathBuf, u32, u32)],
    ) -> Nodes<'a> {
        Nodes {
            probe,
            dev_root: &roots.dev_root,
            proc_root: &roots.proc_root,
            in_spec: in_spec
                .iter()
                .map(|(path, major, minor)| (path.as_path(), (*major, *minor)))
                .collect(),
            majors: OnceCell::new(),
        }
    }

    fn major(&self, name: &str) -> Option<u32> {
        self.majors
            .get_or_init(|| read_majors(self.probe, self.proc_root))
            .get(name)
            .copied()
    }

    /// The spec's node at `/dev/<rel>`, if it has one.
    fn spec_node(&self, rel: &str) -> Option<DeviceNode> {
        let path = Path::new("/dev").join(rel);
        let (major, minor) = self.in_spec.get(path.as_path())?;
        Some(DeviceNode::in_spec(&path, self.dev_root, *major, *minor))
    }

    /// The node `<dev_root>/dev/<rel>`: the spec's, else the host's when it is a
    /// character device.
    fn node(&self, rel: &str) -> Option<DeviceNode> {
        self.spec_node(rel)
            .or_else(|| host_node(self.probe, self.dev_root, rel))
    }

    /// The node `/dev/<rel>` that is not there yet, of the numbers the driver registered
    /// (runc creates it in the container from them).
    fn unmade(&self, rel: &str, (major, minor): (u32, u32)) -> DeviceNode {
        DeviceNode {
            path: Path::new("/dev").join(rel),
            host_path: self.dev_root.join("dev").join(rel),
            major,
            minor,
            file_mode: 0o666,
            uid: 0,
            gid: 0,
            on_host: false,
        }
    }

    /// `/dev/nvidia<minor>`.
    pub(super) fn gpu(&self, gpu_minor: u32) -> DeviceNode {
        let rel = format!("nvidia{gpu_minor}");
        self.node(&rel).unwrap_or_else(|| {
            let major = self.major("nvidia").unwrap_or(195);
            self.unmade(&rel, (major, gpu_minor))
        })
    }

    /// `/dev/nvidia-caps/nvidia-cap<minor>`, when the node exists or the `nvidia-caps`
    /// major is registered.
    pub(super) fn cap(&self, cap_minor: u32) -> Option<DeviceNode> {
        let rel = format!("nvidia-caps/nvidia-cap{cap_minor}");
        self.node(&rel).or_else(|| {
            let major = self.major("nvidia-caps")?;
            Some(self.unmade(&rel, (major, cap_minor)))
        })
    }

    /// `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`: those present on
    /// the host (or in the spec), plus those the loaded modules registered but that have
    /// no node yet.
    pub(super) fn control(&self) -> Vec<DeviceNode> {
        let nv = || self.major("nvidia").unwrap_or(195);
        let uvm = || self.major("nvidia-uvm");
        [
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "nvidia-modeset",
        ]
        .into_iter()
        .filter_map(|rel| {
            if let Some(node) = self.node(rel) {
                return Some(node);
            }
            let numbers = match rel {
                "nvidiactl" => (nv(), 255),
                "nvidia-uvm" => (uvm()?, 0),
                "nvidia-uvm-tools" => (uvm()?, 1),
                _ => return None,
            };
            Some(self.unmade(rel, numbers))
        })
        .collect()
    }
}

/// The node `<dev_root>/dev/<rel>`, read from the host when it is a character device.
pub(super) fn host_node(probe: &dyn HostProbe, dev_root: &Path, rel: &str) -> Option<DeviceNode> {
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
