//! Container Device Interface (CDI) specs for the host's GPUs.
//!
//! [`generate`] turns a discovered [`Driver`] into one CDI spec of a [`Kind`],
//! `nvidia.com/gpu` by default (`k8s.device-plugin.nvidia.com/gpu` for NVIDIA's
//! Kubernetes device plugin's CDI strategies): one device per GPU (named by index, UUID or
//! both, see [`NameStrategy`]), one per MIG device (`<gpu>:<mig>`, its UUID `MIG-…`, or
//! both, alike), and `all`, every GPU. Each device carries its own device nodes; what every
//! GPU container needs whichever GPUs it gets (the control nodes, the driver's files as
//! bind mounts, and the hooks that make its soname links and update its ld.so.cache)
//! sits in the spec-level `containerEdits`, which CDI applies once for any device of the
//! spec. The edits come from [`crate::edits::compute`], the same computation the
//! runtime shim and the prestart hook use.
//!
//! Links, the ld.so.cache and the mask over `/proc/driver/nvidia` cannot be expressed as
//! CDI edits, so the spec asks the container engine to run `nvc-hook` as
//! `createContainer` hooks ([`hooks`]) with explicit arguments: everything they do is
//! written in the spec. The mask hook is spec-level too, so that whichever devices a
//! container gets, it sees only their GPUs' folders: it reads which from the container's
//! own `linux.devices` when it runs.
//!
//! The spec's `cdiVersion` is the lowest its content needs ([`Spec::minimum_version`]):
//! 0.5.0 where a device name starts with a digit (`nvidia.com/gpu=0`) or a node carries
//! `hostPath` (a dev root that is not `/`), else 0.3.0 (0.4.0 would be for typed mounts,
//! which nvc does not write), and 0.6.0 for a class with a dot (`vendor.com/mig-1g.10gb`).
//! Podman 4.3, Debian 12's, reads up to 0.5.0.
//! Output is deterministic: the same host gives the same bytes.

pub mod hooks;
mod kind;
mod spec;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::caps::{Capability, CapabilitySet};
use crate::discover::{self, Driver};
use crate::edits::{self, ContainerLayout, EditsError};
use crate::request::{ChannelSelection, DeviceSelection, Request};

pub use kind::{check_class, check_vendor, Flaw, Kind, KindError, Part};
pub use spec::{
    split_qualified, CdiDeviceNode, CdiEdits, CdiHookEntry, CdiMount, Device, Format, Spec,
};

/// The newest CDI specification version nvc writes (for a class with a dot); a spec gets
/// the lowest version its content needs ([`Spec::minimum_version`]), so older engines
/// read it too.
pub const CDI_VERSION: &str = "0.6.0";
/// The vendor part of the default kind.
pub const VENDOR: &str = "nvidia.com";
/// The class part of the default kind.
pub const CLASS: &str = "gpu";
/// The default kind of the spec, NVIDIA's: `<vendor>/<class>`. A fully qualified device
/// name is `nvidia.com/gpu=<name>`; the runtime shim reads names of this kind from a
/// container's `NVIDIA_VISIBLE_DEVICES` and `cdi.k8s.io/` annotations.
pub const KIND: &str = "nvidia.com/gpu";
/// The vendor under which NVIDIA's Kubernetes device plugin names GPUs in its CDI
/// strategies (`k8s.device-plugin.nvidia.com/gpu=<uuid or index>`), fixed in its code.
pub const DEVICE_PLUGIN_VENDOR: &str = "k8s.device-plugin.nvidia.com";
/// The name of the device that holds every GPU.
pub const ALL_DEVICE: &str = "all";
/// The hooks' whole environment: a fixed PATH, nothing from the container or the caller.
pub const HOOK_ENV_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The OCI hook stage of the hooks of earlier specs: in the container's mount namespace,
/// after the runtime made the mounts and before `pivot_root` (see [`hooks`]).
pub const HOOK_STAGE: &str = "createContainer";
/// The OCI hook stage of the spec's `cdi-setup --enter`: in the runtime's namespaces, after
/// the runtime made the container's mounts and before `pivot_root`, started by the
/// runtime's own process (see [`hooks`]).
pub const SETUP_STAGE: &str = "createRuntime";

