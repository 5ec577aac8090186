//! Writes a fake driver tree: the split layout of the H100 sample, where the driver's files
//! live under `/usr/local/nvidia` and `/usr/lib/x86_64-linux-gnu` holds absolute links into it.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::catalog::DRIVER_BINARIES;
use libnvc::elf::Arch;

use crate::compile::{self, Artifacts};
use crate::{devices, is_root, proc_tree, FakeDriverSpec, FakeError};

/// Where the driver's own files live, as seen from the root.
pub const NVIDIA_PREFIX: &str = "/usr/local/nvidia";
/// The distribution's library directory that links into [`NVIDIA_PREFIX`] (x86-64's;
/// [`multiarch_lib_dir`] for any architecture).
pub const MULTIARCH_LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// The distribution's library directory for a driver of `arch`: `/usr/lib/<multiarch>`.
pub fn multiarch_lib_dir(arch: Arch) -> String {
    format!("/usr/lib/{}", arch.multiarch())
}
/// Where the 32-bit libraries go when built.
pub const LIB32_DIR: &str = "/usr/lib/i386-linux-gnu";

/// A fake driver tree on disk, built by [`FakeDriverSpec::build`].
#[derive(Debug, Clone)]
pub struct FakeDriver {
    /// The directory the caller gave; everything below is inside it.
    pub dir: PathBuf,
    /// The driver root (`<dir>/root`): a small root file system with the driver installed.
    pub root: PathBuf,
    /// The directory whose `dev/` holds the device nodes: `root`, or `<dir>/devroot` when
    /// `split_dev_root`.
    pub dev_root: PathBuf,
    /// Stands for the host's `/proc` (`<dir>/proc`): `driver/nvidia`, `driver/nvidia-caps`,
    /// `devices`.
    pub proc_root: PathBuf,
    /// `<dir>/config.toml`, an nvc configuration pointing at this tree.
    pub config: PathBuf,
    /// What was built.
    pub spec: FakeDriverSpec,
    /// Whether the 32-bit libraries were built: `spec.lib32` and `gcc -m32` works here.
    pub lib32_built: bool,
}

impl FakeDriver {
    /// `<root>/usr/local/nvidia/lib64`, where the real library files are.
    pub fn lib_dir(&self) -> PathBuf {
        self.root.join("usr/local/nvidia/lib64")
    }

    /// `<root>/usr/local/nvidia/bin`, where the programs are.
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("usr/local/nvidia/bin")
    }

    /// `<root>/etc/ld.so.cache`, written by the system's ldconfig.
    pub fn ld_cache(&self) -> PathBuf {
        self.root.join("etc/ld.so.cache")
    }

    /// `<dev_root>/dev`.
    pub fn dev_dir(&self) -> PathBuf {
        self.dev_root.join("dev")
    }

    /// Runs one of the driver's programs (e.g. `nvidia-smi`) on the host against this tree: it
    /// finds the libraries through `LD_LIBRARY_PATH`, and reads `/proc` and `/dev` from the
    /// tree through `NVC_FAKE_PROC` and `NVC_FAKE_DEV`.
    pub fn host_command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin_dir().join(program));
        command
            .env("LD_LIBRARY_PATH", self.lib_dir())
            .env("NVC_FAKE_PROC", &self.proc_root)
            .env("NVC_FAKE_DEV", self.dev_dir());
        command
    }
}

