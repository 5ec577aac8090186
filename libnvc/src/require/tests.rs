//! Tests of the constraint language: parsing, and checking against fake facts.

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
    assert!(
        err.ends_with(
            "requires cuda>=99, driver provides 12.4; or requires driver>=999, driver is 550.54.15"
        ),
        "{err}"
    );
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
    assert!(matches!(&err, Unmet::Undetermined { source, .. } if source.fact == Fact::CudaVersion));
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
    assert!(
        err.ends_with(
            "cannot tell the architecture and brand of the selected GPUs: nvml: driver not loaded"
        ),
        "{err}"
    );
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
