//! Cleanup that holds when an attack on the hook succeeds: a test that lets the hook mount
//! into the host's mount namespace, or leave a process hanging, must still leave this
//! machine as it found it. So mounts under a test's directory are lazily unmounted and
//! processes rooted there killed, before the directory is removed (removing it through a
//! leaked bind mount would remove what the mount shows), and programs fed on stdin run
//! with a time bound.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engines::run_command_with;
use crate::harness::{host_mounts, processes_under};
use crate::Outcome;

/// The mount points at or under `dir` in this process's mount namespace, deepest first (the
/// order to unmount them in).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut mounts: Vec<PathBuf> = host_mounts()
        .into_iter()
        .map(PathBuf::from)
        .filter(|m| m.starts_with(&dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    mounts.dedup();
    mounts
}

/// Lazily unmounts everything at or under `dir` (a mount stacked several times over goes
/// in as many rounds) and returns what was there.
pub fn unmount_all_under(dir: &Path) -> Vec<PathBuf> {
    let mut gone = Vec::new();
    for _ in 0..16 {
        let mounts = mounts_under(dir);
        if mounts.is_empty() {
            break;
        }
        for m in mounts {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&m)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            gone.push(m);
        }
    }
    gone
}

/// Kills (SIGKILL) every process whose root or working directory is under `dir` (see
/// [`processes_under`]) and returns their pids.
pub fn kill_processes_under(dir: &Path) -> Vec<u32> {
    let pids = processes_under(dir);
    for pid in &pids {
        kill(*pid);
    }
    pids
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// On drop, kills the processes rooted under a directory and lazily unmounts everything
/// under it. Declare it after the directory's owner (or call it from the owner's `Drop`),
/// so it runs before the directory is removed.
#[derive(Debug)]
pub struct Sweep {
    dir: PathBuf,
}

impl Sweep {
    /// A sweep of `dir`.
    pub fn new(dir: &Path) -> Sweep {
        Sweep {
            dir: dir.to_path_buf(),
        }
    }

    /// Kills and unmounts now; says what it found, if anything.
    pub fn now(&self) -> Option<String> {
        let pids = kill_processes_under(&self.dir);
        let mounts = unmount_all_under(&self.dir);
        (!pids.is_empty() || !mounts.is_empty()).then(|| {
            format!(
                "killed {pids:?} and unmounted {mounts:?} under {}",
                self.dir.display()
            )
        })
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        if let Some(what) = self.now() {
            eprintln!("cleanup: {what}");
        }
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, so a test that fails while
/// it runs leaves nothing behind.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` to its end with `stdin` on its standard input, stdout and stderr to
/// files in `io_dir`, in its own process group, which is killed after `timeout`.
pub fn run_with_stdin(
    command: &mut Command,
    stdin: &[u8],
    io_dir: &Path,
    timeout: Duration,
) -> Outcome {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let input = io_dir.join(format!("run.{n}.stdin"));
    std::fs::write(&input, stdin).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let input_file = File::open(&input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let outcome = run_command_with(command, Stdio::from(input_file), io_dir, timeout);
    let _ = std::fs::remove_file(&input);
    outcome
}
