//! Least privilege for the programs that work in a container's rootfs as root: `nvc-hook
//! prestart` and `poststop`, `nvc attach` and `nvc detach`.
//!
//! They start with every capability and read what an image's author wrote. A
//! [`Privileges`] is made once, early ([`Privileges::bound`]), with the [`Phase`]s the
//! program will go through, in order. It sets `no_new_privs`, takes out of the bounding,
//! permitted, inheritable and ambient sets everything no phase needs, and sets
//! `SECBIT_NOROOT` (locked), so that a program it runs (`nvc-cuda-version`) gets no
//! capability for being root. Then [`Privileges::enter`] sets the effective set to exactly
//! what the phase needs and takes out of the permitted set what no later phase needs: a
//! later phase can never raise what it does not need, and what is dropped is gone for
//! good. [`Privileges::finish`] drops the rest.
//!
//! # What each phase needs, and why
//!
//! Found three ways, on Linux 6.18 as root. A probe ran each operation with only the
//! listed capabilities, and with each of them taken away. The hook, `nvc attach`/`detach`
//! and the poststop hook then ran the integration suites (`devices`, `libraries`,
//! `ldcache`, `cgroup`, `attach`, `no_trace`, `leases`, `requests`, `spec`, `hostile`,
//! `faults`: all pass) entering these phases, and again with each capability taken out of
//! its phase, to see what fails (the quoted errors); a rootfs owned by uid 100000 with 0555
//! library folders, and a bundle in a 0700 folder of another user, stood in for a
//! user-namespaced image and a user's own bundle. The module's tests repeat what is marked
//! *tested* with nvc-host's own code on every run.
//!
//! | phase | effective | the operations that need it |
//! | --- | --- | --- |
//! | [`Phase::Host`] | `dac_read_search` | reading the config, the bundle's `config.json` and the host's driver files, checking the rootfs; a bundle in a user's 0700 folder: "cannot read .../config.json: Permission denied" without it. `/proc/<pid>/{stat,cgroup}` need nothing; the GPU leases, the rootfs lock and the record under `/run/nvc` are root's |
//! | [`Phase::InspectProcess`] | `sys_ptrace`, `dac_read_search` | `nvc attach`, `detach`: `stat /proc/<pid>/{ns/user,root}` of the container's init: "cannot examine process N ... (/proc/N/ns/user): Permission denied" without `sys_ptrace` (the kernel's `ptrace` check: the init holds capabilities the caller does not) |
//! | [`Phase::Sources`] | `sys_admin`, `dac_read_search` | `open_tree(OPEN_TREE_CLONE)` and `mount_setattr` of the driver's files, the device nodes and `/proc/driver/nvidia/gpus`: "cannot clone as a bind mount ...: Operation not permitted" without `sys_admin` (*tested*); the rootfs opened to refuse the host's `/`: "cannot open container root ...: Permission denied" for a bundle in a user's 0700 folder without `dac_read_search` |
//! | [`Phase::DeviceCgroupPrepare`] | `bpf`, `net_admin` | cgroup v2: `BPF_PROG_LOAD` of a `BPF_PROG_TYPE_CGROUP_DEVICE` program: `EPERM` with `bpf` alone, `net_admin` alone or `bpf`+`perfmon`; it works with `bpf`+`net_admin` or with `sys_admin` (*tested*). A kernel without `CAP_BPF` (before 5.8) needs `sys_admin` for it, and one that charges programs to `RLIMIT_MEMLOCK` (before 5.11) `sys_resource` to raise the limit: [`Privileges`] adds them on such kernels. cgroup v1 needs nothing here |
//! | [`Phase::EnterContainer`] | `sys_admin`, `sys_chroot`, `sys_ptrace` | `setns(pidfd, CLONE_NEWNS)`: "cannot enter the mount namespace of process N: Operation not permitted" without `sys_admin` or `sys_chroot`; `stat /proc/<pid>/ns/mnt` (and `setns` itself, and the procfs fallback) pass the kernel's `ptrace` check only with `sys_ptrace`, runc's init holding every capability at prestart: "cannot find the mount namespace of process N: Permission denied" (*tested*) |
//! | [`Phase::Rootfs`] | `sys_admin`, `dac_override` | `move_mount`, `fsopen`, `mount_setattr`, `umount2` in the container's namespace: "cannot attach the bind mount of ...: Operation not permitted" without `sys_admin`; mount points, folders, links and the ld.so.cache in folders root may not write by their mode (Fedora's `/usr/lib` is 0555) or that are another uid's (a user-namespaced container's rootfs): "cannot create mount point ...: Permission denied" without `dac_override`, which `dac_read_search` or `fowner` do not replace (*tested*) |
//! | [`Phase::DeviceCgroupApply`] | `sys_admin`, `net_admin` | v1: `write` to `devices.allow`: "cannot write a rule to .../devices.allow: Operation not permitted" without `sys_admin` (the open works); v2: `BPF_PROG_QUERY` (`net_admin` or `sys_admin`), `BPF_PROG_GET_FD_BY_ID` of the runtime's program to replace it (`sys_admin` alone: *tested*), `BPF_PROG_ATTACH` (nothing on 6.18; `net_admin`, and only it, on kernels that still check it) |
//! | [`Phase::ProcMask`] | `sys_admin`, `dac_override` | the tmpfs over `/proc/driver/nvidia`: `fsopen`, `fsmount`, `mount_setattr`, `move_mount`, and `umount2` of an earlier mask (`nvc attach`); the tmpfs is made mode 0555 and filled (its `version`, the GPUs' folders) before it is made read-only: "cannot write version in a detached mount: Permission denied" without `dac_override` (seen on the GPU machine; *tested*) |
//! | [`Phase::LeaveContainer`] | `sys_admin`, `sys_chroot` | `setns` back into the host's mount namespace, by an fd of it kept open, when set-up failed (`lifecycle`'s take-back): `EPERM` with either alone; no `ptrace` check, the namespace being the caller's own |
//! | [`Phase::Undo`] | `dac_override` | poststop, a failed start's take-back, and the sweep of stale records before a start: the rootfs opened in the host's namespace (the container's mounts went with it), what was made unlinked, the image's ld.so.cache written back: "cannot write /etc/ld.so.cache ...: Permission denied" in a rootfs of another uid without it |
//! | [`Phase::State`] | nothing | saving the record through the folder fd opened in [`Phase::Host`], ending the GPU leases: root's files in root's folders |
//!
//! A link in the image to a `/proc/<pid>/` magic link of a process the hook may not trace
//! (`/etc -> /proc/1/root`) is still refused in [`Phase::Rootfs`], with `EACCES` from the
//! kernel's `ptrace` check instead of `ELOOP`; `container` names it as a link that cannot
//! be followed either way.
//!
//! Needed by none: `chown` (nvc changes no owner), `fowner` (it sets the mode only of files
//! it made, and replaces or removes another user's entry only in folders no image makes
//! sticky), `mknod` (device nodes are bind mounts of the host's), `setpcap` (only
//! [`Privileges::bound`] uses it, to drop the bounding set and set the securebits), and
//! the rest. The hook runs no program that needs a capability, so the inheritable and
//! ambient sets are emptied.
//!
//! The sets are those of the hosts nvc supports, together: cgroup v1 and v2, Linux 5.12 and
//! later (`mount_setattr`), distribution kernels with older numbers included. On a v1 host
//! [`Phase::DeviceCgroupPrepare`] holds `bpf` and `net_admin` for nothing.
//!
//! # Rootless, and not root
//!
//! In a user namespace of its own (rootless Podman runs the hook in one, with every
//! capability there), everything above holds within that namespace. A process without
//! `setpcap` (not root) keeps its bounding set, which `no_new_privs` makes harmless (no
//! program it runs gains a capability), and a phase that needs a capability the process
//! does not have is entered anyway, logged at debug level: the operation that needs it
//! then fails with `EPERM` and says which.
//!
//! # Threads
//!
//! Capabilities, the bounding set, the securebits and `no_new_privs` are the calling
//! thread's. The hook is single-threaded (it must be, to enter a mount namespace); a
//! program with threads must make its [`Privileges`] before it starts them, or the others
//! keep everything.
//!
//! # Why rustix and not the `caps` crate
//!
//! nvc-host already depends on rustix (feature `thread`), which has every call this needs:
//! `capget`/`capset`, `PR_CAPBSET_READ`/`PR_CAPBSET_DROP` for any capability number the
//! kernel knows (one added after rustix's list included), the ambient set, the securebits
//! and `no_new_privs`, each returning an `Errno`. The `caps` crate (0.5) has no
//! `no_new_privs`, of the securebits only keep-caps (not `SECBIT_NOROOT`), a closed
//! `Capability` enum (a capability a newer kernel adds could not be dropped from the
//! bounding set), and reports every failure as a `CapsError(String)`; it would add a crate
//! to the hook's build for nothing rustix lacks. The workspace's dependencies are
//! unchanged.

