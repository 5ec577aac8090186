//! Running one runtime command (runc, or nvc's shim in front of it) with a timeout and
//! captured output ([`Outcome`]), and deleting every container a [`Runtime`] created.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Bundle;

use super::{runc_path, workspace_bin, DEFAULT_TIMEOUT};

/// What one runtime command did.
#[derive(Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The command line, for messages.
    pub command: String,
    /// The exit status; 128 + signal when killed by a signal, -1 on a timeout.
    pub status: i32,
    /// Whether it ran past its timeout and was killed.
    pub timed_out: bool,
    /// Its stdout (for `run`, the container's).
    pub stdout: String,
    /// Its stderr (for `run`, the container's and the runtime's).
    pub stderr: String,
    /// What this command added to the runtime's `--log` file (JSON lines).
    pub log: String,
}

impl Outcome {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// Panics with the whole outcome unless it succeeded; returns it for chaining.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "command failed:\n{self:?}");
        self
    }

    /// The `msg` of every JSON line of [`Outcome::log`] (other lines as they are).
    pub fn log_messages(&self) -> Vec<String> {
        self.log
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
                Ok(v) => v["msg"].as_str().unwrap_or(l).to_string(),
                Err(_) => l.to_string(),
            })
            .collect()
    }
}

impl fmt::Debug for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "$ {}", self.command)?;
        if self.timed_out {
            writeln!(f, "status: timed out, killed")?;
        } else {
            writeln!(f, "status: {}", self.status)?;
        }
        for (name, text) in [
            ("stdout", &self.stdout),
            ("stderr", &self.stderr),
            ("log", &self.log),
        ] {
            if text.is_empty() {
                writeln!(f, "--- {name}: (empty)")?;
            } else {
                writeln!(f, "--- {name}:\n{}", text.trim_end())?;
            }
        }
        Ok(())
    }
}

/// An OCI runtime to start containers with: plain runc, or nvc's shim in front of it.
///
/// Every container it creates is deleted (`runc delete --force`, run directly so a broken
/// shim cannot leave one behind) after `run`, and when the `Runtime` is dropped.
#[derive(Debug)]
pub struct Runtime {
    /// runc's `--root`: the containers' state.
    pub state_root: PathBuf,
    /// The program run: runc or nvc-runtime.
    pub program: PathBuf,
    /// Extra environment for the program (`NVC_CONFIG` for the shim).
    pub env: Vec<(String, OsString)>,
    /// How long one command may take.
    pub timeout: Duration,
    log: PathBuf,
    runc: PathBuf,
    /// Containers created and not yet deleted, with the files holding their stdio.
    created: Mutex<Vec<(String, PathBuf, PathBuf)>>,
    next_io: AtomicU64,
}

impl Runtime {
    /// Plain runc with `--root <state_dir>` and `--log <state_dir>/runc.log --log-format json`.
    pub fn runc(state_dir: &Path) -> Runtime {
        let runc = runc_path();
        Runtime::new(state_dir, runc, Vec::new())
    }

    /// nvc's shim (`workspace_bin("nvc-runtime")`) with `NVC_CONFIG=<nvc_config>` and the
    /// same global flags as [`Runtime::runc`], as Docker passes them.
    pub fn nvc(state_dir: &Path, nvc_config: &Path) -> Runtime {
        let shim = workspace_bin("nvc-runtime");
        let env = vec![(
            "NVC_CONFIG".to_string(),
            std::path::absolute(nvc_config)
                .unwrap_or_else(|_| nvc_config.to_path_buf())
                .into_os_string(),
        )];
        Runtime::new(state_dir, shim, env)
    }

    fn new(state_dir: &Path, program: PathBuf, env: Vec<(String, OsString)>) -> Runtime {
        let state_root = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        Runtime {
            log: state_root.join("runc.log"),
            state_root,
            program,
            env,
            timeout: DEFAULT_TIMEOUT,
            runc: runc_path(),
            created: Mutex::new(Vec::new()),
            next_io: AtomicU64::new(0),
        }
    }

    /// The same runtime with another timeout per command.
    pub fn with_timeout(mut self, timeout: Duration) -> Runtime {
        self.timeout = timeout;
        self
    }

    /// The `--log` file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `run --bundle <dir> <id>`: runs the container to its end, stdin null, then deletes it.
    pub fn run(&self, bundle: &Bundle, id: &str) -> Outcome {
        let (stdout, stderr) = self.io_files(id);
        self.remember(id, &stdout, &stderr);
        let args = [
            OsString::from("run"),
            "--bundle".into(),
            bundle.dir.clone().into(),
            id.into(),
        ];
        let outcome = self.command_with_io(&args, &stdout, &stderr);
        self.cleanup(id);
        outcome
    }

