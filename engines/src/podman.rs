//! Podman (and CRI-O without the shim): an OCI hooks.d file,
//! `/usr/share/containers/oci/hooks.d/oci-nvc-hook.json`.
//!
//! ```json
//! {
//!   "version": "1.0.0",
//!   "hook": {"path": "/usr/bin/nvc-hook", "args": ["nvc-hook", "prestart"], "env": ["PATH=..."],
//!            "timeout": 32},
//!   "when": {"always": true},
//!   "stages": ["prestart", "poststop"]
//! }
//! ```
//!
//! At `poststop` the runtime runs the same command with the state's status `stopped`:
//! `nvc-hook` then takes away what it made in the rootfs at `prestart`.
//!
//! `always`, like NVIDIA's own hook file: podman's `annotations` condition would miss
//! containers that ask for GPUs through their environment, and `nvc-hook` returns at
//! once for a container whose environment asks for no GPU. The hook object is an OCI
//! hook: its `timeout` (seconds) makes the runtime kill a hook its own deadline
//! (`hook.timeout` in the nvc config) did not end.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// The hook's PATH: where it finds ldconfig.
pub const HOOK_PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the hook file says.
#[derive(Debug, Clone, Copy)]
pub struct PodmanOptions<'a> {
    /// `nvc-hook`'s path.
    pub hook_path: &'a str,
    /// The hook's `timeout`, in seconds: the nvc config's `hook.timeout` plus the grace
    /// the runtime gives it (`HookConfig::runtime_timeout`).
    pub timeout: u32,
}

/// Why the hook file cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    /// The file is not JSON (serde_json's message names the line and column).
    #[error("not valid JSON")]
    Parse(#[source] serde_json::Error),
    /// A value that must be an object is not.
    #[error("{what} is not a JSON object")]
    NotAnObject {
        /// Which value.
        what: &'static str,
    },
    /// Serializing the result failed.
    #[error("cannot serialize the hook file")]
    Serialize(#[source] serde_json::Error),
}

/// The hook file. An existing one (`existing` non-empty) keeps keys nvc does not set,
/// and comes back byte for byte when it already says what nvc would write.
pub fn configure(existing: &str, opts: &PodmanOptions<'_>) -> Result<String, PodmanError> {
    let mut root = parse(existing)?;
    let before = root.clone();
    root.insert("version".into(), json!("1.0.0"));
    let hook = match root.entry("hook").or_insert_with(|| json!({})) {
        Value::Object(h) => h,
        _ => return Err(PodmanError::NotAnObject { what: "`hook`" }),
    };
    hook.insert("path".into(), json!(opts.hook_path));
    hook.insert("args".into(), json!(["nvc-hook", "prestart"]));
    hook.entry("env").or_insert_with(|| json!([HOOK_PATH_ENV]));
    // Set, not kept: a shorter one would kill the hook before its own deadline ends it
    // with a message.
    hook.insert("timeout".into(), json!(opts.timeout));
    root.insert("when".into(), json!({"always": true}));
    root.insert("stages".into(), json!(["prestart", "poststop"]));
    if root == before {
        return Ok(existing.to_string());
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(b"  "),
    );
    Value::Object(root)
        .serialize(&mut ser)
        .map_err(PodmanError::Serialize)?;
    out.push(b'\n');
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Whether `existing` is a hook file running `hook_path` (one nvc wrote, safe to remove).
pub fn runs_hook(existing: &str, hook_path: &str) -> bool {
    parse(existing)
        .ok()
        .and_then(|r| {
            r.get("hook")
                .and_then(|h| h.get("path"))
                .and_then(Value::as_str)
                .map(|p| p == hook_path)
        })
        .unwrap_or(false)
}

fn parse(text: &str) -> Result<Map<String, Value>, PodmanError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str(text).map_err(PodmanError::Parse)? {
        Value::Object(m) => Ok(m),
        _ => Err(PodmanError::NotAnObject {
            what: "the top level",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::report::error_chain;

    const OPTS: PodmanOptions<'static> = PodmanOptions {
        hook_path: "/usr/bin/nvc-hook",
        timeout: 32,
    };

    #[test]
    fn new_file() {
        let out = configure("", &OPTS).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({
                "version": "1.0.0",
                "hook": {"path": "/usr/bin/nvc-hook", "args": ["nvc-hook", "prestart"], "env": [HOOK_PATH_ENV], "timeout": 32},
                "when": {"always": true},
                "stages": ["prestart", "poststop"]
            })
        );
        assert_eq!(configure(&out, &OPTS).unwrap(), out);
        assert!(runs_hook(&out, "/usr/bin/nvc-hook"));
        assert!(!runs_hook(&out, "/usr/local/bin/nvc-hook"));
    }

    #[test]
    fn an_existing_file_is_updated_keeping_extra_keys() {
        let old = r#"{"version": "1.0.0", "hook": {"path": "/opt/nvc-hook", "args": ["x"], "env": ["PATH=/opt/bin"], "timeout": 10},
                      "when": {"annotations": {"^a$": ".*"}}, "stages": ["createRuntime"]}"#;
        let out = configure(old, &OPTS).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hook"]["path"], "/usr/bin/nvc-hook");
        assert_eq!(v["hook"]["args"], json!(["nvc-hook", "prestart"]));
        assert_eq!(v["hook"]["env"], json!(["PATH=/opt/bin"]));
        assert_eq!(v["hook"]["timeout"], 32);
        assert_eq!(v["when"], json!({"always": true}));
        assert_eq!(v["stages"], json!(["prestart", "poststop"]));
    }

    #[test]
    fn a_file_without_timeout_gets_one() {
        // What nvc wrote before hooks had a deadline.
        let old = r#"{"version": "1.0.0", "hook": {"path": "/usr/bin/nvc-hook", "args": ["nvc-hook", "prestart"], "env": ["PATH=/bin"]},
                      "when": {"always": true}, "stages": ["prestart"]}"#;
        let out = configure(old, &OPTS).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hook"]["timeout"], 32);
        assert_eq!(v["hook"]["env"], json!(["PATH=/bin"]));
        let longer = PodmanOptions {
            timeout: 122,
            ..OPTS
        };
        let out = configure(&out, &longer).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hook"]["timeout"], 122);
        assert!(runs_hook(&out, "/usr/bin/nvc-hook"));
    }

    #[test]
    fn malformed_files_are_refused() {
        for (input, want) in [
            (
                "{\"hook\": {},}",
                "not valid JSON: trailing comma at line 1 column 13",
            ),
            ("{\"hook\": []}", "`hook` is not a JSON object"),
            ("\"x\"", "the top level is not a JSON object"),
        ] {
            assert_eq!(error_chain(&configure(input, &OPTS).unwrap_err()), want);
        }
    }
}