impl FakeDriverSpec {
    /// Builds the tree into `dir`, an existing empty directory the caller owns (a tempdir).
    ///
    /// Needs root for the device nodes (unless `device_nodes` is false) and for the chroot of
    /// `ldconfig -r`; without root, ldconfig is tried in a user namespace (`unshare -r`) and
    /// [`FakeError::NeedsRoot`] is returned if that fails too.
    pub fn build(&self, dir: &Path) -> Result<FakeDriver, FakeError> {
        self.validate()
            .map_err(|reason| FakeError::InvalidSpec { reason })?;
        if self.device_nodes && !is_root() {
            return Err(FakeError::NeedsRoot {
                what: "mknod for the device nodes (set device_nodes to false to go without)"
                    .to_string(),
            });
        }
        // Absolute, for the config file and ldconfig -r, but spelled as the caller spelled it.
        let dir = std::path::absolute(dir).map_err(FakeError::io("make absolute", dir))?;
        let root = dir.join("root");
        let dev_root = if self.split_dev_root {
            dir.join("devroot")
        } else {
            root.clone()
        };
        let driver = FakeDriver {
            root,
            dev_root,
            proc_root: dir.join("proc"),
            config: dir.join("config.toml"),
            spec: self.clone(),
            lib32_built: false,
            dir,
        };
        for fresh in [&driver.root, &driver.proc_root] {
            std::fs::create_dir(fresh).map_err(FakeError::io("create directory", fresh))?;
        }
        if self.split_dev_root {
            std::fs::create_dir(&driver.dev_root)
                .map_err(FakeError::io("create directory", &driver.dev_root))?;
        }

        if self.wsl {
            write_root_skeleton(&driver.root, self.arch)?;
            crate::wsl_tree::write(&driver)?;
            run_ldconfig(&driver.root, self.arch)?;
            if self.device_nodes {
                devices::create_nodes(&driver.dev_root, &self.device_nodes())?;
            }
            mkdirs(&driver.dev_dir())?;
            write_file(&driver.config, config_toml(&driver), 0o644)?;
            return Ok(driver);
        }
        let native = compile::artifacts(
            &self.version,
            self.cuda_version,
            compile::Arch::of(self.arch),
        )?;
        let i386 = if self.lib32 && compile::gcc_m32_works() {
            Some(compile::artifacts(
                &self.version,
                self.cuda_version,
                compile::Arch::I386,
            )?)
        } else {
            None
        };
        let driver = FakeDriver {
            lib32_built: i386.is_some(),
            ..driver
        };

        write_root_skeleton(&driver.root, self.arch)?;
        write_driver_files(&driver, &native)?;
        if let Some(i386) = &i386 {
            write_lib32(&driver.root, &self.version, i386)?;
        }
        write_ld_so_conf(&driver.root, i386.is_some(), self.arch)?;
        run_ldconfig(&driver.root, self.arch)?;
        check_ld_cache(&driver)?;
        if self.device_nodes {
            devices::create_nodes(&driver.dev_root, &self.device_nodes())?;
        } else {
            let dev = driver.dev_dir();
            std::fs::create_dir_all(&dev).map_err(FakeError::io("create directory", &dev))?;
        }
        proc_tree::write(self, &driver.proc_root)?;
        if self.mig {
            let file = driver.dir.join(devices::MIG_DEVICES_FILE);
            write_file(&file, self.mig_devices_text(), 0o644)?;
        }
        if self.ipc {
            write_ipc(&driver.root)?;
        }
        write_file(&driver.config, config_toml(&driver), 0o644)?;
        Ok(driver)
    }
}

/// Writes `contents` to `path`, creating its parent directories, with permissions `mode`.
pub(crate) fn write_file(
    path: &Path,
    contents: impl AsRef<[u8]>,
    mode: u32,
) -> Result<(), FakeError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(FakeError::io("create directory", parent))?;
    }
    std::fs::write(path, contents).map_err(FakeError::io("write", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(FakeError::io("set permissions of", path))
}

pub(crate) fn symlink(target: impl AsRef<Path>, link: &Path) -> Result<(), FakeError> {
    std::os::unix::fs::symlink(target, link).map_err(FakeError::io("create symlink", link))
}

pub(crate) fn mkdirs(path: &Path) -> Result<(), FakeError> {
    std::fs::create_dir_all(path).map_err(FakeError::io("create directory", path))
}

/// `root` joined with an absolute in-root path.
pub(crate) fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// A merged-/usr root like Ubuntu 24.04's: `/lib -> usr/lib` and friends, so paths reach the
/// driver through a link the way they do on the sample host (its ld.so.cache says `/lib/…`).
fn write_root_skeleton(root: &Path, arch: Arch) -> Result<(), FakeError> {
    mkdirs(&inside(root, &multiarch_lib_dir(arch)))?;
    for dir in [
        "usr/bin",
        "usr/sbin",
        "usr/lib64",
        "etc/ld.so.conf.d",
        "var/cache/ldconfig",
        "run",
        "tmp",
    ] {
        mkdirs(&root.join(dir))?;
    }
    let tmp = root.join("tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
        .map_err(FakeError::io("set permissions of", &tmp))?;
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        symlink(target, &root.join(link))?;
    }
    Ok(())
}

const VULKAN_ICD: &str = r#"{
    "file_format_version" : "1.0.1",
    "ICD": {
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.312"
    }
}
"#;

