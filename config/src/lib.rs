//! nvc's configuration: `/etc/nvc/config.toml`, or the file named by `NVC_CONFIG`.
//!
//! A self-contained install (the node installer's `/opt/nvc`: `bin/` with the binaries,
//! `etc/config.toml` beside it) is found without either: when `NVC_CONFIG` is unset and
//! `/etc/nvc/config.toml` does not exist, a program reads `../etc/config.toml` from its
//! own folder, if that exists ([`Config::beside_executable`]). Neither engine can set an
//! environment variable for the runtime it runs, and an immutable node's `/etc` may not
//! be ours to write; a host with a packaged nvc never gets that far.
//!
//! A missing file means the defaults; a malformed one is an error naming the file,
//! the line and the key. [`DEFAULT_TOML`] is the shipped, commented file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod shim_keys;

pub use shim_keys::ShimKeys;

/// The shipped configuration file: every key, commented, with its default value.
pub const DEFAULT_TOML: &str = include_str!("../config.toml");

/// Where the configuration is read from when `NVC_CONFIG` is unset.
pub const DEFAULT_PATH: &str = "/etc/nvc/config.toml";

/// The environment variable naming another configuration file.
pub const CONFIG_ENV: &str = "NVC_CONFIG";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Where the driver is.
    pub driver: DriverConfig,
    /// The low-level runtime.
    pub runtime: RuntimeConfig,
    /// The prestart hook.
    pub hook: HookConfig,
    /// Logging.
    pub log: LogConfig,
    /// What containers may ask for.
    pub requests: RequestsConfig,
    /// The container's ld.so.cache. `[ldconfig]`, its old name, is still read: nvc
    /// never runs ldconfig, it writes the cache itself.
    #[serde(alias = "ldconfig")]
    pub ldcache: LdcacheConfig,
    /// GPU leases: which running container holds which GPU, shared or exclusively.
    pub leases: LeasesConfig,
}

/// `[driver]`: the roots discovery reads from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct DriverConfig {
    /// Where the driver's user-space files are.
    pub root: PathBuf,
    /// Device nodes are `<dev-root>/dev/nvidia*`.
    pub dev_root: PathBuf,
    /// GPU inventory is read from `<proc-root>/driver/nvidia`.
    pub proc_root: PathBuf,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            root: PathBuf::from("/"),
            dev_root: PathBuf::from("/"),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// `[runtime]`: the low-level runtime the shim execs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuntimeConfig {
    /// Candidates, first found wins: names on PATH or absolute paths.
    pub runtimes: Vec<String>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            runtimes: vec!["runc".into(), "crun".into()],
        }
    }
}

/// `[hook]`: the prestart hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct HookConfig {
    /// The hook binary injected into GPU containers' specs.
    pub path: PathBuf,
    /// Seconds after which the hook gives up with a message, so that nothing holds a
    /// container's start forever; from 1 to [`MAX_HOOK_TIMEOUT`].
    #[serde(deserialize_with = "hook_timeout")]
    pub timeout: u32,
    /// Where the hook keeps, per container, what it made in the rootfs, to take it away
    /// when the container ends: root's, on the host's `/run` (a reboot empties it).
    pub state_dir: PathBuf,
    /// Which containers' rootfs nvc leaves as it found them when they end (`nvc-hook
    /// poststop`).
    pub leave_no_trace: NoTrace,
}

/// `hook.leave-no-trace`: for which containers the poststop hook takes away what the
/// prestart hook made in the rootfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoTrace {
    /// Every GPU container.
    Always,
    /// Every GPU container but Kubernetes' (the CRI of containerd or CRI-O): the kubelet
    /// never starts one again nor commits it, and its rootfs is removed with it, so
    /// nothing could see what would be taken away.
    #[default]
    OutsideKubernetes,
    /// None: what nvc made stays in a stopped container's rootfs, as with the NVIDIA
    /// Container Toolkit.
    Never,
}

/// The default of `hook.timeout`, in seconds.
pub const DEFAULT_HOOK_TIMEOUT: u32 = 30;

/// The largest `hook.timeout`, in seconds: an hour.
pub const MAX_HOOK_TIMEOUT: u32 = 3600;

