//! aarch64 (arm64) hosts, on this x86-64 machine: an aarch64 fake driver tree (libraries
//! and programs built by `aarch64-linux-gnu-gcc` with their real sonames, its ld.so.cache
//! written by aarch64's own `ldconfig` under qemu-user), read by the aarch64 `nvc` under
//! qemu-user (`info`, `list`, `cdi generate`) and by this build's discovery; libraries of
//! the other architecture skipped with a reason; and the ld.so.cache nvc writes for an
//! aarch64 container, read back by aarch64's `ldconfig -p` and used by aarch64's loader.
//!
//! Every test needs root (device nodes, ldconfig's chroot), the tools of
//! `scripts/cross-aarch64.sh` (the cross compiler, qemu-user, the Rust target) and, once
//! per machine, the network (Debian's arm64 libc6, libc-bin and busybox-static): the script
//! builds the aarch64 binaries once per checkout and a test fails, saying so, when it
//! cannot.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use libnvc::discover::{self, LibClass};
use libnvc::elf::Arch;
use libnvc::ldcache::{self, CacheArch};
use nvc_tests::{
    aarch64, require_root, Bundle, FakeDriver, FakeDriverSpec, FakeGpu, Runtime, NVIDIA_PREFIX,
};
use serde_json::{json, Value};

const VERSION: &str = "999.88.77";
const ARM_LIBS: &str = "/usr/lib/aarch64-linux-gnu";

/// The aarch64 binaries, built by `scripts/cross-aarch64.sh` once per process.
fn aarch64_bins() -> PathBuf {
    aarch64::build().unwrap_or_else(|e| panic!("the aarch64 build failed: {e}"))
}

/// An aarch64 driver with 2 GPUs, its ld.so.cache written by aarch64's ldconfig.
fn aarch64_driver(dir: &Path) -> FakeDriver {
    FakeDriverSpec {
        arch: Arch::Aarch64,
        gpus: FakeGpu::fake_gpus(2),
        ..FakeDriverSpec::default()
    }
    .build(dir)
    .unwrap_or_else(|e| panic!("cannot build the aarch64 driver tree: {e}"))
}

