//! Opening a container's root filesystem ([`ContainerRoot::open`]) and resolving paths
//! inside it, with the [`Resolver`] the kernel allows.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use rustix::fs::{Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

use super::{walk, ContainerRoot, FileKind, FsError};

/// How paths are resolved inside the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` (Linux 5.6): the kernel keeps the
    /// walk inside the root, `..` stops at it, absolute symlinks restart at it, and
    /// procfs magic links are refused.
    Openat2,
    /// For kernels without openat2: a component-by-component walk with
    /// `openat(O_PATH|O_NOFOLLOW)`, following symbolic links by reading them and resolving
    /// their targets with the same root-relative semantics (absolute targets restart at the
    /// root fd, `..` is lexical and never goes above the root, at most 40 links). A link
    /// on procfs whose target is absolute or not a path (`/proc/N/cwd`, `fd/N`, `ns/mnt`)
    /// is a magic link and is refused, as openat2 refuses it.
    FdWalk,
}

impl Resolver {
    /// [`Resolver::Openat2`] when the kernel has a working openat2, else
    /// [`Resolver::FdWalk`]. Any failure of the probe (ENOSYS on old kernels, EPERM from a
    /// seccomp filter) picks the walk, which is as safe, only slower.
    pub fn detect() -> Resolver {
        let how = rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(
            CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        ) {
            Ok(_) => Resolver::Openat2,
            Err(_) => Resolver::FdWalk,
        }
    }
}
impl ContainerRoot {
    /// Opens the rootfs at `rootfs` (a trusted host path, from the bundle's config.json)
    /// with [`Resolver::detect`].
    pub fn open(rootfs: &Path) -> Result<Self, FsError> {
        Self::open_with(rootfs, Resolver::detect())
    }

    /// Opens the rootfs at `rootfs` with the given resolver. A rootfs that is the root
    /// directory of the caller (the host's, or the mount namespace's it entered) is
    /// refused: [`FsError::HostRoot`].
    pub fn open_with(rootfs: &Path, resolver: Resolver) -> Result<Self, FsError> {
        let fd = rustix::fs::open(
            rootfs,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::Host {
            op: "open container root",
            path: rootfs.to_path_buf(),
            source: e.into(),
        })?;
        refuse_root_dir(&fd, rootfs)?;
        Self::from_fd(fd, rootfs, resolver)
    }

    /// The one constructor of a root: the folder `fd` is open on, named `shown` in
    /// messages, resolved with `resolver`; everything on its mount.
    pub(super) fn from_fd(fd: OwnedFd, shown: &Path, resolver: Resolver) -> Result<Self, FsError> {
        let mount = walk::mount_id(fd.as_fd()).map_err(|e| FsError::Host {
            op: "find the mount of",
            path: shown.to_path_buf(),
            source: e.into(),
        })?;
        Ok(ContainerRoot {
            fd,
            resolver,
            path: shown.to_path_buf(),
            mount,
            prefix: PathBuf::from("/"),
            read_only: false,
            propagation: Default::default(),
            journal: Default::default(),
            journaled: true,
            dirs: Default::default(),
        })
    }

    /// Makes this root read-only for nvc (`root.readonly`): every operation that writes
    /// content (a file's data, a symbolic link) fails with [`FsError::ReadOnly`]. Empty
    /// mount points, files and folders, are still made where missing, as the runtime
    /// makes them for the spec's own mounts in a read-only rootfs.
    pub fn set_read_only(&mut self) {
        self.read_only = true;
    }

    /// Whether nvc may create nothing here.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// The rootfs on the host, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The resolver in use.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// An `O_PATH` fd of `path` (absolute, as seen from inside the container), following
    /// symbolic links inside the root and on its mount, or [`FsError::NotFound`] (or
    /// [`FsError::OtherMount`]).
    pub fn resolve(&self, path: &Path) -> Result<OwnedFd, FsError> {
        const OP: &str = "resolve";
        self.check_absolute(OP, path)?;
        self.lookup(path, true).map_err(|e| self.err(OP, path, e))
    }

