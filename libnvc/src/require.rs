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

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::version::{BadVersion, Version};

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

/// One comparison, such as `cuda>=12.0` or `brand=tesla`. Built only by [`parse`], so
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

const OPERATORS: &str = "=, ==, !=, <, <=, >, >=";
const KEYS: &str = "cuda, driver, arch or brand";

/// A `NVIDIA_REQUIRE_*` value that does not parse; each names the variable and the
/// constraint at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequireError {
    /// No operator, as in `cuda`.
    #[error("{variable}: {constraint:?} has no operator (expected one of {OPERATORS})")]
    NoOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
    },
    /// Nothing before the operator, as in `>=12`.
    #[error("{variable}: {constraint:?} has no key before the operator (expected {KEYS})")]
    NoKey {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
    },
    /// A key that is not `cuda`, `driver`, `arch` or `brand`.
    #[error("{variable}: unknown key {key:?} in {constraint:?} (expected {KEYS})")]
    UnknownKey {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The key as written.
        key: String,
    },
    /// An operator that is not one of `=`, `==`, `!=`, `<`, `<=`, `>`, `>=`.
    #[error("{variable}: unknown operator {op:?} in {constraint:?} (expected one of {OPERATORS})")]
    UnknownOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// Nothing after the operator, as in `cuda>=`.
    #[error("{variable}: {constraint:?} has no value after {op:?}")]
    NoValue {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// A `cuda`, `driver` or `arch` value that is not a version.
    #[error("{variable}: bad {key} version in {constraint:?}")]
    BadVersion {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The key whose value is bad.
        key: Key,
        /// Why the value is not a version.
        #[source]
        source: BadVersion,
    },
    /// A brand compared with something other than `=` or `!=`.
    #[error("{variable}: brands cannot be compared with {op:?} in {constraint:?} (use = or !=)")]
    BrandOperator {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The operator as written.
        op: String,
    },
    /// A brand with characters no brand name has.
    #[error(
        "{variable}: bad brand {brand:?} in {constraint:?} (expected letters, digits, _ or -)"
    )]
    BadBrand {
        /// The variable.
        variable: String,
        /// The constraint as written.
        constraint: String,
        /// The brand as written.
        brand: String,
    },
}

/// Parses the value of the `NVIDIA_REQUIRE_*` variable named `variable`.
pub fn parse(variable: &str, value: &str) -> Result<Requirement, RequireError> {
    let mut alternatives = Vec::new();
    for item in value.split_whitespace() {
        let alternative = item
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| parse_constraint(variable, c))
            .collect::<Result<Vec<_>, _>>()?;
        if !alternative.is_empty() {
            alternatives.push(alternative);
        }
    }
    Ok(Requirement {
        variable: variable.to_string(),
        alternatives,
    })
}

fn parse_constraint(variable: &str, text: &str) -> Result<Constraint, RequireError> {
    let variable = variable.to_string();
    let constraint = text.to_string();
    let is_op = |c: char| matches!(c, '=' | '!' | '<' | '>');
    let Some(op_start) = text.find(is_op) else {
        return Err(RequireError::NoOperator {
            variable,
            constraint,
        });
    };
    let (key_text, rest) = text.split_at(op_start);
    let op_len = rest.find(|c| !is_op(c)).unwrap_or(rest.len());
    let (op_text, value) = rest.split_at(op_len);
    if key_text.is_empty() {
        return Err(RequireError::NoKey {
            variable,
            constraint,
        });
    }
    let Some(key) = Key::from_name(key_text) else {
        return Err(RequireError::UnknownKey {
            variable,
            constraint,
            key: key_text.to_string(),
        });
    };
    let Some(op) = Op::from_symbol(op_text) else {
        return Err(RequireError::UnknownOperator {
            variable,
            constraint,
            op: op_text.to_string(),
        });
    };
    if value.is_empty() {
        return Err(RequireError::NoValue {
            variable,
            constraint,
            op: op_text.to_string(),
        });
    }
    let version = |value: &str| {
        value
            .parse::<Version>()
            .map_err(|source| RequireError::BadVersion {
                variable: variable.clone(),
                constraint: constraint.clone(),
                key,
                source,
            })
    };
    let operand = match key {
        Key::Cuda => Operand::Cuda(version(value)?),
        Key::Driver => Operand::Driver(version(value)?),
        Key::Arch => Operand::Arch(version(value)?),
        Key::Brand => {
            if !matches!(op, Op::Eq | Op::Ne) {
                return Err(RequireError::BrandOperator {
                    variable,
                    constraint,
                    op: op_text.to_string(),
                });
            }
            let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if !value.chars().all(valid) {
                return Err(RequireError::BadBrand {
                    variable,
                    constraint,
                    brand: value.to_string(),
                });
            }
            Operand::Brand(value.to_ascii_lowercase())
        }
    };
    Ok(Constraint { op, operand })
}

