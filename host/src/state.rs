//! The host's state, with one owner: [`StateDir`] is the only code that makes a path in
//! nvc's state folder (`[hook] state-dir`, `/run/nvc`) or its lease folder (`[leases]
//! dir`, `/run/nvc/leases`). Both are root's, on the host's `/run` (a tmpfs: a reboot
//! empties them, as it ends every container they describe); no container reaches them.
//!
//! ```text
//! <state-dir>/
//!   driver-files-<roots hash>.json    the driver's files as the last full discovery found
//!                                     them (files_cache), one per set of driver roots
//!   rootfs/                           mode 0700
//!     <dev>-<ino>/                    one per rootfs (its device and inode, hex) that a
//!                                     container with a record is on; gone with the last
//!       lock                          the rootfs lock (flock), taken by the prestart
//!                                     hook, the poststop hook and nvc attach
//!       <container key>/              one container's record (trace): record.json, its
//!                                     journal `made`, the image's ld.so.cache.orig
//!   attached/<container key>.json     what nvc attach granted a running container
//!   gpu-health.json                   the GPUs' health as NVML last reported it (`nvc
//!                                     health update`), read at every GPU start
//! <leases dir>/                       GPU leases (leases): .lock, <id>.lease,
//!                                     <id>.shared-lease
//! ```
//!
//! Names cannot collide: a container's key is a readable part of its id (never relied
//! on) and 128 bits of SHA-256 over its id and bundle (or runtime state folder), each
//! length-prefixed; the full id and bundle are stored inside and checked whenever a
//! record is read, so a record is only ever used by the container it belongs to. Lease
//! files are named by the id itself (runc's ids are `[A-Za-z0-9_+.-]`, which names a
//! file as it is).
//!
//! The folder is bounded: a rootfs's folder holds the records of the containers on it
//! that have not ended, and is removed, lock and all, by whoever leaves it empty while
//! holding its lock ([`RootfsState`]); nothing on the start or poststop path lists more
//! than one rootfs's folder and the lease folder (one file per GPU holder, see leases).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::files::{errno_error, io_error, FileError};

/// The folder of the rootfs folders.
const ROOTFS: &str = "rootfs";
/// The lock file in a rootfs's folder.
const LOCK: &str = "lock";
/// The folder of nvc attach's records.
const ATTACHED: &str = "attached";
/// The GPU health record.
const HEALTH: &str = "gpu-health.json";
/// How often taking a rootfs's lock is tried again when its folder was removed under it.
const ATTEMPTS: usize = 64;
/// The most of an id shown in a key.
const SHOWN: usize = 48;

/// Why the state folder could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file or folder of the state folder could not be made, opened or locked.
    #[error("nvc's state folder ([hook] state-dir in the nvc config)")]
    Io(#[from] FileError),
    /// A rootfs's folder kept being removed while its lock was taken.
    #[error("cannot lock {0}: it was removed under this process {ATTEMPTS} times in a row")]
    Raced(PathBuf),
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> StateError {
    let fail = errno_error(op, path);
    move |e| StateError::Io(fail(e))
}

/// nvc's state on the host: the state folder and the lease folder, and every name in
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
    leases: PathBuf,
}

impl StateDir {
    /// The state in `root` (`[hook] state-dir`) with its leases in `leases` (`[leases]
    /// dir`).
    pub fn new(root: &Path, leases: &Path) -> StateDir {
        StateDir {
            root: root.to_path_buf(),
            leases: leases.to_path_buf(),
        }
    }

    /// The state that `config` names.
    pub fn of(config: &nvc_config::Config) -> StateDir {
        StateDir::new(&config.hook.state_dir, &config.leases.dir)
    }

    /// The state folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The lease folder.
    pub fn leases(&self) -> &Path {
        &self.leases
    }

