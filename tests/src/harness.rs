//! Runs real containers: runc directly or through nvc's shim, with timeouts, captured output
//! and cleanup, plus snapshots of host state for "nothing outside changed" assertions.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{Bundle, FakeDriver, FakeError};

/// How long one runtime command may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace's built binary `name`: `target/<profile>/<name>`, found next to the running
/// test executable (which lives in `target/<profile>/deps/`).
///
/// # Panics
///
/// When it is missing: `cargo test -p nvc-tests` does not build the other crates' binaries.
#[track_caller]
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    if !bin.is_file() {
        panic!(
            "{} is missing: run `cargo build --workspace` first",
            bin.display()
        );
    }
    bin
}

/// The absolute path of `runc`: from `PATH`, else the sbin directories (which `PATH` lacks
/// under some CI runners).
///
/// # Panics
///
/// When runc is not installed.
#[track_caller]
pub fn runc_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("runc"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("runc is not installed: run `scripts/deps.sh runc`"))
}

/// A container id no other test in any process uses: `<prefix>-<pid>-<n>-<time>`.
pub fn container_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{n}-{nanos:08x}", std::process::id())
}

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

/// Writes `<dir>/config.toml`, an nvc configuration for the shim and the hook: `[driver]` at
/// the fake tree's roots, the workspace's `nvc-hook`, the absolute path of runc, and a debug
/// log at `<dir>/nvc.log`. Returns its path.
pub fn nvc_config_for(fake: &FakeDriver, dir: &Path) -> Result<PathBuf, FakeError> {
    let hook = workspace_bin("nvc-hook");
    let runc = runc_path();
    std::fs::create_dir_all(dir).map_err(FakeError::io("create directory", dir))?;
    let dir = std::path::absolute(dir).map_err(FakeError::io("make absolute", dir))?;
    let text = format!(
        "[driver]\nroot = {}\ndev-root = {}\nproc-root = {}\n\n\
         [runtime]\nruntimes = [{}]\n\n\
         [hook]\npath = {}\n\n\
         [log]\nfile = {}\nlevel = \"debug\"\n",
        toml_string(&fake.root),
        toml_string(&fake.dev_root),
        toml_string(&fake.proc_root),
        toml_string(&runc),
        toml_string(&hook),
        toml_string(&dir.join("nvc.log")),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).map_err(FakeError::io("write", &path))?;
    Ok(path)
}

/// A TOML basic string.
fn toml_string(path: &Path) -> String {
    let mut out = String::from("\"");
    for c in path.to_string_lossy().chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A listing of everything under `dir`, one line per entry in path order: relative path,
/// type, mode, owner, and the link target, device number or a hash and size of the
/// contents. Links are not followed. Two listings are equal exactly when nothing that
/// matters for escapes changed (times are left out); compare them with `assert_eq!` to see
/// what did.
pub fn tree_digest(dir: &Path) -> String {
    let mut out = String::new();
    digest_entry(dir, Path::new("."), &mut out);
    out
}

fn digest_entry(path: &Path, relative: &Path, out: &mut String) {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            out.push_str(&format!("{} error {}\n", relative.display(), e.kind()));
            return;
        }
    };
    let kind = meta.file_type();
    let mode = meta.permissions().mode() & 0o7777;
    let head = format!(
        "{} {:04o} {}:{}",
        relative.display(),
        mode,
        meta.uid(),
        meta.gid()
    );
    if kind.is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        out.push_str(&format!("{head} link -> {}\n", target.display()));
    } else if kind.is_file() {
        out.push_str(&format!(
            "{head} file {} bytes {}\n",
            meta.len(),
            content_hash(path)
        ));
    } else if kind.is_dir() {
        out.push_str(&format!("{head} dir\n"));
        let mut names: Vec<OsString> = std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        for name in names {
            digest_entry(&path.join(&name), &relative.join(&name), out);
        }
    } else {
        let what = if kind.is_char_device() {
            "char"
        } else if kind.is_block_device() {
            "block"
        } else if kind.is_fifo() {
            "fifo"
        } else if kind.is_socket() {
            "socket"
        } else {
            "other"
        };
        let rdev = meta.rdev();
        // glibc's major() and minor().
        let major = ((rdev & 0x0000_0000_000f_ff00) >> 8) | ((rdev & 0xffff_f000_0000_0000) >> 32);
        let minor = (rdev & 0xff) | ((rdev & 0x0000_0fff_fff0_0000) >> 12);
        out.push_str(&format!("{head} {what} {major}:{minor}\n"));
    }
}

fn content_hash(path: &Path) -> String {
    // SipHash with fixed keys: stable within a build, which is all a before/after
    // comparison needs.
    let mut hasher = DefaultHasher::new();
    match std::fs::read(path) {
        Ok(bytes) => {
            hasher.write(&bytes);
            format!("{:016x}", hasher.finish())
        }
        Err(e) => format!("unreadable({})", e.kind()),
    }
}

