//! The OCI runtime-tools validation programs (`validation/*/*.t` of
//! opencontainers/runtime-tools), built once per machine by `scripts/oci-suite.sh`, and
//! the TAP they print.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The built runtime-tools tree (its `validation/*/*.t`, `runtimetest` and rootfs
/// tarballs; the programs run from it): `scripts/oci-suite.sh` builds it the first time
/// and finds it after.
///
/// # Panics
///
/// When the script fails, with what it said: the source archive is missing (the shared
/// folder beside the clone, or `NVC_OCI_TOOLS`), Go cannot be installed, the build fails.
#[track_caller]
pub fn oci_runtime_tools() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/oci-suite.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        panic!(
            "the OCI validation programs are not available ({} {}):\n{stderr}",
            script.display(),
            out.status
        );
    }
    let tree = stdout.lines().last().map(PathBuf::from).unwrap_or_default();
    if !tree.join("runtimetest").is_file() {
        panic!(
            "{} named {tree:?}, which has no runtimetest:\n{stdout}\n{stderr}",
            script.display()
        );
    }
    tree
}

/// The validation programs of the tree at `tree`: `(name, path)`, sorted by name.
pub fn validation_programs(tree: &Path) -> Vec<(String, PathBuf)> {
    let dir = tree.join("validation");
    let mut programs: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let program = entry.path().join(format!("{name}.t"));
            program.is_file().then_some((name, program))
        })
        .collect();
    programs.sort();
    programs
}

/// One test line of a TAP stream: `ok 3 - text`, `not ok 4 - text # TODO why`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapLine {
    /// The test's number.
    pub number: u32,
    /// `ok` (true) or `not ok`.
    pub ok: bool,
    /// Its description, without the leading `- ` and the directive.
    pub description: String,
    /// Everything after the number: the description and the directive, which tells
    /// one `ok 7 # SKIP why` from another.
    pub text: String,
    /// A `# TODO` directive: a failure that is expected and does not count.
    pub todo: bool,
    /// A `# SKIP` directive.
    pub skip: bool,
}

impl TapLine {
    /// Whether it counts as a failure: `not ok` without `# TODO`.
    pub fn failed(&self) -> bool {
        !self.ok && !self.todo
    }
}

/// The test lines of the TAP `text`. Indented lines (YAML diagnostics, which may quote
/// a container's own TAP) and every other line are left out.
pub fn parse_tap(text: &str) -> Vec<TapLine> {
    text.lines().filter_map(tap_line).collect()
}

fn tap_line(line: &str) -> Option<TapLine> {
    let (ok, rest) = if let Some(rest) = line.strip_prefix("ok") {
        (true, rest)
    } else if let Some(rest) = line.strip_prefix("not ok") {
        (false, rest)
    } else {
        return None;
    };
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    let rest = rest.trim_start();
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..digits].parse().ok()?;
    let rest = rest[digits..].trim_start();
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim_start();
    let (description, directive) = match rest.rfind('#') {
        Some(at) => (rest[..at].trim_end(), rest[at + 1..].trim_start()),
        None => (rest, ""),
    };
    let word = directive
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    let (todo, skip) = (word == "TODO", word.starts_with("SKIP"));
    let description = if todo || skip { description } else { rest };
    Some(TapLine {
        number,
        ok,
        description: description.to_string(),
        text: rest.to_string(),
        todo,
        skip,
    })
}