use std::fmt;
use std::io;

use log::debug;
use rustix::io::Errno;
use rustix::thread::{self as rt, CapabilitiesSecureBits, CapabilitySet, CapabilitySets};

/// A set of capabilities, as the kernel's 64-bit masks hold them (bit `n` is capability
/// `n`). Shown as `cap_dac_override,cap_sys_admin`, or `none`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CapSet(u64);

/// The kernel's names of the capabilities it numbers 0 to 40, without `cap_`.
const NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

impl CapSet {
    /// No capability.
    pub const EMPTY: CapSet = CapSet(0);
    /// `CAP_DAC_OVERRIDE`.
    pub const DAC_OVERRIDE: CapSet = CapSet::of(1);
    /// `CAP_DAC_READ_SEARCH`.
    pub const DAC_READ_SEARCH: CapSet = CapSet::of(2);
    /// `CAP_FOWNER`.
    pub const FOWNER: CapSet = CapSet::of(3);
    /// `CAP_SETPCAP`.
    pub const SETPCAP: CapSet = CapSet::of(8);
    /// `CAP_NET_ADMIN`.
    pub const NET_ADMIN: CapSet = CapSet::of(12);
    /// `CAP_SYS_CHROOT`.
    pub const SYS_CHROOT: CapSet = CapSet::of(18);
    /// `CAP_SYS_PTRACE`.
    pub const SYS_PTRACE: CapSet = CapSet::of(19);
    /// `CAP_SYS_ADMIN`.
    pub const SYS_ADMIN: CapSet = CapSet::of(21);
    /// `CAP_SYS_RESOURCE`.
    pub const SYS_RESOURCE: CapSet = CapSet::of(24);
    /// `CAP_BPF` (Linux 5.8).
    pub const BPF: CapSet = CapSet::of(39);

