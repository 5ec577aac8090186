//! The two sections the runtime shim needs to pass on a container that cannot ask for a
//! GPU (`[runtime]`, `[log]`), read without parsing the whole file: every container on
//! a node pays for that read.
//!
//! [`scan`] reads a plain subset of TOML: `[table]` headers, `key = value` lines with
//! bare keys, strings without escapes, one-line arrays of them, comments. Whatever is
//! outside that subset (multi-line strings or arrays, dotted or quoted keys, inline
//! tables, a table or key given twice, an unknown key of the two sections) makes it
//! give up, and the caller parses the file in full. When it answers, the full parse of
//! a valid file gives the same two sections.

use super::{LogConfig, LogLevel, RuntimeConfig};

/// `[runtime]` and `[log]` of a configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShimKeys {
    /// `[runtime]`.
    pub runtime: RuntimeConfig,
    /// `[log]`.
    pub log: LogConfig,
}

/// `[runtime]` and `[log]` of `text`, or `None` where it is not plain enough to tell
/// without a full parse.
pub fn scan(text: &str) -> Option<ShimKeys> {
    let mut keys = ShimKeys::default();
    let mut tables: Vec<&str> = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    if text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    for line in text.lines() {
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let (name, after) = rest.split_once(']')?;
            let name = name.trim_matches([' ', '\t']);
            if !is_bare_key(name) || !is_comment(after) || tables.contains(&name) {
                return None;
            }
            tables.push(name);
            continue;
        }
        let table = *tables.last()?;
        let (key, value) = line.split_once('=')?;
        let key = key.trim_matches([' ', '\t']);
        if !is_bare_key(key) || seen.contains(&(table, key)) {
            return None;
        }
        seen.push((table, key));
        let value = value.trim_start_matches([' ', '\t']);
        match (table, key) {
            ("runtime", "runtimes") => {
                let (items, rest) = string_array(value)?;
                is_comment(rest).then_some(())?;
                keys.runtime.runtimes = items;
            }
            ("log", "file") => {
                let (file, rest) = string(value)?;
                is_comment(rest).then_some(())?;
                keys.log.file = file.into();
            }
            ("log", "level") => {
                let (level, rest) = string(value)?;
                is_comment(rest).then_some(())?;
                keys.log.level = match level.as_str() {
                    "error" => LogLevel::Error,
                    "warn" => LogLevel::Warn,
                    "info" => LogLevel::Info,
                    "debug" => LogLevel::Debug,
                    "trace" => LogLevel::Trace,
                    _ => return None,
                };
            }
            // Another key of the two sections is an error of the full parse.
            ("runtime" | "log", _) => return None,
            // Another section's value: one line, or given up on. A value that goes on
            // to the next lines (an array) makes those lines no `key = value`.
            _ => {}
        }
    }
    Some(keys)
}

/// A bare TOML key: ASCII letters, digits, `-` and `_`.
fn is_bare_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `rest` of a line is only blanks and a comment.
fn is_comment(rest: &str) -> bool {
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.is_empty() || rest.starts_with('#')
}

/// A basic string without escapes or a literal string at the start of `value`, and
/// what follows it.
fn string(value: &str) -> Option<(String, &str)> {
    let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &value[1..];
    let end = body.find(quote)?;
    let s = &body[..end];
    if s.contains('\\') || s.chars().any(|c| c.is_control() && c != '\t') {
        return None;
    }
    Some((s.to_string(), &body[end + 1..]))
}

