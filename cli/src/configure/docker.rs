//! Docker: `daemon.json` and the `--gpus` alias of the hook.

use nvc_engines::docker;

use super::*;

/// What `nvc runtime configure docker` changes.
pub(super) fn changes(args: &ConfigureArgs) -> Result<Vec<Change>, ConfigureError> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DOCKER_CONFIG));
    let old = files::read_optional(&path)?;
    let text = old.as_deref().unwrap_or("");
    let runtime_path = path_str(&args.runtime_path);
    let result = if args.revert {
        docker::unconfigure(text, &args.runtime_name)
    } else {
        docker::configure(
            text,
            &docker::DockerOptions {
                runtime_name: &args.runtime_name,
                runtime_path: &runtime_path,
                set_as_default: args.set_as_default,
                cdi: args.cdi,
            },
        )
    };
    let new = result.map_err(|source| ConfigureError::Docker {
        path: path.clone(),
        source,
    })?;
    let mut changes = Vec::new();
    // Reverting a missing file leaves it missing.
    if old.is_some() || !args.revert {
        changes.push(Change::Write {
            path,
            old,
            new,
            backup: true,
        });
    }
    if args.gpus_alias {
        changes.extend(gpus_alias(args)?);
    }
    Ok(changes)
}

/// The `nvidia-container-runtime-hook` link for `docker run --gpus`: relative when it
/// sits next to nvc-hook, so the pair can move together.
fn gpus_alias(args: &ConfigureArgs) -> Result<Option<Change>, ConfigureError> {
    let hook = hook_path(args)?;
    let hook_dir = hook.parent().unwrap_or_else(|| Path::new("/"));
    let dir = args.alias_dir.as_deref().unwrap_or(hook_dir);
    let path = dir.join(GPUS_HOOK_NAME);
    let target = match hook.file_name() {
        Some(name) if dir == hook_dir => PathBuf::from(name),
        _ => hook.clone(),
    };
    let old = match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            Some(fs::read_link(&path).map_err(|source| ConfigureError::Stat {
                path: path.clone(),
                source,
            })?)
        }
        Ok(_) => return Err(ConfigureError::AliasExists { path }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => return Err(ConfigureError::Stat { path, source }),
    };
    if args.revert {
        // Only a link to nvc-hook is nvc's to remove.
        let ours = old.as_ref().is_some_and(|o| *o == target || *o == hook);
        return Ok(ours.then_some(Change::Remove { path }));
    }
    Ok(Some(Change::Link { path, target, old }))
}