    /// The set of capability number `n` alone (empty for `n` over 63).
    pub const fn of(n: u32) -> CapSet {
        match 1u64.checked_shl(n) {
            Some(bit) => CapSet(bit),
            None => CapSet(0),
        }
    }

    /// The set of the kernel's mask `bits`.
    pub const fn from_bits(bits: u64) -> CapSet {
        CapSet(bits)
    }

    /// The kernel's mask.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// What is in either.
    pub const fn union(self, other: CapSet) -> CapSet {
        CapSet(self.0 | other.0)
    }

    /// What is in both.
    pub const fn intersection(self, other: CapSet) -> CapSet {
        CapSet(self.0 & other.0)
    }

    /// What is in `self` and not in `other`.
    pub const fn without(self, other: CapSet) -> CapSet {
        CapSet(self.0 & !other.0)
    }

    /// Whether every capability of `other` is in `self`.
    pub const fn contains(self, other: CapSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether it holds no capability.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The capability numbers in it, lowest first.
    pub fn numbers(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |n| self.0 >> n & 1 == 1)
    }

    fn to_rustix(self) -> CapabilitySet {
        CapabilitySet::from_bits_retain(self.0)
    }

    fn from_rustix(set: CapabilitySet) -> CapSet {
        CapSet(set.bits())
    }
}

