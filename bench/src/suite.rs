//! The benchmark: which configurations are timed against which, and the tables made of
//! the results.

use std::path::{Path, PathBuf};

use nvc_config::DriverConfig;
use nvc_tests::{FakeDriverSpec, FakeGpu, RootfsSpec};

use crate::error::BenchError;
use crate::host::{self, Host};
use crate::large_image;
use crate::options::Options;
use crate::report::{Report, Table};
use crate::runner::{Bench, Case, Configs, Image, Programs, Runtime};
use crate::stats::{mib, ms, signed_ms, Samples, Summary};

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

/// The targets of the issue.
const TARGET_ADDED_MS: f64 = 10.0;
const TARGET_NO_GPU_MS: f64 = 1.0;
const TARGET_HOOK_RSS_KIB: u64 = 16 * 1024;
const TARGET_SCALING: f64 = 2.0;

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
    warmup: usize,
}

/// The medians the targets are judged on, gathered from the tables.
#[derive(Default)]
struct Findings {
    /// Container starts: runc, nvc without GPU, utility,compute, all capabilities.
    starts: Vec<Samples>,
    /// The floor, the shim (no GPU, utility,compute, all), the hook (utility,compute, all).
    parts: Vec<Samples>,
    /// (GPUs, added ms) of the scaling table.
    scaling: Vec<(u32, f64)>,
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
    let bench = Bench::new(work, &runtime_parent, programs)?;
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
    let suite = Suite {
        options,
        bench,
        work,
        image: Image::copied(&template),
        configs,
        warmup: if options.quick { 1 } else { 2 },
    };

