//! What a container asks for, read from its environment: which GPUs
//! (`NVIDIA_VISIBLE_DEVICES`), which driver files (`NVIDIA_DRIVER_CAPABILITIES`), what it
//! requires of the driver (`NVIDIA_REQUIRE_*`), MIG management devices and IMEX channels.
//!
//! The semantics follow the NVIDIA Container Toolkit, including its handling of legacy
//! CUDA images, but stricter: a value that is not understood is an error naming the
//! variable and the bad part rather than something silently skipped.
//!
//! Split along its jobs: this file reads the environment into a [`Request`] under a
//! [`RequestPolicy`]; `devices.rs` parses the device and channel lists
//! (`NVIDIA_VISIBLE_DEVICES` and its forms, the MIG variables, `NVIDIA_IMEX_CHANNELS`);
//! `cdi.rs` reads the `cdi.k8s.io/` annotations; `driver.rs` reads what the container asks
//! of the driver (capabilities, requirements); `error.rs` holds [`RequestError`].

mod cdi;
mod devices;
mod driver;
mod error;
mod exclusive;
mod mounts;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::caps::{Capability, CapabilitySet};
use crate::require::Requirement;

pub use cdi::CDI_ANNOTATION_PREFIX;
pub use devices::{ChannelSelection, DeviceId, DeviceSelection};
pub use error::RequestError;
pub use exclusive::{ExclusiveBy, EXCLUSIVE_ANNOTATION, EXCLUSIVE_ENV};
pub use mounts::{device_mount_name, DEVICE_MOUNTS_ROOT};

use cdi::{annotation_devices, cdi_annotation_keys};
pub(crate) use devices::is_uuid;
use devices::{mig_devices, parse_channels, parse_devices};
use driver::{capabilities, parse_bool, requirements};

/// The variable naming the GPUs a container wants.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The variable naming the driver capabilities a container wants.
pub const DRIVER_CAPABILITIES: &str = "NVIDIA_DRIVER_CAPABILITIES";
/// The prefix of the variables holding requirements ([`crate::require`]).
pub const REQUIRE_PREFIX: &str = "NVIDIA_REQUIRE_";
/// The variable turning requirement checks off.
pub const DISABLE_REQUIRE: &str = "NVIDIA_DISABLE_REQUIRE";
/// The variable naming the GPUs whose MIG configuration a container may change.
pub const MIG_CONFIG_DEVICES: &str = "NVIDIA_MIG_CONFIG_DEVICES";
/// The variable naming the GPUs whose MIG instances a container may monitor.
pub const MIG_MONITOR_DEVICES: &str = "NVIDIA_MIG_MONITOR_DEVICES";
/// The variable naming the IMEX channels a container wants.
pub const IMEX_CHANNELS: &str = "NVIDIA_IMEX_CHANNELS";
/// Set by CUDA images; without `NVIDIA_REQUIRE_CUDA` it marks a legacy image.
pub const CUDA_VERSION: &str = "CUDA_VERSION";
/// The requirement variable whose absence, with `CUDA_VERSION` set, marks a legacy image.
pub const REQUIRE_CUDA: &str = "NVIDIA_REQUIRE_CUDA";
/// Variables with this prefix configure Jetson CSV mounts, not requirements; the NVIDIA
/// toolkit skips them too.
const REQUIRE_JETPACK_PREFIX: &str = "NVIDIA_REQUIRE_JETPACK";

/// The largest GPU or MIG index accepted in a device list.
pub const MAX_DEVICE_INDEX: u64 = 4096;
/// The largest IMEX channel number accepted.
pub const MAX_IMEX_CHANNEL: u64 = 65535;

/// Host-wide settings that shape how a container's environment is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    /// The container has full privileges (`CAP_SYS_ADMIN` in its bounding set).
    pub privileged: bool,
    /// Honour `NVIDIA_VISIBLE_DEVICES`, `NVIDIA_IMEX_CHANNELS` and the `cdi.k8s.io/`
    /// annotations ([`Request::from_container`]) in unprivileged containers.
    pub accept_envvar_unprivileged: bool,
    /// The capabilities used when `NVIDIA_DRIVER_CAPABILITIES` is unset or empty.
    pub default_capabilities: CapabilitySet,
    /// The capabilities a container may ask for; others are an error naming them.
    pub supported_capabilities: CapabilitySet,
    /// Read the GPUs from the mounts under [`DEVICE_MOUNTS_ROOT`], privileged or not; they win
    /// over the environment and the annotations.
    pub accept_device_mounts: bool,
    /// Skip requirement checks for every container.
    pub disable_require: bool,
    /// Every GPU container holds its GPUs exclusively (`[requests] exclusive`).
    pub exclusive: bool,
}

