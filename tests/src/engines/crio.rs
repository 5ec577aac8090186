//! A private CRI-O, driven over CRI ([`super::cri`]) as the kubelet drives it.
//!
//! No Debian suite packages CRI-O: its programs (`crio`, linked against Debian 12's
//! libseccomp and libsqlite3, and a static `pinns`) come from the archive
//! `crio-*.tar.xz` in the shared folder beside the repository's clone (`../shared/cri-o`,
//! or the folder `NVC_CRIO` names), unpacked once per machine into the test cache
//! (`NVC_TESTS_CACHE`, by default `/var/cache/nvc-tests`). conmon and runc are Debian
//! 12's; images are loaded into its storage with Debian's `skopeo`.
//!
//! CRI-O runs in mount and PID namespaces of its own, held by a small first process
//! rather than by CRI-O itself, so that it can be stopped and started again
//! ([`Crio::restart`]) while its pods' conmon and containers go on running, as under
//! systemd; a restarted CRI-O finds its pods again in its state. Dropping the harness stops
//! CRI-O, ends the namespaces (and with them every conmon and container) and removes the
//! pods' cgroups.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Outcome;

use super::archive::sha256_file;
use super::command::signal;
use super::cri::CriClient;
use super::daemon::{cgroup_name, isolated, remove_cgroups, Daemon};
use super::{
    engine_path, find_program, mkdirs, oci_archive, run_command, tests_cache, EngineError,
    ENGINE_TIMEOUT, START_TIMEOUT,
};

/// The main config file in a CRI-O's folder (`--config`).
pub const CRIO_CONF: &str = "crio.conf";

/// The drop-in folder in a CRI-O's folder (`--config-dir`): every file in it is read after
/// [`CRIO_CONF`], in name order, each setting overriding the one before it. Without it
/// CRI-O would read the host's `/etc/crio/crio.conf.d`.
pub const CRIO_CONF_D: &str = "crio.conf.d";

/// The `PATH` of conmon and the runtimes it runs (CRI-O's default `monitor_env`).
const MONITOR_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What CRI-O logs when a SIGHUP's reload is done.
const RELOADED: &str = "Configuration reload completed";

/// The first process of CRI-O's namespaces: it writes the file `$1` once the namespaces
/// are set up, waits, and exits on SIGTERM (a PID namespace's first process gets only
/// the signals it handles), which ends the namespaces and everything in them. conmon
/// processes whose CRI-O ended are its children then; `wait` reaps them.
///
/// `/` is made shared first, as systemd makes a node's: CRI-O refuses a pod's hostPath of
/// `/` from a private mount ("is mounted on / but it is not a shared or slave mount").
/// The namespace's mounts are private from the host's already (`unshare --propagation
/// private`), so they share with one another only: nothing reaches the host.
const HOLDER: &str = "mount --make-rshared / || exit 125; trap 'exit 0' TERM; : >\"$1\"; \
                      while :; do sleep 3600 & wait $!; done";

/// How a test sets CRI-O up (see [`Crio::config`]).
#[derive(Debug, Clone, Default)]
pub struct CrioSettings<'a> {
    /// `pause_image`: CRI-O looks it up for every pod, though a pod that shares no PID
    /// namespace runs no pause container (`drop_infra_ctr`). Load it with
    /// [`Crio::import`]: nothing is pulled. Empty: CRI-O's default, from a registry.
    pub pause_image: &'a str,
    /// OCI hooks folders (`hooks_dir`); none by default (CRI-O's default would be the
    /// host's).
    pub hooks_dirs: &'a [&'a Path],
    /// CDI spec folders (`cdi_spec_dirs`); none by default.
    pub cdi_spec_dirs: &'a [&'a Path],
    /// More of conmon's environment, which is also that of the runtimes it runs and of
    /// their hooks (`monitor_env` of the `runc` handler, after `PATH`): conmon does not
    /// inherit CRI-O's environment. `nvc runtime configure` copies it into the handler
    /// it adds.
    pub monitor_env: &'a [(&'a str, &'a OsStr)],
}

