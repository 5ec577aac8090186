//! `nvc ps` and `nvc top`: which container uses which GPU. Thin: the host's half is
//! `nvc_host::usage`, the mapping `libnvc::usage`; this renders the table or the JSON.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use libnvc::usage::{GpuUsage, Owner, ProcessUsage, UsageRoots};
use nvc_host::usage::{GpuId, Nvml, UsageError};
use serde_json::json;

/// Why `nvc ps` or `nvc top` could not show the table.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The config or the driver could not be read.
    #[error(transparent)]
    Cli(#[from] crate::commands::CliError),
    /// The driver has no NVML.
    #[error(
        "the driver under {0} has no libnvidia-ml: install the driver's NVML (nvidia-smi needs \
         it too), or set [driver] root in the nvc config"
    )]
    NoNvml(PathBuf),
    /// NVML could not be used.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// `--delay` is not a number of seconds nvc can wait.
    #[error("--delay {0}: give a number of seconds from 0 to 86400")]
    Delay(f64),
}

/// Options of `nvc ps`.
#[derive(Args)]
pub struct PsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Docker's data root, where its containers' names are (default: /var/lib/docker);
    /// may be given more than once.
    #[arg(long, value_name = "DIR")]
    docker_root: Vec<PathBuf>,
    /// containerd's folder of its tasks' bundles (default:
    /// /run/containerd/io.containerd.runtime.v2.task); may be given more than once.
    #[arg(long, value_name = "DIR")]
    containerd_tasks: Vec<PathBuf>,
    /// Podman's or CRI-O's storage folder (default: /var/lib/containers/storage and
    /// /run/containers/storage); may be given more than once.
    #[arg(long, value_name = "DIR")]
    storage: Vec<PathBuf>,
}

/// Options of `nvc top`.
#[derive(Args)]
pub struct TopArgs {
    #[command(flatten)]
    ps: PsArgs,
    /// Seconds between frames.
    #[arg(short = 'd', long, default_value_t = 2.0, value_name = "SECS")]
    delay: f64,
    /// Frames to show, then exit (default: until interrupted).
    #[arg(short = 'n', long, value_name = "N")]
    iterations: Option<u64>,
}

/// What the table is made from, loaded once.
struct Source {
    nvml: Nvml,
    gpus: Vec<GpuId>,
    state: nvc_host::state::StateDir,
    roots: UsageRoots,
}

impl Source {
    fn load(args: &PsArgs) -> Result<Source, TopError> {
        let (config, _, driver) = crate::commands::load()?;
        let lib = driver
            .library("libnvidia-ml")
            .ok_or_else(|| TopError::NoNvml(config.driver.root.clone()))?;
        let nvml = Nvml::open(&lib.host_path)?;
        let gpus = driver
            .gpus
            .iter()
            .map(|g| GpuId {
                index: g.index,
                uuid: g.uuid.clone(),
                bus_id: g.bus_id.clone(),
                model: g.model.clone(),
            })
            .collect();
        let mut roots = UsageRoots::default();
        let or_default = |given: &[PathBuf], default: Vec<PathBuf>| {
            if given.is_empty() {
                default
            } else {
                given.to_vec()
            }
        };
        roots.docker = or_default(&args.docker_root, roots.docker);
        roots.containerd_tasks = or_default(&args.containerd_tasks, roots.containerd_tasks);
        roots.storage = or_default(&args.storage, roots.storage);
        Ok(Source {
            nvml,
            gpus,
            state: nvc_host::state::StateDir::of(&config),
            roots,
        })
    }

    fn frame(&self, json: bool) -> String {
        let (gpus, unseen) =
            nvc_host::usage::table(&self.nvml, &self.gpus, &self.state, &self.roots);
        if json {
            let value = json!({"gpus": gpus, "unseen": unseen});
            serde_json::to_string(&value).unwrap_or_default()
        } else {
            render(&gpus, &unseen)
        }
    }
}

/// `nvc ps`.
pub fn ps(args: &PsArgs) -> Result<(), TopError> {
    let source = Source::load(args)?;
    let frame = source.frame(args.json);
    let text = if args.json {
        // Pretty for people; one object either way.
        serde_json::from_str::<serde_json::Value>(&frame)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or(frame)
    } else {
        frame
    };
    // A closed pipe (`nvc ps | head`) is not an error.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    Ok(())
}

