//! Committed fake driver trees (`testdata/driver-roots/<scenario>`), read by tests without
//! root through [`libnvc::probe::TreeProbe`], and the generator that makes them
//! (`nvc-driver-trees`).
//!
//! A scenario is built the way every fake tree is ([`FakeDriverSpec::build`]: the H100
//! sample's layout and links, an ld.so.cache written by `ldconfig -r`, the driver's `/proc`
//! files) and then made small, committable and the same bytes on every machine:
//!
//! - each ELF file becomes a tiny one ([`tiny_shared_object`], [`tiny_program`]) with the
//!   class, machine, type and `DT_SONAME` of the one gcc built, so toolchains cannot change
//!   the bytes;
//! - the ld.so.cache keeps ldconfig's entries but is rewritten by `libnvc::ldcache::write`
//!   (no generator string naming the host's glibc);
//! - device nodes, sockets and pipes become empty placeholder files declared in
//!   `devices.txt` ([`TreeProbe::DEVICES_FILE`]);
//! - files get the modes git keeps (0644 or 0755), empty folders (which git drops) are
//!   dropped, and so are `config.toml` and ldconfig's `aux-cache`;
//! - `proc/driver/nvidia-caps` (a 110 KiB table nvc never reads) is kept only where MIG is
//!   on.
//!
//! A scenario folder holds `root/` (the driver root), `dev/` (the dev root is the folder
//! itself), `proc/` (the proc root), `devices.txt` and, where MIG is on,
//! `nvml-mig-devices.txt` (what NVML reports of the MIG devices, with their UUIDs);
//! [`DriverTree`] names them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libnvc::discover::DriverRoots;
use libnvc::elf::{self, ElfClass};
use libnvc::ldcache;
use libnvc::probe::TreeProbe;

use crate::compile;
use crate::tree::{mkdirs, symlink, write_file};
use crate::{is_root, FakeDriverSpec, FakeError, FakeGpu};

mod compare;
mod tiny_elf;

pub use compare::{differences, snapshot, TreeEntry};
pub use tiny_elf::{tiny_program, tiny_shared_object};

/// The file that declares a tree's special files (`libnvc::probe::TreeProbe`'s format).
pub const DEVICES_FILE: &str = TreeProbe::DEVICES_FILE;

/// The version the scenarios' driver has: no real driver has it, so a leak from the real
/// host shows.
pub const VERSION: &str = "999.88.77";

/// The version of the leftover library in the `broken` scenario.
pub const OLD_VERSION: &str = "470.42.01";

/// What `cuDriverGetVersion` would report for the scenarios' driver (`99.1`); trees cannot
/// answer it, tests give it to [`TreeProbe::with_cuda_version`].
pub const CUDA_VERSION: i32 = 99010;

/// One committed driver tree: how it is built and what it stands for.
pub struct Scenario {
    /// The folder name under `testdata/driver-roots`.
    pub name: &'static str,
    /// What it stands for, one line.
    pub about: &'static str,
    spec: fn() -> FakeDriverSpec,
    finish: fn(&mut Draft) -> Result<(), FakeError>,
}

impl Scenario {
    /// The fake driver the scenario starts from.
    pub fn spec(&self) -> FakeDriverSpec {
        (self.spec)()
    }
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .finish()
    }
}

fn base(gpus: u32) -> FakeDriverSpec {
    FakeDriverSpec {
        version: VERSION.to_string(),
        cuda_version: CUDA_VERSION,
        gpus: FakeGpu::fake_gpus(gpus),
        device_nodes: false,
        ipc: false,
        ..FakeDriverSpec::default()
    }
}

fn nothing_more(_: &mut Draft) -> Result<(), FakeError> {
    Ok(())
}

