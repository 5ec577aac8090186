//! Podman on storage of its own in the work directory (`--podman PATH`), set up as
//! `tests/gpu/engines.sh` sets it up: `--root`, `--runroot` and `--tmpdir` there, cgroupfs,
//! events and logs to files, the bench's runc, the image imported from the bench's rootfs;
//! nvc's hooks.d file (`nvc runtime configure --runtime podman`) in a hooks folder of its
//! own, so that the host's hooks take no part. nvc's CDI spec (`nvc cdi generate`) goes to
//! `/etc/cdi`, the one folder every Podman reads (Podman before 5.5 ignores
//! containers.conf's `cdi_spec_dirs`, and 5.5 reads no `/var/run/cdi` by default), under a
//! kind of the bench's own, [`KIND_VENDOR`]: the host's specs of `nvidia.com/gpu` neither
//! take part nor clash with it (two files naming one device would leave it to neither);
//! the file is removed with the [`Podman`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::BenchError;
use crate::large_image::{run_quiet, stderr_details};
use crate::runner::Case;

/// The image's name in Podman's storage.
const IMAGE: &str = "localhost/nvc-bench:latest";

/// The vendor of the bench's CDI spec: its devices are `<vendor>/gpu=<name>`.
pub const KIND_VENDOR: &str = "bench.nvc.example";

/// The CDI device the CDI row asks for: every GPU, of the bench's spec.
pub const CDI_ALL: &str = "bench.nvc.example/gpu=all";

/// Where Podman reads CDI specs whatever its version and configuration.
const SPEC_DIR: &str = "/etc/cdi";

/// What a `podman run` is given a GPU through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// Nothing: runc alone, under Podman.
    Nothing,
    /// nvc's hooks.d file: `nvc-hook` as an OCI hook for every container, which asks
    /// for GPUs with `NVIDIA_VISIBLE_DEVICES`.
    Hooks,
    /// nvc's CDI spec: `--device` [`CDI_ALL`].
    Cdi,
}

/// Podman with everything under one folder; dropped, it unmounts what its storage left
/// mounted there.
#[derive(Debug)]
pub struct Podman {
    program: PathBuf,
    dir: PathBuf,
    /// The storage driver that imported the image: overlay, else vfs.
    pub storage: &'static str,
    conmon: Option<PathBuf>,
    runc: PathBuf,
    /// `podman version`'s client version.
    pub version: String,
    /// nvc's CDI spec in [`SPEC_DIR`], removed on drop.
    spec: PathBuf,
    /// Whether [`SPEC_DIR`] was made here (then removed on drop, when empty).
    made_spec_dir: bool,
}

/// What Podman is set up with.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// The podman binary; conmon and netavark beside it are used when there.
    pub program: &'a Path,
    /// Podman's folder (made).
    pub dir: &'a Path,
    /// The runc containers run under.
    pub runc: &'a Path,
    /// The image's rootfs.
    pub rootfs: &'a Path,
    /// The `nvc` CLI.
    pub nvc: &'a Path,
    /// The `nvc-hook` in the hooks.d file and the spec.
    pub hook: &'a Path,
    /// nvc's configuration, named to the hooks (`NVC_CONFIG`).
    pub nvc_config: &'a Path,
}

impl Podman {
    /// Makes Podman's folder, its configuration, nvc's hooks.d file and CDI spec, and
    /// imports the image.
    pub fn setup(setup: &Setup) -> Result<Podman, BenchError> {
        let dir = setup.dir.to_path_buf();
        for sub in ["root", "runroot", "tmp", "hooks.d", "no-hooks.d"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(BenchError::io("create directory", &path))?;
        }
        let beside = |name: &str| {
            setup
                .program
                .parent()
                .map(|d| d.join(name))
                .filter(|p| p.is_file())
        };
        let write = |name: &str, text: String| -> Result<(), BenchError> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(BenchError::io("write", &path))
        };
        write(
            "policy.json",
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#.to_string(),
        )?;
        write("containers.conf", containers_conf(setup.program))?;

        // nvc's hooks.d file, as a user writes it, with the bench's configuration.
        let hook_file = dir.join("hooks.d/oci-nvc-hook.json");
        let mut configure = Command::new(setup.nvc);
        configure
            .args(["runtime", "configure", "--runtime", "podman", "--config"])
            .arg(&hook_file)
            .arg("--hook-path")
            .arg(setup.hook)
            .env(nvc_config::CONFIG_ENV, setup.nvc_config);
        run_quiet(&mut configure)?;
        name_config_to_hook(&hook_file, setup.nvc_config)?;
        // nvc's CDI spec for the same driver, under the bench's kind, where Podman reads.
        let spec_dir = Path::new(SPEC_DIR);
        let made_spec_dir = !spec_dir.exists();
        std::fs::create_dir_all(spec_dir).map_err(BenchError::io("create directory", spec_dir))?;
        let spec = spec_dir.join(format!("{KIND_VENDOR}-gpu-{}.json", std::process::id()));
        let mut generate = Command::new(setup.nvc);
        generate
            .args(["cdi", "generate", "--vendor", KIND_VENDOR, "--output"])
            .arg(&spec)
            .env(nvc_config::CONFIG_ENV, setup.nvc_config);
        if let Err(e) = run_quiet(&mut generate) {
            remove_spec(&spec, made_spec_dir);
            return Err(e);
        }

