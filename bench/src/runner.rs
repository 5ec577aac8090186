//! Running one configuration once: a whole container, the shim alone, or the hook alone,
//! with everything it needs made fresh outside the timed region.

use std::cell::Cell;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvc_config::{Config, DriverConfig};
use nvc_tests::Bundle;
use serde_json::json;

use crate::error::BenchError;
use crate::large_image::{run_fed, run_quiet, stderr_details};
use crate::measure::{self, Measured};
use crate::stats::Samples;

/// The hook's whole environment besides `NVC_CONFIG`, as the shim writes it into the spec.
const HOOK_PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the container runs.
const COMMAND: &str = "/bin/true";

/// The programs that are timed.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `nvc-runtime`.
    pub shim: PathBuf,
    /// `nvc-hook`.
    pub hook: PathBuf,
    /// The runc that plain runs use and the shim execs.
    pub runc: PathBuf,
    /// `nvc-floor`: the least a GPU start must do, as shim and hook
    /// ([`crate::floor_plan`]).
    pub floor: PathBuf,
    /// The runtime the shim execs when it is timed alone: does nothing.
    pub noop: PathBuf,
    /// Another build's shim and hook to time against (`--baseline`).
    pub baseline: Option<Build>,
    /// The `nvc` CLI beside nvc-bench, for `nvc cdi generate` and Podman's hooks.d file.
    pub nvc: Option<PathBuf>,
    /// NVIDIA's Container Toolkit to time beside nvc (`--nvidia-toolkit`).
    pub toolkit: Option<crate::toolkit::Toolkit>,
    /// The podman to time nvc's CDI spec and hooks.d file through (`--podman`).
    pub podman: Option<PathBuf>,
}

/// A build of nvc's two programs.
#[derive(Debug, Clone)]
pub struct Build {
    /// Its `nvc-runtime`.
    pub shim: PathBuf,
    /// Its `nvc-hook`.
    pub hook: PathBuf,
}

/// The two nvc configurations of one driver: the shim execs runc, or the no-op.
#[derive(Debug, Clone)]
pub struct Configs {
    /// `[runtime] runtimes = [runc]`.
    pub runc: PathBuf,
    /// `[runtime] runtimes = [no-op]`: the shim alone, and preparing the hook's bundles.
    pub noop: PathBuf,
}

/// Through which program a container is run.
#[derive(Debug, Clone)]
pub enum Runtime {
    /// Plain runc.
    Runc,
    /// `nvc-runtime` with `NVC_CONFIG` set to this file.
    Nvc(PathBuf),
    /// `nvc-floor` with this plan ([`crate::floor_plan`]): runc with only the work a GPU
    /// start cannot do without.
    Floor(PathBuf),
    /// Another build's `nvc-runtime` (`shim`) with `NVC_CONFIG` set to `config`.
    Shim {
        /// The shim.
        shim: PathBuf,
        /// Its configuration.
        config: PathBuf,
    },
    /// NVIDIA's `nvidia-container-runtime` with its configuration `config`
    /// ([`crate::toolkit`]), which names the mode and the runc it execs.
    Toolkit {
        /// `nvidia-container-runtime`.
        runtime: PathBuf,
        /// Its configuration (`NVIDIA_CTK_CONFIG_FILE_PATH`).
        config: PathBuf,
    },
}

/// How each container of a parallel batch is run ([`Bench::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `<runtime> run`: one command from create to delete.
    Run,
    /// `<runtime> create`, `<runtime> start`, the container's exit, `<runtime> delete`:
    /// the steps an engine drives (containerd's shim, Podman's conmon). The only way
    /// NVIDIA's runtime gives a container its GPUs: it edits the spec on `create` alone,
    /// and passes `run` to runc untouched.
    Engine,
}

/// A container image: a rootfs copied for every run.
#[derive(Debug, Clone)]
pub struct Image {
    /// The rootfs, never changed by a run.
    pub path: PathBuf,
    /// Copy with hard links (`cp -al`) instead of copying bytes and inodes: for the large
    /// image, whose thousands of files would take seconds to copy where making an inode is
    /// slow. Safe because neither runc nor the hook writes a file of the image in place
    /// (the hook replaces ld.so.cache by rename; [`crate::large_image`] checks it).
    pub hard_links: bool,
}

impl Image {
    /// An image copied byte by byte.
    pub fn copied(path: &Path) -> Image {
        Image {
            path: path.to_path_buf(),
            hard_links: false,
        }
    }