impl fmt::Display for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, n) in self.numbers().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match NAMES.get(n as usize) {
                Some(name) => write!(f, "cap_{name}")?,
                None => write!(f, "cap_{n}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A part of the hook's (or `nvc attach`'s) work whose needs differ from its
/// neighbours'. The module documentation's table says what each one needs and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The host's files: the config, the bundle, discovery, the state on stdin; nvc's state
    /// folder (GPU leases, the rootfs lock, the record's folder opened).
    Host,
    /// `nvc attach`, `nvc detach`: the running container's process examined through
    /// `/proc/<pid>` (its root, its user namespace).
    InspectProcess,
    /// The mount sources opened in the host's mount namespace: the driver's files, the
    /// device nodes, `/proc/driver/nvidia`.
    Sources,
    /// The container's device cgroup found and, on cgroup v2, the new device program
    /// loaded.
    DeviceCgroupPrepare,
    /// `setns` into the container's mount namespace.
    EnterContainer,
    /// Mount points, mounts, device nodes, links and the ld.so.cache in the container's
    /// rootfs, in its mount namespace.
    Rootfs,
    /// The device cgroup changed: `devices.allow` written, or the v2 program replaced.
    DeviceCgroupApply,
    /// The tmpfs mounted over the container's `/proc/driver/nvidia`.
    ProcMask,
    /// `setns` back into the host's mount namespace (after a failure, to undo).
    LeaveContainer,
    /// What was made in the rootfs taken away (poststop, or after a failure).
    Undo,
    /// The record saved through its folder's fd, the GPU leases ended: needs nothing.
    State,
}

impl Phase {
    /// What the phase needs in its effective set, as the module documentation's table
    /// says. [`Privileges`] adds what an older kernel needs on top
    /// ([`Phase::DeviceCgroupPrepare`]).
    pub const fn needs(self) -> CapSet {
        match self {
            Phase::Host => CapSet::DAC_READ_SEARCH,
            Phase::InspectProcess => CapSet::SYS_PTRACE.union(CapSet::DAC_READ_SEARCH),
            Phase::Sources => CapSet::SYS_ADMIN.union(CapSet::DAC_READ_SEARCH),
            Phase::DeviceCgroupPrepare => CapSet::BPF.union(CapSet::NET_ADMIN),
            Phase::EnterContainer => CapSet::SYS_ADMIN
                .union(CapSet::SYS_CHROOT)
                .union(CapSet::SYS_PTRACE),
            Phase::Rootfs => CapSet::SYS_ADMIN.union(CapSet::DAC_OVERRIDE),
            Phase::DeviceCgroupApply => CapSet::SYS_ADMIN.union(CapSet::NET_ADMIN),
            Phase::ProcMask => CapSet::SYS_ADMIN.union(CapSet::DAC_OVERRIDE),
            Phase::LeaveContainer => CapSet::SYS_ADMIN.union(CapSet::SYS_CHROOT),
            Phase::Undo => CapSet::DAC_OVERRIDE,
            Phase::State => CapSet::EMPTY,
        }
    }

