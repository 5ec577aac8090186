//! [`read_view`](super::read_view): the [`SpecView`] of a spec read straight into typed
//! fields, every other field skipped unparsed, for the runtime's decision on a container
//! that asks for no GPU (the spec is neither edited nor written then). The result is the
//! one [`view`](super::view) gives: a spec the typed read does not take as is (a field
//! of another type, an array where an object belongs, a duplicate key, a missing or empty
//! `root.path`) is read again as a `serde_json::Value` by [`view`](super::view), which
//! gives its result or names what is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::{self, value::MapAccessDeserializer, Deserialize, Deserializer, Visitor};

use super::{MountNamespace, SpecView};
use crate::request::device_mount_name;

/// `T` read only from a JSON object: serde's derived structs also take an array, field by
/// field, where the spec has an object, which [`view`](super::view) refuses.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Only(PhantomData))
    }
}

#[derive(serde::Deserialize)]
struct Spec {
    process: Option<Object<Process>>,
    root: Option<Object<Root>>,
    linux: Option<Object<Linux>>,
    annotations: Option<Object<BTreeMap<String, String>>>,
    mounts: Option<Vec<Object<Mount>>>,
}

#[derive(serde::Deserialize)]
struct Process {
    env: Option<Vec<String>>,
    capabilities: Option<Object<Capabilities>>,
}

#[derive(serde::Deserialize)]
struct Capabilities {
    bounding: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct Root {
    path: Option<String>,
    readonly: Option<bool>,
}

#[derive(serde::Deserialize)]
struct Linux {
    devices: Option<Vec<Object<Device>>>,
    namespaces: Option<Vec<Object<Namespace>>>,
}

#[derive(serde::Deserialize)]
struct Namespace {
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<String>,
}

#[derive(serde::Deserialize)]
struct Device {
    path: Option<String>,
    major: Option<u32>,
    minor: Option<u32>,
}

#[derive(serde::Deserialize)]
struct Mount {
    destination: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    options: Option<Vec<String>>,
}

/// The view of the spec `bytes` (of the bundle at `bundle`), or `None` where the typed
/// read does not take it as is.
pub(super) fn view(bytes: &[u8], bundle: &Path) -> Option<SpecView> {
    let Object(spec) = serde_json::from_slice::<Object<Spec>>(bytes).ok()?;
    let root = spec.root?.0;
    let rootfs = match root.path {
        Some(p) if !p.is_empty() => bundle.join(p),
        _ => return None,
    };
    let (env, bounding) = match spec.process.map(|p| p.0) {
        Some(p) => (
            p.env.unwrap_or_default(),
            p.capabilities
                .and_then(|c| c.0.bounding)
                .unwrap_or_default(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let (devices, namespaces) = match spec.linux {
        Some(Object(l)) => (l.devices, l.namespaces),
        None => (None, None),
    };
    let mount_namespace = MountNamespace::of(
        namespaces
            .iter()
            .flatten()
            .map(|Object(n)| (n.kind.as_deref(), n.path.as_deref())),
    );
    let devices = devices
        .unwrap_or_default()
        .into_iter()
        .filter_map(|Object(d)| match (d.path, d.major, d.minor) {
            (Some(path), Some(major), Some(minor)) => Some((PathBuf::from(path), major, minor)),
            _ => None,
        })
        .collect();
    let mounts = spec.mounts.unwrap_or_default();
    let tmpfs_mounts = mounts
        .iter()
        .filter(|Object(m)| m.kind.as_deref() == Some("tmpfs"))
        .filter(|Object(m)| {
            !m.options
                .iter()
                .flatten()
                .any(|o| matches!(o.as_str(), "bind" | "rbind"))
        })
        .filter_map(|Object(m)| m.destination.as_deref())
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d != Path::new("/"))
        .collect();
    let destinations = || {
        mounts
            .iter()
            .filter_map(|Object(m)| m.destination.as_deref())
    };
    Some(SpecView {
        env,
        privileged: bounding.iter().any(|c| c == "CAP_SYS_ADMIN"),
        rootfs,
        readonly: root.readonly.unwrap_or(false),
        devices,
        annotations: spec.annotations.map(|a| a.0).unwrap_or_default(),
        tmpfs_mounts,
        mount_destinations: destinations().map(PathBuf::from).collect(),
        device_mounts: destinations().filter_map(device_mount_name).collect(),
        mount_namespace,
    })
}
