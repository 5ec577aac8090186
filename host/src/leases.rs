//! GPU leases on the host: the prestart hook records that a container holds its GPUs
//! (shared, or exclusively), and refuses a container that asks for a GPU another running
//! container holds exclusively, or asks exclusively for one another running container
//! uses. `libnvc::lease` decides; this module does the files.
//!
//! The lease folder (`[leases] dir`, `/run/nvc/leases`: a tmpfs, so a reboot ends every
//! lease) holds one file per container that holds GPUs (`<container id>.lease` for an
//! exclusive holder, `<container id>.shared-lease` for a shared one, written whole with
//! [`crate::files::write_atomic`], listing its GPUs), and `.lock`, which [`take`] holds
//! (`flock`) around the whole check-and-take, so that of concurrent starts asking for one
//! GPU exactly one wins. A start lists the folder once and writes one file, however many
//! GPUs it asks for; a shared start reads only the exclusive holders' files, the only
//! ones that can refuse it, so the lock is held about as long whatever the number of
//! containers sharing GPUs. A lease ends with its container: the poststop hook removes
//! its file ([`end`]), and where no poststop hook runs (a killed runtime, Docker's
//! `--gpus`, Kubernetes' containers), a holder is live only while a process with its pid
//! and start time runs, and its file is removed as stale by a later start: an exclusive
//! start reads and sweeps every file, a shared one [`SWEPT`] shared files picked at
//! random, so that stale files stay about as many as live ones. Nothing the container
//! controls is read: the files are root's, and still opened without following links; a
//! lease file that is garbage, and the per-GPU files of format version 1, are logged and
//! removed. The hook's deadline bounds the wait for the lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use libnvc::discover::Driver;
use libnvc::edits::{self, EditsError};
use libnvc::lease::{self, Conflict, Entry, GpuRef, Holder, LeaseFile, Liveness};
use libnvc::request::{Request, VISIBLE_DEVICES};

use crate::files::{self, FileError, WriteOptions};
use crate::state::StateDir;

/// How many other shared holders' files a shared start reads to remove those whose
/// holder ended: two, so that with one new file per start the stale ones stay about as
/// many as the live ones.
pub const SWEPT: usize = 2;

