//! A minimal glibc root file system for containers in tests: busybox, the host's glibc, a
//! static ldconfig and `nvc-probe`, and no NVIDIA files, so whatever NVIDIA file a container
//! sees, nvc put there.
//!
//! The host's bytes (busybox, glibc, ldconfig) are read and the probe compiled once per
//! process; a build then only writes about 6 MiB and runs `ldconfig -r` once.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::tree::{inside, mkdirs, symlink, write_file};
use crate::{is_root, FakeError};

/// Where the probe is inside every test rootfs.
pub const PROBE_PATH: &str = "/usr/bin/nvc-probe";

/// The ELF interpreter x86-64 programs name: the path must resolve inside the rootfs.
pub const LOADER_PATH: &str = "/lib64/ld-linux-x86-64.so.2";

/// The busybox applets linked into the rootfs's bin directory.
pub const BUSYBOX_APPLETS: &[&str] = &[
    "[",
    "basename",
    "cat",
    "chmod",
    "cp",
    "cut",
    "dirname",
    "echo",
    "env",
    "false",
    "find",
    "grep",
    "head",
    "id",
    "ln",
    "ls",
    "mkdir",
    "mknod",
    "mount",
    "mountpoint",
    "mv",
    "printf",
    "ps",
    "pwd",
    "readlink",
    "realpath",
    "rm",
    "sed",
    "sh",
    "sleep",
    "sort",
    "stat",
    "tail",
    "test",
    "touch",
    "tr",
    "true",
    "umount",
    "uname",
    "wc",
    "xargs",
];

/// The glibc files copied from the host: the loader and what the probe and the fake
/// `nvidia-smi` link or load.
const GLIBC_LIBRARIES: &[&str] = &[
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "libm.so.6",
];

/// Where the host keeps glibc, first match wins.
const HOST_LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
];

/// What a test rootfs looks like; [`RootfsSpec::build`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RootfsSpec {
    /// Debian's multiarch layout (`/usr/lib/x86_64-linux-gnu`, true) or the RPM one
    /// (`/usr/lib64`, false). Default true.
    pub debian_layout: bool,
    /// Merged /usr: `/bin`, `/sbin`, `/lib`, `/lib64` are links to their `/usr`
    /// counterparts (true) or real directories holding busybox, ldconfig and glibc (false),
    /// as in Debian before 12 and CentOS 6. Default true.
    pub merged_usr: bool,
}

impl Default for RootfsSpec {
    fn default() -> Self {
        RootfsSpec {
            debian_layout: true,
            merged_usr: true,
        }
    }
}

/// A test rootfs on disk, built by [`RootfsSpec::build`].
#[derive(Debug, Clone)]
pub struct TestRootfs {
    /// The rootfs: the directory given to [`RootfsSpec::build`], absolute.
    pub path: PathBuf,
    /// What was built.
    pub spec: RootfsSpec,
}