    /// Makes `dest` a fresh copy of the image, and flushes its file system: an engine
    /// unpacked the image long before, so no journal commit of the copy may land in the
    /// timed region (on a journalling ext4 it delayed runc by 20 ms on the large image).
    pub fn copy_to(&self, dest: &Path) -> Result<(), BenchError> {
        let mut cp = Command::new("cp");
        cp.arg(if self.hard_links { "-al" } else { "-a" })
            .arg(&self.path)
            .arg(dest);
        run_quiet(&mut cp)?;
        let mut sync = Command::new("sync");
        sync.arg("-f").arg(dest);
        run_quiet(&mut sync)
    }
}

/// One configuration that is timed.
#[derive(Debug, Clone)]
pub enum Case {
    /// `<runtime> --root S run --bundle B ID` of [`COMMAND`], from a fresh copy of `rootfs`.
    Container {
        /// runc or the shim.
        runtime: Runtime,
        /// The image, copied for every run.
        rootfs: Image,
        /// Added to `process.env`.
        env: Vec<String>,
    },
    /// `<runtime> --root S create --bundle B ID`, then `<runtime> --root S start ID`, of
    /// [`COMMAND`] from a fresh copy of `rootfs`: the time to the container's first
    /// instruction, the two commands' times added; the container is deleted afterwards,
    /// untimed (with its `poststop` hooks).
    Started {
        /// runc or the shim.
        runtime: Runtime,
        /// The image, copied for every run.
        rootfs: Image,
        /// Added to `process.env`.
        env: Vec<String>,
    },
    /// `<program> --root S create --bundle B ID` where the shim (with `config`, whose
    /// runtime is the no-op) or the no-op itself (`None`: the floor) is the program; the
    /// pristine config.json is restored before every run.
    Shim {
        /// The shim's configuration; `None` runs the no-op directly.
        config: Option<PathBuf>,
        /// `nvc-floor` as the runtime instead, with this plan and the no-op as its runc
        /// (the floor of the shim's own work).
        floor_plan: Option<PathBuf>,
        /// The bundle.
        bundle: PathBuf,
        /// Its config.json before the shim edited it.
        pristine: Vec<u8>,
    },
    /// `program ARGS...` with `env` added to nvc-bench's environment (stdout to
    /// /dev/null): a command that is not a container's runtime, such as `nvc cdi generate`
    /// or `podman run`.
    Command {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<OsString>,
        /// Added to its environment.
        env: Vec<(String, OsString)>,
    },
    /// `nvc-hook prestart` on a fresh copy of `rootfs` whose spec the shim edited, in the
    /// mount namespace of a helper process, as runc would run it.
    Hook {
        /// The hook run: this build's when `None`.
        program: Option<PathBuf>,
        /// The program is `nvc-floor` with this plan (and has no poststop hook).
        floor_plan: Option<PathBuf>,
        /// The configuration of the hook (and of the shim that prepares its spec).
        config: PathBuf,
        /// The image, copied for every run.
        rootfs: Image,
        /// Added to `process.env`.
        env: Vec<String>,
    },
}

/// Where runs happen: the working directory (images, rootfs copies), the directory of
/// bundles and runc's state, the programs.
pub struct Bench {
    /// The working directory: images and their copies.
    pub work: PathBuf,
    /// The programs.
    pub programs: Programs,
    /// Bundles (config.json) and runc's `--root`: on tmpfs where there is one, as
    /// containerd (`/run/containerd`) and Docker (`/run/docker/runtime-runc`) keep them.
    runtime_dir: tempfile::TempDir,
    state: PathBuf,
    log: PathBuf,
    next: Cell<u64>,
    /// nvc's log at debug level (`--debug-log`), in every configuration written.
    pub debug_log: bool,
}

impl Bench {
    /// A bench working in `work` (created), its bundles and runc state in a new directory
    /// under `runtime_parent`.
    pub fn new(
        work: &Path,
        runtime_parent: &Path,
        programs: Programs,
    ) -> Result<Bench, BenchError> {
        let runtime_dir = tempfile::Builder::new()
            .prefix("nvc-bench.")
            .tempdir_in(runtime_parent)
            .map_err(BenchError::io("create a directory in", runtime_parent))?;
        let state = runtime_dir.path().join("state");
        std::fs::create_dir_all(&state).map_err(BenchError::io("create directory", &state))?;
        Ok(Bench {
            work: work.to_path_buf(),
            programs,
            runtime_dir,
            state,
            log: work.join("nvc.log"),
            next: Cell::new(0),
            debug_log: false,
        })
    }

    /// Where bundles and runc's state are.
    pub fn runtime_dir(&self) -> &Path {
        self.runtime_dir.path()
    }

