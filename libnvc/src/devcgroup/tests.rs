#![allow(clippy::unwrap_used)]

use super::bpf::{Insn, Op};
use super::*;
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
        assert!(matches!(err, RuleError::HolePunch { .. }), "{err}");
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
        Err(RuleError::NumberTooLarge { .. })
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
        assert!(program.len() < super::bpf::MAX_INSNS);
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
