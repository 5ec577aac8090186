//! GPU leases on the host: the prestart hook records, for every GPU a container gets,
//! that the container holds it (shared, or exclusively), and refuses a container that
//! asks for a GPU another running container holds exclusively, or asks exclusively for
//! one another running container uses. `libnvc::lease` decides; this module does the
//! files.
//!
//! The lease folder (`[leases] dir`, `/run/nvc/leases`: a tmpfs, so a reboot ends every
//! lease) holds one file per GPU UUID, replaced whole ([`crate::files::write_atomic`]),
//! and `.lock`, which [`take`] holds (`flock`) around the whole check-and-take, so that
//! of concurrent starts asking for one GPU exactly one wins. A lease ends with its
//! container: a holder is live only while a process with its pid and start time runs,
//! and is dropped as stale the next time the file is read. Nothing the container
//! controls is read: the files are root's, and still opened without following links; a
//! file that is no lease file is logged and replaced. The hook's deadline bounds the wait
//! for the lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use libnvc::discover::Driver;
use libnvc::edits::{self, EditsError};
use libnvc::lease::{self, Conflict, GpuRef, Holder, LeaseFile, Liveness, ProcStat};
use libnvc::request::{Request, VISIBLE_DEVICES};

use crate::files::{self, FileError, Symlink, WriteOptions};

/// Why GPU leases could not be checked or taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// A lease file operation failed.
    #[error("cannot {op} {path} (GPU leases, [leases] dir in the nvc config)")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing or sweeping a lease file failed.
    #[error("cannot record a GPU lease")]
    File(#[from] FileError),
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
    /// A GPU UUID that cannot name a file.
    #[error("GPU {index} has the UUID {uuid:?}, which cannot name a lease file")]
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
    dir: PathBuf,
    me: Holder,
    gpus: Vec<String>,
}

/// Checks and takes the leases of the GPUs `request` selects on `driver` for container
/// `container`, whose init process is `pid` (on the host). `Ok(None)`: nothing to
/// take (no GPU selected), or the lease folder is not writable here and the request is
/// shared (a rootless runtime; logged).
pub fn take(
    dir: &Path,
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
    let start_time = process(pid)
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
    let _lock = match lock(dir) {
        Ok(lock) => lock,
        Err(source) if not_permitted(&source) => {
            if let Some(by) = request.exclusive {
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
    let mut updated = Vec::new();
    for gpu in &gpus {
        let path = dir.join(gpu.uuid);
        let existing = read_lease(&path, gpu.uuid)?;
        updated.push((path, lease::claim(existing, *gpu, &me, is_live)?));
    }
    for (path, file) in &updated {
        write_lease(path, file)?;
    }
    log::debug!(
        "container {container} holds GPUs {} ({})",
        gpus.iter().map(|g| g.uuid).collect::<Vec<_>>().join(", "),
        me.exclusive.map_or("shared", |_| "exclusively")
    );
    Ok(Some(Taken {
        dir: dir.to_path_buf(),
        me,
        gpus: gpus.iter().map(|g| g.uuid.to_string()).collect(),
    }))
}

impl Taken {
    /// Gives the leases back: the container did not start. Failures are logged: the
    /// leases are stale anyway once the runtime has removed the container's process.
    pub fn release(self) {
        let result = (|| -> Result<(), LeaseError> {
            let _lock = lock(&self.dir).or_else(|e| lock_error(&self.dir, e))?;
            for uuid in &self.gpus {
                let path = self.dir.join(uuid);
                let Some(file) = read_lease(&path, uuid)? else {
                    continue;
                };
                match lease::release(file, &self.me) {
                    Some(rest) => write_lease(&path, &rest)?,
                    None => {
                        files::remove(&path)?;
                    }
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
    /// A file that is no lease file (it is replaced when its GPU is next taken).
    Garbage {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Every lease in `dir`, stale ones included, in file name order; a missing folder has
/// none. Reads without the lock: files are replaced whole.
pub fn list(dir: &Path) -> Result<Vec<Listed>, LeaseError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LeaseError::Io {
                op: "list",
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let bytes = match read_bounded(&path) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(reason) => {
                out.push(Listed::Garbage { path, reason });
                continue;
            }
        };
        match lease::parse(&bytes, &name) {
            Ok(file) => out.extend(file.holders.into_iter().map(|holder| Listed::Holder {
                index: file.index,
                gpu: file.gpu.clone(),
                liveness: lease::liveness(&holder, process(holder.pid)),
                holder,
            })),
            Err(e) => out.push(Listed::Garbage {
                path,
                reason: libnvc::report::error_chain(&e),
            }),
        }
    }
    Ok(out)
}

fn is_live(holder: &Holder) -> bool {
    lease::liveness(holder, process(holder.pid)).is_live()
}

/// What `/proc/<pid>/stat` says, or `None` when there is no such process.
fn process(pid: i32) -> Option<ProcStat> {
    if pid <= 0 {
        return None;
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    lease::parse_proc_stat(&stat)
}

/// A permission error: the folder belongs to another user namespace's root, or is on a
/// read-only file system.
fn not_permitted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EROFS)
}

fn lock_error<T>(dir: &Path, source: io::Error) -> Result<T, LeaseError> {
    Err(LeaseError::Io {
        op: "lock the GPU leases in",
        path: dir.to_path_buf(),
        source,
    })
}

/// Creates `dir` where missing and holds its lock file until the file is dropped.
fn lock(dir: &Path) -> io::Result<File> {
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
        .open(dir.join(lease::LOCK_FILE))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The lease file at `path` for GPU `uuid`; `None` when there is none, or it is garbage
/// (logged, and left to be replaced).
fn read_lease(path: &Path, uuid: &str) -> Result<Option<LeaseFile>, LeaseError> {
    // A writer killed before its rename left a temporary file.
    files::remove_stale_temp_files(path, Symlink::Replace)?;
    match read_bounded(path) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => match lease::parse(&bytes, uuid) {
            Ok(file) => Ok(Some(file)),
            Err(e) => {
                log::warn!(
                    "replacing {}: {}",
                    path.display(),
                    libnvc::report::error_chain(&e)
                );
                Ok(None)
            }
        },
        Err(reason) => {
            log::warn!("replacing {}: {reason}", path.display());
            // A folder would stop the rename over it; an empty one goes, else say so.
            if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                fs::remove_dir(path).map_err(|source| LeaseError::Io {
                    op: "remove the folder in place of a lease file",
                    path: path.to_path_buf(),
                    source,
                })?;
            }
            Ok(None)
        }
    }
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
    let mut bytes = Vec::new();
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