    /// Writes the two nvc configurations for `driver` into `<work>/<name>.{runc,noop}.toml`:
    /// the defaults (info log level, ld.so.cache updated) with the driver roots, the
    /// workspace's hook, and a log file in the working directory.
    pub fn configs(&self, name: &str, driver: &DriverConfig) -> Result<Configs, BenchError> {
        let write = |suffix: &str, runtime: &Path| -> Result<PathBuf, BenchError> {
            let mut config = Config {
                driver: driver.clone(),
                ..Config::default()
            };
            config.runtime.runtimes = vec![runtime.display().to_string()];
            config.hook.path = self.programs.hook.clone();
            // The bench's own state and leases, on the same tmpfs as runc's: a run that
            // stops half-way leaves nothing in the host's /run/nvc.
            config.hook.state_dir = self.runtime_dir().join("nvc");
            config.leases.dir = self.runtime_dir().join("nvc/leases");
            config.log.file = self.log.clone();
            if self.debug_log {
                config.log.level = nvc_config::LogLevel::Debug;
            }
            let path = self.work.join(format!("{name}.{suffix}.toml"));
            let text = toml::to_string(&config).map_err(|source| BenchError::Config {
                path: path.clone(),
                source,
            })?;
            std::fs::write(&path, text).map_err(BenchError::io("write", &path))?;
            Ok(path)
        };
        Ok(Configs {
            runc: write("runc", &self.programs.runc)?,
            noop: write("noop", &self.programs.noop)?,
        })
    }

    /// Configurations of `driver` for `hook` with only the keys every build of nvc reads
    /// (driver roots, runtime, hook path, log), so that an older build takes them too:
    /// the shim execs runc, or the no-op.
    pub fn plain_configs(
        &self,
        name: &str,
        driver: &DriverConfig,
        hook: &Path,
    ) -> Result<Configs, BenchError> {
        let quote = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
        let write = |suffix: &str, runtime: &Path| -> Result<PathBuf, BenchError> {
            let text = format!(
                "[driver]\nroot = {}\ndev-root = {}\nproc-root = {}\n\n[runtime]\nruntimes = [{}]\n\n\
                 [hook]\npath = {}\n\n[log]\nfile = {}\nlevel = \"{}\"\n",
                quote(&driver.root),
                quote(&driver.dev_root),
                quote(&driver.proc_root),
                quote(runtime),
                quote(hook),
                quote(&self.log),
                if self.debug_log { "debug" } else { "info" },
            );
            let path = self.work.join(format!("{name}.{suffix}.toml"));
            std::fs::write(&path, text).map_err(BenchError::io("write", &path))?;
            Ok(path)
        };
        Ok(Configs {
            runc: write("runc", &self.programs.runc)?,
            noop: write("noop", &self.programs.noop)?,
        })
    }

    /// A [`Case::Shim`]: makes its bundle (with an empty rootfs: the shim never looks in
    /// it) asking for `env`.
    pub fn shim_case(&self, config: Option<&Path>, env: &[&str]) -> Result<Case, BenchError> {
        self.runtime_case(config, None, env)
    }

    /// A [`Case::Shim`] of `nvc-floor` as the runtime, with `plan` and the no-op as its
    /// runc.
    pub fn floor_shim_case(&self, plan: &Path, env: &[&str]) -> Result<Case, BenchError> {
        self.runtime_case(None, Some(plan), env)
    }

    fn runtime_case(
        &self,
        config: Option<&Path>,
        floor_plan: Option<&Path>,
        env: &[&str],
    ) -> Result<Case, BenchError> {
        let (dir, rootfs) = self.fresh_run("shim")?;
        std::fs::create_dir(&rootfs).map_err(BenchError::io("create directory", &rootfs))?;
        let bundle = Bundle::new(&dir, &rootfs)?
            .args(&[COMMAND])
            .env(env)
            .write()?;
        let path = bundle.config_path();
        let pristine = std::fs::read(&path).map_err(BenchError::io("read", &path))?;
        Ok(Case::Shim {
            config: config.map(Path::to_path_buf),
            floor_plan: floor_plan.map(Path::to_path_buf),
            bundle: dir,
            pristine,
        })
    }

    /// Runs each case `warmup + runs` times, once per round, in an order shuffled anew
    /// every round (a fixed seed: the same order for the same cases on every machine), so
    /// that each case follows each other about as often: what one run leaves behind (the
    /// kernel tearing down a GPU container's mounts after its delete) is spread over all
    /// cases rather than always landing on the same next one. Keeps the last `runs` of
    /// each. Progress goes to stderr.
    pub fn alternate(
        &self,
        what: &str,
        cases: &[Case],
        runs: usize,
        warmup: usize,
    ) -> Result<Vec<Samples>, BenchError> {
        let mut samples = vec![Samples::default(); cases.len()];
        let rounds = warmup + runs;
        let started = Instant::now();
        let mut order: Vec<usize> = (0..cases.len()).collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..rounds {
            eprint!("\r{what}: round {}/{rounds} ", round + 1);
            shuffle(&mut order, &mut seed);
            for &i in &order {
                let m = self.run_once(&cases[i])?;
                if round >= warmup {
                    samples[i].push(m.time, m.max_rss_kib, m.cpu);
                }
            }
        }
        eprintln!("({:.1} s)", started.elapsed().as_secs_f64());
        Ok(samples)
    }

