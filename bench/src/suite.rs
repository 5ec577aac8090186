//! The benchmark: which configurations are timed against which, and the tables made of
//! the results.
//!
//! This file prepares a run (the image, the driver trees, nvc's configurations) and
//! gathers the report; `tables.rs` times the configurations and makes a table of each
//! comparison; `targets.rs` judges the targets on what the tables found.

mod compare;
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
use crate::toolkit::{self, Mode};

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
    /// NVIDIA's Container Toolkit, when `--nvidia-toolkit` names it.
    toolkit: Option<ToolkitRuns>,
    /// The driver the main tables use.
    driver: Driver,
    warmup: usize,
}

/// NVIDIA's Container Toolkit as the tables run it.
struct ToolkitRuns {
    /// `nvidia-container-runtime`.
    runtime: PathBuf,
    /// Its version and libnvidia-container's, for the environment table.
    version: String,
    /// Its release (`1.20.0`), for the other tables' text.
    release: String,
    /// Its configuration for each mode, for the main driver.
    configs: Vec<(Mode, PathBuf)>,
    /// The modes whose GPU rows are timed: those whose containers got their GPUs in a
    /// check beforehand; none on a fake tree ([`toolkit::NO_FAKE_GPU`]).
    gpu_modes: Vec<Mode>,
    /// Why GPU rows are absent, where some are.
    absent: Option<String>,
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
    /// The Podman table's medians, when its CDI and hooks.d rows both ran.
    podman: Option<PodmanFinding>,
}

/// The Podman table's medians (ms, start to exit and removal).
#[derive(Debug, Clone, Copy)]
struct PodmanFinding {
    /// runc under Podman, no GPU.
    plain: f64,
    /// nvc's hooks.d file.
    hooks: f64,
    /// nvc's CDI spec.
    cdi: f64,
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
    let toolkit = match &bench.programs.toolkit {
        None => None,
        Some(tk) => {
            let ldconfig = toolkit::host_ldconfig();
            let setting = toolkit::Setting {
                driver_root: &driver.roots.root,
                runc: &bench.programs.runc,
                ldconfig: &ldconfig,
            };
            let configs = Mode::ALL
                .into_iter()
                .map(|mode| Ok((mode, tk.write_config(work, mode, &setting)?)))
                .collect::<Result<Vec<_>, BenchError>>()?;
            Some(ToolkitRuns {
                runtime: tk.runtime.clone(),
                version: tk.version(),
                release: tk.release(),
                configs,
                gpu_modes: Vec::new(),
                absent: None,
            })
        }
    };
    let mut suite = Suite {
        toolkit,
        floor_plan,
        floor_undo_plan,
        options,
        bench,
        work,
        image: Image::copied(&template),
        configs,
        driver,
        warmup: if options.quick { 1 } else { 2 },
    };

    suite.check_toolkit()?;

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
    if let Some(table) = suite.baseline(&suite.driver)? {
        report.tables.push(table);
    }
    if let Some(table) = suite.cdi_generate()? {
        report.tables.push(table);
    }
    if let Some(table) = suite.podman(&mut found)? {
        report.tables.push(table);
    }
    report.tables.push(targets(&found));

    let mut env = environment(&host, &suite.driver, options, suite.warmup);
    if let Some(tk) = &suite.toolkit {
        env.row([
            "NVIDIA Container Toolkit".to_string(),
            format!(
                "{}, in {} (`--nvidia-toolkit`)",
                tk.version,
                suite
                    .bench
                    .programs
                    .toolkit
                    .as_ref()
                    .map_or_else(String::new, |t| t.dir.display().to_string())
            ),
        ]);
    }
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

    /// Through NVIDIA's runtime in `mode`, to runc, for the main driver.
    fn toolkit_runtime(&self, tk: &ToolkitRuns, mode: Mode) -> Runtime {
        Runtime::Toolkit {
            runtime: tk.runtime.clone(),
            config: tk
                .configs
                .iter()
                .find(|(m, _)| *m == mode)
                .map(|(_, c)| c.clone())
                .unwrap_or_default(),
        }
    }

