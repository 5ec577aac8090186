//! Why a container's environment or annotations ask for something invalid
//! ([`RequestError`]).

use crate::caps::{CapabilitySet, UnknownCapability};
use crate::require::RequireError;
use crate::version::BadVersion;

use super::{MAX_DEVICE_INDEX, MAX_IMEX_CHANNEL};

/// A container environment that asks for something invalid; each names the variable and
/// the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A device list item that is no known form.
    #[error(
        "{variable}: unknown device {item:?} (expected an index, GPU-<uuid>, \
         a PCI bus id such as 0000:06:00.0, <gpu>:<mig>, MIG-<uuid>, all, none or void)"
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
    /// `NVC_EXCLUSIVE` or the annotation `nvc.exclusive` is not a boolean.
    #[error(
        "{name}={value:?} is not a boolean \
         (expected 1, true, yes, on, 0, false, no, off or nothing)"
    )]
    BadExclusive {
        /// The variable or annotation.
        name: &'static str,
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
         nvidia.com/gpu takes an index, GPU-<uuid>, <gpu>:<mig>, MIG-<uuid> or all)"
    )]
    BadCdiAnnotation {
        /// The annotation's key.
        annotation: String,
        /// The item as written.
        item: String,
    },
    /// A mount under `/var/run/nvidia-container-devices` that names no device.
    #[error(
        "the device mount {name:?} under {root} names no device (expected <id>, \
         cdi/nvidia.com/gpu=<name> or imex/<channel>, as NVIDIA_VISIBLE_DEVICES takes ids)",
        root = super::mounts::DEVICE_MOUNTS_ROOT
    )]
    BadDeviceMount {
        /// The name under the mount root.
        name: String,
    },
    /// More device mounts than anything real makes.
    #[error("{count} device mounts under /var/run/nvidia-container-devices (at most {max})")]
    TooManyDeviceMounts {
        /// How many.
        count: usize,
        /// The most read.
        max: usize,
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
