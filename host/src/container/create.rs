//! Making things inside the root: directories one component at a time, empty mount points
//! (files, directories, device nodes), and symbolic links and files written by a temporary
//! name and `renameat`.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{walk, ContainerRoot, FileKind, FsError, Made, Resolver, ATTEMPTS};

/// What [`ContainerRoot::link_mount_point`] found or made.
#[derive(Debug)]
pub enum Staged {
    /// The link to the mount point elsewhere is there.
    Linked,
    /// The image has a regular file there: mount over it (an `O_PATH` fd of it).
    File(OwnedFd),
}

impl ContainerRoot {
    /// Creates every missing directory of `dir` (absolute, inside the container), one
    /// component at a time: each is made with `mkdirat` on its parent's fd. Existing
    /// components that are symbolic links are followed inside the root; a dangling one is
    /// an error. Returns an `O_PATH` fd of the directory, kept by this root with every
    /// folder on the way, so that each folder is resolved once per start.
    pub fn mkdir_all(&self, dir: &Path, mode: u32) -> Result<Arc<OwnedFd>, FsError> {
        const OP: &str = "create directory";
        self.check_absolute(OP, dir)?;
        if let Some(fd) = self.known_folder(dir) {
            return Ok(fd);
        }
        // Nearly always the folder exists: one resolution of the whole path, which is what
        // the walk below ends with too (each component is resolved from the root). Anything
        // else (missing, a link that dangles, not a folder) takes the walk, which makes what
        // is missing and names what is wrong.
        let whole = match self.lookup_dir(dir) {
            Ok(fd) => return Ok(self.keep_folder(dir, fd)),
            Err(e) => e,
        };
        // The walk starts at the deepest folder above `dir` that this root has resolved
        // already (the root itself at worst).
        let (mut current, mut prefix) = self.known_ancestor(OP, dir)?;
        let rest = dir.strip_prefix(&prefix).unwrap_or(dir).to_path_buf();
        // Whether the next component is known to be missing: the one below a folder made
        // just now, or the last one when the whole path was not found from its parent.
        let mut missing =
            whole == Errno::NOENT && rest.components().count() == 1 && rest.file_name().is_some();
        for component in rest.components() {
            let name = match component {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
                Component::ParentDir => None,
                Component::Normal(name) => Some(name),
            };
            prefix.push(component);
            let (fd, made) = self.dir_component(OP, &current, &prefix, name, mode, missing)?;
            missing = made;
            current = self.keep_folder(&prefix, fd);
        }
        Ok(current)
    }

