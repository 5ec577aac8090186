//! `nvc cdi generate` and `nvc cdi list`: CDI specs for this host's GPUs
//! (`libnvc::cdi`), for engines that inject devices themselves (Podman, containerd and
//! CRI-O with CDI enabled).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use libnvc::cdi::{self, Format, GenerateOptions, Kind, NameStrategy, Spec};
use libnvc::discover::{self, DriverRoots};
use libnvc::edits::ContainerLayout;
use nvc_config::Config;
use nvc_host::files::{self, WriteOptions};

/// How `--output` is written: replaced atomically, so an engine watching the folder
/// never reads half a spec (the temporary name starts with a dot and ends in
/// `.nvc-tmp`, which CDI registries do not load); a new file gets 0644 and its missing
/// folders, an existing one keeps its mode and owner; a symlink there is replaced by
/// the file, as it always was.
const SPEC_WRITE: WriteOptions = WriteOptions {
    create_parents: true,
    ..WriteOptions::new(0o644)
};

/// `nvc cdi` subcommands.
#[derive(Subcommand)]
pub enum CdiCommand {
    /// Write a CDI spec for this host's GPUs (to stdout, or to --output).
    Generate(GenerateArgs),
    /// List the fully qualified CDI device names, one per line: those the generated spec
    /// would have, or those of --spec.
    List(ListArgs),
}

/// A spec file's format on the command line.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// How devices are named, on the command line.
#[derive(Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum StrategyArg {
    /// By index: nvidia.com/gpu=0.
    Index,
    /// By UUID: nvidia.com/gpu=GPU-… (NVIDIA's device plugin's default).
    Uuid,
    /// Both names for every GPU (Kubernetes' device plugin names GPUs by UUID, engines'
    /// users by index).
    #[default]
    Both,
}

impl From<StrategyArg> for NameStrategy {
    fn from(s: StrategyArg) -> Self {
        match s {
            StrategyArg::Index => NameStrategy::Index,
            StrategyArg::Uuid => NameStrategy::Uuid,
            StrategyArg::Both => NameStrategy::Both,
        }
    }
}

/// How a spec's devices are named: `VENDOR/CLASS=NAME`.
#[derive(Args, Clone)]
pub struct NamingArgs {
    /// The vendor of the spec's kind, VENDOR/CLASS (NVIDIA's Kubernetes device plugin
    /// names GPUs under k8s.device-plugin.nvidia.com/gpu).
    #[arg(long, value_name = "VENDOR", default_value = cdi::VENDOR, value_parser = vendor_arg)]
    pub vendor: String,
    /// The class of the spec's kind.
    #[arg(long, value_name = "CLASS", default_value = cdi::CLASS, value_parser = class_arg)]
    pub class: String,
    /// How GPU devices are named.
    #[arg(long, value_enum, default_value_t)]
    pub device_name_strategy: StrategyArg,
}

impl NamingArgs {
    /// The names of the default spec: `nvidia.com/gpu`, by index and UUID.
    pub fn nvidia() -> NamingArgs {
        NamingArgs {
            vendor: cdi::VENDOR.to_string(),
            class: cdi::CLASS.to_string(),
            device_name_strategy: StrategyArg::Both,
        }
    }

    fn kind(&self) -> Result<Kind, cdi::KindError> {
        Kind::new(&self.vendor, &self.class)
    }
}

fn vendor_arg(s: &str) -> Result<String, String> {
    cdi::check_vendor(s).map_err(|e| e.reason())?;
    Ok(s.to_string())
}

fn class_arg(s: &str) -> Result<String, String> {
    cdi::check_class(s).map_err(|e| e.reason())?;
    Ok(s.to_string())
}

/// `nvc cdi generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Write the spec to FILE (replaced atomically), e.g. /etc/cdi/nvidia.yaml.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The format; by default from the --output extension (.json, .yaml, .yml), YAML on
    /// stdout.
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    #[command(flatten)]
    pub naming: NamingArgs,
}

