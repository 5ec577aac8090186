//! The host, as discovery reads it: every file, link, device node and driver library
//! libnvc looks at on the host goes through a [`HostProbe`], so that the pure pipeline
//! can run on committed driver trees without root, and the only code that touches the
//! real host is nvc-host's probe (`nvc_host::probe::RealHost`).
//!
//! The paths are host paths under the configured roots; resolving inside a root is
//! [`crate::discover::driver_root`]'s job, on top of [`HostProbe::lstat`] and
//! [`HostProbe::read_link`].

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::discover::{GpuDetails, NvmlMigDevice};

/// What a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (only from [`HostProbe::lstat`]).
    Symlink,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A unix socket.
    Socket,
    /// A named pipe.
    Fifo,
}

/// What discovery needs to know of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Its kind.
    pub kind: FileKind,
    /// Its permission bits (`0o7777`).
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// For a device node, its major number.
    pub major: u32,
    /// For a device node, its minor number.
    pub minor: u32,
}

impl Stat {
    /// What `meta` (from `stat` or `lstat`) says: a pure reading of the value, for the
    /// probes that get it from the file system.
    pub fn of(meta: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let t = meta.file_type();
        let kind = if t.is_symlink() {
            FileKind::Symlink
        } else if t.is_dir() {
            FileKind::Dir
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_fifo() {
            FileKind::Fifo
        } else {
            FileKind::File
        };
        let (major, minor) = split_dev(meta.rdev());
        Stat {
            kind,
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            major,
            minor,
        }
    }
}

/// The major and minor parts of a `dev_t`, as glibc's `gnu_dev_major` and
/// `gnu_dev_minor` compute them.
pub fn split_dev(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0000_0fff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0x0000_00ff);
    (major as u32, minor as u32)
}

/// Why a driver library could not be asked.
#[derive(Debug, thiserror::Error)]
#[error("cannot ask {library}")]
pub struct ProbeError {
    /// The library.
    pub library: PathBuf,
    /// The reason.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Reads the host for discovery.
pub trait HostProbe {
    /// The first `limit` bytes of the file at `path` and whether there were more.
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)>;
    /// The names in the folder at `path`.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;
    /// What `path` is, following links.
    fn stat(&self, path: &Path) -> io::Result<Stat>;
    /// What `path` is, not following a final link.
    fn lstat(&self, path: &Path) -> io::Result<Stat>;
    /// The target of the link at `path`.
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// The file at `path`, opened for reading its ELF headers.
    fn open(&self, path: &Path) -> io::Result<File>;
    /// The CUDA driver API version (`13000` for 13.0) the driver's `libcuda` reports.
    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError>;
    /// Whether `path` is the host's root directory (the same file as `/`, so a link to it
    /// or a bind mount of it counts too); `false` when it cannot be opened.
    fn is_host_root(&self, path: &Path) -> bool;
    /// What NVML (`nvml`, the driver's libnvidia-ml) reports of the GPUs with `uuids`, in
    /// their order.
    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError>;
    /// What NVML (`nvml`) reports of the MIG devices of the GPUs with `gpus` (their UUIDs):
    /// each one's parent GPU, GPU instance id, compute instance id and UUID. Asked only
    /// for a request that names a MIG device by UUID (`discover::DeviceNeeds::mig_uuids`).
    fn mig_devices(&self, nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError>;
    /// What the GPU health check reads ([`crate::health`]): the health record that `nvc
    /// health update` keeps in the state folder `config` names, this boot's id and the
    /// time now. Never NVML: a file read at every container start.
    fn health_inputs(&self, config: &nvc_config::Config) -> crate::health::HealthInputs;
}

/// The most of a text file under `/proc` or the driver root that is read.
pub const MAX_TEXT: usize = 1 << 20;

/// The file at `path` as text, cut at [`MAX_TEXT`].
pub fn read_text(probe: &dyn HostProbe, path: &Path) -> io::Result<String> {
    let (bytes, _) = probe.read(path, MAX_TEXT)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::split_dev;

    #[test]
    fn dev_t_split() {
        // makedev(195, 255) and makedev(241, 1) and a large minor
        assert_eq!(split_dev(0xc3ff), (195, 255));
        assert_eq!(split_dev(0xf101), (241, 1));
        let big = (0x123u64 << 8) | 0x45u64 | (0x6700u64 << 12);
        assert_eq!(split_dev(big), (0x123, 0x6745));
    }
}

mod memo;
pub use memo::MemoProbe;

#[cfg(any(test, feature = "testkit"))]
mod tree;
#[cfg(any(test, feature = "testkit"))]
pub use tree::TreeProbe;
