//! Timing one program: wall-clock time from spawn to reaped, and its peak RSS.
//!
//! Peak RSS is the child's `ru_maxrss` from `wait4`. The kernel folds into it the memory
//! of the process image the child replaced at `execve`, and a child spawned by `vfork`
//! (as `std::process::Command` does) replaces its parent's: measured straight from
//! nvc-bench, every program would show nvc-bench's own RSS (9 MiB once it has built its
//! trees). So each timed program is started by a fresh copy of nvc-bench in a measuring
//! mode ([`CHILD_MODE`], like `/usr/bin/time`): it spawns the program, reaps it with
//! `wait4`, and writes the time, peak RSS and status to a report file. Its own small
//! image (about 2.5 MiB) is the floor of every RSS figure, as the `/bin/true` row shows.
//!
//! `std` has no `wait4`, hence the one `unsafe` block of this crate: this is a benchmark
//! harness, not product code, and `nvc-host` owns container-path syscalls only.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::BenchError;

/// How long one timed command may run before its process group is killed.
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The first argument that puts nvc-bench in its measuring mode:
/// `nvc-bench --measure-child REPORT PROGRAM ARGS...`.
pub const CHILD_MODE: &str = "--measure-child";

/// One timed run of a program.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// From just before spawning to just after reaping.
    pub time: Duration,
    /// How it ended.
    pub status: ExitStatus,
    /// Its peak resident set, KiB.
    pub max_rss_kib: u64,
    /// User plus system CPU time of it and the descendants it reaped (runc reaps the
    /// container and the hook): less sensitive than wall time to a busy machine.
    pub cpu: Duration,
}

/// A command that runs `program` under the measuring mode, which reports to `report`;
/// add its arguments, environment and stdio, then pass it to [`time`]. The program gets
/// the command's environment, working directory and stdio.
pub fn command(program: &Path, report: &Path) -> Command {
    let mut command = Command::new(self_exe());
    command.arg(CHILD_MODE).arg(report).arg(program);
    command
}

/// Runs a [`command`] in its own process group and returns what its report says. A run
/// past [`TIME_LIMIT`] is killed (with its group) and is an error; a non-zero exit of
/// the program is returned, not an error.
pub fn time(command: &mut Command, report: &Path) -> Result<Measured, BenchError> {
    let line = describe(command);
    let _ = std::fs::remove_file(report);
    command.process_group(0);
    let mut child = command.spawn().map_err(|source| BenchError::Spawn {
        program: line.clone(),
        source,
    })?;
    arm(Some(child.id()));
    let waited = child.wait();
    let fired = arm(None);
    let outer = waited.map_err(|source| BenchError::Spawn {
        program: line.clone(),
        source,
    })?;
    if fired {
        return Err(BenchError::TimedOut {
            command: line,
            seconds: TIME_LIMIT.as_secs(),
        });
    }
    let text = std::fs::read_to_string(report).unwrap_or_default();
    parse_report(&text).ok_or_else(|| BenchError::Failed {
        command: line,
        status: outer.to_string(),
        details: ": the measuring process wrote no report (see its stderr)".into(),
    })
}