    /// Its name in log lines and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Host => "host",
            Phase::InspectProcess => "inspect-process",
            Phase::Sources => "sources",
            Phase::DeviceCgroupPrepare => "device-cgroup-prepare",
            Phase::EnterContainer => "enter-container",
            Phase::Rootfs => "rootfs",
            Phase::DeviceCgroupApply => "device-cgroup-apply",
            Phase::ProcMask => "proc-mask",
            Phase::LeaveContainer => "leave-container",
            Phase::Undo => "undo",
            Phase::State => "state",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `nvc-hook prestart`, in the order of `lifecycle::prestart` and `setup::set_up`: the
/// host (config, plan, leases, rootfs lock); what containers that ended without their
/// poststop hook left in the rootfs taken away; the record folder; the sources of the
/// mounts and nodes; the device cgroup prepared; the `/proc/driver/nvidia` sources; the
/// container's namespace entered; mounts and nodes; the device cgroup applied; links; the
/// mask; the ld.so.cache; then, only when set-up failed, back to the host's namespace and
/// what was made taken away; the record saved (or removed).
pub const PRESTART: &[Phase] = &[
    Phase::Host,
    Phase::Undo,
    Phase::Host,
    Phase::Sources,
    Phase::DeviceCgroupPrepare,
    Phase::Sources,
    Phase::EnterContainer,
    Phase::Rootfs,
    Phase::DeviceCgroupApply,
    Phase::Rootfs,
    Phase::ProcMask,
    Phase::Rootfs,
    Phase::LeaveContainer,
    Phase::Undo,
    Phase::State,
];

/// `nvc-hook poststop` (and a prestart hook called at `poststop`): the spec's rootfs and the
/// rootfs lock; what was made taken away; the GPU leases ended.
pub const POSTSTOP: &[Phase] = &[Phase::Host, Phase::Undo, Phase::State];

/// `nvc attach`, from after `runc state` (a program run later gets no capability): the
/// plan; the process checked; the attach record, the rootfs lock and the no-trace record
/// opened; then as [`PRESTART`] from the sources on, without its failure path (what a
/// failed attach made stays recorded for the container's poststop hook).
pub const ATTACH: &[Phase] = &[
    Phase::Host,
    Phase::InspectProcess,
    Phase::Host,
    Phase::Sources,
    Phase::DeviceCgroupPrepare,
    Phase::Sources,
    Phase::EnterContainer,
    Phase::Rootfs,
    Phase::DeviceCgroupApply,
    Phase::Rootfs,
    Phase::ProcMask,
    Phase::Rootfs,
    Phase::State,
];

/// `nvc detach`, from after `runc state`: the plan; the process checked; the record; the
/// mask's sources; the revocation prepared; the namespace entered; the cgroup changed; the
/// nodes unmounted and removed; the new mask.
pub const DETACH: &[Phase] = &[
    Phase::Host,
    Phase::InspectProcess,
    Phase::Host,
    Phase::Sources,
    Phase::DeviceCgroupPrepare,
    Phase::EnterContainer,
    Phase::DeviceCgroupApply,
    Phase::Rootfs,
    Phase::ProcMask,
];

/// Why the privileges could not be limited.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegesError {
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("cannot set no_new_privs (a seccomp filter or security module in front of nvc must allow prctl)")]
    NoNewPrivs(#[source] io::Error),
    /// `capget` failed.
    #[error("cannot read this thread's capabilities (a seccomp filter or security module in front of nvc must allow capget)")]
    Read(#[source] io::Error),
    /// A capability could not be dropped from the bounding set.
    #[error("cannot drop {cap} from the bounding set (a seccomp filter or security module in front of nvc must allow prctl)")]
    Bounding {
        /// The capability.
        cap: CapSet,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// `capset` failed.
    #[error("cannot set the capabilities {what} to effective {effective}, permitted {permitted} (a seccomp filter or security module in front of nvc must allow capset)")]
    Set {
        /// `of phase rootfs`, `when bound`, `when finished`.
        what: String,
        /// The effective set asked for.
        effective: CapSet,
        /// The permitted set asked for.
        permitted: CapSet,
        /// The kernel's reason.
        #[source]
        source: io::Error,
    },
    /// A phase was entered that the plan does not have at this point.
    #[error("phase {phase} is not in the plan after {after} (the plan: {plan}): list every phase in Privileges::bound, in the order the program enters them")]
    NotPlanned {
        /// The phase entered.
        phase: Phase,
        /// The phase the program was in, or `the start`.
        after: String,
        /// The plan, as `host, sources, ...`.
        plan: String,
    },
    /// `/proc/thread-self/status` could not be read.
    #[error("cannot read {path}")]
    Status {
        /// The file.
        path: &'static str,
        /// The reason.
        #[source]
        source: io::Error,
    },
    /// `/proc/thread-self/status` lacks a line.
    #[error("{path} has no {field} line: is /proc a Linux procfs?")]
    StatusField {
        /// The file.
        path: &'static str,
        /// The line's name.
        field: &'static str,
    },
}

/// What the running kernel makes of the phases' needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kernel {
    /// It knows `CAP_BPF` (5.8): without it, loading a program needs `CAP_SYS_ADMIN`.
    knows_cap_bpf: bool,
    /// It charges BPF programs to `RLIMIT_MEMLOCK` (before 5.11), which
    /// `cgroup::DeviceProgram::load` raises on `EPERM`.
    charges_memlock: bool,
}

impl Kernel {
    fn running() -> Kernel {
        // EINVAL: a capability number the kernel does not know.
        let knows_cap_bpf =
            rt::capability_is_in_bounding_set(CapabilitySet::BPF) != Err(Errno::INVAL);
        let uname = rustix::system::uname();
        let release = uname.release().to_string_lossy();
        Kernel {
            knows_cap_bpf,
            charges_memlock: release_before(&release, (5, 11)),
        }
    }

    /// What `phase` needs on this kernel.
    fn needs(self, phase: Phase) -> CapSet {
        let mut needs = phase.needs();
        if needs.contains(CapSet::BPF) && !self.knows_cap_bpf {
            needs = needs.without(CapSet::BPF).union(CapSet::SYS_ADMIN);
        }
        if phase == Phase::DeviceCgroupPrepare && self.charges_memlock {
            needs = needs.union(CapSet::SYS_RESOURCE);
        }
        needs
    }
}

/// Whether the kernel release `release` (`uname -r`: `5.10.0-23-amd64`) is older than
/// `major.minor`. `false` when it does not start with two numbers.
fn release_before(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b) < (major, minor),
        _ => false,
    }
}

