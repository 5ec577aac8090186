//! Leaving no trace in the image: what the prestart hook made in a container's rootfs
//! (mount points, folders, links: [`Made`]) and the ld.so.cache it wrote over the image's
//! are recorded on the host, and taken away when the container ends (`nvc-hook
//! poststop`), so that a rootfs reused for another container, or a layer committed from
//! a stopped one, holds nothing nvc put there.
//!
//! The record is a folder per container under the configured state folder
//! (`<hook.state-dir>/containers/<id>-<bundle hash>`, root's, mode 0700, on the host's
//! `/run` by default: a container cannot reach it, and a reboot empties it): `record.json`
//! and, where the image had one, `ld.so.cache.orig`. The hook opens it before it enters the
//! container's mount namespace and writes it through that folder's fd.
//!
//! Undoing takes away only what is still as nvc made it: an empty regular file, an empty
//! folder, a link to the same target; the cache only if it is still the one written (a
//! user's own `ldconfig` since then is theirs). Everything is resolved inside the rootfs
//! as the hook resolves it ([`ContainerRoot`]). When another container that is still
//! running shares the rootfs (the same folder as root, as plain runc bundles may), its
//! mounts may sit on what this one made: the record is handed over to it instead, and
//! the last one to end takes everything away.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use log::{debug, info, warn};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::container::{ContainerRoot, FsError, Made, Unmade};
use crate::ldcache::{CacheChange, LD_CACHE};

/// The record's file in a container's folder.
const RECORD: &str = "record.json";
/// The image's ld.so.cache, kept.
const ORIGINAL_CACHE: &str = "ld.so.cache.orig";
/// The most a record or a kept cache may hold.
const MAX_FILE: u64 = 64 << 20;

/// Why a record could not be kept or used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A file or folder of the state folder could not be made, read or written.
    #[error("failed to {op} {path} (the state folder of [hook] state-dir in the nvc config)")]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A record is not what the hook writes.
    #[error("{path} is not a record nvc-hook wrote; remove it")]
    Bad {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Taking something away in the rootfs failed.
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// What the hook made in a rootfs and the cache it wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// What was made, in order.
    pub made: Vec<Made>,
    /// The ld.so.cache written, and the image's.
    pub ldcache: Option<CacheChange>,
}

impl Trace {
    /// Whether there is nothing to take away.
    pub fn is_empty(&self) -> bool {
        self.made.is_empty() && self.ldcache.is_none()
    }
}

/// `record.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Record {
    /// The container's id.
    id: String,
    /// The rootfs on the host, and its device and inode: the same folder at the end.
    rootfs: PathBuf,
    rootfs_dev: u64,
    rootfs_ino: u64,
    /// The container's init process and its start time (`/proc/<pid>/stat` field 22),
    /// to tell whether it still runs.
    pid: i32,
    pid_start: u64,
    made: Vec<Made>,
    /// The cache written: its length and FNV-1a hash. The image's is beside the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ldcache: Option<CacheNote>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CacheNote {
    /// Whether the image had a cache (kept as `ld.so.cache.orig`).
    had_one: bool,
    written_len: u64,
    written_hash: u64,
}

impl CacheNote {
    /// The note of `change`: whether the image had a cache, and what was written.
    fn of(change: &CacheChange) -> CacheNote {
        CacheNote {
            had_one: change.original.is_some(),
            written_len: change.written.len() as u64,
            written_hash: fnv1a(&change.written),
        }
    }
}

/// FNV-1a, 64 bits: stable across builds, unlike the standard library's hasher.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The container's folder name: its rootfs (device and inode, so that looking for
/// another container on the same rootfs opens only those records, however many others
/// a host keeps), its id and a hash of its bundle (ids are unique only per runtime state
/// folder).
fn folder_name(id: &str, bundle: &Path, rootfs: (u64, u64)) -> String {
    format!(
        "{}{}",
        rootfs_prefix(rootfs),
        legacy_folder_name(id, bundle)
    )
}

