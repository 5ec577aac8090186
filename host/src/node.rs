//! The node installer's effects (`nvc node`): reading and restoring the watched folders
//! ([`snapshot`], [`apply`]), entering the node's root ([`enter_root`]), finding and
//! signalling the engine ([`engine_pid`], [`signal_engine`]), asking systemd to restart
//! it ([`systemctl_restart`]) and waiting for the end ([`block_stop_signals`],
//! [`wait_for_stop`]).
//!
//! Everything here runs on the node's own files, which the node's admin owns: nothing a
//! container image or a pod chose is read.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use libnvc::node::{Content, Entry, Step, Tree};

use crate::files::{self, FileError, Symlink, WriteOptions};

/// Why a node operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A file operation failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a file failed.
    #[error(transparent)]
    File(#[from] FileError),
    /// The record holds a file whose bytes cannot be decoded.
    #[error("the install record's copy of {0} is damaged (not hex): restore the file by hand")]
    Damaged(PathBuf),
    /// The engine's socket has no process behind it that this process can see.
    #[error(
        "cannot tell which process serves {socket}: the socket's peer is pid 0, outside this \
         PID namespace; run the installer in the node's PID namespace (hostPID: true) or use \
         --reload systemd or none"
    )]
    PeerHidden {
        /// The socket.
        socket: PathBuf,
    },
    /// The engine did not come back after SIGHUP.
    #[error(
        "no new engine serves {socket} {secs}s after SIGHUP ({last}): is it run by a \
         systemd unit with Restart=always? restart it by hand, or use --reload systemd"
    )]
    NotBack {
        /// The socket.
        socket: PathBuf,
        /// How long was waited.
        secs: u64,
        /// The last answer.
        last: String,
    },
    /// systemctl failed.
    #[error("`systemctl restart {unit}` on the node failed ({status}): {stderr}")]
    Systemctl {
        /// The unit.
        unit: String,
        /// Its exit status.
        status: String,
        /// What it said.
        stderr: String,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> NodeError {
    let path = path.to_path_buf();
    move |source| NodeError::Io { op, path, source }
}

/// Every entry at and under each of `roots` (a root that does not exist adds nothing).
/// Symbolic links are recorded, not followed.
pub fn snapshot(roots: &[PathBuf]) -> Result<Tree, NodeError> {
    let mut tree = Tree::new();
    for root in roots {
        walk(root, &mut tree)?;
    }
    Ok(tree)
}

fn walk(path: &Path, tree: &mut Tree) -> Result<(), NodeError> {
    let Some(entry) = entry_at(path)? else {
        return Ok(());
    };
    let is_dir = matches!(entry, Entry::Dir { .. });
    tree.insert(path.to_path_buf(), entry);
    if is_dir {
        let mut names: Vec<PathBuf> = fs::read_dir(path)
            .map_err(io_error("list", path))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io_error("list", path))?;
        names.sort();
        for child in names {
            walk(&child, tree)?;
        }
    }
    Ok(())
}

/// The entry at `path`, `None` when there is none.
pub fn entry_at(path: &Path) -> Result<Option<Entry>, NodeError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("stat", path)(e)),
    };
    let (uid, gid) = (meta.uid(), meta.gid());
    let kind = meta.file_type();
    Ok(Some(if kind.is_symlink() {
        Entry::Symlink {
            target: fs::read_link(path).map_err(io_error("read the link", path))?,
            uid,
            gid,
        }
    } else if kind.is_dir() {
        Entry::Dir {
            mode: meta.mode() & 0o7777,
            uid,
            gid,
        }
    } else {
        // Sockets, pipes and devices have no place in an engine's config folder; their
        // bytes would be a read that blocks. Recorded as empty files they are left alone
        // unless the install changed them, which it does not.
        let bytes = if kind.is_file() {
            fs::read(path).map_err(io_error("read", path))?
        } else {
            Vec::new()
        };
        Entry::File {
            mode: meta.mode() & 0o7777,
            uid,
            gid,
            content: Content::of(bytes),
        }
    }))
}