const EGL_VENDOR: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libEGL_nvidia.so.0"
    }
}
"#;

const VULKAN_LAYERS: &str = r#"{
    "file_format_version" : "1.0.1",
    "layer": {
        "name": "VK_LAYER_NV_optimus",
        "type": "INSTANCE",
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.312",
        "implementation_version" : "1",
        "description" : "NVIDIA Optimus layer",
        "functions": {
            "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr",
            "vkGetDeviceProcAddr": "vk_optimusGetDeviceProcAddr"
        },
        "enable_environment": {
            "__NV_PRIME_RENDER_OFFLOAD": "1"
        },
        "disable_environment": {
            "DISABLE_LAYER_NV_OPTIMUS_1": ""
        }
    }
}
"#;

const EGL_GBM_PLATFORM: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-gbm.so.1"
    }
}
"#;

const EGL_WAYLAND_PLATFORM: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-wayland.so.1"
    }
}
"#;

/// The JSON files, relative to a `share` directory.
const SHARE_FILES: [(&str, &str); 5] = [
    ("vulkan/icd.d/nvidia_icd.json", VULKAN_ICD),
    ("glvnd/egl_vendor.d/10_nvidia.json", EGL_VENDOR),
    ("vulkan/implicit_layer.d/nvidia_layers.json", VULKAN_LAYERS),
    (
        "egl/egl_external_platform.d/15_nvidia_gbm.json",
        EGL_GBM_PLATFORM,
    ),
    (
        "egl/egl_external_platform.d/10_nvidia_wayland.json",
        EGL_WAYLAND_PLATFORM,
    ),
];

const FIRMWARE: [&str; 2] = ["gsp_ga10x.bin", "gsp_tu10x.bin"];

fn write_driver_files(driver: &FakeDriver, built: &Artifacts) -> Result<(), FakeError> {
    let root = &driver.root;
    let version = driver.spec.version.as_str();
    let prefix = inside(root, NVIDIA_PREFIX);
    let lib64 = prefix.join("lib64");
    let multiarch = inside(root, &multiarch_lib_dir(driver.spec.arch));
    mkdirs(&lib64)?;
    symlink("lib64", &prefix.join("lib"))?;
    // The sample's /usr/local/nvidia/version: the bare version, no newline.
    write_file(&prefix.join("version"), version, 0o644)?;

    for (library, bytes) in &built.libraries {
        let file = library.file_name(version);
        let soname = library.soname(version);
        let dev_link = library.dev_link();
        write_file(&lib64.join(&file), bytes, 0o755)?;
        if soname != file {
            symlink(&file, &lib64.join(&soname))?;
        }
        symlink(&soname, &lib64.join(&dev_link))?;
        // /usr/lib links every name but the versioned file, with absolute targets.
        symlink(
            format!("{NVIDIA_PREFIX}/lib64/{dev_link}"),
            &multiarch.join(&dev_link),
        )?;
        if soname != file {
            symlink(
                format!("{NVIDIA_PREFIX}/lib64/{soname}"),
                &multiarch.join(&soname),
            )?;
        }
    }

    let bin = prefix.join("bin");
    for (name, bytes) in &built.binaries {
        write_file(&bin.join(name), bytes, 0o755)?;
    }
    for name in DRIVER_BINARIES {
        symlink(
            format!("{NVIDIA_PREFIX}/bin/{name}"),
            &root.join("usr/bin").join(name),
        )?;
    }

    for base in [
        prefix.join("firmware/nvidia").join(version),
        root.join("usr/lib/firmware/nvidia").join(version),
    ] {
        for name in FIRMWARE {
            let contents = format!("NVC FAKE GSP FIRMWARE {name} {version}\n");
            write_file(&base.join(name), contents, 0o644)?;
        }
    }
    for share in [prefix.join("share"), root.join("usr/share")] {
        for (path, contents) in SHARE_FILES {
            write_file(&share.join(path), contents, 0o644)?;
        }
    }
    Ok(())
}

