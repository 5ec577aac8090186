//! The driver's `/proc` files, in the formats of the H100 580.159.04 sample.

use std::fmt::Write as _;
use std::path::Path;

use crate::devices::{mig_cap_minor, FABRIC_IMEX_MGMT_MINOR};
use crate::tree::write_file;
use crate::{FakeDriverSpec, FakeError};

/// `/proc/devices` of the sample host: the nvidia majors among the usual ones.
const PROC_DEVICES: &str = "Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
128 ptm
136 pts
195 nvidia
195 nvidiactl
203 cpu/cpuid
231 infiniband_mad
231 infiniband_verbs
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels
243 hidraw
244 infiniband_verbs
245 infiniband_mad
246 macvtap
247 mei
248 bsg
249 watchdog
250 ptp
251 pps
252 dax
253 dimmctl
254 ndctl

Block devices:
  7 loop
253 zram
254 virtblk
259 blkext
";

/// `/proc/driver/nvidia/params` of the sample host.
const PARAMS: &str = r#"ResmanDebugLevel: 4294967295
RmLogonRC: 1
ModifyDeviceFiles: 1
DeviceFileUID: 0
DeviceFileGID: 0
DeviceFileMode: 438
InitializeSystemMemoryAllocations: 1
UsePageAttributeTable: 4294967295
EnableMSI: 1
EnablePCIeGen3: 0
MemoryPoolSize: 0
KMallocHeapMaxSize: 0
VMallocHeapMaxSize: 0
IgnoreMMIOCheck: 0
EnableStreamMemOPs: 0
EnableUserNUMAManagement: 1
NvLinkDisable: 1
RmProfilingAdminOnly: 0
PreserveVideoMemoryAllocations: 0
EnableS0ixPowerManagement: 0
S0ixPowerManagementVideoMemoryThreshold: 256
DynamicPowerManagement: 3
DynamicPowerManagementVideoMemoryThreshold: 200
RegisterPCIDriver: 1
EnablePCIERelaxedOrderingMode: 0
EnableResizableBar: 0
EnableGpuFirmware: 18
EnableGpuFirmwareLogs: 2
RmNvlinkBandwidthLinkCount: 0
EnableDbgBreakpoint: 0
OpenRmEnableUnsupportedGpus: 1
DmaRemapPeerMmio: 1
ImexChannelCount: 2048
CreateImexChannel0: 0
GrdmaPciTopoCheckOverride: 0
CoherentGPUMemoryMode: ""
RegistryDwords: ""
RegistryDwordsPerDevice: ""
RmMsg: ""
GpuBlacklist: ""
TemporaryFilePath: ""
ExcludedGpus: ""
"#;

const GPU_POWER: &str = "Runtime D3 status:          Not supported
Video Memory:               Active

GPU Hardware Support:
 Video Memory Self Refresh: Not Supported
 Video Memory Off:          Supported
";

const WARNINGS_README: &str = "The NVIDIA graphics driver tries to detect potential problems
with the host system and warns about them using the system's
logging mechanisms. Important warning message are also logged
to dedicated text files in this directory.
";

const PATCHES_README: &str = "The NVIDIA graphics driver can be modified by third-party
patches. Patches applied to this driver are listed in this
directory.
";

/// The contents of `/proc/driver/nvidia/version` for `version`.
pub fn proc_version(version: &str) -> String {
    format!(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (nixbld@)  \n\
         GCC version:  gcc version 15.3.0 (GCC) \n"
    )
}

/// A capability file as the driver prints it (`nv_cap_procfs_read`).
fn capability(minor: u32, mode: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
}

/// `/proc/driver/nvidia-caps/mig-minors`: the driver lists every GPU slot it supports (32),
/// whether or not a GPU is there.
fn mig_minors() -> String {
    let mut out = String::from("config 1\nmonitor 2\n");
    for gpu in 0..32 {
        for gi in 0..15 {
            let _ = writeln!(
                out,
                "gpu{gpu}/gi{gi}/access {}",
                mig_cap_minor(gpu, gi, None)
            );
            for ci in 0..8 {
                let _ = writeln!(
                    out,
                    "gpu{gpu}/gi{gi}/ci{ci}/access {}",
                    mig_cap_minor(gpu, gi, Some(ci))
                );
            }
        }
    }
    out
}

