//! Snapshots of host state for "nothing outside changed" assertions: a file tree's digest,
//! the mount table, a directory's names, and the processes inside a directory.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::hash::Hasher;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// A listing of everything under `dir`, one line per entry in path order: relative path,
/// type, mode, owner, and the link target, device number or a hash and size of the
/// contents. Links are not followed. Two listings are equal exactly when nothing that
/// matters for escapes changed (times are left out); compare them with `assert_eq!` to see
/// what did.
pub fn tree_digest(dir: &Path) -> String {
    let mut out = String::new();
    digest_entry(dir, Path::new("."), &mut out);
    out
}

fn digest_entry(path: &Path, relative: &Path, out: &mut String) {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            out.push_str(&format!("{} error {}\n", relative.display(), e.kind()));
            return;
        }
    };
    let kind = meta.file_type();
    let mode = meta.permissions().mode() & 0o7777;
    let head = format!(
        "{} {:04o} {}:{}",
        relative.display(),
        mode,
        meta.uid(),
        meta.gid()
    );
    if kind.is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        out.push_str(&format!("{head} link -> {}\n", target.display()));
    } else if kind.is_file() {
        out.push_str(&format!(
            "{head} file {} bytes {}\n",
            meta.len(),
            content_hash(path)
        ));
    } else if kind.is_dir() {
        out.push_str(&format!("{head} dir\n"));
        let mut names: Vec<OsString> = std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        for name in names {
            digest_entry(&path.join(&name), &relative.join(&name), out);
        }
    } else {
        let what = if kind.is_char_device() {
            "char"
        } else if kind.is_block_device() {
            "block"
        } else if kind.is_fifo() {
            "fifo"
        } else if kind.is_socket() {
            "socket"
        } else {
            "other"
        };
        let rdev = meta.rdev();
        // glibc's major() and minor().
        let major = ((rdev & 0x0000_0000_000f_ff00) >> 8) | ((rdev & 0xffff_f000_0000_0000) >> 32);
        let minor = (rdev & 0xff) | ((rdev & 0x0000_0fff_fff0_0000) >> 12);
        out.push_str(&format!("{head} {what} {major}:{minor}\n"));
    }
}

fn content_hash(path: &Path) -> String {
    // SipHash with fixed keys: stable within a build, which is all a before/after
    // comparison needs.
    let mut hasher = DefaultHasher::new();
    match std::fs::read(path) {
        Ok(bytes) => {
            hasher.write(&bytes);
            format!("{:016x}", hasher.finish())
        }
        Err(e) => format!("unreadable({})", e.kind()),
    }
}

/// The mount points of this process's mount namespace (`/proc/self/mountinfo`), sorted:
/// compare before and after a container run to see that nothing was mounted on the host.
pub fn host_mounts() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .collect();
    mounts.sort();
    mounts
}

/// [`host_mounts`] less the mounts other tests may be making at the same time: those in
/// the temporary directory that are not under `own_dir`, the calling test's directory.
/// What is left still shows a mount leaked onto a host path or into the test's own tree.
pub fn host_mounts_beside_tests(own_dir: &Path) -> Vec<String> {
    let temp = std::env::temp_dir();
    let temp = std::fs::canonicalize(&temp).unwrap_or(temp);
    let own = std::fs::canonicalize(own_dir).unwrap_or_else(|_| own_dir.to_path_buf());
    host_mounts()
        .into_iter()
        .filter(|m| {
            let m = Path::new(m);
            m.starts_with(&own) || !m.starts_with(&temp) || m == temp
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(n) = u8::from_str_radix(digits, 8) {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The names of the entries of `dir`, sorted; empty when it cannot be read. Compare
/// before and after a runtime command to see that it left no file behind.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The pids of the processes whose root directory or working directory is `dir` or
/// under it, as `/proc/<pid>/root` and `/proc/<pid>/cwd` show them: a container's
/// processes (and a `runc init` still setting one up) point into its rootfs.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    ["root", "cwd"].iter().any(|link| {
                        std::fs::read_link(format!("/proc/{pid}/{link}"))
                            .is_ok_and(|target| target.starts_with(&dir))
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\"), "/end\\");
    }
}
