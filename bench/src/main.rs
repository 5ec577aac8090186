//! `nvc-bench`: how much nvc adds to a container's start, and where the time goes.
//!
//! Times `/bin/true` containers through plain runc and through `nvc-runtime` (which
//! injects `nvc-hook`), alternating configurations; then the shim and the hook alone,
//! their peak memory, fake trees of 1 to 64 GPUs, and an image with thousands of
//! libraries. Prints Markdown tables; see `docs/performance.md` and `scripts/bench.sh`.

mod error;
mod floor_plan;
mod host;
mod large_image;
mod measure;
mod options;
mod podman;
mod report;
mod runner;
mod state_bench;
mod stats;
mod suite;
mod toolkit;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::error::BenchError;
use crate::options::{Options, Parsed, USAGE};
use crate::runner::{Build, Programs};

fn main() -> ExitCode {
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if raw.first().is_some_and(|a| a == measure::CHILD_MODE) {
        return measure::child_main(&raw[1..]);
    }
    let options = match options::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(options)) => options,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("nvc-bench: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nnvc-bench: {}", error::chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options) -> Result<(), BenchError> {
    if !nvc_tests::is_root() {
        return Err(BenchError::NotRoot);
    }
    let temp;
    let work = match &options.work {
        Some(dir) => {
            // Trees and images are built under fixed names: a used directory would mix runs.
            if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
                return Err(BenchError::WorkNotEmpty { path: dir.clone() });
            }
            std::fs::create_dir_all(dir).map_err(BenchError::io("create directory", dir))?;
            std::path::absolute(dir).map_err(BenchError::io("make absolute", dir))?
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("nvc-bench.")
                .tempdir()
                .map_err(BenchError::io(
                    "create a directory in",
                    std::env::temp_dir(),
                ))?;
            temp.path().to_path_buf()
        }
    };
    if !options.state.is_empty() {
        print!("{}", state_bench::run(&work, &options.state)?);
        return Ok(());
    }
    let programs = programs(options)?;
    let report = suite::run(options, programs, &work)?;
    let text = report.render();
    print!("{text}");
    if let Some(out) = &options.out {
        std::fs::write(out, &text).map_err(BenchError::io("write", out))?;
    }
    if let Some(doc) = &options.update_doc {
        report::update_doc(doc, &options.section, &text)?;
        eprintln!(
            "nvc-bench: updated the {} section of {}",
            options.section,
            doc.display()
        );
    }
    Ok(())
}

/// The shim and hook next to this program (`target/<profile>/`), runc, and the no-op.
fn programs(options: &Options) -> Result<Programs, BenchError> {
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let sibling = |name: &'static str| {
        program_in(
            &here,
            name,
            ": build the workspace (`cargo build --release`) first",
        )
    };
    let runc = match &options.runc {
        Some(path) => path.clone(),
        None => find_runc().ok_or(BenchError::Missing {
            what: "runc",
            path: PathBuf::from("PATH"),
            hint: ": install it (`scripts/deps.sh runc`) or pass --runc",
        })?,
    };
    if !runc.is_file() {
        return Err(BenchError::Missing {
            what: "runc",
            path: runc,
            hint: "",
        });
    }
    let noop = PathBuf::from("/bin/true");
    if !noop.is_file() {
        return Err(BenchError::Missing {
            what: "the no-op runtime",
            path: noop,
            hint: "",
        });
    }
    let baseline = match &options.baseline {
        None => None,
        Some(dir) => {
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            let hint = ": --baseline names a folder with another build's programs";
            let program = |name: &'static str| program_in(&dir, name, hint);
            Some(Build {
                shim: program("nvc-runtime")?,
                hook: program("nvc-hook")?,
            })
        }
    };
    let podman = match &options.podman {
        None => None,
        Some(path) if path.is_file() => Some(std::path::absolute(path).unwrap_or(path.clone())),
        Some(path) => {
            return Err(BenchError::Missing {
                what: "podman",
                path: path.clone(),
                hint: "",
            })
        }
    };
    Ok(Programs {
        baseline,
        nvc: Some(here.join("nvc")).filter(|p| p.is_file()),
        toolkit: options
            .nvidia_toolkit
            .as_deref()
            .map(toolkit::Toolkit::find)
            .transpose()?,
        podman,
        shim: sibling("nvc-runtime")?,
        hook: sibling("nvc-hook")?,
        floor: sibling("nvc-floor")?,
        runc: std::path::absolute(&runc).unwrap_or(runc),
        noop,
    })
}

/// The program `name` in `dir`, or an error saying it is missing and `hint`.
fn program_in(dir: &Path, name: &'static str, hint: &'static str) -> Result<PathBuf, BenchError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(BenchError::Missing {
            what: name,
            path,
            hint,
        })
    }
}

/// runc from `PATH`, else the sbin folders.
fn find_runc() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join("runc"))
        .find(|p| p.is_file())
}