/// Every scenario, in the order the README lists them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "basic-2gpu",
        about: "2 GPUs whose minors are not in bus order, every 64-bit library (utility, \
                compute, video, graphics), binaries, firmware, json files, the IPC sockets \
                and the MPS folder",
        spec: || FakeDriverSpec {
            ipc: true,
            ..base(2)
        },
        finish: nothing_more,
    },
    Scenario {
        name: "mig",
        about: "2 GPUs, GPU 0 (0000:06:00.0, minor 1) in MIG mode: GPU instances 1 and 2 with \
                compute instance 0 each, their capability files and nvidia-caps nodes, and \
                their UUIDs as NVML reports them",
        spec: || FakeDriverSpec {
            mig: true,
            ..base(2)
        },
        finish: nothing_more,
    },
    Scenario {
        name: "lib32",
        about: "1 GPU, the 64-bit libraries and the 32-bit (i386) ones in \
                /usr/lib/i386-linux-gnu, both in the ld.so.cache",
        spec: || FakeDriverSpec {
            lib32: true,
            ..base(1)
        },
        finish: nothing_more,
    },
    Scenario {
        name: "no-kernel-module",
        about: "the user-space driver without its kernel module: no /proc/driver/nvidia, no \
                nvidia majors in /proc/devices, no device node; the version comes from the \
                libraries' file names",
        spec: || base(0),
        finish: no_kernel_module,
    },
    Scenario {
        name: "broken",
        about: "2 GPUs and a damaged install: libnvidia-cfg's file links out of the root, \
                libnvidia-fbc's is 32-bit in the 64-bit folder, libnvidia-opencl.so.1 points at \
                a 470.42.01 leftover, nvidia-smi is a shell wrapper, GPU 1's /dev/nvidia0 is \
                missing",
        spec: || base(2),
        finish: broken,
    },
    Scenario {
        name: "imex",
        about: "1 GPU and IMEX channels 0, 1 and 2 (/dev/nvidia-caps-imex-channels)",
        spec: || FakeDriverSpec {
            imex_channels: 3,
            ..base(1)
        },
        finish: nothing_more,
    },
    Scenario {
        name: "wsl",
        about: "WSL2: /dev/dxg (c 10 125), the user-space driver in /usr/lib/wsl/lib (listed \
                in ld.wsl.conf) and the driver store folder \
                /usr/lib/wsl/drivers/nvmdi.inf_amd64_<hash> (libcuda.so.1.1, its loaders, \
                nvcubins.bin, nvidia-smi, a Windows file), no kernel module",
        spec: || FakeDriverSpec {
            wsl: true,
            ..base(0)
        },
        finish: nothing_more,
    },
];

/// The scenario called `name`.
pub fn scenario(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// The workspace's root folder.
pub fn workspace_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `testdata/driver-roots` in the workspace: the committed scenarios, README and goldens.
pub fn committed_dir() -> PathBuf {
    workspace_dir().join("testdata/driver-roots")
}

/// `testdata/driver-roots/golden`: expected outputs of the tests on the scenarios.
pub fn golden_dir() -> PathBuf {
    committed_dir().join("golden")
}

/// Checks `got` against the golden file `golden_dir()/<name>`, showing both in full and
/// the first differing line; with `NVC_BLESS` set in the environment, writes `got` there
/// first (review the diff before committing it).
// An assertion for tests: failing is its job.
#[allow(clippy::panic)]
#[track_caller]
pub fn assert_golden(name: &str, got: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("NVC_BLESS").is_some() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        std::fs::write(&path, got)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the golden file {}: {e} (NVC_BLESS=1 writes it)",
            path.display()
        )
    });
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "{} differs from the result at line {} (NVC_BLESS=1 rewrites it)\n--- got\n{got}\n--- want\n{want}",
            path.display(),
            line + 1
        );
    }
}

/// A scenario folder on disk and the roots discovery reads in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverTree {
    /// The scenario folder; `devices.txt` paths are relative to it.
    pub dir: PathBuf,
    /// `<dir>/root`: the driver root.
    pub root: PathBuf,
    /// `<dir>`: the nodes are `<dir>/dev/...`.
    pub dev_root: PathBuf,
    /// `<dir>/proc`: the proc root.
    pub proc_root: PathBuf,
}

impl DriverTree {
    /// The scenario folder `dir`.
    pub fn at(dir: &Path) -> DriverTree {
        DriverTree {
            dir: dir.to_path_buf(),
            root: dir.join("root"),
            dev_root: dir.to_path_buf(),
            proc_root: dir.join("proc"),
        }
    }

    /// The committed scenario `name`.
    pub fn committed(name: &str) -> DriverTree {
        DriverTree::at(&committed_dir().join(name))
    }

