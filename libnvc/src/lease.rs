//! GPU leases, the pure part: which running container holds which GPU, shared or
//! exclusively, and whether a new container may take it.
//!
//! Each container that holds GPUs has one lease file, named after its id and whether it
//! holds them exclusively ([`file_name`]: `<container id>.lease` exclusively,
//! `<container id>.shared-lease` shared), holding JSON ([`LeaseFile`]): the holder (the
//! container id, the host pid of its init process and that process's start time, field 22
//! of `/proc/<pid>/stat`, when it took its GPUs, and whether exclusively) and the GPUs it
//! holds. A holder whose process is gone, a zombie, or another process with the same pid
//! (another start time) is stale ([`liveness`]) and blocks nothing. nvc-host's `leases`
//! module does the file work under a lock; [`claim`] decides. A shared holder blocks only
//! an exclusive request, so a shared request reads only the exclusive holders' files (and
//! those of an earlier nvc, which wrote every holder's as `.lease`), by their names; an
//! exclusive one reads them all.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::request::ExclusiveBy;

/// The version of the lease file format. Version 1 was one file per GPU, named after its
/// UUID ([`Entry::Earlier`]).
pub const LEASE_VERSION: u32 = 2;
/// The largest lease file read; a larger one is garbage.
pub const MAX_LEASE_BYTES: u64 = 64 * 1024;
/// The most GPUs a lease file may list.
pub const MAX_GPUS: usize = 256;
/// The lock file in the lease folder, taken around every check-and-take.
pub const LOCK_FILE: &str = ".lock";
/// The end of the name of an exclusive holder's lease file (and of every holder's that
/// an earlier nvc wrote): `<container id>.lease`. No other file in the folder ends so
/// (the lock file, temporary files, shared holders' files, version 1's files).
pub const LEASE_SUFFIX: &str = ".lease";
/// The end of the name of a shared holder's lease file: `<container id>.shared-lease`.
pub const SHARED_SUFFIX: &str = ".shared-lease";
/// The longest container id recorded.
pub const MAX_CONTAINER_ID: usize = 1024;

/// One container's lease file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFile {
    /// [`LEASE_VERSION`].
    pub version: u32,
    /// The container that holds the GPUs (its id is also the file's name).
    pub holder: Holder,
    /// The GPUs it holds.
    pub gpus: Vec<LeasedGpu>,
}

/// A container that holds GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Holder {
    /// The container id, as the runtime's state names it.
    pub container: String,
    /// The host pid of the container's init process.
    pub pid: i32,
    /// That process's start time, in clock ticks after boot.
    pub start_time: u64,
    /// When the lease was taken, in seconds since the Unix epoch.
    pub since: u64,
    /// What made it exclusive; `None`: shared.
    pub exclusive: Option<ExclusiveBy>,
}

impl Holder {
    /// Whether `other` records the same process: the same pid and start time.
    pub fn same_process(&self, other: &Holder) -> bool {
        self.pid == other.pid && self.start_time == other.start_time
    }
}

/// A GPU a lease file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeasedGpu {
    /// Its index when the lease was taken, for messages.
    pub index: u32,
    /// Its UUID, which leases are compared by.
    pub uuid: String,
}

