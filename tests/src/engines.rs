//! Real container engines for tests: a private `dockerd`, a private `containerd` (driven with
//! `ctr`) and `podman` with private storage.
//!
//! Each keeps its state, sockets and logs under a directory the caller owns, and runs in its
//! own mount and PID namespaces, with an empty tmpfs over the host directories the engines
//! write to outside the state they are configured with ([`MASKED_DIRS`]). When the
//! namespace's first process ends, the kernel kills whatever the engine left running
//! (shims, conmon, containers), and the mounts it made go with the namespace. Dropping an
//! engine stops it (SIGTERM, then SIGKILL) and removes the cgroups it made, so a test leaves
//! nothing running and nothing changed on the host.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{describe, read_lossy};
use crate::{container_id, Outcome};

/// How long one engine command (`docker run`, `ctr images import`, `podman run`) may take.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a daemon may take to answer after it was started.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a daemon may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Host directories hidden behind an empty tmpfs in every engine's mount namespace: where
/// the engines write outside their configured state (`/run/docker`, the shims' sockets in
/// `/run/containerd/s`, `ctr`'s and podman's runtime files in `/run`, dockerd's containerd
/// plugin folder `/opt/containerd`, podman's `/var/lib/containers/cache` and `/var/tmp`).
/// A directory missing on the host is not masked (its mount point would have to be made).
pub const MASKED_DIRS: &[&str] = &["/run", "/var/lib", "/var/tmp", "/opt"];

/// The prefix of every cgroup an engine here makes (dockerd's `--cgroup-parent`, podman's
/// `--cgroup-parent`, containerd's namespace), so leftovers are easy to spot.
pub const CGROUP_PREFIX: &str = "nvc-engine-test";

