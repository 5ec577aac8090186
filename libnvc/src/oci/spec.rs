//! Reading and editing a bundle's OCI spec (`config.json`) without losing anything.
//!
//! The spec is handled as a [`serde_json::Value`] (with its key order kept), never a
//! typed round trip: fields this crate does not know, top-level or nested, survive as
//! they were. [`view`] reads what nvc needs; [`apply`] adds the device nodes, their
//! cgroup allow rules and the prestart hook, and is idempotent; [`to_bytes`] gives the
//! bytes to save. Saving is an effect, and not this crate's: the runtime shim writes
//! them with `nvc_host::files::write_atomic`, so the file is never seen half-written.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::edits::ContainerEdits;
use crate::probe::HostProbe;
use crate::request::device_mount_name;

/// The largest spec [`read_spec`] accepts: real ones are a few KiB.
pub const MAX_SPEC_SIZE: u64 = 16 << 20;

/// File names of hooks that already give a container the driver: nvc's own and the
/// NVIDIA Container Toolkit's (Docker's `--gpus` adds the latter).
pub const KNOWN_HOOK_NAMES: &[&str] = &[
    "nvc-hook",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
];

/// Why a spec could not be read, understood or edited.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A file operation failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is larger than [`MAX_SPEC_SIZE`].
    #[error("{path} is larger than {limit} bytes, too large for an OCI spec")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// The file is empty.
    #[error("{0} is empty: expected the container's OCI spec, a JSON object")]
    Empty(PathBuf),
    /// The file is not JSON; the source names the line and column.
    #[error("invalid JSON in {path}{}", parse_hint(source))]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
        /// What is wrong, and where.
        #[source]
        source: serde_json::Error,
    },
    /// A field the spec must have is absent.
    #[error("the spec has no {0}")]
    Missing(&'static str),
    /// A field holds another JSON type than the OCI schema gives it.
    #[error("the spec's {field} is {found}, expected {expected}")]
    WrongType {
        /// The field, such as `linux.devices` or `process.env[2]`.
        field: String,
        /// What the schema has.
        expected: &'static str,
        /// What the spec has.
        found: &'static str,
    },
    /// A path that JSON cannot hold as a string.
    #[error("{0} is not valid UTF-8 and cannot go into the spec")]
    NotUtf8(PathBuf),
    /// The edited spec could not be serialized.
    #[error("cannot serialize the spec")]
    Serialize(#[source] serde_json::Error),
}

/// What nvc reads from a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecView {
    /// `process.env`, `KEY=VALUE` strings in order; empty without `process`.
    pub env: Vec<String>,
    /// Whether `CAP_SYS_ADMIN` is in `process.capabilities.bounding` (what Docker's and
    /// Podman's `--privileged` give).
    pub privileged: bool,
    /// `root.path`, joined to the bundle when relative.
    pub rootfs: PathBuf,
    /// `root.readonly`.
    pub readonly: bool,
    /// `linux.devices` that have numbers: path, major, minor.
    pub devices: Vec<(PathBuf, u32, u32)>,
    /// `annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The destinations of the spec's fresh `tmpfs` mounts (not binds): file systems the
    /// runtime makes empty for this container alone, where nvc may make mount points.
    pub tmpfs_mounts: Vec<PathBuf>,
    /// The destinations of every mount of the spec, in order.
    pub mount_destinations: Vec<PathBuf>,
    /// The names under `/var/run/nvidia-container-devices` of the spec's mounts there
    /// (the device plugin's `volume-mounts` strategy; see `crate::request`), in order.
    pub device_mounts: Vec<String>,
    /// The container's mount namespace, as `linux.namespaces` gives it.
    pub mount_namespace: MountNamespace,
}

/// A container's mount namespace, as the spec's `linux.namespaces` gives it (read, not
/// checked: the runtime validates its namespaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountNamespace {
    /// A new one, the container's own: a `mount` entry with no path (or an empty one).
    New,
    /// An existing one, joined: a `mount` entry with a path.
    Joined(PathBuf),
    /// None of its own: no `mount` entry, and the container stays in the runtime's.
    Inherited,
}

impl MountNamespace {
    /// The mount namespace of a spec whose `linux.namespaces` has the entries
    /// `(type, path)`; the first `mount` entry decides.
    fn of<'a>(entries: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>) -> Self {
        match entries.into_iter().find(|(kind, _)| *kind == Some("mount")) {
            None => MountNamespace::Inherited,
            Some((_, Some(path))) if !path.is_empty() => MountNamespace::Joined(path.into()),
            Some(_) => MountNamespace::New,
        }
    }
}

/// A hook as the OCI spec writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEntry {
    /// The executable, an absolute path on the host.
    pub path: PathBuf,
    /// Its argv, `args[0]` included.
    pub args: Vec<String>,
    /// Its whole environment, `KEY=VALUE`.
    pub env: Vec<String>,
    /// The OCI hook's `timeout`: seconds after which the runtime kills the hook; `None`
    /// leaves the field out (no limit).
    pub timeout: Option<u32>,
    /// Whether its poststop twin is added too (`hook.leave-no-trace`).
    pub poststop: bool,
}

/// The annotation containerd's CRI plugin gives every container it makes for the kubelet
/// (`container` or `sandbox`).
pub const CONTAINERD_CRI_TYPE: &str = "io.kubernetes.cri.container-type";

/// CRI-O's.
pub const CRI_O_TYPE: &str = "io.kubernetes.cri-o.ContainerType";

impl SpecView {
    /// Whether a Kubernetes CRI (containerd's or CRI-O's) made this container: the kubelet
    /// never starts it again (a restart is a new container on a new rootfs) and its
    /// rootfs is removed with it. A spec can claim this falsely only about itself: it
    /// then keeps what nvc made in its own rootfs after it ends.
    pub fn from_kubernetes(&self) -> bool {
        [CONTAINERD_CRI_TYPE, CRI_O_TYPE].iter().any(|key| {
            matches!(
                self.annotations.get(*key).map(String::as_str),
                Some("container" | "sandbox")
            )
        })
    }
}

/// What a parse error most likely means, for the message.
fn parse_hint(e: &serde_json::Error) -> &'static str {
    let text = e.to_string();
    if e.classify() == serde_json::error::Category::Eof {
        " (it ends early: truncated?)"
    } else if ["unicode code point", "surrogate", "hex escape"]
        .iter()
        .any(|s| text.contains(s))
    {
        // Go's decoder, runc's, reads both as U+FFFD; guessing here could change a value.
        " (a string holds bytes that are not UTF-8, or a \\u escape of half a surrogate pair)"
    } else {
        ""
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(field: impl Into<String>, expected: &'static str, found: &Value) -> SpecError {
    SpecError::WrongType {
        field: field.into(),
        expected,
        found: type_name(found),
    }
}

fn top(spec: &Value) -> Result<&Map<String, Value>, SpecError> {
    spec.as_object()
        .ok_or_else(|| wrong("top level", "an object", spec))
}

/// `parent[key]` as an object; `None` when absent or null (Go's decoders read null as
/// absent, and so does runc).
fn object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, SpecError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(wrong(field, "an object", other)),
    }
}

