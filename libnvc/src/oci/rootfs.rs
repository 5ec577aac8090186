//! What `nvc-runtime` refuses about a bundle's rootfs before the runtime sees it, in one
//! place, so that `nvc check --bundle` says the same.

use std::path::{Path, PathBuf};

use crate::probe::{FileKind, HostProbe};

/// A rootfs the runtime must not be given.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// The image's `/dev` is a symbolic link, which runc would follow out of the rootfs.
    #[error(
        "the image's /dev is a symbolic link (to {target}) in {rootfs}: the runtime would \
         create /dev/fd, /dev/stdin, /dev/stdout, /dev/stderr and /dev/ptmx through it, \
         outside the container; refusing to start it. Remove the link from the image: \
         /dev is a tmpfs the runtime makes"
    )]
    LinkedDev {
        /// Where the link points.
        target: PathBuf,
        /// The container's rootfs.
        rootfs: PathBuf,
    },
    /// A GPU container's rootfs is the host's `/`: the hook would mount the driver into,
    /// and update the ld.so.cache of, the host itself.
    #[error(
        "the container's root filesystem {rootfs} is the host's root directory: nvc will \
         not set up a GPU container there (root.path in {spec})"
    )]
    HostRoot {
        /// The rootfs, as the spec names it (joined to the bundle when relative).
        rootfs: PathBuf,
        /// The spec file.
        spec: PathBuf,
    },
}

/// Refuses a rootfs whose `/dev` is a symbolic link, for every container. runc (1.1.x)
/// makes `/dev/fd`, `/dev/stdin`, `/dev/stdout`, `/dev/stderr` and `/dev/ptmx` by joining
/// the rootfs path and following that link in the host's view, so they land outside the
/// container, before any hook runs. `/dev` is the runtime's own tmpfs: no working image
/// needs it to be a link. Only the one entry directly under the trusted rootfs path is
/// looked at, without following it.
pub fn refuse_linked_dev(probe: &dyn HostProbe, rootfs: &Path) -> Result<(), RootfsError> {
    let dev = rootfs.join("dev");
    match probe.lstat(&dev) {
        Ok(m) if m.kind == FileKind::Symlink => Err(RootfsError::LinkedDev {
            target: probe.read_link(&dev).unwrap_or_default(),
            rootfs: rootfs.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Refuses a GPU container whose `rootfs` (named by the spec at `spec`) is the host's `/`
/// (see [`HostProbe::is_host_root`]).
pub fn refuse_host_root(
    probe: &dyn HostProbe,
    rootfs: &Path,
    spec: &Path,
) -> Result<(), RootfsError> {
    if probe.is_host_root(rootfs) {
        return Err(RootfsError::HostRoot {
            rootfs: rootfs.to_path_buf(),
            spec: spec.to_path_buf(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::TreeProbe;

    #[test]
    fn a_linked_dev_and_the_host_root_are_told() {
        let tmp = tempfile::tempdir().unwrap();
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("dev")).unwrap();
        let probe = TreeProbe::new();
        refuse_linked_dev(&probe, &rootfs).unwrap();
        std::fs::remove_dir(rootfs.join("dev")).unwrap();
        std::os::unix::fs::symlink("/tmp", rootfs.join("dev")).unwrap();
        let e = refuse_linked_dev(&probe, &rootfs).unwrap_err();
        assert!(
            e.to_string().contains("/dev is a symbolic link (to /tmp)"),
            "{e}"
        );
        let spec = tmp.path().join("config.json");
        refuse_host_root(&probe, &rootfs, &spec).unwrap();
        let e = refuse_host_root(&probe, Path::new("/"), &spec).unwrap_err();
        assert!(
            e.to_string().contains("is the host's root directory"),
            "{e}"
        );
    }
}
