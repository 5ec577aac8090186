//! What a GPU container's namespaces must be: a mount namespace of its own, which the
//! runtime makes for it and which ends with it.
//!
//! The hook mounts the driver's files, the mask over `/proc/driver/nvidia` and the
//! container's ld.so.cache into the container's mount namespace. In the runtime's own
//! namespace (no `mount` entry in `linux.namespaces`) they would land on the host, where
//! the hook refuses late, seeing the state's process in its own namespace. In a
//! namespace joined by path they would be seen by every process that shares it, GPU or
//! not, device cgroup or not, and would outlive the container and its poststop hook. No
//! engine asks for either: Docker, Podman, containerd and CRI-O give each container a
//! mount namespace (pods share network, IPC, UTS and PID namespaces, never mount).

use std::path::{Path, PathBuf};

use crate::oci::spec::MountNamespace;

/// A GPU container's mount namespace is not its own.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// The spec has no `mount` namespace: the container shares the runtime's.
    #[error(
        "a GPU container needs a mount namespace of its own, and linux.namespaces in {spec} \
         has no \"mount\" entry: it would share the runtime's mount namespace, and the \
         driver's files would be mounted there, on the host; add {{\"type\": \"mount\"}} \
         to linux.namespaces"
    )]
    Inherited {
        /// The spec file.
        spec: PathBuf,
    },
    /// The spec joins an existing mount namespace.
    #[error(
        "a GPU container needs a mount namespace of its own, and linux.namespaces in {spec} \
         joins the one at {path}: the driver's files would be mounted where other processes \
         see them, and would stay there after the container ends; give the \"mount\" entry \
         no path"
    )]
    Joined {
        /// The spec file.
        spec: PathBuf,
        /// The namespace the spec joins.
        path: PathBuf,
    },
}

/// Refuses a GPU container whose spec (at `spec`) gives it no mount namespace of its own
/// (`mount`, as the spec's view reads `linux.namespaces`).
pub fn refuse_shared_mount_namespace(
    mount: &MountNamespace,
    spec: &Path,
) -> Result<(), NamespaceError> {
    match mount {
        MountNamespace::New => Ok(()),
        MountNamespace::Inherited => Err(NamespaceError::Inherited {
            spec: spec.to_path_buf(),
        }),
        MountNamespace::Joined(path) => Err(NamespaceError::Joined {
            spec: spec.to_path_buf(),
            path: path.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_mount_namespace_is_taken() {
        let spec = Path::new("/b/config.json");
        refuse_shared_mount_namespace(&MountNamespace::New, spec).unwrap();
        let e = refuse_shared_mount_namespace(&MountNamespace::Inherited, spec).unwrap_err();
        let text = e.to_string();
        for part in [
            "needs a mount namespace of its own",
            "/b/config.json has no \"mount\" entry",
            "add {\"type\": \"mount\"}",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        let joined = MountNamespace::Joined(PathBuf::from("/proc/42/ns/mnt"));
        let text = refuse_shared_mount_namespace(&joined, spec)
            .unwrap_err()
            .to_string();
        for part in [
            "needs a mount namespace of its own",
            "joins the one at /proc/42/ns/mnt",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