/// The calling thread's capabilities, limited phase by phase (see the module
/// documentation). Made once by [`Privileges::bound`].
#[derive(Debug)]
#[must_use = "the effective set stays empty until a phase is entered"]
pub struct Privileges {
    plan: Vec<Phase>,
    /// The index in `plan` of the phase entered last.
    at: Option<usize>,
    kernel: Kernel,
    effective: CapSet,
    permitted: CapSet,
}

impl Privileges {
    /// Limits the calling thread to what `phases` need, for good: sets `no_new_privs`;
    /// drops from the bounding set every capability none of them needs (where the thread
    /// has `CAP_SETPCAP`); sets `SECBIT_NOROOT`, locked, so that a program run later gets
    /// no capability for being root; empties the inheritable and ambient sets; keeps in the
    /// permitted set only what the phases need; and leaves the effective set empty until
    /// [`Privileges::enter`]. `phases` are listed in the order they will be entered, a
    /// phase once for each time.
    pub fn bound(phases: &[Phase]) -> Result<Privileges, PrivilegesError> {
        rt::set_no_new_privs(true).map_err(|e| PrivilegesError::NoNewPrivs(e.into()))?;
        let kernel = Kernel::running();
        let all = phases
            .iter()
            .fold(CapSet::EMPTY, |all, p| all.union(kernel.needs(*p)));
        let had = rt::capabilities(None).map_err(|e| PrivilegesError::Read(e.into()))?;
        let permitted = CapSet::from_rustix(had.permitted);
        // The bounding set and the securebits are changed with CAP_SETPCAP effective.
        let setpcap = permitted.intersection(CapSet::SETPCAP);
        let mut privileges = Privileges {
            plan: phases.to_vec(),
            at: None,
            kernel,
            effective: CapSet::from_rustix(had.effective),
            permitted,
        };
        privileges.set(
            setpcap,
            permitted.intersection(all.union(setpcap)),
            "when bound",
        )?;
        if setpcap.is_empty() {
            debug!(
                "privileges: no cap_setpcap: the bounding set stays {}; no_new_privs keeps \
                 what this process runs from gaining any capability",
                Status::read()
                    .map(|s| s.bounding.to_string())
                    .unwrap_or_else(|e| e.to_string())
            );
        } else {
            drop_bounding(all)?;
            lock_no_root();
        }
        // Emptied with the inheritable set already; cleared in case a kernel keeps it.
        rt::clear_ambient_capability_set().map_err(|e| PrivilegesError::Set {
            what: "when bound (the ambient set)".to_string(),
            effective: privileges.effective,
            permitted: privileges.permitted,
            source: e.into(),
        })?;
        privileges.set(CapSet::EMPTY, permitted.intersection(all), "when bound")?;
        debug!(
            "privileges bound to {all} for {}{}",
            plan_text(phases),
            match permitted.contains(all) {
                true => String::new(),
                false => format!(" (not permitted: {})", all.without(permitted)),
            }
        );
        Ok(privileges)
    }

