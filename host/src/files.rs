//! Writing files on the host so that no reader ever sees half of one: the one atomic
//! writer ([`write_atomic`], through an open folder [`write_atomic_at`], and
//! [`symlink_atomic`] for links), the one temporary-file
//! name, and the one sweep of what killed writers left ([`remove_stale_temp_files`],
//! or entry by entry of a listing the caller makes: [`remove_if_stale_temp_file`]);
//! plus the small reads and removals around them ([`read_optional`], [`remove`]).
//!
//! Every temporary file is `.<name>.<pid>-<start>.<random>.nvc-tmp` beside the file
//! `<name>` it is to replace: hidden, and matching none of the globs (`*.json`,
//! `*.yaml`, `*.toml`, `*.conf`) that engines and CDI registries load. The writer's pid
//! and start time (field 22 of `/proc/<pid>/stat`) tell a running writer's file from
//! one whose writer was killed before its rename (SIGKILL runs no cleanup); the sweep
//! removes the latter.

use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The end of every temporary file name:
/// `.<name>.<pid>-<start>.<random>.nvc-tmp` next to the file `<name>`.
pub const TEMP_SUFFIX: &str = ".nvc-tmp";

/// Why a file could not be read, written, linked or swept.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file operation failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A path that names no file (`/`, `..`).
    #[error("{0} is not a file path")]
    NotAFile(PathBuf),
    /// The file is not UTF-8 text.
    #[error("{0} is not UTF-8 text")]
    NotText(PathBuf),
}

/// What [`write_atomic`] does when the path it is given is a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlink {
    /// Replace the file the link leads to (through every link on the way); the link
    /// stays. For files an administrator may keep elsewhere and link to, such as an
    /// engine's config.
    Follow,
    /// Replace the link itself with the new file. What it named is neither written nor
    /// looked at (its mode and owner are not taken either), so a link can never lead the
    /// writer out of the file's folder: for a bundle's `config.json`, and files that are
    /// replaced whole.
    Replace,
}

/// What [`write_atomic`] does when it cannot give the new file the old one's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// It is an error, and the old file stays.
    Required,
    /// It is a warning (logged), and the new file keeps the writer's owner.
    BestEffort,
}

/// How [`write_atomic`] writes a file. The rename is always atomic: a reader sees the
/// old file or the new one, never a part. Whether the file and its folder are synced as
/// well (so that a crash leaves the new file) is [`WriteOptions::durable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// The permission bits of a file that did not exist (set whatever the umask);
    /// an existing file keeps its own.
    pub new_mode: u32,
    /// Whether missing parent folders are created (mode 0755, less the umask).
    pub create_parents: bool,
    /// What a symlink at the path means.
    pub symlink: Symlink,
    /// Whether keeping the old file's owner is a must.
    pub ownership: Ownership,
    /// Whether the new file and its folder are synced before it returns. Off only for
    /// files that die with what they describe, such as a bundle's `config.json`: a
    /// crash loses the container anyway, and an fsync costs 0.4–0.6 ms on ext4.
    pub durable: bool,
}

impl WriteOptions {
    /// `new_mode` for a new file; parents must exist, a symlink is replaced, the owner
    /// is kept where allowed, file and folder are synced.
    pub const fn new(new_mode: u32) -> WriteOptions {
        WriteOptions {
            new_mode,
            create_parents: false,
            symlink: Symlink::Replace,
            ownership: Ownership::BestEffort,
            durable: true,
        }
    }
}

/// The one shape of a failed file operation on the host: `op` on `path` failed with the
/// error given to the closure. Every module of nvc-host that touches the host's files
/// reports through it.
pub fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> FileError {
    let path = path.to_path_buf();
    move |source| FileError::Io { op, path, source }
}

/// [`io_error`] for a system call's `Errno`.
pub fn errno_error(op: &'static str, path: &Path) -> impl FnOnce(rustix::io::Errno) -> FileError {
    let path = path.to_path_buf();
    move |e| FileError::Io {
        op,
        path,
        source: e.into(),
    }
}

