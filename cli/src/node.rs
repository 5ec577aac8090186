//! `nvc node`: puts nvc on a Kubernetes node from a container (the DaemonSet of
//! `packaging/kubernetes/`) and takes it off again.
//!
//! `nvc node install` enters the node's root (mounted at `--host-root`), copies the
//! binaries beside it into `--install-dir` with nvc's config (`etc/config.toml`, which
//! they read there: [`nvc_config::Config::beside_executable`]), registers the runtime
//! with the engine (`nvc runtime configure`), writes the CDI spec (and the device plugin's,
//! with `--device-plugin-cdi-spec`), and asks the engine to reload. What the engine's
//! config folder and the specs' folders held before is kept in the install folder's
//! record (`libnvc::node`), so that `nvc node uninstall` puts every file back byte for
//! byte and removes what the install made. `nvc node run` does the one, reports ready,
//! waits for SIGTERM and does the other, each half in a child process of its own (the
//! child enters the node's root; the parent stays in the container, where the ready file
//! is).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Args, Subcommand, ValueEnum};
use libnvc::discover::{self, DriverRoots};
use libnvc::node::{Record, Step, Tree};
use nvc_config::Config;
use nvc_host::files::{self, WriteOptions};
use nvc_host::node::{self as effects, NodeError};

use crate::cdi::NamingArgs;
use crate::configure::{self, ConfigureArgs, Engine};

/// `println!` that ignores a closed stdout.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "nvc node: {}", format!($($arg)*));
    }};
}

/// `nvc node` subcommands.
#[derive(Subcommand)]
pub enum NodeCommand {
    /// Install, report ready, wait for SIGTERM (the kubelet's stop), then uninstall:
    /// the DaemonSet's command.
    Run(NodeArgs),
    /// Install nvc on the node and register it with the engine (again: brings it up to
    /// date), then exit.
    Install(NodeArgs),
    /// Undo what `install` did, from its record, then exit.
    Uninstall(NodeArgs),
    /// Exit 0 when the ready file exists (an exec readiness probe: the image has no shell).
    Ready(ReadyArgs),
}

/// The node's engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NodeEngine {
    /// containerd (its CRI plugin).
    Containerd,
    /// CRI-O.
    Crio,
}

/// How the engine is made to read its new config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Reload {
    /// SIGHUP to the process listening on --socket (found through the socket's peer
    /// credentials: needs the node's PID namespace). containerd exits on it and its
    /// systemd unit (Restart=always) starts it again; CRI-O reloads its config.
    Signal,
    /// `systemctl restart UNIT`, the node's systemctl.
    Systemd,
    /// Nothing: the admin restarts the engine.
    None,
}

impl NodeEngine {
    fn name(self) -> &'static str {
        match self {
            NodeEngine::Containerd => "containerd",
            NodeEngine::Crio => "crio",
        }
    }

    fn default_config(self) -> &'static str {
        match self {
            NodeEngine::Containerd => "/etc/containerd/config.toml",
            NodeEngine::Crio => "/etc/crio/crio.conf",
        }
    }

    fn default_socket(self) -> &'static str {
        match self {
            NodeEngine::Containerd => "/run/containerd/containerd.sock",
            NodeEngine::Crio => "/var/run/crio/crio.sock",
        }
    }

    fn configure(self) -> Engine {
        match self {
            NodeEngine::Containerd => Engine::Containerd,
            NodeEngine::Crio => Engine::Crio,
        }
    }
}

