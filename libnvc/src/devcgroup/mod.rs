//! The container's device cgroup: lets a container open the device nodes the hook bound
//! into it, keeping every rule its runtime set.
//!
//! On the hook-only path (Docker's `--gpus`, a Podman hooks.d file) the spec does not list
//! the NVIDIA nodes, so the device cgroup the runtime made from `linux.resources.devices`
//! (deny everything, then runc's short allow list) forbids opening them. libnvidia-container
//! extends that cgroup from the hook; so does `nvc_host::devcgroup`:
//!
//! - cgroup v1: `c MAJOR:MINOR rwm` is written to the container's `devices.allow`, which the
//!   kernel adds to the cgroup's exceptions.
//! - cgroup v2: devices are filtered by eBPF programs attached to the cgroup, and the kernel
//!   allows an access only when *every* attached program does, so a second "allow nvidia"
//!   program next to the runtime's would change nothing. Instead the runtime's program is
//!   rebuilt from what it was built from — the spec's rules, then runc's defaults — plus an
//!   allow rule per node, and put in the place of the runtime's one program with
//!   `BPF_F_REPLACE`: the cgroup is never without a filter. Several programs attached is
//!   an error (which one would be the runtime's?); none attached means the cgroup filters
//!   nothing, and it is left so (a program there could only take access away). The
//!   rebuilt program decides as runc's does; another runtime's own default list is not
//!   known here and is replaced by runc's.
//!
//! The rules mean what they mean to runc (since 1.0), which replays them through an
//! emulation of the v1 device controller ([`DevicePolicy`]): an `a` rule resets to
//! allow-all or deny-all, every other rule adds or removes an exception, exceptions for the
//! same device pattern merge their access, and removing part of a wildcard exception is
//! refused (the kernel would silently ignore it). An access is allowed in deny-all mode
//! when one exception covers all of it, and denied in allow-all mode when an exception
//! covers any of it — as the v1 kernel decides; runc's program lets `rw` through a
//! `deny w` exception there, ours does not.

pub mod bpf;
mod emulator;
mod program;

use std::fmt;

use serde_json::Value;

pub use emulator::DevicePolicy;

use bpf::{ACC_MKNOD, ACC_READ, ACC_WRITE, DEV_BLOCK, DEV_CHAR};

/// The largest device number a rule may name: the instructions compare 32-bit signed
/// immediates (real majors have 12 bits, minors 20).
const MAX_NUMBER: u32 = i32::MAX as u32;

/// A device rule that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// A rule of the spec is not one runc accepts.
    #[error("{field} is {found}, expected {expected}")]
    InvalidRule {
        /// The JSON field, e.g. `linux.resources.devices[2].type`.
        field: String,
        /// What it holds.
        found: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// A rule names a device number no device program can compare.
    #[error(
        "the device rule {rule} names {number}, more than the largest device number {MAX_NUMBER}"
    )]
    NumberTooLarge {
        /// The rule.
        rule: Rule,
        /// The number.
        number: u32,
    },
    /// A rule removes part of a wildcard exception, which device cgroups cannot express.
    #[error("the device rule {rule} cannot be applied after {wildcard}: a device cgroup cannot take part of a wildcard rule back (runc refuses this too)")]
    HolePunch {
        /// The rule.
        rule: Rule,
        /// The wildcard exception it would cut into.
        wildcard: Rule,
    },
}

/// A device node's kind, as device cgroups see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKind {
    /// A character device (`c`).
    Char,
    /// A block device (`b`).
    Block,
}

impl DeviceKind {
    fn letter(self) -> char {
        match self {
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
        }
    }

    fn bpf_type(self) -> i32 {
        match self {
            DeviceKind::Char => DEV_CHAR,
            DeviceKind::Block => DEV_BLOCK,
        }
    }
}

/// Which devices a rule is about: its `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// `a`: every device; to runc (and the v1 kernel) a reset to allow-all or deny-all,
    /// whatever its numbers and access say.
    All,
    /// `c` or `b`.
    Device(DeviceKind),
}

