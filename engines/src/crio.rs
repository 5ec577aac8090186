//! CRI-O: a drop-in file, `/etc/crio/crio.conf.d/99-nvc.conf`.
//!
//! CRI-O reads `crio.conf`, then every file in `crio.conf.d` in name order, each setting
//! overriding the same setting before it, key by key. So the drop-in holds only the
//! runtime handler (and `default_runtime` on request); the main file is not touched.
//! The handler copies what the `runc` handler (else `crun`) sets, such as
//! `runtime_root`, `allowed_annotations` or `monitor_env`, except the keys that name
//! runc's own binaries: `runtime_path` (the shim, here), `platform_runtime_paths`,
//! `runtime_config_path`, and `monitor_path` (left to CRI-O's default conmon).

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

use super::tomlutil::{
    deep_merge, dotted, fresh_table, fresh_value, kind, table_at, table_mut, TomlSyntax,
};
use super::{Source, MARKER};

/// Keys of a runc handler not copied to the nvc handler.
const NOT_COPIED: &[&str] = &[
    "runtime_path",
    "runtime_type",
    "monitor_path",
    "platform_runtime_paths",
    "runtime_config_path",
];

/// What to register.
#[derive(Debug, Clone, Copy)]
pub struct CrioOptions<'a> {
    /// The runtime handler's name.
    pub runtime_name: &'a str,
    /// The shim's path, e.g. `/usr/bin/nvc-runtime`.
    pub runtime_path: &'a str,
    /// Also set `crio.runtime.default_runtime`.
    pub set_as_default: bool,
}

/// Why CRI-O's configuration cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CrioError {
    /// A file is not TOML (the cause names the line and column).
    #[error("{path} is not valid TOML")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        #[source]
        source: TomlSyntax,
    },
    /// A key that must hold a table holds something else.
    #[error("`{key}` in {path} is {found}, expected a table")]
    NotATable {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// What it is instead.
        found: &'static str,
    },
}

