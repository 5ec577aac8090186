//! Device cgroups, from the host: the cgroup v1 `devices.allow` file, and cgroup v2 device
//! programs (eBPF, `BPF_PROG_TYPE_CGROUP_DEVICE`) loaded, queried and attached with direct
//! `bpf(2)` calls — no libbpf, no C.
//!
//! Everything acts on a [`CgroupDir`], a directory fd opened once: writes go through
//! `openat` on it and programs are attached to it, so nothing here depends on the mount
//! namespace the caller is in afterwards.
//!
//! What a device program decides is up to the caller: this module only carries
//! instructions ([`Insn`]) to and from the kernel.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

pub use libnvc::devcgroup::bpf::{Insn, MAX_INSNS};

/// `statfs(2)` magic of a cgroup v2 (unified) file system.
pub const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
/// `statfs(2)` magic of a cgroup v1 file system.
pub const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;

// bpf(2) commands, program and attach types, flags (include/uapi/linux/bpf.h).
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_ATTACH: u32 = 8;
const BPF_PROG_DETACH: u32 = 9;
const BPF_PROG_GET_FD_BY_ID: u32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_PROG_QUERY: u32 = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_OVERRIDE: u32 = 1 << 0;
const BPF_F_ALLOW_MULTI: u32 = 1 << 1;
const BPF_F_REPLACE: u32 = 1 << 2;

/// The license a device program is loaded under (the kernel's MODULE_LICENSE strings);
/// device programs call no GPL-only helper.
const LICENSE: &[u8] = b"Apache\0";

/// Why a device cgroup could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A file-system call on a cgroup failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was being done, e.g. "open the cgroup directory".
        op: &'static str,
        /// The cgroup directory or file.
        path: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// The directory is not on the cgroup file system expected.
    #[error("{path} is not a cgroup {expected} directory (file system magic {magic:#x})")]
    NotCgroup {
        /// The directory.
        path: PathBuf,
        /// "v1" or "v2".
        expected: &'static str,
        /// What `fstatfs` found.
        magic: u64,
    },
    /// The kernel refused the device program.
    #[error("the kernel refused the device program{}", verifier_suffix(.log))]
    Load {
        /// The last lines of the verifier's log, when it gave one.
        log: String,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A device program is too long.
    #[error("the device program has {len} instructions, more than the {MAX_INSNS} allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A `bpf(2)` call about the programs of a cgroup failed.
    #[error("cannot {op} {path}")]
    Bpf {
        /// What was being done, e.g. "query the device programs of".
        op: &'static str,
        /// The cgroup directory.
        path: PathBuf,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A program could not be opened or examined by its id.
    #[error("cannot {op} BPF program {id}")]
    Program {
        /// What was being done.
        op: &'static str,
        /// The program's id (0 when it was not known yet).
        id: u32,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
}

fn verifier_suffix(log: &str) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!(" (verifier: {log})")
    }
}