    /// Enters `phase`: the effective set becomes what it needs (as far as it is
    /// permitted), and the permitted set loses what neither it nor a phase planned after
    /// it needs. A capability it needs that is not permitted (not root, or dropped by
    /// whoever ran this program) is logged at debug level, not refused: what needs it then
    /// fails with `EPERM`. Entering a phase the plan does not have from here on is
    /// [`PrivilegesError::NotPlanned`], and changes nothing.
    pub fn enter(&mut self, phase: Phase) -> Result<(), PrivilegesError> {
        let from = self.at.unwrap_or(0);
        let Some(at) = self.plan[from..]
            .iter()
            .position(|p| *p == phase)
            .map(|i| from + i)
        else {
            return Err(PrivilegesError::NotPlanned {
                phase,
                after: match (self.at, self.phase()) {
                    (None, _) => "the start".to_string(),
                    (_, Some(p)) => format!("phase {p}"),
                    (Some(_), None) => "the finish".to_string(),
                },
                plan: plan_text(&self.plan),
            });
        };
        let later = self.plan[at..]
            .iter()
            .fold(CapSet::EMPTY, |all, p| all.union(self.kernel.needs(*p)));
        let needs = self.kernel.needs(phase);
        let permitted = self.permitted.intersection(later);
        let effective = needs.intersection(permitted);
        self.set(effective, permitted, &format!("of phase {phase}"))?;
        self.at = Some(at);
        let lacking = needs.without(effective);
        if !lacking.is_empty() {
            debug!(
                "privileges: phase {phase} goes without {lacking}, which this process is not \
                 permitted: what needs it fails with EPERM"
            );
        }
        debug!("privileges: {self}");
        Ok(())
    }

    /// Drops every capability left: the program's privileged work is over (a phase planned
    /// later, such as [`Phase::Undo`] after a failure, was not needed).
    pub fn finish(&mut self) -> Result<(), PrivilegesError> {
        self.set(CapSet::EMPTY, CapSet::EMPTY, "when finished")?;
        self.at = Some(self.plan.len());
        debug!("privileges: finished, none left");
        Ok(())
    }

    /// The phase entered last (`None` before the first and after [`Privileges::finish`]).
    pub fn phase(&self) -> Option<Phase> {
        self.at.and_then(|i| self.plan.get(i)).copied()
    }

    /// The effective set, as set last.
    pub fn effective(&self) -> CapSet {
        self.effective
    }

    /// The permitted set, as set last: all that any later phase can have.
    pub fn permitted(&self) -> CapSet {
        self.permitted
    }

    /// `capset` with an empty inheritable set.
    fn set(
        &mut self,
        effective: CapSet,
        permitted: CapSet,
        what: &str,
    ) -> Result<(), PrivilegesError> {
        rt::set_capabilities(
            None,
            CapabilitySets {
                effective: effective.to_rustix(),
                permitted: permitted.to_rustix(),
                inheritable: CapabilitySet::empty(),
            },
        )
        .map_err(|e| PrivilegesError::Set {
            what: what.to_string(),
            effective,
            permitted,
            source: e.into(),
        })?;
        self.effective = effective;
        self.permitted = permitted;
        Ok(())
    }
}

