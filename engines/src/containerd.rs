//! containerd: `/etc/containerd/config.toml` (config versions 2 and 3) and a drop-in file
//! (`/etc/containerd/conf.d/99-nvc.toml`) that the main file imports.
//!
//! The main file gets one change, made with toml_edit so its comments, order and layout
//! stay: the drop-in's glob is added to its top-level `imports`. The drop-in holds the
//! runtime entry: `runtime_type = "io.containerd.runc.v2"`, `options.BinaryName` = the
//! shim, plus what the `runc` runtime entry sets (e.g. `options.SystemdCgroup`).
//!
//! How containerd merges an imported file decides what else the drop-in must hold:
//! - containerd 2.x (config version 3) merges plugin sections key by key, so a version 3
//!   drop-in holds only nvc's keys.
//! - containerd 1.x (config version 2) replaces a plugin's whole section with the last
//!   file's (containerd issue 5837): a drop-in holding only the runtime would silently
//!   drop the main file's `sandbox_image`, registry settings, the `runc` runtime, and so
//!   on. So a version 2 drop-in carries a copy of the whole CRI plugin section as
//!   containerd sees it (the last file defining it wins), with nvc's keys added. The
//!   copy is refreshed by running `nvc runtime configure` again; its header says so.
//!   containerd 2.x reads that file the same way.
//!
//! A config without `version` is a version 1 config (`[plugins.cri]`): refused, with
//! what to do. An empty or missing main file gets `version = 2`, which both containerd
//! 1.x and 2.x read.

use std::path::{Component, Path, PathBuf};

use toml_edit::{Array, DocumentMut, Item, Table, TableLike, Value};

use super::tomlutil::{
    deep_merge, dotted, fresh_table, fresh_value, kind, table_at, table_mut, TomlSyntax,
};
use super::{Source, MARKER};

/// The CRI plugin holding runtimes in config version 2 (containerd 1.x).
pub const CRI_PLUGIN_V2: &str = "io.containerd.grpc.v1.cri";
/// The CRI runtime plugin in config version 3 (containerd 2.x).
pub const CRI_PLUGIN_V3: &str = "io.containerd.cri.v1.runtime";
/// The shim type of runc-compatible runtimes, whose `options.BinaryName` names the binary.
pub const RUNC_SHIM: &str = "io.containerd.runc.v2";

/// What to register.
#[derive(Debug, Clone, Copy)]
pub struct ContainerdOptions<'a> {
    /// The runtime's name (the CRI runtime handler; a Kubernetes RuntimeClass `handler`).
    pub runtime_name: &'a str,
    /// The shim's path, e.g. `/usr/bin/nvc-runtime`.
    pub runtime_path: &'a str,
    /// Also make it `default_runtime_name`.
    pub set_as_default: bool,
    /// Also set the CRI plugin's `enable_cdi = true` (containerd 1.7+).
    pub cdi: bool,
    /// The main config file (relative imports are relative to its directory).
    pub config_path: &'a Path,
    /// The drop-in file nvc writes.
    pub drop_in_path: &'a Path,
}

/// The files as they must become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdPlan {
    /// The config version (2 or 3).
    pub version: i64,
    /// The main file; the input itself when it needs no change.
    pub config: String,
    /// The drop-in file.
    pub drop_in: String,
}

/// Why containerd's configuration cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// A file is not TOML (the cause names the line and column).
    #[error("{path} is not valid TOML")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        #[source]
        source: TomlSyntax,
    },
    /// The main file has no `version`: containerd reads it as version 1.
    #[error(
        "{path} has no `version` key, so containerd reads it as a version 1 config, which nvc \
         does not configure: convert it to version 2 (containerd 1.x: `version = 2`, plugins \
         under their full names such as [plugins.\"io.containerd.grpc.v1.cri\"]) or 3 \
         (containerd 2.x: `containerd config migrate`), then run again"
    )]
    Version1 {
        /// The file.
        path: PathBuf,
    },
    /// The main file's `version` is not 2 or 3.
    #[error("{path} has `version = {version}`: nvc configures versions 2 (containerd 1.x) and 3 (containerd 2.x)")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The value found.
        version: String,
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
    /// `imports` is not an array of strings.
    #[error("`imports` in {path} is {found}, expected an array of strings")]
    BadImports {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        found: &'static str,
    },
}

