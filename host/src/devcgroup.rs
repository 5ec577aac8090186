//! Extends the container's device cgroup for the device nodes the hook bound into it
//! (see `libnvc::devcgroup` for the rules and why cgroup v2 programs are replaced).

use std::path::{Component, Path, PathBuf};

use libnvc::devcgroup::{allow, runtime_rules, Access, DeviceKind, DevicePolicy, Rule, RuleError};
use log::{debug, info};
use serde_json::Value;

use crate::cgroup::{self as sys, CgroupDir, CgroupError, DeviceProgram, CGROUP2_SUPER_MAGIC};

/// Whether this process runs in the initial user namespace, where the host's cgroups
/// are: `/proc/self/uid_map` maps all of the uid range. `true` when it cannot be read
/// (the grant then says what fails).
pub fn in_initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").map_or(true, |map| maps_every_uid(&map))
}

/// Whether a `uid_map` maps uid 0 to 0 over the whole range, as the initial user
/// namespace's does (`0 0 4294967295`).
fn maps_every_uid(uid_map: &str) -> bool {
    let lines: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| !f.is_empty())
        .collect();
    matches!(lines.as_slice(), [f] if f.as_slice() == ["0", "0", "4294967295"])
}

/// Where the host's cgroup file systems are mounted.
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The name nvc's device programs carry (`bpftool prog` shows it).
pub const PROGRAM_NAME: &str = "nvc_devices";

/// Why the container's device cgroup could not be extended.
#[derive(Debug, thiserror::Error)]
pub enum DevCgroupError {
    /// The rules cannot be applied.
    #[error(transparent)]
    Rules(#[from] RuleError),
    /// `/proc/<pid>/cgroup` could not be read.
    #[error("cannot read {path}")]
    ProcRead {
        /// The file.
        path: PathBuf,
        /// The reason.
        #[source]
        source: std::io::Error,
    },
    /// The container's process is in no cgroup of the hierarchy needed.
    #[error("{path} names no {hierarchy} cgroup for the container; is {hierarchy} mounted under {root}?")]
    NoCgroup {
        /// `/proc/<pid>/cgroup`.
        path: PathBuf,
        /// "cgroup v2" or "v1 devices".
        hierarchy: &'static str,
        /// The cgroup root searched.
        root: PathBuf,
    },
    /// The container's cgroup path is not below the root (another cgroup namespace).
    #[error("{path} gives the cgroup {cgroup:?}, which is not a path below {root}: nvc-hook must run in the host's cgroup namespace")]
    BadCgroupPath {
        /// `/proc/<pid>/cgroup`.
        path: PathBuf,
        /// The path it gave.
        cgroup: String,
        /// The cgroup root.
        root: PathBuf,
    },
    /// The container's cgroup v2 has several device programs.
    #[error("the container's cgroup {cgroup} has {} device programs (ids {ids:?}); nvc-hook cannot tell which one to extend: add the devices to the spec instead (run the container through nvc-runtime)", .ids.len())]
    SeveralPrograms {
        /// The cgroup directory.
        cgroup: PathBuf,
        /// The attached programs.
        ids: Vec<u32>,
    },
    /// The new device program could not be built for the cgroup.
    #[error("cannot build the device program for {cgroup}")]
    Program {
        /// The cgroup directory.
        cgroup: PathBuf,
        /// The reason.
        #[source]
        source: CgroupError,
    },
    /// Reading or changing the cgroup failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
}

/// A character device to let the container use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CharDevice {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// What [`prepare`] needs besides the container's pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCgroup {
    /// Where the host's cgroups are mounted: [`DEFAULT_CGROUP_ROOT`]. A cgroup2 file system
    /// there means the unified hierarchy; anything else, v1 controllers in subdirectories.
    pub cgroup_root: PathBuf,
    /// The rules the runtime gave the container ([`runtime_rules`]): what its cgroup v2
    /// device program is rebuilt from.
    pub rules: Vec<Rule>,
}