/// How much longer than `hook.timeout` the runtime waits before it kills the hook, in
/// seconds: room for the hook to end itself and say why.
pub const HOOK_KILL_GRACE: u32 = 2;

impl HookConfig {
    /// The timeout the runtime is given for the hook (the OCI hook's `timeout`): the
    /// hook's own deadline plus [`HOOK_KILL_GRACE`], so that the runtime kills only a
    /// hook its own deadline did not end.
    pub fn runtime_timeout(&self) -> u32 {
        self.timeout.saturating_add(HOOK_KILL_GRACE)
    }
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig {
            path: PathBuf::from("/usr/bin/nvc-hook"),
            timeout: DEFAULT_HOOK_TIMEOUT,
            state_dir: PathBuf::from("/run/nvc"),
            leave_no_trace: NoTrace::default(),
        }
    }
}

/// `hook.timeout`: seconds, from 1 to [`MAX_HOOK_TIMEOUT`]. The error is placed at the
/// value, so the message names the line and the key.
fn hook_timeout<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let seconds = u64::deserialize(deserializer)?;
    match u32::try_from(seconds) {
        Ok(s) if (1..=MAX_HOOK_TIMEOUT).contains(&s) => Ok(s),
        _ => Err(serde::de::Error::custom(format!(
            "hook.timeout is {seconds}, expected seconds from 1 to {MAX_HOOK_TIMEOUT}"
        ))),
    }
}

/// `[log]`: where and how much to log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LogConfig {
    /// The log file; empty turns logging off.
    pub file: PathBuf,
    /// The most detailed level written.
    pub level: LogLevel,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            file: PathBuf::from("/var/log/nvc.log"),
            level: LogLevel::Info,
        }
    }
}

/// A log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The default.
    Info,
    /// Every decision.
    Debug,
    /// Everything.
    Trace,
}

/// `[requests]`: what containers may ask for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RequestsConfig {
    /// Capabilities used when `NVIDIA_DRIVER_CAPABILITIES` is unset or empty.
    pub default_capabilities: Vec<String>,
    /// Capabilities containers may ask for.
    pub supported_capabilities: Vec<String>,
    /// Honour `NVIDIA_VISIBLE_DEVICES` (and the `cdi.k8s.io/` annotations) in
    /// unprivileged containers.
    pub accept_envvar_when_unprivileged: bool,
    /// Read the GPUs from bind mounts at `/var/run/nvidia-container-devices/<id>` (the
    /// Kubernetes device plugin's `volume-mounts` strategy), privileged or not; they win
    /// over `NVIDIA_VISIBLE_DEVICES`.
    pub accept_devices_as_volume_mounts: bool,
    /// Skip every `NVIDIA_REQUIRE_*` check.
    pub disable_require: bool,
    /// Every GPU container holds its GPUs exclusively, as if it had `NVC_EXCLUSIVE=1`;
    /// a container cannot opt out.
    pub exclusive: bool,
    /// Give no container a GPU the health record (`nvc health update`) reports broken:
    /// `all` leaves it out, a request naming it is refused.
    pub health_check: bool,
    /// The oldest health record, in seconds, that counts; an older one is ignored (0: no
    /// limit). A record of another boot or driver version is ignored too.
    pub health_max_age: u64,
}

/// The default of `requests.health-max-age`, in seconds: five runs of `nvc health watch`
/// at its default interval.
pub const DEFAULT_HEALTH_MAX_AGE: u64 = 300;

impl Default for RequestsConfig {
    fn default() -> Self {
        RequestsConfig {
            default_capabilities: vec!["utility".into(), "compute".into()],
            supported_capabilities: [
                "compat32", "compute", "display", "graphics", "ngx", "utility", "video",
            ]
            .map(String::from)
            .to_vec(),
            accept_envvar_when_unprivileged: true,
            accept_devices_as_volume_mounts: false,
            disable_require: false,
            exclusive: false,
            health_check: true,
            health_max_age: DEFAULT_HEALTH_MAX_AGE,
        }
    }
}

/// `[ldcache]`: the container's ld.so.cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LdcacheConfig {
    /// Update the container's ld.so.cache.
    pub update: bool,
}

impl Default for LdcacheConfig {
    fn default() -> Self {
        LdcacheConfig { update: true }
    }
}

