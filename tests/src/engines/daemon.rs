//! An engine's processes: a program run as the first process of its own mount and PID
//! namespaces ([`isolated`]), a daemon started, awaited and stopped ([`Daemon`]), and the
//! cgroups an engine made removed afterwards.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::container_id;
use crate::harness::{describe, read_lossy};

use super::command::{signal, wait_or_kill_group};
use super::{EngineError, CGROUP_PREFIX, MASKED_DIRS, START_TIMEOUT};

/// How long a daemon may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// `unshare` running `program` as the first process of new mount and PID namespaces, with
/// [`MASKED_DIRS`] under empty tmpfs, `/proc` of the new PID namespace, and
/// `--kill-child` so that killing `unshare` ends the namespace and everything in it.
pub(super) fn isolated(program: &Path) -> Command {
    let masks: Vec<&str> = MASKED_DIRS
        .iter()
        .copied()
        .filter(|d| Path::new(d).is_dir() && !Path::new(d).is_symlink())
        .collect();
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "for d in $NVC_ENGINE_MASKS; do mount -t tmpfs -o mode=0755 nvc-engine-mask \"$d\" || exit 125; done; \
             unset NVC_ENGINE_MASKS; exec \"$@\"",
            "sh",
        ])
        .arg(program)
        .env("NVC_ENGINE_MASKS", masks.join(" "));
    command
}

/// A daemon in its own namespaces (see [`isolated`]), logging to a file.
#[derive(Debug)]
pub(super) struct Daemon {
    what: &'static str,
    /// `unshare`, parent of the daemon.
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub(super) fn spawn(
        what: &'static str,
        command: Command,
        log: &Path,
    ) -> Result<Daemon, EngineError> {
        let out = File::create(log).map_err(EngineError::io("create", log))?;
        Daemon::spawn_onto(what, command, log, out)
    }

    /// [`Daemon::spawn`] writing after what `log` holds: a daemon started again keeps
    /// what it logged before in the same file.
    pub(super) fn spawn_appending(
        what: &'static str,
        command: Command,
        log: &Path,
    ) -> Result<Daemon, EngineError> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(EngineError::io("open", log))?;
        Daemon::spawn_onto(what, command, log, out)
    }

    fn spawn_onto(
        what: &'static str,
        mut command: Command,
        log: &Path,
        out: File,
    ) -> Result<Daemon, EngineError> {
        let err = out.try_clone().map_err(EngineError::io("open", log))?;
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command.spawn().map_err(|source| EngineError::Spawn {
            program: describe(&command),
            source,
        })?;
        Ok(Daemon {
            what,
            child,
            log: log.to_path_buf(),
        })
    }

    /// The host pid of the daemon itself, the child of `unshare` in the namespaces of its
    /// own, for `nsenter` (`None` once it has gone).
    pub(super) fn namespaced_pid(&self) -> Option<u32> {
        let pid = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Polls `ready` until it returns true; fails when the daemon exits first or after
    /// [`START_TIMEOUT`].
    pub(super) fn wait_ready(
        &mut self,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), EngineError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.not_ready(format!("it exited ({status})")));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(
                    self.not_ready(format!("no answer within {}s", START_TIMEOUT.as_secs()))
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn not_ready(&self, why: String) -> EngineError {
        EngineError::NotReady {
            what: self.what,
            why,
            log: self.log.clone(),
            tail: self.log_tail(40),
        }
    }

    /// The daemon's log file.
    pub(super) fn log(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the daemon's log.
    pub(super) fn log_tail(&self, lines: usize) -> String {
        let text = read_lossy(&self.log);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM to the daemon (the first process of its PID namespace), SIGKILL to
    /// `unshare` after [`STOP_TIMEOUT`] (which with `--kill-child` ends the namespace).
    pub(super) fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        for pid in children(self.child.id()) {
            signal(&pid.to_string(), "TERM");
        }
        let (_, timed_out) = wait_or_kill_group(&mut self.child, STOP_TIMEOUT);
        if timed_out {
            eprintln!(
                "{} did not stop within {}s after SIGTERM: killed",
                self.what,
                STOP_TIMEOUT.as_secs()
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The children of process `pid` (`/proc/PID/task/*/children`).
fn children(pid: u32) -> Vec<u32> {
    let tasks = format!("/proc/{pid}/task");
    let Ok(entries) = std::fs::read_dir(&tasks) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Removes the cgroup `name` (relative to each hierarchy's root) from every cgroup
/// hierarchy mounted here, children first. Cgroups still holding a process stay.
pub fn remove_cgroups(name: &str) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines() {
        // ... mount-point ... - fstype source options
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if !matches!(fields.get(dash + 1), Some(&"cgroup") | Some(&"cgroup2")) {
            continue;
        }
        if let Some(mount_point) = fields.get(4) {
            remove_dir_tree(&Path::new(mount_point).join(name.trim_start_matches('/')));
        }
    }
}

/// rmdir of `dir` and every directory under it, deepest first (cgroupfs's files go with
/// their directory).
fn remove_dir_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_dir_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// A unique cgroup name under [`CGROUP_PREFIX`].
pub(super) fn cgroup_name(engine: &str) -> String {
    container_id(&format!("{CGROUP_PREFIX}-{engine}"))
}
