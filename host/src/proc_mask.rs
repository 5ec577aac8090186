//! The mask over a container's `/proc/driver/nvidia`, shared by the prestart hook
//! ([`crate::setup`]) and the CDI `cdi-mask-proc` hook ([`crate::cdi_hooks`]): one
//! implementation, whichever path gave the container its GPUs.
//!
//! The kernel's `/proc/driver/nvidia` lists every GPU of the host and the module's
//! parameters, among them `ModifyDeviceFiles`, which lets the user-space driver make
//! device nodes. A container gets, over its own procfs's folder, a read-only tmpfs with
//! the driver's `version`, `registry` and `params` (`ModifyDeviceFiles: 0`) and only the
//! folders of its GPUs under `gpus/`, each a read-only bind of the host's.

use std::os::fd::AsFd;
use std::path::Path;

use crate::container::{self, ContainerRoot, DetachedMount, Filesystem, FsError, MountAttrs};

/// What [`ProcMask::apply`] found in the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Masked {
    /// The mask is over the container's `/proc/driver/nvidia`.
    Yes,
    /// Nothing is mounted at the container's `/proc`: its folder is the image's own, no
    /// runtime's procfs, and shows nothing of the host.
    NoProcfs,
    /// The container's procfs has no `driver/nvidia` (no kernel module, or a procfs that
    /// does not show it).
    NoDriverFolder,
}

/// The replacement for the container's `/proc/driver/nvidia`: a read-only tmpfs with
/// the driver's version and params (device-file creation turned off, so the driver in
/// the container never makes nodes) and only the selected GPUs' folders.
#[derive(Debug)]
pub struct ProcMask {
    files: Vec<(String, Vec<u8>)>,
    gpus: GpuFolders,
}

/// The GPU folders a mask shows.
#[derive(Debug)]
enum GpuFolders {
    /// Some of the host's GPUs: each folder a mount of its own.
    Each(Vec<(String, DetachedMount)>),
    /// Every GPU of the host (their bus ids): the host's whole `gpus` folder as one
    /// mount, so that a container given all of 64 GPUs costs one mount, not 64.
    All(Vec<String>, DetachedMount),
}

/// The mount attributes of everything the mask shows.
const READ_ONLY: MountAttrs = MountAttrs {
    readonly: true,
    nosuid: true,
    nodev: true,
    noexec: true,
};

impl ProcMask {
    /// Reads what the mask shows from the host's `nvidia` folder (`<proc
    /// root>/driver/nvidia`, trusted), with the folders of the GPUs whose bus ids are
    /// `visible` (as under `gpus/`). `None` when the host has no such folder. Must run
    /// where the host's folder is visible: the prestart hook before it enters the
    /// container's mount namespace, a `createContainer` hook in the namespace it starts in.
    /// Whether the container's procfs has a `/proc/driver/nvidia` to mask is
    /// [`ProcMask::apply`]'s to find out.
    pub fn prepare(nvidia: &Path, visible: &[String]) -> Result<Option<ProcMask>, FsError> {
        if !nvidia.is_dir() {
            return Ok(None);
        }
        let mut files = Vec::new();
        for name in ["version", "registry", "params"] {
            let Ok(mut data) = std::fs::read(nvidia.join(name)) else {
                continue;
            };
            if name == "params" {
                data = without_device_file_changes(&data);
            }
            files.push((name.to_string(), data));
        }
        let gpus_dir = nvidia.join("gpus");
        let gpus = if !visible.is_empty() && is_every_gpu(&gpus_dir, visible) {
            GpuFolders::All(visible.to_vec(), DetachedMount::bind(&gpus_dir, READ_ONLY)?)
        } else {
            let mut each = Vec::new();
            for bus in visible {
                let dir = gpus_dir.join(bus);
                each.push((bus.clone(), DetachedMount::bind(&dir, READ_ONLY)?));
            }
            GpuFolders::Each(each)
        };
        Ok(Some(ProcMask { files, gpus }))
    }

    /// The bus ids of the GPU folders the mask shows.
    pub fn gpus(&self) -> impl Iterator<Item = &str> {
        let buses: Vec<&str> = match &self.gpus {
            GpuFolders::Each(each) => each.iter().map(|(bus, _)| bus.as_str()).collect(),
            GpuFolders::All(buses, _) => buses.iter().map(String::as_str).collect(),
        };
        buses.into_iter()
    }