/// Computes the main file and the drop-in.
///
/// `sources[0]` is the main file (empty text for a missing one); the rest are the files
/// containerd imports before the drop-in, in the order it loads them (breadth first, a
/// glob's matches sorted), without the drop-in itself. They decide what the `runc`
/// entry and, for version 2, the CRI plugin section look like to containerd.
pub fn configure(
    sources: &[Source<'_>],
    opts: &ContainerdOptions<'_>,
) -> Result<ContainerdPlan, ContainerdError> {
    let Some((main, imported)) = sources.split_first() else {
        return Err(ContainerdError::Version1 {
            path: opts.config_path.to_path_buf(),
        });
    };
    let mut doc = parse(main)?;
    let version = match config_version(&doc, main.path)? {
        Some(v) => v,
        None => {
            // Comments of a file with no keys stay above them.
            let comments = doc.trailing().as_str().unwrap_or("").to_string();
            doc.set_trailing("");
            doc.insert("version", toml_edit::value(2));
            if let Some(mut key) = doc.key_mut("version") {
                key.leaf_decor_mut().set_prefix(comments);
            }
            2
        }
    };
    let glob = drop_in_glob(opts.drop_in_path);
    let current = imports_of(&doc, main.path)?;
    let covered = current
        .iter()
        .any(|i| import_matches(opts.config_path, i, opts.drop_in_path));
    if !covered {
        push_import(&mut doc, &glob);
    }
    let config = if covered {
        main.text.to_string()
    } else {
        doc.to_string()
    };

    let docs = std::iter::once(Ok((main.path, doc)))
        .chain(imported.iter().map(|s| parse(s).map(|d| (s.path, d))))
        .collect::<Result<Vec<_>, _>>()?;
    let drop_in = drop_in(&docs, version, opts)?;
    Ok(ContainerdPlan {
        version,
        config,
        drop_in,
    })
}

/// Returns the main file without the drop-in's glob in `imports`, and without `imports`
/// if that empties it and `keep_empty_imports` is false (the file had none before nvc);
/// the input itself when the glob is not there.
pub fn unconfigure(
    main: Source<'_>,
    drop_in_path: &Path,
    keep_empty_imports: bool,
) -> Result<String, ContainerdError> {
    let mut doc = parse(&main)?;
    let glob = drop_in_glob(drop_in_path);
    let Some(Item::Value(Value::Array(array))) = doc.get_mut("imports") else {
        return Ok(main.text.to_string());
    };
    let before = array.len();
    array.retain(|v| v.as_str() != Some(glob.as_str()));
    if array.len() == before {
        return Ok(main.text.to_string());
    }
    if array.is_empty() && !keep_empty_imports {
        doc.remove("imports");
    }
    Ok(doc.to_string())
}

/// The config's `imports`, as written (globs, paths relative to the file's directory).
pub fn imports(source: Source<'_>) -> Result<Vec<String>, ContainerdError> {
    imports_of(&parse(&source)?, source.path)
}

/// Whether the config has an `imports` key at all (an empty array counts).
pub fn has_imports_key(source: Source<'_>) -> Result<bool, ContainerdError> {
    Ok(parse(&source)?.contains_key("imports"))
}

/// The config version of a main file: `None` for an empty file (no keys at all).
pub fn version(source: Source<'_>) -> Result<Option<i64>, ContainerdError> {
    config_version(&parse(&source)?, source.path)
}

/// Whether `source`, loaded after the drop-in, overrides what the drop-in sets: for
/// version 2 any CRI plugin section (containerd 1.x replaces the whole section), for
/// version 3 the runtime `runtime_name` or `default_runtime_name`.
pub fn overrides_drop_in(
    source: Source<'_>,
    version: i64,
    runtime_name: &str,
) -> Result<bool, ContainerdError> {
    let doc = parse(&source)?;
    let plugin = cri_plugin(version);
    let Ok(Some(cri)) = table_at(doc.as_table(), &["plugins", plugin]) else {
        return Ok(false);
    };
    if version == 2 {
        return Ok(true);
    }
    Ok(matches!(
        table_at(cri, &["containerd", "runtimes", runtime_name]),
        Ok(Some(_))
    ) || matches!(table_at(cri, &["containerd"]), Ok(Some(c)) if c.contains_key("default_runtime_name")))
}

/// The glob nvc adds to `imports`: every `*.toml` in the drop-in's directory.
pub fn drop_in_glob(drop_in_path: &Path) -> String {
    let dir = drop_in_path.parent().unwrap_or_else(|| Path::new("/"));
    format!("{}/*.toml", dir.display())
}

/// The path containerd resolves an import to: relative ones against the main file's
/// directory, `.` and `..` folded (like Go's `filepath.Clean`).
pub fn resolve_import(config_path: &Path, import: &str) -> PathBuf {
    let raw = Path::new(import);
    let joined = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        config_path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(raw)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether the import `import` of `config_path` loads `file`: the same path, or a glob
/// matching it. Globs support `*` and `?` within one path component, as Go's
/// `filepath.Match` does; `[...]` classes are compared literally.
pub fn import_matches(config_path: &Path, import: &str, file: &Path) -> bool {
    let pattern = resolve_import(config_path, import);
    let pattern = pattern.to_string_lossy();
    let file = file.to_string_lossy();
    let pat: Vec<&str> = pattern.split('/').collect();
    let name: Vec<&str> = file.split('/').collect();
    pat.len() == name.len() && pat.iter().zip(&name).all(|(p, n)| glob_component(p, n))
}

/// `*` and `?` matching of one path component.
pub fn glob_component(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn cri_plugin(version: i64) -> &'static str {
    if version >= 3 {
        CRI_PLUGIN_V3
    } else {
        CRI_PLUGIN_V2
    }
}

fn parse(source: &Source<'_>) -> Result<DocumentMut, ContainerdError> {
    source
        .text
        .parse::<DocumentMut>()
        .map_err(|e| ContainerdError::Parse {
            path: source.path.to_path_buf(),
            source: TomlSyntax(e),
        })
}

fn config_version(doc: &DocumentMut, path: &Path) -> Result<Option<i64>, ContainerdError> {
    match doc.get("version") {
        None if doc.is_empty() => Ok(None),
        None => Err(ContainerdError::Version1 {
            path: path.to_path_buf(),
        }),
        Some(item) => match item.as_integer() {
            Some(v @ (2 | 3)) => Ok(Some(v)),
            _ => Err(ContainerdError::UnsupportedVersion {
                path: path.to_path_buf(),
                version: item.to_string().trim().to_string(),
            }),
        },
    }
}

fn imports_of(doc: &DocumentMut, path: &Path) -> Result<Vec<String>, ContainerdError> {
    let bad = |found| ContainerdError::BadImports {
        path: path.to_path_buf(),
        found,
    };
    match doc.get("imports") {
        None => Ok(Vec::new()),
        Some(Item::Value(Value::Array(array))) => array
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or(bad("an array holding a non-string"))
            })
            .collect(),
        Some(other) => Err(bad(kind(other))),
    }
}