/// `[leases]`: where the prestart hook records which container holds which GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LeasesConfig {
    /// The folder of the lease files, one per container, and their lock file. On a tmpfs
    /// (`/run`), so a reboot ends every lease.
    pub dir: PathBuf,
}

/// The default of `leases.dir`.
pub const DEFAULT_LEASES_DIR: &str = "/run/nvc/leases";

impl Default for LeasesConfig {
    fn default() -> Self {
        LeasesConfig {
            dir: PathBuf::from(DEFAULT_LEASES_DIR),
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not fit the schema.
    #[error(
        "invalid config file {path}: {location}{message} (see `nvc config default` for every key)"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// "line N, key `K`: " where known.
        location: String,
        /// What is wrong.
        message: String,
    },
}

impl Config {
    /// The file to read: `NVC_CONFIG` when set and not empty; else [`DEFAULT_PATH`], or,
    /// when that does not exist, the install's own file ([`Config::beside_executable`])
    /// if there is one.
    pub fn path_from_env() -> PathBuf {
        match std::env::var_os(CONFIG_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
            _ => Self::beside_executable().unwrap_or_else(|| PathBuf::from(DEFAULT_PATH)),
        }
    }

    /// `../etc/config.toml` from the running program's folder (`/opt/nvc/bin/nvc-runtime`
    /// reads `/opt/nvc/etc/config.toml`), when it exists.
    pub fn beside_executable() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let path = exe.parent()?.parent()?.join("etc/config.toml");
        path.is_file().then_some(path)
    }

    /// Reads the file [`Config::path_from_env`] names, stat-free when `NVC_CONFIG` is set
    /// or [`DEFAULT_PATH`] is there: `None` when there is none.
    fn read_from_env() -> Result<(Option<String>, PathBuf), ConfigError> {
        let named = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty());
        let path = named
            .clone()
            .map_or_else(|| PathBuf::from(DEFAULT_PATH), PathBuf::from);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok((Some(text), path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match named.is_none().then(Self::beside_executable).flatten() {
                    Some(own) => match std::fs::read_to_string(&own) {
                        Ok(text) => Ok((Some(text), own)),
                        Err(source) => Err(ConfigError::Read { path: own, source }),
                    },
                    None => Ok((None, path)),
                }
            }
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Loads the file named by `NVC_CONFIG`, or [`DEFAULT_PATH`], or the install's own
    /// ([`Config::path_from_env`]).
    pub fn load_from_env() -> Result<(Config, PathBuf), ConfigError> {
        match Self::read_from_env()? {
            (Some(text), path) => Self::parse(&text, &path).map(|c| (c, path)),
            (None, path) => Ok((Config::default(), path)),
        }
    }

    /// Loads `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// `[runtime]` and `[log]` of the file [`Config::load_from_env`] reads, and that
    /// path: what the runtime shim needs to pass on a container that asks for no GPU. A plain file is scanned for the two sections only; any other is parsed
    /// in full, with the errors of [`Config::load`]. A missing file gives the defaults.
    pub fn load_shim_keys_from_env() -> Result<(ShimKeys, PathBuf), ConfigError> {
        let (text, path) = match Self::read_from_env()? {
            (Some(text), path) => (text, path),
            (None, path) => return Ok((ShimKeys::default(), path)),
        };
        let keys = match shim_keys::scan(&text) {
            Some(keys) => keys,
            None => {
                let config = Self::parse(&text, &path)?;
                ShimKeys {
                    runtime: config.runtime,
                    log: config.log,
                }
            }
        };
        Ok((keys, path))
    }

    /// Parses the text of a configuration file; `path` is only used in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| locate(text, span.start))
                .unwrap_or_default();
            ConfigError::Parse {
                path: path.to_path_buf(),
                location,
                message: e.message().trim().to_string(),
            }
        })
    }
}