impl fmt::Display for Privileges {
    /// `phase rootfs: effective cap_dac_override,cap_sys_admin; permitted ...`, for a
    /// debug line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.at, self.phase()) {
            (None, _) => f.write_str("bound")?,
            (_, Some(phase)) => write!(f, "phase {phase}")?,
            (Some(_), None) => f.write_str("finished")?,
        }
        write!(
            f,
            ": effective {}; permitted {}",
            self.effective, self.permitted
        )
    }
}

/// Drops from the bounding set every capability the kernel knows that `keep` lacks (up to
/// 63: a capability added after this program was built too).
fn drop_bounding(keep: CapSet) -> Result<(), PrivilegesError> {
    for n in 0..64 {
        let cap = CapSet::of(n);
        if keep.contains(cap) {
            continue;
        }
        match rt::remove_capability_from_bounding_set(cap.to_rustix()) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(Errno::INVAL) => break,
            Err(e) => {
                return Err(PrivilegesError::Bounding {
                    cap,
                    source: e.into(),
                })
            }
        }
    }
    Ok(())
}

/// Sets `SECBIT_NOROOT` and locks it, so that a program this process runs gets no
/// capability for being root (`no_new_privs` already caps it at the permitted set). Only
/// logged when it fails (a parent locked it off): the bounding set and `no_new_privs`
/// still hold.
fn lock_no_root() {
    let wanted = CapabilitiesSecureBits::NO_ROOT | CapabilitiesSecureBits::NO_ROOT_LOCKED;
    let result = rt::capabilities_secure_bits()
        .and_then(|bits| rt::set_capabilities_secure_bits(bits | wanted));
    if let Err(e) = result {
        debug!("privileges: SECBIT_NOROOT not set: {e}");
    }
}

fn plan_text(plan: &[Phase]) -> String {
    plan.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
}

/// The calling thread's capability sets and `no_new_privs`, as the kernel shows them in
/// `/proc/thread-self/status`: for tests. Not in a mount namespace whose `/proc` does not
/// show this process (a running container's): [`Privileges`]'s own `Display` is the debug
/// line there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// `CapEff`.
    pub effective: CapSet,
    /// `CapPrm`.
    pub permitted: CapSet,
    /// `CapInh`.
    pub inheritable: CapSet,
    /// `CapBnd`.
    pub bounding: CapSet,
    /// `CapAmb`.
    pub ambient: CapSet,
    /// `NoNewPrivs`.
    pub no_new_privs: bool,
}

impl Status {
    const PATH: &'static str = "/proc/thread-self/status";

    /// Reads the calling thread's.
    pub fn read() -> Result<Status, PrivilegesError> {
        let text =
            std::fs::read_to_string(Self::PATH).map_err(|source| PrivilegesError::Status {
                path: Self::PATH,
                source,
            })?;
        Self::parse(&text)
    }

    /// Parses the text of a `status` file.
    fn parse(text: &str) -> Result<Status, PrivilegesError> {
        let field = |name: &'static str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .ok_or(PrivilegesError::StatusField {
                    path: Self::PATH,
                    field: name,
                })
        };
        let set = |name: &'static str| {
            let value = field(name)?;
            u64::from_str_radix(value, 16)
                .map(CapSet)
                .map_err(|_| PrivilegesError::StatusField {
                    path: Self::PATH,
                    field: name,
                })
        };
        Ok(Status {
            effective: set("CapEff")?,
            permitted: set("CapPrm")?,
            inheritable: set("CapInh")?,
            bounding: set("CapBnd")?,
            ambient: set("CapAmb")?,
            no_new_privs: field("NoNewPrivs")? == "1",
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "effective {}; permitted {}; inheritable {}; bounding {}; ambient {}; no_new_privs {}",
            self.effective,
            self.permitted,
            self.inheritable,
            self.bounding,
            self.ambient,
            u8::from(self.no_new_privs)
        )
    }
}

#[cfg(test)]
mod tests;
