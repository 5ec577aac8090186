//! Applies container edits to a live container from its prestart hook: bind mounts,
//! device nodes missing from the spec, soname links, the masked `/proc/driver/nvidia`,
//! and the container's ld.so.cache.
//!
//! Every source is opened in the host's mount namespace first; then the process enters
//! the container's mount namespace and acts only through [`ContainerRoot`], which
//! resolves every container path inside the rootfs and on the rootfs's own mount (never in
//! a volume, `/proc`, `/sys` or a tmpfs), but for the device nodes and the file mounts'
//! mount points on the runtime's `/dev` tmpfs ([`STAGE`], each named in the image's folder
//! by a link, so that a layer committed from the running container holds no empty driver
//! file) and the mask on its `/proc`, reached as submounts checked to be those. No path
//! from the image is ever a mount source, every mount is private before it is attached,
//! and nothing from the image is executed. A read-only rootfs (`root.readonly`) gets no
//! written file or link: only the empty mount points the runtime itself would make for the
//! same mounts in the spec. Its soname names are mounts of the library file, and the new
//! ld.so.cache is mounted over the image's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use libnvc::discover::{Driver, LibClass, Library};
use libnvc::edits::{ContainerEdits, ContainerLayout, MountKind};
use libnvc::ldcache::{CacheArch, Entry};
use log::{debug, info, warn};

use crate::container::{
    self, ContainerRoot, DetachedMount, FileKind, Filesystem, FsError, MountAttrs, Staged,
};
use crate::devcgroup::{self, CharDevice, DeviceCgroup};
use crate::ldcache::CacheChange;
use crate::privileges::{Phase, Privileges};
use crate::proc_mask::ProcMask;
use crate::trace::Trace;

/// What the hook knows about the container besides the edits.
#[derive(Debug, Clone)]
pub struct Target {
    /// The container's init process, whose mount namespace is entered.
    pub pid: i32,
    /// The rootfs as seen from the container's mount namespace before pivot_root: its
    /// host path.
    pub rootfs: PathBuf,
    /// Device paths the spec already has (runc creates those itself).
    pub spec_devices: Vec<PathBuf>,
    /// Update the container's ld.so.cache.
    pub update_ldcache: bool,
    /// The container's device cgroup, extended for the nodes bound in because the spec
    /// lacks them; `None` leaves it alone.
    pub device_cgroup: Option<DeviceCgroup>,
    /// `root.readonly`: nothing may be written in the rootfs but empty mount points.
    pub readonly: bool,
    /// The spec's fresh tmpfs mounts (`/dev`, containerd's `/run`, ...): the runtime's
    /// own file systems, where mount points may be made though they are not the rootfs's
    /// mount.
    pub tmpfs_mounts: Vec<PathBuf>,
    /// The container already runs (`nvc attach`): its root is the root of its mount
    /// namespace (`rootfs` only names it), and what is already there is kept: a mount
    /// target already mounted, a device node already there with its numbers. Links and
    /// the ld.so.cache are written only when libraries were mounted now; a read-only
    /// rootfs that lacks a file to mount is refused. An existing `/proc/driver/nvidia`
    /// mask is replaced.
    pub running: bool,
    /// Where what is made in the rootfs is written as it is made (the container's record),
    /// besides the [`Trace`] set-up returns.
    pub journal: Option<std::sync::Arc<dyn crate::container::JournalSink>>,
}

