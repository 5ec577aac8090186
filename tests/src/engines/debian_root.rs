//! A newer Debian's engines, run from a root of their own: Debian 12's glibc cannot run
//! Debian 13's podman, runc or crun, and they must never be installed over it. The root is
//! made by `debootstrap` once per build folder (`target/engine-roots/<suite>`) and reused;
//! each command then runs in its own mount namespace whose root is that folder
//! (`pivot_root`, not `chroot`: a hook that enters a container's mount namespace gets the
//! namespace's root, which must be the engine's), with the host's `/proc`, `/sys`, `/dev`,
//! a fresh `/run` and `/tmp`, and the host folders the test names bound at the same paths.
//! A [`RootView`] adds to that: host files over the root's, a legacy cgroup view for crun,
//! the fake driver's nodes in `/dev`, and a user to run as (rootless engines), all made in
//! the command's own namespace: the shared root and the host are left as they are.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use super::{run_command, tests_cache, EngineError};

/// The script `unshare` runs (see [`EngineRoot::command_in`]): binds, `pivot_root` into
/// the root, and the user switch of a rootless engine.
///
/// `NVC_ENGINE_LEGACY_CGROUPS` hides the cgroup2 mount of a hybrid host
/// (`/sys/fs/cgroup/unified`, beside the v1 controllers) from the namespace, which then
/// sees what a host booted with systemd's legacy hierarchy shows: v1 controllers on a tmpfs
/// and no cgroup2 mount. crun (1.21, 1.28) takes a tmpfs at `/sys/fs/cgroup` with cgroup2
/// at `unified` for hybrid mode and refuses it unless that cgroup2 has no controller
/// ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"); where
/// the kernel leaves a controller unmounted in v1 (hugetlb here) it has one. The v1
/// hierarchies, the device cgroup among them, stay as they are and are enforced as before.
///
/// `NVC_ENGINE_DEV_NODES`: a host folder of device nodes copied into the namespace's `/dev`,
/// itself a copy of the host's on a tmpfs (with the host's `pts`, `shm` and `mqueue`
/// mounts): the fake driver's nodes, where a host with the driver has them. The host's
/// `/dev` is not changed.
///
/// `NVC_ENGINE_RESTART`: the shell stays the namespace's first process and starts the
/// program again whenever it exits, until it gets SIGTERM itself (which it passes on):
/// systemd's `Restart=always`, which containerd's unit has, so that a program that
/// restarts the engine (`nvc node`, with SIGHUP) finds it back, its containers kept.
///
/// `NVC_ENGINE_PLACED`: `PATH=HOST` pairs, the host file or folder bound over `PATH` of the
/// root (a folder missing there is made, empty, in the shared root; a file must be there
/// already). `NVC_ENGINE_UID`: the user the program runs as, after `/` is made shared (what
/// systemd does; rootless podman warns otherwise) and its `XDG_RUNTIME_DIR` is made on the
/// fresh `/run`, as logind makes it; that folder goes with the namespace, and with it
/// rootless podman's pause process's pid file, which would name another process in the next
/// command's PID namespace.
const NAMESPACE_SCRIPT: &str = r#"set -e
R=$NVC_ENGINE_ROOT
mount --rbind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
if [ -n "$NVC_ENGINE_LEGACY_CGROUPS" ] && mountpoint -q "$R/sys/fs/cgroup/unified"; then
  umount -l "$R/sys/fs/cgroup/unified"
fi
if [ -n "$NVC_ENGINE_DEV_NODES" ]; then
  mount -t tmpfs -o mode=0755,nosuid nvc-dev "$R/dev"
  cp -ax /dev/. "$R/dev/"
  for m in pts shm mqueue hugepages; do
    if mountpoint -q "/dev/$m"; then mount --rbind "/dev/$m" "$R/dev/$m"; fi
  done
  cp -a "$NVC_ENGINE_DEV_NODES/." "$R/dev/"
else
  mount --rbind /dev "$R/dev"