    /// The roots to discover the tree's driver at.
    pub fn roots(&self) -> DriverRoots {
        DriverRoots {
            root: self.root.clone(),
            dev_root: self.dev_root.clone(),
            proc_root: self.proc_root.clone(),
        }
    }

    /// A probe that reads the tree with the special files its `devices.txt` declares (and
    /// NVML's MIG devices, from its `nvml-mig-devices.txt`).
    pub fn probe(&self) -> io::Result<TreeProbe> {
        TreeProbe::for_tree(&self.dir)
    }
}

/// Why `scenario` cannot be generated here, when a tool it needs is missing: gcc (and
/// `gcc -m32` for 32-bit libraries), ldconfig, and for ldconfig's chroot root or an
/// unprivileged user namespace.
pub fn missing_tools(scenario: &Scenario) -> Option<String> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !runs("gcc", &["--version"]) {
        return Some("gcc is not installed".to_string());
    }
    if scenario.spec().lib32 && !compile::gcc_m32_works() {
        return Some("gcc -m32 cannot link (install gcc-multilib)".to_string());
    }
    if !["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        return Some("ldconfig is not installed".to_string());
    }
    if !is_root() && !runs("unshare", &["--user", "--map-root-user", "true"]) {
        return Some(
            "ldconfig -r needs root or an unprivileged user namespace (unshare -r); neither is \
             available"
                .to_string(),
        );
    }
    None
}

/// Generates `scenario` into `<out>/<name>`, which must not exist yet.
pub fn generate(scenario: &Scenario, out: &Path) -> Result<DriverTree, FakeError> {
    let spec = scenario.spec();
    let build = tempfile::Builder::new()
        .prefix("nvc-driver-tree.")
        .tempdir()
        .map_err(FakeError::io("create a directory in", std::env::temp_dir()))?;
    let fake = spec.build(build.path())?;
    if spec.lib32 && !fake.lib32_built {
        return Err(FakeError::Check {
            what: format!(
                "gcc -m32 cannot link here (install gcc-multilib): scenario {} needs 32-bit libraries",
                scenario.name
            ),
            path: fake.root,
        });
    }
    let tree = DriverTree::at(&out.join(scenario.name));
    std::fs::create_dir(&tree.dir).map_err(FakeError::io("create directory", &tree.dir))?;
    let mut draft = Draft {
        tree: tree.clone(),
        spec,
        declared: BTreeMap::new(),
    };
    let skip = [
        fake.ld_cache(),
        fake.root.join("var/cache/ldconfig/aux-cache"),
    ];
    draft.copy(&fake.root, &tree.root, &skip)?;
    draft.copy(&fake.proc_root, &tree.proc_root, &[])?;

    // ldconfig's entries, in the bytes libnvc writes: no generator string, no host glibc.
    let ldconfig_cache = fake.ld_cache();
    let bytes = std::fs::read(&ldconfig_cache).map_err(FakeError::io("read", &ldconfig_cache))?;
    let entries = ldcache::parse(&bytes)
        .map_err(|e| FakeError::Check {
            what: format!("ldconfig's cache cannot be read: {e}"),
            path: fake.ld_cache(),
        })?
        .entries;
    let cache = ldcache::write(&entries).map_err(|e| FakeError::Check {
        what: format!("the cache cannot be written: {e}"),
        path: fake.ld_cache(),
    })?;
    write_file(&tree.root.join("etc/ld.so.cache"), cache, 0o644)?;

    for node in draft.spec.device_nodes() {
        let rel = node.path.to_string_lossy().into_owned();
        let line = format!("c {} {} {:04o}", node.major, node.minor, node.mode);
        draft.placeholder(&rel, line)?;
    }
    if draft.spec.ipc {
        // The MPS control daemon's endpoint, which also keeps the folder in git.
        draft.placeholder("root/tmp/nvidia-mps/control", "s 0777".to_string())?;
    }
    if draft.spec.mig {
        let text = draft.spec.mig_devices_text();
        write_file(&draft.path(crate::MIG_DEVICES_FILE), text, 0o644)?;
    } else {
        draft.remove("proc/driver/nvidia-caps")?;
    }
    (scenario.finish)(&mut draft)?;
    prune_empty_dirs(&tree.dir)?;
    let mut text = format!(
        "# The special files of this tree, which git cannot hold: placeholders here, read as\n\
         # declared by libnvc's TreeProbe. Generated by nvc-driver-trees ({}).\n",
        scenario.name
    );
    for (path, what) in &draft.declared {
        let _ = writeln!(text, "{path} {what}");
    }
    write_file(&tree.dir.join(DEVICES_FILE), text, 0o644)?;
    Ok(tree)
}

