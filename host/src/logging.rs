//! Logging to the configured file (`[log]` in the config). The binaries call [`init`]
//! once at start; a log file that cannot be opened turns logging off rather than
//! failing the container.
//!
//! Messages quote what images and their users control (variables, annotations, paths
//! in the rootfs): every line written (the file logger's, and whatever goes through
//! `libnvc::report::shorten` to stderr or runc's log) is one line without control characters, so a
//! value can neither forge another log line nor send escape codes to a terminal.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use nvc_config::{LogConfig, LogLevel};

/// The logger [`init`] installs: one line per record, appended to the configured file.
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
        let message = record.args().to_string();
        let line = format!(
            "{}.{:06} {} [{}] {}: {}\n",
            now.as_secs(),
            now.subsec_micros(),
            self.program,
            std::process::id(),
            record.level(),
            libnvc::report::shorten(&message)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_records_are_one_escaped_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvc.log");
        let logger = FileLogger {
            program: "nvc-test",
            file: Mutex::new(File::create(&path).unwrap()),
            level: log::LevelFilter::Info,
        };
        let value = "0\nforged 1 nvc-hook [1] ERROR: x\u{1b}]0;title\u{7}";
        log::Log::log(
            &logger,
            &log::Record::builder()
                .level(log::Level::Warn)
                .args(format_args!("ignoring NVIDIA_VISIBLE_DEVICES={value}"))
                .build(),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(
            text.ends_with(
                " WARN: ignoring NVIDIA_VISIBLE_DEVICES=0\\nforged 1 nvc-hook [1] ERROR: \
                 x\\u{1b}]0;title\\u{7}\n"
            ),
            "{text:?}"
        );
    }
}