/// Appends `glob` to `imports`, creating it, in the array's own layout.
fn push_import(doc: &mut DocumentMut, glob: &str) {
    match doc.get_mut("imports") {
        Some(Item::Value(Value::Array(array))) => {
            let mut v = Value::from(glob);
            match array.iter().last() {
                // One element a line: the new one goes on its own line, indented alike.
                Some(last)
                    if last
                        .decor()
                        .prefix()
                        .and_then(|p| p.as_str())
                        .is_some_and(|p| p.contains('\n')) =>
                {
                    *v.decor_mut() = last.decor().clone();
                }
                Some(_) => v.decor_mut().set_prefix(" "),
                None => v.decor_mut().clear(),
            }
            array.push_formatted(v);
        }
        _ => {
            let mut array = Array::new();
            array.push(glob);
            doc.insert("imports", toml_edit::value(array));
        }
    }
}

fn drop_in(
    docs: &[(&Path, DocumentMut)],
    version: i64,
    opts: &ContainerdOptions<'_>,
) -> Result<String, ContainerdError> {
    let plugin = cri_plugin(version);
    let not_a_table = |path: &Path, key: String, found| ContainerdError::NotATable {
        path: path.to_path_buf(),
        key,
        found,
    };
    // The CRI plugin section as containerd sees it before the drop-in.
    let mut effective = Table::new();
    let mut last: Option<&dyn TableLike> = None;
    for (path, doc) in docs {
        let keys = ["plugins", plugin];
        match table_at(doc.as_table(), &keys) {
            Ok(Some(cri)) => {
                for sub in [&["containerd"][..], &["containerd", "runtimes"]] {
                    if let Err(depth) = table_at(cri, sub) {
                        let key = [&keys[..], &sub[..=depth]].concat();
                        let found = cri_item(cri, &sub[..=depth]).map_or("nothing", kind);
                        return Err(not_a_table(path, dotted(&key), found));
                    }
                }
                deep_merge(&mut effective, cri);
                last = Some(cri);
            }
            Ok(None) => {}
            Err(depth) => {
                let key = &keys[..=depth];
                let found = cri_item(doc.as_table(), key).map_or("nothing", kind);
                return Err(not_a_table(path, dotted(key), found));
            }
        }
    }
    let template = runc_template(&effective);
    let mut cri = match (version, last) {
        (2, Some(last)) => fresh_table(last),
        _ => Table::new(),
    };
    cri.set_implicit(true);
    if opts.cdi {
        cri.insert("enable_cdi", toml_edit::value(true));
    }
    // Every source's `containerd` and `runtimes` were checked to be tables above, and
    // copies keep that, so these lookups fail only on a bug.
    let unexpected = |path: &[&str]| not_a_table(docs[0].0, dotted(path), "not a table");
    let containerd = table_mut(&mut cri, "containerd")
        .map_err(|()| unexpected(&["plugins", plugin, "containerd"]))?;
    if opts.set_as_default {
        containerd.insert("default_runtime_name", toml_edit::value(opts.runtime_name));
    }
    let default_name = containerd
        .get("default_runtime_name")
        .and_then(Item::as_str)
        .unwrap_or("runc")
        .to_string();
    let runtimes = table_mut(containerd, "runtimes")
        .map_err(|()| unexpected(&["plugins", plugin, "containerd", "runtimes"]))?;
    runtimes.insert(
        opts.runtime_name,
        Item::Table(runtime_entry(template, opts)),
    );
    // containerd 1.x replaces the whole runtimes map with the drop-in's: when the main
    // file left the default runtime to containerd's built-in defaults, the drop-in must
    // name it again, or the CRI plugin refuses to load ("no corresponding runtime
    // configured in containerd.runtimes for default_runtime_name").
    if version == 2 && !opts.set_as_default && !runtimes.contains_key(&default_name) {
        let mut runc = Table::new();
        runc.insert("runtime_type", toml_edit::value(RUNC_SHIM));
        runtimes.insert(&default_name, Item::Table(runc));
    }

    let mut out = DocumentMut::new();
    out.insert("version", toml_edit::value(version));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    plugins.insert(plugin, Item::Table(cri));
    out.insert("plugins", Item::Table(plugins));
    Ok(format!("{}{}", header(version, opts), out))
}

