//! `nvc runtime configure`: registers nvc with Docker, containerd, CRI-O or Podman.
//!
//! This file does the I/O: it finds and reads the engine's files, asks
//! `nvc_engines` (pure: text in, text out) what they must become, checks everything
//! before writing anything, then writes each changed file atomically through
//! `nvc_host::files` (after a one-time `.nvc-backup` of files that hold the user's own
//! settings: `engine_file`), one line per change.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use engine_file::{backup_once, backup_path, CONFIG_WRITE};
use nvc_engines::{self, Source};

mod containerd;
mod crio;
mod docker;
mod engine_file;
mod podman;
use nvc_host::files::{self, Symlink};

/// `println!` that ignores a closed stdout (`nvc ... --dry-run | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

const DOCKER_CONFIG: &str = "/etc/docker/daemon.json";
const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
const CRIO_CONFIG: &str = "/etc/crio/crio.conf";
const PODMAN_HOOK: &str = "/usr/share/containers/oci/hooks.d/oci-nvc-hook.json";
/// The executable dockerd looks up on its PATH for `docker run --gpus`.
const GPUS_HOOK_NAME: &str = "nvidia-container-runtime-hook";

/// A container engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// dockerd: /etc/docker/daemon.json.
    Docker,
    /// containerd: /etc/containerd/config.toml and conf.d/99-nvc.toml.
    Containerd,
    /// CRI-O: /etc/crio/crio.conf.d/99-nvc.conf.
    Crio,
    /// Podman: an OCI hooks.d file.
    Podman,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Containerd => "containerd",
            Engine::Crio => "crio",
            Engine::Podman => "podman",
        }
    }
}

/// Options of `nvc runtime configure`.
#[derive(Args)]
pub struct ConfigureArgs {
    /// The engine to configure.
    #[arg(long, value_enum)]
    runtime: Engine,
    /// The engine's config file [default: /etc/docker/daemon.json,
    /// /etc/containerd/config.toml, /etc/crio/crio.conf, or for podman the hook file
    /// /usr/share/containers/oci/hooks.d/oci-nvc-hook.json].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// containerd and CRI-O: the drop-in file nvc writes [default: conf.d/99-nvc.toml
    /// or crio.conf.d/99-nvc.conf, in --config's directory].
    #[arg(long, value_name = "PATH")]
    drop_in: Option<PathBuf>,
    /// The runtime's name in the engine (`docker run --runtime NAME`, a Kubernetes
    /// RuntimeClass handler).
    #[arg(long, value_name = "NAME", default_value = "nv")]
    runtime_name: String,
    /// Where nvc-runtime is installed.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/nvc-runtime")]
    runtime_path: PathBuf,
    /// Where nvc-hook is installed (podman, --gpus-alias) [default: the nvc config's
    /// hook.path].
    #[arg(long, value_name = "PATH")]
    hook_path: Option<PathBuf>,
    /// Make nvc the engine's default runtime.
    #[arg(long)]
    set_as_default: bool,
    /// docker: set features.cdi; containerd: set enable_cdi (CRI-O and Podman always
    /// read CDI specs).
    #[arg(long)]
    cdi: bool,
    /// docker: link nvidia-container-runtime-hook to nvc-hook, so `docker run --gpus`
    /// uses nvc.
    #[arg(long)]
    gpus_alias: bool,
    /// Where the --gpus-alias link goes [default: nvc-hook's directory].
    #[arg(long, value_name = "DIR", requires = "gpus_alias")]
    alias_dir: Option<PathBuf>,
    /// Print what would be written, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Undo: remove nvc's runtime, drop-in, hook file or link (backups stay).
    #[arg(long, conflicts_with_all = ["set_as_default", "cdi"])]
    revert: bool,
    /// Leave out the closing "restart the engine" line (`nvc node` restarts it itself).
    #[arg(skip)]
    no_restart_hint: bool,
}

impl ConfigureArgs {
    /// What `nvc node install` asks for: `engine`'s main config file `config`, the
    /// runtime `runtime_name` at `runtime_path`, CDI on for containerd.
    pub(crate) fn for_node(
        engine: Engine,
        config: PathBuf,
        runtime_name: String,
        runtime_path: PathBuf,
    ) -> ConfigureArgs {
        ConfigureArgs {
            runtime: engine,
            config: Some(config),
            drop_in: None,
            runtime_name,
            runtime_path,
            hook_path: None,
            set_as_default: false,
            cdi: engine == Engine::Containerd,
            gpus_alias: false,
            alias_dir: None,
            dry_run: false,
            revert: false,
            no_restart_hint: true,
        }
    }
}

