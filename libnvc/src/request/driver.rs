//! What a container asks of the driver: its capabilities (`NVIDIA_DRIVER_CAPABILITIES`)
//! and its requirements (`NVIDIA_REQUIRE_*`, the one a legacy image's `CUDA_VERSION`
//! implies, and `NVIDIA_DISABLE_REQUIRE`, which turns them off).

use std::collections::BTreeMap;

use crate::caps::CapabilitySet;
use crate::require::{self, Requirement};
use crate::version::Version;

use super::{
    excerpt, items, RequestError, RequestPolicy, CUDA_VERSION, REQUIRE_JETPACK_PREFIX,
    REQUIRE_PREFIX,
};

/// Every `NVIDIA_REQUIRE_*` variable but the Jetson ones, sorted by name, then the one a
/// legacy image's `CUDA_VERSION` implies. Variables that require nothing are left out.
pub(super) fn requirements(
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

pub(super) fn capabilities(
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
pub(super) fn parse_bool(value: &str) -> Option<bool> {
    let v = value.trim().to_ascii_lowercase();
    match v.as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "" | "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The `cuda>=MAJOR.MINOR` requirement a legacy image's `CUDA_VERSION` implies.
pub(super) fn legacy_requirement(cuda_version: &str) -> Result<Requirement, RequestError> {
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
