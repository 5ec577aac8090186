//! Resolving a device selection (`NVIDIA_VISIBLE_DEVICES`, the MIG variables) against the
//! host's GPUs: [`select`] gives the [`Selected`] GPUs and MIG devices, each once.

use crate::discover::{Driver, Gpu, MigDevice};
use crate::request::{DeviceId, DeviceSelection};

use super::EditsError;

/// The GPUs and MIG devices a selection names, each once, in the order asked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Selected<'a> {
    /// Whole GPUs.
    pub gpus: Vec<&'a Gpu>,
    /// MIG devices with their parent GPU.
    pub mig: Vec<(&'a Gpu, &'a MigDevice)>,
}

impl<'a> Selected<'a> {
    /// Every GPU that is selected whole or through one of its MIG devices, each once.
    pub fn all_gpus(&self) -> Vec<&'a Gpu> {
        let mut out: Vec<&Gpu> = Vec::new();
        for g in self
            .gpus
            .iter()
            .copied()
            .chain(self.mig.iter().map(|(g, _)| *g))
        {
            if !out.iter().any(|o| o.index == g.index) {
                out.push(g);
            }
        }
        out
    }
}

fn known_gpus(driver: &Driver) -> String {
    match driver.gpus.len() {
        0 => "this host has no GPU".to_string(),
        1 => "this host has 1 GPU, index 0".to_string(),
        n => format!("this host has {n} GPUs, indices 0-{}", n - 1),
    }
}

/// Resolves a device selection against the host's GPUs.
pub fn select<'a>(
    driver: &'a Driver,
    selection: &DeviceSelection,
    variable: &'static str,
) -> Result<Selected<'a>, EditsError> {
    let mut out = Selected::default();
    let ids = match selection {
        DeviceSelection::NotRequested | DeviceSelection::None => return Ok(out),
        DeviceSelection::All => {
            out.gpus = driver.gpus.iter().collect();
            return Ok(out);
        }
        DeviceSelection::List(ids) => ids,
    };
    if driver.wsl.is_some() {
        let device = ids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        return Err(EditsError::WslCannotIsolate { variable, device });
    }
    let unknown = |device: String| EditsError::UnknownDevice {
        variable,
        device,
        known: known_gpus(driver),
    };
    for id in ids {
        match id {
            DeviceId::Index(i) => {
                let gpu = driver
                    .gpus
                    .get(*i as usize)
                    .ok_or_else(|| unknown(format!("GPU index {i}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::GpuUuid(u) => {
                let gpu = driver
                    .gpus
                    .iter()
                    .find(|g| g.uuid.eq_ignore_ascii_case(u))
                    .ok_or_else(|| unknown(format!("GPU {u}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::BusId(b) => {
                let gpu = driver
                    .gpus
                    .iter()
                    .find(|g| g.bus_id.eq_ignore_ascii_case(b))
                    .ok_or_else(|| unknown(format!("the GPU at PCI bus id {b}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::MigIndex { gpu, mig } => {
                let parent = driver
                    .gpus
                    .get(*gpu as usize)
                    .ok_or_else(|| unknown(format!("GPU index {gpu} (of MIG device {gpu}:{mig})")))?;
                let dev = parent.mig.get(*mig as usize).ok_or_else(|| EditsError::UnknownDevice {
                    variable,
                    device: format!("MIG device {gpu}:{mig}"),
                    known: format!("GPU {gpu} has {} MIG devices", parent.mig.len()),
                })?;
                if !out.mig.iter().any(|(g, m)| g.index == parent.index && m.index == dev.index) {
                    out.mig.push((parent, dev));
                }
            }
            DeviceId::MigUuid(u) => {
                return Err(EditsError::Unsupported {
                    variable,
                    device: u.clone(),
                    reason: "selecting MIG devices by UUID is not supported yet; select them as <gpu>:<mig> (see `nvc info`)",
                })
            }
        }
    }
    Ok(out)
}

fn push_gpu<'a>(out: &mut Selected<'a>, gpu: &'a Gpu) {
    if !out.gpus.iter().any(|g| g.index == gpu.index) {
        out.gpus.push(gpu);
    }
}