impl RootfsSpec {
    /// The distribution's library directory, where nvc should put driver libraries:
    /// `/usr/lib/x86_64-linux-gnu` or `/usr/lib64`.
    pub fn lib_dir(&self) -> &'static str {
        if self.debian_layout {
            "/usr/lib/x86_64-linux-gnu"
        } else {
            "/usr/lib64"
        }
    }

    /// Where glibc's files are: [`RootfsSpec::lib_dir`] with merged /usr, else
    /// `/lib/x86_64-linux-gnu` or `/lib64`.
    pub fn libc_dir(&self) -> &'static str {
        match (self.merged_usr, self.debian_layout) {
            (true, _) => self.lib_dir(),
            (false, true) => "/lib/x86_64-linux-gnu",
            (false, false) => "/lib64",
        }
    }

    /// Where busybox and its applet links are: `/usr/bin` or `/bin`.
    pub fn bin_dir(&self) -> &'static str {
        if self.merged_usr {
            "/usr/bin"
        } else {
            "/bin"
        }
    }

    /// Where the static ldconfig is: `/usr/sbin` (reached as `/sbin`) or `/sbin`.
    pub fn sbin_dir(&self) -> &'static str {
        if self.merged_usr {
            "/usr/sbin"
        } else {
            "/sbin"
        }
    }

    /// Writes the rootfs into `dir` (created if missing; it should be empty).
    ///
    /// Needs root for the chroot of `ldconfig -r`; without root, ldconfig is tried in a user
    /// namespace and [`FakeError::NeedsRoot`] is returned if that fails too.
    pub fn build(&self, dir: &Path) -> Result<TestRootfs, FakeError> {
        let path = std::path::absolute(dir).map_err(FakeError::io("make absolute", dir))?;
        mkdirs(&path)?;
        let host = host_files()?;
        let probe = probe_binary()?;

        self.write_skeleton(&path)?;
        let libc_dir = inside(&path, self.libc_dir());
        for (name, file) in &host.glibc {
            write_file(&libc_dir.join(name), &file.bytes, file.mode)?;
        }
        if self.debian_layout {
            // Debian's /lib64/ld-linux-x86-64.so.2 is an absolute link into the multiarch
            // directory; code resolving it must do so inside the rootfs.
            symlink(
                "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                &inside(&path, LOADER_PATH),
            )?;
        }
        let bin = inside(&path, self.bin_dir());
        write_file(&bin.join("busybox"), &host.busybox.bytes, 0o755)?;
        for applet in BUSYBOX_APPLETS {
            symlink("busybox", &bin.join(applet))?;
        }
        write_file(
            &inside(&path, self.sbin_dir()).join("ldconfig"),
            &host.ldconfig.bytes,
            0o755,
        )?;
        write_file(&inside(&path, PROBE_PATH), probe.as_slice(), 0o755)?;
        self.write_etc(&path)?;
        run_ldconfig(&path)?;
        let rootfs = TestRootfs { path, spec: *self };
        rootfs.check_ld_cache()?;
        Ok(rootfs)
    }

    fn write_skeleton(&self, root: &Path) -> Result<(), FakeError> {
        let mut dirs = vec![
            "etc/ld.so.conf.d",
            "dev",
            "proc",
            "sys",
            "run",
            "mnt",
            "var/cache/ldconfig",
            "usr/bin",
            "usr/sbin",
            "usr/lib",
            "usr/lib64",
            "usr/local/bin",
            "usr/local/lib",
        ];
        if self.debian_layout {
            dirs.push("usr/lib/x86_64-linux-gnu");
        }
        if self.merged_usr {
            for (link, target) in [
                ("bin", "usr/bin"),
                ("sbin", "usr/sbin"),
                ("lib", "usr/lib"),
                ("lib64", "usr/lib64"),
            ] {
                symlink(target, &root.join(link))?;
            }
        } else {
            dirs.extend(["bin", "sbin", "lib", "lib64"]);
            if self.debian_layout {
                dirs.push("lib/x86_64-linux-gnu");
            }
        }
        for dir in dirs {
            mkdirs(&root.join(dir))?;
        }
        for (dir, mode) in [("tmp", 0o1777), ("root", 0o700)] {
            let path = root.join(dir);
            mkdirs(&path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(FakeError::io("set permissions of", &path))?;
        }
        Ok(())
    }

    fn write_etc(&self, root: &Path) -> Result<(), FakeError> {
        let etc = root.join("etc");
        write_file(
            &etc.join("passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
            0o644,
        )?;
        write_file(
            &etc.join("group"),
            "root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n",
            0o644,
        )?;
        write_file(
            &etc.join("ld.so.conf"),
            "include /etc/ld.so.conf.d/*.conf\n",
            0o644,
        )?;
        let conf_d = etc.join("ld.so.conf.d");
        write_file(
            &conf_d.join("libc.conf"),
            "# libc default configuration\n/usr/local/lib\n",
            0o644,
        )?;
        if self.debian_layout {
            write_file(
                &conf_d.join("x86_64-linux-gnu.conf"),
                "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
                0o644,
            )?;
        } else {
            // RPM distributions build these into their ldconfig; the host's ldconfig is
            // Debian's, so they are listed.
            write_file(&conf_d.join("lib64.conf"), "/lib64\n/usr/lib64\n", 0o644)?;
        }
        Ok(())
    }
}

impl TestRootfs {
    /// The distribution's library directory inside the rootfs, where nvc should put driver
    /// libraries: `/usr/lib/x86_64-linux-gnu` or `/usr/lib64`.
    pub fn lib_dir(&self) -> &str {
        self.spec.lib_dir()
    }

    /// Where glibc is inside the rootfs; see [`RootfsSpec::libc_dir`].
    pub fn libc_dir(&self) -> &str {
        self.spec.libc_dir()
    }

    /// `<path>/etc/ld.so.cache`.
    pub fn ld_cache(&self) -> PathBuf {
        self.path.join("etc/ld.so.cache")
    }

    /// The host path of `in_root`, an absolute path inside the rootfs, without resolving
    /// links (so it may lead outside when a component is an absolute link).
    pub fn host_path(&self, in_root: &str) -> PathBuf {
        inside(&self.path, in_root)
    }

    /// Writes a tar archive of the rootfs to `out` (numeric owners, sorted names), e.g. for
    /// `docker import`.
    pub fn tarball(&self, out: &Path) -> Result<(), FakeError> {
        let mut command = Command::new("tar");
        command
            .args(["--numeric-owner", "--sort=name", "-C"])
            .arg(&self.path)
            .arg("-cf")
            .arg(out)
            .arg(".");
        run_checked(&mut command, "archive the test rootfs")
    }

    /// Reads the rootfs's ld.so.cache back: it must list libc.so.6 and no host path.
    fn check_ld_cache(&self) -> Result<(), FakeError> {
        let cache = self.ld_cache();
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
        let listing = String::from_utf8_lossy(&output.stdout);
        let paths: Vec<&str> = listing
            .lines()
            .filter_map(|l| l.split_once("=> ").map(|(_, path)| path))
            .collect();
        let libc = format!("{}/libc.so.6", self.libc_dir());
        let libc_alias = libc.replacen("/usr/", "/", 1);
        if !paths.iter().any(|p| *p == libc || *p == libc_alias) {
            return Err(FakeError::Check {
                what: format!("ldconfig -p does not list {libc}: {}", listing.trim()),
                path: cache,
            });
        }
        let host_dir = self.path.to_string_lossy();
        if paths.iter().any(|p| p.starts_with(host_dir.as_ref())) {
            return Err(FakeError::Check {
                what: format!("ldconfig -p lists host paths under {host_dir}"),
                path: cache,
            });
        }
        Ok(())
    }
}

/// A host file read once: its bytes and permission bits.
struct HostFile {
    bytes: Vec<u8>,
    mode: u32,
}

/// Everything taken from the host, read once per process.
struct HostFiles {
    busybox: HostFile,
    ldconfig: HostFile,
    glibc: Vec<(&'static str, HostFile)>,
}

fn host_files() -> Result<Arc<HostFiles>, FakeError> {
    static CACHE: Mutex<Option<Arc<HostFiles>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(files) = cache.as_ref() {
        return Ok(Arc::clone(files));
    }
    let busybox = first_static(
        &busybox_candidates(),
        "install busybox-static, or set NVC_TEST_BUSYBOX",
    )?;
    // Ubuntu's /sbin/ldconfig is a shell script around the static ldconfig.real.
    let ldconfig = first_static(
        &[
            "/sbin/ldconfig.real",
            "/usr/sbin/ldconfig.real",
            "/sbin/ldconfig",
            "/usr/sbin/ldconfig",
        ]
        .map(PathBuf::from),
        "the container's ldconfig must be static so it runs without the container's libc",
    )?;
    let mut glibc = Vec::new();
    for name in GLIBC_LIBRARIES {
        let candidates: Vec<String> = HOST_LIB_DIRS
            .iter()
            .map(|d| format!("{d}/{name}"))
            .collect();
        let candidates: Vec<&str> = candidates.iter().map(String::as_str).collect();
        glibc.push((*name, read_host_file(&first_existing(&candidates))?));
    }
    let files = Arc::new(HostFiles {
        busybox,
        ldconfig,
        glibc,
    });
    *cache = Some(Arc::clone(&files));
    Ok(files)
}

fn first_existing(candidates: &[&str]) -> PathBuf {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(candidates[0]))
}

/// Reads `path`, following links, with the permission bits of the file they lead to.
fn read_host_file(path: &Path) -> Result<HostFile, FakeError> {
    let bytes = std::fs::read(path).map_err(FakeError::io("read host file", path))?;
    let mode = std::fs::metadata(path)
        .map_err(FakeError::io("stat host file", path))?
        .permissions()
        .mode()
        & 0o7777;
    Ok(HostFile { bytes, mode })
}

/// Where busybox may be: `$NVC_TEST_BUSYBOX`, the usual places, then `PATH`.
fn busybox_candidates() -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("NVC_TEST_BUSYBOX")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.extend(["/bin/busybox", "/usr/bin/busybox"].map(PathBuf::from));
    let path = std::env::var_os("PATH").unwrap_or_default();
    candidates.extend(std::env::split_paths(&path).map(|dir| dir.join("busybox")));
    candidates
}

