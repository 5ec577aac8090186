//! A private `containerd`, driven with `ctr`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{container_id, Outcome};

use super::archive::oci_archive_running;
use super::daemon::{cgroup_name, isolated, remove_cgroups, Daemon};
use super::debian_root::{EngineRoot, RootView};
use super::{
    engine_path, find_program, mkdirs, oci_archive, run_command, EngineError, ENGINE_TIMEOUT,
};

/// The containerd namespace of the CRI plugin's images and containers: the kubelet's
/// (and `crictl`'s) images must be imported there.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// How a test sets up containerd's CRI plugin (see [`Containerd::cri_config`]).
#[derive(Debug, Clone)]
pub struct CriSettings<'a> {
    /// The sandbox (pause) image, which must be imported into [`CRI_NAMESPACE`]: nothing
    /// is pulled.
    pub sandbox_image: &'a str,
    /// Folders of CDI specs (`cdi_spec_dirs`).
    pub cdi_spec_dirs: &'a [&'a Path],
    /// `enable_cdi` (`nvc runtime configure --cdi` sets it too).
    pub enable_cdi: bool,
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
    /// The root `ctr` runs in, the host folders bound there and its `/etc/cdi`.
    root: Option<(EngineRoot, Vec<PathBuf>, Option<PathBuf>)>,
}

impl CtrClient {
    fn run<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Outcome {
        self.run_in(&self.namespace, args, timeout)
    }

    /// `ctr` in the containerd namespace `namespace`.
    fn run_in<S: AsRef<OsStr>>(&self, namespace: &str, args: &[S], timeout: Duration) -> Outcome {
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
            .arg(namespace)
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

    /// A containerd config like [`Containerd::default_config`] with the CRI plugin on, set
    /// up for tests. `version` is 2 (containerd 1.x, plugin `io.containerd.grpc.v1.cri`)
    /// or 3 (containerd 2.x, plugins `io.containerd.cri.v1.runtime` and
    /// `io.containerd.cri.v1.images`). It has:
    /// - the sandbox image and CDI settings of `cri`;
    /// - the native snapshotter, as `ctr` here uses (with version 3, also for the transfer
    ///   service that containerd 2.x's `ctr images import` goes through);
    /// - no AppArmor profile;
    /// - `restrict_oom_score_adj`: the sandbox's -998 needs CAP_SYS_RESOURCE, which a test
    ///   machine that is itself a container may lack (runc then fails with "can't get
    ///   final child's PID from pipe");
    /// - CNI folders under `dir` that hold nothing: pods use the node's network, so no
    ///   CNI plugin runs.
    pub fn cri_config(dir: &Path, version: u8, cri: &CriSettings<'_>) -> String {
        let d = dir.display();
        let dirs: Vec<String> = cri
            .cdi_spec_dirs
            .iter()
            .map(|p| format!("\"{}\"", p.display()))
            .collect();
        let dirs = dirs.join(", ");
        let (image, cdi) = (cri.sandbox_image, cri.enable_cdi);
        let common = format!(
            "root = \"{d}/root\"\nstate = \"{d}/state\"\n\n\
             [grpc]\n  address = \"{d}/containerd.sock\"\n\n\
             [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n\n"
        );
        if version >= 3 {
            let p = "plugins.\"io.containerd.cri.v1";
            format!(
                "version = 3\n{common}\
                 [{p}.images\"]\n  snapshotter = \"native\"\n\n\
                 [{p}.images\".pinned_images]\n  sandbox = \"{image}\"\n\n\
                 [{p}.runtime\"]\n  enable_cdi = {cdi}\n  cdi_spec_dirs = [{dirs}]\n  \
                 disable_apparmor = true\n  restrict_oom_score_adj = true\n\n\
                 [{p}.runtime\".cni]\n  bin_dirs = [\"{d}/cni/bin\"]\n  conf_dir = \"{d}/cni/net.d\"\n\n\
                 [plugins.\"io.containerd.transfer.v1.local\"]\n  \
                 unpack_config = [{{ platform = \"linux/amd64\", snapshotter = \"native\" }}]\n"
            )
        } else {
            let p = "plugins.\"io.containerd.grpc.v1.cri\"";
            format!(
                "version = 2\n{common}\
                 [{p}]\n  sandbox_image = \"{image}\"\n  enable_cdi = {cdi}\n  \
                 cdi_spec_dirs = [{dirs}]\n  disable_apparmor = true\n  \
                 restrict_oom_score_adj = true\n\n\
                 [{p}.containerd]\n  snapshotter = \"native\"\n\n\
                 [{p}.cni]\n  bin_dir = \"{d}/cni/bin\"\n  conf_dir = \"{d}/cni/net.d\"\n"
            )
        }
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
        let command = root.command("/usr/bin/containerd", binds, cdi);
        let binds = binds.iter().map(|b| b.to_path_buf()).collect();
        let ctr_view = (root.clone(), binds, cdi.map(Path::to_path_buf));
        Containerd::launch_in(command, dir, config, env, ctr_view)
    }

    /// The containerd of `root` as a node runs it: in `view` (the node's files placed
    /// over the root's; `binds` must include `dir`, where its state and socket are),
    /// reading the config `config` (a path in the view, e.g. `/etc/containerd/config.toml`,
    /// whose paths are under `dir`), started again whenever it exits, as its systemd unit
    /// does (`Restart=always`). `ctr` runs with `view`'s binds.
    pub fn start_node(
        root: &EngineRoot,
        view: &RootView,
        dir: &Path,
        config: &Path,
        env: &[(&str, &OsStr)],
    ) -> Result<Containerd, EngineError> {
        let (dir, _) = Containerd::prepare(dir)?;
        let view = RootView {
            restart_always: true,
            ..view.clone()
        };
        let command = root.command_in("/usr/bin/containerd", &view);
        let ctr_view = (root.clone(), view.binds.clone(), None);
        Containerd::launch_in(command, dir, config.to_path_buf(), env, ctr_view)
    }

    /// Launches `command`, a containerd of a root, with `--config config` and `env`, and
    /// `ctr` run in the root with `ctr_view`'s binds and `/etc/cdi`.
    fn launch_in(
        mut command: Command,
        dir: PathBuf,
        config: PathBuf,
        env: &[(&str, &OsStr)],
        ctr_view: (EngineRoot, Vec<PathBuf>, Option<PathBuf>),
    ) -> Result<Containerd, EngineError> {
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
            root: Some(ctr_view),
        };
        Containerd::launch(dir, config, command, client)
    }

