//! containerd: its config, the files it imports, and nvc's drop-in.

use nvc_engines::containerd;

use super::*;

/// What `nvc runtime configure containerd` changes.
pub(super) fn changes(
    args: &ConfigureArgs,
    warnings: &mut Vec<String>,
) -> Result<Vec<Change>, ConfigureError> {
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CONTAINERD_CONFIG));
    let drop_in = args.drop_in.clone().unwrap_or_else(|| {
        config
            .parent()
            .unwrap_or_else(|| Path::new("/etc/containerd"))
            .join("conf.d/99-nvc.toml")
    });
    let old_main = files::read_optional(&config)?;
    let old_drop_in = own_drop_in(&drop_in)?;
    let main_text = old_main.as_deref().unwrap_or("");
    let main = Source {
        path: &config,
        text: main_text,
    };

    if args.revert {
        let mut changes = Vec::new();
        // The import goes only if nvc added it: the pre-nvc original lacks it.
        let original = match old_main {
            Some(_) => files::read_optional(&backup_path(&config))?,
            None => None,
        };
        if let Some(original) = original {
            let original = Source {
                path: &config,
                text: &original,
            };
            let imports = containerd::imports(original).map_err(ConfigureError::Containerd)?;
            let had_it = imports
                .iter()
                .any(|i| containerd::import_matches(&config, i, &drop_in));
            let had_imports =
                containerd::has_imports_key(original).map_err(ConfigureError::Containerd)?;
            if !had_it {
                let new = containerd::unconfigure(main, &drop_in, had_imports)
                    .map_err(ConfigureError::Containerd)?;
                changes.push(Change::Write {
                    path: config.clone(),
                    old: old_main.clone(),
                    new,
                    backup: false,
                });
            }
        }
        if old_drop_in.is_some() {
            changes.push(Change::Remove { path: drop_in });
        }
        return Ok(changes);
    }

    let runtime_path = path_str(&args.runtime_path);
    let opts = containerd::ContainerdOptions {
        runtime_name: &args.runtime_name,
        runtime_path: &runtime_path,
        set_as_default: args.set_as_default,
        cdi: args.cdi,
        config_path: &config,
        drop_in_path: &drop_in,
    };
    // First the main file alone, for its imports once nvc's is there; then the files
    // containerd loads before the drop-in, which shape what it must hold.
    let first = containerd::configure(&[main], &opts).map_err(ConfigureError::Containerd)?;
    let order = containerd_load_order(&config, &first.config, &drop_in, warnings)?;
    let at = order.iter().position(|(p, _)| *p == drop_in);
    let (before, after) = match at {
        Some(i) => (&order[..i], &order[i + 1..]),
        None => (&order[..], &order[..0]),
    };
    let mut sources = vec![main];
    sources.extend(before.iter().map(|(path, text)| Source { path, text }));
    let plan = containerd::configure(&sources, &opts).map_err(ConfigureError::Containerd)?;
    // A version 3 file is containerd 2's, whatever containerd is on PATH here (the file
    // may be for another root or machine): only an older file is worth the warning.
    if args.cdi && plan.version < 3 {
        if let Some(version) = installed_version().filter(|v| *v < (1, 7)) {
            warnings.push(format!(
                "the containerd on PATH ({}.{}) ignores enable_cdi (its CDI support starts \
                 with 1.7): the GPUs in cdi.k8s.io/ annotations reach containers through the \
                 {:?} runtime instead, which lets them through to nvc-runtime",
                version.0, version.1, args.runtime_name
            ));
        }
    }
    for (path, text) in after {
        let source = Source { path, text };
        if containerd::overrides_drop_in(source, plan.version, &args.runtime_name)
            .map_err(ConfigureError::Containerd)?
        {
            warnings.push(format!(
                "{} is loaded after {} and overrides its CRI settings: containerd may not see the {:?} runtime",
                path.display(),
                drop_in.display(),
                args.runtime_name
            ));
        }
    }
    let newly_imported: Vec<String> = before
        .iter()
        .chain(after)
        .filter(|(p, _)| p.parent() == drop_in.parent())
        .filter(|(p, _)| {
            !containerd::imports(main)
                .unwrap_or_default()
                .iter()
                .any(|i| containerd::import_matches(&config, i, p))
        })
        .map(|(p, _)| p.display().to_string())
        .collect();
    if !newly_imported.is_empty() {
        warnings.push(format!(
            "the import {} also loads {}, not imported before",
            containerd::drop_in_glob(&drop_in),
            newly_imported.join(", ")
        ));
    }
    Ok(vec![
        Change::Write {
            path: drop_in,
            old: old_drop_in,
            new: plan.drop_in,
            backup: false,
        },
        Change::Write {
            path: config,
            old: old_main,
            new: plan.config,
            backup: true,
        },
    ])
}

