//! A private `dockerd`, and the `docker` CLI that talks to it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::Outcome;

use super::daemon::{cgroup_name, isolated, remove_cgroups, Daemon};
use super::debian_root::EngineRoot;
use super::{engine_path, find_program, mkdirs, run_command, EngineError, ENGINE_TIMEOUT};

/// The `docker` CLI pointed at one daemon's socket, with a private `DOCKER_CONFIG`.
#[derive(Debug, Clone)]
struct DockerClient {
    cli: PathBuf,
    socket: PathBuf,
    dir: PathBuf,
    /// The root the CLI runs in, and the host folders bound there.
    root: Option<(EngineRoot, Vec<PathBuf>)>,
}

impl DockerClient {
    fn run<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Outcome {
        let mut command = match &self.root {
            None => Command::new(&self.cli),
            Some((root, binds)) => {
                let binds: Vec<&Path> = binds.iter().map(PathBuf::as_path).collect();
                root.command(&self.cli.to_string_lossy(), &binds, None)
            }
        };
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
        daemon_flags(&mut command, &dir, &socket, &config, &cgroup_parent);
        command
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
            root: None,
        };
        Dockerd::launch(dir, socket, cgroup_parent, command, client)
    }

    /// The dockerd (and its containerd and runc) of `root`, a newer Debian's, started as
    /// [`Dockerd::start`] starts Debian 12's; `binds`: the host folders it must see (the
    /// test's folder, nvc's binaries), and `cdi`: the host folder that is its `/etc/cdi`.
    pub fn start_in(
        root: &EngineRoot,
        dir: &Path,
        daemon_json: &Path,
        env: &[(&str, &OsStr)],
        binds: &[&Path],
        cdi: Option<&Path>,
    ) -> Result<Dockerd, EngineError> {
        let dir = mkdirs(dir)?;
        for sub in ["data", "exec", "client", "io", "tmp"] {
            mkdirs(&dir.join(sub))?;
        }
        let socket = dir.join("docker.sock");
        let cgroup_parent = cgroup_name("docker");
        let mut command = root.command("/usr/sbin/dockerd", binds, cdi);
        daemon_flags(&mut command, &dir, &socket, daemon_json, &cgroup_parent);
        command.env("TMPDIR", dir.join("tmp"));
        for (key, value) in env {
            command.env(key, value);
        }
        let client = DockerClient {
            cli: PathBuf::from("/usr/bin/docker"),
            socket: socket.clone(),
            dir: dir.clone(),
            root: Some((
                root.clone(),
                binds.iter().map(|b| b.to_path_buf()).collect(),
            )),
        };
        Dockerd::launch(dir, socket, cgroup_parent, command, client)
    }

    /// Spawns `command` (a dockerd) and waits until `client` gets an answer from it.
    fn launch(
        dir: PathBuf,
        socket: PathBuf,
        cgroup_parent: String,
        command: Command,
        client: DockerClient,
    ) -> Result<Dockerd, EngineError> {
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

    /// A command that runs `program` in dockerd's mount and PID namespaces (`nsenter`):
    /// where its containers' runtime state and processes are what the host's would be.
    pub fn in_namespaces(&self, program: &Path) -> Command {
        let mut command = Command::new("nsenter");
        if let Some(pid) = self.daemon.namespaced_pid() {
            command
                .arg(format!("--target={pid}"))
                .args(["--mount", "--pid"]);
        }
        command.arg("--").arg(program);
        command
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

/// dockerd's private paths, vfs, no networking of its own, cgroupfs and its cgroup parent.
fn daemon_flags(command: &mut Command, dir: &Path, socket: &Path, config: &Path, parent: &str) {
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
        .arg(config)
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
        .arg(format!("/{parent}"));
}
