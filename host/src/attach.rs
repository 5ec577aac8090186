//! GPUs added to, and taken from, a running container (`nvc attach`, `nvc detach`).
//!
//! Attaching is [`crate::setup::set_up`] with [`Target::running`]: the same mounts, nodes,
//! device cgroup grant, `/proc/driver/nvidia` mask and ld.so.cache as the prestart hook
//! makes, done in the container's mount namespace after its `pivot_root`, keeping what is
//! already there. Detaching unmounts and removes the GPUs' nodes from its `/dev` and
//! revokes them in its device cgroup; the driver's files stay.
//!
//! What nvc granted a container is recorded on the host ([`AttachRecord`], under
//! [`RECORD_DIR`]), never read from the container: on cgroup v2 each change rebuilds the
//! device program from the spec's rules and these grants, and the mask shows these GPUs.

use std::path::{Path, PathBuf};

use libnvc::discover::DeviceNode;
use libnvc::edits::ContainerEdits;
use log::info;
use serde::{Deserialize, Serialize};

use crate::container::{self, ContainerRoot, FileKind, Filesystem, FsError};
use crate::devcgroup::{self, CharDevice, DevCgroupError, DeviceCgroup};
use crate::files::{self, FileError, WriteOptions};
use crate::proc_mask::ProcMask;
use crate::setup::Target;

/// Where the records of what nvc attached live, in nvc's state folder (`[hook]
/// state-dir`, on the host's `/run` tmpfs: gone with the host's boot as the containers
/// are).
pub const RECORD_DIR: &str = "attached";

/// Why a running container cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The state's process is gone or unreadable.
    #[error("cannot examine process {pid} of the container's state ({path})")]
    Process {
        /// The pid.
        pid: i32,
        /// What was examined.
        path: PathBuf,
        /// The reason.
        #[source]
        source: std::io::Error,
    },
    /// The container runs in a user namespace of its own.
    #[error("the container runs in a user namespace of its own (rootless, or userns-remap): its device cgroup and mounts are not nvc's to change; restart it with the GPUs instead")]
    UserNamespace,
    /// The process's root is not the state's rootfs.
    #[error("process {pid} does not have the state's rootfs {rootfs} as its root: the state is stale or the pid was reused; check the container id and --root")]
    OtherRoot {
        /// The pid.
        pid: i32,
        /// The state's rootfs.
        rootfs: PathBuf,
    },
    /// A file-system operation failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The device cgroup could not be changed.
    #[error(transparent)]
    DevCgroup(#[from] DevCgroupError),
    /// The record of what was attached could not be read or written.
    #[error(transparent)]
    Record(#[from] FileError),
    /// The record is not JSON nvc wrote.
    #[error("invalid record {path}: remove it (it lists the GPUs nvc attached to the container)")]
    BadRecord {
        /// The record.
        path: PathBuf,
        /// The reason.
        #[source]
        source: serde_json::Error,
    },
}

/// Refuses a process that is not the running container the state names: one in a user
/// namespace other than this process's (nvc then cannot grant devices), or whose root is
/// not `rootfs` (a stale state, a reused pid). The mount namespace is checked when it is
/// entered ([`container::enter_mount_namespace`] refuses this process's own).
pub fn check_process(pid: i32, rootfs: &Path) -> Result<(), AttachError> {
    let stat = |path: PathBuf| {
        std::fs::metadata(&path)
            .map(|m| {
                (
                    std::os::unix::fs::MetadataExt::dev(&m),
                    std::os::unix::fs::MetadataExt::ino(&m),
                )
            })
            .map_err(|source| AttachError::Process { pid, path, source })
    };
    let own = stat(PathBuf::from("/proc/self/ns/user"))?;
    let theirs = stat(PathBuf::from(format!("/proc/{pid}/ns/user")))?;
    if own != theirs || !devcgroup::in_initial_user_namespace() {
        return Err(AttachError::UserNamespace);
    }
    if stat(PathBuf::from(format!("/proc/{pid}/root")))? != stat(rootfs.to_path_buf())? {
        return Err(AttachError::OtherRoot {
            pid,
            rootfs: rootfs.to_path_buf(),
        });
    }
    Ok(())
}

/// What nvc attached to one container: the device numbers granted and the GPUs' bus ids,
/// for the container whose init was `pid`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRecord {
    /// The container's init when the record was written: a record for another pid is
    /// from an earlier container of the same id, and is ignored.
    pub pid: i32,
    /// `[major, minor]` of every node granted.
    pub devices: Vec<(u32, u32)>,
    /// The bus ids of the GPUs attached.
    pub gpus: Vec<String>,
}

/// The record file of container `id` under the runtime state directory `state_root`, in
/// nvc's state folder `state_dir` (`[hook] state-dir`, `/run/nvc`).
pub fn record_path(state_dir: &Path, state_root: &Path, id: &str) -> PathBuf {
    // FNV-1a of the state directory: stable across builds, and ids of two runtimes' roots
    // do not meet.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in state_root.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    state_dir
        .join(RECORD_DIR)
        .join(format!("{hash:016x}-{id}.json"))
}

