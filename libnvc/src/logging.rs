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
