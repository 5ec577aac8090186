//! runc's command line ([`libnvc::oci::runc_args`]).
//!
//! The input is `argv[1..]`, split at NUL bytes; arguments may be any bytes, UTF-8 or
//! not.
//!
//! Properties:
//! - no argv makes [`scan`] panic, and it leaves the argv as it was (the shim execs the
//!   original argv);
//! - the subcommand found is the one runc finds: the first argument that is not a global
//!   flag or a global flag's value, or the argument after `--`. In particular it is never
//!   the value of a value-taking global flag (`--root`, `--log`, `--log-format`,
//!   `--criu`, `--rootless`), whatever that value reads;
//! - a bundle is only reported for `create` and `run`, and [`RuncArgs::creates_container`]
//!   only holds for those; paths reported are never empty.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use libnvc::oci::runc_args::{scan, RuncArgs};

/// runc's value-taking global flags, without dashes.
const VALUE_FLAGS: &[&str] = &["root", "log", "log-format", "criu", "rootless"];

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let args: Vec<OsString> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|b| *b == 0)
            .map(|a| OsStr::from_bytes(a).to_os_string())
            .collect()
    };
    let before = args.clone();
    let got = scan(&args);
    assert_eq!(args, before, "scan changed the argv");

    let (want, values) = subcommand_index(&args);
    let want_name = want
        .and_then(|i| args.get(i))
        .map(|a| a.to_string_lossy().into_owned());
    assert_eq!(
        got.subcommand, want_name,
        "subcommand of {args:?} (at {want:?})"
    );
    if let Some(i) = want {
        assert!(
            !values.contains(&i),
            "subcommand {:?} is the value of {:?}",
            args[i],
            args[i - 1]
        );
    }
    assert_consistent(&got);
}

/// `--name` or `-name` of a value-taking global flag, without `=value`.
fn takes_next_as_value(arg: &OsStr) -> bool {
    let bytes = arg.as_bytes();
    let name = bytes
        .strip_prefix(b"--")
        .or_else(|| bytes.strip_prefix(b"-"))
        .unwrap_or(b"");
    VALUE_FLAGS.iter().any(|f| f.as_bytes() == name)
}

/// Where runc finds its subcommand, read directly from Go's `flag` rules: skip flags
/// (`-x`, `--x`, `--x=v`; a value-taking one without `=` also takes the next argument);
/// `--` makes the next argument the subcommand; anything else is the subcommand. Also
/// returns the positions of the global flags' values.
fn subcommand_index(args: &[OsString]) -> (Option<usize>, Vec<usize>) {
    let mut values = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let bytes = arg.as_bytes();
        if bytes == b"--" {
            return ((i + 1 < args.len()).then_some(i + 1), values);
        }
        let is_flag = bytes.len() >= 2 && bytes[0] == b'-' && {
            let body = bytes
                .strip_prefix(b"--")
                .or_else(|| bytes.strip_prefix(b"-"))
                .unwrap_or(bytes);
            let name = body.split(|b| *b == b'=').next().unwrap_or(body);
            std::str::from_utf8(name).is_ok()
        };
        if !is_flag {
            return (Some(i), values);
        }
        if takes_next_as_value(arg) {
            values.push(i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    (None, values)
}

fn assert_consistent(got: &RuncArgs) {
    let creates = matches!(got.subcommand.as_deref(), Some("create" | "run"));
    if !creates {
        assert_eq!(got.bundle, None, "a bundle for {:?}", got.subcommand);
        assert!(!got.creates_container());
    }
    if got.creates_container() {
        assert!(!got.prints_only && got.missing_value.is_none());
    }
    for path in [&got.bundle, &got.log, &got.root].into_iter().flatten() {
        assert!(!path.as_os_str().is_empty(), "an empty path in {got:?}");
    }
    if got.subcommand.is_none() {
        assert_eq!(got.container_id, None);
    }
}