        let tarball = dir.join("image.tar");
        let mut tar = Command::new("tar");
        tar.arg("-C")
            .arg(setup.rootfs)
            .arg("-cf")
            .arg(&tarball)
            .arg(".");
        run_quiet(&mut tar)?;
        let mut podman = Podman {
            program: setup.program.to_path_buf(),
            dir,
            storage: "overlay",
            conmon: beside("conmon"),
            runc: setup.runc.to_path_buf(),
            version: String::new(),
            spec,
            made_spec_dir,
        };
        let import = |p: &Podman| {
            let mut import = p.command(Through::Nothing);
            import
                .arg("import")
                .arg("--signature-policy")
                .arg(p.dir.join("policy.json"))
                .arg(&tarball)
                .arg(IMAGE);
            run_quiet(&mut import)
        };
        // Overlay where the file system under the work directory takes it, as engines.sh.
        if let Err(overlay) = import(&podman) {
            eprintln!(
                "nvc-bench: podman import with overlay storage failed, trying vfs: {overlay}"
            );
            podman.storage = "vfs";
            import(&podman)?;
        }
        let mut version = podman.command(Through::Nothing);
        version.args(["version", "--format", "{{.Client.Version}}"]);
        podman.version = version
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        Ok(podman)
    }

    /// `podman <global options>` for containers given a GPU `through`: the hooks folder is
    /// nvc's only for [`Through::Hooks`] (its hook runs for every container).
    fn command(&self, through: Through) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(self.global_args(through))
            .envs(self.env().iter().map(|(k, v)| (k, v)));
        command
    }

    fn env(&self) -> Vec<(String, OsString)> {
        vec![
            (
                "CONTAINERS_CONF".into(),
                self.dir.join("containers.conf").into(),
            ),
            ("TMPDIR".into(), self.dir.join("tmp").into()),
        ]
    }

    fn global_args(&self, through: Through) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut pair = |flag: &str, value: OsString| {
            args.push(flag.into());
            args.push(value);
        };
        pair("--root", self.dir.join("root").into());
        pair("--runroot", self.dir.join("runroot").into());
        pair("--tmpdir", self.dir.join("tmp").into());
        pair("--storage-driver", self.storage.into());
        pair("--cgroup-manager", "cgroupfs".into());
        pair("--events-backend", "file".into());
        pair("--runtime", self.runc.clone().into());
        if let Some(conmon) = &self.conmon {
            pair("--conmon", conmon.clone().into());
        }
        let hooks = match through {
            Through::Hooks => "hooks.d",
            Through::Nothing | Through::Cdi => "no-hooks.d",
        };
        pair("--hooks-dir", self.dir.join(hooks).into());
        args
    }

    /// `podman run --rm` of `command` in the image, given a GPU `through` nvc (all GPUs;
    /// the hooks with `env`).
    fn run_args(&self, through: Through, env: &[&str], command: &[&str]) -> Vec<OsString> {
        let mut args = self.global_args(through);
        // Explicit limits, as nvc's engine tests give: Podman's default of 1048576 open
        // files is above the hard limit of many machines, where runc then fails.
        args.extend(
            [
                "run",
                "--rm",
                "--network",
                "none",
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ]
            .map(OsString::from),
        );
        match through {
            Through::Nothing => {}
            Through::Hooks => {
                for e in env {
                    args.push("-e".into());
                    args.push((*e).into());
                }
            }
            Through::Cdi => {
                args.push("--device".into());
                args.push(CDI_ALL.into());
            }
        }
        args.push(IMAGE.into());
        args.extend(command.iter().map(OsString::from));
        args
    }

    /// The timed case: `podman run --rm` of `/bin/true`.
    pub fn case(&self, through: Through, env: &[&str]) -> Case {
        Case::Command {
            program: self.program.clone(),
            args: self.run_args(through, env, &["/bin/true"]),
            env: self.env(),
        }
    }

    /// Checks, untimed, that a container run `through` nvc sees `/dev/nvidiactl`, and one
    /// through nothing does not: a timed row must be what it says.
    pub fn check(&self, through: Through, env: &[&str]) -> Result<(), BenchError> {
        let test = match through {
            Through::Nothing => "! test -e /dev/nvidiactl",
            Through::Hooks | Through::Cdi => "test -e /dev/nvidiactl",
        };
        let args = self.run_args(through, env, &["/bin/sh", "-c", test]);
        // In the error, `podman run ...` without the global options, which every row has.
        let run = args
            .iter()
            .skip(self.global_args(through).len())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = Command::new(&self.program);
        command
            .args(&args)
            .envs(self.env().iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        let out = command.output().map_err(|source| BenchError::Spawn {
            program: crate::measure::describe(&command),
            source,
        })?;
        if out.status.success() {
            return Ok(());
        }
        let details = stderr_details(&String::from_utf8_lossy(&out.stderr));
        Err(BenchError::Failed {
            command: format!("podman {run}"),
            status: out.status.to_string(),
            details,
        })
    }
}

