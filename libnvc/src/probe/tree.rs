//! A [`HostProbe`] over a plain directory tree, for tests without root: a committed fake
//! driver tree (`testdata/driver-roots/<scenario>`) or one a test writes. Files, folders
//! and links are read as they are; what git and an unprivileged user cannot make is
//! declared: device nodes, sockets and pipes (a placeholder file plus a line of
//! `devices.txt`), NVML's MIG devices (`nvml-mig-devices.txt`), the CUDA version libcuda
//! would report and NVML's other answers. Only built for tests (the `testkit` feature).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::{FileKind, HostProbe, ProbeError, Stat};
use crate::discover::{parse_mig_devices, GpuDetails, NvmlMigDevice};

/// The file of a tree that declares its special files, one per line, the path relative
/// to the tree:
///
/// - `<path> c <major> <minor> [<octal mode>]`: a character device (mode `0666` unless
///   given);
/// - `<path> s [<octal mode>]`: a unix socket (mode `0777` unless given);
/// - `<path> p [<octal mode>]`: a named pipe (mode `0666` unless given).
///
/// `#` starts a comment.
pub const DEVICES_FILE: &str = "devices.txt";

/// The file of a tree that declares the MIG devices NVML reports, in the text form of
/// `discover::parse_mig_devices`: `<GPU uuid> <gpu instance> <compute instance> <MIG
/// uuid>` a line. The fake driver's libnvidia-ml answers from the same file (the first
/// folder above the library that has one), so that real programs on a fake tree see
/// what [`TreeProbe`] sees.
pub const MIG_DEVICES_FILE: &str = "nvml-mig-devices.txt";

/// A probe that reads a tree and answers the rest from what it was told.
#[derive(Debug, Clone, Default)]
pub struct TreeProbe {
    devices: BTreeMap<PathBuf, Stat>,
    host_roots: Vec<PathBuf>,
    cuda: Option<i32>,
    gpus: Vec<GpuDetails>,
    mig: Option<Vec<NvmlMigDevice>>,
    /// The health record's bytes, this boot's id and the time now.
    health: Option<(Vec<u8>, String, u64)>,
}

impl TreeProbe {
    /// The file of a tree that declares its device nodes (`devices.txt`), for callers
    /// outside this module.
    pub const DEVICES_FILE: &'static str = DEVICES_FILE;

    /// The file of a tree that declares NVML's MIG devices (`nvml-mig-devices.txt`), for
    /// callers outside this module.
    pub const MIG_DEVICES_FILE: &'static str = MIG_DEVICES_FILE;

    /// A probe with no device node, no libcuda answer and no NVML.
    pub fn new() -> Self {
        TreeProbe::default()
    }

    /// The probe for the tree at `root`, with the special files its `devices.txt` declares
    /// (none when it has none) and the MIG devices its `nvml-mig-devices.txt` declares (no
    /// NVML answer when it has none).
    pub fn for_tree(root: &Path) -> io::Result<Self> {
        let mut probe = TreeProbe::new();
        if let Some(text) = read_if_there(&root.join(MIG_DEVICES_FILE))? {
            let devices = parse_mig_devices(&text).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{MIG_DEVICES_FILE} {e}"),
                )
            })?;
            probe.mig = Some(devices);
        }
        let Some(text) = read_if_there(&root.join(DEVICES_FILE))? else {
            return Ok(probe);
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (path, stat) = parse_declaration(line).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{DEVICES_FILE} line {}: {line:?}", n + 1),
                )
            })?;
            probe.devices.insert(root.join(path), stat);
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
            special(FileKind::CharDevice, mode, major, minor),
        );
        self
    }

    /// `path` reads as a unix socket with permission bits `mode`.
    pub fn with_socket(mut self, path: impl Into<PathBuf>, mode: u32) -> Self {
        self.devices
            .insert(path.into(), special(FileKind::Socket, mode, 0, 0));
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

    /// Answers [`HostProbe::health_inputs`] with the record `bytes`, the boot id `boot_id`
    /// and the time `now` (seconds since the epoch); without, there is no record.
    pub fn with_health_record(mut self, bytes: Vec<u8>, boot_id: &str, now: u64) -> Self {
        self.health = Some((bytes, boot_id.to_string(), now));
        self
    }

    /// The MIG devices NVML reports (replacing those the tree declares).
    pub fn with_mig_devices(mut self, devices: Vec<NvmlMigDevice>) -> Self {
        self.mig = Some(devices);
        self
    }

    fn declared(&self, path: &Path) -> Option<Stat> {
        self.devices.get(path).copied()
    }
}