/// The start of the folder names of the records of containers on `rootfs`.
fn rootfs_prefix((dev, ino): (u64, u64)) -> String {
    format!("r{dev:x}-{ino:x}-")
}

/// The folder name of a record written by nvc before the rootfs was in it.
fn legacy_folder_name(id: &str, bundle: &Path) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    format!(
        "{safe}-{:016x}",
        fnv1a(bundle.as_os_str().as_encoded_bytes())
    )
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> TraceError {
    let path = path.to_path_buf();
    move |e| TraceError::Io {
        op,
        path,
        source: e.into(),
    }
}

/// `<state_dir>/containers`, made where missing (mode 0700), opened.
fn containers_dir(state_dir: &Path) -> Result<(PathBuf, OwnedFd), TraceError> {
    let dir = state_dir.join("containers");
    let open = || {
        rustix::fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    // Made (mode 0700) only the first time: this runs at every GPU container's start.
    let fd = match open() {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            // The state folder as other nvc parts make it; this one root's alone.
            let made = std::fs::create_dir_all(state_dir).and_then(|()| {
                let mut builder = std::fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                match builder.create(&dir) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                    other => other,
                }
            });
            made.map_err(|source| TraceError::Io {
                op: "create",
                path: dir.clone(),
                source,
            })?;
            open().map_err(io("open", &dir))?
        }
        Err(e) => return Err(io("open", &dir)(e)),
    };
    Ok((dir, fd))
}

/// The lock of one rootfs, held by a prestart hook from before it makes anything there
/// until its record is written, and by a poststop hook while it takes things away: a
/// container ending on a rootfs another is being set up on waits, and then sees it
/// (and hands its record over). A file in the state folder, per rootfs (device and
/// inode), which no container reaches; released when dropped.
#[derive(Debug)]
pub struct RootfsLock {
    _file: File,
}

/// Takes the lock of `rootfs` ([`RootfsLock`]), waiting for it (the hook's deadline
/// bounds the wait).
pub fn lock_rootfs(state_dir: &Path, rootfs: &Path) -> Result<RootfsLock, TraceError> {
    let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
    let (dir, dir_fd) = containers_dir(state_dir)?;
    let name = format!(".rootfs-{}-{}.lock", st.st_dev, st.st_ino);
    let path = dir.join(&name);
    let fd = rustix::fs::openat(
        &dir_fd,
        name.as_str(),
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(io("open", &path))?;
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive).map_err(io("lock", &path))?;
    Ok(RootfsLock {
        _file: File::from(fd),
    })
}

/// A container's record folder, opened in the host's mount namespace before the hook
/// enters the container's.
#[derive(Debug)]
pub struct RecordDir {
    path: PathBuf,
    fd: OwnedFd,
    id: String,
    /// The rootfs, its device and inode, the init's pid and start time: read in the
    /// host's namespaces when the folder is made.
    rootfs: Option<(PathBuf, u64, u64, i32, u64)>,
}

