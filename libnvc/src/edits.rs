//! Container edits: the one neutral, CDI-shaped value computed from what the driver
//! provides ([`Driver`]) and what a container asks for ([`Request`]). The runtime shim,
//! the hook and CDI generation all consume it. [`compute`] is pure and deterministic:
//! the same inputs give the same value, field for field.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::caps::{Capability, CapabilitySet};
use crate::discover::{tables, DeviceNode, Driver, Gpu, LibClass, MigDevice};
use crate::probe::HostProbe;
use crate::request::{ChannelSelection, DeviceId, DeviceSelection, Request};
use crate::require::{self, Fact, FactError, Facts, GpuFacts};
use crate::version::Version;

/// Where driver files go in the container that the image decides: its library folders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerLayout {
    /// The 64-bit library folder: `/usr/lib/x86_64-linux-gnu` in Debian-like images,
    /// `/usr/lib64` in others.
    pub lib64: PathBuf,
    /// The 32-bit library folder: `/usr/lib/i386-linux-gnu` or `/usr/lib`.
    pub lib32: PathBuf,
}

impl Default for ContainerLayout {
    fn default() -> Self {
        ContainerLayout::debian()
    }
}

impl ContainerLayout {
    /// Debian's multiarch folders.
    pub fn debian() -> Self {
        ContainerLayout {
            lib64: PathBuf::from("/usr/lib/x86_64-linux-gnu"),
            lib32: PathBuf::from("/usr/lib/i386-linux-gnu"),
        }
    }

    /// The folders of an image whose folders `is_dir` says exist: Debian's multiarch
    /// folders when it has them, else `/usr/lib64` when it has that, else the multiarch
    /// folders (created).
    pub fn of_image(is_dir: impl Fn(&Path) -> bool) -> Self {
        let debian = ContainerLayout::debian();
        let rh = ContainerLayout::lib64();
        if !is_dir(&debian.lib64) && is_dir(&rh.lib64) {
            rh
        } else {
            debian
        }
    }

    /// The folders of Red Hat-like images.
    pub fn lib64() -> Self {
        ContainerLayout {
            lib64: PathBuf::from("/usr/lib64"),
            lib32: PathBuf::from("/usr/lib"),
        }
    }
}

/// What kind of file a mount carries; the hook picks mount options and checks by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A driver library.
    Library,
    /// A driver binary.
    Binary,
    /// A firmware file.
    Firmware,
    /// A json or other configuration file.
    Config,
    /// A unix socket.
    Socket,
    /// A directory (the MPS pipe directory).
    Directory,
}

/// How a mount of one kind is made: the one policy behind the OCI options of the spec,
/// the CDI spec and the hook's mount attributes. Read-only, `nosuid` and `nodev`
/// everywhere but where the container must write (sockets, the MPS pipe folder);
/// `noexec` where nothing is executed or mapped executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountPolicy {
    /// Read-only.
    pub readonly: bool,
    /// No set-user-id programs.
    pub nosuid: bool,
    /// No device nodes.
    pub nodev: bool,
    /// Nothing executed or mapped executable.
    pub noexec: bool,
}

impl MountKind {
    /// How mounts of this kind are made.
    pub fn policy(self) -> MountPolicy {
        let writable = matches!(self, MountKind::Socket | MountKind::Directory);
        MountPolicy {
            readonly: !writable,
            nosuid: true,
            nodev: true,
            noexec: !matches!(self, MountKind::Library | MountKind::Binary),
        }
    }
}

impl MountPolicy {
    /// The policy as OCI bind-mount options (`ro`, `nosuid`, `nodev`, `noexec`, `bind`).
    pub fn oci_options(self) -> Vec<String> {
        [
            (self.readonly, "ro"),
            (self.nosuid, "nosuid"),
            (self.nodev, "nodev"),
            (self.noexec, "noexec"),
            (true, "bind"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, o)| o.to_string())
        .collect()
    }
}