    /// Runs `case` once.
    pub fn run_once(&self, case: &Case) -> Result<Measured, BenchError> {
        match case {
            Case::Container {
                runtime,
                rootfs,
                env,
            } => self.container(runtime, rootfs, env),
            Case::Started {
                runtime,
                rootfs,
                env,
            } => self.started(runtime, rootfs, env),
            Case::Shim {
                config,
                floor_plan,
                bundle,
                pristine,
            } => self.shim(config.as_deref(), floor_plan.as_deref(), bundle, pristine),
            Case::Command { program, args, env } => self.command(program, args, env),
            Case::Hook {
                program,
                floor_plan,
                config,
                rootfs,
                env,
            } => self.hook(
                program.as_deref(),
                floor_plan.as_deref(),
                config,
                rootfs,
                env,
            ),
        }
    }

    fn container(
        &self,
        runtime: &Runtime,
        rootfs: &Image,
        env: &[String],
    ) -> Result<Measured, BenchError> {
        let (dir, container_rootfs) = self.fresh_container("run", rootfs, env, &[])?;
        let id = self.container_id();
        let (program, config) = self.runtime_program(runtime);
        let mut command = measure::command(program, &report_path(&dir));
        command
            .arg("--root")
            .arg(&self.state)
            .args(["run", "--bundle"])
            .arg(&dir)
            .arg(&id)
            .env_remove(nvc_config::CONFIG_ENV);
        command.envs(config.iter().copied());
        let measured = self.timed(&mut command, &dir, None);
        if let (Ok(_), Runtime::Floor(plan)) = (&measured, runtime) {
            crate::floor_plan::check_undone(plan, &container_rootfs, &rootfs.path)?;
        }
        if measured.is_err() {
            // `run` deletes its container when it ends; a failed one may be left.
            let _ = Command::new(&self.programs.runc)
                .arg("--root")
                .arg(&self.state)
                .args(["delete", "--force", &id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        remove(&dir)?;
        remove(&container_rootfs)?;
        measured
    }

    fn started(
        &self,
        runtime: &Runtime,
        rootfs: &Image,
        env: &[String],
    ) -> Result<Measured, BenchError> {
        let (dir, container_rootfs) = self.fresh_container("start", rootfs, env, &[])?;
        let id = self.container_id();
        let (program, config) = self.runtime_program(runtime);
        let command = |args: &[&str]| {
            let mut command = measure::command(program, &report_path(&dir));
            command
                .arg("--root")
                .arg(&self.state)
                .args(args)
                .env_remove(nvc_config::CONFIG_ENV);
            command.envs(config.iter().copied());
            command
        };
        let bundle = dir.to_string_lossy().into_owned();
        let created = self.timed(
            &mut command(&["create", "--bundle", &bundle, &id]),
            &dir,
            None,
        );
        let measured = created.and_then(|created| {
            let started = self.timed(&mut command(&["start", &id]), &dir, None)?;
            Ok(Measured {
                time: created.time + started.time,
                status: started.status,
                max_rss_kib: created.max_rss_kib.max(started.max_rss_kib),
                cpu: created.cpu + started.cpu,
            })
        });
        // Through the same runtime: runc runs the poststop hooks as it deletes.
        let mut delete = Command::new(program);
        delete
            .arg("--root")
            .arg(&self.state)
            .args(["delete", "--force", &id])
            .env_remove(nvc_config::CONFIG_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        delete.envs(config.iter().copied());
        let deleted = delete.status();
        if measured.is_ok() && !deleted.is_ok_and(|s| s.success()) {
            return Err(BenchError::Failed {
                command: measure::describe(&delete),
                status: "failed".into(),
                details: String::new(),
            });
        }
        remove(&dir)?;
        remove(&container_rootfs)?;
        measured
    }

    fn command(
        &self,
        program: &Path,
        args: &[OsString],
        env: &[(String, OsString)],
    ) -> Result<Measured, BenchError> {
        let (dir, _) = self.fresh_run("command")?;
        let mut command = measure::command(program, &report_path(&dir));
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&dir);
        let measured = self.timed(&mut command, &dir, None);
        remove(&dir)?;
        measured
    }

    fn shim(
        &self,
        config: Option<&Path>,
        floor_plan: Option<&Path>,
        bundle: &Path,
        pristine: &[u8],
    ) -> Result<Measured, BenchError> {
        let spec = bundle.join("config.json");
        std::fs::write(&spec, pristine).map_err(BenchError::io("write", &spec))?;
        let program = match (config, floor_plan) {
            (Some(_), _) => &self.programs.shim,
            (None, Some(_)) => &self.programs.floor,
            (None, None) => &self.programs.noop,
        };
        let mut command = measure::command(program, &report_path(bundle));
        command
            .arg("--root")
            .arg(&self.state)
            .args(["create", "--bundle"])
            .arg(bundle)
            .arg(self.container_id())
            .env_remove(nvc_config::CONFIG_ENV);
        if let Some(config) = config {
            command.env(nvc_config::CONFIG_ENV, config);
        }
        if let Some(plan) = floor_plan {
            command
                .env(crate::floor_plan::PLAN_ENV, plan)
                .env(crate::floor_plan::RUNC_ENV, &self.programs.noop);
        }
        self.timed(&mut command, bundle, None)
    }

    fn hook(
        &self,
        program: Option<&Path>,
        floor_plan: Option<&Path>,
        config: &Path,
        rootfs: &Image,
        env: &[String],
    ) -> Result<Measured, BenchError> {
        let (dir, container_rootfs) = self.fresh_container("hook", rootfs, env, &[])?;
        // The spec as runc would get it: edited by the shim (which then execs the no-op).
        let mut shim = Command::new(&self.programs.shim);
        shim.arg("--root")
            .arg(&self.state)
            .args(["create", "--bundle"])
            .arg(&dir)
            .arg(self.container_id())
            .env(nvc_config::CONFIG_ENV, config);
        run_quiet(&mut shim)?;

        let helper = Helper::start(&container_rootfs)?;
        let state = dir.join("state.json");
        let state_json = json!({
            "ociVersion": "1.0.2",
            "id": self.container_id(),
            "status": "creating",
            "pid": helper.pid(),
            "bundle": dir,
            "annotations": {}
        });
        std::fs::write(&state, state_json.to_string()).map_err(BenchError::io("write", &state))?;
        let stdin = File::open(&state).map_err(BenchError::io("open", &state))?;
        let hook = program.unwrap_or(&self.programs.hook);
        let mut command = measure::command(hook, &report_path(&dir));
        command
            .arg("prestart")
            .env_clear()
            .env("PATH", HOOK_PATH_ENV)
            .env(nvc_config::CONFIG_ENV, config)
            .current_dir(&dir);
        if let Some(plan) = floor_plan {
            command.env(crate::floor_plan::PLAN_ENV, plan);
        }
        let measured = self.timed(&mut command, &dir, Some(stdin));
        drop(helper);
        if let Some(plan) = floor_plan {
            if measured.is_ok() {
                crate::floor_plan::check(plan, &container_rootfs)?;
            }
            remove(&dir)?;
            remove(&container_rootfs)?;
            return measured;
        }
        // What runc does once the container is gone, untimed: the poststop hook ends the
        // container's lease and takes its record and mount points away. A baseline build
        // runs with the default state folder (the host's /run/nvc) and may have none: its
        // failure is not this build's.
        let ended = self.poststop(hook, config, &dir, &state_json);
        if program.is_none() {
            ended?;
        }
        remove(&dir)?;
        remove(&container_rootfs)?;
        measured
    }

    /// Runs `hook` as the poststop hook of the container whose prestart state was
    /// `state`, in bundle `dir`.
    fn poststop(
        &self,
        hook: &Path,
        config: &Path,
        dir: &Path,
        state: &serde_json::Value,
    ) -> Result<(), BenchError> {
        let mut state = state.clone();
        state["status"] = json!("stopped");
        let path = dir.join("state.json");
        std::fs::write(&path, state.to_string()).map_err(BenchError::io("write", &path))?;
        let stdin = File::open(&path).map_err(BenchError::io("open", &path))?;
        let mut command = Command::new(hook);
        command
            .arg("poststop")
            .env_clear()
            .env("PATH", HOOK_PATH_ENV)
            .env(nvc_config::CONFIG_ENV, config)
            .current_dir(dir);
        run_fed(&mut command, Stdio::from(stdin))
    }

    /// Times `command` (stdout to /dev/null, stderr to a file in `dir`); a failure is an
    /// error with its stderr and the end of nvc's log.
    fn timed(
        &self,
        command: &mut Command,
        dir: &Path,
        stdin: Option<File>,
    ) -> Result<Measured, BenchError> {
        let stderr_path = dir.join("stderr");
        let stderr = File::create(&stderr_path).map_err(BenchError::io("create", &stderr_path))?;
        command
            .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
            .stdout(Stdio::null())
            .stderr(stderr);
        let measured = measure::time(command, &report_path(dir))?;
        if measured.status.success() {
            return Ok(measured);
        }
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let mut details = stderr_details(&stderr);
        if !tail.is_empty() {
            details.push_str("\nnvc log ends:\n");
            details.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        Err(BenchError::Failed {
            command: measure::describe(command),
            status: measured.status.to_string(),
            details,
        })
    }

    /// Starts `count` `/bin/true` containers of `rootfs` asking for `env` (with
    /// `annotations`) through `runtime`, each in the way `lifecycle` says (`run`, as in
    /// [`Case::Container`], or an engine's four steps), `in_flight` at a time, and returns
    /// the wall-clock time from the first start to the last exit. The bundles and the
    /// image copies are made before and removed after, outside the timed region.
    #[allow(clippy::too_many_arguments)]
    pub fn parallel(
        &self,
        runtime: &Runtime,
        lifecycle: Lifecycle,
        rootfs: &Image,
        env: &[String],
        annotations: &[(&str, &str)],
        count: usize,
        in_flight: usize,
    ) -> Result<Duration, BenchError> {
        let mut runs = Vec::with_capacity(count);
        for _ in 0..count {
            let (dir, container_rootfs) =
                self.fresh_container("parallel", rootfs, env, annotations)?;
            let stderr_path = dir.join("stderr");
            let stderr =
                File::create(&stderr_path).map_err(BenchError::io("create", &stderr_path))?;
            runs.push((dir, container_rootfs, self.container_id(), stderr));
        }
        let (program, config) = self.runtime_program(runtime);
        let command = |dir: &Path, id: &str, stderr: &File| -> Result<Command, BenchError> {
            let stderr = stderr
                .try_clone()
                .map_err(BenchError::io("duplicate the stderr of", dir))?;
            let mut command = Command::new(program);
            command
                .arg("--root")
                .arg(&self.state)
                .args(["run", "--bundle"])
                .arg(dir)
                .arg(id)
                .env_remove(nvc_config::CONFIG_ENV)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr);
            command.envs(config.iter().copied());
            Ok(command)
        };
        // `run`'s commands are made before the clock starts; each worker takes the next.
        let commands = match lifecycle {
            Lifecycle::Run => runs
                .iter()
                .map(|(dir, _, id, stderr)| command(dir, id, stderr).map(Mutex::new))
                .collect::<Result<Vec<_>, _>>()?,
            Lifecycle::Engine => Vec::new(),
        };
        let state = self.state.as_path();
        let one = |i: usize| -> Result<(), BenchError> {
            let (dir, _, id, stderr) = &runs[i];
            if lifecycle == Lifecycle::Engine {
                return engine_steps(state, program, &config, dir, id, stderr);
            }
            let Some(Ok(mut command)) = commands.get(i).map(Mutex::lock) else {
                return Ok(());
            };
            run_to_end(&mut command, &dir.join("stderr"))
        };
        let next = AtomicUsize::new(0);
        let failed: Mutex<Option<BenchError>> = Mutex::new(None);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..in_flight.min(count) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    if let Err(outcome) = one(i) {
                        if let Ok(mut first) = failed.lock() {
                            first.get_or_insert(outcome);
                        }
                    }
                });
            }
        });
        let elapsed = started.elapsed();
        let failed = failed.into_inner().ok().flatten();
        for (dir, container_rootfs, id, _) in &runs {
            if failed.is_some() {
                // `run` deletes its container when it ends; a failed one may be left.
                let _ = Command::new(&self.programs.runc)
                    .arg("--root")
                    .arg(&self.state)
                    .args(["delete", "--force", id])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            remove(dir)?;
            remove(container_rootfs)?;
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(elapsed),
        }
    }

    /// Whether a container of `rootfs` asking for `env`, created through `runtime`, has
    /// `/dev/nvidiactl`, looked for through its init's root in /proc between `create` and
    /// `start` (prestart hooks have run, the container's command has not); untimed, the
    /// container deleted afterwards. A timed GPU row must be a GPU start.
    pub fn sees_gpu(
        &self,
        runtime: &Runtime,
        rootfs: &Image,
        env: &[String],
    ) -> Result<bool, BenchError> {
        let (dir, container_rootfs) = self.fresh_container("check", rootfs, env, &[])?;
        let id = self.container_id();
        let (program, config) = self.runtime_program(runtime);
        let pid_file = dir.join("init.pid");
        let mut create = Command::new(program);
        create
            .arg("--root")
            .arg(&self.state)
            .args(["create", "--bundle"])
            .arg(&dir)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(&id)
            .env_remove(nvc_config::CONFIG_ENV)
            .envs(config.iter().copied());
        let stderr_path = dir.join("stderr");
        let stderr = File::create(&stderr_path).map_err(BenchError::io("create", &stderr_path))?;
        create
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let seen = run_to_end(&mut create, &stderr_path).and_then(|()| {
            let pid =
                std::fs::read_to_string(&pid_file).map_err(BenchError::io("read", &pid_file))?;
            Ok(Path::new("/proc")
                .join(pid.trim())
                .join("root/dev/nvidiactl")
                .exists())
        });
        let mut delete = Command::new(program);
        delete
            .arg("--root")
            .arg(&self.state)
            .args(["delete", "--force", &id])
            .env_remove(nvc_config::CONFIG_ENV)
            .envs(config.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = delete.status();
        remove(&dir)?;
        remove(&container_rootfs)?;
        seen
    }

    /// A new empty bundle directory `<runtime dir>/<tag>-<n>`, and where its rootfs goes:
    /// `<work>/rootfs-<n>` (not made yet), as an engine keeps the bundle under `/run` and
    /// the container's file system on disk.
    pub fn fresh_run(&self, tag: &str) -> Result<(PathBuf, PathBuf), BenchError> {
        let n = self.next.get() + 1;
        self.next.set(n);
        let dir = self.runtime_dir().join(format!("{tag}-{n}"));
        std::fs::create_dir_all(&dir).map_err(BenchError::io("create directory", &dir))?;
        Ok((dir, self.work.join(format!("rootfs-{n}"))))
    }

    /// A fresh run folder with a bundle of [`COMMAND`] asking for `env`, on a fresh copy
    /// of `rootfs`; returns the folder and the copy.
    fn fresh_container(
        &self,
        tag: &str,
        rootfs: &Image,
        env: &[String],
        annotations: &[(&str, &str)],
    ) -> Result<(PathBuf, PathBuf), BenchError> {
        let (dir, container_rootfs) = self.fresh_run(tag)?;
        rootfs.copy_to(&container_rootfs)?;
        let mut bundle = Bundle::new(&dir, &container_rootfs)?
            .args(&[COMMAND])
            .env(env);
        for (key, value) in annotations {
            bundle = bundle.set(&format!("/annotations/{key}"), (*value).into());
        }
        bundle.write()?;
        Ok((dir, container_rootfs))
    }

    /// The program `runtime` runs, and the environment variables naming its configuration
    /// (nvc's; the floor program's plan and runc).
    fn runtime_program<'a>(
        &'a self,
        runtime: &'a Runtime,
    ) -> (&'a Path, Vec<(&'static str, &'a Path)>) {
        const NVC: &str = nvc_config::CONFIG_ENV;
        match runtime {
            Runtime::Runc => (&self.programs.runc, Vec::new()),
            Runtime::Nvc(config) => (&self.programs.shim, vec![(NVC, config)]),
            Runtime::Floor(plan) => (
                &self.programs.floor,
                vec![
                    (crate::floor_plan::PLAN_ENV, plan),
                    (crate::floor_plan::RUNC_ENV, &self.programs.runc),
                ],
            ),
            Runtime::Shim { shim, config } => (shim, vec![(NVC, config)]),
            Runtime::Toolkit { runtime, config } => {
                (runtime, vec![(crate::toolkit::CONFIG_ENV, config)])
            }
        }
    }

    fn container_id(&self) -> String {
        let n = self.next.get() + 1;
        self.next.set(n);
        format!("nvc-bench-{}-{n}", std::process::id())
    }
}

