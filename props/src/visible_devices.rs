//! `NVIDIA_VISIBLE_DEVICES` and the rest of a container's request
//! ([`libnvc::request`]).
//!
//! The input is used twice: whole, as the value of each device-list variable (and of a
//! `cdi.k8s.io/` annotation), and split at newlines, as a container environment of
//! `KEY=VALUE` entries read by [`Request::from_env`] and [`Request::from_container`]
//! (entries whose key starts with `cdi.k8s.io/` also go in as annotations).
//!
//! Properties:
//! - no input makes the parsers panic, under any of the policies tried (default,
//!   privileged, ignoring variables from unprivileged containers, a restricted
//!   capability set with requirement checks off);
//! - a device list that parses is not empty and names no device twice, and so does an
//!   IMEX channel list;
//! - a parsed selection written back in its normalised form (`all`, `none`, `void`, or
//!   its devices' [`std::fmt::Display`] forms joined by commas) parses to the same
//!   selection: normalisation is stable;
//! - a request's capabilities are within the policy's supported set, requirements are
//!   empty when checks are off, and the `NVIDIA_REQUIRE_*` ones come sorted by name;
//! - a policy that ignores variables from unprivileged containers gives such a container
//!   no devices (from its variables or its annotations) and no IMEX channels, and an
//!   unprivileged container never gets MIG
//!   management devices;
//! - the request does not depend on the order of the environment, only on the last value
//!   of each variable.

use std::collections::BTreeMap;

use libnvc::caps::Capability;
use libnvc::request::{
    ChannelSelection, DeviceSelection, Request, RequestError, RequestPolicy, CDI_ANNOTATION_PREFIX,
    CUDA_VERSION, IMEX_CHANNELS, MIG_CONFIG_DEVICES, MIG_MONITOR_DEVICES, REQUIRE_CUDA,
    REQUIRE_PREFIX, VISIBLE_DEVICES,
};

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let text = crate::text(data);
    single_value(&text);
    environment(&text);
}

fn policies() -> [RequestPolicy; 4] {
    let default = RequestPolicy::default();
    [
        default,
        RequestPolicy {
            privileged: true,
            ..default
        },
        RequestPolicy {
            accept_envvar_unprivileged: false,
            ..default
        },
        RequestPolicy {
            supported_capabilities: [
                Capability::Utility,
                Capability::Compute,
                Capability::Graphics,
            ]
            .into_iter()
            .collect(),
            default_capabilities: [Capability::Utility, Capability::Video]
                .into_iter()
                .collect(),
            disable_require: true,
            ..default
        },
    ]
}

/// The normalised text of a device selection.
pub fn render_devices(selection: &DeviceSelection) -> String {
    match selection {
        DeviceSelection::NotRequested => "void".to_string(),
        DeviceSelection::None => "none".to_string(),
        DeviceSelection::All => "all".to_string(),
        DeviceSelection::List(ids) => ids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The normalised text of an IMEX channel selection.
pub fn render_channels(selection: &ChannelSelection) -> String {
    match selection {
        ChannelSelection::None => "none".to_string(),
        ChannelSelection::All => "all".to_string(),
        ChannelSelection::List(ids) => ids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn assert_list_well_formed(what: &str, selection: &DeviceSelection) {
    if let DeviceSelection::List(ids) = selection {
        assert!(
            !ids.is_empty(),
            "{what}: an empty device list {selection:?}"
        );
        for (i, id) in ids.iter().enumerate() {
            assert!(
                !ids[..i].contains(id),
                "{what}: device {id} listed twice in {ids:?}"
            );
        }
    }
}

fn assert_channels_well_formed(selection: &ChannelSelection) {
    if let ChannelSelection::List(ids) = selection {
        assert!(!ids.is_empty(), "an empty channel list {selection:?}");
        for (i, id) in ids.iter().enumerate() {
            assert!(
                !ids[..i].contains(id),
                "channel {id} listed twice in {ids:?}"
            );
        }
    }
}

fn from_env(env: &[&str], policy: &RequestPolicy) -> Result<Request, RequestError> {
    Request::from_env(env.iter().copied(), policy)
}

/// Parses `value` as `variable` alone in the environment.
fn parse_var(variable: &str, value: &str, policy: &RequestPolicy) -> Result<Request, RequestError> {
    let entry = format!("{variable}={value}");
    from_env(&[&entry], policy)
}

/// The selection a variable holds, for the variables read as device lists.
fn device_field(variable: &str, request: &Request) -> DeviceSelection {
    match variable {
        MIG_CONFIG_DEVICES => request.mig_config.clone(),
        MIG_MONITOR_DEVICES => request.mig_monitor.clone(),
        _ => request.devices.clone(),
    }
}

fn single_value(value: &str) {
    let privileged = RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    };
    for variable in [VISIBLE_DEVICES, MIG_CONFIG_DEVICES, MIG_MONITOR_DEVICES] {
        let Ok(request) = parse_var(variable, value, &privileged) else {
            continue;
        };
        let selection = device_field(variable, &request);
        assert_list_well_formed(variable, &selection);
        let shown = render_devices(&selection);
        let again = parse_var(variable, &shown, &privileged)
            .map(|r| device_field(variable, &r))
            .unwrap_or_else(|e| panic!("{variable}: normalised {shown:?} of {value:?} fails: {e}"));
        assert_eq!(
            again, selection,
            "{variable}: {value:?} normalised to {shown:?} parses differently"
        );
    }

    if let Ok(request) = parse_var(IMEX_CHANNELS, value, &privileged) {
        let channels = &request.imex_channels;
        assert_channels_well_formed(channels);
        let shown = render_channels(channels);
        let again = parse_var(IMEX_CHANNELS, &shown, &privileged)
            .unwrap_or_else(|e| panic!("normalised {shown:?} of {value:?} fails: {e}"));
        assert_eq!(
            &again.imex_channels, channels,
            "{IMEX_CHANNELS}: {value:?} normalised to {shown:?} parses differently"
        );
    }

    // The same list as the devices of a CDI annotation.
    let key = format!("{CDI_ANNOTATION_PREFIX}fuzz");
    let annotations = BTreeMap::from([(key.clone(), value.to_string())]);
    let default = RequestPolicy::default();
    if let Ok(request) = Request::from_container(std::iter::empty(), &annotations, &[], &default) {
        let selection = &request.devices;
        assert_list_well_formed("annotation", selection);
        let shown = match selection {
            DeviceSelection::List(ids) => ids
                .iter()
                .map(|id| format!("{}={id}", libnvc::cdi::KIND))
                .collect::<Vec<_>>()
                .join(","),
            DeviceSelection::All => format!("{}=all", libnvc::cdi::KIND),
            DeviceSelection::NotRequested => String::new(),
            DeviceSelection::None => panic!("annotation {value:?} gave `none`"),
        };
        let annotations = BTreeMap::from([(key, shown.clone())]);
        let again = Request::from_container(std::iter::empty(), &annotations, &[], &default)
            .unwrap_or_else(|e| panic!("annotation normalised {shown:?} of {value:?} fails: {e}"));
        assert_eq!(
            &again.devices, selection,
            "annotation {value:?} normalised to {shown:?} reads differently"
        );
    }
}

/// The environment with only the last entry of each variable, in reverse order: a
/// different order of the same variables.
fn last_values_reversed<'a>(env: &[&'a str]) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for entry in env.iter().rev() {
        let Some((key, _)) = entry.split_once('=') else {
            continue;
        };
        if seen.insert(key) {
            out.push(*entry);
        }
    }
    out
}