/// `parent[key]` as an array; empty when absent or null.
fn array<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a [Value], SpecError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(wrong(field, "an array", other)),
    }
}

fn strings(items: &[Value], field: &str) -> Result<Vec<String>, SpecError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(wrong(format!("{field}[{i}]"), "a string", other)),
        })
        .collect()
}

/// `parent[key]` as an object to edit, created when absent or null.
fn object_mut<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a mut Map<String, Value>, SpecError> {
    let slot = parent
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => Ok(m),
        other => Err(wrong(field, "an object", other)),
    }
}

/// `parent[key]` as an array to edit, created when absent or null.
fn array_mut<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a mut Vec<Value>, SpecError> {
    let slot = parent
        .entry(key)
        .or_insert_with(|| Value::Array(Vec::new()));
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(a) => Ok(a),
        other => Err(wrong(field, "an array", other)),
    }
}

fn number(entry: &Map<String, Value>, key: &str, field: String) -> Result<Option<u32>, SpecError> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| wrong(field, "a 32-bit unsigned number", v)),
    }
}

/// Reads what nvc needs from `spec`, the spec of the bundle at `bundle`.
pub fn view(spec: &Value, bundle: &Path) -> Result<SpecView, SpecError> {
    let top = top(spec)?;

    let process = object(top, "process", "process")?;
    let env = match process {
        Some(p) => strings(array(p, "env", "process.env")?, "process.env")?,
        None => Vec::new(),
    };
    let bounding = match process {
        Some(p) => match object(p, "capabilities", "process.capabilities")? {
            Some(caps) => strings(
                array(caps, "bounding", "process.capabilities.bounding")?,
                "process.capabilities.bounding",
            )?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let privileged = bounding.iter().any(|c| c == "CAP_SYS_ADMIN");

    let root = object(top, "root", "root")?.ok_or(SpecError::Missing("root"))?;
    let rootfs = match root.get("path") {
        Some(Value::String(p)) if !p.is_empty() => bundle.join(p),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            return Err(SpecError::Missing("root.path"))
        }
        Some(other) => return Err(wrong("root.path", "a string", other)),
    };
    let readonly = match root.get("readonly") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(wrong("root.readonly", "a boolean", other)),
    };

    let mut devices = Vec::new();
    if let Some(linux) = object(top, "linux", "linux")? {
        for (i, entry) in array(linux, "devices", "linux.devices")?.iter().enumerate() {
            let field = format!("linux.devices[{i}]");
            let Value::Object(entry) = entry else {
                return Err(wrong(field, "an object", entry));
            };
            let path = match entry.get("path") {
                Some(Value::String(p)) => PathBuf::from(p),
                None | Some(Value::Null) => continue,
                Some(other) => return Err(wrong(format!("{field}.path"), "a string", other)),
            };
            let major = number(entry, "major", format!("{field}.major"))?;
            let minor = number(entry, "minor", format!("{field}.minor"))?;
            // FIFOs have no numbers; nvc only cares about character devices.
            if let (Some(major), Some(minor)) = (major, minor) {
                devices.push((path, major, minor));
            }
        }
    }

    let mut annotations = BTreeMap::new();
    if let Some(map) = object(top, "annotations", "annotations")? {
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    annotations.insert(k.clone(), s.clone());
                }
                other => return Err(wrong(format!("annotations.{k}"), "a string", other)),
            }
        }
    }

    // Only read, never checked: runc validates its mounts, and nvc refuses nothing here.
    let tmpfs_mounts = mounts(top)
        .filter(|m| m.get("type").and_then(Value::as_str) == Some("tmpfs"))
        .filter(|m| {
            !m.get("options")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|o| matches!(o.as_str(), Some("bind" | "rbind")))
        })
        .filter_map(|m| m.get("destination").and_then(Value::as_str))
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d != Path::new("/"))
        .collect();

    let mount_destinations = destinations(top).map(PathBuf::from).collect();
    let device_mounts = destinations(top).filter_map(device_mount_name).collect();
    // Read like the mounts: entries of another shape are the runtime's to refuse.
    let mount_namespace = MountNamespace::of(
        top.get("linux")
            .and_then(|l| l.get("namespaces"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|n| {
                (
                    n.get("type").and_then(Value::as_str),
                    n.get("path").and_then(Value::as_str),
                )
            }),
    );

    Ok(SpecView {
        env,
        privileged,
        rootfs,
        readonly,
        devices,
        annotations,
        tmpfs_mounts,
        mount_destinations,
        device_mounts,
        mount_namespace,
    })
}

/// Removes the spec's mounts under `/var/run/nvidia-container-devices` (the container
/// has no use for them once nvc has read them); returns whether any was there.
pub fn drop_device_mounts(spec: &mut Value) -> Result<bool, SpecError> {
    let found = type_name(spec);
    let Value::Object(top) = spec else {
        return Err(SpecError::WrongType {
            field: "top level".into(),
            expected: "an object",
            found,
        });
    };
    let Some(mounts) = top.get_mut("mounts").and_then(Value::as_array_mut) else {
        return Ok(false);
    };
    let before = mounts.len();
    mounts.retain(|m| {
        m.get("destination")
            .and_then(Value::as_str)
            .and_then(device_mount_name)
            .is_none()
    });
    Ok(mounts.len() != before)
}

/// The spec's mounts, as read (never checked: runc validates them).
fn mounts(top: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    top.get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The destinations of the spec's mounts.
fn destinations(top: &Map<String, Value>) -> impl Iterator<Item = &str> {
    mounts(top).filter_map(|m| m.get("destination").and_then(Value::as_str))
}

fn utf8(path: &Path) -> Result<&str, SpecError> {
    path.to_str()
        .ok_or_else(|| SpecError::NotUtf8(path.to_path_buf()))
}

/// Whether `spec`'s `hooks.prestart` or `hooks.createRuntime` already holds `hook` or a
/// hook that does its job (one of [`KNOWN_HOOK_NAMES`]); [`apply`] then adds none.
pub fn has_driver_hook(spec: &Value, hook: &HookEntry) -> Result<bool, SpecError> {
    hooks_include(top(spec)?, hook)
}

/// Whether `spec` runs nvc's hook (`hook_path`, or a program named `nvc-hook`) at
/// `hooks.poststop`, where it takes away what nvc made in the rootfs: as `nvc-hook
/// poststop` (the shim's), or as the prestart command a hooks.d file lists for both
/// stages. A spec that cannot be read as one has none.
pub fn has_undo_hook(spec: &Value, hook_path: &Path) -> bool {
    spec.pointer("/hooks/poststop")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("path").and_then(Value::as_str))
        .map(Path::new)
        .any(|path| path == hook_path || path.file_name().is_some_and(|n| n == "nvc-hook"))
}