/// The files containerd loads after the main one, in its order (breadth first, each
/// glob's matches sorted), with the drop-in in its place whether it exists yet or not.
/// The drop-in's text is not read (empty).
fn containerd_load_order(
    config: &Path,
    main_text: &str,
    drop_in: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<(PathBuf, String)>, ConfigureError> {
    let mut order: Vec<(PathBuf, String)> = Vec::new();
    let mut loaded = vec![config.to_path_buf()];
    let mut pending: Vec<(PathBuf, String)> = vec![(config.to_path_buf(), main_text.to_string())];
    while !pending.is_empty() {
        let (path, text) = pending.remove(0);
        let imports = containerd::imports(Source {
            path: &path,
            text: &text,
        })
        .map_err(ConfigureError::Containerd)?;
        for import in imports {
            for file in expand_import(&path, &import, drop_in, warnings)? {
                if loaded.contains(&file) {
                    continue;
                }
                loaded.push(file.clone());
                if file == drop_in {
                    order.push((file, String::new()));
                    continue;
                }
                match files::read_optional(&file)? {
                    Some(text) => {
                        order.push((file.clone(), text.clone()));
                        pending.push((file, text));
                    }
                    None => warnings.push(format!(
                        "{} imports {}, which does not exist: containerd will not start",
                        path.display(),
                        file.display()
                    )),
                }
            }
        }
    }
    Ok(order)
}

/// The files an import names: itself, or a glob's matches in name order (wildcards in
/// the last component only), counting the drop-in as present.
fn expand_import(
    config: &Path,
    import: &str,
    drop_in: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<PathBuf>, ConfigureError> {
    let resolved = containerd::resolve_import(config, import);
    if !import.contains(['*', '?']) {
        return Ok(vec![resolved]);
    }
    let (Some(dir), Some(pattern)) = (resolved.parent(), resolved.file_name()) else {
        return Ok(Vec::new());
    };
    if dir.to_string_lossy().contains(['*', '?']) {
        warnings.push(format!(
            "cannot follow the import {import:?} of {} (wildcards in a directory)",
            config.display()
        ));
        return Ok(Vec::new());
    }
    let pattern = pattern.to_string_lossy();
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => Some(e),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ConfigureError::Stat {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries.into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if containerd::glob_component(&pattern, &name) {
            found.push(dir.join(name));
        }
    }
    if drop_in.parent() == Some(dir)
        && !found.iter().any(|f| f == drop_in)
        && containerd::import_matches(config, import, drop_in)
    {
        found.push(drop_in.to_path_buf());
    }
    found.sort();
    Ok(found)
}

/// The major and minor version of the `containerd` on PATH, as `containerd --version`
/// prints it (`containerd github.com/containerd/containerd 1.6.20~ds1 …`); `None` when
/// there is none or it says something else.
fn installed_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("containerd")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

/// The first `<major>.<minor>` among the words of `text` (a leading `v` allowed).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    text.split_whitespace().find_map(|word| {
        let mut parts = word.trim_start_matches('v').split(['.', '~', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    })
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn containerd_versions_are_read_as_it_prints_them() {
        for (text, want) in [
            (
                "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n",
                Some((1, 6)),
            ),
            ("containerd containerd.io v1.7.24 88bf19b2\n", Some((1, 7))),
            (
                "containerd github.com/containerd/containerd/v2 2.1.9 \n",
                Some((2, 1)),
            ),
            ("nothing here", None),
        ] {
            assert_eq!(parse_version(text), want, "{text}");
        }
    }
}
