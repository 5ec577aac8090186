//! The host's cache of the driver's files ([`libnvc::discover::DriverFiles`]), so that one
//! full discovery serves every container start until the driver changes: a file per set
//! of driver roots under `/run/nvc` ([`DEFAULT_DIR`]), written by the first hook that
//! discovers the driver in full and read by the next ones.
//!
//! An entry is used only when all of this holds; anything else is logged and the hook
//! discovers the driver as if there were no cache (and writes a new entry):
//!
//! - the folder and the file are opened without following a link (`O_NOFOLLOW`), are
//!   owned by root (or this process's user) and writable by no one else, and the file is
//!   a regular file of at most [`MAX_SIZE`] bytes that parses;
//! - it was written by this version of nvc, for the same driver roots and the driver
//!   version the kernel module reports now (`/proc/driver/nvidia/version`);
//! - the driver root's `/etc/ld.so.cache` is the same file, unchanged (device, inode,
//!   size, mtime, ctime, of the link and of what it names): installing a driver, or any
//!   library, runs `ldconfig`, which replaces it;
//! - every file it names is under the driver root and is still the same regular file
//!   (the same identity), so a file removed or replaced since sends discovery to the
//!   host.
//!
//! Why a container cannot write it: `/run` is the host's; a container sees its own
//! `/run`, and nvc never mounts the host's into one. Only a process that can write the
//! host's `/run/nvc` as root (or as the hook's user) could plant an entry, and such a
//! process owns the host already. The checks above still keep an entry left by anything
//! else (another user, a link, a file damaged by a crash, an older nvc) from being read.
//! Not seen: a driver file added without `ldconfig` running and without a new driver
//! version (say, a Vulkan ICD file copied in by hand); removing `/run/nvc` (or a reboot)
//! forgets every entry.

use std::fs::{self, File, Metadata};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use libnvc::discover::{DriverFiles, DriverRoots, FilesCache};
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::files::{self, Symlink, WriteOptions};
use crate::state::StateDir;

/// Where the hook keeps its entries.
pub const DEFAULT_DIR: &str = "/run/nvc";
/// The largest entry read.
pub const MAX_SIZE: u64 = 4 << 20;
/// The layout of an entry; an entry of another layout is not read.
const FORMAT: u32 = 1;

/// What says that a file is still the one an entry saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(m: &Metadata) -> Identity {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// One entry, as written.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    format: u32,
    nvc: String,
    root: PathBuf,
    dev_root: PathBuf,
    proc_root: PathBuf,
    /// `<root>/etc/ld.so.cache`: the link (or file) itself, and what it names.
    ldcache: (Option<Identity>, Option<Identity>),
    driver: DriverFiles,
    /// Every file of `driver`, in its order.
    identities: Vec<Identity>,
}

/// The cache in the state folder.
#[derive(Debug, Clone)]
pub struct RunCache {
    state: StateDir,
}

impl Default for RunCache {
    fn default() -> Self {
        RunCache::new(&StateDir::new(
            Path::new(DEFAULT_DIR),
            Path::new(nvc_config::DEFAULT_LEASES_DIR),
        ))
    }
}

impl RunCache {
    /// The cache in `state`'s folder (made when first written to).
    pub fn new(state: &StateDir) -> Self {
        RunCache {
            state: state.clone(),
        }
    }

    /// The file that holds the entry for `roots`.
    pub fn path_for(&self, roots: &DriverRoots) -> PathBuf {
        self.state
            .files_cache_entry(&[&roots.root, &roots.dev_root, &roots.proc_root])
    }

