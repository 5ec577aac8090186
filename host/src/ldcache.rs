//! The one update of a container's `/etc/ld.so.cache`, shared by the prestart hook
//! ([`crate::setup`]) and the CDI `update-ldcache` hook ([`crate::cdi_hooks`]).
//!
//! The cache is written natively (nothing of the image is run): the image's CUDA
//! forward-compatibility libraries first when they are newer than the host's driver
//! ([`crate::compat`]), then the driver's libraries, then the image's own entries, each
//! entry once. In a read-only rootfs the new cache is mounted over `/etc/ld.so.cache`
//! (on an empty mount point where the image has none) rather than written.

use std::collections::HashSet;
use std::path::Path;

use libnvc::ldcache::{self, CacheArch, Entry, LdCacheError};
use libnvc::version::Version;
use log::{debug, info, warn};

use crate::container::{ContainerRoot, DetachedMount, FsError};

/// Where the loader reads its cache.
pub const LD_CACHE: &str = "/etc/ld.so.cache";
/// The most of the image's ld.so.cache read.
const MAX_CACHE: usize = 16 << 20;

/// Why the container's ld.so.cache was not updated.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// Reading or writing in the container failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The new cache could not be built.
    #[error("cannot build the container's ld.so.cache")]
    Build(#[source] LdCacheError),
}

/// The cache flags of this build's own architecture's 64-bit libraries (`0x0303` on
/// x86-64, `0x0a03` on aarch64): what the loader of a container on this host reads, for
/// libraries nothing else tells the architecture of (the CDI `update-ldcache` hook's,
/// compat libraries beside no driver library). The driver's libraries carry their own
/// ([`libnvc::discover::Library::arch`]).
pub fn native_abi() -> CacheArch {
    if cfg!(target_arch = "aarch64") {
        CacheArch::Aarch64
    } else {
        CacheArch::X86_64
    }
}

/// A written ld.so.cache: what was there before, and what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheChange {
    /// The image's cache, or `None` where it had none.
    pub original: Option<Vec<u8>>,
    /// The cache written.
    pub written: Vec<u8>,
}

/// Writes the container's ld.so.cache: the compat libraries newer than `compat_above`
/// (the host driver's version; `None`: none), then `ours`, then the image's entries.
pub fn update(
    root: &ContainerRoot,
    ours: Vec<Entry>,
    compat_above: Option<&Version>,
) -> Result<(), UpdateError> {
    update_noted(root, ours, compat_above).map(drop)
}

/// [`update`], saying what it wrote over what, when it wrote the file (not in a
/// read-only rootfs, where the new cache is a mount that goes with the container).
pub fn update_noted(
    root: &ContainerRoot,
    ours: Vec<Entry>,
    compat_above: Option<&Version>,
) -> Result<Option<CacheChange>, UpdateError> {
    let cache = Path::new(LD_CACHE);
    let abi = ours
        .iter()
        .filter_map(Entry::arch)
        .find(|abi| abi.arch64().is_some())
        .unwrap_or_else(native_abi);
    let mut entries = crate::compat::entries(root, compat_above, abi);
    entries.extend(ours);
    let mut original = None;
    let mut unknown = false;
    match root.read_file(cache, MAX_CACHE) {
        Ok(data) => match ldcache::parse(&original.insert(data)[..]) {
            // The cache written has no extension section: glibc-hwcaps entries would
            // point at subdirectories it cannot name.
            Ok(image) => entries.extend(
                image
                    .entries
                    .into_iter()
                    .filter(|e| e.hwcaps_index().is_none()),
            ),
            Err(e) => warn!("ignoring the image's unreadable {LD_CACHE}: {e}"),
        },
        Err(e) => {
            // Only a cache that is not there at all is known to be restored by removal.
            unknown = !matches!(e, FsError::NotFound { .. });
            debug!(
                "no usable {LD_CACHE} in the image: {}",
                libnvc::report::error_chain(&e)
            );
        }
    }
    let mut seen = HashSet::new();
    entries.retain(|e| seen.insert((e.name.clone(), e.path.clone(), e.flags, e.hwcap)));
    let bytes = ldcache::write(&entries).map_err(UpdateError::Build)?;
    if root.is_read_only() {
        let point = match root.file_mount_point(cache, 0o644) {
            Ok(point) => point,
            // A link there is never followed nor replaced: the image keeps its cache.
            Err(e @ FsError::WrongType { .. }) => {
                info!("the ld.so.cache is left as it is: {e}");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let file = DetachedMount::file(&bytes, 0o644, "the container's new ld.so.cache")?;
        root.attach(file, &point, cache)?;
        return Ok(None);
    }
    root.mkdir_all(Path::new("/etc"), 0o755)?;
    if !unknown {
        // The image's cache is kept before it is replaced: a process killed after the
        // write still leaves what puts it back.
        root.note_cache(original.as_deref(), &bytes);
    }
    root.write_file(cache, &bytes, 0o644)?;
    Ok((!unknown).then_some(CacheChange {
        original,
        written: bytes,
    }))
}