/// The OCI hook stage of the hook that takes away what the set-up made: after the
/// container ended, in the runtime's namespace.
pub const POSTSTOP_STAGE: &str = "poststop";
/// Set in every container that gets devices from the spec, so that nvc's shim and NVIDIA's
/// legacy hook, seeing a CUDA image's `NVIDIA_VISIBLE_DEVICES=all`, do not inject the
/// driver a second time.
pub const VISIBLE_DEVICES_VOID: &str = "NVIDIA_VISIBLE_DEVICES=void";

/// How GPU devices are named in the spec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NameStrategy {
    /// By index, as nvidia-smi numbers them: `nvidia.com/gpu=0`.
    Index,
    /// By UUID: `nvidia.com/gpu=GPU-…`.
    Uuid,
    /// Both: two devices per GPU with the same edits. The default: NVIDIA's Kubernetes
    /// device plugin names GPUs by UUID (its default `DEVICE_ID_STRATEGY`), so the engine
    /// resolving its `cdi.k8s.io` annotations or CRI CDI devices looks them up by UUID,
    /// while people ask for `nvidia.com/gpu=0`.
    #[default]
    Both,
}

impl NameStrategy {
    /// The names of every strategy, as the command line takes them.
    pub const NAMES: [&'static str; 3] = ["index", "uuid", "both"];

    /// The strategy's name.
    pub fn name(self) -> &'static str {
        match self {
            NameStrategy::Index => "index",
            NameStrategy::Uuid => "uuid",
            NameStrategy::Both => "both",
        }
    }
}

