//! The device and channel lists a container's environment names: `NVIDIA_VISIBLE_DEVICES`
//! in all its forms (indices, GPU and MIG UUIDs, PCI bus ids, `<gpu>:<mig>`, CDI names,
//! `all`, `none`, `void`), the MIG variables, and `NVIDIA_IMEX_CHANNELS`.

use std::fmt;

use super::{
    excerpt, items, requests_something, RequestError, RequestPolicy, IMEX_CHANNELS, KEYWORDS,
    MAX_DEVICE_INDEX, MAX_IMEX_CHANNEL,
};

/// Which GPUs (or, for the MIG variables, which GPUs to manage) a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// The variable is unset, empty or `void`: nothing is asked for.
    NotRequested,
    /// `none`: the driver's files, but no GPU.
    None,
    /// `all`: every GPU.
    All,
    /// The listed GPUs, without duplicates, in the order first listed.
    List(Vec<DeviceId>),
}

impl DeviceSelection {
    /// Whether it names a MIG device (`<gpu>:<mig>` or a MIG UUID): only such a
    /// selection needs the GPUs' MIG instances read.
    pub fn names_mig_device(&self) -> bool {
        match self {
            DeviceSelection::List(ids) => ids
                .iter()
                .any(|id| matches!(id, DeviceId::MigIndex { .. } | DeviceId::MigUuid(_))),
            _ => false,
        }
    }

    /// Whether it names a MIG device by its UUID (`MIG-<uuid>`), which only NVML can tie
    /// to a GPU instance and a compute instance: only such a selection needs NVML asked.
    /// The old form `MIG-GPU-<uuid>/<gi>/<ci>` says both itself.
    pub fn names_mig_uuid(&self) -> bool {
        match self {
            DeviceSelection::List(ids) => ids.iter().any(DeviceId::is_mig_uuid),
            _ => false,
        }
    }
}

/// One device named in a device list, normalised so equal devices compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceId {
    /// A GPU index, as `nvidia-smi` numbers them.
    Index(u32),
    /// A GPU UUID, stored as `GPU-` and lowercase hex.
    GpuUuid(String),
    /// A PCI bus id, stored as `dddd:bb:dd.f`, lowercase with a 4-digit domain (8 digits
    /// for a domain above `ffff`).
    BusId(String),
    /// A MIG device UUID, stored as `MIG-` and lowercase hex, or in the old
    /// `MIG-GPU-<uuid>/<gi>/<ci>` form with lowercase hex.
    MigUuid(String),
    /// A MIG device by GPU index and MIG index, written `<gpu>:<mig>`.
    MigIndex {
        /// The GPU index.
        gpu: u32,
        /// The MIG device's index on that GPU.
        mig: u32,
    },
}

impl DeviceId {
    /// Whether it is a MIG device's UUID as NVML gives it (`MIG-<uuid>`), not the old
    /// `MIG-GPU-<uuid>/<gi>/<ci>` form.
    pub fn is_mig_uuid(&self) -> bool {
        matches!(self, DeviceId::MigUuid(u) if !u.starts_with("MIG-GPU-"))
    }
}

/// Shows the device the way it is written in a device list, normalised.
impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::GpuUuid(s) | DeviceId::BusId(s) | DeviceId::MigUuid(s) => f.write_str(s),
            DeviceId::MigIndex { gpu, mig } => write!(f, "{gpu}:{mig}"),
        }
    }
}

/// Which IMEX channels a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelSelection {
    /// No channel (unset, empty, `none` or `void`).
    None,
    /// `all`: every channel.
    All,
    /// The listed channels, without duplicates, in the order first listed.
    List(Vec<u32>),
}

/// A device list's items with CDI names mapped onto the plain forms:
/// `nvidia.com/gpu=<name>` becomes `<name>`, and names of another kind
/// (`vendor.com/x=…`) are dropped, as they are another runtime's to inject.
fn ours(items: Vec<&str>) -> Vec<&str> {
    items
        .into_iter()
        .filter_map(|item| match crate::cdi::split_qualified(item) {
            Some((kind, name)) if kind == crate::cdi::KIND => Some(name.trim()),
            Some(_) => None,
            None => Some(item),
        })
        .collect()
}