/// The text of the file at `path`; `None` when there is none.
fn read_if_there(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A special file owned by root.
fn special(kind: FileKind, mode: u32, major: u32, minor: u32) -> Stat {
    Stat {
        kind,
        mode: mode & 0o7777,
        uid: 0,
        gid: 0,
        major,
        minor,
    }
}

/// One line of [`DEVICES_FILE`], comment and blanks removed: the path and what it is.
fn parse_declaration(line: &str) -> Option<(&str, Stat)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let mode = |field: Option<&&str>, default: u32| match field {
        Some(m) => u32::from_str_radix(m, 8).ok().filter(|m| *m <= 0o7777),
        None => Some(default),
    };
    match fields.as_slice() {
        [path, "c", major, minor, rest @ ..] if rest.len() <= 1 => Some((
            path,
            special(
                FileKind::CharDevice,
                mode(rest.first(), 0o666)?,
                major.parse().ok()?,
                minor.parse().ok()?,
            ),
        )),
        [path, "s", rest @ ..] if rest.len() <= 1 => Some((
            path,
            special(FileKind::Socket, mode(rest.first(), 0o777)?, 0, 0),
        )),
        [path, "p", rest @ ..] if rest.len() <= 1 => Some((
            path,
            special(FileKind::Fifo, mode(rest.first(), 0o666)?, 0, 0),
        )),
        _ => None,
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
            None => std::fs::metadata(path).map(|m| Stat::of(&m)),
        }
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        match self.declared(path) {
            Some(s) => Ok(s),
            None => std::fs::symlink_metadata(path).map(|m| Stat::of(&m)),
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

    fn mig_devices(&self, nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError> {
        let declared = self
            .mig
            .as_ref()
            .ok_or_else(|| no(nvml, &format!("NVML MIG devices ({MIG_DEVICES_FILE})")))?;
        Ok(declared
            .iter()
            .filter(|d| gpus.iter().any(|g| g.eq_ignore_ascii_case(&d.gpu)))
            .cloned()
            .collect())
    }

    fn health_inputs(&self, _: &nvc_config::Config) -> crate::health::HealthInputs {
        use crate::health::{HealthInputs, RecordFile};
        match &self.health {
            Some((bytes, boot_id, now)) => HealthInputs {
                record: RecordFile::Read(bytes.clone()),
                boot_id: Some(boot_id.clone()),
                now: *now,
            },
            None => HealthInputs {
                record: RecordFile::Missing,
                boot_id: None,
                now: 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Path, kind, mode, major, minor.
    type Declared<'a> = (&'a str, FileKind, u32, u32, u32);

    #[test]
    fn declarations_of_each_kind() {
        let cases: &[(&str, Option<Declared>)] = &[
            (
                "dev/nvidia0 c 195 0",
                Some(("dev/nvidia0", FileKind::CharDevice, 0o666, 195, 0)),
            ),
            (
                "dev/nvidia-caps/nvidia-cap1 c 241 1 0400",
                Some((
                    "dev/nvidia-caps/nvidia-cap1",
                    FileKind::CharDevice,
                    0o400,
                    241,
                    1,
                )),
            ),
            (
                "root/run/nvidia-persistenced/socket s",
                Some((
                    "root/run/nvidia-persistenced/socket",
                    FileKind::Socket,
                    0o777,
                    0,
                    0,
                )),
            ),
            (
                "root/tmp/nvidia-mps/control p 0600",
                Some(("root/tmp/nvidia-mps/control", FileKind::Fifo, 0o600, 0, 0)),
            ),
            ("dev/nvidia0 b 195 0", None),
            ("dev/nvidia0 c 195", None),
            ("dev/nvidia0 c 195 x", None),
            ("dev/nvidia0 c 195 0 0999", None),
            ("dev/nvidia0 c 195 0 17777", None),
            ("dev/nvidia0 c 195 0 0666 extra", None),
            ("sock s 0777 extra", None),
            ("lonely", None),
        ];
        for (line, want) in cases {
            let got = parse_declaration(line).map(|(p, s)| (p, s.kind, s.mode, s.major, s.minor));
            assert_eq!(got, *want, "{line}");
        }
    }

    #[test]
    fn a_tree_reads_as_declared() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("dev")).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::write(root.join("dev/nvidiactl"), b"").unwrap();
        std::fs::write(root.join("run/socket"), b"").unwrap();
        std::fs::write(root.join("plain"), b"x").unwrap();
        std::fs::write(
            root.join(DEVICES_FILE),
            "# the nodes\ndev/nvidiactl c 195 255 0666 # control\n\nrun/socket s\n",
        )
        .unwrap();
        let probe = TreeProbe::for_tree(root).unwrap();
        let ctl = probe.lstat(&root.join("dev/nvidiactl")).unwrap();
        assert_eq!(
            (ctl.kind, ctl.major, ctl.minor, ctl.mode, ctl.uid),
            (FileKind::CharDevice, 195, 255, 0o666, 0)
        );
        assert_eq!(
            probe.stat(&root.join("run/socket")).unwrap().kind,
            FileKind::Socket
        );
        assert_eq!(
            probe.stat(&root.join("plain")).unwrap().kind,
            FileKind::File
        );
        assert_eq!(
            probe.read_dir(&root.join("dev")).unwrap(),
            [OsString::from("nvidiactl")]
        );

        std::fs::write(root.join(DEVICES_FILE), "dev/nvidiactl c 195\n").unwrap();
        let err = TreeProbe::for_tree(root).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 1"), "{err}");

        let socket = TreeProbe::new().with_socket(root.join("plain"), 0o700);
        let stat = socket.stat(&root.join("plain")).unwrap();
        assert_eq!((stat.kind, stat.mode), (FileKind::Socket, 0o700));

        let none = tempfile::tempdir().unwrap();
        let probe = TreeProbe::for_tree(none.path()).unwrap();
        assert!(probe.cuda_driver_version(Path::new("/x")).is_err());
        let err = probe.mig_devices(Path::new("/nvml"), &[]).unwrap_err();
        assert!(
            crate::report::error_chain(&err).contains(MIG_DEVICES_FILE),
            "{err}"
        );
    }

    #[test]
    fn nvmls_mig_devices_are_those_the_tree_declares_for_the_gpus_asked() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = |n: u32| format!("GPU-fa4ed71e-000{n}-4e57-8fa4-ed71e000000{n}");
        let mig = |n: u32| format!("MIG-f1a5c0de-0001-400{n}-8000-0000fa4ed71e");
        std::fs::write(
            dir.path().join(MIG_DEVICES_FILE),
            format!(
                "# gpu gi ci mig\n{} 1 0 {}\n{} 2 0 {}\n{} 1 0 {}\n",
                gpu(0),
                mig(1),
                gpu(0),
                mig(2),
                gpu(1),
                mig(3)
            ),
        )
        .unwrap();
        let probe = TreeProbe::for_tree(dir.path()).unwrap();
        let first = gpu(0);
        let got = probe.mig_devices(Path::new("/nvml"), &[&first]).unwrap();
        let got: Vec<(u32, &str)> = got.iter().map(|d| (d.gi, d.uuid.as_str())).collect();
        assert_eq!(got, [(1, mig(1).as_str()), (2, mig(2).as_str())]);
        assert!(probe
            .mig_devices(Path::new("/nvml"), &[])
            .unwrap()
            .is_empty());

        std::fs::write(dir.path().join(MIG_DEVICES_FILE), "GPU-x 1 0 MIG-y\n").unwrap();
        let err = TreeProbe::for_tree(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