/// Why GPU leases could not be checked or taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// A lease file or the lease folder could not be read, written, listed or locked.
    #[error("GPU leases ([leases] dir in the nvc config)")]
    Io(#[from] FileError),
    /// The lease folder cannot be written here, and the container asks for its GPUs
    /// exclusively.
    #[error(
        "{asked} asks for exclusive GPUs, but the GPU lease folder {path} is not writable \
         here (a rootless runtime?): start the container as root, or without {asked}"
    )]
    Unwritable {
        /// The folder.
        path: PathBuf,
        /// What asked for exclusivity.
        asked: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The lease folder is a link or not a folder.
    #[error("the GPU lease folder {0} is a symlink or not a folder: remove it, or set [leases] dir in the nvc config")]
    NotAFolder(PathBuf),
    /// A GPU UUID that cannot be recorded.
    #[error("GPU {index} has the UUID {uuid:?}, which cannot be recorded in a GPU lease")]
    BadUuid {
        /// The GPU's index.
        index: u32,
        /// Its UUID.
        uuid: String,
    },
    /// A container id that cannot be recorded.
    #[error(
        "the container id {0:?} cannot be recorded in a GPU lease (expected letters, digits, \
         _ + - . and at most 1024 bytes)"
    )]
    BadContainerId(String),
    /// More GPUs than a lease file holds.
    #[error(
        "the container asks for {0} GPUs; a GPU lease holds at most {max}: ask for fewer",
        max = lease::MAX_GPUS
    )]
    TooManyGpus(usize),
    /// The container's process is not in `/proc`.
    #[error("cannot read the start time of the container's process {pid} in /proc/{pid}/stat")]
    NoProcess {
        /// Its pid.
        pid: i32,
    },
    /// The GPUs could not be selected.
    #[error(transparent)]
    Select(#[from] EditsError),
    /// Another container holds the GPU.
    #[error(transparent)]
    Conflict(#[from] Conflict),
}

/// The leases a container took, to give back if its start fails after all.
#[derive(Debug)]
pub struct Taken {
    state: StateDir,
    me: Holder,
}

/// Checks and takes the leases of the GPUs `request` selects on `driver` for container
/// `container`, whose init process is `pid` (on the host). `Ok(None)`: nothing to
/// take (no GPU selected), or the lease folder is not writable here and the request is
/// shared (a rootless runtime; logged).
pub fn take(
    state: &StateDir,
    container: &str,
    pid: i32,
    request: &Request,
    driver: &Driver,
) -> Result<Option<Taken>, LeaseError> {
    let selected = edits::select(driver, &request.devices, VISIBLE_DEVICES)?;
    let gpus: Vec<GpuRef> = selected
        .all_gpus()
        .into_iter()
        .map(|g| GpuRef {
            index: g.index,
            uuid: &g.uuid,
        })
        .collect();
    if gpus.is_empty() {
        return Ok(None);
    }
    if !lease::valid_container_id(container) {
        let mut shown = container.to_string();
        shown.truncate(lease::MAX_CONTAINER_ID.min(shown.len()));
        return Err(LeaseError::BadContainerId(shown));
    }
    if let Some(g) = gpus.iter().find(|g| !lease::valid_gpu_uuid(g.uuid)) {
        return Err(LeaseError::BadUuid {
            index: g.index,
            uuid: g.uuid.to_string(),
        });
    }
    if gpus.len() > lease::MAX_GPUS {
        return Err(LeaseError::TooManyGpus(gpus.len()));
    }
    let start_time = crate::process::stat(pid)
        .map(|s| s.start_time)
        .ok_or(LeaseError::NoProcess { pid })?;
    let me = Holder {
        container: container.to_string(),
        pid,
        start_time,
        since: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
        exclusive: request.exclusive,
    };
    take_for(state, me, &gpus)
}

/// [`take`] once the holder `me` and its GPUs are known.
fn take_for(state: &StateDir, me: Holder, gpus: &[GpuRef]) -> Result<Option<Taken>, LeaseError> {
    let dir = state.leases();
    let _lock = match lock(state) {
        Ok(lock) => lock,
        Err(source) if not_permitted(&source) => {
            if let Some(by) = me.exclusive {
                return Err(LeaseError::Unwritable {
                    path: dir.to_path_buf(),
                    asked: by.name(),
                    source,
                });
            }
            log::debug!(
                "no GPU lease taken: {} is not writable here ({source})",
                dir.display()
            );
            return Ok(None);
        }
        Err(source) => return lock_error(dir, source),
    };
    let others = live_holders(state, &me)?;
    let file = lease::claim(&me, gpus, &others)?;
    let own = lease::file_name(&me.container, me.exclusive.is_some());
    write_lease(&state.lease_file(&own), &file)?;
    log::debug!(
        "container {} holds GPUs {} ({})",
        me.container,
        gpus.iter().map(|g| g.uuid).collect::<Vec<_>>().join(", "),
        me.exclusive.map_or("shared", |_| "exclusively")
    );
    Ok(Some(Taken {
        state: state.clone(),
        me,
    }))
}

/// The lease files of the holders in `dir` that still run, other than `me`, that can
/// refuse `me`: every holder's for an exclusive `me`, the exclusive holders' (and an
/// earlier nvc's) for a shared one. In the same one listing of the folder, removes what
/// killed writers left, the files it reads of holders that ended, earlier records of
/// `me`, garbage, and version 1's per-GPU files; a shared `me` also reads [`SWEPT`] other
/// shared holders' files, picked at random, and removes those whose holder ended. Called
/// with the lock held.
fn live_holders(state: &StateDir, me: &Holder) -> Result<Vec<LeaseFile>, LeaseError> {
    let dir = state.leases();
    let list_error = |source| LeaseError::Io(files::io_error("list", dir)(source));
    let own = lease::file_name(&me.container, me.exclusive.is_some());
    let mut live = Vec::new();
    let mut unread = Vec::new();
    for entry in fs::read_dir(dir).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        let name = entry.file_name();
        // A writer killed before its rename left a temporary file.
        if files::remove_if_stale_temp_file(dir, &name)? {
            continue;
        }
        let Some(name) = name.to_str() else {
            continue;
        };
        let path = state.lease_file(name);
        match lease::entry(name) {
            Entry::Lock | Entry::Other => {}
            Entry::Earlier => {
                log::info!(
                    "removing {}: a GPU lease file of an earlier nvc (one file per GPU)",
                    path.display()
                );
                remove_garbage(&path)?;
            }
            // Replaced by this start's file, whatever it holds; only a folder would stop
            // the rename over it.
            Entry::Lease(_) | Entry::Shared(_) if name == own => {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    log::warn!("replacing {}: a folder, not a lease file", path.display());
                    fs::remove_dir(&path).map_err(|source| {
                        LeaseError::Io(files::io_error(
                            "remove the folder in place of a lease file",
                            &path,
                        )(source))
                    })?;
                }
            }
            // A shared holder cannot refuse a shared request: not read, but maybe swept.
            Entry::Shared(id) if me.exclusive.is_none() => {
                unread.push((path, id.to_string()));
            }
            Entry::Lease(id) | Entry::Shared(id) => {
                if let Some(file) = read_live(&path, id, me)? {
                    live.push(file);
                }
            }
        }
    }
    for (path, id) in pick(unread, SWEPT) {
        read_live(&path, &id, me)?;
    }
    Ok(live)
}