/// Unprivileged, accepting `NVIDIA_VISIBLE_DEVICES`, `utility,compute` by default, every
/// capability supported, requirements checked.
impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            privileged: false,
            accept_envvar_unprivileged: true,
            default_capabilities: [Capability::Utility, Capability::Compute]
                .into_iter()
                .collect(),
            supported_capabilities: CapabilitySet::all(),
            accept_device_mounts: false,
            disable_require: false,
            exclusive: false,
        }
    }
}

/// What a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The GPUs, from `NVIDIA_VISIBLE_DEVICES`.
    pub devices: DeviceSelection,
    /// The driver capabilities, from `NVIDIA_DRIVER_CAPABILITIES`.
    pub capabilities: CapabilitySet,
    /// The requirements: every `NVIDIA_REQUIRE_*` variable sorted by name, then the one
    /// a legacy image's `CUDA_VERSION` implies. Empty when checks are off, since a
    /// container that turns them off should not fail on their syntax either.
    pub requirements: Vec<Requirement>,
    /// Whether to check the requirements: false when `NVIDIA_DISABLE_REQUIRE` is true or
    /// the policy disables checks.
    pub check_requirements: bool,
    /// The GPUs whose MIG configuration the container may change
    /// (`NVIDIA_MIG_CONFIG_DEVICES`, privileged containers only).
    pub mig_config: DeviceSelection,
    /// The GPUs whose MIG instances the container may monitor
    /// (`NVIDIA_MIG_MONITOR_DEVICES`, privileged containers only).
    pub mig_monitor: DeviceSelection,
    /// The IMEX channels, from `NVIDIA_IMEX_CHANNELS`.
    pub imex_channels: ChannelSelection,
    /// Whether the image is a legacy CUDA image (`CUDA_VERSION` set, `NVIDIA_REQUIRE_CUDA`
    /// not): such images get every GPU and every capability unless they say otherwise.
    pub legacy_image: bool,
    /// The GPUs (and channels) came from the device mounts
    /// ([`RequestPolicy::accept_device_mounts`]), not the environment.
    pub from_device_mounts: bool,
    /// Whether the container holds its GPUs exclusively, and what asked for it
    /// (`NVC_EXCLUSIVE`, the annotation `nvc.exclusive`, the config); `None`: shared.
    pub exclusive: Option<ExclusiveBy>,
}

impl Request {
    /// Reads a container's request from its environment, `KEY=VALUE` strings in order:
    /// the last occurrence of a key wins and entries without `=` are ignored.
    pub fn from_env<'a, I: IntoIterator<Item = &'a str>>(
        env: I,
        policy: &RequestPolicy,
    ) -> Result<Request, RequestError> {
        let env: BTreeMap<&str, &str> = env.into_iter().filter_map(|e| e.split_once('=')).collect();
        let get = |key: &str| env.get(key).copied();
        let is_set = |key: &str| get(key).is_some_and(|v| !v.is_empty());
        let legacy_image = is_set(CUDA_VERSION) && !is_set(REQUIRE_CUDA);
        let honour_envvars = policy.privileged || policy.accept_envvar_unprivileged;

        let devices = match get(VISIBLE_DEVICES) {
            Some(value) if honour_envvars => parse_devices(VISIBLE_DEVICES, value)?,
            None if honour_envvars && legacy_image => DeviceSelection::All,
            None if legacy_image => {
                log::warn!(
                    "ignoring the {VISIBLE_DEVICES}=all a legacy CUDA image implies: the \
                     configuration does not accept it from unprivileged containers"
                );
                DeviceSelection::NotRequested
            }
            None => DeviceSelection::NotRequested,
            Some(value) => {
                if requests_something(value) {
                    log::warn!(
                        "ignoring {VISIBLE_DEVICES}={value:?}: the configuration does not \
                         accept it from unprivileged containers"
                    );
                }
                DeviceSelection::NotRequested
            }
        };

        let capabilities = capabilities(get(DRIVER_CAPABILITIES), legacy_image, policy)?;

        let disabled_by_env = match get(DISABLE_REQUIRE) {
            None => false,
            Some(value) => parse_bool(value).ok_or_else(|| RequestError::BadDisableRequire {
                value: excerpt(value),
            })?,
        };
        let check_requirements = !(disabled_by_env || policy.disable_require);
        let requirements = if check_requirements {
            requirements(&env, legacy_image)?
        } else {
            Vec::new()
        };

        let mig_config = mig_devices(MIG_CONFIG_DEVICES, get(MIG_CONFIG_DEVICES), policy)?;
        let mig_monitor = mig_devices(MIG_MONITOR_DEVICES, get(MIG_MONITOR_DEVICES), policy)?;

        let imex_channels = match get(IMEX_CHANNELS) {
            None => ChannelSelection::None,
            Some(value) if honour_envvars => parse_channels(value)?,
            Some(value) => {
                if requests_something(value) {
                    log::warn!(
                        "ignoring {IMEX_CHANNELS}={value:?}: the configuration does not \
                         accept it from unprivileged containers"
                    );
                }
                ChannelSelection::None
            }
        };

        let exclusive = exclusive::from_env(&env, policy)?;

        Ok(Request {
            devices,
            capabilities,
            requirements,
            check_requirements,
            mig_config,
            mig_monitor,
            imex_channels,
            legacy_image,
            from_device_mounts: false,
            exclusive,
        })
    }