/// "line N, key `K`: " for the byte offset `at` of `text`.
fn locate(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let line_no = text[..at].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let mut section = "";
    for l in text.lines().take(line_no) {
        let t = l.trim();
        if t.starts_with('[') && t.ends_with(']') {
            section = t.trim_matches(|c| c == '[' || c == ']').trim();
        }
    }
    match line.split_once('=') {
        Some((key, _)) if !line.trim_start().starts_with('[') => {
            let key = key.trim();
            let full = if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            };
            format!("line {line_no}, key `{full}`: ")
        }
        _ => format!("line {line_no}: "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_file_is_the_defaults() {
        let parsed = Config::parse(DEFAULT_TOML, Path::new("config.toml")).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn missing_file_gives_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::load(&dir.path().join("absent.toml")).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn partial_file_keeps_other_defaults() {
        let c = Config::parse("[driver]\nroot = \"/run/nvidia/driver\"\n", Path::new("x")).unwrap();
        assert_eq!(c.driver.root, PathBuf::from("/run/nvidia/driver"));
        assert_eq!(c.driver.proc_root, PathBuf::from("/proc"));
        assert_eq!(c.hook, HookConfig::default());
    }

    fn parse_err(text: &str) -> String {
        Config::parse(text, Path::new("/etc/nvc/config.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = parse_err("[driver]\nroot = \"/\"\nroott = \"/x\"\n");
        assert!(e.contains("/etc/nvc/config.toml"), "{e}");
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("driver.roott"), "{e}");

        let e = parse_err("[ldcache]\nupdate = \"yes\"\n");
        assert!(e.contains("line 2, key `ldcache.update`"), "{e}");
        // The old name of the section is read as the new one; both at once is an error.
        let old: Config = toml::from_str("[ldconfig]\nupdate = false\n").unwrap();
        assert!(!old.ldcache.update);
        let both = parse_err("[ldconfig]\nupdate = false\n[ldcache]\nupdate = true\n");
        assert!(both.contains("duplicate"), "{both}");
        assert!(e.contains("invalid type"), "{e}");

        let e = parse_err("[log]\nlevel = \"loud\"\n");
        assert!(e.contains("key `log.level`"), "{e}");

        let e = parse_err("[driver\nroot = 1\n");
        assert!(e.contains("line 1"), "{e}");

        let e = parse_err("[gpu]\nx = 1\n");
        assert!(e.contains("unknown field `gpu`"), "{e}");
    }

    #[test]
    fn leave_no_trace_is_outside_kubernetes_unless_set() {
        let parse = |text: &str| Config::parse(text, Path::new("x")).map(|c| c.hook.leave_no_trace);
        assert_eq!(parse("").unwrap(), NoTrace::OutsideKubernetes);
        assert_eq!(
            parse("[hook]\nleave-no-trace = \"always\"\n").unwrap(),
            NoTrace::Always
        );
        assert_eq!(
            parse("[hook]\nleave-no-trace = \"never\"\n").unwrap(),
            NoTrace::Never
        );
        let e = parse_err("[hook]\nleave-no-trace = \"sometimes\"\n");
        assert!(
            e.contains("leave-no-trace") && e.contains("outside-kubernetes"),
            "{e}"
        );
    }

    #[test]
    fn hook_timeout_is_seconds_from_1_to_3600() {
        let parse = |text: &str| Config::parse(text, Path::new("x")).map(|c| c.hook.timeout);
        assert_eq!(parse("").unwrap(), 30);
        assert_eq!(parse("[hook]\npath = \"/x\"\n").unwrap(), 30);
        assert_eq!(parse("[hook]\ntimeout = 5\n").unwrap(), 5);
        assert_eq!(parse("[hook]\ntimeout = 1\n").unwrap(), 1);
        assert_eq!(parse("[hook]\ntimeout = 3600\n").unwrap(), 3600);
        assert_eq!(HookConfig::default().runtime_timeout(), 32);

        for bad in ["0", "4000", "3601", "-1", "99999999999"] {
            let e = parse_err(&format!("[hook]\npath = \"/x\"\ntimeout = {bad}\n"));
            assert!(e.contains("line 3, key `hook.timeout`"), "{bad}: {e}");
            if bad != "-1" {
                assert!(
                    e.contains(&format!(
                        "hook.timeout is {bad}, expected seconds from 1 to 3600"
                    )),
                    "{bad}: {e}"
                );
            }
        }
        let e = parse_err("[hook]\ntimeout = \"30s\"\n");
        assert!(e.contains("key `hook.timeout`"), "{e}");
    }

    #[test]
    fn unreadable_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // A directory cannot be read as a file.
        let e = Config::load(dir.path()).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    }
}