impl DeviceCgroup {
    /// The rules of `spec` ([`runtime_rules`]) under [`DEFAULT_CGROUP_ROOT`].
    pub fn from_spec(spec: &Value) -> Result<DeviceCgroup, DevCgroupError> {
        Ok(DeviceCgroup {
            cgroup_root: PathBuf::from(DEFAULT_CGROUP_ROOT),
            rules: runtime_rules(spec)?,
        })
    }
}

/// What [`PreparedGrant::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// Nothing: the runtime's rules already allow the devices (e.g. a privileged
    /// container), or there were none.
    AlreadyAllowed,
    /// cgroup v1: the devices were written to `devices.allow` of this cgroup.
    Appended {
        /// The container's devices cgroup directory.
        cgroup: PathBuf,
    },
    /// cgroup v2: the cgroup's device program `old` was replaced by `new`.
    Replaced {
        /// The container's cgroup directory.
        cgroup: PathBuf,
        /// The runtime's program.
        old: u32,
        /// nvc's.
        new: u32,
    },
    /// cgroup v2: no device program is attached to the container's cgroup, so it filters
    /// no device and nothing was attached (one would only take access away).
    Unfiltered {
        /// The container's cgroup directory.
        cgroup: PathBuf,
    },
}

/// A grant opened and built in the host's namespaces, to be applied later by fds alone
/// (after the hook has entered the container's mount namespace).
#[derive(Debug)]
pub struct PreparedGrant {
    step: Prepared,
}

#[derive(Debug)]
enum Prepared {
    Nothing,
    Legacy {
        dir: CgroupDir,
        /// `devices.allow` or `devices.deny`.
        file: &'static str,
        lines: Vec<String>,
    },
    Unified {
        dir: CgroupDir,
        program: DeviceProgram,
    },
}

/// Lets the container whose init is `pid` open `devices`, in two halves: this one finds
/// its cgroup from `/proc/<pid>/cgroup`, opens its directory and, for cgroup v2, builds
/// and loads the new program (see `libnvc::devcgroup`); nothing is changed until
/// [`PreparedGrant::apply`] appends to its v1 `devices.allow` or replaces its v2 device
/// program. Must run in the host's mount and cgroup namespaces.
pub fn prepare(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
) -> Result<PreparedGrant, DevCgroupError> {
    prepare_change(pid, cgroup, devices, "devices.allow", |dir_path| {
        let before = DevicePolicy::from_rules(&cgroup.rules)?;
        if devices
            .iter()
            .all(|d| before.permits(DeviceKind::Char, d.major, d.minor, Access::ALL))
        {
            debug!(
                "the device rules of {} already allow the devices",
                dir_path.display()
            );
            return Ok(None);
        }
        let mut rules = cgroup.rules.clone();
        for d in devices {
            allow(&mut rules, d.major, d.minor);
        }
        Ok(Some(rules))
    })
}

/// The reverse of [`prepare`], for `nvc detach`: forbids the container whose init is `pid`
/// to open `devices`. cgroup v1: `c MAJOR:MINOR rwm` for [`PreparedGrant::apply`] to write
/// to its `devices.deny`; cgroup v2: its device program rebuilt from `cgroup.rules` (the
/// runtime's, with the grants that stay) without the devices' own allow rules, to replace
/// the one attached. Must run in the host's mount and cgroup namespaces; nothing is
/// changed yet.
pub fn prepare_revoke(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
) -> Result<PreparedGrant, DevCgroupError> {
    prepare_change(pid, cgroup, devices, "devices.deny", |_| {
        // The program is rebuilt from the rules, default deny: the devices' own allow
        // rules are left out. A deny is added only where a wider rule still opens them
        // (which a device program, like runc, cannot take back from a wildcard: then it
        // says so).
        let mut rules = cgroup.rules.clone();
        for d in devices {
            let exact = Rule::allow_char(d.major, d.minor);
            rules.retain(|r| {
                !(r.allow
                    && r.kind == exact.kind
                    && r.major == exact.major
                    && r.minor == exact.minor)
            });
            let still = DevicePolicy::from_rules(&rules)?;
            if [Access::READ, Access::WRITE]
                .into_iter()
                .any(|a| still.permits(DeviceKind::Char, d.major, d.minor, a))
            {
                rules.push(Rule {
                    allow: false,
                    ..exact
                });
            }
        }
        Ok(Some(rules))
    })
}

