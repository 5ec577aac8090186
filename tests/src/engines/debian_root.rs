//! A newer Debian's engines, run from a root of their own: Debian 12's glibc cannot run
//! Debian 13's podman, runc or crun, and they must never be installed over it. The root is
//! made by `debootstrap` once per build folder (`target/engine-roots/<suite>`) and reused;
//! each command then runs in its own mount namespace whose root is that folder
//! (`pivot_root`, not `chroot`: a hook that enters a container's mount namespace gets the
//! namespace's root, which must be the engine's), with the host's `/proc`, `/sys`, `/dev`,
//! a fresh `/run` and `/tmp`, and the host folders the test names bound at the same paths.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use super::{run_command, EngineError};

/// The engines each root holds (with `uidmap`, whose `newuidmap` rootless podman needs).
const PACKAGES: &str =
    "podman,runc,crun,conmon,catatonit,uidmap,docker.io,docker-cli,containerd,tini";

/// The Debian suites a root is made from, with the debootstrap script for each (this
/// machine's debootstrap may predate the suite: `sid`'s script makes any newer one).
const SUITES: &[(&str, &str)] = &[("trixie", "trixie"), ("forky", "sid")];

/// The file in a root that names the packages it was made with.
const MADE_WITH: &str = ".nvc-engine-root";

/// Where Debian's packages come from.
const MIRROR: &str = "http://deb.debian.org/debian";

/// A Debian root with engines, made by debootstrap.
#[derive(Debug, Clone)]
pub struct EngineRoot {
    /// The root folder.
    pub path: PathBuf,
    /// The suite (`trixie` is Debian 13).
    pub suite: &'static str,
}

/// Serializes the roots' creation: the tests of one binary run in parallel.
static MAKING: Mutex<()> = Mutex::new(());

/// The folder that holds the roots: `NVC_ENGINE_ROOTS` when set (several checkouts can
/// share one), else `engine-roots` in the build folder (next to `debug`), so one build
/// makes them once.
fn roots_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("NVC_ENGINE_ROOTS").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let exe = std::env::current_exe().unwrap_or_default();
        // target/debug/deps/<test> → target
        exe.ancestors()
            .nth(3)
            .map_or_else(|| PathBuf::from("/var/tmp"), Path::to_path_buf)
            .join("engine-roots")
    })
    .clone()
}

impl EngineRoot {
    /// Debian 13 (trixie): podman 5.4, Docker 26.1 with containerd 1.7, runc 1.1, crun
    /// 1.21. Made on first use (about half a minute and 900 MB from the Debian mirror),
    /// then reused.
    pub fn debian13() -> Result<EngineRoot, EngineError> {
        EngineRoot::make("trixie")
    }

    /// Debian 14 (forky): podman 5.8, Docker 28 with containerd 2.1, runc 1.3, crun 1.28.
    /// Made on first use like [`EngineRoot::debian13`].
    pub fn debian14() -> Result<EngineRoot, EngineError> {
        EngineRoot::make("forky")
    }

    fn make(suite: &'static str) -> Result<EngineRoot, EngineError> {
        let script = SUITES
            .iter()
            .find(|(s, _)| *s == suite)
            .map_or(suite, |(_, script)| *script);
        let packages = PACKAGES;
        let path = roots_dir().join(suite);
        let _guard = MAKING.lock().unwrap_or_else(|e| e.into_inner());
        // Test binaries of one run (and checkouts sharing `NVC_ENGINE_ROOTS`) run at once:
        // one makes the root while the others wait on the lock file.
        std::fs::create_dir_all(roots_dir())
            .map_err(EngineError::io("create directory", roots_dir()))?;
        let lock_path = roots_dir().join(format!(".{suite}.lock"));
        let lock =
            std::fs::File::create(&lock_path).map_err(EngineError::io("create", &lock_path))?;
        lock.lock().map_err(EngineError::io("lock", &lock_path))?;
        let made_with = std::fs::read_to_string(path.join(MADE_WITH)).unwrap_or_default();
        if made_with.trim() == packages {
            return Ok(EngineRoot { path, suite });
        }
        // Another package list (or a partial root): made again.
        let _ = std::fs::remove_dir_all(&path);
        let debootstrap = super::find_program("debootstrap", "debootstrap")?;
        let partial = path.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial).map_err(EngineError::io("create directory", &partial))?;
        let mut command = Command::new(debootstrap);
        command
            .args(["--variant=minbase", &format!("--include={packages}"), suite])
            .arg(&partial)
            .arg(MIRROR)
            .arg(format!("/usr/share/debootstrap/scripts/{script}"));
        let out = run_command(
            &mut command,
            &roots_dir(),
            std::time::Duration::from_secs(900),
        );
        EngineError::check("debootstrap a Debian root with its engines", out)?;
        std::fs::write(partial.join(MADE_WITH), packages)
            .map_err(EngineError::io("write", partial.join(MADE_WITH)))?;
        std::fs::rename(&partial, &path).map_err(EngineError::io("rename", &partial))?;
        Ok(EngineRoot { path, suite })
    }

    /// `unshare` running `program ARGS...` inside the root, with `binds` (host folders,
    /// absolute) at the same paths there, and `/etc/cdi` the host folder `cdi` when given.
    /// Add the program's arguments to the command.
    pub fn command(&self, program: &str, binds: &[&Path], cdi: Option<&Path>) -> Command {
        let binds: Vec<String> = binds
            .iter()
            .map(|b| b.to_string_lossy().into_owned())
            .collect();
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                r#"set -e
R=$NVC_ENGINE_ROOT
mount --rbind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=0755 nvc-run "$R/run"
mount -t tmpfs -o mode=1777 nvc-tmp "$R/tmp"
for b in $NVC_ENGINE_BINDS; do mkdir -p "$R$b"; mount --rbind "$b" "$R$b"; done
if [ -n "$NVC_ENGINE_CDI" ]; then mkdir -p "$R/etc/cdi"; mount --bind "$NVC_ENGINE_CDI" "$R/etc/cdi"; fi
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
cd /
umount -l /.oldroot
unset NVC_ENGINE_ROOT NVC_ENGINE_BINDS NVC_ENGINE_CDI
exec "$@""#,
                "sh",
                program,
            ])
            .env("NVC_ENGINE_ROOT", &self.path)
            .env("NVC_ENGINE_BINDS", binds.join(" "))
            .env("NVC_ENGINE_CDI", cdi.map(Path::as_os_str).unwrap_or_default())
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        command
    }

    /// What `program --version` says inside the root (its first line).
    pub fn version(&self, program: &str) -> String {
        let out = self.command(program, &[], None).arg("--version").output();
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default()
    }
}
