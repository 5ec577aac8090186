//! The `NVIDIA_REQUIRE_*` constraint language ([`libnvc::require`]).
//!
//! The input's first line is a variable's value; each further line may set a fact the
//! requirement is checked against: `cuda <version>`, `driver <version>`,
//! `gpu <arch> <brand>` (one line per selected GPU), or `cuda ?`, `driver ?`, `gpus ?`
//! for a fact that cannot be determined. Other lines are ignored. Without them the
//! driver is 550.54.15 with CUDA 12.4 and no GPU is selected.
//!
//! Properties:
//! - no input makes [`parse`] or [`check`] panic;
//! - a parsed requirement shown with `Display` (`VAR="…"`) parses back to the same
//!   requirement, shown the same way: the normal form is stable;
//! - [`check`] asks for each fact at most once, and only for facts the requirement
//!   names;
//! - [`check`] agrees with a direct reading of the documented semantics, in three-valued
//!   logic (a constraint on an undetermined fact is unknown): each selected GPU must have
//!   an alternative whose constraints all hold for it (with no GPU selected, `arch` and
//!   `brand` constraints hold). True means `Ok`, false means an error, unknown means
//!   [`Unmet::Undetermined`], and with every fact known an error is always
//!   [`Unmet::Unsatisfied`].

use std::cell::Cell;
use std::cmp::Ordering;

use libnvc::require::{
    check as check_requirements, parse, Constraint, Fact, FactError, Facts, GpuFacts, Key,
    Requirement, Unmet,
};
use libnvc::version::Version;

const VARIABLE: &str = "NVIDIA_REQUIRE_CUDA";

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let text = crate::text(data);
    let (value, facts) = text.split_once('\n').unwrap_or((&text, ""));
    let Ok(requirement) = parse(VARIABLE, value) else {
        return;
    };

    let shown = requirement.to_string();
    let inner = shown
        .strip_prefix(VARIABLE)
        .and_then(|s| s.strip_prefix("=\""))
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{shown:?} is not VAR=\"…\""));
    let again = parse(VARIABLE, inner)
        .unwrap_or_else(|e| panic!("{value:?} shown as {shown:?} does not parse: {e}"));
    assert_eq!(
        again, requirement,
        "{value:?} shown as {shown:?} parses differently"
    );
    assert_eq!(
        again.to_string(),
        shown,
        "showing {shown:?} again changes it"
    );

    let facts = FakeFacts::parse(facts);
    let result = check_requirements(std::slice::from_ref(&requirement), &facts);
    let named = |key: Key| {
        requirement
            .alternatives
            .iter()
            .flatten()
            .any(|c| c.key() == key)
    };
    assert!(facts.cuda_calls.get() <= 1, "cuda version asked for twice");
    assert!(
        facts.driver_calls.get() <= 1,
        "driver version asked for twice"
    );
    assert!(facts.gpu_calls.get() <= 1, "GPU facts asked for twice");
    assert!(named(Key::Cuda) || facts.cuda_calls.get() == 0);
    assert!(named(Key::Driver) || facts.driver_calls.get() == 0);
    assert!(named(Key::Arch) || named(Key::Brand) || facts.gpu_calls.get() == 0);

    let expected = reference(&requirement, &facts);
    match (expected, &result) {
        (Truth::True, Ok(())) => {}
        (Truth::False, Err(Unmet::Unsatisfied { .. })) => {}
        (Truth::False, Err(Unmet::Undetermined { .. })) if !facts.all_known() => {}
        (Truth::Unknown, Err(Unmet::Undetermined { .. })) => {}
        (expected, got) => panic!(
            "{shown} with facts {facts:?}: the semantics say {expected:?}, check says {got:?}"
        ),
    }
    // Checking the same requirement twice, or twice in one call, gives the same answer.
    let twice = check_requirements(
        &[requirement.clone(), requirement.clone()],
        &FakeFacts::parse_again(&facts),
    );
    assert_eq!(twice.is_ok(), result.is_ok());
}

/// Three-valued truth, Kleene's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn from(b: bool) -> Truth {
        if b {
            Truth::True
        } else {
            Truth::False
        }
    }

    fn and(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::False, _) | (_, Truth::False) => Truth::False,
            (Truth::True, Truth::True) => Truth::True,
            _ => Truth::Unknown,
        }
    }

    fn or(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::True, _) | (_, Truth::True) => Truth::True,
            (Truth::False, Truth::False) => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

fn compare(found: Ordering, c: &Constraint) -> Truth {
    Truth::from(c.op().holds(found))
}