/// A scenario folder being written, with the special files declared so far.
struct Draft {
    tree: DriverTree,
    spec: FakeDriverSpec,
    /// Path relative to the scenario folder → the rest of its `devices.txt` line.
    declared: BTreeMap<String, String>,
}

impl Draft {
    fn path(&self, rel: &str) -> PathBuf {
        self.tree.dir.join(rel)
    }

    /// An empty file at `rel`, declared in `devices.txt` as `what` (`c 195 0 0666`).
    fn placeholder(&mut self, rel: &str, what: String) -> Result<(), FakeError> {
        write_file(&self.path(rel), "", 0o644)?;
        self.declared.insert(rel.to_string(), what);
        Ok(())
    }

    /// Removes `rel` (a file, link or folder) and whatever is declared under it.
    fn remove(&mut self, rel: &str) -> Result<(), FakeError> {
        let path = self.path(rel);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                std::fs::remove_dir_all(&path).map_err(FakeError::io("remove", &path))?
            }
            Ok(_) => std::fs::remove_file(&path).map_err(FakeError::io("remove", &path))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(FakeError::io("inspect", &path)(e)),
        }
        let prefix = format!("{rel}/");
        self.declared
            .retain(|p, _| p != rel && !p.starts_with(&prefix));
        Ok(())
    }

    /// Replaces whatever is at `rel` with a link to `target`.
    fn relink(&mut self, rel: &str, target: &str) -> Result<(), FakeError> {
        self.remove(rel)?;
        symlink(target, &self.path(rel))
    }

    /// Replaces whatever is at `rel` with a file.
    fn rewrite(&mut self, rel: &str, bytes: impl AsRef<[u8]>, mode: u32) -> Result<(), FakeError> {
        self.remove(rel)?;
        write_file(&self.path(rel), bytes, mode)
    }

    /// Copies the tree `from` to `to` in committable form, leaving out `skip`.
    fn copy(&mut self, from: &Path, to: &Path, skip: &[PathBuf]) -> Result<(), FakeError> {
        mkdirs(to)?;
        let mut names: Vec<_> = std::fs::read_dir(from)
            .map_err(FakeError::io("list", from))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(FakeError::io("list", from))?;
        names.sort();
        for name in names {
            let src = from.join(&name);
            let dst = to.join(&name);
            if skip.contains(&src) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&src).map_err(FakeError::io("inspect", &src))?;
            let kind = meta.file_type();
            if kind.is_symlink() {
                let target = std::fs::read_link(&src).map_err(FakeError::io("read link", &src))?;
                symlink(target, &dst)?;
            } else if kind.is_dir() {
                self.copy(&src, &dst, skip)?;
            } else if kind.is_file() {
                let bytes = std::fs::read(&src).map_err(FakeError::io("read", &src))?;
                let bytes = if bytes.starts_with(b"\x7fELF") {
                    self.tiny_twin(&src, &bytes)?
                } else {
                    bytes
                };
                let mode = if meta.permissions().mode() & 0o111 != 0 {
                    0o755
                } else {
                    0o644
                };
                write_file(&dst, bytes, mode)?;
            } else if kind.is_socket() || kind.is_fifo() {
                let rel = dst
                    .strip_prefix(&self.tree.dir)
                    .map_err(|_| FakeError::Check {
                        what: "a special file outside the scenario".to_string(),
                        path: dst.clone(),
                    })?
                    .to_string_lossy()
                    .into_owned();
                let what = if kind.is_socket() { "s 0777" } else { "p 0666" };
                self.placeholder(&rel, what.to_string())?;
            } else {
                return Err(FakeError::Check {
                    what: "a device node in a tree built without device nodes".to_string(),
                    path: src,
                });
            }
        }
        Ok(())
    }

    /// The tiny ELF file standing for `bytes`, the one gcc built at `path`.
    fn tiny_twin(&self, path: &Path, bytes: &[u8]) -> Result<Vec<u8>, FakeError> {
        let info =
            elf::read_elf_info(&mut io::Cursor::new(bytes)).map_err(|e| FakeError::Check {
                what: format!("not a readable ELF file: {e}"),
                path: path.to_path_buf(),
            })?;
        let version = &self.spec.version;
        match (&info.soname, info.class, info.machine) {
            (Some(soname), ElfClass::Elf64, elf::EM_X86_64)
            | (Some(soname), ElfClass::Elf32, elf::EM_386) => Ok(tiny_shared_object(
                info.class,
                soname,
                &format!("nvc fake driver {version}"),
            )),
            (None, ElfClass::Elf64, elf::EM_X86_64) => {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok(tiny_program(&format!(
                    "{name}: version {version} (nvc fake driver)\n"
                )))
            }
            _ => Err(FakeError::Check {
                what: format!("an ELF file of no known kind: {info:?}"),
                path: path.to_path_buf(),
            }),
        }
    }
}