    /// `ctr images import` of the OCI archive `archive` (a path `ctr` sees) into the CRI
    /// plugin's namespace, under the names its index gives.
    pub fn import_oci_for_cri(&self, archive: &Path) -> Result<(), EngineError> {
        let out = self.import_archive(CRI_NAMESPACE, archive);
        EngineError::check("import an OCI archive for the CRI plugin", out).map(drop)
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
        let out = self.import_archive(&self.client.namespace, &archive);
        EngineError::check("import the test image into containerd", out).map(drop)
    }

    /// `ctr images import` of the OCI archive `archive` into `namespace`, unpacked for
    /// the native snapshotter.
    fn import_archive(&self, namespace: &str, archive: &Path) -> Outcome {
        let args = [
            OsStr::new("images"),
            OsStr::new("import"),
            OsStr::new("--snapshotter"),
            OsStr::new("native"),
            archive.as_os_str(),
        ];
        self.client.run_in(namespace, &args, ENGINE_TIMEOUT)
    }

    /// Imports `tarball` (a rootfs tar) into the CRI plugin's namespace
    /// ([`CRI_NAMESPACE`]) as image `name` running `cmd`, for pods: a sandbox image's
    /// command must keep running.
    pub fn import_for_cri(
        &self,
        tarball: &Path,
        name: &str,
        cmd: &[&str],
    ) -> Result<(), EngineError> {
        let archive = self.dir.join("cri-image.oci.tar");
        oci_archive_running(tarball, name, cmd, &archive)?;
        let out = self.import_archive(CRI_NAMESPACE, &archive);
        EngineError::check("import an image for the CRI plugin", out).map(drop)
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
