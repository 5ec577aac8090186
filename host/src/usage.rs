//! Which container uses which GPU (`nvc ps`, `nvc top`), the host's half: NVML asked for
//! each GPU's memory and its running compute and graphics processes with their SM
//! utilisation (nvml-wrapper: `nvmlDeviceGetMemoryInfo_v2`,
//! `nvmlDeviceGetComputeRunningProcesses_v3`, `nvmlDeviceGetGraphicsRunningProcesses_v3`,
//! `nvmlDeviceGetProcessUtilization`), nvc's records of the containers it set up
//! ([`crate::trace::recorded_containers`]), and libnvc's mapping
//! ([`libnvc::usage::map`]) over the host's `/proc` and the engines' state read through
//! [`RealHost`].
//!
//! A statically linked nvc (the node image's) cannot load NVML: [`Nvml::open`] says so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use libnvc::usage::{
    GpuReading, GpuUsage, NvmlProcess, ProcessKind, RecordedContainer, UsageRoots,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use crate::probe::RealHost;
use crate::state::StateDir;

/// Why the GPUs' processes cannot be listed at all.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// This nvc is linked statically and cannot load a shared library.
    #[error(
        "this nvc is linked statically (the node image's) and cannot load NVML ({path}); run \
         the packaged nvc on the host, or nvidia-smi"
    )]
    Static {
        /// The driver's libnvidia-ml.
        path: PathBuf,
    },
    /// NVML could not be loaded or started.
    #[error("cannot start NVML from {path}: is the NVIDIA kernel module loaded (nvidia-smi)?")]
    Init {
        /// The driver's libnvidia-ml.
        path: PathBuf,
        /// NVML's reason.
        #[source]
        source: NvmlError,
    },
}

/// The driver's NVML, loaded once (`nvc top` asks it again for each frame).
pub struct Nvml {
    lib: nvml_wrapper::Nvml,
}

/// One GPU as discovery found it: the GPUs NVML is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuId {
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its PCI bus id.
    pub bus_id: String,
    /// Its model, from `/proc/driver/nvidia` (NVML's name, where it says, comes first).
    pub model: String,
}

impl Nvml {
    /// Loads and starts the driver's NVML (`path`, its libnvidia-ml).
    pub fn open(path: &Path) -> Result<Nvml, UsageError> {
        if crate::statically_linked() {
            return Err(UsageError::Static {
                path: path.to_path_buf(),
            });
        }
        let lib = nvml_wrapper::Nvml::builder()
            .lib_path(path.as_os_str())
            .init()
            .map_err(|source| UsageError::Init {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Nvml { lib })
    }

    /// What NVML says now of each of `gpus`: memory and processes; what it cannot say is
    /// in each reading's `unseen`.
    pub fn read(&self, gpus: &[GpuId]) -> Vec<GpuReading> {
        gpus.iter().map(|g| self.read_one(g)).collect()
    }

    fn read_one(&self, gpu: &GpuId) -> GpuReading {
        let mut reading = GpuReading {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            bus_id: gpu.bus_id.clone(),
            name: Some(gpu.model.clone()).filter(|m| !m.is_empty()),
            ..GpuReading::default()
        };
        let device = match self.lib.device_by_uuid(gpu.uuid.as_str()) {
            Ok(d) => d,
            Err(e) => {
                reading.unseen.push(format!(
                    "NVML has no handle for it: {}",
                    libnvc::report::error_chain(&e)
                ));
                return reading;
            }
        };
        if let Ok(name) = device.name() {
            reading.name = Some(name);
        }
        match device.memory_info() {
            Ok(m) => {
                reading.memory_used = Some(m.used);
                reading.memory_total = Some(m.total);
            }
            Err(e) => reading.unseen.push(format!("memory: {}", unsupported(&e))),
        }
        let mut processes: Vec<NvmlProcess> = Vec::new();
        let lists = [
            (ProcessKind::Compute, device.running_compute_processes()),
            (ProcessKind::Graphics, device.running_graphics_processes()),
        ];
        for (kind, list) in lists {
            let list = match list {
                Ok(l) => l,
                Err(e) => {
                    reading.unseen.push(format!(
                        "{} processes: {}",
                        kind.as_str(),
                        unsupported(&e)
                    ));
                    continue;
                }
            };
            for p in list {
                let used = match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                };
                match processes.iter_mut().find(|q| q.pid == p.pid) {
                    Some(q) => {
                        q.kind = q.kind.and(kind);
                        q.used_memory = match (q.used_memory, used) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                    }
                    None => processes.push(NvmlProcess {
                        pid: p.pid,
                        kind,
                        used_memory: used,
                        sm_util: None,
                    }),
                }
            }
        }
        if !processes.is_empty() {
            match device.process_utilization_stats(None) {
                Ok(samples) => {
                    // The latest sample of each process.
                    let mut latest: HashMap<u32, (u64, u32)> = HashMap::new();
                    for s in samples {
                        let e = latest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
                        if s.timestamp >= e.0 {
                            *e = (s.timestamp, s.sm_util);
                        }
                    }
                    for p in &mut processes {
                        p.sm_util = latest.get(&p.pid).map(|(_, sm)| *sm);
                    }
                }
                Err(e) => reading
                    .unseen
                    .push(format!("SM utilisation per process: {}", unsupported(&e))),
            }
        }
        processes.sort_by_key(|p| p.pid);
        reading.processes = processes;
        reading
    }
}

/// NVML's error, said plainly for the two a driver commonly gives.
fn unsupported(e: &NvmlError) -> String {
    match e {
        NvmlError::NotSupported => "not supported by this GPU or driver".into(),
        NvmlError::NoPermission => "not permitted (run nvc as root)".into(),
        NvmlError::FailedToLoadSymbol(s) => format!("this driver's NVML lacks {s}"),
        e => libnvc::report::error_chain(e),
    }
}

/// The table: `gpus` read from `nvml`, their processes mapped to containers through
/// nvc's records in `state` and the engines' state in `roots`; the second value says
/// what of nvc's own state could not be read.
pub fn table(
    nvml: &Nvml,
    gpus: &[GpuId],
    state: &StateDir,
    roots: &UsageRoots,
) -> (Vec<GpuUsage>, Vec<String>) {
    let mut unseen = Vec::new();
    let records: Vec<RecordedContainer> = match crate::trace::recorded_containers(state) {
        Ok(r) => r,
        Err(e) => {
            unseen.push(format!(
                "nvc's records of the containers it set up: {} (run nvc as root to see them)",
                libnvc::report::error_chain(&e)
            ));
            Vec::new()
        }
    };
    let readings = nvml.read(gpus);
    (
        libnvc::usage::map(&readings, &records, roots, &RealHost),
        unseen,
    )
}