/// `nvc cdi list`.
#[derive(Args)]
pub struct ListArgs {
    /// Read the device names from this spec file instead of this host's driver.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["vendor", "class", "device_name_strategy"]
    )]
    pub spec: Option<PathBuf>,
    /// The names the generated spec would have (without --spec).
    #[command(flatten)]
    pub naming: NamingArgs,
}

impl std::fmt::Display for StrategyArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(NameStrategy::from(*self).name())
    }
}

/// Why a CDI command failed.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The driver could not be discovered.
    #[error(transparent)]
    Discover(#[from] discover::DiscoverError),
    /// The spec could not be made or read.
    #[error(transparent)]
    Spec(#[from] cdi::CdiError),
    /// The kind is not one CDI takes.
    #[error(transparent)]
    Kind(#[from] cdi::KindError),
    /// The spec file read is not a spec.
    #[error("cannot read the CDI spec {path}")]
    BadSpecFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: cdi::CdiError,
    },
    /// The output's format cannot be told from its name.
    #[error("cannot tell the format of {0} from its extension: name it .json, .yaml or .yml, or pass --format")]
    UnknownFormat(PathBuf),
    /// The spec file could not be written.
    #[error(transparent)]
    File(#[from] files::FileError),
    /// A file operation failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CdiError {
    let path = path.to_path_buf();
    move |source| CdiError::Io { op, path, source }
}

/// Runs an `nvc cdi` subcommand.
pub fn run(command: &CdiCommand) -> Result<(), CdiError> {
    match command {
        CdiCommand::Generate(args) => generate(args),
        CdiCommand::List(args) => list(args),
    }
}

/// The spec for this host, per the configuration.
fn host_spec(naming: &NamingArgs) -> Result<Spec, CdiError> {
    let (config, path) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc");
    // Another file than the default is named to the spec's hooks.
    let named = (path != Path::new(nvc_config::DEFAULT_PATH))
        .then(|| std::path::absolute(&path).unwrap_or(path));
    spec_for(&config, named, naming)
}

/// The spec for this host, per `config`, its devices named as `naming` says; its hooks
/// are told `named`, the config's file, when given.
pub(crate) fn spec_for(
    config: &Config,
    named: Option<PathBuf>,
    naming: &NamingArgs,
) -> Result<Spec, CdiError> {
    let kind = naming.kind()?;
    let driver = discover::discover(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    )?;
    let options = GenerateOptions {
        kind,
        strategy: naming.device_name_strategy.into(),
        // The driver's architecture's folders: /usr/lib/aarch64-linux-gnu on arm64 hosts.
        layout: ContainerLayout::for_driver(&driver),
        config: named,
        ..GenerateOptions::new(&config.hook.path)
    };
    Ok(cdi::generate(&driver, &options)?)
}

fn generate(args: &GenerateArgs) -> Result<(), CdiError> {
    let format = match (args.format, &args.output) {
        (Some(FormatArg::Json), _) => Format::Json,
        (Some(FormatArg::Yaml), _) => Format::Yaml,
        (None, None) => Format::Yaml,
        (None, Some(path)) => {
            Format::from_path(path).ok_or_else(|| CdiError::UnknownFormat(path.clone()))?
        }
    };
    let text = host_spec(&args.naming)?.to_string_as(format)?;
    match &args.output {
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(io_error("write", Path::new("stdout"))),
        Some(path) => write_spec(path, &text),
    }
}

/// Writes a spec's text to `path` as `--output` does.
pub(crate) fn write_spec(path: &Path, text: &str) -> Result<(), CdiError> {
    files::remove_stale_temp_files(path, SPEC_WRITE.symlink)?;
    Ok(files::write_atomic(path, text.as_bytes(), &SPEC_WRITE)?)
}

fn list(args: &ListArgs) -> Result<(), CdiError> {
    let spec = match &args.spec {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(io_error("read", path))?;
            Spec::parse(&text).map_err(|source| CdiError::BadSpecFile {
                path: path.clone(),
                source,
            })?
        }
        None => host_spec(&args.naming)?,
    };
    let mut out = String::new();
    for name in spec.qualified_names() {
        out.push_str(&name);
        out.push('\n');
    }
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(io_error("write", Path::new("stdout")))
}