/// Why a lease file is garbage (it is then removed).
#[derive(Debug, thiserror::Error)]
pub enum LeaseFileError {
    /// Not the JSON of a lease file.
    #[error("not a lease file")]
    Json(#[source] serde_json::Error),
    /// Another format version.
    #[error("lease file version {0}, expected {LEASE_VERSION}")]
    Version(u32),
    /// The file names another container than its name.
    #[error("names container {found:?}, not the container of its file name")]
    WrongContainer {
        /// The container in the file.
        found: String,
    },
    /// A holder that cannot be one.
    #[error("the holder is invalid (container id, pid or start time)")]
    BadHolder,
    /// A GPU UUID that cannot be one.
    #[error("GPU {index} in the list has an invalid UUID")]
    BadGpu {
        /// Its place in the list.
        index: usize,
    },
    /// More GPUs than [`MAX_GPUS`].
    #[error("lists {0} GPUs, more than {MAX_GPUS}")]
    TooManyGpus(usize),
}

/// Reads the lease file of container `container`, checking what it says.
pub fn parse(bytes: &[u8], container: &str) -> Result<LeaseFile, LeaseFileError> {
    let file: LeaseFile = serde_json::from_slice(bytes).map_err(LeaseFileError::Json)?;
    if file.version != LEASE_VERSION {
        return Err(LeaseFileError::Version(file.version));
    }
    let h = &file.holder;
    if !valid_container_id(&h.container) || h.pid <= 0 || h.start_time == 0 {
        return Err(LeaseFileError::BadHolder);
    }
    if h.container != container {
        return Err(LeaseFileError::WrongContainer {
            found: file.holder.container,
        });
    }
    if file.gpus.len() > MAX_GPUS {
        return Err(LeaseFileError::TooManyGpus(file.gpus.len()));
    }
    if let Some(index) = file.gpus.iter().position(|g| !valid_gpu_uuid(&g.uuid)) {
        return Err(LeaseFileError::BadGpu { index });
    }
    Ok(file)
}

/// The bytes of a lease file.
pub fn render(file: &LeaseFile) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The name of container `container`'s lease file: `<container>.lease` when it holds its
/// GPUs `exclusive`ly, `<container>.shared-lease` when it shares them. The suffixes keep
/// it apart from the lock file, temporary files (`….nvc-tmp`) and version 1's files,
/// whatever the (valid) id.
pub fn file_name(container: &str, exclusive: bool) -> String {
    let suffix = if exclusive {
        LEASE_SUFFIX
    } else {
        SHARED_SUFFIX
    };
    format!("{container}{suffix}")
}

/// What a name in the lease folder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    /// [`LOCK_FILE`].
    Lock,
    /// The lease file of the container with this id, holding its GPUs exclusively (or
    /// written by an earlier nvc, shared or not): read by every request.
    Lease(&'a str),
    /// The lease file of the container with this id, sharing its GPUs: read by exclusive
    /// requests alone.
    Shared(&'a str),
    /// A lease file of format version 1 (one file per GPU, named after its UUID), which
    /// an earlier nvc wrote: it is removed.
    Earlier,
    /// Anything else (temporary files included): not a lease file, left alone.
    Other,
}

/// What the file `name` in the lease folder is.
pub fn entry(name: &str) -> Entry<'_> {
    if name == LOCK_FILE {
        return Entry::Lock;
    }
    if let Some(id) = name.strip_suffix(SHARED_SUFFIX) {
        if valid_container_id(id) {
            return Entry::Shared(id);
        }
        return Entry::Other;
    }
    if let Some(id) = name.strip_suffix(LEASE_SUFFIX) {
        if valid_container_id(id) {
            return Entry::Lease(id);
        }
        return Entry::Other;
    }
    if valid_gpu_uuid(name) && (name.starts_with("GPU-") || name.starts_with("MIG-")) {
        return Entry::Earlier;
    }
    Entry::Other
}

/// Whether `id` may be recorded as a container id: what runc accepts (letters, digits,
/// `_`, `+`, `-`, `.`), at most [`MAX_CONTAINER_ID`] bytes.
pub fn valid_container_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CONTAINER_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.'))
}

/// Whether a GPU UUID can be recorded: letters, digits and `-`, not empty, not starting
/// with `-`, at most 128 bytes.
pub fn valid_gpu_uuid(uuid: &str) -> bool {
    !uuid.is_empty()
        && uuid.len() <= 128
        && !uuid.starts_with('-')
        && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Its state (field 3): `R`, `S`, `Z`…
    pub state: char,
    /// Its start time in clock ticks after boot (field 22).
    pub start_time: u64,
}

/// Reads a `/proc/<pid>/stat` line; the command name (field 2) is in parentheses and may
/// itself hold spaces and parentheses, so the fields are counted after the last `)`.
pub fn parse_proc_stat(stat: &str) -> Option<ProcStat> {
    let (_, after) = stat.rsplit_once(')')?;
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

/// Whether a holder still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its process runs, with the recorded start time.
    Live,
    /// No process has its pid, or it is a zombie: the container ended.
    Gone,
    /// Another process has its pid (another start time).
    Reused,
}

impl Liveness {
    /// Whether the holder still holds the GPU.
    pub fn is_live(self) -> bool {
        self == Liveness::Live
    }

    /// How `nvc list --leases` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Liveness::Live => "live",
            Liveness::Gone => "stale (process gone)",
            Liveness::Reused => "stale (pid reused)",
        }
    }
}

