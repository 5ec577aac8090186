//! Leaving no trace in the image: what the prestart hook made in a container's rootfs
//! (mount points, folders, links: [`Made`]) and the ld.so.cache it wrote over the image's
//! are recorded on the host, and taken away when the container ends (`nvc-hook
//! poststop`), when its start fails part way, or, where the hook was killed, by the next
//! start or poststop hook on the same rootfs; so that a rootfs reused for another
//! container, or a layer committed from a stopped one, holds nothing nvc put there.
//!
//! The record is a folder per container in its rootfs's folder of the state folder
//! ([`crate::state`], which names it and holds the rootfs's lock): `record.json` (whose
//! container: id, bundle, rootfs, init process; written before anything is made),
//! `made` (a journal: one line per thing made, appended as it is made, and one for the
//! ld.so.cache before it is replaced) and `ld.so.cache.orig` (the image's cache, kept
//! before it is replaced). Once set-up is done, `record.json` is written whole with
//! everything made and the journal removed. The hook opens the folder before it enters
//! the container's mount namespace and writes through that folder's fd.
//!
//! A record is used only by its own container: the id and bundle inside must be the ones
//! asking. Undoing takes away only what is still as nvc made it: an empty regular file, an
//! empty folder, a link to the same target; the cache only if it is still the one written
//! (a user's own `ldconfig` since then is theirs). Everything is resolved inside the
//! rootfs as the hook resolves it ([`ContainerRoot`]). When another container that is
//! still running shares the rootfs (the same folder as root, as plain runc bundles may),
//! its mounts may sit on what this one made: the record is handed over to it instead, and
//! the last one to end takes everything away. A record whose container no longer runs is
//! taken away by whoever next holds the rootfs's lock ([`sweep`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use log::{debug, info, warn};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::container::{ContainerRoot, FsError, JournalSink, Made, Unmade};
use crate::files::{errno_error, io_error, FileError};
use crate::ldcache::{CacheChange, LD_CACHE};
use crate::state::{RootfsState, StateDir, StateError};
use libnvc::usage::RecordedContainer;

/// The record's file in a container's folder.
const RECORD: &str = "record.json";
/// The journal of what was made, while the container is set up.
const JOURNAL: &str = "made";
/// The image's ld.so.cache, kept.
const ORIGINAL_CACHE: &str = "ld.so.cache.orig";
/// The most a record or a kept cache may hold.
const MAX_FILE: u64 = 64 << 20;

