//! Running one command to its end with stdout and stderr captured, killing its process
//! group after a timeout.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{describe, read_lossy};
use crate::Outcome;

/// Runs `command` to its end (stdin null, stdout and stderr to files in `io_dir`), killing
/// its process group after `timeout`.
pub fn run_command(command: &mut Command, io_dir: &Path, timeout: Duration) -> Outcome {
    run_command_with(command, Stdio::null(), io_dir, timeout)
}

/// [`run_command`] with `stdin` on the command's standard input.
pub(crate) fn run_command_with(
    command: &mut Command,
    stdin: Stdio,
    io_dir: &Path,
    timeout: Duration,
) -> Outcome {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let line = describe(command);
    let stdout = io_dir.join(format!("cmd.{n}.stdout"));
    let stderr = io_dir.join(format!("cmd.{n}.stderr"));
    let failed = |why: String| Outcome {
        command: line.clone(),
        status: -1,
        timed_out: false,
        stdout: String::new(),
        stderr: why,
        log: String::new(),
    };
    let (out, err) = match (File::create(&stdout), File::create(&stderr)) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => return failed(format!("cannot create output files: {e}")),
    };
    command
        .stdin(stdin)
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot start: {e}")),
    };
    let (status, timed_out) = wait_or_kill_group(&mut child, timeout);
    let outcome = Outcome {
        command: line,
        status,
        timed_out,
        stdout: read_lossy(&stdout),
        stderr: read_lossy(&stderr),
        log: String::new(),
    };
    let _ = std::fs::remove_file(&stdout);
    let _ = std::fs::remove_file(&stderr);
    outcome
}

/// Waits for `child`, the leader of its own process group; kills the group after
/// `timeout`. Returns the exit status (128 + signal, -1 on a timeout) and whether it timed
/// out.
pub(crate) fn wait_or_kill_group(child: &mut Child, timeout: Duration) -> (i32, bool) {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let code = status
                    .code()
                    .or(status.signal().map(|s| 128 + s))
                    .unwrap_or(-1);
                return (code, false);
            }
            Ok(None) if Instant::now() >= deadline => {
                signal(&format!("-{}", child.id()), "KILL");
                let _ = child.kill();
                let _ = child.wait();
                return (-1, true);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => return (-1, false),
        }
    }
}

/// Sends `sig` to `target` (a pid, or `-pgid` for a group) with kill(1): the tests crate
/// has no `unsafe`, so no libc.
pub(super) fn signal(target: &str, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