/// The `PATH` engines run with unless a test gives another: the sbin directories first
/// (runc, dockerd and containerd live there), then this process's `PATH`.
pub fn engine_path() -> OsString {
    let mut dirs: Vec<PathBuf> = ["/usr/local/sbin", "/usr/sbin", "/sbin"]
        .map(PathBuf::from)
        .to_vec();
    let current = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&current) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Why an engine could not be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A program the engine needs is not installed.
    #[error("{program} is not installed ({package}): run `scripts/deps.sh` as root")]
    Missing {
        /// The program, e.g. `dockerd`.
        program: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A file system operation failed.
    #[error("failed to {op} {path}")]
    Io {
        /// The operation, e.g. "create directory".
        op: &'static str,
        /// The path it was done on.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A program could not be started.
    #[error("failed to start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A daemon exited, or did not answer in time, after it was started.
    #[error("{what} did not come up: {why}; the end of its log ({log}):\n{tail}")]
    NotReady {
        /// The daemon.
        what: &'static str,
        /// What happened instead.
        why: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// A setup command (an image import, an archive step) failed.
    #[error("failed to {step}:\n{outcome:?}")]
    Command {
        /// What it was run for.
        step: &'static str,
        /// What it did.
        outcome: Box<Outcome>,
    },
}

impl EngineError {
    fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| EngineError::Io { op, path, source }
    }

    fn check(step: &'static str, outcome: Outcome) -> Result<Outcome, EngineError> {
        if outcome.success() {
            Ok(outcome)
        } else {
            Err(EngineError::Command {
                step,
                outcome: Box::new(outcome),
            })
        }
    }
}

/// `program` from [`engine_path`], or [`EngineError::Missing`].
pub fn find_program(program: &'static str, package: &'static str) -> Result<PathBuf, EngineError> {
    std::env::split_paths(&engine_path())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or(EngineError::Missing { program, package })
}

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
fn signal(target: &str, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `unshare` running `program` as the first process of new mount and PID namespaces, with
/// [`MASKED_DIRS`] under empty tmpfs, `/proc` of the new PID namespace, and
/// `--kill-child` so that killing `unshare` ends the namespace and everything in it.
fn isolated(program: &Path) -> Command {
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
struct Daemon {
    what: &'static str,
    /// `unshare`, parent of the daemon.
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(what: &'static str, mut command: Command, log: &Path) -> Result<Daemon, EngineError> {
        let out = File::create(log).map_err(EngineError::io("create", log))?;
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

    /// Polls `ready` until it returns true; fails when the daemon exits first or after
    /// [`START_TIMEOUT`].
    fn wait_ready(&mut self, mut ready: impl FnMut() -> bool) -> Result<(), EngineError> {
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

    /// The last `lines` lines of the daemon's log.
    fn log_tail(&self, lines: usize) -> String {
        let text = read_lossy(&self.log);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM to the daemon (the first process of its PID namespace), SIGKILL to
    /// `unshare` after [`STOP_TIMEOUT`] (which with `--kill-child` ends the namespace).
    fn stop(&mut self) {
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
fn cgroup_name(engine: &str) -> String {
    container_id(&format!("{CGROUP_PREFIX}-{engine}"))
}

fn mkdirs(path: &Path) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(path).map_err(EngineError::io("create directory", path))?;
    std::path::absolute(path).map_err(EngineError::io("make absolute", path))
}

/// The `docker` CLI pointed at one daemon's socket, with a private `DOCKER_CONFIG`.
#[derive(Debug, Clone)]
struct DockerClient {
    cli: PathBuf,
    socket: PathBuf,
    dir: PathBuf,
}

impl DockerClient {
    fn run<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Outcome {
        let mut command = Command::new(&self.cli);
        command
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .args(args)
            .env("DOCKER_CONFIG", self.dir.join("client"))
            .env_remove("DOCKER_HOST")
            .env_remove("DOCKER_CONTEXT");
        run_command(&mut command, &self.dir.join("io"), timeout)
    }
}

/// A private `dockerd`: `--data-root`, `--exec-root`, pidfile, socket and trust key under
/// its directory, the vfs storage driver, no bridge and no iptables rules (containers run
/// with `--network none`), its own cgroup parent. The `docker` CLI installed beside
/// `dockerd` talks to it with a private `DOCKER_CONFIG`.
#[derive(Debug)]
pub struct Dockerd {
    /// Its directory.
    pub dir: PathBuf,
    /// The API socket.
    pub socket: PathBuf,
    /// dockerd's `--cgroup-parent`.
    pub cgroup_parent: String,
    client: DockerClient,
    daemon: Daemon,
}

impl Dockerd {
    /// Starts dockerd with the config `daemon_json` (a copy that also keeps its trust key
    /// under `dir`) and `env` added to its
    /// environment (with `PATH` from [`engine_path`] unless `env` sets it: Docker's
    /// `--gpus` looks up `nvidia-container-runtime-hook` there, and passes its own
    /// environment to that hook), and waits until it answers.
    pub fn start(
        dir: &Path,
        daemon_json: &Path,
        env: &[(&str, &OsStr)],
    ) -> Result<Dockerd, EngineError> {
        let dockerd = find_program("dockerd", "docker.io")?;
        // The CLI of the same package (Debian: /usr/sbin/dockerd, /usr/bin/docker), not a
        // newer one earlier on PATH.
        let sibling = dockerd
            .parent()
            .map(|sbin| [sbin.join("docker"), sbin.join("../bin/docker")]);
        let cli = match sibling.into_iter().flatten().find(|p| p.is_file()) {
            Some(cli) => cli,
            None => find_program("docker", "docker.io")?,
        };
        let dir = mkdirs(dir)?;
        for sub in ["data", "exec", "client", "io", "tmp"] {
            mkdirs(&dir.join(sub))?;
        }
        let socket = dir.join("docker.sock");
        let cgroup_parent = cgroup_name("docker");
        // dockerd 20.10 writes its trust key to /etc/docker/key.json unless its config says
        // otherwise, and has no flag for it: it runs with a copy of `daemon_json` that does.
        let text =
            std::fs::read_to_string(daemon_json).map_err(EngineError::io("read", daemon_json))?;
        let mut json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| EngineError::Io {
                op: "parse as JSON",
                path: daemon_json.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
        if let Some(map) = json.as_object_mut() {
            map.insert(
                "deprecated-key-path".into(),
                dir.join("key.json").to_string_lossy().into(),
            );
        }
        let config = dir.join("daemon.json");
        std::fs::write(&config, json.to_string()).map_err(EngineError::io("write", &config))?;
        let mut command = isolated(&dockerd);
        command
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .arg("--host")
            .arg(format!("unix://{}", socket.display()))
            .arg("--config-file")
            .arg(&config)
            .args([
                "--storage-driver",
                "vfs",
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--exec-opt",
                "native.cgroupdriver=cgroupfs",
            ])
            .arg("--cgroup-parent")
            .arg(format!("/{cgroup_parent}"))
            .env("PATH", engine_path())
            // Where its containerd writes goroutine dumps, among others.
            .env("TMPDIR", dir.join("tmp"));
        for (key, value) in env {
            command.env(key, value);
        }
        let client = DockerClient {
            cli,
            socket: socket.clone(),
            dir: dir.clone(),
        };
        let mut daemon = Daemon::spawn("dockerd", command, &dir.join("dockerd.log"))?;
        let ping = ["version", "--format", "{{.Server.Version}}"];
        let ready = daemon
            .wait_ready(|| socket.exists() && client.run(&ping, Duration::from_secs(10)).success());
        let dockerd = Dockerd {
            dir,
            socket,
            cgroup_parent,
            client,
            daemon,
        };
        ready.map(|()| dockerd)
    }

    /// `docker -H unix://<socket> ARGS`, with [`ENGINE_TIMEOUT`].
    pub fn docker<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        self.client.run(args, ENGINE_TIMEOUT)
    }

    /// `docker import <tarball> <name>`.
    pub fn import(&self, tarball: &Path, name: &str) -> Result<(), EngineError> {
        let args = [OsStr::new("import"), tarball.as_os_str(), OsStr::new(name)];
        EngineError::check("import the test rootfs into dockerd", self.docker(&args)).map(drop)
    }

    /// `docker run --rm --network none OPTIONS IMAGE COMMAND...`.
    pub fn run<S: AsRef<OsStr>>(&self, options: &[S], image: &str, command: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = ["run", "--rm", "--network", "none"]
            .map(OsString::from)
            .to_vec();
        args.extend(options.iter().map(|o| o.as_ref().to_os_string()));
        args.push(image.into());
        args.extend(command.iter().map(OsString::from));
        self.docker(&args)
    }

    /// The last `lines` lines of dockerd's log, for messages.
    pub fn log_tail(&self, lines: usize) -> String {
        self.daemon.log_tail(lines)
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        self.daemon.stop();
        remove_cgroups(&self.cgroup_parent);
    }
}

/// A private `containerd`: root, state, gRPC and ttrpc sockets and its plugin folder
/// (`/opt/containerd` by default) under its directory, no CRI plugin unless the config
/// asks for it. Driven with `ctr` in its own containerd namespace (whose name also names
/// the containers' cgroups), the native snapshotter, and `ctr run`'s FIFOs under its
/// directory.
#[derive(Debug)]
pub struct Containerd {
    /// Its directory.
    pub dir: PathBuf,
    /// The gRPC socket.
    pub socket: PathBuf,
    /// The containerd namespace `ctr` works in.
    pub namespace: String,
    /// The config file it runs with.
    pub config: PathBuf,
    client: CtrClient,
    daemon: Daemon,
}

/// `ctr` pointed at one containerd and namespace.
#[derive(Debug)]
struct CtrClient {
    ctr: PathBuf,
    socket: PathBuf,
    namespace: String,
    io_dir: PathBuf,
}

impl CtrClient {
    fn run<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Outcome {
        let mut command = Command::new(&self.ctr);
        command
            .arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .env_remove("CONTAINERD_ADDRESS")
            .env_remove("CONTAINERD_NAMESPACE");
        run_command(&mut command, &self.io_dir, timeout)
    }
}

impl Containerd {
    /// A containerd config with every path under `dir` (root, state, sockets, the plugin
    /// folder), and the CRI plugin on or off. [`Containerd::start`] writes it with `cri`
    /// off when `<dir>/config.toml` does not exist.
    pub fn default_config(dir: &Path, cri: bool) -> String {
        let d = dir.display();
        let disabled = if cri {
            ""
        } else {
            "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
        };
        format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n{disabled}\n\
             [grpc]\n  address = \"{d}/containerd.sock\"\n\n\
             [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n"
        )
    }

    /// Starts containerd with `<dir>/config.toml` (written from
    /// [`Containerd::default_config`] unless it exists: a test may write its own, which
    /// must keep the paths under `dir`) and `env` added to its environment (the shim and
    /// the runtime it runs inherit it), and waits until it answers.
    pub fn start(dir: &Path, env: &[(&str, &OsStr)]) -> Result<Containerd, EngineError> {
        let containerd = find_program("containerd", "containerd")?;
        let ctr = find_program("ctr", "containerd")?;
        let dir = mkdirs(dir)?;
        for sub in ["fifo", "io", "opt", "tmp"] {
            mkdirs(&dir.join(sub))?;
        }
        let config = dir.join("config.toml");
        if !config.exists() {
            std::fs::write(&config, Containerd::default_config(&dir, false))
                .map_err(EngineError::io("write", &config))?;
        }
        let mut command = isolated(&containerd);
        command
            .arg("--config")
            .arg(&config)
            .env("PATH", engine_path())
            .env("TMPDIR", dir.join("tmp"));
        for (key, value) in env {
            command.env(key, value);
        }
        let client = CtrClient {
            ctr,
            socket: dir.join("containerd.sock"),
            namespace: cgroup_name("containerd"),
            io_dir: dir.join("io"),
        };
        let mut daemon = Daemon::spawn("containerd", command, &dir.join("containerd.log"))?;
        let ready = daemon.wait_ready(|| {
            client.socket.exists() && client.run(&["version"], Duration::from_secs(10)).success()
        });
        let containerd = Containerd {
            socket: client.socket.clone(),
            namespace: client.namespace.clone(),
            dir,
            config,
            client,
            daemon,
        };
        ready.map(|()| containerd)
    }

    /// `ctr --address <socket> --namespace <namespace> ARGS`, with [`ENGINE_TIMEOUT`].
    pub fn ctr<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        self.client.run(args, ENGINE_TIMEOUT)
    }

    /// Imports `tarball` (a rootfs tar) as image `name` (e.g.
    /// `docker.io/library/nvc-test:latest`), through an OCI archive made with
    /// [`oci_archive`].
    pub fn import(&self, tarball: &Path, name: &str) -> Result<(), EngineError> {
        let archive = self.dir.join("image.oci.tar");
        oci_archive(tarball, name, &archive)?;
        let args = [
            OsStr::new("images"),
            OsStr::new("import"),
            OsStr::new("--snapshotter"),
            OsStr::new("native"),
            archive.as_os_str(),
        ];
        EngineError::check("import the test image into containerd", self.ctr(&args)).map(drop)
    }

    /// `ctr run --rm --snapshotter native --fifo-dir <dir>/fifo OPTIONS IMAGE <id>
    /// COMMAND...` with a fresh container id.
    pub fn run<S: AsRef<OsStr>>(&self, options: &[S], image: &str, command: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = ["run", "--rm", "--snapshotter", "native", "--fifo-dir"]
            .map(OsString::from)
            .to_vec();
        args.push(self.dir.join("fifo").into_os_string());
        args.extend(options.iter().map(|o| o.as_ref().to_os_string()));
        args.push(image.into());
        args.push(container_id("nvc-ctr").into());
        args.extend(command.iter().map(OsString::from));
        self.ctr(&args)
    }

    /// The last `lines` lines of containerd's log, for messages.
    pub fn log_tail(&self, lines: usize) -> String {
        self.daemon.log_tail(lines)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.daemon.stop();
        // runc puts ctr's containers in /<namespace>/<id>.
        remove_cgroups(&self.namespace);
    }
}

/// `podman` with private storage: `--root`, `--runroot`, `--tmpdir` under its directory,
/// vfs, cgroupfs, events to a file, runc, `--hooks-dir` the given folder. Every command runs
/// in its own namespaces (see [`isolated`]), so conmon and anything else it leaves behind
/// ends with it; containers run under their own cgroup parent.
#[derive(Debug)]
pub struct Podman {
    /// Its directory.
    pub dir: PathBuf,
    /// The OCI hooks folder podman reads.
    pub hooks_dir: PathBuf,
    /// The containers' `--cgroup-parent`.
    pub cgroup_parent: String,
    program: PathBuf,
    runc: PathBuf,
}

impl Podman {
    /// Podman keeping everything under `dir`, with the OCI hooks of `hooks_dir`.
    pub fn new(dir: &Path, hooks_dir: &Path) -> Result<Podman, EngineError> {
        let program = find_program("podman", "podman")?;
        find_program("conmon", "conmon")?;
        let runc = find_program("runc", "runc")?;
        let dir = mkdirs(dir)?;
        for sub in ["root", "runroot", "tmp", "io"] {
            mkdirs(&dir.join(sub))?;
        }
        Ok(Podman {
            hooks_dir: std::path::absolute(hooks_dir)
                .map_err(EngineError::io("make absolute", hooks_dir))?,
            dir,
            cgroup_parent: cgroup_name("podman"),
            program,
            runc,
        })
    }

    /// `podman <global flags> ARGS`, with [`ENGINE_TIMEOUT`].
    pub fn podman<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        let mut command = isolated(&self.program);
        command
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .arg("--runtime")
            .arg(&self.runc)
            .arg("--hooks-dir")
            .arg(&self.hooks_dir)
            .args(args)
            .env("PATH", engine_path())
            .env("TMPDIR", self.dir.join("tmp"))
            .env_remove("CONTAINER_HOST")
            .env_remove("CONTAINERS_CONF")
            .env_remove("CONTAINERS_STORAGE_CONF");
        run_command(&mut command, &self.dir.join("io"), ENGINE_TIMEOUT)
    }

    /// `podman import <tarball> <name>`.
    pub fn import(&self, tarball: &Path, name: &str) -> Result<(), EngineError> {
        let args = [OsStr::new("import"), tarball.as_os_str(), OsStr::new(name)];
        EngineError::check("import the test rootfs into podman", self.podman(&args)).map(drop)
    }

    /// `podman run --rm --network none --cgroup-parent <parent> --ulimit nofile=1024:1024
    /// --ulimit nproc=1024:1024 OPTIONS IMAGE COMMAND...`. The explicit limits: podman's
    /// defaults (1048576 open files) are above the hard limits of many CI containers, and
    /// runc then fails with "error setting rlimit type 7".
    pub fn run<S: AsRef<OsStr>>(&self, options: &[S], image: &str, command: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = ["run", "--rm", "--network", "none", "--cgroup-parent"]
            .map(OsString::from)
            .to_vec();
        args.push(format!("/{}", self.cgroup_parent).into());
        args.extend(
            [
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ]
            .map(OsString::from),
        );
        args.extend(options.iter().map(|o| o.as_ref().to_os_string()));
        args.push(image.into());
        args.extend(command.iter().map(OsString::from));
        self.podman(&args)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        remove_cgroups(&self.cgroup_parent);
    }
}

/// Writes to `out` an OCI image archive (an OCI image layout as a tar, as `ctr images
/// import` takes it) holding one image named `name` whose only layer is the tar archive
/// `rootfs_tar`, for linux/amd64, running `sh`.
pub fn oci_archive(rootfs_tar: &Path, name: &str, out: &Path) -> Result<(), EngineError> {
    let layout = out.with_extension("layout");
    let blobs = layout.join("blobs/sha256");
    if layout.exists() {
        std::fs::remove_dir_all(&layout).map_err(EngineError::io("remove", &layout))?;
    }
    mkdirs(&blobs)?;
    let layer = sha256_file(rootfs_tar)?;
    let layer_size = std::fs::metadata(rootfs_tar)
        .map_err(EngineError::io("stat", rootfs_tar))?
        .len();
    std::fs::copy(rootfs_tar, blobs.join(&layer)).map_err(EngineError::io("copy", rootfs_tar))?;
    let add_blob = |bytes: Vec<u8>| -> Result<(String, usize), EngineError> {
        let tmp = blobs.join("new");
        std::fs::write(&tmp, &bytes).map_err(EngineError::io("write", &tmp))?;
        let digest = sha256_file(&tmp)?;
        let blob = blobs.join(&digest);
        std::fs::rename(&tmp, &blob).map_err(EngineError::io("rename", &blob))?;
        Ok((digest, bytes.len()))
    };
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Env": [crate::DEFAULT_PATH_ENV], "Cmd": ["sh"] },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer}")] },
    });
    let (config_digest, config_size) = add_blob(config.to_string().into_bytes())?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config_size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer}"),
            "size": layer_size,
        }],
    });
    let (manifest_digest, manifest_size) = add_blob(manifest.to_string().into_bytes())?;
    let tag = name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest_size,
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    });
    for (file, text) in [
        ("index.json", index.to_string()),
        (
            "oci-layout",
            r#"{"imageLayoutVersion":"1.0.0"}"#.to_string(),
        ),
    ] {
        let path = layout.join(file);
        std::fs::write(&path, text).map_err(EngineError::io("write", &path))?;
    }
    let mut tar = Command::new("tar");
    tar.arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(out)
        .args(["oci-layout", "index.json", "blobs"]);
    let io_dir = out.parent().unwrap_or(Path::new("."));
    EngineError::check(
        "archive the OCI layout",
        run_command(&mut tar, io_dir, ENGINE_TIMEOUT),
    )?;
    std::fs::remove_dir_all(&layout).map_err(EngineError::io("remove", &layout))
}

/// The SHA-256 of a file, in hex, from `sha256sum` (coreutils).
fn sha256_file(path: &Path) -> Result<String, EngineError> {
    let mut command = Command::new("sha256sum");
    command.arg(path);
    let io_dir = path.parent().unwrap_or(Path::new("."));
    let outcome = EngineError::check(
        "hash an image blob",
        run_command(&mut command, io_dir, ENGINE_TIMEOUT),
    )?;
    Ok(outcome
        .stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}