fn cri_item<'a>(root: &'a dyn TableLike, path: &[&str]) -> Option<&'a Item> {
    let (last, parents) = path.split_last()?;
    let parent = table_at(root, parents).ok().flatten()?;
    parent.get(last)
}

/// The runtime entry nvc's copies settings from: `runc`, else the default runtime if it
/// is a runc-type shim.
fn runc_template(cri: &Table) -> Option<&dyn TableLike> {
    let runtimes = table_at(cri, &["containerd", "runtimes"]).ok().flatten()?;
    let runc_type = |t: &dyn TableLike| {
        t.get("runtime_type")
            .and_then(Item::as_str)
            .map_or(true, |ty| ty == RUNC_SHIM || ty == "io.containerd.runc.v1")
    };
    if let Some(runc) = runtimes.get("runc").and_then(Item::as_table_like) {
        return runc_type(runc).then_some(runc);
    }
    let default = table_at(cri, &["containerd"])
        .ok()
        .flatten()?
        .get("default_runtime_name")?
        .as_str()?;
    runtimes
        .get(default)
        .and_then(Item::as_table_like)
        .filter(|t| runc_type(*t))
}

fn runtime_entry(template: Option<&dyn TableLike>, opts: &ContainerdOptions<'_>) -> Table {
    let mut entry = Table::new();
    entry.insert("runtime_type", toml_edit::value(RUNC_SHIM));
    let mut options = Table::new();
    options.insert("BinaryName", toml_edit::value(opts.runtime_path));
    if let Some(t) = template {
        for (key, item) in t.iter() {
            match key {
                "runtime_type" => {}
                "options" => {
                    if let Some(o) = item.as_table_like() {
                        for (k, v) in o.iter() {
                            if let (false, Some(v)) = (k == "BinaryName", v.as_value()) {
                                options.insert(k, Item::Value(fresh_value(v)));
                            }
                        }
                    }
                }
                _ => {
                    if let Some(v) = item.as_value() {
                        entry.insert(key, Item::Value(fresh_value(v)));
                    } else if let Some(sub) = item.as_table_like() {
                        entry.insert(key, Item::Table(fresh_table(sub)));
                    }
                }
            }
        }
    }
    entry.insert("options", Item::Table(options));
    // The CRI plugin passes a pod's or a container's annotations into the OCI spec only
    // where the runtime allows them: without this, the device plugin's `cdi.k8s.io/`
    // annotations never reach nvc-runtime (containerd 1.6 has no CDI support of its own).
    for key in ["pod_annotations", "container_annotations"] {
        let mut list = entry
            .get(key)
            .and_then(Item::as_array)
            .cloned()
            .unwrap_or_default();
        if !list.iter().any(|v| v.as_str() == Some(CDI_ANNOTATIONS)) {
            list.push(CDI_ANNOTATIONS);
        }
        entry.insert(key, toml_edit::value(list));
    }
    entry
}

