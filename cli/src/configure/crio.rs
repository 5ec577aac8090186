//! CRI-O: nvc's drop-in next to `crio.conf`.

use nvc_engines::crio;

use super::*;

/// What `nvc runtime configure crio` changes.
pub(super) fn changes(
    args: &ConfigureArgs,
    warnings: &mut Vec<String>,
) -> Result<Vec<Change>, ConfigureError> {
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(CRIO_CONFIG));
    let drop_in = args
        .drop_in
        .clone()
        .unwrap_or_else(|| crio::default_drop_in(&config));
    let old = own_drop_in(&drop_in)?;
    if args.revert {
        return Ok(old
            .map(|_| Change::Remove { path: drop_in })
            .into_iter()
            .collect());
    }
    // CRI-O reads crio.conf, then every file of crio.conf.d in name order.
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    if let Some(text) = files::read_optional(&config)? {
        texts.push((config.clone(), text));
    }
    let dir = drop_in
        .parent()
        .unwrap_or_else(|| Path::new("/etc/crio/crio.conf.d"));
    let mut others: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| *p != drop_in)
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(ConfigureError::Stat {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    others.sort();
    let mut later = Vec::new();
    for path in others {
        if let Some(text) = files::read_optional(&path)? {
            if path.file_name() > drop_in.file_name() {
                later.push((path, text));
            } else {
                texts.push((path, text));
            }
        }
    }
    let runtime_path = path_str(&args.runtime_path);
    let opts = crio::CrioOptions {
        runtime_name: &args.runtime_name,
        runtime_path: &runtime_path,
        set_as_default: args.set_as_default,
    };
    let sources: Vec<Source<'_>> = texts
        .iter()
        .map(|(path, text)| Source { path, text })
        .collect();
    let new = crio::configure(&sources, &opts).map_err(ConfigureError::Crio)?;
    for (path, text) in &later {
        if let Some(key) =
            crio::overridden_by(Source { path, text }, &opts).map_err(ConfigureError::Crio)?
        {
            warnings.push(format!(
                "{} is read after {} and sets {key} too: its value wins",
                path.display(),
                drop_in.display()
            ));
        }
    }
    Ok(vec![Change::Write {
        path: drop_in,
        old,
        new,
        backup: false,
    }])
}
