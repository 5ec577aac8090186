//! nvc beside others at the same job, outside the runtime's path: `nvc cdi generate`
//! beside `nvidia-ctk cdi generate`.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::error::BenchError;
use crate::large_image::run_quiet;
use crate::report::Table;
use crate::runner::Case;
use crate::stats::{ms, percentile_ms};
use crate::toolkit;

use super::tables::median;
use super::Suite;

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
