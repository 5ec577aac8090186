//! What the numbers were measured on: CPU, kernel, runc, cgroups, date, nvc's commit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The machine and software a run measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// When, UTC.
    pub date: String,
    /// CPU model and count.
    pub cpu: String,
    /// Kernel release.
    pub kernel: String,
    /// `runc --version`, first line.
    pub runc: String,
    /// cgroup v1, v2 or hybrid.
    pub cgroup: String,
    /// nvc's git commit, when run from a checkout.
    pub commit: Option<String>,
}

impl Host {
    /// Reads the running machine; `runc` is the runc the benchmark uses.
    pub fn probe(runc: &Path) -> Host {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Host {
            date: utc_date(secs),
            cpu: cpu(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            runc: output(Command::new(runc).arg("--version"))
                .and_then(|s| s.lines().next().map(str::to_string))
                .map(|l| l.trim_start_matches("runc version ").to_string())
                .unwrap_or_else(|| "unknown".into()),
            cgroup: cgroup_version(
                &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            ),
            commit: commit(),
        }
    }
}

/// The file system type of the mount holding `path` (the longest mount point that is a
/// prefix of it), from mountinfo.
pub fn fs_type(mountinfo: &str, path: &Path) -> String {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let fstype = right.split(' ').next()?;
            path.starts_with(point)
                .then(|| (point.len(), fstype.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, t)| t)
}

/// The mean time to create (and later remove) an empty file in `dir`, over 100 files:
/// the hook creates a mount point, link or temporary file in the rootfs for every
/// driver file, so a slow file system shows in its time.
pub fn create_cost(dir: &Path) -> Option<Duration> {
    let probe = dir.join(".create-probe");
    std::fs::create_dir(&probe).ok()?;
    let start = Instant::now();
    let mut made = 0u32;
    for i in 0..100 {
        if std::fs::File::create_new(probe.join(i.to_string())).is_ok() {
            made += 1;
        }
    }
    let spent = start.elapsed();
    let _ = std::fs::remove_dir_all(&probe);
    (made > 0).then(|| spent / made)
}

/// The 1, 5 and 15 minute load averages: `0.52 0.31 0.20`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `2025-11-21 21:26 UTC` for seconds since the epoch: [`libnvc::lease::utc`] without
/// the seconds.
pub fn utc_date(secs: u64) -> String {
    let full = libnvc::lease::utc(secs);
    match (full.get(..16), full.get(19..)) {
        (Some(minutes), Some(zone)) => format!("{minutes}{zone}"),
        _ => full,
    }
}

/// `Intel(R) Xeon(R) Processor, 2 CPUs` from `/proc/cpuinfo`.
pub fn cpu(cpuinfo: &str) -> String {
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let count = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    format!("{model}, {count} CPUs")
}

/// `v2`, `v1` or `v1 (hybrid, v2 at /sys/fs/cgroup/unified)` from mountinfo.
pub fn cgroup_version(mountinfo: &str) -> String {
    // Fields: id parent major:minor root mount-point options ... - fstype source options
    let fstype_at = |mount_point: &str| {
        mountinfo.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (left.split(' ').nth(4)? == mount_point)
                .then(|| right.split(' ').next().unwrap_or("").to_string())
        })
    };
    match fstype_at("/sys/fs/cgroup").as_deref() {
        Some("cgroup2") => "v2".into(),
        Some(_) if fstype_at("/sys/fs/cgroup/unified").as_deref() == Some("cgroup2") => {
            "v1 (hybrid: v2 at /sys/fs/cgroup/unified)".into()
        }
        Some(_) => "v1".into(),
        None => "unknown".into(),
    }
}

/// `NVC_BENCH_COMMIT` when set (the commit the binaries were built from, for a run on a
/// copy of the tree), else `git rev-parse --short HEAD` of the current directory, `-dirty`
/// when it has changes.
fn commit() -> Option<String> {
    if let Some(commit) = std::env::var("NVC_BENCH_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
    {
        return Some(commit);
    }
    let head = output(Command::new("git").args(["rev-parse", "--short", "HEAD"]))?;
    let dirty = output(Command::new("git").args(["status", "--porcelain", "--untracked-files=no"]))
        .is_some_and(|s| !s.trim().is_empty());
    Some(format!(
        "{}{}",
        head.trim(),
        if dirty { "-dirty" } else { "" }
    ))
}

/// The stdout of a successful command.
fn output(command: &mut Command) -> Option<String> {
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(951_782_400 + 3_661), "2000-02-29 01:01 UTC");
        assert_eq!(utc_date(1_763_760_000), "2025-11-21 21:20 UTC");
    }

    #[test]
    fn cpus_and_cgroups() {
        let info = "processor\t: 0\nmodel name\t: Xeon\n\nprocessor\t: 1\nmodel name\t: Xeon\n";
        assert_eq!(cpu(info), "Xeon, 2 CPUs");
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup_version(v2), "v2");
        let hybrid = "30 1 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert!(cgroup_version(hybrid).starts_with("v1 (hybrid"));
        assert_eq!(cgroup_version(""), "unknown");
        let mounts = "1 0 0:1 / / rw - ext4 /dev/vda rw\n2 1 0:2 / /dev/shm rw - tmpfs tmpfs rw\n";
        assert_eq!(fs_type(mounts, Path::new("/dev/shm/x")), "tmpfs");
        assert_eq!(fs_type(mounts, Path::new("/dev/shmx")), "ext4");
        assert_eq!(fs_type(mounts, Path::new("/tmp")), "ext4");
    }
}
