//! Resolving a device selection (`NVIDIA_VISIBLE_DEVICES`, the MIG variables) against the
//! host's GPUs: [`select`] gives the [`Selected`] GPUs and MIG devices, each once.

use crate::discover::{Driver, Gpu, MigDevice, MigUuids};
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
                let parent = driver.gpus.get(*gpu as usize).ok_or_else(|| {
                    unknown(format!("GPU index {gpu} (of MIG device {gpu}:{mig})"))
                })?;
                let dev =
                    parent
                        .mig
                        .get(*mig as usize)
                        .ok_or_else(|| EditsError::UnknownDevice {
                            variable,
                            device: format!("MIG device {gpu}:{mig}"),
                            known: format!("GPU {gpu} has {} MIG devices", parent.mig.len()),
                        })?;
                push_mig(&mut out, parent, dev);
            }
            DeviceId::MigUuid(u) => {
                let (parent, dev) = mig_by_uuid(driver, variable, u)?;
                push_mig(&mut out, parent, dev);
            }
        }
    }
    Ok(out)
}

/// The MIG device `uuid` names, with its parent GPU: `MIG-<uuid>` as NVML reported it
/// ([`crate::discover::MigDevice::uuid`]), or the old `MIG-GPU-<uuid>/<gi>/<ci>`, which
/// names its GPU and instances itself.
fn mig_by_uuid<'a>(
    driver: &'a Driver,
    variable: &'static str,
    uuid: &str,
) -> Result<(&'a Gpu, &'a MigDevice), EditsError> {
    let unknown = |known: String| EditsError::UnknownDevice {
        variable,
        device: format!("MIG device {uuid}"),
        known,
    };
    if let Some((gpu_uuid, gi, ci)) = old_mig_uuid(uuid) {
        let parent = driver
            .gpus
            .iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(gpu_uuid))
            .ok_or_else(|| unknown(known_gpus(driver)))?;
        let dev = parent
            .mig
            .iter()
            .find(|m| (m.gi, m.ci) == (gi, ci))
            .ok_or_else(|| unknown(known_instances(parent)))?;
        return Ok((parent, dev));
    }
    let found = driver.gpus.iter().find_map(|g| {
        g.mig
            .iter()
            .find(|m| {
                m.uuid
                    .as_deref()
                    .is_some_and(|u| u.eq_ignore_ascii_case(uuid))
            })
            .map(|m| (g, m))
    });
    match (found, &driver.mig_uuids) {
        (Some(found), _) => Ok(found),
        (None, MigUuids::Unknown(source)) => Err(EditsError::MigUuidsUnknown {
            variable,
            device: uuid.to_string(),
            source: source.clone(),
        }),
        (None, _) => Err(unknown(known_mig_uuids(driver))),
    }
}

/// The GPU's UUID and the instance ids of an old-form MIG UUID, `MIG-GPU-<uuid>/<gi>/<ci>`
/// (as the request normalised it).
fn old_mig_uuid(uuid: &str) -> Option<(&str, u32, u32)> {
    let rest = uuid.strip_prefix("MIG-")?;
    let mut parts = rest.split('/');
    let (gpu, gi, ci) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !gpu.starts_with("GPU-") {
        return None;
    }
    Some((gpu, gi.parse().ok()?, ci.parse().ok()?))
}

/// The host's MIG devices with their UUIDs, for an error naming one it does not have.
fn known_mig_uuids(driver: &Driver) -> String {
    let mut known = Vec::new();
    for g in &driver.gpus {
        for m in &g.mig {
            let uuid = m.uuid.as_deref().unwrap_or("no UUID from NVML");
            known.push(format!("{uuid} ({}:{})", g.index, m.index));
        }
    }
    match (known.is_empty(), &driver.mig_uuids) {
        (true, _) => "this host has no MIG device".to_string(),
        (false, MigUuids::NotAsked) => format!(
            "this host has {} MIG devices, whose UUIDs were not read",
            known.len()
        ),
        (false, _) => format!("this host's MIG devices are {}", known.join(", ")),
    }
}

/// The GPU instance and compute instance ids of `gpu`'s MIG devices.
fn known_instances(gpu: &Gpu) -> String {
    if gpu.mig.is_empty() {
        return format!("GPU {} ({}) has no MIG device", gpu.index, gpu.uuid);
    }
    let ids: Vec<String> = gpu
        .mig
        .iter()
        .map(|m| format!("{}/{}", m.gi, m.ci))
        .collect();
    format!(
        "GPU {} ({}) has MIG devices <gi>/<ci> {}",
        gpu.index,
        gpu.uuid,
        ids.join(", ")
    )
}

fn push_mig<'a>(out: &mut Selected<'a>, parent: &'a Gpu, dev: &'a MigDevice) {
    if !out
        .mig
        .iter()
        .any(|(g, m)| g.index == parent.index && m.index == dev.index)
    {
        out.mig.push((parent, dev));
    }
}

fn push_gpu<'a>(out: &mut Selected<'a>, gpu: &'a Gpu) {
    if !out.gpus.iter().any(|g| g.index == gpu.index) {
        out.gpus.push(gpu);
    }
}