/// The `statfs(2)` magic of the file system at `path`: [`CGROUP2_SUPER_MAGIC`] where the
/// unified hierarchy is mounted, tmpfs where v1 controllers are mounted below.
pub fn filesystem_magic(path: &Path) -> Result<u64, CgroupError> {
    let st = rustix::fs::statfs(path).map_err(|e| CgroupError::Io {
        op: "statfs",
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    // f_type is a signed word on some targets; magics are positive 32-bit numbers.
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as u64)
}

/// An opened cgroup directory, on the host.
#[derive(Debug)]
pub struct CgroupDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl CgroupDir {
    /// Opens the cgroup directory at `path` (no symlink in the last component).
    pub fn open(path: &Path) -> Result<CgroupDir, CgroupError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| CgroupError::Io {
            op: "open the cgroup directory",
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(CgroupDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the directory at `path` and checks that it is on a cgroup v1 file system.
    pub fn open_v1(path: &Path) -> Result<CgroupDir, CgroupError> {
        let dir = CgroupDir::open(path)?;
        dir.expect(CGROUP_SUPER_MAGIC, "v1")?;
        Ok(dir)
    }

    /// Opens the directory at `path` and checks that it is on a cgroup v2 file system.
    pub fn open_v2(path: &Path) -> Result<CgroupDir, CgroupError> {
        let dir = CgroupDir::open(path)?;
        dir.expect(CGROUP2_SUPER_MAGIC, "v2")?;
        Ok(dir)
    }

    fn expect(&self, want: u64, expected: &'static str) -> Result<(), CgroupError> {
        let st = rustix::fs::fstatfs(&self.fd).map_err(|e| CgroupError::Io {
            op: "fstatfs",
            path: self.path.clone(),
            source: e.into(),
        })?;
        #[allow(clippy::unnecessary_cast)]
        let magic = st.f_type as u64;
        if magic != want {
            return Err(CgroupError::NotCgroup {
                path: self.path.clone(),
                expected,
                magic,
            });
        }
        Ok(())
    }

    /// The path it was opened at, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes each of `lines` to the cgroup's file `name` (e.g. `devices.allow`), one
    /// `write(2)` per line as the kernel parses one rule per write.
    pub fn write_lines(&self, name: &str, lines: &[String]) -> Result<(), CgroupError> {
        let path = self.path.join(name);
        let io_err = |op, e: io::Error| CgroupError::Io {
            op,
            path: path.clone(),
            source: e,
        };
        let file = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", e.into()))?;
        for line in lines {
            let n = rustix::io::write(&file, line.as_bytes())
                .map_err(|e| io_err("write a rule to", e.into()))?;
            if n != line.len() {
                return Err(io_err(
                    "write a rule to",
                    io::Error::new(io::ErrorKind::WriteZero, "short write"),
                ));
            }
        }
        Ok(())
    }

    /// The device programs attached to this cgroup itself (not those of its ancestors,
    /// which apply too), with the cgroup's attach flags.
    pub fn device_programs(&self) -> Result<AttachedPrograms, CgroupError> {
        // A cgroup holds at most 64 programs per attach type; grow on ENOSPC anyway.
        let mut ids = vec![0u32; 64];
        loop {
            let mut attr = QueryAttr {
                target_fd: raw(&self.fd),
                attach_type: BPF_CGROUP_DEVICE,
                query_flags: 0,
                attach_flags: 0,
                prog_ids: ids.as_mut_ptr() as u64,
                prog_cnt: u32::try_from(ids.len()).unwrap_or(u32::MAX),
                _pad: 0,
            };
            match bpf(BPF_PROG_QUERY, &mut attr) {
                Ok(_) => {
                    ids.truncate(attr.prog_cnt as usize);
                    return Ok(AttachedPrograms {
                        ids,
                        flags: attr.attach_flags,
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && ids.len() < 1 << 16 => {
                    let want = (attr.prog_cnt as usize).max(ids.len() * 2);
                    ids = vec![0u32; want];
                }
                Err(source) => {
                    return Err(CgroupError::Bpf {
                        op: "query the device programs of",
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Attaches `program` to this cgroup, as `how` says.
    pub fn attach_device_program(
        &self,
        program: &DeviceProgram,
        how: Attach<'_>,
    ) -> Result<(), CgroupError> {
        let mut attr = AttachAttr {
            target_fd: raw(&self.fd),
            attach_bpf_fd: raw(&program.fd),
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: BPF_F_ALLOW_MULTI,
            replace_bpf_fd: 0,
        };
        let op = match how {
            Attach::Multi => "attach a device program to",
            Attach::Replace(old) => {
                attr.attach_flags |= BPF_F_REPLACE;
                attr.replace_bpf_fd = raw(&old.fd);
                "replace the device program of"
            }
            Attach::Single { flags } => {
                attr.attach_flags = flags & BPF_F_ALLOW_OVERRIDE;
                "attach the only device program of"
            }
        };
        bpf(BPF_PROG_ATTACH, &mut attr)
            .map(drop)
            .map_err(|source| CgroupError::Bpf {
                op,
                path: self.path.clone(),
                source,
            })
    }

    /// Detaches `program` from this cgroup.
    pub fn detach_device_program(&self, program: &DeviceProgram) -> Result<(), CgroupError> {
        let mut attr = AttachAttr {
            target_fd: raw(&self.fd),
            attach_bpf_fd: raw(&program.fd),
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: 0,
            replace_bpf_fd: 0,
        };
        bpf(BPF_PROG_DETACH, &mut attr)
            .map(drop)
            .map_err(|source| CgroupError::Bpf {
                op: "detach a device program from",
                path: self.path.clone(),
                source,
            })
    }
}

/// The device programs attached to a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedPrograms {
    /// Their kernel ids, in the order the kernel runs them.
    pub ids: Vec<u32>,
    /// The cgroup's attach flags for device programs (`BPF_F_ALLOW_OVERRIDE`,
    /// `BPF_F_ALLOW_MULTI`); 0 when none is attached.
    pub flags: u32,
}

impl AttachedPrograms {
    /// Whether the programs were attached with `BPF_F_ALLOW_MULTI` (runc, systemd): several
    /// may run, and one is replaced with [`Attach::Replace`].
    pub fn multi(&self) -> bool {
        self.flags & BPF_F_ALLOW_MULTI != 0
    }
}

/// How [`CgroupDir::attach_device_program`] attaches a program.
#[derive(Debug, Clone, Copy)]
pub enum Attach<'a> {
    /// With `BPF_F_ALLOW_MULTI`, next to those attached: the kernel allows an access only
    /// when every program does.
    Multi,
    /// With `BPF_F_ALLOW_MULTI | BPF_F_REPLACE`, atomically in this program's place; fails
    /// when it is no longer attached there.
    Replace(&'a DeviceProgram),
    /// Without `BPF_F_ALLOW_MULTI`, with these flags (0 or `BPF_F_ALLOW_OVERRIDE`): the
    /// cgroup's only program, which the kernel swaps for this one atomically.
    Single {
        /// The cgroup's attach flags.
        flags: u32,
    },
}

/// A device program held open by an fd: one this process loaded, or one found attached.
#[derive(Debug)]
pub struct DeviceProgram {
    fd: OwnedFd,
}

impl DeviceProgram {
    /// Loads `insns` as a `BPF_PROG_TYPE_CGROUP_DEVICE` program named `name` (at most 15
    /// bytes of `[A-Za-z0-9_.]` are kept). On a refusal the verifier's log is asked for and
    /// kept in the error.
    pub fn load(insns: &[Insn], name: &str) -> Result<DeviceProgram, CgroupError> {
        if insns.len() > MAX_INSNS {
            return Err(CgroupError::TooLong { len: insns.len() });
        }
        match load(insns, name, None) {
            Ok(fd) => Ok(DeviceProgram { fd }),
            // Kernels before 5.11 charge programs to RLIMIT_MEMLOCK, often 64 KiB: raise it
            // (as runc does; it is not inherited by the container) and try once more.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && raise_memlock() => {
                load(insns, name, None)
                    .map(|fd| DeviceProgram { fd })
                    .map_err(|source| CgroupError::Load {
                        log: String::new(),
                        source,
                    })
            }
            Err(source) => {
                let mut log = vec![0u8; 1 << 16];
                let _ = load(insns, name, Some(&mut log));
                Err(CgroupError::Load {
                    log: log_tail(&log),
                    source,
                })
            }
        }
    }

    /// Opens the program with kernel id `id` (`BPF_PROG_GET_FD_BY_ID`).
    pub fn from_id(id: u32) -> Result<DeviceProgram, CgroupError> {
        let mut attr = GetFdByIdAttr {
            prog_id: id,
            next_id: 0,
            open_flags: 0,
        };
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map_err(|source| CgroupError::Program {
            op: "open",
            id,
            source,
        })?;
        Ok(DeviceProgram { fd: owned_fd(fd) })
    }

    /// The program's kernel id, as [`CgroupDir::device_programs`] lists it.
    pub fn id(&self) -> Result<u32, CgroupError> {
        let mut info = ProgInfo::default();
        let mut attr = InfoByFdAttr {
            bpf_fd: raw(&self.fd),
            info_len: std::mem::size_of::<ProgInfo>() as u32,
            info: &mut info as *mut ProgInfo as u64,
        };
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map_err(|source| CgroupError::Program {
            op: "examine",
            id: 0,
            source,
        })?;
        Ok(info.id)
    }
}

// The members of `union bpf_attr` used here, each a prefix of the kernel's; the kernel
// takes a shorter attr as long as it is given the size, and all of them have no padding.

#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

#[repr(C)]
struct GetFdByIdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The start of `struct bpf_prog_info`, up to `name`.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// `bpf(cmd, attr, sizeof attr)`: the returned value (an fd for commands that make one).
fn bpf<T>(cmd: u32, attr: &mut T) -> io::Result<i32> {
    // SAFETY: `attr` is an exclusively borrowed #[repr(C)] struct without padding, laid
    // out as the prefix of `union bpf_attr` that `cmd` reads, and its size is passed so
    // the kernel reads and writes nothing past it. The user pointers inside it (insns,
    // license, log buffer, id array, info) point to memory the caller keeps alive and
    // sized as the attr says for the duration of this call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            libc::c_long::from(cmd),
            attr as *mut T,
            std::mem::size_of::<T>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i32::try_from(ret).unwrap_or(i32::MAX))
    }
}

/// Takes ownership of an fd a `bpf(2)` call just returned.
fn owned_fd(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel as a new fd of this process, owned by
    // nothing else yet, and is closed only by the returned OwnedFd.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn raw(fd: &impl AsFd) -> u32 {
    // fds are non-negative.
    fd.as_fd().as_raw_fd() as u32
}

fn load(insns: &[Insn], name: &str, log: Option<&mut Vec<u8>>) -> io::Result<OwnedFd> {
    let mut prog_name = [0u8; 16];
    for (slot, b) in prog_name[..15].iter_mut().zip(
        name.bytes()
            .filter(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.'),
    ) {
        *slot = b;
    }
    let (log_level, log_size, log_buf) = match log {
        Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        kern_version: 0,
        prog_flags: 0,
        prog_name,
        prog_ifindex: 0,
        expected_attach_type: 0,
    };
    bpf(BPF_PROG_LOAD, &mut attr).map(owned_fd)
}

/// The last lines of a verifier log (NUL-terminated in `buf`), on one line.
fn log_tail(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(4)..].join("; ")
}

/// Raises RLIMIT_MEMLOCK to unlimited; whether that worked.
fn raise_memlock() -> bool {
    rustix::process::setrlimit(
        rustix::process::Resource::Memlock,
        rustix::process::Rlimit {
            current: None,
            maximum: None,
        },
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_structs_have_the_kernel_s_sizes() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<QueryAttr>(), 32);
        assert_eq!(std::mem::size_of::<ProgInfo>(), 80);
    }

    #[test]
    fn verifier_logs_are_cut_to_their_last_lines() {
        let mut buf = b"0: (b7) r0 = 1\n1: (95) exit\n\nR0 !read_ok\nprocessed 2 insns\n".to_vec();
        buf.extend_from_slice(&[0, b'x']);
        assert_eq!(
            log_tail(&buf),
            "0: (b7) r0 = 1; 1: (95) exit; R0 !read_ok; processed 2 insns"
        );
        assert_eq!(log_tail(&[0; 8]), "");
    }

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    #[ignore = "needs root: loads BPF device programs (CAP_BPF, CAP_SYS_ADMIN)"]
    fn the_kernel_loads_a_program_and_names_what_it_refuses() {
        assert!(
            is_root(),
            "this test loads BPF programs and needs root (CAP_BPF, CAP_SYS_ADMIN); run the test suite as root"
        );
        let ok = DeviceProgram::load(
            &[
                Insn::mov_imm(libnvc::devcgroup::bpf::Reg::R0, 1),
                Insn::exit(),
            ],
            "nvc_test",
        )
        .unwrap();
        let id = ok.id().unwrap();
        assert!(id > 0);
        assert_eq!(DeviceProgram::from_id(id).unwrap().id().unwrap(), id);
        // r0 is never set: the verifier refuses, and says why.
        let err = DeviceProgram::load(&[Insn::exit()], "nvc_test").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("R0 !read_ok"), "{msg}");
        let long = vec![Insn::exit(); MAX_INSNS + 1];
        assert!(matches!(
            DeviceProgram::load(&long, "x"),
            Err(CgroupError::TooLong { .. })
        ));
    }

    #[test]
    fn cgroup_directories_are_checked_for_their_file_system() {
        let tmp = std::env::temp_dir();
        let err = CgroupDir::open_v2(&tmp).unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup { .. }), "{err}");
        assert!(
            err.to_string().contains("not a cgroup v2 directory"),
            "{err}"
        );
        let missing = CgroupDir::open(Path::new("/nonexistent/nvc")).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/nvc"),
            "{missing}"
        );
    }
}
