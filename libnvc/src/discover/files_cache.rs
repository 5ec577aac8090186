//! The driver's files as one discovery found them, for a cache that spares the next
//! container start the search: resolving ~200 paths in the driver root, reading its
//! ld.so.cache and the ELF headers of every library took most of the hook's system
//! calls before its first mount. What is cached, and when an entry may be used, is the
//! [`FilesCache`]'s business (nvc-host keeps one under `/run`, checked against the
//! driver version and the files themselves); discovery only asks it and tells it.

use serde::{Deserialize, Serialize};

use super::{DriverRoots, HostFile, Library};

/// The part of [`Driver`](super::Driver) that only a new driver install changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverFiles {
    /// The driver version they were found for.
    pub version: String,
    /// As [`Driver::libraries`](super::Driver::libraries).
    pub libraries: Vec<Library>,
    /// As [`Driver::binaries`](super::Driver::binaries).
    pub binaries: Vec<HostFile>,
    /// As [`Driver::firmware`](super::Driver::firmware).
    pub firmware: Vec<HostFile>,
    /// As [`Driver::files`](super::Driver::files).
    pub files: Vec<HostFile>,
    /// The CUDA driver API version libcuda reported (`cuDriverGetVersion`), once a
    /// `cuda` requirement asked for it: loading libcuda to ask costs a container start
    /// more than everything else the hook does. An entry is used only while libcuda's
    /// file is unchanged, as every file it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<i32>,
}

/// Somewhere to keep [`DriverFiles`] between container starts.
pub trait FilesCache {
    /// The files found earlier under `roots` for driver `version`, when they are known
    /// to be what a discovery would find now; `None` sends discovery to the host.
    fn load(&self, roots: &DriverRoots, version: &str) -> Option<DriverFiles>;
    /// Keeps what a discovery under `roots` found. A cache that cannot keep it says so in
    /// the log; discovery goes on.
    fn store(&self, roots: &DriverRoots, files: &DriverFiles);
}