    /// The deepest folder strictly above `dir` that this root has resolved already, and
    /// its path; else the root.
    fn known_ancestor(
        &self,
        op: &'static str,
        dir: &Path,
    ) -> Result<(Arc<OwnedFd>, PathBuf), FsError> {
        for above in dir.ancestors().skip(1) {
            if let Some(fd) = self.known_folder(above) {
                return Ok((fd, above.to_path_buf()));
            }
        }
        let root = Path::new("/");
        let fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0).map_err(|e| self.err(op, root, e))?;
        Ok((self.keep_folder(root, fd), root.to_path_buf()))
    }

    /// The directory `prefix` resolves to, made first with `mkdirat(parent, name)` when
    /// it is missing, and whether it was made. Where it is known to be `missing` (in a
    /// folder made just now), it is made without a lookup first. A folder made here is
    /// opened by its name in `parent` (on the root's mount, a link or another mount in its
    /// place refused), not resolved from the root again. A failure that a link on the way
    /// explains (dangling, a loop, a magic link) is returned; one that nothing explains any
    /// more (`ENOENT` for what `mkdirat` found, `ELOOP` from a link since gone) means the
    /// tree changed in between, and the component is resolved again, at most [`ATTEMPTS`]
    /// times.
    fn dir_component(
        &self,
        op: &'static str,
        parent: &OwnedFd,
        prefix: &Path,
        name: Option<&OsStr>,
        mode: u32,
        missing: bool,
    ) -> Result<(OwnedFd, bool), FsError> {
        let mut made = false;
        for attempt in 0..ATTEMPTS {
            let looked_up = if missing && attempt == 0 && name.is_some() {
                Err(Errno::NOENT)
            } else {
                self.lookup_dir(prefix)
            };
            let found = match (looked_up, name) {
                (Ok(fd), _) => return Ok((fd, made)),
                // Not a folder: looked at again below, to name what it is.
                (Err(Errno::NOTDIR), _) => self.lookup(prefix, true),
                (Err(Errno::NOENT), Some(name)) => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
                        Ok(()) => {
                            made = true;
                            self.note(Made::Dir {
                                path: self.shown(prefix),
                            });
                            if let Ok(fd) = self.open_made_dir(parent, name) {
                                return Ok((fd, true));
                            }
                        }
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.err(op, prefix, e)),
                    }
                    self.lookup(prefix, true)
                }
                (Err(e), _) => Err(e),
            };
            match found {
                Ok(fd) => {
                    self.expect_kind(op, prefix, &fd, FileKind::Directory)?;
                    return Ok((fd, made));
                }
                Err(e @ (Errno::NOENT | Errno::LOOP)) => match self.err(op, prefix, e) {
                    FsError::NotFound { .. } | FsError::Io { .. } => continue,
                    explained => return Err(explained),
                },
                Err(e) => return Err(self.err(op, prefix, e)),
            }
        }
        Err(self.raced(op, prefix))
    }

    /// The folder `name` just made in `parent`, opened by that name without following a
    /// link or leaving `parent`'s mount (the root's): whatever was put in its place since
    /// (a link, something else) fails, and the caller resolves the path again.
    fn open_made_dir(&self, parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match self.resolver {
            Resolver::Openat2 => {
                let how = ResolveFlags::BENEATH
                    | ResolveFlags::NO_SYMLINKS
                    | ResolveFlags::NO_MAGICLINKS
                    | ResolveFlags::NO_XDEV;
                rustix::fs::openat2(parent, name, flags, Mode::empty(), how)
            }
            Resolver::FdWalk => {
                let fd = rustix::fs::openat(parent, name, flags, Mode::empty())?;
                if walk::mount_id(fd.as_fd())? != self.mount {
                    return Err(Errno::XDEV);
                }
                Ok(fd)
            }
        }
    }

    /// A regular-file mount point at `path`: created empty with `O_CREAT|O_EXCL|O_NOFOLLOW`
    /// (and `mode`) in its parent (made by [`ContainerRoot::mkdir_all`]), or an existing
    /// regular file reused. Anything else at the final component (a symbolic link, a
    /// directory, a fifo, a socket, a device) is an error naming it: it is never followed
    /// nor replaced. Returns an fd of the file (the new file's own, or an `O_PATH` fd of the
    /// existing one), to attach a mount onto.
    pub fn file_mount_point(&self, path: &Path, mode: u32) -> Result<OwnedFd, FsError> {
        self.new_file_or_existing("create mount point", path, mode, |_| false)
    }

    /// The name of a file mount whose mount point lies elsewhere (on the runtime's `/dev`
    /// tmpfs, which a commit of the container's layer never sees): a symbolic link
    /// `path` -> `target` made where nothing is ([`Staged::Linked`]; a link to the same
    /// target already there, from another container on the same rootfs, is taken as is),
    /// or the image's own regular file at `path`, returned as an `O_PATH` fd to mount over
    /// as [`ContainerRoot::file_mount_point`] does ([`Staged::File`]). Anything else there
    /// (another link, a directory, a device) is an error naming it, never followed nor
    /// replaced.
    pub fn link_mount_point(&self, path: &Path, target: &str) -> Result<Staged, FsError> {
        const OP: &str = "create mount point";
        if self.read_only {
            return Err(self.read_only_err(OP, path));
        }
        let (dir, name) = self.parent_of(OP, path)?;
        for _ in 0..ATTEMPTS {
            match rustix::fs::symlinkat(target, &dir, &name) {
                Ok(()) => {
                    self.note(Made::Link {
                        path: self.shown(path),
                        target: target.to_string(),
                        previous: None,
                    });
                    return Ok(Staged::Linked);
                }
                Err(Errno::EXIST) => {}
                Err(e) => return Err(self.err(OP, path, e)),
            }
            match self.existing(OP, path, &dir, &name)? {
                Some((fd, FileKind::RegularFile)) => return Ok(Staged::File(fd)),
                Some((fd, FileKind::Symlink)) => {
                    let now = rustix::fs::readlinkat(&fd, "", Vec::new())
                        .map_err(|e| self.err(OP, path, e))?;
                    if now.as_bytes() == target.as_bytes() {
                        return Ok(Staged::Linked);
                    }
                    return Err(self.wrong_type(OP, path, FileKind::Symlink));
                }
                Some((_, found)) => return Err(self.wrong_type(OP, path, found)),
                None => continue,
            }
        }
        Err(self.raced(OP, path))
    }

    /// A directory mount point at `path`: made with `mkdirat` in its parent, or an existing
    /// directory reused. A symbolic link (or anything else) at the final component is an
    /// error. Returns an `O_PATH` fd of the directory.
    pub fn dir_mount_point(&self, path: &Path, mode: u32) -> Result<OwnedFd, FsError> {
        const OP: &str = "create mount point";
        let (dir, name) = self.parent_of(OP, path)?;
        for _ in 0..ATTEMPTS {
            match rustix::fs::mkdirat(&dir, &name, Mode::from_raw_mode(mode)) {
                Ok(()) => self.note(Made::Dir {
                    path: self.shown(path),
                }),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(self.err(OP, path, e)),
            }
            match self.existing(OP, path, &dir, &name)? {
                Some((fd, FileKind::Directory)) => return Ok(fd),
                Some((_, found)) => return Err(self.wrong_type(OP, path, found)),
                None => continue,
            }
        }
        Err(self.raced(OP, path))
    }

    /// A device-node mount point at `path`: an empty regular file made as by
    /// [`ContainerRoot::file_mount_point`] (a regular file already there is reused too),
    /// onto which the host's device node is bind-mounted. An existing character device is
    /// reused only if its `st_rdev` is `major:minor`; anything else is an error.
    pub fn device_mount_point(
        &self,
        path: &Path,
        major: u32,
        minor: u32,
    ) -> Result<OwnedFd, FsError> {
        const OP: &str = "create device mount point";
        self.new_file_or_existing(OP, path, 0o644, |found| match found {
            FileKind::CharDevice(ma, mi) => ma == major && mi == minor,
            _ => false,
        })
        .map_err(|e| match e {
            FsError::WrongType {
                op,
                path,
                root,
                found: found @ FileKind::CharDevice(..),
            } => FsError::WrongDevice {
                op,
                path,
                root,
                found,
                major,
                minor,
            },
            e => e,
        })
    }

    /// Creates the regular file `path` with `O_CREAT|O_EXCL|O_NOFOLLOW` or reuses what is
    /// there if it is a regular file or `also_reuse` accepts it.
    fn new_file_or_existing(
        &self,
        op: &'static str,
        path: &Path,
        mode: u32,
        also_reuse: impl Fn(FileKind) -> bool,
    ) -> Result<OwnedFd, FsError> {
        let (dir, name) = self.parent_of(op, path)?;
        for _ in 0..ATTEMPTS {
            let flags = OFlags::RDONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::NOCTTY
                | OFlags::CLOEXEC;
            match rustix::fs::openat(&dir, &name, flags, Mode::from_raw_mode(mode)) {
                Ok(created) => {
                    // The fd of the file made here, in a folder on the root's mount, is
                    // the mount point: whatever a racing rename puts at the name later,
                    // the mount goes onto this file.
                    self.note(Made::File {
                        path: self.shown(path),
                    });
                    return Ok(created);
                }
                Err(Errno::EXIST) => match self.existing(op, path, &dir, &name)? {
                    Some((fd, FileKind::RegularFile)) => return Ok(fd),
                    Some((fd, found)) if also_reuse(found) => return Ok(fd),
                    Some((_, found)) => return Err(self.wrong_type(op, path, found)),
                    None => {}
                },
                Err(e) => return Err(self.err(op, path, e)),
            }
        }
        Err(self.raced(op, path))
    }

    /// Creates or replaces the symbolic link `link` -> `target`: `symlinkat` to a random
    /// temporary name in the resolved parent directory, then `renameat` over `link`. An
    /// existing symbolic link or regular file is replaced, anything else (a directory, a
    /// fifo, a device) is an error; an existing link with the same target is left alone.
    pub fn symlink(&self, link: &Path, target: &str) -> Result<(), FsError> {
        const OP: &str = "create symbolic link";
        if self.read_only {
            return Err(self.read_only_err(OP, link));
        }
        let (dir, name) = self.parent_of(OP, link)?;
        if self.existing(OP, link, &dir, &name)?.is_none() {
            // Nothing there: the link is made in place (one system call, not a temporary
            // name and a rename); something that appeared meanwhile is looked at again.
            match rustix::fs::symlinkat(target, &dir, &name) {
                Ok(()) => {
                    self.note(Made::Link {
                        path: self.shown(link),
                        target: target.to_string(),
                        previous: None,
                    });
                    return Ok(());
                }
                Err(Errno::EXIST) => {}
                Err(e) => return Err(self.err(OP, link, e)),
            }
        }
        let mut previous = None;
        match self.existing(OP, link, &dir, &name)? {
            Some((fd, FileKind::Symlink)) => {
                let current = rustix::fs::readlinkat(&fd, "", Vec::new())
                    .map_err(|e| self.err(OP, link, e))?;
                if current.as_bytes() == target.as_bytes() {
                    return Ok(());
                }
                previous = current.into_string().ok();
            }
            Some((_, FileKind::RegularFile)) | None => {}
            Some((_, found)) => return Err(self.wrong_type(OP, link, found)),
        }
        let (tmp, ()) =
            self.with_temp_name(OP, link, |tmp| rustix::fs::symlinkat(target, &dir, tmp))?;
        self.rename_into_place(OP, link, &dir, &tmp, &name)?;
        self.note(Made::Link {
            path: self.shown(link),
            target: target.to_string(),
            previous,
        });
        Ok(())
    }

    /// Writes `data` to `path` atomically: a temporary file made with
    /// `O_CREAT|O_EXCL|O_NOFOLLOW` in the resolved parent directory, written,
    /// `fchmod`ed to `mode`, then renamed over `path`. Not fsynced: what is written here
    /// (the container's ld.so.cache) dies with the container, which a crash loses
    /// anyway; the rename alone keeps readers from a torn file. A symbolic link at `path` is
    /// replaced, never followed; an existing regular file is replaced, never written into
    /// (it may be a hard link to a file elsewhere); anything else is an error.
    pub fn write_file(&self, path: &Path, data: &[u8], mode: u32) -> Result<(), FsError> {
        const OP: &str = "write";
        if self.read_only {
            return Err(self.read_only_err(OP, path));
        }
        let (dir, name) = self.parent_of(OP, path)?;
        match self.existing(OP, path, &dir, &name)? {
            Some((_, FileKind::RegularFile | FileKind::Symlink)) | None => {}
            Some((_, found)) => return Err(self.wrong_type(OP, path, found)),
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (tmp, fd) = self.with_temp_name(OP, path, |tmp| {
            rustix::fs::openat(&dir, tmp, flags, Mode::from_raw_mode(0o600))
        })?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(data).and_then(|()| {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(io::Error::from)
        });
        drop(file);
        if let Err(source) = written {
            let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
            return Err(FsError::Io {
                op: OP,
                path: self.shown(path),
                root: self.path.clone(),
                source,
            });
        }
        self.rename_into_place(OP, path, &dir, &tmp, &name)
    }
    /// Makes (or finds) the parent directory of `path` and returns its fd and the final
    /// name, which must be a plain name (not `.` or `..`).
    pub(super) fn parent_of(
        &self,
        op: &'static str,
        path: &Path,
    ) -> Result<(Arc<OwnedFd>, OsString), FsError> {
        self.check_absolute(op, path)?;
        let invalid = |reason| FsError::InvalidPath {
            op,
            path: self.shown(path),
            root: self.path.clone(),
            reason,
        };
        let mut components: Vec<Component<'_>> = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        let name = match components.pop() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => return Err(invalid("it does not end in a file name")),
        };
        if path.as_os_str().as_bytes().ends_with(b"/") {
            return Err(invalid("it ends in a slash"));
        }
        let parent: PathBuf = components.iter().collect();
        Ok((self.mkdir_all(&parent, 0o755)?, name))
    }

    /// What is at `name` in `dir`, not following a symbolic link, or None.
    pub(super) fn existing(
        &self,
        op: &'static str,
        path: &Path,
        dir: &OwnedFd,
        name: &OsStr,
    ) -> Result<Option<(OwnedFd, FileKind)>, FsError> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => {
                // A mount point (a volume, a file the spec binds) is another mount's.
                let (mount, kind) =
                    walk::mount_and_kind(fd.as_fd()).map_err(|e| self.err(op, path, e))?;
                if mount != self.mount {
                    return Err(self.other_mount(op, path));
                }
                Ok(Some((fd, kind)))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.err(op, path, e)),
        }
    }
    /// Calls `make` with fresh random names `.nvc-<hex>` until one does not exist yet.
    pub(super) fn with_temp_name<T>(
        &self,
        op: &'static str,
        path: &Path,
        mut make: impl FnMut(&OsStr) -> Result<T, Errno>,
    ) -> Result<(OsString, T), FsError> {
        for _ in 0..ATTEMPTS {
            let mut bytes = [0u8; 8];
            rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
                .map_err(|e| self.err(op, path, e))?;
            let name = OsString::from(format!(".nvc-{:016x}", u64::from_ne_bytes(bytes)));
            match make(&name) {
                Ok(made) => return Ok((name, made)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(self.err(op, path, e)),
            }
        }
        Err(self.raced(op, path))
    }

    pub(super) fn rename_into_place(
        &self,
        op: &'static str,
        path: &Path,
        dir: &OwnedFd,
        tmp: &OsStr,
        name: &OsStr,
    ) -> Result<(), FsError> {
        rustix::fs::renameat(dir, tmp, dir, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(dir, tmp, rustix::fs::AtFlags::empty());
            match e {
                Errno::ISDIR | Errno::NOTEMPTY => self.wrong_type(op, path, FileKind::Directory),
                e => self.err(op, path, e),
            }
        })
    }
}