impl Drop for Podman {
    /// Unmounts what Podman's storage left mounted under its folder (overlay mounts its
    /// own folder onto itself), so that the work directory can be removed.
    fn drop(&mut self) {
        nvc_tests::unmount_all_under(&self.dir);
        remove_spec(&self.spec, self.made_spec_dir);
    }
}

/// Removes the bench's spec, and its folder when the bench made it and nothing else is
/// there.
fn remove_spec(spec: &Path, made_dir: bool) {
    let _ = std::fs::remove_file(spec);
    if made_dir {
        if let Some(dir) = spec.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Podman's containers.conf: no journald or systemd (logs and events to files, cgroupfs),
/// its helpers (netavark) beside `program` first; CDI specs where Podman reads them by
/// default (see the module's documentation).
fn containers_conf(program: &Path) -> String {
    let q = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
    let helpers = program.parent().map(q).into_iter().chain(
        [
            "/usr/local/libexec/podman",
            "/usr/libexec/podman",
            "/usr/lib/podman",
        ]
        .map(|d| q(Path::new(d))),
    );
    format!(
        "[containers]\nlog_driver = \"k8s-file\"\n\n[engine]\nevents_logger = \"file\"\n\
         cgroup_manager = \"cgroupfs\"\nhelper_binaries_dir = [{}]\n",
        helpers.collect::<Vec<_>>().join(", ")
    )
}

/// Adds `NVC_CONFIG=<config>` to the hook's environment in the hooks.d file, unless it
/// is there: the hook runs with the environment the file gives it.
fn name_config_to_hook(file: &Path, config: &Path) -> Result<(), BenchError> {
    let text = std::fs::read_to_string(file).map_err(BenchError::io("read", file))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| BenchError::Failed {
            command: format!("reading {}", file.display()),
            status: "not JSON".into(),
            details: format!(": {e}"),
        })?;
    let entry = format!("{}={}", nvc_config::CONFIG_ENV, config.display());
    let env = &mut json["hook"]["env"];
    if !env.is_array() {
        *env = serde_json::Value::Array(Vec::new());
    }
    if let Some(list) = env.as_array_mut() {
        let prefix = format!("{}=", nvc_config::CONFIG_ENV);
        list.retain(|v| !v.as_str().is_some_and(|s| s.starts_with(&prefix)));
        list.push(entry.into());
    }
    let text = serde_json::to_string_pretty(&json).unwrap_or(text);
    std::fs::write(file, text).map_err(BenchError::io("write", file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_the_helpers_and_leaves_the_spec_folders_default() {
        let conf: toml::Table = containers_conf(Path::new("/e/bin/podman"))
            .parse()
            .expect("valid TOML");
        // Podman 5.5 and later take cdi_spec_dirs: it must not hide /etc/cdi.
        assert!(conf["engine"].get("cdi_spec_dirs").is_none());
        assert_eq!(
            conf["engine"]["helper_binaries_dir"][0].as_str(),
            Some("/e/bin")
        );
        assert_eq!(conf["engine"]["cgroup_manager"].as_str(), Some("cgroupfs"));
    }

    #[test]
    fn the_hook_file_gets_the_config_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("hook.json");
        std::fs::write(
            &file,
            r#"{"version":"1.0.0","hook":{"path":"/h","env":["PATH=/bin","NVC_CONFIG=/old"]}}"#,
        )
        .expect("write");
        name_config_to_hook(&file, Path::new("/b/c.toml")).expect("edit");
        name_config_to_hook(&file, Path::new("/b/c.toml")).expect("edit again");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
        assert_eq!(
            json["hook"]["env"],
            serde_json::json!(["PATH=/bin", "NVC_CONFIG=/b/c.toml"])
        );
        assert_eq!(json["version"], "1.0.0");
    }
}