/// Options of `nvc node run`, `install` and `uninstall`. Paths are the node's, except
/// --host-root, --nvc-config and --ready-file, which are the installer container's.
#[derive(Args, Clone, Debug)]
pub struct NodeArgs {
    /// The node's engine.
    #[arg(long, value_enum)]
    engine: NodeEngine,
    /// Where the node's `/` is mounted in this container.
    #[arg(long, value_name = "DIR", default_value = "/host")]
    host_root: PathBuf,
    /// Where nvc goes on the node: bin/ and etc/config.toml, and the install's record.
    #[arg(long, value_name = "DIR", default_value = "/opt/nvc")]
    install_dir: PathBuf,
    /// The engine's main config file [default: /etc/containerd/config.toml or
    /// /etc/crio/crio.conf].
    #[arg(long, value_name = "PATH")]
    engine_config: Option<PathBuf>,
    /// Where the CDI spec goes (a folder the engine reads specs from).
    #[arg(long, value_name = "PATH", default_value = "/var/run/cdi/nvidia.yaml")]
    cdi_spec: PathBuf,
    /// Also write a CDI spec of NVIDIA's device plugin's kind,
    /// k8s.device-plugin.nvidia.com/gpu, for its CDI strategies (cdi-annotations,
    /// cdi-cri): e.g. /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json, the file the
    /// plugin writes itself unless kept from the node's /var/run/cdi (docs/kubernetes.md).
    #[arg(long, value_name = "PATH")]
    device_plugin_cdi_spec: Option<PathBuf>,
    /// The driver's files (`/run/nvidia/driver` with the GPU operator's driver container).
    #[arg(long, value_name = "DIR", default_value = "/")]
    driver_root: PathBuf,
    /// The driver's device nodes are DIR/dev/nvidia*.
    #[arg(long, value_name = "DIR", default_value = "/")]
    dev_root: PathBuf,
    /// The GPU inventory is DIR/driver/nvidia.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    proc_root: PathBuf,
    /// An nvc config file (in this container, e.g. from a ConfigMap) to start from;
    /// the driver roots and hook path above are set in it [default: the defaults].
    #[arg(long, value_name = "FILE")]
    nvc_config: Option<PathBuf>,
    /// How the engine is made to read its new config [default: signal for both engines].
    #[arg(long, value_enum)]
    reload: Option<Reload>,
    /// The engine's socket, for --reload signal [default:
    /// /run/containerd/containerd.sock or /var/run/crio/crio.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The engine's systemd unit, for --reload systemd [default: containerd or crio].
    #[arg(long, value_name = "NAME")]
    systemd_unit: Option<String>,
    /// The runtime's name in the engine: the RuntimeClass handler.
    #[arg(long, value_name = "NAME", default_value = "nv")]
    runtime_name: String,
    /// The file written once installed (in this container), for the readiness probe.
    #[arg(long, value_name = "PATH", default_value = "/run/nvc-node.ready")]
    ready_file: PathBuf,
    /// `run`: leave nvc installed when stopped.
    #[arg(long)]
    keep: bool,
    /// Where the binaries to install are [default: this nvc's folder].
    #[arg(long, value_name = "DIR")]
    binaries: Option<PathBuf>,
}

/// Options of `nvc node ready`.
#[derive(Args)]
pub struct ReadyArgs {
    /// The ready file.
    #[arg(long, value_name = "PATH", default_value = "/run/nvc-node.ready")]
    ready_file: PathBuf,
}

/// What is installed on the node, from the folder the binaries are taken from.
const BINARIES: [&str; 5] = [
    "nvc",
    "nvc-runtime",
    "nvc-hook",
    "nvc-cuda-version",
    "nvc-mig-devices",
];

/// How long containerd may take to come back after SIGHUP (its unit's RestartSec is 5 s).
const ENGINE_BACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The record's name in the install folder.
const RECORD: &str = "node-install.json";