/// Replaces the file at `path` with `bytes`: written to a new temporary file in the
/// same folder (created exclusively, mode 0600), given the old file's owner and
/// permission bits (or `options.new_mode` for a new file), synced, renamed over the old
/// one, and the folder synced (the syncs only when `options.durable`). Readers see the old file or the new one, never a part;
/// on error the old file stays and the temporary file is removed.
///
/// A writer killed before its rename leaves its temporary file behind;
/// [`remove_stale_temp_files`] removes it.
pub fn write_atomic(path: &Path, bytes: &[u8], options: &WriteOptions) -> Result<(), FileError> {
    let target = destination(path, options.symlink)?;
    let (dir, name) = split(&target)?;
    if options.create_parents {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io_error("create the folder", dir))?;
    }
    // lstat: under `Symlink::Replace` a link is not the file, and says nothing of it.
    let existing = match fs::symlink_metadata(&target) {
        Ok(m) if m.file_type().is_symlink() => None,
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error("stat", &target)(e)),
    };
    let (temp, file) = create_temp(dir, name, |temp| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(temp)
    })?;
    let written = fill(file, &temp, &target, bytes, options, existing.as_ref())
        .and_then(|()| fs::rename(&temp, &target).map_err(io_error("replace", &target)));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    if options.durable {
        sync_folder(dir)?;
    }
    Ok(())
}

/// Writes the temporary file `temp` that is to become `target`, and syncs it when
/// `options.durable`.
fn fill(
    mut file: File,
    temp: &Path,
    target: &Path,
    bytes: &[u8],
    options: &WriteOptions,
    existing: Option<&fs::Metadata>,
) -> Result<(), FileError> {
    file.write_all(bytes)
        .map_err(io_error("write the new version to", temp))?;
    if let Some(old) = existing {
        let (uid, gid) = (old.uid(), old.gid());
        let ours = file.metadata().map_err(io_error("stat", temp))?;
        if (ours.uid(), ours.gid()) != (uid, gid) {
            if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
                match options.ownership {
                    Ownership::Required => {
                        return Err(io_error("give the old file's owner to", temp)(e))
                    }
                    Ownership::BestEffort => log::warn!(
                        "cannot give {} the owner {uid}:{gid} of {}, it keeps its writer's: {e}",
                        temp.display(),
                        target.display()
                    ),
                }
            }
        }
    }
    // After the chown, which clears set-id bits; explicit, so the umask does not count.
    let mode = existing.map_or(options.new_mode, MetadataExt::mode) & 0o7777;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_error("set the permissions of", temp))?;
    if options.durable {
        file.sync_all()
            .map_err(io_error("sync the new version in", temp))?;
    }
    Ok(())
}

/// [`write_atomic`] through the open folder `dir` (at `dir_path`, named in messages),
/// for nvc's own state folders, which are opened once and written from another mount
/// namespace: the new file (mode `mode`) under the same temporary name, renamed over
/// `name`; never through a link, not synced (they live on the host's `/run`).
pub fn write_atomic_at(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<(), FileError> {
    let (temp, fd) = create_temp(dir_path, OsStr::new(name), |temp| {
        let temp = temp.file_name().unwrap_or_default();
        rustix::fs::openat(
            dir,
            temp,
            rustix::fs::OFlags::WRONLY
                | rustix::fs::OFlags::CREATE
                | rustix::fs::OFlags::EXCL
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(mode),
        )
        .map_err(io::Error::from)
    })?;
    let temp_name = temp.file_name().unwrap_or_default();
    let target = dir_path.join(name);
    let written = File::from(fd)
        .write_all(bytes)
        .map_err(io_error("write the new version to", &temp))
        .and_then(|()| {
            rustix::fs::renameat(dir, temp_name, dir, name)
                .map_err(|e| io_error("replace", &target)(e.into()))
        });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp_name, rustix::fs::AtFlags::empty());
    }
    written
}