/// Why configuring failed. Nothing is written unless every file could be worked out.
#[derive(Debug, thiserror::Error)]
pub enum ConfigureError {
    /// Reading or writing a file failed.
    #[error(transparent)]
    File(#[from] files::FileError),
    /// daemon.json cannot be used.
    #[error("cannot update {path}; nothing was written, fix it and run again")]
    Docker {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: nvc_engines::docker::DockerError,
    },
    /// containerd's files cannot be used.
    #[error("cannot update containerd's configuration; nothing was written, fix it and run again")]
    Containerd(#[source] nvc_engines::containerd::ContainerdError),
    /// CRI-O's files cannot be used.
    #[error("cannot read CRI-O's configuration; nothing was written, fix it and run again")]
    Crio(#[source] nvc_engines::crio::CrioError),
    /// The hooks.d file cannot be used.
    #[error("cannot update {path}; nothing was written, fix it or move it away and run again")]
    Podman {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: nvc_engines::podman::PodmanError,
    },
    /// A file where nvc puts its drop-in belongs to someone else.
    #[error(
        "{path} exists and was not written by nvc (it does not start with {marker:?}): \
         move it away or pass another --drop-in path"
    )]
    ForeignDropIn {
        /// The file.
        path: PathBuf,
        /// What nvc's files start with.
        marker: &'static str,
    },
    /// The hooks.d file runs another hook.
    #[error("{path} is not nvc's hook file (its hook is not {hook}): left alone; remove it yourself if it should go")]
    ForeignHookFile {
        /// The file.
        path: PathBuf,
        /// The hook nvc would have written.
        hook: PathBuf,
    },
    /// The --gpus-alias link would replace a real file.
    #[error(
        "{path} exists and is not a symlink (NVIDIA's hook?): left alone; remove it to let \
         `docker run --gpus` use nvc-hook, or pass another --alias-dir"
    )]
    AliasExists {
        /// The file.
        path: PathBuf,
    },
    /// Inspecting a path failed.
    #[error("cannot inspect {path}")]
    Stat {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The runtime name would not survive the engines' config syntax.
    #[error("--runtime-name {0:?}: use letters, digits, '-', '_' and '.' only")]
    BadName(String),
    /// A path option is relative.
    #[error("--{flag} {path}: give an absolute path (the engine runs it from its own directory)")]
    RelativePath {
        /// The option.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// An option does not apply to the chosen engine.
    #[error("--{flag} does not apply to --runtime {engine}: {hint}")]
    NotApplicable {
        /// The option.
        flag: &'static str,
        /// The engine.
        engine: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// The nvc config (for hook.path) cannot be loaded.
    #[error("cannot find nvc-hook's path in the nvc configuration (or pass --hook-path)")]
    Config(#[source] nvc_config::ConfigError),
    /// The nvc config (for hook.timeout, which the Podman hook file follows) cannot be
    /// loaded.
    #[error(
        "cannot read hook.timeout from the nvc configuration, which the Podman hook file's \
         timeout follows: fix the file (`nvc config default` shows every key)"
    )]
    HookTimeout(#[source] nvc_config::ConfigError),
}

/// One thing to do to the host.
enum Change {
    /// Write `new` to `path` (which holds `old`); `backup`: the file holds the user's
    /// settings, keep the original once.
    Write {
        path: PathBuf,
        old: Option<String>,
        new: String,
        backup: bool,
    },
    /// Remove `path`.
    Remove { path: PathBuf },
    /// Make `path` a symlink to `target` (replacing the symlink to `old`, if any).
    Link {
        path: PathBuf,
        target: PathBuf,
        old: Option<PathBuf>,
    },
}

/// Runs `nvc runtime configure`.
pub fn run(args: &ConfigureArgs) -> Result<(), ConfigureError> {
    check_args(args)?;
    // containerd resolves relative imports against the main file's directory, and the
    // messages should name files unambiguously: work with absolute paths.
    let absolute = |p: &Option<PathBuf>| -> Result<Option<PathBuf>, ConfigureError> {
        p.as_deref()
            .map(|p| {
                std::path::absolute(p).map_err(|source| ConfigureError::Stat {
                    path: p.to_path_buf(),
                    source,
                })
            })
            .transpose()
    };
    let args = &ConfigureArgs {
        config: absolute(&args.config)?,
        drop_in: absolute(&args.drop_in)?,
        alias_dir: absolute(&args.alias_dir)?,
        runtime_name: args.runtime_name.clone(),
        runtime_path: args.runtime_path.clone(),
        hook_path: args.hook_path.clone(),
        ..*args
    };
    let mut warnings = Vec::new();
    let changes = match args.runtime {
        Engine::Docker => docker::changes(args)?,
        Engine::Containerd => containerd::changes(args, &mut warnings)?,
        Engine::Crio => crio::changes(args, &mut warnings)?,
        Engine::Podman => podman::changes(args)?,
    };
    if !args.revert && !args.runtime_path.exists() && args.runtime != Engine::Podman {
        warnings.push(format!(
            "{} does not exist yet: install nvc-runtime there before restarting {}",
            args.runtime_path.display(),
            args.runtime.name()
        ));
    }
    for w in &warnings {
        eprintln!("nvc: warning: {}", libnvc::report::shorten(w));
    }
    let changes: Vec<Change> = changes.into_iter().filter(Change::changes).collect();
    if changes.is_empty() {
        say!(
            "{} is {}: nothing to change",
            args.runtime.name(),
            if args.revert {
                "not configured for nvc"
            } else {
                "already configured"
            }
        );
        return Ok(());
    }
    for change in &changes {
        if args.dry_run {
            change.show();
        } else {
            change.apply()?;
        }
    }
    if !args.dry_run && !args.no_restart_hint {
        match args.runtime {
            Engine::Podman => {}
            Engine::Crio => say!("restart CRI-O to apply: systemctl restart crio"),
            engine => say!("restart {0} to apply: systemctl restart {0}", engine.name()),
        }
    }
    Ok(())
}

fn check_args(args: &ConfigureArgs) -> Result<(), ConfigureError> {
    let name = &args.runtime_name;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ConfigureError::BadName(name.clone()));
    }
    for (flag, path) in [
        ("runtime-path", Some(&args.runtime_path)),
        ("hook-path", args.hook_path.as_ref()),
    ] {
        if let Some(p) = path.filter(|p| !p.is_absolute()) {
            return Err(ConfigureError::RelativePath {
                flag,
                path: p.clone(),
            });
        }
    }
    let engine = args.runtime.name();
    let not = |flag, hint| Err(ConfigureError::NotApplicable { flag, engine, hint });
    match args.runtime {
        Engine::Docker if args.drop_in.is_some() => {
            not("drop-in", "Docker has no drop-in files; use --config")
        }
        Engine::Crio | Engine::Podman if args.cdi => not(
            "cdi",
            "CRI-O and Podman read CDI specs without configuration",
        ),
        Engine::Podman if args.set_as_default || args.drop_in.is_some() => not(
            if args.set_as_default {
                "set-as-default"
            } else {
                "drop-in"
            },
            "Podman runs the hook through hooks.d; --config names the hook file",
        ),
        e if args.gpus_alias && e != Engine::Docker => not(
            "gpus-alias",
            "only dockerd looks up nvidia-container-runtime-hook",
        ),
        _ => Ok(()),
    }
}