    let mut found = Findings::default();
    let mut report = Report::default();
    report.tables.push(suite.containers(&mut found)?);
    report.tables.push(suite.parts(&mut found)?);
    if let Some(table) = suite.scaling(&mut found)? {
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
    env.row(["nvc log", "info level, to a file"]);
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

    /// The hook alone on the small image, for the driver of `config`.
    fn hook(&self, config: &Path, env: &[&str]) -> Case {
        Case::Hook {
            program: None,
            config: config.to_path_buf(),
            rootfs: self.image.clone(),
            env: strings(env),
        }
    }

    /// Through the shim, to runc, for the main driver.
    fn nvc(&self) -> Runtime {
        Runtime::Nvc(self.configs.runc.clone())
    }

    /// 1. Whole containers through runc and through nvc.
    fn containers(&self, found: &mut Findings) -> Result<Table, BenchError> {
        found.starts = self.alternate(
            "container starts",
            &[
                self.container(Runtime::Runc, NO_GPU),
                self.container(self.nvc(), NO_GPU),
                self.container(self.nvc(), UTILITY_COMPUTE),
                self.container(self.nvc(), ALL_CAPS),
            ],
        )?;
        let starts = &found.starts;
        let (runc, runc_cpu) = (median(&starts[0]), starts[0].cpu_median_ms());
        let mut table = Table::new(
            "Container start to exit",
            "`<runtime> --root S run --bundle B ID` of `/bin/true`, timed around the whole \
             command, each run from a fresh copy of the image. Added: this median minus \
             plain runc's. CPU: user + system time of the command and what it reaped (the \
             container, the hook), median.",
            &[
                "configuration",
                "median ms",
                "min ms",
                "max ms",
                "added ms",
                "CPU ms",
                "added CPU ms",
            ],
        );
        let names = [
            "runc (no nvc)",
            "nvc-runtime, no GPU asked for",
            "nvc-runtime, all GPUs, utility,compute",
            "nvc-runtime, all GPUs, all capabilities",
        ];
        for (i, (name, samples)) in names.iter().zip(starts).enumerate() {
            let mut cells = summary_cells(name, samples);
            let cpu = samples.cpu_median_ms();
            if i == 0 {
                cells.extend([String::new(), ms(cpu), String::new()]);
            } else {
                cells.extend([
                    signed_ms(median(samples) - runc),
                    ms(cpu),
                    signed_ms(cpu - runc_cpu),
                ]);
            }
            table.row(cells);
        }
        Ok(table)
    }

    /// 2. The shim alone (with a no-op runtime) and the hook alone.
    fn parts(&self, found: &mut Findings) -> Result<Table, BenchError> {
        let noop = &self.configs.noop;
        found.parts = self.alternate(
            "shim and hook alone",
            &[
                self.bench.shim_case(None, UTILITY_COMPUTE)?,
                self.bench.shim_case(Some(noop), NO_GPU)?,
                self.bench.shim_case(Some(noop), UTILITY_COMPUTE)?,
                self.bench.shim_case(Some(noop), ALL_CAPS)?,
                self.hook(noop, UTILITY_COMPUTE),
                self.hook(noop, ALL_CAPS),
            ],
        )?;
        let mut table = Table::new(
            "The parts alone",
            "The shim: `nvc-runtime --root S create --bundle B ID` with `/bin/true` as its \
             runtime, so its spec edit and exec are timed without runc (the first row is \
             `/bin/true` run directly: the floor). The hook: `nvc-hook prestart` with the \
             OCI state on stdin, for a bundle the shim edited, in the mount namespace of a \
             helper process. CPU: user + system time, median. Peak RSS: the largest \
             `ru_maxrss` of the runs.",
            &[
                "part",
                "median ms",
                "min ms",
                "max ms",
                "CPU ms",
                "peak RSS",
            ],
        );
        let names = [
            "/bin/true alone (the floor)",
            "nvc-runtime create, no GPU asked for",
            "nvc-runtime create, all GPUs, utility,compute",
            "nvc-runtime create, all GPUs, all capabilities",
            "nvc-hook prestart, all GPUs, utility,compute",
            "nvc-hook prestart, all GPUs, all capabilities",
        ];
        for (name, samples) in names.iter().zip(&found.parts) {
            let mut cells = summary_cells(name, samples);
            cells.push(ms(samples.cpu_median_ms()));
            cells.push(samples.peak_rss_kib().map(mib).unwrap_or_default());
            table.row(cells);
        }
        Ok(table)
    }

    /// This build against another (`--baseline`), alternated in the same rounds, so that
    /// the machine's drift from minute to minute is the same for both; `None` without one.
    fn baseline(&self, driver: &Driver) -> Result<Option<Table>, BenchError> {
        let Some(base) = self.bench.programs.baseline.clone() else {
            return Ok(None);
        };
        let this = self
            .bench
            .plain_configs("this", &driver.roots, &self.bench.programs.hook)?;
        let theirs = self
            .bench
            .plain_configs("baseline", &driver.roots, &base.hook)?;
        let shim = |build: &Path, configs: &Configs| Runtime::Shim {
            shim: build.to_path_buf(),
            config: configs.runc.clone(),
        };
        let hook = |program: &Path, configs: &Configs| Case::Hook {
            program: Some(program.to_path_buf()),
            config: configs.noop.clone(),
            rootfs: self.image.clone(),
            env: strings(UTILITY_COMPUTE),
        };
        // Two alternations of two, not one of four: in a rotation of four, each case
        // follows the same other case in almost every round, and a whole container start
        // right after a hook run (whose helper namespace is still being torn down) is
        // slower; in a rotation of two, each follows either case equally often.
        let mut samples = self.alternate(
            "against the baseline: containers",
            &[
                self.container(shim(&self.bench.programs.shim, &this), UTILITY_COMPUTE),
                self.container(shim(&base.shim, &theirs), UTILITY_COMPUTE),
            ],
        )?;
        samples.extend(self.alternate(
            "against the baseline: hooks",
            &[
                hook(&self.bench.programs.hook, &this),
                hook(&base.hook, &theirs),
            ],
        )?);
        let mut table = Table::new(
            "Against a baseline build",
            &format!(
                "This build and the one in {} (`--baseline`), each configuration once per \
                 round in the same rounds, with the same driver, image and runc, and a \
                 configuration of only the keys both read. Difference: the median of the \
                 per-round differences (this minus baseline), which the machine's drift \
                 between rounds does not enter (wall clock, and CPU: user + system time of the \
                 command and what it reaped); this build slower in: the rounds where it \
                 was.",
                base.shim
                    .parent()
                    .map_or_else(String::new, |d| d.display().to_string())
            ),
            &[
                "what",
                "this median ms",
                "baseline median ms",
                "difference ms",
                "CPU difference ms",
                "this build slower in",
            ],
        );
        for (name, (ours, theirs)) in [
            "container start, all GPUs, utility,compute",
            "nvc-hook prestart alone, all GPUs, utility,compute",
        ]
        .iter()
        .zip([(&samples[0], &samples[1]), (&samples[2], &samples[3])])
        {
            let per_round = per_round_ms(&ours.times, &theirs.times);
            let cpu_per_round = per_round_ms(&ours.cpu, &theirs.cpu);
            let slower = per_round.iter().filter(|d| **d > 0.0).count();
            table.row([
                name.to_string(),
                ms(median(ours)),
                ms(median(theirs)),
                signed_ms(median_of(per_round)),
                signed_ms(median_of(cpu_per_round)),
                format!("{slower} of {}", ours.times.len()),
            ]);
        }
        Ok(Some(table))
    }

    /// 3. Fake trees of several sizes; `None` when not asked for.
    fn scaling(&self, found: &mut Findings) -> Result<Option<Table>, BenchError> {
        let options = self.options;
        if options.gpus.is_empty() || (options.real && !options.gpus_given) {
            return Ok(None);
        }
        let mut cases = vec![self.container(Runtime::Runc, NO_GPU)];
        let mut part_cases = Vec::new();
        for &n in &options.gpus {
            let tree = fake_driver(self.work, &format!("scale-{n}"), n)?;
            let c = self.bench.configs(&format!("gpus-{n}"), &tree.roots)?;
            cases.push(self.container(Runtime::Nvc(c.runc.clone()), UTILITY_COMPUTE));
            part_cases.push(self.bench.shim_case(Some(&c.noop), UTILITY_COMPUTE)?);
            part_cases.push(self.hook(&c.noop, UTILITY_COMPUTE));
        }
        let starts = self.alternate("scaling, containers", &cases)?;
        let parts = self.alternate("scaling, shim and hook", &part_cases)?;
        let (base, base_cpu) = (median(&starts[0]), starts[0].cpu_median_ms());
        let mut table = Table::new(
            "Scaling with the number of GPUs (fake trees)",
            "All GPUs, utility,compute; added over plain runc, alternated with it. The \
             shim and the hook alone as in the table above, alternated with each other.",
            &[
                "GPUs",
                "runc median ms",
                "nvc median ms",
                "added ms",
                "added CPU ms",
                "shim alone ms",
                "hook alone ms",
            ],
        );
        for (i, &n) in options.gpus.iter().enumerate() {
            let added = median(&starts[i + 1]) - base;
            found.scaling.push((n, added));
            table.row([
                n.to_string(),
                ms(base),
                ms(median(&starts[i + 1])),
                signed_ms(added),
                signed_ms(starts[i + 1].cpu_median_ms() - base_cpu),
                ms(median(&parts[2 * i])),
                ms(median(&parts[2 * i + 1])),
            ]);
        }
        Ok(Some(table))
    }

    /// 4. The image with thousands of libraries; `None` when not asked for.
    fn large_image(&self, found: &Findings) -> Result<Option<Table>, BenchError> {
        let libs = self.options.libs;
        if libs == 0 {
            return Ok(None);
        }
        eprintln!("nvc-bench: building an image with {libs} libraries");
        let path = self.work.join("large-rootfs");
        let entries = large_image::build(&self.image.path, &path, libs)?;
        let before = large_image::fingerprint(&path)?;
        let large = Image {
            path,
            hard_links: true,
        };
        let on_large = |runtime: Runtime| Case::Container {
            runtime,
            rootfs: large.clone(),
            env: strings(UTILITY_COMPUTE),
        };
        let set = self.alternate(
            "large image",
            &[
                on_large(Runtime::Runc),
                on_large(self.nvc()),
                Case::Hook {
                    program: None,
                    config: self.configs.noop.clone(),
                    rootfs: large.clone(),
                    env: strings(UTILITY_COMPUTE),
                },
            ],
        )?;
        large_image::check_unchanged(&large.path, &before)?;
        let small_cache = self.image.path.join("etc/ld.so.cache");
        let small_entries = std::fs::read(&small_cache)
            .ok()
            .and_then(|data| libnvc::ldcache::parse_file(&data, &small_cache).ok())
            .map(|c| c.entries.len().to_string())
            .unwrap_or_else(|| "?".into());
        let mut table = Table::new(
            "A large image",
            &format!(
                "All GPUs, utility,compute, on the image plus {libs} libraries with their own \
                 sonames in `/{}`, listed in its ld.so.cache, which the hook rewrites. The \
                 first row repeats the tables above.",
                large_image::LIB_DIR
            ),
            &[
                "image",
                "ld.so.cache entries",
                "runc median ms",
                "nvc median ms",
                "added ms",
                "added CPU ms",
                "hook alone ms",
            ],
        );
        let (starts, parts) = (&found.starts, &found.parts);
        table.row([
            "test rootfs".to_string(),
            small_entries,
            ms(median(&starts[0])),
            ms(median(&starts[2])),
            signed_ms(median(&starts[2]) - median(&starts[0])),
            signed_ms(starts[2].cpu_median_ms() - starts[0].cpu_median_ms()),
            ms(median(&parts[4])),
        ]);
        table.row([
            format!("+ {libs} libraries"),
            entries.to_string(),
            ms(median(&set[0])),
            ms(median(&set[1])),
            signed_ms(median(&set[1]) - median(&set[0])),
            signed_ms(set[1].cpu_median_ms() - set[0].cpu_median_ms()),
            ms(median(&set[2])),
        ]);
        Ok(Some(table))
    }
}

/// 5. The targets of the issue, judged on the findings.
fn targets(found: &Findings) -> Table {
    let (starts, parts) = (&found.starts, &found.parts);
    let (runc, runc_cpu) = (median(&starts[0]), starts[0].cpu_median_ms());
    let added_uc = median(&starts[2]) - runc;
    let added_none = median(&starts[1]) - runc;
    let shim_none = median(&parts[1]) - median(&parts[0]);
    let hook_rss = parts[4..].iter().filter_map(Samples::peak_rss_kib).max();
    let mut table = Table::new(
        "Targets",
        "From the tables above: met or not on the wall-clock medians, which the targets \
         are about; the CPU figures say how much of it is work done, not waiting.",
        &["target", "measured", "met"],
    )
    .text();
    table.row([
        format!(
            "added start, all GPUs, utility,compute, ld.so.cache updated ≤ {TARGET_ADDED_MS} ms"
        ),
        format!(
            "{} ms (CPU {} ms)",
            signed_ms(added_uc),
            signed_ms(starts[2].cpu_median_ms() - runc_cpu)
        ),
        yes_no(added_uc <= TARGET_ADDED_MS),
    ]);
    table.row([
        format!("added start, no GPU asked for ≤ {TARGET_NO_GPU_MS} ms"),
        format!(
            "{} ms (CPU {} ms; shim alone minus the floor: {} ms)",
            signed_ms(added_none),
            signed_ms(starts[1].cpu_median_ms() - runc_cpu),
            signed_ms(shim_none)
        ),
        yes_no(added_none <= TARGET_NO_GPU_MS),
    ]);
    table.row([
        format!("hook peak RSS ≤ {}", mib(TARGET_HOOK_RSS_KIB)),
        hook_rss.map(mib).unwrap_or_else(|| "not measured".into()),
        hook_rss.map_or("not measured".into(), |r| yes_no(r <= TARGET_HOOK_RSS_KIB)),
    ]);
    let (measured, met) = scaling_target(&found.scaling);
    table.row([
        format!("added start with 64 GPUs ≤ {TARGET_SCALING} × with 1"),
        measured,
        met,
    ]);
    table
}

/// The measured text and verdict of the scaling target, from (GPUs, added ms) pairs.
pub fn scaling_target(scaling: &[(u32, f64)]) -> (String, String) {
    let added = |n: u32| scaling.iter().find(|(g, _)| *g == n).map(|(_, a)| *a);
    match (added(1), added(64)) {
        (Some(one), Some(many)) => {
            let ratio = if one > 0.0 {
                format!(", {:.2} ×", many / one)
            } else {
                String::new()
            };
            (
                format!(
                    "1 GPU {} ms, 64 GPUs {} ms{ratio}",
                    signed_ms(one),
                    signed_ms(many)
                ),
                yes_no(many <= TARGET_SCALING * one.max(0.0)),
            )
        }
        _ => (
            "not measured (needs --gpus with 1 and 64)".into(),
            "–".into(),
        ),
    }
}

fn yes_no(met: bool) -> String {
    if met { "yes" } else { "**no**" }.to_string()
}

/// `ours[i] - theirs[i]` in milliseconds, round by round.
fn per_round_ms(ours: &[std::time::Duration], theirs: &[std::time::Duration]) -> Vec<f64> {
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| (a.as_secs_f64() - b.as_secs_f64()) * 1e3)
        .collect()
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn median(samples: &Samples) -> f64 {
    samples.summary().map_or(f64::NAN, |s| s.median_ms)
}

fn summary_cells(name: &str, samples: &Samples) -> Vec<String> {
    let s = samples.summary().unwrap_or(Summary {
        median_ms: f64::NAN,
        min_ms: f64::NAN,
        max_ms: f64::NAN,
        count: 0,
    });
    vec![
        name.to_string(),
        ms(s.median_ms),
        ms(s.min_ms),
        ms(s.max_ms),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_verdicts() {
        let (text, met) = scaling_target(&[(1, 10.0), (8, 12.0), (64, 19.0)]);
        assert_eq!(text, "1 GPU +10.00 ms, 64 GPUs +19.00 ms, 1.90 ×");
        assert_eq!(met, "yes");
        assert_eq!(scaling_target(&[(1, 10.0), (64, 21.0)]).1, "**no**");
        // Noise can make the 1-GPU figure negative: no ratio then.
        assert_eq!(scaling_target(&[(1, -0.5), (64, 1.0)]).1, "**no**");
        assert!(scaling_target(&[(8, 1.0)]).0.starts_with("not measured"));
    }
}