/// Makes `link` a symlink to `target`, replacing what is at `link` atomically (a new
/// link under a temporary name, renamed over it), and syncs the folder.
pub fn symlink_atomic(target: &Path, link: &Path) -> Result<(), FileError> {
    let (dir, name) = split(link)?;
    let (temp, ()) = create_temp(dir, name, |temp| std::os::unix::fs::symlink(target, temp))?;
    if let Err(e) = fs::rename(&temp, link) {
        let _ = fs::remove_file(&temp);
        return Err(io_error("replace", link)(e));
    }
    sync_folder(dir)
}

/// Reads `path` as text; `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, FileError> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FileError::NotText(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("read", path)(e)),
    }
}

/// Removes the file (or link) `path`; a missing one is not an error. Returns whether
/// it existed.
pub fn remove(path: &Path) -> Result<bool, FileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error("remove", path)(e)),
    }
}

/// Removes the temporary files that writers of `path` left when they were killed, logs
/// and returns them. They lie where [`write_atomic`] with `symlink` puts its own: beside
/// `path`, or under [`Symlink::Follow`] beside the file a link at `path` leads to.
/// Files of writers still running are kept, other names ignored; a missing folder has
/// nothing to remove. Does nothing when `/proc` cannot tell which processes run.
pub fn remove_stale_temp_files(path: &Path, symlink: Symlink) -> Result<Vec<PathBuf>, FileError> {
    if Writer::current().is_none() {
        return Ok(Vec::new());
    }
    remove_stale_with(path, symlink, &|w: Writer| w.is_alive())
}

fn remove_stale_with(
    path: &Path,
    symlink: Symlink,
    is_alive: &dyn Fn(Writer) -> bool,
) -> Result<Vec<PathBuf>, FileError> {
    let target = destination(path, symlink)?;
    let (dir, name) = split(&target)?;
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("list", dir)(e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error("list", dir))?;
        let Some(writer) = temp_writer(&entry.file_name(), name) else {
            continue;
        };
        if is_alive(writer) {
            continue;
        }
        let temp = entry.path();
        if remove_stale(&temp, writer)? {
            removed.push(temp);
        }
    }
    Ok(removed)
}

/// Removes `dir/file_name` when it is a temporary file (for any file in `dir`) that a
/// killed writer left, and logs it; returns whether it did. For a caller that lists
/// `dir` anyway and sweeps as it goes, where [`remove_stale_temp_files`] would list the
/// folder once more for each file. Does nothing when `/proc` cannot tell which processes
/// run.
pub fn remove_if_stale_temp_file(dir: &Path, file_name: &OsStr) -> Result<bool, FileError> {
    let Some((_, writer)) = parse_temp_name(file_name) else {
        return Ok(false);
    };
    if Writer::current().is_none() || writer.is_alive() {
        return Ok(false);
    }
    remove_stale(&dir.join(file_name), writer)
}

/// Removes the temporary file `temp` of the killed `writer`, logs it, and returns whether
/// it was there.
fn remove_stale(temp: &Path, writer: Writer) -> Result<bool, FileError> {
    match fs::remove_file(temp) {
        Ok(()) => {
            log::info!(
                "removed {}, left by a writer (pid {}) that was killed",
                temp.display(),
                writer.pid
            );
            Ok(true)
        }
        // Another sweep removed it first.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error("remove the stale temporary file", temp)(e)),
    }
}

/// The file a write of `path` replaces.
fn destination(path: &Path, symlink: Symlink) -> Result<PathBuf, FileError> {
    if symlink == Symlink::Follow {
        if let Ok(m) = fs::symlink_metadata(path) {
            if m.file_type().is_symlink() {
                return fs::canonicalize(path).map_err(io_error("resolve the symlink", path));
            }
        }
    }
    Ok(path.to_path_buf())
}