/// A fact about the host or the GPUs that a constraint can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fact {
    /// [`Facts::cuda_version`].
    CudaVersion,
    /// [`Facts::driver_version`].
    DriverVersion,
    /// [`Facts::gpus`].
    Gpus,
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fact::CudaVersion => "cuda version",
            Fact::DriverVersion => "driver version",
            Fact::Gpus => "architecture and brand of the selected GPUs",
        })
    }
}

/// A fact that could not be determined, such as the CUDA version when libcuda does not
/// load.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot tell the {fact}")]
pub struct FactError {
    /// Which fact.
    pub fact: Fact,
    /// Why it could not be determined. Shared so one failure can be reported by every
    /// requirement that needed the fact.
    #[source]
    pub source: Arc<dyn StdError + Send + Sync>,
}

impl FactError {
    /// A failure to determine `fact`, caused by `source` (an error, or a message).
    pub fn new(fact: Fact, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        FactError {
            fact,
            source: Arc::from(source.into()),
        }
    }
}

/// What one selected GPU offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// The compute capability, such as `9.0`.
    pub arch: Version,
    /// The brand, such as `nvidia`, `tesla` or `geforce`; compared case-insensitively.
    pub brand: String,
}

/// What the host and the selected GPUs offer. [`check`] calls each method only when a
/// constraint needs it and at most once per call, so implementations need not cache.
pub trait Facts {
    /// The highest CUDA version the driver supports; needs loading libcuda.
    fn cuda_version(&self) -> Result<Version, FactError>;
    /// The kernel driver's version.
    fn driver_version(&self) -> Result<Version, FactError>;
    /// One entry per selected GPU, in selection order (error messages call entry `n`
    /// "GPU n"); empty when the container asked for no GPU. Needs NVML.
    fn gpus(&self) -> Result<Vec<GpuFacts>, FactError>;
}

/// What was found where a constraint wanted something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The CUDA version the driver supports.
    Cuda(Version),
    /// The driver version.
    Driver(Version),
    /// The compute capability of the `gpu`-th selected GPU.
    Arch {
        /// Its position in [`Facts::gpus`].
        gpu: usize,
        /// Its compute capability.
        arch: Version,
    },
    /// The brand of the `gpu`-th selected GPU.
    Brand {
        /// Its position in [`Facts::gpus`].
        gpu: usize,
        /// Its brand, lowercase.
        brand: String,
    },
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Cuda(v) => write!(f, "driver provides {v}"),
            Found::Driver(v) => write!(f, "driver is {v}"),
            Found::Arch { gpu, arch } => write!(f, "GPU {gpu} has {arch}"),
            Found::Brand { gpu, brand } => write!(f, "GPU {gpu} is {brand}"),
        }
    }
}

/// A constraint that does not hold, and what was found instead. Shows as
/// `requires cuda>=14.0, driver provides 13.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// The constraint.
    pub constraint: Constraint,
    /// What was found.
    pub found: Found,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "requires {}, {}", self.constraint, self.found)
    }
}

fn join_shortfalls(shortfalls: &[Shortfall]) -> String {
    shortfalls
        .iter()
        .map(Shortfall::to_string)
        .collect::<Vec<_>>()
        .join("; or ")
}

/// Why a container's requirements are not met.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unmet {
    /// No alternative of the requirement holds.
    #[error("unsatisfied requirement {requirement}: {}", join_shortfalls(.shortfalls))]
    Unsatisfied {
        /// The requirement.
        requirement: Requirement,
        /// For each alternative, in order, the first constraint found not to hold; when
        /// the requirement names GPU facts, these are for the first GPU none holds for.
        shortfalls: Vec<Shortfall>,
    },
    /// No alternative is known to hold and a fact one of them needs is unknown.
    #[error("cannot check requirement {requirement}")]
    Undetermined {
        /// The requirement.
        requirement: Requirement,
        /// The first fact that could not be determined.
        #[source]
        source: FactError,
    },
}

