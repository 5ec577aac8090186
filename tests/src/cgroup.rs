//! The runtime's side of a cgroup v2 device filter, for tests: attach a policy the way
//! runc (or another cgroup manager) does, list what is attached, and grant through nvc's
//! two halves in one call.

use std::path::Path;

use libnvc::devcgroup::DevicePolicy;
use nvc_host::cgroup::{Attach, CgroupDir, DeviceProgram};
use nvc_host::devcgroup::{
    prepare, put_in_place, CharDevice, DevCgroupError, DeviceCgroup, Granted, PROGRAM_NAME,
};

/// Lets the container whose init is `pid` open `devices`, as the hook does (prepare, then
/// apply).
pub fn grant(
    pid: i32,
    cgroup: &DeviceCgroup,
    devices: &[CharDevice],
) -> Result<Granted, DevCgroupError> {
    prepare(pid, cgroup, devices)?.apply()
}

/// How [`attach_policy`] attaches a program: as runc does, or as other cgroup managers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachHow {
    /// runc's way: in the place of the one program attached (as the hook does), or with
    /// `BPF_F_ALLOW_MULTI` when there is none; several attached is an error.
    Replace,
    /// Next to the programs attached (`BPF_F_ALLOW_MULTI`), as a second manager would.
    Add,
    /// As the cgroup's only program (no flags), replacing one attached the same way.
    Exclusive,
}

/// Makes `policy` a device policy of the cgroup v2 directory `cgroup_dir`, the way a
/// runtime does; returns the new program's id.
pub fn attach_policy(
    cgroup_dir: &Path,
    policy: &DevicePolicy,
    how: AttachHow,
) -> Result<u32, DevCgroupError> {
    let dir = CgroupDir::open_v2(cgroup_dir)?;
    let program = DeviceProgram::load(&policy.program(), PROGRAM_NAME).map_err(|source| {
        DevCgroupError::Program {
            cgroup: cgroup_dir.to_path_buf(),
            source,
        }
    })?;
    match how {
        AttachHow::Replace => {
            put_in_place(&dir, &program, true)?;
        }
        AttachHow::Add => dir.attach_device_program(&program, Attach::Multi)?,
        AttachHow::Exclusive => dir.attach_device_program(&program, Attach::Single { flags: 0 })?,
    }
    Ok(program.id()?)
}

/// The ids of the device programs attached to the cgroup v2 directory `cgroup_dir` itself.
pub fn device_programs(cgroup_dir: &Path) -> Result<Vec<u32>, DevCgroupError> {
    Ok(CgroupDir::open_v2(cgroup_dir)?.device_programs()?.ids)
}
