//! What an engine's own state says of a container: the name Docker gave it
//! (`config.v2.json`), the Kubernetes pod, container and namespace containerd's CRI
//! plugin and CRI-O put in the bundle's annotations (CRI-O's own where the client set no
//! kubelet labels), nerdctl's name, Podman's names
//! (`<driver>-containers/containers.json`), and containerd's namespace from the bundle's
//! path. Pure: over bytes and paths.

use std::path::Path;

use serde_json::Value;

use super::Engine;

/// containerd's folder of its v2 tasks' bundles: `<this>/<namespace>/<id>`.
pub const CONTAINERD_TASKS: &str = "io.containerd.runtime.v2.task";
/// The folders of Podman's and CRI-O's containers in their storage, and of their bundles
/// (`<storage>/<driver>-containers/<id>/userdata`), one for each storage driver of
/// containers/storage: `overlay` by default, `vfs` where the kernel has no usable overlay
/// (rootless on old kernels, nested containers), `btrfs` and `zfs` on those filesystems.
pub const CONTAINERS_FOLDERS: [&str; 4] = [
    "overlay-containers",
    "vfs-containers",
    "btrfs-containers",
    "zfs-containers",
];

/// What the engine's state says of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The engine, where its state says.
    pub engine: Option<Engine>,
    /// The container's name.
    pub name: Option<String>,
    /// The Kubernetes pod (CRI).
    pub pod: Option<String>,
    /// The Kubernetes namespace (CRI), or containerd's namespace.
    pub namespace: Option<String>,
}

impl Identity {
    /// `self`, with what it lacks taken from `other`.
    pub fn or(self, other: Identity) -> Identity {
        Identity {
            engine: self.engine.or(other.engine),
            name: self.name.or(other.name),
            pod: self.pod.or(other.pod),
            namespace: self.namespace.or(other.namespace),
        }
    }
}

