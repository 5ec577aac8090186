//! `podman` with private storage, each command in its own namespaces.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::Outcome;

use super::daemon::{cgroup_name, isolated, remove_cgroups};
use super::debian_root::{EngineRoot, RootUser, RootView};
use super::{engine_path, find_program, mkdirs, run_command, EngineError, ENGINE_TIMEOUT};

/// `podman` with private storage: `--root`, `--runroot`, `--tmpdir` under its directory,
/// vfs, cgroupfs, events to a file, runc, `--hooks-dir` the given folder. Every command runs
/// in its own namespaces (see `isolated`), so conmon and anything else it leaves behind
/// ends with it; containers run under their own cgroup parent. A newer Debian's podman runs
/// in its root ([`Podman::in_root`]), as root or as a user ([`Podman::rootless`]).
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
    /// A newer Debian's podman: its root, and what its commands see there.
    root: Option<(EngineRoot, RootView)>,
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
        })
    }

    /// The podman of `root` (a newer Debian's) with `runtime`: the root's `runc` or `crun`
    /// by name, or an absolute path (nvc-runtime among `binds`); keeping everything under
    /// `dir`, with the OCI hooks of `hooks_dir`; `binds`: the host folders it must see (the
    /// test's folder, nvc's binaries), at the same paths.
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
        let view = RootView {
            binds: binds.iter().map(|b| b.to_path_buf()).collect(),
            ..RootView::default()
        };
        Ok(Podman {
            hooks_dir: std::path::absolute(hooks_dir)
                .map_err(EngineError::io("make absolute", hooks_dir))?,
            dir,
            cgroup_parent: cgroup_name("podman"),
            program: PathBuf::from("/usr/bin/podman"),
            runc: Path::new("/usr/bin").join(runtime),
            root: Some((root.clone(), view)),
        })
    }

    /// Podman in a root reading its CDI specs (`/etc/cdi`) from the host folder `dir`.
    pub fn with_cdi_dir(self, dir: &Path) -> Podman {
        self.with_bind_at(dir, Path::new("/etc/cdi"))
    }

    /// Podman in a root seeing the host file or folder `host` at `path` (e.g. nvc's config
    /// folder at `/etc/nvc`, where nvc-runtime reads it).
    pub fn with_bind_at(mut self, host: &Path, path: &Path) -> Podman {
        if let Some((_, view)) = &mut self.root {
            view.placed.push((host.to_path_buf(), path.to_path_buf()));
        }
        self
    }

    /// Podman in a root on a hybrid cgroup host seeing the v1 controllers alone, as on a
    /// host with systemd's legacy hierarchy: what crun needs here (see `RootView`).
    pub fn with_legacy_cgroups(mut self) -> Podman {
        if let Some((_, view)) = &mut self.root {
            view.legacy_cgroups = true;
        }
        self
    }

    /// Podman in a root whose `/dev` also has the device nodes of the host folder `dir`
    /// (see `RootView::dev_nodes`).
    pub fn with_dev_nodes(mut self, dir: &Path) -> Podman {
        if let Some((_, view)) = &mut self.root {
            view.dev_nodes = Some(dir.to_path_buf());
        }
        self
    }

    /// Rootless podman in a root: every command runs as `user`, who is given this
    /// podman's folder. Its `--tmpdir` is podman's default, in the user's
    /// `XDG_RUNTIME_DIR`, where podman makes it (it keeps the rootless pause process's pid
    /// file there too). Containers get no `--cgroup-parent`: a user cannot make v1 cgroups,
    /// and rootless podman on cgroup v1 runs its containers in none of their own.
    pub fn rootless(mut self, user: &RootUser) -> Result<Podman, EngineError> {
        chown_tree(&self.dir, user.uid)?;
        if let Some((_, view)) = &mut self.root {
            view.user = Some(user.clone());
        }
        Ok(self)
    }

    /// The user a rootless podman runs as.
    pub fn user(&self) -> Option<&RootUser> {
        self.root.as_ref().and_then(|(_, view)| view.user.as_ref())
    }

    /// `podman <global flags> ARGS`, with [`ENGINE_TIMEOUT`].
    pub fn podman<S: AsRef<OsStr>>(&self, args: &[S]) -> Outcome {
        let mut command = match &self.root {
            None => isolated(&self.program),
            Some((root, view)) => {
                let mut command = root.command_in(&self.program.to_string_lossy(), view);
                command.env("PODMAN_IGNORE_CGROUPSV1_WARNING", "1");
                command
            }
        };
        command
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"));
        if self.user().is_none() {
            command.arg("--tmpdir").arg(self.dir.join("tmp"));
        }
        command
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
    /// runc then fails with "error setting rlimit type 7". Rootless: no `--cgroup-parent`.
    pub fn run<S: AsRef<OsStr>>(&self, options: &[S], image: &str, command: &[&str]) -> Outcome {
        let mut args: Vec<OsString> = ["run", "--rm", "--network", "none"]
            .map(OsString::from)
            .to_vec();
        if self.user().is_none() {
            args.push("--cgroup-parent".into());
            args.push(format!("/{}", self.cgroup_parent).into());
        }
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

/// Gives `dir` and everything under it to `uid` (and the group of the same id).
fn chown_tree(dir: &Path, uid: u32) -> Result<(), EngineError> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid))
        .map_err(EngineError::io("change the owner of", dir))?;
    if dir.is_dir() && !dir.is_symlink() {
        for entry in std::fs::read_dir(dir).map_err(EngineError::io("read directory", dir))? {
            let entry = entry.map_err(EngineError::io("read directory", dir))?;
            chown_tree(&entry.path(), uid)?;
        }
    }
    Ok(())
}

impl Drop for Podman {
    fn drop(&mut self) {
        remove_cgroups(&self.cgroup_parent);
    }
}