/// Why `nvc node` failed. Nothing on the node is changed by a check that fails.
#[derive(Debug, thiserror::Error)]
pub enum NodeCliError {
    /// A node effect failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Writing a file failed.
    #[error(transparent)]
    File(#[from] files::FileError),
    /// Configuring the engine failed.
    #[error(transparent)]
    Configure(#[from] Box<configure::ConfigureError>),
    /// Writing the CDI spec failed.
    #[error(transparent)]
    Cdi(#[from] Box<crate::cdi::CdiError>),
    /// The CDI spec could not be made.
    #[error(transparent)]
    Spec(#[from] Box<libnvc::cdi::CdiError>),
    /// A binary to install is missing.
    #[error("cannot read {path}, one of the binaries to install (--binaries)")]
    Binary {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The base config cannot be used.
    #[error("cannot use {path} as nvc's config (--nvc-config)")]
    BaseConfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The node has no NVIDIA driver where it was said to be.
    #[error(
        "no NVIDIA driver on this node (driver root {root}, proc root {proc}): nothing was \
         installed; run the DaemonSet on GPU nodes only, or give --driver-root \
         (/run/nvidia/driver with the GPU operator's driver container)"
    )]
    NoDriver {
        /// The driver root.
        root: PathBuf,
        /// The proc root.
        proc: PathBuf,
        /// Why discovery failed.
        #[source]
        source: discover::DiscoverError,
    },
    /// The engine's config folder is not there.
    #[error(
        "this node has no {engine} config folder {dir}: is {engine} its engine? nothing was \
         installed; pass the node's engine with --engine (containerd or crio) and its \
         config file with --engine-config"
    )]
    NoEngine {
        /// The engine.
        engine: &'static str,
        /// The folder.
        dir: PathBuf,
    },
    /// nvc is installed from a package.
    #[error(
        "{0} exists: nvc is installed on this node from a package, whose config every nvc \
         binary would read; nothing was installed (remove the package or run the \
         DaemonSet elsewhere)"
    )]
    Packaged(PathBuf),
    /// The install folder holds something else.
    #[error(
        "{0} exists and holds no record of `nvc node install`: nothing was installed; \
         give another --install-dir or remove it"
    )]
    ForeignInstallDir(PathBuf),
    /// The record cannot be read.
    #[error("cannot read the install record {path}: remove nvc by hand (see docs/kubernetes.md)")]
    Record {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A path option is relative.
    #[error("--{flag} {path}: give an absolute path")]
    Relative {
        /// The option.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// A child `nvc node` failed.
    #[error("`nvc node {0}` failed (above)")]
    Child(&'static str),
    /// Spawning or waiting failed.
    #[error("cannot run `nvc node {what}`")]
    Spawn {
        /// Which half.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The ready file is missing.
    #[error("not ready: {0} does not exist")]
    NotReady(PathBuf),
}

/// Runs an `nvc node` subcommand.
pub fn run(command: &NodeCommand) -> Result<(), NodeCliError> {
    match command {
        NodeCommand::Run(args) => run_all(args),
        NodeCommand::Install(args) => install(args),
        NodeCommand::Uninstall(args) => uninstall(args),
        NodeCommand::Ready(args) => match args.ready_file.exists() {
            true => Ok(()),
            false => Err(NodeCliError::NotReady(args.ready_file.clone())),
        },
    }
}

/// `nvc node run`.
fn run_all(args: &NodeArgs) -> Result<(), NodeCliError> {
    check_paths(args)?;
    // From here on a stop waits for its turn: one during the install is taken after it.
    effects::block_stop_signals()?;
    let _ = files::remove(&args.ready_file);
    if let Err(e) = child(args, "install") {
        // What an install cut short did is undone (nothing, when a check refused the
        // node): a pod that fails leaves the node as it was, and its successor starts
        // from there.
        say!("the install failed: undoing what it did");
        let _ = child(args, "uninstall");
        return Err(e);
    }
    files::write_atomic(
        &args.ready_file,
        b"ready\n",
        &WriteOptions {
            create_parents: true,
            ..WriteOptions::new(0o644)
        },
    )?;
    say!("ready; waiting for SIGTERM");
    let signal = effects::wait_for_stop()?;
    let _ = files::remove(&args.ready_file);
    if args.keep {
        say!("{signal}: --keep: nvc stays installed");
        return Ok(());
    }
    say!("{signal}: uninstalling");
    child(args, "uninstall")
}

/// Runs `nvc node WHAT` with the same options, this program again.
fn child(args: &NodeArgs, what: &'static str) -> Result<(), NodeCliError> {
    let exe = std::env::current_exe().map_err(|source| NodeCliError::Spawn { what, source })?;
    let mut command = Command::new(exe);
    command.args(["node", what]).args(to_args(args));
    let status = command
        .status()
        .map_err(|source| NodeCliError::Spawn { what, source })?;
    if status.success() {
        Ok(())
    } else {
        Err(NodeCliError::Child(what))
    }
}

/// `args` as command-line options again.
fn to_args(args: &NodeArgs) -> Vec<String> {
    let mut out = vec![format!("--engine={}", args.engine.name())];
    let mut path = |flag: &str, p: &Path| out.push(format!("--{flag}={}", p.display()));
    path("host-root", &args.host_root);
    path("install-dir", &args.install_dir);
    path("cdi-spec", &args.cdi_spec);
    path("driver-root", &args.driver_root);
    path("dev-root", &args.dev_root);
    path("proc-root", &args.proc_root);
    path("ready-file", &args.ready_file);
    for (flag, p) in [
        ("device-plugin-cdi-spec", &args.device_plugin_cdi_spec),
        ("engine-config", &args.engine_config),
        ("nvc-config", &args.nvc_config),
        ("socket", &args.socket),
        ("binaries", &args.binaries),
    ] {
        if let Some(p) = p {
            path(flag, p);
        }
    }
    if let Some(r) = args.reload {
        let name = match r {
            Reload::Signal => "signal",
            Reload::Systemd => "systemd",
            Reload::None => "none",
        };
        out.push(format!("--reload={name}"));
    }
    if let Some(u) = &args.systemd_unit {
        out.push(format!("--systemd-unit={u}"));
    }
    out.push(format!("--runtime-name={}", args.runtime_name));
    out
}

fn check_paths(args: &NodeArgs) -> Result<(), NodeCliError> {
    for (flag, path) in [
        ("host-root", Some(&args.host_root)),
        ("install-dir", Some(&args.install_dir)),
        ("cdi-spec", Some(&args.cdi_spec)),
        ("driver-root", Some(&args.driver_root)),
        ("dev-root", Some(&args.dev_root)),
        ("proc-root", Some(&args.proc_root)),
        (
            "device-plugin-cdi-spec",
            args.device_plugin_cdi_spec.as_ref(),
        ),
        ("engine-config", args.engine_config.as_ref()),
        ("socket", args.socket.as_ref()),
    ] {
        if let Some(p) = path.filter(|p| !p.is_absolute()) {
            return Err(NodeCliError::Relative {
                flag,
                path: p.clone(),
            });
        }
    }
    Ok(())
}

/// The folders whose every file the record keeps: the engine's config folder and the
/// CDI specs' (or, when one is missing, the outermost of its folders that is: the
/// install makes them all, and uninstalling removes them).
fn watched(args: &NodeArgs) -> Vec<PathBuf> {
    let config = engine_config(args);
    let mut dirs = vec![config
        .parent()
        .unwrap_or_else(|| Path::new("/"))
        .to_path_buf()];
    for spec in std::iter::once(&args.cdi_spec).chain(&args.device_plugin_cdi_spec) {
        if let Some(mut dir) = spec.parent() {
            while let Some(parent) = dir.parent().filter(|p| !p.exists()) {
                dir = parent;
            }
            if !dirs.iter().any(|d| dir.starts_with(d)) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    dirs
}

fn engine_config(args: &NodeArgs) -> PathBuf {
    args.engine_config
        .clone()
        .unwrap_or_else(|| PathBuf::from(args.engine.default_config()))
}

/// `nvc node install`.
fn install(args: &NodeArgs) -> Result<(), NodeCliError> {
    check_paths(args)?;
    // What comes from this container, read before entering the node's root.
    let from = match &args.binaries {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("/nvc/bin")),
    };
    let binaries: Vec<(&str, Vec<u8>)> = BINARIES
        .iter()
        .map(|name| {
            let path = from.join(name);
            std::fs::read(&path)
                .map(|bytes| (*name, bytes))
                .map_err(|source| NodeCliError::Binary { path, source })
        })
        .collect::<Result<_, _>>()?;
    let base = match &args.nvc_config {
        Some(path) => std::fs::read_to_string(path).map_err(|e| NodeCliError::BaseConfig {
            path: path.clone(),
            source: e.into(),
        })?,
        None => nvc_config::DEFAULT_TOML.to_string(),
    };
    let config_text = node_config(args, &base)?;

    effects::enter_root(&args.host_root)?;
    let config =
        Config::parse(&config_text, &args.install_dir.join("etc/config.toml")).map_err(|e| {
            NodeCliError::BaseConfig {
                path: args
                    .nvc_config
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("(defaults)")),
                source: e.into(),
            }
        })?;

    // Checks first: nothing is written unless the node can take nvc.
    let engine_dir = watched(args).remove(0);
    if !engine_dir.is_dir() {
        return Err(NodeCliError::NoEngine {
            engine: args.engine.name(),
            dir: engine_dir,
        });
    }
    let packaged = Path::new(nvc_config::DEFAULT_PATH);
    if packaged.exists() {
        return Err(NodeCliError::Packaged(packaged.to_path_buf()));
    }
    discover::discover(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    )
    .map_err(|source| NodeCliError::NoDriver {
        root: args.driver_root.clone(),
        proc: args.proc_root.clone(),
        source,
    })?;
    let record_path = args.install_dir.join(RECORD);
    let mut record = match read_record(&record_path)? {
        Some(r) => r,
        None if args.install_dir.exists() => {
            return Err(NodeCliError::ForeignInstallDir(args.install_dir.clone()))
        }
        None => {
            let watched = watched(args);
            let record = Record {
                version: env!("CARGO_PKG_VERSION").to_string(),
                engine: args.engine.name().to_string(),
                originals: effects::snapshot(&watched)?,
                watched,
                installed: None,
            };
            // Kept before anything changes: an install cut short is undone whole.
            write_record(&record_path, &record)?;
            record
        }
    };
    let before = effects::snapshot(&record.watched)?;
    record.installed = None;
    write_record(&record_path, &record)?;

    let bin = args.install_dir.join("bin");
    for (name, bytes) in &binaries {
        let path = bin.join(name);
        if std::fs::read(&path).ok().as_deref() != Some(bytes.as_slice()) {
            files::write_atomic(
                &path,
                bytes,
                &WriteOptions {
                    create_parents: true,
                    ..WriteOptions::new(0o755)
                },
            )?;
            say!("installed {}", path.display());
        }
    }
    let config_path = args.install_dir.join("etc/config.toml");
    if std::fs::read_to_string(&config_path).ok().as_deref() != Some(config_text.as_str()) {
        files::write_atomic(
            &config_path,
            config_text.as_bytes(),
            &WriteOptions {
                create_parents: true,
                ..WriteOptions::new(0o644)
            },
        )?;
        say!("wrote {}", config_path.display());
    }
    configure::run(&ConfigureArgs::for_node(
        args.engine.configure(),
        engine_config(args),
        args.runtime_name.clone(),
        bin.join("nvc-runtime"),
    ))
    .map_err(Box::new)?;
    write_node_spec(&config, &args.cdi_spec, &NamingArgs::nvidia())?;
    if let Some(path) = &args.device_plugin_cdi_spec {
        // The plugin names GPUs by UUID or by index (its DEVICE_ID_STRATEGY): both.
        let naming = NamingArgs {
            vendor: libnvc::cdi::DEVICE_PLUGIN_VENDOR.to_string(),
            ..NamingArgs::nvidia()
        };
        write_node_spec(&config, path, &naming)?;
    }

    let after = effects::snapshot(&record.watched)?;
    let engine_changed = libnvc::node::changed_under(&before, &after, &engine_dir);
    record.installed = Some(after);
    write_record(&record_path, &record)?;
    if engine_changed {
        reload(args)?;
    } else {
        say!("{} is already configured: not reloaded", args.engine.name());
    }
    say!(
        "nvc {} installed in {} for {}",
        env!("CARGO_PKG_VERSION"),
        args.install_dir.display(),
        args.engine.name()
    );
    Ok(())
}

/// Writes the spec named as `naming` says to `path` (JSON for a `.json` file, else YAML),
/// unless it holds it already.
fn write_node_spec(config: &Config, path: &Path, naming: &NamingArgs) -> Result<(), NodeCliError> {
    let format = libnvc::cdi::Format::from_path(path).unwrap_or(libnvc::cdi::Format::Yaml);
    let spec = crate::cdi::spec_for(config, None, naming)
        .map_err(Box::new)?
        .to_string_as(format)
        .map_err(Box::new)?;
    if std::fs::read_to_string(path).ok().as_deref() != Some(spec.as_str()) {
        crate::cdi::write_spec(path, &spec).map_err(Box::new)?;
        say!("wrote the CDI spec {}", path.display());
    }
    Ok(())
}

/// `nvc node uninstall`.
fn uninstall(args: &NodeArgs) -> Result<(), NodeCliError> {
    check_paths(args)?;
    effects::enter_root(&args.host_root)?;
    let record_path = args.install_dir.join(RECORD);
    let Some(record) = read_record(&record_path)? else {
        say!(
            "no record of an install in {}: nothing to undo",
            args.install_dir.display()
        );
        return Ok(());
    };
    let now: Tree = effects::snapshot(&record.watched)?;
    let steps = record.uninstall_steps(&now);
    let engine_dir = record.watched.first().cloned().unwrap_or_default();
    let mut engine_changed = false;
    for step in &steps {
        effects::apply(step)?;
        match step {
            Step::Restore(path, _) => say!("restored {}", path.display()),
            Step::Remove(path) => say!("removed {}", path.display()),
            Step::Keep(path) => say!(
                "kept {}: it changed after nvc was installed",
                path.display()
            ),
        }
        if let Step::Restore(path, _) | Step::Remove(path) = step {
            engine_changed |= path.starts_with(&engine_dir);
        }
    }
    std::fs::remove_dir_all(&args.install_dir).map_err(|source| NodeError::Io {
        op: "remove",
        path: args.install_dir.clone(),
        source,
    })?;
    say!("removed {}", args.install_dir.display());
    if engine_changed {
        reload(args)?;
    }
    say!("nvc uninstalled");
    Ok(())
}

/// Makes the engine read its config again, as --reload says.
fn reload(args: &NodeArgs) -> Result<(), NodeCliError> {
    let engine = args.engine.name();
    match args.reload.unwrap_or(Reload::Signal) {
        Reload::Signal => {
            let socket = args
                .socket
                .clone()
                .unwrap_or_else(|| PathBuf::from(args.engine.default_socket()));
            let pid = effects::signal_engine(&socket)?;
            say!(
                "sent SIGHUP to {engine} (pid {pid}, serving {})",
                socket.display()
            );
            // containerd exits on it and comes back by its unit: done when another
            // process serves the socket. (CRI-O reloads in place.)
            if args.engine == NodeEngine::Containerd {
                let back = effects::wait_for_new_engine(&socket, pid, ENGINE_BACK_TIMEOUT)?;
                say!("{engine} is back (pid {back})");
            }
        }
        Reload::Systemd => {
            let unit = args.systemd_unit.as_deref().unwrap_or(engine);
            effects::systemctl_restart(unit)?;
            say!("restarted {unit} (systemctl restart {unit})");
        }
        Reload::None => say!("--reload none: restart {engine} to apply"),
    }
    Ok(())
}

/// nvc's config for the node: `base` with the driver roots and the hook path set.
fn node_config(args: &NodeArgs, base: &str) -> Result<String, NodeCliError> {
    let bad = |e: Box<dyn std::error::Error + Send + Sync>| NodeCliError::BaseConfig {
        path: args
            .nvc_config
            .clone()
            .unwrap_or_else(|| PathBuf::from("(defaults)")),
        source: e,
    };
    let mut doc: toml_edit::DocumentMut = base.parse().map_err(|e| bad(Box::new(e)))?;
    let path = |p: &Path| toml_edit::value(p.display().to_string());
    for (table, key, value) in [
        ("driver", "root", path(&args.driver_root)),
        ("driver", "dev-root", path(&args.dev_root)),
        ("driver", "proc-root", path(&args.proc_root)),
        ("hook", "path", path(&args.install_dir.join("bin/nvc-hook"))),
    ] {
        let t = doc
            .entry(table)
            .or_insert_with(toml_edit::table)
            .as_table_like_mut()
            .ok_or_else(|| bad(format!("[{table}] is not a table").into()))?;
        t.insert(key, value);
    }
    let mut text = String::from(
        "# Written by `nvc node install`; removed by `nvc node uninstall`. The binaries in\n\
         # ../bin read it when /etc/nvc/config.toml does not exist.\n",
    );
    text.push_str(&doc.to_string());
    // The result must be a config nvc takes.
    Config::parse(&text, Path::new("config.toml")).map_err(|e| bad(Box::new(e)))?;
    Ok(text)
}

fn read_record(path: &Path) -> Result<Option<Record>, NodeCliError> {
    let bad = |source: Box<dyn std::error::Error + Send + Sync>| NodeCliError::Record {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| bad(e.into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(bad(e.into())),
    }
}

fn write_record(path: &Path, record: &Record) -> Result<(), NodeCliError> {
    let text = serde_json::to_string_pretty(record).map_err(|e| NodeCliError::Record {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    Ok(files::write_atomic(
        path,
        text.as_bytes(),
        &WriteOptions {
            create_parents: true,
            ..WriteOptions::new(0o600)
        },
    )?)
}