impl fmt::Display for NameStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no [`NameStrategy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device name strategy {0:?} (expected index, uuid or both)")]
pub struct UnknownStrategy(pub String);

impl FromStr for NameStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "index" => Ok(NameStrategy::Index),
            "uuid" => Ok(NameStrategy::Uuid),
            "both" => Ok(NameStrategy::Both),
            other => Err(UnknownStrategy(other.to_string())),
        }
    }
}

/// What [`generate`] needs besides the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// The `nvc-hook` binary on the host, absolute: the engine runs it by this path.
    pub hook_path: PathBuf,
    /// The spec's kind: its devices are `<kind>=<name>`.
    pub kind: Kind,
    /// How GPUs are named.
    pub strategy: NameStrategy,
    /// Where libraries go in the container.
    pub layout: ContainerLayout,
    /// The nvc config the hooks read, when it is not `/etc/nvc/config.toml`: named in
    /// their environment (`NVC_CONFIG`), as nvc-runtime names it to the prestart hook,
    /// so that their record and log go where the config says.
    pub config: Option<PathBuf>,
}

impl GenerateOptions {
    /// Kind `nvidia.com/gpu`, index and UUID names and Debian's library folders, with the
    /// hook at `hook_path`.
    pub fn new(hook_path: impl Into<PathBuf>) -> Self {
        GenerateOptions {
            hook_path: hook_path.into(),
            kind: Kind::default(),
            strategy: NameStrategy::default(),
            layout: ContainerLayout::debian(),
            config: None,
        }
    }
}

/// Why a spec could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// The hook path is relative: CDI hooks run by absolute path.
    #[error("the hook path {0} is not absolute (set hook.path in the nvc config to the absolute path of nvc-hook)")]
    RelativeHookPath(PathBuf),
    /// A path that a spec cannot hold as a string.
    #[error("{0} is not valid UTF-8 and cannot go into a CDI spec")]
    NotUtf8(PathBuf),
    /// The driver's edits could not be computed.
    #[error("cannot compute the driver's container edits")]
    Edits(#[source] EditsError),
    /// Writing JSON failed.
    #[error("cannot serialize the CDI spec as JSON")]
    Json(#[source] serde_json::Error),
    /// Writing YAML failed.
    #[error("cannot serialize the CDI spec as YAML")]
    Yaml(#[source] serde_norway::Error),
    /// A spec file is not a CDI spec.
    #[error("invalid CDI spec")]
    Parse(#[source] serde_norway::Error),
    /// A spec file is not valid JSON.
    #[error("invalid CDI spec")]
    ParseJson(#[source] serde_json::Error),
}

/// The capabilities a spec covers: every one but `compat32`. A CDI device has no notion
/// of driver capabilities, so the spec gives what any GPU workload may need; the 32-bit
/// libraries are left out because the ld.so.cache hook writes 64-bit entries only.
pub fn spec_capabilities() -> CapabilitySet {
    Capability::ALL
        .into_iter()
        .filter(|c| *c != Capability::Compat32)
        .collect()
}

fn utf8(path: &Path) -> Result<String, CdiError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| CdiError::NotUtf8(path.to_path_buf()))
}

fn device_node(node: &discover::DeviceNode) -> Result<CdiDeviceNode, CdiError> {
    Ok(CdiDeviceNode {
        path: utf8(&node.path)?,
        // Only where the node is elsewhere on the host (a dev root that is not `/`):
        // `hostPath` needs CDI 0.5.0.
        host_path: if node.host_path == node.path {
            None
        } else {
            Some(utf8(&node.host_path)?)
        },
        kind: Some("c".to_string()),
        major: Some(i64::from(node.major)),
        minor: Some(i64::from(node.minor)),
        file_mode: Some(node.file_mode & 0o777),
        uid: Some(node.uid),
        gid: Some(node.gid),
    })
}

fn nodes(list: &[&discover::DeviceNode]) -> Result<Vec<CdiDeviceNode>, CdiError> {
    let mut out: Vec<CdiDeviceNode> = Vec::new();
    for node in list {
        let node = device_node(node)?;
        if !out.iter().any(|n| n.path == node.path) {
            out.push(node);
        }
    }
    Ok(out)
}

/// The request whose edits are the spec-level ones: the driver's files and control
/// nodes for every capability the spec covers, and no GPU.
fn driver_request() -> Request {
    Request {
        devices: DeviceSelection::None,
        capabilities: spec_capabilities(),
        requirements: Vec::new(),
        check_requirements: false,
        mig_config: DeviceSelection::NotRequested,
        mig_monitor: DeviceSelection::NotRequested,
        imex_channels: ChannelSelection::None,
        legacy_image: false,
        from_device_mounts: false,
        exclusive: None,
    }
}

/// The CDI spec for `driver`'s GPUs.
pub fn generate(driver: &Driver, options: &GenerateOptions) -> Result<Spec, CdiError> {
    if !options.hook_path.is_absolute() {
        return Err(CdiError::RelativeHookPath(options.hook_path.clone()));
    }
    let edits =
        edits::compute(driver, &driver_request(), &options.layout).map_err(CdiError::Edits)?;

    let mut devices = Vec::new();
    let mut all_nodes: Vec<&discover::DeviceNode> = Vec::new();
    for gpu in &driver.gpus {
        let device_edits = CdiEdits {
            device_nodes: nodes(&[&gpu.node])?,
            ..CdiEdits::default()
        };
        let names: Vec<String> = match options.strategy {
            NameStrategy::Index => vec![gpu.index.to_string()],
            NameStrategy::Uuid => vec![gpu.uuid.clone()],
            NameStrategy::Both => vec![gpu.index.to_string(), gpu.uuid.clone()],
        };
        for name in names {
            devices.push(Device {
                name,
                container_edits: device_edits.clone(),
            });
        }
        all_nodes.push(&gpu.node);
    }
    // MIG devices by `<gpu>:<mig>`, and by the UUID NVML gave (`MIG-…`, what NVIDIA's
    // device plugin names under its mixed strategy) where the strategy names GPUs by
    // UUID; one NVML did not name keeps its index name.
    if let discover::MigUuids::Unknown(why) = &driver.mig_uuids {
        log::warn!(
            "MIG devices are named <gpu>:<mig> only: {}",
            crate::report::error_chain(&**why)
        );
    }
    for gpu in &driver.gpus {
        for mig in &gpu.mig {
            let mut list = vec![&gpu.node];
            list.extend(mig.caps.iter());
            let device_edits = CdiEdits {
                device_nodes: nodes(&list)?,
                ..CdiEdits::default()
            };
            let index = format!("{}:{}", gpu.index, mig.index);
            let names: Vec<String> = match (options.strategy, &mig.uuid) {
                (NameStrategy::Index, _) | (_, None) => vec![index],
                (NameStrategy::Uuid, Some(uuid)) => vec![uuid.clone()],
                (NameStrategy::Both, Some(uuid)) => vec![index, uuid.clone()],
            };
            for name in names {
                devices.push(Device {
                    name,
                    container_edits: device_edits.clone(),
                });
            }
            all_nodes.extend(mig.caps.iter());
        }
    }
    // WSL: /dev/dxg is every GPU, the one device `all` (a device with no edit is not
    // a CDI device).
    if driver.wsl.is_some() {
        all_nodes.extend(driver.control_nodes.iter());
    }
    devices.push(Device {
        name: ALL_DEVICE.to_string(),
        container_edits: CdiEdits {
            device_nodes: nodes(&all_nodes)?,
            ..CdiEdits::default()
        },
    });

    let control: Vec<&discover::DeviceNode> = edits.device_nodes.iter().collect();
    let mut mounts = Vec::new();
    for m in &edits.mounts {
        mounts.push(CdiMount {
            host_path: utf8(&m.host_path)?,
            container_path: utf8(&m.container_path)?,
            options: m.options.clone(),
        });
    }
    let mut spec_hooks = Vec::new();
    let hook_path = utf8(&options.hook_path)?;
    let mut hook_env = vec![HOOK_ENV_PATH.to_string()];
    if let Some(config) = &options.config {
        hook_env.push(format!("{}={}", nvc_config::CONFIG_ENV, utf8(config)?));
    }
    let links: Vec<hooks::Link> = edits
        .symlinks
        .iter()
        .map(|s| hooks::Link {
            target: s.target.clone(),
            link: s.link.clone(),
        })
        .collect();
    // One process for the whole set-up ([`hooks::CdiHook::Setup`]): the links, the
    // ld.so.cache, and, where the host has GPUs under `<proc root>/driver/nvidia`, the
    // mask that hides all but the container's own.
    let folders = edits.ldcache_dirs.clone();
    let proc_root = (!driver.gpus.is_empty()).then(|| driver.roots.proc_root.clone());
    let has_work = !links.is_empty() || !folders.is_empty() || proc_root.is_some();
    let setup = hooks::CdiHook::Setup {
        enter: true,
        compat_above: (!folders.is_empty()).then(|| driver.version()).flatten(),
        links,
        folders,
        proc_root,
    };
    if has_work {
        spec_hooks.push(CdiHookEntry {
            hook_name: SETUP_STAGE.to_string(),
            path: hook_path.clone(),
            args: setup.args()?,
            env: hook_env.clone(),
        });
        // What it made goes when the container ends: the prestart path's poststop hook,
        // which reads the record `cdi-setup` kept (`hook.leave-no-trace` decides, as
        // there).
        spec_hooks.push(CdiHookEntry {
            hook_name: POSTSTOP_STAGE.to_string(),
            path: hook_path,
            args: vec![hooks::ARGV0.to_string(), hooks::POSTSTOP_MODE.to_string()],
            env: hook_env,
        });
    }

    let mut spec = Spec {
        cdi_version: String::new(),
        kind: options.kind.to_string(),
        devices,
        container_edits: CdiEdits {
            env: vec![VISIBLE_DEVICES_VOID.to_string()],
            device_nodes: nodes(&control)?,
            hooks: spec_hooks,
            mounts,
        },
    };
    spec.cdi_version = spec.minimum_version().to_string();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn strategies_parse_and_show() {
        for name in NameStrategy::NAMES {
            assert_eq!(name.parse::<NameStrategy>().unwrap().to_string(), name);
        }
        assert_eq!(
            "UUID".parse::<NameStrategy>().unwrap_err().to_string(),
            "unknown device name strategy \"UUID\" (expected index, uuid or both)"
        );
        assert_eq!(NameStrategy::default(), NameStrategy::Both);
    }

    fn node(path: &str, major: u32, minor: u32) -> discover::DeviceNode {
        discover::DeviceNode {
            path: PathBuf::from(path),
            host_path: PathBuf::from("/host").join(path.trim_start_matches('/')),
            major,
            minor,
            file_mode: 0o100666,
            uid: 0,
            gid: 0,
            on_host: true,
        }
    }

    /// Two GPUs whose minors are not their indices, the second in MIG mode; no files.
    fn driver() -> Driver {
        let gpu = |index: u32, minor: u32| discover::Gpu {
            index,
            uuid: format!("GPU-00000000-0000-0000-0000-00000000000{index}"),
            bus_id: format!("0000:0{index}:00.0"),
            minor,
            model: "Fake".into(),
            node: node(&format!("/dev/nvidia{minor}"), 195, minor),
            mig: Vec::new(),
        };
        let mut second = gpu(1, 0);
        second.mig = vec![discover::MigDevice {
            index: 0,
            gi: 1,
            ci: 0,
            caps: vec![
                node("/dev/nvidia-caps/nvidia-cap21", 241, 21),
                node("/dev/nvidia-caps/nvidia-cap22", 241, 22),
            ],
            uuid: None,
        }];
        Driver {
            roots: discover::DriverRoots {
                root: "/".into(),
                dev_root: "/".into(),
                proc_root: "/proc".into(),
            },
            version: "999.88.77".into(),
            gpus: vec![gpu(0, 3), second],
            libraries: Vec::new(),
            binaries: Vec::new(),
            firmware: Vec::new(),
            files: Vec::new(),
            ipc: Vec::new(),
            control_nodes: vec![node("/dev/nvidiactl", 195, 255)],
            mig_config: None,
            mig_monitor: None,
            imex_channels: Vec::new(),
            known_cuda_version: None,
            cacheable: false,
            version_from_proc: false,
            wsl: None,
            mig_uuids: discover::MigUuids::NotAsked,
        }
    }

    fn node_names(edits: &CdiEdits) -> Vec<String> {
        edits
            .device_nodes
            .iter()
            .map(|n| format!("{} {}:{}", n.path, n.major.unwrap(), n.minor.unwrap()))
            .collect()
    }

    #[test]
    fn generate_names_devices_and_splits_edits() {
        let d = driver();
        let mut options = GenerateOptions::new("/usr/bin/nvc-hook");
        // By default each GPU by index and by UUID, with the same edits.
        let both = generate(&d, &options).unwrap();
        let names: Vec<&str> = both.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "0",
                "GPU-00000000-0000-0000-0000-000000000000",
                "1",
                "GPU-00000000-0000-0000-0000-000000000001",
                "1:0",
                "all"
            ]
        );
        assert_eq!(
            both.devices[0].container_edits,
            both.devices[1].container_edits
        );
        options.strategy = NameStrategy::Index;
        let spec = generate(&d, &options).unwrap();
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["0", "1", "1:0", "all"]);
        assert_eq!(
            node_names(&spec.devices[0].container_edits),
            ["/dev/nvidia3 195:3"]
        );
        assert_eq!(
            node_names(&spec.devices[2].container_edits),
            [
                "/dev/nvidia0 195:0",
                "/dev/nvidia-caps/nvidia-cap21 241:21",
                "/dev/nvidia-caps/nvidia-cap22 241:22"
            ]
        );
        assert_eq!(
            node_names(&spec.devices[3].container_edits),
            [
                "/dev/nvidia3 195:3",
                "/dev/nvidia0 195:0",
                "/dev/nvidia-caps/nvidia-cap21 241:21",
                "/dev/nvidia-caps/nvidia-cap22 241:22"
            ]
        );
        let node = &spec.devices[0].container_edits.device_nodes[0];
        assert_eq!(node.file_mode, Some(0o666));
        assert_eq!(node.host_path.as_deref(), Some("/host/dev/nvidia3"));
        assert_eq!(
            node_names(&spec.container_edits),
            ["/dev/nvidiactl 195:255"]
        );
        assert_eq!(spec.container_edits.env, [VISIBLE_DEVICES_VOID]);
        // No library, so no link or cache; GPUs, so the mask over their proc folder; and
        // the poststop hook that takes away what the set-up made.
        assert_eq!(
            spec.container_edits.hooks,
            [
                CdiHookEntry {
                    hook_name: SETUP_STAGE.into(),
                    path: "/usr/bin/nvc-hook".into(),
                    args: vec![
                        "nvc-hook".into(),
                        "cdi-setup".into(),
                        "--enter".into(),
                        "--proc-root".into(),
                        "/proc".into()
                    ],
                    env: vec![HOOK_ENV_PATH.into()],
                },
                CdiHookEntry {
                    hook_name: POSTSTOP_STAGE.into(),
                    path: "/usr/bin/nvc-hook".into(),
                    args: vec!["nvc-hook".into(), "poststop".into()],
                    env: vec![HOOK_ENV_PATH.into()],
                }
            ]
        );
        // No GPU: nothing under /proc/driver/nvidia to hide.
        let mut no_gpu = d.clone();
        no_gpu.gpus.clear();
        assert!(generate(&no_gpu, &options)
            .unwrap()
            .container_edits
            .hooks
            .is_empty());
        assert_eq!(generate(&d, &options).unwrap(), spec);

        options.strategy = NameStrategy::Uuid;
        let uuid = generate(&d, &options).unwrap();
        assert_eq!(
            uuid.qualified_names(),
            [
                "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000",
                "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000001",
                "nvidia.com/gpu=1:0",
                "nvidia.com/gpu=all"
            ]
        );
        options.strategy = NameStrategy::Both;
        assert_eq!(generate(&d, &options).unwrap(), both);

        let err = generate(&d, &GenerateOptions::new("nvc-hook")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the hook path nvc-hook is not absolute (set hook.path in the nvc config to the absolute path of nvc-hook)"
        );
    }

    #[test]
    fn mig_devices_are_named_by_the_uuid_nvml_gave_as_gpus_are() {
        const MIG: &str = "MIG-5fa4ed71-e001-4001-9000-a1b2c3d4e5f6";
        let mut d = driver();
        d.gpus[1].mig[0].uuid = Some(MIG.into());
        d.mig_uuids = discover::MigUuids::Known;
        let mut options = GenerateOptions::new("/usr/bin/nvc-hook");
        let mut names = |strategy| {
            options.strategy = strategy;
            let spec = generate(&d, &options).unwrap();
            let mig: Vec<&Device> = spec
                .devices
                .iter()
                .filter(|dev| dev.name.contains(':') || dev.name.starts_with("MIG-"))
                .collect();
            // Every name of the MIG device has its parent's node and its two capabilities.
            for dev in &mig {
                assert_eq!(
                    node_names(&dev.container_edits),
                    [
                        "/dev/nvidia0 195:0",
                        "/dev/nvidia-caps/nvidia-cap21 241:21",
                        "/dev/nvidia-caps/nvidia-cap22 241:22"
                    ]
                );
            }
            mig.iter().map(|dev| dev.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(NameStrategy::Index), ["1:0"]);
        assert_eq!(names(NameStrategy::Uuid), [MIG]);
        assert_eq!(names(NameStrategy::Both), ["1:0", MIG]);
    }

    #[test]
    fn the_kind_names_every_device_and_changes_nothing_else() {
        let d = driver();
        let nvidia = generate(&d, &GenerateOptions::new("/usr/bin/nvc-hook")).unwrap();
        assert_eq!(nvidia.kind, "nvidia.com/gpu");
        // NVIDIA's device plugin's kind, by UUID as the plugin names GPUs by default.
        let options = GenerateOptions {
            kind: Kind::new(DEVICE_PLUGIN_VENDOR, CLASS).unwrap(),
            strategy: NameStrategy::Uuid,
            ..GenerateOptions::new("/usr/bin/nvc-hook")
        };
        let plugin = generate(&d, &options).unwrap();
        assert_eq!(plugin.kind, "k8s.device-plugin.nvidia.com/gpu");
        assert_eq!(
            plugin.qualified_names(),
            [
                "k8s.device-plugin.nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000",
                "k8s.device-plugin.nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000001",
                "k8s.device-plugin.nvidia.com/gpu=1:0",
                "k8s.device-plugin.nvidia.com/gpu=all"
            ]
        );
        // The same devices and edits as under nvidia.com/gpu, name for name.
        for device in &plugin.devices {
            let same = nvidia
                .devices
                .iter()
                .find(|n| n.name == device.name)
                .unwrap();
            assert_eq!(
                same.container_edits, device.container_edits,
                "{}",
                device.name
            );
        }
        assert_eq!(plugin.container_edits, nvidia.container_edits);
        // `all` under every kind and strategy, once, last.
        for strategy in [NameStrategy::Index, NameStrategy::Uuid, NameStrategy::Both] {
            let spec = generate(
                &d,
                &GenerateOptions {
                    kind: Kind::new("example.com", "accel").unwrap(),
                    strategy,
                    ..GenerateOptions::new("/usr/bin/nvc-hook")
                },
            )
            .unwrap();
            let names = spec.qualified_names();
            assert_eq!(names.last().unwrap(), "example.com/accel=all", "{strategy}");
            assert_eq!(
                names.iter().filter(|n| n.ends_with("=all")).count(),
                1,
                "{strategy}"
            );
        }
    }

    #[test]
    fn the_spec_has_the_lowest_version_its_content_needs() {
        let node = |path: &str, host: Option<&str>| CdiDeviceNode {
            path: path.into(),
            host_path: host.map(Into::into),
            kind: Some("c".into()),
            major: Some(195),
            minor: Some(0),
            file_mode: None,
            uid: None,
            gid: None,
        };
        let spec = |name: &str, host: Option<&str>| Spec {
            cdi_version: String::new(),
            kind: KIND.into(),
            devices: vec![Device {
                name: name.into(),
                container_edits: CdiEdits {
                    device_nodes: vec![node("/dev/nvidia0", host)],
                    ..CdiEdits::default()
                },
            }],
            container_edits: CdiEdits::default(),
        };
        assert_eq!(spec("GPU-1", None).minimum_version(), "0.3.0");
        assert_eq!(spec("all", None).minimum_version(), "0.3.0");
        // A name that starts with a digit, or a node elsewhere on the host: 0.5.0.
        assert_eq!(spec("0", None).minimum_version(), "0.5.0");
        assert_eq!(spec("1:0", None).minimum_version(), "0.5.0");
        assert_eq!(
            spec("GPU-1", Some("/host/dev/nvidia0")).minimum_version(),
            "0.5.0"
        );
        // What generate writes: the index names (and this driver's dev root) need 0.5.0,
        // UUID names on a dev root of `/` do not.
        let d = driver();
        let mut options = GenerateOptions::new("/usr/bin/nvc-hook");
        assert_eq!(generate(&d, &options).unwrap().cdi_version, "0.5.0");
        let mut local = d.clone();
        for g in &mut local.gpus {
            g.node.host_path = g.node.path.clone();
            g.mig.clear();
        }
        for n in &mut local.control_nodes {
            n.host_path = n.path.clone();
        }
        options.strategy = NameStrategy::Uuid;
        let spec = generate(&local, &options).unwrap();
        assert_eq!(spec.cdi_version, "0.3.0", "{spec:#?}");
        assert!(spec
            .devices
            .iter()
            .flat_map(|d| &d.container_edits.device_nodes)
            .all(|n| n.host_path.is_none()));
        // The device plugin's kind needs nothing more; a class with a dot needs 0.6.0,
        // whatever the names (a dot in the vendor is no dot in the class).
        options.kind = Kind::new(DEVICE_PLUGIN_VENDOR, CLASS).unwrap();
        assert_eq!(generate(&local, &options).unwrap().cdi_version, "0.3.0");
        options.kind = Kind::new("example.com", "mig-1g.10gb").unwrap();
        assert_eq!(generate(&local, &options).unwrap().cdi_version, CDI_VERSION);
        assert_eq!(CDI_VERSION, "0.6.0");
    }
}