/// 32-bit libraries the way distributions install them: real files in the i386 multiarch
/// directory with relative links.
fn write_lib32(root: &Path, version: &str, built: &Arc<Artifacts>) -> Result<(), FakeError> {
    let dir = inside(root, LIB32_DIR);
    mkdirs(&dir)?;
    for (library, bytes) in &built.libraries {
        let file = library.file_name(version);
        let soname = library.soname(version);
        write_file(&dir.join(&file), bytes, 0o755)?;
        if soname != file {
            symlink(&file, &dir.join(&soname))?;
        }
        symlink(&soname, &dir.join(library.dev_link()))?;
    }
    Ok(())
}

/// `/etc/ld.so.conf` and `/etc/ld.so.conf.d` as on the sample host (which concatenates to
/// `ldso-conf.txt`): CUDA toolkit directories that do not exist here, the driver's, libc's,
/// multiarch.
fn write_ld_so_conf(root: &Path, lib32: bool, arch: Arch) -> Result<(), FakeError> {
    let etc = root.join("etc");
    write_file(
        &etc.join("ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n\n",
        0o644,
    )?;
    let conf_d = etc.join("ld.so.conf.d");
    // CUDA's folder for aarch64 servers is targets/sbsa-linux.
    let cuda = match arch {
        Arch::X86_64 => "x86_64-linux",
        Arch::Aarch64 => "sbsa-linux",
    };
    let multiarch = arch.multiarch();
    let mut files = vec![
        (
            "000_cuda.conf".to_string(),
            format!(
                "/usr/local/cuda/targets/{cuda}/lib\n\
                 /usr/local/cuda-13/targets/{cuda}/lib\n\
                 /usr/local/cuda-13.0/targets/{cuda}/lib\n"
            ),
        ),
        (
            "nvidia.conf".to_string(),
            "/usr/local/nvidia/lib64\n/usr/local/nvidia/lib\n".to_string(),
        ),
        (
            "libc.conf".to_string(),
            "# libc default configuration\n/usr/local/lib\n/usr/local/cuda/lib64\n".to_string(),
        ),
        (
            format!("{multiarch}.conf"),
            format!(
                "# Multiarch support\n/usr/local/lib/{multiarch}\n/lib/{multiarch}\n/usr/lib/{multiarch}\n"
            ),
        ),
    ];
    if lib32 {
        files.push((
            "i386-linux-gnu.conf".to_string(),
            "# Multiarch support\n/usr/local/lib/i386-linux-gnu\n/lib/i386-linux-gnu\n/usr/lib/i386-linux-gnu\n".to_string(),
        ));
    }
    for (name, contents) in files {
        write_file(&conf_d.join(name), contents, 0o644)?;
    }
    Ok(())
}

fn find_ldconfig() -> PathBuf {
    for candidate in ["/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    PathBuf::from("ldconfig")
}

/// Writes `<root>/etc/ld.so.cache` with the system's ldconfig (aarch64's under qemu-user
/// for an aarch64 driver: the cache flags are the ones its ldconfig writes), chrooted into
/// `root` so the cache holds paths as seen from the root. `-X` leaves the links as the
/// sample has them.
pub(crate) fn run_ldconfig(root: &Path, arch: Arch) -> Result<(), FakeError> {
    let mut command;
    let ldconfig;
    if arch == Arch::Aarch64 {
        // ldconfig is static: nothing of the cross glibc is loaded, before or after its
        // chroot. qemu passes chroot through; it needs root.
        ldconfig = crate::aarch64::ldconfig()?;
        if !is_root() {
            return Err(FakeError::NeedsRoot {
                what: "aarch64's ldconfig -r (chroot) under qemu-user".to_string(),
            });
        }
        command = Command::new(crate::aarch64::QEMU);
        command.arg(&ldconfig);
    } else if is_root() {
        ldconfig = find_ldconfig();
        command = Command::new(&ldconfig);
    } else {
        ldconfig = find_ldconfig();
        // chroot is allowed in a user namespace where we are root.
        command = Command::new("unshare");
        command.args(["--user", "--map-root-user"]).arg(&ldconfig);
    }
    command
        .args(["-X", "-r"])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let output = command.output().map_err(|source| FakeError::Spawn {
        step: "write ld.so.cache",
        program: ldconfig.display().to_string(),
        source,
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if is_root() {
        Err(FakeError::Command {
            step: "write ld.so.cache",
            command: format!("{} -X -r {}", ldconfig.display(), root.display()),
            status: output.status,
            stderr,
        })
    } else {
        Err(FakeError::NeedsRoot {
            what: format!("ldconfig -r (chroot) failed in a user namespace too: {stderr}"),
        })
    }
}

/// Reads the new cache back with `ldconfig -p -C`: it must list libcuda.so.1 at a path inside
/// the root's namespace, never a host path.
fn check_ld_cache(driver: &FakeDriver) -> Result<(), FakeError> {
    let cache = driver.ld_cache();
    let ldconfig = find_ldconfig();
    let output = Command::new(&ldconfig)
        .arg("-p")
        .arg("-C")
        .arg(&cache)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| FakeError::Spawn {
            step: "read ld.so.cache",
            program: ldconfig.display().to_string(),
            source,
        })?;
    if !output.status.success() {
        return Err(FakeError::Command {
            step: "read ld.so.cache",
            command: format!("{} -p -C {}", ldconfig.display(), cache.display()),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    let listing = String::from_utf8_lossy(&output.stdout);
    let expected = format!("=> {NVIDIA_PREFIX}/lib64/libcuda.so.1");
    if !listing
        .lines()
        .any(|l| l.trim_start().starts_with("libcuda.so.1 ") && l.ends_with(&expected))
    {
        return Err(FakeError::Check {
            what: format!("ldconfig -p does not list libcuda.so.1 {expected}"),
            path: cache,
        });
    }
    let host_dir = driver.dir.to_string_lossy();
    if listing
        .lines()
        .filter_map(|l| l.split_once("=> ").map(|(_, path)| path))
        .any(|path| path.starts_with(host_dir.as_ref()))
    {
        return Err(FakeError::Check {
            what: format!("ldconfig -p lists host paths under {host_dir}"),
            path: cache,
        });
    }
    Ok(())
}

/// The sockets and directory through which containers reach the persistence daemon, the
/// fabric manager and MPS. The sockets are really bound; nobody listens once the listener is
/// dropped, but the socket file stays, as after a daemon exits uncleanly.
fn write_ipc(root: &Path) -> Result<(), FakeError> {
    for daemon in ["nvidia-persistenced", "nvidia-fabricmanager"] {
        let dir = root.join("run").join(daemon);
        mkdirs(&dir)?;
        let socket = dir.join("socket");
        UnixListener::bind(&socket).map_err(FakeError::io("bind unix socket", &socket))?;
    }
    mkdirs(&root.join("tmp/nvidia-mps"))
}

/// A TOML basic string.
fn toml_string(path: &Path) -> String {
    let mut out = String::from("\"");
    for c in path.to_string_lossy().chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The tree's own nvc configuration: its roots, a debug log, and its state and GPU
/// leases inside `dir`, so that nothing another program left in the host's `/run/nvc`
/// shows in a test, and no test leaves anything there.
fn config_toml(driver: &FakeDriver) -> String {
    format!(
        "[driver]\nroot = {}\ndev-root = {}\nproc-root = {}\n\n[hook]\nstate-dir = {}\n\n\
         [log]\nfile = {}\nlevel = \"debug\"\n\n[leases]\ndir = {}\n",
        toml_string(&driver.root),
        toml_string(&driver.dev_root),
        toml_string(&driver.proc_root),
        toml_string(&driver.dir.join("state")),
        toml_string(&driver.dir.join("nvc.log")),
        toml_string(&driver.dir.join("leases")),
    )
}
