//! What a list of device rules comes to, as runc's emulation of the v1 device controller
//! computes it: a default and its exceptions.

use std::collections::BTreeMap;

use super::{Access, DeviceKind, Rule, RuleError, RuleKind, MAX_NUMBER};

/// A device pattern: a kind and numbers, `None` for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Pattern {
    pub(super) kind: DeviceKind,
    pub(super) major: Option<u32>,
    pub(super) minor: Option<u32>,
}

impl Pattern {
    fn matches(&self, kind: DeviceKind, major: u32, minor: u32) -> bool {
        self.kind == kind
            && self.major.map_or(true, |m| m == major)
            && self.minor.map_or(true, |m| m == minor)
    }

    fn rule(&self, allow: bool, access: Access) -> Rule {
        Rule {
            allow,
            kind: RuleKind::Device(self.kind),
            major: self.major,
            minor: self.minor,
            access,
        }
    }
}

/// What a list of rules comes to: a default (allow-all or deny-all) and the exceptions to
/// it, as runc's emulation of the v1 device controller computes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePolicy {
    pub(super) default_allow: bool,
    pub(super) exceptions: BTreeMap<Pattern, Access>,
}

impl DevicePolicy {
    /// Replays `rules` in order from deny-all.
    pub fn from_rules(rules: &[Rule]) -> Result<DevicePolicy, RuleError> {
        let mut policy = DevicePolicy {
            default_allow: false,
            exceptions: BTreeMap::new(),
        };
        for rule in rules {
            for number in [rule.major, rule.minor].into_iter().flatten() {
                if number > MAX_NUMBER {
                    return Err(RuleError::NumberTooLarge {
                        rule: *rule,
                        number,
                    });
                }
            }
            let RuleKind::Device(kind) = rule.kind else {
                policy = DevicePolicy {
                    default_allow: rule.allow,
                    exceptions: BTreeMap::new(),
                };
                continue;
            };
            let pattern = Pattern {
                kind,
                major: rule.major,
                minor: rule.minor,
            };
            if rule.allow == policy.default_allow {
                policy.remove(pattern, rule)?;
            } else if !rule.access.is_empty() {
                let entry = policy.exceptions.entry(pattern).or_default();
                *entry = *entry | rule.access;
            }
        }
        Ok(policy)
    }

    /// Takes `rule.access` out of the exception for exactly `pattern`; refuses when a wider
    /// exception would keep some of it, as runc does.
    fn remove(&mut self, pattern: Pattern, rule: &Rule) -> Result<(), RuleError> {
        let wider = [
            Pattern {
                major: None,
                ..pattern
            },
            Pattern {
                minor: None,
                ..pattern
            },
            Pattern {
                major: None,
                minor: None,
                ..pattern
            },
        ];
        for w in wider {
            if w == pattern {
                continue;
            }
            if let Some(access) = self.exceptions.get(&w) {
                if access.intersects(rule.access) {
                    return Err(RuleError::HolePunch {
                        rule: *rule,
                        wildcard: w.rule(!self.default_allow, *access),
                    });
                }
            }
        }
        if let Some(access) = self.exceptions.get_mut(&pattern) {
            *access = access.without(rule.access);
            if access.is_empty() {
                self.exceptions.remove(&pattern);
            }
        }
        Ok(())
    }

    /// Whether everything not excepted is allowed.
    pub fn default_allow(&self) -> bool {
        self.default_allow
    }

    /// The exceptions, as rules of the opposite action to the default, in a fixed order.
    pub fn exceptions(&self) -> Vec<Rule> {
        self.exceptions
            .iter()
            .map(|(p, a)| p.rule(!self.default_allow, *a))
            .collect()
    }

    /// Whether `access` to the device `kind major:minor` is allowed: in deny-all mode when
    /// one exception covers all of `access`, in allow-all mode unless an exception covers
    /// some of it.
    pub fn permits(&self, kind: DeviceKind, major: u32, minor: u32, access: Access) -> bool {
        let mut matching = self
            .exceptions
            .iter()
            .filter(|(p, _)| p.matches(kind, major, minor));
        if self.default_allow {
            !matching.any(|(_, a)| a.intersects(access))
        } else {
            matching.any(|(_, a)| a.contains(access))
        }
    }
}