/// CRI-O's programs, from the shared archive, and the host's it runs.
#[derive(Debug, Clone)]
struct Programs {
    crio: PathBuf,
    pinns: PathBuf,
    conmon: PathBuf,
    runc: PathBuf,
    skopeo: PathBuf,
}

impl Programs {
    /// Every program CRI-O needs, or what is missing.
    fn find() -> Result<Programs, EngineError> {
        let conmon = find_program("conmon", "conmon")?;
        let runc = find_program("runc", "runc")?;
        let skopeo = find_program("skopeo", "skopeo")?;
        let (crio, pinns) = unpacked()?;
        Ok(Programs {
            crio,
            pinns,
            conmon,
            runc,
            skopeo,
        })
    }
}

/// The folder holding CRI-O's archive: `NVC_CRIO`, else `shared/cri-o` beside the
/// repository's clone.
fn shared_folder() -> PathBuf {
    std::env::var_os("NVC_CRIO")
        .filter(|d| !d.is_empty())
        .map_or_else(|| crate::repo_root().join("../shared/cri-o"), PathBuf::from)
}

/// `crio` and `pinns`, unpacked from the shared archive into the test cache once per
/// machine (a folder named by the archive's SHA-256, so a new archive is unpacked anew
/// and the old programs removed), under a lock that a second test program waits on.
fn unpacked() -> Result<(PathBuf, PathBuf), EngineError> {
    let folder = shared_folder();
    let archives: Vec<PathBuf> = std::fs::read_dir(&folder)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(OsStr::to_str)
                        .is_some_and(|n| n.starts_with("crio-") && n.ends_with(".tar.xz"))
                })
                .collect()
        })
        .unwrap_or_default();
    let archive = match archives.as_slice() {
        [one] => one.clone(),
        found => {
            let why = if !folder.is_dir() {
                format!("the folder {} does not exist", folder.display())
            } else if found.is_empty() {
                format!("{} holds no crio-*.tar.xz", folder.display())
            } else {
                format!(
                    "{} holds {} crio-*.tar.xz archives, expected one",
                    folder.display(),
                    found.len()
                )
            };
            return Err(EngineError::MissingShared {
                what: "the CRI-O archive (crio-*.tar.xz: crio and pinns)",
                why,
                shared: "cri-o",
                env: "NVC_CRIO",
            });
        }
    };
    let key: String = sha256_file(&archive)?.chars().take(16).collect();
    let cache = mkdirs(&tests_cache().join("cri-o"))?;
    let tree = cache.join(&key);
    let programs = (tree.join("crio"), tree.join("pinns"));
    let done = tree.join("unpacked");
    if done.exists() {
        return Ok(programs);
    }
    let lock_path = cache.join("lock");
    let lock = File::create(&lock_path).map_err(EngineError::io("create", &lock_path))?;
    lock.lock().map_err(EngineError::io("lock", &lock_path))?;
    if done.exists() {
        return Ok(programs);
    }
    // What an older archive left, and a half-done unpacking of this one.
    for entry in std::fs::read_dir(&cache)
        .map_err(EngineError::io("read", &cache))?
        .filter_map(Result::ok)
    {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let old = entry.path();
            std::fs::remove_dir_all(&old).map_err(EngineError::io("remove", &old))?;
        }
    }
    mkdirs(&tree)?;
    let mut tar = Command::new("tar");
    tar.arg("-C").arg(&tree).arg("-xJf").arg(&archive);
    EngineError::check(
        "unpack the CRI-O archive",
        run_command(&mut tar, &cache, ENGINE_TIMEOUT),
    )?;
    for program in [&programs.0, &programs.1] {
        if !program.is_file() {
            return Err(EngineError::MissingShared {
                what: "a program of the CRI-O archive",
                why: format!("{} has no {}", archive.display(), program.display()),
                shared: "cri-o",
                env: "NVC_CRIO",
            });
        }
    }
    std::fs::write(&done, archive.to_string_lossy().as_bytes())
        .map_err(EngineError::io("write", &done))?;
    Ok(programs)
}