    /// The entry for `roots` at driver `version`, or why there is none to use.
    pub fn read(&self, roots: &DriverRoots, version: &str) -> Result<DriverFiles, Refused> {
        let path = self.path_for(roots);
        let dir = open_trusted_dir(self.state.root())?;
        let name = path.file_name().unwrap_or_default();
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => Refused::Missing,
            e => Refused::Untrusted(format!("cannot open it: {e}")),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Refused::Untrusted(format!("fstat: {e}")))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Refused::Untrusted("not a regular file".into()));
        }
        trusted_owner(st.st_uid, st.st_mode)?;
        if st.st_size as u64 > MAX_SIZE {
            return Err(Refused::Untrusted(format!("larger than {MAX_SIZE} bytes")));
        }
        // Room for the whole entry and one byte more: one read, then one that finds the end.
        let mut bytes = Vec::with_capacity(usize::try_from(st.st_size).unwrap_or(0) + 1);
        File::from(fd)
            .take(MAX_SIZE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Refused::Untrusted(format!("cannot read it: {e}")))?;
        let entry: Entry = serde_json::from_slice(&bytes)
            .map_err(|e| Refused::Untrusted(format!("not an entry: {e}")))?;
        check(&entry, roots, version)?;
        Ok(entry.driver)
    }

    /// Writes the entry for `roots`.
    pub fn write(&self, roots: &DriverRoots, driver: &DriverFiles) -> Result<(), Refused> {
        let identities = driver
            .host_files()
            .map(|p| {
                fs::symlink_metadata(p)
                    .map(|m| Identity::of(&m))
                    .map_err(|e| Refused::Stale(format!("{}: {e}", p.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let entry = Entry {
            format: FORMAT,
            nvc: writer(),
            root: roots.root.clone(),
            dev_root: roots.dev_root.clone(),
            proc_root: roots.proc_root.clone(),
            ldcache: ldcache_identity(&roots.root),
            driver: driver.clone(),
            identities,
        };
        match rustix::fs::mkdir(self.state.root(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(Refused::Untrusted(format!("cannot create the folder: {e}"))),
        }
        // The folder must be one this process would read from.
        open_trusted_dir(self.state.root())?;
        let path = self.path_for(roots);
        let bytes = serde_json::to_vec(&entry).map_err(|e| Refused::Untrusted(e.to_string()))?;
        if let Err(e) = files::remove_stale_temp_files(&path, Symlink::Replace) {
            log::warn!("{}", libnvc::report::error_chain(&e));
        }
        // What was there is not to be kept, not even its owner and mode (write_atomic
        // keeps those of the file it replaces).
        files::remove(&path).map_err(|e| Refused::Untrusted(libnvc::report::error_chain(&e)))?;
        // Under /run (tmpfs on most hosts), and rebuilt by the next discovery when lost:
        // not synced.
        let options = WriteOptions {
            durable: false,
            ..WriteOptions::new(0o644)
        };
        files::write_atomic(&path, &bytes, &options)
            .map_err(|e| Refused::Untrusted(libnvc::report::error_chain(&e)))
    }
}

impl FilesCache for RunCache {
    fn load(&self, roots: &DriverRoots, version: &str) -> Option<DriverFiles> {
        match self.read(roots, version) {
            Ok(driver) => {
                log::debug!(
                    "driver files of {version} from {}",
                    self.path_for(roots).display()
                );
                Some(driver)
            }
            Err(Refused::Missing) => None,
            Err(why) => {
                log::info!(
                    "not using {}: {why}; discovering the driver",
                    self.path_for(roots).display()
                );
                None
            }
        }
    }

    fn store(&self, roots: &DriverRoots, driver: &DriverFiles) {
        if let Err(why) = self.write(roots, driver) {
            log::info!(
                "cannot keep the driver's files in {}: {why}; the next start discovers them again",
                self.path_for(roots).display()
            );
        }
    }
}

/// Why an entry is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// There is none.
    #[error("no entry")]
    Missing,
    /// It, or its folder, is not one to trust.
    #[error("untrusted ({0})")]
    Untrusted(String),
    /// It is for another nvc, driver root or driver, or a file changed since.
    #[error("out of date ({0})")]
    Stale(String),
}

/// The cache folder, opened without following a link, owned by root (or this user) and
/// writable by no one else.
fn open_trusted_dir(dir: &Path) -> Result<std::os::fd::OwnedFd, Refused> {
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT => Refused::Missing,
        e => Refused::Untrusted(format!("cannot open the folder {}: {e}", dir.display())),
    })?;
    let st = rustix::fs::fstat(fd.as_fd())
        .map_err(|e| Refused::Untrusted(format!("fstat {}: {e}", dir.display())))?;
    trusted_owner(st.st_uid, st.st_mode)?;
    Ok(fd)
}

fn trusted_owner(uid: u32, mode: u32) -> Result<(), Refused> {
    let me = rustix::process::geteuid().as_raw();
    if uid != 0 && uid != me {
        return Err(Refused::Untrusted(format!("owned by uid {uid}")));
    }
    if mode & 0o022 != 0 {
        return Err(Refused::Untrusted(format!(
            "writable by others (mode {:o})",
            mode & 0o7777
        )));
    }
    Ok(())
}

/// Who writes an entry: nvc's version and the running program's file (device, inode,
/// mtime), so that another build of the same version, which may discover differently,
/// never takes an entry this one wrote.
fn writer() -> String {
    let exe = fs::metadata("/proc/self/exe")
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            format!("{}:{}:{}", m.dev(), m.ino(), m.mtime())
        })
        .unwrap_or_default();
    format!("{} {exe}", env!("CARGO_PKG_VERSION"))
}

