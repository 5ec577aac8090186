//! Podman: the OCI hooks.d file that runs nvc-hook.

use nvc_engines::podman;

use super::*;

/// What `nvc runtime configure podman` changes.
pub(super) fn changes(args: &ConfigureArgs) -> Result<Vec<Change>, ConfigureError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(PODMAN_HOOK));
    let hook = hook_path(args)?;
    let hook_str = path_str(&hook);
    let old = files::read_optional(&path)?;
    if args.revert {
        return match old {
            None => Ok(Vec::new()),
            Some(text) if podman::runs_hook(&text, &hook_str) => Ok(vec![Change::Remove { path }]),
            Some(_) => Err(ConfigureError::ForeignHookFile { path, hook }),
        };
    }
    let new = podman::configure(
        old.as_deref().unwrap_or(""),
        &podman::PodmanOptions {
            hook_path: &hook_str,
            timeout: hook_runtime_timeout()?,
        },
    )
    .map_err(|source| ConfigureError::Podman {
        path: path.clone(),
        source,
    })?;
    if !hook.exists() {
        eprintln!(
            "nvc: warning: {} does not exist yet: podman refuses hook files whose hook is missing",
            libnvc::report::sanitize(&hook.display().to_string())
        );
    }
    Ok(vec![Change::Write {
        path,
        old,
        new,
        backup: true,
    }])
}