/// Whether `holder` runs, given what `/proc/<its pid>/stat` says (`None`: no such
/// process).
pub fn liveness(holder: &Holder, stat: Option<ProcStat>) -> Liveness {
    match stat {
        None => Liveness::Gone,
        Some(s) if matches!(s.state, 'Z' | 'X' | 'x') => Liveness::Gone,
        Some(s) if s.start_time != holder.start_time => Liveness::Reused,
        Some(_) => Liveness::Live,
    }
}

/// A GPU a container asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRef<'a> {
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: &'a str,
}

/// Why a container may not take a GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// Another container holds it exclusively.
    #[error(
        "GPU {index} ({uuid}) is held exclusively by container {holder} since {since} ({by}); \
         stop it or ask for another GPU"
    )]
    HeldExclusively {
        /// The GPU's index.
        index: u32,
        /// The GPU's UUID.
        uuid: String,
        /// The holder's container id.
        holder: String,
        /// When it took the GPU.
        since: String,
        /// What made it exclusive.
        by: &'static str,
    },
    /// The container asks for it exclusively and another container uses it.
    #[error(
        "GPU {index} ({uuid}) is in use by container {holder} since {since}, and {asked} asks \
         for it alone; stop that container or ask for another GPU"
    )]
    InUse {
        /// The GPU's index.
        index: u32,
        /// The GPU's UUID.
        uuid: String,
        /// The user's container id.
        holder: String,
        /// When it took the GPU.
        since: String,
        /// What made the new request exclusive.
        asked: &'static str,
    },
}

/// Whether a lease file of `other` is an earlier record of `me`, which `me`'s replaces:
/// the same container (restarted with the same id), or the same process.
pub fn supersedes(me: &Holder, other: &Holder) -> bool {
    other.container == me.container || other.same_process(me)
}

/// The lease file of `me` once it holds `gpus`, given the lease files of the live holders
/// (`others`; those [`supersedes`] names are passed over). Refused when a live holder has
/// one of the GPUs exclusively, or when `me` asks exclusively and a live holder uses one.
/// GPUs are compared by UUID and looked at in the order asked for; the holder named is
/// the one that took the GPU first.
pub fn claim(me: &Holder, gpus: &[GpuRef], others: &[LeaseFile]) -> Result<LeaseFile, Conflict> {
    let asked: HashSet<&str> = gpus.iter().map(|g| g.uuid).collect();
    let mut sharing: Vec<&LeaseFile> = others
        .iter()
        .filter(|f| !supersedes(me, &f.holder))
        .filter(|f| f.gpus.iter().any(|g| asked.contains(g.uuid.as_str())))
        .collect();
    sharing.sort_by(|a, b| {
        (a.holder.since, &a.holder.container).cmp(&(b.holder.since, &b.holder.container))
    });
    for gpu in gpus {
        let holders: Vec<&Holder> = sharing
            .iter()
            .filter(|f| f.gpus.iter().any(|g| g.uuid == gpu.uuid))
            .map(|f| &f.holder)
            .collect();
        if let Some((h, by)) = holders.iter().find_map(|h| h.exclusive.map(|by| (*h, by))) {
            return Err(Conflict::HeldExclusively {
                index: gpu.index,
                uuid: gpu.uuid.to_string(),
                holder: h.container.clone(),
                since: utc(h.since),
                by: by.name(),
            });
        }
        if let (Some(asked), Some(h)) = (me.exclusive, holders.first()) {
            return Err(Conflict::InUse {
                index: gpu.index,
                uuid: gpu.uuid.to_string(),
                holder: h.container.clone(),
                since: utc(h.since),
                asked: asked.name(),
            });
        }
    }
    Ok(LeaseFile {
        version: LEASE_VERSION,
        holder: me.clone(),
        gpus: gpus
            .iter()
            .map(|g| LeasedGpu {
                index: g.index,
                uuid: g.uuid.to_string(),
            })
            .collect(),
    })
}

/// Whether `file` is `me`'s own: the same container and process, so that giving the
/// lease back removes it.
pub fn is_own(file: &LeaseFile, me: &Holder) -> bool {
    file.holder.container == me.container && file.holder.same_process(me)
}

/// `secs` after the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests;