    /// Mounts the mask over the container's `/proc/driver/nvidia`, when it has one: on the
    /// runtime's procfs at `/proc`, checked to be one (a `/proc` that is a link, or a
    /// mount of another file system, is refused). Says what it found.
    pub fn apply(self, root: &ContainerRoot) -> Result<Masked, FsError> {
        self.apply_at(root, Path::new("/driver/nvidia"))
    }

    /// [`ProcMask::apply`] over `target`, a folder of the procfs (`/driver/nvidia`; the
    /// tests mask one every kernel has).
    fn apply_at(self, root: &ContainerRoot, target: &Path) -> Result<Masked, FsError> {
        let Some(proc) = root.submount(Path::new("/proc"), Filesystem::Procfs)? else {
            return Ok(Masked::NoProcfs);
        };
        if !proc.is_dir(target) {
            return Ok(Masked::NoDriverFolder);
        }
        let tmpfs = DetachedMount::tmpfs(1 << 20, 0o555)?;
        for (name, data) in &self.files {
            container::write_at(tmpfs.dir_fd(), name, data, 0o444)?;
        }
        let gpus_dir = container::mkdir_at(tmpfs.dir_fd(), "gpus", 0o555)?;
        if let GpuFolders::Each(each) = &self.gpus {
            for (bus, _) in each {
                container::mkdir_at(gpus_dir.as_fd(), bus, 0o555)?;
            }
        }
        // Read-only before it is visible; the GPU folders are mounted onto its
        // (existing) directories afterwards, which a read-only file system allows.
        tmpfs.set_attrs(READ_ONLY)?;
        let point = proc.dir_mount_point(target, 0o555)?;
        proc.attach(tmpfs, &point, target)?;
        if matches!(&self.gpus, GpuFolders::Each(each) if each.is_empty()) {
            return Ok(Masked::Yes);
        }
        // The GPU folders go onto the mask's own (private) tmpfs.
        let Some(mask) = proc.submount(target, Filesystem::Tmpfs)? else {
            return Ok(Masked::Yes);
        };
        match self.gpus {
            GpuFolders::Each(each) => {
                for (bus, src) in each {
                    let path = Path::new("/gpus").join(&bus);
                    let point = mask.dir_mount_point(&path, 0o555)?;
                    mask.attach(src, &point, &path)?;
                }
            }
            GpuFolders::All(_, src) => {
                let path = Path::new("/gpus");
                let point = mask.dir_mount_point(path, 0o555)?;
                mask.attach(src, &point, path)?;
            }
        }
        Ok(Masked::Yes)
    }
}

/// Whether `visible` names every folder in the host's `gpus` folder (trusted: the
/// driver's own procfs), each once.
fn is_every_gpu(gpus_dir: &Path, visible: &[String]) -> bool {
    let Ok(entries) = std::fs::read_dir(gpus_dir) else {
        return false;
    };
    let mut on_host: Vec<String> = Vec::new();
    for entry in entries {
        match entry.ok().and_then(|e| e.file_name().into_string().ok()) {
            Some(name) => on_host.push(name),
            None => return false,
        }
    }
    let mut shown = visible.to_vec();
    on_host.sort();
    shown.sort();
    on_host == shown
}

