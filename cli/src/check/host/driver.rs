//! The driver's checks: the kernel module's version against the libraries', the GPUs it
//! lists, and their persistence mode.

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use libnvc::discover::{driver_root, proc, Driver};
use libnvc::ldcache::{self, CacheArch};
use libnvc::report::error_chain;

use crate::check::{show, Findings, Row, Status};

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
    let real =
        driver_root::resolve_in_root(&nvc_host::probe::RealHost, root, Path::new(&entry.path))
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
    let cache = driver_root::resolve_in_root(&host, &roots.root, Path::new("/etc/ld.so.cache"))
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
        let host = driver_root::resolve_in_root(
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
