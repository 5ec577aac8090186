//! Docker: `/etc/docker/daemon.json`.
//!
//! nvc adds `"runtimes": {"<name>": {"path": "<runtime path>", "args": []}}`, and on
//! request `"default-runtime"` and `"features": {"cdi": true}`. Every other key stays,
//! in its order; the file keeps its indentation. (`args` is what NVIDIA's toolkit
//! writes; dockerd itself reads `runtimeArgs`, which an existing entry keeps.)

use serde::Serialize;
use serde_json::{Map, Value};

/// What to put into daemon.json.
#[derive(Debug, Clone, Copy)]
pub struct DockerOptions<'a> {
    /// The runtime's name in `runtimes` (`docker run --runtime <name>`).
    pub runtime_name: &'a str,
    /// The shim's path, e.g. `/usr/bin/nvc-runtime`.
    pub runtime_path: &'a str,
    /// Also make it `default-runtime`.
    pub set_as_default: bool,
    /// Also set `features.cdi = true` (`docker run --device nvidia.com/gpu=all`).
    pub cdi: bool,
}

/// Why daemon.json cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The file is not JSON (serde_json's message names the line and column).
    #[error("not valid JSON")]
    Parse(#[source] serde_json::Error),
    /// A value nvc must add keys to is not a JSON object.
    #[error("{what} is {found}, expected a JSON object")]
    NotAnObject {
        /// Which value, e.g. "`runtimes`".
        what: String,
        /// What it is instead, e.g. "an array".
        found: &'static str,
    },
    /// Serializing the result failed.
    #[error("cannot serialize daemon.json")]
    Serialize(#[source] serde_json::Error),
}

/// Returns daemon.json with the nvc runtime registered. When nothing needs to change,
/// returns `input` itself, byte for byte. An empty `input` is an empty config.
pub fn configure(input: &str, opts: &DockerOptions<'_>) -> Result<String, DockerError> {
    let mut root = parse(input)?;
    let before = root.clone();
    let runtimes = object_at(&mut root, "runtimes", "`runtimes`")?;
    match runtimes.get_mut(opts.runtime_name) {
        Some(Value::Object(entry)) => {
            entry.insert("path".into(), opts.runtime_path.into());
            entry
                .entry("args")
                .or_insert_with(|| Value::Array(Vec::new()));
        }
        Some(other) => {
            return Err(DockerError::NotAnObject {
                what: format!("`runtimes.{}`", opts.runtime_name),
                found: kind(other),
            })
        }
        None => {
            let mut entry = Map::new();
            entry.insert("path".into(), opts.runtime_path.into());
            entry.insert("args".into(), Value::Array(Vec::new()));
            runtimes.insert(opts.runtime_name.into(), Value::Object(entry));
        }
    }
    if opts.set_as_default {
        root.insert("default-runtime".into(), opts.runtime_name.into());
    }
    if opts.cdi {
        object_at(&mut root, "features", "`features`")?.insert("cdi".into(), Value::Bool(true));
    }
    finish(input, &before, root)
}

/// Returns daemon.json without the runtime `runtime_name` (and without `runtimes` if that
/// leaves it empty), and without `default-runtime` if it names it. `features.cdi` stays:
/// nvc cannot tell whether someone else wanted it.
pub fn unconfigure(input: &str, runtime_name: &str) -> Result<String, DockerError> {
    let mut root = parse(input)?;
    let before = root.clone();
    if let Some(Value::Object(runtimes)) = root.get_mut("runtimes") {
        runtimes.shift_remove(runtime_name);
        if runtimes.is_empty() {
            root.shift_remove("runtimes");
        }
    }
    if root.get("default-runtime").and_then(Value::as_str) == Some(runtime_name) {
        root.shift_remove("default-runtime");
    }
    finish(input, &before, root)
}

fn parse(input: &str) -> Result<Map<String, Value>, DockerError> {
    if input.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str(input).map_err(DockerError::Parse)? {
        Value::Object(map) => Ok(map),
        other => Err(DockerError::NotAnObject {
            what: "the top level".into(),
            found: kind(&other),
        }),
    }
}

/// The object at `root[key]`, created empty when missing.
fn object_at<'a>(
    root: &'a mut Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<&'a mut Map<String, Value>, DockerError> {
    match root.entry(key).or_insert_with(|| Value::Object(Map::new())) {
        Value::Object(map) => Ok(map),
        other => Err(DockerError::NotAnObject {
            what: what.into(),
            found: kind(other),
        }),
    }
}

fn finish(
    input: &str,
    before: &Map<String, Value>,
    after: Map<String, Value>,
) -> Result<String, DockerError> {
    if *before == after && !input.trim().is_empty() {
        return Ok(input.to_string());
    }
    let indent = detect_indent(input);
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    Value::Object(after)
        .serialize(&mut ser)
        .map_err(DockerError::Serialize)?;
    out.push(b'\n');
    // serde_json writes UTF-8 only.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The indentation the file uses (that of its first indented line); two spaces if none.
fn detect_indent(input: &str) -> String {
    input
        .lines()
        .find_map(|line| {
            let body = line.trim_start_matches([' ', '\t']);
            (body.len() < line.len() && !body.is_empty())
                .then(|| line[..line.len() - body.len()].to_string())
        })
        .unwrap_or_else(|| "  ".to_string())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libnvc::report::error_chain;

    const NV: DockerOptions<'static> = DockerOptions {
        runtime_name: "nv",
        runtime_path: "/usr/bin/nvc-runtime",
        set_as_default: false,
        cdi: false,
    };

    fn value(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            input: &'static str,
            opts: DockerOptions<'static>,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "empty file",
                input: "",
                opts: NV,
                want: r#"{"runtimes": {"nv": {"path": "/usr/bin/nvc-runtime", "args": []}}}"#,
            },
            Case {
                name: "other runtimes, mirrors and log options stay",
                input: r#"{
                    "registry-mirrors": ["https://mirror.example.com"],
                    "log-driver": "json-file",
                    "log-opts": {"max-size": "10m", "max-file": "3"},
                    "runtimes": {"crun": {"path": "/usr/bin/crun", "runtimeArgs": ["--debug"]}}
                }"#,
                opts: NV,
                want: r#"{
                    "registry-mirrors": ["https://mirror.example.com"],
                    "log-driver": "json-file",
                    "log-opts": {"max-size": "10m", "max-file": "3"},
                    "runtimes": {
                        "crun": {"path": "/usr/bin/crun", "runtimeArgs": ["--debug"]},
                        "nv": {"path": "/usr/bin/nvc-runtime", "args": []}
                    }
                }"#,
            },
            Case {
                name: "an existing nv runtime is updated, not duplicated, and keeps its args",
                input: r#"{"runtimes": {"nv": {"path": "/opt/old/nvc-runtime", "runtimeArgs": ["--x"]}}}"#,
                opts: NV,
                want: r#"{"runtimes": {"nv": {"path": "/usr/bin/nvc-runtime", "runtimeArgs": ["--x"], "args": []}}}"#,
            },
            Case {
                name: "set as default",
                input: r#"{"default-runtime": "runc", "debug": true}"#,
                opts: DockerOptions {
                    set_as_default: true,
                    ..NV
                },
                want: r#"{"default-runtime": "nv", "debug": true,
                          "runtimes": {"nv": {"path": "/usr/bin/nvc-runtime", "args": []}}}"#,
            },
            Case {
                name: "cdi keeps other features",
                input: r#"{"features": {"buildkit": true, "containerd-snapshotter": false}}"#,
                opts: DockerOptions { cdi: true, ..NV },
                want: r#"{"features": {"buildkit": true, "containerd-snapshotter": false, "cdi": true},
                          "runtimes": {"nv": {"path": "/usr/bin/nvc-runtime", "args": []}}}"#,
            },
            Case {
                name: "another name and path",
                input: "{}",
                opts: DockerOptions {
                    runtime_name: "gpu",
                    runtime_path: "/opt/nvc/bin/nvc-runtime",
                    ..NV
                },
                want: r#"{"runtimes": {"gpu": {"path": "/opt/nvc/bin/nvc-runtime", "args": []}}}"#,
            },
        ];
        for case in cases {
            let out = configure(case.input, &case.opts).unwrap();
            let got = value(&out);
            assert_eq!(got, value(case.want), "{}: {out}", case.name);
            // Key order is the input's, new keys at the end.
            let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
            let want_keys: Vec<String> = value(case.want)
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert_eq!(keys, want_keys.iter().collect::<Vec<_>>(), "{}", case.name);
            assert!(out.ends_with("}\n"), "{}: {out}", case.name);
            // Idempotent: same bytes the second time.
            assert_eq!(configure(&out, &case.opts).unwrap(), out, "{}", case.name);
        }
    }

    #[test]
    fn nothing_to_do_keeps_the_bytes() {
        let input =
            "{\n\t\"runtimes\": {\"nv\": {\"path\": \"/usr/bin/nvc-runtime\", \"args\": []}}\n}";
        assert_eq!(configure(input, &NV).unwrap(), input);
    }

    #[test]
    fn indentation_is_kept() {
        let out = configure("{\n\t\"debug\": true\n}\n", &NV).unwrap();
        assert!(
            out.starts_with("{\n\t\"debug\": true,\n\t\"runtimes\": {\n\t\t\"nv\""),
            "{out}"
        );
        let out = configure("{\n    \"debug\": true\n}\n", &NV).unwrap();
        assert!(
            out.starts_with("{\n    \"debug\": true,\n    \"runtimes\""),
            "{out}"
        );
    }

    #[test]
    fn malformed_inputs_are_refused_naming_the_problem() {
        let cases = [
            (
                "{\n  \"debug\": true,\n}\n",
                "not valid JSON: trailing comma at line 3 column 1",
            ),
            (
                "{\"runtimes\": []}",
                "`runtimes` is an array, expected a JSON object",
            ),
            (
                "{\"runtimes\": {\"nv\": \"/usr/bin/nvc-runtime\"}}",
                "`runtimes.nv` is a string, expected a JSON object",
            ),
            (
                "{\"features\": true}",
                "`features` is a boolean, expected a JSON object",
            ),
            (
                "[1, 2]",
                "the top level is an array, expected a JSON object",
            ),
        ];
        for (input, want) in cases {
            let opts = DockerOptions { cdi: true, ..NV };
            let err = configure(input, &opts).unwrap_err();
            assert_eq!(error_chain(&err), want, "{input}");
        }
    }

    #[test]
    fn unconfigure_removes_only_ours() {
        let input = r#"{"log-driver": "local", "default-runtime": "nv", "features": {"cdi": true}, "runtimes": {"crun": {"path": "/usr/bin/crun"}}}"#;
        let opts = DockerOptions {
            set_as_default: true,
            cdi: true,
            ..NV
        };
        let configured = configure(input, &opts).unwrap();
        let back = unconfigure(&configured, "nv").unwrap();
        assert_eq!(
            value(&back),
            value(
                r#"{"log-driver": "local", "features": {"cdi": true}, "runtimes": {"crun": {"path": "/usr/bin/crun"}}}"#
            )
        );
        let only_ours = configure("{\"debug\": true}", &NV).unwrap();
        assert_eq!(
            value(&unconfigure(&only_ours, "nv").unwrap()),
            value("{\"debug\": true}")
        );
        assert_eq!(unconfigure("{ }", "nv").unwrap(), "{ }");
    }
}
