//! The host's checks: config, driver, versions, GPUs, device nodes, persistence mode,
//! ldconfig, the low-level runtime, nvc-runtime and the hook; then the engines and CDI.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use libnvc::discover::{self, proc, rootfs, Driver, DriverRoots};
use libnvc::ldcache::{self, CacheArch};
use libnvc::report::error_chain;
use nvc_config::Config;

use super::{cdi, engines, is_executable, show, Findings, Probe, Row, Status};

/// Every check, in order. A malformed config stops here: every nvc program refuses to
/// run with it, so nothing else can be judged. Without a driver, the checks that need
/// one are left out rather than each failing again.
pub fn check_all(probe: &Probe) -> Vec<Row> {
    let (row, config) = config(&probe.config_path);
    let mut rows = vec![row];
    let Some(config) = config else {
        return rows;
    };
    nvc_host::logging::init(&config.log, "nvc");
    let roots = DriverRoots::from_config(&config.driver);
    let driver = match discover::discover(&roots, &nvc_host::probe::RealHost) {
        Ok(d) => {
            rows.push(driver_row(&d));
            Some(d)
        }
        Err(e) => {
            let fix = match e {
                discover::DiscoverError::NoDriver { .. } => format!(
                    "install the NVIDIA driver, or point [driver] in {} at it",
                    show(&probe.config_path)
                ),
                _ => "check that the file is readable (run as root)".to_string(),
            };
            rows.push(Row::fail("driver", error_chain(&e), fix));
            None
        }
    };
    if let Some(driver) = &driver {
        rows.push(versions(driver));
        rows.push(gpus(driver));
        let majors = read_majors(&roots.proc_root);
        rows.push(gpu_nodes(driver, &majors));
        rows.push(control_nodes(driver, &majors));
        rows.push(persistence(driver));
    }
    rows.push(ldconfig(&config, probe));
    rows.push(runtime(&config, probe));
    rows.push(nvc_runtime(probe));
    rows.push(hook(&config, probe));
    let specs = cdi::scan(&probe.cdi_dirs);
    rows.extend(engines::check(probe, &specs));
    rows.extend(cdi::rows(&specs, driver.as_ref(), &probe.cdi_dirs));
    rows
}

/// The config file: found, absent (the defaults) or malformed.
pub fn config(path: &Path) -> (Row, Option<Config>) {
    let exists = path.exists();
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            return (
                Row::fail(
                    "config",
                    error_chain(&e),
                    format!("fix {}; `nvc config default` shows every key", show(path)),
                ),
                None,
            )
        }
    };
    if let Err(e) = libnvc::oci::request_policy(&config, false) {
        return (
            Row::fail(
                "config",
                format!("invalid config file {}: {}", show(path), error_chain(&e)),
                "name only known capabilities (see `nvc config default`)",
            ),
            None,
        );
    }
    let detail = if exists {
        show(path)
    } else {
        format!("no {}: the defaults", show(path))
    };
    (Row::ok("config", detail), Some(config))
}

fn driver_row(driver: &Driver) -> Row {
    let roots = &driver.roots;
    let default = DriverRoots::from_config(&nvc_config::DriverConfig::default());
    let mut detail = driver.version.clone();
    if *roots != default {
        let dev = if roots.dev_root == roots.root {
            String::new()
        } else {
            format!(", dev root {}", show(&roots.dev_root))
        };
        detail.push_str(&format!(
            " (root {}{dev}, proc root {})",
            show(&roots.root),
            show(&roots.proc_root)
        ));
    }
    Row::ok("driver", detail)
}