impl RecordDir {
    /// Makes (afresh: a stale one of the same name is replaced) and opens the record
    /// folder of container `id` of `bundle`, whose rootfs is `rootfs` and init `pid`.
    pub fn create(
        state_dir: &Path,
        id: &str,
        bundle: &Path,
        rootfs: &Path,
        pid: i32,
    ) -> Result<RecordDir, TraceError> {
        let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
        let (parent, parent_fd) = containers_dir(state_dir)?;
        let name = folder_name(id, bundle, (st.st_dev, st.st_ino));
        let path = parent.join(&name);
        remove_folder(&parent_fd, &name, &path);
        rustix::fs::mkdirat(&parent_fd, name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(io("create", &path))?;
        let fd = rustix::fs::openat(
            &parent_fd,
            name.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io("open", &path))?;
        Ok(RecordDir {
            path,
            fd,
            id: id.to_string(),
            rootfs: Some((
                rootfs.to_path_buf(),
                st.st_dev,
                st.st_ino,
                pid,
                crate::process::start_time(pid).unwrap_or(0),
            )),
        })
    }

    /// Writes the record of `trace`; an empty trace removes the folder. Works through
    /// the folder's fd, from any mount namespace.
    pub fn save(self, trace: &Trace) -> Result<(), TraceError> {
        let Some((rootfs, rootfs_dev, rootfs_ino, pid, pid_start)) = self.rootfs.clone() else {
            return Ok(());
        };
        if trace.is_empty() {
            return Ok(());
        }
        let mut ldcache = None;
        if let Some(change) = &trace.ldcache {
            if let Some(original) = &change.original {
                self.write(ORIGINAL_CACHE, original)?;
            }
            ldcache = Some(CacheNote::of(change));
        }
        let record = Record {
            id: self.id.clone(),
            rootfs,
            rootfs_dev,
            rootfs_ino,
            pid,
            pid_start,
            made: trace.made.clone(),
            ldcache,
        };
        let json = serde_json::to_vec_pretty(&record).map_err(|source| TraceError::Bad {
            path: self.path.join(RECORD),
            source,
        })?;
        self.write(RECORD, &json)?;
        debug!(
            "recorded {} things made in {} and {} ld.so.cache ({})",
            record.made.len(),
            record.rootfs.display(),
            if record.ldcache.is_some() {
                "the"
            } else {
                "no"
            },
            self.path.display()
        );
        Ok(())
    }

    /// Writes `name` whole: a new file by a temporary name, renamed over it, so that a
    /// reader never sees part of one.
    fn write(&self, name: &str, data: &[u8]) -> Result<(), TraceError> {
        let path = self.path.join(name);
        let tmp = format!(".{name}.new");
        let fd = rustix::fs::openat(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io("create", &path))?;
        File::from(fd)
            .write_all(data)
            .map_err(|source| TraceError::Io {
                op: "write",
                path: path.clone(),
                source,
            })?;
        rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(io("rename", &path))
    }
}

/// Reads `name` in the folder `dir` (at `path`, for messages), a regular file of at most
/// [`MAX_FILE`] bytes, never through a link.
fn read_in(dir: &impl AsFd, name: &str, path: &Path) -> Result<Option<Vec<u8>>, TraceError> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io("open", path)(e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(io("stat", path))?;
    if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() || st.st_size as u64 > MAX_FILE {
        return Err(io("read", path)(Errno::INVAL));
    }
    let mut data = Vec::new();
    File::from(fd)
        .read_to_end(&mut data)
        .map_err(|source| TraceError::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(data))
}

/// Removes the record folder `name` in `parent` and its files; quietly, as it may not be
/// there.
fn remove_folder(parent: &OwnedFd, name: &str, path: &Path) {
    if let Ok(fd) = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        for file in [RECORD, ORIGINAL_CACHE] {
            let _ = rustix::fs::unlinkat(&fd, file, AtFlags::empty());
            let _ = rustix::fs::unlinkat(&fd, format!(".{file}.new").as_str(), AtFlags::empty());
        }
    }
    if let Err(e) = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        if e != Errno::NOENT {
            warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// The record of a running container, opened for `nvc attach` to add what it makes
/// ([`Addition::save`]): its prestart hook's, or a new one where it has none (it started
/// with no driver files). Opened in the host's mount namespace, before attaching enters
/// the container's, and written through file descriptors after; the rootfs's lock
/// ([`lock_rootfs`]) is held from one to the other.
#[derive(Debug)]
pub struct Addition {
    _lock: RootfsLock,
    to: AddTo,
}

#[derive(Debug)]
enum AddTo {
    New(RecordDir),
    Existing {
        parent: OwnedFd,
        dir: PathBuf,
        found: Found,
    },
}

impl Addition {
    /// Opens the record of container `id` of `bundle`, whose rootfs is `rootfs` and
    /// init `pid` (a record of an earlier container of the same name is replaced).
    pub fn open(
        state_dir: &Path,
        id: &str,
        bundle: &Path,
        rootfs: &Path,
        pid: i32,
    ) -> Result<Addition, TraceError> {
        let lock = lock_rootfs(state_dir, rootfs)?;
        let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
        let (dir, parent) = containers_dir(state_dir)?;
        let name = folder_name(id, bundle, (st.st_dev, st.st_ino));
        let found = read_record(&parent, &dir, &name)?.filter(|found| {
            found.record.pid == pid
                && crate::process::start_time(pid) == Some(found.record.pid_start)
        });
        let to = match found {
            Some(found) => AddTo::Existing { parent, dir, found },
            None => AddTo::New(RecordDir::create(state_dir, id, bundle, rootfs, pid)?),
        };
        Ok(Addition { _lock: lock, to })
    }

    /// Adds `trace` to the record. The image's ld.so.cache stays the one kept: the
    /// cache written now is the one the poststop hook expects to find.
    pub fn save(self, trace: &Trace) -> Result<(), TraceError> {
        let (parent, dir, mut found) = match self.to {
            AddTo::New(record) => return record.save(trace),
            AddTo::Existing { parent, dir, found } => (parent, dir, found),
        };
        if trace.is_empty() {
            return Ok(());
        }
        found.record.made.extend(trace.made.iter().cloned());
        let mut original = None;
        if let Some(change) = &trace.ldcache {
            let written = CacheNote::of(change);
            match &mut found.record.ldcache {
                // The image's is kept already; the one written now replaced the hook's.
                Some(note) => {
                    note.written_len = written.written_len;
                    note.written_hash = written.written_hash;
                }
                None => {
                    found.record.ldcache = Some(written);
                    original = Some(change.original.clone());
                }
            }
        }
        hand_over(&parent, &dir, &found, original)
    }
}

/// What [`undo`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Undone {
    /// Things taken away.
    pub removed: usize,
    /// Things left because they are no longer as nvc made them, by path.
    pub left: Vec<PathBuf>,
    /// Whether the image's ld.so.cache is back (or gone, where it had none).
    pub cache_restored: bool,
    /// The container the record was handed to, when one still running shares the rootfs.
    pub handed_to: Option<String>,
}

/// A record read back, with its folder.
#[derive(Debug)]
struct Found {
    name: String,
    record: Record,
    original: Option<Vec<u8>>,
}

fn read_record(parent: &OwnedFd, dir: &Path, name: &str) -> Result<Option<Found>, TraceError> {
    read_record_with(parent, dir, name, true)
}

/// [`read_record`]; the image's cache kept beside the record only when `original`.
fn read_record_with(
    parent: &OwnedFd,
    dir: &Path,
    name: &str,
    original: bool,
) -> Result<Option<Found>, TraceError> {
    let path = dir.join(name);
    let fd = match rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io("open", &path)(e)),
    };
    let Some(json) = read_in(&fd, RECORD, &path.join(RECORD))? else {
        return Ok(None);
    };
    let record: Record = serde_json::from_slice(&json).map_err(|source| TraceError::Bad {
        path: path.join(RECORD),
        source,
    })?;
    let original = match original {
        true => read_in(&fd, ORIGINAL_CACHE, &path.join(ORIGINAL_CACHE))?,
        false => None,
    };
    Ok(Some(Found {
        name: name.to_string(),
        record,
        original,
    }))
}

