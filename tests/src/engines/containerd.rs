//! A private `containerd`, driven with `ctr`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{container_id, Outcome};

use super::daemon::{cgroup_name, isolated, remove_cgroups, Daemon};
use super::debian_root::EngineRoot;
use super::{
    engine_path, find_program, mkdirs, oci_archive, run_command, EngineError, ENGINE_TIMEOUT,
};

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
    /// The root `ctr` runs in, the host folders bound there and its `/etc/cdi`.
    root: Option<(EngineRoot, Vec<PathBuf>, Option<PathBuf>)>,
}

impl CtrClient {
    fn run<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Outcome {
        let mut command = match &self.root {
            None => Command::new(&self.ctr),
            Some((root, binds, cdi)) => {
                let binds: Vec<&Path> = binds.iter().map(PathBuf::as_path).collect();
                root.command(&self.ctr.to_string_lossy(), &binds, cdi.as_deref())
            }
        };
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
        let (dir, config) = Containerd::prepare(dir)?;
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
            root: None,
        };
        Containerd::launch(dir, config, command, client)
    }

    /// The containerd (and `ctr`, and runc) of `root`, a newer Debian's, started as
    /// [`Containerd::start`] starts Debian 12's; `binds`: the host folders it must see
    /// (the test's folder, nvc's binaries), and `cdi`: the host folder that is `ctr`'s
    /// `/etc/cdi`.
    pub fn start_in(
        root: &EngineRoot,
        dir: &Path,
        env: &[(&str, &OsStr)],
        binds: &[&Path],
        cdi: Option<&Path>,
    ) -> Result<Containerd, EngineError> {
        let (dir, config) = Containerd::prepare(dir)?;
        let mut command = root.command("/usr/bin/containerd", binds, cdi);
        command
            .arg("--config")
            .arg(&config)
            .env("TMPDIR", dir.join("tmp"));
        for (key, value) in env {
            command.env(key, value);
        }
        let client = CtrClient {
            ctr: PathBuf::from("/usr/bin/ctr"),
            socket: dir.join("containerd.sock"),
            namespace: cgroup_name("containerd"),
            io_dir: dir.join("io"),
            root: Some((
                root.clone(),
                binds.iter().map(|b| b.to_path_buf()).collect(),
                cdi.map(Path::to_path_buf),
            )),
        };
        Containerd::launch(dir, config, command, client)
    }

    /// Makes `dir`'s folders and, unless there is one, its config; returns both paths.
    fn prepare(dir: &Path) -> Result<(PathBuf, PathBuf), EngineError> {
        let dir = mkdirs(dir)?;
        for sub in ["fifo", "io", "opt", "tmp"] {
            mkdirs(&dir.join(sub))?;
        }
        let config = dir.join("config.toml");
        if !config.exists() {
            std::fs::write(&config, Containerd::default_config(&dir, false))
                .map_err(EngineError::io("write", &config))?;
        }
        Ok((dir, config))
    }

    /// Spawns `command` (a containerd) and waits until `client` gets an answer from it.
    fn launch(
        dir: PathBuf,
        config: PathBuf,
        command: Command,
        client: CtrClient,
    ) -> Result<Containerd, EngineError> {
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
