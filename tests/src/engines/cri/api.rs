//! The messages of Kubernetes' CRI API (`runtime.v1`, kubernetes/cri-api
//! `pkg/apis/runtime/v1/api.proto`) that the tests send and read, written by hand with
//! prost's derive: no protoc, no build script. Only the fields used are here; a field
//! missing from a struct is skipped when decoding. Each tag is the field number in
//! api.proto: a wrong one is not an error, the server just never sees the field, so every
//! number was checked against the file.

use std::collections::HashMap;

/// `VersionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionRequest {
    /// The kubelet's runtime API version.
    #[prost(string, tag = "1")]
    pub version: String,
}

/// `VersionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    /// The runtime API version.
    #[prost(string, tag = "1")]
    pub version: String,
    /// The runtime's name, e.g. `containerd`.
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// The runtime's version, e.g. `v1.7.24`.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// The runtime's CRI API version, e.g. `v1`.
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

/// `NamespaceMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NamespaceMode {
    /// Shared by the pod's containers.
    Pod = 0,
    /// The container's own.
    Container = 1,
    /// The node's (host network, host PID).
    Node = 2,
    /// Another container's.
    Target = 3,
}

/// `NamespaceOption`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    /// The network namespace.
    #[prost(enumeration = "NamespaceMode", tag = "1")]
    pub network: i32,
    /// The PID namespace.
    #[prost(enumeration = "NamespaceMode", tag = "2")]
    pub pid: i32,
    /// The IPC namespace.
    #[prost(enumeration = "NamespaceMode", tag = "3")]
    pub ipc: i32,
}

/// `LinuxSandboxSecurityContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    /// The sandbox's namespaces.
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
    /// Whether a privileged container may run in the sandbox.
    #[prost(bool, tag = "6")]
    pub privileged: bool,
}

/// `LinuxPodSandboxConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    /// The pod's parent cgroup (cgroupfs syntax).
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    /// The sandbox's security settings.
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

/// `PodSandboxMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    /// The pod's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The pod's UID.
    #[prost(string, tag = "2")]
    pub uid: String,
    /// The pod's Kubernetes namespace.
    #[prost(string, tag = "3")]
    pub namespace: String,
    /// Attempt number.
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `PodSandboxConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    /// Names the sandbox.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    /// The sandbox's host name (may be empty with a host network).
    #[prost(string, tag = "2")]
    pub hostname: String,
    /// The host folder the containers' `log_path` are relative to.
    #[prost(string, tag = "3")]
    pub log_directory: String,
    /// Labels.
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    /// Annotations (the pod's).
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    /// Linux settings.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

/// `RunPodSandboxRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    /// The sandbox.
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    /// The runtime (a RuntimeClass `handler`); empty for the default.
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

/// `RunPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    /// The new sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// `StopPodSandboxRequest` and `RemovePodSandboxRequest` (the same one field).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    /// The sandbox's id.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// The empty responses (`StopPodSandboxResponse`, `StartContainerResponse`, ...).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `ImageSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    /// The image reference.
    #[prost(string, tag = "1")]
    pub image: String,
    /// The reference as the pod spec wrote it (the kubelet sends it on CreateContainer;
    /// CRI-O refuses to check an image's signature policy without it).
    #[prost(string, tag = "18")]
    pub user_specified_image: String,
}

impl ImageSpec {
    /// The image `reference`, named as the kubelet names a container's image: the same
    /// reference in `image` and `user_specified_image`.
    pub fn named(reference: &str) -> ImageSpec {
        ImageSpec {
            image: reference.into(),
            user_specified_image: reference.into(),
        }
    }
}

/// `KeyValue`: an environment variable.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// The name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `Mount`: a host path bound into the container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    /// Where in the container.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// The host path.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// Read-only.
    #[prost(bool, tag = "3")]
    pub readonly: bool,
}

/// `ContainerMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    /// The container's name in the pod.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Attempt number.
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

/// `CDIDevice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    /// A fully qualified CDI device name, e.g. `nvidia.com/gpu=0`.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `LinuxContainerSecurityContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerSecurityContext {
    /// Privileged (every capability, every device).
    #[prost(bool, tag = "2")]
    pub privileged: bool,
    /// The container's namespaces.
    #[prost(message, optional, tag = "3")]
    pub namespace_options: Option<NamespaceOption>,
}

/// `LinuxContainerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerConfig {
    /// The container's security settings.
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxContainerSecurityContext>,
}

/// `ContainerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    /// Names the container.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    /// The image.
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    /// The entrypoint.
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    /// Its arguments.
    #[prost(string, repeated, tag = "4")]
    pub args: Vec<String>,
    /// The environment.
    #[prost(message, repeated, tag = "6")]
    pub envs: Vec<KeyValue>,
    /// Host paths bound in.
    #[prost(message, repeated, tag = "7")]
    pub mounts: Vec<Mount>,
    /// Labels.
    #[prost(map = "string, string", tag = "9")]
    pub labels: HashMap<String, String>,
    /// Annotations (where device plugins put `cdi.k8s.io/` names).
    #[prost(map = "string, string", tag = "10")]
    pub annotations: HashMap<String, String>,
    /// The log file, relative to the sandbox's `log_directory`.
    #[prost(string, tag = "11")]
    pub log_path: String,
    /// Linux settings.
    #[prost(message, optional, tag = "15")]
    pub linux: Option<LinuxContainerConfig>,
    /// CDI devices (`CDI_devices` in api.proto).
    #[prost(message, repeated, tag = "17")]
    pub cdi_devices: Vec<CdiDevice>,
}

/// `CreateContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    /// The sandbox it goes in.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    /// The sandbox's config, as given to RunPodSandbox.
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

/// `CreateContainerResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    /// The new container's id.
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StartContainerRequest`, `RemoveContainerRequest` and `ContainerStatusRequest`
/// without `verbose` (their first field is the container's id).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerIdRequest {
    /// The container's id.
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StopContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    /// The container's id.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Seconds before it is killed.
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

/// `ContainerState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ContainerState {
    /// Created, not started.
    Created = 0,
    /// Running.
    Running = 1,
    /// Exited.
    Exited = 2,
    /// Unknown.
    Unknown = 3,
}

/// `ContainerStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    /// The container's id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its state.
    #[prost(enumeration = "ContainerState", tag = "3")]
    pub state: i32,
    /// When it started (ns), 0 if not.
    #[prost(int64, tag = "5")]
    pub started_at: i64,
    /// When it finished (ns), 0 if not.
    #[prost(int64, tag = "6")]
    pub finished_at: i64,
    /// Its exit code, once finished.
    #[prost(int32, tag = "7")]
    pub exit_code: i32,
    /// Why it is in its state (CamelCase), e.g. `Completed`, `StartError`.
    #[prost(string, tag = "10")]
    pub reason: String,
    /// Details of why.
    #[prost(string, tag = "11")]
    pub message: String,
    /// Its log file on the host.
    #[prost(string, tag = "15")]
    pub log_path: String,
}

/// `ContainerStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusResponse {
    /// The status.
    #[prost(message, optional, tag = "1")]
    pub status: Option<ContainerStatus>,
}
