//! The hooks a CDI spec asks the engine to run: `nvc-hook cdi-setup`, one process that
//! makes the driver's soname links, updates the container's ld.so.cache and masks its
//! `/proc/driver/nvidia` to its GPUs (as the prestart hook does all three), which is what
//! [`super::generate`] writes; and, for specs written by earlier versions, the three
//! alone: `nvc-hook cdi-links`, `nvc-hook update-ldcache` and `nvc-hook cdi-mask-proc`.
//! Their arguments say everything they do; [`CdiHook::args`] writes them and
//! [`CdiHook::from_args`] reads them back. Which GPUs `cdi-mask-proc`
//! shows is [`visible_gpus`]'s decision, from the container's `linux.devices`.
//!
//! # The stage, and why it is safe
//!
//! The `cdi-setup` of the spec [`super::generate`] writes is a `createRuntime` hook with
//! `--enter`: the runtime's own process starts it, in the runtime's namespaces, once the
//! container's mounts are made and before `pivot_root`, and it enters the container's
//! mount namespace through the state's pid, as the prestart hook does; from there it works
//! as below. (runc runs `createContainer` hooks from its container's init, a Go process
//! held to one thread, which hands the hook its state on stdin late: 2 to 15 ms on the
//! H100, against 0.02 ms from runc's own process.)
//!
//! The hooks of earlier specs, and `cdi-setup` without `--enter`, are `createContainer`
//! hooks. The OCI runtime spec runs those *in the container's
//! namespaces*, after the runtime has made the container's mounts (so the driver files the
//! spec bind-mounts are in place) and before `pivot_root`; the hook's path resolves in the
//! runtime's namespace. runc runs them from its `init` process, in the new mount
//! namespace, with the rootfs (`root.path`, a host path) still reachable by that path and
//! the host's `/proc` still at `/proc`.
//!
//! So the hook does not enter any namespace, unlike the prestart hook
//! (`nvc_host::setup`), which runs in the runtime's namespace and must `setns` into the
//! container's through its pid. Here that pid is useless: runc reports `getpid()` of its
//! init, which inside a new pid namespace is 1, and `/proc/1` is the *host's* init, whose
//! mount namespace is the host's. The hook instead finds the rootfs as NVIDIA's
//! `nvidia-cdi-hook` does: the state's `bundle`, its `config.json`, `root.path` (joined to
//! the bundle when relative), and works on that path in the namespace it was started in,
//! where the container's mounts are visible. Without `--enter` it must therefore only ever
//! run at the `createContainer` stage; with it, only where the state's pid is the
//! container's init as the host sees it (`createRuntime`, `prestart`): at
//! `createContainer` that pid is 1, which the hook refuses.
//!
//! The rootfs is hostile, and the hook runs as the runtime's root with every
//! capability. As everywhere in nvc, it touches the rootfs only through
//! nvc-host's `ContainerRoot`: opened once as an `O_PATH` fd, every path resolved inside it
//! (`openat2(RESOLVE_IN_ROOT)` or the fd walk), links made by a temporary name and a
//! rename, the cache written to a temporary file and renamed, the old cache read with a
//! size bound and parsed by a bounded parser. Nothing from the image is executed (no
//! `ldconfig`), no ELF file of the image is parsed, and the hook's environment is the
//! spec's fixed `PATH`.
//!
//! `cdi-mask-proc` reads nothing the image controls: the GPUs come from the spec's
//! `linux.devices` (which the engine writes from the CDI devices asked for) and the
//! host's `/proc/driver/nvidia`, read through the hook's own `/proc`, which at this stage
//! is still the host's; the mask goes onto the container's new procfs at
//! `<rootfs>/proc`, checked to be one. `nvc_host::cdi_hooks` says what it does where a
//! runtime runs the stage differently (crun).

use std::path::PathBuf;

use super::CdiError;
use crate::discover::proc::ProcGpu;
use crate::version::Version;