/// One container of bundle `dir` through `program` as an engine drives a runtime:
/// `create` (which runs the prestart hooks), `start`, waiting for the container's
/// init to exit (a pidfd of the pid `create` wrote), `delete` (the poststop hooks).
fn engine_steps(
    state: &Path,
    program: &Path,
    config: &[(&'static str, &Path)],
    dir: &Path,
    id: &str,
    stderr: &File,
) -> Result<(), BenchError> {
    let step = |args: &[&std::ffi::OsStr]| -> Result<(), BenchError> {
        let stderr = stderr
            .try_clone()
            .map_err(BenchError::io("duplicate the stderr of", dir))?;
        let mut command = Command::new(program);
        command
            .arg("--root")
            .arg(state)
            .args(args)
            .env_remove(nvc_config::CONFIG_ENV)
            .envs(config.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        run_to_end(&mut command, &dir.join("stderr"))
    };
    let pid_file = dir.join("init.pid");
    step(&[
        "create".as_ref(),
        "--bundle".as_ref(),
        dir.as_os_str(),
        "--pid-file".as_ref(),
        pid_file.as_os_str(),
        id.as_ref(),
    ])?;
    // The init waits on runc's exec fifo until `start`: it cannot have exited yet.
    let init = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| BenchError::Failed {
            command: format!(
                "{} create --pid-file {}",
                program.display(),
                pid_file.display()
            ),
            status: "no pid written".into(),
            details: String::new(),
        })?;
    let pidfd = rustix::process::pidfd_open(init, rustix::process::PidfdFlags::empty())
        .map_err(|e| BenchError::io("open a pidfd for the init of", dir)(e.into()))?;
    step(&["start".as_ref(), id.as_ref()])?;
    wait_for_exit(&pidfd, measure::TIME_LIMIT).map_err(|e| match e {
        None => BenchError::TimedOut {
            command: format!("the container {id}"),
            seconds: measure::TIME_LIMIT.as_secs(),
        },
        Some(source) => BenchError::io("wait for the init of", dir)(source),
    })?;
    step(&["delete".as_ref(), id.as_ref()])
}

/// Runs `command`, whose stderr goes to the file `stderr`, to its end: an error with the
/// file's text unless it succeeds. Not `output()`: a container's init keeps the stdio of
/// `<runtime> create` open until the container ends.
fn run_to_end(command: &mut Command, stderr: &Path) -> Result<(), BenchError> {
    let line = measure::describe(command);
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(BenchError::Failed {
            command: line,
            status: status.to_string(),
            details: stderr_details(&std::fs::read_to_string(stderr).unwrap_or_default()),
        }),
        Err(source) => Err(BenchError::Spawn {
            program: line,
            source,
        }),
    }
}

/// Waits until the process of `pidfd` has exited (the descriptor turns readable), at
/// most `limit`; `Err(None)` when it ran past it.
fn wait_for_exit(
    pidfd: &std::os::fd::OwnedFd,
    limit: Duration,
) -> Result<(), Option<std::io::Error>> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return Err(None),
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Some(e.into())),
        }
    }
}