/// The version suffix of the real file a soname leads to through the driver root's
/// ld.so.cache: `Ok((file name, suffix))`, or why there is none.
fn library_version(
    root: &Path,
    cache: &ldcache::Cache,
    soname: &str,
) -> Result<(String, String), String> {
    let entry = cache
        .lookup(soname, CacheArch::X86_64)
        .ok_or_else(|| format!("{soname} is not in {}", show(&root.join("etc/ld.so.cache"))))?;
    let real = rootfs::resolve_in_root(&nvc_host::probe::RealHost, root, Path::new(&entry.path))
        .map_err(|e| {
            format!(
                "{soname} leads to {}, which cannot be opened ({e})",
                entry.path
            )
        })?;
    let file = real
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default()
        .to_string();
    let suffix = file
        .split_once(".so.")
        .map(|(_, s)| s.to_string())
        .filter(|s| s.parse::<libnvc::version::Version>().is_ok())
        .ok_or_else(|| format!("{soname} is {file}, which has no version suffix"))?;
    Ok((file, suffix))
}

/// The kernel module's version against the user-space libraries' version suffix.
pub fn versions(driver: &Driver) -> Row {
    const CHECK: &str = "driver versions";
    let roots = &driver.roots;
    let version_file = roots.nvidia_proc().join("version");
    let kernel = match std::fs::read_to_string(&version_file) {
        Ok(text) => match proc::parse_version_file(&text) {
            Some(v) => v,
            None => {
                return Row::fail(
                    CHECK,
                    format!("{} names no driver version", show(&version_file)),
                    "reload the nvidia kernel module (or reboot)",
                )
            }
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Row::fail(
                CHECK,
                format!(
                    "the nvidia kernel module is not loaded: no {}",
                    show(&version_file)
                ),
                "load it: `modprobe nvidia` (or run nvidia-smi once as root); after a driver install, reboot",
            )
        }
        Err(e) => {
            return Row::fail(
                CHECK,
                format!("cannot read {}: {e}", show(&version_file)),
                "run nvc check as root",
            )
        }
    };
    let host = nvc_host::probe::RealHost;
    let cache = rootfs::resolve_in_root(&host, &roots.root, Path::new("/etc/ld.so.cache"))
        .map_err(|e| e.to_string())
        .and_then(|p| ldcache::read_from(&host, &p).map_err(|e| error_chain(&e)));
    let cache = match cache {
        Ok(c) => c,
        Err(e) => {
            return Row::fail(
                CHECK,
                format!(
                    "kernel module {kernel}, but the library cache {} cannot be read: {e}",
                    show(&roots.root.join("etc/ld.so.cache"))
                ),
                "run ldconfig on the host",
            )
        }
    };
    let mut findings = Findings::default();
    let mut seen = Vec::new();
    for soname in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        match library_version(&roots.root, &cache, soname) {
            Ok((file, suffix)) if suffix == kernel => seen.push(file),
            Ok((file, suffix)) => findings.push(
                Status::Fail,
                format!("kernel module {kernel}, but {soname} is {file} (driver {suffix})"),
                Some("reboot or reload the nvidia module after a driver upgrade".into()),
            ),
            Err(why) => findings.push(
                Status::Fail,
                why,
                Some("reinstall the driver's user-space libraries, then run ldconfig".into()),
            ),
        }
    }
    let mut ok = format!("kernel module {kernel}, {}", seen.join(", "));
    if driver.library("libcuda").is_some() {
        match driver.cuda_version(&nvc_host::probe::RealHost) {
            Ok(v) => ok.push_str(&format!("; CUDA {v}")),
            Err(e) => findings.push(
                Status::Warn,
                format!(
                    "libcuda cannot report its CUDA version: {}",
                    error_chain(&e)
                ),
                Some("reinstall the driver's user-space libraries".into()),
            ),
        }
    }
    findings.row(CHECK, ok)
}

/// The GPUs the kernel module lists.
pub fn gpus(driver: &Driver) -> Row {
    if driver.gpus.is_empty() {
        return Row::fail(
            "GPUs",
            format!(
                "none listed under {}",
                show(&driver.roots.nvidia_proc().join("gpus"))
            ),
            "check `nvidia-smi` and the kernel log (dmesg): the driver lists no GPU it failed to initialise",
        );
    }
    let list: Vec<String> = driver
        .gpus
        .iter()
        .map(|g| {
            let mig = match g.mig.len() {
                0 => String::new(),
                n => format!(", MIG: {n} devices"),
            };
            format!("{} {}{mig}", g.index, g.bus_id)
        })
        .collect();
    let mut models: Vec<&str> = driver.gpus.iter().map(|g| g.model.as_str()).collect();
    models.dedup();
    Row::ok(
        "GPUs",
        format!(
            "{} × {}: {} (UUIDs: `nvc info`)",
            driver.gpus.len(),
            models.join(", "),
            list.join(", ")
        ),
    )
}

