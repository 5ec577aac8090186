//! Whether a container asks for its GPUs exclusively: `NVC_EXCLUSIVE` in its
//! environment, the annotation `nvc.exclusive`, or `[requests] exclusive` in the nvc
//! config for every GPU container.
//!
//! Exclusivity takes nothing from the container that asks; it keeps other containers
//! off its GPUs. So the variable and the annotation follow the policy of
//! `NVIDIA_VISIBLE_DEVICES`: honoured in privileged containers, and in unprivileged ones
//! while `accept-envvar-when-unprivileged` is on; otherwise ignored with a warning (the
//! config key still applies). A container cannot opt out of the config key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::driver::parse_bool;
use super::{excerpt, RequestError, RequestPolicy};

/// The variable asking for exclusive GPUs.
pub const EXCLUSIVE_ENV: &str = "NVC_EXCLUSIVE";
/// The annotation asking for exclusive GPUs.
pub const EXCLUSIVE_ANNOTATION: &str = "nvc.exclusive";

/// What made a container's GPUs exclusive; a lease records it so that a refusal can say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExclusiveBy {
    /// `NVC_EXCLUSIVE` in the container's environment.
    Env,
    /// The annotation `nvc.exclusive`.
    Annotation,
    /// `[requests] exclusive` in the nvc config.
    Config,
}

impl ExclusiveBy {
    /// How a message names it.
    pub fn name(self) -> &'static str {
        match self {
            ExclusiveBy::Env => EXCLUSIVE_ENV,
            ExclusiveBy::Annotation => "annotation nvc.exclusive",
            ExclusiveBy::Config => "requests.exclusive in the nvc config",
        }
    }
}

/// The exclusivity the environment (`env`: its last value per key) and the policy give.
pub(super) fn from_env(
    env: &BTreeMap<&str, &str>,
    policy: &RequestPolicy,
) -> Result<Option<ExclusiveBy>, RequestError> {
    let asked = match env.get(EXCLUSIVE_ENV) {
        Some(value) => asks(EXCLUSIVE_ENV, value, policy)?,
        None => false,
    };
    Ok(if asked {
        Some(ExclusiveBy::Env)
    } else if policy.exclusive {
        Some(ExclusiveBy::Config)
    } else {
        None
    })
}

/// `current` with the annotation `nvc.exclusive` read too: the environment's word, where
/// it asked, stays the one a refusal names.
pub(super) fn with_annotation(
    current: Option<ExclusiveBy>,
    annotations: &BTreeMap<String, String>,
    policy: &RequestPolicy,
) -> Result<Option<ExclusiveBy>, RequestError> {
    if current == Some(ExclusiveBy::Env) {
        return Ok(current);
    }
    match annotations.get(EXCLUSIVE_ANNOTATION) {
        Some(value) if asks(EXCLUSIVE_ANNOTATION, value, policy)? => {
            Ok(Some(ExclusiveBy::Annotation))
        }
        _ => Ok(current),
    }
}

/// Whether `value` of `name` asks for exclusivity under `policy`.
fn asks(name: &'static str, value: &str, policy: &RequestPolicy) -> Result<bool, RequestError> {
    let on = parse_bool(value).ok_or_else(|| RequestError::BadExclusive {
        name,
        value: excerpt(value),
    })?;
    if on && !(policy.privileged || policy.accept_envvar_unprivileged) {
        log::warn!(
            "ignoring {name}={value:?}: the configuration does not accept GPU requests from \
             unprivileged containers"
        );
        return Ok(false);
    }
    Ok(on)
}
