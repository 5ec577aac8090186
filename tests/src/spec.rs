//! What a fake driver tree should contain.

/// One GPU of a fake driver: what `/proc/driver/nvidia/gpus/<bus_id>/information` says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGpu {
    /// PCI bus id as the driver names its proc directory, e.g. `0000:3b:00.0` (lowercase hex).
    pub bus_id: String,
    /// Device minor: the GPU's node is `/dev/nvidia<minor>` (195:minor).
    pub minor: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Marketing name, e.g. `NVIDIA Fake H100 80GB HBM3`.
    pub model: String,
}

/// The model name every generated GPU gets: close to the real one, impossible to confuse with it.
pub const FAKE_GPU_MODEL: &str = "NVIDIA Fake H100 80GB HBM3";

/// PCI bus numbers of the GPUs of a typical 8-GPU server, used in order for generated GPUs.
const BUS_NUMBERS: [u8; 8] = [0x06, 0x1a, 0x3b, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

/// The highest minor a GPU may have: 254 is nvidia-modeset and 255 nvidiactl.
pub const MAX_GPU_MINOR: u32 = 253;

impl FakeGpu {
    /// `count` GPUs in PCI bus order whose minors are *not* in bus order: GPU `i` (by bus) gets
    /// minor `(i + count - 1) % count`, so the first GPU on the bus has the highest minor. Code
    /// that numbers GPUs by minor instead of by bus id, as the driver and nvidia-smi do, shows.
    ///
    /// `fake_gpus(3)` is the default set: 0000:06:00.0 minor 2, 0000:1a:00.0 minor 0,
    /// 0000:3b:00.0 minor 1. Beyond 8 GPUs the PCI domain is counted up.
    pub fn fake_gpus(count: u32) -> Vec<FakeGpu> {
        (0..count)
            .map(|i| {
                let domain = i / BUS_NUMBERS.len() as u32;
                let bus = BUS_NUMBERS[(i % BUS_NUMBERS.len() as u32) as usize];
                FakeGpu {
                    bus_id: format!("{domain:04x}:{bus:02x}:00.0"),
                    minor: (i + count - 1) % count,
                    uuid: format!("GPU-fa4ed71e-{i:04x}-4e57-8fa4-ed71e{i:07x}"),
                    model: FAKE_GPU_MODEL.to_string(),
                }
            })
            .collect()
    }
}

/// Describes a fake NVIDIA driver installation; [`FakeDriverSpec::build`] writes it to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeDriverSpec {
    /// Driver version in file names, sonames, `/proc/driver/nvidia/version` and NVML. Default
    /// `999.88.77`: no real driver has it, so anything read from the real host shows.
    pub version: String,
    /// What the fake libcuda's `cuDriverGetVersion` reports. Default 99010 (`99.1`).
    pub cuda_version: i32,
    /// The GPUs; default [`FakeGpu::fake_gpus`]`(3)`.
    pub gpus: Vec<FakeGpu>,
    /// Put the device nodes under a separate dev root (`<dir>/devroot/dev`) instead of
    /// `<root>/dev`. Default false.
    pub split_dev_root: bool,
    /// Create real character device nodes (needs root or CAP_MKNOD). Default true.
    pub device_nodes: bool,
    /// Also build 32-bit (i386) libraries under `usr/lib/i386-linux-gnu` when `gcc -m32` can
    /// link; see [`crate::FakeDriver::lib32_built`]. Default false.
    pub lib32: bool,
    /// Put GPU index 0 (the lowest bus id) in MIG mode with two GPU instances of one compute
    /// instance each: the capability files under `/proc/driver/nvidia/capabilities/gpu<minor>/mig`
    /// and their `/dev/nvidia-caps/nvidia-cap<N>` nodes. Default false.
    pub mig: bool,
    /// Number of `/dev/nvidia-caps-imex-channels/channel<N>` nodes. Default 0.
    pub imex_channels: u32,
    /// Bound unix sockets `run/nvidia-persistenced/socket` and `run/nvidia-fabricmanager/socket`
    /// and the directory `tmp/nvidia-mps` under the root. Default true.
    pub ipc: bool,
    /// A WSL2 driver instead of a Linux one: `/dev/dxg`, `/usr/lib/wsl/lib` and a driver
    /// store folder, no kernel module (`gpus`, `mig`, `lib32`, `imex_channels` and `ipc` are
    /// not used). Default false.
    pub wsl: bool,
    /// The architecture the driver is built for. Default x86-64; for aarch64 the libraries and
    /// programs are built with `aarch64-linux-gnu-gcc`, the multiarch folder is
    /// `/usr/lib/aarch64-linux-gnu` and the ld.so.cache is written by aarch64's `ldconfig`
    /// under qemu-user ([`crate::aarch64`]; `scripts/cross-aarch64.sh` fetches it).
    pub arch: libnvc::elf::Arch,
}

impl Default for FakeDriverSpec {
    fn default() -> Self {
        FakeDriverSpec {
            version: "999.88.77".to_string(),
            cuda_version: 99010,
            gpus: FakeGpu::fake_gpus(3),
            split_dev_root: false,
            device_nodes: true,
            lib32: false,
            mig: false,
            imex_channels: 0,
            ipc: true,
            wsl: false,
            arch: libnvc::elf::Arch::X86_64,
        }
    }
}

