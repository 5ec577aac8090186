//! GPU leases, the pure part: which running container holds which GPU, shared or
//! exclusively, and whether a new container may take it.
//!
//! A lease file is named after its GPU's UUID and holds JSON ([`LeaseFile`]): the GPU and
//! its holders, each with the container id, the host pid of its init process and that
//! process's start time (field 22 of `/proc/<pid>/stat`), when it took the GPU, and
//! whether exclusively. A holder whose process is gone, a zombie, or another process with
//! the same pid (another start time) is stale ([`liveness`]) and ignored. nvc-host's
//! `leases` module does the file work under a lock; [`claim`] decides.

use serde::{Deserialize, Serialize};

use crate::request::ExclusiveBy;

/// The version of the lease file format.
pub const LEASE_VERSION: u32 = 1;
/// The largest lease file read; a larger one is garbage.
pub const MAX_LEASE_BYTES: u64 = 64 * 1024;
/// The most holders a lease file may list.
pub const MAX_HOLDERS: usize = 256;
/// The lock file in the lease folder, taken around every check-and-take.
pub const LOCK_FILE: &str = ".lock";
/// The longest container id recorded.
pub const MAX_CONTAINER_ID: usize = 1024;

/// One GPU's lease file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFile {
    /// [`LEASE_VERSION`].
    pub version: u32,
    /// The GPU's UUID (also the file's name).
    pub gpu: String,
    /// The GPU's index when the lease was taken, for messages.
    pub index: u32,
    /// The containers that hold it.
    pub holders: Vec<Holder>,
}

/// A container that holds a GPU.
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

/// Why a lease file is garbage (it is then replaced).
#[derive(Debug, thiserror::Error)]
pub enum LeaseFileError {
    /// Not the JSON of a lease file.
    #[error("not a lease file")]
    Json(#[source] serde_json::Error),
    /// Another format version.
    #[error("lease file version {0}, expected {LEASE_VERSION}")]
    Version(u32),
    /// The file names another GPU than its name.
    #[error("names GPU {found:?}, not the GPU of its file name")]
    WrongGpu {
        /// The GPU in the file.
        found: String,
    },
    /// A holder that cannot be one.
    #[error("holder {index} is invalid (container id, pid or start time)")]
    BadHolder {
        /// Its place in the list.
        index: usize,
    },
    /// More holders than [`MAX_HOLDERS`].
    #[error("lists {0} holders, more than {MAX_HOLDERS}")]
    TooManyHolders(usize),
}

/// Reads the lease file of the GPU `uuid`, checking what it says.
pub fn parse(bytes: &[u8], uuid: &str) -> Result<LeaseFile, LeaseFileError> {
    let file: LeaseFile = serde_json::from_slice(bytes).map_err(LeaseFileError::Json)?;
    if file.version != LEASE_VERSION {
        return Err(LeaseFileError::Version(file.version));
    }
    if file.gpu != uuid {
        return Err(LeaseFileError::WrongGpu { found: file.gpu });
    }
    if file.holders.len() > MAX_HOLDERS {
        return Err(LeaseFileError::TooManyHolders(file.holders.len()));
    }
    if let Some(index) = file
        .holders
        .iter()
        .position(|h| !valid_container_id(&h.container) || h.pid <= 0 || h.start_time == 0)
    {
        return Err(LeaseFileError::BadHolder { index });
    }
    Ok(file)
}

/// The bytes of a lease file.
pub fn render(file: &LeaseFile) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
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

/// Whether a GPU UUID can name a lease file: letters, digits and `-`, not empty, not
/// starting with `-`, at most 128 bytes.
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

/// The lease file of `gpu` once `me` holds it, from the `existing` one; `live` tells
/// which holders still run. Stale holders, and earlier entries of the same container or
/// process, are dropped. Refused when a live holder has it exclusively, or when `me`
/// asks for it exclusively and a live holder uses it.
pub fn claim(
    existing: Option<LeaseFile>,
    gpu: GpuRef,
    me: &Holder,
    live: impl Fn(&Holder) -> bool,
) -> Result<LeaseFile, Conflict> {
    let mut holders: Vec<Holder> = existing
        .map(|f| f.holders)
        .unwrap_or_default()
        .into_iter()
        .filter(|h| {
            h.container != me.container
                && !(h.pid == me.pid && h.start_time == me.start_time)
                && live(h)
        })
        .collect();
    if let Some((h, by)) = holders.iter().find_map(|h| h.exclusive.map(|by| (h, by))) {
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
    holders.push(me.clone());
    Ok(LeaseFile {
        version: LEASE_VERSION,
        gpu: gpu.uuid.to_string(),
        index: gpu.index,
        holders,
    })
}

/// `file` without `me` (the same container and process); `None` when no holder is left.
pub fn release(file: LeaseFile, me: &Holder) -> Option<LeaseFile> {
    let holders: Vec<Holder> = file
        .holders
        .into_iter()
        .filter(|h| !(h.container == me.container && h.pid == me.pid))
        .collect();
    if holders.is_empty() {
        return None;
    }
    Some(LeaseFile { holders, ..file })
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