impl AttachRecord {
    /// The record at `path` for the container whose init is `pid`; empty when there is
    /// none, or it is for another pid.
    pub fn load(path: &Path, pid: i32) -> Result<AttachRecord, AttachError> {
        let Some(text) = files::read_optional(path)? else {
            return Ok(AttachRecord {
                pid,
                ..AttachRecord::default()
            });
        };
        let record: AttachRecord =
            serde_json::from_str(&text).map_err(|source| AttachError::BadRecord {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(if record.pid == pid {
            record
        } else {
            AttachRecord {
                pid,
                ..AttachRecord::default()
            }
        })
    }

    /// Writes the record to `path` (mode 0600, folders made).
    pub fn save(&self, path: &Path) -> Result<(), AttachError> {
        let text = serde_json::to_vec_pretty(self).map_err(|source| AttachError::BadRecord {
            path: path.to_path_buf(),
            source,
        })?;
        let options = WriteOptions {
            create_parents: true,
            ..WriteOptions::new(0o600)
        };
        files::write_atomic(path, &text, &options)?;
        Ok(())
    }

    /// The device cgroup of a container whose runtime rules are `spec_rules`, with this
    /// record's grants added.
    pub fn device_cgroup(&self, mut base: DeviceCgroup) -> DeviceCgroup {
        for (major, minor) in &self.devices {
            libnvc::devcgroup::allow(&mut base.rules, *major, *minor);
        }
        base
    }
}

/// Attaches the GPUs of `edits` to the running container `target` (whose
/// [`Target::running`] must be set) with [`crate::setup::set_up_noted`]: the edits made,
/// and what was made in the rootfs for the container's record ([`crate::trace::Addition`]).
/// Must run single-threaded; enters the container's mount namespace.
pub fn attach(
    driver: &libnvc::discover::Driver,
    edits: &ContainerEdits,
    target: &Target,
) -> Result<(ContainerEdits, crate::trace::Trace), crate::setup::SetupError> {
    crate::setup::set_up_noted(driver, edits, target)
}

/// What [`detach`] did to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The node's path in the container.
    pub path: PathBuf,
    /// Whether a mount was taken off it.
    pub unmounted: bool,
    /// Whether the node was there and removed.
    pub removed: bool,
}

/// Takes `nodes` out of the running container whose init is `pid` (`rootfs` names it in
/// messages): each is revoked in its device cgroup (`cgroup`: the rules that stay, see
/// [`devcgroup::prepare_revoke`]), unmounted and removed from its `/dev`; then its
/// `/proc/driver/nvidia` mask is replaced by `mask` (prepared in the host's namespace
/// with the GPUs it keeps), so that the folders of the GPUs taken out go too. Must run
/// single-threaded; enters the container's mount namespace.
pub fn detach(
    pid: i32,
    rootfs: &Path,
    nodes: &[DeviceNode],
    cgroup: &DeviceCgroup,
    mask: Option<ProcMask>,
) -> Result<Vec<Detached>, AttachError> {
    let devices: Vec<CharDevice> = nodes
        .iter()
        .map(|n| CharDevice {
            major: n.major,
            minor: n.minor,
        })
        .collect();
    let revoke = devcgroup::prepare_revoke(pid, cgroup, &devices)?;
    container::enter_mount_namespace(pid)?;
    let root = ContainerRoot::open_entered(rootfs)?;
    // The cgroup first: once it forbids the nodes, no new open of them succeeds.
    revoke.apply()?;
    let dev = root.submount(Path::new("/dev"), Filesystem::Tmpfs)?;
    let mut done = Vec::new();
    for node in nodes {
        let (on, path) = match (&dev, node.path.strip_prefix("/dev")) {
            (Some(dev), Ok(rest)) => (dev, Path::new("/").join(rest)),
            _ => (&root, node.path.clone()),
        };
        let unmounted = on.unmount(&path)?;
        let removed = on.remove_node(&path, node.major, node.minor)?;
        info!(
            "{}: unmounted {unmounted}, removed {removed}",
            node.path.display()
        );
        done.push(Detached {
            path: node.path.clone(),
            unmounted,
            removed,
        });
    }
    if let Some(mask) = mask {
        unmask(&root)?;
        let shown = mask.gpus().count();
        let masked = mask.apply(&root)?;
        info!("/proc/driver/nvidia shows {shown} GPU folders now: {masked:?}");
    }
    Ok(done)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_per_state_root_and_id() {
        let run = Path::new("/run/nvc");
        let a = record_path(run, Path::new("/run/runc"), "web");
        let b = record_path(run, Path::new("/run/docker/runtime-runc/moby"), "web");
        assert_ne!(a, b);
        assert!(a.starts_with("/run/nvc/attached"));
        assert!(a.to_string_lossy().ends_with("-web.json"));
        assert_eq!(a, record_path(run, Path::new("/run/runc"), "web"));
    }

    #[test]
    fn a_record_for_another_pid_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/r.json");
        let record = AttachRecord {
            pid: 42,
            devices: vec![(195, 0)],
            gpus: vec!["0000:06:00.0".into()],
        };
        record.save(&path).unwrap();
        assert_eq!(AttachRecord::load(&path, 42).unwrap(), record);
        assert_eq!(AttachRecord::load(&path, 43).unwrap().devices, vec![]);
        std::fs::write(&path, "not json").unwrap();
        let err = AttachRecord::load(&path, 42).unwrap_err();
        assert!(err.to_string().contains("remove it"), "{err}");
    }
}