/// Whether `entry` says what a discovery under `roots` at `version` would find now.
fn check(entry: &Entry, roots: &DriverRoots, version: &str) -> Result<(), Refused> {
    let stale = |why: String| Err(Refused::Stale(why));
    if entry.format != FORMAT || entry.nvc != writer() {
        return stale(format!("written by nvc {}", entry.nvc));
    }
    if (&entry.root, &entry.dev_root, &entry.proc_root)
        != (&roots.root, &roots.dev_root, &roots.proc_root)
    {
        return stale("for other driver roots".into());
    }
    if entry.driver.version != version {
        return stale(format!(
            "for driver {}, the kernel module is {version}",
            entry.driver.version
        ));
    }
    if entry.ldcache != ldcache_identity(&roots.root) {
        return stale(format!(
            "{} changed",
            roots.root.join("etc/ld.so.cache").display()
        ));
    }
    let paths: Vec<&Path> = entry.driver.host_files().collect();
    if paths.len() != entry.identities.len() {
        return Err(Refused::Untrusted("damaged: file count".into()));
    }
    for (path, want) in paths.into_iter().zip(&entry.identities) {
        let dotted = path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
        if !path.is_absolute() || dotted || !path.starts_with(&roots.root) {
            return Err(Refused::Untrusted(format!(
                "{} is not under the driver root",
                path.display()
            )));
        }
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_file() && Identity::of(&m) == *want => {}
            _ => return stale(format!("{} changed", path.display())),
        }
    }
    Ok(())
}

