//! Reporting a failure where runc's callers look: stderr, runc's own `--log` file in its
//! `--log-format` (containerd and Docker read the last error from it), and nvc's log.
//! Never stdout: it belongs to runc and its caller.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use libnvc::oci::runc_args::{LogFormat, RuncArgs};
use libnvc::report::error_chain;

use crate::error::ShimError;

/// Reports `error` everywhere it belongs.
pub fn error(error: &ShimError, runc: &RuncArgs) {
    let chain = error_chain(error);
    let chain = libnvc::report::shorten(&chain);
    let message = format!("nvc-runtime: {chain}");
    eprintln!("{message}");
    log::error!("{chain}");
    if let Some(path) = &runc.log {
        let line = runc_log_line(runc.log_format, &message, SystemTime::now());
        append(path, &line);
    }
}

fn append(path: &Path, line: &str) {
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        log::warn!("cannot append to runc's log {}: {e}", path.display());
    }
}

/// One error line as runc's logrus writes it, newline included.
pub fn runc_log_line(format: LogFormat, message: &str, time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let time = rfc3339_utc(secs);
    match format {
        LogFormat::Text => format!(
            "time={} level=error msg={}\n",
            go_quote(&time),
            go_quote(message)
        ),
        LogFormat::Json => {
            let object = serde_json::json!({"level": "error", "msg": message, "time": time});
            format!("{object}\n")
        }
    }
}

/// `secs` after the epoch as `2006-01-02T15:04:05Z`.
fn rfc3339_utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm,
/// for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// `s` quoted as Go's `%q` quotes it, which logrus' text format uses.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_795_296_600), "2026-11-21T21:30:00Z");
        assert_eq!(rfc3339_utc(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339_utc(4_107_542_400), "2100-03-01T00:00:00Z");
    }

    #[test]
    fn quoting() {
        assert_eq!(
            go_quote("a \"b\" \\ c\nd\te\u{1}é"),
            r#""a \"b\" \\ c\nd\te\x01é""#
        );
    }

    #[test]
    fn lines() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_296_600);
        assert_eq!(
            runc_log_line(LogFormat::Text, "nvc-runtime: no \"x\"", t),
            "time=\"2026-11-21T21:30:00Z\" level=error msg=\"nvc-runtime: no \\\"x\\\"\"\n"
        );
        assert_eq!(
            runc_log_line(LogFormat::Json, "nvc-runtime: no \"x\"", t),
            "{\"level\":\"error\",\"msg\":\"nvc-runtime: no \\\"x\\\"\",\"time\":\"2026-11-21T21:30:00Z\"}\n"
        );
    }
}
