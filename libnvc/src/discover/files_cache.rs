//! The driver's files as one discovery found them, for a cache that spares the next
//! container start the search: resolving ~200 paths in the driver root, reading its
//! ld.so.cache and the ELF headers of every library took most of the hook's system
//! calls before its first mount. What is cached, and when an entry may be used, is the
//! [`FilesCache`]'s business (nvc-host keeps one under `/run`, checked against the
//! driver version and the files themselves); discovery only asks it and tells it.

use std::path::Path;

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

impl DriverFiles {
    /// Every host file of the driver install, each as often as it is listed, in one fixed
    /// order: the libraries, then the binaries, the firmware and the other files. Not the
    /// IPC sockets ([`Driver::ipc`](super::Driver::ipc)), which the driver's daemons
    /// make at run time. What a cache checks to tell whether the install changed, and
    /// what `nvc check` counts as this driver's files.
    pub fn host_files(&self) -> impl Iterator<Item = &Path> {
        let libraries = self.libraries.iter().map(|l| l.host_path.as_path());
        let others = self
            .binaries
            .iter()
            .chain(&self.firmware)
            .chain(&self.files)
            .map(|f| f.host_path.as_path());
        libraries.chain(others)
    }
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::caps::Capability;
    use crate::discover::LibClass;

    fn file(path: &str) -> HostFile {
        HostFile {
            capabilities: vec![Capability::Utility],
            host_path: PathBuf::from(path),
            container_path: PathBuf::from(path),
        }
    }

    #[test]
    fn host_files_lists_every_file_kind_in_one_order() {
        let library = |path: &str, class| Library {
            capabilities: vec![Capability::Compute],
            arch: crate::elf::Arch::X86_64,
            class,
            stem: "libcuda".into(),
            soname: "libcuda.so.1".into(),
            host_path: PathBuf::from(path),
            file_name: "libcuda.so.999.88.77".into(),
            container_dir: None,
        };
        let driver = DriverFiles {
            version: "999.88.77".into(),
            libraries: vec![
                library("/r/lib64/libcuda.so.999.88.77", LibClass::Lib64),
                library("/r/lib32/libcuda.so.999.88.77", LibClass::Lib32),
            ],
            binaries: vec![file("/r/bin/nvidia-smi")],
            firmware: vec![file("/r/firmware/gsp_ga10x.bin")],
            files: vec![
                file("/r/share/vulkan/icd.d/nvidia_icd.json"),
                file("/r/share/egl/egl_external_platform.d/15_nvidia_gbm.json"),
            ],
            cuda_version: Some(13000),
        };
        let listed: Vec<&Path> = driver.host_files().collect();
        assert_eq!(
            listed,
            [
                "/r/lib64/libcuda.so.999.88.77",
                "/r/lib32/libcuda.so.999.88.77",
                "/r/bin/nvidia-smi",
                "/r/firmware/gsp_ga10x.bin",
                "/r/share/vulkan/icd.d/nvidia_icd.json",
                "/r/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            ]
            .map(Path::new)
        );
        assert_eq!(DriverFiles::default().host_files().count(), 0);
    }
}
