//! What `nvc-runtime` refuses about a bundle's rootfs before the runtime sees it, in one
//! place, so that `nvc check --bundle` says the same.

use std::path::{Path, PathBuf};

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
pub fn refuse_linked_dev(rootfs: &Path) -> Result<(), RootfsError> {
    let dev = rootfs.join("dev");
    match std::fs::symlink_metadata(&dev) {
        Ok(m) if m.file_type().is_symlink() => Err(RootfsError::LinkedDev {
            target: std::fs::read_link(&dev).unwrap_or_default(),
            rootfs: rootfs.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Refuses a GPU container whose `rootfs` (named by the spec at `spec`) is the host's `/`
/// (see [`is_host_root`]).
pub fn refuse_host_root(rootfs: &Path, spec: &Path) -> Result<(), RootfsError> {
    if is_host_root(rootfs) {
        return Err(RootfsError::HostRoot {
            rootfs: rootfs.to_path_buf(),
            spec: spec.to_path_buf(),
        });
    }
    Ok(())
}

/// Whether `rootfs` is the host's `/` (the same device and inode, so a link to `/` or a
/// bind mount of it counts too). The hook would otherwise mount the driver's files over
/// the host's own and rewrite its ld.so.cache. A rootfs that cannot be read is left to
/// the runtime, which reports it.
pub fn is_host_root(rootfs: &Path) -> bool {
    matches!(
        nvc_sys::container::refuse_host_root(rootfs),
        Err(nvc_sys::container::FsError::HostRoot { .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linked_dev_and_the_host_root_are_told() {
        let tmp = tempfile::tempdir().unwrap();
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("dev")).unwrap();
        refuse_linked_dev(&rootfs).unwrap();
        std::fs::remove_dir(rootfs.join("dev")).unwrap();
        std::os::unix::fs::symlink("/tmp", rootfs.join("dev")).unwrap();
        let e = refuse_linked_dev(&rootfs).unwrap_err();
        assert!(
            e.to_string().contains("/dev is a symbolic link (to /tmp)"),
            "{e}"
        );
        assert!(!is_host_root(&rootfs));
        assert!(is_host_root(Path::new("/")));
        std::os::unix::fs::symlink("/", tmp.path().join("slash")).unwrap();
        assert!(is_host_root(&tmp.path().join("slash")));
    }
}