/// A TOML basic string: a JSON string is one (`"`, `\`, control characters escaped).
fn toml_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A TOML array of basic strings.
fn toml_paths(paths: &[&Path]) -> String {
    let items: Vec<String> = paths
        .iter()
        .map(|p| toml_string(&p.to_string_lossy()))
        .collect();
    format!("[{}]", items.join(", "))
}

/// How `crio` is started, and started again.
#[derive(Debug)]
struct Launch {
    crio: PathBuf,
    dir: PathBuf,
    config: PathBuf,
    config_dir: PathBuf,
    socket: PathBuf,
    /// Added to its environment.
    env: Vec<(OsString, OsString)>,
}

impl Launch {
    /// Starts `crio` in the namespaces whose first process is `namespaces` (`nsenter`
    /// into them), its output added to `crio.log` or replacing it, and waits until it
    /// answers CRI's Version.
    fn start(&self, namespaces: &Daemon, append: bool) -> Result<Daemon, EngineError> {
        let holder = namespaces
            .namespaced_pid()
            .ok_or_else(|| EngineError::NotReady {
                what: "CRI-O's namespaces",
                why: "their first process has gone".into(),
                log: namespaces.log().to_path_buf(),
                tail: namespaces.log_tail(20),
            })?;
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={holder}"))
            .args(["--mount", "--pid"])
            .arg(format!("--wd={}", self.dir.display()))
            .arg("--")
            .arg(&self.crio)
            .arg("--config")
            .arg(&self.config)
            .arg("--config-dir")
            .arg(&self.config_dir)
            .env("PATH", engine_path())
            .env("TMPDIR", self.dir.join("tmp"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .env(
                "CONTAINERS_REGISTRIES_CONF",
                self.dir.join("registries.conf"),
            );
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let log = self.dir.join("crio.log");
        let mut daemon = if append {
            Daemon::spawn_appending("crio", command, &log)?
        } else {
            Daemon::spawn("crio", command, &log)?
        };
        daemon.wait_ready(|| {
            self.socket.exists()
                && CriClient::connect(&self.socket)
                    .and_then(|c| c.version())
                    .is_ok()
        })?;
        Ok(daemon)
    }
}

/// A private CRI-O: its storage (vfs), state, socket, logs, runc state and every other
/// path of its config under its folder; cgroupfs, its pods' cgroups under
/// [`Crio::cgroup_parent`] when the sandbox names it; no NRI, no metrics, no CNI
/// configuration (pods use the node's network).
#[derive(Debug)]
pub struct Crio {
    /// Its folder.
    pub dir: PathBuf,
    /// Its CRI socket (`listen`).
    pub socket: PathBuf,
    /// The main config file, [`CRIO_CONF`] in its folder.
    pub config: PathBuf,
    /// The drop-in folder, [`CRIO_CONF_D`] in its folder.
    pub config_dir: PathBuf,
    /// The cgroup (cgroupfs, relative to each hierarchy's root) for its pods: a sandbox's
    /// `cgroup_parent` is `/<cgroup_parent>`. Removed with the harness.
    pub cgroup_parent: String,
    programs: Programs,
    launch: Launch,
    /// The first process of its namespaces.
    namespaces: Daemon,
    /// `nsenter` running `crio` in them.
    daemon: Daemon,
}

impl Crio {
    /// A CRI-O config (for [`CRIO_CONF`]) with every path under `dir`, runc as its
    /// default handler (`runc`, with Debian's conmon), the storage, hooks, CDI and image
    /// settings of `settings`, and:
    /// - `namespaced_auth_dir`, `signature_policy` (accepting anything) and
    ///   `signature_policy_dir` in `dir`: CRI-O would make `/etc/crio/auth` and read the
    ///   host's policy otherwise; with a policy set it wants `user_specified_image` in
    ///   CreateContainer, which `CriClient` sends;
    /// - `irqbalance_config_restore_file = "disable"`: CRI-O would write into
    ///   `/etc/sysconfig`;
    /// - no NRI (its socket would be in `/var/run/nri`).
    pub fn config(dir: &Path, settings: &CrioSettings<'_>) -> Result<String, EngineError> {
        let programs = Programs::find()?;
        let dir = std::path::absolute(dir).map_err(EngineError::io("make absolute", dir))?;
        Ok(Crio::config_with(&dir, &programs, settings))
    }

    fn config_with(dir: &Path, programs: &Programs, settings: &CrioSettings<'_>) -> String {
        let d = |sub: &str| toml_string(&dir.join(sub).to_string_lossy());
        let p = |path: &Path| toml_string(&path.to_string_lossy());
        let mut env = vec![toml_string(&format!("PATH={MONITOR_PATH}"))];
        env.extend(
            settings
                .monitor_env
                .iter()
                .map(|(key, value)| toml_string(&format!("{key}={}", value.to_string_lossy()))),
        );
        format!(
            "# CRI-O for a test: every path under {dir}.\n\
             [crio]\n\
             root = {root}\n\
             runroot = {runroot}\n\
             storage_driver = \"vfs\"\n\
             log_dir = {logs}\n\
             version_file = {version}\n\
             version_file_persist = {version_persist}\n\
             clean_shutdown_file = {clean}\n\n\
             [crio.api]\n\
             listen = {socket}\n\n\
             [crio.runtime]\n\
             default_runtime = \"runc\"\n\
             cgroup_manager = \"cgroupfs\"\n\
             decryption_keys_path = {keys}\n\
             container_exits_dir = {exits}\n\
             container_attach_socket_dir = {attach}\n\
             namespaces_dir = {ns}\n\
             pinns_path = {pinns}\n\
             hooks_dir = {hooks}\n\
             cdi_spec_dirs = {cdi}\n\
             default_mounts_file = {mounts}\n\
             irqbalance_config_file = {irqbalance}\n\
             irqbalance_config_restore_file = \"disable\"\n\n\
             [crio.runtime.runtimes.runc]\n\
             runtime_path = {runc}\n\
             runtime_type = \"oci\"\n\
             runtime_root = {runc_root}\n\
             monitor_path = {conmon}\n\
             monitor_cgroup = \"pod\"\n\
             monitor_env = [{env}]\n\n\
             [crio.image]\n\
             {pause}\
             signature_policy = {policy}\n\
             signature_policy_dir = {policies}\n\
             namespaced_auth_dir = {auth}\n\n\
             [crio.network]\n\
             network_dir = {cni_conf}\n\
             plugin_dirs = [{cni_bin}]\n\n\
             [crio.nri]\n\
             enable_nri = false\n",
            dir = dir.display(),
            root = d("root"),
            runroot = d("runroot"),
            logs = d("logs"),
            version = d("run/version"),
            version_persist = d("version"),
            clean = d("clean.shutdown"),
            socket = d("crio.sock"),
            keys = d("keys"),
            exits = d("exits"),
            attach = d("attach"),
            ns = d("ns"),
            pinns = p(&programs.pinns),
            hooks = toml_paths(settings.hooks_dirs),
            cdi = toml_paths(settings.cdi_spec_dirs),
            mounts = d("mounts.conf"),
            irqbalance = d("irqbalance"),
            runc = p(&programs.runc),
            runc_root = d("runc"),
            conmon = p(&programs.conmon),
            env = env.join(", "),
            pause = if settings.pause_image.is_empty() {
                String::new()
            } else {
                format!("pause_image = {}\n", toml_string(settings.pause_image))
            },
            policy = d("policy.json"),
            policies = d("policies"),
            auth = d("auth"),
            cni_conf = d("cni/net.d"),
            cni_bin = d("cni/bin"),
        )
    }

    /// Starts CRI-O with [`CRIO_CONF`] and [`CRIO_CONF_D`] of `dir` (the config written
    /// from [`Crio::config`] with default settings unless there is one: a test may write
    /// its own, which must keep the paths under `dir`, and drop-ins), and `env` added to
    /// its environment (not to conmon's: see [`CrioSettings::monitor_env`]), and waits
    /// until it answers CRI's Version.
    pub fn start(dir: &Path, env: &[(&str, &OsStr)]) -> Result<Crio, EngineError> {
        Crio::start_with(dir, &dir.join(CRIO_CONF), &dir.join(CRIO_CONF_D), env)
    }

    /// [`Crio::start`] with the main config file `config` and the drop-in folder
    /// `config_dir` elsewhere than in `dir` (a node's own `/etc/crio`, which a node
    /// installer rewrites); their paths must still be under `dir`, which holds the rest.
    pub fn start_with(
        dir: &Path,
        config: &Path,
        config_dir: &Path,
        env: &[(&str, &OsStr)],
    ) -> Result<Crio, EngineError> {
        let programs = Programs::find()?;
        let dir = mkdirs(dir)?;
        for sub in [
            "root",
            "runroot",
            "run",
            "logs",
            "keys",
            "exits",
            "attach",
            "ns",
            "runc",
            "policies",
            "auth",
            "cni/net.d",
            "cni/bin",
            "tmp",
            "io",
            "registries.d",
            CRIO_CONF_D,
        ] {
            mkdirs(&dir.join(sub))?;
        }
        let config = config.to_path_buf();
        if !config.exists() {
            let text = Crio::config_with(&dir, &programs, &CrioSettings::default());
            std::fs::write(&config, text).map_err(EngineError::io("write", &config))?;
        }
        let files = [
            ("mounts.conf", String::new()),
            ("registries.conf", String::new()),
            (
                "policy.json",
                r#"{"default":[{"type":"insecureAcceptAnything"}]}"#.to_string(),
            ),
            (
                "storage.conf",
                format!(
                    "[storage]\ndriver = \"vfs\"\ngraphroot = {}\nrunroot = {}\n",
                    toml_string(&dir.join("root").to_string_lossy()),
                    toml_string(&dir.join("runroot").to_string_lossy())
                ),
            ),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            if !path.exists() {
                std::fs::write(&path, text).map_err(EngineError::io("write", &path))?;
            }
        }

        let ready = dir.join("namespaces.ready");
        let _ = std::fs::remove_file(&ready);
        let mut holder = isolated(Path::new("/bin/sh"));
        holder.args(["-c", HOLDER, "sh"]).arg(&ready);
        let mut namespaces =
            Daemon::spawn("CRI-O's namespaces", holder, &dir.join("namespaces.log"))?;
        namespaces.wait_ready(|| ready.exists())?;

        let launch = Launch {
            crio: programs.crio.clone(),
            socket: dir.join("crio.sock"),
            config_dir: config_dir.to_path_buf(),
            config,
            env: env
                .iter()
                .map(|(k, v)| (OsString::from(k), v.to_os_string()))
                .collect(),
            dir,
        };
        let daemon = launch.start(&namespaces, false)?;
        Ok(Crio {
            dir: launch.dir.clone(),
            socket: launch.socket.clone(),
            config: launch.config.clone(),
            config_dir: launch.config_dir.clone(),
            cgroup_parent: cgroup_name("crio"),
            programs,
            launch,
            namespaces,
            daemon,
        })
    }

    /// Loads `tarball` (a rootfs tar) into CRI-O's storage as image `name` (fully
    /// qualified, e.g. `localhost/nvc-test:latest`), running `sh`: an OCI archive made
    /// with [`oci_archive`], copied by `skopeo` (in namespaces of its own: it writes a
    /// cache in `/var/lib/containers`).
    pub fn import(&self, tarball: &Path, name: &str) -> Result<(), EngineError> {
        let archive = self.dir.join("image.oci.tar");
        oci_archive(tarball, name, &archive)?;
        self.load_archive(&archive, name)
    }

    /// Loads the OCI archive `archive` (its one image) into CRI-O's storage as image
    /// `name`, by `skopeo` as [`Crio::import`] does.
    pub fn load_archive(&self, archive: &Path, name: &str) -> Result<(), EngineError> {
        let storage = format!(
            "containers-storage:[vfs@{}+{}]{name}",
            self.dir.join("root").display(),
            self.dir.join("runroot").display()
        );
        let mut command = isolated(&self.programs.skopeo);
        command
            .arg("--policy")
            .arg(self.dir.join("policy.json"))
            .arg("--registries.d")
            .arg(self.dir.join("registries.d"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .arg("copy")
            .arg(format!("oci-archive:{}", archive.display()))
            .arg(storage)
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .env(
                "CONTAINERS_REGISTRIES_CONF",
                self.dir.join("registries.conf"),
            );
        let out = run_command(&mut command, &self.dir.join("io"), ENGINE_TIMEOUT);
        EngineError::check("load an image into CRI-O's storage (skopeo)", out).map(drop)
    }

    /// The host pid of `crio` (`None` once it has gone).
    pub fn pid(&self) -> Option<u32> {
        self.daemon.namespaced_pid()
    }

    /// The host pid of the first process of CRI-O's PID and mount namespaces: `nsenter
    /// --target` it to run something where CRI-O runs (a pod with the host's PID
    /// namespace shares this one).
    pub fn namespaces_pid(&self) -> Option<u32> {
        self.namespaces.namespaced_pid()
    }

    /// How many SIGHUP reloads CRI-O has completed, by its log (restarts included).
    pub fn reloads(&self) -> usize {
        crate::harness::read_lossy(self.daemon.log())
            .matches(RELOADED)
            .count()
    }

    /// Waits until CRI-O has completed `count` reloads ([`Crio::reloads`]), for up to
    /// [`START_TIMEOUT`]: after a SIGHUP sent from elsewhere (a node installer's pod).
    pub fn wait_reloads(&self, count: usize) -> Result<(), EngineError> {
        let deadline = Instant::now() + START_TIMEOUT;
        while self.reloads() < count {
            if Instant::now() >= deadline {
                return Err(EngineError::NotReady {
                    what: "CRI-O's configuration reload",
                    why: format!(
                        "{count} \"{RELOADED}\" expected in its log within {}s, {} found",
                        START_TIMEOUT.as_secs(),
                        self.reloads()
                    ),
                    log: self.daemon.log().to_path_buf(),
                    tail: self.log_tail(30),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Sends CRI-O SIGHUP (what `systemctl reload crio` does) and waits until it logs
    /// that the reload completed.
    pub fn sighup(&self) -> Result<(), EngineError> {
        let before = self.reloads();
        let pid = self.pid().ok_or_else(|| EngineError::NotReady {
            what: "crio",
            why: "it is not running, so it cannot take SIGHUP".into(),
            log: self.daemon.log().to_path_buf(),
            tail: self.log_tail(30),
        })?;
        signal(&pid.to_string(), "HUP");
        self.wait_reloads(before + 1)
    }

    /// Stops CRI-O (SIGTERM) and starts it again with the same config, drop-ins, state and
    /// environment, as `systemctl restart crio` does: its pods' conmon and containers go
    /// on running. Waits until it answers; a CRI client connected before must connect
    /// again.
    pub fn restart(&mut self) -> Result<(), EngineError> {
        self.daemon.stop();
        self.daemon = self.launch.start(&self.namespaces, true)?;
        Ok(())
    }

    /// `crio status config` through its socket: the configuration the running CRI-O
    /// reports.
    pub fn status_config(&self) -> Outcome {
        let mut command = Command::new(&self.programs.crio);
        command
            .arg("--config")
            .arg(&self.config)
            .arg("--config-dir")
            .arg(&self.config_dir)
            .arg("status")
            .arg("--socket")
            .arg(&self.socket)
            .arg("config");
        run_command(&mut command, &self.dir.join("io"), ENGINE_TIMEOUT)
    }

    /// The last `lines` lines of CRI-O's log, for messages.
    pub fn log_tail(&self, lines: usize) -> String {
        self.daemon.log_tail(lines)
    }
}

impl Drop for Crio {
    fn drop(&mut self) {
        self.daemon.stop();
        // Ends the namespaces, and every conmon and container in them.
        self.namespaces.stop();
        // The namespace's last processes are killed as its first ends, not awaited.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            remove_cgroups(&self.cgroup_parent);
            let left = std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .any(|h| h.path().join(&self.cgroup_parent).exists());
            if !left || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path in the config is in the test's folder, or a program or folder the
    /// test named: nothing of the host's `/etc`, `/var` or `/run` is read or written.
    #[test]
    fn every_path_of_the_config_is_the_tests() {
        let dir = Path::new("/tmp/nvc-crio-test");
        let programs = Programs {
            crio: PathBuf::from("/cache/crio"),
            pinns: PathBuf::from("/cache/pinns"),
            conmon: PathBuf::from("/usr/bin/conmon"),
            runc: PathBuf::from("/usr/sbin/runc"),
            skopeo: PathBuf::from("/usr/bin/skopeo"),
        };
        let hooks = Path::new("/tmp/hooks \"quoted\"");
        let cdi = Path::new("/tmp/cdi");
        let config = Crio::config_with(
            dir,
            &programs,
            &CrioSettings {
                pause_image: "localhost/pause:latest",
                hooks_dirs: &[hooks],
                cdi_spec_dirs: &[cdi],
                monitor_env: &[("NVC_CONFIG", OsStr::new("/tmp/nvc/config.toml"))],
            },
        );
        let doc: toml_edit::DocumentMut = config.parse().unwrap();
        let mut strings = Vec::new();
        collect_strings(doc.as_item(), &mut strings);
        let allowed = [
            "/cache/pinns",
            "/usr/bin/conmon",
            "/usr/sbin/runc",
            "/tmp/hooks \"quoted\"",
            "/tmp/cdi",
        ];
        let paths: Vec<&String> = strings.iter().filter(|s| s.starts_with('/')).collect();
        assert!(paths.len() > 20, "{config}");
        for path in paths {
            assert!(
                path.starts_with("/tmp/nvc-crio-test/") || allowed.contains(&path.as_str()),
                "{path} is not the test's:\n{config}"
            );
        }
        for want in [
            "localhost/pause:latest",
            "NVC_CONFIG=/tmp/nvc/config.toml",
            "cgroupfs",
            "vfs",
        ] {
            assert!(strings.iter().any(|s| s == want), "no {want}:\n{config}");
        }
        assert_eq!(
            doc["crio"]["nri"]["enable_nri"].as_bool(),
            Some(false),
            "{config}"
        );

        let default = Crio::config_with(dir, &programs, &CrioSettings::default());
        let doc: toml_edit::DocumentMut = default.parse().unwrap();
        assert!(
            doc["crio"]["image"].get("pause_image").is_none(),
            "{default}"
        );
        assert_eq!(
            doc["crio"]["runtime"]["hooks_dir"]
                .as_array()
                .map(|a| a.len()),
            Some(0),
            "no hooks folder, not CRI-O's default ones:\n{default}"
        );
    }

    fn collect_strings(item: &toml_edit::Item, out: &mut Vec<String>) {
        match item {
            toml_edit::Item::Table(t) => t.iter().for_each(|(_, i)| collect_strings(i, out)),
            toml_edit::Item::Value(v) => collect_value(v, out),
            _ => {}
        }
    }

    fn collect_value(value: &toml_edit::Value, out: &mut Vec<String>) {
        match value {
            toml_edit::Value::String(s) => out.push(s.value().clone()),
            toml_edit::Value::Array(a) => a.iter().for_each(|v| collect_value(v, out)),
            _ => {}
        }
    }
}
