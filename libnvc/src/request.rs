//! What a container asks for, read from its environment: which GPUs
//! (`NVIDIA_VISIBLE_DEVICES`), which driver files (`NVIDIA_DRIVER_CAPABILITIES`), what it
//! requires of the driver (`NVIDIA_REQUIRE_*`), MIG management devices and IMEX channels.
//!
//! The semantics follow the NVIDIA Container Toolkit, including its handling of legacy
//! CUDA images, but stricter: a value that is not understood is an error naming the
//! variable and the bad part rather than something silently skipped.

use std::collections::BTreeMap;
use std::fmt;

use crate::caps::{Capability, CapabilitySet, UnknownCapability};
use crate::require::{self, RequireError, Requirement};
use crate::version::{BadVersion, Version};

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
    /// Skip requirement checks for every container.
    pub disable_require: bool,
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
            disable_require: false,
        }
    }
}

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
}

/// A container environment that asks for something invalid; each names the variable and
/// the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A device list item that is no known form.
    #[error(
        "{variable}: unknown device {item:?} (expected an index, GPU-<uuid>, MIG-<uuid>, \
         a PCI bus id such as 0000:06:00.0, <gpu>:<mig>, all, none or void)"
    )]
    UnknownDevice {
        /// The variable.
        variable: &'static str,
        /// The item as written.
        item: String,
    },
    /// A GPU or MIG index above [`MAX_DEVICE_INDEX`].
    #[error("{variable}: index in {item:?} is too large (at most {MAX_DEVICE_INDEX})")]
    DeviceIndexTooLarge {
        /// The variable.
        variable: &'static str,
        /// The item as written.
        item: String,
    },
    /// `all`, `none` or `void` in a list with other items.
    #[error("{variable}: {keyword:?} cannot be combined with other items in {value:?}")]
    MixedKeyword {
        /// The variable.
        variable: &'static str,
        /// The keyword.
        keyword: String,
        /// The whole value.
        value: String,
    },
    /// A name in `NVIDIA_DRIVER_CAPABILITIES` that is no capability.
    #[error("invalid NVIDIA_DRIVER_CAPABILITIES={value:?}")]
    UnknownCapability {
        /// The whole value.
        value: String,
        /// The unknown name.
        #[source]
        source: UnknownCapability,
    },
    /// A capability the host's policy does not support.
    #[error(
        "NVIDIA_DRIVER_CAPABILITIES: capability {capability:?} is not supported on this host \
         (supported: {})",
        show_caps(*.supported)
    )]
    UnsupportedCapability {
        /// The capability as written.
        capability: String,
        /// What the policy supports.
        supported: CapabilitySet,
    },
    /// A `NVIDIA_REQUIRE_*` variable that does not parse.
    #[error(transparent)]
    Requirement(#[from] RequireError),
    /// A legacy image's `CUDA_VERSION` that is not a version.
    #[error("invalid CUDA_VERSION={value:?} (expected a version such as 12.4.1)")]
    BadCudaVersion {
        /// The value.
        value: String,
        /// Why it is not a version.
        #[source]
        source: BadVersion,
    },
    /// A `NVIDIA_DISABLE_REQUIRE` value that is not a boolean.
    #[error(
        "NVIDIA_DISABLE_REQUIRE: {value:?} is not a boolean \
         (expected 1, true, yes, on, 0, false, no, off or nothing)"
    )]
    BadDisableRequire {
        /// The value.
        value: String,
    },
    /// A MIG variable set in an unprivileged container.
    #[error("{variable}={value:?} needs a privileged container")]
    NeedsPrivileged {
        /// The variable.
        variable: &'static str,
        /// The value.
        value: String,
    },
    /// An `NVIDIA_IMEX_CHANNELS` item that is not a channel number.
    #[error(
        "NVIDIA_IMEX_CHANNELS: unknown channel {item:?} (expected a channel number, all or none)"
    )]
    UnknownChannel {
        /// The item as written.
        item: String,
    },
    /// A `cdi.k8s.io/` annotation item that is no CDI device name, or a `nvidia.com/gpu`
    /// name that is no GPU.
    #[error(
        "annotation {annotation}: invalid CDI device {item:?} (expected vendor.com/class=name; \
         nvidia.com/gpu takes an index, GPU-<uuid>, <gpu>:<mig> or all)"
    )]
    BadCdiAnnotation {
        /// The annotation's key.
        annotation: String,
        /// The item as written.
        item: String,
    },
    /// An IMEX channel above [`MAX_IMEX_CHANNEL`].
    #[error("NVIDIA_IMEX_CHANNELS: channel {item:?} is too large (at most {MAX_IMEX_CHANNEL})")]
    ChannelTooLarge {
        /// The item as written.
        item: String,
    },
}