/// The lease file at `path` of container `id` when its holder still runs and is not
/// `me`; otherwise the file is removed (garbage, an earlier record of `me`, a holder that
/// ended). Called with the lock held.
fn read_live(path: &Path, id: &str, me: &Holder) -> Result<Option<LeaseFile>, LeaseError> {
    match read_lease(path, id) {
        Found::Missing => {}
        Found::Garbage(reason) => {
            log::warn!("removing {}: {reason}", path.display());
            remove_garbage(path)?;
        }
        Found::Lease(file) if lease::supersedes(me, &file.holder) => {
            log::debug!(
                "removing {}: an earlier record of this container's process",
                path.display()
            );
            files::remove(path)?;
        }
        Found::Lease(file) => {
            let liveness = lease::liveness(&file.holder, crate::process::stat(file.holder.pid));
            if liveness.is_live() {
                return Ok(Some(file));
            }
            log::info!(
                "removing the GPU lease of container {}: {}",
                file.holder.container,
                liveness.name()
            );
            files::remove(path)?;
        }
    }
    Ok(None)
}

/// At most `n` of `items`, picked at random.
fn pick<T>(mut items: Vec<T>, n: usize) -> Vec<T> {
    use std::hash::{BuildHasher, Hasher};
    let mut picked = Vec::new();
    for _ in 0..n {
        if items.is_empty() {
            break;
        }
        // RandomState is seeded from the OS for each process.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(picked.len());
        let i = usize::try_from(h.finish() % items.len() as u64).unwrap_or(0);
        picked.push(items.swap_remove(i));
    }
    picked
}

