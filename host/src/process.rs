//! What `/proc/<pid>/stat` says of a process: its state and start time, which with the
//! pid name one process for good (a pid is reused, a pid with its start time is not).

use std::io::Read;

use libnvc::lease::{parse_proc_stat, ProcStat};

/// A stat line is about 300 bytes (the command name is at most 64): room for it in one
/// read(2), and a second that finds the end.
const ROOM: usize = 1024;

/// What `/proc/<pid>/stat` says, or `None` when there is no such process.
pub fn stat(pid: i32) -> Option<ProcStat> {
    if pid <= 0 {
        return None;
    }
    let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut bytes = Vec::with_capacity(ROOM);
    file.take(libnvc::probe::MAX_TEXT as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    parse_proc_stat(std::str::from_utf8(&bytes).ok()?)
}

/// The start time of process `pid` (clock ticks since boot), or `None` if it is gone or
/// a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid)
        .filter(|s| !matches!(s.state, 'Z' | 'X' | 'x'))
        .map(|s| s.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_no_process() {
        let me = stat(std::process::id() as i32).unwrap();
        assert!(matches!(me.state, 'R' | 'S'), "{me:?}");
        assert!(me.start_time > 0);
        assert_eq!(start_time(std::process::id() as i32), Some(me.start_time));
        assert_eq!(stat(0), None);
        assert_eq!(stat(-1), None);
        // Above pid_max (at most 2^22): never a process.
        assert_eq!(stat(1 << 23), None);
    }
}
