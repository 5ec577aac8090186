//! nvc beside others at the same job, outside the runtime's path: `nvc cdi generate`
//! beside `nvidia-ctk cdi generate`, and Podman starting a GPU container through nvc's
//! CDI spec, through nvc's hooks.d file, and with neither.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::error::BenchError;
use crate::large_image::run_quiet;
use crate::podman::{Podman, Setup, Through};
use crate::report::Table;
use crate::runner::Case;
use crate::stats::{mean_ms, ms, percentile_ms, signed_ms, Samples};
use crate::toolkit;

use super::tables::median;
use super::{Findings, PodmanFinding, Suite, ALL_CAPS};

impl Suite<'_> {
    /// `nvc cdi generate` and `nvidia-ctk cdi generate` for the main driver, alternated;
    /// `None` without the `nvc` CLI beside nvc-bench.
    pub(super) fn cdi_generate(&self) -> Result<Option<Table>, BenchError> {
        let Some(nvc) = &self.bench.programs.nvc else {
            eprintln!("nvc-bench: no `nvc` beside nvc-bench: `nvc cdi generate` not timed");
            return Ok(None);
        };
        let work = self.work;
        let nvc_spec = work.join("cdi-nvc.json");
        let mut cases = vec![Case::Command {
            program: nvc.clone(),
            args: args(&["cdi", "generate", "--output"], &[&nvc_spec]),
            env: vec![(
                nvc_config::CONFIG_ENV.to_string(),
                self.configs.noop.clone().into(),
            )],
        }];
        let mut names = vec!["`nvc cdi generate`".to_string()];
        let mut specs = vec![nvc_spec];
        let note = match (&self.bench.programs.toolkit, &self.toolkit) {
            (Some(tk), Some(runs)) if self.options.real => {
                let spec = work.join("cdi-nvidia-ctk.json");
                let mut a = args(
                    &["cdi", "generate", "--format", "json", "--output"],
                    &[&spec],
                );
                a.extend(args(&["--driver-root"], &[&self.driver.roots.root]));
                a.extend(args(&["--nvidia-cdi-hook-path"], &[&tk.cdi_hook]));
                a.extend(args(&["--ldconfig-path"], &[&toolkit::host_ldconfig()]));
                // Once untimed: a Toolkit that fails on this host costs its row, not the run.
                let mut first = Command::new(&tk.ctk);
                first.args(&a);
                match run_quiet(&mut first) {
                    Ok(()) => {
                        cases.push(Case::Command {
                            program: tk.ctk.clone(),
                            args: a,
                            env: Vec::new(),
                        });
                        names.push(format!(
                            "`nvidia-ctk cdi generate` (Toolkit {})",
                            runs.release
                        ));
                        specs.push(spec);
                        "`nvidia-ctk cdi generate --format json --output FILE --driver-root \
                         ROOT --nvidia-cdi-hook-path PATH --ldconfig-path PATH` (the \
                         Toolkit's programs of `--nvidia-toolkit`, its other settings its \
                         defaults: NVML's discovery, both names)"
                            .to_string()
                    }
                    Err(e) => {
                        eprintln!(
                            "nvc-bench: {}; its row is left out",
                            crate::error::chain(&e)
                        );
                        format!(
                            "`nvidia-ctk cdi generate` (Toolkit {}) not timed: {}",
                            runs.release,
                            crate::error::chain(&e)
                        )
                    }
                }
            }
            (_, Some(runs)) => format!(
                "`nvidia-ctk cdi generate` (Toolkit {}) not timed on a fake driver tree: it \
                 loads the driver's NVML, which a fake tree's libraries do not implement",
                runs.release
            ),
            _ => "`nvidia-ctk cdi generate`: not timed (no `--nvidia-toolkit DIR`)".to_string(),
        };
        let samples = self.alternate("cdi generate", &cases)?;
        let mut table = Table::new(
            "CDI spec generation",
            &format!(
                "The wall-clock time of writing the host's CDI spec (every GPU by index and \
                 by UUID, and `all`): `nvc cdi generate --output FILE`, with the bench's nvc \
                 configuration; {note}. Alternated, {} runs each after {} warm-up round{}. \
                 p90: the 90th percentile (nearest rank). CPU: user + system time, median. \
                 Devices: those the last run's spec lists.",
                self.options.runs,
                self.warmup,
                if self.warmup == 1 { "" } else { "s" },
            ),
            &[
                "command",
                "median ms",
                "p90 ms",
                "min ms",
                "max ms",
                "CPU ms",
                "devices",
            ],
        );
        for ((name, samples), spec) in names.iter().zip(&samples).zip(&specs) {
            let s = samples.summary();
            table.row([
                name.clone(),
                ms(median(samples)),
                ms(percentile_ms(&samples.times, 90.0)),
                ms(s.map_or(f64::NAN, |s| s.min_ms)),
                ms(s.map_or(f64::NAN, |s| s.max_ms)),
                ms(samples.cpu_median_ms()),
                spec_devices(spec).map_or_else(|| "?".into(), |n| n.to_string()),
            ]);
        }
        Ok(Some(table))
    }

    /// `podman run --rm` of `/bin/true` through nvc's CDI spec, nvc's hooks.d file and
    /// neither, alternated; `None` without `--podman`. Where Podman cannot be set up or
    /// runs no plain container on this host, the table says so instead, and a GPU row
    /// whose check fails is left out with the reason: it costs them, not the run.
    pub(super) fn podman(&self, found: &mut Findings) -> Result<Option<Table>, BenchError> {
        let Some(program) = &self.bench.programs.podman else {
            return Ok(None);
        };
        match self.podman_table(program, found) {
            Ok(table) => Ok(Some(table)),
            Err(e) => {
                let why = crate::error::chain(&e);
                eprintln!("nvc-bench: podman: {why}");
                Ok(Some(Table::new(
                    PODMAN_TITLE,
                    &format!("Not timed: {why}."),
                    &[],
                )))
            }
        }
    }

    fn podman_table(&self, program: &Path, found: &mut Findings) -> Result<Table, BenchError> {
        let Some(nvc) = &self.bench.programs.nvc else {
            return Err(BenchError::Missing {
                what: "nvc",
                path: std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(|d| d.join("nvc")))
                    .unwrap_or_default(),
                hint:
                    ": --podman needs the nvc CLI beside nvc-bench (its hooks.d file and CDI spec)",
            });
        };
        eprintln!("nvc-bench: setting up podman");
        let podman = Podman::setup(&Setup {
            program,
            dir: &self.work.join("podman"),
            runc: &self.bench.programs.runc,
            rootfs: &self.image.path,
            nvc,
            hook: &self.bench.programs.hook,
            nvc_config: &self.configs.noop,
        })?;
        let rows = [
            (Through::Nothing, "runc under Podman (no nvc, no GPU)"),
            (
                Through::Hooks,
                "nvc's hooks.d file (nvc-hook), all GPUs, all capabilities",
            ),
            (
                Through::Cdi,
                "nvc's CDI spec (nvc-hook cdi-setup), all GPUs, all capabilities",
            ),
        ];
        // Plain runc's row is the base: its failure is the table's. A GPU row that fails
        // its check is left out, with the reason.
        podman.check(Through::Nothing, ALL_CAPS)?;
        let mut left_out = Vec::new();
        let rows: Vec<(Through, &str)> = rows
            .into_iter()
            .filter(|(through, name)| match podman.check(*through, ALL_CAPS) {
                Ok(()) => true,
                Err(e) => {
                    let why = crate::error::chain(&e);
                    eprintln!("nvc-bench: podman, {name}: {why}; its row is left out");
                    left_out.push(format!("{name}: {why}"));
                    false
                }
            })
            .collect();
        let cases: Vec<Case> = rows
            .iter()
            .map(|(through, _)| podman.case(*through, ALL_CAPS))
            .collect();
        let samples =
            self.bench
                .alternate("podman", &cases, self.options.podman_runs, self.warmup)?;
        let mut table = Table::new(
            PODMAN_TITLE,
            &format!(
                "`podman run --rm --network none IMAGE /bin/true` (Podman {}, {} storage, on \
                 storage of its own, cgroupfs, the same runc), the image imported from the \
                 bench's rootfs: with no GPU and no nvc hook; through nvc's OCI hooks.d file \
                 (`nvc runtime configure --runtime podman`), its hook asked for all GPUs and \
                 all capabilities with `NVIDIA_VISIBLE_DEVICES` and \
                 `NVIDIA_DRIVER_CAPABILITIES`; through nvc's CDI spec (`nvc cdi generate`, \
                 every capability's files, in `/etc/cdi` under a kind of the bench's own), \
                 `--device {}`. Start to exit and the container's removal, as the user waits \
                 for them; each configuration checked first to give (or not give) its \
                 container `/dev/nvidiactl`. Alternated, {} runs each after {} warm-up \
                 round{}. Added: this median minus the first row's.",
                podman.version,
                podman.storage,
                crate::podman::CDI_ALL,
                self.options.podman_runs,
                self.warmup,
                if self.warmup == 1 { "" } else { "s" },
            ),
            &[
                "configuration",
                "median ms",
                "p90 ms",
                "mean ms",
                "min ms",
                "max ms",
                "added ms",
            ],
        );
        if !left_out.is_empty() {
            table.intro.push_str(&format!(
                " Left out, for its container failed the check: {}.",
                left_out.join("; ")
            ));
        }
        let base = median(&samples[0]);
        for (i, ((_, name), samples)) in rows.iter().zip(&samples).enumerate() {
            table.row(podman_cells(name, samples, (i > 0).then_some(base)));
        }
        let of = |through: Through| {
            rows.iter()
                .position(|(t, _)| *t == through)
                .map(|i| median(&samples[i]))
        };
        if let (Some(hooks), Some(cdi)) = (of(Through::Hooks), of(Through::Cdi)) {
            found.podman = Some(PodmanFinding {
                plain: base,
                hooks,
                cdi,
            });
        }
        Ok(table)
    }
}

const PODMAN_TITLE: &str = "Podman: CDI and hooks.d";

/// A row of the Podman table.
fn podman_cells(name: &str, samples: &Samples, base: Option<f64>) -> Vec<String> {
    let s = samples.summary();
    vec![
        name.to_string(),
        ms(median(samples)),
        ms(percentile_ms(&samples.times, 90.0)),
        ms(mean_ms(&samples.times)),
        ms(s.map_or(f64::NAN, |s| s.min_ms)),
        ms(s.map_or(f64::NAN, |s| s.max_ms)),
        base.map_or_else(String::new, |b| signed_ms(median(samples) - b)),
    ]
}

/// `words` then `paths`, as arguments.
fn args(words: &[&str], paths: &[&Path]) -> Vec<OsString> {
    words
        .iter()
        .map(OsString::from)
        .chain(paths.iter().map(|p| p.as_os_str().to_os_string()))
        .collect()
}

/// How many devices the CDI spec (JSON) at `path` lists.
fn spec_devices(path: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["devices"].as_array().map(Vec::len)
}
