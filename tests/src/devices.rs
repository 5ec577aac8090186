//! The driver's character devices, and the MIG capabilities behind some of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{FakeDriverSpec, FakeError};

/// Major of `/dev/nvidia<minor>`, `/dev/nvidiactl` and `/dev/nvidia-modeset`.
pub const NVIDIA_MAJOR: u32 = 195;
/// Major of `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools` (dynamic in the real driver; the
/// sample's value).
pub const NVIDIA_UVM_MAJOR: u32 = 238;
/// Major of `/dev/nvidia-caps/*` (dynamic; the sample's value).
pub const NVIDIA_CAPS_MAJOR: u32 = 241;
/// Major of `/dev/nvidia-caps-imex-channels/*` (dynamic; the sample's value).
pub const NVIDIA_CAPS_IMEX_MAJOR: u32 = 242;
/// Minor of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;
/// Minor of `/dev/nvidia-modeset`.
pub const NVIDIA_MODESET_MINOR: u32 = 254;
/// nvidia-caps minor of `/proc/driver/nvidia/capabilities/fabric-imex-mgmt`: the driver numbers
/// the nvlink table (1 entry), the mig table (config, monitor), 32 GPUs × 135 MIG entries, then
/// this one.
pub const FABRIC_IMEX_MGMT_MINOR: u32 = 3 + 32 * MIG_MINORS_PER_GPU;

/// nvidia-caps minors each GPU owns: 15 GPU instances, each an access file and 8 compute
/// instances.
const MIG_MINORS_PER_GPU: u32 = 15 * 9;

/// nvidia-caps minor of `capabilities/gpu<gpu_minor>/mig/gi<gi>/access` (`ci: None`) or of
/// `.../gi<gi>/ci<ci>/access`, numbered as the driver does (and lists in
/// `/proc/driver/nvidia-caps/mig-minors`).
pub fn mig_cap_minor(gpu_minor: u32, gi: u32, ci: Option<u32>) -> u32 {
    3 + gpu_minor * MIG_MINORS_PER_GPU + gi * 9 + ci.map_or(0, |ci| 1 + ci)
}

/// One MIG capability of a fake GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeMigCap {
    /// Minor of the GPU (the `N` of `capabilities/gpuN`).
    pub gpu_minor: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id, `None` for the GPU instance's own access file.
    pub ci: Option<u32>,
    /// nvidia-caps minor: the node is `/dev/nvidia-caps/nvidia-cap<minor>`.
    pub minor: u32,
}

impl FakeMigCap {
    /// Path of its access file relative to `/proc/driver/nvidia/capabilities`.
    pub fn proc_path(&self) -> PathBuf {
        let gi = PathBuf::from(format!("gpu{}/mig/gi{}", self.gpu_minor, self.gi));
        match self.ci {
            Some(ci) => gi.join(format!("ci{ci}/access")),
            None => gi.join("access"),
        }
    }
}

/// One MIG device of a fake GPU in MIG mode, as the fake driver's NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeMigDevice {
    /// The parent GPU's UUID.
    pub gpu_uuid: String,
    /// The parent GPU's minor.
    pub gpu_minor: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// Its UUID: `MIG-f1a5c0de-<gpu minor>-4<gi>-8<ci>-0000fa4ed71e`, in hex.
    pub uuid: String,
}

/// The file of a fake tree that says what its NVML reports of the MIG devices, read by
/// the fake libnvidia-ml and by `libnvc::probe::TreeProbe`.
pub const MIG_DEVICES_FILE: &str = libnvc::probe::TreeProbe::MIG_DEVICES_FILE;

/// One character device node of a fake tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeDeviceNode {
    /// Path relative to the dev root, e.g. `dev/nvidia0`.
    pub path: PathBuf,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Permission bits, e.g. 0o666.
    pub mode: u32,
}

impl FakeDriverSpec {
    /// The MIG capabilities of the GPU in MIG mode (the one with the lowest bus id): GPU
    /// instances 1 and 2 with compute instance 0 each. Empty unless `mig`.
    pub fn mig_caps(&self) -> Vec<FakeMigCap> {
        if !self.mig {
            return Vec::new();
        }
        let Some(gpu) = self.gpus_in_bus_order().first().copied() else {
            return Vec::new();
        };
        let mut caps = Vec::new();
        for gi in [1, 2] {
            for ci in [None, Some(0)] {
                caps.push(FakeMigCap {
                    gpu_minor: gpu.minor,
                    gi,
                    ci,
                    minor: mig_cap_minor(gpu.minor, gi, ci),
                });
            }
        }
        caps
    }