/// Does one uninstall step; a folder that is not empty (someone put a file there) is
/// left, with a warning, as is a path kept for someone else's change.
pub fn apply(step: &Step) -> Result<(), NodeError> {
    match step {
        Step::Keep(path) => {
            log::warn!(
                "{} changed after nvc was installed: left as it is",
                path.display()
            );
            Ok(())
        }
        Step::Remove(path) => remove(path),
        Step::Restore(path, entry) => restore(path, entry),
    }
}

fn remove(path: &Path) -> Result<(), NodeError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("stat", path)(e)),
    };
    if meta.is_dir() {
        match fs::remove_dir(path) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                log::warn!(
                    "{} holds files nvc did not put there: left as it is",
                    path.display()
                );
                Ok(())
            }
            Err(e) => Err(io_error("remove", path)(e)),
        }
    } else {
        fs::remove_file(path).map_err(io_error("remove", path))
    }
}

fn restore(path: &Path, entry: &Entry) -> Result<(), NodeError> {
    // Whatever is there now and is not of the entry's kind goes first.
    let now = entry_at(path)?;
    let same_kind = matches!(
        (&now, entry),
        (Some(Entry::File { .. }), Entry::File { .. })
            | (Some(Entry::Dir { .. }), Entry::Dir { .. })
    );
    if now.is_some() && !same_kind {
        if matches!(now, Some(Entry::Dir { .. })) {
            fs::remove_dir_all(path).map_err(io_error("remove", path))?;
        } else {
            fs::remove_file(path).map_err(io_error("remove", path))?;
        }
    }
    match entry {
        Entry::File {
            mode,
            uid,
            gid,
            content,
        } => {
            let bytes = content
                .bytes()
                .ok_or_else(|| NodeError::Damaged(path.to_path_buf()))?;
            files::remove_stale_temp_files(path, Symlink::Replace)?;
            files::write_atomic(path, &bytes, &WriteOptions::new(*mode & 0o777))?;
            owner_and_mode(path, *uid, *gid, Some(*mode))
        }
        Entry::Dir { mode, uid, gid } => {
            if now.is_none() {
                fs::create_dir(path).map_err(io_error("create", path))?;
            }
            owner_and_mode(path, *uid, *gid, Some(*mode))
        }
        Entry::Symlink { target, uid, gid } => {
            std::os::unix::fs::symlink(target, path).map_err(io_error("link", path))?;
            std::os::unix::fs::lchown(path, Some(*uid), Some(*gid))
                .map_err(io_error("change the owner of", path))
        }
    }
}

fn owner_and_mode(path: &Path, uid: u32, gid: u32, mode: Option<u32>) -> Result<(), NodeError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(io_error("change the owner of", path))?;
    // After the chown, which clears set-id bits.
    if let Some(mode) = mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_error("set the permissions of", path))?;
    }
    Ok(())
}

/// Makes `root` (the node's `/`, mounted into the installer's container) this process's
/// root and working folder: from here on every path is the node's.
pub fn enter_root(root: &Path) -> Result<(), NodeError> {
    if root == Path::new("/") {
        return Ok(());
    }
    std::os::unix::fs::chroot(root).map_err(io_error("enter (chroot)", root))?;
    std::env::set_current_dir("/").map_err(io_error("change to", Path::new("/")))
}

/// The pid of the process that listens on the Unix socket `socket`, from the connection's
/// peer credentials (what the kernel recorded when the engine called `listen`).
pub fn engine_pid(socket: &Path) -> Result<u32, NodeError> {
    let stream = UnixStream::connect(socket).map_err(io_error("connect to", socket))?;
    let cred = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|e| io_error("read the peer of", socket)(e.into()))?;
    let pid = cred.pid.as_raw_nonzero().get();
    u32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(NodeError::PeerHidden {
            socket: socket.to_path_buf(),
        })
}

/// Sends SIGHUP to the process serving `socket`; returns its pid.
pub fn signal_engine(socket: &Path) -> Result<u32, NodeError> {
    let pid = engine_pid(socket)?;
    let target = rustix::process::Pid::from_raw(pid as i32).ok_or(NodeError::PeerHidden {
        socket: socket.to_path_buf(),
    })?;
    rustix::process::kill_process(target, rustix::process::Signal::HUP)
        .map_err(|e| io_error("signal the engine behind", socket)(e.into()))?;
    Ok(pid)
}