/// What the annotations of a bundle's `config.json` (`spec`) say.
pub fn from_annotations(spec: &[u8]) -> Identity {
    let Ok(value) = serde_json::from_slice::<Value>(spec) else {
        return Identity::default();
    };
    let get = |key: &str| {
        value
            .pointer("/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    if let Some(name) = get("io.kubernetes.cri.container-name") {
        return Identity {
            engine: Some(Engine::Containerd),
            name: Some(name),
            pod: get("io.kubernetes.cri.sandbox-name"),
            namespace: get("io.kubernetes.cri.sandbox-namespace"),
        };
    }
    if get("io.kubernetes.cri.container-type").as_deref() == Some("sandbox") {
        return Identity {
            engine: Some(Engine::Containerd),
            name: Some("(pod sandbox)".into()),
            pod: get("io.kubernetes.cri.sandbox-name"),
            namespace: get("io.kubernetes.cri.sandbox-namespace"),
        };
    }
    if let Some(name) = get("io.kubernetes.container.name") {
        return Identity {
            engine: Some(Engine::CriO),
            name: Some(name),
            pod: get("io.kubernetes.pod.name"),
            namespace: get("io.kubernetes.pod.namespace"),
        };
    }
    if let Some(kind) = get("io.kubernetes.cri-o.ContainerType") {
        // CRI-O for a client that sets none of the kubelet's labels (crictl): its own
        // annotations.
        let (pod, namespace) = get("io.kubernetes.cri-o.SandboxName")
            .and_then(|s| crio_sandbox_name(&s))
            .unzip();
        let name = match kind.as_str() {
            "sandbox" => Some("(pod sandbox)".to_string()),
            _ => get("io.kubernetes.cri-o.Metadata").and_then(|m| metadata_name(&m)),
        };
        return Identity {
            engine: Some(Engine::CriO),
            name,
            pod,
            namespace,
        };
    }
    if let Some(name) = get("nerdctl/name") {
        return Identity {
            engine: Some(Engine::Containerd),
            name: Some(name),
            pod: None,
            namespace: get("nerdctl/namespace"),
        };
    }
    if get("io.container.manager").as_deref() == Some("libpod") {
        return Identity {
            engine: Some(Engine::Podman),
            ..Identity::default()
        };
    }
    Identity::default()
}

/// The pod and namespace in CRI-O's name of a pod sandbox,
/// `k8s_<pod>_<namespace>_<uid>_<attempt>` (Kubernetes names have no `_`; a uid may).
fn crio_sandbox_name(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("k8s_")?;
    let (pod, rest) = rest.split_once('_')?;
    let (namespace, rest) = rest.split_once('_')?;
    let (_uid, attempt) = rest.rsplit_once('_')?;
    attempt.parse::<u32>().ok()?;
    (!pod.is_empty() && !namespace.is_empty()).then(|| (pod.to_string(), namespace.to_string()))
}

/// The `name` of CRI's container metadata as CRI-O keeps it (`{"name":"probe",...}`).
fn metadata_name(metadata: &str) -> Option<String> {
    let value: Value = serde_json::from_str(metadata).ok()?;
    let name = value.get("name")?.as_str()?;
    Some(name.to_string()).filter(|n| !n.is_empty())
}

/// The name in Docker's `config.v2.json` of a container (`"Name": "/web"`), without its
/// leading `/`.
pub fn docker_name(config_v2: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(config_v2).ok()?;
    let name = value.get("Name")?.as_str()?;
    let name = name.strip_prefix('/').unwrap_or(name);
    Some(name.to_string()).filter(|n| !n.is_empty())
}

/// The first of the names Podman's `containers.json` (of its storage's
/// `<driver>-containers/`) gives container `id`.
pub fn podman_name(containers_json: &[u8], id: &str) -> Option<String> {
    let value: Value = serde_json::from_slice(containers_json).ok()?;
    value
        .as_array()?
        .iter()
        .find(|c| c.get("id").and_then(Value::as_str) == Some(id))?
        .get("names")?
        .as_array()?
        .iter()
        .find_map(Value::as_str)
        .map(str::to_string)
}

/// containerd's namespace, where `bundle` is one of its v2 tasks' bundles
/// (`.../io.containerd.runtime.v2.task/<namespace>/<id>`).
pub fn containerd_namespace(bundle: &Path) -> Option<String> {
    let parent = bundle.parent()?;
    let tasks = parent.parent()?;
    if tasks.file_name()? != CONTAINERD_TASKS {
        return None;
    }
    parent.file_name()?.to_str().map(str::to_string)
}

/// Podman's or CRI-O's storage folder's `<driver>-containers/` where `bundle` is one of
/// their bundles (`.../<driver>-containers/<id>/userdata`, see [`CONTAINERS_FOLDERS`]).
pub fn storage_containers(bundle: &Path) -> Option<&Path> {
    if bundle.file_name()? != "userdata" {
        return None;
    }
    let folder = bundle.parent()?.parent()?;
    let name = folder.file_name()?.to_str()?;
    CONTAINERS_FOLDERS.contains(&name).then_some(folder)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn spec(annotations: &str) -> Vec<u8> {
        format!(r#"{{"ociVersion":"1.0.2","annotations":{annotations}}}"#).into_bytes()
    }

    #[test]
    fn cri_annotations_give_the_pod_the_container_and_the_namespace() {
        let id = from_annotations(&spec(
            r#"{"io.kubernetes.cri.container-type":"container",
                "io.kubernetes.cri.container-name":"trainer",
                "io.kubernetes.cri.sandbox-name":"job-7",
                "io.kubernetes.cri.sandbox-namespace":"ml"}"#,
        ));
        assert_eq!(
            id,
            Identity {
                engine: Some(Engine::Containerd),
                name: Some("trainer".into()),
                pod: Some("job-7".into()),
                namespace: Some("ml".into()),
            }
        );
        let id = from_annotations(&spec(
            r#"{"io.kubernetes.container.name":"trainer",
                "io.kubernetes.pod.name":"job-7",
                "io.kubernetes.pod.namespace":"ml",
                "io.kubernetes.cri-o.ContainerType":"container"}"#,
        ));
        assert_eq!(id.engine, Some(Engine::CriO));
        assert_eq!(
            (
                id.name.as_deref(),
                id.pod.as_deref(),
                id.namespace.as_deref()
            ),
            (Some("trainer"), Some("job-7"), Some("ml"))
        );
    }

    #[test]
    fn crios_own_annotations_name_a_container_without_the_kubelets_labels() {
        let id = from_annotations(&spec(
            r#"{"io.container.manager":"cri-o",
                "io.kubernetes.cri-o.ContainerType":"container",
                "io.kubernetes.cri-o.Metadata":"{\"name\":\"probe\"}",
                "io.kubernetes.cri-o.Name":"k8s_probe_gpu-job_default_uid-1_0",
                "io.kubernetes.cri-o.SandboxName":"k8s_gpu-job_default_9f1c_a_b_0"}"#,
        ));
        assert_eq!(
            id,
            Identity {
                engine: Some(Engine::CriO),
                name: Some("probe".into()),
                pod: Some("gpu-job".into()),
                namespace: Some("default".into()),
            }
        );
        let id = from_annotations(&spec(
            r#"{"io.kubernetes.cri-o.ContainerType":"sandbox",
                "io.kubernetes.cri-o.SandboxName":"k8s_web_prod_u_1"}"#,
        ));
        assert_eq!(
            (
                id.name.as_deref(),
                id.pod.as_deref(),
                id.namespace.as_deref()
            ),
            (Some("(pod sandbox)"), Some("web"), Some("prod"))
        );
        // A sandbox name not of CRI-O's shape, metadata not JSON: no pod, no name.
        let id = from_annotations(&spec(
            r#"{"io.kubernetes.cri-o.ContainerType":"container",
                "io.kubernetes.cri-o.Metadata":"probe",
                "io.kubernetes.cri-o.SandboxName":"gpu-job"}"#,
        ));
        assert_eq!(
            id,
            Identity {
                engine: Some(Engine::CriO),
                ..Identity::default()
            }
        );
    }

    #[test]
    fn nerdctl_and_podman_annotations() {
        let id = from_annotations(&spec(
            r#"{"nerdctl/name":"web","nerdctl/namespace":"default"}"#,
        ));
        assert_eq!(
            (id.engine, id.name.as_deref(), id.namespace.as_deref()),
            (Some(Engine::Containerd), Some("web"), Some("default"))
        );
        let id = from_annotations(&spec(r#"{"io.container.manager":"libpod"}"#));
        assert_eq!((id.engine, id.name), (Some(Engine::Podman), None));
    }

    #[test]
    fn no_or_bad_annotations_say_nothing() {
        for text in [
            &b"{}"[..],
            b"not json",
            br#"{"annotations":null}"#,
            br#"{"annotations":{"io.kubernetes.cri.container-name":7}}"#,
            br#"{"annotations":{"io.kubernetes.container.name":""}}"#,
        ] {
            assert_eq!(from_annotations(text), Identity::default());
        }
    }

    #[test]
    fn dockers_name_and_podmans_names() {
        assert_eq!(
            docker_name(br#"{"ID":"x","Name":"/web-1","State":{}}"#).as_deref(),
            Some("web-1")
        );
        assert_eq!(docker_name(br#"{"Name":"/"}"#), None);
        assert_eq!(docker_name(b"{"), None);
        let json = br#"[{"id":"aaa","names":["first"]},{"id":"bbb","names":["gpu-job","alias"],"image":"i"}]"#;
        assert_eq!(podman_name(json, "bbb").as_deref(), Some("gpu-job"));
        assert_eq!(podman_name(json, "ccc"), None);
        assert_eq!(podman_name(b"[]", "bbb"), None);
    }

    #[test]
    fn bundle_paths_name_containerds_namespace_and_the_storage() {
        assert_eq!(
            containerd_namespace(Path::new(
                "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc"
            ))
            .as_deref(),
            Some("k8s.io")
        );
        assert_eq!(
            containerd_namespace(Path::new(
                "/x/exec/containerd/daemon/io.containerd.runtime.v2.task/moby/abc"
            ))
            .as_deref(),
            Some("moby")
        );
        assert_eq!(containerd_namespace(Path::new("/tmp/bundle/abc")), None);
        assert_eq!(containerd_namespace(Path::new("/")), None);
        assert_eq!(
            storage_containers(Path::new(
                "/var/lib/containers/storage/overlay-containers/abc/userdata"
            )),
            Some(Path::new("/var/lib/containers/storage/overlay-containers"))
        );
        assert_eq!(
            storage_containers(Path::new("/home/u/storage/vfs-containers/abc/userdata")),
            Some(Path::new("/home/u/storage/vfs-containers"))
        );
        assert_eq!(
            storage_containers(Path::new("/var/lib/x/abc/userdata")),
            None
        );
        assert_eq!(
            storage_containers(Path::new("/var/lib/x/other-containers/abc/userdata")),
            None
        );
    }
}