/// The measuring mode: `args` are REPORT PROGRAM ARGS... Spawns the program with
/// everything inherited, reaps it, writes
/// `<wall nanoseconds> <maxrss KiB> <raw status> <CPU microseconds>`.
pub fn child_main(args: &[OsString]) -> ExitCode {
    let [report, program, rest @ ..] = args else {
        eprintln!("nvc-bench {CHILD_MODE}: needs REPORT PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let start = Instant::now();
    let child = match Command::new(program).args(rest).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("nvc-bench: cannot run {}: {e}", program.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    let (status, rss, cpu) = match wait4(child.id()) {
        Ok(done) => done,
        Err(e) => {
            eprintln!(
                "nvc-bench: cannot wait for {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::FAILURE;
        }
    };
    let nanos = start.elapsed().as_nanos();
    let text = format!("{nanos} {rss} {} {}\n", status.into_raw(), cpu.as_micros());
    match std::fs::write(report, text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvc-bench: cannot write {}: {e}", report.to_string_lossy());
            ExitCode::FAILURE
        }
    }
}

/// Reads a report of [`child_main`].
pub fn parse_report(text: &str) -> Option<Measured> {
    let mut fields = text.split_whitespace();
    let nanos: u64 = fields.next()?.parse().ok()?;
    let max_rss_kib: u64 = fields.next()?.parse().ok()?;
    let raw: i32 = fields.next()?.parse().ok()?;
    let cpu_us: u64 = fields.next()?.parse().ok()?;
    if fields.next().is_some() {
        return None;
    }
    Some(Measured {
        time: Duration::from_nanos(nanos),
        status: ExitStatus::from_raw(raw),
        max_rss_kib,
        cpu: Duration::from_micros(cpu_us),
    })
}

/// The command line, for messages: the measured program's, without the measuring mode.
pub fn describe(command: &Command) -> String {
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match args.split_first() {
        Some((mode, [_report, measured @ ..])) if mode == CHILD_MODE => measured.join(" "),
        _ => {
            let program = command.get_program().to_string_lossy().into_owned();
            std::iter::once(program)
                .chain(args)
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

fn self_exe() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nvc-bench")))
}

/// Reaps `pid`, our child, returning its status, `ru_maxrss` (KiB) and user plus system
/// time.
#[allow(unsafe_code)]
fn wait4(pid: u32) -> std::io::Result<(ExitStatus, u64, Duration)> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data, for which all-zero bytes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the whole call, and `pid`
        // is a child of this process that nothing else waits for.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            let rss = u64::try_from(usage.ru_maxrss).unwrap_or(0);
            let cpu = timeval(usage.ru_utime) + timeval(usage.ru_stime);
            return Ok((ExitStatus::from_raw(status), rss, cpu));
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

fn timeval(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

enum Watch {
    Arm(u32, Instant),
    Disarm,
}

/// Arms the watchdog for process group `pid` (`Some`) or disarms it (`None`); returns
/// whether it fired since it was last armed.
fn arm(pid: Option<u32>) -> bool {
    static FIRED: Mutex<bool> = Mutex::new(false);
    static WATCHDOG: OnceLock<Mutex<Sender<Watch>>> = OnceLock::new();
    let sender = WATCHDOG.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Watch>();
        std::thread::spawn(move || {
            let mut armed: Option<(u32, Instant)> = None;
            loop {
                let next = match armed {
                    Some((_, deadline)) => {
                        rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    }
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                };
                match next {
                    Ok(Watch::Arm(pid, deadline)) => armed = Some((pid, deadline)),
                    Ok(Watch::Disarm) => armed = None,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some((pid, _)) = armed.take() {
                            *FIRED.lock().unwrap_or_else(|p| p.into_inner()) = true;
                            let _ = Command::new("kill")
                                .args(["-KILL", "--", &format!("-{pid}")])
                                .status();
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        });
        Mutex::new(tx)
    });
    let message = match pid {
        Some(pid) => Watch::Arm(pid, Instant::now() + TIME_LIMIT),
        None => Watch::Disarm,
    };
    let _ = sender
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(message);
    let mut fired = FIRED.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *fired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let m = parse_report("1500000 2400 768 900\n").unwrap();
        assert_eq!(m.time, Duration::from_micros(1500));
        assert_eq!(m.max_rss_kib, 2400);
        assert_eq!(m.status.code(), Some(3));
        assert_eq!(m.cpu, Duration::from_micros(900));
        for bad in ["", "1 2 3", "1 2 3 4 5", "x 2 3 4"] {
            assert!(parse_report(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn describes_the_measured_program() {
        let mut c = command(Path::new("/bin/true"), Path::new("/tmp/r"));
        c.args(["--root", "s"]);
        assert_eq!(describe(&c), "/bin/true --root s");
        assert_eq!(describe(Command::new("runc").arg("list")), "runc list");
    }

    #[test]
    // Reaped by `wait4`, which clippy does not know.
    #[allow(clippy::zombie_processes)]
    fn reaps_a_child_with_its_status_and_rss() {
        let child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let (status, rss, _cpu) = wait4(child.id()).unwrap();
        assert_eq!(status.code(), Some(3));
        assert!(rss > 0);
    }
}
