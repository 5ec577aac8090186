//! Finding the low-level runtime (runc, crun) and handing the command line over to it.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::ShimError;

/// The search path when `PATH` is unset: the one runc's callers use.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The device and inode of `path` (following links) when it is a regular file with an
/// execute bit: what tells two names of one file apart from two files.
fn executable_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .map(|m| (m.dev(), m.ino()))
}

/// The first of `candidates` that is an executable file: an absolute path as it is, a
/// bare name looked up in `search_path` (empty entries, meaning the current directory,
/// are skipped). A candidate that is the file `own_exe` names (through a link, or a
/// hard link) is skipped, so the shim never execs itself. Names with a `/` that are not
/// absolute are skipped too.
pub fn find(candidates: &[String], search_path: &OsStr, own_exe: Option<&Path>) -> Option<PathBuf> {
    // One stat per name looked at: a container start pays for each.
    let own = own_exe.and_then(|p| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino())));
    let is_self = |id: (u64, u64)| own == Some(id);
    for candidate in candidates {
        let found = if candidate.starts_with('/') {
            let path = PathBuf::from(candidate);
            executable_id(&path).map(|id| (path, id))
        } else if candidate.is_empty() || candidate.contains('/') {
            log::warn!("runtime {candidate:?} is neither an absolute path nor a name; skipped");
            None
        } else {
            std::env::split_paths(search_path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join(candidate))
                .find_map(|p| {
                    executable_id(&p)
                        .filter(|id| !is_self(*id))
                        .map(|id| (p, id))
                })
        };
        match found {
            Some((p, id)) if is_self(id) => {
                log::warn!("runtime {} is nvc-runtime itself; skipped", p.display())
            }
            Some((p, _)) => return Some(p),
            None => log::debug!("runtime {candidate:?} not found"),
        }
    }
    None
}

/// [`find`] with this process's `PATH` and executable, or the error naming what was
/// tried.
pub fn find_from_env(candidates: &[String], config: &Path) -> Result<PathBuf, ShimError> {
    let search_path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    // The file this process runs, whatever name it was started by: one stat, where
    // `current_exe` would read the link and resolve it again.
    let own_exe = Path::new("/proc/self/exe");
    find(candidates, &search_path, Some(own_exe)).ok_or_else(|| ShimError::NoRuntime {
        candidates: format!("[{}]", candidates.join(", ")),
        search_path: search_path.to_string_lossy().into_owned(),
        config: config.to_path_buf(),
    })
}

/// File names of runtimes that send a hook's stderr nowhere unless the spec's
/// `run.oci.hooks.stderr` annotation names a file: crun, and krun (crun built with
/// libkrun).
const NO_HOOK_STDERR: &[&str] = &["crun", "krun"];

/// Whether `runtime` is crun (see [`NO_HOOK_STDERR`]), by its file name or, for a link,
/// its target's: the spec then gets `libnvc::oci::spec::CRUN_HOOKS_STDERR`, so that the
/// hook's refusal reaches the user. runc passes a hook's stderr on itself.
pub fn drops_hook_stderr(runtime: &Path) -> bool {
    let named = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| NO_HOOK_STDERR.contains(&n))
    };
    // The target is read only for a link: one lstat, as most runtimes are files.
    named(runtime)
        || (std::fs::symlink_metadata(runtime).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::canonicalize(runtime).is_ok_and(|p| named(&p)))
}

/// Replaces this process with `runtime`, given `args` (the shim's own `argv[1..]`)
/// unchanged; returns only on failure.
pub fn exec(runtime: &Path, args: &[OsString]) -> ShimError {
    log::debug!("exec {} {args:?}", runtime.display());
    let source = Command::new(runtime).args(args).exec();
    ShimError::Exec {
        runtime: runtime.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn lookup_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        executable(&b.join("runc"));
        executable(&a.join("crun"));
        fs::write(a.join("runc"), "not executable").unwrap();
        let search = std::env::join_paths([&a, &b]).unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        // A non-executable file earlier on PATH is passed over.
        assert_eq!(
            find(&names(&["runc", "crun"]), &search, None),
            Some(b.join("runc"))
        );
        assert_eq!(
            find(&names(&["youki", "crun"]), &search, None),
            Some(a.join("crun"))
        );
        let abs = a.join("crun").display().to_string();
        assert_eq!(
            find(&names(&[&abs, "runc"]), &search, None),
            Some(a.join("crun"))
        );
        // A relative path with a slash, an empty name, a missing absolute path: skipped.
        assert_eq!(
            find(&names(&["a/crun", "", "/nonexistent/runc"]), &search, None),
            None
        );
        // Empty PATH entries (the current directory) are not searched.
        assert_eq!(find(&names(&["runc"]), OsStr::new(":"), None), None);
    }

    #[test]
    fn crun_is_known_by_its_name_or_its_link_s_target() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["crun", "krun", "runc", "youki", "crun-wrapper"] {
            executable(&dir.path().join(name));
        }
        let is = |name: &str| drops_hook_stderr(&dir.path().join(name));
        assert!(is("crun") && is("krun"));
        assert!(!is("runc") && !is("youki") && !is("crun-wrapper"));
        // The name alone is enough (runtimes are looked up before this).
        assert!(drops_hook_stderr(Path::new("/nonexistent/crun")));
        std::os::unix::fs::symlink(dir.path().join("crun"), dir.path().join("oci")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("runc"), dir.path().join("default")).unwrap();
        assert!(is("oci"));
        assert!(!is("default"));
    }

    #[test]
    fn own_executable_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let shim = dir.path().join("nvc-runtime");
        executable(&shim);
        // `runc` in a is a link to the shim itself; the real one is in b.
        std::os::unix::fs::symlink(&shim, a.join("runc")).unwrap();
        executable(&b.join("runc"));
        let search = std::env::join_paths([&a, &b]).unwrap();
        let own = Some(shim.as_path());
        assert_eq!(
            find(&["runc".to_string()], &search, own),
            Some(b.join("runc"))
        );
        let abs = a.join("runc").display().to_string();
        assert_eq!(find(&[abs], &search, own), None);
        // A hard link to the shim is the shim too.
        fs::remove_file(a.join("runc")).unwrap();
        fs::hard_link(&shim, a.join("runc")).unwrap();
        assert_eq!(
            find(&["runc".to_string()], &search, own),
            Some(b.join("runc"))
        );
    }
}
