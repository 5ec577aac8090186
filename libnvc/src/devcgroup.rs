//! The container's device cgroup: lets a container open the device nodes the hook bound
//! into it, keeping every rule its runtime set.
//!
//! On the hook-only path (Docker's `--gpus`, a Podman hooks.d file) the spec does not list
//! the NVIDIA nodes, so the device cgroup the runtime made from `linux.resources.devices`
//! (deny everything, then runc's short allow list) forbids opening them. libnvidia-container
//! extends that cgroup from the hook; so does [`grant`]:
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

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use log::{debug, info};
use nvc_sys::cgroup::{
    self as sys, CgroupDir, CgroupError, DeviceProgram, Insn, Reg, ACC_MKNOD, ACC_READ, ACC_WRITE,
    CGROUP2_SUPER_MAGIC, CTX_ACCESS_TYPE, CTX_MAJOR, CTX_MINOR, DEV_BLOCK, DEV_CHAR,
};
use serde_json::Value;

/// Where the host's cgroup file systems are mounted.
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The name nvc's device programs carry (`bpftool prog` shows it).
const PROGRAM_NAME: &str = "nvc_devices";

/// The largest device number a rule may name: the instructions compare 32-bit signed
/// immediates (real majors have 12 bits, minors 20).
const MAX_NUMBER: u32 = i32::MAX as u32;