/// Shuffles `order` in place (Fisher-Yates, with xorshift64 from `seed`, advanced).
fn shuffle(order: &mut [usize], seed: &mut u64) {
    for i in (1..order.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let j = (*seed % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
}

/// Where the measuring process reports on a run whose files are in `dir`.
fn report_path(dir: &Path) -> PathBuf {
    dir.join("measured")
}

fn remove(dir: &Path) -> Result<(), BenchError> {
    std::fs::remove_dir_all(dir).map_err(BenchError::io("remove", dir))
}

/// A process in a mount namespace of its own, standing for the container's init between
/// runc's mounts and `pivot_root`: the rootfs bind-mounted onto itself, `proc` and a
/// tmpfs `/dev` in it. Killed when dropped, which ends the namespace and its mounts.
struct Helper {
    child: Child,
}

/// Run by `sh` inside the new namespace, with the rootfs as `$1`.
const HELPER_SCRIPT: &str = r#"mount --bind "$1" "$1" && mount -t proc proc "$1/proc" && mount -t tmpfs -o nosuid,mode=755 tmpfs "$1/dev" && exec sleep 600"#;

impl Helper {
    fn start(rootfs: &Path) -> Result<Helper, BenchError> {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(HELPER_SCRIPT)
            .arg("sh")
            .arg(rootfs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let line = measure::describe(&command);
        let child = command.spawn().map_err(|source| BenchError::Spawn {
            program: line.clone(),
            source,
        })?;
        let mut helper = Helper { child };
        // unshare and sh exec in place: the pid is sleep's once the mounts are done.
        let comm = PathBuf::from(format!("/proc/{}/comm", helper.pid()));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
                return Ok(helper);
            }
            if let Ok(Some(status)) = helper.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = helper.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                return Err(BenchError::Helper {
                    command: line,
                    status: status.to_string(),
                    stderr: stderr_details(&stderr),
                });
            }
            if Instant::now() > deadline {
                return Err(BenchError::TimedOut {
                    command: line,
                    seconds: 10,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::shuffle;

    #[test]
    fn shuffled_rounds_let_every_case_follow_every_other() {
        let n = 6;
        let mut order: Vec<usize> = (0..n).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let mut follows = vec![vec![0u32; n]; n];
        for _ in 0..60 {
            shuffle(&mut order, &mut seed);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "not a permutation");
            for pair in order.windows(2) {
                follows[pair[1]][pair[0]] += 1;
            }
        }
        for (b, row) in follows.iter().enumerate() {
            for (a, count) in row.iter().enumerate() {
                if a != b {
                    assert!(*count > 0, "case {b} never followed case {a} in 60 rounds");
                }
            }
        }
    }
}
