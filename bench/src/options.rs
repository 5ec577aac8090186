//! The command line: `nvc-bench [--runs N] [--gpus 1,8,64] [--real] ...`.

use std::path::PathBuf;

/// Runs per configuration unless `--runs` says otherwise.
pub const DEFAULT_RUNS: usize = 30;
/// Runs per configuration with `--quick`.
pub const QUICK_RUNS: usize = 3;
/// Runs of each Podman configuration unless `--podman-runs` says otherwise: a Podman
/// start varies by tens of milliseconds, and its table compares rows milliseconds apart.
pub const DEFAULT_PODMAN_RUNS: usize = 100;
/// GPU counts of the fake trees in the scaling table.
pub const DEFAULT_GPUS: &[u32] = &[1, 8, 64];
/// Libraries in the large image.
pub const DEFAULT_LIBS: usize = 3000;
/// Libraries in the large image with `--quick`.
pub const QUICK_LIBS: usize = 300;
/// GPU containers of each batch of the parallel-start table.
pub const DEFAULT_PARALLEL: usize = 100;
/// GPU containers of each batch with `--quick`.
pub const QUICK_PARALLEL: usize = 20;
/// Containers of a batch running at once.
pub const DEFAULT_IN_FLIGHT: usize = 16;
/// Batches of each configuration in the parallel-start table (half of them first).
pub const DEFAULT_BATCHES: usize = 4;
/// Batches of each configuration with `--quick`.
pub const QUICK_BATCHES: usize = 2;

/// The usage text, printed for `--help` and after a usage error.
pub const USAGE: &str = "\
usage: nvc-bench [OPTIONS]    (as root: runc, device nodes, mounts)

Times container starts through runc and through nvc-runtime + nvc-hook, and the shim and
the hook alone; prints Markdown tables.

  --runs N             runs per configuration, alternated (default 30)
  --quick              3 runs each, a 300-library image, batches of 20: a smoke test
  --gpus LIST          GPU counts of the fake trees for the scaling table (default
                       1,8,64; `none` skips the table)
  --libs N             libraries in the large image (default 3000; 0 skips the table)
  --parallel N         containers of each batch of the parallel-start table: N GPU
                       containers through nvc against N through plain runc (default
                       100; 20 with --quick; 0 skips the table)
  --in-flight N        containers of a batch running at once (default 16)
  --batches N          batches of each configuration, alternating which goes first
                       (default 4; 2 with --quick)
  --real               the host's real driver (default driver roots) instead of a fake
                       tree; the scaling table is then skipped unless --gpus is given
  --rootfs DIR         copy this rootfs for every container instead of building the
                       test rootfs (which needs gcc and busybox-static); it must have
                       /bin/true, /bin/sh and an /etc/ld.so.cache
  --runc PATH          the runc to compare with and run under (default: from PATH)
  --out FILE           also write the tables to FILE
  --update-doc FILE    replace the text between <!-- bench:SECTION:start --> and
                       <!-- bench:SECTION:end --> in FILE with the tables
  --section NAME       the section for --update-doc (default dev)
  --work DIR           where images, rootfs copies and driver trees go: a new or empty
                       directory, kept afterwards (default: a temporary one, removed)
  --baseline DIR       also time this build against the nvc-runtime and nvc-hook in DIR
                       (another build's target/release), alternated in the same rounds
  --run-dir DIR        where bundles and runc's state go (default: /run or /dev/shm
                       when tmpfs, as engines keep them there; else the work directory)
  --state N,M          only the host's state over N and M container lifecycles
                       (nvc-host's records and locks, no runc): the poststop leg's time
                       and the state folder's size after each, which must stay flat
  --debug-log          nvc's log at debug level (info by default), so that every hook
                       run logs its phases in <work>/nvc.log with its bundle: to find
                       where time goes, not for the tables (logging costs time)
  --nvidia-toolkit DIR also time NVIDIA's Container Toolkit from DIR (bin/ with
                       nvidia-container-runtime, its hook, nvidia-ctk, nvidia-cdi-hook
                       and nvidia-container-cli; lib/ with libnvidia-container): its
                       legacy and jit-cdi modes in the start and parallel tables, and
                       `nvidia-ctk cdi generate` beside `nvc cdi generate`
  --podman PATH        also time Podman (this binary; conmon and netavark beside it or
                       on PATH): `podman run` through nvc's CDI spec, through nvc's
                       hooks.d file, and with neither, on its own storage in the work
                       directory
  --podman-runs N      runs of each Podman configuration, alternated (default 100; the
                       --runs of --quick with --quick)
  -h, --help           this text