/// Another record for the same rootfs whose container still runs.
fn live_sharer(parent: &OwnedFd, dir: &Path, me: &Found) -> Option<Found> {
    let prefix = rootfs_prefix((me.record.rootfs_dev, me.record.rootfs_ino));
    let names = std::fs::read_dir(dir).ok()?;
    for entry in names.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // Only the records of containers on the same rootfs.
        if name == me.name || !name.starts_with(&prefix) {
            continue;
        }
        // Every other container's record is looked at: its cache only for the sharer.
        let Ok(Some(other)) = read_record_with(parent, dir, &name, false) else {
            continue;
        };
        let same_root = (other.record.rootfs_dev, other.record.rootfs_ino)
            == (me.record.rootfs_dev, me.record.rootfs_ino);
        if same_root && crate::process::start_time(other.record.pid) == Some(other.record.pid_start)
        {
            return read_record(parent, dir, &name).ok().flatten();
        }
    }
    None
}

/// Takes away what the hook made for container `id` of `bundle` in `rootfs` (opened in
/// the caller's mount namespace: the host's, after the container ended), puts the image's
/// ld.so.cache back and removes the record. No record: nothing to do.
pub fn undo(
    state_dir: &Path,
    id: &str,
    bundle: &Path,
    rootfs: &Path,
) -> Result<Undone, TraceError> {
    let (dir, parent) = containers_dir(state_dir)?;
    // A rootfs that is gone has nothing to take away: its record is looked for only under
    // the name of before (undo_found says why when it exists).
    let mut name = legacy_folder_name(id, bundle);
    let mut found = None;
    if let Ok(st) = rustix::fs::stat(rootfs) {
        name = folder_name(id, bundle, (st.st_dev, st.st_ino));
        found = read_record(&parent, &dir, &name)?;
    }
    if found.is_none() {
        name = legacy_folder_name(id, bundle);
        found = read_record(&parent, &dir, &name)?;
    }
    let Some(me) = found else {
        debug!("no record of what was made for container {id}");
        remove_folder(&parent, &name, &dir.join(&name));
        return Ok(Undone::default());
    };
    let result = undo_found(&parent, &dir, &me, rootfs);
    remove_folder(&parent, &name, &dir.join(&name));
    result
}