/// The mode that makes symbolic links.
pub const LINKS_MODE: &str = "cdi-links";
/// The mode that updates the ld.so.cache.
pub const LDCACHE_MODE: &str = "update-ldcache";
/// The mode that masks `/proc/driver/nvidia`.
pub const MASK_PROC_MODE: &str = "cdi-mask-proc";
/// The mode that does all three, in one process.
pub const SETUP_MODE: &str = "cdi-setup";
/// The stage and mode of the hook that takes away, when the container ends, what
/// `cdi-setup` made in its rootfs: the prestart path's own poststop hook.
pub const POSTSTOP_MODE: &str = "poststop";
/// `args[0]` of every hook.
pub const ARGV0: &str = "nvc-hook";
/// The flag that passes the host driver's version for CUDA forward compatibility.
const COMPAT_FLAG: &str = "--cuda-compat-above";
/// The flag that names the host's proc root, whose `driver/nvidia` the mask shows.
const PROC_ROOT_FLAG: &str = "--proc-root";
/// The flag (no value) that tells `cdi-setup` it runs at `createRuntime`, in the
/// runtime's namespaces, and enters the container's mount namespace through the state's
/// pid ([`CdiHook::Setup::enter`]).
pub const ENTER_FLAG: &str = "--enter";

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
    /// forward-compatibility libraries go first when newer (`nvc_host::compat`), as the
    /// prestart hook does.
    UpdateLdcache {
        /// The folders whose libraries are listed.
        folders: Vec<PathBuf>,
        /// The host driver's version, above which the image's compat libraries win.
        compat_above: Option<Version>,
    },
    /// `cdi-mask-proc --proc-root <dir>`: mount over the container's
    /// `/proc/driver/nvidia` a read-only copy of `<dir>/driver/nvidia` that shows only the
    /// GPUs of the container's `linux.devices` and `ModifyDeviceFiles: 0`.
    MaskProc {
        /// The host's proc root (`/proc`; elsewhere for a driver tree that is not the
        /// host's own).
        proc_root: PathBuf,
    },
    /// `cdi-setup [--enter] [--link …] [--folder … [--cuda-compat-above …]] [--proc-root
    /// …]`: the three above, in that order, in one process (the links before the cache
    /// lists them; the mask only with `--proc-root`).
    Setup {
        /// `--enter`: the hook runs at `createRuntime` (the runtime's own process starts
        /// it, in the runtime's namespaces, once the container's mounts are made) and
        /// enters the container's mount namespace through the state's pid, as the prestart
        /// hook does; without it, at `createContainer`, already inside (earlier specs).
        enter: bool,
        /// The links to make.
        links: Vec<Link>,
        /// The folders whose libraries go into the ld.so.cache (none: the cache is left).
        folders: Vec<PathBuf>,
        /// The host driver's version, above which the image's compat libraries win.
        compat_above: Option<Version>,
        /// The host's proc root whose `driver/nvidia` the mask shows (none: no mask).
        proc_root: Option<PathBuf>,
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
    /// A `--proc-root` that is not an absolute path.
    #[error("proc root {0:?} is not an absolute path on the host")]
    BadProcRoot(String),
    /// A flag the mode needs once, missing or repeated.
    #[error("{flag} must be given once")]
    Once {
        /// The flag.
        flag: &'static str,
    },
    /// A mode that is not a CDI hook's.
    #[error(
        "unknown CDI hook mode {0:?} (expected cdi-setup, cdi-links, update-ldcache or \
         cdi-mask-proc)"
    )]
    Mode(String),
}

impl CdiHook {
    /// Whether `mode` (`argv[1]`) is one of these hooks'.
    pub fn is_mode(mode: &str) -> bool {
        [SETUP_MODE, LINKS_MODE, LDCACHE_MODE, MASK_PROC_MODE].contains(&mode)
    }

