//! The benchmark: which configurations are timed against which, and the tables made of
//! the results.
//!
//! This file prepares a run (the image, the driver trees, nvc's configurations) and
//! gathers the report; `tables.rs` times the configurations and makes a table of each
//! comparison; `targets.rs` judges the targets on what the tables found.

mod tables;
mod targets;

use std::path::{Path, PathBuf};

use nvc_config::DriverConfig;
use nvc_tests::{FakeDriverSpec, FakeGpu, RootfsSpec};

use crate::error::BenchError;
use crate::host::{self, Host};
use crate::options::Options;
use crate::report::{Report, Table};
use crate::runner::{Bench, Case, Configs, Image, Programs, Runtime};
use crate::stats::Samples;

use targets::targets;

/// GPUs of the fake tree behind the main tables: an 8-GPU server.
pub const MAIN_FAKE_GPUS: u32 = 8;

/// The request environments that are timed.
const NO_GPU: &[&str] = &[];
const UTILITY_COMPUTE: &[&str] = &[
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=utility,compute",
];
const ALL_CAPS: &[&str] = &[
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=all",
];

/// A driver the configurations point at.
struct Driver {
    /// For the environment table: `fake 999.88.77, 8 GPUs`.
    label: String,
    /// The roots in nvc's configuration.
    roots: DriverConfig,
}

/// What one run of the benchmark works with.
struct Suite<'a> {
    options: &'a Options,
    bench: Bench,
    work: &'a Path,
    /// The small image every table but the large-image one uses.
    image: Image,
    /// nvc's configurations for the main driver.
    configs: Configs,
    /// `nvc-floor`'s plan for the small image, all GPUs, `utility,compute`.
    floor_plan: PathBuf,
    /// The same with the floor program's undo (`"undo": true`).
    floor_undo_plan: PathBuf,
    warmup: usize,
}

/// The medians the targets are judged on, gathered from the tables.
#[derive(Default)]
struct Findings {
    /// Container starts to exit (`run`): runc, nvc without GPU, utility,compute, all
    /// capabilities.
    starts: Vec<Samples>,
    /// The same to the container's first instruction (`create` + `start`), then the
    /// floor program's without a GPU and with utility,compute.
    started: Vec<Samples>,
    /// The floor, the shim (no GPU, utility,compute, all), the hook (utility,compute, all),
    /// the floor program's hook.
    parts: Vec<Samples>,
    /// (GPUs, added ms) of the scaling table.
    scaling: Vec<(u32, f64)>,
    /// The same for the floor program.
    scaling_floor: Vec<(u32, f64)>,
    /// The parallel-start table's finding, when it ran.
    parallel: Option<ParallelFinding>,
}

/// What the parallel-start table found.
#[derive(Debug, Clone, Copy)]
struct ParallelFinding {
    /// Containers of a batch.
    count: usize,
    /// Running at once.
    in_flight: usize,
    /// The median ratio of a batch's wall time through nvc to plain runc's.
    ratio: f64,
    /// The same for Kubernetes' containers (no poststop hook).
    kubernetes_ratio: f64,
    /// The same through the floor program.
    floor_ratio: f64,
    /// The same through the floor program with its undo.
    floor_undo_ratio: f64,
}

/// Runs everything `options` asks for in `work` and returns the tables.
pub fn run(options: &Options, programs: Programs, work: &Path) -> Result<Report, BenchError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let runtime_parent = match &options.run_dir {
        Some(dir) => dir.clone(),
        None => ["/run", "/dev/shm"]
            .map(PathBuf::from)
            .into_iter()
            .find(|d| d.is_dir() && host::fs_type(&mountinfo, d) == "tmpfs")
            .unwrap_or_else(|| work.to_path_buf()),
    };
    let mut bench = Bench::new(work, &runtime_parent, programs)?;
    bench.debug_log = options.debug_log;
    let host = Host::probe(&bench.programs.runc);
    let load_before = host::load_average();

    eprintln!("nvc-bench: preparing in {}", work.display());
    let template = match &options.rootfs {
        Some(dir) => std::path::absolute(dir).map_err(BenchError::io("make absolute", dir))?,
        None => RootfsSpec::default().build(&work.join("rootfs"))?.path,
    };
    let driver = if options.real {
        real_driver()?
    } else {
        fake_driver(work, "main", MAIN_FAKE_GPUS)?
    };
    let configs = bench.configs("main", &driver.roots)?;
    let floor_plan =
        crate::floor_plan::write(&bench, "main", &configs.noop, &template, UTILITY_COMPUTE)?;
    let floor_undo_plan = crate::floor_plan::with_undo(&floor_plan)?;
    let suite = Suite {
        floor_plan,
        floor_undo_plan,
        options,
        bench,
        work,
        image: Image::copied(&template),
        configs,
        warmup: if options.quick { 1 } else { 2 },
    };

    let mut found = Findings::default();
    let mut report = Report::default();
    report.tables.push(suite.started(&mut found)?);
    report.tables.push(suite.containers(&mut found)?);
    report.tables.push(suite.parts(&mut found)?);
    if let Some(table) = suite.scaling(&mut found)? {
        report.tables.push(table);
    }
    if let Some(table) = suite.parallel_starts(&mut found)? {
        report.tables.push(table);
    }
    if let Some(table) = suite.large_image(&found)? {
        report.tables.push(table);
    }
    if let Some(table) = suite.baseline(&driver)? {
        report.tables.push(table);
    }
    report.tables.push(targets(&found));

    let mut env = environment(&host, &driver, options, suite.warmup);
    if options.parallel > 0 {
        env.row([
            "parallel starts".to_string(),
            format!(
                "batches of {} containers, {} in flight, {} of each configuration",
                options.parallel, options.in_flight, options.batches
            ),
        ]);
    }
    env.row([
        "nvc log",
        match options.debug_log {
            true => "debug level (--debug-log), to a file",
            false => "info level, to a file",
        },
    ]);
    let runtime_dir = suite.bench.runtime_dir();
    env.row([
        "bundles and runc state".to_string(),
        format!(
            "{} ({})",
            runtime_dir.display(),
            host::fs_type(&mountinfo, runtime_dir)
        ),
    ]);
    env.row([
        "images and rootfs copies".to_string(),
        format!(
            "{} ({}); creating a file there takes {}",
            work.display(),
            host::fs_type(&mountinfo, work),
            host::create_cost(work).map_or_else(
                || "?".to_string(),
                |d| format!("{:.0} µs", d.as_secs_f64() * 1e6)
            )
        ),
    ]);
    env.row([
        "load average (1, 5, 15 min)".to_string(),
        format!("{load_before} before, {} after", host::load_average()),
    ]);
    report.tables.insert(0, env);
    Ok(report)
}

