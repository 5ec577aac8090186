//! `NVIDIA_DRIVER_CAPABILITIES` ([`libnvc::caps`], and its reading in
//! [`libnvc::request`]).
//!
//! The input is the variable's value.
//!
//! Properties:
//! - no input makes [`CapabilitySet::parse_list`] or [`Request::from_env`] panic;
//! - the list is a set: reversing its items, sorting them or writing each twice gives
//!   the same result (the same set, or an error either way);
//! - what parses is within the known capabilities and, read as a container's request,
//!   within the policy's supported set; an unset or blank value gives the policy's
//!   default capabilities trimmed to the supported ones;
//! - a parsed set written back ([`CapabilitySet`]'s `Display`, names joined by commas)
//!   parses to the same set, and each name reads back as its capability.

use libnvc::caps::{Capability, CapabilitySet};
use libnvc::request::{Request, RequestPolicy, DRIVER_CAPABILITIES};

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let value = crate::text(data);
    let items: Vec<&str> = value.split(',').collect();

    let parsed = CapabilitySet::parse_list(&value);
    for variant in variants(&items) {
        let again = CapabilitySet::parse_list(&variant);
        assert_eq!(
            again.as_ref().ok(),
            parsed.as_ref().ok(),
            "{value:?} and {variant:?} parse differently"
        );
    }
    if let Ok(set) = parsed {
        assert_eq!(set.intersection(CapabilitySet::all()), set);
        let shown = set.to_string();
        assert_eq!(
            CapabilitySet::parse_list(&shown).ok(),
            Some(set),
            "{value:?} shown as {shown:?} parses differently"
        );
        for cap in set.iter() {
            assert_eq!(cap.name().parse::<Capability>().ok(), Some(cap));
        }
    }

    for policy in policies() {
        let got = request_caps(&value, &policy);
        for variant in variants(&items) {
            assert_eq!(
                request_caps(&variant, &policy).is_ok(),
                got.is_ok(),
                "{value:?} and {variant:?} are read differently"
            );
            if let (Ok(a), Ok(b)) = (request_caps(&variant, &policy), &got) {
                assert_eq!(a, *b, "{value:?} and {variant:?} are read differently");
            }
        }
        let Ok(caps) = got else {
            continue;
        };
        let supported = policy.supported_capabilities;
        assert_eq!(
            caps.intersection(supported),
            caps,
            "{value:?} gave {caps}, outside the supported {supported}"
        );
        if value.split(',').all(|i| i.trim().is_empty()) {
            assert_eq!(caps, policy.default_capabilities.intersection(supported));
        }
    }
}

fn request_caps(value: &str, policy: &RequestPolicy) -> Result<CapabilitySet, String> {
    let entry = format!("{DRIVER_CAPABILITIES}={value}");
    Request::from_env([entry.as_str()], policy)
        .map(|r| r.capabilities)
        .map_err(|e| e.to_string())
}

/// The same items reversed, sorted, and each written twice.
fn variants(items: &[&str]) -> [String; 3] {
    let mut reversed = items.to_vec();
    reversed.reverse();
    let mut sorted = items.to_vec();
    sorted.sort_unstable();
    let doubled: Vec<&str> = items.iter().flat_map(|i| [*i, *i]).collect();
    [reversed.join(","), sorted.join(","), doubled.join(",")]
}

fn policies() -> [RequestPolicy; 3] {
    let default = RequestPolicy::default();
    let set = |caps: &[Capability]| caps.iter().copied().collect::<CapabilitySet>();
    [
        default,
        RequestPolicy {
            supported_capabilities: set(&[
                Capability::Utility,
                Capability::Compute,
                Capability::Video,
            ]),
            default_capabilities: set(&[Capability::Utility, Capability::Graphics]),
            ..default
        },
        RequestPolicy {
            supported_capabilities: CapabilitySet::empty(),
            ..default
        },
    ]
}