/// Why the container could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A file-system operation on the host or in the container failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The container's ld.so.cache could not be updated.
    #[error(transparent)]
    LdCache(#[from] crate::ldcache::UpdateError),
    /// The container's device cgroup could not be extended for the nodes bound in.
    #[error(transparent)]
    DevCgroup(#[from] devcgroup::DevCgroupError),
    /// The capabilities a phase needs could not be set.
    #[error(transparent)]
    Privileges(#[from] crate::privileges::PrivilegesError),
    /// A running container's read-only rootfs lacks driver files to mount.
    #[error("the running container's root filesystem is read-only and lacks {missing}: nvc cannot add the driver's files to it; start the container with a GPU (NVIDIA_VISIBLE_DEVICES, or NVIDIA_VISIBLE_DEVICES=none for the files alone) and attach GPUs to it then")]
    ReadOnlyRunning {
        /// The first file missing.
        missing: PathBuf,
    },
}

/// Sets the container up from its plan (`planned`: the edits for the default library
/// folders, which are moved to the image's own): mounts, nodes, links,
/// `/proc/driver/nvidia`, ld.so.cache. Returns the edits made. Must run single-threaded
/// (it enters another mount namespace).
pub fn set_up(
    driver: &Driver,
    planned: &ContainerEdits,
    target: &Target,
) -> Result<ContainerEdits, SetupError> {
    set_up_noted(driver, planned, target, None)
        .map(|(edits, _)| edits)
        .map_err(|failed| failed.error)
}

/// A set-up that failed part way: why, and what it had made by then (to take away).
#[derive(Debug)]
pub struct Failed {
    /// Why.
    pub error: SetupError,
    /// What was made in the rootfs before it failed.
    pub made: Trace,
}

/// [`set_up`], saying also what it made in the rootfs and the ld.so.cache it wrote
/// ([`Trace`]), for the record the hook keeps to take them away when the container ends;
/// on failure, what it had made by then ([`Failed`]).
// Returned once, by a one-shot process: its size costs nothing.
#[allow(clippy::result_large_err)]
pub fn set_up_noted(
    driver: &Driver,
    planned: &ContainerEdits,
    target: &Target,
    privileges: Option<&mut Privileges>,
) -> Result<(ContainerEdits, Trace), Failed> {
    let mut opened = None;
    let mut phases = Phased(privileges);
    set_up_in(driver, planned, target, &mut opened, &mut phases).map_err(|error| Failed {
        error,
        made: Trace {
            made: opened
                .map(|root: ContainerRoot| root.made())
                .unwrap_or_default(),
            ldcache: None,
        },
    })
}

/// [`set_up_noted`]'s work; the root it opened is left in `opened`, so that what it made
/// is known when it fails.
fn set_up_in(
    driver: &Driver,
    planned: &ContainerEdits,
    target: &Target,
    opened: &mut Option<ContainerRoot>,
    privileges: &mut Phased<'_>,
) -> Result<(ContainerEdits, Trace), SetupError> {
    let mut phases = crate::phases::Phases::start("set up");
    privileges.enter(Phase::Sources)?;
    if !target.running {
        container::refuse_host_root(&target.rootfs)?;
    }
    // Phase 1, host namespace: every source, as a detached mount. The host paths do not
    // depend on the container's layout.
    let mut sources: BTreeMap<PathBuf, DetachedMount> = BTreeMap::new();
    for m in &planned.mounts {
        if !sources.contains_key(&m.host_path) {
            sources.insert(
                m.host_path.clone(),
                DetachedMount::bind(&m.host_path, m.kind.policy().into())?,
            );
        }
    }
    phases.mark("sources");
    let node_attrs = MountAttrs {
        readonly: false,
        nosuid: true,
        nodev: false,
        noexec: true,
    };
    let mut node_sources = Vec::new();
    let in_spec: BTreeSet<&Path> = target.spec_devices.iter().map(PathBuf::as_path).collect();
    for node in &planned.device_nodes {
        if in_spec.contains(node.path.as_path()) {
            continue;
        }
        if !node.on_host {
            warn!(
                "{} is not on the host; the container will lack it",
                node.host_path.display()
            );
            continue;
        }
        let src = DetachedMount::bind(&node.host_path, node_attrs)?;
        // What is bound is what discovery saw: the same character device.
        container::check_char_device(src.dir_fd(), node.major, node.minor)?;
        node_sources.push((node.clone(), src));
    }
    // The runtime's device cgroup forbids the nodes it was not told about: read and build
    // the grant here, in the host's namespaces; it is applied once the nodes are mounted.
    let device_grant = match &target.device_cgroup {
        // Rootless (the hook runs in a user namespace of its own, as rootless Podman runs
        // it): the device cgroup is not the caller's to change, and the runtime made none
        // for the container; the nodes bound in are all it needs, as NVIDIA's
        // `no-cgroups` setting has it, decided here rather than configured.
        Some(_) if !node_sources.is_empty() && !devcgroup::in_initial_user_namespace() => {
            info!(
                "in a user namespace of its own (rootless): the container's device cgroup \
                 is left as the runtime made it"
            );
            None
        }
        Some(cgroup) if !node_sources.is_empty() => {
            let devices: Vec<CharDevice> = node_sources
                .iter()
                .map(|(n, _)| CharDevice {
                    major: n.major,
                    minor: n.minor,
                })
                .collect();
            privileges.enter(Phase::DeviceCgroupPrepare)?;
            Some(devcgroup::prepare(target.pid, cgroup, &devices)?)
        }
        _ => None,
    };
    phases.mark("nodes");
    privileges.enter(Phase::Sources)?;
    let proc_mask = ProcMask::prepare(&driver.roots.nvidia_proc(), &planned.visible_gpus)?;

    phases.mark("proc-mask-sources");
    // Phase 2, the container's mount namespace.
    privileges.enter(Phase::EnterContainer)?;
    container::enter_mount_namespace(target.pid)?;
    privileges.enter(Phase::Rootfs)?;
    let mut root = match target.running {
        true => ContainerRoot::open_entered(&target.rootfs)?,
        false => ContainerRoot::open(&target.rootfs)?,
    };
    if target.readonly {
        root.set_read_only();
    }
    if let Some(journal) = &target.journal {
        root.journal_to(journal.clone());
    }
    let root = &*opened.insert(root);
    let arch = driver.arch().unwrap_or(libnvc::elf::Arch::X86_64);
    let layout = ContainerLayout::of_image(arch, |p| root.is_dir(p));
    // The plan placed the libraries in the default folders; the image's own are known
    // only here.
    let edits = planned.relocated(&ContainerLayout::default(), &layout);
    debug!(
        "library folder {} in {}, paths resolved with {:?}",
        layout.lib64.display(),
        target.rootfs.display(),
        root.resolver()
    );

    phases.mark("enter");
    let needed = edits
        .mounts
        .iter()
        .map(|m| m.container_path.as_path())
        .chain(node_sources.iter().map(|(n, _)| n.path.as_path()))
        .chain([Path::new(STAGE)]);
    let runtime_tmpfs = RuntimeTmpfs::open(root, &target.tmpfs_mounts, needed)?;
    let mut skip = Vec::new();
    if target.running {
        skip = already_mounted(root, &edits)?;
        if let Some(m) = edits
            .mounts
            .iter()
            .find(|m| !skip.contains(&m.container_path))
        {
            if target.readonly {
                return Err(SetupError::ReadOnlyRunning {
                    missing: m.container_path.clone(),
                });
            }
        }
    }
    // File mounts go onto the runtime's /dev when the spec makes it a tmpfs and the hook
    // can make files there: not in a user namespace the hook is not in (Docker's
    // userns-remap, a spec with uid mappings run by root), whose /dev takes no file owned by
    // a user it does not map (EOVERFLOW); their mount points are then made in place.
    let stage = match runtime_tmpfs.stage(root) {
        Some(dev)
            if !root.is_read_only()
                && edits.mounts.iter().any(|m| m.kind != MountKind::Directory) =>
        {
            match dev.mkdir_all(Path::new("/.nvc"), 0o755) {
                Ok(_) => Some(dev),
                Err(e) => {
                    debug!("mount points made in place, not on /dev: {e}");
                    None
                }
            }
        }
        _ => None,
    };
    phases.mark("runtime-tmpfs");
    let mut mounted_now = 0;
    for m in &edits.mounts {
        if skip.contains(&m.container_path) {
            continue;
        }
        let Some(src) = sources.remove(&m.host_path) else {
            continue;
        };
        mounted_now += 1;
        let (on, path) = runtime_tmpfs.place(root, &m.container_path);
        // A file on the rootfs's mount (not one already on a runtime tmpfs).
        let staged_on = stage.filter(|_| m.kind != MountKind::Directory && std::ptr::eq(on, root));
        if let Some(dev) = staged_on {
            // The file's name in the image's folder is a link to its mount point on the
            // runtime's /dev: a layer committed from the running container holds a
            // dangling link, never an empty file the loader would take for the library.
            let staged = staged_path(&path);
            let target = staged_target(&path);
            match root.link_mount_point(&path, &target.to_string_lossy())? {
                Staged::Linked => {
                    let point = dev.file_mount_point(&staged, 0o644)?;
                    dev.attach(src, &point, &staged)?;
                }
                // The image's own file: mounted over, as without a stage.
                Staged::File(point) => root.attach(src, &point, &path)?,
            }
            continue;
        }
        let point = match m.kind {
            MountKind::Directory => on.dir_mount_point(&path, 0o755)?,
            _ => on.file_mount_point(&path, 0o644)?,
        };
        on.attach(src, &point, &path)?;
    }
    phases.mark("mounts");
    for (node, src) in node_sources {
        let (on, path) = runtime_tmpfs.place(root, &node.path);
        if target.running && node_present(on, &path, node.major, node.minor)? {
            continue;
        }
        let point = on.device_mount_point(&path, node.major, node.minor)?;
        on.attach(src, &point, &path)?;
    }
    if let Some(grant) = device_grant {
        privileges.enter(Phase::DeviceCgroupApply)?;
        grant.apply()?;
        privileges.enter(Phase::Rootfs)?;
    }
    phases.mark("device-nodes");
    if target.running && mounted_now == 0 {
        // The driver's files were all there: so are their links.
    } else if root.is_read_only() {
        // No link is written: each name is a mount of the file it would lead to.
        for (link, host) in link_sources(&edits) {
            let src = DetachedMount::bind(&host, MountKind::Library.policy().into())?;
            let point = root.file_mount_point(&link, 0o644)?;
            root.attach(src, &point, &link)?;
        }
    } else {
        for link in &edits.symlinks {
            root.symlink(&link.link, &link.target)?;
        }
    }
    phases.mark("links");
    privileges.enter(Phase::ProcMask)?;
    if proc_mask.is_some() && target.running {
        // A running container's old mask goes first.
        unmask(root)?;
    }
    if let Some(mask) = proc_mask {
        // No procfs, or none with the driver's folder: nothing of the host to hide.
        let masked = mask.apply(root)?;
        debug!("/proc/driver/nvidia: {masked:?}");
    }
    phases.mark("proc-mask");
    // Last, with the fewest capabilities left: it parses the image's own cache.
    privileges.enter(Phase::Rootfs)?;
    let mut ldcache = None;
    if target.update_ldcache
        && !edits.ldcache_dirs.is_empty()
        && (!target.running || mounted_now > 0)
    {
        ldcache = update_ldcache(root, driver, &edits)?;
    }
    phases.mark("ldcache");
    phases.log();
    info!(
        "set up {}: {} mounts, {} device nodes, {} links",
        target.rootfs.display(),
        edits.mounts.len(),
        edits.device_nodes.len(),
        edits.symlinks.len()
    );
    let trace = Trace {
        made: root.made(),
        ldcache,
    };
    Ok((edits, trace))
}

/// The container paths of `edits`'s mounts that are mounted already (a mount of their own,
/// from the runtime or an earlier setup): attaching leaves them.
pub fn already_mounted(
    root: &ContainerRoot,
    edits: &ContainerEdits,
) -> Result<Vec<PathBuf>, FsError> {
    let mut out = Vec::new();
    for m in &edits.mounts {
        if root.present(&m.container_path)?.is_some_and(|p| p.mounted) {
            out.push(m.container_path.clone());
        }
    }
    Ok(out)
}

/// Whether the device node `path` of `on` is there already: mounted over, or the
/// character device `major:minor` itself.
pub fn node_present(
    on: &ContainerRoot,
    path: &Path,
    major: u32,
    minor: u32,
) -> Result<bool, FsError> {
    Ok(on
        .present(path)?
        .is_some_and(|p| p.mounted || p.kind == FileKind::CharDevice(major, minor)))
}

/// Takes an earlier mask off the container's `/proc/driver/nvidia` (mounted over its
/// procfs), so that a new one shows the GPUs attached since.
pub fn unmask(root: &ContainerRoot) -> Result<(), FsError> {
    if let Some(proc) = root.submount(Path::new("/proc"), Filesystem::Procfs)? {
        if proc.unmount(Path::new("/driver/nvidia"))? {
            info!("took the old mask off /proc/driver/nvidia");
        }
    }
    Ok(())
}

/// The privileges of the process setting a container up, when it bounds them
/// ([`crate::privileges`]): each phase of set-up entered as it begins.
struct Phased<'a>(Option<&'a mut Privileges>);

impl Phased<'_> {
    fn enter(&mut self, phase: Phase) -> Result<(), SetupError> {
        match &mut self.0 {
            Some(privileges) => Ok(privileges.enter(phase)?),
            None => Ok(()),
        }
    }
}