/// What [`prepare`] and [`prepare_revoke`] share: the container's cgroup; on v1 a
/// `c MAJOR:MINOR rwm` line per device for `v1_file`; on v2 the program of the rules
/// `v2_rules` gives (given the cgroup's directory; `None`: nothing to change), loaded.
fn prepare_change(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
    v1_file: &'static str,
    v2_rules: impl FnOnce(&Path) -> Result<Option<Vec<Rule>>, DevCgroupError>,
) -> Result<PreparedGrant, DevCgroupError> {
    let nothing = || PreparedGrant {
        step: Prepared::Nothing,
    };
    if devices.is_empty() {
        return Ok(nothing());
    }
    let (unified, dir_path) = container_cgroup(pid, &cgroup.cgroup_root)?;
    if !unified {
        let dir = CgroupDir::open_v1(&dir_path)?;
        let lines = devices
            .iter()
            .map(|d| format!("c {}:{} rwm", d.major, d.minor))
            .collect();
        return Ok(PreparedGrant {
            step: Prepared::Legacy {
                dir,
                file: v1_file,
                lines,
            },
        });
    }
    let Some(rules) = v2_rules(&dir_path)? else {
        return Ok(nothing());
    };
    let policy = DevicePolicy::from_rules(&rules)?;
    let dir = CgroupDir::open_v2(&dir_path)?;
    let program = DeviceProgram::load(&policy.program(), PROGRAM_NAME).map_err(|source| {
        DevCgroupError::Program {
            cgroup: dir_path.clone(),
            source,
        }
    })?;
    Ok(PreparedGrant {
        step: Prepared::Unified { dir, program },
    })
}

/// Whether the host's cgroups are the unified hierarchy, and the directory of the cgroup
/// (v2, or v1 `devices`) of the process `pid`, from `/proc/<pid>/cgroup`.
fn container_cgroup(pid: i32, root: &Path) -> Result<(bool, PathBuf), DevCgroupError> {
    let proc_path = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let table = std::fs::read_to_string(&proc_path).map_err(|source| DevCgroupError::ProcRead {
        path: proc_path.clone(),
        source,
    })?;
    let unified = sys::filesystem_magic(root)? == CGROUP2_SUPER_MAGIC;
    let (hierarchy, base) = if unified {
        ("cgroup v2", root.to_path_buf())
    } else {
        ("v1 devices", root.join("devices"))
    };
    let relative = cgroup_path(&table, unified).ok_or_else(|| DevCgroupError::NoCgroup {
        path: proc_path.clone(),
        hierarchy,
        root: root.to_path_buf(),
    })?;
    let dir_path = below(&base, relative).ok_or_else(|| DevCgroupError::BadCgroupPath {
        path: proc_path.clone(),
        cgroup: relative.to_string(),
        root: base.clone(),
    })?;
    Ok((unified, dir_path))
}

impl PreparedGrant {
    /// The second half of [`prepare`]: changes the cgroup.
    pub fn apply(self) -> Result<Granted, DevCgroupError> {
        match self.step {
            Prepared::Nothing => Ok(Granted::AlreadyAllowed),
            Prepared::Legacy { dir, file, lines } => {
                dir.write_lines(file, &lines)?;
                info!(
                    "wrote {} to {file} of the device cgroup {}",
                    lines.join(", "),
                    dir.path().display()
                );
                Ok(Granted::Appended {
                    cgroup: dir.path().to_path_buf(),
                })
            }
            Prepared::Unified { dir, program } => {
                let cgroup = dir.path().to_path_buf();
                match put_in_place(&dir, &program, false)? {
                    Some(old) => {
                        let new = program.id()?;
                        info!(
                            "replaced device program {old} of {} with {new}",
                            cgroup.display()
                        );
                        Ok(Granted::Replaced { cgroup, old, new })
                    }
                    None => {
                        info!(
                            "{} has no device program: its devices are not filtered there",
                            cgroup.display()
                        );
                        Ok(Granted::Unfiltered { cgroup })
                    }
                }
            }
        }
    }
}