/// Character device majors by name from `<proc_root>/devices`; empty when unreadable.
fn read_majors(proc_root: &Path) -> BTreeMap<String, u32> {
    std::fs::read_to_string(proc_root.join("devices"))
        .map(|t| proc::parse_char_majors(&t))
        .unwrap_or_default()
}

/// The major part of a `dev_t`, as glibc's `gnu_dev_major` computes it.
fn dev_major(rdev: u64) -> u32 {
    (((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0000_0fff)) as u32
}

/// The minor part of a `dev_t`, as glibc's `gnu_dev_minor` computes it.
fn dev_minor(rdev: u64) -> u32 {
    (((rdev >> 12) & 0xffff_ff00) | (rdev & 0x0000_00ff)) as u32
}

/// Checks one node against the numbers the driver registered; adds what is wrong to
/// `findings` and returns the `path major:minor` text when it is right.
fn check_node(
    host: &Path,
    numbers: (u32, u32),
    missing_fix: &str,
    findings: &mut Findings,
) -> Option<String> {
    let shown = show(host);
    let meta = match std::fs::symlink_metadata(host) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            findings.push(
                Status::Fail,
                format!("{shown} is missing"),
                Some(missing_fix.to_string()),
            );
            return None;
        }
        Err(e) => {
            findings.push(
                Status::Fail,
                format!("cannot stat {shown}: {e}"),
                Some("run nvc check as root".into()),
            );
            return None;
        }
    };
    if !meta.file_type().is_char_device() {
        findings.push(
            Status::Fail,
            format!("{shown} is not a character device"),
            Some(format!("remove it, then {missing_fix}")),
        );
        return None;
    }
    let (major, minor) = (dev_major(meta.rdev()), dev_minor(meta.rdev()));
    if (major, minor) != numbers {
        findings.push(
            Status::Fail,
            format!(
                "{shown} is {major}:{minor}, but the driver registered {}:{}",
                numbers.0, numbers.1
            ),
            Some(format!("remove it, then {missing_fix}")),
        );
        return None;
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o666 != 0o666 {
        findings.push(
            Status::Warn,
            format!(
                "{shown} is mode {mode:04o}: containers running as a non-root user cannot open it"
            ),
            Some(format!(
                "chmod 0666 {shown}, or load nvidia with NVreg_DeviceFileMode=0666"
            )),
        );
    }
    Some(format!("{shown} {major}:{minor}"))
}

fn major_of(majors: &BTreeMap<String, u32>, name: &str, findings: &mut Findings) -> u32 {
    match majors.get(name) {
        Some(m) => *m,
        None => {
            findings.push(
                Status::Info,
                format!("no {name} in /proc/devices: assumed major 195"),
                None,
            );
            195
        }
    }
}

/// `/dev/nvidia<minor>` for every GPU.
pub fn gpu_nodes(driver: &Driver, majors: &BTreeMap<String, u32>) -> Row {
    let mut findings = Findings::default();
    let major = major_of(majors, "nvidia", &mut findings);
    let mut good = Vec::new();
    for g in &driver.gpus {
        let fix = format!(
            "create it: `nvidia-modprobe -c={}` (or run nvidia-smi once as root)",
            g.minor
        );
        if let Some(ok) = check_node(&g.node.host_path, (major, g.minor), &fix, &mut findings) {
            good.push(ok);
        }
    }
    let ok = if good.is_empty() {
        "no GPU, no node".to_string()
    } else {
        good.join(", ")
    };
    findings.row("GPU device nodes", ok)
}