/// The runtime's fresh tmpfs mounts that hold something nvc mounts: the spec's `tmpfs`
/// mounts (`/dev`, containerd's `/run`, a read-only container's `/tmp`), each
/// opened as a [`ContainerRoot::submount`] checked to be a tmpfs. They are the container's
/// own, emptied with it, and the image has nothing in them; everything else stays on the
/// rootfs's mount.
struct RuntimeTmpfs {
    /// Destination and submount, deepest first.
    mounts: Vec<(PathBuf, ContainerRoot)>,
}

impl RuntimeTmpfs {
    fn open<'a>(
        root: &ContainerRoot,
        spec_tmpfs: &[PathBuf],
        needed: impl Iterator<Item = &'a Path>,
    ) -> Result<RuntimeTmpfs, FsError> {
        let needed: Vec<&Path> = needed.collect();
        // `/dev` too only when the spec makes it a tmpfs: a bind of the host's /dev
        // (`-v /dev:/dev`) is a volume, where nothing is made.
        let mut dirs: Vec<&Path> = spec_tmpfs.iter().map(PathBuf::as_path).collect();
        dirs.sort();
        dirs.dedup();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        let mut mounts = Vec::new();
        for dir in dirs {
            if !needed.iter().any(|p| p.starts_with(dir) && *p != dir) {
                continue;
            }
            if let Some(sub) = root.submount(dir, Filesystem::Tmpfs)? {
                mounts.push((dir.to_path_buf(), sub));
            }
        }
        Ok(RuntimeTmpfs { mounts })
    }

    /// The runtime's `/dev` tmpfs, where file mounts are staged ([`STAGE`]), when the
    /// spec makes `/dev` one (a bind of the host's `/dev` is a volume: nothing staged).
    fn stage<'a>(&'a self, root: &'a ContainerRoot) -> Option<&'a ContainerRoot> {
        let (on, _) = self.place(root, Path::new(STAGE));
        (!std::ptr::eq(on, root)).then_some(on)
    }

    /// Where `path` is: on the deepest runtime tmpfs holding it, as a path inside it, or
    /// on `root`.
    fn place<'a>(&'a self, root: &'a ContainerRoot, path: &Path) -> (&'a ContainerRoot, PathBuf) {
        for (dir, sub) in &self.mounts {
            if let Ok(rest) = path.strip_prefix(dir) {
                return (sub, Path::new("/").join(rest));
            }
        }
        (root, path.to_path_buf())
    }
}

