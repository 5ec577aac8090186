//! Reads runc's command line the way runc reads it, from tables of its flags: finds the
//! real subcommand, the bundle of `create`/`run`, and where runc logs (`--log`,
//! `--log-format`) so the shim can report its own errors there.
//!
//! runc parses its flags with Go's `flag` package (through urfave/cli): `-x` and `--x`
//! are the same flag, a value follows as the next argument or after `=`, and `--` ends
//! the flags. Before the subcommand, flag parsing stops at the first argument that is
//! not a flag; after it, urfave/cli moves flags ahead of positionals, so a flag may
//! follow the container id. Only the table decides what is a flag's value: an argument
//! that happens to read `create` is not the subcommand unless it stands where the
//! subcommand stands.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The format of runc's own log (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// logrus' text format: `time="…" level=error msg="…"`. runc's default.
    #[default]
    Text,
    /// One JSON object a line: `{"level":"error","msg":"…","time":"…"}`.
    Json,
}

/// What the shim needs to know of a runc command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuncArgs {
    /// The subcommand (`create`, `run`, `start`, `state`, …); `None` when runc is called
    /// with global flags only.
    pub subcommand: Option<String>,
    /// `--bundle`/`-b` of `create` and `run`, as given; `None` when not given or empty
    /// (runc then uses the current directory) and for every other subcommand.
    pub bundle: Option<PathBuf>,
    /// The container id: the first positional argument after the subcommand.
    pub container_id: Option<OsString>,
    /// `--log`: the file runc logs to. `None` when not given or empty.
    pub log: Option<PathBuf>,
    /// `--log-format`; text unless `json` is given.
    pub log_format: LogFormat,
    /// `--root`: runc's state directory.
    pub root: Option<PathBuf>,
    /// `--help`/`-h` or `--version`/`-v` was given, globally or to the subcommand: runc
    /// only prints, it starts nothing.
    pub prints_only: bool,
    /// A value-taking flag that ends the command line without its value; runc rejects
    /// such a command line.
    pub missing_value: Option<String>,
    /// Flags before the subcommand that are not in runc's table, as written; they were
    /// taken as booleans.
    pub unknown_global_flags: Vec<String>,
}

impl RuncArgs {
    /// Whether runc is about to create a container from a bundle, so the bundle's spec is
    /// the shim's business: `create` or `run`, with a well-formed command line that does
    /// more than print help.
    pub fn creates_container(&self) -> bool {
        matches!(self.subcommand.as_deref(), Some("create" | "run"))
            && !self.prints_only
            && self.missing_value.is_none()
    }
}

/// How a flag takes its argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    Boolean,
    Value,
}

/// What a known flag means to the shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    Root,
    Log,
    LogFormat,
    Bundle,
    PrintsOnly,
    Ignored,
}

/// A flag as runc declares it: its names (without dashes), arity and meaning.
type Flag = (&'static [&'static str], Arity, Meaning);

/// runc's global flags (`runc --help`).
const GLOBAL_FLAGS: &[Flag] = &[
    (&["root"], Arity::Value, Meaning::Root),
    (&["log"], Arity::Value, Meaning::Log),
    (&["log-format"], Arity::Value, Meaning::LogFormat),
    (&["criu"], Arity::Value, Meaning::Ignored),
    (&["rootless"], Arity::Value, Meaning::Ignored),
    (&["debug"], Arity::Boolean, Meaning::Ignored),
    (&["systemd-cgroup"], Arity::Boolean, Meaning::Ignored),
    (&["help", "h"], Arity::Boolean, Meaning::PrintsOnly),
    (&["version", "v"], Arity::Boolean, Meaning::PrintsOnly),
];