impl Taken {
    /// Gives the leases back: the container did not start. Failures are logged: the
    /// leases are stale anyway once the runtime has removed the container's process.
    pub fn release(self) {
        let result = (|| -> Result<(), LeaseError> {
            let _lock = lock(&self.state).or_else(|e| lock_error(self.state.leases(), e))?;
            let own = lease::file_name(&self.me.container, self.me.exclusive.is_some());
            let path = self.state.lease_file(&own);
            if let Found::Lease(file) = read_lease(&path, &self.me.container) {
                if lease::is_own(&file, &self.me) {
                    files::remove(&path)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            log::warn!(
                "cannot give back the GPU leases of container {}: {}",
                self.me.container,
                libnvc::report::error_chain(&e)
            );
        }
    }
}

/// Ends the leases of container `container`, which has ended (the poststop hook): removes
/// its lease file (shared or exclusive). Kept when its holder still runs: another
/// container with the same id (under another runtime's state folder) took GPUs since.
/// Returns whether a file was removed; none there (a container without GPUs, a rootless
/// runtime) is nothing to do.
pub fn end(state: &StateDir, container: &str) -> Result<bool, LeaseError> {
    let dir = state.leases();
    if !lease::valid_container_id(container) {
        return Ok(false);
    }
    // Without the lock first: most containers that end hold no GPU.
    let mut there = Vec::new();
    for exclusive in [false, true] {
        let path = state.lease_file(&lease::file_name(container, exclusive));
        match fs::symlink_metadata(&path) {
            Ok(_) => there.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(files::io_error("look at", &path)(source).into()),
        }
    }
    if there.is_empty() {
        return Ok(false);
    }
    let _lock = match lock(state) {
        Ok(lock) => lock,
        Err(source) if not_permitted(&source) => {
            log::debug!(
                "GPU lease of container {container} left: {} is not writable here ({source})",
                dir.display()
            );
            return Ok(false);
        }
        Err(source) => return lock_error(dir, source),
    };
    let mut removed = false;
    for path in there {
        removed |= match read_lease(&path, container) {
            Found::Missing => false,
            Found::Garbage(reason) => {
                log::warn!("removing {}: {reason}", path.display());
                remove_garbage(&path)?;
                true
            }
            Found::Lease(file) if is_live(&file.holder) => {
                log::info!(
                    "GPU lease of container {container} kept: its holder (pid {}) still runs, \
                     a container with the same id started since",
                    file.holder.pid
                );
                false
            }
            Found::Lease(_) => files::remove(&path)?,
        };
    }
    Ok(removed)
}

/// One line of `nvc list --leases`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// A holder of a GPU.
    Holder {
        /// The GPU's index when the lease was taken.
        index: u32,
        /// The GPU's UUID.
        gpu: String,
        /// The holder.
        holder: Holder,
        /// Whether it still runs.
        liveness: Liveness,
    },
    /// A file that is no lease file (it is removed when a GPU is next taken).
    Garbage {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Every lease in `dir`, stale ones included: a line per GPU a holder holds, by GPU UUID
/// and then in the order they were taken, then the garbage by file name; a missing
/// folder has none. Reads without the lock: files are replaced whole.
pub fn list(state: &StateDir) -> Result<Vec<Listed>, LeaseError> {
    let dir = state.leases();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(LeaseError::Io(files::io_error("list", dir)(source))),
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let mut held = Vec::new();
    let mut garbage = Vec::new();
    for name in &names {
        let path = state.lease_file(name);
        match lease::entry(name) {
            Entry::Lock | Entry::Other => {}
            Entry::Earlier => garbage.push(Listed::Garbage {
                path,
                reason: "a lease file of an earlier nvc, one file per GPU".into(),
            }),
            Entry::Lease(id) | Entry::Shared(id) => match read_lease(&path, id) {
                Found::Missing => {}
                Found::Garbage(reason) => garbage.push(Listed::Garbage { path, reason }),
                Found::Lease(file) => {
                    let liveness =
                        lease::liveness(&file.holder, crate::process::stat(file.holder.pid));
                    held.extend(file.gpus.into_iter().map(|g| Listed::Holder {
                        index: g.index,
                        gpu: g.uuid,
                        holder: file.holder.clone(),
                        liveness,
                    }));
                }
            },
        }
    }
    held.sort_by(|a, b| list_order(a).cmp(&list_order(b)));
    garbage.sort_by(|a, b| list_order(a).cmp(&list_order(b)));
    held.extend(garbage);
    Ok(held)
}

/// Where a line goes in [`list`].
fn list_order(l: &Listed) -> (&str, u64, &str) {
    match l {
        Listed::Holder { gpu, holder, .. } => (gpu, holder.since, &holder.container),
        Listed::Garbage { path, .. } => (path.to_str().unwrap_or_default(), 0, ""),
    }
}

fn is_live(holder: &Holder) -> bool {
    lease::liveness(holder, crate::process::stat(holder.pid)).is_live()
}

/// A permission error: the folder belongs to another user namespace's root, or is on a
/// read-only file system.
fn not_permitted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EROFS)
}

fn lock_error<T>(dir: &Path, source: io::Error) -> Result<T, LeaseError> {
    Err(LeaseError::Io(files::io_error(
        "lock the GPU leases in",
        dir,
    )(source)))
}

/// Creates the lease folder where missing and holds its lock file until the file is
/// dropped.
fn lock(state: &StateDir) -> io::Result<File> {
    let dir = state.leases();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            LeaseError::NotAFolder(dir.to_path_buf()),
        ));
    }
    // 0600: a user who could open it could hold the lock, and every GPU start with it.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(state.lease_file(lease::LOCK_FILE))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What a lease file's path holds.
