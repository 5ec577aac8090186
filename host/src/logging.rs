//! Logging to the configured file (`[log]` in the config). The binaries call [`init`]
//! (or [`init_lazy`]) once at start; a log file that cannot be opened turns logging off
//! rather than failing the container.
//!
//! Messages quote what images and their users control (variables, annotations, paths
//! in the rootfs): every line written (the file logger's, and whatever goes through
//! `libnvc::report::shorten` to stderr or runc's log) is one line without control characters, so a
//! value can neither forge another log line nor send escape codes to a terminal.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use nvc_config::{LogConfig, LogLevel};

/// The logger [`init`] installs: one line per record, appended to the configured file.
struct FileLogger {
    program: &'static str,
    sink: Mutex<Sink>,
    level: log::LevelFilter,
}

/// Where a [`FileLogger`]'s lines go.
enum Sink {
    /// Not opened yet ([`init_lazy`]): opened at the first record.
    Unopened(PathBuf),
    /// The open log file.
    Open(File),
    /// The file could not be opened: records are dropped.
    Failed,
}

impl Sink {
    /// The open file, opening it first if it was not.
    fn file(&mut self) -> Option<&mut File> {
        if let Sink::Unopened(path) = self {
            *self = open(path).map_or(Sink::Failed, Sink::Open);
        }
        match self {
            Sink::Open(file) => Some(file),
            _ => None,
        }
    }
}

/// Opens the log file for appending, creating it.
fn open(path: &Path) -> Option<File> {
    OpenOptions::new().create(true).append(true).open(path).ok()
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
        if let Ok(mut sink) = self.sink.lock() {
            if let Some(f) = sink.file() {
                // One write per line, so concurrent processes appending to the same
                // file do not interleave inside a line.
                let _ = f.write_all(line.as_bytes());
            }
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

/// Sends `log` records of `program` to the configured file, opened now. Returns
/// whether logging is on.
pub fn init(config: &LogConfig, program: &'static str) -> bool {
    if config.file.as_os_str().is_empty() {
        return false;
    }
    let Some(file) = open(&config.file) else {
        return false;
    };
    install(config, program, Sink::Open(file))
}

/// Sends `log` records of `program` to the configured file, opened at the first record
/// that is written: a run that logs nothing (the runtime shim for most containers)
/// neither opens nor creates it. A file that cannot be opened then drops the records.
/// Returns whether a logger was installed.
///
/// Only for a process that stays in the mount namespace and root it started in, so
/// that the file opened late is the one configured.
pub fn init_lazy(config: &LogConfig, program: &'static str) -> bool {
    if config.file.as_os_str().is_empty() {
        return false;
    }
    install(config, program, Sink::Unopened(config.file.clone()))
}

fn install(config: &LogConfig, program: &'static str, sink: Sink) -> bool {
    let level = level_filter(config.level);
    let logger = FileLogger {
        program,
        sink: Mutex::new(sink),
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
            sink: Mutex::new(Sink::Open(File::create(&path).unwrap())),
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

    #[test]
    fn a_lazy_logger_opens_its_file_at_the_first_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvc.log");
        let logger = FileLogger {
            program: "nvc-test",
            sink: Mutex::new(Sink::Unopened(path.clone())),
            level: log::LevelFilter::Info,
        };
        let record = |level, text: &str| {
            log::Log::log(
                &logger,
                &log::Record::builder()
                    .level(level)
                    .args(format_args!("{text}"))
                    .build(),
            )
        };
        // A record below the level opens nothing.
        record(log::Level::Debug, "skipped");
        assert!(!path.exists());
        record(log::Level::Info, "first");
        record(log::Level::Warn, "second");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text:?}");
        assert!(text.contains(" INFO: first\n"), "{text:?}");

        // A file that cannot be opened drops the records, once tried.
        let logger = FileLogger {
            program: "nvc-test",
            sink: Mutex::new(Sink::Unopened(dir.path().join("no/such/dir/nvc.log"))),
            level: log::LevelFilter::Info,
        };
        log::Log::log(
            &logger,
            &log::Record::builder()
                .level(log::Level::Error)
                .args(format_args!("lost"))
                .build(),
        );
        assert!(matches!(*logger.sink.lock().unwrap(), Sink::Failed));
    }
}
