//! `podman` with private storage, each command in its own namespaces.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::Outcome;

use super::daemon::{cgroup_name, isolated, remove_cgroups};
use super::debian_root::EngineRoot;
use super::{engine_path, find_program, mkdirs, run_command, EngineError, ENGINE_TIMEOUT};

/// `podman` with private storage: `--root`, `--runroot`, `--tmpdir` under its directory,
/// vfs, cgroupfs, events to a file, runc, `--hooks-dir` the given folder. Every command runs
/// in its own namespaces (see `isolated`), so conmon and anything else it leaves behind
/// ends with it; containers run under their own cgroup parent.
#[derive(Debug)]
pub struct Podman {
    /// Its directory.
    pub dir: PathBuf,
    /// The OCI hooks folder podman reads.
    pub hooks_dir: PathBuf,
    /// The containers' `--cgroup-parent`.
    pub cgroup_parent: String,
    program: PathBuf,
    runc: PathBuf,
    /// A newer Debian's podman: its root, and the host folders bound into it.
    root: Option<(EngineRoot, Vec<PathBuf>)>,
    /// The host folder that is `/etc/cdi` in the root.
    cdi_dir: Option<PathBuf>,
}

impl Podman {
    /// Podman keeping everything under `dir`, with the OCI hooks of `hooks_dir`.
    pub fn new(dir: &Path, hooks_dir: &Path) -> Result<Podman, EngineError> {
        let program = find_program("podman", "podman")?;
        find_program("conmon", "conmon")?;
        let runc = find_program("runc", "runc")?;
        let dir = mkdirs(dir)?;
        for sub in ["root", "runroot", "tmp", "io"] {
            mkdirs(&dir.join(sub))?;
        }
        Ok(Podman {
            hooks_dir: std::path::absolute(hooks_dir)
                .map_err(EngineError::io("make absolute", hooks_dir))?,
            dir,
            cgroup_parent: cgroup_name("podman"),
            program,
            runc,
            root: None,
            cdi_dir: None,
        })
    }

    /// The podman of `root` (a newer Debian's) with its `runtime` (`runc` or `crun`),
    /// keeping everything under `dir`, with the OCI hooks of `hooks_dir`; `binds`: the
    /// host folders it must see (the test's folder, nvc's binaries), at the same paths.
    pub fn in_root(
        root: &EngineRoot,
        runtime: &str,
        dir: &Path,
        hooks_dir: &Path,
        binds: &[&Path],
    ) -> Result<Podman, EngineError> {
        let dir = mkdirs(dir)?;
        for sub in ["root", "runroot", "tmp", "io"] {
            mkdirs(&dir.join(sub))?;
        }
        Ok(Podman {
            hooks_dir: std::path::absolute(hooks_dir)
                .map_err(EngineError::io("make absolute", hooks_dir))?,
            dir,
            cgroup_parent: cgroup_name("podman"),
            program: PathBuf::from("/usr/bin/podman"),
            runc: Path::new("/usr/bin").join(runtime),
            root: Some((
                root.clone(),
                binds.iter().map(|b| b.to_path_buf()).collect(),
            )),
            cdi_dir: None,
        })
    }

    /// Podman in a root reading its CDI specs (`/etc/cdi`) from the host folder `dir`.
    pub fn with_cdi_dir(mut self, dir: &Path) -> Podman {
        self.cdi_dir = Some(dir.to_path_buf());
        self
    }

    /// `podman <global flags> ARGS`, with [`ENGINE_TIMEOUT`].
    pub fn podman<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        let mut command = match &self.root {
            None => isolated(&self.program),
            Some((root, binds)) => {
                let binds: Vec<&Path> = binds.iter().map(PathBuf::as_path).collect();
                let mut command = root.command(
                    &self.program.to_string_lossy(),
                    &binds,
                    self.cdi_dir.as_deref(),
                );
                command.env("PODMAN_IGNORE_CGROUPSV1_WARNING", "1");
                command
            }
        };
        command
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .arg("--runtime")
            .arg(&self.runc)
            .arg("--hooks-dir")
            .arg(&self.hooks_dir)
            .args(args)
            .env("PATH", engine_path())
            .env("TMPDIR", self.dir.join("tmp"))
            .env_remove("CONTAINER_HOST")
            .env_remove("CONTAINERS_CONF")
            .env_remove("CONTAINERS_STORAGE_CONF");
        run_command(&mut command, &self.dir.join("io"), ENGINE_TIMEOUT)
    }

    /// `podman import <tarball> <name>`.
    pub fn import(&self, tarball: &Path, name: &str) -> Result<(), EngineError> {
        let args = [OsStr::new("import"), tarball.as_os_str(), OsStr::new(name)];
        EngineError::check("import the test rootfs into podman", self.podman(&args)).map(drop)
    }

    /// `podman run --rm --network none --cgroup-parent <parent> --ulimit nofile=1024:1024
    /// --ulimit nproc=1024:1024 OPTIONS IMAGE COMMAND...`. The explicit limits: podman's
    /// defaults (1048576 open files) are above the hard limits of many CI containers, and
    /// runc then fails with "error setting rlimit type 7".
    pub fn run<S: AsRef<OsStr>>(&self, options: &[S], image: &str, command: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = ["run", "--rm", "--network", "none", "--cgroup-parent"]
            .map(OsString::from)
            .to_vec();
        args.push(format!("/{}", self.cgroup_parent).into());
        args.extend(
            [
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ]
            .map(OsString::from),
        );
        args.extend(options.iter().map(|o| o.as_ref().to_os_string()));
        args.push(image.into());
        args.extend(command.iter().map(OsString::from));
        self.podman(&args)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        remove_cgroups(&self.cgroup_parent);
    }
}