fn hook_path(args: &ConfigureArgs) -> Result<PathBuf, ConfigureError> {
    match &args.hook_path {
        Some(p) => Ok(p.clone()),
        None => nvc_config::Config::load_from_env()
            .map(|(c, _)| c.hook.path)
            .map_err(ConfigureError::Config),
    }
}

/// The Podman hook's `timeout`: the configured hook deadline plus the runtime's grace.
fn hook_runtime_timeout() -> Result<u32, ConfigureError> {
    nvc_config::Config::load_from_env()
        .map(|(c, _)| c.hook.runtime_timeout())
        .map_err(ConfigureError::HookTimeout)
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The drop-in's current text, refusing a file nvc did not write.
pub(super) fn own_drop_in(path: &Path) -> Result<Option<String>, ConfigureError> {
    let text = files::read_optional(path)?;
    match text {
        Some(t) if !nvc_engines::written_by_nvc(&t) => Err(ConfigureError::ForeignDropIn {
            path: path.to_path_buf(),
            marker: nvc_engines::MARKER,
        }),
        other => Ok(other),
    }
}

impl Change {
    /// Whether doing it would change anything.
    fn changes(&self) -> bool {
        match self {
            Change::Write { old, new, .. } => old.as_deref() != Some(new.as_str()),
            Change::Remove { path } => fs::symlink_metadata(path).is_ok(),
            Change::Link { target, old, .. } => old.as_ref() != Some(target),
        }
    }

    fn show(&self) {
        match self {
            Change::Write { path, old, new, .. } => {
                let verb = if old.is_some() { "update" } else { "create" };
                say!("would {verb} {}:", path.display());
                say!("{}", new.strip_suffix('\n').unwrap_or(new));
            }
            Change::Remove { path } => say!("would remove {}", path.display()),
            Change::Link { path, target, .. } => {
                say!("would link {} -> {}", path.display(), target.display());
            }
        }
    }

    fn apply(&self) -> Result<(), ConfigureError> {
        match self {
            Change::Write {
                path,
                old,
                new,
                backup,
            } => {
                files::remove_stale_temp_files(path, CONFIG_WRITE.symlink)?;
                let saved = if *backup {
                    files::remove_stale_temp_files(&backup_path(path), Symlink::Replace)?;
                    backup_once(path)?
                } else {
                    None
                };
                files::write_atomic(path, new.as_bytes(), &CONFIG_WRITE)?;
                let verb = if old.is_some() { "updated" } else { "created" };
                match saved {
                    Some(b) => say!(
                        "{verb} {} (original kept as {})",
                        path.display(),
                        b.display()
                    ),
                    None => say!("{verb} {}", path.display()),
                }
            }
            Change::Remove { path } => {
                files::remove(path)?;
                say!("removed {}", path.display());
            }
            Change::Link { path, target, old } => {
                files::remove_stale_temp_files(path, Symlink::Replace)?;
                files::symlink_atomic(target, path)?;
                match old {
                    Some(o) => say!(
                        "linked {} -> {} (was -> {})",
                        path.display(),
                        target.display(),
                        o.display()
                    ),
                    None => say!("linked {} -> {}", path.display(), target.display()),
                }
            }
        }
        Ok(())
    }
}