";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Lifecycle counts of the state benchmark alone (`--state`); empty: the containers'.
    pub state: Vec<usize>,
    /// Timed runs per configuration, after the warm-up.
    pub runs: usize,
    /// GPU counts of the scaling table; empty skips it.
    pub gpus: Vec<u32>,
    /// Whether `--gpus` was given (in `--real` mode the table runs only then).
    pub gpus_given: bool,
    /// Libraries in the large image; 0 skips it.
    pub libs: usize,
    /// Containers of each parallel batch; 0 skips the table.
    pub parallel: usize,
    /// Containers of a batch running at once.
    pub in_flight: usize,
    /// Batches of each configuration.
    pub batches: usize,
    /// The host's real driver instead of a fake tree.
    pub real: bool,
    /// A rootfs to copy instead of building one.
    pub rootfs: Option<PathBuf>,
    /// The runc to use.
    pub runc: Option<PathBuf>,
    /// Where to write the tables too.
    pub out: Option<PathBuf>,
    /// The Markdown file whose section is replaced.
    pub update_doc: Option<PathBuf>,
    /// The section name for `--update-doc`.
    pub section: String,
    /// The working directory; a temporary one when `None`.
    pub work: Option<PathBuf>,
    /// Where bundles and runc's state go; chosen when `None`.
    pub run_dir: Option<PathBuf>,
    /// `--quick` was given (fewer runs; shown in the output).
    pub quick: bool,
    /// Another build's folder to time against.
    pub baseline: Option<PathBuf>,
    /// nvc's log at debug level.
    pub debug_log: bool,
    /// NVIDIA's Container Toolkit to time beside nvc (`--nvidia-toolkit`).
    pub nvidia_toolkit: Option<PathBuf>,
    /// The podman to time nvc's CDI spec and hooks.d file through (`--podman`).
    pub podman: Option<PathBuf>,
    /// Runs of each Podman configuration (`--podman-runs`).
    pub podman_runs: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            state: Vec::new(),
            runs: DEFAULT_RUNS,
            gpus: DEFAULT_GPUS.to_vec(),
            gpus_given: false,
            libs: DEFAULT_LIBS,
            parallel: DEFAULT_PARALLEL,
            in_flight: DEFAULT_IN_FLIGHT,
            batches: DEFAULT_BATCHES,
            real: false,
            rootfs: None,
            runc: None,
            out: None,
            update_doc: None,
            section: "dev".to_string(),
            work: None,
            run_dir: None,
            quick: false,
            baseline: None,
            debug_log: false,
            nvidia_toolkit: None,
            podman: None,
            podman_runs: DEFAULT_PODMAN_RUNS,
        }
    }
}

/// What parsing the command line gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run the benchmark.
    Run(Box<Options>),
    /// Print [`USAGE`] and stop.
    Help,
}

/// Parses `args` (without the program name). An error is a one-line message.
pub fn parse<I, S>(args: I) -> Result<Parsed, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut o = Options::default();
    let mut runs: Option<usize> = None;
    let mut libs: Option<usize> = None;
    let mut parallel: Option<usize> = None;
    let mut batches: Option<usize> = None;
    let mut podman_runs: Option<usize> = None;
    let mut it = args.into_iter().map(Into::into);
    while let Some(arg) = it.next() {
        // `--flag=value` and `--flag value` both work.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--runs" => runs = Some(positive(&flag, &value()?)?),
            "--libs" => libs = Some(number(&flag, &value()?)?),
            "--parallel" => parallel = Some(number(&flag, &value()?)?),
            "--in-flight" => o.in_flight = positive(&flag, &value()?)?,
            "--batches" => batches = Some(positive(&flag, &value()?)?),
            "--gpus" => {
                o.gpus = gpu_list(&value()?)?;
                o.gpus_given = true;
            }
            "--real" => o.real = true,
            "--quick" => o.quick = true,
            "--debug-log" => o.debug_log = true,
            "--rootfs" => o.rootfs = Some(PathBuf::from(value()?)),
            "--runc" => o.runc = Some(PathBuf::from(value()?)),
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "--update-doc" => o.update_doc = Some(PathBuf::from(value()?)),
            "--section" => {
                let name = value()?;
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(format!("--section {name:?}: use letters, digits, - and _"));
                }
                o.section = name;
            }
            "--work" => o.work = Some(PathBuf::from(value()?)),
            "--run-dir" => o.run_dir = Some(PathBuf::from(value()?)),
            "--baseline" => o.baseline = Some(PathBuf::from(value()?)),
            "--nvidia-toolkit" => o.nvidia_toolkit = Some(PathBuf::from(value()?)),
            "--podman" => o.podman = Some(PathBuf::from(value()?)),
            "--podman-runs" => podman_runs = Some(positive(&flag, &value()?)?),
            "--state" => {
                o.state = value()?
                    .split(',')
                    .map(|n| positive(&flag, n))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    o.runs = runs.unwrap_or(if o.quick { QUICK_RUNS } else { DEFAULT_RUNS });
    o.podman_runs = podman_runs.unwrap_or(if o.quick {
        QUICK_RUNS
    } else {
        DEFAULT_PODMAN_RUNS
    });
    o.libs = libs.unwrap_or(if o.quick { QUICK_LIBS } else { DEFAULT_LIBS });
    o.parallel = parallel.unwrap_or(if o.quick {
        QUICK_PARALLEL
    } else {
        DEFAULT_PARALLEL
    });
    o.batches = batches.unwrap_or(if o.quick {
        QUICK_BATCHES
    } else {
        DEFAULT_BATCHES
    });
    Ok(Parsed::Run(Box::new(o)))
}