    /// `create --bundle <dir> <id>`. The container's stdout and stderr go to files read by
    /// [`Runtime::container_output`]; the container is deleted when the `Runtime` is dropped.
    pub fn create(&self, bundle: &Bundle, id: &str) -> Outcome {
        let (stdout, stderr) = self.io_files(id);
        self.remember(id, &stdout, &stderr);
        let args = [
            OsString::from("create"),
            "--bundle".into(),
            bundle.dir.clone().into(),
            id.into(),
        ];
        self.command_with_io(&args, &stdout, &stderr)
    }

    /// `start <id>`.
    pub fn start(&self, id: &str) -> Outcome {
        self.command(&["start", id])
    }

    /// `state <id>`.
    pub fn state(&self, id: &str) -> Outcome {
        self.command(&["state", id])
    }

    /// `delete --force <id>`, through this runtime.
    pub fn delete(&self, id: &str) -> Outcome {
        let outcome = self.command(&["delete", "--force", id]);
        self.forget(id);
        outcome
    }

    /// What the container `id` (from [`Runtime::create`]) has written so far: stdout, stderr.
    pub fn container_output(&self, id: &str) -> (String, String) {
        let created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        match created.iter().find(|(c, _, _)| c == id) {
            Some((_, out, err)) => (read_lossy(out), read_lossy(err)),
            None => (String::new(), String::new()),
        }
    }

    /// Any subcommand with the global flags, e.g. `["list"]`.
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Outcome {
        let (stdout, stderr) = self.io_files("cmd");
        let outcome = self.command_with_io(args, &stdout, &stderr);
        let _ = std::fs::remove_file(&stdout);
        let _ = std::fs::remove_file(&stderr);
        outcome
    }

    /// Files for one command's stdout and stderr, next to the state (runc skips files in its
    /// root when listing containers).
    fn io_files(&self, tag: &str) -> (PathBuf, PathBuf) {
        let n = self.next_io.fetch_add(1, Ordering::Relaxed);
        (
            self.state_root.join(format!("{tag}.{n}.stdout")),
            self.state_root.join(format!("{tag}.{n}.stderr")),
        )
    }

    fn remember(&self, id: &str, stdout: &Path, stderr: &Path) {
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        created.push((id.to_string(), stdout.to_path_buf(), stderr.to_path_buf()));
    }

    fn forget(&self, id: &str) {
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        created.retain(|(c, _, _)| c != id);
    }

    /// Deletes `id` with runc itself, ignoring "does not exist".
    fn cleanup(&self, id: &str) {
        let _ = Command::new(&self.runc)
            .arg("--root")
            .arg(&self.state_root)
            .args(["delete", "--force", id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.forget(id);
    }

    fn command_with_io<S: AsRef<std::ffi::OsStr>>(
        &self,
        args: &[S],
        stdout: &Path,
        stderr: &Path,
    ) -> Outcome {
        if let Err(e) = std::fs::create_dir_all(&self.state_root) {
            panic!("cannot create {}: {e}", self.state_root.display());
        }
        let mut command = Command::new(&self.program);
        command
            .arg("--root")
            .arg(&self.state_root)
            .arg("--log")
            .arg(&self.log)
            .args(["--log-format", "json"])
            .args(args)
            .env_remove("NVC_CONFIG");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let line = describe(&command);
        let open = |path: &Path| {
            File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
        };
        command
            .stdin(Stdio::null())
            .stdout(open(stdout))
            .stderr(open(stderr))
            // Its own process group, so a timeout kills the shim and runc together.
            .process_group(0);
        let log_start = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {line}: {e}"));
        let deadline = Instant::now() + self.timeout;
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{}", child.id())])
                        .status();
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("cannot wait for {line}: {e}"),
            }
        };
        let status = match status {
            Some(s) => s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(-1),
            None => -1,
        };
        Outcome {
            command: line,
            status,
            timed_out,
            stdout: read_lossy(stdout),
            stderr: read_lossy(stderr),
            log: read_from(&self.log, log_start),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let ids: Vec<String> = self
            .created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, _, _)| id.clone())
            .collect();
        for id in ids {
            self.cleanup(&id);
        }
    }
}

/// A command line with its environment, for messages.
pub(crate) fn describe(command: &Command) -> String {
    let mut line: Vec<String> = command
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    line.push(command.get_program().to_string_lossy().into_owned());
    line.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    line.join(" ")
}

/// A file's text, lossily; empty when unreadable.
pub(crate) fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn read_from(path: &Path, start: u64) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let start = usize::try_from(start)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}