    /// The lease file `name` (one of `libnvc::lease::file_name`'s) in the lease folder.
    pub fn lease_file(&self, name: &str) -> PathBuf {
        self.leases.join(name)
    }

    /// The driver-files cache's entry for the driver roots `roots` (the driver root, the
    /// device root and the proc root).
    pub fn files_cache_entry(&self, roots: &[&Path]) -> PathBuf {
        let parts: Vec<&[u8]> = roots
            .iter()
            .map(|p| p.as_os_str().as_encoded_bytes())
            .collect();
        self.root
            .join(format!("driver-files-{}.json", hex(&digest(&parts))))
    }

    /// The GPU health record (`libnvc::health::HealthRecord`), one for the host: written
    /// whole by `nvc health update` (temp file + rename), read by every GPU start.
    pub fn health_record(&self) -> PathBuf {
        self.root.join(HEALTH)
    }

    /// The record of what `nvc attach` granted container `id` of the runtime whose state
    /// folder is `runtime_root`.
    pub fn attach_record(&self, runtime_root: &Path, id: &str) -> PathBuf {
        self.root.join(ATTACHED).join(format!(
            "{}.json",
            key(id, runtime_root.as_os_str().as_encoded_bytes())
        ))
    }

    /// Every container record folder in the state folder (`rootfs/<dev>-<ino>/<key>`),
    /// for reading only (`nvc ps`): no lock is taken and nothing is made, so a folder may
    /// be gone, or its record half-written, by the time it is read. No state folder: none.
    pub fn record_folders(&self) -> Result<Vec<PathBuf>, StateError> {
        let parent = self.root.join(ROOTFS);
        let mut folders = Vec::new();
        for rootfs in list_folders(&parent)? {
            let dir = parent.join(&rootfs);
            folders.extend(
                list_folders(&dir)?
                    .into_iter()
                    .filter(|n| n != LOCK)
                    .map(|n| dir.join(n)),
            );
        }
        Ok(folders)
    }

    /// The folder of `rootfs`'s records, made where missing, with its lock held until the
    /// value is dropped ([`RootfsState`]); waits for the lock (the hook's deadline bounds
    /// the wait).
    pub fn lock_rootfs(&self, rootfs: &Path) -> Result<RootfsState, StateError> {
        let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
        let parent_path = self.root.join(ROOTFS);
        let parent = open_or_make(&self.root, &parent_path)?;
        let name = format!("{:x}-{:x}", st.st_dev, st.st_ino);
        let path = parent_path.join(&name);
        for _ in 0..ATTEMPTS {
            match rustix::fs::mkdirat(&parent, name.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io("create", &path)(e)),
            }
            let dir = match rustix::fs::openat(
                &parent,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                // Removed by the last holder between the two calls.
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io("open", &path)(e)),
            };
            let lock = match rustix::fs::openat(
                &dir,
                LOCK,
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => fd,
                // The folder was removed: files cannot be made in it any more.
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io("open", &path.join(LOCK))(e)),
            };
            loop {
                match rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive) {
                    Ok(()) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(io("lock", &path.join(LOCK))(e)),
                }
            }
            // The holder before may have removed the folder and its lock while this
            // process waited: then what it holds locks nothing, and it starts again.
            if same_file(&parent, &name, &dir) && same_file(&dir, LOCK, &lock) {
                return Ok(RootfsState {
                    path,
                    parent,
                    name,
                    dir,
                    _lock: File::from(lock),
                    dev: st.st_dev,
                    ino: st.st_ino,
                });
            }
        }
        Err(StateError::Raced(path))
    }
}

/// The names of the folders in `path` (none where it is missing), never through a link.
fn list_folders(path: &Path) -> Result<Vec<String>, StateError> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(io("open", path)(e)),
    };
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd).map_err(io("list", path))? {
        let entry = entry.map_err(io("list", path))?;
        // A file system without d_type says Unknown: opening it later tells.
        if !matches!(
            entry.file_type(),
            rustix::fs::FileType::Directory | rustix::fs::FileType::Unknown
        ) {
            continue;
        }
        match entry.file_name().to_str() {
            Ok("." | "..") | Err(_) => {}
            Ok(name) => names.push(name.to_string()),
        }
    }
    Ok(names)
}