/// Why the container's device cgroup could not be extended.
#[derive(Debug, thiserror::Error)]
pub enum DevCgroupError {
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
    /// `/proc/<pid>/cgroup` could not be read.
    #[error("cannot read {path}")]
    ProcRead {
        /// The file.
        path: PathBuf,
        /// The reason.
        #[source]
        source: std::io::Error,
    },
    /// The container's process is in no cgroup of the hierarchy needed.
    #[error("{path} names no {hierarchy} cgroup for the container; is {hierarchy} mounted under {root}?")]
    NoCgroup {
        /// `/proc/<pid>/cgroup`.
        path: PathBuf,
        /// "cgroup v2" or "v1 devices".
        hierarchy: &'static str,
        /// The cgroup root searched.
        root: PathBuf,
    },
    /// The container's cgroup path is not below the root (another cgroup namespace).
    #[error("{path} gives the cgroup {cgroup:?}, which is not a path below {root}: nvc-hook must run in the host's cgroup namespace")]
    BadCgroupPath {
        /// `/proc/<pid>/cgroup`.
        path: PathBuf,
        /// The path it gave.
        cgroup: String,
        /// The cgroup root.
        root: PathBuf,
    },
    /// The container's cgroup v2 has several device programs.
    #[error("the container's cgroup {cgroup} has {} device programs (ids {ids:?}); nvc-hook cannot tell which one to extend: add the devices to the spec instead (run the container through nvc-runtime)", .ids.len())]
    SeveralPrograms {
        /// The cgroup directory.
        cgroup: PathBuf,
        /// The attached programs.
        ids: Vec<u32>,
    },
    /// The new device program could not be built for the cgroup.
    #[error("cannot build the device program for {cgroup}")]
    Program {
        /// The cgroup directory.
        cgroup: PathBuf,
        /// The reason.
        #[source]
        source: CgroupError,
    },
    /// Reading or changing the cgroup failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
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
pub fn spec_rules(spec: &Value) -> Result<Vec<Rule>, DevCgroupError> {
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

fn invalid(field: String, found: &Value, expected: &'static str) -> DevCgroupError {
    DevCgroupError::InvalidRule {
        field,
        found: found.to_string(),
        expected,
    }
}

fn parse_rule(field: &str, entry: &Value) -> Result<Rule, DevCgroupError> {
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
    let number = |name: &str| -> Result<Option<u32>, DevCgroupError> {
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
pub fn runtime_rules(spec: &Value) -> Result<Vec<Rule>, DevCgroupError> {
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

/// A device pattern: a kind and numbers, `None` for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Pattern {
    kind: DeviceKind,
    major: Option<u32>,
    minor: Option<u32>,
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
    default_allow: bool,
    exceptions: BTreeMap<Pattern, Access>,
}

impl DevicePolicy {
    /// Replays `rules` in order from deny-all.
    pub fn from_rules(rules: &[Rule]) -> Result<DevicePolicy, DevCgroupError> {
        let mut policy = DevicePolicy {
            default_allow: false,
            exceptions: BTreeMap::new(),
        };
        for rule in rules {
            for number in [rule.major, rule.minor].into_iter().flatten() {
                if number > MAX_NUMBER {
                    return Err(DevCgroupError::NumberTooLarge {
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
    fn remove(&mut self, pattern: Pattern, rule: &Rule) -> Result<(), DevCgroupError> {
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
                    return Err(DevCgroupError::HolePunch {
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

    /// The device program deciding as [`DevicePolicy::permits`] does: one block per
    /// exception, which returns the exception's action when the context matches it, then
    /// the default.
    pub fn program(&self) -> Vec<Insn> {
        let mut insns = vec![
            // r2 = type (low half of access_type), r3 = access (high half).
            Insn::load_word(Reg::R2, Reg::R1, CTX_ACCESS_TYPE),
            Insn::and_imm(Reg::R2, 0xffff),
            Insn::load_word(Reg::R3, Reg::R1, CTX_ACCESS_TYPE),
            Insn::rsh_imm(Reg::R3, 16),
            Insn::load_word(Reg::R4, Reg::R1, CTX_MAJOR),
            Insn::load_word(Reg::R5, Reg::R1, CTX_MINOR),
        ];
        let (on_match, otherwise) = if self.default_allow { (0, 1) } else { (1, 0) };
        for (pattern, access) in &self.exceptions {
            let mut block = vec![Step::SkipUnlessEq(Reg::R2, pattern.kind.bpf_type())];
            let bits = i32::from(access.bits());
            if self.default_allow {
                // A deny exception applies when it shares an access with the request.
                block.push(Step::Do(Insn::mov_reg(Reg::R1, Reg::R3)));
                block.push(Step::Do(Insn::and_imm(Reg::R1, bits)));
                block.push(Step::SkipIfZero(Reg::R1));
            } else if *access != Access::ALL {
                // An allow exception applies when it covers the whole request.
                block.push(Step::Do(Insn::mov_reg(Reg::R1, Reg::R3)));
                block.push(Step::Do(Insn::and_imm(Reg::R1, bits)));
                block.push(Step::SkipUnlessSame(Reg::R1, Reg::R3));
            }
            if let Some(major) = pattern.major {
                block.push(Step::SkipUnlessEq(Reg::R4, imm(major)));
            }
            if let Some(minor) = pattern.minor {
                block.push(Step::SkipUnlessEq(Reg::R5, imm(minor)));
            }
            block.push(Step::Do(Insn::mov_imm(Reg::R0, on_match)));
            block.push(Step::Do(Insn::exit()));
            let len = block.len();
            insns.extend(block.into_iter().enumerate().map(|(i, step)| {
                // A failed test jumps to the next block: past the rest of this one.
                let skip = i16::try_from(len - i - 1).unwrap_or(i16::MAX);
                match step {
                    Step::Do(insn) => insn,
                    Step::SkipUnlessEq(reg, value) => Insn::jne_imm(reg, value, skip),
                    Step::SkipUnlessSame(a, b) => Insn::jne_reg(a, b, skip),
                    Step::SkipIfZero(reg) => Insn::jeq_imm(reg, 0, skip),
                }
            }));
        }
        insns.push(Insn::mov_imm(Reg::R0, otherwise));
        insns.push(Insn::exit());
        insns
    }
}

/// An instruction of a program block whose jumps go to the end of the block.
enum Step {
    Do(Insn),
    SkipUnlessEq(Reg, i32),
    SkipUnlessSame(Reg, Reg),
    SkipIfZero(Reg),
}

fn imm(n: u32) -> i32 {
    // Checked by DevicePolicy::from_rules.
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A character device to let the container use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CharDevice {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// What [`grant`] needs besides the container's pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCgroup {
    /// Where the host's cgroups are mounted: [`DEFAULT_CGROUP_ROOT`]. A cgroup2 file system
    /// there means the unified hierarchy; anything else, v1 controllers in subdirectories.
    pub cgroup_root: PathBuf,
    /// The rules the runtime gave the container ([`runtime_rules`]): what its cgroup v2
    /// device program is rebuilt from.
    pub rules: Vec<Rule>,
}

impl DeviceCgroup {
    /// The rules of `spec` ([`runtime_rules`]) under [`DEFAULT_CGROUP_ROOT`].
    pub fn from_spec(spec: &Value) -> Result<DeviceCgroup, DevCgroupError> {
        Ok(DeviceCgroup {
            cgroup_root: PathBuf::from(DEFAULT_CGROUP_ROOT),
            rules: runtime_rules(spec)?,
        })
    }
}

/// What [`grant`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// Nothing: the runtime's rules already allow the devices (e.g. a privileged
    /// container), or there were none.
    AlreadyAllowed,
    /// cgroup v1: the devices were written to `devices.allow` of this cgroup.
    Appended {
        /// The container's devices cgroup directory.
        cgroup: PathBuf,
    },
    /// cgroup v2: the cgroup's device program `old` was replaced by `new`.
    Replaced {
        /// The container's cgroup directory.
        cgroup: PathBuf,
        /// The runtime's program.
        old: u32,
        /// nvc's.
        new: u32,
    },
    /// cgroup v2: no device program is attached to the container's cgroup, so it filters
    /// no device and nothing was attached (one would only take access away).
    Unfiltered {
        /// The container's cgroup directory.
        cgroup: PathBuf,
    },
}

/// A grant opened and built in the host's namespaces, to be applied later by fds alone
/// (after the hook has entered the container's mount namespace).
#[derive(Debug)]
pub struct PreparedGrant {
    step: Prepared,
}

#[derive(Debug)]
enum Prepared {
    Nothing,
    Legacy {
        dir: CgroupDir,
        lines: Vec<String>,
    },
    Unified {
        dir: CgroupDir,
        program: DeviceProgram,
    },
}

/// Lets the container whose init is `pid` open `devices`: finds its cgroup from
/// `/proc/<pid>/cgroup`, then appends to its v1 `devices.allow` or replaces its v2 device
/// program (see the module documentation). Must run in the host's mount and cgroup
/// namespaces.
pub fn grant(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
) -> Result<Granted, DevCgroupError> {
    prepare(pid, cgroup, devices)?.apply()
}

/// The first half of [`grant`]: reads the container's cgroup, opens its directory and, for
/// cgroup v2, builds and loads the new program. Nothing is changed yet.
pub fn prepare(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
) -> Result<PreparedGrant, DevCgroupError> {
    if devices.is_empty() {
        return Ok(PreparedGrant {
            step: Prepared::Nothing,
        });
    }
    let root = &cgroup.cgroup_root;
    let proc_path = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let table = std::fs::read_to_string(&proc_path).map_err(|source| DevCgroupError::ProcRead {
        path: proc_path.clone(),
        source,
    })?;
    let unified = sys::filesystem_magic(root)? == CGROUP2_SUPER_MAGIC;
    let (hierarchy, base) = if unified {
        ("cgroup v2", root.clone())
    } else {
        ("v1 devices", root.join("devices"))
    };
    let relative = cgroup_path(&table, unified).ok_or_else(|| DevCgroupError::NoCgroup {
        path: proc_path.clone(),
        hierarchy,
        root: root.clone(),
    })?;
    let dir_path = below(&base, relative).ok_or_else(|| DevCgroupError::BadCgroupPath {
        path: proc_path.clone(),
        cgroup: relative.to_string(),
        root: base.clone(),
    })?;

    if !unified {
        let dir = CgroupDir::open_v1(&dir_path)?;
        let lines = devices
            .iter()
            .map(|d| format!("c {}:{} rwm", d.major, d.minor))
            .collect();
        return Ok(PreparedGrant {
            step: Prepared::Legacy { dir, lines },
        });
    }

    let before = DevicePolicy::from_rules(&cgroup.rules)?;
    if devices
        .iter()
        .all(|d| before.permits(DeviceKind::Char, d.major, d.minor, Access::ALL))
    {
        debug!(
            "the device rules of {} already allow the devices",
            dir_path.display()
        );
        return Ok(PreparedGrant {
            step: Prepared::Nothing,
        });
    }
    let mut rules = cgroup.rules.clone();
    for d in devices {
        allow(&mut rules, d.major, d.minor);
    }
    let policy = DevicePolicy::from_rules(&rules)?;
    let dir = CgroupDir::open_v2(&dir_path)?;
    let program = DeviceProgram::load(&policy.program(), PROGRAM_NAME).map_err(|source| {
        DevCgroupError::Program {
            cgroup: dir_path.clone(),
            source,
        }
    })?;
    Ok(PreparedGrant {
        step: Prepared::Unified { dir, program },
    })
}

impl PreparedGrant {
    /// The second half of [`grant`]: changes the cgroup.
    pub fn apply(self) -> Result<Granted, DevCgroupError> {
        match self.step {
            Prepared::Nothing => Ok(Granted::AlreadyAllowed),
            Prepared::Legacy { dir, lines } => {
                dir.write_lines("devices.allow", &lines)?;
                info!(
                    "allowed {} in the device cgroup {}",
                    lines.join(", "),
                    dir.path().display()
                );
                Ok(Granted::Appended {
                    cgroup: dir.path().to_path_buf(),
                })
            }
            Prepared::Unified { dir, program } => {
                let cgroup = dir.path().to_path_buf();
                match put_in_place(&dir, &program, false)? {
                    Some(old) => {
                        let new = program.id()?;
                        info!(
                            "replaced device program {old} of {} with {new}",
                            cgroup.display()
                        );
                        Ok(Granted::Replaced { cgroup, old, new })
                    }
                    None => {
                        info!(
                            "{} has no device program: its devices are not filtered there",
                            cgroup.display()
                        );
                        Ok(Granted::Unfiltered { cgroup })
                    }
                }
            }
        }
    }
}

/// Puts `program` in the place of the one device program attached to `dir`, atomically:
/// with `BPF_F_REPLACE` where programs are attached with `BPF_F_ALLOW_MULTI` (runc,
/// systemd), by attaching with the cgroup's own flags where it allows one program (the
/// kernel then swaps it). With none attached, attaches it only when `attach_if_none`.
/// Returns the id of the program replaced.
fn put_in_place(
    dir: &CgroupDir,
    program: &DeviceProgram,
    attach_if_none: bool,
) -> Result<Option<u32>, DevCgroupError> {
    let attached = dir.device_programs()?;
    match attached.ids.as_slice() {
        [] => {
            if attach_if_none {
                dir.attach_device_program(program, sys::Attach::Multi)?;
            }
            Ok(None)
        }
        [old] => {
            let old_program = DeviceProgram::from_id(*old)?;
            let how = if attached.multi() {
                sys::Attach::Replace(&old_program)
            } else {
                sys::Attach::Single {
                    flags: attached.flags,
                }
            };
            dir.attach_device_program(program, how)?;
            Ok(Some(*old))
        }
        ids => Err(DevCgroupError::SeveralPrograms {
            cgroup: dir.path().to_path_buf(),
            ids: ids.to_vec(),
        }),
    }
}

/// How [`attach_policy`] attaches a program: as runc does, or as other cgroup managers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachHow {
    /// runc's way: in the place of the one program attached (as [`grant`] does), or with
    /// `BPF_F_ALLOW_MULTI` when there is none; several attached is an error.
    Replace,
    /// Next to the programs attached (`BPF_F_ALLOW_MULTI`), as a second manager would.
    Add,
    /// As the cgroup's only program (no flags), replacing one attached the same way.
    Exclusive,
}

/// Makes `policy` a device policy of the cgroup v2 directory `cgroup_dir`, the way a
/// runtime does; returns the new program's id. nvc only ever uses [`grant`]; this is the
/// runtime's side, for tests and tools.
pub fn attach_policy(
    cgroup_dir: &Path,
    policy: &DevicePolicy,
    how: AttachHow,
) -> Result<u32, DevCgroupError> {
    let dir = CgroupDir::open_v2(cgroup_dir)?;
    let program = DeviceProgram::load(&policy.program(), PROGRAM_NAME).map_err(|source| {
        DevCgroupError::Program {
            cgroup: cgroup_dir.to_path_buf(),
            source,
        }
    })?;
    match how {
        AttachHow::Replace => {
            put_in_place(&dir, &program, true)?;
        }
        AttachHow::Add => dir.attach_device_program(&program, sys::Attach::Multi)?,
        AttachHow::Exclusive => {
            dir.attach_device_program(&program, sys::Attach::Single { flags: 0 })?
        }
    }
    Ok(program.id()?)
}

/// The ids of the device programs attached to the cgroup v2 directory `cgroup_dir` itself.
pub fn device_programs(cgroup_dir: &Path) -> Result<Vec<u32>, DevCgroupError> {
    Ok(CgroupDir::open_v2(cgroup_dir)?.device_programs()?.ids)
}

/// The container's cgroup path in `/proc/<pid>/cgroup` text: the `0::` line of the unified
/// hierarchy, or the v1 line whose controllers include `devices`.
fn cgroup_path(table: &str, unified: bool) -> Option<&str> {
    table.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let wanted = if unified {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "devices")
        };
        wanted.then_some(path)
    })
}

/// `base` joined with the absolute cgroup path `relative`, when that stays below `base`.
fn below(base: &Path, relative: &str) -> Option<PathBuf> {
    let rel = Path::new(relative).strip_prefix("/").ok()?;
    let mut out = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvc_sys::cgroup::Op;
    use serde_json::json;

    const C: DeviceKind = DeviceKind::Char;
    const B: DeviceKind = DeviceKind::Block;

    /// Parses `verb type major:minor access` lines, e.g. `allow c 1:* rw`.
    fn rules(text: &str) -> Vec<Rule> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (major, minor) = f[2].split_once(':').unwrap();
                let num = |n: &str| (n != "*").then(|| n.parse().unwrap());
                Rule {
                    allow: f[0] == "allow",
                    kind: match f[1] {
                        "a" => RuleKind::All,
                        "c" => RuleKind::Device(C),
                        _ => RuleKind::Device(B),
                    },
                    major: num(major),
                    minor: num(minor),
                    access: Access::parse(f[3]).unwrap(),
                }
            })
            .collect()
    }

    fn acc(s: &str) -> Access {
        Access::parse(s).unwrap()
    }

    /// runc's rules for `runc spec`'s config.json: deny everything, then its defaults.
    fn runc_spec() -> Vec<Rule> {
        runtime_rules(&json!({"linux": {"resources": {"devices": [
            {"allow": false, "access": "rwm"}
        ]}}}))
        .unwrap()
    }

    #[test]
    fn access_letters() {
        for (text, bits, shown) in [
            ("", 0, ""),
            ("r", 2, "r"),
            ("w", 4, "w"),
            ("m", 1, "m"),
            ("mwr", 7, "rwm"),
            ("rr", 2, "r"),
            ("wm", 5, "wm"),
        ] {
            let a = Access::parse(text).unwrap();
            assert_eq!((a.bits(), a.to_string().as_str()), (bits, shown), "{text}");
        }
        for bad in ["x", "rwx", "R", " r"] {
            assert_eq!(Access::parse(bad), None, "{bad}");
        }
        assert!(Access::ALL.contains(Access::READ_WRITE));
        assert!(!Access::READ.contains(Access::READ_WRITE));
        assert!(Access::READ.contains(Access::NONE));
        assert!(Access::READ.intersects(Access::READ_WRITE));
        assert!(!Access::MKNOD.intersects(Access::READ_WRITE));
        assert_eq!(Access::ALL.without(Access::WRITE), acc("rm"));
    }

    #[test]
    fn spec_rules_read_as_runc_reads_them() {
        let spec = json!({"linux": {"resources": {"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 195, "minor": -1, "access": "rw"},
            {"allow": true, "type": "b", "major": 8, "minor": 0, "access": "r"},
            {"type": "c", "major": 1, "minor": 3, "access": "w"},
            {"allow": true, "type": "a", "major": null, "access": "m"},
        ]}}});
        let got: Vec<String> = spec_rules(&spec)
            .unwrap()
            .iter()
            .map(Rule::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "deny a *:* rwm",
                "allow c 195:* rw",
                "allow b 8:0 r",
                "deny c 1:3 w",
                "allow a *:* m"
            ]
        );
        assert!(spec_rules(&json!({})).unwrap().is_empty());
        assert!(spec_rules(&json!({"linux": {"resources": {}}}))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn invalid_spec_rules_name_the_field() {
        for (entry, field) in [
            (
                json!({"allow": true, "type": "p", "access": "rwm"}),
                "[0].type",
            ),
            (
                json!({"allow": true, "type": "c", "access": ""}),
                "[0].access",
            ),
            (json!({"allow": true, "type": "c"}), "[0].access"),
            (json!({"allow": true, "access": "rwx"}), "[0].access"),
            (json!({"allow": "yes", "access": "r"}), "[0].allow"),
            (
                json!({"allow": true, "major": "195", "access": "r"}),
                "[0].major",
            ),
            (
                json!({"allow": true, "minor": 4294967296u64, "access": "r"}),
                "[0].minor",
            ),
            (
                json!({"allow": true, "major": 2147483648u64, "access": "r"}),
                "[0].major",
            ),
            (json!("c 1:3 rwm"), "[0]"),
        ] {
            let spec = json!({"linux": {"resources": {"devices": [entry]}}});
            let err = spec_rules(&spec).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("linux.resources.devices{field} is ")),
                "{err}"
            );
        }
        let err = spec_rules(&json!({"linux": {"resources": {"devices": {}}}})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "linux.resources.devices is {}, expected an array"
        );
    }

    #[test]
    fn runc_defaults_leave_out_what_linux_devices_lists() {
        let all: Vec<String> = runc_default_rules(&[])
            .iter()
            .map(Rule::to_string)
            .collect();
        assert_eq!(
            all,
            [
                "allow c *:* m",
                "allow b *:* m",
                "allow c 1:3 rwm",
                "allow c 1:8 rwm",
                "allow c 1:7 rwm",
                "allow c 5:0 rwm",
                "allow c 1:5 rwm",
                "allow c 1:9 rwm",
                "allow c 136:* rwm",
                "allow c 5:2 rwm",
                "allow c 10:200 rwm",
            ]
        );
        let spec = json!({"linux": {
            "devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}],
            "resources": {"devices": [{"allow": false, "access": "rwm"}]}
        }});
        let rules = runtime_rules(&spec).unwrap();
        assert_eq!(rules.len(), 1 + all.len() - 1);
        let policy = DevicePolicy::from_rules(&rules).unwrap();
        // The spec lists /dev/null without a rule for it: runc denies it, and so do we.
        assert!(!policy.permits(C, 1, 3, Access::READ));
        assert!(policy.permits(C, 1, 5, Access::READ));
    }

    /// (kind, major, minor, access, allowed).
    type Case = (DeviceKind, u32, u32, &'static str, bool);

    /// Rule lists and what they decide.
    fn decision_table() -> Vec<(Vec<Rule>, Vec<Case>)> {
        let mut granted = runc_spec();
        allow(&mut granted, 195, 0);
        allow(&mut granted, 195, 255);
        vec![
            (
                runc_spec(),
                vec![
                    (C, 1, 3, "rw", true),
                    (C, 1, 5, "r", true),
                    (C, 1, 7, "rwm", true),
                    (C, 1, 8, "rw", true),
                    (C, 1, 9, "r", true),
                    (C, 5, 0, "rw", true),
                    (C, 5, 2, "rw", true),
                    (C, 136, 7, "rw", true),
                    (C, 10, 200, "rw", true),
                    (C, 1, 4, "r", false),
                    (B, 1, 3, "r", false),
                    (C, 195, 0, "r", false),
                    (C, 195, 0, "w", false),
                    (C, 195, 0, "m", true),
                    (B, 8, 0, "m", true),
                    (B, 8, 0, "r", false),
                    (C, 10, 229, "rw", false),
                ],
            ),
            (
                granted,
                vec![
                    (C, 195, 0, "rw", true),
                    (C, 195, 0, "rwm", true),
                    (C, 195, 255, "r", true),
                    (C, 195, 1, "r", false),
                    (C, 195, 1, "m", true),
                    (B, 195, 0, "r", false),
                    (C, 1, 3, "rw", true),
                    (C, 196, 0, "r", false),
                ],
            ),
            (
                rules("allow a *:* rwm"),
                vec![(C, 195, 0, "rwm", true), (B, 8, 0, "rw", true)],
            ),
            // Docker's own list, then a --device-cgroup-rule with a wildcard.
            (
                rules(
                    "deny a *:* rwm
                     allow c *:* m
                     allow b *:* m
                     allow c 1:3 rwm
                     allow c 195:* rw",
                ),
                vec![
                    (C, 195, 7, "rw", true),
                    // Two exceptions cover it, none alone (the kernel never asks for
                    // rwm at once: mknod asks for m, open for r and w).
                    (C, 195, 7, "rwm", false),
                    (C, 195, 7, "r", true),
                    (C, 238, 0, "r", false),
                ],
            ),
            // Partial access; merging for the same pattern only.
            (
                rules(
                    "allow c 1:3 r
                     allow c 1:3 w
                     allow c 2:* r
                     allow c 2:3 w",
                ),
                vec![
                    (C, 1, 3, "rw", true),
                    (C, 1, 3, "m", false),
                    (C, 2, 3, "r", true),
                    (C, 2, 3, "w", true),
                    (C, 2, 3, "rw", false),
                    (C, 2, 4, "w", false),
                ],
            ),
            // Taking access back, and resets.
            (
                rules(
                    "allow c 1:3 rwm
                     deny c 1:3 w
                     deny c 9:9 rwm
                     allow c 4:4 rwm
                     deny a *:* r
                     allow c 5:5 r",
                ),
                vec![
                    (C, 4, 4, "r", false),
                    (C, 1, 3, "r", false),
                    (C, 5, 5, "r", true),
                    (C, 5, 5, "rw", false),
                ],
            ),
            (
                rules(
                    "allow c 1:3 rwm
                     deny c 1:3 w",
                ),
                vec![
                    (C, 1, 3, "r", true),
                    (C, 1, 3, "rm", true),
                    (C, 1, 3, "rw", false),
                ],
            ),
            // Allow-all with deny exceptions: any shared access denies.
            (
                rules(
                    "allow a *:* rwm
                     deny c 1:3 w
                     deny b *:* rwm
                     allow c 1:3 w
                     deny c 195:* rw",
                ),
                vec![
                    (C, 1, 3, "rw", true),
                    (C, 195, 3, "r", false),
                    (C, 195, 3, "rw", false),
                    (C, 195, 3, "m", true),
                    (B, 8, 0, "r", false),
                    (C, 2, 2, "rwm", true),
                ],
            ),
            // An `a` rule resets whatever its access says.
            (
                rules(
                    "allow c 1:3 rwm
                     allow a *:* r",
                ),
                vec![(C, 9, 9, "rwm", true)],
            ),
            (Vec::new(), vec![(C, 1, 3, "r", false)]),
        ]
    }

    #[test]
    fn policies_decide_as_runc_does() {
        for (rules, cases) in decision_table() {
            let policy = DevicePolicy::from_rules(&rules).unwrap();
            for (kind, major, minor, access, want) in cases {
                assert_eq!(
                    policy.permits(kind, major, minor, acc(access)),
                    want,
                    "{kind:?} {major}:{minor} {access} under {:?}",
                    rules.iter().map(Rule::to_string).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn policies_keep_exceptions_only() {
        let policy = DevicePolicy::from_rules(&runc_spec()).unwrap();
        assert!(!policy.default_allow());
        let shown: Vec<String> = policy.exceptions().iter().map(Rule::to_string).collect();
        assert_eq!(shown.len(), 11, "{shown:?}");
        assert!(shown.iter().all(|r| r.starts_with("allow ")), "{shown:?}");
        let policy = DevicePolicy::from_rules(&rules(
            "deny a *:* rwm
             allow c 1:3 rw
             allow c 1:3 m
             deny c 1:3 rwm",
        ))
        .unwrap();
        assert!(policy.exceptions().is_empty());
    }

    #[test]
    fn holes_in_wildcards_are_refused() {
        for text in [
            "allow c 1:* rwm
             deny c 1:3 r",
            "allow c *:3 rw
             deny c 1:3 w",
            "allow c *:* m
             deny c 1:3 m",
            "allow a *:* rwm
             deny c 195:* rwm
             allow c 195:0 rwm",
        ] {
            let err = DevicePolicy::from_rules(&rules(text)).unwrap_err();
            assert!(matches!(err, DevCgroupError::HolePunch { .. }), "{err}");
            assert!(err.to_string().contains("runc refuses this too"), "{err}");
        }
        // Disjoint access, or another kind, is no hole.
        for text in [
            "allow c *:* m
             deny c 1:3 rw",
            "allow b 1:* rwm
             deny c 1:3 rwm",
        ] {
            DevicePolicy::from_rules(&rules(text)).unwrap();
        }
        let big = Rule {
            major: Some(u32::MAX),
            ..Rule::allow_char(0, 0)
        };
        assert!(matches!(
            DevicePolicy::from_rules(&[big]),
            Err(DevCgroupError::NumberTooLarge { .. })
        ));
    }

    /// Runs a device program the way the kernel would, for the instructions it uses.
    fn run(program: &[Insn], kind: DeviceKind, major: u32, minor: u32, access: Access) -> u64 {
        let ctx = [
            (u32::from(access.bits()) << 16) | kind.bpf_type() as u32,
            major,
            minor,
        ];
        let mut r = [0u64; 11];
        let mut r1_is_ctx = true;
        let mut pc = 0usize;
        for _ in 0..100_000 {
            let insn = program[pc];
            let (d, s) = (usize::from(insn.dst()), usize::from(insn.src()));
            let imm = i64::from(insn.imm()) as u64;
            let jump = |taken: bool| {
                if taken {
                    usize::try_from(pc as i64 + 1 + i64::from(insn.off())).unwrap()
                } else {
                    pc + 1
                }
            };
            if d == 1
                && insn.op() != Some(Op::LoadWord)
                && !matches!(insn.op(), Some(Op::JeqImm | Op::JneImm | Op::JneReg))
            {
                r1_is_ctx = false;
            }
            pc = match insn.op().expect("an instruction the emitter makes") {
                Op::LoadWord => {
                    assert!(s == 1 && r1_is_ctx, "loads only from the context");
                    r[d] = u64::from(ctx[usize::try_from(insn.off() / 4).unwrap()]);
                    pc + 1
                }
                Op::MovImm => {
                    r[d] = u64::from(insn.imm() as u32);
                    pc + 1
                }
                Op::MovReg => {
                    r[d] = r[s] & 0xffff_ffff;
                    pc + 1
                }
                Op::AndImm => {
                    r[d] = (r[d] & 0xffff_ffff) & u64::from(insn.imm() as u32);
                    pc + 1
                }
                Op::RshImm => {
                    r[d] = (r[d] & 0xffff_ffff) >> insn.imm();
                    pc + 1
                }
                Op::JeqImm => jump(r[d] == imm),
                Op::JneImm => jump(r[d] != imm),
                Op::JneReg => jump(r[d] != r[s]),
                Op::Ja => jump(true),
                Op::Exit => return r[0],
            };
        }
        panic!("the program does not end");
    }

    #[test]
    fn programs_decide_as_their_policies() {
        let accesses: Vec<Access> = (0..8).map(Access).collect();
        for (rules, _) in decision_table() {
            let policy = DevicePolicy::from_rules(&rules).unwrap();
            let program = policy.program();
            assert!(program.len() < nvc_sys::cgroup::MAX_INSNS);
            assert_eq!(program.last(), Some(&Insn::exit()));
            for kind in [C, B] {
                for major in [0, 1, 2, 4, 5, 8, 9, 10, 136, 195, 238] {
                    for minor in [0, 1, 2, 3, 4, 5, 7, 8, 9, 200, 255] {
                        for &access in &accesses {
                            let want = policy.permits(kind, major, minor, access);
                            let got = run(&program, kind, major, minor, access);
                            assert_eq!(
                                got,
                                u64::from(want),
                                "{kind:?} {major}:{minor} {access} under {:?}",
                                policy.exceptions()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn proc_cgroup_lines() {
        let hybrid = "9:name=systemd:/docker/abc\n8:pids:/docker/abc\n5:cpu,devices:/docker/abc\n0::/system.slice/docker-abc.scope\n";
        assert_eq!(cgroup_path(hybrid, false), Some("/docker/abc"));
        assert_eq!(
            cgroup_path(hybrid, true),
            Some("/system.slice/docker-abc.scope")
        );
        let v2 = "0::/user.slice/a:b\n";
        assert_eq!(cgroup_path(v2, true), Some("/user.slice/a:b"));
        assert_eq!(cgroup_path(v2, false), None);
        assert_eq!(cgroup_path("4:devicesx:/x\n", false), None);
        assert_eq!(cgroup_path("", true), None);

        let base = Path::new("/sys/fs/cgroup");
        assert_eq!(
            below(base, "/a/./b"),
            Some(PathBuf::from("/sys/fs/cgroup/a/b"))
        );
        assert_eq!(below(base, "/"), Some(base.to_path_buf()));
        assert_eq!(below(base, "/../../etc"), None);
        assert_eq!(below(base, "/a/../../b"), None);
        assert_eq!(below(base, "a/b"), None);
    }
}
