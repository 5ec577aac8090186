//! The hooks a CDI spec asks the engine to run: `nvc-hook cdi-links` (the driver's soname
//! links) and `nvc-hook update-ldcache` (the container's ld.so.cache). Their arguments
//! say everything they do; [`CdiHook::args`] writes them and [`CdiHook::from_args`]
//! reads them back.
//!
//! # The stage, and why it is safe
//!
//! They are `createContainer` hooks. The OCI runtime spec runs those *in the container's
//! namespaces*, after the runtime has made the container's mounts (so the driver files the
//! spec bind-mounts are in place) and before `pivot_root`; the hook's path resolves in the
//! runtime's namespace. runc runs them from its `init` process, in the new mount
//! namespace, with the rootfs (`root.path`, a host path) still reachable by that path and
//! the host's `/proc` still at `/proc`.
//!
//! So the hook does not enter any namespace, unlike the prestart hook
//! ([`crate::apply`]), which runs in the runtime's namespace and must `setns` into the
//! container's through its pid. Here that pid is useless: runc reports `getpid()` of its
//! init, which inside a new pid namespace is 1, and `/proc/1` is the *host's* init, whose
//! mount namespace is the host's. The hook instead finds the rootfs as NVIDIA's
//! `nvidia-cdi-hook` does: the state's `bundle`, its `config.json`, `root.path` (joined to
//! the bundle when relative), and works on that path in the namespace it was started in,
//! where the container's mounts are visible. It must therefore only ever run at the
//! `createContainer` stage; the spec [`super::generate`] writes puts it nowhere else.
//!
//! The rootfs is hostile, and the hook runs as the runtime's root with every
//! capability. As everywhere in nvc, it touches the rootfs only through
//! [`ContainerRoot`]: opened once as an `O_PATH` fd, every path resolved inside it
//! (`openat2(RESOLVE_IN_ROOT)` or the fd walk), links made by a temporary name and a
//! rename, the cache written to a temporary file and renamed, the old cache read with a
//! size bound and parsed by a bounded parser. Nothing from the image is executed (no
//! `ldconfig`), no ELF file of the image is parsed, and the hook's environment is the
//! spec's fixed `PATH`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use nvc_sys::container::{ContainerRoot, FileKind, FsError};
use serde::Deserialize;

use super::CdiError;
use crate::ldcache::{self, CacheArch, Entry};
use crate::oci::spec::{self, SpecError};
use crate::version::Version;

/// The mode that makes symbolic links.
pub const LINKS_MODE: &str = "cdi-links";
/// The mode that updates the ld.so.cache.
pub const LDCACHE_MODE: &str = "update-ldcache";
/// `args[0]` of every hook.
pub const ARGV0: &str = "nvc-hook";
/// The most entries read from one library folder.
const MAX_DIR_ENTRIES: usize = 1 << 16;
/// The most of the image's ld.so.cache read.
const MAX_CACHE: usize = 16 << 20;
/// The flag that passes the host driver's version for CUDA forward compatibility.
const COMPAT_FLAG: &str = "--cuda-compat-above";
/// Where the loader reads its cache.
const LD_CACHE: &str = "/etc/ld.so.cache";

/// A symbolic link to make: `link` (absolute, in the container) pointing to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// What the link points to, usually a file name in the same folder.
    pub target: String,
    /// The link's path in the container.
    pub link: PathBuf,
}

impl Link {
    /// Reads `<target>::<link>`, the form of `--link`.
    pub fn parse(arg: &str) -> Result<Link, HookArgsError> {
        let bad = || HookArgsError::BadLink(arg.to_string());
        let (target, link) = arg.split_once("::").ok_or_else(bad)?;
        let link = PathBuf::from(link);
        if target.is_empty() || target.contains('\0') || !link.is_absolute() {
            return Err(bad());
        }
        if link.file_name().is_none() || link.as_os_str().to_string_lossy().ends_with('/') {
            return Err(bad());
        }
        Ok(Link {
            target: target.to_string(),
            link,
        })
    }

