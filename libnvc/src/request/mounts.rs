//! The GPUs a container is given as bind mounts at `/var/run/nvidia-container-devices/<id>`:
//! how NVIDIA's Kubernetes device plugin passes them with `DEVICE_LIST_STRATEGY=volume-mounts`,
//! the setting meant for clusters that do not trust pods' environment (a pod cannot make
//! such a mount itself; the kubelet adds it from the plugin's answer). Each mount names
//! one device: `<id>` as `NVIDIA_VISIBLE_DEVICES` takes it (`all`, an index, `GPU-<uuid>`,
//! `<gpu>:<mig>`), `cdi/<vendor>/<class>=<name>` a CDI device, `imex/<channel>` an IMEX
//! channel. Read only when `requests.accept-devices-as-volume-mounts` is on.

use super::devices::{parse_channels, parse_device_id};
use super::{excerpt, ChannelSelection, DeviceId, DeviceSelection, RequestError};

/// Where the mounts are made.
pub const DEVICE_MOUNTS_ROOT: &str = "/var/run/nvidia-container-devices";

/// The most mounts read.
const MAX_MOUNTS: usize = 1024;

/// What the mounts ask for; `None` when no mount names a GPU or a channel of ours.
pub(super) fn mount_devices(
    names: &[String],
) -> Result<Option<(DeviceSelection, ChannelSelection)>, RequestError> {
    let bad = |name: &str| RequestError::BadDeviceMount {
        name: excerpt(name),
    };
    if names.len() > MAX_MOUNTS {
        return Err(RequestError::TooManyDeviceMounts {
            count: names.len(),
            max: MAX_MOUNTS,
        });
    }
    let mut all = false;
    let mut ids: Vec<DeviceId> = Vec::new();
    let mut channels: Vec<&str> = Vec::new();
    for name in names {
        let device = if let Some(qualified) = name.strip_prefix("cdi/") {
            match crate::cdi::split_qualified(qualified) {
                Some((kind, device)) if kind == crate::cdi::KIND => device,
                // Another vendor's device: not ours to give.
                Some(_) => continue,
                None => return Err(bad(name)),
            }
        } else if let Some(channel) = name.strip_prefix("imex/") {
            channels.push(channel);
            continue;
        } else {
            name.as_str()
        };
        if device == crate::cdi::ALL_DEVICE {
            all = true;
            continue;
        }
        let id = parse_device_id(device).map_err(|_| bad(name))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let devices = match (all, ids.is_empty()) {
        (true, _) => DeviceSelection::All,
        (false, false) => DeviceSelection::List(ids),
        // Channels alone: the driver's files and the channels, no GPU.
        (false, true) if !channels.is_empty() => DeviceSelection::None,
        (false, true) => return Ok(None),
    };
    let channels = if channels.is_empty() {
        ChannelSelection::None
    } else {
        parse_channels(&channels.join(","))
            .map_err(|_| bad(&format!("imex/{}", channels.join(","))))?
    };
    Ok(Some((devices, channels)))
}

/// The name under [`DEVICE_MOUNTS_ROOT`] of a mount destination, when it is one: one
/// or more plain components (`cdi/nvidia.com/gpu=0` has two), no `.` or `..`.
pub fn device_mount_name(destination: &str) -> Option<String> {
    let rest = destination
        .strip_prefix(DEVICE_MOUNTS_ROOT)?
        .strip_prefix('/')?
        .trim_end_matches('/');
    let plain = !rest.is_empty()
        && rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'));
    plain.then(|| rest.to_string())
}