    /// Decides which of the Toolkit's modes get GPU rows: on the real driver, each whose
    /// container gets the GPUs in an untimed check; a mode that fails it is left out with
    /// the reason, so that a Toolkit that does not work on a host costs its rows, not the
    /// run. The check itself is checked first: plain runc's container has no GPU, nvc's
    /// has (a failure there is an error).
    fn check_toolkit(&mut self) -> Result<(), BenchError> {
        let Some(tk) = &self.toolkit else {
            return Ok(());
        };
        if !self.options.real {
            let absent = format!("on a fake driver tree, {}", toolkit::NO_FAKE_GPU);
            if let Some(tk) = &mut self.toolkit {
                tk.absent = Some(absent);
            }
            return Ok(());
        }
        if self
            .bench
            .sees_gpu(&Runtime::Runc, &self.image, &strings(NO_GPU))?
        {
            return Err(BenchError::Failed {
                command: "a container through plain runc".into(),
                status: "it has /dev/nvidiactl".into(),
                details: ": the image must have none, or the GPU check tells nothing".into(),
            });
        }
        self.check_gpu(&self.nvc(), "nvc-runtime")?;
        let mut modes = Vec::new();
        let mut failures = Vec::new();
        for mode in Mode::ALL {
            let what = format!("the Toolkit's {} mode", mode.name());
            match self.check_gpu(&self.toolkit_runtime(tk, mode), &what) {
                Ok(()) => modes.push(mode),
                Err(e) => {
                    eprintln!(
                        "nvc-bench: {}; its GPU rows are left out",
                        crate::error::chain(&e)
                    );
                    failures.push(format!("{}: {}", mode.name(), crate::error::chain(&e)));
                }
            }
        }
        if let Some(tk) = &mut self.toolkit {
            tk.gpu_modes = modes;
            if !failures.is_empty() {
                tk.absent = Some(format!(
                    "a mode whose container did not get its GPUs in a check beforehand is left \
                     out ({})",
                    failures.join("; ")
                ));
            }
        }
        Ok(())
    }

    /// The Toolkit's rows of the start table, with their names: each mode without a GPU
    /// request, and with all GPUs (utility,compute) for the modes that passed their
    /// check; none without the Toolkit.
    fn toolkit_rows(&self) -> Vec<(Runtime, &'static [&'static str], String)> {
        let Some(tk) = &self.toolkit else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for mode in Mode::ALL {
            let runtime = self.toolkit_runtime(tk, mode);
            rows.push((
                runtime.clone(),
                NO_GPU,
                format!("Toolkit {}, no GPU asked for", mode.name()),
            ));
            if tk.gpu_modes.contains(&mode) {
                rows.push((
                    runtime,
                    UTILITY_COMPUTE,
                    format!("Toolkit {}, all GPUs, utility,compute", mode.name()),
                ));
            }
        }
        rows
    }

    /// An error unless a container through `runtime` asking for all GPUs gets them.
    fn check_gpu(&self, runtime: &Runtime, what: &str) -> Result<(), BenchError> {
        match self
            .bench
            .sees_gpu(runtime, &self.image, &strings(UTILITY_COMPUTE))?
        {
            true => Ok(()),
            false => Err(BenchError::NoGpu {
                what: what.to_string(),
            }),
        }
    }

    /// One line on the Toolkit's rows of a table, for those that ask for a GPU: what was
    /// timed, and why what was not.
    fn toolkit_note(&self) -> String {
        let Some(tk) = &self.toolkit else {
            return "NVIDIA's Container Toolkit: not timed (no `--nvidia-toolkit DIR`).".into();
        };
        let absent = tk.absent.as_deref().unwrap_or_default();
        if tk.gpu_modes.is_empty() {
            return format!(
                "NVIDIA's Container Toolkit {}: no GPU rows: {absent}.",
                tk.release
            );
        }
        let mut note = format!(
            "NVIDIA's Container Toolkit {} (`--nvidia-toolkit`): `nvidia-container-runtime` \
             in its legacy mode (it adds `nvidia-container-runtime-hook` as a prestart hook, \
             which runs `nvidia-container-cli configure`) and its jit-cdi mode (it writes a \
             CDI spec for the request, through NVML, into the container's spec, with \
             `nvidia-cdi-hook` hooks), execing the same runc, its defaults otherwise (no log \
             file).",
            tk.release
        );
        if !absent.is_empty() {
            note.push_str(&format!(" But {absent}."));
        }
        note
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
