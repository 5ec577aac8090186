//! Container edits: the one neutral, CDI-shaped value computed from what the driver
//! provides ([`Driver`]) and what a container asks for ([`Request`]). The runtime shim,
//! the hook and CDI generation all consume it. [`compute`] is pure and deterministic:
//! the same inputs give the same value, field for field.
//!
//! Split along its jobs: this file holds the edits' types and [`compute`]; `select.rs`
//! resolves a device selection against the host's GPUs ([`select`](fn@select)); `build.rs` turns a
//! request and its selected GPUs into edits ([`build`](fn@build)); `requirements.rs` checks the
//! request's `NVIDIA_REQUIRE_*` constraints against the host ([`HostFacts`],
//! [`check_requirements`]).

mod build;
mod requirements;
mod select;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::discover::{DeviceNode, Driver};
use crate::elf::Arch;
use crate::request::Request;

pub use build::build;
pub use requirements::{check_requirements, check_selected, HostFacts, RequirementError};
pub use select::{select, Selected};

/// Where driver files go in the container that the image decides: its library folders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerLayout {
    /// The 64-bit library folder: `/usr/lib/x86_64-linux-gnu` (`/usr/lib/aarch64-linux-gnu`
    /// for an aarch64 driver) in Debian-like images, `/usr/lib64` in others.
    pub lib64: PathBuf,
    /// The 32-bit library folder: `/usr/lib/i386-linux-gnu` or `/usr/lib`.
    pub lib32: PathBuf,
}

impl Default for ContainerLayout {
    /// The folders a plan places the libraries in before the image is known: Debian's
    /// x86-64 ones. The hook moves them to the image's own ([`ContainerLayout::of_image`],
    /// [`ContainerEdits::relocated`]), for whatever architecture the driver is.
    fn default() -> Self {
        ContainerLayout::debian()
    }
}

impl ContainerLayout {
    /// Debian's x86-64 multiarch folders: `/usr/lib/x86_64-linux-gnu` and
    /// `/usr/lib/i386-linux-gnu`.
    pub fn debian() -> Self {
        ContainerLayout::multiarch(Arch::X86_64)
    }

    /// Debian's multiarch folders for a driver of `arch`: those of [`debian`](Self::debian)
    /// for x86-64, `/usr/lib/aarch64-linux-gnu` (and `/usr/lib/arm-linux-gnueabihf`, where
    /// no NVIDIA library goes: the aarch64 driver has no 32-bit build) for aarch64.
    pub fn multiarch(arch: Arch) -> Self {
        ContainerLayout {
            lib64: Path::new("/usr/lib").join(arch.multiarch()),
            lib32: Path::new("/usr/lib").join(arch.multiarch32().unwrap_or("arm-linux-gnueabihf")),
        }
    }

    /// Debian's multiarch folders for `driver`'s architecture ([`Driver::arch`]); x86-64's
    /// for a driver with no 64-bit library, which puts no library in any folder.
    pub fn for_driver(driver: &Driver) -> Self {
        ContainerLayout::multiarch(driver.arch().unwrap_or(Arch::X86_64))
    }

    /// The folders of an image whose folders `is_dir` says exist, for a driver of `arch`
    /// (the image is of the host's architecture, which is the driver's): Debian's
    /// multiarch folders when it has them, else `/usr/lib64` when it has that, else the
    /// multiarch folders (created).
    pub fn of_image(arch: Arch, is_dir: impl Fn(&Path) -> bool) -> Self {
        let debian = ContainerLayout::multiarch(arch);
        let rh = ContainerLayout::lib64();
        if !is_dir(&debian.lib64) && is_dir(&rh.lib64) {
            rh
        } else {
            debian
        }
    }

    /// The folders of Red Hat-like images (on x86-64 and aarch64 alike).
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
    /// A MIG device named by UUID when NVML could not say the MIG devices' UUIDs.
    #[error(
        "{variable}: cannot tell which MIG device {device} is: NVML did not list the MIG \
         devices' UUIDs; name it as <gpu>:<mig> instead (`nvc info` lists them)"
    )]
    MigUuidsUnknown {
        /// The variable that asked for it.
        variable: &'static str,
        /// The MIG UUID as asked for.
        device: String,
        /// Why NVML did not answer.
        #[source]
        source: std::sync::Arc<crate::probe::ProbeError>,
    },
    /// One GPU asked for on WSL2, where `/dev/dxg` gives every GPU or none.
    #[error("{variable}: {device}: WSL cannot give a container one GPU and not another (its one device, /dev/dxg, reaches every GPU); ask for all of them with {variable}=all, or for none with {variable}=void")]
    WslCannotIsolate {
        /// The variable that asked for it.
        variable: &'static str,
        /// The device as asked for.
        device: String,
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
