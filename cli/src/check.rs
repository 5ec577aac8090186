//! `nvc check`: diagnoses this host (can GPU containers start here, and if not, why), or
//! with `--bundle`, explains what one container would receive and why.
//!
//! Each check gives one row marked ✔ (fine), ✘ (GPU containers cannot start), `!` (a
//! warning) or `-` (information, such as an engine that is not installed), with one line
//! of fix for anything not fine. Every host path the checks read is fixed up front in a [`Probe`],
//! so tests point them at fake trees through options, not global switches.

mod bundle;
mod cdi;
mod engines;
mod host;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Args;
use libnvc::report::shorten;
use serde::Serialize;

/// Options of `nvc check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Explain what the container of this OCI bundle (DIR/config.json) would receive.
    #[arg(long, value_name = "DIR")]
    bundle: Option<PathBuf>,
    /// Docker's daemon configuration [default: /etc/docker/daemon.json].
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
    /// containerd's configuration [default: /etc/containerd/config.toml].
    #[arg(long, value_name = "FILE")]
    containerd_config: Option<PathBuf>,
    /// CRI-O's configuration file or drop-in folder [default: /etc/crio/crio.conf and
    /// /etc/crio/crio.conf.d].
    #[arg(long, value_name = "PATH")]
    crio_config: Option<PathBuf>,
    /// A Podman OCI hooks folder; repeat for more [default:
    /// /usr/share/containers/oci/hooks.d and /etc/containers/oci/hooks.d].
    #[arg(long, value_name = "DIR")]
    hooks_dir: Vec<PathBuf>,
    /// A CDI spec folder; repeat for more [default: /etc/cdi and /var/run/cdi].
    #[arg(long, value_name = "DIR")]
    cdi_dir: Vec<PathBuf>,
}

/// Why the check itself could not run (every finding about the host is a row instead).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The report could not be written.
    #[error("cannot write the report to stdout")]
    Write(#[source] std::io::Error),
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Nothing to judge: an engine that is not installed, a file that need not exist.
    Info,
    /// GPU containers start, but something is off (slow starts, an engine not set up).
    Warn,
    /// GPU containers cannot start.
    Fail,
}

impl Status {
    /// The mark shown in the table.
    pub fn mark(self) -> &'static str {
        match self {
            Status::Ok => "✔",
            Status::Info => "-",
            Status::Warn => "!",
            Status::Fail => "✘",
        }
    }
}

/// One check's outcome: one row of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// What was checked, such as `driver`.
    pub check: String,
    /// How it came out.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// One line saying what to do, for anything not fine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Row {
    /// A fine row.
    pub fn ok(check: &str, detail: impl Into<String>) -> Row {
        Row::new(check, Status::Ok, detail, None)
    }

    /// An information row.
    pub fn info(check: &str, detail: impl Into<String>) -> Row {
        Row::new(check, Status::Info, detail, None)
    }

    /// A warning with its fix.
    pub fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
        Row::new(check, Status::Warn, detail, Some(fix.into()))
    }

    /// A failure with its fix.
    pub fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
        Row::new(check, Status::Fail, detail, Some(fix.into()))
    }

    fn new(check: &str, status: Status, detail: impl Into<String>, fix: Option<String>) -> Row {
        Row {
            check: check.to_string(),
            status,
            detail: detail.into(),
            fix,
        }
    }
}

/// Several findings of one check folded into one row: the worst status, every finding's
/// text, and the fix of the first worst finding.
#[derive(Debug, Default)]
pub struct Findings {
    items: Vec<(Status, String, Option<String>)>,
}

impl Findings {
    /// Adds a finding.
    pub fn push(&mut self, status: Status, detail: impl Into<String>, fix: Option<String>) {
        self.items.push((status, detail.into(), fix));
    }