    /// The mode, `argv[1]`.
    pub fn mode(&self) -> &'static str {
        match self {
            CdiHook::Links(_) => LINKS_MODE,
            CdiHook::UpdateLdcache { .. } => LDCACHE_MODE,
            CdiHook::MaskProc { .. } => MASK_PROC_MODE,
            CdiHook::Setup { .. } => SETUP_MODE,
        }
    }

    /// The whole argv of the hook, `args[0]` included.
    pub fn args(&self) -> Result<Vec<String>, CdiError> {
        let mut args = vec![ARGV0.to_string(), self.mode().to_string()];
        let path = |p: &PathBuf| -> Result<String, CdiError> {
            p.to_str()
                .map(str::to_string)
                .ok_or_else(|| CdiError::NotUtf8(p.clone()))
        };
        let (links, folders, compat_above, proc_root): (&[Link], &[PathBuf], _, _) = match self {
            CdiHook::Links(links) => (links, &[], None, None),
            CdiHook::UpdateLdcache {
                folders,
                compat_above,
            } => (&[], folders, compat_above.as_ref(), None),
            CdiHook::MaskProc { proc_root } => (&[], &[], None, Some(proc_root)),
            CdiHook::Setup {
                enter,
                links,
                folders,
                compat_above,
                proc_root,
            } => {
                if *enter {
                    args.push(ENTER_FLAG.to_string());
                }
                (links, folders, compat_above.as_ref(), proc_root.as_ref())
            }
        };
        for link in links {
            args.push("--link".to_string());
            args.push(link.to_arg()?);
        }
        for folder in folders {
            args.push("--folder".to_string());
            args.push(path(folder)?);
        }
        if let Some(version) = compat_above {
            args.push(COMPAT_FLAG.to_string());
            args.push(version.to_string());
        }
        if let Some(root) = proc_root {
            args.push(PROC_ROOT_FLAG.to_string());
            args.push(path(root)?);
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
            MASK_PROC_MODE => (MASK_PROC_MODE, &[PROC_ROOT_FLAG], "--proc-root <dir>"),
            SETUP_MODE => (
                SETUP_MODE,
                &["--link", "--folder", COMPAT_FLAG, PROC_ROOT_FLAG],
                "--enter, --link <target>::<link>, --folder <dir>, --cuda-compat-above \
                 <driver version> and --proc-root <dir>",
            ),
            other => return Err(HookArgsError::Mode(other.to_string())),
        };
        let mut values: Vec<(&'static str, String)> = Vec::new();
        let mut enter = false;
        let mut it = args.iter();
        'args: while let Some(arg) = it.next() {
            if mode == SETUP_MODE && arg == ENTER_FLAG {
                enter = true;
                continue;
            }
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
        let mut links = Vec::new();
        let mut folders = Vec::new();
        let mut compat_above = None;
        let mut proc_roots = Vec::new();
        for (flag, v) in values {
            match flag {
                "--link" => links.push(Link::parse(&v)?),
                COMPAT_FLAG => {
                    let version = v
                        .parse::<Version>()
                        .map_err(|_| HookArgsError::BadVersion(v.clone()))?;
                    compat_above = Some(version);
                }
                PROC_ROOT_FLAG => {
                    let proc_root = PathBuf::from(&v);
                    if !proc_root.is_absolute() {
                        return Err(HookArgsError::BadProcRoot(v));
                    }
                    proc_roots.push(proc_root);
                }
                _ => {
                    let p = PathBuf::from(&v);
                    if !p.is_absolute() {
                        return Err(HookArgsError::BadFolder(v));
                    }
                    folders.push(p);
                }
            }
        }
        let once = || HookArgsError::Once {
            flag: PROC_ROOT_FLAG,
        };
        Ok(match mode {
            LINKS_MODE => CdiHook::Links(links),
            LDCACHE_MODE => CdiHook::UpdateLdcache {
                folders,
                compat_above,
            },
            MASK_PROC_MODE => match <[PathBuf; 1]>::try_from(proc_roots) {
                Ok([proc_root]) => CdiHook::MaskProc { proc_root },
                Err(_) => return Err(once()),
            },
            _ => {
                if proc_roots.len() > 1 {
                    return Err(once());
                }
                CdiHook::Setup {
                    enter,
                    links,
                    folders,
                    compat_above,
                    proc_root: proc_roots.pop(),
                }
            }
        })
    }
}

