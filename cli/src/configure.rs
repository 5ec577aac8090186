//! `nvc runtime configure`: registers nvc with Docker, containerd, CRI-O or Podman.
//!
//! This file does the I/O: it finds and reads the engine's files, asks
//! `nvc_engines` what they must become, checks everything before writing anything,
//! then writes each changed file atomically (after a one-time `.nvc-backup` of files
//! that hold the user's own settings), one line per change.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use nvc_engines::files::{backup_once, backup_path, CONFIG_WRITE};
use nvc_engines::{self, containerd, crio, docker, podman, Source};
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
        source: docker::DockerError,
    },
    /// containerd's files cannot be used.
    #[error("cannot update containerd's configuration; nothing was written, fix it and run again")]
    Containerd(#[source] containerd::ContainerdError),
    /// CRI-O's files cannot be used.
    #[error("cannot read CRI-O's configuration; nothing was written, fix it and run again")]
    Crio(#[source] crio::CrioError),
    /// The hooks.d file cannot be used.
    #[error("cannot update {path}; nothing was written, fix it or move it away and run again")]
    Podman {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: podman::PodmanError,
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
        Engine::Docker => docker_changes(args)?,
        Engine::Containerd => containerd_changes(args, &mut warnings)?,
        Engine::Crio => crio_changes(args, &mut warnings)?,
        Engine::Podman => podman_changes(args)?,
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
    if !args.dry_run {
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

fn docker_changes(args: &ConfigureArgs) -> Result<Vec<Change>, ConfigureError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DOCKER_CONFIG));
    let old = files::read_optional(&path)?;
    let text = old.as_deref().unwrap_or("");
    let runtime_path = path_str(&args.runtime_path);
    let result = if args.revert {
        docker::unconfigure(text, &args.runtime_name)
    } else {
        docker::configure(
            text,
            &docker::DockerOptions {
                runtime_name: &args.runtime_name,
                runtime_path: &runtime_path,
                set_as_default: args.set_as_default,
                cdi: args.cdi,
            },
        )
    };
    let new = result.map_err(|source| ConfigureError::Docker {
        path: path.clone(),
        source,
    })?;
    let mut changes = Vec::new();
    // Reverting a missing file leaves it missing.
    if old.is_some() || !args.revert {
        changes.push(Change::Write {
            path,
            old,
            new,
            backup: true,
        });
    }
    if args.gpus_alias {
        changes.extend(gpus_alias(args)?);
    }
    Ok(changes)
}

/// The `nvidia-container-runtime-hook` link for `docker run --gpus`: relative when it
/// sits next to nvc-hook, so the pair can move together.
fn gpus_alias(args: &ConfigureArgs) -> Result<Option<Change>, ConfigureError> {
    let hook = hook_path(args)?;
    let hook_dir = hook.parent().unwrap_or_else(|| Path::new("/"));
    let dir = args.alias_dir.as_deref().unwrap_or(hook_dir);
    let path = dir.join(GPUS_HOOK_NAME);
    let target = match hook.file_name() {
        Some(name) if dir == hook_dir => PathBuf::from(name),
        _ => hook.clone(),
    };
    let old = match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            Some(fs::read_link(&path).map_err(|source| ConfigureError::Stat {
                path: path.clone(),
                source,
            })?)
        }
        Ok(_) => return Err(ConfigureError::AliasExists { path }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => return Err(ConfigureError::Stat { path, source }),
    };
    if args.revert {
        // Only a link to nvc-hook is nvc's to remove.
        let ours = old.as_ref().is_some_and(|o| *o == target || *o == hook);
        return Ok(ours.then_some(Change::Remove { path }));
    }
    Ok(Some(Change::Link { path, target, old }))
}

