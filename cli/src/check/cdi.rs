//! CDI specs for `nvidia.com/gpu`: found in the CDI folders (JSON and YAML), and compared
//! with what discovery finds (GPU UUIDs, device node numbers, the host files they mount,
//! the hooks they run, among them the `/proc/driver/nvidia` mask `nvc cdi generate` adds
//! wherever there are GPUs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use libnvc::cdi::hooks;
use libnvc::discover::Driver;
use libnvc::report::error_chain;
use serde_json::Value;

use super::engines::sorted_files;
use super::{show, Row};

/// The CDI kind nvc's specs have.
pub const KIND: &str = "nvidia.com/gpu";

/// A CDI spec file of kind [`KIND`].
#[derive(Debug, Clone)]
pub struct SpecFile {
    /// The file.
    pub path: PathBuf,
    /// What it holds.
    pub content: SpecContent,
}

/// What a spec file holds, as far as nvc can read it.
#[derive(Debug, Clone)]
pub enum SpecContent {
    /// The spec as JSON: a JSON file as it is (every field kept), a YAML file as libnvc's
    /// CDI reader understands it.
    Parsed(Value),
    /// A file of the kind that does not parse: why.
    Invalid(String),
}

impl SpecFile {
    /// Whether an engine can load it.
    pub fn usable(&self) -> bool {
        !matches!(self.content, SpecContent::Invalid(_))
    }
}

/// Every spec of kind [`KIND`] in `dirs`, in folder then name order.
pub fn scan(dirs: &[PathBuf]) -> Vec<SpecFile> {
    let mut out = Vec::new();
    for dir in dirs {
        for path in sorted_files(dir, Some(&["json", "yaml", "yml"])) {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let is_json = path.extension().is_some_and(|e| e == "json");
            let content = if is_json {
                match serde_json::from_str::<Value>(&text) {
                    Ok(v) if v.get("kind").and_then(Value::as_str) == Some(KIND) => {
                        SpecContent::Parsed(v)
                    }
                    Ok(_) => continue,
                    Err(e) if text.contains(KIND) => {
                        SpecContent::Invalid(format!("not valid JSON: {e}"))
                    }
                    Err(_) => continue,
                }
            } else if yaml_kind(&text).as_deref() == Some(KIND) {
                match libnvc::cdi::Spec::parse(&text) {
                    Ok(spec) => match serde_json::to_value(&spec) {
                        Ok(v) => SpecContent::Parsed(v),
                        Err(e) => SpecContent::Invalid(e.to_string()),
                    },
                    Err(e) => SpecContent::Invalid(format!("not a CDI spec: {}", error_chain(&e))),
                }
            } else {
                continue;
            };
            out.push(SpecFile { path, content });
        }
    }
    out
}

/// The top-level `kind:` of a YAML document, read by line.
fn yaml_kind(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("kind:"))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
}

/// One row per spec, or one information row when there is none.
pub fn rows(specs: &[SpecFile], driver: Option<&Driver>, dirs: &[PathBuf]) -> Vec<Row> {
    const CHECK: &str = "CDI spec";
    if specs.is_empty() {
        let dirs: Vec<String> = dirs.iter().map(|d| show(d)).collect();
        return vec![Row::info(
            CHECK,
            format!(
                "no {KIND} spec in {} (only CDI-based engines need one: `nvc cdi generate --output /etc/cdi/nvidia.json`)",
                dirs.join(", ")
            ),
        )];
    }
    specs
        .iter()
        .map(|spec| {
            let path = show(&spec.path);
            let regenerate = format!("regenerate: `nvc cdi generate --output {path}`");
            match &spec.content {
                SpecContent::Invalid(e) => Row::warn(CHECK, format!("{path} is {e}"), regenerate),
                SpecContent::Parsed(json) => match driver {
                    None => Row::info(CHECK, format!("{path}: not compared, no driver")),
                    Some(driver) => {
                        let reasons = stale_reasons(json, driver);
                        if reasons.is_empty() {
                            Row::ok(CHECK, format!("{path} matches this host"))
                        } else {
                            Row::warn(
                                CHECK,
                                format!("{path} is stale: {}", summarize(&reasons)),
                                regenerate,
                            )
                        }
                    }
                },
            }
        })
        .collect()
}

fn summarize(reasons: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = reasons
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if reasons.len() > SHOWN {
        text.push_str(&format!("; and {} more", reasons.len() - SHOWN));
    }
    text
}