/// Where file mounts go on the runtime's `/dev` tmpfs, named in the image's folders by
/// links to them ([`staged_target`]).
pub const STAGE: &str = "/dev/.nvc";

/// The mount point of the file mount at `path` (a container path), as the link in the
/// image's folder names it: `/dev/.nvc/<folder>/<file name>`, where `<folder>` is eight hex
/// digits of a hash (FNV-1a) of `path`'s folder, so that files of the same name in two
/// folders (a 64- and a 32-bit library) stay apart. Short on purpose: a link target under
/// 60 bytes is kept in the inode on ext4 (a "fast" link); a longer one takes a data block
/// of its own, which made taking 34 links away 1.1 ms slower than as many empty files.
pub fn staged_target(path: &Path) -> PathBuf {
    let folder = path.parent().unwrap_or(Path::new("/"));
    let mut hash: u32 = 0x811c_9dc5;
    for byte in folder.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193);
    }
    let mut target = PathBuf::from(STAGE);
    target.push(format!("{hash:08x}"));
    if let Some(name) = path.file_name() {
        target.push(name);
    }
    target
}

/// [`staged_target`] as a path inside the runtime's `/dev` tmpfs.
fn staged_path(path: &Path) -> PathBuf {
    let target = staged_target(path);
    Path::new("/").join(target.strip_prefix("/dev").unwrap_or(&target))
}