/// `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`.
pub fn control_nodes(driver: &Driver, majors: &BTreeMap<String, u32>) -> Row {
    let mut findings = Findings::default();
    let dev = driver.roots.dev_root.join("dev");
    let nvidia = major_of(majors, "nvidiactl", &mut findings);
    let mut good = Vec::new();
    let ctl_fix = "create it: `nvidia-modprobe` (or run nvidia-smi once as root)";
    if let Some(ok) = check_node(
        &dev.join("nvidiactl"),
        (nvidia, 255),
        ctl_fix,
        &mut findings,
    ) {
        good.push(ok);
    }
    match majors.get("nvidia-uvm") {
        Some(uvm) => {
            let fix = "create them: `nvidia-modprobe -u -c=0`";
            for (name, minor) in [("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)] {
                if let Some(ok) = check_node(&dev.join(name), (*uvm, minor), fix, &mut findings) {
                    good.push(ok);
                }
            }
        }
        None => findings.push(
            Status::Fail,
            format!(
                "the nvidia-uvm module is not loaded (no nvidia-uvm in {}): CUDA programs fail",
                show(&driver.roots.proc_root.join("devices"))
            ),
            Some("load it: `nvidia-modprobe -u -c=0` (or `modprobe nvidia-uvm`)".into()),
        ),
    }
    findings.row("control device nodes", good.join(", "))
}

/// The socket nvidia-persistenced listens on, inside the driver root.
const PERSISTENCED_SOCKETS: [&str; 2] = [
    "/run/nvidia-persistenced/socket",
    "/var/run/nvidia-persistenced/socket",
];

/// Persistence mode, from NVML when it can tell, else from nvidia-persistenced's socket.
pub fn persistence(driver: &Driver) -> Row {
    const CHECK: &str = "persistence mode";
    let fix = "start nvidia-persistenced: `systemctl enable --now nvidia-persistenced`";
    if driver.gpus.is_empty() {
        return Row::info(CHECK, "no GPU");
    }
    let nvml = match persistence_from_nvml(driver) {
        Ok(states) => {
            let off: Vec<String> = states
                .iter()
                .filter(|(_, on)| !on)
                .map(|(i, _)| i.to_string())
                .collect();
            return if off.is_empty() {
                Row::ok(CHECK, "on for every GPU")
            } else {
                Row::warn(
                    CHECK,
                    format!(
                        "off for GPU {}: the driver is set up anew for each container (slow starts)",
                        off.join(", ")
                    ),
                    fix,
                )
            };
        }
        Err(why) => why,
    };
    let socket = PERSISTENCED_SOCKETS.iter().find_map(|inner| {
        let host = rootfs::resolve_in_root(
            &nvc_host::probe::RealHost,
            &driver.roots.root,
            Path::new(inner),
        )
        .ok()?;
        std::fs::metadata(&host)
            .is_ok_and(|m| m.file_type().is_socket())
            .then_some(host)
    });
    match socket {
        Some(s) => Row::ok(
            CHECK,
            format!("nvidia-persistenced is running ({})", show(&s)),
        ),
        None => Row::warn(
            CHECK,
            format!(
                "probably off: NVML cannot tell ({nvml}) and nvidia-persistenced's socket {} is absent; the driver is set up anew for each container (slow starts)",
                show(&driver.roots.root.join(PERSISTENCED_SOCKETS[0].trim_start_matches('/')))
            ),
            fix,
        ),
    }
}

/// Each GPU's index and persistence mode from NVML, or why NVML cannot tell.
fn persistence_from_nvml(driver: &Driver) -> Result<Vec<(u32, bool)>, String> {
    let lib = driver
        .library("libnvidia-ml")
        .ok_or_else(|| "the driver has no libnvidia-ml".to_string())?;
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(lib.host_path.as_os_str())
        .init()
        .map_err(|e| error_chain(&e))?;
    driver
        .gpus
        .iter()
        .map(|g| {
            let device = nvml
                .device_by_uuid(g.uuid.as_str())
                .map_err(|e| error_chain(&e))?;
            let on = device
                .is_in_persistent_mode()
                .map_err(|e| error_chain(&e))?;
            Ok((g.index, on))
        })
        .collect()
}

/// The host's ldconfig: nvc does not need it, it is reported for the tools that do.
pub fn ldconfig(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "ldconfig";
    let found = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .map(PathBuf::from)
        .find(|p| is_executable(p))
        .or_else(|| probe.find_program("ldconfig"));
    let writes = if config.ldcache.update {
        "nvc writes containers' ld.so.cache itself"
    } else {
        "ldcache.update is off: containers' ld.so.cache is left as the image has it"
    };
    match found {
        Some(p) => Row::ok(CHECK, format!("{} ({writes})", show(&p))),
        None => Row::warn(
            CHECK,
            format!("no ldconfig on this host ({writes}; other tools may want it)"),
            "nothing for nvc; install libc-bin (or glibc) for tools that run the host's ldconfig",
        ),
    }
}

/// The low-level runtime nvc-runtime execs, found the way the shim finds it.
pub fn runtime(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "runtime";
    let candidates = &config.runtime.runtimes;
    // As the shim does: a candidate that is nvc-runtime itself is passed over.
    let is_shim = |p: &Path| {
        p.canonicalize()
            .ok()
            .is_some_and(|c| c.file_name().is_some_and(|f| f == "nvc-runtime"))
    };
    let mut skipped = Vec::new();
    let found = candidates
        .iter()
        .filter_map(|c| {
            if c.starts_with('/') {
                Some(PathBuf::from(c)).filter(|p| is_executable(p))
            } else if c.is_empty() || c.contains('/') {
                None
            } else {
                probe.find_program(c)
            }
        })
        .find(|p| {
            let shim = is_shim(p);
            if shim {
                skipped.push(show(p));
            }
            !shim
        });
    match found {
        Some(p) if skipped.is_empty() => Row::ok(CHECK, show(&p)),
        Some(p) => Row::ok(
            CHECK,
            format!(
                "{} ({} passed over: nvc-runtime itself)",
                show(&p),
                skipped.join(", ")
            ),
        ),
        None => Row::fail(
            CHECK,
            format!(
                "none of [{}] is an executable named by absolute path or found on PATH",
                candidates.join(", ")
            ),
            format!(
                "install runc, or name the runtime in [runtime] runtimes in {}",
                show(&probe.config_path)
            ),
        ),
    }
}

/// nvc-runtime, which the engines run: next to nvc, else on PATH.
pub fn nvc_runtime(probe: &Probe) -> Row {
    let found = probe
        .own_dir
        .as_ref()
        .map(|d| d.join("nvc-runtime"))
        .filter(|p| is_executable(p))
        .or_else(|| probe.find_program("nvc-runtime"));
    match found {
        Some(p) => Row::ok("nvc-runtime", show(&p)),
        None => Row::warn(
            "nvc-runtime",
            "not next to nvc nor on PATH: engines cannot start GPU containers through it",
            "install it: `install -m 0755 target/release/nvc-runtime /usr/bin/`",
        ),
    }
}

/// The prestart hook nvc-runtime puts into GPU containers.
pub fn hook(config: &Config, probe: &Probe) -> Row {
    const CHECK: &str = "hook";
    let path = &config.hook.path;
    let fix = format!(
        "install nvc-hook at {}, or set [hook] path in {}",
        show(path),
        show(&probe.config_path)
    );
    if !path.is_absolute() {
        return Row::fail(
            CHECK,
            format!(
                "[hook] path {} is not absolute: runc runs hooks by absolute path",
                show(path)
            ),
            fix,
        );
    }
    match std::fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Row::fail(CHECK, format!("{} does not exist", show(path)), fix)
        }
        Err(e) => Row::fail(CHECK, format!("cannot stat {}: {e}", show(path)), fix),
        Ok(_) if !is_executable(path) => Row::fail(
            CHECK,
            format!("{} is not an executable file", show(path)),
            fix,
        ),
        Ok(_) => Row::ok(CHECK, show(path)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dev_t_split() {
        assert_eq!((dev_major(0xc3ff), dev_minor(0xc3ff)), (195, 255));
        assert_eq!((dev_major(0xee01), dev_minor(0xee01)), (238, 1));
    }
}