    /// The row: problems only when there are any, else `ok_detail`.
    pub fn row(self, check: &str, ok_detail: impl Into<String>) -> Row {
        let worst = self
            .items
            .iter()
            .map(|(s, _, _)| *s)
            .max()
            .unwrap_or(Status::Ok);
        if worst <= Status::Info {
            let mut detail = ok_detail.into();
            for (_, d, _) in &self.items {
                detail.push_str("; ");
                detail.push_str(d);
            }
            return Row::new(check, worst, detail, None);
        }
        let problems: Vec<&(Status, String, Option<String>)> = self
            .items
            .iter()
            .filter(|(s, _, _)| *s > Status::Info)
            .collect();
        let fix = problems
            .iter()
            .find(|(s, _, _)| *s == worst)
            .and_then(|(_, _, f)| f.clone());
        let detail = problems
            .iter()
            .map(|(_, d, _)| d.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        Row::new(check, worst, detail, fix)
    }
}

/// Every host path and search path the checks read, fixed before any check runs.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The nvc config file (`NVC_CONFIG` or the default).
    pub config_path: PathBuf,
    /// The `PATH` programs are looked up in.
    pub search_path: OsString,
    /// The folder of the running `nvc`: `nvc-runtime` is looked for there first.
    pub own_dir: Option<PathBuf>,
    /// Docker's `daemon.json`.
    pub docker_config: PathBuf,
    /// containerd's `config.toml`.
    pub containerd_config: PathBuf,
    /// CRI-O's configuration files and drop-in folders.
    pub crio_configs: Vec<PathBuf>,
    /// Podman's OCI hooks folders.
    pub hooks_dirs: Vec<PathBuf>,
    /// CDI spec folders.
    pub cdi_dirs: Vec<PathBuf>,
}

/// The search path when `PATH` is unset.
const DEFAULT_SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Probe {
    /// The probe for `args` in this process's environment.
    pub fn from_args(args: &CheckArgs) -> Probe {
        let or_default = |given: &[PathBuf], default: &[&str]| {
            if given.is_empty() {
                default.iter().map(PathBuf::from).collect()
            } else {
                given.to_vec()
            }
        };
        Probe {
            config_path: nvc_config::Config::path_from_env(),
            search_path: std::env::var_os("PATH")
                .unwrap_or_else(|| OsString::from(DEFAULT_SEARCH_PATH)),
            own_dir: std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf)),
            docker_config: args
                .docker_config
                .clone()
                .unwrap_or_else(|| PathBuf::from("/etc/docker/daemon.json")),
            containerd_config: args
                .containerd_config
                .clone()
                .unwrap_or_else(|| PathBuf::from("/etc/containerd/config.toml")),
            crio_configs: match &args.crio_config {
                Some(p) => vec![p.clone()],
                None => vec![
                    PathBuf::from("/etc/crio/crio.conf"),
                    PathBuf::from("/etc/crio/crio.conf.d"),
                ],
            },
            hooks_dirs: or_default(
                &args.hooks_dir,
                &[
                    "/usr/share/containers/oci/hooks.d",
                    "/etc/containers/oci/hooks.d",
                ],
            ),
            cdi_dirs: or_default(&args.cdi_dir, &["/etc/cdi", "/var/run/cdi"]),
        }
    }

    /// The first executable file named `name` along the search path.
    pub fn find_program(&self, name: &str) -> Option<PathBuf> {
        std::env::split_paths(&self.search_path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    }
}

/// Whether `path` is a regular file with an execute bit (following links).
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `nvc check`; `Ok(true)` when GPU containers can start (with `--bundle`: when
/// that container would start).
pub fn run(args: &CheckArgs) -> Result<bool, CheckError> {
    let probe = Probe::from_args(args);
    if let Some(dir) = &args.bundle {
        let report = bundle::explain(dir, &probe);
        let ok = report.would_start;
        let text = if args.json {
            to_json(&report)
        } else {
            bundle::render(&report)
        };
        emit(&text)?;
        return Ok(ok);
    }
    let rows = host::check_all(&probe);
    let ok = rows.iter().all(|r| r.status != Status::Fail);
    let text = if args.json {
        to_json(&serde_json::json!({ "ok": ok, "checks": rows }))
    } else {
        let mut text = render_rows(&rows);
        text.push('\n');
        text.push_str(&summary(&rows));
        text
    };
    emit(&text)?;
    Ok(ok)
}

fn to_json<T: Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Writes the report; a closed stdout (`nvc check | head`) is not an error.
fn emit(text: &str) -> Result<(), CheckError> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CheckError::Write(e)),
        _ => Ok(()),
    }
}