/// Whether `spec` is Podman's (libpod's annotation `io.container.manager: libpod`).
/// Podman runs a hooks.d file's `poststop` stage itself, after the runtime has deleted
/// the container, and leaves that stage out of the spec it gives the runtime: nvc's
/// hooks.d file lists its hook for `poststop` too, so a prestart hook Podman ran from it
/// is followed by nvc's poststop all the same.
pub fn from_podman(spec: &Value) -> bool {
    spec.pointer("/annotations/io.container.manager")
        .and_then(Value::as_str)
        == Some("libpod")
}

fn hooks_include(top: &Map<String, Value>, hook: &HookEntry) -> Result<bool, SpecError> {
    let Some(hooks) = object(top, "hooks", "hooks")? else {
        return Ok(false);
    };
    for stage in ["prestart", "createRuntime"] {
        for entry in array(hooks, stage, &format!("hooks.{stage}"))? {
            let Some(path) = entry.get("path").and_then(Value::as_str) else {
                continue;
            };
            let path = Path::new(path);
            let known = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| KNOWN_HOOK_NAMES.contains(&n));
            if known || path == hook.path {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The annotation that makes crun write its hooks' stderr to a file, here the runtime's
/// own stderr, where runc writes it and the engine shows it.
pub const CRUN_HOOKS_STDERR: &str = "run.oci.hooks.stderr";

/// Adds the [`CRUN_HOOKS_STDERR`] annotation, naming `/dev/stderr`, unless the spec has
/// one; returns whether anything changed. For crun alone: crun sends a hook's stderr
/// nowhere unless this names a file, so the hook's refusal ("cuda>=13.0 is not met")
/// would reach no one, only "error executing hook". Other runtimes ignore it, but every
/// hook reads the annotations in the container's state, and a runtime that runs them
/// must hand over the annotations the user wrote, no more (OCI runtime spec, state).
/// A field of the wrong type is an error, and `spec` is then left as it was.
pub fn route_crun_hook_stderr(spec: &mut Value) -> Result<bool, SpecError> {
    let found = type_name(spec);
    let Value::Object(top) = spec else {
        return Err(SpecError::WrongType {
            field: "top level".into(),
            expected: "an object",
            found,
        });
    };
    let annotations = object_mut(top, "annotations", "annotations")?;
    if annotations.contains_key(CRUN_HOOKS_STDERR) {
        return Ok(false);
    }
    annotations.insert(CRUN_HOOKS_STDERR.into(), json!("/dev/stderr"));
    Ok(true)
}

/// Adds `edits.device_nodes` and `hook` to `spec`; returns whether anything changed.
///
/// - `hook` goes to `hooks.prestart` unless a prestart or createRuntime hook is
///   already `hook.path` or named as one of [`KNOWN_HOOK_NAMES`]; with it, the same
///   program as `<name> poststop` to `hooks.poststop` (it takes away what the prestart
///   hook made in the rootfs). Under crun, [`route_crun_hook_stderr`] too.
/// - Each device node goes to `linux.devices` unless a device has its path, and its
///   allow rule (`rwm`) to `linux.resources.devices` unless the same rule is there: runc
///   then creates the nodes and opens the device cgroup (v1 and v2) itself.
///
/// Missing objects and arrays are created (null counts as missing); a field of another
/// JSON type is an error, and on error `spec` is left as it was. Every other field keeps
/// its value and place, and applying the result again changes nothing.
pub fn apply(
    spec: &mut Value,
    edits: &ContainerEdits,
    hook: &HookEntry,
) -> Result<bool, SpecError> {
    let mut edited = spec.clone();
    let changed = apply_to(&mut edited, edits, hook)?;
    if changed {
        *spec = edited;
    }
    Ok(changed)
}

/// [`apply`] to a spec the caller gives up on error: edited where it is, without the copy
/// [`apply`] makes to leave its spec as it was when a field has the wrong type (a spec
/// half edited then is dropped; only the error is returned). The runtime shim, which
/// writes nothing on error, takes this one: the copy and the freeing of the spec it
/// replaced were 7 % of the shim's instructions for a GPU container. Returns the edited
/// spec and whether anything changed.
pub fn apply_owned(
    mut spec: Value,
    edits: &ContainerEdits,
    hook: &HookEntry,
) -> Result<(Value, bool), SpecError> {
    let changed = apply_to(&mut spec, edits, hook)?;
    Ok((spec, changed))
}

fn apply_to(spec: &mut Value, edits: &ContainerEdits, hook: &HookEntry) -> Result<bool, SpecError> {
    let found = type_name(spec);
    let Value::Object(top) = spec else {
        return Err(SpecError::WrongType {
            field: "top level".into(),
            expected: "an object",
            found,
        });
    };
    let mut changed = false;

    if !hooks_include(top, hook)? {
        let mut entry = json!({
            "path": utf8(&hook.path)?,
            "args": hook.args,
            "env": hook.env,
        });
        if let (Some(timeout), Value::Object(fields)) = (hook.timeout, &mut entry) {
            fields.insert("timeout".into(), json!(timeout));
        }
        // Its poststop twin takes away what the prestart hook made in the rootfs.
        let poststop = hook.poststop.then(|| {
            let mut poststop = entry.clone();
            poststop["args"] = json!([
                hook.args.first().map_or("nvc-hook", String::as_str),
                "poststop"
            ]);
            poststop
        });
        let hooks = object_mut(top, "hooks", "hooks")?;
        array_mut(hooks, "prestart", "hooks.prestart")?.push(entry);
        if let Some(poststop) = poststop {
            array_mut(hooks, "poststop", "hooks.poststop")?.push(poststop);
        }
        changed = true;
    }

    // Read first, so nothing is created when nothing is added.
    let linux = object(top, "linux", "linux")?;
    let mut paths = BTreeSet::new();
    let mut rules = Vec::new();
    // A node that is not at its own path on the host (a dev root that is not `/`) is
    // given as a bind mount from where it is; one at its own path as a device the runtime
    // makes. A runtime that cannot make a node binds `linux.devices` from the same path
    // on the host instead: always in a user namespace, and runc (1.1 at least) whenever
    // mknod is refused, as it now and then is on cgroup v1 while containers start at
    // once. That path would not be the node elsewhere; a bind mount from where the node
    // is works either way.
    let mut mount_destinations: BTreeSet<String> = destinations(top).map(str::to_string).collect();
    if let Some(linux) = linux {
        for entry in array(linux, "devices", "linux.devices")? {
            if let Some(p) = entry.get("path").and_then(Value::as_str) {
                paths.insert(p.to_string());
            }
        }
        if let Some(resources) = object(linux, "resources", "linux.resources")? {
            rules = array(resources, "devices", "linux.resources.devices")?.to_vec();
        }
    }
    let mut new_devices = Vec::new();
    let mut new_mounts = Vec::new();
    let mut new_rules = Vec::new();
    for node in &edits.device_nodes {
        let path = utf8(&node.path)?;
        if node.host_path != node.path {
            if !paths.contains(path) && mount_destinations.insert(path.to_string()) {
                new_mounts.push(json!({
                    "destination": path,
                    "type": "bind",
                    "source": utf8(&node.host_path)?,
                    "options": ["bind", "nosuid", "noexec"],
                }));
            }
        } else if !mount_destinations.contains(path) && paths.insert(path.to_string()) {
            new_devices.push(json!({
                "path": path,
                "type": "c",
                "major": node.major,
                "minor": node.minor,
                "fileMode": node.file_mode,
                "uid": node.uid,
                "gid": node.gid,
            }));
        }
        let rule = json!({
            "allow": true,
            "type": "c",
            "major": node.major,
            "minor": node.minor,
            "access": "rwm",
        });
        if !rules.contains(&rule) {
            rules.push(rule.clone());
            new_rules.push(rule);
        }
    }
    if !new_devices.is_empty() {
        let linux = object_mut(top, "linux", "linux")?;
        array_mut(linux, "devices", "linux.devices")?.extend(new_devices);
        changed = true;
    }
    if !new_mounts.is_empty() {
        array_mut(top, "mounts", "mounts")?.extend(new_mounts);
        changed = true;
    }
    if !new_rules.is_empty() {
        let linux = object_mut(top, "linux", "linux")?;
        let resources = object_mut(linux, "resources", "linux.resources")?;
        array_mut(resources, "devices", "linux.resources.devices")?.extend(new_rules);
        changed = true;
    }
    Ok(changed)
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SpecError {
    let path = path.to_path_buf();
    move |source| SpecError::Io { op, path, source }
}

/// Reads the spec at `path` through `probe` (at most [`MAX_SPEC_SIZE`] bytes) and
/// parses it ([`parse_spec`]).
pub fn read_spec(probe: &dyn HostProbe, path: &Path) -> Result<Value, SpecError> {
    let (bytes, more) = probe
        .read(path, MAX_SPEC_SIZE as usize)
        .map_err(io_error("read", path))?;
    parse_spec(&bytes, more, path)
}

/// The rootfs of the bundle at `bundle` as [`view`] finds it (`root.path`, relative to
/// the bundle), from its spec at `path`, read through `probe`: every other field is
/// skipped unparsed, as the poststop hook needs only this one.
pub fn read_rootfs(
    probe: &dyn HostProbe,
    path: &Path,
    bundle: &Path,
) -> Result<PathBuf, SpecError> {
    #[derive(serde::Deserialize)]
    struct Root {
        #[serde(default)]
        path: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct RootOnly {
        #[serde(default)]
        root: Option<Root>,
    }
    let (bytes, more) = probe
        .read(path, MAX_SPEC_SIZE as usize)
        .map_err(io_error("read", path))?;
    let spec: RootOnly = parse_as(&bytes, more, path)?;
    match spec.root {
        None => Err(SpecError::Missing("root")),
        Some(Root { path: Some(p) }) if !p.is_empty() => Ok(bundle.join(p)),
        Some(_) => Err(SpecError::Missing("root.path")),
    }
}

/// The [`view`] of the spec at `path` of the bundle at `bundle`, read through `probe`:
/// typed, every field the view does not use skipped unparsed, where the spec is as a
/// runtime writes it; else (a field of another type, say) parsed as [`read_spec`] does,
/// for the same result or the same errors: `Err` where [`read_spec`] fails (the file),
/// `Ok(Err)` where [`view`] does (what the spec says). For a caller that needs nothing
/// else of the spec (the runtime deciding that a container asks for no GPU).
pub fn read_view(
    probe: &dyn HostProbe,
    path: &Path,
    bundle: &Path,
) -> Result<Result<SpecView, SpecError>, SpecError> {
    let (bytes, more) = probe
        .read(path, MAX_SPEC_SIZE as usize)
        .map_err(io_error("read", path))?;
    if !more && bytes.len() as u64 <= MAX_SPEC_SIZE {
        if let Some(view) = typed::view(&bytes, bundle) {
            return Ok(Ok(view));
        }
    }
    Ok(view(&parse_spec(&bytes, more, path)?, bundle))
}

/// Parses the spec read from `path`: `bytes`, cut at [`MAX_SPEC_SIZE`], and whether the
/// file had `more`.
pub fn parse_spec(bytes: &[u8], more: bool, path: &Path) -> Result<Value, SpecError> {
    parse_as(bytes, more, path)
}

/// [`parse_spec`] into `T`: what of the spec `T` names.
fn parse_as<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    more: bool,
    path: &Path,
) -> Result<T, SpecError> {
    if more || bytes.len() as u64 > MAX_SPEC_SIZE {
        return Err(SpecError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_SPEC_SIZE,
        });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(SpecError::Empty(path.to_path_buf()));
    }
    serde_json::from_slice(bytes).map_err(|source| SpecError::Parse {
        path: path.to_path_buf(),
        line: source.line(),
        column: source.column(),
        source,
    })
}

/// The bytes to save for `spec`: compact JSON, as Docker and containerd write specs.
pub fn to_bytes(spec: &Value) -> Result<Vec<u8>, SpecError> {
    serde_json::to_vec(spec).map_err(SpecError::Serialize)
}

mod typed;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::DeviceNode;
    use crate::probe::TreeProbe;
    use std::fs;

    fn node(path: &str, major: u32, minor: u32) -> DeviceNode {
        DeviceNode::in_spec(Path::new(path), Path::new("/"), major, minor)
    }

    fn hook() -> HookEntry {
        HookEntry {
            path: PathBuf::from("/usr/bin/nvc-hook"),
            args: vec!["nvc-hook".into(), "prestart".into()],
            env: vec!["PATH=/usr/bin:/bin".into()],
            timeout: Some(32),
            poststop: true,
        }
    }

    fn edits() -> ContainerEdits {
        ContainerEdits {
            device_nodes: vec![
                node("/dev/nvidiactl", 195, 255),
                node("/dev/nvidia0", 195, 0),
            ],
            ..ContainerEdits::default()
        }
    }

    fn minimal() -> Value {
        json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}})
    }

    #[test]
    fn nodes_elsewhere_on_the_host_become_bind_mounts() {
        let mut edits = edits();
        edits.device_nodes[1].host_path = PathBuf::from("/opt/driver/dev/nvidia0");
        let mut spec = json!({
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"namespaces": [{"type": "mount"}, {"type": "user"}]}
        });
        assert!(apply(&mut spec, &edits, &hook()).unwrap());
        // The node at its usual host path stays a device; the other is bound from where
        // it is, and both get their cgroup rule.
        let devices: Vec<&str> = spec["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(devices, ["/dev/nvidiactl"]);
        assert_eq!(
            spec["mounts"][1],
            json!({"destination": "/dev/nvidia0", "type": "bind",
                   "source": "/opt/driver/dev/nvidia0", "options": ["bind", "nosuid", "noexec"]})
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let once = spec.clone();
        assert!(!apply(&mut spec, &edits, &hook()).unwrap());
        assert_eq!(spec, once);
        let view = view(&spec, Path::new("/b")).unwrap();
        assert!(view
            .mount_destinations
            .contains(&PathBuf::from("/dev/nvidia0")));
        // Without a user namespace too: the runtime makes the node at its own path, and
        // the other is bound from where it is (runc, refused mknod, would bind it from
        // /dev/nvidia0 on the host, which is not that node).
        let mut plain = json!({"root": {"path": "rootfs"}});
        assert!(apply(&mut plain, &edits, &hook()).unwrap());
        assert_eq!(plain["linux"]["devices"].as_array().unwrap().len(), 1);
        assert_eq!(plain["mounts"].as_array().unwrap().len(), 1);
        assert_eq!(plain["mounts"][0]["source"], "/opt/driver/dev/nvidia0");
        assert_eq!(
            plain["linux"]["resources"]["devices"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn view_reads_the_fields() {
        let spec = json!({
            "process": {
                "env": ["A=1", "NVIDIA_VISIBLE_DEVICES=all"],
                "capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}
            },
            "root": {"path": "rootfs", "readonly": true},
            "linux": {"devices": [
                {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229},
                {"path": "/dev/fifo", "type": "p"}
            ]},
            "annotations": {"io.x": "y"}
        });
        let v = view(&spec, Path::new("/b")).unwrap();
        assert_eq!(v.env, vec!["A=1", "NVIDIA_VISIBLE_DEVICES=all"]);
        assert!(v.privileged);
        assert_eq!(v.rootfs, PathBuf::from("/b/rootfs"));
        assert!(v.readonly);
        assert_eq!(v.devices, vec![(PathBuf::from("/dev/fuse"), 10, 229)]);
        assert_eq!(v.annotations.get("io.x").map(String::as_str), Some("y"));

        let v = view(&json!({"root": {"path": "/abs/rootfs"}}), Path::new("/b")).unwrap();
        assert_eq!(v.rootfs, PathBuf::from("/abs/rootfs"));
        assert!(v.env.is_empty());
        assert!(!v.privileged);
        assert!(!v.readonly);
    }

    #[test]
    fn view_errors() {
        let cases = [
            (json!({}), "the spec has no root"),
            (json!({"root": {}}), "the spec has no root.path"),
            (json!({"root": {"path": ""}}), "the spec has no root.path"),
            (
                json!({"root": "rootfs"}),
                "the spec's root is a string, expected an object",
            ),
            (
                json!({"root": {"path": 1}}),
                "the spec's root.path is a number, expected a string",
            ),
            (
                json!({"root": {"path": "r"}, "process": {"env": "A=1"}}),
                "the spec's process.env is a string, expected an array",
            ),
            (
                json!({"root": {"path": "r"}, "process": {"env": ["A=1", 2]}}),
                "the spec's process.env[1] is a number, expected a string",
            ),
            (
                json!({"root": {"path": "r"}, "linux": {"devices": [{"path": "/dev/x", "major": -1, "minor": 0}]}}),
                "the spec's linux.devices[0].major is a number, expected a 32-bit unsigned number",
            ),
            (
                json!([]),
                "the spec's top level is an array, expected an object",
            ),
        ];
        for (spec, want) in cases {
            let got = view(&spec, Path::new("/b")).unwrap_err().to_string();
            assert_eq!(got, want, "{spec}");
        }
    }

    /// What [`read_view`] gives for the spec `text`, beside [`view`] of it as a `Value`.
    fn both_views(text: &str) -> (Result<SpecView, String>, Result<SpecView, String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        fs::write(&path, text).unwrap();
        let read = match read_view(&TreeProbe::new(), &path, Path::new("/b")) {
            Ok(view) => view.map_err(|e| e.to_string()),
            Err(e) => Err(format!("file: {e}")),
        };
        let value = match parse_spec(text.as_bytes(), false, &path) {
            Ok(spec) => view(&spec, Path::new("/b")).map_err(|e| e.to_string()),
            Err(e) => Err(format!("file: {e}")),
        };
        (read, value)
    }

    #[test]
    fn read_view_gives_what_view_gives_and_reads_typical_specs_typed() {
        // As runc spec and the engines write them: typed, and the same view.
        let typical = r#"{"ociVersion":"1.0.2","process":{"terminal":false,"user":{"uid":0,"gid":0},
            "args":["sh"],"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=all","CUDA_VERSION=12.4"],
            "cwd":"/","capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_ADMIN"],"effective":[]},
            "rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}],"noNewPrivileges":true},
            "root":{"path":"rootfs","readonly":true},"hostname":"x",
            "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
              {"destination":"/dev","type":"tmpfs","source":"tmpfs","options":["nosuid","mode=755"]},
              {"destination":"/run","type":"tmpfs","source":"tmpfs","options":["rbind"]},
              {"destination":"/var/run/nvidia-container-devices/GPU-1","type":"bind","source":"/dev/null"}],
            "annotations":{"io.kubernetes.cri.container-type":"container","cdi.k8s.io/x":"nvidia.com/gpu=0"},
            "linux":{"devices":[{"path":"/dev/fuse","type":"c","major":10,"minor":229,"fileMode":438},
              {"path":"/dev/fifo","type":"p"}],"namespaces":[{"type":"mount"}],
              "resources":{"devices":[{"allow":false,"access":"rwm"}]}}}"#;
        let minimal = r#"{"root":{"path":"/abs/rootfs"}}"#;
        let nulls = r#"{"root":{"path":"r","readonly":null},"process":null,"linux":{"devices":null},
            "annotations":null,"mounts":null}"#;
        let joined = r#"{"root":{"path":"r"},"linux":{"namespaces":[{"type":"pid"},
            {"type":"mount","path":"/proc/7/ns/mnt"},{"type":"mount"}]}}"#;
        let no_mount = r#"{"root":{"path":"r"},"linux":{"namespaces":[{"type":"pid","path":""}]}}"#;
        let empty_path =
            r#"{"root":{"path":"r"},"linux":{"namespaces":[{"type":"mount","path":""}]}}"#;
        for text in [typical, minimal, nulls, joined, no_mount, empty_path] {
            let parsed: Value = serde_json::from_str(text).unwrap();
            let typed = typed::view(text.as_bytes(), Path::new("/b"));
            assert_eq!(
                typed.as_ref(),
                view(&parsed, Path::new("/b")).ok().as_ref(),
                "{text}"
            );
            assert!(typed.is_some(), "read typed: {text}");
            let (read, value) = both_views(text);
            assert_eq!(read, value);
        }
        // What the typed read does not take as is gives the same view or the same error.
        for text in [
            "",
            "[]",
            "{",
            "{}",
            r#"{"root":["rootfs",true]}"#,
            r#"{"root":{"path":""}}"#,
            r#"{"root":{"path":"a"},"root":{"path":"b"}}"#,
            r#"{"root":{"path":"r"},"process":["x"]}"#,
            r#"{"root":{"path":"r"},"process":{"env":["A=1",2]}}"#,
            r#"{"root":{"path":"r"},"process":{"capabilities":[["CAP_SYS_ADMIN"]]}}"#,
            r#"{"root":{"path":"r"},"linux":{"devices":[["/dev/x",1,2]]}}"#,
            r#"{"root":{"path":"r"},"linux":{"devices":[{"path":"/dev/x","major":1.0,"minor":2}]}}"#,
            r#"{"root":{"path":"r"},"linux":{"devices":[{"major":-1,"minor":2}]}}"#,
            r#"{"root":{"path":"r"},"linux":{"devices":[{"path":"/dev/x","major":4294967296,"minor":2}]}}"#,
            r#"{"root":{"path":"r"},"mounts":["/x",{"destination":7},{"destination":"/t","type":"tmpfs","options":[1,"bind"]}]}"#,
            r#"{"root":{"path":"r"},"mounts":[{"destination":"/var/run/nvidia-container-devices/0"}]}"#,
            r#"{"root":{"path":"r"},"annotations":{"a":1}}"#,
            r#"{"root":{"path":"r"},"annotations":["a"]}"#,
            r#"{"root":{"path":"r"},"annotations":{"a":"1","a":"2"}}"#,
            r#"{"root":{"path":"r"},"linux":{"namespaces":{"type":"mount"}}}"#,
            r#"{"root":{"path":"r"},"linux":{"namespaces":["mount",{"type":"mount","path":7}]}}"#,
        ] {
            let (read, value) = both_views(text);
            assert_eq!(read, value, "{text}");
        }
    }

    #[test]
    fn the_mount_namespace_is_read_from_the_first_mount_entry() {
        let of = |namespaces: Value| {
            let spec = json!({"root": {"path": "r"}, "linux": {"namespaces": namespaces}});
            view(&spec, Path::new("/b")).unwrap().mount_namespace
        };
        assert_eq!(of(json!([{"type": "mount"}])), MountNamespace::New);
        assert_eq!(
            of(json!([{"type": "mount", "path": ""}, {"type": "mount", "path": "/x"}])),
            MountNamespace::New
        );
        assert_eq!(
            of(json!([{"type": "pid"}, {"type": "mount", "path": "/proc/7/ns/mnt"}])),
            MountNamespace::Joined(PathBuf::from("/proc/7/ns/mnt"))
        );
        for none in [
            json!([]),
            json!(null),
            json!([{"type": "pid"}, {"type": "network", "path": "/run/netns/x"}]),
            json!({"type": "mount"}),
            json!(["mount"]),
        ] {
            assert_eq!(of(none.clone()), MountNamespace::Inherited, "{none}");
        }
        let no_linux = json!({"root": {"path": "r"}});
        assert_eq!(
            view(&no_linux, Path::new("/b")).unwrap().mount_namespace,
            MountNamespace::Inherited
        );
    }

    #[test]
    fn apply_owned_edits_as_apply_does() {
        let mut with_nodes = minimal();
        apply(&mut with_nodes, &edits(), &hook()).unwrap();
        for spec in [minimal(), with_nodes] {
            let mut applied = spec.clone();
            let changed = apply(&mut applied, &edits(), &hook()).unwrap();
            assert_eq!(
                apply_owned(spec, &edits(), &hook()).unwrap(),
                (applied, changed)
            );
        }
        let mut wrong = minimal();
        wrong["linux"] = json!({"devices": "/dev/nvidia0"});
        let expected = apply(&mut wrong.clone(), &edits(), &hook()).unwrap_err();
        assert_eq!(
            apply_owned(wrong, &edits(), &hook())
                .unwrap_err()
                .to_string(),
            expected.to_string()
        );
    }

    #[test]
    fn apply_creates_what_is_missing() {
        let mut spec = minimal();
        assert!(apply(&mut spec, &edits(), &hook()).unwrap());
        assert_eq!(
            spec,
            json!({
                "ociVersion": "1.0.2",
                "root": {"path": "rootfs"},
                "hooks": {"prestart": [{
                    "path": "/usr/bin/nvc-hook",
                    "args": ["nvc-hook", "prestart"],
                    "env": ["PATH=/usr/bin:/bin"],
                    "timeout": 32
                }], "poststop": [{
                    "path": "/usr/bin/nvc-hook",
                    "args": ["nvc-hook", "poststop"],
                    "env": ["PATH=/usr/bin:/bin"],
                    "timeout": 32
                }]},
                "linux": {
                    "devices": [
                        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255, "fileMode": 438, "uid": 0, "gid": 0},
                        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438, "uid": 0, "gid": 0}
                    ],
                    "resources": {"devices": [
                        {"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rwm"},
                        {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}
                    ]}
                }
            })
        );
        let once = to_bytes(&spec).unwrap();
        assert!(!apply(&mut spec, &edits(), &hook()).unwrap());
        assert_eq!(to_bytes(&spec).unwrap(), once);
    }

    #[test]
    fn a_hook_without_poststop_gets_no_poststop_twin() {
        let mut spec = minimal();
        let alone = HookEntry {
            poststop: false,
            ..hook()
        };
        assert!(apply(&mut spec, &ContainerEdits::default(), &alone).unwrap());
        assert_eq!(spec["hooks"]["prestart"].as_array().map(Vec::len), Some(1));
        assert!(spec["hooks"].get("poststop").is_none(), "{spec}");
        assert!(!has_undo_hook(&spec, &alone.path));
        let mut twinned = minimal();
        assert!(apply(&mut twinned, &ContainerEdits::default(), &hook()).unwrap());
        assert_eq!(
            twinned["hooks"]["poststop"][0]["args"],
            json!(["nvc-hook", "poststop"])
        );
        assert!(has_undo_hook(&twinned, &alone.path));
    }

    #[test]
    fn podman_s_specs_are_known_by_libpod_s_annotation() {
        let podman = json!({"annotations": {"io.container.manager": "libpod"}});
        assert!(from_podman(&podman));
        for other in [
            json!({}),
            json!({"annotations": {"io.container.manager": "cri-o"}}),
            json!({"annotations": {"io.container.manager": 1}}),
            json!({"annotations": []}),
        ] {
            assert!(!from_podman(&other), "{other}");
        }
    }

    #[test]
    fn kubernetes_containers_are_known_by_their_cri_annotation() {
        let of = |pairs: &[(&str, &str)]| {
            let annotations: serde_json::Map<String, Value> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            let spec = json!({"root": {"path": "r"}, "annotations": annotations});
            view(&spec, Path::new("/b")).unwrap().from_kubernetes()
        };
        assert!(of(&[(CONTAINERD_CRI_TYPE, "container")]));
        assert!(of(&[(CONTAINERD_CRI_TYPE, "sandbox")]));
        assert!(of(&[(CRI_O_TYPE, "container")]));
        assert!(!of(&[]));
        assert!(!of(&[(CONTAINERD_CRI_TYPE, "")]));
        assert!(!of(&[(CONTAINERD_CRI_TYPE, "something-else")]));
        assert!(!of(&[("io.kubernetes.cri.sandbox-id", "x")]));
    }

    #[test]
    fn a_hook_without_timeout_has_no_timeout_field() {
        let mut spec = minimal();
        let untimed = HookEntry {
            timeout: None,
            ..hook()
        };
        assert!(apply(&mut spec, &ContainerEdits::default(), &untimed).unwrap());
        let entry = &spec["hooks"]["prestart"][0];
        assert_eq!(entry["path"], "/usr/bin/nvc-hook");
        assert!(entry.get("timeout").is_none(), "{entry}");
        // An entry written without a timeout (by an older nvc) is still nvc's hook.
        assert!(has_driver_hook(&spec, &hook()).unwrap());
        assert!(!apply(&mut spec, &ContainerEdits::default(), &hook()).unwrap());
        assert_eq!(spec["hooks"]["prestart"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn apply_adds_no_annotation() {
        let mut spec = minimal();
        assert!(apply(&mut spec, &edits(), &hook()).unwrap());
        assert!(spec.get("annotations").is_none(), "{spec}");
        let mut again = minimal();
        again["annotations"] = json!({"io.x": "y"});
        assert!(apply(&mut again, &edits(), &hook()).unwrap());
        assert_eq!(again["annotations"], json!({"io.x": "y"}));
    }

    #[test]
    fn crun_hook_stderr_is_routed_once_and_a_spec_s_own_is_kept() {
        let mut spec = minimal();
        assert!(route_crun_hook_stderr(&mut spec).unwrap());
        assert_eq!(
            spec["annotations"],
            json!({"run.oci.hooks.stderr": "/dev/stderr"})
        );
        let once = to_bytes(&spec).unwrap();
        assert!(!route_crun_hook_stderr(&mut spec).unwrap());
        assert_eq!(to_bytes(&spec).unwrap(), once);

        let mut own = minimal();
        own["annotations"] = json!({"run.oci.hooks.stderr": "/var/log/hooks.err", "io.x": "y"});
        assert!(!route_crun_hook_stderr(&mut own).unwrap());
        assert_eq!(
            own["annotations"],
            json!({"run.oci.hooks.stderr": "/var/log/hooks.err", "io.x": "y"})
        );
        // Null is missing; another type is an error that leaves the spec as it was.
        let mut null = minimal();
        null["annotations"] = Value::Null;
        assert!(route_crun_hook_stderr(&mut null).unwrap());
        let mut wrong = minimal();
        wrong["annotations"] = json!([]);
        let before = wrong.clone();
        let e = route_crun_hook_stderr(&mut wrong).unwrap_err();
        assert!(e.to_string().contains("annotations"), "{e}");
        assert_eq!(wrong, before);
    }

    #[test]
    fn apply_treats_null_as_missing() {
        let mut spec = json!({"root": {"path": "r"}, "hooks": null, "linux": {"devices": null, "resources": null}});
        assert!(apply(&mut spec, &edits(), &hook()).unwrap());
        assert_eq!(spec["hooks"]["prestart"].as_array().map(Vec::len), Some(1));
        assert_eq!(spec["linux"]["devices"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            spec["linux"]["resources"]["devices"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn apply_with_nothing_to_add_creates_nothing() {
        let mut spec =
            json!({"root": {"path": "r"}, "hooks": {"prestart": [{"path": "/usr/bin/nvc-hook"}]}});
        let before = spec.clone();
        assert!(!apply(&mut spec, &ContainerEdits::default(), &hook()).unwrap());
        assert_eq!(spec, before);
        assert!(spec.get("linux").is_none());
    }

    #[test]
    fn existing_hooks_are_not_duplicated() {
        for (stage, path) in [
            ("prestart", "/usr/bin/nvidia-container-runtime-hook"),
            ("prestart", "/usr/local/bin/nvc-hook"),
            ("createRuntime", "/usr/bin/nvidia-container-toolkit"),
            ("prestart", "/usr/bin/nvc-hook"),
        ] {
            let mut spec = json!({"root": {"path": "r"}, "hooks": {stage: [{"path": path, "args": ["x", "prestart"]}]}});
            apply(&mut spec, &edits(), &hook()).unwrap();
            let hooks = &spec["hooks"];
            let count = ["prestart", "createRuntime"]
                .iter()
                .filter_map(|s| hooks.get(*s).and_then(Value::as_array))
                .map(Vec::len)
                .sum::<usize>();
            assert_eq!(count, 1, "{stage} {path}: {hooks}");
        }
        // Another hook does not count.
        let mut spec =
            json!({"root": {"path": "r"}, "hooks": {"prestart": [{"path": "/usr/bin/other"}]}});
        apply(&mut spec, &edits(), &hook()).unwrap();
        assert_eq!(spec["hooks"]["prestart"].as_array().map(Vec::len), Some(2));
        assert_eq!(spec["hooks"]["prestart"][0]["path"], "/usr/bin/other");
    }

    #[test]
    fn existing_devices_and_rules_are_kept() {
        let mut spec = json!({
            "root": {"path": "r"},
            "linux": {
                "devices": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 384}],
                "resources": {"devices": [
                    {"allow": false, "access": "rwm"},
                    {"access": "rwm", "minor": 255, "major": 195, "type": "c", "allow": true}
                ]}
            }
        });
        apply(&mut spec, &edits(), &hook()).unwrap();
        let devices = spec["linux"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(
            devices[0]["fileMode"], 384,
            "the existing device is kept as it was"
        );
        assert_eq!(devices[1]["path"], "/dev/nvidiactl");
        let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
        // The same rule in another key order counts as present.
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[2]["minor"], 0);
    }

    #[test]
    fn wrong_types_are_errors_and_leave_the_spec_alone() {
        let cases = [
            (
                json!({"root": {"path": "r"}, "linux": {"devices": "x"}}),
                "linux.devices is a string, expected an array",
            ),
            (
                json!({"root": {"path": "r"}, "linux": []}),
                "linux is an array, expected an object",
            ),
            (
                json!({"root": {"path": "r"}, "linux": {"resources": 1}}),
                "linux.resources is a number",
            ),
            (
                json!({"root": {"path": "r"}, "linux": {"resources": {"devices": {}}}}),
                "linux.resources.devices is an object",
            ),
            (
                json!({"root": {"path": "r"}, "hooks": []}),
                "hooks is an array",
            ),
            (
                json!({"root": {"path": "r"}, "hooks": {"prestart": {}}}),
                "hooks.prestart is an object",
            ),
            (
                json!({"root": {"path": "r"}, "hooks": {"createRuntime": "x"}}),
                "hooks.createRuntime is a string",
            ),
            (json!("spec"), "top level is a string"),
        ];
        for (spec, want) in cases {
            let mut edited = spec.clone();
            let got = apply(&mut edited, &edits(), &hook())
                .unwrap_err()
                .to_string();
            assert!(got.contains(want), "{got} lacks {want}");
            assert_eq!(edited, spec, "unchanged on error");
        }
    }

    #[test]
    fn read_spec_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let e = read_spec(&TreeProbe::new(), &path).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");

        fs::write(&path, "{\n  \"root\": {\"path\": \"r\"},\n  \"x\": ]\n}").unwrap();
        let e = read_spec(&TreeProbe::new(), &path).unwrap_err();
        let chain = crate::report::error_chain(&e);
        assert!(
            chain.starts_with(&format!("invalid JSON in {}: ", path.display())),
            "{chain}"
        );
        assert!(chain.contains("line 3 column 8"), "{chain}");
        assert!(
            matches!(
                e,
                SpecError::Parse {
                    line: 3,
                    column: 8,
                    ..
                }
            ),
            "{e:?}"
        );

        let big = fs::File::create(&path).unwrap();
        big.set_len(MAX_SPEC_SIZE + 1).unwrap();
        let e = read_spec(&TreeProbe::new(), &path).unwrap_err();
        assert!(matches!(e, SpecError::TooLarge { .. }), "{e:?}");
    }

    #[test]
    fn read_rootfs_finds_the_rootfs_as_view_does_and_parses_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path();
        let path = bundle.join("config.json");
        for (root, want) in [
            ("rootfs", bundle.join("rootfs")),
            ("/abs/r", PathBuf::from("/abs/r")),
        ] {
            // A field the view would refuse is skipped, not parsed.
            let spec = json!({"root": {"path": root, "readonly": true}, "process": {"env": 7}});
            fs::write(&path, spec.to_string()).unwrap();
            assert_eq!(read_rootfs(&TreeProbe::new(), &path, bundle).unwrap(), want);
            let full = json!({"root": {"path": root}});
            assert_eq!(
                view(&full, bundle).unwrap().rootfs,
                want,
                "the same as view's"
            );
        }
        for (spec, want) in [
            (json!({}), "root"),
            (json!({"root": {}}), "root.path"),
            (json!({"root": {"path": ""}}), "root.path"),
        ] {
            fs::write(&path, spec.to_string()).unwrap();
            let e = read_rootfs(&TreeProbe::new(), &path, bundle).unwrap_err();
            assert!(
                matches!(e, SpecError::Missing(field) if field == want),
                "{e:?}"
            );
        }
        fs::write(&path, r#"{"root": {"path": 5}}"#).unwrap();
        let chain =
            crate::report::error_chain(&read_rootfs(&TreeProbe::new(), &path, bundle).unwrap_err());
        assert!(
            chain.contains("invalid type: integer `5`, expected a string"),
            "{chain}"
        );
        fs::write(&path, " ").unwrap();
        let e = read_rootfs(&TreeProbe::new(), &path, bundle).unwrap_err();
        assert!(matches!(e, SpecError::Empty(_)), "{e:?}");
    }

    #[test]
    fn bytes_are_compact_json_in_the_spec_order() {
        let spec = json!({"b": 1, "a": [true, null]});
        let bytes = to_bytes(&spec).unwrap();
        assert_eq!(bytes, br#"{"b":1,"a":[true,null]}"#);
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), spec);
    }

    #[test]
    fn empty_and_truncated_files_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        for empty in ["", " \n\t"] {
            fs::write(&path, empty).unwrap();
            let e = read_spec(&TreeProbe::new(), &path).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{} is empty: expected the container's OCI spec, a JSON object",
                    path.display()
                )
            );
        }
        fs::write(
            &path,
            "{\"root\": {\"path\": \"r\"}, \"process\": {\"env\": [\"A",
        )
        .unwrap();
        let chain = crate::report::error_chain(&read_spec(&TreeProbe::new(), &path).unwrap_err());
        assert!(
            chain.starts_with(&format!(
                "invalid JSON in {} (it ends early: truncated?): EOF while parsing",
                path.display()
            )),
            "{chain}"
        );
        fs::write(&path, b"{\"a\": \"\xff\"}").unwrap();
        let chain = crate::report::error_chain(&read_spec(&TreeProbe::new(), &path).unwrap_err());
        assert!(
            chain.contains("(a string holds bytes that are not UTF-8"),
            "{chain}"
        );
        fs::write(&path, "{\"a\": \"\\ud800\"}").unwrap();
        let chain = crate::report::error_chain(&read_spec(&TreeProbe::new(), &path).unwrap_err());
        assert!(chain.contains("half a surrogate pair"), "{chain}");
        fs::write(&path, "{\"root\": 1,}").unwrap();
        let chain = crate::report::error_chain(&read_spec(&TreeProbe::new(), &path).unwrap_err());
        assert!(!chain.contains("truncated"), "{chain}");
    }
}