fn undo_found(
    parent: &OwnedFd,
    dir: &Path,
    me: &Found,
    rootfs: &Path,
) -> Result<Undone, TraceError> {
    let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
    if (st.st_dev, st.st_ino) != (me.record.rootfs_dev, me.record.rootfs_ino) {
        warn!(
            "{} is no longer the rootfs container {} had: nothing is taken away",
            rootfs.display(),
            me.record.id
        );
        return Ok(Undone::default());
    }
    let root = ContainerRoot::open(rootfs)?;
    let mut undone = Undone::default();
    if let Some(mut other) = live_sharer(parent, dir, me) {
        // Its mounts may sit on what this container made: it takes it all over.
        let mut made = me.record.made.clone();
        made.append(&mut other.record.made);
        other.record.made = made;
        let mut original = None;
        if let Some(mine) = me.record.ldcache {
            let theirs_read_mine = match (other.record.ldcache, &other.original) {
                (Some(_), Some(kept)) => {
                    kept.len() as u64 == mine.written_len && fnv1a(kept) == mine.written_hash
                }
                _ => false,
            };
            if let (true, Some(theirs)) = (theirs_read_mine, other.record.ldcache.as_mut()) {
                // It took the cache this one wrote for the image's: the image's is this
                // one's.
                theirs.had_one = mine.had_one;
                original = Some(me.original.clone());
            } else {
                // It started first: the cache this one replaced is its own.
                undone.cache_restored = restore_cache(&root, mine, me.original.as_deref(), &[])?;
            }
        }
        hand_over(parent, dir, &other, original)?;
        info!(
            "container {} still runs on {}: what {} made is left to it",
            other.record.id,
            rootfs.display(),
            me.record.id
        );
        undone.handed_to = Some(other.record.id);
        return Ok(undone);
    }
    for made in me.record.made.iter().rev() {
        match root.unmake(made) {
            Ok(Unmade::Removed) => undone.removed += 1,
            Ok(Unmade::Gone) => {}
            Ok(Unmade::Changed(kind)) => {
                info!(
                    "{} is left: it is a {kind} now, not what nvc made",
                    made.path().display()
                );
                undone.left.push(made.path().to_path_buf());
            }
            Err(e) => {
                warn!("{e}");
                undone.left.push(made.path().to_path_buf());
            }
        }
    }
    if let Some(note) = me.record.ldcache {
        undone.cache_restored =
            restore_cache(&root, note, me.original.as_deref(), &me.record.made)?;
    }
    Ok(undone)
}