/// Whether `name` in `dir` is the file `fd` has open.
fn same_file(dir: &impl AsFd, name: &str, fd: &impl AsFd) -> bool {
    match (
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW),
        rustix::fs::fstat(fd),
    ) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// Opens the folder `path` (in `root`, which is made too where missing), making it (mode
/// 0700) where missing; never through a link.
fn open_or_make(root: &Path, path: &Path) -> Result<OwnedFd, StateError> {
    let open = || {
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    match open() {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io("open", path)(e)),
    }
    std::fs::create_dir_all(root).map_err(io_error("create", root))?;
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io("create", path)(e)),
    }
    open().map_err(io("open", path))
}

/// A container's key in the state folder: `<shown>.<hash>`, where `<shown>` is the start
/// of `id` with every byte but `[A-Za-z0-9-]` as `_` (for people; never relied on), and
/// `<hash>` 128 bits of SHA-256 over `id` and `scope` (its bundle, or its runtime's
/// state folder), each length-prefixed: distinct for distinct pairs.
pub fn key(id: &str, scope: &[u8]) -> String {
    let shown: String = id
        .bytes()
        .take(SHOWN)
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' => char::from(b),
            _ => '_',
        })
        .collect();
    format!("{shown}.{}", hex(&digest(&[id.as_bytes(), scope])))
}

/// 128 bits of SHA-256 over `parts`, each length-prefixed: distinct for distinct lists.
fn digest(parts: &[&[u8]]) -> [u8; 16] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    let mut out = [0; 16];
    out.copy_from_slice(&hash.finalize()[..16]);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One rootfs's folder of records, with its lock held: a prestart hook holds it from
/// before it makes anything in the rootfs until its record is written, a poststop hook
/// while it takes things away, `nvc attach` from opening the record to saving it. When
/// dropped with no record left in it, the folder and its lock file are removed (by the
/// holder, so that a waiter finds the lock it gets is no longer the folder's and takes it
/// again).
#[derive(Debug)]
pub struct RootfsState {
    path: PathBuf,
    parent: OwnedFd,
    name: String,
    dir: OwnedFd,
    _lock: File,
    dev: u64,
    ino: u64,
}

impl RootfsState {
    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder, opened.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// The rootfs's device and inode when the lock was taken.
    pub fn rootfs_id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The record folder name of container `id` of `bundle`.
    pub fn record_name(id: &str, bundle: &Path) -> String {
        key(id, bundle.as_os_str().as_encoded_bytes())
    }

    /// The names of the record folders in this rootfs's folder.
    pub fn records(&self) -> Result<Vec<String>, StateError> {
        let entries = rustix::fs::Dir::read_from(&self.dir).map_err(io("list", &self.path))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("list", &self.path))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name != "." && name != ".." && name != LOCK {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
}

impl Drop for RootfsState {
    fn drop(&mut self) {
        if !self.records().is_ok_and(|r| r.is_empty()) {
            return;
        }
        // The lock file first: a waiter that then gets the old one sees it is not the
        // folder's; one that opens the folder after it is gone makes it anew.
        if let Err(e) = rustix::fs::unlinkat(&self.dir, LOCK, AtFlags::empty()) {
            log::debug!("{}: cannot remove the lock: {e}", self.path.display());
            return;
        }
        match rustix::fs::unlinkat(&self.parent, self.name.as_str(), AtFlags::REMOVEDIR) {
            // Another process made its lock or a record in it since: it stays theirs.
            Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => log::debug!("cannot remove {}: {e}", self.path.display()),
        }
    }
}

#[cfg(test)]
mod tests;