    /// `<target>::<link>`.
    pub fn to_arg(&self) -> Result<String, CdiError> {
        let link = self
            .link
            .to_str()
            .ok_or_else(|| CdiError::NotUtf8(self.link.clone()))?;
        Ok(format!("{}::{link}", self.target))
    }
}

/// One hook invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CdiHook {
    /// `cdi-links --link <target>::<link> …`: make (or replace) the links.
    Links(Vec<Link>),
    /// `update-ldcache --folder <dir> … [--cuda-compat-above <version>]`: add the 64-bit
    /// libraries of these container folders to the container's ld.so.cache, before the
    /// image's own entries; with a version (the host driver's), the image's CUDA
    /// forward-compatibility libraries go first when newer ([`crate::compat`]), as the
    /// prestart hook does.
    UpdateLdcache {
        /// The folders whose libraries are listed.
        folders: Vec<PathBuf>,
        /// The host driver's version, above which the image's compat libraries win.
        compat_above: Option<Version>,
    },
}

/// Hook arguments that are not what the spec writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookArgsError {
    /// An argument the mode does not take.
    #[error("unknown argument {arg:?} (expected {expected})")]
    Unknown {
        /// The argument.
        arg: String,
        /// What the mode takes.
        expected: &'static str,
    },
    /// A flag at the end without its value.
    #[error("{flag} needs a value")]
    MissingValue {
        /// The flag.
        flag: &'static str,
    },
    /// A `--link` value that is not `<target>::<absolute path>`.
    #[error("invalid link {0:?} (expected <target>::<absolute path in the container>)")]
    BadLink(String),
    /// A `--folder` that is not an absolute path.
    #[error("folder {0:?} is not an absolute path in the container")]
    BadFolder(String),
    /// A `--cuda-compat-above` that is no driver version.
    #[error("invalid driver version {0:?} for --cuda-compat-above")]
    BadVersion(String),
    /// A mode that is not a CDI hook's.
    #[error("unknown CDI hook mode {0:?} (expected cdi-links or update-ldcache)")]
    Mode(String),
}

