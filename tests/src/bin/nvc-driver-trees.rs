//! Writes the committed fake driver trees (`testdata/driver-roots/<scenario>`), or checks
//! that they are what the generator makes.
//!
//! `nvc-driver-trees [--check] [--out DIR] [SCENARIO...]`

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nvc_tests::trees::{self, Scenario, TreeEntry, SCENARIOS};
use nvc_tests::FakeError;

const USAGE: &str = "usage: nvc-driver-trees [--check] [--out DIR] [SCENARIO...]

Generates the fake driver trees tests read without root (driver 999.88.77) into DIR
(default: testdata/driver-roots of this workspace), replacing the scenarios' folders and
leaving everything else there alone; with --check, writes nothing and lists how DIR
differs. Without SCENARIO, every one. Needs gcc (and gcc -m32 for lib32) and, for
ldconfig -r, root or an unprivileged user namespace.";

struct Args {
    check: bool,
    out: PathBuf,
    scenarios: Vec<&'static Scenario>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        check: false,
        out: trees::committed_dir(),
        scenarios: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => parsed.check = true,
            "--out" => parsed.out = PathBuf::from(args.next().ok_or("--out needs a folder")?),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            name => {
                let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
                let scenario = trees::scenario(name).ok_or_else(|| {
                    format!("unknown scenario {name} (known: {})", known.join(", "))
                })?;
                parsed.scenarios.push(scenario);
            }
        }
    }
    if parsed.scenarios.is_empty() {
        parsed.scenarios = SCENARIOS.iter().collect();
    }
    Ok(parsed)
}

fn chain(e: &FakeError) -> String {
    libnvc::report::error_chain(e)
}

/// Files and bytes of a generated tree.
fn size(dir: &Path) -> Result<(usize, usize), FakeError> {
    let snapshot = trees::snapshot(dir)?;
    let bytes = snapshot
        .values()
        .map(|e| match e {
            TreeEntry::File { bytes, .. } => bytes.len(),
            _ => 0,
        })
        .sum();
    Ok((snapshot.len(), bytes))
}

/// Generates `scenario` next to `out`'s folder of it and swaps it in.
fn write(scenario: &Scenario, out: &Path) -> Result<(), FakeError> {
    let staging = tempfile::Builder::new()
        .prefix(".nvc-driver-trees.")
        .tempdir_in(out)
        .map_err(FakeError::io("create a directory in", out))?;
    let tree = trees::generate(scenario, staging.path())?;
    let dest = out.join(scenario.name);
    match std::fs::remove_dir_all(&dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(FakeError::io("remove", &dest)(e)),
    }
    std::fs::rename(&tree.dir, &dest).map_err(FakeError::io("rename into place", &dest))?;
    let (entries, bytes) = size(&dest)?;
    println!("{}: {entries} entries, {bytes} bytes", dest.display());
    Ok(())
}

/// Lists how `out`'s folder of `scenario` differs from a fresh one; whether it is the same.
fn check(scenario: &Scenario, out: &Path) -> Result<bool, FakeError> {
    let staging = tempfile::tempdir()
        .map_err(FakeError::io("create a directory in", std::env::temp_dir()))?;
    let tree = trees::generate(scenario, staging.path())?;
    let differences = trees::differences(&out.join(scenario.name), &tree.dir)?;
    for d in &differences {
        println!("{}: {d}", scenario.name);
    }
    Ok(differences.is_empty())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}\n\nScenarios:");
        for s in SCENARIOS {
            println!("  {}: {}", s.name, s.about);
        }
        return ExitCode::SUCCESS;
    }
    let args = match parse(&args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("nvc-driver-trees: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!(
            "nvc-driver-trees: cannot create {}: {e}",
            args.out.display()
        );
        return ExitCode::FAILURE;
    }
    let mut same = true;
    for scenario in &args.scenarios {
        if let Some(missing) = trees::missing_tools(scenario) {
            eprintln!(
                "nvc-driver-trees: cannot generate {}: {missing}",
                scenario.name
            );
            return ExitCode::FAILURE;
        }
        let result = if args.check {
            check(scenario, &args.out).map(|ok| same &= ok)
        } else {
            write(scenario, &args.out)
        };
        if let Err(e) = result {
            eprintln!("nvc-driver-trees: {}: {}", scenario.name, chain(&e));
            return ExitCode::FAILURE;
        }
    }
    if same {
        ExitCode::SUCCESS
    } else {
        eprintln!("nvc-driver-trees: the trees differ from what the generator makes; run nvc-driver-trees to rewrite them");
        ExitCode::FAILURE
    }
}