/// A bind mount of a host file into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// The file on the host.
    pub host_path: PathBuf,
    /// Where it goes in the container.
    pub container_path: PathBuf,
    /// What it is.
    pub kind: MountKind,
    /// Mount options, OCI style.
    pub options: Vec<String>,
}

/// A symbolic link to create in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symlink {
    /// The link's path in the container.
    pub link: PathBuf,
    /// What it points to (relative to the link's folder).
    pub target: String,
}

/// Everything a container gets, in CDI's `containerEdits` shape plus what CDI expresses
/// with hooks (links, library folders, the GPUs left visible in `/proc`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// Environment variables, `KEY=VALUE`.
    pub env: Vec<String>,
    /// Device nodes.
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts.
    pub mounts: Vec<Mount>,
    /// Symbolic links (sonames and the like).
    pub symlinks: Vec<Symlink>,
    /// Container folders whose libraries the ld.so.cache must list.
    pub ldcache_dirs: Vec<PathBuf>,
    /// PCI bus ids of the GPUs the container's `/proc/driver/nvidia/gpus` shows.
    pub visible_gpus: Vec<String>,
}

impl ContainerEdits {
    /// Whether nothing is to be done.
    pub fn is_empty(&self) -> bool {
        *self == ContainerEdits::default()
    }

    /// These edits with the libraries, their links and the cache folders moved from the
    /// folders of `from` to those of `to`: what [`compute`] with `to` gives, without
    /// selecting the GPUs again (the hook learns the image's layout only inside it).
    pub fn relocated(&self, from: &ContainerLayout, to: &ContainerLayout) -> ContainerEdits {
        let moved = |path: &Path| -> Option<PathBuf> {
            let name = path.file_name()?;
            let parent = path.parent()?;
            if parent == from.lib64 {
                Some(to.lib64.join(name))
            } else if parent == from.lib32 {
                Some(to.lib32.join(name))
            } else {
                None
            }
        };
        let dir = |d: &PathBuf| {
            if *d == from.lib64 {
                to.lib64.clone()
            } else if *d == from.lib32 {
                to.lib32.clone()
            } else {
                d.clone()
            }
        };
        let mut out = self.clone();
        for m in out
            .mounts
            .iter_mut()
            .filter(|m| m.kind == MountKind::Library)
        {
            if let Some(p) = moved(&m.container_path) {
                m.container_path = p;
            }
        }
        for s in &mut out.symlinks {
            if let Some(p) = moved(&s.link) {
                s.link = p;
            }
        }
        out.ldcache_dirs = out.ldcache_dirs.iter().map(dir).collect();
        out
    }
}

/// Why a request cannot be met.
#[derive(Debug, thiserror::Error)]
pub enum EditsError {
    /// A requested device does not exist on this host.
    #[error("{variable}: {device} does not exist ({known})")]
    UnknownDevice {
        /// The variable that asked for it.
        variable: &'static str,
        /// The device as asked for.
        device: String,
        /// What the host has.
        known: String,
    },
    /// A form of device selection this build cannot resolve.
    #[error("{variable}: {device}: {reason}")]
    Unsupported {
        /// The variable that asked for it.
        variable: &'static str,
        /// The device as asked for.
        device: String,
        /// Why.
        reason: &'static str,
    },
    /// A requested IMEX channel has no node on the host.
    #[error("NVIDIA_IMEX_CHANNELS: channel {0} has no device node on this host")]
    UnknownChannel(u32),
    /// The driver lacks a node the request needs.
    #[error("{variable}: the driver has no {what} device node")]
    MissingNode {
        /// The variable that asked for it.
        variable: &'static str,
        /// The node.
        what: &'static str,
    },
}

/// The GPUs and MIG devices a selection names, each once, in the order asked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Selected<'a> {
    /// Whole GPUs.
    pub gpus: Vec<&'a Gpu>,
    /// MIG devices with their parent GPU.
    pub mig: Vec<(&'a Gpu, &'a MigDevice)>,
}