/// What in `spec` no longer matches `driver`: GPUs it names that the host lacks or the
/// reverse, device nodes whose numbers differ or that the host lacks, host files and
/// hooks that are gone. Empty when it is current.
pub fn stale_reasons(spec: &Value, driver: &Driver) -> Vec<String> {
    let mut reasons = Vec::new();

    let mut strings = Vec::new();
    collect_strings(spec, &mut strings);
    let spec_uuids: BTreeSet<String> = strings
        .iter()
        .flat_map(|s| gpu_uuids(s))
        .map(|u| u.to_ascii_lowercase())
        .collect();
    let host_uuids: BTreeSet<String> = driver
        .gpus
        .iter()
        .map(|g| g.uuid.to_ascii_lowercase())
        .collect();
    for u in spec_uuids.difference(&host_uuids) {
        reasons.push(format!("names {u}, which this host does not have"));
    }
    if !spec_uuids.is_empty() {
        for u in host_uuids.difference(&spec_uuids) {
            reasons.push(format!("lacks this host's {u}"));
        }
    }

    let mut host_nodes: BTreeMap<PathBuf, (u32, u32)> = BTreeMap::new();
    let nodes = driver
        .gpus
        .iter()
        .flat_map(|g| std::iter::once(&g.node).chain(g.mig.iter().flat_map(|m| m.caps.iter())))
        .chain(&driver.control_nodes)
        .chain(driver.mig_config.iter())
        .chain(driver.mig_monitor.iter())
        .chain(&driver.imex_channels);
    for n in nodes {
        host_nodes.insert(n.path.clone(), (n.major, n.minor));
    }
    let mut spec_nodes = BTreeSet::new();
    let mut entries = Vec::new();
    collect_key(spec, "deviceNodes", &mut entries);
    for node in entries
        .iter()
        .flat_map(|v| v.as_array().into_iter().flatten())
    {
        let Some(path) = node.get("path").and_then(Value::as_str) else {
            continue;
        };
        let path = PathBuf::from(path);
        let number = |k: &str| node.get(k).and_then(Value::as_u64);
        match host_nodes.get(&path) {
            Some(&(major, minor)) => {
                if let (Some(ma), Some(mi)) = (number("major"), number("minor")) {
                    if (ma, mi) != (u64::from(major), u64::from(minor)) {
                        reasons.push(format!(
                            "{} is {ma}:{mi} in the spec, {major}:{minor} on this host",
                            show(&path)
                        ));
                    }
                }
            }
            None if is_gpu_node(&path) => {
                reasons.push(format!("{} is no GPU of this host", show(&path)));
            }
            None => {}
        }
        spec_nodes.insert(path);
    }
    for g in &driver.gpus {
        if !spec_nodes.is_empty() && !spec_nodes.contains(&g.node.path) {
            reasons.push(format!("lacks {} (GPU {})", show(&g.node.path), g.index));
        }
    }

    // The files it mounts (the driver's files and its IPC sockets): there, this host's
    // driver's (not another driver root's), and of this driver's version.
    let driver_files = driver.files(None);
    let host_files: BTreeSet<&Path> = driver_files
        .host_files()
        .chain(driver.ipc.iter().map(|f| f.host_path.as_path()))
        .collect();
    let mut other_versions = BTreeSet::new();
    let mut mounts = Vec::new();
    collect_key(spec, "mounts", &mut mounts);
    for m in mounts
        .iter()
        .flat_map(|v| v.as_array().into_iter().flatten())
    {
        let Some(host) = m.get("hostPath").and_then(Value::as_str) else {
            continue;
        };
        if let Some(v) = driver_version_of(host).filter(|v| *v != driver.version) {
            other_versions.insert(v.to_string());
        }
        if !Path::new(host).exists() {
            reasons.push(format!("mounts {host}, which is gone (driver upgraded?)"));
        } else if !host_files.contains(Path::new(host)) && !driver.libraries.is_empty() {
            reasons.push(format!(
                "mounts {host}, which is no file of this host's driver (made from another \
                 driver root, {}?)",
                show(&driver.roots.root)
            ));
        }
    }
    for v in &other_versions {
        reasons.push(format!(
            "is for driver {v}, this host has {}",
            driver.version
        ));
    }
    let mut hooks = Vec::new();
    collect_key(spec, "hooks", &mut hooks);
    let mut masks_proc = false;
    for h in hooks
        .iter()
        .flat_map(|v| v.as_array().into_iter().flatten())
    {
        if let Some(path) = h.get("path").and_then(Value::as_str) {
            if !super::is_executable(Path::new(path)) {
                reasons.push(format!(
                    "runs the hook {path}, which is not an executable file"
                ));
            }
        }
        // The CUDA forward-compatibility rule compares with the driver it was made for.
        let args: Vec<&str> = h
            .get("args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(v) = args
            .windows(2)
            .find(|w| w[0] == "--cuda-compat-above")
            .map(|w| w[1])
        {
            if v != driver.version {
                reasons.push(format!(
                    "its update-ldcache hook compares CUDA compat libraries with driver {v}, \
                     this host has {}",
                    driver.version
                ));
            }
        }
        // The /proc/driver/nvidia mask reads the host's GPUs under the proc root it names.
        if let Some(root) = hooks::mask_proc_root(&args) {
            masks_proc = true;
            if root != driver.roots.proc_root {
                reasons.push(format!(
                    "its cdi-mask-proc hook reads the GPUs under {}, this host's proc root \
                     is {}",
                    show(&root),
                    show(&driver.roots.proc_root)
                ));
            }
        }
    }
    // What `nvc cdi generate` adds wherever it finds GPUs: without it, a container sees
    // every GPU's /proc/driver/nvidia folder and may make device nodes.
    if !masks_proc && !driver.gpus.is_empty() {
        reasons.push(
            "has no cdi-mask-proc hook, so its containers see every GPU in \
             /proc/driver/nvidia (made by an older nvc)"
                .to_string(),
        );
    }
    reasons
}

/// The driver version in a driver file's name (`libcuda.so.580.159.04`,
/// `.../firmware/nvidia/580.159.04/gsp_ga10x.bin`): three dot-separated numbers.
fn driver_version_of(path: &str) -> Option<&str> {
    let looks_like = |s: &str| {
        let parts: Vec<&str> = s.split('.').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some((_, v)) = path.rsplit_once(".so.") {
        if looks_like(v) {
            return Some(v);
        }
    }
    path.split('/').find(|c| looks_like(c))
}

/// `/dev/nvidia<N>`.
fn is_gpu_node(path: &Path) -> bool {
    path.to_str()
        .and_then(|p| p.strip_prefix("/dev/nvidia"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every string in `v`, keys included.
fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k);
                collect_strings(x, out);
            }
        }
        _ => {}
    }
}