/// The table: mark, check, detail; a fix on its own line under the detail. Details quote
/// what a bundle's spec holds (variables, annotations, paths): each cell is escaped and
/// bounded ([`libnvc::report::shorten`]), so a row stays one line of text.
pub fn render_rows(rows: &[Row]) -> String {
    let width = rows
        .iter()
        .map(|r| r.check.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for r in rows {
        out.push_str(&format!(
            "{} {:<width$}  {}\n",
            r.status.mark(),
            r.check,
            shorten(&r.detail)
        ));
        if let Some(fix) = &r.fix {
            out.push_str(&format!("  {:<width$}  fix: {}\n", "", shorten(fix)));
        }
    }
    out
}

/// The last line: whether GPU containers can start.
fn summary(rows: &[Row]) -> String {
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let (fails, warns) = (count(Status::Fail), count(Status::Warn));
    let warnings = match warns {
        0 => String::new(),
        1 => " (1 warning)".to_string(),
        n => format!(" ({n} warnings)"),
    };
    if fails == 0 {
        format!("GPU containers can start{warnings}.\n")
    } else {
        format!(
            "GPU containers cannot start: {fails} {} marked ✘{warnings}.\n",
            if fails == 1 { "problem" } else { "problems" }
        )
    }
}

/// Aligned columns, for the edits of `--bundle`; cells are escaped and bounded like
/// [`render_rows`]'s.
pub fn render_table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| shorten(cell).into_owned()).collect())
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// `path` for messages.
pub fn show(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rows_and_tables_escape_what_the_spec_holds() {
        let rows = [Row::fail(
            "request",
            "unknown device \"0\n✔ forged  row\u{1b}[2K\"",
            "fix\tit",
        )];
        let text = render_rows(&rows);
        assert_eq!(
            text,
            "✘ request  unknown device \"0\\n✔ forged  row\\u{1b}[2K\"\n           fix: fix\\tit\n"
        );
        let table = render_table(&[vec!["a\nb".into(), "c\u{9b}d".into()]]);
        assert_eq!(table, "a\\nb  c\\u{9b}d\n");
    }

    #[test]
    fn findings_fold_into_the_worst() {
        let mut f = Findings::default();
        f.push(Status::Warn, "w", Some("fix w".into()));
        f.push(Status::Fail, "f", Some("fix f".into()));
        f.push(Status::Info, "i", None);
        let row = f.row("x", "all good");
        assert_eq!(row.status, Status::Fail);
        assert_eq!(row.detail, "w; f");
        assert_eq!(row.fix.as_deref(), Some("fix f"));

        let mut f = Findings::default();
        f.push(Status::Info, "note", None);
        let row = f.row("x", "all good");
        assert_eq!(
            (row.status, row.detail.as_str()),
            (Status::Info, "all good; note")
        );
        assert_eq!(Findings::default().row("x", "fine").status, Status::Ok);
    }

    #[test]
    fn table_aligns_and_puts_fixes_under_details() {
        let rows = vec![
            Row::ok("config", "/etc/nvc/config.toml"),
            Row::fail("device nodes", "/dev/nvidia1 is missing", "create it"),
        ];
        let text = render_rows(&rows);
        assert_eq!(
            text,
            "✔ config        /etc/nvc/config.toml\n\
             ✘ device nodes  /dev/nvidia1 is missing\n\
             \x20               fix: create it\n"
        );
        assert!(summary(&rows).starts_with("GPU containers cannot start: 1 problem"));
        assert_eq!(summary(&rows[..1]), "GPU containers can start.\n");
    }
}