/// `nvc top`: a frame every `--delay` seconds, the screen cleared between frames on a
/// terminal; `--json`: one JSON object a line, a frame each.
pub fn top(args: &TopArgs) -> Result<(), TopError> {
    if !(0.0..=86400.0).contains(&args.delay) {
        return Err(TopError::Delay(args.delay));
    }
    let delay = Duration::from_secs_f64(args.delay);
    let source = Source::load(&args.ps)?;
    let terminal = std::io::stdout().is_terminal() && !args.ps.json;
    let mut shown = 0u64;
    loop {
        let frame = source.frame(args.ps.json);
        let mut out = std::io::stdout().lock();
        let written = if args.ps.json {
            writeln!(out, "{frame}")
        } else {
            let clear = if terminal { "\x1b[H\x1b[2J" } else { "" };
            let gap = if terminal || shown == 0 { "" } else { "\n" };
            write!(
                out,
                "{clear}{gap}nvc top  {}  every {}s\n{frame}\n",
                utc_time(),
                args.delay
            )
        };
        // A closed pipe (`nvc top | head`) ends it.
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
        drop(out);
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        std::thread::sleep(delay);
    }
}

/// The time of day, UTC, `HH:MM:SS`.
fn utc_time() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        % 86400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "?".into(), |b| format!("{} MiB", b >> 20))
}

/// The table: a heading per GPU, a row per process, then what could not be seen.
fn render(gpus: &[GpuUsage], unseen: &[String]) -> String {
    let mut out = String::new();
    let mut notes: Vec<String> = unseen.to_vec();
    if gpus.is_empty() {
        out.push_str("(no GPU)\n");
    }
    for gpu in gpus {
        out.push_str(&format!(
            "GPU {}  {}  {}  {}  memory {} / {}\n",
            gpu.index,
            gpu.uuid,
            gpu.bus_id,
            gpu.name.as_deref().unwrap_or("-"),
            mib(gpu.memory_used),
            mib(gpu.memory_total)
        ));
        for u in &gpu.unseen {
            notes.push(format!("GPU {}: {u}", gpu.index));
        }
        if gpu.processes.is_empty() {
            out.push_str("  (no process)\n");
            continue;
        }
        let mut rows = vec![[
            "PID",
            "CPID",
            "TYPE",
            "MEMORY",
            "SM",
            "COMMAND",
            "ENGINE",
            "CONTAINER",
            "NAME",
        ]
        .map(String::from)
        .to_vec()];
        for p in &gpu.processes {
            rows.push(row(p));
            for n in &p.notes {
                notes.push(format!("pid {}: {n}", p.pid));
            }
        }
        for line in crate::check::render_table(&rows).lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    for n in notes {
        out.push_str(&format!("({n})\n"));
    }
    out.pop();
    out
}

fn row(p: &ProcessUsage) -> Vec<String> {
    let dash = || "-".to_string();
    let (engine, id, name) = match (&p.owner, &p.container) {
        (Owner::Container, Some(c)) => {
            let name = match (&c.name, &c.pod, &c.namespace) {
                (Some(n), Some(pod), Some(ns)) => format!("{ns}/{pod}/{n}"),
                (Some(n), Some(pod), None) => format!("{pod}/{n}"),
                (Some(n), None, Some(ns)) => format!("{ns}/{n}"),
                (Some(n), None, None) => n.clone(),
                (None, _, _) => dash(),
            };
            let engine = match (c.engine, c.recorded) {
                (Some(e), _) => e.as_str().to_string(),
                (None, true) => "(nvc)".into(),
                (None, false) => "?".into(),
            };
            let id: String = c.id.chars().take(12).collect();
            (engine, id, name)
        }
        (Owner::Host, _) => ("host".into(), dash(), dash()),
        _ => ("?".into(), "?".into(), dash()),
    };
    vec![
        p.pid.to_string(),
        p.container_pid.map_or_else(dash, |c| c.to_string()),
        p.kind.as_str().to_string(),
        mib(p.used_memory),
        p.sm_util.map_or_else(|| "?".into(), |s| format!("{s}%")),
        p.command.clone().unwrap_or_else(dash),
        engine,
        id,
        name,
    ]
}