fi
mount -t tmpfs -o mode=0755 nvc-run "$R/run"
mount -t tmpfs -o mode=1777 nvc-tmp "$R/tmp"
for b in $NVC_ENGINE_BINDS; do mkdir -p "$R$b"; mount --rbind "$b" "$R$b"; done
for p in $NVC_ENGINE_PLACED; do
  at=${p%%=*}; host=${p#*=}
  [ -f "$host" ] || mkdir -p "$R$at"
  mount --bind "$host" "$R$at"
done
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
cd /
umount -l /.oldroot
U=$NVC_ENGINE_UID
RESTART=$NVC_ENGINE_RESTART
unset NVC_ENGINE_ROOT NVC_ENGINE_BINDS NVC_ENGINE_PLACED NVC_ENGINE_LEGACY_CGROUPS NVC_ENGINE_UID \
  NVC_ENGINE_DEV_NODES NVC_ENGINE_RESTART
if [ -n "$U" ]; then
  mount --make-rshared /
  install -d -m 0700 -o "$U" -g "$U" "$XDG_RUNTIME_DIR"
  exec setpriv --reuid="$U" --regid="$U" --init-groups -- "$@"
fi
if [ -n "$RESTART" ]; then
  stop=
  trap 'stop=1; kill -TERM "$pid" 2>/dev/null || true' TERM
  while :; do
    "$@" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
    [ -z "$stop" ] || exit 0
    echo "nvc-engine-root: $1 exited; starting it again (Restart=always)" >&2
  done
fi
exec "$@""#;

/// The first of the subordinate uids and gids of a [`RootUser`] (65536 of them).
pub const SUBORDINATE_START: u32 = 200_000;

/// What a command run in a root sees besides the root's own files
/// ([`EngineRoot::command_in`]).
#[derive(Debug, Clone, Default)]
pub struct RootView {
    /// Host folders (absolute) bound at the same paths.
    pub binds: Vec<PathBuf>,
    /// Host files and folders bound over paths of the root: (host path, path in the root).
    pub placed: Vec<(PathBuf, PathBuf)>,
    /// On a hybrid cgroup host, hide the cgroup2 mount: only the v1 controllers are seen,
    /// as on a host with systemd's legacy hierarchy (see the namespace script for why
    /// crun needs it).
    pub legacy_cgroups: bool,
    /// Run the program as this user instead of root: a rootless engine.
    pub user: Option<RootUser>,
    /// A host folder of device nodes (the fake driver's `dev`) that `/dev` has too, as the
    /// driver's nodes are in a real host's `/dev`: a rootless runtime cannot make a device
    /// node and binds the spec's `linux.devices` from their paths there instead (runc,
    /// crun), which is how CDI devices reach a rootless container.
    pub dev_nodes: Option<PathBuf>,
    /// Start the program again whenever it exits, as systemd's `Restart=always` does;
    /// until the namespace's first process gets SIGTERM.
    pub restart_always: bool,
}

/// A user of a root for rootless engines, known to the commands run as it alone: the root's
/// shared files are not changed, the commands see copies of its `/etc/passwd`, `group`,
/// `subuid` and `subgid` with the user added, from a folder of the test's.
#[derive(Debug, Clone)]
pub struct RootUser {
    /// The login name.
    pub name: String,
    /// Its uid, also its gid.
    pub uid: u32,
    /// Its home, a folder it owns.
    pub home: PathBuf,
    /// The folder of the copied files.
    etc: PathBuf,
}

/// The files of the root a [`RootUser`] is added to.
const USER_FILES: [&str; 4] = ["passwd", "group", "subuid", "subgid"];

impl RootUser {
    /// `XDG_RUNTIME_DIR` in the namespace, where logind would make it.
    pub fn runtime_dir(&self) -> PathBuf {
        PathBuf::from(format!("/run/user/{}", self.uid))
    }

    /// The copies and where they go: (host file, path in the root).
    fn files(&self) -> impl Iterator<Item = (PathBuf, PathBuf)> + '_ {
        USER_FILES
            .iter()
            .map(|f| (self.etc.join(f), Path::new("/etc").join(f)))
    }
}

/// A Debian root with engines, made by debootstrap.
#[derive(Debug, Clone)]
pub struct EngineRoot {
    /// The root folder.
    pub path: PathBuf,
    /// The suite (`trixie` is Debian 13).
    pub suite: &'static str,
}

/// Serializes the roots' creation within a test binary (the script serializes it across
/// processes).
static MAKING: Mutex<()> = Mutex::new(());

/// The folder that holds the roots: `NVC_ENGINE_ROOTS` when set, else `engine-roots` in
/// the machine's test cache ([`tests_cache`]), so a machine makes them once for every
/// checkout and build.
fn roots_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::var_os("NVC_ENGINE_ROOTS")
            .filter(|d| !d.is_empty())
            .map_or_else(|| tests_cache().join("engine-roots"), PathBuf::from)
    })
    .clone()
}

impl EngineRoot {
    /// Debian 13 (trixie): podman 5.4, Docker 26.1 with containerd 1.7, runc 1.1, crun
    /// 1.21. Made on first use (about a minute and 900 MB from the Debian mirror), then
    /// reused.
    pub fn debian13() -> Result<EngineRoot, EngineError> {
        EngineRoot::make("trixie")
    }

    /// Debian 14 (forky): podman 5.8, Docker 28 with containerd 2.1, runc 1.3, crun 1.28.
    /// Made on first use like [`EngineRoot::debian13`].
    pub fn debian14() -> Result<EngineRoot, EngineError> {
        EngineRoot::make("forky")
    }