/// Why a record could not be kept or used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A file or folder of a record could not be made, read or written.
    #[error("a container's record in nvc's state folder ([hook] state-dir in the nvc config)")]
    Io(#[from] FileError),
    /// A record is not what the hook writes.
    #[error("{path} is not a record nvc-hook wrote; remove it")]
    Bad {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The state folder could not be used.
    #[error(transparent)]
    State(#[from] StateError),
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
    /// The container's id and bundle: whose record it is.
    id: String,
    bundle: PathBuf,
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

impl Record {
    /// Whether its container still runs.
    fn runs(&self) -> bool {
        crate::process::start_time(self.pid) == Some(self.pid_start)
    }
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
    /// The note of a cache `written` over `original`.
    fn of(original: Option<&[u8]>, written: &[u8]) -> CacheNote {
        CacheNote {
            had_one: original.is_some(),
            written_len: written.len() as u64,
            written_hash: fnv1a(written),
        }
    }
}

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Line {
    Made(Made),
    Cache(CacheNote),
}

/// FNV-1a, 64 bits: stable across builds, unlike the standard library's hasher.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> TraceError {
    let fail = errno_error(op, path);
    move |e| TraceError::Io(fail(e))
}

/// A container's record folder, opened in the host's mount namespace before the hook
/// enters the container's; also the journal of what set-up makes ([`JournalSink`]).
#[derive(Debug)]
pub struct RecordDir {
    path: PathBuf,
    fd: OwnedFd,
    record: Record,
    journal: Arc<RecordJournal>,
}

/// The journal of a record folder: what set-up makes, line by line, and the image's
/// cache before it is replaced.
#[derive(Debug)]
struct RecordJournal {
    path: PathBuf,
    dir: OwnedFd,
    file: Mutex<File>,
}

impl RecordDir {
    /// Makes (afresh: a stale one of the same name is replaced) and opens the record
    /// folder of container `id` of `bundle` in `rootfs`'s folder `state`, with its
    /// `record.json` (nothing made yet) and an empty journal; `pid` is its init.
    pub fn create(
        state: &RootfsState,
        id: &str,
        bundle: &Path,
        rootfs: &Path,
        pid: i32,
    ) -> Result<RecordDir, TraceError> {
        let name = RootfsState::record_name(id, bundle);
        let path = state.path().join(&name);
        remove_folder(state.dir(), &name, &path);
        rustix::fs::mkdirat(state.dir(), name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(io("create", &path))?;
        let fd = rustix::fs::openat(
            state.dir(),
            name.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io("open", &path))?;
        let (rootfs_dev, rootfs_ino) = state.rootfs_id();
        let record = Record {
            id: id.to_string(),
            bundle: bundle.to_path_buf(),
            rootfs: rootfs.to_path_buf(),
            rootfs_dev,
            rootfs_ino,
            pid,
            pid_start: crate::process::start_time(pid).unwrap_or(0),
            made: Vec::new(),
            ldcache: None,
        };
        write_record(&fd, &path, &record)?;
        let journal = rustix::fs::openat(
            &fd,
            JOURNAL,
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::APPEND
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io("create", &path.join(JOURNAL)))?;
        let journal = Arc::new(RecordJournal {
            path: path.clone(),
            dir: fd.try_clone().map_err(io_error("open", &path))?,
            file: Mutex::new(File::from(journal)),
        });
        Ok(RecordDir {
            path,
            fd,
            record,
            journal,
        })
    }

    /// The journal that set-up writes what it makes to, as it makes it
    /// ([`ContainerRoot::journal_to`]).
    pub fn journal(&self) -> Arc<dyn JournalSink> {
        self.journal.clone()
    }

    /// Writes the record of `trace` whole and removes the journal; an empty trace
    /// removes the folder. Works through the folder's fd, from any mount namespace.
    pub fn save(mut self, state: &RootfsState, trace: &Trace) -> Result<(), TraceError> {
        if trace.is_empty() {
            let name = self.name();
            remove_folder(state.dir(), &name, &self.path);
            return Ok(());
        }
        self.record.made = trace.made.clone();
        if let Some(change) = &trace.ldcache {
            let kept = rustix::fs::statat(&self.fd, ORIGINAL_CACHE, AtFlags::SYMLINK_NOFOLLOW);
            if let (Some(original), Err(_)) = (&change.original, kept) {
                // Set up without this record's journal: the image's cache is kept now.
                write_in(&self.fd, &self.path, ORIGINAL_CACHE, original)?;
            }
            self.record.ldcache = Some(CacheNote::of(change.original.as_deref(), &change.written));
        }
        self.write_record()?;
        let _ = rustix::fs::unlinkat(&self.fd, JOURNAL, AtFlags::empty());
        debug!(
            "recorded {} things made in {} and {} ld.so.cache ({})",
            self.record.made.len(),
            self.record.rootfs.display(),
            if self.record.ldcache.is_some() {
                "the"
            } else {
                "no"
            },
            self.path.display()
        );
        Ok(())
    }

    /// Removes the record folder: its container was not started.
    pub fn remove(self, state: &RootfsState) {
        let name = self.name();
        remove_folder(state.dir(), &name, &self.path);
    }

    fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn write_record(&self) -> Result<(), TraceError> {
        write_record(&self.fd, &self.path, &self.record)
    }
}

fn write_record(dir: &OwnedFd, path: &Path, record: &Record) -> Result<(), TraceError> {
    let json = serde_json::to_vec(record).map_err(|source| TraceError::Bad {
        path: path.join(RECORD),
        source,
    })?;
    write_in(dir, path, RECORD, &json)
}

impl RecordJournal {
    /// Appends `line`; a failure is logged (what it names then stays in the rootfs should
    /// the hook be killed before its record is written).
    fn append(&self, line: &Line) {
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&bytes) {
            warn!("cannot write {}: {e}", self.path.join(JOURNAL).display());
        }
    }
}

impl JournalSink for RecordJournal {
    fn made(&self, made: &Made) {
        self.append(&Line::Made(made.clone()));
    }

    fn cache(&self, original: Option<&[u8]>, written: &[u8]) {
        if let Some(original) = original {
            if let Err(e) = write_in(&self.dir, &self.path, ORIGINAL_CACHE, original) {
                warn!("{}", libnvc::report::error_chain(&e));
                return;
            }
        }
        self.append(&Line::Cache(CacheNote::of(original, written)));
    }
}

/// Writes `name` in the record folder `dir` (at `path`) whole ([`crate::files`]'s one
/// atomic writer).
fn write_in(dir: &OwnedFd, path: &Path, name: &str, data: &[u8]) -> Result<(), TraceError> {
    Ok(crate::files::write_atomic_at(
        dir.as_fd(),
        path,
        name,
        data,
        0o600,
    )?)
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
        .map_err(io_error("read", path))?;
    Ok(Some(data))
}

/// Removes the record folder `name` in `parent` and every file in it (a killed writer's
/// temporary file too); quietly, as it may not be there.
fn remove_folder(parent: &OwnedFd, name: &str, path: &Path) {
    if let Ok(fd) = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let names: Vec<std::ffi::CString> = rustix::fs::Dir::read_from(&fd)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect();
        for file in names {
            let _ = rustix::fs::unlinkat(&fd, file.as_c_str(), AtFlags::empty());
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
/// the container's, and written through file descriptors after; the rootfs's lock is
/// held by the caller from one to the other.
#[derive(Debug)]
pub enum Addition {
    /// A new record.
    New(RecordDir),
    /// The container's record, read.
    Existing(Found),
}

impl Addition {
    /// Opens the record of container `id` of `bundle` in `rootfs`'s folder `state`, whose
    /// init is `pid` (a record of an earlier container of the same name is replaced).
    pub fn open(
        state: &RootfsState,
        id: &str,
        bundle: &Path,
        rootfs: &Path,
        pid: i32,
    ) -> Result<Addition, TraceError> {
        let name = RootfsState::record_name(id, bundle);
        let found = read_record(state, &name, id, bundle)?.filter(|found| {
            found.record.pid == pid
                && crate::process::start_time(pid) == Some(found.record.pid_start)
        });
        Ok(match found {
            Some(found) => Addition::Existing(found),
            None => Addition::New(RecordDir::create(state, id, bundle, rootfs, pid)?),
        })
    }

    /// The journal to give the container's root while attaching, for a new record.
    pub fn journal(&self) -> Option<&RecordDir> {
        match self {
            Addition::New(record) => Some(record),
            Addition::Existing(_) => None,
        }
    }

    /// Adds `trace` to the record. The image's ld.so.cache stays the one kept: the
    /// cache written now is the one the poststop hook expects to find.
    pub fn save(self, state: &RootfsState, trace: &Trace) -> Result<(), TraceError> {
        let mut found = match self {
            Addition::New(record) => return record.save(state, trace),
            Addition::Existing(found) => found,
        };
        if trace.is_empty() {
            return Ok(());
        }
        found.record.made.extend(trace.made.iter().cloned());
        let mut original = None;
        if let Some(change) = &trace.ldcache {
            let written = CacheNote::of(change.original.as_deref(), &change.written);
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
        hand_over(state, &found, original)
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
    /// Records of containers that ended without their poststop hook, taken away too.
    pub swept: usize,
}

/// A record read back, with its folder's name.
#[derive(Debug)]
pub struct Found {
    name: String,
    record: Record,
    original: Option<Vec<u8>>,
}

/// The record `name` in `state`, with its journal's lines and the kept cache, when it is
/// container `id`'s of `bundle`; a record of another container under that name (which
/// no name made by [`crate::state`] can be) is left alone, logged.
fn read_record(
    state: &RootfsState,
    name: &str,
    id: &str,
    bundle: &Path,
) -> Result<Option<Found>, TraceError> {
    let found = read_any(state, name)?;
    Ok(found.filter(|f| {
        let mine = f.record.id == id && f.record.bundle == bundle;
        if !mine {
            warn!(
                "{} holds the record of container {} of {}, not of {id} of {}: left alone",
                state.path().join(name).display(),
                f.record.id,
                f.record.bundle.display(),
                bundle.display()
            );
        }
        mine
    }))
}

/// The record folder `name` in `state`, whoever's it is: `record.json` with its journal's
/// lines added, and the kept cache.
fn read_any(state: &RootfsState, name: &str) -> Result<Option<Found>, TraceError> {
    let path = state.path().join(name);
    let fd = match rustix::fs::openat(
        state.dir(),
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
    let mut record: Record = serde_json::from_slice(&json).map_err(|source| TraceError::Bad {
        path: path.join(RECORD),
        source,
    })?;
    if let Some(journal) = read_in(&fd, JOURNAL, &path.join(JOURNAL))? {
        // A killed writer's last line may be cut short: every whole line counts.
        for line in journal.split(|b| *b == b'\n') {
            match serde_json::from_slice::<Line>(line) {
                Ok(Line::Made(made)) => record.made.push(made),
                Ok(Line::Cache(note)) => record.ldcache = Some(note),
                Err(_) => {}
            }
        }
    }
    let original = read_in(&fd, ORIGINAL_CACHE, &path.join(ORIGINAL_CACHE))?;
    Ok(Some(Found {
        name: name.to_string(),
        record,
        original,
    }))
}

/// The containers with a record in the state folder: their ids and bundles (`nvc ps`:
/// which container a process on a GPU is in), those whose init still runs first. A record
/// whose init seems gone is kept too, after them: a runtime in another PID namespace
/// than the caller's (a dockerd of its own) records pids this process cannot see.
/// Read-only, without the rootfs locks: a record being written or taken away meanwhile
/// is skipped.
pub fn recorded_containers(state: &StateDir) -> Result<Vec<RecordedContainer>, TraceError> {
    let mut found = Vec::new();
    for path in state.record_folders()? {
        let fd = match rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io("open", &path)(e)),
        };
        let record = match read_in(&fd, RECORD, &path.join(RECORD)) {
            Ok(Some(json)) => serde_json::from_slice::<Record>(&json).ok(),
            Ok(None) | Err(_) => None,
        };
        if let Some(record) = record {
            found.push((
                !record.runs(),
                RecordedContainer {
                    id: record.id,
                    bundle: record.bundle,
                },
            ));
        }
    }
    found.sort_by_key(|(gone, _)| *gone);
    Ok(found.into_iter().map(|(_, r)| r).collect())
}

/// Another record in `state` whose container still runs on the same rootfs.
fn live_sharer(state: &RootfsState, me: &Found) -> Option<Found> {
    for name in state.records().ok()? {
        if name == me.name {
            continue;
        }
        let Ok(Some(other)) = read_any(state, &name) else {
            continue;
        };
        let same_root = (other.record.rootfs_dev, other.record.rootfs_ino)
            == (me.record.rootfs_dev, me.record.rootfs_ino);
        if same_root && other.record.runs() {
            return Some(other);
        }
    }
    None
}

/// Takes away, under the rootfs's lock (`state`), what the records there of containers
/// that no longer run name (their poststop hook never ran: a hook or a runtime killed),
/// and removes those records; all but `keep`. Returns how many it took away.
pub fn sweep(state: &RootfsState, rootfs: &Path, keep: Option<&str>) -> usize {
    let Ok(names) = state.records() else {
        return 0;
    };
    let mut swept = 0;
    for name in names {
        if Some(name.as_str()) == keep {
            continue;
        }
        let found = match read_any(state, &name) {
            Ok(Some(found)) if found.record.runs() => continue,
            Ok(found) => found,
            Err(e) => {
                warn!("{}", libnvc::report::error_chain(&e));
                None
            }
        };
        if let Some(found) = &found {
            info!(
                "container {} ended without its poststop hook: taking away what nvc made \
                 for it",
                found.record.id
            );
            if let Err(e) = undo_found(state, found, rootfs) {
                warn!("{}", libnvc::report::error_chain(&e));
            }
        }
        // Also a folder without a record: a hook killed between making it and writing.
        remove_folder(state.dir(), &name, &state.path().join(&name));
        swept += 1;
    }
    swept
}

/// Takes away what the hook made for container `id` of `bundle` in `rootfs` (opened in
/// the caller's mount namespace: the host's, after the container ended), puts the image's
/// ld.so.cache back and removes the record; then [`sweep`]s the records of containers that
/// ended without theirs. No record: nothing to do but the sweep. Called with the rootfs's
/// lock held (`state`).
pub fn undo(
    state: &RootfsState,
    id: &str,
    bundle: &Path,
    rootfs: &Path,
) -> Result<Undone, TraceError> {
    let name = RootfsState::record_name(id, bundle);
    let mut undone = match read_record(state, &name, id, bundle)? {
        Some(me) => {
            let result = undo_found(state, &me, rootfs);
            remove_folder(state.dir(), &name, &state.path().join(&name));
            result?
        }
        None => {
            debug!("no record of what was made for container {id}");
            Undone::default()
        }
    };
    undone.swept = sweep(state, rootfs, None);
    Ok(undone)
}

/// Takes away what `trace` says a start that failed made in `rootfs` (opened in the
/// caller's mount namespace: the host's), without a record: what [`undo`] does with one.
pub fn take_back(rootfs: &Path, trace: &Trace) -> Result<Undone, TraceError> {
    let root = ContainerRoot::open(rootfs)?;
    let mut undone = unmake_all(&root, &trace.made);
    if let Some(change) = &trace.ldcache {
        let note = CacheNote::of(change.original.as_deref(), &change.written);
        undone.cache_restored =
            restore_cache(&root, note, change.original.as_deref(), &trace.made)?;
    }
    Ok(undone)
}

fn undo_found(state: &RootfsState, me: &Found, rootfs: &Path) -> Result<Undone, TraceError> {
    let st = rustix::fs::stat(rootfs).map_err(io("stat", rootfs))?;
    if (st.st_dev, st.st_ino) != (me.record.rootfs_dev, me.record.rootfs_ino)
        || me.record.rootfs != rootfs
    {
        warn!(
            "{} is not the rootfs container {} had ({}): nothing is taken away",
            rootfs.display(),
            me.record.id,
            me.record.rootfs.display()
        );
        return Ok(Undone::default());
    }
    let root = ContainerRoot::open(rootfs)?;
    let mut undone = Undone::default();
    if let Some(mut other) = live_sharer(state, me) {
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
        hand_over(state, &other, original)?;
        info!(
            "container {} still runs on {}: what {} made is left to it",
            other.record.id,
            rootfs.display(),
            me.record.id
        );
        undone.handed_to = Some(other.record.id);
        return Ok(undone);
    }
    let cache_restored = undone.cache_restored;
    undone = unmake_all(&root, &me.record.made);
    undone.cache_restored = cache_restored;
    if let Some(note) = me.record.ldcache {
        undone.cache_restored =
            restore_cache(&root, note, me.original.as_deref(), &me.record.made)?;
    }
    Ok(undone)
}

/// Takes away each of `made` that is still as nvc made it, last made first.
fn unmake_all(root: &ContainerRoot, made: &[Made]) -> Undone {
    let mut undone = Undone::default();
    for made in made.iter().rev() {
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
    undone
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

/// Writes `other`'s record back whole (its journal folded in), with `original` (when
/// given) as its kept image cache: `Some(None)` when the image had none.
fn hand_over(
    state: &RootfsState,
    other: &Found,
    original: Option<Option<Vec<u8>>>,
) -> Result<(), TraceError> {
    let path = state.path().join(&other.name);
    let fd = rustix::fs::openat(
        state.dir(),
        other.name.as_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open", &path))?;
    match original {
        Some(Some(original)) => write_in(&fd, &path, ORIGINAL_CACHE, &original)?,
        Some(None) => {
            let _ = rustix::fs::unlinkat(&fd, ORIGINAL_CACHE, AtFlags::empty());
        }
        None => {}
    }
    let json = serde_json::to_vec(&other.record).map_err(|source| TraceError::Bad {
        path: path.join(RECORD),
        source,
    })?;
    write_in(&fd, &path, RECORD, &json)?;
    // Its set-up is over (the lock is held): the journal is in the record now.
    let _ = rustix::fs::unlinkat(&fd, JOURNAL, AtFlags::empty());
    Ok(())
}

#[cfg(test)]
mod tests;