/// Checks that every requirement holds.
///
/// A requirement naming `arch` or `brand` must hold for each selected GPU on its own
/// (some alternative holds with that GPU's facts), as libnvidia-container checks it;
/// with no GPU selected, `arch` and `brand` constraints hold. Alternatives naming only
/// host facts are tried first, so the GPUs are not asked about when one of them holds.
pub fn check(reqs: &[Requirement], facts: &dyn Facts) -> Result<(), Unmet> {
    let memo = Memo {
        facts,
        cuda: OnceCell::new(),
        driver: OnceCell::new(),
        gpus: OnceCell::new(),
    };
    reqs.iter().try_for_each(|req| check_one(req, &memo))
}

/// The facts fetched so far during one [`check`].
struct Memo<'a> {
    facts: &'a dyn Facts,
    cuda: OnceCell<Result<Version, FactError>>,
    driver: OnceCell<Result<Version, FactError>>,
    gpus: OnceCell<Result<Vec<GpuFacts>, FactError>>,
}

impl Memo<'_> {
    fn cuda(&self) -> Result<&Version, &FactError> {
        self.cuda.get_or_init(|| self.facts.cuda_version()).as_ref()
    }

    fn driver(&self) -> Result<&Version, &FactError> {
        self.driver
            .get_or_init(|| self.facts.driver_version())
            .as_ref()
    }

    fn gpus(&self) -> Result<&[GpuFacts], &FactError> {
        match self.gpus.get_or_init(|| self.facts.gpus()) {
            Ok(gpus) => Ok(gpus),
            Err(e) => Err(e),
        }
    }
}

enum Outcome {
    Holds,
    Fails(Shortfall),
    Unknown(FactError),
}

/// Evaluates one constraint; with `gpu` `None`, GPU constraints hold.
fn eval_constraint(c: &Constraint, memo: &Memo<'_>, gpu: Option<(usize, &GpuFacts)>) -> Outcome {
    let outcome = |holds: bool, found: Found| {
        if holds {
            Outcome::Holds
        } else {
            Outcome::Fails(Shortfall {
                constraint: c.clone(),
                found,
            })
        }
    };
    match (&c.operand, gpu) {
        (Operand::Cuda(want), _) => match memo.cuda() {
            Ok(have) => outcome(c.op.holds(have.cmp(want)), Found::Cuda(have.clone())),
            Err(e) => Outcome::Unknown(e.clone()),
        },
        (Operand::Driver(want), _) => match memo.driver() {
            Ok(have) => outcome(c.op.holds(have.cmp(want)), Found::Driver(have.clone())),
            Err(e) => Outcome::Unknown(e.clone()),
        },
        (Operand::Arch(_) | Operand::Brand(_), None) => Outcome::Holds,
        (Operand::Arch(want), Some((i, g))) => outcome(
            c.op.holds(g.arch.cmp(want)),
            Found::Arch {
                gpu: i,
                arch: g.arch.clone(),
            },
        ),
        (Operand::Brand(want), Some((i, g))) => {
            let have = g.brand.to_ascii_lowercase();
            let holds = c.op.holds(have.as_str().cmp(want.as_str()));
            outcome(
                holds,
                Found::Brand {
                    gpu: i,
                    brand: have,
                },
            )
        }
    }
}

/// Evaluates an alternative in order. It stops at the first constraint that fails, but
/// goes on past an unknown fact: a later failure still settles the alternative.
fn eval_alternative(
    alternative: &[Constraint],
    memo: &Memo<'_>,
    gpu: Option<(usize, &GpuFacts)>,
) -> Outcome {
    let mut unknown = None;
    for c in alternative {
        match eval_constraint(c, memo, gpu) {
            Outcome::Holds => {}
            Outcome::Fails(s) => return Outcome::Fails(s),
            Outcome::Unknown(e) => {
                unknown.get_or_insert(e);
            }
        }
    }
    unknown.map_or(Outcome::Holds, Outcome::Unknown)
}

