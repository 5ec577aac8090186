//! The device nodes' checks: each GPU's `/dev/nvidia<minor>` and the control nodes, against
//! the numbers the driver registered in `/proc/devices`.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use libnvc::discover::{proc, Driver};

use crate::check::{show, Findings, Row, Status};

/// Character device majors by name from `<proc_root>/devices`; empty when unreadable.
pub(super) fn read_majors(proc_root: &Path) -> BTreeMap<String, u32> {
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