/// The flags of `runc create` and `runc run`.
const CREATE_FLAGS: &[Flag] = &[
    (&["bundle", "b"], Arity::Value, Meaning::Bundle),
    (&["console-socket"], Arity::Value, Meaning::Ignored),
    (&["pid-file"], Arity::Value, Meaning::Ignored),
    (&["preserve-fds"], Arity::Value, Meaning::Ignored),
    (&["no-pivot"], Arity::Boolean, Meaning::Ignored),
    (&["no-new-keyring"], Arity::Boolean, Meaning::Ignored),
    (&["detach", "d"], Arity::Boolean, Meaning::Ignored),
    (&["keep"], Arity::Boolean, Meaning::Ignored),
    (&["no-subreaper"], Arity::Boolean, Meaning::Ignored),
    (&["help", "h"], Arity::Boolean, Meaning::PrintsOnly),
];

/// Only the help flag matters for other subcommands; their other flags are not
/// interpreted (nothing of them is read).
const OTHER_FLAGS: &[Flag] = &[(&["help", "h"], Arity::Boolean, Meaning::PrintsOnly)];

/// One argument split as Go's `flag` package splits it.
enum Parsed<'a> {
    /// `--`: the end of the flags.
    EndOfFlags,
    /// A flag: its name without dashes, and the value after `=` when there is one.
    Flag(&'a str, Option<&'a OsStr>),
    /// Not a flag (including `-` alone and names that are not UTF-8).
    Positional,
}

fn parse(arg: &OsStr) -> Parsed<'_> {
    let bytes = arg.as_bytes();
    if bytes == b"--" {
        return Parsed::EndOfFlags;
    }
    if bytes.len() < 2 || bytes[0] != b'-' {
        return Parsed::Positional;
    }
    let body = if bytes[1] == b'-' {
        &bytes[2..]
    } else {
        &bytes[1..]
    };
    let (name, value) = match body.iter().position(|b| *b == b'=') {
        Some(i) => (&body[..i], Some(OsStr::from_bytes(&body[i + 1..]))),
        None => (body, None),
    };
    match std::str::from_utf8(name) {
        Ok(name) => Parsed::Flag(name, value),
        Err(_) => Parsed::Positional,
    }
}

fn lookup(table: &[Flag], name: &str) -> Option<(Arity, Meaning)> {
    table
        .iter()
        .find(|(names, _, _)| names.contains(&name))
        .map(|(_, arity, meaning)| (*arity, *meaning))
}

fn non_empty_path(value: &OsStr) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

impl RuncArgs {
    /// Records a known flag's meaning; a boolean's value (`--debug=false`) is not
    /// interpreted except for the help and version flags.
    fn record(&mut self, meaning: Meaning, value: Option<&OsStr>) {
        match meaning {
            Meaning::Root => self.root = value.and_then(non_empty_path),
            Meaning::Log => self.log = value.and_then(non_empty_path),
            Meaning::LogFormat => {
                self.log_format = if value == Some(OsStr::new("json")) {
                    LogFormat::Json
                } else {
                    LogFormat::Text
                }
            }
            Meaning::Bundle => self.bundle = value.and_then(non_empty_path),
            Meaning::PrintsOnly => {
                let off = value.is_some_and(|v| v == "false" || v == "0" || v == "f");
                self.prints_only |= !off;
            }
            Meaning::Ignored => {}
        }
    }
}