/// For each link of `edits` that leads (through other links in its folder) to a file
/// `edits` mounts, the link's path and that file's host path.
fn link_sources(edits: &ContainerEdits) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for link in &edits.symlinks {
        let Some(dir) = link.link.parent() else {
            continue;
        };
        let mut name = link.target.clone();
        for _ in 0..8 {
            let path = dir.join(&name);
            if let Some(m) = edits.mounts.iter().find(|m| m.container_path == path) {
                out.push((link.link.clone(), m.host_path.clone()));
                break;
            }
            match edits.symlinks.iter().find(|l| l.link == path) {
                Some(next) => name = next.target.clone(),
                None => break,
            }
        }
    }
    out
}

/// Cache flags for a driver library: its architecture's 64-bit ABI (`0x0a03` for an
/// aarch64 driver's), or i386's for the 32-bit build.
fn abi_of(lib: &Library) -> CacheArch {
    match lib.class {
        LibClass::Lib64 => CacheArch::from(lib.arch),
        LibClass::Lib32 => CacheArch::I386,
    }
}

/// The ld.so.cache entries of the libraries `edits` mounts: each by its soname and by
/// the names of the links `edits` makes to it in its folder.
pub fn cache_entries(driver: &Driver, edits: &ContainerEdits) -> Vec<Entry> {
    let mut ours = Vec::new();
    for lib in &driver.libraries {
        // The folder the library was mounted into, if it was.
        let Some(dir) = edits
            .mounts
            .iter()
            .find(|m| m.kind == MountKind::Library && m.host_path == lib.host_path)
            .and_then(|m| m.container_path.parent())
        else {
            continue;
        };
        let flags = abi_of(lib).flags();
        let mut names = vec![lib.soname.clone()];
        names.extend(
            edits
                .symlinks
                .iter()
                .filter(|s| s.link.parent() == Some(dir) && s.target == lib.soname)
                .filter_map(|s| {
                    s.link
                        .file_name()
                        .and_then(|n| n.to_str())
                        .map(str::to_string)
                }),
        );
        for name in names {
            ours.push(Entry {
                path: dir.join(&name).display().to_string(),
                name,
                flags,
                hwcap: 0,
            });
        }
    }
    ours
}

/// Updates the container's ld.so.cache ([`crate::ldcache::update`]) with the libraries
/// mounted ([`cache_entries`]).
fn update_ldcache(
    root: &ContainerRoot,
    driver: &Driver,
    edits: &ContainerEdits,
) -> Result<Option<CacheChange>, SetupError> {
    Ok(crate::ldcache::update_noted(
        root,
        cache_entries(driver, edits),
        driver.version().as_ref(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_targets_are_short_and_apart_by_folder() {
        let lib64 = Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.580.95.05");
        let target = staged_target(lib64);
        // Kept in the inode on ext4 (under 60 bytes).
        assert!(target.as_os_str().len() < 60, "{}", target.display());
        assert!(target.starts_with(STAGE));
        assert_eq!(target.file_name(), lib64.file_name());
        let lib32 = Path::new("/usr/lib/i386-linux-gnu/libnvidia-vulkan-producer.so.580.95.05");
        assert_ne!(staged_target(lib32), target);
        let sibling = Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05");
        assert_eq!(staged_target(sibling).parent(), target.parent());
        assert_eq!(staged_target(lib64), target);
        assert_eq!(
            staged_path(sibling),
            Path::new("/").join(staged_target(sibling).strip_prefix("/dev").unwrap())
        );
    }
}