/// The driver's `params` with `ModifyDeviceFiles: 0`, every other line as it is.
fn without_device_file_changes(params: &[u8]) -> Vec<u8> {
    let mut out = String::from_utf8_lossy(params)
        .lines()
        .map(|l| {
            if l.starts_with("ModifyDeviceFiles:") {
                "ModifyDeviceFiles: 0"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use crate::container::tests::in_child;

    const SHOWN: &str = "0000:07:00.0";
    const HIDDEN: &str = "0000:06:00.0";

    #[test]
    fn params_lose_device_file_changes_only() {
        let params = b"RmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileMode: 438\n";
        assert_eq!(
            without_device_file_changes(params),
            b"RmLogonRC: 1\nModifyDeviceFiles: 0\nDeviceFileMode: 438\n"
        );
        assert_eq!(without_device_file_changes(b"A: 1"), b"A: 1\n");
    }

    /// A host's `driver/nvidia` under `dir` with two GPUs; returns its path.
    fn host_nvidia(dir: &Path) -> PathBuf {
        let nvidia = dir.join("driver/nvidia");
        for (bus, minor) in [(HIDDEN, 1), (SHOWN, 0)] {
            let gpu = nvidia.join("gpus").join(bus);
            std::fs::create_dir_all(&gpu).unwrap();
            std::fs::write(
                gpu.join("information"),
                format!("Model: \t Fake\nDevice Minor: \t {minor}\nBus Location: \t {bus}\n"),
            )
            .unwrap();
        }
        std::fs::write(nvidia.join("version"), "NVRM version: fake 999.88.77\n").unwrap();
        std::fs::write(nvidia.join("registry"), "Binary: \"\"\n").unwrap();
        std::fs::write(
            nvidia.join("params"),
            "RmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileMode: 438\n",
        )
        .unwrap();
        nvidia
    }

    /// A rootfs under `dir` whose `/proc` is a fresh procfs, as a runtime mounts it.
    fn rootfs_with_procfs(dir: &Path) -> PathBuf {
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(rootfs.join("proc")).unwrap();
        rustix::mount::mount(
            "proc",
            rootfs.join("proc"),
            "proc",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .unwrap();
        rootfs
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    #[ignore = "needs root: mounts a procfs and the mask"]
    fn the_mask_shows_the_chosen_gpus_read_only_without_device_file_changes() {
        // The kernel's /proc/driver/nvidia exists only with the module loaded: the mask
        // goes over /proc/driver, which every kernel has, of a procfs of the test's own.
        in_child("mounts a procfs and the mask", || {
            let tmp = tempfile::tempdir().unwrap();
            let nvidia = host_nvidia(&tmp.path().join("host"));
            let rootfs = rootfs_with_procfs(tmp.path());
            let mask = ProcMask::prepare(&nvidia, &[SHOWN.to_string()])
                .unwrap()
                .unwrap();
            assert_eq!(mask.gpus().collect::<Vec<_>>(), [SHOWN]);
            let root = ContainerRoot::open(&rootfs).unwrap();
            let masked = mask.apply_at(&root, Path::new("/driver")).unwrap();
            assert_eq!(masked, Masked::Yes);

            let shown = rootfs.join("proc/driver");
            assert_eq!(names(&shown), ["gpus", "params", "registry", "version"]);
            assert_eq!(names(&shown.join("gpus")), [SHOWN]);
            assert_eq!(
                std::fs::read_to_string(shown.join("params")).unwrap(),
                "RmLogonRC: 1\nModifyDeviceFiles: 0\nDeviceFileMode: 438\n"
            );
            for file in ["version", "registry"] {
                assert_eq!(
                    std::fs::read(shown.join(file)).unwrap(),
                    std::fs::read(nvidia.join(file)).unwrap()
                );
            }
            let info = Path::new("gpus").join(SHOWN).join("information");
            assert_eq!(
                std::fs::read(shown.join(&info)).unwrap(),
                std::fs::read(nvidia.join(&info)).unwrap()
            );
            // Nothing in it can be written or added, the GPU's folder included.
            for path in [
                shown.join("params"),
                shown.join("new"),
                shown.join("gpus").join(SHOWN).join("information"),
            ] {
                let err = std::fs::write(&path, "x").unwrap_err();
                assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{}", path.display());
            }
            // The host's files are as they were.
            assert!(std::fs::read_to_string(nvidia.join("params"))
                .unwrap()
                .contains("ModifyDeviceFiles: 1"));
        });
    }

    #[test]
    #[ignore = "needs root: mounts a procfs and the mask"]
    fn every_gpu_shown_is_one_mount_of_the_hosts_gpus_folder() {
        in_child("mounts a procfs and the mask", || {
            let tmp = tempfile::tempdir().unwrap();
            let nvidia = host_nvidia(&tmp.path().join("host"));
            let rootfs = rootfs_with_procfs(tmp.path());
            let every = [SHOWN.to_string(), HIDDEN.to_string()];
            let mask = ProcMask::prepare(&nvidia, &every).unwrap().unwrap();
            assert!(matches!(mask.gpus, GpuFolders::All(..)));
            let mut listed: Vec<&str> = mask.gpus().collect();
            listed.sort();
            assert_eq!(listed, [HIDDEN, SHOWN]);
            let root = ContainerRoot::open(&rootfs).unwrap();
            assert_eq!(
                mask.apply_at(&root, Path::new("/driver")).unwrap(),
                Masked::Yes
            );

            let shown = rootfs.join("proc/driver");
            assert_eq!(names(&shown.join("gpus")), [HIDDEN, SHOWN]);
            let info = Path::new("gpus").join(HIDDEN).join("information");
            assert_eq!(
                std::fs::read(shown.join(&info)).unwrap(),
                std::fs::read(nvidia.join(&info)).unwrap()
            );
            let err = std::fs::write(shown.join(&info), "x").unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EROFS));
            assert_eq!(
                std::fs::read_to_string(shown.join("params")).unwrap(),
                "RmLogonRC: 1\nModifyDeviceFiles: 0\nDeviceFileMode: 438\n"
            );
            // One mount for the folder, none per GPU.
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
            let points: Vec<&str> = mountinfo
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|p| p.contains("/proc/driver/gpus"))
                .collect();
            assert_eq!(points.len(), 1, "{points:?}");
            assert!(points[0].ends_with("/proc/driver/gpus"), "{points:?}");

            // A GPU named twice, or one the host lacks, is no "every GPU".
            let twice = [SHOWN.to_string(), SHOWN.to_string()];
            let mask = ProcMask::prepare(&nvidia, &twice).unwrap().unwrap();
            assert!(matches!(mask.gpus, GpuFolders::Each(..)));
        });
    }

    #[test]
    #[ignore = "needs root: mounts"]
    fn a_container_proc_that_is_no_procfs_is_refused_or_left_alone() {
        in_child("mounts", || {
            let tmp = tempfile::tempdir().unwrap();
            let nvidia = host_nvidia(&tmp.path().join("host"));
            let mask = || {
                ProcMask::prepare(&nvidia, &[SHOWN.to_string()])
                    .unwrap()
                    .unwrap()
            };
            let victim = tmp.path().join("victim");
            std::fs::create_dir_all(victim.join("nvidia")).unwrap();

            // The image's own /proc, nothing mounted there, with /proc/driver a link out
            // of the rootfs: no runtime's procfs, nothing of the host to hide.
            let image = tmp.path().join("image");
            std::fs::create_dir_all(image.join("proc")).unwrap();
            symlink(&victim, image.join("proc/driver")).unwrap();
            let root = ContainerRoot::open(&image).unwrap();
            assert_eq!(
                mask().apply_at(&root, Path::new("/driver/nvidia")).unwrap(),
                Masked::NoProcfs
            );

            // A tmpfs at /proc: refused, naming what it found.
            let tmpfs = tmp.path().join("tmpfs");
            std::fs::create_dir_all(tmpfs.join("proc")).unwrap();
            rustix::mount::mount(
                "tmpfs",
                tmpfs.join("proc"),
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                None,
            )
            .unwrap();
            std::fs::create_dir_all(tmpfs.join("proc/driver/nvidia")).unwrap();
            let root = ContainerRoot::open(&tmpfs).unwrap();
            let err = mask().apply(&root).unwrap_err().to_string();
            assert!(err.contains("tmpfs") && err.contains("procfs"), "{err}");
            assert!(names(&tmpfs.join("proc/driver/nvidia")).is_empty());

            // /proc a link to a host folder: refused, the folder untouched.
            let linked = tmp.path().join("linked");
            std::fs::create_dir_all(&linked).unwrap();
            symlink(&victim, linked.join("proc")).unwrap();
            let root = ContainerRoot::open(&linked).unwrap();
            let err = mask().apply(&root).unwrap_err().to_string();
            assert!(err.contains("/proc"), "{err}");
            assert!(names(&victim.join("nvidia")).is_empty());

            // A procfs without the driver's folder: nothing to mask.
            let rootfs = rootfs_with_procfs(tmp.path());
            let root = ContainerRoot::open(&rootfs).unwrap();
            assert_eq!(
                mask()
                    .apply_at(&root, Path::new("/driver/no-such-driver"))
                    .unwrap(),
                Masked::NoDriverFolder
            );
            // No host folder: no mask at all.
            assert!(ProcMask::prepare(&tmp.path().join("none"), &[])
                .unwrap()
                .is_none());
        });
    }
}