/// The annotations nvc reads, as the CRI plugin's allowlists write them.
pub const CDI_ANNOTATIONS: &str = "cdi.k8s.io/*";

fn header(version: i64, opts: &ContainerdOptions<'_>) -> String {
    let mut h = format!(
        "{MARKER}: the {:?} runtime ({}) for containerd,\n\
         # imported by {}. Remove with `nvc runtime configure --runtime containerd --revert`.\n",
        opts.runtime_name,
        opts.runtime_path,
        opts.config_path.display()
    );
    if version == 2 {
        h.push_str(&format!(
            "#\n\
             # containerd 1.x replaces a plugin's whole section with the one in the last file\n\
             # that has it, so this file carries a copy of the CRI plugin section of\n\
             # {} (and the files it imports) with the runtime added.\n\
             # After changing that section there, run `nvc runtime configure --runtime\n\
             # containerd` again to refresh this copy.\n",
            opts.config_path.display()
        ));
    }
    h.push('\n');
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::report::error_chain;

    const MAIN: &str = "/etc/containerd/config.toml";
    const DROP_IN: &str = "/etc/containerd/conf.d/99-nvc.toml";

    fn opts() -> ContainerdOptions<'static> {
        ContainerdOptions {
            runtime_name: "nv",
            runtime_path: "/usr/bin/nvc-runtime",
            set_as_default: false,
            cdi: false,
            config_path: Path::new(MAIN),
            drop_in_path: Path::new(DROP_IN),
        }
    }

    fn run(main: &str, o: &ContainerdOptions<'_>) -> Result<ContainerdPlan, ContainerdError> {
        configure(
            &[Source {
                path: Path::new(MAIN),
                text: main,
            }],
            o,
        )
    }

    fn toml(s: &str) -> DocumentMut {
        s.parse().unwrap()
    }

    fn get<'a>(v: &'a DocumentMut, path: &[&str]) -> Option<&'a Item> {
        path.iter().try_fold(v.as_item(), |v, k| v.get(k))
    }

    const V2: &str = r#"# containerd 1.7, trimmed `containerd config default`
