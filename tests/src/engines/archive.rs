//! An OCI image archive made from a rootfs tar, as `ctr images import` takes it.

use std::path::Path;
use std::process::Command;

use super::{mkdirs, run_command, EngineError, ENGINE_TIMEOUT};

/// Writes to `out` an OCI image archive (an OCI image layout as a tar, as `ctr images
/// import` takes it) holding one image named `name` whose only layer is the tar archive
/// `rootfs_tar`, for linux/amd64, running `sh`.
pub fn oci_archive(rootfs_tar: &Path, name: &str, out: &Path) -> Result<(), EngineError> {
    oci_archive_running(rootfs_tar, name, &["sh"], out)
}

/// [`oci_archive`] with `cmd` as the image's command: a CRI pod's sandbox (pause)
/// container runs its image's command, which must keep running.
pub fn oci_archive_running(
    rootfs_tar: &Path,
    name: &str,
    cmd: &[&str],
    out: &Path,
) -> Result<(), EngineError> {
    let layout = out.with_extension("layout");
    let blobs = layout.join("blobs/sha256");
    if layout.exists() {
        std::fs::remove_dir_all(&layout).map_err(EngineError::io("remove", &layout))?;
    }
    mkdirs(&blobs)?;
    let layer = sha256_file(rootfs_tar)?;
    let layer_size = std::fs::metadata(rootfs_tar)
        .map_err(EngineError::io("stat", rootfs_tar))?
        .len();
    std::fs::copy(rootfs_tar, blobs.join(&layer)).map_err(EngineError::io("copy", rootfs_tar))?;
    let add_blob = |bytes: Vec<u8>| -> Result<(String, usize), EngineError> {
        let tmp = blobs.join("new");
        std::fs::write(&tmp, &bytes).map_err(EngineError::io("write", &tmp))?;
        let digest = sha256_file(&tmp)?;
        let blob = blobs.join(&digest);
        std::fs::rename(&tmp, &blob).map_err(EngineError::io("rename", &blob))?;
        Ok((digest, bytes.len()))
    };
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Env": [crate::DEFAULT_PATH_ENV], "Cmd": cmd },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer}")] },
    });
    let (config_digest, config_size) = add_blob(config.to_string().into_bytes())?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config_size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer}"),
            "size": layer_size,
        }],
    });
    let (manifest_digest, manifest_size) = add_blob(manifest.to_string().into_bytes())?;
    let tag = name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest_size,
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    });
    for (file, text) in [
        ("index.json", index.to_string()),
        (
            "oci-layout",
            r#"{"imageLayoutVersion":"1.0.0"}"#.to_string(),
        ),
    ] {
        let path = layout.join(file);
        std::fs::write(&path, text).map_err(EngineError::io("write", &path))?;
    }
    let mut tar = Command::new("tar");
    tar.arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(out)
        .args(["oci-layout", "index.json", "blobs"]);
    let io_dir = out.parent().unwrap_or(Path::new("."));
    EngineError::check(
        "archive the OCI layout",
        run_command(&mut tar, io_dir, ENGINE_TIMEOUT),
    )?;
    std::fs::remove_dir_all(&layout).map_err(EngineError::io("remove", &layout))
}

/// The SHA-256 of a file, in hex, from `sha256sum` (coreutils).
pub(super) fn sha256_file(path: &Path) -> Result<String, EngineError> {
    let mut command = Command::new("sha256sum");
    command.arg(path);
    let io_dir = path.parent().unwrap_or(Path::new("."));
    let outcome = EngineError::check(
        "hash an image blob",
        run_command(&mut command, io_dir, ENGINE_TIMEOUT),
    )?;
    Ok(outcome
        .stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}