/// A set of the accesses `r` (open for reading), `w` (open for writing), `m` (mknod).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No access.
    pub const NONE: Access = Access(0);
    /// `m`.
    pub const MKNOD: Access = Access(ACC_MKNOD as u8);
    /// `r`.
    pub const READ: Access = Access(ACC_READ as u8);
    /// `w`.
    pub const WRITE: Access = Access(ACC_WRITE as u8);
    /// `rw`: what opening with `O_RDWR` asks for.
    pub const READ_WRITE: Access = Access((ACC_READ | ACC_WRITE) as u8);
    /// `rwm`.
    pub const ALL: Access = Access((ACC_MKNOD | ACC_READ | ACC_WRITE) as u8);

    /// Parses letters of `rwm`, in any order, repeats allowed; `None` on any other letter.
    pub fn parse(s: &str) -> Option<Access> {
        s.chars().try_fold(Access::NONE, |acc, c| {
            let bit = match c {
                'r' => Access::READ,
                'w' => Access::WRITE,
                'm' => Access::MKNOD,
                _ => return None,
            };
            Some(acc | bit)
        })
    }

    /// Whether every access of `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `self` and `other` share an access.
    pub fn intersects(self, other: Access) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether it is [`Access::NONE`].
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The accesses of `self` not in `other`.
    pub fn without(self, other: Access) -> Access {
        Access(self.0 & !other.0)
    }

    /// The kernel's `BPF_DEVCG_ACC_*` bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (bit, c) in [
            (Access::READ, 'r'),
            (Access::WRITE, 'w'),
            (Access::MKNOD, 'm'),
        ] {
            if self.contains(bit) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// One entry of `linux.resources.devices`: allow or deny `access` to the devices of `kind`
/// with these numbers (`None`: any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Allow (`true`) or deny.
    pub allow: bool,
    /// `type`.
    pub kind: RuleKind,
    /// `major`; `None` when absent or negative (runc's wildcard).
    pub major: Option<u32>,
    /// `minor`; `None` when absent or negative.
    pub minor: Option<u32>,
    /// `access`.
    pub access: Access,
}

impl Rule {
    /// `allow c major:minor rwm`.
    pub fn allow_char(major: u32, minor: u32) -> Rule {
        Rule {
            allow: true,
            kind: RuleKind::Device(DeviceKind::Char),
            major: Some(major),
            minor: Some(minor),
            access: Access::ALL,
        }
    }
}

/// Written as `allow c 195:* rwm`, the v1 `devices.allow` syntax after the verb.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            RuleKind::All => 'a',
            RuleKind::Device(k) => k.letter(),
        };
        let num = |n: Option<u32>| n.map_or_else(|| "*".to_string(), |n| n.to_string());
        write!(
            f,
            "{} {kind} {}:{} {}",
            if self.allow { "allow" } else { "deny" },
            num(self.major),
            num(self.minor),
            self.access
        )
    }
}

/// The rules of the spec's `linux.resources.devices`, in order, read as runc reads them: a
/// missing `type` is `a`, a missing or negative number is a wildcard, a missing `allow` is
/// false, and `access` must be a non-empty string of `rwm`.
pub fn spec_rules(spec: &Value) -> Result<Vec<Rule>, RuleError> {
    const FIELD: &str = "linux.resources.devices";
    let list = match spec.pointer("/linux/resources/devices") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(invalid(FIELD.to_string(), other, "an array")),
    };
    list.iter()
        .enumerate()
        .map(|(i, entry)| parse_rule(&format!("{FIELD}[{i}]"), entry))
        .collect()
}

fn invalid(field: String, found: &Value, expected: &'static str) -> RuleError {
    RuleError::InvalidRule {
        field,
        found: found.to_string(),
        expected,
    }
}