/// Writes `driver/nvidia`, `driver/nvidia-caps` and `devices` under `proc_root`.
pub(crate) fn write(spec: &FakeDriverSpec, proc_root: &Path) -> Result<(), FakeError> {
    let nvidia = proc_root.join("driver/nvidia");
    let v = spec.version.as_str();
    write_file(&proc_root.join("devices"), PROC_DEVICES, 0o444)?;
    write_file(&nvidia.join("version"), proc_version(v), 0o444)?;
    write_file(&nvidia.join("params"), PARAMS, 0o444)?;
    write_file(&nvidia.join("registry"), "Binary: \"\"\n", 0o444)?;
    write_file(&nvidia.join("suspend"), "", 0o644)?;
    write_file(&nvidia.join("suspend_depth"), "default\n", 0o644)?;
    write_file(&nvidia.join("patches/README"), PATCHES_README, 0o444)?;
    write_file(&nvidia.join("warnings/README"), WARNINGS_README, 0o444)?;

    for (index, gpu) in spec.gpus_in_bus_order().into_iter().enumerate() {
        let dir = nvidia.join("gpus").join(&gpu.bus_id);
        // Tabs and spaces exactly as the driver prints them.
        let information = format!(
            "Model: \t\t {model}\n\
             IRQ:   \t\t {irq}\n\
             GPU UUID: \t {uuid}\n\
             Video BIOS: \t 96.00.da.00.0c\n\
             Bus Type: \t PCIe\n\
             DMA Size: \t 52 bits\n\
             DMA Mask: \t 0xfffffffffffff\n\
             Bus Location: \t {bus}\n\
             Device Minor: \t {minor}\n\
             GPU Firmware: \t {v}\n\
             GPU Excluded:\t No\n",
            model = gpu.model,
            irq = 41 + index,
            uuid = gpu.uuid,
            bus = gpu.bus_id,
            minor = gpu.minor,
        );
        write_file(&dir.join("information"), information, 0o444)?;
        write_file(&dir.join("power"), GPU_POWER, 0o444)?;
        write_file(&dir.join("registry"), "Binary: \"\"\n", 0o444)?;
        // The driver makes gpu<minor>/mig for every GPU, MIG mode or not.
        let mig = nvidia.join(format!("capabilities/gpu{}/mig", gpu.minor));
        std::fs::create_dir_all(&mig).map_err(FakeError::io("create directory", &mig))?;
    }
    std::fs::create_dir_all(nvidia.join("gpus"))
        .map_err(FakeError::io("create directory", nvidia.join("gpus")))?;

    let caps = nvidia.join("capabilities");
    write_file(&caps.join("mig/config"), capability(1, 0o400), 0o444)?;
    write_file(&caps.join("mig/monitor"), capability(2, 0o444), 0o444)?;
    write_file(
        &caps.join("fabric-imex-mgmt"),
        capability(FABRIC_IMEX_MGMT_MINOR, 0o400),
        0o400,
    )?;
    for cap in spec.mig_caps() {
        write_file(
            &caps.join(cap.proc_path()),
            capability(cap.minor, 0o444),
            0o444,
        )?;
    }

    let nvidia_caps = proc_root.join("driver/nvidia-caps");
    write_file(&nvidia_caps.join("mig-minors"), mig_minors(), 0o444)?;
    write_file(&nvidia_caps.join("nvlink-minors"), "fabric-mgmt 0\n", 0o444)?;
    write_file(
        &nvidia_caps.join("sys-minors"),
        format!("fabric-imex-mgmt {FABRIC_IMEX_MGMT_MINOR}\n"),
        0o444,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_minors_match_the_driver_numbering() {
        let minors = mig_minors();
        // Values the real driver prints, as quoted by NVIDIA's own tooling.
        for line in [
            "gpu0/gi0/access 3",
            "gpu0/gi0/ci0/access 4",
            "gpu0/gi1/access 12",
            "gpu3/gi3/ci3/access 439",
            "gpu6/gi11/ci7/access 920",
        ] {
            assert!(minors.lines().any(|l| l == line), "missing {line}");
        }
        assert_eq!(minors.lines().count(), 2 + 32 * 135);
        assert_eq!(FABRIC_IMEX_MGMT_MINOR, 4323);
    }
}