/// `<root>/etc/ld.so.cache`, the name and what it leads to.
fn ldcache_identity(root: &Path) -> (Option<Identity>, Option<Identity>) {
    let path = root.join("etc/ld.so.cache");
    (
        fs::symlink_metadata(&path).ok().map(|m| Identity::of(&m)),
        fs::metadata(&path).ok().map(|m| Identity::of(&m)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::caps::Capability;
    use libnvc::discover::{HostFile, LibClass, Library};
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A driver root with an ld.so.cache, one library and one binary, and a cache folder.
    struct Fixture {
        dir: tempfile::TempDir,
        roots: DriverRoots,
        cache: RunCache,
        driver: DriverFiles,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::create_dir_all(root.join("lib")).unwrap();
        fs::write(root.join("etc/ld.so.cache"), b"cache").unwrap();
        fs::write(root.join("lib/libcuda.so.999.88.77"), b"lib").unwrap();
        fs::write(root.join("lib/nvidia-smi"), b"smi").unwrap();
        let roots = DriverRoots {
            root: root.clone(),
            dev_root: root.clone(),
            proc_root: dir.path().join("proc"),
        };
        let driver = DriverFiles {
            cuda_version: Some(13000),
            version: "999.88.77".into(),
            libraries: vec![Library {
                capabilities: vec![Capability::Compute],
                arch: libnvc::elf::Arch::X86_64,
                class: LibClass::Lib64,
                stem: "libcuda".into(),
                soname: "libcuda.so.1".into(),
                host_path: root.join("lib/libcuda.so.999.88.77"),
                file_name: "libcuda.so.999.88.77".into(),
                container_dir: None,
            }],
            binaries: vec![HostFile {
                capabilities: vec![Capability::Utility],
                host_path: root.join("lib/nvidia-smi"),
                container_path: "/usr/bin/nvidia-smi".into(),
            }],
            firmware: Vec::new(),
            files: Vec::new(),
        };
        fs::create_dir(dir.path().join("run")).unwrap();
        let run = dir.path().join("run/nvc");
        let cache = RunCache::new(&StateDir::new(&run, &run.join("leases")));
        Fixture {
            dir,
            roots,
            cache,
            driver,
        }
    }

    fn stored() -> Fixture {
        let f = fixture();
        f.cache.write(&f.roots, &f.driver).unwrap();
        f
    }

    fn refused(f: &Fixture) -> Refused {
        f.cache.read(&f.roots, "999.88.77").unwrap_err()
    }

    #[test]
    fn what_is_written_is_read_back() {
        let f = stored();
        assert_eq!(f.cache.read(&f.roots, "999.88.77").unwrap(), f.driver);
        assert_eq!(f.cache.load(&f.roots, "999.88.77"), Some(f.driver.clone()));
        let m = fs::metadata(f.cache.path_for(&f.roots)).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o644);
    }

    #[test]
    fn a_missing_entry_or_folder_is_missing() {
        let f = fixture();
        assert_eq!(refused(&f), Refused::Missing);
        fs::create_dir_all(f.dir.path().join("run/nvc")).unwrap();
        assert_eq!(refused(&f), Refused::Missing);
        assert_eq!(f.cache.load(&f.roots, "999.88.77"), None);
    }

    #[test]
    fn another_driver_version_or_root_is_stale() {
        let f = stored();
        assert!(matches!(
            f.cache.read(&f.roots, "580.1.2"),
            Err(Refused::Stale(_))
        ));
        let other = DriverRoots {
            proc_root: f.dir.path().join("elsewhere"),
            ..f.roots.clone()
        };
        // Another root has another file; planted there, the roots inside still differ.
        fs::copy(f.cache.path_for(&f.roots), f.cache.path_for(&other)).unwrap();
        assert!(matches!(
            f.cache.read(&other, "999.88.77"),
            Err(Refused::Stale(_))
        ));
    }

    #[test]
    fn a_new_ldcache_or_a_changed_file_is_stale() {
        let f = stored();
        let ldcache = f.roots.root.join("etc/ld.so.cache");
        fs::write(ldcache.with_extension("new"), b"new cache").unwrap();
        fs::rename(ldcache.with_extension("new"), &ldcache).unwrap();
        assert!(
            matches!(refused(&f), Refused::Stale(_)),
            "{:?}",
            refused(&f)
        );

        let f = stored();
        fs::write(&f.driver.libraries[0].host_path, b"another build").unwrap();
        assert!(matches!(refused(&f), Refused::Stale(_)));

        let f = stored();
        fs::remove_file(&f.driver.binaries[0].host_path).unwrap();
        assert!(matches!(refused(&f), Refused::Stale(_)));
    }

    #[test]
    fn an_entry_writable_by_others_or_in_such_a_folder_is_refused() {
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(
            f.dir.path().join("run/nvc"),
            fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
        // Nor is one written there.
        assert!(matches!(
            f.cache.write(&f.roots, &f.driver),
            Err(Refused::Untrusted(_))
        ));
    }

    #[test]
    #[ignore = "needs root: gives the entry another owner"]
    fn an_entry_of_another_user_is_refused() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test needs root: it gives the entry another owner"
        );
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        std::os::unix::fs::chown(&path, Some(1000), None).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        std::os::unix::fs::chown(f.dir.path().join("run/nvc"), Some(1000), None).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
    }

    #[test]
    fn a_link_for_the_entry_or_the_folder_is_not_followed() {
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        let real = f.dir.path().join("real.json");
        fs::rename(&path, &real).unwrap();
        symlink(&real, &path).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));

        let f = stored();
        let run = f.dir.path().join("run");
        fs::rename(run.join("nvc"), run.join("nvc.real")).unwrap();
        symlink("nvc.real", run.join("nvc")).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
    }

    #[test]
    fn garbage_and_files_outside_the_root_are_refused() {
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        for garbage in [&b""[..], b"{", b"\xff\xfe", b"{\"format\": 1}", b"[]"] {
            fs::write(&path, garbage).unwrap();
            assert!(matches!(refused(&f), Refused::Untrusted(_)));
        }
        // An entry naming a host file outside the driver root, identity and all.
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        let outside = f.dir.path().join("outside");
        fs::write(&outside, b"x").unwrap();
        let mut entry: Entry = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        entry.driver.binaries[0].host_path = outside.clone();
        entry.identities[1] = Identity::of(&fs::symlink_metadata(&outside).unwrap());
        fs::write(&path, serde_json::to_vec(&entry).unwrap()).unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
        // One too large is not read at all.
        let f = stored();
        let path = f.cache.path_for(&f.roots);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(MAX_SIZE + 1)
            .unwrap();
        assert!(matches!(refused(&f), Refused::Untrusted(_)));
    }

    #[test]
    fn the_file_name_depends_on_the_roots_only() {
        let f = fixture();
        let a = f.cache.path_for(&f.roots);
        assert_eq!(a, f.cache.path_for(&f.roots.clone()));
        let other = DriverRoots {
            root: "/".into(),
            ..f.roots.clone()
        };
        assert_ne!(a, f.cache.path_for(&other));
        assert!(a.starts_with(f.dir.path().join("run/nvc")));
    }
}