fn number(flag: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{flag} {text:?}: not a whole number"))
}

fn positive(flag: &str, text: &str) -> Result<usize, String> {
    match number(flag, text)? {
        0 => Err(format!("{flag} must be at least 1")),
        n => Ok(n),
    }
}

/// `1,8,64` → `[1, 8, 64]`; `none` or empty → `[]`.
fn gpu_list(text: &str) -> Result<Vec<u32>, String> {
    if text.is_empty() || text == "none" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|part| {
            let n: u32 = part
                .trim()
                .parse()
                .map_err(|_| format!("--gpus: {part:?} is not a number"))?;
            // Minors 0..=253 are free for GPUs; 254 and 255 are taken.
            if n == 0 || n > nvc_tests::MAX_GPU_MINOR + 1 {
                return Err(format!(
                    "--gpus: {n} is out of range (1 to {})",
                    nvc_tests::MAX_GPU_MINOR + 1
                ));
            }
            Ok(n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().copied()) {
            Ok(Parsed::Run(o)) => *o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_flags() {
        assert_eq!(run(&[]), Options::default());
        let o = run(&[
            "--runs",
            "40",
            "--gpus=2,4",
            "--real",
            "--runc",
            "/x/runc",
            "--out",
            "t.md",
            "--update-doc",
            "docs/performance.md",
            "--section",
            "gpu",
        ]);
        assert_eq!(o.runs, 40);
        assert_eq!(o.gpus, [2, 4]);
        assert!(o.gpus_given && o.real);
        assert_eq!(o.runc, Some(PathBuf::from("/x/runc")));
        assert_eq!(o.section, "gpu");
        assert_eq!(
            run(&["--baseline", "/old"]).baseline,
            Some(PathBuf::from("/old"))
        );
        let c = run(&["--nvidia-toolkit", "/nct/upstream", "--podman=/p/podman"]);
        assert_eq!(c.nvidia_toolkit, Some(PathBuf::from("/nct/upstream")));
        assert_eq!(c.podman, Some(PathBuf::from("/p/podman")));
        assert_eq!(c.podman_runs, DEFAULT_PODMAN_RUNS);
        assert_eq!(run(&["--podman-runs", "7", "--quick"]).podman_runs, 7);
        let q = run(&["--quick"]);
        assert_eq!((q.runs, q.libs), (QUICK_RUNS, QUICK_LIBS));
        assert_eq!(q.podman_runs, QUICK_RUNS);
        assert_eq!((q.parallel, q.batches), (QUICK_PARALLEL, QUICK_BATCHES));
        let p = run(&[
            "--parallel",
            "50",
            "--in-flight=8",
            "--batches",
            "6",
            "--quick",
        ]);
        assert_eq!((p.parallel, p.in_flight, p.batches), (50, 8, 6));
        assert_eq!(run(&["--parallel", "0"]).parallel, 0);
        // An explicit count wins over --quick's, in either order.
        assert_eq!(run(&["--runs", "5", "--quick"]).runs, 5);
        assert!(run(&["--gpus", "none"]).gpus.is_empty());
        assert_eq!(parse(["--help"]), Ok(Parsed::Help));
    }

    #[test]
    fn errors() {
        for bad in [
            &["--runs"][..],
            &["--runs", "0"],
            &["--runs", "x"],
            &["--gpus", "1,,2"],
            &["--gpus", "255"],
            &["--section", "a b"],
            &["--in-flight", "0"],
            &["--batches", "0"],
            &["--nvidia-toolkit"],
            &["--podman"],
            &["--bogus"],
        ] {
            assert!(parse(bad.iter().copied()).is_err(), "{bad:?}");
        }
    }
}
