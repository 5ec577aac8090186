//! Path resolution inside the driver root (or the dev root): symbolic links
//! are followed as if the root were `/`, so an absolute link target or a `..` never
//! leads out of it. The driver root belongs to the host and is trusted; this keeps a
//! driver root that is not `/` from silently picking up files of the real host.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::probe::{FileKind, HostProbe};

/// The most links followed while resolving one path, as the kernel does.
const MAX_LINKS: usize = 40;

/// Resolves `path` (absolute, as seen from inside `root`) to the host path of the file
/// it names, following every link inside `root`. The last component need not exist
/// when `allow_missing_last` is set; every other missing component is `NotFound`.
pub fn resolve_in_root(probe: &dyn HostProbe, root: &Path, path: &Path) -> io::Result<PathBuf> {
    let mut resolved = PathBuf::from("/");
    let mut pending: Vec<PathBuf> = components_rev(path);
    let mut links = 0;
    while let Some(comp) = pending.pop() {
        let name = comp.as_os_str();
        if name == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(name);
        let host = join_under(root, &candidate);
        let meta = probe.lstat(&host)?;
        if meta.kind == FileKind::Symlink {
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "too many levels of symbolic links resolving {}",
                        path.display()
                    ),
                ));
            }
            let target = probe.read_link(&host)?;
            if target.is_absolute() {
                resolved = PathBuf::from("/");
            }
            pending.extend(components_rev(&target));
        } else {
            resolved = candidate;
        }
    }
    Ok(join_under(root, &resolved))
}

/// `root` joined with the root-relative absolute `inner`.
pub fn join_under(root: &Path, inner: &Path) -> PathBuf {
    let rel = inner.strip_prefix("/").unwrap_or(inner);
    if rel.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// The path as seen from inside `root`, for a host path under it.
pub fn inside_root(root: &Path, host: &Path) -> PathBuf {
    match host.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => host.to_path_buf(),
    }
}

/// The normal components of `path`, last first, with `..` kept and `.` dropped.
fn components_rev(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::TreeProbe;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("usr/local/nvidia/lib64")).unwrap();
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::write(root.join("usr/local/nvidia/lib64/libcuda.so.1.2"), b"x").unwrap();
        symlink(
            "libcuda.so.1.2",
            root.join("usr/local/nvidia/lib64/libcuda.so.1"),
        )
        .unwrap();
        symlink(
            "/usr/local/nvidia/lib64/libcuda.so.1",
            root.join("usr/lib/libcuda.so.1"),
        )
        .unwrap();
        symlink("usr/lib", root.join("lib")).unwrap();
        symlink("../../../../../../etc", root.join("usr/lib/escape")).unwrap();
        symlink("loop", root.join("usr/lib/loop")).unwrap();

        let got = resolve_in_root(&TreeProbe::new(), root, Path::new("/lib/libcuda.so.1")).unwrap();
        assert_eq!(got, root.join("usr/local/nvidia/lib64/libcuda.so.1.2"));
        // `..` past the root stays at the root: /etc inside the root, which is absent.
        let err = resolve_in_root(&TreeProbe::new(), root, Path::new("/usr/lib/escape/passwd"))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let err = resolve_in_root(&TreeProbe::new(), root, Path::new("/usr/lib/loop")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            inside_root(root, &got),
            Path::new("/usr/local/nvidia/lib64/libcuda.so.1.2")
        );
    }
}