    /// Reads a container's request from its environment and its spec's annotations.
    ///
    /// Besides [`Request::from_env`], the `cdi.k8s.io/<anything>` annotations (what
    /// Kubernetes device plugins and CDI-aware engines set) may name devices as CDI
    /// names, comma-separated: those of kind `nvidia.com/gpu` are the GPUs, names of
    /// other kinds are left to their own runtimes. They are honoured when
    /// `NVIDIA_VISIBLE_DEVICES` is unset, and under the same privilege policy as the
    /// variables: in an unprivileged container whose variables the policy does not
    /// accept (`accept_envvar_unprivileged` off), they are ignored too, with a warning,
    /// since whoever starts the container may write them as freely as its environment.
    /// `NVIDIA_VISIBLE_DEVICES=void` always wins: it is what nvc's CDI spec sets once an
    /// engine has injected the devices itself.
    pub fn from_container<'a, I: IntoIterator<Item = &'a str>>(
        env: I,
        annotations: &BTreeMap<String, String>,
        device_mounts: &[String],
        policy: &RequestPolicy,
    ) -> Result<Request, RequestError> {
        let env: Vec<&str> = env.into_iter().collect();
        if !device_mounts.is_empty() && !policy.accept_device_mounts {
            log::debug!(
                "ignoring {} device mounts: requests.accept-devices-as-volume-mounts is off",
                device_mounts.len()
            );
        }
        if policy.accept_device_mounts {
            if let Some((devices, channels)) = mounts::mount_devices(device_mounts)? {
                // The mounts win, and `NVIDIA_VISIBLE_DEVICES` is not read at all (as in
                // NVIDIA's toolkit): the device plugin's `volume-mounts` strategy sets it
                // to the mounts' folder, `/var/run/nvidia-container-devices`, no device.
                let rest = env.iter().copied().filter(
                    |e| !matches!(e.split_once('='), Some((key, _)) if key == VISIBLE_DEVICES),
                );
                let mut request = Request::from_env(rest, policy)?;
                request.devices = devices;
                request.imex_channels = channels;
                request.from_device_mounts = true;
                request.exclusive =
                    exclusive::with_annotation(request.exclusive, annotations, policy)?;
                return Ok(request);
            }
        }
        let mut request = Request::from_env(env.iter().copied(), policy)?;
        request.exclusive = exclusive::with_annotation(request.exclusive, annotations, policy)?;
        let visible = env
            .iter()
            .filter_map(|e| e.split_once('='))
            .filter(|(k, _)| *k == VISIBLE_DEVICES)
            .map(|(_, v)| v)
            .next_back();
        let honour_envvars = policy.privileged || policy.accept_envvar_unprivileged;
        let env_decides = match visible {
            None => false,
            Some(v) => honour_envvars || items(v) == ["void"],
        };
        if env_decides {
            return Ok(request);
        }
        if !honour_envvars {
            for key in cdi_annotation_keys(annotations) {
                log::warn!(
                    "ignoring the annotation {key:?}: the configuration does not accept \
                     GPU requests from unprivileged containers"
                );
            }
            return Ok(request);
        }
        if let Some(devices) = annotation_devices(annotations)? {
            request.devices = devices;
        }
        Ok(request)
    }

    /// Whether the container asked for GPU support at all; when not, nvc leaves it alone.
    pub fn wants_gpu_support(&self) -> bool {
        self.devices != DeviceSelection::NotRequested
    }
}

/// The most of a value an error quotes: environment values can be megabytes long, and
/// error messages end up in logs and on terminals.
const MAX_QUOTED: usize = 256;

/// `value` as an error quotes it: whole when short, else its start and its length.
pub(crate) fn excerpt(value: &str) -> String {
    if value.len() <= MAX_QUOTED {
        return value.to_string();
    }
    let mut end = MAX_QUOTED;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

/// The non-empty items of a comma list, trimmed.
fn items(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether a device or channel list asks for anything (is neither empty nor `void`).
fn requests_something(value: &str) -> bool {
    !matches!(items(value).as_slice(), [] | ["void"])
}

/// The words that stand alone in a device or channel list, never beside other items.
const KEYWORDS: [&str; 3] = ["all", "none", "void"];