    /// What `path` resolves to, links followed inside the root and *across* mounts, as its
    /// kind, device and inode: to tell which names are one file where files are mounts of
    /// their own (the runtime's bind mounts of a CDI spec's libraries). Only an `O_PATH` fd
    /// is opened and only `fstat` is asked of it, so nothing is read and nothing can
    /// block; the answer is for comparing, never for acting on.
    pub fn identify(&self, path: &Path) -> Result<(FileKind, u64, u64), FsError> {
        const OP: &str = "resolve";
        self.check_absolute(OP, path)?;
        let fd = self
            .lookup_across(path, true)
            .map_err(|e| self.err(OP, path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.err(OP, path, e))?;
        Ok((FileKind::of(&st), st.st_dev, st.st_ino))
    }

    /// Whether `path` resolves to a directory inside the root; one that does is kept, as
    /// [`ContainerRoot::mkdir_all`] keeps the folders it resolves.
    pub fn is_dir(&self, path: &Path) -> bool {
        if !path.is_absolute() {
            return false;
        }
        if self.known_folder(path).is_some() {
            return true;
        }
        match self.lookup_dir(path) {
            Ok(fd) => {
                self.keep_folder(path, fd);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `path` resolves to a regular file inside the root.
    pub fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(FileKind::RegularFile)
    }

    /// What `path` resolves to inside the root (on its mount), if anything.
    fn kind(&self, path: &Path) -> Option<FileKind> {
        let fd = self.resolve(path).ok()?;
        rustix::fs::fstat(&fd).ok().map(|st| FileKind::of(&st))
    }
    /// Resolves `path` with this root's resolver; `follow_final` says whether a symbolic
    /// link at the last component is followed or returned itself.
    /// Fails with `EXDEV` where the path leaves the root's mount.
    pub(super) fn lookup(&self, path: &Path, follow_final: bool) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_in_root(self.fd.as_fd(), path, follow_final, false),
            Resolver::FdWalk => {
                walk::fd_walk_in_root(self.fd.as_fd(), path, follow_final, Some(self.mount))
            }
        }
    }

    /// [`ContainerRoot::lookup`] of a folder, links followed: `ENOTDIR` when `path` is
    /// something else. With openat2 the kernel checks it (`O_DIRECTORY`); the walk asks
    /// `fstat`.
    pub(super) fn lookup_dir(&self, path: &Path) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_dir_in_root(self.fd.as_fd(), path),
            Resolver::FdWalk => {
                let fd = walk::fd_walk_in_root(self.fd.as_fd(), path, true, Some(self.mount))?;
                let st = rustix::fs::fstat(&fd)?;
                if FileKind::of(&st) != FileKind::Directory {
                    return Err(Errno::NOTDIR);
                }
                Ok(fd)
            }
        }
    }

    /// [`ContainerRoot::lookup`] that may cross mounts: only to explain a failure, never
    /// to act on what it finds (an `O_PATH` fd opens nothing, so it cannot block).
    pub(super) fn lookup_across(&self, path: &Path, follow_final: bool) -> Result<OwnedFd, Errno> {
        match self.resolver {
            Resolver::Openat2 => walk::openat2_in_root(self.fd.as_fd(), path, follow_final, true),
            Resolver::FdWalk => walk::fd_walk_in_root(self.fd.as_fd(), path, follow_final, None),
        }
    }
    /// The parent directory of `path`, which must exist (nothing is created), and the
    /// final name.
    pub(super) fn existing_parent(
        &self,
        op: &'static str,
        path: &Path,
    ) -> Result<(Arc<OwnedFd>, OsString), FsError> {
        self.check_absolute(op, path)?;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(FsError::InvalidPath {
                op,
                path: self.shown(path),
                root: self.path.clone(),
                reason: "it does not end in a file name",
            });
        };
        let dir = self.folder(parent, || {
            match self.lookup_dir(parent) {
                Ok(dir) => Ok(dir),
                // Something else: named by what it is.
                Err(Errno::NOTDIR) => {
                    let found = self
                        .lookup(parent, true)
                        .map_err(|e| self.err(op, parent, e))?;
                    self.expect_kind(op, parent, &found, FileKind::Directory)?;
                    Err(self.raced(op, parent))
                }
                Err(e) => Err(self.err(op, parent, e)),
            }
        })?;
        Ok((dir, name.to_os_string()))
    }

    /// The folder `dir` as resolved earlier by this root, else as `resolve` finds (or
    /// makes) it, then kept.
    pub(super) fn folder(
        &self,
        dir: &Path,
        resolve: impl FnOnce() -> Result<OwnedFd, FsError>,
    ) -> Result<Arc<OwnedFd>, FsError> {
        if let Some(fd) = self.known_folder(dir) {
            return Ok(fd);
        }
        Ok(self.keep_folder(dir, resolve()?))
    }

    /// The folder `dir` as resolved earlier by this root, if it was.
    pub(super) fn known_folder(&self, dir: &Path) -> Option<Arc<OwnedFd>> {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(dir)
            .cloned()
    }

    /// Keeps `fd` as the folder `dir` for the rest of this root's work.
    pub(super) fn keep_folder(&self, dir: &Path, fd: OwnedFd) -> Arc<OwnedFd> {
        let fd = Arc::new(fd);
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dir.to_path_buf(), Arc::clone(&fd));
        fd
    }
    pub(super) fn check_absolute(&self, op: &'static str, path: &Path) -> Result<(), FsError> {
        if path.is_absolute() {
            Ok(())
        } else {
            Err(FsError::InvalidPath {
                op,
                path: self.shown(path),
                root: self.path.clone(),
                reason: "it is not an absolute path",
            })
        }
    }
    pub(super) fn expect_kind(
        &self,
        op: &'static str,
        path: &Path,
        fd: &OwnedFd,
        want: FileKind,
    ) -> Result<Stat, FsError> {
        let st = rustix::fs::fstat(fd).map_err(|e| self.err(op, path, e))?;
        let found = FileKind::of(&st);
        if found == want {
            Ok(st)
        } else {
            Err(self.wrong_type(op, path, found))
        }
    }
}

/// Refuses `fd` (the rootfs at `path`) when it is the caller's root directory: the
/// host's, or the mount namespace's entered, which before `pivot_root` is a copy of it.
fn refuse_root_dir(fd: &OwnedFd, path: &Path) -> Result<(), FsError> {
    let host = |e: Errno| FsError::Host {
        op: "examine",
        path: path.to_path_buf(),
        source: e.into(),
    };
    let st = rustix::fs::fstat(fd).map_err(host)?;
    let root = rustix::fs::stat("/").map_err(host)?;
    if (st.st_dev, st.st_ino) == (root.st_dev, root.st_ino) {
        return Err(FsError::HostRoot {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Refuses a rootfs that is the caller's root directory, before anything is done with
/// it ([`FsError::HostRoot`]); [`ContainerRoot::open`] checks the same again where it is
/// opened.
pub fn refuse_host_root(rootfs: &Path) -> Result<(), FsError> {
    let fd = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| FsError::Host {
        op: "open container root",
        path: rootfs.to_path_buf(),
        source: e.into(),
    })?;
    refuse_root_dir(&fd, rootfs)
}