    /// The root of `suite`, made by `scripts/engine-roots.sh` when it is not made yet
    /// (`scripts/test.sh` runs the script while cargo builds, so a test finds it made).
    fn make(suite: &'static str) -> Result<EngineRoot, EngineError> {
        let _guard = MAKING.lock().unwrap_or_else(|e| e.into_inner());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/engine-roots.sh");
        let dir = roots_dir();
        std::fs::create_dir_all(&dir).map_err(EngineError::io("create directory", &dir))?;
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .arg(suite)
            .env("NVC_ENGINE_ROOTS", &dir);
        let out = run_command(&mut command, &dir, std::time::Duration::from_secs(1800));
        EngineError::check("make a Debian root with its engines", out)?;
        let path = dir.join(suite);
        std::fs::metadata(&path).map_err(EngineError::io("find the made root", &path))?;
        Ok(EngineRoot { path, suite })
    }

    /// `unshare` running `program ARGS...` inside the root, with `binds` (host folders,
    /// absolute) at the same paths there, and `/etc/cdi` the host folder `cdi` when given.
    /// Add the program's arguments to the command.
    pub fn command(&self, program: &str, binds: &[&Path], cdi: Option<&Path>) -> Command {
        let mut view = RootView {
            binds: binds.iter().map(|b| b.to_path_buf()).collect(),
            ..RootView::default()
        };
        if let Some(cdi) = cdi {
            view.placed
                .push((cdi.to_path_buf(), PathBuf::from("/etc/cdi")));
        }
        self.command_in(program, &view)
    }

    /// `unshare` running `program ARGS...` inside the root as `view` says: in its own
    /// mount and PID namespaces whose root is the root folder (`pivot_root`), with the
    /// host's `/proc`, `/sys`, `/dev`, a fresh `/run` and `/tmp`. Add the program's
    /// arguments to the command.
    pub fn command_in(&self, program: &str, view: &RootView) -> Command {
        let binds: Vec<String> = view
            .binds
            .iter()
            .map(|b| b.to_string_lossy().into_owned())
            .collect();
        let placed: Vec<String> = view
            .placed
            .iter()
            .cloned()
            .chain(view.user.iter().flat_map(RootUser::files))
            .map(|(host, at)| format!("{}={}", at.display(), host.display()))
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
                NAMESPACE_SCRIPT,
                "sh",
                program,
            ])
            .env("NVC_ENGINE_ROOT", &self.path)
            .env("NVC_ENGINE_BINDS", binds.join(" "))
            .env("NVC_ENGINE_PLACED", placed.join(" "))
            .env(
                "NVC_ENGINE_DEV_NODES",
                view.dev_nodes.as_deref().unwrap_or(Path::new("")),
            )
            .env(
                "NVC_ENGINE_LEGACY_CGROUPS",
                if view.legacy_cgroups { "1" } else { "" },
            )
            .env(
                "NVC_ENGINE_RESTART",
                if view.restart_always { "1" } else { "" },
            )
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            );
        match &view.user {
            Some(user) => {
                command
                    .env("NVC_ENGINE_UID", user.uid.to_string())
                    .env("HOME", &user.home)
                    .env("USER", &user.name)
                    .env("LOGNAME", &user.name)
                    .env("XDG_RUNTIME_DIR", user.runtime_dir());
            }
            None => {
                command.env("NVC_ENGINE_UID", "");
            }
        }
        command
    }

    /// A user `name` with uid and gid `uid` and the subordinate ids from
    /// `SUBORDINATE_START`, for the commands whose [`RootView`] names it; its files and home
    /// are made under `dir`.
    pub fn user(&self, dir: &Path, name: &str, uid: u32) -> Result<RootUser, EngineError> {
        let etc = super::mkdirs(&dir.join("etc"))?;
        let home = super::mkdirs(&dir.join("home"))?;
        std::os::unix::fs::chown(&home, Some(uid), Some(uid))
            .map_err(EngineError::io("change the owner of", &home))?;
        let added = [
            format!(
                "{name}:x:{uid}:{uid}:rootless engine user:{}:/bin/sh",
                home.display()
            ),
            format!("{name}:x:{uid}:"),
            format!("{name}:{SUBORDINATE_START}:65536"),
            format!("{name}:{SUBORDINATE_START}:65536"),
        ];
        for (file, line) in USER_FILES.iter().zip(added) {
            // A file of the root must be there to be bound over.
            let original = self.path.join("etc").join(file);
            let text =
                std::fs::read_to_string(&original).map_err(EngineError::io("read", &original))?;
            let copy = etc.join(file);
            let sep = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            std::fs::write(&copy, format!("{text}{sep}{line}\n"))
                .map_err(EngineError::io("write", &copy))?;
        }
        Ok(RootUser {
            name: name.to_string(),
            uid,
            home,
            etc,
        })
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
