//! `nvc-bench --state 10,10000`: whether the host's state stays flat over a node's
//! history. Runs that many container lifecycles through nvc-host's state code (the
//! rootfs lock, the record and its journal, set-up's mount points in a rootfs, the
//! poststop leg's undo and sweep), without runc, on four rootfs folders used in turn (a
//! runtime's rootfs reused, as plain runc bundles are); every other container is killed
//! with its hook (no poststop hook runs: the next start on its rootfs takes its record
//! away). Prints the poststop leg's time over the last lifecycles and what the state
//! folder holds after them.

use std::path::{Path, PathBuf};
use std::time::Instant;

use nvc_host::container::ContainerRoot;
use nvc_host::state::{RootfsState, StateDir};
use nvc_host::trace::{self, RecordDir, Trace};

use crate::error::BenchError;

/// The rootfs folders used in turn.
const ROOTFS: usize = 4;
/// Lifecycles before the measured ones.
const WARM_UP: usize = 100;
/// How many of the last lifecycles are timed.
const TIMED: usize = 200;
/// The files set-up makes in each (mount points of a driver's libraries).
const MADE: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/bin/nvidia-smi",
];

/// One count's result.
struct Row {
    lifecycles: usize,
    poststop_us: f64,
    p90_us: f64,
    entries: usize,
    bytes: u64,
}

fn state_error(e: impl std::error::Error) -> BenchError {
    BenchError::State(libnvc::report::error_chain(&e))
}

/// Runs each count of lifecycles in its own folder under `work`; the Markdown table.
pub fn run(work: &Path, counts: &[usize]) -> Result<String, BenchError> {
    let ended = ended_pid()?;
    // A warm-up: the first lifecycles of a process pay for its page faults and the
    // folders' first creation.
    lifecycles(&work.join("warm-up"), WARM_UP, ended)?;
    let mut rows = Vec::new();
    for &n in counts {
        rows.push(lifecycles(&work.join(format!("state-{n}")), n, ended)?);
    }
    let mut text = String::from(
        "\n### The host's state over a node's history\n\n\
         | lifecycles (half killed with their hook) | poststop leg, median µs | p90 µs | \
         state folder: entries | bytes |\n| --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        text.push_str(&format!(
            "| {} | {:.0} | {:.0} | {} | {} |\n",
            r.lifecycles, r.poststop_us, r.p90_us, r.entries, r.bytes
        ));
    }
    Ok(text)
}

/// `n` lifecycles in `dir` (`ended`: a pid that names no process); removes `dir` after.
fn lifecycles(dir: &Path, n: usize, ended: i32) -> Result<Row, BenchError> {
    let me = std::process::id() as i32;
    {
        let run = dir.join("run/nvc");
        let state = StateDir::new(&run, &run.join("leases"));
        let roots: Vec<PathBuf> = (0..ROOTFS)
            .map(|i| dir.join(format!("rootfs-{i}")))
            .collect();
        for root in &roots {
            std::fs::create_dir_all(root.join("usr/lib"))
                .map_err(BenchError::io("create directory", root))?;
        }
        let mut times = Vec::new();
        for i in 0..n {
            let rootfs = &roots[i % ROOTFS];
            let bundle = dir.join(format!("bundle-{i}"));
            let id = format!("bench-{i}");
            let killed = i % 2 == 1;
            // The prestart leg, under the lock: sweep, record, set-up journaled, save.
            let lock = state.lock_rootfs(rootfs).map_err(state_error)?;
            trace::sweep(&lock, rootfs, None);
            let pid = if killed { ended } else { me };
            let record =
                RecordDir::create(&lock, &id, &bundle, rootfs, pid).map_err(state_error)?;
            let root = ContainerRoot::open(rootfs).map_err(state_error)?;
            root.journal_to(record.journal());
            for made in MADE {
                root.file_mount_point(Path::new(made), 0o644)
                    .map_err(state_error)?;
            }
            let trace = Trace {
                made: root.made(),
                ldcache: None,
            };
            if killed {
                // Killed before its record was written whole: only the journal.
                std::mem::forget(record);
                drop(lock);
                continue;
            }
            record.save(&lock, &trace).map_err(state_error)?;
            drop(lock);
            // The poststop leg.
            let start = Instant::now();
            let lock: RootfsState = state.lock_rootfs(rootfs).map_err(state_error)?;
            trace::undo(&lock, &id, &bundle, rootfs).map_err(state_error)?;
            drop(lock);
            if i + TIMED >= n {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| {
            times
                .get(((times.len() as f64 - 1.0) * q) as usize)
                .copied()
        };
        let (entries, bytes) = size(&run);
        let _ = std::fs::remove_dir_all(dir);
        Ok(Row {
            lifecycles: n,
            poststop_us: at(0.5).unwrap_or_default(),
            p90_us: at(0.9).unwrap_or_default(),
            entries,
            bytes,
        })
    }
}

/// A pid that names no process: a child, reaped.
fn ended_pid() -> Result<i32, BenchError> {
    let mut child = std::process::Command::new("true")
        .spawn()
        .map_err(|source| BenchError::Spawn {
            program: "true".into(),
            source,
        })?;
    let pid = child.id() as i32;
    let _ = child.wait();
    Ok(pid)
}

/// How many files and folders are under `dir`, and their bytes.
fn size(dir: &Path) -> (usize, u64) {
    let mut out = (0, 0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            out.0 += 1;
            match e.metadata() {
                Ok(m) if m.is_dir() => {
                    let (n, b) = size(&e.path());
                    out.0 += n;
                    out.1 += b;
                }
                Ok(m) => out.1 += m.len(),
                Err(_) => {}
            }
        }
    }
    out
}