/// No kernel module: no `/proc/driver/nvidia`, no nvidia majors, no node.
fn no_kernel_module(d: &mut Draft) -> Result<(), FakeError> {
    d.remove("proc/driver")?;
    d.remove("dev")?;
    let devices = d.path("proc/devices");
    let text = std::fs::read_to_string(&devices).map_err(FakeError::io("read", &devices))?;
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("nvidia"))
        .map(|l| format!("{l}\n"))
        .collect();
    write_file(&devices, kept, 0o644)
}

/// The damage the `broken` scenario's README line lists.
fn broken(d: &mut Draft) -> Result<(), FakeError> {
    let v = d.spec.version.clone();
    let lib64 = "root/usr/local/nvidia/lib64";
    let note = format!("nvc fake driver {v}");
    // A real file that is a link to a file of the real host.
    d.relink(&format!("{lib64}/libnvidia-cfg.so.{v}"), "/etc/passwd")?;
    // A 32-bit object where the cache says a 64-bit one is.
    d.rewrite(
        &format!("{lib64}/libnvidia-fbc.so.{v}"),
        tiny_shared_object(ElfClass::Elf32, "libnvidia-fbc.so.1", &note),
        0o755,
    )?;
    // The soname link still points at an older driver's file.
    d.rewrite(
        &format!("{lib64}/libnvidia-opencl.so.{OLD_VERSION}"),
        tiny_shared_object(
            ElfClass::Elf64,
            "libnvidia-opencl.so.1",
            &format!("nvc fake driver {OLD_VERSION}"),
        ),
        0o755,
    )?;
    d.relink(
        &format!("{lib64}/libnvidia-opencl.so.1"),
        &format!("libnvidia-opencl.so.{OLD_VERSION}"),
    )?;
    // A wrapper script that execs a binary by a host path.
    d.rewrite(
        "root/usr/local/nvidia/bin/nvidia-smi",
        "#!/bin/sh\nexec /opt/nvidia/bin/nvidia-smi \"$@\"\n",
        0o755,
    )?;
    // GPU 1 (in bus order) lost its node.
    let minor = d
        .spec
        .gpus_in_bus_order()
        .get(1)
        .map(|g| g.minor)
        .ok_or_else(|| FakeError::InvalidSpec {
            reason: "the broken scenario needs 2 GPUs".to_string(),
        })?;
    d.remove(&format!("dev/nvidia{minor}"))
}

/// Removes every folder under `dir` that holds nothing (git cannot hold one); `dir` stays.
fn prune_empty_dirs(dir: &Path) -> Result<bool, FakeError> {
    let mut empty = true;
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(FakeError::io("list", dir))?
        .collect::<io::Result<_>>()
        .map_err(FakeError::io("list", dir))?;
    for entry in entries {
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(FakeError::io("inspect", &path))?
            .is_dir();
        if is_dir && prune_empty_dirs(&path)? {
            std::fs::remove_dir(&path).map_err(FakeError::io("remove", &path))?;
        } else {
            empty = false;
        }
    }
    Ok(empty)
}