fn show_caps(caps: CapabilitySet) -> String {
    if caps.is_empty() {
        "none".to_string()
    } else {
        caps.to_string()
    }
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

        Ok(Request {
            devices,
            capabilities,
            requirements,
            check_requirements,
            mig_config,
            mig_monitor,
            imex_channels,
            legacy_image,
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
        policy: &RequestPolicy,
    ) -> Result<Request, RequestError> {
        let env: Vec<&str> = env.into_iter().collect();
        let mut request = Request::from_env(env.iter().copied(), policy)?;
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

    /// Checks [`Request::requirements`] against `facts`, unless
    /// [`Request::check_requirements`] is off.
    pub fn verify_requirements(&self, facts: &dyn require::Facts) -> Result<(), require::Unmet> {
        if self.check_requirements {
            require::check(&self.requirements, facts)
        } else {
            Ok(())
        }
    }
}

/// The prefix of the annotations that list CDI devices.
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The `cdi.k8s.io/` annotations, in key order.
fn cdi_annotations(
    annotations: &BTreeMap<String, String>,
) -> impl Iterator<Item = (&String, &String)> {
    annotations
        .range(CDI_ANNOTATION_PREFIX.to_string()..)
        .take_while(|(key, _)| key.starts_with(CDI_ANNOTATION_PREFIX))
}

/// The keys of the `cdi.k8s.io/` annotations that name a `nvidia.com/gpu` device, or
/// something that is no CDI name (which would be an error if it were read).
fn cdi_annotation_keys(annotations: &BTreeMap<String, String>) -> Vec<&str> {
    cdi_annotations(annotations)
        .filter(|(_, value)| {
            items(value)
                .into_iter()
                .any(|item| match crate::cdi::split_qualified(item) {
                    Some((kind, _)) => kind == crate::cdi::KIND,
                    None => true,
                })
        })
        .map(|(key, _)| key.as_str())
        .collect()
}

/// The GPUs the `cdi.k8s.io/` annotations name, in annotation-key order; `None` when
/// they name none of ours.
fn annotation_devices(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<DeviceSelection>, RequestError> {
    let mut all = false;
    let mut ids: Vec<DeviceId> = Vec::new();
    let mut any = false;
    for (key, value) in cdi_annotations(annotations) {
        for item in items(value) {
            let Some((kind, name)) = crate::cdi::split_qualified(item) else {
                return Err(RequestError::BadCdiAnnotation {
                    annotation: key.clone(),
                    item: excerpt(item),
                });
            };
            if kind != crate::cdi::KIND {
                continue;
            }
            any = true;
            if name == crate::cdi::ALL_DEVICE {
                all = true;
                continue;
            }
            let id = parse_device_id(name).map_err(|_| RequestError::BadCdiAnnotation {
                annotation: key.clone(),
                item: excerpt(item),
            })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(match (any, all) {
        (false, _) => None,
        (true, true) => Some(DeviceSelection::All),
        (true, false) => Some(DeviceSelection::List(ids)),
    })
}

/// Every `NVIDIA_REQUIRE_*` variable but the Jetson ones, sorted by name, then the one a
/// legacy image's `CUDA_VERSION` implies. Variables that require nothing are left out.
fn requirements(
    env: &BTreeMap<&str, &str>,
    legacy_image: bool,
) -> Result<Vec<Requirement>, RequestError> {
    let mut requirements = Vec::new();
    for (&name, &value) in env.range(REQUIRE_PREFIX..) {
        if !name.starts_with(REQUIRE_PREFIX) {
            break;
        }
        if name.starts_with(REQUIRE_JETPACK_PREFIX) {
            log::debug!("skipping {name}: it configures Jetson mounts, not a requirement");
            continue;
        }
        let req = require::parse(name, value)?;
        if !req.alternatives.is_empty() {
            requirements.push(req);
        }
    }
    if legacy_image {
        let value = env.get(CUDA_VERSION).copied().unwrap_or_default();
        requirements.push(legacy_requirement(value)?);
    }
    Ok(requirements)
}

/// The non-empty items of a comma list, trimmed.
/// The most of a value an error quotes: environment values can be megabytes long, and
/// error messages end up in logs and on terminals.
const MAX_QUOTED: usize = 256;

/// `value` as an error quotes it: whole when short, else its start and its length.
fn excerpt(value: &str) -> String {
    if value.len() <= MAX_QUOTED {
        return value.to_string();
    }
    let mut end = MAX_QUOTED;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

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

const KEYWORDS: [&str; 3] = ["all", "none", "void"];

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

fn parse_devices(variable: &'static str, value: &str) -> Result<DeviceSelection, RequestError> {
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

enum IdError {
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
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn parse_device_id(item: &str) -> Result<DeviceId, IdError> {
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
fn parse_bus_id(s: &str) -> Option<String> {
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

fn mig_devices(
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

fn parse_channels(value: &str) -> Result<ChannelSelection, RequestError> {
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

fn capabilities(
    value: Option<&str>,
    legacy_image: bool,
    policy: &RequestPolicy,
) -> Result<CapabilitySet, RequestError> {
    let supported = policy.supported_capabilities;
    let value = match value {
        None if legacy_image => return Ok(supported),
        Some(value) if !items(value).is_empty() => value,
        _ => return Ok(policy.default_capabilities.intersection(supported)),
    };
    let mut caps = CapabilitySet::empty();
    for item in items(value) {
        if item == "all" {
            caps = caps.union(supported);
            continue;
        }
        let named =
            CapabilitySet::parse_list(item).map_err(|source| RequestError::UnknownCapability {
                value: excerpt(value),
                source,
            })?;
        if named.intersection(supported) != named {
            return Err(RequestError::UnsupportedCapability {
                capability: item.to_string(),
                supported,
            });
        }
        caps = caps.union(named);
    }
    Ok(caps)
}

/// `1, true, yes, on` and `0, false, no, off` or empty, case-insensitively.
fn parse_bool(value: &str) -> Option<bool> {
    let v = value.trim().to_ascii_lowercase();
    match v.as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "" | "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The `cuda>=MAJOR.MINOR` requirement a legacy image's `CUDA_VERSION` implies.
fn legacy_requirement(cuda_version: &str) -> Result<Requirement, RequestError> {
    let trimmed = cuda_version.trim();
    let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
    let version: Version = bare
        .parse()
        .map_err(|source| RequestError::BadCudaVersion {
            value: cuda_version.to_string(),
            source,
        })?;
    let constraint = format!("cuda>={}.{}", version.major(), version.minor());
    require::parse(CUDA_VERSION, &constraint).map_err(RequestError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_quote_long_values_by_their_start_and_length() {
        let policy = RequestPolicy::default();
        let long = format!("0,{}", "é".repeat(300_000));
        let env = format!("NVIDIA_VISIBLE_DEVICES={long}");
        let err = Request::from_env([env.as_str()], &policy).unwrap_err();
        let text = err.to_string();
        assert!(text.len() < 1024, "{} bytes", text.len());
        assert!(
            text.contains(&format!("({} bytes)", long.len() - 2)),
            "{text}"
        );
        assert!(
            text.starts_with("NVIDIA_VISIBLE_DEVICES: unknown device"),
            "{text}"
        );
        let mixed = format!("all,{}", "1,".repeat(10_000));
        let env = format!("NVIDIA_VISIBLE_DEVICES={mixed}");
        let text = Request::from_env([env.as_str()], &policy)
            .unwrap_err()
            .to_string();
        assert!(text.len() < 1024 && text.contains("bytes)"), "{text}");
        assert_eq!(excerpt("0,1"), "0,1");
    }

    use crate::report::error_chain as chain;

    fn req(env: &[&str]) -> Result<Request, RequestError> {
        Request::from_env(env.iter().copied(), &RequestPolicy::default())
    }

    fn req_with(env: &[&str], policy: &RequestPolicy) -> Result<Request, RequestError> {
        Request::from_env(env.iter().copied(), policy)
    }

    fn privileged() -> RequestPolicy {
        RequestPolicy {
            privileged: true,
            ..RequestPolicy::default()
        }
    }

    fn caps(list: &str) -> CapabilitySet {
        CapabilitySet::parse_list(list).unwrap()
    }

    use DeviceId::{BusId, GpuUuid, Index, MigIndex, MigUuid};

    const UUID: &str = "2c1b9b6e-1b6d-4e4a-9a0b-0123456789ab";
    const UUID_UPPER: &str = "2C1B9B6E-1B6D-4E4A-9A0B-0123456789AB";

    fn gpu(uuid: &str) -> DeviceId {
        GpuUuid(format!("GPU-{uuid}"))
    }

    fn mig(uuid: &str) -> DeviceId {
        MigUuid(format!("MIG-{uuid}"))
    }

    fn bus(s: &str) -> DeviceId {
        BusId(s.to_string())
    }

    enum Want {
        Sel(DeviceSelection),
        Err(&'static str),
    }

    fn list(ids: Vec<DeviceId>) -> Want {
        Want::Sel(DeviceSelection::List(ids))
    }

    #[test]
    fn visible_devices() {
        use DeviceSelection as S;
        let up = format!("GPU-{UUID_UPPER}");
        let mig_up = format!("MIG-{UUID_UPPER}");
        let old_mig = format!("MIG-GPU-{UUID_UPPER}/1/0");
        let two = format!("GPU-{UUID},0");
        let dup_uuid = format!("GPU-{UUID}, gpu-{UUID_UPPER}");
        let bad_uuid_short = "GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789a".to_string();
        let bad_uuid_hex = "GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789ag".to_string();
        let bad_uuid_groups = "GPU-2c1b9b6e1b6d-4e4a-9a0b-0123456789abcd".to_string();
        let bad_old_mig = format!("MIG-GPU-{UUID}/1");
        let bad_old_mig2 = format!("MIG-GPU-{UUID}/a/0");
        let cases: Vec<(&str, Want)> = vec![
            // keywords and emptiness
            ("all", Want::Sel(S::All)),
            (" all ", Want::Sel(S::All)),
            ("all,", Want::Sel(S::All)),
            ("none", Want::Sel(S::None)),
            ("void", Want::Sel(S::NotRequested)),
            ("", Want::Sel(S::NotRequested)),
            ("  ", Want::Sel(S::NotRequested)),
            (",,", Want::Sel(S::NotRequested)),
            // indices
            ("0", list(vec![Index(0)])),
            ("0,1,2", list(vec![Index(0), Index(1), Index(2)])),
            (" 1 , 0 ", list(vec![Index(1), Index(0)])),
            ("1,,3,", list(vec![Index(1), Index(3)])),
            ("1,0,1", list(vec![Index(1), Index(0)])),
            ("01", list(vec![Index(1)])),
            ("4096", list(vec![Index(4096)])),
            ("4097", Want::Err("index in \"4097\" is too large (at most 4096)")),
            ("99999999999999999999999", Want::Err("is too large")),
            ("-1", Want::Err("unknown device \"-1\"")),
            ("+1", Want::Err("unknown device \"+1\"")),
            ("1.0", Want::Err("unknown device \"1.0\"")),
            ("0x1", Want::Err("unknown device \"0x1\"")),
            // GPU UUIDs
            (&*two, list(vec![gpu(UUID), Index(0)])),
            (&*up, list(vec![gpu(UUID)])),
            (&*dup_uuid, list(vec![gpu(UUID)])),
            (&*bad_uuid_short, Want::Err("unknown device \"GPU-2c1b9b6e-1b6d-4e4a-9a0b-0123456789a\"")),
            (&*bad_uuid_hex, Want::Err("unknown device")),
            (&*bad_uuid_groups, Want::Err("unknown device")),
            ("GPU-", Want::Err("unknown device \"GPU-\"")),
            ("gpu0", Want::Err("unknown device \"gpu0\" (expected an index, GPU-<uuid>, MIG-<uuid>, a PCI bus id such as 0000:06:00.0, <gpu>:<mig>, all, none or void)")),
            // MIG UUIDs
            (&*mig_up, list(vec![mig(UUID)])),
            (&*old_mig, list(vec![MigUuid(format!("MIG-GPU-{UUID}/1/0"))])),
            (&*bad_old_mig, Want::Err("unknown device")),
            (&*bad_old_mig2, Want::Err("unknown device")),
            ("MIG-", Want::Err("unknown device \"MIG-\"")),
            // PCI bus ids
            ("06:00.0", list(vec![bus("0000:06:00.0")])),
            ("0000:06:00.0", list(vec![bus("0000:06:00.0")])),
            ("00000000:06:00.0", list(vec![bus("0000:06:00.0")])),
            ("0000:AF:1F.7", list(vec![bus("0000:af:1f.7")])),
            ("0001:3b:00.0", list(vec![bus("0001:3b:00.0")])),
            ("00010000:3b:00.0", list(vec![bus("00010000:3b:00.0")])),
            ("00051615:3B:00.1", list(vec![bus("00051615:3b:00.1")])),
            ("06:00.0,0000:06:00.0,00000000:06:00.0", list(vec![bus("0000:06:00.0")])),
            ("000:06:00.0", Want::Err("unknown device \"000:06:00.0\"")),
            ("0000:6:00.0", Want::Err("unknown device")),
            ("0000:06:20.0", Want::Err("unknown device")),
            ("0000:06:00.8", Want::Err("unknown device")),
            ("0000:06:00", Want::Err("unknown device")),
            ("0000:gg:00.0", Want::Err("unknown device")),
            // MIG indices
            ("0:1", list(vec![MigIndex { gpu: 0, mig: 1 }])),
            ("0:0,0:1,1:0,0:0", list(vec![MigIndex { gpu: 0, mig: 0 }, MigIndex { gpu: 0, mig: 1 }, MigIndex { gpu: 1, mig: 0 }])),
            ("0,0:0", list(vec![Index(0), MigIndex { gpu: 0, mig: 0 }])),
            ("0:4097", Want::Err("index in \"0:4097\" is too large")),
            ("0:", Want::Err("unknown device \"0:\"")),
            (":1", Want::Err("unknown device \":1\"")),
            ("0:1:2", Want::Err("unknown device \"0:1:2\"")),
            ("a:1", Want::Err("unknown device \"a:1\"")),
            // keywords mixed into lists
            ("all,0", Want::Err("\"all\" cannot be combined with other items in \"all,0\"")),
            ("0, none", Want::Err("\"none\" cannot be combined")),
            ("void,1", Want::Err("\"void\" cannot be combined")),
            ("all,all", Want::Err("\"all\" cannot be combined")),
            ("ALL", Want::Err("unknown device \"ALL\"")),
        ];
        assert!(cases.len() >= 40);
        for (value, want) in cases {
            let env = format!("NVIDIA_VISIBLE_DEVICES={value}");
            let got = req(&[&env]).map(|r| r.devices);
            match want {
                Want::Sel(sel) => assert_eq!(got, Ok(sel), "{value:?}"),
                Want::Err(text) => {
                    let msg = got.expect_err(value).to_string();
                    assert!(
                        msg.starts_with("NVIDIA_VISIBLE_DEVICES: "),
                        "{value:?}: {msg}"
                    );
                    assert!(msg.contains(text), "{value:?}: {msg:?} lacks {text:?}");
                }
            }
        }
    }

    #[test]
    fn device_ids_display_normalised() {
        let r = req(&[&format!(
            "NVIDIA_VISIBLE_DEVICES=3,GPU-{UUID_UPPER},06:00.0,1:2,MIG-{UUID}"
        )])
        .unwrap();
        let DeviceSelection::List(ids) = r.devices else {
            panic!("{:?}", r.devices)
        };
        let shown: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "3",
                &format!("GPU-{UUID}"),
                "0000:06:00.0",
                "1:2",
                &format!("MIG-{UUID}")
            ]
        );
    }

    #[test]
    fn normalised_device_lists_read_back_the_same() {
        // Every form, written back in its normal form, parses to the same devices; a
        // domain above ffff once lost its leading zeros and no longer read as a bus id.
        let value = format!(
            "3,GPU-{UUID_UPPER},06:00.0,00051615:3b:00.1,0001:af:1f.7,1:2,MIG-{UUID},\
             MIG-GPU-{UUID}/01/2"
        );
        let devices = req(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")])
            .unwrap()
            .devices;
        let DeviceSelection::List(ids) = &devices else {
            panic!("{devices:?}")
        };
        let shown: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert!(shown.contains(&"00051615:3b:00.1".to_string()), "{shown:?}");
        let again = req(&[&format!("NVIDIA_VISIBLE_DEVICES={}", shown.join(","))])
            .unwrap()
            .devices;
        assert_eq!(again, devices);
    }

    #[test]
    fn unset_means_nothing_requested() {
        let r = req(&["PATH=/usr/bin", "HOME=/root"]).unwrap();
        assert_eq!(r.devices, DeviceSelection::NotRequested);
        assert!(!r.wants_gpu_support());
        assert!(!r.legacy_image);
        assert_eq!(r.capabilities, caps("utility,compute"));
        assert!(r.requirements.is_empty());
        assert!(r.check_requirements);
        assert_eq!(r.mig_config, DeviceSelection::NotRequested);
        assert_eq!(r.mig_monitor, DeviceSelection::NotRequested);
        assert_eq!(r.imex_channels, ChannelSelection::None);
        assert!(req(&["NVIDIA_VISIBLE_DEVICES=none"])
            .unwrap()
            .wants_gpu_support());
        assert!(req(&["NVIDIA_VISIBLE_DEVICES=0"])
            .unwrap()
            .wants_gpu_support());
        assert!(!req(&["NVIDIA_VISIBLE_DEVICES=void"])
            .unwrap()
            .wants_gpu_support());
    }

    #[test]
    fn env_parsing_last_occurrence_wins() {
        let r = req(&[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_VISIBLE_DEVICES",
            "garbage without equals",
            "NVIDIA_DRIVER_CAPABILITIES=video",
            "NVIDIA_VISIBLE_DEVICES=1",
            "NVIDIA_DRIVER_CAPABILITIES=graphics",
        ])
        .unwrap();
        assert_eq!(r.devices, DeviceSelection::List(vec![Index(1)]));
        assert_eq!(r.capabilities, caps("graphics"));
        // a later valid value overrides an earlier invalid one
        let r = req(&["NVIDIA_VISIBLE_DEVICES=gpu0", "NVIDIA_VISIBLE_DEVICES=all"]).unwrap();
        assert_eq!(r.devices, DeviceSelection::All);
        // values may contain '='
        let r = req(&["NVIDIA_REQUIRE_CUDA=cuda>=12.0"]).unwrap();
        assert_eq!(
            r.requirements[0].to_string(),
            "NVIDIA_REQUIRE_CUDA=\"cuda>=12.0\""
        );
    }

    #[test]
    fn legacy_images() {
        // CUDA_VERSION without NVIDIA_REQUIRE_CUDA: every GPU, every capability, cuda>=X.Y
        let r = req(&["CUDA_VERSION=12.4.1"]).unwrap();
        assert!(r.legacy_image);
        assert_eq!(r.devices, DeviceSelection::All);
        assert_eq!(r.capabilities, CapabilitySet::all());
        let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["CUDA_VERSION=\"cuda>=12.4\""]);

        let cases: &[(&str, &str)] = &[
            ("9.0.176", "cuda>=9.0"),
            ("10.0.130", "cuda>=10.0"),
            ("11.8", "cuda>=11.8"),
            ("12", "cuda>=12.0"),
            ("v12.2.0", "cuda>=12.2"),
        ];
        for (version, want) in cases {
            let r = req(&[&format!("CUDA_VERSION={version}")]).unwrap();
            assert_eq!(
                r.requirements[0].to_string(),
                format!("CUDA_VERSION=\"{want}\""),
                "{version}"
            );
        }

        for bad in ["12.x", "latest", "12.4-rc1", "."] {
            let err = req(&[&format!("CUDA_VERSION={bad}")]).unwrap_err();
            assert!(
                matches!(err, RequestError::BadCudaVersion { .. }),
                "{bad}: {err}"
            );
            assert!(
                chain(&err).contains(&format!("invalid CUDA_VERSION=\"{bad}\"")),
                "{err}"
            );
        }
        // ... but not when checks are off
        assert!(req(&["CUDA_VERSION=latest", "NVIDIA_DISABLE_REQUIRE=1"]).is_ok());

        // the image's own settings win
        let r = req(&[
            "CUDA_VERSION=12.4.1",
            "NVIDIA_VISIBLE_DEVICES=1",
            "NVIDIA_DRIVER_CAPABILITIES=compute",
        ])
        .unwrap();
        assert_eq!(r.devices, DeviceSelection::List(vec![Index(1)]));
        assert_eq!(r.capabilities, caps("compute"));
        // set but empty is not unset: nothing requested, default capabilities
        let r = req(&[
            "CUDA_VERSION=12.4.1",
            "NVIDIA_VISIBLE_DEVICES=",
            "NVIDIA_DRIVER_CAPABILITIES=",
        ])
        .unwrap();
        assert_eq!(r.devices, DeviceSelection::NotRequested);
        assert_eq!(r.capabilities, caps("utility,compute"));
        // legacy "all capabilities" means all the host supports
        let policy = RequestPolicy {
            supported_capabilities: caps("utility,compute,video"),
            ..RequestPolicy::default()
        };
        assert_eq!(
            req_with(&["CUDA_VERSION=12.4.1"], &policy)
                .unwrap()
                .capabilities,
            caps("utility,compute,video")
        );

        // NVIDIA_REQUIRE_CUDA set: not legacy
        let r = req(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]).unwrap();
        assert!(!r.legacy_image);
        assert_eq!(r.devices, DeviceSelection::NotRequested);
        assert_eq!(r.capabilities, caps("utility,compute"));
        assert_eq!(r.requirements.len(), 1);
        // NVIDIA_REQUIRE_CUDA empty or CUDA_VERSION empty: as if unset
        assert!(
            req(&["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA="])
                .unwrap()
                .legacy_image
        );
        assert!(!req(&["CUDA_VERSION="]).unwrap().legacy_image);
    }

    #[test]
    fn unprivileged_containers() {
        let strict = RequestPolicy {
            accept_envvar_unprivileged: false,
            ..RequestPolicy::default()
        };
        // devices from the environment are ignored...
        let r = req_with(&["NVIDIA_VISIBLE_DEVICES=all"], &strict).unwrap();
        assert_eq!(r.devices, DeviceSelection::NotRequested);
        assert!(!r.wants_gpu_support());
        // ...even invalid ones, and the legacy default
        assert!(req_with(&["NVIDIA_VISIBLE_DEVICES=gpu0"], &strict).is_ok());
        assert_eq!(
            req_with(&["CUDA_VERSION=12.4"], &strict).unwrap().devices,
            DeviceSelection::NotRequested
        );
        assert_eq!(
            req_with(&["NVIDIA_IMEX_CHANNELS=0"], &strict)
                .unwrap()
                .imex_channels,
            ChannelSelection::None
        );
        // ...unless the container is privileged
        let strict_privileged = RequestPolicy {
            privileged: true,
            ..strict
        };
        assert_eq!(
            req_with(&["NVIDIA_VISIBLE_DEVICES=all"], &strict_privileged)
                .unwrap()
                .devices,
            DeviceSelection::All
        );
        assert_eq!(
            req_with(&["CUDA_VERSION=12.4"], &strict_privileged)
                .unwrap()
                .devices,
            DeviceSelection::All
        );
        assert_eq!(
            req_with(&["NVIDIA_IMEX_CHANNELS=0"], &strict_privileged)
                .unwrap()
                .imex_channels,
            ChannelSelection::List(vec![0])
        );
        // with the default policy unprivileged containers are honoured
        assert_eq!(
            req(&["NVIDIA_VISIBLE_DEVICES=all"]).unwrap().devices,
            DeviceSelection::All
        );
    }

    #[test]
    fn mig_devices_need_privileges() {
        for var in [MIG_CONFIG_DEVICES, MIG_MONITOR_DEVICES] {
            for (value, want) in [
                ("all", DeviceSelection::All),
                ("none", DeviceSelection::None),
                ("0,1", DeviceSelection::List(vec![Index(0), Index(1)])),
                ("void", DeviceSelection::NotRequested),
                ("", DeviceSelection::NotRequested),
            ] {
                let env = format!("{var}={value}");
                let r = req_with(&["NVIDIA_VISIBLE_DEVICES=all", &env], &privileged()).unwrap();
                let got = if var == MIG_CONFIG_DEVICES {
                    &r.mig_config
                } else {
                    &r.mig_monitor
                };
                assert_eq!(got, &want, "{env}");

                let unprivileged = req(&["NVIDIA_VISIBLE_DEVICES=all", &env]);
                if want == DeviceSelection::NotRequested {
                    assert!(unprivileged.is_ok(), "{env}");
                } else {
                    let err = unprivileged.unwrap_err();
                    assert_eq!(
                        err,
                        RequestError::NeedsPrivileged {
                            variable: var,
                            value: value.to_string()
                        }
                    );
                    assert_eq!(
                        err.to_string(),
                        format!("{var}=\"{value}\" needs a privileged container")
                    );
                }
            }
            let err = req_with(&[&format!("{var}=0,bogus")], &privileged()).unwrap_err();
            assert_eq!(
                err.to_string().split(" (").next(),
                Some(&*format!("{var}: unknown device \"bogus\""))
            );
        }
    }

    #[test]
    fn driver_capabilities() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("compute", Ok("compute")),
            ("compute,utility", Ok("utility,compute")),
            (" video , graphics ", Ok("video,graphics")),
            ("all", Ok("utility,compute,video,graphics,display,ngx,compat32")),
            ("compute,all", Ok("utility,compute,video,graphics,display,ngx,compat32")),
            ("", Ok("utility,compute")),
            (" , ", Ok("utility,compute")),
            ("compute,,", Ok("compute")),
            ("compute,gpu", Err("invalid NVIDIA_DRIVER_CAPABILITIES=\"compute,gpu\": unknown driver capability \"gpu\"")),
            ("Compute", Err("unknown driver capability \"Compute\"")),
        ];
        for (value, want) in cases {
            let got = req(&[&format!("NVIDIA_DRIVER_CAPABILITIES={value}")]);
            match want {
                Ok(w) => assert_eq!(
                    got.map(|r| r.capabilities.to_string()).as_deref(),
                    Ok(*w),
                    "{value:?}"
                ),
                Err(text) => {
                    let err = got.unwrap_err();
                    assert!(
                        matches!(err, RequestError::UnknownCapability { .. }),
                        "{value:?}"
                    );
                    assert!(chain(&err).contains(text), "{value:?}: {}", chain(&err));
                }
            }
        }
    }

    #[test]
    fn capabilities_outside_the_policy() {
        let policy = RequestPolicy {
            default_capabilities: caps("utility,compute,video"),
            supported_capabilities: caps("utility,compute,graphics"),
            ..RequestPolicy::default()
        };
        let got =
            |value: &str| req_with(&[&format!("NVIDIA_DRIVER_CAPABILITIES={value}")], &policy);
        assert_eq!(
            got("all").unwrap().capabilities,
            caps("utility,compute,graphics")
        );
        assert_eq!(got("graphics").unwrap().capabilities, caps("graphics"));
        // a default outside the supported set is trimmed to it, not blamed on the container
        assert_eq!(got("").unwrap().capabilities, caps("utility,compute"));
        let err = got("compute,video").unwrap_err();
        assert_eq!(
            err.to_string(),
            "NVIDIA_DRIVER_CAPABILITIES: capability \"video\" is not supported on this host \
             (supported: utility,compute,graphics)"
        );
        assert!(
            matches!(got("all,display").unwrap_err(), RequestError::UnsupportedCapability { capability, .. } if capability == "display")
        );
        let none = RequestPolicy {
            supported_capabilities: CapabilitySet::empty(),
            ..RequestPolicy::default()
        };
        let err = req_with(&["NVIDIA_DRIVER_CAPABILITIES=compute"], &none).unwrap_err();
        assert!(err.to_string().ends_with("(supported: none)"), "{err}");
        assert_eq!(
            req_with(&[], &none).unwrap().capabilities,
            CapabilitySet::empty()
        );
    }

    #[test]
    fn requirements_are_wired() {
        let r = req(&[
            "NVIDIA_REQUIRE_DRIVER=driver>=535",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471",
            "NVIDIA_REQUIRE_ARCH=arch>=8.0",
            "NVIDIA_REQUIRE_EMPTY=",
            "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
            "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=",
            "NVIDIA_REQUIREMENTS=ignored, not the prefix",
            "NVIDIA_VISIBLE_DEVICES=all",
        ])
        .unwrap();
        let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "NVIDIA_REQUIRE_ARCH=\"arch>=8.0\"",
                "NVIDIA_REQUIRE_CUDA=\"cuda>=12.0 brand=tesla,driver>=470,driver<471\"",
                "NVIDIA_REQUIRE_DRIVER=\"driver>=535\"",
            ]
        );
        assert!(r.check_requirements);

        // a bad requirement names its variable and constraint
        let err = req(&["NVIDIA_REQUIRE_FOO=cuda>=12 bar>=1"]).unwrap_err();
        assert!(matches!(
            err,
            RequestError::Requirement(RequireError::UnknownKey { .. })
        ));
        assert!(
            err.to_string()
                .starts_with("NVIDIA_REQUIRE_FOO: unknown key \"bar\" in \"bar>=1\""),
            "{err}"
        );

        // legacy requirement comes after the image's own
        let r = req(&["CUDA_VERSION=11.8.0", "NVIDIA_REQUIRE_Z=driver>=450"]).unwrap();
        let shown: Vec<String> = r.requirements.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "NVIDIA_REQUIRE_Z=\"driver>=450\"",
                "CUDA_VERSION=\"cuda>=11.8\""
            ]
        );
    }

    #[test]
    fn disable_require_values() {
        let cases: &[(&str, Result<bool, ()>)] = &[
            ("1", Ok(true)),
            ("true", Ok(true)),
            ("TRUE", Ok(true)),
            ("yes", Ok(true)),
            ("Yes", Ok(true)),
            ("on", Ok(true)),
            (" on ", Ok(true)),
            ("0", Ok(false)),
            ("false", Ok(false)),
            ("False", Ok(false)),
            ("no", Ok(false)),
            ("off", Ok(false)),
            ("", Ok(false)),
            ("2", Err(())),
            ("enabled", Err(())),
            ("y", Err(())),
        ];
        for (value, want) in cases {
            let env = [
                &*format!("NVIDIA_DISABLE_REQUIRE={value}"),
                "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
            ];
            match want {
                Ok(disabled) => {
                    let r = req(&env).unwrap();
                    assert_eq!(r.check_requirements, !disabled, "{value:?}");
                    assert_eq!(r.requirements.is_empty(), *disabled, "{value:?}");
                }
                Err(()) => {
                    let err = req(&env).unwrap_err();
                    assert_eq!(
                        err,
                        RequestError::BadDisableRequire {
                            value: value.to_string()
                        }
                    );
                    assert!(err.to_string().starts_with(&format!(
                        "NVIDIA_DISABLE_REQUIRE: \"{value}\" is not a boolean"
                    )));
                }
            }
        }
        // when disabled, malformed requirements are not parsed
        assert!(req(&["NVIDIA_DISABLE_REQUIRE=1", "NVIDIA_REQUIRE_CUDA=cuda>>1"]).is_ok());
        // the policy can disable checks host-wide
        let policy = RequestPolicy {
            disable_require: true,
            ..RequestPolicy::default()
        };
        let r = req_with(
            &["NVIDIA_REQUIRE_CUDA=cuda>>1", "NVIDIA_DISABLE_REQUIRE=0"],
            &policy,
        )
        .unwrap();
        assert!(!r.check_requirements);
        assert!(r.requirements.is_empty());
        // a bad NVIDIA_DISABLE_REQUIRE is an error even then
        assert!(req_with(&["NVIDIA_DISABLE_REQUIRE=maybe"], &policy).is_err());
    }

    #[test]
    fn imex_channels() {
        use ChannelSelection as C;
        let cases: &[(&str, Result<C, &str>)] = &[
            ("all", Ok(C::All)),
            ("none", Ok(C::None)),
            ("void", Ok(C::None)),
            ("", Ok(C::None)),
            ("0", Ok(C::List(vec![0]))),
            ("0, 1,,2", Ok(C::List(vec![0, 1, 2]))),
            ("3,1,3", Ok(C::List(vec![3, 1]))),
            ("65535", Ok(C::List(vec![65535]))),
            ("65536", Err("NVIDIA_IMEX_CHANNELS: channel \"65536\" is too large (at most 65535)")),
            ("99999999999999999999", Err("is too large")),
            ("channel0", Err("NVIDIA_IMEX_CHANNELS: unknown channel \"channel0\" (expected a channel number, all or none)")),
            ("-1", Err("unknown channel \"-1\"")),
            ("0,all", Err("NVIDIA_IMEX_CHANNELS: \"all\" cannot be combined with other items in \"0,all\"")),
            ("none,1", Err("\"none\" cannot be combined")),
        ];
        for (value, want) in cases {
            let got = req(&[&format!("NVIDIA_IMEX_CHANNELS={value}")]).map(|r| r.imex_channels);
            match want {
                Ok(w) => assert_eq!(got.as_ref(), Ok(w), "{value:?}"),
                Err(text) => {
                    let msg = got.unwrap_err().to_string();
                    assert!(msg.contains(text), "{value:?}: {msg:?} lacks {text:?}");
                }
            }
        }
        assert_eq!(req(&[]).unwrap().imex_channels, C::None);
    }

    #[test]
    fn deterministic_regardless_of_env_order() {
        let env = [
            "NVIDIA_REQUIRE_B=driver>=1",
            "NVIDIA_VISIBLE_DEVICES=1,0",
            "NVIDIA_REQUIRE_A=cuda>=1",
            "NVIDIA_DRIVER_CAPABILITIES=video,compute",
            "NVIDIA_REQUIRE_C=arch>=1",
            "NVIDIA_IMEX_CHANNELS=2,1",
        ];
        let first = req(&env).unwrap();
        let mut reversed = env;
        reversed.reverse();
        assert_eq!(req(&reversed).unwrap(), first);
        let mut rotated = env;
        rotated.rotate_left(2);
        assert_eq!(req(&rotated).unwrap(), first);
        assert_eq!(req(&env).unwrap(), first);
        let names: Vec<&str> = first
            .requirements
            .iter()
            .map(|r| r.variable.as_str())
            .collect();
        assert_eq!(
            names,
            ["NVIDIA_REQUIRE_A", "NVIDIA_REQUIRE_B", "NVIDIA_REQUIRE_C"]
        );
        // list order within a variable is the container's, kept as given
        assert_eq!(
            first.devices,
            DeviceSelection::List(vec![Index(1), Index(0)])
        );
    }

    /// Facts for [`Request::verify_requirements`]: an old driver, no GPU.
    struct OldDriver;

    impl require::Facts for OldDriver {
        fn cuda_version(&self) -> Result<Version, require::FactError> {
            Ok(Version::from_cuda_int(11040))
        }
        fn driver_version(&self) -> Result<Version, require::FactError> {
            "470.57.02"
                .parse()
                .map_err(|e| require::FactError::new(require::Fact::DriverVersion, e))
        }
        fn gpus(&self) -> Result<Vec<require::GpuFacts>, require::FactError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn verifies_requirements_unless_disabled() {
        let env = [
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        ];
        let err = req(&env)
            .unwrap()
            .verify_requirements(&OldDriver)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"cuda>=12.0\": requires cuda>=12.0, driver provides 11.4"
        );
        let legacy = req(&["CUDA_VERSION=12.2.0"]).unwrap();
        assert!(legacy
            .verify_requirements(&OldDriver)
            .unwrap_err()
            .to_string()
            .starts_with("unsatisfied requirement CUDA_VERSION=\"cuda>=12.2\""));
        assert!(req(&["NVIDIA_REQUIRE_CUDA=cuda>=11.0"])
            .unwrap()
            .verify_requirements(&OldDriver)
            .is_ok());
        let disabled = [env[0], env[1], "NVIDIA_DISABLE_REQUIRE=true"];
        assert!(req(&disabled)
            .unwrap()
            .verify_requirements(&OldDriver)
            .is_ok());
        let policy = RequestPolicy {
            disable_require: true,
            ..RequestPolicy::default()
        };
        assert!(req_with(&env, &policy)
            .unwrap()
            .verify_requirements(&OldDriver)
            .is_ok());
    }

    #[test]
    fn cdi_names_in_visible_devices() {
        let uuid = "GPU-fa4ed71e-0001-4e57-8fa4-ed71e0000001";
        let cases: &[(&str, Result<DeviceSelection, &str>)] = &[
            (
                "nvidia.com/gpu=1",
                Ok(DeviceSelection::List(vec![Index(1)])),
            ),
            ("nvidia.com/gpu=all", Ok(DeviceSelection::All)),
            (
                "nvidia.com/gpu=0, nvidia.com/gpu=GPU-FA4ED71E-0001-4E57-8FA4-ED71E0000001",
                Ok(DeviceSelection::List(vec![Index(0), GpuUuid(uuid.into())])),
            ),
            (
                "nvidia.com/gpu=0:1",
                Ok(DeviceSelection::List(vec![MigIndex { gpu: 0, mig: 1 }])),
            ),
            // plain and CDI forms mix; duplicates collapse
            (
                "2,nvidia.com/gpu=2,nvidia.com/gpu=0",
                Ok(DeviceSelection::List(vec![Index(2), Index(0)])),
            ),
            // another vendor's devices are not ours
            ("vendor.com/x=1", Ok(DeviceSelection::NotRequested)),
            (
                "vendor.com/x=1,nvidia.com/gpu=1",
                Ok(DeviceSelection::List(vec![Index(1)])),
            ),
            ("nvidia.com/gpu=bogus", Err("unknown device \"bogus\"")),
            ("nvidia.com/gpu=all,1", Err("\"all\" cannot be combined")),
            ("nvidia.com/tpu0=1", Ok(DeviceSelection::NotRequested)),
        ];
        for (value, want) in cases {
            let got = req(&[&format!("NVIDIA_VISIBLE_DEVICES={value}")]).map(|r| r.devices);
            match want {
                Ok(w) => assert_eq!(got.as_ref(), Ok(w), "{value:?}"),
                Err(text) => {
                    let msg = got.unwrap_err().to_string();
                    assert!(msg.contains(text), "{value:?}: {msg}");
                }
            }
        }
    }

    #[test]
    fn cdi_annotations_select_gpus() {
        let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let from = |env: &[&str], a: &BTreeMap<String, String>, p: &RequestPolicy| {
            Request::from_container(env.iter().copied(), a, p).map(|r| r.devices)
        };
        let default = RequestPolicy::default();
        let gpu0 = ann(&[("cdi.k8s.io/x", "nvidia.com/gpu=0")]);
        assert_eq!(
            from(&[], &gpu0, &default),
            Ok(DeviceSelection::List(vec![Index(0)]))
        );
        // several annotations, in key order; other kinds and other prefixes ignored
        let many = ann(&[
            ("cdi.k8s.io/b", "nvidia.com/gpu=2, vendor.com/nic=eth1"),
            ("cdi.k8s.io/a", "nvidia.com/gpu=1"),
            ("io.kubernetes.cri.x", "nvidia.com/gpu=0"),
            ("cdi.k8s.iox", "nvidia.com/gpu=0"),
        ]);
        assert_eq!(
            from(&[], &many, &default),
            Ok(DeviceSelection::List(vec![Index(1), Index(2)]))
        );
        let all = ann(&[
            ("cdi.k8s.io/a", "nvidia.com/gpu=1"),
            ("cdi.k8s.io/b", "nvidia.com/gpu=all"),
        ]);
        assert_eq!(from(&[], &all, &default), Ok(DeviceSelection::All));
        // only other vendors' devices: not a GPU container
        let nic = ann(&[("cdi.k8s.io/a", "vendor.com/nic=eth1")]);
        assert_eq!(from(&[], &nic, &default), Ok(DeviceSelection::NotRequested));
        // the variable decides when set and honoured...
        assert_eq!(
            from(&["NVIDIA_VISIBLE_DEVICES=1"], &gpu0, &default),
            Ok(DeviceSelection::List(vec![Index(1)]))
        );
        // ...and void, what nvc's CDI spec sets, always wins
        let strict = RequestPolicy {
            accept_envvar_unprivileged: false,
            ..RequestPolicy::default()
        };
        for policy in [&default, &strict] {
            assert_eq!(
                from(&["NVIDIA_VISIBLE_DEVICES=void"], &gpu0, policy),
                Ok(DeviceSelection::NotRequested)
            );
        }
        // the annotations obey the same privilege policy as the variables: an
        // unprivileged container under the strict policy gets no GPU from them, with or
        // without the variable, and a malformed one is not even read...
        for env in [&[][..], &["NVIDIA_VISIBLE_DEVICES=all"]] {
            assert_eq!(
                from(env, &gpu0, &strict),
                Ok(DeviceSelection::NotRequested),
                "{env:?}"
            );
        }
        let bogus = ann(&[("cdi.k8s.io/x", "nvidia.com/gpu=bogus")]);
        assert_eq!(
            from(&[], &bogus, &strict),
            Ok(DeviceSelection::NotRequested)
        );
        // ...while a privileged container still gets the annotation's GPUs
        let strict_privileged = RequestPolicy {
            privileged: true,
            ..strict
        };
        assert_eq!(
            from(&[], &gpu0, &strict_privileged),
            Ok(DeviceSelection::List(vec![Index(0)]))
        );
        assert_eq!(
            from(&["NVIDIA_VISIBLE_DEVICES=void"], &gpu0, &strict_privileged),
            Ok(DeviceSelection::NotRequested)
        );
        // a legacy image's implied all gives way to the annotations
        assert_eq!(
            from(&["CUDA_VERSION=12.4"], &gpu0, &default),
            Ok(DeviceSelection::List(vec![Index(0)]))
        );
        for bad in ["nvidia.com/gpu=bogus", "0", "nvidia.com/gpu=none"] {
            let err = from(&[], &ann(&[("cdi.k8s.io/x", bad)]), &default).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!(
                    "annotation cdi.k8s.io/x: invalid CDI device {bad:?}"
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn default_policy() {
        let p = RequestPolicy::default();
        assert!(!p.privileged);
        assert!(p.accept_envvar_unprivileged);
        assert_eq!(p.default_capabilities, caps("utility,compute"));
        assert_eq!(p.supported_capabilities, CapabilitySet::all());
        assert!(!p.disable_require);
    }
}