fn containerd_changes(
    args: &ConfigureArgs,
    warnings: &mut Vec<String>,
) -> Result<Vec<Change>, ConfigureError> {
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CONTAINERD_CONFIG));
    let drop_in = args.drop_in.clone().unwrap_or_else(|| {
        config
            .parent()
            .unwrap_or_else(|| Path::new("/etc/containerd"))
            .join("conf.d/99-nvc.toml")
    });
    let old_main = files::read_optional(&config)?;
    let old_drop_in = own_drop_in(&drop_in)?;
    let main_text = old_main.as_deref().unwrap_or("");
    let main = Source {
        path: &config,
        text: main_text,
    };

    if args.revert {
        let mut changes = Vec::new();
        // The import goes only if nvc added it: the pre-nvc original lacks it.
        let original = match old_main {
            Some(_) => files::read_optional(&backup_path(&config))?,
            None => None,
        };
        if let Some(original) = original {
            let original = Source {
                path: &config,
                text: &original,
            };
            let imports = containerd::imports(original).map_err(ConfigureError::Containerd)?;
            let had_it = imports
                .iter()
                .any(|i| containerd::import_matches(&config, i, &drop_in));
            let had_imports =
                containerd::has_imports_key(original).map_err(ConfigureError::Containerd)?;
            if !had_it {
                let new = containerd::unconfigure(main, &drop_in, had_imports)
                    .map_err(ConfigureError::Containerd)?;
                changes.push(Change::Write {
                    path: config.clone(),
                    old: old_main.clone(),
                    new,
                    backup: false,
                });
            }
        }
        if old_drop_in.is_some() {
            changes.push(Change::Remove { path: drop_in });
        }
        return Ok(changes);
    }

    let runtime_path = path_str(&args.runtime_path);
    let opts = containerd::ContainerdOptions {
        runtime_name: &args.runtime_name,
        runtime_path: &runtime_path,
        set_as_default: args.set_as_default,
        cdi: args.cdi,
        config_path: &config,
        drop_in_path: &drop_in,
    };
    // First the main file alone, for its imports once nvc's is there; then the files
    // containerd loads before the drop-in, which shape what it must hold.
    let first = containerd::configure(&[main], &opts).map_err(ConfigureError::Containerd)?;
    let order = containerd_load_order(&config, &first.config, &drop_in, warnings)?;
    let at = order.iter().position(|(p, _)| *p == drop_in);
    let (before, after) = match at {
        Some(i) => (&order[..i], &order[i + 1..]),
        None => (&order[..], &order[..0]),
    };
    let mut sources = vec![main];
    sources.extend(before.iter().map(|(path, text)| Source { path, text }));
    let plan = containerd::configure(&sources, &opts).map_err(ConfigureError::Containerd)?;
    for (path, text) in after {
        let source = Source { path, text };
        if containerd::overrides_drop_in(source, plan.version, &args.runtime_name)
            .map_err(ConfigureError::Containerd)?
        {
            warnings.push(format!(
                "{} is loaded after {} and overrides its CRI settings: containerd may not see the {:?} runtime",
                path.display(),
                drop_in.display(),
                args.runtime_name
            ));
        }
    }
    let newly_imported: Vec<String> = before
        .iter()
        .chain(after)
        .filter(|(p, _)| p.parent() == drop_in.parent())
        .filter(|(p, _)| {
            !containerd::imports(main)
                .unwrap_or_default()
                .iter()
                .any(|i| containerd::import_matches(&config, i, p))
        })
        .map(|(p, _)| p.display().to_string())
        .collect();
    if !newly_imported.is_empty() {
        warnings.push(format!(
            "the import {} also loads {}, not imported before",
            containerd::drop_in_glob(&drop_in),
            newly_imported.join(", ")
        ));
    }
    Ok(vec![
        Change::Write {
            path: drop_in,
            old: old_drop_in,
            new: plan.drop_in,
            backup: false,
        },
        Change::Write {
            path: config,
            old: old_main,
            new: plan.config,
            backup: true,
        },
    ])
}

