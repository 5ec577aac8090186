//! Runs real containers: runc directly or through nvc's shim, with timeouts, captured output
//! and cleanup, plus snapshots of host state for "nothing outside changed" assertions.
//!
//! This file finds the programs (the workspace's binaries, runc) and writes nvc's
//! configuration; `runtime.rs` runs runtime commands ([`Runtime`], [`Outcome`]);
//! `snapshot.rs` takes the snapshots (file trees, mounts, processes); `mounts.rs` makes the
//! mounts tests need and undoes them ([`TestMount`]).

mod mounts;
mod runtime;
mod snapshot;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{FakeDriver, FakeError};

pub use mounts::TestMount;
pub use runtime::{Outcome, Runtime};
pub use snapshot::{
    dir_names, host_mounts, host_mounts_beside_tests, processes_under, tree_digest,
};

pub(crate) use runtime::{describe, read_lossy};

/// How long one runtime command may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace's root folder: this package is its `tests/`.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the nvc-tests package is a folder of the workspace")
}

/// The workspace's built binary `name`: `target/<profile>/<name>`, found next to the running
/// test executable (which lives in `target/<profile>/deps/`).
///
/// # Panics
///
/// When it is missing: `cargo test -p nvc-tests` does not build the other crates' binaries.
#[track_caller]
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    if !bin.is_file() {
        panic!(
            "{} is missing: run `cargo build --workspace` first",
            bin.display()
        );
    }
    bin
}

/// The absolute path of `runc`: from `PATH`, else the sbin directories (which `PATH` lacks
/// under some CI runners).
///
/// # Panics
///
/// When runc is not installed.
#[track_caller]
pub fn runc_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("runc"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("runc is not installed: run `scripts/deps.sh runc`"))
}

/// A container id no other test in any process uses: `<prefix>-<pid>-<n>-<time>`.
pub fn container_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{n}-{nanos:08x}", std::process::id())
}

/// Writes `<dir>/config.toml`, an nvc configuration for the shim and the hook: `[driver]` at
/// the fake tree's roots, the workspace's `nvc-hook` keeping its records in `<dir>/state`,
/// the absolute path of runc, a debug log at `<dir>/nvc.log`, and GPU leases in
/// `<dir>/leases` (the fake GPUs' UUIDs are the same in every test: the host's
/// `/run/nvc/leases` would tie the tests together). Returns its path.
pub fn nvc_config_for(fake: &FakeDriver, dir: &Path) -> Result<PathBuf, FakeError> {
    let hook = workspace_bin("nvc-hook");
    let runc = runc_path();
    std::fs::create_dir_all(dir).map_err(FakeError::io("create directory", dir))?;
    let dir = std::path::absolute(dir).map_err(FakeError::io("make absolute", dir))?;
    let text = format!(
        "[driver]\nroot = {}\ndev-root = {}\nproc-root = {}\n\n\
         [runtime]\nruntimes = [{}]\n\n\
         [hook]\npath = {}\nstate-dir = {}\n\n\
         [log]\nfile = {}\nlevel = \"debug\"\n\n\
         [leases]\ndir = {}\n",
        toml_string(&fake.root),
        toml_string(&fake.dev_root),
        toml_string(&fake.proc_root),
        toml_string(&runc),
        toml_string(&hook),
        toml_string(&dir.join("state")),
        toml_string(&dir.join("nvc.log")),
        toml_string(&dir.join("leases")),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).map_err(FakeError::io("write", &path))?;
    Ok(path)
}

/// A TOML basic string.
fn toml_string(path: &Path) -> String {
    let mut out = String::from("\"");
    for c in path.to_string_lossy().chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The ids of the containers runc knows in the state root `state_root`
/// (`runc --root <state_root> list -q`).
pub fn runc_containers(state_root: &Path) -> Vec<String> {
    let out = Command::new(runc_path())
        .arg("--root")
        .arg(state_root)
        .args(["list", "-q"])
        .stdin(Stdio::null())
        .output();
    let mut ids: Vec<String> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// `runc --root <state_root> delete --force <id>`, run directly; returns whether runc
/// succeeded (it fails for an id it does not know).
pub fn runc_delete(state_root: &Path, id: &str) -> bool {
    Command::new(runc_path())
        .arg("--root")
        .arg(state_root)
        .args(["delete", "--force", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