fn environment(text: &str) {
    let env: Vec<&str> = text.split('\n').collect();
    let annotations: BTreeMap<String, String> = env
        .iter()
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let reordered = last_values_reversed(&env);
    let last: BTreeMap<&str, &str> = env.iter().filter_map(|e| e.split_once('=')).collect();
    let is_set = |key: &str| last.get(key).is_some_and(|v| !v.is_empty());

    for policy in policies() {
        let got = from_env(&env, &policy);
        assert_eq!(
            from_env(&reordered, &policy),
            got,
            "the request depends on the order of the environment"
        );
        let with_annotations =
            Request::from_container(env.iter().copied(), &annotations, &[], &policy);
        if let Ok(request) = &with_annotations {
            assert_request(request, &policy, &last);
            if !policy.privileged && !policy.accept_envvar_unprivileged {
                assert_eq!(
                    request.devices,
                    DeviceSelection::NotRequested,
                    "ignored annotations selected devices"
                );
            }
        }
        let Ok(request) = got else {
            continue;
        };
        assert_request(&request, &policy, &last);
        assert_eq!(
            request.legacy_image,
            is_set(CUDA_VERSION) && !is_set(REQUIRE_CUDA),
            "legacy image detection"
        );
        if !policy.privileged && !policy.accept_envvar_unprivileged {
            assert_eq!(
                request.devices,
                DeviceSelection::NotRequested,
                "an ignored environment selected devices"
            );
            assert_eq!(
                request.imex_channels,
                ChannelSelection::None,
                "an ignored environment selected IMEX channels"
            );
        }
        assert_eq!(
            request.wants_gpu_support(),
            request.devices != DeviceSelection::NotRequested
        );
    }
}

fn assert_request(request: &Request, policy: &RequestPolicy, last: &BTreeMap<&str, &str>) {
    assert_list_well_formed(VISIBLE_DEVICES, &request.devices);
    assert_list_well_formed(MIG_CONFIG_DEVICES, &request.mig_config);
    assert_list_well_formed(MIG_MONITOR_DEVICES, &request.mig_monitor);
    assert_channels_well_formed(&request.imex_channels);
    assert_eq!(
        request
            .capabilities
            .intersection(policy.supported_capabilities),
        request.capabilities,
        "capabilities {} outside the supported {}",
        request.capabilities,
        policy.supported_capabilities
    );
    if !policy.privileged {
        assert_eq!(request.mig_config, DeviceSelection::NotRequested);
        assert_eq!(request.mig_monitor, DeviceSelection::NotRequested);
    }
    if !request.check_requirements {
        assert!(
            request.requirements.is_empty(),
            "requirements kept while checks are off"
        );
    }
    if policy.disable_require {
        assert!(!request.check_requirements, "the policy turned checks off");
    }
    let names: Vec<&str> = request
        .requirements
        .iter()
        .map(|r| r.variable.as_str())
        .filter(|v| v.starts_with(REQUIRE_PREFIX))
        .collect();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "requirements out of order: {names:?}"
    );
    for name in names {
        assert!(
            last.contains_key(name),
            "requirement {name} not in the environment"
        );
    }
    for requirement in &request.requirements {
        assert!(
            !requirement.alternatives.is_empty(),
            "an empty requirement is kept"
        );
    }
}
