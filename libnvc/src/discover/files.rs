//! Driver files under the driver root: libraries (through its ld.so.cache), binaries,
//! firmware, loader configuration and IPC endpoints.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use log::{debug, warn};

use super::driver_root::resolve_in_root;
use super::{tables, DiscoverError, HostFile, LibClass, Library};
use crate::caps::Capability;
use crate::elf::{self, Arch, ElfClass};
use crate::ldcache::{self, Cache, CacheArch};
use crate::probe::{FileKind, HostProbe, ProbeError};

/// The driver root's ld.so.cache; `None` when it has none.
pub fn read_ldcache(probe: &dyn HostProbe, root: &Path) -> Result<Option<Cache>, DiscoverError> {
    match resolve_in_root(probe, root, Path::new("/etc/ld.so.cache")) {
        Ok(path) => ldcache::read_from(probe, &path)
            .map(Some)
            .map_err(DiscoverError::LdCache),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            warn!(
                "{} has no /etc/ld.so.cache: no driver library can be found",
                root.display()
            );
            Ok(None)
        }
        Err(e) => Err(DiscoverError::io(
            "resolve",
            &root.join("etc/ld.so.cache"),
            e,
        )),
    }
}

/// The real file of the 64-bit library `soname` (`libnvidia-ml.so.1`) as the driver root's
/// ld.so.cache lists it: from `cache` when it was read, else from the cache read now.
pub fn library_path(
    probe: &dyn HostProbe,
    root: &Path,
    cache: Option<&Cache>,
    soname: &str,
) -> Result<PathBuf, ProbeError> {
    let missing = |source: Box<dyn std::error::Error + Send + Sync>| ProbeError {
        library: root.join(soname),
        source,
    };
    let read;
    let cache = match cache {
        Some(cache) => cache,
        None => {
            read = read_ldcache(probe, root).map_err(|e| missing(Box::new(e)))?;
            read.as_ref().ok_or_else(|| {
                missing("the driver root has no /etc/ld.so.cache to find it through".into())
            })?
        }
    };
    let unlisted = || missing(format!("the driver root's ld.so.cache lists no {soname}").into());
    let arch = cache_arch(cache).ok_or_else(unlisted)?;
    let entry = cache.lookup(soname, arch.into()).ok_or_else(unlisted)?;
    resolve_in_root(probe, root, Path::new(&entry.path)).map_err(|e| missing(Box::new(e)))
}

/// The driver version out of the version suffix of libcuda or libnvidia-ml, for hosts
/// whose kernel module is not loaded (or a proc root without it).
pub fn version_from_libraries(
    probe: &dyn HostProbe,
    root: &Path,
    cache: Option<&Cache>,
) -> Option<String> {
    let cache = cache?;
    let arch = cache_arch(cache)?;
    ["libnvidia-ml.so.1", "libcuda.so.1"]
        .iter()
        .find_map(|name| {
            let entry = cache.lookup(name, arch.into())?;
            let real = resolve_in_root(probe, root, Path::new(&entry.path)).ok()?;
            let file = real.file_name()?.to_str()?;
            let suffix = file.split_once(".so.")?.1;
            suffix.parse::<crate::version::Version>().ok()?;
            Some(suffix.to_string())
        })
}

/// The capabilities a library stem belongs to.
fn library_capabilities(stem: &str) -> Vec<Capability> {
    tables::LIBRARIES
        .iter()
        .filter(|(_, stems)| stems.contains(&stem))
        .map(|(cap, _)| *cap)
        .collect()
}

/// The architecture the driver root's ld.so.cache lists the driver's libraries for: the
/// 64-bit ABI of its entries for `libcuda.so.1`, else `libnvidia-ml.so.1`, else of its
/// first driver library. The host's `ldconfig` records every 64-bit library it lists
/// with its own ABI (`0x0303` on x86-64, `0x0a03` on AArch64, whatever the file's
/// machine), so this is the architecture of the host the root belongs to; each library's
/// ELF header is then checked against it.
fn cache_arch(cache: &Cache) -> Option<Arch> {
    let arch64 = |e: &ldcache::Entry| e.arch().and_then(CacheArch::arch64);
    let named = |name: &str| {
        cache
            .entries
            .iter()
            .filter(|e| e.name == name)
            .find_map(arch64)
    };
    named("libcuda.so.1")
        .or_else(|| named("libnvidia-ml.so.1"))
        .or_else(|| {
            cache
                .entries
                .iter()
                .filter(|e| {
                    e.name
                        .split_once(".so")
                        .is_some_and(|(stem, _)| !library_capabilities(stem).is_empty())
                })
                .find_map(arch64)
        })
}