/// Why a CDI hook failed.
#[derive(Debug, thiserror::Error)]
pub enum CdiHookError {
    /// Its arguments are invalid.
    #[error(transparent)]
    Args(#[from] HookArgsError),
    /// The state could not be read from stdin.
    #[error(transparent)]
    StateRead(#[from] crate::oci::state::StateError),
    /// The state on stdin is not the OCI state.
    #[error("invalid container state on stdin (expected the OCI state JSON with the bundle)")]
    State(#[source] serde_json::Error),
    /// The state's bundle is relative: the hook's working directory is the rootfs, so it
    /// cannot be resolved safely.
    #[error("the container state's bundle {0} is not an absolute path")]
    RelativeBundle(PathBuf),
    /// The bundle's config.json is unusable.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A file-system operation in the container failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The new ld.so.cache could not be built.
    #[error("cannot build the container's ld.so.cache")]
    LdCache(#[source] ldcache::LdCacheError),
}

#[derive(Deserialize)]
struct State {
    bundle: PathBuf,
}

/// The container's rootfs, as a host path, from the OCI state a hook reads on stdin:
/// `root.path` of the bundle's config.json, joined to the bundle when relative.
pub fn rootfs_from_state(state: &[u8]) -> Result<PathBuf, CdiHookError> {
    let state: State = serde_json::from_slice(state).map_err(CdiHookError::State)?;
    if !state.bundle.is_absolute() {
        return Err(CdiHookError::RelativeBundle(state.bundle));
    }
    let config = spec::read_spec(&state.bundle.join("config.json"))?;
    Ok(spec::view(&config, &state.bundle)?.rootfs)
}

impl CdiHook {
    /// Whether `mode` (`argv[1]`) is one of these hooks'.
    pub fn is_mode(mode: &str) -> bool {
        mode == LINKS_MODE || mode == LDCACHE_MODE
    }

    /// The mode, `argv[1]`.
    pub fn mode(&self) -> &'static str {
        match self {
            CdiHook::Links(_) => LINKS_MODE,
            CdiHook::UpdateLdcache { .. } => LDCACHE_MODE,
        }
    }

    /// The whole argv of the hook, `args[0]` included.
    pub fn args(&self) -> Result<Vec<String>, CdiError> {
        let mut args = vec![ARGV0.to_string(), self.mode().to_string()];
        match self {
            CdiHook::Links(links) => {
                for link in links {
                    args.push("--link".to_string());
                    args.push(link.to_arg()?);
                }
            }
            CdiHook::UpdateLdcache {
                folders,
                compat_above,
            } => {
                for folder in folders {
                    args.push("--folder".to_string());
                    args.push(
                        folder
                            .to_str()
                            .ok_or_else(|| CdiError::NotUtf8(folder.clone()))?
                            .to_string(),
                    );
                }
                if let Some(version) = compat_above {
                    args.push(COMPAT_FLAG.to_string());
                    args.push(version.to_string());
                }
            }
        }
        Ok(args)
    }

    /// Reads the arguments after the mode.
    pub fn from_args(mode: &str, args: &[String]) -> Result<CdiHook, HookArgsError> {
        let (mode, flags, expected): (&'static str, &[&'static str], &'static str) = match mode {
            LINKS_MODE => (LINKS_MODE, &["--link"], "--link <target>::<link>"),
            LDCACHE_MODE => (
                LDCACHE_MODE,
                &["--folder", COMPAT_FLAG],
                "--folder <dir> and --cuda-compat-above <driver version>",
            ),
            other => return Err(HookArgsError::Mode(other.to_string())),
        };
        let mut values: Vec<(&'static str, String)> = Vec::new();
        let mut it = args.iter();
        'args: while let Some(arg) = it.next() {
            for &flag in flags {
                if arg == flag {
                    let value = it.next().ok_or(HookArgsError::MissingValue { flag })?;
                    values.push((flag, value.clone()));
                    continue 'args;
                }
                if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                    values.push((flag, v.to_string()));
                    continue 'args;
                }
            }
            return Err(HookArgsError::Unknown {
                arg: arg.clone(),
                expected,
            });
        }
        if mode == LINKS_MODE {
            let links = values
                .iter()
                .map(|(_, v)| Link::parse(v))
                .collect::<Result<_, _>>()?;
            return Ok(CdiHook::Links(links));
        }
        let mut folders = Vec::new();
        let mut compat_above = None;
        for (flag, v) in values {
            if flag == COMPAT_FLAG {
                let version = v
                    .parse::<Version>()
                    .map_err(|_| HookArgsError::BadVersion(v.clone()))?;
                compat_above = Some(version);
                continue;
            }
            let p = PathBuf::from(&v);
            if !p.is_absolute() {
                return Err(HookArgsError::BadFolder(v));
            }
            folders.push(p);
        }
        Ok(CdiHook::UpdateLdcache {
            folders,
            compat_above,
        })
    }

    /// Does the hook's work in the container that `state` (the OCI state on the hook's
    /// stdin) describes; see the module's documentation for the stage this must run in.
    pub fn run(&self, state: &[u8]) -> Result<(), CdiHookError> {
        let rootfs = rootfs_from_state(state)?;
        let root = ContainerRoot::open(&rootfs)?;
        self.apply(&root)
    }

    /// Does the hook's work in the container whose rootfs is `root`. Running it again
    /// changes nothing.
    pub fn apply(&self, root: &ContainerRoot) -> Result<(), CdiHookError> {
        match self {
            CdiHook::Links(links) => {
                for link in links {
                    root.symlink(&link.link, &link.target)?;
                }
                Ok(())
            }
            CdiHook::UpdateLdcache {
                folders,
                compat_above,
            } => update_ldcache(root, folders, compat_above.as_ref()),
        }
    }
}

/// How many numeric parts follow `.so` in a library's file name: `libx.so` 0,
/// `libx.so.1` 1, `libx.so.1.2.3` 3; `None` for names that are no shared object's.
fn so_version_parts(name: &str) -> Option<usize> {
    if !name.starts_with("lib") && !name.starts_with("ld") {
        return None;
    }
    let (_, rest) = name.split_once(".so")?;
    if rest.is_empty() {
        return Some(0);
    }
    let version = rest.strip_prefix('.')?;
    let parts: Vec<&str> = version.split('.').collect();
    if parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(parts.len())
    } else {
        None
    }
}