impl FakeDriverSpec {
    /// The GPUs in PCI bus order, the order in which the driver and nvidia-smi number them.
    pub fn gpus_in_bus_order(&self) -> Vec<&FakeGpu> {
        let mut gpus: Vec<&FakeGpu> = self.gpus.iter().collect();
        gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        gpus
    }

    /// Checks what would otherwise fail half-way through a build or produce a tree no driver
    /// could: names that end up in file names and C string literals, duplicate minors.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let version_ok = !self.version.is_empty()
            && self
                .version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
        if !version_ok {
            return Err(format!(
                "version {:?} must be non-empty and use only [A-Za-z0-9._-]",
                self.version
            ));
        }
        if self.cuda_version <= 0 {
            return Err(format!(
                "cuda_version {} must be positive",
                self.cuda_version
            ));
        }
        if self.lib32 && self.arch.lib32_machine().is_none() {
            return Err(format!("the {} driver has no 32-bit libraries", self.arch));
        }
        let mut minors = std::collections::BTreeSet::new();
        let mut bus_ids = std::collections::BTreeSet::new();
        for gpu in &self.gpus {
            if !is_bus_id(&gpu.bus_id) {
                return Err(format!(
                    "bus id {:?} is not of the form 0000:3b:00.0 (lowercase hex)",
                    gpu.bus_id
                ));
            }
            if gpu.minor > MAX_GPU_MINOR {
                return Err(format!(
                    "GPU {} has minor {}, above {MAX_GPU_MINOR} (254 and 255 are nvidia-modeset and nvidiactl)",
                    gpu.bus_id, gpu.minor
                ));
            }
            if !minors.insert(gpu.minor) {
                return Err(format!("two GPUs have minor {}", gpu.minor));
            }
            if !bus_ids.insert(gpu.bus_id.as_str()) {
                return Err(format!("two GPUs have bus id {}", gpu.bus_id));
            }
            for (what, value) in [("uuid", &gpu.uuid), ("model", &gpu.model)] {
                if value.is_empty() || value.chars().any(|c| c.is_control()) {
                    return Err(format!(
                        "GPU {} has {what} {value:?}: must be non-empty, one line",
                        gpu.bus_id
                    ));
                }
            }
        }
        if self.mig && self.gpus.is_empty() {
            return Err("mig needs at least one GPU".to_string());
        }
        if self.imex_channels > 2048 {
            return Err(format!(
                "imex_channels {} is above the driver's ImexChannelCount of 2048",
                self.imex_channels
            ));
        }
        Ok(())
    }
}

/// `dddd:bb:dd.f` with lowercase hex digits, as in `/proc/driver/nvidia/gpus`.
fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |c: &u8| c.is_ascii_digit() || (b'a'..=b'f').contains(c);
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b[..4].iter().all(hex)
        && b[5..7].iter().all(hex)
        && b[8..10].iter().all(hex)
        && hex(&b[11])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_gpus_are_not_in_minor_order() {
        let gpus = FakeGpu::fake_gpus(3);
        let got: Vec<(&str, u32)> = gpus.iter().map(|g| (g.bus_id.as_str(), g.minor)).collect();
        assert_eq!(
            got,
            [
                ("0000:06:00.0", 2),
                ("0000:1a:00.0", 0),
                ("0000:3b:00.0", 1)
            ]
        );
        assert_eq!(FakeDriverSpec::default().gpus, gpus);
    }

    #[test]
    fn generated_gpus_are_distinct_and_valid() {
        for n in [0, 1, 2, 8, 9, 40] {
            let spec = FakeDriverSpec {
                gpus: FakeGpu::fake_gpus(n),
                ..FakeDriverSpec::default()
            };
            spec.validate().unwrap();
            let uuids: std::collections::BTreeSet<_> = spec.gpus.iter().map(|g| &g.uuid).collect();
            assert_eq!(uuids.len(), n as usize);
            if n >= 2 {
                assert_ne!(spec.gpus[0].minor, 0, "minors must not follow bus order");
            }
        }
    }

    #[test]
    fn validate_rejects_bad_specs() {
        let bad = [
            FakeDriverSpec {
                version: "1.2\"; rm".into(),
                ..FakeDriverSpec::default()
            },
            FakeDriverSpec {
                gpus: vec![FakeGpu {
                    minor: 254,
                    ..FakeGpu::fake_gpus(1).remove(0)
                }],
                ..FakeDriverSpec::default()
            },
            FakeDriverSpec {
                gpus: vec![FakeGpu {
                    bus_id: "0000:3B:00.0".into(),
                    ..FakeGpu::fake_gpus(1).remove(0)
                }],
                ..FakeDriverSpec::default()
            },
            FakeDriverSpec {
                gpus: vec![
                    FakeGpu::fake_gpus(1).remove(0),
                    FakeGpu::fake_gpus(1).remove(0),
                ],
                ..FakeDriverSpec::default()
            },
        ];
        for spec in bad {
            assert!(spec.validate().is_err(), "{spec:?}");
        }
    }
}