version = 2
root = "/var/lib/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]
  # the CRI plugin
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.8"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          privileged_without_host_devices = false
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            BinaryName = ""
            SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
"#;

    const V3: &str = r#"version = 3
imports = ["/etc/containerd/extra/*.toml"] # site settings

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = true
"#;

    #[test]
    fn v2_main_gets_only_the_import_and_keeps_its_layout() {
        let plan = run(V2, &opts()).unwrap();
        assert_eq!(plan.version, 2);
        let want = V2.replacen(
            "root = \"/var/lib/containerd\"\n",
            "root = \"/var/lib/containerd\"\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
            1,
        );
        assert_eq!(plan.config, want);
    }

    #[test]
    fn v2_drop_in_carries_the_cri_section_and_the_runtime() {
        let plan = run(V2, &opts()).unwrap();
        assert!(plan.drop_in.starts_with(MARKER), "{}", plan.drop_in);
        let d = toml(&plan.drop_in);
        assert_eq!(d["version"].as_integer(), Some(2));
        let cri = &d["plugins"][CRI_PLUGIN_V2];
        // The copy: what containerd 1.x would otherwise lose.
        assert_eq!(
            cri["sandbox_image"].as_str(),
            Some("registry.k8s.io/pause:3.8")
        );
        assert_eq!(
            cri["registry"]["config_path"].as_str(),
            Some("/etc/containerd/certs.d")
        );
        assert_eq!(
            cri["containerd"]["default_runtime_name"].as_str(),
            Some("runc")
        );
        let runc = &cri["containerd"]["runtimes"]["runc"];
        assert_eq!(runc["options"]["SystemdCgroup"].as_bool(), Some(true));
        // The runtime, with runc's settings.
        let nv = &cri["containerd"]["runtimes"]["nv"];
        assert_eq!(nv["runtime_type"].as_str(), Some(RUNC_SHIM));
        assert_eq!(nv["privileged_without_host_devices"].as_bool(), Some(false));
        assert_eq!(
            nv["options"]["BinaryName"].as_str(),
            Some("/usr/bin/nvc-runtime")
        );
        assert_eq!(nv["options"]["SystemdCgroup"].as_bool(), Some(true));
        for key in ["pod_annotations", "container_annotations"] {
            let list: Vec<&str> = nv[key]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v.as_str())
                .collect();
            assert_eq!(list, [CDI_ANNOTATIONS], "{key}");
        }
        // No comments or indentation copied from the main file.
        assert!(
            !plan.drop_in.contains("# the CRI plugin"),
            "{}",
            plan.drop_in
        );
    }

    #[test]
    fn v3_drop_in_holds_only_the_runtime() {
        let plan = run(V3, &opts()).unwrap();
        assert_eq!(plan.version, 3);
        assert_eq!(
            plan.config,
            V3.replacen(
                "imports = [\"/etc/containerd/extra/*.toml\"]",
                "imports = [\"/etc/containerd/extra/*.toml\", \"/etc/containerd/conf.d/*.toml\"]",
                1
            )
        );
        let body: String = plan
            .drop_in
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body,
            "\nversion = 3\n\n\
             [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nv]\n\
             runtime_type = \"io.containerd.runc.v2\"\n\
             pod_annotations = [\"cdi.k8s.io/*\"]\n\
             container_annotations = [\"cdi.k8s.io/*\"]\n\n\
             [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nv.options]\n\
             BinaryName = \"/usr/bin/nvc-runtime\"\n\
             SystemdCgroup = true\n"
        );
    }

    #[test]
    fn set_as_default_and_cdi() {
        let o = ContainerdOptions {
            set_as_default: true,
            cdi: true,
            ..opts()
        };
        for (main, plugin) in [(V2, CRI_PLUGIN_V2), (V3, CRI_PLUGIN_V3)] {
            let d = toml(&run(main, &o).unwrap().drop_in);
            let cri = &d["plugins"][plugin];
            assert_eq!(
                cri["containerd"]["default_runtime_name"].as_str(),
                Some("nv")
            );
            assert_eq!(cri["enable_cdi"].as_bool(), Some(true));
        }
    }

    #[test]
    fn idempotent() {
        for main in [V2, V3, "", "version = 2\n"] {
            let first = run(main, &opts()).unwrap();
            let second = run(&first.config, &opts()).unwrap();
            assert_eq!(second, first, "{main}");
            // The main file's bytes are untouched once the import is there.
            assert_eq!(run(&second.config, &opts()).unwrap().config, first.config);
        }
    }

    #[test]
    fn a_v2_drop_in_keeps_the_default_runtime_defined() {
        // Without a CRI section in the main file, containerd 1.x would take the
        // drop-in's runtimes map as the whole map and lose its built-in `runc`.
        for main in ["version = 2\n", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"crun\"\n"] {
            let plan = run(main, &opts()).unwrap();
            let d = toml(&plan.drop_in);
            let want = if main.contains("crun") { "crun" } else { "runc" };
            let runtimes = get(&d, &["plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"]).unwrap();
            assert_eq!(runtimes[want]["runtime_type"].as_str(), Some(RUNC_SHIM), "{}", plan.drop_in);
        }
    }

    #[test]
    fn empty_main_file_gets_version_2_and_the_import() {
        let plan = run("# nothing yet\n", &opts()).unwrap();
        assert_eq!(
            plan.config,
            "# nothing yet\nversion = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
        );
        let d = toml(&plan.drop_in);
        let nv = get(
            &d,
            &["plugins", CRI_PLUGIN_V2, "containerd", "runtimes", "nv"],
        )
        .unwrap();
        assert_eq!(
            nv["options"]["BinaryName"].as_str(),
            Some("/usr/bin/nvc-runtime")
        );
        assert!(nv["options"].get("SystemdCgroup").is_none());
    }

    #[test]
    fn an_import_already_covering_the_drop_in_is_kept_as_is() {
        for import in [
            "/etc/containerd/conf.d/*.toml",
            "conf.d/*.toml",
            "./conf.d/99-nvc.toml",
            "/etc/containerd/conf.d/9?-*.toml",
        ] {
            let main = format!("version = 3\nimports = [\"{import}\"]\n");
            assert_eq!(run(&main, &opts()).unwrap().config, main, "{import}");
        }
        let main = "version = 2\nimports = [\"/etc/containerd/other/*.toml\"]\n";
        assert!(run(main, &opts())
            .unwrap()
            .config
            .contains("\"/etc/containerd/other/*.toml\", \"/etc/containerd/conf.d/*.toml\""));
    }

    #[test]
    fn a_multi_line_imports_array_stays_one_per_line() {
        let main = "version = 2\nimports = [\n  \"/a/*.toml\",\n  \"/b/*.toml\",\n]\n";
        assert_eq!(
            run(main, &opts()).unwrap().config,
            "version = 2\nimports = [\n  \"/a/*.toml\",\n  \"/b/*.toml\",\n  \"/etc/containerd/conf.d/*.toml\",\n]\n"
        );
    }

    #[test]
    fn an_existing_runtime_of_that_name_is_replaced_not_merged() {
        let main = format!(
            "{V2}      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv]\n        runtime_type = \"io.containerd.runc.v1\"\n        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv.options]\n          BinaryName = \"/old/nvc-runtime\"\n"
        );
        let d = toml(&run(&main, &opts()).unwrap().drop_in);
        let nv = get(
            &d,
            &["plugins", CRI_PLUGIN_V2, "containerd", "runtimes", "nv"],
        )
        .unwrap();
        assert_eq!(nv["runtime_type"].as_str(), Some(RUNC_SHIM));
        assert_eq!(
            nv["options"]["BinaryName"].as_str(),
            Some("/usr/bin/nvc-runtime")
        );
    }

    #[test]
    fn imported_files_count_in_load_order() {
        // containerd 1.x: the last file defining the CRI section wins it all.
        let site = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"site/pause:1\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = false\n";
        let sources = [
            Source {
                path: Path::new(MAIN),
                text: V2,
            },
            Source {
                path: Path::new("/etc/containerd/conf.d/10-site.toml"),
                text: site,
            },
        ];
        let d = toml(&configure(&sources, &opts()).unwrap().drop_in);
        let cri = &d["plugins"][CRI_PLUGIN_V2];
        assert_eq!(cri["sandbox_image"].as_str(), Some("site/pause:1"));
        assert!(cri.get("registry").is_none());
        assert_eq!(
            cri["containerd"]["runtimes"]["nv"]["options"]["SystemdCgroup"].as_bool(),
            Some(false)
        );
        assert!(overrides_drop_in(sources[1], 2, "nv").unwrap());
        assert!(!overrides_drop_in(sources[1], 3, "nv").unwrap());
    }

    #[test]
    fn refusals_name_the_problem() {
        let cases = [
            ("version = 2\n[plugins\n", "/etc/containerd/config.toml is not valid TOML: TOML parse error at line 2"),
            ("[plugins.cri]\nsandbox_image = \"x\"\n", "/etc/containerd/config.toml has no `version` key, so containerd reads it as a version 1 config"),
            ("version = 4\n", "/etc/containerd/config.toml has `version = 4`: nvc configures versions 2"),
            ("version = \"2\"\n", "has `version = \"2\"`"),
            ("version = 2\nimports = \"/etc/x.toml\"\n", "`imports` in /etc/containerd/config.toml is a string, expected an array of strings"),
            ("version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\" = 1\n", "`plugins.\"io.containerd.grpc.v1.cri\"` in /etc/containerd/config.toml is an integer, expected a table"),
            ("version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\nruntimes = []\n", "`plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes` in /etc/containerd/config.toml is an array, expected a table"),
        ];
        for (main, want) in cases {
            let err = error_chain(&run(main, &opts()).unwrap_err());
            assert!(err.starts_with(want) || err.contains(want), "{main}: {err}");
        }
    }

    #[test]
    fn unconfigure_removes_the_import() {
        let plan = run(V3, &opts()).unwrap();
        let src = |text| Source {
            path: Path::new(MAIN),
            text,
        };
        let back = unconfigure(src(&plan.config), Path::new(DROP_IN), true).unwrap();
        assert_eq!(back, V3);
        let plan = run("version = 2\n", &opts()).unwrap();
        let back = unconfigure(src(&plan.config), Path::new(DROP_IN), false).unwrap();
        assert_eq!(back, "version = 2\n");
        let plan = run("version = 2\nimports = []\n", &opts()).unwrap();
        let back = unconfigure(src(&plan.config), Path::new(DROP_IN), true).unwrap();
        assert_eq!(back, "version = 2\nimports = []\n");
        assert_eq!(unconfigure(src(V2), Path::new(DROP_IN), false).unwrap(), V2);
    }

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("*.toml", "99-nvc.toml", true),
            ("*.toml", "99-nvc.toml.nvc-backup", false),
            ("9?-*", "99-nvc.toml", true),
            ("*", "", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
        ] {
            assert_eq!(glob_component(p, n), want, "{p} {n}");
        }
        assert_eq!(
            resolve_import(Path::new("/etc/containerd/config.toml"), "../x/./y.toml"),
            PathBuf::from("/etc/x/y.toml")
        );
    }
}