/// The bus ids of the GPUs a container was given, in `gpus`' order: those among `gpus`
/// (the host's, from its `/proc/driver/nvidia/gpus/<bus>/information`) whose device node
/// `<gpu_major>:<Device Minor>` is among `devices`, the container's `linux.devices` as
/// `(path, major, minor)`. The engine writes those from the CDI devices the container
/// asked for (a MIG device brings its parent GPU's node); the path is not looked at, so
/// a node the engine named otherwise is still its GPU, and nothing the image holds
/// counts.
pub fn visible_gpus(
    gpus: &[ProcGpu],
    gpu_major: u32,
    devices: &[(PathBuf, u32, u32)],
) -> Vec<String> {
    gpus.iter()
        .filter(|g| {
            devices
                .iter()
                .any(|(_, major, minor)| *major == gpu_major && *minor == g.minor)
        })
        .map(|g| g.bus_id.clone())
        .collect()
}

/// The `--proc-root` of a `cdi-mask-proc` hook's argv (`args[0]` included), when it is
/// one: what `nvc check` compares with the host's proc root.
pub fn mask_proc_root(args: &[&str]) -> Option<PathBuf> {
    parse_argv(args).and_then(|hook| match hook {
        CdiHook::MaskProc { proc_root } => Some(proc_root),
        CdiHook::Setup { proc_root, .. } => proc_root,
        _ => None,
    })
}