/// Runs the aarch64 `nvc` under qemu-user with the tree's configuration.
fn nvc_arm(fake: &FakeDriver, args: &[&str]) -> Output {
    let out = aarch64::qemu(aarch64_bins().join("nvc"))
        .args(args)
        .env("NVC_CONFIG", &fake.config)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", aarch64::QEMU));
    assert!(
        out.status.success(),
        "nvc {args:?} under qemu-user failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The workspace's own (x86-64) `nvc`, next to this test's deps folder.
fn nvc_native() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|p| p.parent()).unwrap().join("nvc");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace`",
        bin.display()
    );
    bin
}

/// Builds a shared object with `compiler` and `soname` at `out`.
fn shared_object(compiler: &str, dir: &Path, soname: &str, out: &Path) {
    let src = dir.join("other-arch.c");
    std::fs::write(&src, "int nvc_other_arch(void) { return 1; }\n").unwrap();
    let status = Command::new(compiler)
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(format!("-Wl,-soname,{soname}"))
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(status.success(), "{compiler} failed");
}

fn cache_of(root: &Path) -> ldcache::Cache {
    ldcache::parse(&std::fs::read(root.join("etc/ld.so.cache")).unwrap()).unwrap()
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): aarch64's ldconfig under qemu-user, device nodes"]
fn the_aarch64_driver_is_found_by_its_files() {
    require_root("device nodes and aarch64's ldconfig -r");
    let dir = tempfile::tempdir().unwrap();
    let fake = aarch64_driver(dir.path());

    // aarch64's ldconfig lists the driver's libraries with its own flags, 0x0a03.
    let cache = cache_of(&fake.root);
    let cuda = cache
        .entries
        .iter()
        .find(|e| e.name == "libcuda.so.1")
        .expect("libcuda.so.1 in the cache");
    assert_eq!(cuda.flags, 0x0a03, "{cuda:?}");
    assert_eq!(cuda.arch(), Some(CacheArch::Aarch64));
    assert_eq!(cuda.path, "/lib/aarch64-linux-gnu/libcuda.so.1");

    // This (x86-64) build reads the aarch64 tree as aarch64: from the files, not from
    // what it was built for.
    let roots = discover::DriverRoots {
        root: fake.root.clone(),
        dev_root: fake.dev_root.clone(),
        proc_root: fake.proc_root.clone(),
    };
    let driver = discover::discover(&roots, &nvc_host::probe::RealHost).unwrap();
    assert_eq!(driver.version, VERSION);
    assert_eq!(driver.arch(), Some(Arch::Aarch64));
    assert!(driver.libraries.len() > 20, "{:#?}", driver.libraries);
    assert!(driver
        .libraries
        .iter()
        .all(|l| l.arch == Arch::Aarch64 && l.class == LibClass::Lib64));
    let smi = fake.root.join("usr/local/nvidia/bin/nvidia-smi");
    assert!(
        driver.binaries.iter().any(|b| b.host_path == smi),
        "the aarch64 nvidia-smi is the driver's: {:#?}",
        driver.binaries
    );
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): the aarch64 nvc under qemu-user, device nodes"]
fn the_aarch64_nvc_shows_lists_and_describes_the_driver() {
    require_root("device nodes and aarch64's ldconfig -r");
    let dir = tempfile::tempdir().unwrap();
    let fake = aarch64_driver(dir.path());

    // `nvc info`: the version from /proc, CUDA's from the aarch64 libcuda it loads.
    let info = text(&nvc_arm(&fake, &["info"]));
    assert!(
        info.contains(&format!("Driver version:  {VERSION}")),
        "{info}"
    );
    assert!(info.contains("CUDA version:    99.1"), "{info}");
    for gpu in &fake.spec.gpus {
        assert!(info.contains(&gpu.uuid), "{} missing in\n{info}", gpu.uuid);
    }

    // `nvc list`: every library goes to the aarch64 folder.
    let list = text(&nvc_arm(&fake, &["list", "--capabilities", "all"]));
    assert!(
        list.contains(&format!("{ARM_LIBS}/libcuda.so.{VERSION}")),
        "{list}"
    );
    assert!(
        list.contains(&format!("{ARM_LIBS}/libnvidia-ml.so.{VERSION}")),
        "{list}"
    );
    assert!(!list.contains("x86_64"), "{list}");
    assert!(list.contains("/usr/bin/nvidia-smi"), "{list}");

    // `nvc cdi generate`: the spec mounts them there and has the cache hook read there.
    let spec_path = dir.path().join("nvidia.yaml");
    nvc_arm(
        &fake,
        &["cdi", "generate", "--output", spec_path.to_str().unwrap()],
    );
    let spec = std::fs::read_to_string(&spec_path).unwrap();
    assert!(
        spec.contains(&format!("containerPath: {ARM_LIBS}/libcuda.so.{VERSION}")),
        "{spec}"
    );
    assert!(spec.contains(&format!("- {ARM_LIBS}")), "{spec}");
    assert!(!spec.contains("x86_64"), "{spec}");
    for gpu in &fake.spec.gpus {
        assert!(spec.contains(&gpu.uuid), "{spec}");
    }
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): aarch64's ldconfig under qemu-user, device nodes"]
fn a_library_of_the_other_architecture_is_skipped_saying_why() {
    require_root("device nodes and aarch64's ldconfig -r");
    let dir = tempfile::tempdir().unwrap();
    let fake = aarch64_driver(dir.path());
    let lib64 = fake
        .root
        .join(NVIDIA_PREFIX.trim_start_matches('/'))
        .join("lib64");

    // An x86-64 libnvidia-ml in the aarch64 tree: aarch64's ldconfig lists it as aarch64.
    let ml = lib64.join(format!("libnvidia-ml.so.{VERSION}"));
    shared_object("gcc", dir.path(), "libnvidia-ml.so.1", &ml);
    let status = Command::new(aarch64::QEMU)
        .arg(aarch64::ldconfig().unwrap())
        .args(["-X", "-r"])
        .arg(&fake.root)
        .status()
        .unwrap();
    assert!(status.success());
    let listed = cache_of(&fake.root)
        .entries
        .into_iter()
        .find(|e| e.name == "libnvidia-ml.so.1")
        .expect("aarch64's ldconfig lists the x86-64 library");
    assert_eq!(listed.arch(), Some(CacheArch::Aarch64));

    let list = text(&nvc_arm(&fake, &["list", "--capabilities", "all"]));
    assert!(!list.contains("libnvidia-ml"), "{list}");
    assert!(
        list.contains(&format!("{ARM_LIBS}/libcuda.so.{VERSION}")),
        "{list}"
    );
    let log = std::fs::read_to_string(dir.path().join("nvc.log")).unwrap();
    let why = format!(
        "skipping {}: a 64-bit x86_64 object, but the driver root's ld.so.cache lists it as a \
         Lib64 library of the aarch64 driver",
        ml.display()
    );
    assert!(log.contains(&why), "no {why:?} in\n{log}");

    // And the other way: an aarch64 libcuda where an x86-64 tree's cache says x86-64 (the
    // file replaced after ldconfig ran; x86-64's ldconfig leaves aarch64 files out).
    let x86 = tempfile::tempdir().unwrap();
    let fake = FakeDriverSpec {
        gpus: FakeGpu::fake_gpus(1),
        ..FakeDriverSpec::default()
    }
    .build(x86.path())
    .unwrap();
    let lib64 = fake
        .root
        .join(NVIDIA_PREFIX.trim_start_matches('/'))
        .join("lib64");
    let cuda = lib64.join(format!("libcuda.so.{VERSION}"));
    shared_object(aarch64::GCC, x86.path(), "libcuda.so.1", &cuda);
    let out = Command::new(nvc_native())
        .args(["list", "--capabilities", "all"])
        .env("NVC_CONFIG", &fake.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = text(&out);
    assert!(!list.contains("libcuda.so"), "{list}");
    assert!(
        list.contains("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"),
        "{list}"
    );
    let log = std::fs::read_to_string(x86.path().join("nvc.log")).unwrap();
    let why = format!(
        "skipping {}: a 64-bit aarch64 object, but the driver root's ld.so.cache lists it as a \
         Lib64 library of the x86_64 driver",
        cuda.display()
    );
    assert!(log.contains(&why), "no {why:?} in\n{log}");
}

/// A small arm64 image: Debian's arm64 glibc (loader and libraries), its `ldconfig`, a
/// static busybox, `nvc-probe` built for aarch64, and the image's own ld.so.cache written by
/// aarch64's `ldconfig`.
fn aarch64_rootfs(work: &Path, rootfs: &Path) {
    let userland = aarch64::userland();
    let busybox = userland.join("bin/busybox");
    assert!(
        busybox.is_file(),
        "{} is missing: run scripts/cross-aarch64.sh as root, with the network",
        busybox.display()
    );
    for dir in [
        "bin",
        "sbin",
        "usr/bin",
        "usr/lib/aarch64-linux-gnu",
        "etc",
        "tmp",
    ] {
        std::fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
    let status = Command::new("cp")
        .arg("-a")
        .arg(userland.join("lib"))
        .arg(userland.join("etc/ld.so.conf"))
        .arg(userland.join("etc/ld.so.conf.d"))
        .arg(rootfs.join("tmp"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::rename(rootfs.join("tmp/lib"), rootfs.join("lib")).unwrap();
    std::fs::rename(rootfs.join("tmp/ld.so.conf"), rootfs.join("etc/ld.so.conf")).unwrap();
    std::fs::rename(
        rootfs.join("tmp/ld.so.conf.d"),
        rootfs.join("etc/ld.so.conf.d"),
    )
    .unwrap();
    std::fs::copy(&busybox, rootfs.join("bin/busybox")).unwrap();
    std::fs::copy(userland.join("sbin/ldconfig"), rootfs.join("sbin/ldconfig")).unwrap();
    for applet in ["sh", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    let probe = workspace_fixture("nvc_probe.c");
    let status = Command::new(aarch64::GCC)
        .args(["-O2", "-o"])
        .arg(rootfs.join("usr/bin/nvc-probe"))
        .arg(&probe)
        .arg("-ldl")
        .current_dir(work)
        .status()
        .unwrap();
    assert!(status.success(), "{} cannot build nvc-probe", aarch64::GCC);
    let status = Command::new(aarch64::QEMU)
        .arg(aarch64::ldconfig().unwrap())
        .arg("-r")
        .arg(rootfs)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "aarch64's ldconfig -r on the image failed"
    );
}

fn workspace_fixture(name: &str) -> PathBuf {
    nvc_tests::trees::workspace_dir()
        .join("tests/fixtures")
        .join(name)
}

/// The aarch64 binaries' nvc configuration for `fake`: the aarch64 hook, this host's runc.
fn aarch64_config(fake: &FakeDriver, dir: &Path, bins: &Path) -> PathBuf {
    let config = dir.join("config.toml");
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    std::fs::write(
        &config,
        format!(
            "[driver]\nroot = {}\ndev-root = {}\nproc-root = {}\n\n[runtime]\nruntimes = [{}]\n\n\
             [hook]\npath = {}\nstate-dir = {}\n\n[log]\nfile = {}\nlevel = \"debug\"\n\n\
             [leases]\ndir = {}\n",
            quoted(&fake.root),
            quoted(&fake.dev_root),
            quoted(&fake.proc_root),
            quoted(&nvc_tests::runc_path()),
            quoted(&bins.join("nvc-hook")),
            quoted(&dir.join("state")),
            quoted(&dir.join("nvc.log")),
            quoted(&dir.join("leases")),
        ),
    )
    .unwrap();
    config
}

/// The CDI spec's edits for the device `all`, as CDI's library applies them, less the
/// set-up hook's mask (`--proc-root`): qemu-user 7.2 (Debian 12) has no open_tree(2), so
/// the mask over /proc/driver/nvidia cannot be mounted under it. Nothing else is left out.
fn apply_cdi(bundle: Bundle, spec: &Value) -> Bundle {
    let mut spec = spec.clone();
    for hook in spec["containerEdits"]["hooks"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if let Some(args) = hook["args"].as_array_mut() {
            if let Some(at) = args.iter().position(|a| a == "--proc-root") {
                args.drain(at..at + 2);
            }
            // Under qemu-user (a threaded emulator) setns into a mount namespace fails
            // (EINVAL): the aarch64 hook runs as an earlier spec's createContainer hook,
            // already inside, as it does on an aarch64 host with such a spec.
            args.retain(|a| a != "--enter");
        }
        if hook["hookName"] == "createRuntime" {
            hook["hookName"] = "createContainer".into();
        }
    }
    bundle.with_cdi_edits(&spec, &["all"], |_| true)
}

/// qemu-aarch64 registered with binfmt_misc, for aarch64 programs the kernel starts itself
/// (runc's hooks and container process, chroot).
fn require_binfmt() {
    assert!(
        Path::new("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists(),
        "qemu-aarch64 is not registered with binfmt_misc: scripts/cross-aarch64.sh registers it, as root"
    );
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): runc, qemu-user through binfmt_misc for the aarch64 hooks and image"]
fn an_aarch64_container_gets_a_cache_its_ldconfig_and_loader_read() {
    require_root("runc, device nodes, aarch64's ldconfig -r, binfmt_misc");
    let bins = aarch64_bins();
    require_binfmt();
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("driver");
    std::fs::create_dir(&driver).unwrap();
    let fake = aarch64_driver(&driver);
    let bundle_dir = dir.path().join("bundle");
    let rootfs = bundle_dir.join("rootfs");
    aarch64_rootfs(dir.path(), &rootfs);
    let config = aarch64_config(&fake, dir.path(), &bins);

    // The aarch64 nvc's CDI spec, applied as an engine applies it; runc (this host's) makes
    // the mounts and nodes and runs the aarch64 nvc-hook's createContainer hooks (static,
    // through binfmt_misc), which write the container's ld.so.cache.
    let out = aarch64::qemu(bins.join("nvc"))
        .args(["cdi", "generate", "--format", "json"])
        .env("NVC_CONFIG", &config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hooks = spec["containerEdits"]["hooks"].to_string();
    for part in ["cdi-setup", "--folder", "--proc-root"] {
        assert!(hooks.contains(part), "no {part} in the hooks {hooks}");
    }
    let bundle = Bundle::new(&bundle_dir, &rootfs)
        .unwrap()
        .args(&["/bin/sh", "-c", "/sbin/ldconfig -p; /usr/bin/nvc-probe"])
        .env(&["NVC_FAKE_PROC=/run/fake-proc"])
        .set(
            "/mounts/-",
            json!({"destination": "/run/fake-proc", "type": "bind",
                   "source": fake.proc_root, "options": ["rbind", "ro"]}),
        );
    let bundle = apply_cdi(bundle, &spec).write().unwrap();
    let runtime = Runtime::runc(&dir.path().join("runc-state"));
    let out = runtime.run(&bundle, &nvc_tests::container_id("arm64"));
    let log = std::fs::read_to_string(dir.path().join("nvc.log")).unwrap_or_default();
    assert!(
        out.success(),
        "the aarch64 container failed:\n{out:?}\nnvc's log:\n{log}"
    );

    // aarch64's ldconfig reads the cache the aarch64 hook wrote: the driver's libraries in
    // the aarch64 folder with aarch64's flags, beside the image's own glibc.
    let cuda = format!("libcuda.so.1 (libc6,AArch64) => {ARM_LIBS}/libcuda.so.1");
    assert!(out.stdout.contains(&cuda), "no {cuda:?} in\n{}", out.stdout);
    assert!(
        out.stdout
            .contains("libc.so.6 (libc6,AArch64) => /lib/aarch64-linux-gnu/libc.so.6"),
        "{}",
        out.stdout
    );
    // And aarch64's loader finds the libraries by soname through it; libcuda answers.
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("libcuda="))
        .unwrap_or_else(|| panic!("no libcuda line in\n{}", out.stdout));
    assert!(line.starts_with("libcuda=ok"), "{line}");
    assert!(line.contains("cuda_version=99010"), "{line}");
    assert!(
        line.contains(&format!("realpath={ARM_LIBS}/libcuda.so.{VERSION} ")),
        "{line}"
    );
    let ml = out
        .stdout
        .lines()
        .find(|l| l.starts_with("libnvidia-ml="))
        .unwrap_or_default();
    assert!(
        ml.starts_with("libnvidia-ml=ok") && ml.contains(VERSION),
        "{ml}"
    );
}

/// Reads an ELF file's `e_machine` (183: aarch64).
fn elf_machine(path: &Path) -> u16 {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..4], b"\x7fELF", "{} is not ELF", path.display());
    u16::from_le_bytes([bytes[18], bytes[19]])
}

/// Runs a packaging script of the repository; the package's path is its last line.
fn package(script: &str, args: &[&std::ffi::OsStr]) -> PathBuf {
    let out = Command::new("bash")
        .arg(nvc_tests::repo_root().join("packaging").join(script))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(text(&out).lines().last().unwrap())
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): the aarch64 build, dpkg-deb, rpmbuild, qemu-user"]
fn the_arm64_deb_and_rpm_hold_the_aarch64_build_which_runs() {
    require_root("the aarch64 build's userland and rpmbuild's scratch folders");
    let bins = aarch64_bins();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let native = nvc_native();
    let common: [&std::ffi::OsStr; 6] = [
        "--bin-dir".as_ref(),
        bins.as_os_str(),
        "--help-from".as_ref(),
        native.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    let xz0: [&std::ffi::OsStr; 2] = ["--xz-level".as_ref(), "0".as_ref()];
    let deb = package(
        "build-deb.sh",
        &[&["--arch".as_ref(), "arm64".as_ref()][..], &common, &xz0].concat(),
    );
    let rpm = package(
        "build-rpm.sh",
        &[&["--arch".as_ref(), "aarch64".as_ref()][..], &common, &xz0].concat(),
    );
    let field = |args: &[&str], package: &Path| {
        let out = Command::new(args[0])
            .args(&args[1..])
            .arg(package)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        text(&out).trim().to_string()
    };
    let control = field(&["dpkg-deb", "--field"], &deb);
    assert!(
        control.lines().any(|l| l == "Architecture: arm64"),
        "{control}"
    );
    assert_eq!(field(&["rpm", "-qp", "--qf", "%{ARCH}"], &rpm), "aarch64");

    // The .deb's binaries are this build's aarch64 ones, and its nvc runs (under qemu-user)
    // and reads an aarch64 driver.
    let files = dir.path().join("deb");
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&files)
        .status()
        .unwrap();
    assert!(status.success());
    for name in [
        "nvc",
        "nvc-runtime",
        "nvc-hook",
        "nvc-cuda-version",
        "nvc-mig-devices",
    ] {
        assert_eq!(
            elf_machine(&files.join("usr/bin").join(name)),
            183,
            "{name}"
        );
    }
    let listed = field(&["rpm", "-qlp"], &rpm);
    for name in [
        "nvc",
        "nvc-runtime",
        "nvc-hook",
        "nvc-cuda-version",
        "nvc-mig-devices",
    ] {
        assert!(
            listed.lines().any(|l| l == format!("/usr/bin/{name}")),
            "{name} missing from the RPM:\n{listed}"
        );
    }
    let driver = dir.path().join("driver");
    std::fs::create_dir(&driver).unwrap();
    let fake = aarch64_driver(&driver);
    let info = aarch64::qemu(files.join("usr/bin/nvc"))
        .arg("info")
        .env("NVC_CONFIG", &fake.config)
        .output()
        .unwrap();
    assert!(info.status.success(), "{info:?}");
    assert!(
        text(&info).contains(&format!("Driver version:  {VERSION}")),
        "{}",
        text(&info)
    );
}

#[test]
#[ignore = "needs root and the network (once, for Debian's arm64 userland): rpm --root, chroot into an arm64 root through qemu-user and binfmt_misc"]
fn the_aarch64_rpm_installs_and_erases_in_an_arm64_root() {
    require_root("rpm --root, chroot and binfmt_misc");
    let bins = aarch64_bins();
    require_binfmt();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    aarch64_rootfs(dir.path(), &root);
    // An arm64 system's tools for the scriptlets (busybox's applets, run through qemu),
    // the libgcc_s nvc links, /dev/null, and the folders an RPM system has.
    let chroot = |args: &[&str]| {
        let out = Command::new("chroot")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "chroot {args:?}: {out:?}");
        text(&out)
    };
    chroot(&["/bin/busybox", "--install", "-s"]);
    std::fs::copy(
        Path::new(aarch64::SYSROOT).join("lib/libgcc_s.so.1"),
        root.join("lib/aarch64-linux-gnu/libgcc_s.so.1"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("dev")).unwrap();
    let status = Command::new("mknod")
        .args(["-m", "0666"])
        .arg(root.join("dev/null"))
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(status.success());
    for folder in [
        "usr/share/doc",
        "usr/lib/systemd/system",
        "var/log",
        "var/tmp",
        "var/lib/rpm",
        "var/run/cdi",
    ] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    let digest = || -> String {
        nvc_tests::tree_digest(&root)
            .lines()
            .filter(|l| !l.starts_with("./var/lib/rpm"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let before = digest();

    let out = dir.path().join("out");
    let native = nvc_native();
    let package_args: [&std::ffi::OsStr; 10] = [
        "--arch".as_ref(),
        "aarch64".as_ref(),
        "--bin-dir".as_ref(),
        bins.as_os_str(),
        "--help-from".as_ref(),
        native.as_os_str(),
        "--xz-level".as_ref(),
        "0".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    let rpm_file = package("build-rpm.sh", &package_args);
    let rpm = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("rpm")
            .arg("--root")
            .arg(&root)
            .args(["--dbpath", "/var/lib/rpm", "--nodeps"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "rpm {args:?}: {out:?}");
    };
    // Installed with its scriptlets, which run in the arm64 root.
    rpm(&["-i".as_ref(), "--ignorearch".as_ref(), rpm_file.as_os_str()]);
    for name in [
        "nvc",
        "nvc-runtime",
        "nvc-hook",
        "nvc-cuda-version",
        "nvc-mig-devices",
    ] {
        assert_eq!(elf_machine(&root.join("usr/bin").join(name)), 183, "{name}");
    }
    assert!(root.join("etc/nvc/config.toml").is_file());
    let version = chroot(&["/usr/bin/nvc", "--version"]);
    assert!(version.starts_with("nvc "), "{version}");
    // Erased, the prerm and postrm run there too: the root is as it was.
    rpm(&["-e".as_ref(), "nvc".as_ref()]);
    assert_eq!(digest(), before);
}