fn parse_rule(field: &str, entry: &Value) -> Result<Rule, RuleError> {
    let Value::Object(entry) = entry else {
        return Err(invalid(field.to_string(), entry, "an object"));
    };
    let allow = match entry.get("allow") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(invalid(format!("{field}.allow"), other, "a boolean")),
    };
    let kind = match entry.get("type") {
        None | Some(Value::Null) => RuleKind::All,
        Some(Value::String(t)) => match t.as_str() {
            "" | "a" => RuleKind::All,
            "c" => RuleKind::Device(DeviceKind::Char),
            "b" => RuleKind::Device(DeviceKind::Block),
            _ => {
                return Err(invalid(
                    format!("{field}.type"),
                    &Value::String(t.clone()),
                    "\"a\", \"b\" or \"c\"",
                ))
            }
        },
        Some(other) => return Err(invalid(format!("{field}.type"), other, "a string")),
    };
    let number = |name: &str| -> Result<Option<u32>, RuleError> {
        match entry.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if n < 0 => Ok(None),
                Some(n) => u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= MAX_NUMBER)
                    .map(Some)
                    .ok_or_else(|| {
                        invalid(format!("{field}.{name}"), v, "a device number below 2^31")
                    }),
                None => Err(invalid(format!("{field}.{name}"), v, "an integer")),
            },
        }
    };
    let major = number("major")?;
    let minor = number("minor")?;
    let access = match entry.get("access") {
        Some(Value::String(s)) if !s.is_empty() => Access::parse(s),
        _ => None,
    }
    .ok_or_else(|| {
        invalid(
            format!("{field}.access"),
            entry.get("access").unwrap_or(&Value::Null),
            "a non-empty string of r, w and m",
        )
    })?;
    Ok(Rule {
        allow,
        kind,
        major,
        minor,
        access,
    })
}

/// The rules runc appends to every container's (`AllowedDevices` in runc's specconv):
/// mknod of anything, `/dev/null`, `random`, `full`, `tty`, `zero`, `urandom`, the ptys,
/// `/dev/ptmx` and `/dev/net/tun`. Like runc, an entry for a path that `linux.devices`
/// also lists (`spec_device_paths`) is left out: the spec's own rules decide for it.
pub fn runc_default_rules(spec_device_paths: &[&str]) -> Vec<Rule> {
    let mknod = |kind| Rule {
        allow: true,
        kind: RuleKind::Device(kind),
        major: None,
        minor: None,
        access: Access::MKNOD,
    };
    let char_any_minor = |major| Rule {
        minor: None,
        ..Rule::allow_char(major, 0)
    };
    let table: [(Option<&str>, Rule); 11] = [
        (None, mknod(DeviceKind::Char)),
        (None, mknod(DeviceKind::Block)),
        (Some("/dev/null"), Rule::allow_char(1, 3)),
        (Some("/dev/random"), Rule::allow_char(1, 8)),
        (Some("/dev/full"), Rule::allow_char(1, 7)),
        (Some("/dev/tty"), Rule::allow_char(5, 0)),
        (Some("/dev/zero"), Rule::allow_char(1, 5)),
        (Some("/dev/urandom"), Rule::allow_char(1, 9)),
        (None, char_any_minor(136)),
        (None, Rule::allow_char(5, 2)),
        (None, Rule::allow_char(10, 200)),
    ];
    table
        .into_iter()
        .filter(|(path, _)| path.map_or(true, |p| !spec_device_paths.contains(&p)))
        .map(|(_, rule)| rule)
        .collect()
}

/// The rules runc gives the container's device cgroup for `spec`: [`spec_rules`], then
/// [`runc_default_rules`] less the paths `linux.devices` lists.
pub fn runtime_rules(spec: &Value) -> Result<Vec<Rule>, RuleError> {
    let mut rules = spec_rules(spec)?;
    let paths: Vec<&str> = spec
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|d| d.get("path").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    rules.extend(runc_default_rules(&paths));
    Ok(rules)
}

/// Appends `allow c major:minor rwm` to `rules`: the rule that lets the container use a
/// node nvc bound into it.
pub fn allow(rules: &mut Vec<Rule>, major: u32, minor: u32) {
    rules.push(Rule::allow_char(major, minor));
}

#[cfg(test)]
mod tests;