/// Scans runc's arguments (`argv[1..]`).
pub fn scan(args: &[OsString]) -> RuncArgs {
    let mut out = RuncArgs::default();
    let mut rest = args.iter();

    // Global flags, up to the subcommand.
    while let Some(arg) = rest.next() {
        match parse(arg) {
            Parsed::EndOfFlags => {
                out.subcommand = rest.next().map(|s| s.to_string_lossy().into_owned());
                break;
            }
            Parsed::Positional => {
                out.subcommand = Some(arg.to_string_lossy().into_owned());
                break;
            }
            Parsed::Flag(name, inline) => match lookup(GLOBAL_FLAGS, name) {
                Some((Arity::Value, meaning)) => {
                    let value = match inline {
                        Some(v) => Some(v),
                        None => rest.next().map(OsString::as_os_str),
                    };
                    if value.is_none() {
                        out.missing_value = Some(arg.to_string_lossy().into_owned());
                    }
                    out.record(meaning, value);
                }
                Some((Arity::Boolean, meaning)) => out.record(meaning, inline),
                None => out
                    .unknown_global_flags
                    .push(arg.to_string_lossy().into_owned()),
            },
        }
    }

    let table = match out.subcommand.as_deref() {
        Some("create" | "run") => CREATE_FLAGS,
        Some(_) => OTHER_FLAGS,
        None => return out,
    };
    // Subcommand flags and positionals, in any order, up to `--`.
    let mut flags_done = false;
    while let Some(arg) = rest.next() {
        let parsed = if flags_done {
            Parsed::Positional
        } else {
            parse(arg)
        };
        match parsed {
            Parsed::EndOfFlags => flags_done = true,
            Parsed::Positional => {
                if out.container_id.is_none() {
                    out.container_id = Some(arg.clone());
                }
            }
            Parsed::Flag(name, inline) => match lookup(table, name) {
                Some((Arity::Value, meaning)) => {
                    let value = match inline {
                        Some(v) => Some(v),
                        None => rest.next().map(OsString::as_os_str),
                    };
                    if value.is_none() {
                        out.missing_value = Some(arg.to_string_lossy().into_owned());
                    }
                    out.record(meaning, value);
                }
                Some((Arity::Boolean, meaning)) => out.record(meaning, inline),
                // Unknown subcommand flags are taken as booleans: for `create`/`run` a
                // new value-taking flag would at worst have its value read as the id.
                None => {}
            },
        }
    }
    if !matches!(out.subcommand.as_deref(), Some("create" | "run")) {
        out.bundle = None;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn s(line: &str) -> RuncArgs {
        scan(&args(line))
    }

    #[test]
    fn subcommand_table() {
        // (command line, subcommand, bundle)
        let cases: &[(&str, Option<&str>, Option<&str>)] = &[
            ("", None, None),
            ("create id", Some("create"), None),
            ("run id", Some("run"), None),
            ("state id", Some("state"), None),
            ("create --bundle /b id", Some("create"), Some("/b")),
            ("create --bundle=/b id", Some("create"), Some("/b")),
            ("create -b /b id", Some("create"), Some("/b")),
            ("create -b=/b id", Some("create"), Some("/b")),
            ("create -bundle /b id", Some("create"), Some("/b")),
            ("run -b /b id", Some("run"), Some("/b")),
            ("run --detach -b /b id", Some("run"), Some("/b")),
            ("run -d --bundle /b id", Some("run"), Some("/b")),
            // A flag after the id still counts (urfave/cli reorders).
            ("create id --bundle /b", Some("create"), Some("/b")),
            // Value-taking flags whose values look like subcommands or flags.
            ("--root create exec create", Some("exec"), None),
            ("--root=create exec create", Some("exec"), None),
            (
                "--log create --log-format json start create",
                Some("start"),
                None,
            ),
            ("--criu run --rootless run delete run", Some("delete"), None),
            ("-root create -log run kill run", Some("kill"), None),
            (
                "create --console-socket -b --pid-file run --bundle /b id",
                Some("create"),
                Some("/b"),
            ),
            (
                "create --preserve-fds 3 --no-pivot --no-new-keyring --keep --no-subreaper -b /b x",
                Some("create"),
                Some("/b"),
            ),
            // Booleans take no value: the next argument is the subcommand.
            ("--debug create id", Some("create"), None),
            ("--systemd-cgroup run id", Some("run"), None),
            (
                "--debug=false --systemd-cgroup=true create id",
                Some("create"),
                None,
            ),
            // `--` ends the flags.
            ("--debug -- create id", Some("create"), None),
            ("create -- -b", Some("create"), None),
            // `-` alone is a positional.
            ("- create", Some("-"), None),
            // The bundle of another subcommand is not read.
            ("exec -b /b id", Some("exec"), None),
            // Unknown global flags are taken as booleans.
            ("--frobnicate create id", Some("create"), None),
        ];
        for (line, subcommand, bundle) in cases {
            let got = s(line);
            assert_eq!(got.subcommand.as_deref(), *subcommand, "{line:?}");
            assert_eq!(got.bundle.as_deref(), bundle.map(Path::new), "{line:?}");
        }
    }

    use std::path::Path;

    #[test]
    fn global_values() {
        let got =
            s("--root /run/r --log /l.json --log-format json --criu c --rootless auto create id");
        assert_eq!(got.root.as_deref(), Some(Path::new("/run/r")));
        assert_eq!(got.log.as_deref(), Some(Path::new("/l.json")));
        assert_eq!(got.log_format, LogFormat::Json);
        assert_eq!(got.subcommand.as_deref(), Some("create"));
        assert_eq!(got.container_id.as_deref(), Some(OsStr::new("id")));
        assert!(got.creates_container());

        let got = s("--root=/r --log=/l --log-format=text run x");
        assert_eq!(got.root.as_deref(), Some(Path::new("/r")));
        assert_eq!(got.log.as_deref(), Some(Path::new("/l")));
        assert_eq!(got.log_format, LogFormat::Text);

        let got = s("--log-format=json delete x");
        assert_eq!(got.log_format, LogFormat::Json);
        assert_eq!(got.log, None);

        // An empty --log means stderr to runc: no file.
        assert_eq!(s("--log= create x").log, None);
        // An unknown format is left to runc to reject.
        assert_eq!(s("--log-format xml create x").log_format, LogFormat::Text);
    }

    #[test]
    fn missing_values() {
        for line in ["--root", "--log", "--log-format", "--criu", "--rootless"] {
            let got = s(line);
            assert_eq!(got.subcommand, None, "{line}");
            assert_eq!(got.missing_value.as_deref(), Some(line), "{line}");
        }
        for line in [
            "create id --bundle",
            "run -b",
            "create --pid-file",
            "create --console-socket",
        ] {
            let got = s(line);
            assert!(got.missing_value.is_some(), "{line}");
            assert!(!got.creates_container(), "{line}");
        }
        // `--bundle=` has its (empty) value: runc takes it as the current directory.
        let got = s("create --bundle= id");
        assert_eq!(got.bundle, None);
        assert!(got.creates_container());
    }

    #[test]
    fn help_and_version_print_only() {
        for line in [
            "--help",
            "-h create id",
            "--version",
            "-v",
            "create --help",
            "run -h id",
            "create -b /b --help=true id",
        ] {
            let got = s(line);
            assert!(got.prints_only, "{line}");
            assert!(!got.creates_container(), "{line}");
        }
        assert!(!s("create --help=false id").prints_only);
        assert!(s("create --help=false id").creates_container());
    }

    #[test]
    fn unknown_global_flags_are_recorded() {
        let got = s("--frobnicate -x=1 --debug create id");
        assert_eq!(got.unknown_global_flags, vec!["--frobnicate", "-x=1"]);
        assert_eq!(got.subcommand.as_deref(), Some("create"));
    }

    #[test]
    fn not_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bundle = OsString::from_vec(b"/b\xff".to_vec());
        let argv = vec![
            OsString::from("create"),
            OsString::from("-b"),
            bundle.clone(),
            OsString::from_vec(b"id\xfe".to_vec()),
        ];
        let got = scan(&argv);
        assert_eq!(got.bundle, Some(PathBuf::from(bundle)));
        assert!(got.creates_container());
    }

    #[test]
    fn creates_container_only_for_create_and_run() {
        for line in ["create id", "run id", "--debug run -d id"] {
            assert!(s(line).creates_container(), "{line}");
        }
        for line in [
            "",
            "start id",
            "exec id create",
            "--root create exec create",
            "delete create",
        ] {
            assert!(!s(line).creates_container(), "{line}");
        }
    }
}
