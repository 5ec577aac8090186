//! A [`HostProbe`] that remembers what it was told about paths for the length of one
//! discovery: resolving ~200 driver paths inside the driver root walks the same folders
//! (`/usr`, `/usr/lib`, `/usr/lib/x86_64-linux-gnu`, ...) again for each of them, and
//! the real host answered every `lstat` of them anew (about 1,000 `statx` for 193
//! paths). The answers are kept only as long as the value lives, which is one
//! discovery: the driver root belongs to the host, not to a container, and nothing in
//! one discovery expects a folder to change under it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::{FileKind, HostProbe, ProbeError, Stat};
use crate::discover::{GpuDetails, NvmlMigDevice};

/// An answer kept: the value, or the error's kind and text (an `io::Error` is not
/// `Clone`).
type Kept<T> = Result<T, (io::ErrorKind, String)>;

fn keep<T: Clone>(r: &io::Result<T>) -> Kept<T> {
    match r {
        Ok(v) => Ok(v.clone()),
        Err(e) => Err((e.kind(), e.to_string())),
    }
}

fn give<T: Clone>(k: &Kept<T>) -> io::Result<T> {
    match k {
        Ok(v) => Ok(v.clone()),
        Err((kind, text)) => Err(io::Error::new(*kind, text.clone())),
    }
}

/// Wraps a probe and remembers its `lstat`, `stat` and `read_link` answers by path.
pub struct MemoProbe<'a> {
    inner: &'a dyn HostProbe,
    lstat: RefCell<HashMap<PathBuf, Kept<Stat>>>,
    stat: RefCell<HashMap<PathBuf, Kept<Stat>>>,
    links: RefCell<HashMap<PathBuf, Kept<PathBuf>>>,
}

impl<'a> MemoProbe<'a> {
    /// A memo in front of `inner`, empty.
    pub fn new(inner: &'a dyn HostProbe) -> Self {
        MemoProbe {
            inner,
            lstat: RefCell::default(),
            stat: RefCell::default(),
            links: RefCell::default(),
        }
    }
}

impl HostProbe for MemoProbe<'_> {
    fn read(&self, path: &Path, limit: usize) -> io::Result<(Vec<u8>, bool)> {
        self.inner.read(path, limit)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.inner.read_dir(path)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        if let Some(k) = self.stat.borrow().get(path) {
            return give(k);
        }
        // What `lstat` said of a path that is not a link is what `stat` says of it.
        if let Some(Ok(s)) = self.lstat.borrow().get(path) {
            if s.kind != FileKind::Symlink {
                return Ok(*s);
            }
        }
        let r = self.inner.stat(path);
        self.stat.borrow_mut().insert(path.to_path_buf(), keep(&r));
        r
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        if let Some(k) = self.lstat.borrow().get(path) {
            return give(k);
        }
        let r = self.inner.lstat(path);
        self.lstat.borrow_mut().insert(path.to_path_buf(), keep(&r));
        r
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        if let Some(k) = self.links.borrow().get(path) {
            return give(k);
        }
        let r = self.inner.read_link(path);
        self.links.borrow_mut().insert(path.to_path_buf(), keep(&r));
        r
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        self.inner.open(path)
    }

    fn cuda_driver_version(&self, libcuda: &Path) -> Result<i32, ProbeError> {
        self.inner.cuda_driver_version(libcuda)
    }

    fn is_host_root(&self, path: &Path) -> bool {
        self.inner.is_host_root(path)
    }

    fn gpu_details(&self, nvml: &Path, uuids: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
        self.inner.gpu_details(nvml, uuids)
    }

    fn mig_devices(&self, nvml: &Path, gpus: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError> {
        self.inner.mig_devices(nvml, gpus)
    }

    fn health_inputs(&self, config: &nvc_config::Config) -> crate::health::HealthInputs {
        self.inner.health_inputs(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Counts the `lstat`s it answers, from a fixed tree: `/d` a folder, `/l` a link.
    #[derive(Default)]
    struct Counting {
        lstats: Cell<usize>,
        stats: Cell<usize>,
    }

    fn stat(kind: FileKind) -> Stat {
        Stat {
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            major: 0,
            minor: 0,
        }
    }

    impl HostProbe for Counting {
        fn read(&self, _: &Path, _: usize) -> io::Result<(Vec<u8>, bool)> {
            Err(io::ErrorKind::NotFound.into())
        }
        fn read_dir(&self, _: &Path) -> io::Result<Vec<OsString>> {
            Ok(Vec::new())
        }
        fn stat(&self, p: &Path) -> io::Result<Stat> {
            self.stats.set(self.stats.get() + 1);
            match p.to_str() {
                Some("/d" | "/l") => Ok(stat(FileKind::Dir)),
                _ => Err(io::ErrorKind::NotFound.into()),
            }
        }
        fn lstat(&self, p: &Path) -> io::Result<Stat> {
            self.lstats.set(self.lstats.get() + 1);
            match p.to_str() {
                Some("/d") => Ok(stat(FileKind::Dir)),
                Some("/l") => Ok(stat(FileKind::Symlink)),
                _ => Err(io::Error::new(io::ErrorKind::NotFound, "gone")),
            }
        }
        fn read_link(&self, _: &Path) -> io::Result<PathBuf> {
            Ok(PathBuf::from("d"))
        }
        fn open(&self, _: &Path) -> io::Result<File> {
            Err(io::ErrorKind::NotFound.into())
        }
        fn cuda_driver_version(&self, _: &Path) -> Result<i32, ProbeError> {
            Ok(0)
        }
        fn is_host_root(&self, _: &Path) -> bool {
            false
        }
        fn gpu_details(&self, _: &Path, _: &[&str]) -> Result<Vec<GpuDetails>, ProbeError> {
            Ok(Vec::new())
        }
        fn mig_devices(&self, _: &Path, _: &[&str]) -> Result<Vec<NvmlMigDevice>, ProbeError> {
            Ok(Vec::new())
        }

        fn health_inputs(&self, _: &nvc_config::Config) -> crate::health::HealthInputs {
            crate::health::HealthInputs {
                record: crate::health::RecordFile::Missing,
                boot_id: None,
                now: 0,
            }
        }
    }

    #[test]
    fn answers_once_per_path_errors_included() {
        let inner = Counting::default();
        let memo = MemoProbe::new(&inner);
        for _ in 0..3 {
            assert_eq!(memo.lstat(Path::new("/d")).unwrap().kind, FileKind::Dir);
            assert_eq!(memo.lstat(Path::new("/l")).unwrap().kind, FileKind::Symlink);
            let e = memo.lstat(Path::new("/x")).unwrap_err();
            assert_eq!(
                (e.kind(), e.to_string()),
                (io::ErrorKind::NotFound, "gone".into())
            );
        }
        assert_eq!(inner.lstats.get(), 3);
        // `stat` of a path `lstat` saw as no link is taken from it; of a link, asked.
        assert_eq!(memo.stat(Path::new("/d")).unwrap().kind, FileKind::Dir);
        assert_eq!(inner.stats.get(), 0);
        assert_eq!(memo.stat(Path::new("/l")).unwrap().kind, FileKind::Dir);
        assert_eq!(memo.stat(Path::new("/l")).unwrap().kind, FileKind::Dir);
        assert_eq!(inner.stats.get(), 1);
    }
}
