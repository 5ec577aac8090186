//! GPUs added to, and taken from, a running container (`nvc attach`, `nvc detach`).
//!
//! Attaching is [`crate::lifecycle::attach`]: [`crate::setup::set_up`] with
//! [`crate::setup::Target::running`], the same mounts, nodes,
//! device cgroup grant, `/proc/driver/nvidia` mask and ld.so.cache as the prestart hook
//! makes, done in the container's mount namespace after its `pivot_root`, keeping what is
//! already there. Detaching unmounts and removes the GPUs' nodes from its `/dev` and
//! revokes them in its device cgroup; the driver's files stay.
//!
//! What nvc granted a container is recorded on the host ([`AttachRecord`], in the state
//! folder: [`crate::state::StateDir::attach_record`]), never read from the container: on cgroup v2 each change rebuilds the
//! device program from the spec's rules and these grants, and the mask shows these GPUs.

use std::path::{Path, PathBuf};

use libnvc::discover::DeviceNode;
use log::info;
use serde::{Deserialize, Serialize};

use crate::container::{self, ContainerRoot, Filesystem, FsError};
use crate::devcgroup::{self, CharDevice, DevCgroupError, DeviceCgroup};
use crate::files::{self, FileError, WriteOptions};
use crate::privileges::{Phase, Privileges};
use crate::proc_mask::ProcMask;

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
    /// The capabilities a phase needs could not be set.
    #[error(transparent)]
    Privileges(#[from] crate::privileges::PrivilegesError),
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
/// for the container `id` whose init was `pid` (at [`crate::state::StateDir::attach_record`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRecord {
    /// The container's id: a record of another id is not this container's.
    #[serde(default)]
    pub id: String,
    /// The container's init when the record was written: a record for another pid is
    /// from an earlier container of the same id, and is ignored.
    pub pid: i32,
    /// `[major, minor]` of every node granted.
    pub devices: Vec<(u32, u32)>,
    /// The bus ids of the GPUs attached.
    pub gpus: Vec<String>,
}

impl AttachRecord {
    /// The record at `path` for container `id` whose init is `pid`; empty when there is
    /// none, or it is for another container or pid.
    pub fn load(path: &Path, id: &str, pid: i32) -> Result<AttachRecord, AttachError> {
        let empty = AttachRecord {
            id: id.to_string(),
            pid,
            ..AttachRecord::default()
        };
        let Some(text) = files::read_optional(path)? else {
            return Ok(empty);
        };
        let record: AttachRecord =
            serde_json::from_str(&text).map_err(|source| AttachError::BadRecord {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(if record.pid == pid && record.id == id {
            record
        } else {
            empty
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
    privileges: &mut Privileges,
) -> Result<Vec<Detached>, AttachError> {
    let devices: Vec<CharDevice> = nodes
        .iter()
        .map(|n| CharDevice {
            major: n.major,
            minor: n.minor,
        })
        .collect();
    privileges.enter(Phase::DeviceCgroupPrepare)?;
    let revoke = devcgroup::prepare_revoke(pid, cgroup, &devices)?;
    privileges.enter(Phase::EnterContainer)?;
    container::enter_mount_namespace(pid)?;
    let root = ContainerRoot::open_entered(rootfs)?;
    // The cgroup first: once it forbids the nodes, no new open of them succeeds.
    privileges.enter(Phase::DeviceCgroupApply)?;
    revoke.apply()?;
    privileges.enter(Phase::Rootfs)?;
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
    privileges.enter(Phase::ProcMask)?;
    if let Some(mask) = mask {
        crate::setup::unmask(&root)?;
        let shown = mask.gpus().count();
        let masked = mask.apply(&root)?;
        info!("/proc/driver/nvidia shows {shown} GPU folders now: {masked:?}");
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_for_another_pid_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/r.json");
        let record = AttachRecord {
            id: "web".into(),
            pid: 42,
            devices: vec![(195, 0)],
            gpus: vec!["0000:06:00.0".into()],
        };
        record.save(&path).unwrap();
        assert_eq!(AttachRecord::load(&path, "web", 42).unwrap(), record);
        assert_eq!(
            AttachRecord::load(&path, "web", 43).unwrap().devices,
            vec![]
        );
        assert_eq!(
            AttachRecord::load(&path, "web2", 42).unwrap().devices,
            vec![]
        );
        std::fs::write(&path, "not json").unwrap();
        let err = AttachRecord::load(&path, "web", 42).unwrap_err();
        assert!(err.to_string().contains("remove it"), "{err}");
    }
}
