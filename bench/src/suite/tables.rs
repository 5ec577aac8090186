//! The timed comparisons, one table each: whole containers, the shim and the hook alone,
//! scaling with the number of GPUs, batches started in parallel, a large image, and this
//! build against a baseline.

use std::path::Path;
use std::time::Duration;

use crate::error::BenchError;
use crate::large_image;
use crate::report::Table;
use crate::runner::{Case, Configs, Image, Lifecycle, Runtime};
use crate::stats::{mib, ms, signed_ms, Samples, Summary};

use super::{
    fake_driver, strings, Driver, Findings, ParallelFinding, Suite, ALL_CAPS, NO_GPU,
    UTILITY_COMPUTE,
};

impl Suite<'_> {
    /// 1. Containers to their start (`create` + `start`) through runc and through nvc.
    pub(super) fn started(&self, found: &mut Findings) -> Result<Table, BenchError> {
        let mut cases = vec![
            self.started_case(Runtime::Runc, NO_GPU),
            self.started_case(self.nvc(), NO_GPU),
            self.started_case(self.nvc(), UTILITY_COMPUTE),
            self.started_case(self.nvc(), ALL_CAPS),
            self.started_case(Runtime::Floor(self.floor_plan.clone()), NO_GPU),
            self.started_case(Runtime::Floor(self.floor_plan.clone()), UTILITY_COMPUTE),
        ];
        let mut names: Vec<String> = [
            "runc (no nvc)",
            "nvc-runtime, no GPU asked for",
            "nvc-runtime, all GPUs, utility,compute",
            "nvc-runtime, all GPUs, all capabilities",
            "nvc-floor (the floor of a start), no GPU asked for",
            "nvc-floor (the floor of a GPU start), all GPUs, utility,compute",
        ]
        .map(String::from)
        .to_vec();
        // The Toolkit's rows after nvc's, so that the targets' indices stay.
        for (runtime, env, name) in self.toolkit_rows() {
            cases.push(self.started_case(runtime, env));
            names.push(name);
        }
        found.started = self.alternate("container starts (create + start)", &cases)?;
        let mut table = Table::new(
            "Container start",
            "`<runtime> --root S create --bundle B ID`, then `<runtime> --root S start ID`, \
             of `/bin/true`, the two commands' times added: what an engine waits for until \
             the container's first instruction (prestart hooks run in `create`). Each run \
             from a fresh copy of the image; the container is deleted afterwards, untimed \
             (runc runs the poststop hook then). Added: this median minus plain runc's. \
             CPU: user + system time of the commands and what they reaped, median. \
             nvc-floor: the floor, a static program that as the runtime reads the spec \
             and, for a GPU, adds the same device nodes, rules and a prestart hook, then \
             execs runc (a second exec in `start`, as nvc-runtime's), and as \
             the hook makes the same mounts, links and ld.so.cache and nothing else (no \
             config, plan, leases, record, `/proc/driver/nvidia` mask or checks).",
            &CONTAINER_COLUMNS,
        );
        table.intro.push(' ');
        table.intro.push_str(&self.toolkit_note());
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        added_rows(&mut table, &found.started, &names);
        Ok(table)
    }

    /// 1b. Whole containers, start to exit, through runc and through nvc.
    pub(super) fn containers(&self, found: &mut Findings) -> Result<Table, BenchError> {
        found.starts = self.alternate(
            "container starts",
            &[
                self.container(Runtime::Runc, NO_GPU),
                self.container(self.nvc(), NO_GPU),
                self.container(self.nvc(), UTILITY_COMPUTE),
                self.container(self.nvc(), ALL_CAPS),
                self.container(Runtime::Floor(self.floor_plan.clone()), UTILITY_COMPUTE),
                self.container(
                    Runtime::Floor(self.floor_undo_plan.clone()),
                    UTILITY_COMPUTE,
                ),
            ],
        )?;
        let mut table = Table::new(
            "Container start to exit",
            "`<runtime> --root S run --bundle B ID` of `/bin/true`, timed around the whole \
             command (create, start, the container's exit, its poststop hooks, delete), \
             each run from a fresh copy of the image. Added: this median minus plain \
             runc's. CPU: user + system time of the command and what it reaped (the \
             container, the hooks), median. The floor program as in the table above, and \
             with its undo: as the poststop hook it also takes away what it made and puts \
             the image's ld.so.cache back (kept by its prestart hook, with the list of \
             what it made, in the bundle), with no check of what it removes: the floor of \
             a start that leaves no trace in the rootfs.",
            &CONTAINER_COLUMNS,
        );
        if self.toolkit.is_some() {
            table.intro.push_str(
                " NVIDIA's Container Toolkit is not in this table: its runtime edits the \
                 spec on `create` alone and passes `run` to runc as it is (see the tables \
                 of starts and of parallel starts).",
            );
        }
        added_rows(
            &mut table,
            &found.starts,
            &[
                "runc (no nvc)",
                "nvc-runtime, no GPU asked for",
                "nvc-runtime, all GPUs, utility,compute",
                "nvc-runtime, all GPUs, all capabilities",
                "nvc-floor (the floor of a GPU start, no undo), all GPUs, utility,compute",
                "nvc-floor with its undo (the floor of leaving no trace), all GPUs, \
                 utility,compute",
            ],
        );
        Ok(table)
    }

    /// 2. The shim alone (with a no-op runtime) and the hook alone.
    pub(super) fn parts(&self, found: &mut Findings) -> Result<Table, BenchError> {
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
                Case::Hook {
                    program: Some(self.bench.programs.floor.clone()),
                    floor_plan: Some(self.floor_plan.clone()),
                    config: noop.clone(),
                    rootfs: self.image.clone(),
                    env: strings(UTILITY_COMPUTE),
                },
                self.bench.floor_shim_case(&self.floor_plan, NO_GPU)?,
            ],
        )?;
        let mut table = Table::new(
            "The parts alone",
            "The shim: `nvc-runtime --root S create --bundle B ID` with `/bin/true` as its \
             runtime, so its spec edit and exec are timed without runc (the first row is \
             `/bin/true` run directly: the floor). The hook: `nvc-hook prestart` with the \
             OCI state on stdin, for a bundle the shim edited, in the mount namespace of a \
             helper process. `nvc-floor prestart`: only the same mounts, links and \
             ld.so.cache (the floor of the hook). `nvc-floor create`: the floor program as \
             the runtime, reading the spec and exec'ing `/bin/true` (the floor of the \
             shim). CPU: user + system time, median. Peak RSS: the largest `ru_maxrss` of \
             the runs.",
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
            "nvc-floor prestart (the floor of the hook), all GPUs, utility,compute",
            "nvc-floor create (the floor of the shim), no GPU asked for",
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
    pub(super) fn baseline(&self, driver: &Driver) -> Result<Option<Table>, BenchError> {
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
            floor_plan: None,
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
    pub(super) fn scaling(&self, found: &mut Findings) -> Result<Option<Table>, BenchError> {
        let options = self.options;
        if options.gpus.is_empty() || (options.real && !options.gpus_given) {
            return Ok(None);
        }
        let mut cases = vec![self.container(Runtime::Runc, NO_GPU)];
        let mut floor_cases = Vec::new();
        let mut part_cases = Vec::new();
        for &n in &options.gpus {
            let tree = fake_driver(self.work, &format!("scale-{n}"), n)?;
            let c = self.bench.configs(&format!("gpus-{n}"), &tree.roots)?;
            cases.push(self.container(Runtime::Nvc(c.runc.clone()), UTILITY_COMPUTE));
            let plan = crate::floor_plan::write(
                &self.bench,
                &format!("gpus-{n}"),
                &c.noop,
                &self.image.path,
                UTILITY_COMPUTE,
            )?;
            floor_cases.push(self.container(Runtime::Floor(plan), UTILITY_COMPUTE));
            part_cases.push(self.bench.shim_case(Some(&c.noop), UTILITY_COMPUTE)?);
            part_cases.push(self.hook(&c.noop, UTILITY_COMPUTE));
        }
        let nvc_cases = cases.len();
        cases.extend(floor_cases);
        let starts = self.alternate("scaling, containers", &cases)?;
        let parts = self.alternate("scaling, shim and hook", &part_cases)?;
        let (base, base_cpu) = (median(&starts[0]), starts[0].cpu_median_ms());
        let mut table = Table::new(
            "Scaling with the number of GPUs (fake trees)",
            "All GPUs, utility,compute; added over plain runc, alternated with it and \
             with the floor program (nvc-floor, planned for each tree) to the container's \
             exit. The shim and the hook alone as in the table above, alternated with \
             each other.",
            &[
                "GPUs",
                "runc median ms",
                "nvc median ms",
                "added ms",
                "added CPU ms",
                "floor added ms",
                "shim alone ms",
                "hook alone ms",
            ],
        );
        for (i, &n) in options.gpus.iter().enumerate() {
            let added = median(&starts[i + 1]) - base;
            let floor_added = median(&starts[nvc_cases + i]) - base;
            found.scaling.push((n, added));
            found.scaling_floor.push((n, floor_added));
            table.row([
                n.to_string(),
                ms(base),
                ms(median(&starts[i + 1])),
                signed_ms(added),
                signed_ms(starts[i + 1].cpu_median_ms() - base_cpu),
                signed_ms(floor_added),
                ms(median(&parts[2 * i])),
                ms(median(&parts[2 * i + 1])),
            ]);
        }
        Ok(Some(table))
    }

    /// Batches of GPU containers started in parallel through nvc and through plain
    /// runc, and, with the Toolkit, through it, nvc and runc as an engine drives a runtime;
    /// `None` when not asked for (`--parallel 0`).
    pub(super) fn parallel_starts(
        &self,
        found: &mut Findings,
    ) -> Result<Option<Table>, BenchError> {
        let options = self.options;
        let (count, in_flight) = (options.parallel, options.in_flight);
        if count == 0 {
            return Ok(None);
        }
        // Hard-linked copies: a hundred byte-by-byte copies a batch would take longer
        // than the batch (neither runc nor the hook writes an image file in place).
        let image = Image {
            path: self.image.path.clone(),
            hard_links: true,
        };
        let env = strings(UTILITY_COMPUTE);
        // `run`: runc; nvc; nvc for a Kubernetes container (containerd's CRI annotation:
        // no poststop hook, no record); the floor; the floor with its undo.
        let cri = [(libnvc::oci::spec::CONTAINERD_CRI_TYPE, "container")];
        let mut runtimes: Vec<ParallelRow> = vec![
            row(Runtime::Runc, &[], Lifecycle::Run, "runc (no nvc)".into()),
            row(
                self.nvc(),
                &[],
                Lifecycle::Run,
                "nvc-runtime + nvc-hook".into(),
            ),
            row(
                self.nvc(),
                &cri,
                Lifecycle::Run,
                "nvc-runtime + nvc-hook, a Kubernetes container (no poststop hook)".into(),
            ),
            row(
                Runtime::Floor(self.floor_plan.clone()),
                &[],
                Lifecycle::Run,
                "nvc-floor (the floor, no undo)".into(),
            ),
            row(
                Runtime::Floor(self.floor_undo_plan.clone()),
                &[],
                Lifecycle::Run,
                "nvc-floor with its undo (the floor of leaving no trace)".into(),
            ),
        ];
        // Beside the Toolkit, whose runtime edits a spec on `create` alone: runc, nvc and
        // its modes each as an engine drives them (create, start, exit, delete).
        let engine_from = runtimes.len();
        if let Some(tk) = &self.toolkit {
            runtimes.push(row(
                Runtime::Runc,
                &[],
                Lifecycle::Engine,
                "runc (no nvc), create + start + delete".into(),
            ));
            runtimes.push(row(
                self.nvc(),
                &[],
                Lifecycle::Engine,
                "nvc-runtime + nvc-hook, create + start + delete".into(),
            ));
            for &mode in &tk.gpu_modes {
                runtimes.push(row(
                    self.toolkit_runtime(tk, mode),
                    &[],
                    Lifecycle::Engine,
                    format!("Toolkit {}, create + start + delete", mode.name()),
                ));
            }
        }
        // A batch of each as warm-up, then the batches, rotating which goes first.
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); runtimes.len()];
        let started = std::time::Instant::now();
        for batch in 0..=options.batches {
            eprint!(
                "\rparallel starts ({count}, {in_flight} in flight): batch {batch}/{} ",
                options.batches
            );
            for k in 0..runtimes.len() {
                let i = (batch + k) % runtimes.len();
                let ParallelRow {
                    runtime,
                    annotations,
                    lifecycle,
                    ..
                } = &runtimes[i];
                let t = self.bench.parallel(
                    runtime,
                    *lifecycle,
                    &image,
                    &env,
                    annotations,
                    count,
                    in_flight,
                )?;
                if batch > 0 {
                    times[i].push(t);
                }
            }
        }
        eprintln!("({:.1} s)", started.elapsed().as_secs_f64());
        // Each row's ratio to runc's batch of the same round, run the same way.
        let ratio_of = |i: usize, base: usize| {
            median_of(
                times[i]
                    .iter()
                    .zip(&times[base])
                    .map(|(t, runc)| t.as_secs_f64() / runc.as_secs_f64())
                    .collect(),
            )
        };
        let base_of = |i: usize| if i < engine_from { 0 } else { engine_from };
        let ratios: Vec<f64> = (0..runtimes.len())
            .map(|i| ratio_of(i, base_of(i)))
            .collect();
        found.parallel = Some(ParallelFinding {
            count,
            in_flight,
            ratio: ratios[1],
            kubernetes_ratio: ratios[2],
            floor_ratio: ratios[3],
            floor_undo_ratio: ratios[4],
        });
        let mut table = Table::new(
            "Parallel starts",
            &format!(
                "{count} `/bin/true` containers (all GPUs, utility,compute) started at once, \
                 {in_flight} in flight, through nvc, through nvc with the annotation \
                 containerd's CRI gives Kubernetes' containers (which get no poststop hook \
                 and no record: `hook.leave-no-trace`), through the floor program \
                 (nvc-floor) without and with its undo, and through plain runc (which \
                 ignores the request), each container with `<runtime> run`: the wall-clock \
                 time from the first start to the last exit. Batches of each: {} after one \
                 of warm-up, rotating which goes first; each container on its own copy of \
                 the image. Ratio: the median of the per-batch ratios to runc's batch of the \
                 same round, run the same way.",
                options.batches
            ),
            &[
                "configuration",
                "median ms",
                "min ms",
                "max ms",
                "per container ms",
                "ratio",
            ],
        );
        table.intro.push(' ');
        if self.toolkit.is_some() {
            table.intro.push_str(
                "The rows \"create + start + delete\" run each container as an engine \
                 does, `<runtime> create`, `start`, a wait for its exit (a pidfd), \
                 `delete`: the only way the Toolkit's runtime gives a container its GPUs. ",
            );
        }
        table.intro.push_str(&self.toolkit_note());
        for (i, ParallelRow { name, .. }) in runtimes.iter().enumerate() {
            let s = Summary::of(&times[i]).unwrap_or(Summary {
                median_ms: f64::NAN,
                min_ms: f64::NAN,
                max_ms: f64::NAN,
                count: 0,
            });
            table.row([
                name.clone(),
                ms(s.median_ms),
                ms(s.min_ms),
                ms(s.max_ms),
                ms(s.median_ms / count as f64),
                match i == base_of(i) {
                    true => String::new(),
                    false => format!("{:.2} ×", ratios[i]),
                },
            ]);
        }
        Ok(Some(table))
    }

    /// 4. The image with thousands of libraries; `None` when not asked for.
    pub(super) fn large_image(&self, found: &Findings) -> Result<Option<Table>, BenchError> {
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
                    floor_plan: None,
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

/// A configuration of the parallel-start table.
struct ParallelRow<'a> {
    runtime: Runtime,
    /// Added to each container's spec.
    annotations: &'a [(&'a str, &'a str)],
    lifecycle: Lifecycle,
    name: String,
}

fn row<'a>(
    runtime: Runtime,
    annotations: &'a [(&'a str, &'a str)],
    lifecycle: Lifecycle,
    name: String,
) -> ParallelRow<'a> {
    ParallelRow {
        runtime,
        annotations,
        lifecycle,
        name,
    }
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

pub(super) fn median(samples: &Samples) -> f64 {
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

/// The columns of the two container tables.
const CONTAINER_COLUMNS: [&str; 7] = [
    "configuration",
    "median ms",
    "min ms",
    "max ms",
    "added ms",
    "CPU ms",
    "added CPU ms",
];

/// One row per configuration of a container table, named by `names` (runc's first),
/// each but runc's with what it adds to runc's.
fn added_rows(table: &mut Table, samples: &[Samples], names: &[&str]) {
    let (runc, runc_cpu) = (median(&samples[0]), samples[0].cpu_median_ms());
    for (i, (name, samples)) in names.iter().zip(samples).enumerate() {
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
}
