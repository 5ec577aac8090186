//! A [`HostProbe`] over a plain directory tree, for tests without root: a committed fake
//! driver tree (`testdata/driver-roots/<scenario>`) or one a test writes. Files, folders
//! and links are read as they are; what git and an unprivileged user cannot make is
//! declared: device nodes (a placeholder file plus a line of `devices.txt`), the CUDA
//! version libcuda would report and NVML's answers. Only built for tests (the `testkit`
//! feature).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::{FileKind, HostProbe, ProbeError, Stat};
use crate::discover::GpuDetails;

/// The file of a tree that declares its device nodes: one per line,
/// `<path relative to the tree> c <major> <minor> [<octal mode>]`; `#` starts a comment.
pub const DEVICES_FILE: &str = "devices.txt";

/// A probe that reads a tree and answers the rest from what it was told.
#[derive(Debug, Clone, Default)]
pub struct TreeProbe {
    devices: BTreeMap<PathBuf, Stat>,
    host_roots: Vec<PathBuf>,
    cuda: Option<i32>,
    gpus: Vec<GpuDetails>,
}

impl TreeProbe {
    /// A probe with no device node, no libcuda answer and no NVML.
    pub fn new() -> Self {
        TreeProbe::default()
    }

    /// The probe for the tree at `root`, with the device nodes its `devices.txt` declares
    /// (none when it has none).
    pub fn for_tree(root: &Path) -> io::Result<Self> {
        let mut probe = TreeProbe::new();
        let text = match std::fs::read_to_string(root.join(DEVICES_FILE)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(probe),
            Err(e) => return Err(e),
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = || {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{DEVICES_FILE} line {}: {line:?}", n + 1),
                )
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            let (path, kind, major, minor) = match f.as_slice() {
                [p, k, ma, mi] | [p, k, ma, mi, _] => (*p, *k, *ma, *mi),
                _ => return Err(bad()),
            };
            if kind != "c" {
                return Err(bad());
            }
            let mode = match f.get(4) {
                Some(m) => u32::from_str_radix(m, 8).map_err(|_| bad())?,
                None => 0o666,
            };
            probe = probe.with_device(
                root.join(path),
                major.parse().map_err(|_| bad())?,
                minor.parse().map_err(|_| bad())?,
                mode,
            );
        }
        Ok(probe)
    }

    /// `path` reads as the character device `major:minor` with permission bits `mode`.
    pub fn with_device(
        mut self,
        path: impl Into<PathBuf>,
        major: u32,
        minor: u32,
        mode: u32,
    ) -> Self {
        self.devices.insert(
            path.into(),
            Stat {
                kind: FileKind::CharDevice,
                mode,
                uid: 0,
                gid: 0,
                major,
                minor,
            },
        );
        self
    }

    /// `path` counts as the host's `/` (besides `/` itself).
    pub fn with_host_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.host_roots.push(path.into());
        self
    }

    /// What libcuda reports (`12040` for 12.4).
    pub fn with_cuda_version(mut self, version: i32) -> Self {
        self.cuda = Some(version);
        self
    }

    /// What NVML reports, by UUID.
    pub fn with_gpu_details(mut self, gpus: Vec<GpuDetails>) -> Self {
        self.gpus = gpus;
        self
    }

    fn declared(&self, path: &Path) -> Option<Stat> {
        self.devices.get(path).copied()
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
        major: 0,
        minor: 0,
    }
}

fn no(library: &Path, what: &str) -> ProbeError {
    ProbeError {
        library: library.to_path_buf(),
        source: format!("the test tree declares no {what}").into(),
    }
}

impl HostProbe for TreeProbe {
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        let mut data = std::fs::read(path)?;
        let more = data.len() > limit;
        data.truncate(limit);
        Ok((data, more))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let mut names: Vec<OsString> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        Ok(names)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        match self.declared(path) {
            Some(s) => Ok(s),
            None => std::fs::metadata(path).map(|m| stat_of(&m)),
        }
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        match self.declared(path) {
            Some(s) => Ok(s),
            None => std::fs::symlink_metadata(path).map(|m| stat_of(&m)),
        }
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    fn is_host_root(&self, path: &Path) -> bool {
        let Ok(real) = std::fs::canonicalize(path) else {
            return false;
        };
        real == Path::new("/")
            || self
                .host_roots
                .iter()
                .any(|r| std::fs::canonicalize(r).is_ok_and(|r| r == real))
    }

    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError> {
        self.cuda.ok_or_else(|| no(libcuda, "CUDA version"))
    }

    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
        if self.gpus.is_empty() {
            return Err(no(nvml, "NVML"));
        }
        Ok(uuids
            .iter()
            .map(|u| {
                self.gpus
                    .iter()
                    .find(|g| g.uuid == *u)
                    .cloned()
                    .unwrap_or_else(|| GpuDetails {
                        uuid: u.to_string(),
                        compute_capability: None,
                        brand: None,
                        memory_total: None,
                    })
            })
            .collect())
    }
}