/// A one-line array of strings at the start of `value`, and what follows it.
fn string_array(value: &str) -> Option<(Vec<String>, &str)> {
    let mut rest = value.strip_prefix('[')?;
    let mut items = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(']') {
            return Some((items, after));
        }
        let (item, after) = string(rest)?;
        items.push(item);
        rest = after.trim_start_matches([' ', '\t']);
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None => rest.starts_with(']').then_some(())?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, DEFAULT_TOML};
    use std::path::Path;

    /// `scan` gives up, or agrees with the full parse.
    fn agrees(text: &str) -> Option<ShimKeys> {
        let scanned = scan(text);
        if let Some(keys) = &scanned {
            let full = Config::parse(text, Path::new("x")).unwrap();
            assert_eq!(keys.runtime, full.runtime, "{text}");
            assert_eq!(keys.log, full.log, "{text}");
        }
        scanned
    }

    #[test]
    fn the_shipped_file_and_plain_edits_are_read() {
        assert_eq!(agrees(DEFAULT_TOML), Some(ShimKeys::default()));
        assert_eq!(agrees(""), Some(ShimKeys::default()));
        let edits = [
            (
                "runtimes = [\"runc\", \"crun\"]",
                "runtimes = [\"/usr/bin/crun\"]",
            ),
            (
                "runtimes = [\"runc\", \"crun\"]",
                "runtimes = ['/opt/x y/runc', \"a#b\",]  # c",
            ),
            ("runtimes = [\"runc\", \"crun\"]", "runtimes=[]"),
            (
                "runtimes = [\"runc\", \"crun\"]",
                "\t runtimes = [ \"runc\" , \"crun\" ] ",
            ),
            ("file = \"/var/log/nvc.log\"", "file = ''"),
            (
                "file = \"/var/log/nvc.log\"",
                "file = \"/tmp/n#vc.log\" # here",
            ),
            ("level = \"info\"", "level = 'trace'"),
            ("[runtime]", "[ runtime ]  # the runtime"),
        ];
        for (from, to) in edits {
            assert!(DEFAULT_TOML.contains(from), "{from}");
            let text = DEFAULT_TOML.replace(from, to);
            assert!(agrees(&text).is_some(), "{text}");
        }
        let crlf = DEFAULT_TOML.replace('\n', "\r\n");
        assert_eq!(agrees(&crlf), Some(ShimKeys::default()));
        // Sections in another order, other sections' multi-line arrays after ours.
        let text = "[log]\nlevel = \"debug\"\n[runtime]\nruntimes = [\"crun\"]\n";
        let keys = agrees(text).unwrap();
        assert_eq!(keys.runtime.runtimes, ["crun"]);
        assert_eq!(keys.log.level, LogLevel::Debug);
    }

    #[test]
    fn what_is_not_plain_is_left_to_the_full_parse() {
        let runtimes = "runtimes = [\"runc\", \"crun\"]";
        for (from, to) in [
            (runtimes, "runtimes = [\n  \"crun\",\n]"),
            (runtimes, "runtimes = [\"cr\\u0075n\"]"),
            (runtimes, "\"runtimes\" = [\"crun\"]"),
            (runtimes, "runtimes = [\"crun\"] x"),
            (runtimes, "runtimes = [\"crun\"]\nruntimes = [\"runc\"]"),
            (runtimes, "runtimes = \"crun\""),
            (runtimes, "runtimes = [1]"),
            (runtimes, "runtime = [\"crun\"]"),
            ("[runtime]", "[runtime.x]"),
            ("[runtime]", "[[runtime]]"),
            ("[log]", "[runtime]"),
            ("level = \"info\"", "level = \"loud\""),
            ("level = \"info\"", "level = \"\"\"info\"\"\""),
            (
                "[driver]",
                "[driver]\nroot = '''\n[runtime]\nruntimes = [\"x\"]\n'''",
            ),
            ("[driver]", "[driver]\nroot = \"/\"\nroot = \"/x\""),
        ] {
            assert!(DEFAULT_TOML.contains(from), "{from}");
            let text = DEFAULT_TOML.replacen(from, to, 1);
            assert_eq!(scan(&text), None, "{text}");
        }
        for text in [
            "runtime = { runtimes = [\"crun\"] }\n",
            "runtime.runtimes = [\"crun\"]\n",
            "[supported]\ncapabilities = [\n\"a\",\n]\n",
        ] {
            assert_eq!(scan(text), None, "{text}");
        }
    }
}