/// The architecture of the driver whose libraries discovery found: that of its 64-bit
/// libraries (all of one, by [`libraries`]).
pub(super) fn arch_of(libraries: &[Library]) -> Option<Arch> {
    libraries
        .iter()
        .find(|l| l.class == LibClass::Lib64)
        .map(|l| l.arch)
}

/// Every driver library in the cache whose real file carries the driver version and is
/// an ELF shared object of the driver's architecture ([`cache_arch`]) and the entry's
/// class; one of another architecture is skipped, saying so.
pub fn libraries(
    probe: &dyn HostProbe,
    root: &Path,
    cache: Option<&Cache>,
    version: &str,
) -> Vec<Library> {
    let Some(cache) = cache else {
        return Vec::new();
    };
    let Some(arch) = cache_arch(cache) else {
        return Vec::new();
    };
    let suffix = format!(".so.{version}");
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for entry in &cache.entries {
        let (class, want_class, want_machine) = match entry.arch() {
            Some(abi) if abi.arch64() == Some(arch) => {
                (LibClass::Lib64, ElfClass::Elf64, arch.machine())
            }
            Some(abi) if abi.arch64().is_some() => {
                warn!(
                    "skipping {} => {}: listed for {abi:?}, but the driver root's libraries \
                     are {arch}",
                    entry.name, entry.path
                );
                continue;
            }
            Some(CacheArch::I386) => match arch.lib32_machine() {
                Some(machine) => (LibClass::Lib32, ElfClass::Elf32, machine),
                None => continue,
            },
            _ => continue,
        };
        let Some((stem, _)) = entry.name.split_once(".so") else {
            continue;
        };
        let capabilities = library_capabilities(stem);
        if capabilities.is_empty() {
            continue;
        }
        let host_path = match resolve_in_root(probe, root, Path::new(&entry.path)) {
            Ok(p) => p,
            Err(e) => {
                debug!("skipping {} => {}: {e}", entry.name, entry.path);
                continue;
            }
        };
        if !seen.insert(host_path.clone()) {
            continue;
        }
        let Some(file_name) = host_path
            .file_name()
            .and_then(|f| f.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if !file_name.ends_with(&suffix) {
            debug!(
                "skipping {}: not of driver version {version}",
                host_path.display()
            );
            continue;
        }
        let info = match read_elf(probe, &host_path) {
            Ok(info) => info,
            Err(e) => {
                warn!("skipping {}: {e}", host_path.display());
                continue;
            }
        };
        if info.class != want_class || info.machine != want_machine {
            // An x86-64 library in an aarch64 root (its ldconfig lists it as aarch64), or
            // a 32-bit one where a 64-bit one belongs.
            warn!(
                "skipping {}: {}, but the driver root's ld.so.cache lists it as a {class:?} \
                 library of the {arch} driver",
                host_path.display(),
                elf::describe(&info)
            );
            continue;
        }
        if info.elf_type != elf::ET_DYN {
            warn!(
                "skipping {}: not a {class:?} shared object",
                host_path.display()
            );
            continue;
        }
        out.push(Library {
            capabilities,
            arch,
            class,
            stem: stem.to_string(),
            soname: info.soname.unwrap_or_else(|| entry.name.clone()),
            host_path,
            file_name,
            container_dir: None,
        });
    }
    out.sort_by(|a, b| (a.class, &a.stem).cmp(&(b.class, &b.stem)));
    out
}

/// Resolves `inner` in `root` and keeps it when it is a regular file.
fn regular_file(probe: &dyn HostProbe, root: &Path, inner: &Path) -> Option<PathBuf> {
    let host = resolve_in_root(probe, root, inner).ok()?;
    (probe.stat(&host).ok()?.kind == FileKind::File).then_some(host)
}

/// The ELF headers of the host file at `path`.
fn read_elf(probe: &dyn HostProbe, path: &Path) -> Result<elf::ElfInfo, elf::ElfError> {
    let file = probe.open(path).map_err(|source| elf::ElfError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    elf::read_elf_info_file(file, path)
}

/// The driver's binaries, first found along [`tables::BINARY_DIRS`]: ELF programs of the
/// driver's architecture `arch` (of any architecture nvc knows, when the driver has no
/// library to tell).
pub fn binaries(probe: &dyn HostProbe, root: &Path, arch: Option<Arch>) -> Vec<HostFile> {
    let wanted = |info: &elf::ElfInfo| match (arch, Arch::of(info)) {
        (Some(want), Some(got)) => want == got,
        (None, got) => got.is_some(),
        (Some(_), None) => false,
    };
    let mut out = Vec::new();
    for (cap, names) in tables::BINARIES {
        for name in *names {
            // Only a real ELF program: some installs put wrapper scripts on PATH that
            // exec the driver's binary by a host path the container does not have.
            let found = tables::BINARY_DIRS.iter().find_map(|dir| {
                let host = regular_file(probe, root, &Path::new(dir).join(name))?;
                let mode = probe.stat(&host).ok()?.mode;
                let info = read_elf(probe, &host).ok()?;
                let program = info.elf_type == elf::ET_EXEC || info.elf_type == elf::ET_DYN;
                (mode & 0o111 != 0 && program && wanted(&info)).then_some(host)
            });
            if let Some(host_path) = found {
                out.push(HostFile {
                    capabilities: vec![*cap],
                    host_path,
                    container_path: Path::new("/usr/bin").join(name),
                });
            }
        }
    }
    out
}

/// The GSP firmware of this driver version.
pub fn firmware(probe: &dyn HostProbe, root: &Path, version: &str) -> Vec<HostFile> {
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for dir in tables::FIRMWARE_DIRS {
        let inner = Path::new(dir).join("nvidia").join(version);
        let Ok(host_dir) = resolve_in_root(probe, root, &inner) else {
            continue;
        };
        let Ok(entries) = probe.read_dir(&host_dir) else {
            continue;
        };
        let mut found: Vec<String> = entries
            .into_iter()
            .filter_map(|e| e.into_string().ok())
            .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
            .collect();
        found.sort();
        for name in found {
            let Some(host_path) = regular_file(probe, root, &inner.join(&name)) else {
                continue;
            };
            if names.insert(name.clone()) {
                out.push(HostFile {
                    capabilities: Vec::new(),
                    host_path,
                    container_path: Path::new(tables::FIRMWARE_CONTAINER_DIR)
                        .join(version)
                        .join(&name),
                });
            }
        }
    }
    out
}

/// Loader configuration files and the other per-capability driver files.
pub fn config_files(probe: &dyn HostProbe, root: &Path, version: &str) -> Vec<HostFile> {
    let mut out = Vec::new();
    for (cap, name, dirs, container_dir) in tables::CONFIG_FILES {
        if let Some(host_path) = dirs
            .iter()
            .find_map(|d| regular_file(probe, root, &Path::new(d).join(name)))
        {
            out.push(HostFile {
                capabilities: vec![*cap],
                host_path,
                container_path: Path::new(container_dir).join(name),
            });
        }
    }
    for (cap, path) in tables::OTHER_FILES {
        let inner = PathBuf::from(path.replace("{version}", version));
        if let Some(host_path) = regular_file(probe, root, &inner) {
            out.push(HostFile {
                capabilities: vec![*cap],
                host_path,
                container_path: inner,
            });
        }
    }
    out
}

/// IPC sockets and the MPS pipe directory that exist on the host.
pub fn ipc(probe: &dyn HostProbe, root: &Path) -> Vec<HostFile> {
    let mut out = Vec::new();
    for (caps, inner, container, is_dir) in tables::IPC {
        let Ok(host_path) = resolve_in_root(probe, root, Path::new(inner)) else {
            continue;
        };
        let Ok(meta) = probe.stat(&host_path) else {
            continue;
        };
        let ok = if *is_dir {
            meta.kind == FileKind::Dir
        } else {
            meta.kind == FileKind::Socket
        };
        if ok {
            out.push(HostFile {
                capabilities: caps.to_vec(),
                host_path,
                container_path: PathBuf::from(container),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::test_support;
    use crate::probe::TreeProbe;
    use Capability::*;

    /// gcc's x86-64 shared object `name` with `soname`, its header's machine made
    /// `machine`: discovery reads headers, nothing here loads it.
    fn object_of(dir: &Path, name: &str, soname: &str, machine: u16) -> Vec<u8> {
        let path = test_support::shared_object(dir, name, Some(soname));
        let mut bytes = std::fs::read(path).unwrap();
        bytes[18..20].copy_from_slice(&machine.to_le_bytes());
        bytes
    }

    #[test]
    fn libraries_are_of_the_architecture_the_cache_lists_them_for() {
        for (arch, other) in [(Arch::Aarch64, Arch::X86_64), (Arch::X86_64, Arch::Aarch64)] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("root");
            let lib = format!("/usr/lib/{}", arch.multiarch());
            let host_lib = root.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(&host_lib).unwrap();
            std::fs::create_dir_all(root.join("etc")).unwrap();
            let mut entries = Vec::new();
            for (stem, machine) in [("libcuda", arch), ("libnvidia-ml", other)] {
                let file = format!("{stem}.so.999.88.77");
                let bytes = object_of(
                    dir.path(),
                    &file,
                    &format!("{stem}.so.1"),
                    machine.machine(),
                );
                std::fs::write(host_lib.join(&file), bytes).unwrap();
                // As the host's ldconfig writes it: its own ABI for every 64-bit library.
                entries.push(ldcache::Entry {
                    name: format!("{stem}.so.1"),
                    path: format!("{lib}/{file}"),
                    flags: CacheArch::from(arch).flags(),
                    hwcap: 0,
                });
            }
            std::fs::write(
                root.join("etc/ld.so.cache"),
                ldcache::write(&entries).unwrap(),
            )
            .unwrap();
            let probe = TreeProbe::new();
            let cache = read_ldcache(&probe, &root).unwrap();
            assert_eq!(cache_arch(cache.as_ref().unwrap()), Some(arch));
            let found = libraries(&probe, &root, cache.as_ref(), "999.88.77");
            // The library of the other architecture is skipped (saying so in the log).
            let stems: Vec<_> = found.iter().map(|l| (l.stem.as_str(), l.arch)).collect();
            assert_eq!(stems, [("libcuda", arch)], "{arch}");
            assert_eq!(arch_of(&found), Some(arch));
            assert_eq!(
                version_from_libraries(&probe, &root, cache.as_ref()).as_deref(),
                Some("999.88.77")
            );
        }
    }

    #[test]
    fn libraries_map_to_capabilities() {
        let cases: &[(&str, &[Capability])] = &[
            ("libnvidia-ml", &[Utility]),
            ("libnvidia-cfg", &[Utility]),
            ("libcuda", &[Compute]),
            ("libnvidia-ptxjitcompiler", &[Compute]),
            ("libnvidia-nvvm", &[Compute]),
            ("libnvidia-opencl", &[Compute]),
            ("libnvidia-gpucomp", &[Compute, Graphics]),
            ("libnvcuvid", &[Video]),
            ("libnvidia-encode", &[Video]),
            ("libvdpau_nvidia", &[Video]),
            ("libGLX_nvidia", &[Graphics]),
            ("libEGL_nvidia", &[Graphics]),
            ("libnvoptix", &[Graphics]),
            ("libnvidia-ngx", &[Ngx]),
            ("libc", &[]),
            ("libGL", &[]),
            ("libcudart", &[]),
        ];
        for (stem, want) in cases {
            assert_eq!(library_capabilities(stem), *want, "{stem}");
        }
    }
}