/// The cache entries for the libraries in `folder`, without reading any library.
///
/// The names in the folder that resolve (inside the root) to one regular file are one
/// library. Its entries are its names with the fewest version parts, at least one (the
/// soname link `libcuda.so.1` rather than the file `libcuda.so.580.65.06`, or the file
/// itself when it is named by its soname), plus its development names (`libcuda.so`),
/// as `ldconfig` lists them. This is what makes the driver's libraries loadable by
/// soname: `cdi-links` made a link named by the soname for every one whose file is not.
fn folder_entries(root: &ContainerRoot, folder: &Path) -> Result<Vec<Entry>, CdiHookError> {
    let names = match root.read_dir(folder, MAX_DIR_ENTRIES) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut by_file: BTreeMap<(u64, u64), Vec<(usize, String)>> = BTreeMap::new();
    for name in names {
        let Some(parts) = so_version_parts(&name) else {
            continue;
        };
        // The runtime bind-mounted each library of the spec: each is a mount of its own.
        let (kind, dev, ino) = match root.identify(&folder.join(&name)) {
            Ok(found) => found,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        if kind != FileKind::RegularFile {
            continue;
        }
        by_file.entry((dev, ino)).or_default().push((parts, name));
    }
    let dir = folder.to_str().ok_or_else(|| {
        CdiHookError::LdCache(ldcache::LdCacheError::NonUtf8Dir {
            path: folder.to_path_buf(),
        })
    })?;
    let dir = dir.trim_end_matches('/');
    let flags = CacheArch::X86_64.flags();
    let mut entries = Vec::new();
    for names in by_file.values() {
        let fewest = names.iter().map(|(p, _)| *p).filter(|p| *p > 0).min();
        for (parts, name) in names {
            if *parts == 0 || Some(*parts) == fewest {
                entries.push(Entry {
                    name: name.clone(),
                    path: format!("{dir}/{name}"),
                    flags,
                    hwcap: 0,
                });
            }
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Writes the container's ld.so.cache: the folders' libraries first (so the driver's
/// win over any copy the image has), then the image's own entries, each entry once.
fn update_ldcache(
    root: &ContainerRoot,
    folders: &[PathBuf],
    compat_above: Option<&Version>,
) -> Result<(), CdiHookError> {
    let mut entries = crate::compat::entries(root, compat_above);
    for folder in folders {
        entries.extend(folder_entries(root, folder)?);
    }
    match root.read_file(Path::new(LD_CACHE), MAX_CACHE) {
        Ok(data) => match ldcache::parse(&data) {
            // The cache written has no extension section: glibc-hwcaps entries would
            // point at subdirectories it cannot name.
            Ok(cache) => entries.extend(
                cache
                    .entries
                    .into_iter()
                    .filter(|e| e.hwcaps_index().is_none()),
            ),
            Err(e) => log::warn!("ignoring the image's unreadable {LD_CACHE}: {e}"),
        },
        Err(e) => log::debug!("no usable {LD_CACHE} in the image: {e}"),
    }
    let mut seen = HashSet::new();
    entries.retain(|e| seen.insert((e.name.clone(), e.path.clone(), e.flags, e.hwcap)));
    let bytes = ldcache::write(&entries).map_err(CdiHookError::LdCache)?;
    root.mkdir_all(Path::new("/etc"), 0o755)?;
    root.write_file(Path::new(LD_CACHE), &bytes, 0o644)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn args_round_trip() {
        let hooks = [
            CdiHook::Links(vec![
                Link {
                    target: "libcuda.so.999.88.77".into(),
                    link: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
                },
                Link {
                    target: "libcuda.so.1".into(),
                    link: "/usr/lib/x86_64-linux-gnu/libcuda.so".into(),
                },
            ]),
            CdiHook::UpdateLdcache {
                folders: vec!["/usr/lib/x86_64-linux-gnu".into()],
                compat_above: None,
            },
            CdiHook::Links(Vec::new()),
            CdiHook::UpdateLdcache {
                folders: vec!["/usr/lib64".into()],
                compat_above: Some("580.159.04".parse().unwrap()),
            },
        ];
        for hook in hooks {
            let args = hook.args().unwrap();
            assert_eq!(args[0], "nvc-hook");
            assert!(CdiHook::is_mode(&args[1]));
            assert_eq!(CdiHook::from_args(&args[1], &args[2..]).unwrap(), hook);
        }
        assert_eq!(
            CdiHook::UpdateLdcache {
                folders: vec!["/usr/lib64".into()],
                compat_above: None,
            }
            .args()
            .unwrap(),
            ["nvc-hook", "update-ldcache", "--folder", "/usr/lib64"]
        );
        assert_eq!(
            CdiHook::from_args(LDCACHE_MODE, &strings(&["--cuda-compat-above", "x.y"])),
            Err(HookArgsError::BadVersion("x.y".into()))
        );
        assert_eq!(
            CdiHook::from_args(LDCACHE_MODE, &strings(&["--folder=/a"])).unwrap(),
            CdiHook::UpdateLdcache {
                folders: vec!["/a".into()],
                compat_above: None,
            }
        );
    }

    #[test]
    fn bad_args_are_named() {
        let cases: &[(&str, &[&str], &str)] = &[
            ("cdi-links", &["--link"], "--link needs a value"),
            (
                "cdi-links",
                &["--link", "libcuda.so.1"],
                "invalid link \"libcuda.so.1\"",
            ),
            (
                "cdi-links",
                &["--link", "a::relative/b"],
                "invalid link \"a::relative/b\"",
            ),
            ("cdi-links", &["--link", "::/b"], "invalid link \"::/b\""),
            ("cdi-links", &["--link", "a::/"], "invalid link \"a::/\""),
            (
                "cdi-links",
                &["--folder", "/x"],
                "unknown argument \"--folder\" (expected --link <target>::<link>)",
            ),
            (
                "update-ldcache",
                &["--folder", "lib"],
                "folder \"lib\" is not an absolute path in the container",
            ),
            (
                "update-ldcache",
                &["/usr/lib"],
                "unknown argument \"/usr/lib\"",
            ),
            ("prestart", &[], "unknown CDI hook mode \"prestart\""),
        ];
        for (mode, args, want) in cases {
            let err = CdiHook::from_args(mode, &strings(args)).unwrap_err();
            assert!(err.to_string().contains(want), "{mode} {args:?}: {err}");
        }
    }

    #[test]
    fn links_and_ldcache_in_a_rootfs_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        let lib = rootfs.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        for file in [
            "libcuda.so.999.88.77",
            "libnvidia-ml.so.999.88.77",
            "libc.so.6",
            "libfoo.so.1.2",
        ] {
            std::fs::write(lib.join(file), b"\x7fELF").unwrap();
        }
        std::os::unix::fs::symlink("libfoo.so.1.2", lib.join("libfoo.so.1")).unwrap();
        // links that lead outside resolve inside the root, to nothing
        std::fs::write(dir.path().join("secret.so.1"), b"x").unwrap();
        std::os::unix::fs::symlink("../../../../secret.so.1", lib.join("libup.so.1")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.so.1"), lib.join("libabs.so.1"))
            .unwrap();
        std::fs::create_dir(lib.join("libdir.so.1")).unwrap();
        let image = [
            Entry {
                name: "libimage.so.3".into(),
                path: "/lib/libimage.so.3".into(),
                flags: CacheArch::X86_64.flags(),
                hwcap: 0,
            },
            Entry {
                name: "libc.so.6".into(),
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                flags: CacheArch::X86_64.flags(),
                hwcap: 0,
            },
        ];
        std::fs::write(
            rootfs.join("etc/ld.so.cache"),
            ldcache::write(&image).unwrap(),
        )
        .unwrap();

        let d = "/usr/lib/x86_64-linux-gnu";
        let links = CdiHook::from_args(
            LINKS_MODE,
            &strings(&[
                "--link",
                &format!("libcuda.so.999.88.77::{d}/libcuda.so.1"),
                "--link",
                &format!("libcuda.so.1::{d}/libcuda.so"),
                "--link",
                &format!("libnvidia-ml.so.999.88.77::{d}/libnvidia-ml.so.1"),
            ]),
        )
        .unwrap();
        let ldcache = CdiHook::UpdateLdcache {
            folders: vec![d.into(), "/no/such/dir".into()],
            compat_above: None,
        };
        let root = ContainerRoot::open(&rootfs).unwrap();
        links.apply(&root).unwrap();
        ldcache.apply(&root).unwrap();
        let first = std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap();
        links.apply(&root).unwrap();
        ldcache.apply(&root).unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("etc/ld.so.cache")).unwrap(),
            first
        );
        assert_eq!(
            std::fs::read_link(lib.join("libcuda.so.1")).unwrap(),
            Path::new("libcuda.so.999.88.77")
        );

        let cache = ldcache::parse(&first).unwrap();
        let mut listed: Vec<(String, String)> = cache
            .entries
            .iter()
            .map(|e| (e.name.clone(), e.path.clone()))
            .collect();
        listed.sort();
        let want: Vec<(String, String)> = [
            ("libc.so.6", format!("{d}/libc.so.6")),
            ("libcuda.so", format!("{d}/libcuda.so")),
            ("libcuda.so.1", format!("{d}/libcuda.so.1")),
            ("libfoo.so.1", format!("{d}/libfoo.so.1")),
            ("libimage.so.3", "/lib/libimage.so.3".to_string()),
            ("libnvidia-ml.so.1", format!("{d}/libnvidia-ml.so.1")),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
        assert_eq!(listed, want);
        assert!(cache
            .entries
            .iter()
            .all(|e| e.arch() == Some(CacheArch::X86_64)));
    }

    #[test]
    fn version_parts() {
        let cases = [
            ("libcuda.so", Some(0)),
            ("libcuda.so.1", Some(1)),
            ("libcuda.so.580.65.06", Some(3)),
            ("ld-linux-x86-64.so.2", Some(1)),
            ("libx.so.1a", None),
            ("libx.so.", None),
            ("libx.so.1..2", None),
            ("libx.sox", None),
            ("nvidia-smi", None),
            ("libfoo.a", None),
            ("README.so.1", None),
        ];
        for (name, want) in cases {
            assert_eq!(so_version_parts(name), want, "{name}");
        }
    }

    #[test]
    fn rootfs_from_the_state_bundle() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"env":[]}}"#,
        )
        .unwrap();
        let state = serde_json::json!({"ociVersion": "1.0.2", "id": "x", "status": "creating",
            "pid": 1, "bundle": dir.path()});
        let rootfs = rootfs_from_state(state.to_string().as_bytes()).unwrap();
        assert_eq!(rootfs, dir.path().join("rootfs"));

        let relative = serde_json::json!({"bundle": "bundle"});
        assert!(matches!(
            rootfs_from_state(relative.to_string().as_bytes()),
            Err(CdiHookError::RelativeBundle(_))
        ));
        assert!(matches!(
            rootfs_from_state(b"{}"),
            Err(CdiHookError::State(_))
        ));
    }
}
