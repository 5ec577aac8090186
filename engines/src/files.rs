//! Writing engine config files safely: atomic replace (temp file in the same directory,
//! fsync, rename, fsync of the directory) keeping the file's mode and owner, and a
//! one-time backup of the original.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What the backup of `file` is called: `<file>.nvc-backup`.
pub const BACKUP_SUFFIX: &str = ".nvc-backup";

/// Why reading or writing an engine config file failed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading failed.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// Creating the file's directory failed.
    #[error("cannot create directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// One step of the atomic write failed.
    #[error("cannot {op} {path}")]
    Write {
        /// Which step: "create", "write", "sync", "chmod", "chown", "rename onto".
        op: &'static str,
        /// The file the step acted on.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Removing the file failed.
    #[error("cannot remove {path}")]
    Remove {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Reads `path` as text; `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, FileError> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FileError::NotText {
                path: path.to_path_buf(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `<path>.nvc-backup`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(BACKUP_SUFFIX);
    PathBuf::from(name)
}

/// Copies `path` to `<path>.nvc-backup` unless that backup exists already (so it always
/// holds the file as it was before nvc first changed it). Returns the backup's path when
/// this call made it; `None` when `path` does not exist or the backup was there.
pub fn backup_once(path: &Path) -> Result<Option<PathBuf>, FileError> {
    let backup = backup_path(path);
    match fs::symlink_metadata(&backup) {
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(FileError::Read {
                path: backup,
                source,
            })
        }
    }
    let original = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    write_atomic(&backup, &original, mode)?;
    Ok(Some(backup))
}

/// Replaces `path` with `contents` atomically: a reader sees the old file or the new one,
/// never a mix, and a crash leaves one of the two. An existing file keeps its mode and
/// owner; a new one gets `new_mode`, and missing parent directories are created (0755).
/// A symlink is written through, so the file it names is replaced and the link stays.
pub fn write_atomic(path: &Path, contents: &[u8], new_mode: u32) -> Result<(), FileError> {
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(path).map_err(|source| FileError::Read {
                path: path.to_path_buf(),
                source,
            })?
        }
        _ => path.to_path_buf(),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)
        .map_err(|source| FileError::CreateDir {
            path: dir.clone(),
            source,
        })?;
    let existing = fs::metadata(&target).ok();
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.nvc-tmp.{}", std::process::id()));
    let result = write_temp(&tmp, contents, new_mode, existing.as_ref()).and_then(|()| {
        fs::rename(&tmp, &target).map_err(|source| FileError::Write {
            op: "rename onto",
            path: target.clone(),
            source,
        })
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // The rename is durable once the directory is.
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| FileError::Write {
            op: "sync",
            path: dir,
            source,
        })
}

fn write_temp(
    tmp: &Path,
    contents: &[u8],
    new_mode: u32,
    existing: Option<&fs::Metadata>,
) -> Result<(), FileError> {
    let err = |op: &'static str| {
        move |source| FileError::Write {
            op,
            path: tmp.to_path_buf(),
            source,
        }
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .map_err(err("create"))?;
    f.write_all(contents).map_err(err("write"))?;
    let mode = existing.map_or(new_mode, |m| m.permissions().mode() & 0o7777);
    if let Some(m) = existing {
        let (uid, gid) = (m.uid(), m.gid());
        let ours = f.metadata().map_err(err("write"))?;
        if ours.uid() != uid || ours.gid() != gid {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid)).map_err(err("chown"))?;
        }
    }
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(err("chmod"))?;
    f.sync_all().map_err(err("sync"))
}

/// Makes `link` a symlink to `target`, replacing a symlink already there atomically
/// (made under a temporary name, then renamed over it).
pub fn symlink_atomic(target: &Path, link: &Path) -> Result<(), FileError> {
    let dir = match link.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.nvc-tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).map_err(|source| FileError::Write {
        op: "create",
        path: tmp.clone(),
        source,
    })?;
    fs::rename(&tmp, link).map_err(|source| {
        let _ = fs::remove_file(&tmp);
        FileError::Write {
            op: "rename onto",
            path: link.to_path_buf(),
            source,
        }
    })
}

/// Removes `path`; a missing file is not an error. Returns whether it existed.
pub fn remove(path: &Path) -> Result<bool, FileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(FileError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_keeps_mode_and_backup_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("daemon.json");
        fs::write(&file, "{}\n").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();

        assert_eq!(backup_once(&file).unwrap(), Some(backup_path(&file)));
        write_atomic(&file, b"{\"a\": 1}\n", 0o644).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "{\"a\": 1}\n");
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // The second backup keeps the original.
        assert_eq!(backup_once(&file).unwrap(), None);
        assert_eq!(fs::read_to_string(backup_path(&file)).unwrap(), "{}\n");
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn new_files_get_their_directory_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conf.d/99-nvc.toml");
        write_atomic(&file, b"x", 0o644).unwrap();
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(backup_once(&dir.path().join("missing")).unwrap(), None);
        assert!(remove(&file).unwrap());
        assert!(!remove(&file).unwrap());
    }

    #[test]
    fn symlinks_are_made_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("nvidia-container-runtime-hook");
        symlink_atomic(Path::new("nvc-hook"), &link).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), PathBuf::from("nvc-hook"));
        symlink_atomic(Path::new("/usr/bin/nvc-hook"), &link).unwrap();
        assert_eq!(
            fs::read_link(&link).unwrap(),
            PathBuf::from("/usr/bin/nvc-hook")
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_symlinked_config_is_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("daemon.json");
        fs::write(&real, "{}").unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write_atomic(&link, b"[]", 0o644).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "[]");
    }
}
