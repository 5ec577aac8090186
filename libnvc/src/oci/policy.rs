//! The host's request policy, built from the `[requests]` section of the nvc config:
//! what the shim, the hook and `nvc list` apply when they read a container's request.

use nvc_config::Config;

use crate::caps::{CapabilitySet, UnknownCapability};
use crate::request::RequestPolicy;

/// A `[requests]` setting that does not hold capabilities.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A capability list names something that is no capability.
    #[error("invalid requests.{key}")]
    Capabilities {
        /// The config key, such as `default-capabilities`.
        key: &'static str,
        /// The unknown name.
        #[source]
        source: UnknownCapability,
    },
}

fn capabilities(key: &'static str, names: &[String]) -> Result<CapabilitySet, PolicyError> {
    CapabilitySet::parse_list(&names.join(","))
        .map_err(|source| PolicyError::Capabilities { key, source })
}

/// The policy for a container that is `privileged` (`CAP_SYS_ADMIN` in its bounding
/// set) under `config`.
pub fn request_policy(config: &Config, privileged: bool) -> Result<RequestPolicy, PolicyError> {
    let requests = &config.requests;
    Ok(RequestPolicy {
        privileged,
        accept_envvar_unprivileged: requests.accept_envvar_when_unprivileged,
        default_capabilities: capabilities("default-capabilities", &requests.default_capabilities)?,
        supported_capabilities: capabilities(
            "supported-capabilities",
            &requests.supported_capabilities,
        )?,
        accept_device_mounts: requests.accept_devices_as_volume_mounts,
        disable_require: requests.disable_require,
        exclusive: requests.exclusive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Capability;

    #[test]
    fn defaults_match_the_library_default() {
        let policy = request_policy(&Config::default(), false).unwrap();
        assert_eq!(policy, RequestPolicy::default());
        assert!(request_policy(&Config::default(), true).unwrap().privileged);
    }

    #[test]
    fn settings_are_carried_over() {
        let mut config = Config::default();
        config.requests.default_capabilities = vec!["all".into()];
        config.requests.supported_capabilities = vec!["utility".into(), "compute,video".into()];
        config.requests.accept_envvar_when_unprivileged = false;
        config.requests.disable_require = true;
        let policy = request_policy(&config, false).unwrap();
        assert_eq!(policy.default_capabilities, CapabilitySet::all());
        assert_eq!(
            policy.supported_capabilities,
            [Capability::Utility, Capability::Compute, Capability::Video]
                .into_iter()
                .collect()
        );
        assert!(!policy.accept_envvar_unprivileged);
        assert!(policy.disable_require);
    }

    #[test]
    fn unknown_capability_names_the_key() {
        let mut config = Config::default();
        config.requests.supported_capabilities = vec!["utility".into(), "warp".into()];
        let e = request_policy(&config, false).unwrap_err();
        assert_eq!(e.to_string(), "invalid requests.supported-capabilities");
        assert!(crate::report::error_chain(&e).contains("\"warp\""));
    }
}
