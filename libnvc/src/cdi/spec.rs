//! The CDI spec file: its types as nvc writes and reads them, its formats, and the
//! lowest `cdiVersion` its content needs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{CdiError, CDI_VERSION};

/// A serialization format of a spec file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, pretty-printed.
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// The format a file name implies: `.json`, or `.yaml`/`.yml`; `None` for others.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "json" => Some(Format::Json),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// A CDI spec file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The CDI version: the lowest its content needs ([`Spec::minimum_version`]).
    pub cdi_version: String,
    /// `<vendor>/<class>`: `nvidia.com/gpu` ([`super::Kind`]).
    pub kind: String,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits applied once whenever any device of the spec is used.
    #[serde(default, skip_serializing_if = "CdiEdits::is_empty")]
    pub container_edits: CdiEdits,
}

/// One named device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// The name, unqualified: `0`, `GPU-…`, `0:1`, `all`.
    pub name: String,
    /// What using the device adds to a container.
    pub container_edits: CdiEdits,
}

/// CDI's `containerEdits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiEdits {
    /// `KEY=VALUE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<CdiDeviceNode>,
    /// OCI hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<CdiHookEntry>,
    /// Bind mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<CdiMount>,
}

impl CdiEdits {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == CdiEdits::default()
    }
}

/// CDI's `deviceNode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDeviceNode {
    /// The node's path in the container.
    pub path: String,
    /// The node on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `c` for a character device.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The major number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// The minor number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// The permission bits of the node the runtime makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// The owner of the node the runtime makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The group of the node the runtime makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// CDI's `hook`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiHookEntry {
    /// The OCI stage: [`SETUP_STAGE`](super::SETUP_STAGE), [`POSTSTOP_STAGE`](super::POSTSTOP_STAGE), or
    /// [`HOOK_STAGE`](super::HOOK_STAGE) in earlier specs.
    pub hook_name: String,
    /// The executable, absolute, on the host.
    pub path: String,
    /// Its argv, `args[0]` included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its whole environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// CDI's `mount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// The file on the host.
    pub host_path: String,
    /// Where it goes in the container.
    pub container_path: String,
    /// OCI mount options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Spec {
    /// The lowest CDI version whose schema holds this spec: 0.6.0 for a class with a dot,
    /// 0.5.0 for a device name that does not start with a letter or a node with
    /// `hostPath`, 0.4.0 for a mount with a type (nvc writes none), else 0.3.0, the
    /// earliest engines read.
    pub fn minimum_version(&self) -> &'static str {
        let class = self.kind.split_once('/').map_or("", |(_, class)| class);
        if class.contains('.') {
            return CDI_VERSION;
        }
        let edits = self
            .devices
            .iter()
            .map(|d| &d.container_edits)
            .chain(std::iter::once(&self.container_edits));
        let needs_050 = self
            .devices
            .iter()
            .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()))
            || edits
                .flat_map(|e| &e.device_nodes)
                .any(|n| n.host_path.is_some());
        if needs_050 {
            "0.5.0"
        } else {
            "0.3.0"
        }
    }

    /// The fully qualified names of the devices, `<kind>=<name>`, in the spec's order:
    /// `nvidia.com/gpu=0`, …, `nvidia.com/gpu=all`.
    pub fn qualified_names(&self) -> Vec<String> {
        self.devices
            .iter()
            .map(|d| format!("{}={}", self.kind, d.name))
            .collect()
    }

    /// The spec in `format`, ending with a newline.
    pub fn to_string_as(&self, format: Format) -> Result<String, CdiError> {
        match format {
            Format::Json => {
                let mut s = serde_json::to_string_pretty(self).map_err(CdiError::Json)?;
                s.push('\n');
                Ok(s)
            }
            Format::Yaml => serde_norway::to_string(self).map_err(CdiError::Yaml),
        }
    }

    /// Reads a spec from JSON or YAML text (JSON when it starts with `{`).
    pub fn parse(text: &str) -> Result<Spec, CdiError> {
        if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(CdiError::ParseJson)
        } else {
            serde_norway::from_str(text).map_err(CdiError::Parse)
        }
    }
}

/// Splits a fully qualified CDI device name `vendor.com/class=name` into its kind and
/// name; `None` when `s` is not one (no `=`, or no `/` before it).
pub fn split_qualified(s: &str) -> Option<(&str, &str)> {
    let (kind, name) = s.split_once('=')?;
    let (vendor, class) = kind.split_once('/')?;
    if vendor.is_empty() || class.is_empty() {
        return None;
    }
    Some((kind, name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::{HOOK_ENV_PATH, HOOK_STAGE, KIND, VISIBLE_DEVICES_VOID};
    use super::*;

    #[test]
    fn formats_from_extensions() {
        let cases = [
            ("a.json", Some(Format::Json)),
            ("/etc/cdi/nvidia.yaml", Some(Format::Yaml)),
            ("x.yml", Some(Format::Yaml)),
            ("x.toml", None),
            ("noext", None),
        ];
        for (path, want) in cases {
            assert_eq!(Format::from_path(Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn qualified_names_split() {
        let cases = [
            ("nvidia.com/gpu=0", Some(("nvidia.com/gpu", "0"))),
            ("nvidia.com/gpu=all", Some(("nvidia.com/gpu", "all"))),
            ("vendor.com/x=a=b", Some(("vendor.com/x", "a=b"))),
            ("nvidia.com/gpu=", Some(("nvidia.com/gpu", ""))),
            ("0", None),
            ("GPU-1234", None),
            ("a=b", None),
            ("/gpu=0", None),
            ("nvidia.com/=0", None),
        ];
        for (s, want) in cases {
            assert_eq!(split_qualified(s), want, "{s}");
        }
    }

    #[test]
    fn spec_round_trips_through_both_formats() {
        let spec = Spec {
            cdi_version: CDI_VERSION.into(),
            kind: KIND.into(),
            devices: vec![Device {
                name: "0".into(),
                container_edits: CdiEdits {
                    device_nodes: vec![CdiDeviceNode {
                        path: "/dev/nvidia0".into(),
                        host_path: Some("/dev/nvidia0".into()),
                        kind: Some("c".into()),
                        major: Some(195),
                        minor: Some(0),
                        file_mode: Some(0o666),
                        uid: Some(0),
                        gid: Some(0),
                    }],
                    ..CdiEdits::default()
                },
            }],
            container_edits: CdiEdits {
                env: vec![VISIBLE_DEVICES_VOID.into()],
                hooks: vec![CdiHookEntry {
                    hook_name: HOOK_STAGE.into(),
                    path: "/usr/bin/nvc-hook".into(),
                    args: vec!["nvc-hook".into(), "update-ldcache".into()],
                    env: vec![HOOK_ENV_PATH.into()],
                }],
                ..CdiEdits::default()
            },
        };
        for format in [Format::Json, Format::Yaml] {
            let text = spec.to_string_as(format).unwrap();
            assert_eq!(Spec::parse(&text).unwrap(), spec, "{text}");
        }
        let yaml = spec.to_string_as(Format::Yaml).unwrap();
        // a name of digits stays a string in YAML
        assert!(yaml.contains("name: '0'"), "{yaml}");
        assert_eq!(spec.qualified_names(), ["nvidia.com/gpu=0"]);
    }
}
