//! Reading inside the root: a regular file's bytes ([`ContainerRoot::read_file`]) and a
//! directory's names ([`ContainerRoot::read_dir`]), each bounded by the caller.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::{ContainerRoot, FileKind, FsError};

impl ContainerRoot {
    /// Reads the regular file at `path` (symbolic links followed inside the root), at most
    /// `max` bytes: a larger file is an error, and so is anything but a regular file (a
    /// fifo or a device is never opened for reading).
    pub fn read_file(&self, path: &Path, max: usize) -> Result<Vec<u8>, FsError> {
        const OP: &str = "read";
        let fd = self.resolve(path)?;
        let st = self.expect_kind(OP, path, &fd, FileKind::RegularFile)?;
        // An O_PATH fd cannot be read; reopen the very inode it holds through procfs (the
        // host's /proc: never a path inside the root), so a file swapped in after the
        // check above is never opened.
        // O_NONBLOCK: a regular file never blocks, and this one is checked to be one; the
        // flag makes sure of it should anything else ever get here.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = reopen(&fd, flags).map_err(|e| {
            // Not NotFound even for ENOENT: the file exists, /proc/self/fd may not.
            FsError::Io {
                op: OP,
                path: self.shown(path),
                root: self.path.clone(),
                source: e.into(),
            }
        })?;
        let again = rustix::fs::fstat(&file).map_err(|e| self.err(OP, path, e))?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(self.raced(OP, path));
        }
        // Sized by the file: one read, and one to see its end (a cache grown from empty
        // took 8 reads for 1.5 KB).
        let mut data =
            Vec::with_capacity(usize::try_from(again.st_size).unwrap_or(max).min(max) + 1);
        std::fs::File::from(file)
            .take(max as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|source| FsError::Io {
                op: OP,
                path: self.shown(path),
                root: self.path.clone(),
                source,
            })?;
        if data.len() > max {
            return Err(FsError::TooLarge {
                path: self.shown(path),
                root: self.path.clone(),
                max,
            });
        }
        Ok(data)
    }

    /// The names in the directory `dir` (symbolic links followed inside the root), sorted,
    /// without `.` and `..`, at most `max` of them (more is an error). Names that are not
    /// UTF-8 are left out: nothing nvc looks for has one.
    pub fn read_dir(&self, dir: &Path, max: usize) -> Result<Vec<String>, FsError> {
        const OP: &str = "list";
        let fd = self.resolve(dir)?;
        self.expect_kind(OP, dir, &fd, FileKind::Directory)?;
        // "." of an O_PATH directory fd is that directory: no lookup in the root happens.
        let readable = rustix::fs::openat(
            &fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.err(OP, dir, e))?;
        let mut entries = rustix::fs::Dir::new(readable).map_err(|e| self.err(OP, dir, e))?;
        let mut names = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| self.err(OP, dir, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == max {
                return Err(FsError::TooManyEntries {
                    path: self.shown(dir),
                    root: self.path.clone(),
                    max,
                });
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// The host's procfs, opened before this process entered a container's mount
/// namespace ([`keep_host_proc`]).
static HOST_PROC: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();

/// Keeps the host's `/proc` open for [`reopen`]: called in the host's mount namespace,
/// before entering a container's, where `/proc` may be the container's own procfs (whose
/// `self` does not name a process outside its pid namespace) or anything it mounted.
pub(crate) fn keep_host_proc() -> Result<(), Errno> {
    if HOST_PROC.get().is_none() {
        let proc = rustix::fs::open(
            "/proc",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let _ = HOST_PROC.set(proc);
    }
    Ok(())
}

/// The host's procfs kept by [`keep_host_proc`], once a mount namespace was entered.
pub(crate) fn host_proc() -> Option<BorrowedFd<'static>> {
    HOST_PROC.get().map(AsFd::as_fd)
}

/// Opens the inode an `O_PATH` fd holds, with `flags`, through the host's procfs.
fn reopen(fd: &OwnedFd, flags: OFlags) -> Result<OwnedFd, Errno> {
    match HOST_PROC.get() {
        Some(proc) => rustix::fs::openat(
            proc,
            format!("self/fd/{}", fd.as_raw_fd()),
            flags,
            Mode::empty(),
        ),
        None => rustix::fs::open(
            format!("/proc/self/fd/{}", fd.as_raw_fd()),
            flags,
            Mode::empty(),
        ),
    }
}