impl Suite<'_> {
    /// Runs `cases` alternated, the configured number of times.
    fn alternate(&self, what: &str, cases: &[Case]) -> Result<Vec<Samples>, BenchError> {
        self.bench
            .alternate(what, cases, self.options.runs, self.warmup)
    }

    /// A `/bin/true` container of the small image, through `runtime`, asking for `env`.
    fn container(&self, runtime: Runtime, env: &[&str]) -> Case {
        Case::Container {
            runtime,
            rootfs: self.image.clone(),
            env: strings(env),
        }
    }

    /// A container of the small image with `env`, through `runtime`, to its start.
    fn started_case(&self, runtime: Runtime, env: &[&str]) -> Case {
        Case::Started {
            runtime,
            rootfs: self.image.clone(),
            env: strings(env),
        }
    }

    /// The hook alone on the small image, for the driver of `config`.
    fn hook(&self, config: &Path, env: &[&str]) -> Case {
        Case::Hook {
            program: None,
            floor_plan: None,
            config: config.to_path_buf(),
            rootfs: self.image.clone(),
            env: strings(env),
        }
    }

    /// Through the shim, to runc, for the main driver.
    fn nvc(&self) -> Runtime {
        Runtime::Nvc(self.configs.runc.clone())
    }
}

fn strings(env: &[&str]) -> Vec<String> {
    env.iter().map(|s| s.to_string()).collect()
}

fn environment(host: &Host, driver: &Driver, options: &Options, warmup: usize) -> Table {
    let mut t = Table::new("Environment", "", &["", ""]).text();
    t.row(["date", &host.date]);
    t.row(["CPU", &host.cpu]);
    t.row(["kernel", &host.kernel]);
    t.row(["runc", &host.runc]);
    t.row(["cgroup", &host.cgroup]);
    t.row(["driver", &driver.label]);
    if let Some(commit) = &host.commit {
        t.row(["nvc commit", commit]);
    }
    t.row([
        "runs".to_string(),
        format!(
            "{} per configuration{}, alternated, after {warmup} warm-up round{}",
            options.runs,
            if options.quick { " (--quick)" } else { "" },
            if warmup == 1 { "" } else { "s" }
        ),
    ]);
    t
}

/// A fake tree with `gpus` GPUs in `<work>/driver-<name>`.
fn fake_driver(work: &Path, name: &str, gpus: u32) -> Result<Driver, BenchError> {
    let dir: PathBuf = work.join(format!("driver-{name}"));
    std::fs::create_dir(&dir).map_err(BenchError::io("create directory", &dir))?;
    let spec = FakeDriverSpec {
        gpus: FakeGpu::fake_gpus(gpus),
        ..FakeDriverSpec::default()
    };
    let tree = spec.build(&dir)?;
    Ok(Driver {
        label: format!("fake {}, {gpus} GPUs", spec.version),
        roots: DriverConfig {
            root: tree.root,
            dev_root: tree.dev_root,
            proc_root: tree.proc_root,
        },
    })
}

/// The host's driver at the default roots.
fn real_driver() -> Result<Driver, BenchError> {
    let roots = DriverConfig::default();
    let found = libnvc::discover::discover(
        &libnvc::discover::DriverRoots::from_config(&roots),
        &nvc_host::probe::RealHost,
    )
    .map_err(BenchError::Discover)?;
    let model = found
        .gpus
        .first()
        .map(|g| format!(" × {}", g.model))
        .unwrap_or_default();
    Ok(Driver {
        label: format!(
            "real {}, {} GPU{}{model}",
            found.version,
            found.gpus.len(),
            if found.gpus.len() == 1 { "" } else { "s" }
        ),
        roots,
    })
}