/// Puts the image's cache back if the container's is still the one written.
fn restore_cache(
    root: &ContainerRoot,
    note: CacheNote,
    original: Option<&[u8]>,
    made: &[Made],
) -> Result<bool, TraceError> {
    let cache = Path::new(LD_CACHE);
    let now = match root.read_file(cache, MAX_FILE as usize) {
        Ok(now) => now,
        Err(e) => {
            info!("{LD_CACHE} is left: {e}");
            return Ok(false);
        }
    };
    if now.len() as u64 != note.written_len || fnv1a(&now) != note.written_hash {
        // An ldconfig in the container since: its cache is the user's, but it may list
        // what was just taken away.
        drop_entries(root, &now, made)?;
        return Ok(false);
    }
    match (note.had_one, original) {
        (true, Some(original)) => root.write_file(cache, original, 0o644)?,
        (false, _) => {
            root.remove_regular_file(cache)?;
        }
        (true, None) => {
            warn!("the image's {LD_CACHE} was not kept: the container's is left");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Rewrites the container's cache `now` without the entries that name what was taken
/// away (`made`), when it has any.
fn drop_entries(root: &ContainerRoot, now: &[u8], made: &[Made]) -> Result<(), TraceError> {
    let Ok(mut cache) = libnvc::ldcache::parse(now) else {
        info!("{LD_CACHE} is left: it changed since nvc wrote it, and is not a cache nvc reads");
        return Ok(());
    };
    // By name, and gone: ldconfig may have found them through another folder (`/lib`
    // where it leads to `/usr/lib`).
    let names: std::collections::HashSet<&std::ffi::OsStr> = made
        .iter()
        .filter(|m| !matches!(m, Made::Dir { .. }))
        .filter_map(|m| m.path().file_name())
        .collect();
    let before = cache.entries.len();
    cache.entries.retain(|e| {
        let path = Path::new(&e.path);
        let ours = path.file_name().is_some_and(|n| names.contains(n));
        !(ours && root.resolve(path).is_err())
    });
    if cache.entries.len() == before {
        info!("{LD_CACHE} is left: it changed since nvc wrote it (an ldconfig in the container)");
        return Ok(());
    }
    cache.entries.retain(|e| e.hwcaps_index().is_none());
    match libnvc::ldcache::write(&cache.entries) {
        Ok(bytes) => {
            root.write_file(Path::new(LD_CACHE), &bytes, 0o644)?;
            info!(
                "{LD_CACHE} changed since nvc wrote it (an ldconfig in the container): {} \
                 entries naming what was taken away dropped from it",
                before - cache.entries.len()
            );
        }
        Err(e) => info!("{LD_CACHE} is left: {e}"),
    }
    Ok(())
}

/// Writes `other`'s record back, with `original` (when given) as its kept image cache:
/// `Some(None)` when the image had none.
fn hand_over(
    parent: &OwnedFd,
    dir: &Path,
    other: &Found,
    original: Option<Option<Vec<u8>>>,
) -> Result<(), TraceError> {
    let path = dir.join(&other.name);
    let fd = rustix::fs::openat(
        parent,
        other.name.as_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open", &path))?;
    let target = RecordDir {
        path,
        fd,
        id: other.record.id.clone(),
        rootfs: None,
    };
    match original {
        Some(Some(original)) => target.write(ORIGINAL_CACHE, &original)?,
        Some(None) => {
            let _ = rustix::fs::unlinkat(&target.fd, ORIGINAL_CACHE, AtFlags::empty());
        }
        None => {}
    }
    let json = serde_json::to_vec_pretty(&other.record).map_err(|source| TraceError::Bad {
        path: target.path.join(RECORD),
        source,
    })?;
    target.write(RECORD, &json)
}