/// The mount points of this process's mount namespace (`/proc/self/mountinfo`), sorted:
/// compare before and after a container run to see that nothing was mounted on the host.
pub fn host_mounts() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .collect();
    mounts.sort();
    mounts
}

/// [`host_mounts`] less the mounts other tests may be making at the same time: those in
/// the temporary directory that are not under `own_dir`, the calling test's directory.
/// What is left still shows a mount leaked onto a host path or into the test's own tree.
pub fn host_mounts_beside_tests(own_dir: &Path) -> Vec<String> {
    let temp = std::env::temp_dir();
    let temp = std::fs::canonicalize(&temp).unwrap_or(temp);
    let own = std::fs::canonicalize(own_dir).unwrap_or_else(|_| own_dir.to_path_buf());
    host_mounts()
        .into_iter()
        .filter(|m| {
            let m = Path::new(m);
            m.starts_with(&own) || !m.starts_with(&temp) || m == temp
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(n) = u8::from_str_radix(digits, 8) {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The names of the entries of `dir`, sorted; empty when it cannot be read. Compare
/// before and after a runtime command to see that it left no file behind.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A mount a test made, unmounted when dropped (lazily, so that a mount a failed test left
/// busy goes too): tests that mount never leave the host's mount table changed.
#[derive(Debug)]
pub struct TestMount {
    target: PathBuf,
}

impl TestMount {
    /// A tmpfs at `target` (created if missing) with `options`, such as `size=64k`.
    pub fn tmpfs(target: &Path, options: &str) -> Result<TestMount, FakeError> {
        std::fs::create_dir_all(target).map_err(FakeError::io("create directory", target))?;
        let mut mount = Command::new("mount");
        mount
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(target);
        run_mount(mount, "mount a tmpfs")?;
        Ok(TestMount {
            target: target.to_path_buf(),
        })
    }

    /// `dir` bind-mounted read-only onto itself: its files stay readable, nothing in it
    /// can be created, changed or removed.
    pub fn read_only(dir: &Path) -> Result<TestMount, FakeError> {
        let mut bind = Command::new("mount");
        bind.arg("--bind").arg(dir).arg(dir);
        run_mount(bind, "bind-mount a directory onto itself")?;
        // From here on, dropping the guard unmounts the bind mount.
        let guard = TestMount {
            target: dir.to_path_buf(),
        };
        let mut remount = Command::new("mount");
        remount.args(["-o", "remount,bind,ro"]).arg(dir);
        run_mount(remount, "make a bind mount read-only")?;
        Ok(guard)
    }

    /// `dir` bind-mounted onto itself and made a shared mount (its own peer group), as a
    /// host folder a container engine mounts with shared propagation: what is mounted in
    /// any of its peers shows up here.
    pub fn shared(dir: &Path) -> Result<TestMount, FakeError> {
        let mut bind = Command::new("mount");
        bind.arg("--bind").arg(dir).arg(dir);
        run_mount(bind, "bind-mount a directory onto itself")?;
        let guard = TestMount {
            target: dir.to_path_buf(),
        };
        let mut shared = Command::new("mount");
        shared.arg("--make-shared").arg(dir);
        run_mount(shared, "make a bind mount shared")?;
        Ok(guard)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.target
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn run_mount(mut command: Command, step: &'static str) -> Result<(), FakeError> {
    let line = describe(&command);
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| FakeError::Spawn {
            step,
            program: "mount".into(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(FakeError::Command {
            step,
            command: line,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The pids of the processes whose root directory or working directory is `dir` or
/// under it, as `/proc/<pid>/root` and `/proc/<pid>/cwd` show them: a container's
/// processes (and a `runc init` still setting one up) point into its rootfs.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    ["root", "cwd"].iter().any(|link| {
                        std::fs::read_link(format!("/proc/{pid}/{link}"))
                            .is_ok_and(|target| target.starts_with(&dir))
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The ids of the containers runc knows in the state root `state_root`
/// (`runc --root <state_root> list -q`).
pub fn runc_containers(state_root: &Path) -> Vec<String> {
    let out = Command::new(runc_path())
        .arg("--root")
        .arg(state_root)
        .args(["list", "-q"])
        .stdin(Stdio::null())
        .output();
    let mut ids: Vec<String> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// `runc --root <state_root> delete --force <id>`, run directly; returns whether runc
/// succeeded (it fails for an id it does not know).
pub fn runc_delete(state_root: &Path, id: &str) -> bool {
    Command::new(runc_path())
        .arg("--root")
        .arg(state_root)
        .args(["delete", "--force", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\"), "/end\\");
    }
}