/// The folder and file name of `path`.
fn split(path: &Path) -> Result<(&Path, &OsStr), FileError> {
    let name = path
        .file_name()
        .ok_or_else(|| FileError::NotAFile(path.to_path_buf()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Makes a rename in `dir` durable.
fn sync_folder(dir: &Path) -> Result<(), FileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync the folder", dir))
}

/// Makes a new `<dir>/.<name>.<pid>-<start>.<random>.nvc-tmp` with `create`, which must
/// fail with `AlreadyExists` when the name is taken; a fresh name is tried then.
fn create_temp<T>(
    dir: &Path,
    name: &OsStr,
    mut create: impl FnMut(&Path) -> io::Result<T>,
) -> Result<(PathBuf, T), FileError> {
    // Without /proc the name carries no start time, and no sweep ever takes the file
    // for stale.
    let writer = Writer::current().map_or_else(
        || format!("{}-unknown", std::process::id()),
        |w| format!("{}-{}", w.pid, w.start),
    );
    let mut last = None;
    for attempt in 0u32..16 {
        // RandomState is seeded from the OS for each process; hashing the pid and the
        // attempt on top gives a fresh name each try.
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u32(attempt);
        let mut file_name = OsString::from(".");
        file_name.push(name);
        file_name.push(format!(".{writer}.{:016x}{TEMP_SUFFIX}", h.finish()));
        let temp = dir.join(file_name);
        match create(&temp) {
            Ok(made) => return Ok((temp, made)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io_error("create a temporary file in", dir)(e)),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
    Err(io_error("create a temporary file in", dir)(e))
}

/// A process that writes temporary files, told apart from a later process with the same
/// pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Writer {
    pid: u32,
    /// When it started, in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    start: u64,
}

impl Writer {
    /// This process, or `None` when `/proc` cannot tell.
    fn current() -> Option<Writer> {
        // Read once per process (a hook writes several files): its start time does not
        // change; a forked child has a pid of its own, and reads its own.
        static OWN: std::sync::Mutex<Option<Writer>> = std::sync::Mutex::new(None);
        let pid = std::process::id();
        let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = *own {
            if w.pid == pid {
                return Some(w);
            }
        }
        let start = process_start(pid)?;
        *own = Some(Writer { pid, start });
        *own
    }

    /// Whether this process still runs: a process with its pid and start time exists.
    fn is_alive(&self) -> bool {
        process_start(self.pid) == Some(self.start)
    }
}

fn process_start(pid: u32) -> Option<u64> {
    crate::process::stat(i32::try_from(pid).ok()?).map(|s| s.start_time)
}

/// The writer named in `file_name` if it is a temporary file for the file `name`.
fn temp_writer(file_name: &OsStr, name: &OsStr) -> Option<Writer> {
    let (of, writer) = parse_temp_name(file_name)?;
    (of == name.to_str()?).then_some(writer)
}

/// The file a temporary file `.<name>.<pid>-<start>.<random>.nvc-tmp` is for, and its
/// writer; `None` for any other name. `<name>` may hold dots; the other parts do not.
fn parse_temp_name(file_name: &OsStr) -> Option<(&str, Writer)> {
    let rest = file_name
        .to_str()?
        .strip_prefix('.')?
        .strip_suffix(TEMP_SUFFIX)?;
    let (rest, random) = rest.rsplit_once('.')?;
    let (name, writer) = rest.rsplit_once('.')?;
    if name.is_empty() || random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (pid, start) = writer.split_once('-')?;
    Some((
        name,
        Writer {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::thread::{self, CapabilitySet};

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o7777
    }

    fn need_root(what: &str) {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test needs root: {what}"
        );
    }

    /// Runs `f` on this thread without `caps` in its effective set (capabilities are
    /// per thread, and each test has its own), then gives them back.
    fn without<T>(caps: CapabilitySet, f: impl FnOnce() -> T) -> T {
        struct Restore(thread::CapabilitySets);
        impl Drop for Restore {
            fn drop(&mut self) {
                thread::set_capabilities(None, self.0).unwrap();
            }
        }
        let saved = thread::capabilities(None).unwrap();
        let restore = Restore(saved);
        thread::set_capabilities(
            None,
            thread::CapabilitySets {
                effective: saved.effective - caps,
                ..saved
            },
        )
        .unwrap();
        let out = f();
        drop(restore);
        out
    }

    const ENGINE: WriteOptions = WriteOptions {
        create_parents: true,
        symlink: Symlink::Follow,
        ownership: Ownership::Required,
        ..WriteOptions::new(0o644)
    };

    #[test]
    fn replaces_and_keeps_mode_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        fs::write(&path, "{}").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        for options in [WriteOptions::new(0o644), ENGINE] {
            write_atomic(&path, br#"{"b":1}"#, &options).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), r#"{"b":1}"#);
            assert_eq!(mode(&path), 0o640, "{options:?}");
            assert_eq!(names(dir.path()), ["config.json"]);
        }
    }

    #[test]
    #[ignore = "needs root: it gives the file another owner"]
    fn keeps_the_owner() {
        need_root("it gives the file another owner");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.json");
        fs::write(&path, "{}").unwrap();
        std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o4750)).unwrap();
        for options in [WriteOptions::new(0o644), ENGINE] {
            write_atomic(&path, b"[]", &options).unwrap();
            let m = fs::metadata(&path).unwrap();
            assert_eq!((m.uid(), m.gid()), (1234, 5678), "{options:?}");
            // The set-id bit survives the chown (the mode is set after it).
            assert_eq!(m.mode() & 0o7777, 0o4750, "{options:?}");
        }
    }

    #[test]
    #[ignore = "needs root: it gives the file another owner, then drops CAP_CHOWN"]
    fn an_owner_that_cannot_be_kept_is_an_error_only_when_required() {
        need_root("it gives the file another owner, then drops CAP_CHOWN");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.json");
        fs::write(&path, "old").unwrap();
        std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
        without(CapabilitySet::CHOWN, || {
            let e = write_atomic(&path, b"new", &ENGINE).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("cannot give the old file's owner to "),
                "{e}"
            );
            assert_eq!(fs::read_to_string(&path).unwrap(), "old");
            assert_eq!(names(dir.path()), ["daemon.json"]);

            write_atomic(&path, b"new", &WriteOptions::new(0o644)).unwrap();
        });
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.uid(), rustix::process::geteuid().as_raw());
        assert_eq!(names(dir.path()), ["daemon.json"]);
    }

    #[test]
    fn a_new_file_gets_its_mode_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        // Modes a usual umask (022, 027, 077) would cut.
        for (name, new_mode) in [("a", 0o666), ("b", 0o777), ("c", 0o644), ("d", 0o600)] {
            let path = dir.path().join(name);
            write_atomic(&path, b"x", &WriteOptions::new(new_mode)).unwrap();
            assert_eq!(mode(&path), new_mode, "{name}");
        }
    }

    #[test]
    fn parent_folders_are_made_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conf.d/sub/99-nvc.toml");
        let e = write_atomic(&file, b"x", &WriteOptions::new(0o644)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot create a temporary file in "),
            "{e}"
        );
        assert!(!dir.path().join("conf.d").exists());

        write_atomic(&file, b"x", &ENGINE).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "x");
        assert_eq!(mode(&file), 0o644);
        assert!(fs::metadata(dir.path().join("conf.d/sub"))
            .unwrap()
            .is_dir());
        assert_eq!(names(&dir.path().join("conf.d/sub")), ["99-nvc.toml"]);
    }

    #[test]
    fn follow_writes_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("daemon.json");
        fs::write(&real, "{}").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write_atomic(&link, b"[]", &ENGINE).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "[]");
        assert_eq!(mode(&real), 0o600);
        assert_eq!(names(dir.path()), ["daemon.json", "real.json"]);

        // A link to nowhere names no file to replace.
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink("missing/x.json", &dangling).unwrap();
        let e = write_atomic(&dangling, b"[]", &ENGINE).unwrap_err();
        assert!(
            e.to_string().starts_with("cannot resolve the symlink "),
            "{e}"
        );
    }

    #[test]
    fn replace_puts_a_file_where_the_symlink_was() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let victim = outside.join("victim");
        fs::write(&victim, "keep").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
        let bundle = dir.path().join("bundle");
        fs::create_dir(&bundle).unwrap();
        let spec = bundle.join("config.json");
        std::os::unix::fs::symlink(&victim, &spec).unwrap();

        write_atomic(&spec, b"{}", &WriteOptions::new(0o644)).unwrap();
        let m = fs::symlink_metadata(&spec).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(fs::read_to_string(&spec).unwrap(), "{}");
        // The link's target gave nothing, not even its mode, and took nothing.
        assert_eq!(m.mode() & 0o7777, 0o644);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(names(&outside), ["victim"]);
        assert_eq!(names(&bundle), ["config.json"]);

        // A dangling link is replaced all the same.
        fs::remove_file(&spec).unwrap();
        std::os::unix::fs::symlink("/nonexistent/config.json", &spec).unwrap();
        write_atomic(&spec, b"{}", &WriteOptions::new(0o644)).unwrap();
        assert!(fs::symlink_metadata(&spec).unwrap().file_type().is_file());
    }

    #[test]
    fn failed_write_keeps_the_old_file_and_removes_the_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a non-empty folder: the rename over it fails after the temp file
        // was written.
        let path = dir.path().join("config.json");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), "x").unwrap();
        for options in [WriteOptions::new(0o644), ENGINE] {
            let e = write_atomic(&path, b"{}", &options).unwrap_err();
            assert!(e.to_string().starts_with("cannot replace "), "{e}");
            assert_eq!(names(dir.path()), ["config.json"]);
            assert!(path.join("keep").exists());
        }

        let e = write_atomic(Path::new("/"), b"{}", &WriteOptions::new(0o644)).unwrap_err();
        assert!(matches!(e, FileError::NotAFile(_)), "{e:?}");
    }

    #[test]
    #[ignore = "needs root: it drops CAP_DAC_OVERRIDE to make a read-only folder binding"]
    fn a_read_only_folder_keeps_the_old_file() {
        need_root("it drops CAP_DAC_OVERRIDE to make a read-only folder binding");
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("ro");
        fs::create_dir(&ro).unwrap();
        let path = ro.join("nvidia.yaml");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        let e = without(CapabilitySet::DAC_OVERRIDE, || {
            write_atomic(&path, b"new", &ENGINE).unwrap_err()
        });
        assert!(
            e.to_string().starts_with(&format!(
                "cannot create a temporary file in {}",
                ro.display()
            )),
            "{e}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(names(&ro), ["nvidia.yaml"]);
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn symlinks_are_made_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("nvidia-container-runtime-hook");
        symlink_atomic(Path::new("nvc-hook"), &link).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), PathBuf::from("nvc-hook"));
        symlink_atomic(Path::new("/usr/bin/nvc-hook"), &link).unwrap();
        assert_eq!(
            fs::read_link(&link).unwrap(),
            PathBuf::from("/usr/bin/nvc-hook")
        );
        assert_eq!(names(dir.path()), ["nvidia-container-runtime-hook"]);

        // A folder in the way: the temporary link goes too.
        let busy = dir.path().join("busy");
        fs::create_dir(&busy).unwrap();
        fs::write(busy.join("x"), "").unwrap();
        let e = symlink_atomic(Path::new("nvc-hook"), &busy).unwrap_err();
        assert!(e.to_string().starts_with("cannot replace "), "{e}");
        assert_eq!(names(dir.path()), ["busy", "nvidia-container-runtime-hook"]);
    }

    #[test]
    fn read_optional_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        assert_eq!(read_optional(&file).unwrap(), None);
        assert!(!remove(&file).unwrap());
        fs::write(&file, "text").unwrap();
        assert_eq!(read_optional(&file).unwrap().as_deref(), Some("text"));
        fs::write(&file, b"\xff").unwrap();
        let e = read_optional(&file).unwrap_err();
        assert!(matches!(e, FileError::NotText(_)), "{e:?}");
        assert!(remove(&file).unwrap());
        assert!(!file.exists());
        let e = read_optional(dir.path()).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");
    }

    #[test]
    fn this_process_is_its_own_writer() {
        let me = Writer::current().unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.is_alive());
        assert!(!Writer {
            start: me.start + 1,
            ..me
        }
        .is_alive());
    }

    #[test]
    fn temp_names() {
        let name = OsStr::new("config.json");
        let w = |s: &str| temp_writer(OsStr::new(s), name);
        assert_eq!(
            w(".config.json.12-345.0123456789abcdef.nvc-tmp"),
            Some(Writer {
                pid: 12,
                start: 345
            })
        );
        for other in [
            "config.json",
            ".config.json.12-345.0123456789abcdef.nvc-tmp.x",
            ".config.json.12-unknown.0123456789abcdef.nvc-tmp",
            ".config.json.0123456789abcdef.nvc-tmp",
            ".config.json.12-345.0123.nvc-tmp",
            ".other.json.12-345.0123456789abcdef.nvc-tmp",
            ".config.jsonx.12-345.0123456789abcdef.nvc-tmp",
            // The names of nvc's older writers are not this scheme.
            ".config.json.nvc-tmp.12",
            ".config.json.12.tmp",
        ] {
            assert_eq!(w(other), None, "{other}");
        }
    }

    #[test]
    fn the_writers_own_temp_names_parse_back_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let (temp, ()) =
            create_temp(dir.path(), OsStr::new("nvidia.yaml"), |p| fs::write(p, "")).unwrap();
        let name = temp.file_name().unwrap();
        assert_eq!(
            temp_writer(name, OsStr::new("nvidia.yaml")),
            Writer::current()
        );
        // A taken name is not reused: the next try has a fresh one; 16 taken names are
        // an error.
        let mut tried = Vec::new();
        let (third, ()) = create_temp(dir.path(), OsStr::new("nvidia.yaml"), |p| {
            tried.push(p.to_path_buf());
            if tried.len() < 3 {
                Err(io::Error::from(io::ErrorKind::AlreadyExists))
            } else {
                fs::write(p, "")
            }
        })
        .unwrap();
        assert_eq!(tried.len(), 3);
        assert_eq!(tried.last(), Some(&third));
        assert!(tried[0] != tried[1] && tried[1] != tried[2] && tried[0] != temp);
        let e = create_temp(dir.path(), OsStr::new("nvidia.yaml"), |_| {
            Err::<(), _>(io::Error::from(io::ErrorKind::AlreadyExists))
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot create a temporary file in "),
            "{e}"
        );
    }

    #[test]
    fn temp_files_of_dead_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        fs::write(&path, "{}").unwrap();
        let dead = dir
            .path()
            .join(".config.json.7-70.0123456789abcdef.nvc-tmp");
        let live = dir
            .path()
            .join(".config.json.8-80.0123456789abcdef.nvc-tmp");
        let other = dir.path().join(".other.json.7-70.0123456789abcdef.nvc-tmp");
        for f in [&dead, &live, &other] {
            fs::write(f, "{\"partial").unwrap();
        }
        let removed = remove_stale_with(&path, Symlink::Replace, &|w| w.pid == 8).unwrap();
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists() && live.exists() && other.exists());
        // Alive only by the predicate above.
        fs::remove_file(&live).unwrap();

        // With the real process table: what dead processes left goes, a live writer's
        // stays, and so do names that are not temporary files of config.json.
        let me = Writer::current().unwrap();
        let mine = dir.path().join(format!(
            ".config.json.{}-{}.0123456789abcdef.nvc-tmp",
            me.pid, me.start
        ));
        // This pid, another start: a process that had the pid before.
        let reused = dir.path().join(format!(
            ".config.json.{}-{}.0123456789abcdef.nvc-tmp",
            me.pid,
            me.start + 1
        ));
        // A writer killed with SIGKILL, as a writer killed between its create and its
        // rename is: alive while it runs, gone once reaped.
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let killed = Writer {
            pid: child.id(),
            start: process_start(child.id()).unwrap(),
        };
        assert!(killed.is_alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!killed.is_alive());
        let reaped = dir.path().join(format!(
            ".config.json.{}-{}.0123456789abcdef.nvc-tmp",
            killed.pid, killed.start
        ));
        // Past the kernel's largest pid: no such process.
        let gone = dir
            .path()
            .join(".config.json.99999999-1.0123456789abcdef.nvc-tmp");
        let unknown = dir
            .path()
            .join(".config.json.99999999-unknown.0123456789abcdef.nvc-tmp");
        let old_scheme = dir.path().join(".config.json.99999999.tmp");
        for f in [&mine, &reused, &reaped, &gone, &unknown, &old_scheme] {
            fs::write(f, "{").unwrap();
        }
        let mut removed = remove_stale_temp_files(&path, Symlink::Replace).unwrap();
        removed.sort();
        let mut want = vec![reused.clone(), reaped.clone(), gone.clone()];
        want.sort();
        assert_eq!(removed, want);
        for f in [&mine, &other, &unknown, &old_scheme, &path] {
            assert!(f.exists(), "{}", f.display());
        }

        // A folder that is not there holds nothing to remove.
        let missing = dir.path().join("missing/config.json");
        assert_eq!(
            remove_stale_temp_files(&missing, Symlink::Replace).unwrap(),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn one_entry_of_a_listing_is_swept_whatever_file_it_was_for() {
        let dir = tempfile::tempdir().unwrap();
        let me = Writer::current().unwrap();
        let files = [
            ".a.lease.99999999-1.0123456789abcdef.nvc-tmp".to_string(),
            ".GPU-1.99999999-1.0123456789abcdef.nvc-tmp".to_string(),
            format!(".b.lease.{}-{}.0123456789abcdef.nvc-tmp", me.pid, me.start),
            ".c.lease.99999999-unknown.0123456789abcdef.nvc-tmp".to_string(),
            "a.lease".to_string(),
        ];
        for f in &files {
            fs::write(dir.path().join(f), "{").unwrap();
        }
        let swept: Vec<bool> = files
            .iter()
            .map(|f| remove_if_stale_temp_file(dir.path(), OsStr::new(f)).unwrap())
            .collect();
        assert_eq!(swept, [true, true, false, false, false]);
        let mut left = files[2..].to_vec();
        left.sort();
        assert_eq!(names(dir.path()), left);
        // Gone meanwhile (another sweep): nothing to do.
        assert!(!remove_if_stale_temp_file(dir.path(), OsStr::new(&files[0])).unwrap());
    }

    #[test]
    fn the_sweep_looks_where_the_writer_writes() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = dir.path().join("real");
        fs::create_dir(&real_dir).unwrap();
        fs::write(real_dir.join("daemon.json"), "{}").unwrap();
        let link = dir.path().join("daemon.json");
        std::os::unix::fs::symlink("real/daemon.json", &link).unwrap();
        let temp = ".daemon.json.99999999-1.0123456789abcdef.nvc-tmp";
        let beside_link = dir.path().join(temp);
        let beside_target = real_dir.join(temp);
        fs::write(&beside_link, "").unwrap();
        fs::write(&beside_target, "").unwrap();

        let removed = remove_stale_temp_files(&link, Symlink::Follow).unwrap();
        assert_eq!(
            removed,
            vec![fs::canonicalize(&real_dir).unwrap().join(temp)]
        );
        assert!(beside_link.exists() && !beside_target.exists());

        fs::write(&beside_target, "").unwrap();
        let removed = remove_stale_temp_files(&link, Symlink::Replace).unwrap();
        assert_eq!(removed, vec![beside_link.clone()]);
        assert!(!beside_link.exists() && beside_target.exists());
    }
}
