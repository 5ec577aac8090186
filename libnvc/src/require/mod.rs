//! The `NVIDIA_REQUIRE_*` constraint language: what a container image needs from the
//! driver and the GPUs, such as `cuda>=12.0 brand=tesla,driver>=535,driver<536`.
//!
//! Within one variable, whitespace separates alternatives (any one may hold) and commas
//! join the constraints of one alternative (all must hold); every `NVIDIA_REQUIRE_*`
//! variable of a container must hold. Empty items are skipped, as libnvidia-container
//! does, so `cuda>=12.0,` is `cuda>=12.0`.
//!
//! [`check`] asks a [`Facts`] value only for what the constraints name, at most once
//! each: the CUDA version means loading libcuda and the GPUs' facts mean NVML.
//!
//! Split along its jobs: this file holds the language's terms ([`Key`], [`Op`],
//! [`Constraint`], [`Requirement`]); `parse.rs` reads a variable into a [`Requirement`]
//! ([`parse`](fn@parse), [`RequireError`]); `facts.rs` is what a check may ask of the host
//! ([`Facts`]); `eval.rs` checks requirements against them ([`check`], [`Unmet`]).

mod eval;
mod facts;
mod parse;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::fmt;

use crate::version::Version;

pub use eval::{check, Found, Shortfall, Unmet};
pub use facts::{Fact, FactError, Facts, GpuFacts};
pub use parse::{parse, RequireError};

/// What a constraint compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The highest CUDA version the driver supports (`cuDriverGetVersion`).
    Cuda,
    /// The kernel driver's version, such as `580.65.06`.
    Driver,
    /// A selected GPU's compute capability, such as `9.0`.
    Arch,
    /// A selected GPU's brand, such as `tesla` or `geforce`.
    Brand,
}

impl Key {
    /// Every key, in the order error messages list them.
    pub const ALL: [Key; 4] = [Key::Cuda, Key::Driver, Key::Arch, Key::Brand];

    /// The name used in the constraint language.
    pub fn name(self) -> &'static str {
        match self {
            Key::Cuda => "cuda",
            Key::Driver => "driver",
            Key::Arch => "arch",
            Key::Brand => "brand",
        }
    }

    /// Whether the key is a fact about each selected GPU rather than about the host.
    pub fn is_per_gpu(self) -> bool {
        matches!(self, Key::Arch | Key::Brand)
    }

    fn from_name(name: &str) -> Option<Key> {
        Key::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `=` (also written `==`).
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl Op {
    /// The operator as written in a constraint (`=` for both `=` and `==`).
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    /// Whether `found <op> wanted` holds, given `found.cmp(wanted)`.
    pub fn holds(self, found_vs_wanted: Ordering) -> bool {
        match self {
            Op::Eq => found_vs_wanted == Ordering::Equal,
            Op::Ne => found_vs_wanted != Ordering::Equal,
            Op::Lt => found_vs_wanted == Ordering::Less,
            Op::Le => found_vs_wanted != Ordering::Greater,
            Op::Gt => found_vs_wanted == Ordering::Greater,
            Op::Ge => found_vs_wanted != Ordering::Less,
        }
    }

    fn from_symbol(symbol: &str) -> Option<Op> {
        match symbol {
            "=" | "==" => Some(Op::Eq),
            "!=" => Some(Op::Ne),
            "<" => Some(Op::Lt),
            "<=" => Some(Op::Le),
            ">" => Some(Op::Gt),
            ">=" => Some(Op::Ge),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// One comparison, such as `cuda>=12.0` or `brand=tesla`. Built only by [`parse`](fn@parse), so
/// its value always fits its key and a brand is only compared with `=` or `!=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    op: Op,
    operand: Operand,
}

/// The key and the value a constraint compares with; one variant per key so a version
/// can never end up compared with a brand.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Operand {
    Cuda(Version),
    Driver(Version),
    Arch(Version),
    Brand(String),
}

impl Constraint {
    /// What the constraint compares.
    pub fn key(&self) -> Key {
        match self.operand {
            Operand::Cuda(_) => Key::Cuda,
            Operand::Driver(_) => Key::Driver,
            Operand::Arch(_) => Key::Arch,
            Operand::Brand(_) => Key::Brand,
        }
    }

    /// The operator.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The version compared with, for `cuda`, `driver` and `arch`.
    pub fn version(&self) -> Option<&Version> {
        match &self.operand {
            Operand::Cuda(v) | Operand::Driver(v) | Operand::Arch(v) => Some(v),
            Operand::Brand(_) => None,
        }
    }

    /// The brand compared with (lowercase), for `brand`.
    pub fn brand(&self) -> Option<&str> {
        match &self.operand {
            Operand::Brand(b) => Some(b),
            _ => None,
        }
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.key(), self.op)?;
        match &self.operand {
            Operand::Cuda(v) | Operand::Driver(v) | Operand::Arch(v) => write!(f, "{v}"),
            Operand::Brand(b) => f.write_str(b),
        }
    }
}

/// One `NVIDIA_REQUIRE_*` variable, parsed: it holds when any alternative holds, and an
/// alternative holds when all its constraints hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The variable it came from, such as `NVIDIA_REQUIRE_CUDA`; `CUDA_VERSION` for the
    /// requirement a legacy image implies.
    pub variable: String,
    /// The alternatives, each a list of constraints that must all hold. No alternative
    /// at all (an empty variable) requires nothing.
    pub alternatives: Vec<Vec<Constraint>>,
}

/// Shows `NVIDIA_REQUIRE_CUDA="cuda>=12.0 brand=tesla,driver>=535"`, normalised: one
/// space between alternatives, `==` written `=`, brands lowercase.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=\"", self.variable)?;
        for (i, alternative) in self.alternatives.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            for (j, constraint) in alternative.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{constraint}")?;
            }
        }
        f.write_str("\"")
    }
}