/// The first of `candidates` that is a static 64-bit ELF program, read; an error naming
/// every candidate and `why` otherwise.
fn first_static(candidates: &[PathBuf], why: &str) -> Result<HostFile, FakeError> {
    let mut tried = Vec::new();
    for path in candidates {
        let Ok(file) = read_host_file(path) else {
            tried.push(format!("{} (missing)", path.display()));
            continue;
        };
        match elf_interpreter(&file.bytes) {
            Some(None) => return Ok(file),
            Some(Some(interp)) => tried.push(format!("{} (dynamic, {interp})", path.display())),
            None => tried.push(format!("{} (not an x86-64 ELF program)", path.display())),
        }
    }
    Err(FakeError::Check {
        what: format!("no static program among {}: {why}", tried.join(", ")),
        path: candidates.first().cloned().unwrap_or_default(),
    })
}

/// The `PT_INTERP` of a 64-bit little-endian ELF file: `Some(None)` for a static program
/// (static-pie included), `None` if `bytes` is not such a file.
pub fn elf_interpreter(bytes: &[u8]) -> Option<Option<String>> {
    const PT_INTERP: u32 = 3;
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| -> Option<usize> {
        Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?) as usize)
    };
    let u64_at = |at: usize| -> Option<usize> {
        usize::try_from(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?)).ok()
    };
    let phoff = u64_at(0x20)?;
    let phentsize = u16_at(0x36)?;
    let phnum = u16_at(0x38)?;
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32::from_le_bytes(bytes.get(ph..ph + 4)?.try_into().ok()?);
        if p_type == PT_INTERP {
            let offset = u64_at(ph + 8)?;
            let size = u64_at(ph + 32)?;
            let raw = bytes.get(offset..offset.checked_add(size)?)?;
            let text = raw.split(|b| *b == 0).next().unwrap_or_default();
            return Some(Some(String::from_utf8_lossy(text).into_owned()));
        }
    }
    Some(None)
}