/// The files containerd loads after the main one, in its order (breadth first, each
/// glob's matches sorted), with the drop-in in its place whether it exists yet or not.
/// The drop-in's text is not read (empty).
fn containerd_load_order(
    config: &Path,
    main_text: &str,
    drop_in: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<(PathBuf, String)>, ConfigureError> {
    let mut order: Vec<(PathBuf, String)> = Vec::new();
    let mut loaded = vec![config.to_path_buf()];
    let mut pending: Vec<(PathBuf, String)> = vec![(config.to_path_buf(), main_text.to_string())];
    while !pending.is_empty() {
        let (path, text) = pending.remove(0);
        let imports = containerd::imports(Source {
            path: &path,
            text: &text,
        })
        .map_err(ConfigureError::Containerd)?;
        for import in imports {
            for file in expand_import(&path, &import, drop_in, warnings)? {
                if loaded.contains(&file) {
                    continue;
                }
                loaded.push(file.clone());
                if file == drop_in {
                    order.push((file, String::new()));
                    continue;
                }
                match files::read_optional(&file)? {
                    Some(text) => {
                        order.push((file.clone(), text.clone()));
                        pending.push((file, text));
                    }
                    None => warnings.push(format!(
                        "{} imports {}, which does not exist: containerd will not start",
                        path.display(),
                        file.display()
                    )),
                }
            }
        }
    }
    Ok(order)
}

/// The files an import names: itself, or a glob's matches in name order (wildcards in
/// the last component only), counting the drop-in as present.
fn expand_import(
    config: &Path,
    import: &str,
    drop_in: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>, ConfigureError> {
    let resolved = containerd::resolve_import(config, import);
    if !import.contains(['*', '?']) {
        return Ok(vec![resolved]);
    }
    let (Some(dir), Some(pattern)) = (resolved.parent(), resolved.file_name()) else {
        return Ok(Vec::new());
    };
    if dir.to_string_lossy().contains(['*', '?']) {
        warnings.push(format!(
            "cannot follow the import {import:?} of {} (wildcards in a directory)",
            config.display()
        ));
        return Ok(Vec::new());
    }
    let pattern = pattern.to_string_lossy();
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => Some(e),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ConfigureError::Stat {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries.into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if containerd::glob_component(&pattern, &name) {
            found.push(dir.join(name));
        }
    }
    if drop_in.parent() == Some(dir)
        && !found.iter().any(|f| f == drop_in)
        && containerd::import_matches(config, import, drop_in)
    {
        found.push(drop_in.to_path_buf());
    }
    found.sort();
    Ok(found)
}

/// The drop-in's current text, refusing a file nvc did not write.
fn own_drop_in(path: &Path) -> Result<Option<String>, ConfigureError> {
    let text = files::read_optional(path)?;
    match text {
        Some(t) if !nvc_engines::written_by_nvc(&t) => Err(ConfigureError::ForeignDropIn {
            path: path.to_path_buf(),
            marker: nvc_engines::MARKER,
        }),
        other => Ok(other),
    }
}

fn crio_changes(
    args: &ConfigureArgs,
    warnings: &mut Vec<String>,
) -> Result<Vec<Change>, ConfigureError> {
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CRIO_CONFIG));
    let drop_in = args
        .drop_in
        .clone()
        .unwrap_or_else(|| crio::default_drop_in(&config));
    let old = own_drop_in(&drop_in)?;
    if args.revert {
        return Ok(old
            .map(|_| Change::Remove { path: drop_in })
            .into_iter()
            .collect());
    }
    // CRI-O reads crio.conf, then every file of crio.conf.d in name order.
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    if let Some(text) = files::read_optional(&config)? {
        texts.push((config.clone(), text));
    }
    let dir = drop_in
        .parent()
        .unwrap_or_else(|| Path::new("/etc/crio/crio.conf.d"));
    let mut others: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| *p != drop_in)
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(ConfigureError::Stat {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    others.sort();
    let mut later = Vec::new();
    for path in others {
        if let Some(text) = files::read_optional(&path)? {
            if path.file_name() > drop_in.file_name() {
                later.push((path, text));
            } else {
                texts.push((path, text));
            }
        }
    }
    let runtime_path = path_str(&args.runtime_path);
    let opts = crio::CrioOptions {
        runtime_name: &args.runtime_name,
        runtime_path: &runtime_path,
        set_as_default: args.set_as_default,
    };
    let sources: Vec<Source<'_>> = texts
        .iter()
        .map(|(path, text)| Source { path, text })
        .collect();
    let new = crio::configure(&sources, &opts).map_err(ConfigureError::Crio)?;
    for (path, text) in &later {
        if let Some(key) =
            crio::overridden_by(Source { path, text }, &opts).map_err(ConfigureError::Crio)?
        {
            warnings.push(format!(
                "{} is read after {} and sets {key} too: its value wins",
                path.display(),
                drop_in.display()
            ));
        }
    }
    Ok(vec![Change::Write {
        path: drop_in,
        old,
        new,
        backup: false,
    }])
}

fn podman_changes(args: &ConfigureArgs) -> Result<Vec<Change>, ConfigureError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(PODMAN_HOOK));
    let hook = hook_path(args)?;
    let hook_str = path_str(&hook);
    let old = files::read_optional(&path)?;
    if args.revert {
        return match old {
            None => Ok(Vec::new()),
            Some(text) if podman::runs_hook(&text, &hook_str) => Ok(vec![Change::Remove { path }]),
            Some(_) => Err(ConfigureError::ForeignHookFile { path, hook }),
        };
    }
    let new = podman::configure(
        old.as_deref().unwrap_or(""),
        &podman::PodmanOptions {
            hook_path: &hook_str,
            timeout: hook_runtime_timeout()?,
        },
    )
    .map_err(|source| ConfigureError::Podman {
        path: path.clone(),
        source,
    })?;
    if !hook.exists() {
        eprintln!(
            "nvc: warning: {} does not exist yet: podman refuses hook files whose hook is missing",
            libnvc::report::sanitize(&hook.display().to_string())
        );
    }
    Ok(vec![Change::Write {
        path,
        old,
        new,
        backup: true,
    }])
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
