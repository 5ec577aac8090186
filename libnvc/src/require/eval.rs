//! Checking requirements against the [`Facts`] ([`check`]): each fact asked for at most
//! once, GPU constraints held by every selected GPU, and what did not hold said as an
//! [`Unmet`].

use std::cell::OnceCell;
use std::fmt;

use crate::version::Version;

use super::{Constraint, FactError, Facts, GpuFacts, Operand, Requirement};

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