    /// The MIG devices of the GPU in MIG mode, one per compute instance of
    /// [`FakeDriverSpec::mig_caps`], with the UUIDs its NVML gives them. Empty unless `mig`.
    pub fn mig_devices(&self) -> Vec<FakeMigDevice> {
        let Some(gpu) = self.gpus_in_bus_order().first().copied() else {
            return Vec::new();
        };
        self.mig_caps()
            .into_iter()
            .filter_map(|cap| {
                let ci = cap.ci?;
                Some(FakeMigDevice {
                    gpu_uuid: gpu.uuid.clone(),
                    gpu_minor: cap.gpu_minor,
                    gi: cap.gi,
                    ci,
                    uuid: format!(
                        "MIG-f1a5c0de-{:04x}-4{:03x}-8{ci:03x}-0000fa4ed71e",
                        cap.gpu_minor, cap.gi
                    ),
                })
            })
            .collect()
    }

    /// The text of [`MIG_DEVICES_FILE`] for [`FakeDriverSpec::mig_devices`]: a comment,
    /// then `<GPU uuid> <gi> <ci> <MIG uuid>` a line.
    pub fn mig_devices_text(&self) -> String {
        let mut text = String::from(
            "# The MIG devices the fake driver's NVML reports: <GPU uuid> <gpu instance> \
             <compute instance> <MIG uuid>.\n# Read by the fake libnvidia-ml and by libnvc's \
             TreeProbe.\n",
        );
        for d in self.mig_devices() {
            text.push_str(&format!("{} {} {} {}\n", d.gpu_uuid, d.gi, d.ci, d.uuid));
        }
        text
    }

    /// Every device node the tree has (when `device_nodes`), with the numbers and modes the
    /// real driver gives them.
    pub fn device_nodes(&self) -> Vec<FakeDeviceNode> {
        if self.wsl {
            return FakeDriverSpec::wsl_nodes();
        }
        let node = |path: String, major, minor, mode| FakeDeviceNode {
            path: PathBuf::from(path),
            major,
            minor,
            mode,
        };
        let mut nodes = vec![
            node("dev/nvidiactl".into(), NVIDIA_MAJOR, NVIDIACTL_MINOR, 0o666),
            node(
                "dev/nvidia-modeset".into(),
                NVIDIA_MAJOR,
                NVIDIA_MODESET_MINOR,
                0o666,
            ),
            node("dev/nvidia-uvm".into(), NVIDIA_UVM_MAJOR, 0, 0o666),
            node("dev/nvidia-uvm-tools".into(), NVIDIA_UVM_MAJOR, 1, 0o666),
        ];
        for gpu in self.gpus_in_bus_order() {
            nodes.push(node(
                format!("dev/nvidia{}", gpu.minor),
                NVIDIA_MAJOR,
                gpu.minor,
                0o666,
            ));
        }
        nodes.push(node(
            "dev/nvidia-caps/nvidia-cap1".into(),
            NVIDIA_CAPS_MAJOR,
            1,
            0o400,
        ));
        nodes.push(node(
            "dev/nvidia-caps/nvidia-cap2".into(),
            NVIDIA_CAPS_MAJOR,
            2,
            0o444,
        ));
        for cap in self.mig_caps() {
            nodes.push(node(
                format!("dev/nvidia-caps/nvidia-cap{}", cap.minor),
                NVIDIA_CAPS_MAJOR,
                cap.minor,
                0o444,
            ));
        }
        for channel in 0..self.imex_channels {
            nodes.push(node(
                format!("dev/nvidia-caps-imex-channels/channel{channel}"),
                NVIDIA_CAPS_IMEX_MAJOR,
                channel,
                0o666,
            ));
        }
        nodes
    }
}

/// Creates the nodes under `dev_root` with mknod(1), which sets the mode exactly.
pub(crate) fn create_nodes(dev_root: &Path, nodes: &[FakeDeviceNode]) -> Result<(), FakeError> {
    for node in nodes {
        let path = dev_root.join(&node.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(FakeError::io("create directory", parent))?;
        }
        let mode = format!("{:o}", node.mode);
        let (major, minor) = (node.major.to_string(), node.minor.to_string());
        let output = Command::new("mknod")
            .args(["-m", &mode])
            .arg(&path)
            .args(["c", &major, &minor])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| FakeError::Spawn {
                step: "create a device node",
                program: "mknod".to_string(),
                source,
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
            if stderr.contains("Operation not permitted") {
                return Err(FakeError::NeedsRoot {
                    what: format!("mknod {}: {stderr}", path.display()),
                });
            }
            return Err(FakeError::Command {
                step: "create a device node",
                command: format!("mknod -m {mode} {} c {major} {minor}", path.display()),
                status: output.status,
                stderr,
            });
        }
    }
    Ok(())
}
