//! Logging to the configured file (`[log]` in the config). The binaries call [`init`]
//! once at start; a log file that cannot be opened turns logging off rather than
//! failing the container.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use nvc_config::{LogConfig, LogLevel};

struct FileLogger {
    program: &'static str,
    file: Mutex<File>,
    level: log::LevelFilter,
}

impl log::Log for FileLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let line = format!(
            "{}.{:06} {} [{}] {}: {}\n",
            now.as_secs(),
            now.subsec_micros(),
            self.program,
            std::process::id(),
            record.level(),
            record.args()
        );
        if let Ok(mut f) = self.file.lock() {
            // One write per line, so concurrent processes appending to the same file
            // do not interleave inside a line.
            let _ = f.write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

fn level_filter(level: LogLevel) -> log::LevelFilter {
    match level {
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
        LogLevel::Trace => log::LevelFilter::Trace,
    }
}

/// Sends `log` records of `program` to the configured file. Returns whether logging
/// is on.
pub fn init(config: &LogConfig, program: &'static str) -> bool {
    if config.file.as_os_str().is_empty() {
        return false;
    }
    let Ok(file) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&config.file)
    else {
        return false;
    };
    let level = level_filter(config.level);
    let logger = FileLogger {
        program,
        file: Mutex::new(file),
        level,
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(level);
        true
    } else {
        false
    }
}

/// The longest error message [`shorten`] lets through, in bytes: room for every path and
/// value a real message names.
pub const MAX_MESSAGE: usize = 4096;

/// `message` cut to about [`MAX_MESSAGE`] bytes, keeping its start and end and saying how
/// much was left out. A container's environment can hold values of megabytes; a message
/// quoting one whole would flood the runtime's log and the user's terminal.
pub fn shorten(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_MESSAGE {
        return message.into();
    }
    let head = floor_char_boundary(message, MAX_MESSAGE * 3 / 4);
    let tail = ceil_char_boundary(message, message.len() - MAX_MESSAGE / 4);
    format!(
        "{} [... {} bytes left out ...] {}",
        &message[..head],
        tail - head,
        &message[tail..]
    )
    .into()
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_messages_are_kept() {
        assert_eq!(shorten("cannot open /x"), "cannot open /x");
        let exact = "a".repeat(MAX_MESSAGE);
        assert_eq!(shorten(&exact), exact);
    }

    #[test]
    fn long_messages_keep_both_ends() {
        let value = "é".repeat(1 << 20);
        let message = format!("NVIDIA_VISIBLE_DEVICES: unknown device \"{value}\" (expected)");
        let short = shorten(&message);
        assert!(short.len() < MAX_MESSAGE + 100, "{}", short.len());
        assert!(short.starts_with("NVIDIA_VISIBLE_DEVICES: unknown device \"éé"));
        assert!(short.ends_with("éé\" (expected)"));
        let left_out: usize = short
            .split("[... ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let kept = short.len() - " [... ".len() - " bytes left out ...] ".len();
        assert_eq!(kept - left_out.to_string().len() + left_out, message.len());
    }
}