/// Puts `program` in the place of the one device program attached to `dir`, atomically:
/// with `BPF_F_REPLACE` where programs are attached with `BPF_F_ALLOW_MULTI` (runc,
/// systemd), by attaching with the cgroup's own flags where it allows one program (the
/// kernel then swaps it). With none attached, attaches it only when `attach_if_none`.
/// Returns the id of the program replaced.
pub fn put_in_place(
    dir: &CgroupDir,
    program: &DeviceProgram,
    attach_if_none: bool,
) -> Result<Option<u32>, DevCgroupError> {
    let attached = dir.device_programs()?;
    match attached.ids.as_slice() {
        [] => {
            if attach_if_none {
                dir.attach_device_program(program, sys::Attach::Multi)?;
            }
            Ok(None)
        }
        [old] => {
            let old_program = DeviceProgram::from_id(*old)?;
            let how = if attached.multi() {
                sys::Attach::Replace(&old_program)
            } else {
                sys::Attach::Single {
                    flags: attached.flags,
                }
            };
            dir.attach_device_program(program, how)?;
            Ok(Some(*old))
        }
        ids => Err(DevCgroupError::SeveralPrograms {
            cgroup: dir.path().to_path_buf(),
            ids: ids.to_vec(),
        }),
    }
}

/// The container's cgroup path in `/proc/<pid>/cgroup` text: the `0::` line of the unified
/// hierarchy, or the v1 line whose controllers include `devices`.
fn cgroup_path(table: &str, unified: bool) -> Option<&str> {
    table.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let wanted = if unified {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "devices")
        };
        wanted.then_some(path)
    })
}

/// `base` joined with the absolute cgroup path `relative`, when that stays below `base`.
fn below(base: &Path, relative: &str) -> Option<PathBuf> {
    let rel = Path::new(relative).strip_prefix("/").ok()?;
    let mut out = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_user_namespace_maps_every_uid() {
        assert!(maps_every_uid("         0          0 4294967295\n"));
        // Rootless Podman's: the user as root, then its subordinate range.
        assert!(!maps_every_uid("0 1000 1\n1 100000 65536\n"));
        assert!(!maps_every_uid("0 0 65536\n"));
        assert!(!maps_every_uid(""));
        // This test runs in the initial namespace (or a container of the CI's own).
        let own = std::fs::read_to_string("/proc/self/uid_map").unwrap();
        assert_eq!(in_initial_user_namespace(), maps_every_uid(&own));
    }

    #[test]
    fn proc_cgroup_lines() {
        let hybrid = "9:name=systemd:/docker/abc\n8:pids:/docker/abc\n5:cpu,devices:/docker/abc\n0::/system.slice/docker-abc.scope\n";
        assert_eq!(cgroup_path(hybrid, false), Some("/docker/abc"));
        assert_eq!(
            cgroup_path(hybrid, true),
            Some("/system.slice/docker-abc.scope")
        );
        let v2 = "0::/user.slice/a:b\n";
        assert_eq!(cgroup_path(v2, true), Some("/user.slice/a:b"));
        assert_eq!(cgroup_path(v2, false), None);
        assert_eq!(cgroup_path("4:devicesx:/x\n", false), None);
        assert_eq!(cgroup_path("", true), None);

        let base = Path::new("/sys/fs/cgroup");
        assert_eq!(
            below(base, "/a/./b"),
            Some(PathBuf::from("/sys/fs/cgroup/a/b"))
        );
        assert_eq!(below(base, "/"), Some(base.to_path_buf()));
        assert_eq!(below(base, "/../../etc"), None);
        assert_eq!(below(base, "/a/../../b"), None);
        assert_eq!(below(base, "a/b"), None);
    }
}
