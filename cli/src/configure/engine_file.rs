//! How an engine's config file is written: through nvc's one atomic writer
//! (`nvc_host::files`) with the options engine files need ([`CONFIG_WRITE`]), after a
//! one-time backup of the original ([`backup_once`]). `nvc_engines` only says what the
//! files must hold; this is where they are written.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nvc_host::files::{self, FileError, Ownership, Symlink, WriteOptions};

/// What the backup of `file` is called: `<file>.nvc-backup`.
const BACKUP_SUFFIX: &str = ".nvc-backup";

/// How an engine's config file is written: a new file gets 0644 and its missing
/// folders; an existing one keeps its mode and owner, or is not replaced; a symlink is
/// written through, so the file it names changes and the link stays (administrators
/// keep such files elsewhere and link to them).
pub(super) const CONFIG_WRITE: WriteOptions = WriteOptions {
    create_parents: true,
    symlink: Symlink::Follow,
    ownership: Ownership::Required,
    ..WriteOptions::new(0o644)
};

/// `<path>.nvc-backup`.
pub(super) fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(BACKUP_SUFFIX);
    PathBuf::from(name)
}

/// Copies `path` to `<path>.nvc-backup` unless that backup exists already (so it always
/// holds the file as it was before nvc first changed it). Returns the backup's path when
/// this call made it; `None` when `path` does not exist or the backup was there.
pub(super) fn backup_once(path: &Path) -> Result<Option<PathBuf>, FileError> {
    let backup = backup_path(path);
    match fs::symlink_metadata(&backup) {
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(FileError::Io {
                op: "stat",
                path: backup,
                source,
            })
        }
    }
    let original = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError::Io {
                op: "read",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    files::write_atomic(&backup, &original, &WriteOptions::new(mode))?;
    Ok(Some(backup))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_backup_is_taken_once_with_the_original_mode() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("daemon.json");
        fs::write(&file, "{}\n").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();

        assert_eq!(backup_once(&file).unwrap(), Some(backup_path(&file)));
        files::write_atomic(&file, b"{\"a\": 1}\n", &CONFIG_WRITE).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "{\"a\": 1}\n");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o640);
        assert_eq!(mode(&backup_path(&file)), 0o640);
        // The second backup keeps the original.
        assert_eq!(backup_once(&file).unwrap(), None);
        assert_eq!(fs::read_to_string(backup_path(&file)).unwrap(), "{}\n");
        // No temp file left behind.
        assert_eq!(names(dir.path()), ["daemon.json", "daemon.json.nvc-backup"]);
        // Nothing to back up.
        assert_eq!(backup_once(&dir.path().join("missing")).unwrap(), None);
    }

    #[test]
    fn engine_files_get_their_folder_and_are_written_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conf.d/99-nvc.toml");
        files::write_atomic(&file, b"x", &CONFIG_WRITE).unwrap();
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o644
        );

        let real = dir.path().join("real.json");
        let link = dir.path().join("daemon.json");
        fs::write(&real, "{}").unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        files::write_atomic(&link, b"[]", &CONFIG_WRITE).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "[]");
    }
}
