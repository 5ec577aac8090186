//! CUDA forward compatibility: an image may carry a newer CUDA driver's user-space
//! libraries in `/usr/local/cuda/compat` (NVIDIA's `cuda-compat` package). When its
//! `libcuda.so.<version>` is newer than the host's driver, those libraries go first in the
//! container's ld.so.cache, ahead of the host's. One rule for the prestart hook
//! ([`crate::setup`]) and the CDI `update-ldcache` hook ([`crate::cdi_hooks`]), through
//! [`crate::ldcache::update`].

use std::path::Path;

use libnvc::ldcache::{CacheArch, Entry};
use libnvc::version::Version;
use log::info;

use crate::container::ContainerRoot;

/// Where the image keeps them.
pub const COMPAT_DIR: &str = "/usr/local/cuda/compat";

/// The most names read from the folder.
const MAX_NAMES: usize = 4096;

/// The cache entries of the image's compat libraries, when its `libcuda.so.<v>` is newer
/// than `host` (the host driver's version; `None`: unknown, so none): entries named by
/// the soname-like file names there (`libcuda.so.1`, `libnvidia-nvvm.so.4`, ...). The
/// folder is only listed, inside the root and on its mount; no library is opened.
/// The entries get the cache flags of `abi`, the driver's 64-bit libraries' (the image runs
/// on the driver's host, so its compat libraries are of that architecture).
pub fn entries(root: &ContainerRoot, host: Option<&Version>, abi: CacheArch) -> Vec<Entry> {
    let dir = Path::new(COMPAT_DIR);
    let Ok(names) = root.read_dir(dir, MAX_NAMES) else {
        return Vec::new();
    };
    let newer = names.iter().any(|n| {
        n.strip_prefix("libcuda.so.")
            .and_then(|v| v.parse::<Version>().ok())
            .is_some_and(|v| v.parts().len() >= 2 && host.is_some_and(|h| v > *h))
    });
    if !newer {
        return Vec::new();
    }
    info!(
        "using the image's newer CUDA compat libraries from {}",
        dir.display()
    );
    let mut out: Vec<Entry> = names
        .iter()
        .filter(|n| {
            n.split_once(".so.")
                .is_some_and(|(_, v)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|n| Entry {
            name: n.clone(),
            path: dir.join(n).display().to_string(),
            flags: abi.flags(),
            hwcap: 0,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