/// `fixtures/nvc_probe.c` built against the host's glibc, once per process.
fn probe_binary() -> Result<Arc<Vec<u8>>, FakeError> {
    // Threads asking while it is built wait for the one build.
    static CACHE: Mutex<Option<Arc<Vec<u8>>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bytes) = cache.as_ref() {
        return Ok(Arc::clone(bytes));
    }
    let tmp = tempfile::Builder::new()
        .prefix("nvc-probe-build.")
        .tempdir()
        .map_err(FakeError::io(
            "create build directory in",
            std::env::temp_dir(),
        ))?;
    let source = tmp.path().join("nvc_probe.c");
    let out = tmp.path().join("nvc-probe");
    std::fs::write(&source, include_str!("../fixtures/nvc_probe.c"))
        .map_err(FakeError::io("write", &source))?;
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-Wall", "-g0"])
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .arg("-ldl");
    run_checked(&mut gcc, "build nvc-probe")?;
    let bytes = Arc::new(std::fs::read(&out).map_err(FakeError::io("read built file", &out))?);
    *cache = Some(Arc::clone(&bytes));
    Ok(bytes)
}

fn run_checked(command: &mut Command, step: &'static str) -> Result<(), FakeError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|source| FakeError::Spawn {
            step,
            program: program.clone(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Err(FakeError::Command {
        step,
        command: format!("{program} {}", args.join(" ")),
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
    })
}

/// The host's ldconfig (Debian's is a static program, so it can also run inside a rootfs).
fn find_ldconfig() -> PathBuf {
    first_existing(&["/sbin/ldconfig", "/usr/sbin/ldconfig"])
}

/// Writes `<root>/etc/ld.so.cache` with the host's ldconfig chrooted into `root`.
fn run_ldconfig(root: &Path) -> Result<(), FakeError> {
    let ldconfig = find_ldconfig();
    let mut command;
    if is_root() {
        command = Command::new(&ldconfig);
    } else {
        // chroot is allowed in a user namespace where we are root.
        command = Command::new("unshare");
        command.args(["--user", "--map-root-user"]).arg(&ldconfig);
    }
    command.arg("-r").arg(root);
    match run_checked(&mut command, "write the test rootfs's ld.so.cache") {
        Err(FakeError::Command { stderr, .. }) if !is_root() => Err(FakeError::NeedsRoot {
            what: format!("ldconfig -r (chroot) failed in a user namespace too: {stderr}"),
        }),
        other => other,
    }
}

/// Puts a libcuda in `rootfs`'s `/usr/local/cuda/compat`, as NVIDIA's `cuda-compat` package
/// does: a real shared object (built with gcc in `work`) whose cuDriverGetVersion reports
/// `cuda`, named `libcuda.so.<version>`, with its soname link `libcuda.so.1`.
pub fn add_compat_libcuda(rootfs: &Path, work: &Path, version: &str, cuda: i32) {
    let compat = rootfs.join("usr/local/cuda/compat");
    std::fs::create_dir_all(&compat).expect("create usr/local/cuda/compat");
    let src = work.join(format!("compat-{version}.c"));
    std::fs::write(
        &src,
        format!(
            "int cuInit(unsigned f) {{ (void)f; return 0; }}\n\
             int cuDriverGetVersion(int *v) {{ *v = {cuda}; return 0; }}\n\
             int cuDeviceGetCount(int *n) {{ *n = 0; return 0; }}\n"
        ),
    )
    .expect("write the compat libcuda's source");
    let file = format!("libcuda.so.{version}");
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(compat.join(&file))
        .arg(&src)
        .status()
        .expect("this test needs gcc");
    assert!(built.success(), "gcc could not build {file}");
    let _ = std::fs::remove_file(compat.join("libcuda.so.1"));
    std::os::unix::fs::symlink(&file, compat.join("libcuda.so.1")).expect("link libcuda.so.1");
}
