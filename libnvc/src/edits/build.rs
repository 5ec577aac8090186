//! Building a container's edits from a request and its selected GPUs ([`build`]): device
//! nodes, library mounts and their links, the other driver files, and the folders for the
//! ld.so.cache.

use std::path::Path;

use crate::caps::{Capability, CapabilitySet};
use crate::discover::{tables, DeviceNode, Driver, LibClass};
use crate::request::{ChannelSelection, DeviceSelection, Request};

use super::{
    select, ContainerEdits, ContainerLayout, EditsError, Mount, MountKind, Selected, Symlink,
};

/// The edits for `request` with its GPUs already [`select`](fn@select)ed.
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
    // On WSL the one node is every GPU: only a request for all of them gets it.
    let control = driver.wsl.is_none() || matches!(request.devices, DeviceSelection::All);
    for node in driver.control_nodes.iter().filter(|_| control) {
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
            // A library with a folder of its own (WSL's) goes there, and so does its
            // folder in the ld.so.cache, before the image's.
            let dir = match &lib.container_dir {
                Some(own) => {
                    if !edits.ldcache_dirs.contains(own) {
                        edits.ldcache_dirs.push(own.clone());
                    }
                    own
                }
                None => {
                    any = true;
                    dir
                }
            };
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
    // A folder whose files come as they are (WSL's) can hold the soname's file itself:
    // no link goes over a file mounted there, nor twice to one name.
    let mounted: std::collections::BTreeSet<_> = edits
        .mounts
        .iter()
        .map(|m| m.container_path.clone())
        .collect();
    let mut linked = std::collections::BTreeSet::new();
    edits
        .symlinks
        .retain(|s| !mounted.contains(&s.link) && linked.insert(s.link.clone()));
}