/// Waits until a process other than `old` serves `socket` (the engine, started again
/// after it exited); returns its pid.
pub fn wait_for_new_engine(
    socket: &Path,
    old: u32,
    timeout: std::time::Duration,
) -> Result<u32, NodeError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match engine_pid(socket) {
            Ok(pid) if pid != old => return Ok(pid),
            result => {
                if std::time::Instant::now() >= deadline {
                    return Err(NodeError::NotBack {
                        socket: socket.to_path_buf(),
                        secs: timeout.as_secs(),
                        last: match result {
                            Ok(pid) => format!("pid {pid} still serves it"),
                            Err(e) => libnvc::report::error_chain(&e),
                        },
                    });
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `systemctl restart UNIT`, the node's own systemctl, run in the node's root (the
/// caller has entered it). `SYSTEMD_IGNORE_CHROOT`: systemctl ignores requests from
/// what looks like a chroot, which a root entered from a container can.
pub fn systemctl_restart(unit: &str) -> Result<(), NodeError> {
    let out = Command::new("systemctl")
        .args(["restart", unit])
        .env("SYSTEMD_IGNORE_CHROOT", "1")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .map_err(io_error("run", Path::new("systemctl")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(NodeError::Systemctl {
        unit: unit.to_string(),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT (the kubelet's stop, ^C), so that [`wait_for_stop`] takes
/// them when it is ready to: one that comes earlier waits. Call before starting any
/// thread; children inherit the mask.
pub fn block_stop_signals() -> Result<(), NodeError> {
    let set = stop_signals();
    // SAFETY: pthread_sigmask reads the set passed and writes no old set.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io_error("block", Path::new("SIGTERM"))(
            io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

/// Waits for SIGTERM or SIGINT (blocked by [`block_stop_signals`]); returns its name.
pub fn wait_for_stop() -> Result<&'static str, NodeError> {
    let set = stop_signals();
    let mut sig: libc::c_int = 0;
    // SAFETY: sigwait reads the set and writes the signal number to `sig`.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io_error("wait for", Path::new("SIGTERM"))(
            io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::node::Record;

    #[test]
    fn a_tree_restored_from_its_record_is_the_same_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("etc");
        fs::create_dir(&root).unwrap();
        fs::write(root.join("config.toml"), "version = 2\n").unwrap();
        fs::set_permissions(root.join("config.toml"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(root.join("binary"), [0xffu8, 0, 1]).unwrap();
        std::os::unix::fs::symlink("config.toml", root.join("link")).unwrap();
        let roots = [root.clone()];
        let before = snapshot(&roots).unwrap();

        // What an install does: change a file, make a folder and files, drop a link.
        fs::write(root.join("config.toml"), "version = 2\nimports = []\n").unwrap();
        fs::create_dir(root.join("conf.d")).unwrap();
        fs::write(root.join("conf.d/99-nvc.toml"), "# nvc\n").unwrap();
        fs::remove_file(root.join("link")).unwrap();
        fs::remove_file(root.join("binary")).unwrap();
        let after = snapshot(&roots).unwrap();
        let record = Record {
            version: "0".into(),
            engine: "containerd".into(),
            watched: roots.to_vec(),
            originals: before.clone(),
            installed: Some(after.clone()),
        };
        for step in record.uninstall_steps(&after) {
            apply(&step).unwrap();
        }
        assert_eq!(snapshot(&roots).unwrap(), before);
        let mode = fs::metadata(root.join("config.toml")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read(root.join("binary")).unwrap(), vec![0xff, 0, 1]);
    }

    #[test]
    fn a_folder_holding_someone_elses_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("conf.d");
        fs::create_dir(&made).unwrap();
        fs::write(made.join("site.toml"), "x").unwrap();
        apply(&Step::Remove(made.clone())).unwrap();
        assert!(made.join("site.toml").exists());
    }

    #[test]
    fn the_engine_is_the_socket_s_listener() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(engine_pid(&socket).unwrap(), std::process::id());
        let missing = dir.path().join("none.sock");
        let err = engine_pid(&missing).unwrap_err();
        assert!(err.to_string().contains("connect to"), "{err}");
    }
}