/// Failures gathered while evaluating one requirement.
#[derive(Default)]
struct Misses {
    shortfalls: Vec<(usize, Shortfall)>,
    unknown: Option<FactError>,
}

impl Misses {
    /// Records `outcome` of alternative `index`; true when it holds.
    fn record(&mut self, index: usize, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Holds => return true,
            Outcome::Fails(s) => self.shortfalls.push((index, s)),
            Outcome::Unknown(e) => {
                self.unknown.get_or_insert(e);
            }
        }
        false
    }

    fn into_unmet(mut self, req: &Requirement) -> Unmet {
        let requirement = req.clone();
        match self.unknown {
            Some(source) => Unmet::Undetermined {
                requirement,
                source,
            },
            None => {
                self.shortfalls.sort_by_key(|(i, _)| *i);
                Unmet::Unsatisfied {
                    requirement,
                    shortfalls: self.shortfalls.into_iter().map(|(_, s)| s).collect(),
                }
            }
        }
    }
}

fn check_one(req: &Requirement, memo: &Memo<'_>) -> Result<(), Unmet> {
    if req.alternatives.is_empty() {
        return Ok(());
    }
    let per_gpu = |alt: &[Constraint]| alt.iter().any(|c| c.key().is_per_gpu());
    let mut misses = Misses::default();
    for (i, alt) in req.alternatives.iter().enumerate() {
        if !per_gpu(alt) && misses.record(i, eval_alternative(alt, memo, None)) {
            return Ok(());
        }
    }
    let gpu_alts: Vec<(usize, &[Constraint])> = req
        .alternatives
        .iter()
        .enumerate()
        .filter(|(_, alt)| per_gpu(alt))
        .map(|(i, alt)| (i, alt.as_slice()))
        .collect();
    if gpu_alts.is_empty() {
        return Err(misses.into_unmet(req));
    }
    let gpus = match memo.gpus() {
        Ok(gpus) => gpus,
        Err(e) => {
            misses.unknown.get_or_insert_with(|| e.clone());
            return Err(misses.into_unmet(req));
        }
    };
    if gpus.is_empty() {
        for &(i, alt) in &gpu_alts {
            if misses.record(i, eval_alternative(alt, memo, None)) {
                return Ok(());
            }
        }
        return Err(misses.into_unmet(req));
    }
    for (g, gpu) in gpus.iter().enumerate() {
        let mut gpu_misses = Misses::default();
        let held = gpu_alts
            .iter()
            .any(|&(i, alt)| gpu_misses.record(i, eval_alternative(alt, memo, Some((g, gpu)))));
        if !held {
            misses.shortfalls.extend(gpu_misses.shortfalls);
            if let Some(e) = gpu_misses.unknown {
                misses.unknown.get_or_insert(e);
            }
            return Err(misses.into_unmet(req));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const VAR: &str = "NVIDIA_REQUIRE_CUDA";

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    use crate::report::error_chain as chain;

    /// Fake facts: `None` makes the fact unknown; counts every call.
    struct Fake {
        cuda: Option<&'static str>,
        driver: Option<&'static str>,
        gpus: Option<Vec<(&'static str, &'static str)>>,
        calls: [Cell<u32>; 3],
    }

    impl Fake {
        fn new(
            cuda: &'static str,
            driver: &'static str,
            gpus: &[(&'static str, &'static str)],
        ) -> Self {
            Fake {
                cuda: Some(cuda),
                driver: Some(driver),
                gpus: Some(gpus.to_vec()),
                calls: Default::default(),
            }
        }

        fn calls(&self) -> [u32; 3] {
            [
                self.calls[0].get(),
                self.calls[1].get(),
                self.calls[2].get(),
            ]
        }
    }

    impl Facts for Fake {
        fn cuda_version(&self) -> Result<Version, FactError> {
            self.calls[0].set(self.calls[0].get() + 1);
            self.cuda
                .map(v)
                .ok_or_else(|| FactError::new(Fact::CudaVersion, "libcuda.so.1 not found"))
        }
        fn driver_version(&self) -> Result<Version, FactError> {
            self.calls[1].set(self.calls[1].get() + 1);
            self.driver
                .map(v)
                .ok_or_else(|| FactError::new(Fact::DriverVersion, "no /proc/driver/nvidia"))
        }
        fn gpus(&self) -> Result<Vec<GpuFacts>, FactError> {
            self.calls[2].set(self.calls[2].get() + 1);
            let gpus = self
                .gpus
                .as_ref()
                .ok_or_else(|| FactError::new(Fact::Gpus, "nvml: driver not loaded"))?;
            Ok(gpus
                .iter()
                .map(|(arch, brand)| GpuFacts {
                    arch: v(arch),
                    brand: brand.to_string(),
                })
                .collect())
        }
    }

    /// A Facts whose gpus() must never be called.
    struct NoGpus(Fake);

    impl Facts for NoGpus {
        fn cuda_version(&self) -> Result<Version, FactError> {
            self.0.cuda_version()
        }
        fn driver_version(&self) -> Result<Version, FactError> {
            self.0.driver_version()
        }
        fn gpus(&self) -> Result<Vec<GpuFacts>, FactError> {
            panic!("gpus() called for a requirement that names no GPU fact")
        }
    }

    fn check_str(value: &str, facts: &dyn Facts) -> Result<(), String> {
        let req = parse(VAR, value).unwrap();
        check(&[req], facts).map_err(|e| chain(&e))
    }

    #[test]
    fn parses_and_displays() {
        let cases: &[(&str, &str)] = &[
            ("cuda>=12.0", "cuda>=12.0"),
            ("cuda==12.0", "cuda=12.0"),
            ("cuda=12.0", "cuda=12.0"),
            ("driver!=535.1", "driver!=535.1"),
            ("arch<9.0", "arch<9.0"),
            ("arch<=9.0", "arch<=9.0"),
            ("driver>535", "driver>535"),
            ("brand=Tesla", "brand=tesla"),
            ("BRAND!=geforce", "brand!=geforce"),
            ("Cuda>=12", "cuda>=12"),
            (
                "cuda>=12.0 brand=tesla,driver>=535,driver<536",
                "cuda>=12.0 brand=tesla,driver>=535,driver<536",
            ),
            (
                "\t  cuda>=12.0   \t brand=tesla,driver>=535\n ",
                "cuda>=12.0 brand=tesla,driver>=535",
            ),
            ("cuda>=12.0,", "cuda>=12.0"),
            (",cuda>=12.0,,driver>=1", "cuda>=12.0,driver>=1"),
            (" , ", ""),
            ("", ""),
            ("brand=quadro_rtx", "brand=quadro_rtx"),
            ("brand=nvidia-rtx", "brand=nvidia-rtx"),
        ];
        for (input, want) in cases {
            let req = parse(VAR, input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(req.to_string(), format!("{VAR}=\"{want}\""), "{input:?}");
        }
    }

    #[test]
    fn parses_structure() {
        let req = parse(VAR, "cuda>=12.0 brand=tesla,driver>=535,driver<536").unwrap();
        assert_eq!(req.variable, VAR);
        assert_eq!(req.alternatives.len(), 2);
        assert_eq!(req.alternatives[1].len(), 3);
        let c = &req.alternatives[0][0];
        assert_eq!((c.key(), c.op()), (Key::Cuda, Op::Ge));
        assert_eq!(c.version(), Some(&v("12.0")));
        assert_eq!(c.brand(), None);
        let b = &req.alternatives[1][0];
        assert_eq!(
            (b.key(), b.op(), b.brand()),
            (Key::Brand, Op::Eq, Some("tesla"))
        );
        assert_eq!(b.version(), None);
    }

    #[test]
    fn rejects_malformed_constraints() {
        // (input, variant check, text the message must contain)
        let cases: &[(&str, &str)] = &[
            ("cuda", "\"cuda\" has no operator"),
            ("cuda>=", "\"cuda>=\" has no value after \">=\""),
            (">=12", "\">=12\" has no key"),
            ("cuda>>12", "unknown operator \">>\" in \"cuda>>12\""),
            ("cuda=>12", "unknown operator \"=>\""),
            ("cuda!12", "unknown operator \"!\""),
            ("cuda<>12", "unknown operator \"<>\""),
            ("cuda===12", "unknown operator \"===\""),
            ("foo>=1", "unknown key \"foo\" in \"foo>=1\""),
            ("cudaa>=1", "unknown key \"cudaa\""),
            (
                "brand>nvidia",
                "brands cannot be compared with \">\" in \"brand>nvidia\"",
            ),
            ("brand>=nvidia", "with \">=\""),
            ("brand<nvidia", "with \"<\""),
            ("brand<=nvidia", "with \"<=\""),
            ("brand=tes.la", "bad brand \"tes.la\""),
            (
                "cuda>=abc",
                "bad cuda version in \"cuda>=abc\": \"abc\" is not a version",
            ),
            (
                "driver<535.x",
                "bad driver version in \"driver<535.x\": \"535.x\"",
            ),
            ("arch=9.", "bad arch version in \"arch=9.\""),
            ("cuda>=12<13", "bad cuda version in \"cuda>=12<13\""),
            ("cuda>=12.0 driver", "\"driver\" has no operator"),
            ("cuda>=12.0,foo=1 driver>=1", "unknown key \"foo\""),
        ];
        for (input, want) in cases {
            let err = parse(VAR, input).expect_err(input);
            let msg = chain(&err);
            assert!(msg.starts_with("NVIDIA_REQUIRE_CUDA: "), "{input:?}: {msg}");
            assert!(msg.contains(want), "{input:?}: {msg:?} lacks {want:?}");
        }
    }

    #[test]
    fn malformed_variants() {
        let kind = |s: &str| match parse(VAR, s).unwrap_err() {
            RequireError::NoOperator { .. } => "no-op",
            RequireError::NoKey { .. } => "no-key",
            RequireError::UnknownKey { .. } => "key",
            RequireError::UnknownOperator { .. } => "op",
            RequireError::NoValue { .. } => "no-value",
            RequireError::BadVersion { .. } => "version",
            RequireError::BrandOperator { .. } => "brand-op",
            RequireError::BadBrand { .. } => "brand",
        };
        assert_eq!(kind("cuda"), "no-op");
        assert_eq!(kind("cuda>="), "no-value");
        assert_eq!(kind(">=12"), "no-key");
        assert_eq!(kind("cuda>>12"), "op");
        assert_eq!(kind("foo>=1"), "key");
        assert_eq!(kind("brand>nvidia"), "brand-op");
        assert_eq!(kind("cuda>=abc"), "version");
        assert_eq!(kind("brand=a/b"), "brand");
    }

    #[test]
    fn every_operator_for_every_key() {
        // cuda 12.4, driver 550.54.15, one GPU arch 9.0 brand tesla.
        let facts = || Fake::new("12.4", "550.54.15", &[("9.0", "Tesla")]);
        let cases: &[(&str, bool)] = &[
            ("cuda=12.4", true),
            ("cuda==12.4.0", true),
            ("cuda=12.3", false),
            ("cuda!=12.3", true),
            ("cuda!=12.4", false),
            ("cuda<12.5", true),
            ("cuda<12.4", false),
            ("cuda<=12.4", true),
            ("cuda<=12.3", false),
            ("cuda>12.3", true),
            ("cuda>12.4", false),
            ("cuda>=12.4", true),
            ("cuda>=12.10", false),
            ("driver=550.54.15", true),
            ("driver=550.54", false),
            ("driver!=550.54", true),
            ("driver!=550.54.15", false),
            ("driver<551", true),
            ("driver<550.54.15", false),
            ("driver<=550.54.15", true),
            ("driver<=550.9", false),
            ("driver>550.9", true),
            ("driver>550.54.15", false),
            ("driver>=535", true),
            ("driver>=550.100", false),
            ("arch=9.0", true),
            ("arch=9", true),
            ("arch=8.0", false),
            ("arch!=8.0", true),
            ("arch!=9.0", false),
            ("arch<10.0", true),
            ("arch<9.0", false),
            ("arch<=9.0", true),
            ("arch<=8.9", false),
            ("arch>8.9", true),
            ("arch>9.0", false),
            ("arch>=9.0", true),
            ("arch>=10.0", false),
            ("brand=tesla", true),
            ("brand=TESLA", true),
            ("brand=geforce", false),
            ("brand!=geforce", true),
            ("brand!=tesla", false),
        ];
        for (input, want) in cases {
            let got = check_str(input, &facts());
            assert_eq!(got.is_ok(), *want, "{input:?}: {got:?}");
        }
    }

    #[test]
    fn alternatives_and_conjunctions() {
        let cases: &[(&str, bool)] = &[
            ("cuda>=12.0 brand=tesla,driver>=535,driver<536", true),
            ("cuda>=13.0 brand=tesla,driver>=550,driver<551", true),
            ("cuda>=13.0 brand=tesla,driver>=535,driver<536", false),
            ("cuda>=13.0 brand=geforce,driver>=550", false),
            ("cuda>=13.0 driver>=999 arch>=9.0", true),
            ("cuda>=12.0,driver>=551", false),
            ("cuda>=12.0,driver>=550,arch=9.0,brand=tesla", true),
            ("driver>=999 cuda>=99 arch>=99", false),
        ];
        for (input, want) in cases {
            let got = check_str(input, &Fake::new("12.4", "550.54.15", &[("9.0", "tesla")]));
            assert_eq!(got.is_ok(), *want, "{input:?}: {got:?}");
        }
    }

    #[test]
    fn several_variables_must_all_hold() {
        let facts = Fake::new("12.4", "550.54.15", &[("9.0", "tesla")]);
        let ok = [
            parse(VAR, "cuda>=12.0").unwrap(),
            parse("NVIDIA_REQUIRE_ARCH", "arch>=8.0").unwrap(),
        ];
        assert!(check(&ok, &facts).is_ok());
        let bad = [
            parse(VAR, "cuda>=12.0").unwrap(),
            parse("NVIDIA_REQUIRE_DRIVER", "driver>=560").unwrap(),
            parse("NVIDIA_REQUIRE_ARCH", "arch>=8.0").unwrap(),
        ];
        let err = check(&bad, &facts).unwrap_err().to_string();
        assert_eq!(
            err,
            "unsatisfied requirement NVIDIA_REQUIRE_DRIVER=\"driver>=560\": requires driver>=560, driver is 550.54.15"
        );
        assert!(check(&[], &facts).is_ok());
    }

    #[test]
    fn messages_name_the_requirement_and_why() {
        let facts = || {
            Fake::new(
                "13.0",
                "580.65.06",
                &[("9.0", "nvidia"), ("10.0", "geforce")],
            )
        };
        let cases: &[(&str, &str)] = &[
            (
                "cuda>=14.0",
                "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"cuda>=14.0\": requires cuda>=14.0, driver provides 13.0",
            ),
            (
                "arch>=10.0",
                "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"arch>=10.0\": requires arch>=10.0, GPU 0 has 9.0",
            ),
            (
                "cuda>=14.0  brand=tesla,driver>=535 driver>=999",
                "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"cuda>=14.0 brand=tesla,driver>=535 driver>=999\": \
                 requires cuda>=14.0, driver provides 13.0; or requires brand=tesla, GPU 0 is nvidia; \
                 or requires driver>=999, driver is 580.65.06",
            ),
            (
                "brand=nvidia,driver>=580 arch>=9.0,driver>=999",
                "unsatisfied requirement NVIDIA_REQUIRE_CUDA=\"brand=nvidia,driver>=580 arch>=9.0,driver>=999\": \
                 requires brand=nvidia, GPU 1 is geforce; or requires driver>=999, driver is 580.65.06",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(check_str(input, &facts()).unwrap_err(), *want, "{input:?}");
        }
    }

    #[test]
    fn every_gpu_must_satisfy_the_requirement() {
        let two = || Fake::new("12.4", "550.54.15", &[("8.0", "tesla"), ("9.0", "tesla")]);
        assert!(check_str("arch>=8.0", &two()).is_ok());
        assert!(check_str("arch>=9.0", &two()).is_err());
        // libnvidia-container checks each GPU on its own: different GPUs may satisfy
        // different alternatives.
        assert!(check_str("arch=8.0 arch=9.0", &two()).is_ok());
        assert!(check_str("brand=tesla,arch=8.0 cuda>=99", &two()).is_err());
        assert!(check_str("brand=tesla,arch=8.0 cuda>=12", &two()).is_ok());
    }

    #[test]
    fn gpu_constraints_hold_without_gpus() {
        let none = || Fake::new("12.4", "550.54.15", &[]);
        assert!(check_str("arch>=99.0", &none()).is_ok());
        assert!(check_str("brand=tesla", &none()).is_ok());
        assert!(check_str("brand=tesla,driver>=999", &none()).is_err());
        let err = check_str("cuda>=99 brand=tesla,driver>=999", &none()).unwrap_err();
        assert!(err.ends_with("requires cuda>=99, driver provides 12.4; or requires driver>=999, driver is 550.54.15"), "{err}");
    }

    #[test]
    fn cuda_only_requirement_never_asks_for_gpus() {
        let facts = NoGpus(Fake::new("12.4", "550.54.15", &[]));
        assert!(check_str("cuda>=12.0", &facts).is_ok());
        assert!(check_str("cuda>=13.0", &facts).is_err());
        assert!(check_str("cuda>=13.0 driver>=550", &facts).is_ok());
        // a host-only alternative that holds spares the GPU query
        assert!(check_str("brand=tesla,driver>=535 cuda>=12.0", &facts).is_ok());
        assert_eq!(facts.0.calls()[2], 0);
    }

    #[test]
    fn facts_are_fetched_lazily_and_once() {
        let facts = Fake::new("12.4", "550.54.15", &[("9.0", "tesla"), ("9.0", "tesla")]);
        let reqs = [
            parse(VAR, "driver>=535").unwrap(),
            parse("NVIDIA_REQUIRE_A", "driver>=535,driver<999").unwrap(),
            parse("NVIDIA_REQUIRE_B", "driver>=999 brand=tesla").unwrap(),
            parse("NVIDIA_REQUIRE_C", "arch>=9.0,brand=tesla").unwrap(),
        ];
        check(&reqs, &facts).unwrap();
        assert_eq!(
            facts.calls(),
            [0, 1, 1],
            "cuda never named, driver and gpus once"
        );

        let facts = Fake::new("12.4", "550.54.15", &[]);
        check(
            &[
                parse(VAR, "cuda>=12 cuda>=11").unwrap(),
                parse("NVIDIA_REQUIRE_X", "cuda>=1").unwrap(),
            ],
            &facts,
        )
        .unwrap();
        assert_eq!(facts.calls(), [1, 0, 0]);
    }

    #[test]
    fn unknown_facts_are_their_own_error() {
        let mut facts = Fake::new("12.4", "550.54.15", &[("9.0", "tesla")]);
        facts.cuda = None;
        let req = parse(VAR, "cuda>=12.0").unwrap();
        let err = check(std::slice::from_ref(&req), &facts).unwrap_err();
        assert!(
            matches!(&err, Unmet::Undetermined { source, .. } if source.fact == Fact::CudaVersion)
        );
        assert_eq!(
            chain(&err),
            "cannot check requirement NVIDIA_REQUIRE_CUDA=\"cuda>=12.0\": cannot tell the cuda version: libcuda.so.1 not found"
        );
        // another alternative that holds settles it
        assert!(check_str("cuda>=12.0 driver>=535", &facts).is_ok());
        // a known failure in the same alternative settles it too
        let err = check_str("cuda>=12.0,driver>=999", &facts).unwrap_err();
        assert!(err.starts_with("unsatisfied requirement"), "{err}");
        // but an unknown alternative next to a failing one leaves the answer open
        let err = check_str("cuda>=12.0 driver>=999", &facts).unwrap_err();
        assert!(err.starts_with("cannot check requirement"), "{err}");

        let mut facts = Fake::new("12.4", "550.54.15", &[]);
        facts.gpus = None;
        let err = check_str("arch>=9.0", &facts).unwrap_err();
        assert!(err.ends_with("cannot tell the architecture and brand of the selected GPUs: nvml: driver not loaded"), "{err}");
        assert!(check_str("arch>=9.0 driver>=1", &facts).is_ok());
        assert_eq!(facts.calls(), [0, 1, 1]);

        let mut facts = Fake::new("12.4", "550.54.15", &[("9.0", "tesla")]);
        facts.driver = None;
        let err = check_str("arch>=9.0,driver>=535", &facts).unwrap_err();
        assert!(err.contains("cannot tell the driver version"), "{err}");
    }

    #[test]
    fn empty_requirement_holds() {
        let facts = NoGpus(Fake::new("1.0", "1", &[]));
        assert!(check(&[parse(VAR, "  ").unwrap()], &facts).is_ok());
        assert_eq!(facts.0.calls(), [0, 0, 0]);
    }
}