/// The hook of an argv (`args[0]` included), when it is a CDI hook's.
pub fn parse_argv(args: &[&str]) -> Option<CdiHook> {
    match args {
        [_, mode, rest @ ..] if CdiHook::is_mode(mode) => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            CdiHook::from_args(mode, &rest).ok()
        }
        _ => None,
    }
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
            CdiHook::MaskProc {
                proc_root: "/proc".into(),
            },
            CdiHook::Setup {
                enter: true,
                links: vec![Link {
                    target: "libcuda.so.999.88.77".into(),
                    link: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
                }],
                folders: vec!["/usr/lib/x86_64-linux-gnu".into()],
                compat_above: Some("580.159.04".parse().unwrap()),
                proc_root: Some("/proc".into()),
            },
            CdiHook::Setup {
                enter: false,
                links: Vec::new(),
                folders: Vec::new(),
                compat_above: None,
                proc_root: None,
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
    fn setup_takes_every_step_s_flags_and_one_proc_root() {
        let args = strings(&[
            "--link",
            "libcuda.so.1::/usr/lib64/libcuda.so",
            "--proc-root=/proc",
            "--folder",
            "/usr/lib64",
        ]);
        let hook = CdiHook::from_args(SETUP_MODE, &args).unwrap();
        assert_eq!(
            hook.args().unwrap(),
            [
                "nvc-hook",
                "cdi-setup",
                "--link",
                "libcuda.so.1::/usr/lib64/libcuda.so",
                "--folder",
                "/usr/lib64",
                "--proc-root",
                "/proc"
            ]
        );
        let twice = strings(&["--proc-root", "/proc", "--proc-root", "/proc"]);
        assert_eq!(
            CdiHook::from_args(SETUP_MODE, &twice),
            Err(HookArgsError::Once {
                flag: PROC_ROOT_FLAG
            })
        );
        let argv = ["nvc-hook", "cdi-setup", "--proc-root", "/host/proc"];
        assert_eq!(mask_proc_root(&argv), Some(PathBuf::from("/host/proc")));
        // `--enter` takes no value, anywhere among the others, and only in `cdi-setup`.
        let entered = CdiHook::from_args(SETUP_MODE, &strings(&["--folder=/a", "--enter"]));
        assert!(matches!(entered, Ok(CdiHook::Setup { enter: true, .. })));
        assert_eq!(
            entered.unwrap().args().unwrap(),
            ["nvc-hook", "cdi-setup", "--enter", "--folder", "/a"]
        );
        assert!(matches!(
            CdiHook::from_args(SETUP_MODE, &args),
            Ok(CdiHook::Setup { enter: false, .. })
        ));
        assert!(matches!(
            CdiHook::from_args(LINKS_MODE, &strings(&["--enter"])),
            Err(HookArgsError::Unknown { .. })
        ));
        assert_eq!(mask_proc_root(&["nvc-hook", "cdi-setup"]), None);
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
            ("cdi-mask-proc", &[], "--proc-root must be given once"),
            (
                "cdi-mask-proc",
                &["--proc-root", "/proc", "--proc-root=/other"],
                "--proc-root must be given once",
            ),
            (
                "cdi-mask-proc",
                &["--proc-root", "proc"],
                "proc root \"proc\" is not an absolute path on the host",
            ),
            (
                "cdi-mask-proc",
                &["--folder", "/x"],
                "unknown argument \"--folder\" (expected --proc-root <dir>)",
            ),
        ];
        for (mode, args, want) in cases {
            let err = CdiHook::from_args(mode, &strings(args)).unwrap_err();
            assert!(err.to_string().contains(want), "{mode} {args:?}: {err}");
        }
    }

    #[test]
    fn mask_proc_args() {
        let hook = CdiHook::MaskProc {
            proc_root: "/proc".into(),
        };
        let args = hook.args().unwrap();
        assert_eq!(args, ["nvc-hook", "cdi-mask-proc", "--proc-root", "/proc"]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(mask_proc_root(&argv), Some(PathBuf::from("/proc")));
        assert_eq!(
            mask_proc_root(&["nvc-hook", "update-ldcache", "--folder", "/lib"]),
            None
        );
        assert_eq!(
            mask_proc_root(&["nvc-hook", "cdi-mask-proc", "--proc-root", "x"]),
            None
        );
        assert_eq!(
            CdiHook::from_args(MASK_PROC_MODE, &strings(&["--proc-root=/tmp/fake"])).unwrap(),
            CdiHook::MaskProc {
                proc_root: "/tmp/fake".into()
            }
        );
    }

    fn gpu(bus: &str, minor: u32) -> ProcGpu {
        ProcGpu {
            bus_id: bus.into(),
            uuid: format!("GPU-{minor}"),
            minor,
            model: "Fake".into(),
            dir: PathBuf::from("/proc/driver/nvidia/gpus").join(bus),
        }
    }

    #[test]
    fn visible_gpus_come_from_the_spec_devices_by_minor() {
        // Minors that are not the bus order's indices.
        let gpus = [
            gpu("0000:06:00.0", 1),
            gpu("0000:07:00.0", 0),
            gpu("0000:08:00.0", 3),
        ];
        let dev = |path: &str, major: u32, minor: u32| (PathBuf::from(path), major, minor);
        type Devices = Vec<(PathBuf, u32, u32)>;
        let cases: Vec<(&str, Devices, Vec<&str>)> = vec![
            ("none", vec![], vec![]),
            (
                "one GPU and the control nodes",
                vec![
                    dev("/dev/nvidiactl", 195, 255),
                    dev("/dev/nvidia-uvm", 238, 0),
                    dev("/dev/nvidia0", 195, 0),
                ],
                vec!["0000:07:00.0"],
            ),
            (
                "every GPU, in the host's order",
                vec![
                    dev("/dev/nvidia3", 195, 3),
                    dev("/dev/nvidia0", 195, 0),
                    dev("/dev/nvidia1", 195, 1),
                ],
                vec!["0000:06:00.0", "0000:07:00.0", "0000:08:00.0"],
            ),
            (
                "by numbers, not by path",
                vec![dev("/dev/gpu-renamed", 195, 3), dev("/dev/nvidia1", 238, 1)],
                vec!["0000:08:00.0"],
            ),
            (
                "a MIG device: its parent's node and capability nodes",
                vec![
                    dev("/dev/nvidia1", 195, 1),
                    dev("/dev/nvidia-caps/nvidia-cap21", 241, 21),
                    dev("/dev/nvidia-caps/nvidia-cap22", 241, 22),
                ],
                vec!["0000:06:00.0"],
            ),
            (
                "a minor no GPU has",
                vec![dev("/dev/nvidia7", 195, 7)],
                vec![],
            ),
        ];
        for (what, devices, want) in cases {
            assert_eq!(visible_gpus(&gpus, 195, &devices), want, "{what}");
        }
        // Another major for the GPUs: the 195s are no GPU's.
        assert_eq!(
            visible_gpus(&gpus, 511, &[dev("/dev/nvidia0", 195, 0)]),
            Vec::<String>::new()
        );
    }
}