/// The drop-in file. `sources` are the files CRI-O reads before it, in order (the main
/// config, then the other drop-ins): the runc handler's settings are taken from them.
pub fn configure(sources: &[Source<'_>], opts: &CrioOptions<'_>) -> Result<String, CrioError> {
    let path = ["crio", "runtime", "runtimes"];
    let mut runtimes = Table::new();
    for source in sources {
        let doc: DocumentMut = source.text.parse().map_err(|e| CrioError::Parse {
            path: source.path.to_path_buf(),
            source: TomlSyntax(e),
        })?;
        match table_at(doc.as_table(), &path) {
            Ok(Some(t)) => deep_merge(&mut runtimes, t),
            Ok(None) => {}
            Err(depth) => {
                let key = &path[..=depth];
                let found = key
                    .iter()
                    .try_fold(doc.as_item(), |item, k| item.get(k))
                    .map_or("nothing", kind);
                return Err(CrioError::NotATable {
                    path: source.path.to_path_buf(),
                    key: dotted(key),
                    found,
                });
            }
        }
    }

    let mut handler = Table::new();
    handler.insert("runtime_path", toml_edit::value(opts.runtime_path));
    handler.insert("runtime_type", toml_edit::value("oci"));
    let template = ["runc", "crun"]
        .iter()
        .find_map(|name| runtimes.get(name).and_then(Item::as_table_like));
    if let Some(template) = template {
        for (key, item) in template.iter() {
            if NOT_COPIED.contains(&key) {
                continue;
            }
            if let Some(v) = item.as_value() {
                handler.insert(key, Item::Value(fresh_value(v)));
            } else if let Some(t) = item.as_table_like() {
                handler.insert(key, Item::Table(fresh_table(t)));
            }
        }
    }

    let mut runtime = Table::new();
    runtime.set_implicit(true);
    if opts.set_as_default {
        runtime.insert("default_runtime", toml_edit::value(opts.runtime_name));
    }
    if let Ok(r) = table_mut(&mut runtime, "runtimes") {
        r.insert(opts.runtime_name, Item::Table(handler));
    }
    let mut crio = Table::new();
    crio.set_implicit(true);
    crio.insert("runtime", Item::Table(runtime));
    let mut out = DocumentMut::new();
    out.insert("crio", Item::Table(crio));
    Ok(format!(
        "{MARKER}: the {:?} runtime handler ({}) for CRI-O.\n\
         # Remove with `nvc runtime configure --runtime crio --revert`.\n\n{out}",
        opts.runtime_name, opts.runtime_path
    ))
}

/// The setting of the drop-in that `source`, read after it, overrides, if any: the
/// handler `runtime_name` itself, or (with `set_as_default`) `default_runtime`.
pub fn overridden_by(
    source: Source<'_>,
    opts: &CrioOptions<'_>,
) -> Result<Option<String>, CrioError> {
    let doc: DocumentMut = source.text.parse().map_err(|e| CrioError::Parse {
        path: source.path.to_path_buf(),
        source: TomlSyntax(e),
    })?;
    let runtime = table_at(doc.as_table(), &["crio", "runtime"])
        .ok()
        .flatten();
    let Some(runtime) = runtime else {
        return Ok(None);
    };
    if matches!(
        table_at(runtime, &["runtimes", opts.runtime_name]),
        Ok(Some(_))
    ) {
        return Ok(Some(dotted(&[
            "crio",
            "runtime",
            "runtimes",
            opts.runtime_name,
        ])));
    }
    if opts.set_as_default && runtime.contains_key("default_runtime") {
        return Ok(Some("crio.runtime.default_runtime".into()));
    }
    Ok(None)
}

/// Where the drop-in goes for the main config `config_path`: `crio.conf.d/99-nvc.conf`
/// in its directory.
pub fn default_drop_in(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .unwrap_or_else(|| Path::new("/etc/crio"))
        .join("crio.conf.d/99-nvc.conf")
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::report::error_chain;

    const NV: CrioOptions<'static> = CrioOptions {
        runtime_name: "nv",
        runtime_path: "/usr/bin/nvc-runtime",
        set_as_default: false,
    };

    fn body(out: &str) -> String {
        assert!(out.starts_with(MARKER), "{out}");
        out.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .trim_start()
            .to_string()
    }

    fn src<'a>(path: &'a str, text: &'a str) -> Source<'a> {
        Source {
            path: Path::new(path),
            text,
        }
    }

    #[test]
    fn table() {
        let crio_conf = "[crio]\n# storage\n[crio.runtime]\ndefault_runtime = \"runc\"\n\n[crio.runtime.runtimes.runc]\nruntime_path = \"\"\nruntime_type = \"oci\"\nruntime_root = \"/run/runc\"\nmonitor_path = \"/usr/libexec/crio/conmon\"\nallowed_annotations = [\"io.containers.trace-syscall\"]\n";
        let crun_only = "[crio.runtime.runtimes.crun]\nruntime_root = \"/run/crun\"\nmonitor_env = [\"PATH=/usr/bin\"]\n";
        let cases: &[(&str, Vec<Source<'_>>, CrioOptions<'_>, &str)] = &[
            (
                "no config at all",
                vec![],
                NV,
                "[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvc-runtime\"\nruntime_type = \"oci\"\n",
            ),
            (
                "runc's settings copied, its binaries not",
                vec![src("/etc/crio/crio.conf", crio_conf)],
                NV,
                "[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvc-runtime\"\nruntime_type = \"oci\"\nruntime_root = \"/run/runc\"\nallowed_annotations = [\"io.containers.trace-syscall\"]\n",
            ),
            (
                "a later drop-in's setting wins",
                vec![
                    src("/etc/crio/crio.conf", crio_conf),
                    src("/etc/crio/crio.conf.d/10-crio.conf", "[crio.runtime.runtimes.runc]\nruntime_root = \"/run/other\"\n"),
                ],
                NV,
                "[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvc-runtime\"\nruntime_type = \"oci\"\nruntime_root = \"/run/other\"\nallowed_annotations = [\"io.containers.trace-syscall\"]\n",
            ),
            (
                "crun when there is no runc, and set as default",
                vec![src("/etc/crio/crio.conf.d/10-crio.conf", crun_only)],
                CrioOptions { set_as_default: true, ..NV },
                "[crio.runtime]\ndefault_runtime = \"nv\"\n\n[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvc-runtime\"\nruntime_type = \"oci\"\nruntime_root = \"/run/crun\"\nmonitor_env = [\"PATH=/usr/bin\"]\n",
            ),
        ];
        for (name, sources, opts, want) in cases {
            let out = configure(sources, opts).unwrap();
            assert_eq!(body(&out), *want, "{name}");
            // The same inputs give the same bytes.
            assert_eq!(configure(sources, opts).unwrap(), out, "{name}");
        }
    }

    #[test]
    fn malformed_files_are_refused_by_name() {
        let err = configure(&[src("/etc/crio/crio.conf", "[crio.runtime\n")], &NV).unwrap_err();
        let msg = error_chain(&err);
        assert!(
            msg.starts_with("/etc/crio/crio.conf is not valid TOML: TOML parse error at line 1"),
            "{msg}"
        );
        let err = configure(
            &[src("/etc/crio/crio.conf", "[crio]\nruntime = \"runc\"\n")],
            &NV,
        )
        .unwrap_err();
        assert_eq!(
            error_chain(&err),
            "`crio.runtime` in /etc/crio/crio.conf is a string, expected a table"
        );
    }

    #[test]
    fn later_files_overriding_the_drop_in_are_found() {
        let later = src(
            "/etc/crio/crio.conf.d/999-runc.conf",
            "[crio.runtime]\ndefault_runtime = \"runc\"\n",
        );
        assert_eq!(overridden_by(later, &NV).unwrap(), None);
        let opts = CrioOptions {
            set_as_default: true,
            ..NV
        };
        assert_eq!(
            overridden_by(later, &opts).unwrap().as_deref(),
            Some("crio.runtime.default_runtime")
        );
        let later = src(
            "/x",
            "[crio.runtime.runtimes.nv]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n",
        );
        assert_eq!(
            overridden_by(later, &NV).unwrap().as_deref(),
            Some("crio.runtime.runtimes.nv")
        );
    }

    #[test]
    fn drop_in_path() {
        assert_eq!(
            default_drop_in(Path::new("/etc/crio/crio.conf")),
            PathBuf::from("/etc/crio/crio.conf.d/99-nvc.conf")
        );
    }
}