enum Found {
    /// Nothing.
    Missing,
    /// Something that is no lease file, and why.
    Garbage(String),
    /// The lease file.
    Lease(LeaseFile),
}

/// The lease file at `path` of container `container`.
fn read_lease(path: &Path, container: &str) -> Found {
    match read_bounded(path) {
        Ok(None) => Found::Missing,
        Ok(Some(bytes)) => match lease::parse(&bytes, container) {
            Ok(file) => Found::Lease(file),
            Err(e) => Found::Garbage(libnvc::report::error_chain(&e)),
        },
        Err(reason) => Found::Garbage(reason),
    }
}

/// Removes what is at `path` in the lease folder, never following a link; a folder only
/// when it is empty (else it stays, logged: it blocks nothing).
fn remove_garbage(path: &Path) -> Result<(), LeaseError> {
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        if let Err(e) = fs::remove_dir(path) {
            log::warn!("cannot remove the folder {}: {e}", path.display());
        }
        return Ok(());
    }
    files::remove(path)?;
    Ok(())
}

/// The bytes of the regular file at `path`, at most [`lease::MAX_LEASE_BYTES`];
/// `Ok(None)` when missing; `Err` says why it is no lease file (a link, not a regular
/// file, too large, unreadable).
fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, String> {
    // O_NOFOLLOW: a link is never followed; O_NONBLOCK: a FIFO does not block the open.
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("a symlink, not a lease file".into())
        }
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if !meta.file_type().is_file() {
        let kind = if meta.is_dir() {
            "a folder"
        } else if meta.file_type().is_fifo() {
            "a FIFO"
        } else {
            "not a regular file"
        };
        return Err(format!("{kind}, not a lease file"));
    }
    // Room for the whole file and one byte more: one read, then one that finds the end.
    let room = meta.len().min(lease::MAX_LEASE_BYTES) + 1;
    let mut bytes = Vec::with_capacity(usize::try_from(room).unwrap_or_default());
    file.take(lease::MAX_LEASE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > lease::MAX_LEASE_BYTES {
        return Err(format!(
            "larger than {} bytes, not a lease file",
            lease::MAX_LEASE_BYTES
        ));
    }
    Ok(Some(bytes))
}

fn write_lease(path: &Path, file: &LeaseFile) -> Result<(), LeaseError> {
    // Readable by all, so that `nvc list --leases` works for users; a link in its place
    // is replaced, never followed.
    // Not synced: a lease lives on the host's /run and dies with the holder, or at
    // reboot, anyway.
    let options = WriteOptions {
        durable: false,
        ..WriteOptions::new(0o644)
    };
    files::write_atomic(path, &lease::render(file), &options)?;
    Ok(())
}

#[cfg(test)]
mod tests;