/// A constraint's truth for one GPU, or with no GPU selected (`None`).
fn constraint_truth(c: &Constraint, facts: &FakeFacts, gpu: Option<&GpuFacts>) -> Truth {
    let version = |have: &Option<Version>| match (have, c.version()) {
        (Some(have), Some(want)) => compare(have.cmp(want), c),
        (None, _) => Truth::Unknown,
        (Some(_), None) => panic!("{c} has no version"),
    };
    match (c.key(), gpu) {
        (Key::Cuda, _) => version(&facts.cuda),
        (Key::Driver, _) => version(&facts.driver),
        (Key::Arch | Key::Brand, None) => Truth::True,
        (Key::Arch, Some(g)) => version(&Some(g.arch.clone())),
        (Key::Brand, Some(g)) => {
            let want = c.brand().unwrap_or_else(|| panic!("{c} has no brand"));
            compare(g.brand.to_ascii_lowercase().as_str().cmp(want), c)
        }
    }
}

fn requirement_truth(req: &Requirement, facts: &FakeFacts, gpu: Option<&GpuFacts>) -> Truth {
    req.alternatives
        .iter()
        .fold(Truth::False, |any, alternative| {
            let all = alternative.iter().fold(Truth::True, |all, c| {
                all.and(constraint_truth(c, facts, gpu))
            });
            any.or(all)
        })
}

/// The documented semantics, read directly.
fn reference(req: &Requirement, facts: &FakeFacts) -> Truth {
    if req.alternatives.is_empty() {
        return Truth::True;
    }
    let names_gpus = req
        .alternatives
        .iter()
        .flatten()
        .any(|c| c.key().is_per_gpu());
    match &facts.gpus {
        // Unknown GPUs: the host-only alternatives may still decide.
        None if names_gpus => {
            let host_only = req
                .alternatives
                .iter()
                .filter(|alt| !alt.iter().any(|c| c.key().is_per_gpu()))
                .fold(Truth::False, |any, alt| {
                    any.or(alt.iter().fold(Truth::True, |all, c| {
                        all.and(constraint_truth(c, facts, None))
                    }))
                });
            host_only.or(Truth::Unknown)
        }
        None => requirement_truth(req, facts, None),
        Some(gpus) if gpus.is_empty() => requirement_truth(req, facts, None),
        Some(gpus) => gpus.iter().fold(Truth::True, |every, g| {
            every.and(requirement_truth(req, facts, Some(g)))
        }),
    }
}

/// Facts from the input's lines, counting how often each is asked for.
#[derive(Debug, Default)]
struct FakeFacts {
    cuda: Option<Version>,
    driver: Option<Version>,
    gpus: Option<Vec<GpuFacts>>,
    cuda_calls: Cell<u32>,
    driver_calls: Cell<u32>,
    gpu_calls: Cell<u32>,
}

impl FakeFacts {
    fn parse(text: &str) -> FakeFacts {
        let version = |s: &str| s.parse::<Version>().ok();
        let mut facts = FakeFacts {
            cuda: version("12.4"),
            driver: version("550.54.15"),
            gpus: Some(Vec::new()),
            ..FakeFacts::default()
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["cuda", "?"] => facts.cuda = None,
                ["driver", "?"] => facts.driver = None,
                ["gpus", "?"] => facts.gpus = None,
                ["cuda", v] => facts.cuda = version(v).or(facts.cuda),
                ["driver", v] => facts.driver = version(v).or(facts.driver),
                ["gpu", arch, brand] => {
                    if let (Some(arch), Some(gpus)) = (version(arch), facts.gpus.as_mut()) {
                        gpus.push(GpuFacts {
                            arch,
                            brand: brand.to_string(),
                        });
                    }
                }
                _ => {}
            }
        }
        facts
    }

    /// The same facts, with fresh counters.
    fn parse_again(&self) -> FakeFacts {
        FakeFacts {
            cuda: self.cuda.clone(),
            driver: self.driver.clone(),
            gpus: self.gpus.clone(),
            ..FakeFacts::default()
        }
    }

    fn all_known(&self) -> bool {
        self.cuda.is_some() && self.driver.is_some() && self.gpus.is_some()
    }
}

fn unknown(fact: Fact) -> FactError {
    FactError::new(fact, "not known to the fuzz input")
}

impl Facts for FakeFacts {
    fn cuda_version(&self) -> Result<Version, FactError> {
        self.cuda_calls.set(self.cuda_calls.get() + 1);
        self.cuda.clone().ok_or_else(|| unknown(Fact::CudaVersion))
    }

    fn driver_version(&self) -> Result<Version, FactError> {
        self.driver_calls.set(self.driver_calls.get() + 1);
        self.driver
            .clone()
            .ok_or_else(|| unknown(Fact::DriverVersion))
    }

    fn gpus(&self) -> Result<Vec<GpuFacts>, FactError> {
        self.gpu_calls.set(self.gpu_calls.get() + 1);
        self.gpus.clone().ok_or_else(|| unknown(Fact::Gpus))
    }
}