impl<'a> Selected<'a> {
    /// Every GPU that is selected whole or through one of its MIG devices, each once.
    pub fn all_gpus(&self) -> Vec<&'a Gpu> {
        let mut out: Vec<&Gpu> = Vec::new();
        for g in self
            .gpus
            .iter()
            .copied()
            .chain(self.mig.iter().map(|(g, _)| *g))
        {
            if !out.iter().any(|o| o.index == g.index) {
                out.push(g);
            }
        }
        out
    }
}

fn known_gpus(driver: &Driver) -> String {
    match driver.gpus.len() {
        0 => "this host has no GPU".to_string(),
        1 => "this host has 1 GPU, index 0".to_string(),
        n => format!("this host has {n} GPUs, indices 0-{}", n - 1),
    }
}

/// Resolves a device selection against the host's GPUs.
pub fn select<'a>(
    driver: &'a Driver,
    selection: &DeviceSelection,
    variable: &'static str,
) -> Result<Selected<'a>, EditsError> {
    let mut out = Selected::default();
    let ids = match selection {
        DeviceSelection::NotRequested | DeviceSelection::None => return Ok(out),
        DeviceSelection::All => {
            out.gpus = driver.gpus.iter().collect();
            return Ok(out);
        }
        DeviceSelection::List(ids) => ids,
    };
    let unknown = |device: String| EditsError::UnknownDevice {
        variable,
        device,
        known: known_gpus(driver),
    };
    for id in ids {
        match id {
            DeviceId::Index(i) => {
                let gpu = driver
                    .gpus
                    .get(*i as usize)
                    .ok_or_else(|| unknown(format!("GPU index {i}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::GpuUuid(u) => {
                let gpu = driver
                    .gpus
                    .iter()
                    .find(|g| g.uuid.eq_ignore_ascii_case(u))
                    .ok_or_else(|| unknown(format!("GPU {u}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::BusId(b) => {
                let gpu = driver
                    .gpus
                    .iter()
                    .find(|g| g.bus_id.eq_ignore_ascii_case(b))
                    .ok_or_else(|| unknown(format!("the GPU at PCI bus id {b}")))?;
                push_gpu(&mut out, gpu);
            }
            DeviceId::MigIndex { gpu, mig } => {
                let parent = driver
                    .gpus
                    .get(*gpu as usize)
                    .ok_or_else(|| unknown(format!("GPU index {gpu} (of MIG device {gpu}:{mig})")))?;
                let dev = parent.mig.get(*mig as usize).ok_or_else(|| EditsError::UnknownDevice {
                    variable,
                    device: format!("MIG device {gpu}:{mig}"),
                    known: format!("GPU {gpu} has {} MIG devices", parent.mig.len()),
                })?;
                if !out.mig.iter().any(|(g, m)| g.index == parent.index && m.index == dev.index) {
                    out.mig.push((parent, dev));
                }
            }
            DeviceId::MigUuid(u) => {
                return Err(EditsError::Unsupported {
                    variable,
                    device: u.clone(),
                    reason: "selecting MIG devices by UUID is not supported yet; select them as <gpu>:<mig> (see `nvc info`)",
                })
            }
        }
    }
    Ok(out)
}

fn push_gpu<'a>(out: &mut Selected<'a>, gpu: &'a Gpu) {
    if !out.gpus.iter().any(|g| g.index == gpu.index) {
        out.gpus.push(gpu);
    }
}

/// The edits for `request` on this `driver`, with libraries placed per `layout`.
/// A request that does not ask for GPU support gives empty edits.
pub fn compute(
    driver: &Driver,
    request: &Request,
    layout: &ContainerLayout,
) -> Result<ContainerEdits, EditsError> {
    if !request.wants_gpu_support() {
        return Ok(ContainerEdits::default());
    }
    let selected = select(driver, &request.devices, "NVIDIA_VISIBLE_DEVICES")?;
    build(driver, request, &selected, layout)
}

/// The edits for `request` with its GPUs already [`select`]ed.
pub fn build(
    driver: &Driver,
    request: &Request,
    selected: &Selected<'_>,
    layout: &ContainerLayout,
) -> Result<ContainerEdits, EditsError> {
    let mut edits = ContainerEdits::default();
    if !request.wants_gpu_support() {
        return Ok(edits);
    }
    let caps = request.capabilities;

    // Device nodes: the control nodes, then each selected GPU and MIG device.
    let wants_modeset = caps.contains(Capability::Graphics) || caps.contains(Capability::Display);
    for node in &driver.control_nodes {
        if node.path == Path::new("/dev/nvidia-modeset") && !wants_modeset {
            continue;
        }
        edits.device_nodes.push(node.clone());
    }
    for gpu in selected.all_gpus() {
        edits.device_nodes.push(gpu.node.clone());
        edits.visible_gpus.push(gpu.bus_id.clone());
    }
    for (_, mig) in &selected.mig {
        edits.device_nodes.extend(mig.caps.iter().cloned());
    }
    for (selection, node, variable, what) in [
        (
            &request.mig_config,
            &driver.mig_config,
            "NVIDIA_MIG_CONFIG_DEVICES",
            "MIG config capability",
        ),
        (
            &request.mig_monitor,
            &driver.mig_monitor,
            "NVIDIA_MIG_MONITOR_DEVICES",
            "MIG monitor capability",
        ),
    ] {
        let chosen = select(driver, selection, variable)?;
        if matches!(
            selection,
            DeviceSelection::NotRequested | DeviceSelection::None
        ) {
            continue;
        }
        let node = node
            .as_ref()
            .ok_or(EditsError::MissingNode { variable, what })?;
        edits.device_nodes.push(node.clone());
        for gpu in chosen.all_gpus() {
            edits.device_nodes.push(gpu.node.clone());
        }
    }
    match &request.imex_channels {
        ChannelSelection::None => {}
        ChannelSelection::All => edits
            .device_nodes
            .extend(driver.imex_channels.iter().cloned()),
        ChannelSelection::List(list) => {
            for n in list {
                let name = format!("channel{n}");
                let node = driver
                    .imex_channels
                    .iter()
                    .find(|c| c.path.file_name().and_then(|f| f.to_str()) == Some(name.as_str()))
                    .ok_or(EditsError::UnknownChannel(*n))?;
                edits.device_nodes.push(node.clone());
            }
        }
    }
    dedup_nodes(&mut edits.device_nodes);

    add_libraries(driver, caps, layout, &mut edits);
    let files = driver
        .binaries
        .iter()
        .map(|f| (f, MountKind::Binary))
        .chain(driver.firmware.iter().map(|f| (f, MountKind::Firmware)))
        .chain(driver.files.iter().map(|f| (f, MountKind::Config)))
        .chain(driver.ipc.iter().map(|f| {
            // Discovery kept only a folder where the table wants one, a socket elsewhere.
            let is_dir = tables::IPC
                .iter()
                .any(|(_, _, container, dir)| *dir && Path::new(container) == f.container_path);
            let kind = if is_dir {
                MountKind::Directory
            } else {
                MountKind::Socket
            };
            (f, kind)
        }));
    for (file, kind) in files {
        if file.wanted_by(caps) {
            edits.mounts.push(Mount {
                host_path: file.host_path.clone(),
                container_path: file.container_path.clone(),
                kind,
                options: kind.policy().oci_options(),
            });
        }
    }
    Ok(edits)
}

fn dedup_nodes(nodes: &mut Vec<DeviceNode>) {
    let mut seen = std::collections::BTreeSet::new();
    nodes.retain(|n| seen.insert(n.path.clone()));
}

/// Library mounts into the layout's folders, their soname links, and the folders for
/// the ld.so.cache.
fn add_libraries(
    driver: &Driver,
    caps: CapabilitySet,
    layout: &ContainerLayout,
    edits: &mut ContainerEdits,
) {
    for class in [LibClass::Lib64, LibClass::Lib32] {
        if class == LibClass::Lib32 && !caps.contains(Capability::Compat32) {
            continue;
        }
        let dir = match class {
            LibClass::Lib64 => &layout.lib64,
            LibClass::Lib32 => &layout.lib32,
        };
        let mut any = false;
        for lib in driver.libraries.iter().filter(|l| l.class == class) {
            if !lib.capabilities.iter().any(|c| caps.contains(*c)) {
                continue;
            }
            any = true;
            edits.mounts.push(Mount {
                host_path: lib.host_path.clone(),
                container_path: dir.join(&lib.file_name),
                kind: MountKind::Library,
                options: MountKind::Library.policy().oci_options(),
            });
            if lib.soname != lib.file_name {
                edits.symlinks.push(Symlink {
                    link: dir.join(&lib.soname),
                    target: lib.file_name.clone(),
                });
            }
            for (stem, link, target) in tables::EXTRA_LINKS {
                if *stem == lib.stem && lib.soname == *target {
                    edits.symlinks.push(Symlink {
                        link: dir.join(link),
                        target: target.to_string(),
                    });
                }
            }
        }
        if any {
            edits.ldcache_dirs.push(dir.clone());
        }
    }
}

/// The host's facts for a requirement check over the selected GPUs; each is looked up
/// only when a constraint asks for it.
pub struct HostFacts<'a> {
    driver: &'a Driver,
    probe: &'a dyn HostProbe,
    gpus: Vec<&'a Gpu>,
}

impl<'a> HostFacts<'a> {
    /// Facts about `driver` and the GPUs in `selected`.
    pub fn new(driver: &'a Driver, probe: &'a dyn HostProbe, selected: &Selected<'a>) -> Self {
        HostFacts {
            driver,
            probe,
            gpus: selected.all_gpus(),
        }
    }
}

impl Facts for HostFacts<'_> {
    fn cuda_version(&self) -> Result<Version, FactError> {
        self.driver
            .cuda_version(self.probe)
            .map_err(|e| FactError::new(Fact::CudaVersion, e))
    }

    fn driver_version(&self) -> Result<Version, FactError> {
        self.driver.version().ok_or_else(|| {
            FactError::new(
                Fact::DriverVersion,
                format!("{:?} is not a version", self.driver.version),
            )
        })
    }

    fn gpus(&self) -> Result<Vec<GpuFacts>, FactError> {
        if self.gpus.is_empty() {
            return Ok(Vec::new());
        }
        let details = self
            .driver
            .gpu_details(self.probe)
            .map_err(|e| FactError::new(Fact::Gpus, e))?;
        self.gpus
            .iter()
            .map(|g| {
                let d = details.iter().find(|d| d.uuid == g.uuid);
                let missing = |what: &str| {
                    FactError::new(
                        Fact::Gpus,
                        format!("NVML does not report the {what} of GPU {}", g.index),
                    )
                };
                Ok(GpuFacts {
                    arch: d
                        .and_then(|d| d.arch())
                        .ok_or_else(|| missing("compute capability"))?,
                    brand: d
                        .and_then(|d| d.brand.clone())
                        .ok_or_else(|| missing("brand"))?,
                })
            })
            .collect()
    }
}

/// Checks the request's `NVIDIA_REQUIRE_*` constraints against the host, unless checks
/// are disabled.
pub fn check_requirements(
    driver: &Driver,
    probe: &dyn HostProbe,
    request: &Request,
) -> Result<(), RequirementError> {
    if !request.check_requirements || request.requirements.is_empty() {
        return Ok(());
    }
    let selected = select(driver, &request.devices, "NVIDIA_VISIBLE_DEVICES")?;
    Ok(check_selected(driver, probe, request, &selected)?)
}

/// [`check_requirements`] for GPUs already [`select`]ed.
pub fn check_selected(
    driver: &Driver,
    probe: &dyn HostProbe,
    request: &Request,
    selected: &Selected<'_>,
) -> Result<(), require::Unmet> {
    if !request.check_requirements || request.requirements.is_empty() {
        return Ok(());
    }
    require::check(
        &request.requirements,
        &HostFacts::new(driver, probe, selected),
    )
}

/// A failed requirement check.
#[derive(Debug, thiserror::Error)]
pub enum RequirementError {
    /// The selection itself is invalid.
    #[error(transparent)]
    Select(#[from] EditsError),
    /// A requirement does not hold.
    #[error(transparent)]
    Unmet(#[from] require::Unmet),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::discover::{DriverRoots, Library};
    use crate::request::RequestPolicy;

    fn library(stem: &str, class: LibClass, cap: Capability) -> Library {
        let dir = match class {
            LibClass::Lib64 => "/usr/lib/x86_64-linux-gnu",
            LibClass::Lib32 => "/usr/lib/i386-linux-gnu",
        };
        Library {
            capabilities: vec![cap],
            class,
            stem: stem.to_string(),
            soname: format!("{stem}.so.1"),
            host_path: PathBuf::from(format!("{dir}/{stem}.so.999.88.77")),
            file_name: format!("{stem}.so.999.88.77"),
        }
    }

    fn driver() -> Driver {
        Driver {
            roots: DriverRoots {
                root: "/".into(),
                dev_root: "/".into(),
                proc_root: "/proc".into(),
            },
            version: "999.88.77".into(),
            gpus: Vec::new(),
            libraries: vec![
                library("libcuda", LibClass::Lib64, Capability::Compute),
                library("libnvidia-ml", LibClass::Lib64, Capability::Utility),
                library("libcuda", LibClass::Lib32, Capability::Compute),
            ],
            binaries: Vec::new(),
            firmware: Vec::new(),
            files: Vec::new(),
            ipc: Vec::new(),
            control_nodes: Vec::new(),
            mig_config: None,
            mig_monitor: None,
            imex_channels: Vec::new(),
        }
    }

    #[test]
    fn relocating_equals_computing_for_the_other_layout() {
        let request = Request::from_env(
            [
                "NVIDIA_VISIBLE_DEVICES=void",
                "NVIDIA_VISIBLE_DEVICES=none",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
            ],
            &RequestPolicy::default(),
        )
        .unwrap();
        let d = driver();
        let debian = compute(&d, &request, &ContainerLayout::debian()).unwrap();
        assert_eq!(debian.ldcache_dirs.len(), 2, "{debian:#?}");
        for (from, to) in [
            (ContainerLayout::debian(), ContainerLayout::lib64()),
            (ContainerLayout::lib64(), ContainerLayout::debian()),
        ] {
            let planned = compute(&d, &request, &from).unwrap();
            assert_eq!(
                planned.relocated(&from, &to),
                compute(&d, &request, &to).unwrap()
            );
            assert_eq!(planned.relocated(&from, &from), planned);
        }
    }

    #[test]
    fn one_mount_policy_for_spec_options_and_mount_attributes() {
        let cases = [
            (MountKind::Library, "ro,nosuid,nodev,bind"),
            (MountKind::Binary, "ro,nosuid,nodev,bind"),
            (MountKind::Firmware, "ro,nosuid,nodev,noexec,bind"),
            (MountKind::Config, "ro,nosuid,nodev,noexec,bind"),
            (MountKind::Socket, "nosuid,nodev,noexec,bind"),
            (MountKind::Directory, "nosuid,nodev,noexec,bind"),
        ];
        for (kind, options) in cases {
            assert_eq!(kind.policy().oci_options().join(","), options, "{kind:?}");
        }
    }

    #[test]
    fn the_image_layout_follows_its_folders() {
        let has =
            |dirs: &'static [&'static str]| move |p: &Path| dirs.iter().any(|d| Path::new(d) == p);
        assert_eq!(
            ContainerLayout::of_image(has(&[])),
            ContainerLayout::debian()
        );
        assert_eq!(
            ContainerLayout::of_image(has(&["/usr/lib64"])),
            ContainerLayout::lib64()
        );
        assert_eq!(
            ContainerLayout::of_image(has(&["/usr/lib64", "/usr/lib/x86_64-linux-gnu"])),
            ContainerLayout::debian()
        );
    }
}