pub(super) fn parse_devices(
    variable: &'static str,
    value: &str,
) -> Result<DeviceSelection, RequestError> {
    let items = ours(items(value));
    match items.as_slice() {
        [] | ["void"] => return Ok(DeviceSelection::NotRequested),
        ["none"] => return Ok(DeviceSelection::None),
        ["all"] => return Ok(DeviceSelection::All),
        _ => {}
    }
    let mut ids = Vec::with_capacity(items.len());
    for item in items {
        if KEYWORDS.contains(&item) {
            return Err(RequestError::MixedKeyword {
                variable,
                keyword: item.to_string(),
                value: excerpt(value.trim()),
            });
        }
        let id = match parse_device_id(item) {
            Ok(id) => id,
            Err(IdError::Unknown) => {
                return Err(RequestError::UnknownDevice {
                    variable,
                    item: excerpt(item),
                })
            }
            Err(IdError::TooLarge) => {
                return Err(RequestError::DeviceIndexTooLarge {
                    variable,
                    item: excerpt(item),
                })
            }
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(DeviceSelection::List(ids))
}

pub(super) enum IdError {
    Unknown,
    TooLarge,
}

/// A decimal number of ASCII digits; `None` when it is not one. Numbers too large for a
/// `u64` come back as `u64::MAX` so they are reported as too large, not as unknown.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

fn device_index(s: &str) -> Result<u32, IdError> {
    let n = decimal(s).ok_or(IdError::Unknown)?;
    if n > MAX_DEVICE_INDEX {
        return Err(IdError::TooLarge);
    }
    u32::try_from(n).map_err(|_| IdError::TooLarge)
}

fn strip_prefix_ignore_case<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

/// Whether `s` is a UUID: hex groups of 8-4-4-4-12 digits.
pub(crate) fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub(super) fn parse_device_id(item: &str) -> Result<DeviceId, IdError> {
    if decimal(item).is_some() {
        return device_index(item).map(DeviceId::Index);
    }
    if let Some(uuid) = strip_prefix_ignore_case(item, "GPU-") {
        if is_uuid(uuid) {
            return Ok(DeviceId::GpuUuid(format!(
                "GPU-{}",
                uuid.to_ascii_lowercase()
            )));
        }
        return Err(IdError::Unknown);
    }
    if let Some(rest) = strip_prefix_ignore_case(item, "MIG-") {
        if is_uuid(rest) {
            return Ok(DeviceId::MigUuid(format!(
                "MIG-{}",
                rest.to_ascii_lowercase()
            )));
        }
        // The form drivers before R470 used: MIG-GPU-<uuid>/<gi>/<ci>.
        let old = strip_prefix_ignore_case(rest, "GPU-").map(|r| r.split('/').collect::<Vec<_>>());
        if let Some([uuid, gi, ci]) = old.as_deref() {
            if is_uuid(uuid) {
                if let (Some(gi), Some(ci)) = (decimal(gi), decimal(ci)) {
                    let uuid = uuid.to_ascii_lowercase();
                    return Ok(DeviceId::MigUuid(format!("MIG-GPU-{uuid}/{gi}/{ci}")));
                }
            }
        }
        return Err(IdError::Unknown);
    }
    if let Some(bus_id) = parse_bus_id(item) {
        return Ok(DeviceId::BusId(bus_id));
    }
    if let Some((gpu, mig)) = item.split_once(':') {
        return Ok(DeviceId::MigIndex {
            gpu: device_index(gpu)?,
            mig: device_index(mig)?,
        });
    }
    Err(IdError::Unknown)
}

fn hex(s: &str, lengths: &[usize]) -> Option<u32> {
    if !lengths.contains(&s.len()) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// A PCI bus id `[domain:]bus:device.function` with a 4- or 8-digit domain, normalised to
/// `dddd:bb:dd.f`, or `dddddddd:bb:dd.f` for a domain that needs more than 4 digits (the
/// normal form must read back as the same id).
pub(super) fn parse_bus_id(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [bus, devfn] => (0, *bus, *devfn),
        [domain, bus, devfn] => (hex(domain, &[4, 8])?, *bus, *devfn),
        _ => return None,
    };
    let bus = hex(bus, &[2])?;
    let (device, function) = devfn.split_once('.')?;
    let device = hex(device, &[2]).filter(|d| *d <= 0x1f)?;
    let function = hex(function, &[1]).filter(|f| *f <= 7)?;
    let id = if domain > 0xffff {
        format!("{domain:08x}:{bus:02x}:{device:02x}.{function:x}")
    } else {
        format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
    };
    Some(id)
}

pub(super) fn mig_devices(
    variable: &'static str,
    value: Option<&str>,
    policy: &RequestPolicy,
) -> Result<DeviceSelection, RequestError> {
    let Some(value) = value else {
        return Ok(DeviceSelection::NotRequested);
    };
    if !policy.privileged && requests_something(value) {
        return Err(RequestError::NeedsPrivileged {
            variable,
            value: excerpt(value),
        });
    }
    parse_devices(variable, value)
}

pub(super) fn parse_channels(value: &str) -> Result<ChannelSelection, RequestError> {
    let items = items(value);
    match items.as_slice() {
        [] | ["none"] | ["void"] => return Ok(ChannelSelection::None),
        ["all"] => return Ok(ChannelSelection::All),
        _ => {}
    }
    let mut channels = Vec::with_capacity(items.len());
    for item in items {
        if KEYWORDS.contains(&item) {
            return Err(RequestError::MixedKeyword {
                variable: IMEX_CHANNELS,
                keyword: item.to_string(),
                value: excerpt(value.trim()),
            });
        }
        let n = decimal(item).ok_or_else(|| RequestError::UnknownChannel {
            item: excerpt(item),
        })?;
        let channel = u32::try_from(n)
            .ok()
            .filter(|c| u64::from(*c) <= MAX_IMEX_CHANNEL)
            .ok_or_else(|| RequestError::ChannelTooLarge {
                item: excerpt(item),
            })?;
        if !channels.contains(&channel) {
            channels.push(channel);
        }
    }
    Ok(ChannelSelection::List(channels))
}
