//! The real host behind [`HostProbe`]: files through `std::fs`, device numbers through
//! `lstat`, and the driver's own libraries loaded to ask them what they are.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use libnvc::discover::GpuDetails;
use libnvc::probe::{FileKind, HostProbe, ProbeError, Stat};
use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::Nvml;

/// The host this process runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

impl HostProbe for RealHost {
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        let file = File::open(path)?;
        let mut data = Vec::new();
        file.take(limit as u64 + 1).read_to_end(&mut data)?;
        let more = data.len() > limit;
        data.truncate(limit);
        Ok((data, more))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::metadata(path).map(|m| stat_of(&m))
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::symlink_metadata(path).map(|m| stat_of(&m))
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    fn is_host_root(&self, path: &Path) -> bool {
        matches!(
            crate::container::refuse_host_root(path),
            Err(crate::container::FsError::HostRoot { .. })
        )
    }

    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError> {
        crate::cuda_driver_version(libcuda).map_err(|e| ProbeError {
            library: libcuda.to_path_buf(),
            source: Box::new(e),
        })
    }

    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
        let lib = Nvml::builder()
            .lib_path(nvml.as_os_str())
            .init()
            .map_err(|e| ProbeError {
                library: nvml.to_path_buf(),
                source: Box::new(e),
            })?;
        Ok(uuids
            .iter()
            .map(|uuid| {
                let dev = lib.device_by_uuid(*uuid).ok();
                GpuDetails {
                    uuid: uuid.to_string(),
                    compute_capability: dev
                        .as_ref()
                        .and_then(|d| d.cuda_compute_capability().ok())
                        .map(|c| format!("{}.{}", c.major, c.minor)),
                    brand: dev.as_ref().and_then(|d| d.brand().ok()).map(brand_name),
                    memory_total: dev
                        .as_ref()
                        .and_then(|d| d.memory_info().ok())
                        .map(|m| m.total),
                }
            })
            .collect())
    }
}

fn stat_of(m: &std::fs::Metadata) -> Stat {
    let t = m.file_type();
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
    Stat {
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        major: major(m.rdev()),
        minor: minor(m.rdev()),
    }
}

/// The major part of a `dev_t`, as glibc's `gnu_dev_major` computes it.
fn major(rdev: u64) -> u32 {
    (((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0000_0fff)) as u32
}

/// The minor part of a `dev_t`, as glibc's `gnu_dev_minor` computes it.
fn minor(rdev: u64) -> u32 {
    (((rdev >> 12) & 0xffff_ff00) | (rdev & 0x0000_00ff)) as u32
}

/// The brand's name as the requirement language spells it.
fn brand_name(b: Brand) -> String {
    match b {
        Brand::NvidiaRTX => "nvidiartx".into(),
        Brand::QuadroRTX => "quadrortx".into(),
        Brand::GeForceRTX => "geforcertx".into(),
        Brand::TitanRTX => "titanrtx".into(),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_split() {
        // makedev(195, 255) and makedev(241, 1) and a large minor
        assert_eq!((major(0xc3ff), minor(0xc3ff)), (195, 255));
        assert_eq!((major(0xf101), minor(0xf101)), (241, 1));
        let big = (0x123u64 << 8) | 0x45u64 | (0x6700u64 << 12);
        assert_eq!((major(big), minor(big)), (0x123, 0x6745));
    }

    #[test]
    fn reads_are_cut_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(RealHost.read(&f, 4).unwrap(), (b"0123".to_vec(), true));
        assert_eq!(
            RealHost.read(&f, 10).unwrap(),
            (b"0123456789".to_vec(), false)
        );
        assert_eq!(RealHost.lstat(&f).unwrap().kind, FileKind::File);
        assert_eq!(RealHost.stat(dir.path()).unwrap().kind, FileKind::Dir);
    }
}