/// Every value under an object key named `key`, at any depth.
fn collect_key<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| collect_key(x, key, out)),
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    out.push(x);
                }
                collect_key(x, key, out);
            }
        }
        _ => {}
    }
}

/// The `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` UUIDs in `s`.
fn gpu_uuids(s: &str) -> Vec<&str> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let len = 4 + GROUPS.iter().sum::<usize>() + GROUPS.len() - 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = s[from..].find("GPU-") {
        let start = from + at;
        from = start + 4;
        let Some(candidate) = s.get(start..start + len) else {
            break;
        };
        let body = &candidate[4..];
        let shape_ok = body.split('-').map(str::len).eq(GROUPS.iter().copied())
            && body.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit());
        let ends = !matches!(s[start + len..].bytes().next(), Some(b) if b.is_ascii_hexdigit());
        if shape_ok && ends {
            out.push(candidate);
            from = start + len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_in_strings() {
        let u = "GPU-fa4ed71e-0001-4e57-8fa4-ed71e0000001";
        assert_eq!(gpu_uuids(u), vec![u]);
        assert_eq!(
            gpu_uuids(&format!("NVIDIA_VISIBLE_DEVICES={u},GPU-x")),
            vec![u]
        );
        assert!(gpu_uuids("GPU-fa4ed71e-0001-4e57-8fa4-ed71e00000011").is_empty());
        assert!(gpu_uuids("GPU-zz").is_empty());
        assert!(gpu_uuids("MIG-fa4ed71e-0001-4e57-8fa4-ed71e0000001").is_empty());
    }

    #[test]
    fn gpu_node_names() {
        assert!(is_gpu_node(Path::new("/dev/nvidia12")));
        assert!(!is_gpu_node(Path::new("/dev/nvidiactl")));
        assert!(!is_gpu_node(Path::new("/dev/nvidia")));
    }

    #[test]
    fn yaml_kinds() {
        assert_eq!(
            yaml_kind("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n").as_deref(),
            Some(KIND)
        );
        assert_eq!(yaml_kind("kind: \"nvidia.com/gpu\"").as_deref(), Some(KIND));
        assert_eq!(yaml_kind("devices: []"), None);
    }
}
