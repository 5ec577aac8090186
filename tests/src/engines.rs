//! Real container engines for tests: a private `dockerd`, a private `containerd` (driven with
//! `ctr`), `podman` with private storage and a private CRI-O (driven over CRI).
//!
//! Each keeps its state, sockets and logs under a directory the caller owns, and runs in its
//! own mount and PID namespaces, with an empty tmpfs over the host directories the engines
//! write to outside the state they are configured with ([`MASKED_DIRS`]). When the
//! namespace's first process ends, the kernel kills whatever the engine left running
//! (shims, conmon, containers), and the mounts it made go with the namespace. Dropping an
//! engine stops it (SIGTERM, then SIGKILL) and removes the cgroups it made, so a test leaves
//! nothing running and nothing changed on the host.
//!
//! This file holds what every engine shares (the `PATH`, [`EngineError`], finding
//! programs); `command.rs` runs one command with a timeout; `daemon.rs` runs a program
//! isolated, keeps a daemon up and stops it, and removes the cgroups an engine made;
//! `dockerd.rs`, `containerd.rs`, `podman.rs` and `crio.rs` drive one engine each;
//! `archive.rs` makes the OCI image archive `ctr` and `skopeo` import; `cri.rs` is a CRI
//! (Kubernetes runtime API) client for containerd's CRI plugin and CRI-O.

mod archive;
mod command;
mod containerd;
pub mod cri;
mod crio;
mod daemon;
mod debian_root;
mod dockerd;
mod podman;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Outcome;

pub use archive::{oci_archive, oci_archive_running};
pub use command::run_command;
pub use containerd::{Containerd, CriSettings, CRI_NAMESPACE};
pub use crio::{Crio, CrioSettings, CRIO_CONF, CRIO_CONF_D};
pub use daemon::remove_cgroups;
pub use debian_root::{EngineRoot, RootUser, RootView};
pub use dockerd::Dockerd;
pub use podman::Podman;

pub(crate) use command::run_command_with;

/// How long one engine command (`docker run`, `ctr images import`, `podman run`) may take.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a daemon may take to answer after it was started.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Host directories hidden behind an empty tmpfs in every engine's mount namespace: where
/// the engines write outside their configured state (`/run/docker`, the shims' sockets in
/// `/run/containerd/s`, `ctr`'s and podman's runtime files in `/run`, dockerd's containerd
/// plugin folder `/opt/containerd`, podman's `/var/lib/containers/cache` and `/var/tmp`).
/// A directory missing on the host is not masked (its mount point would have to be made).
pub const MASKED_DIRS: &[&str] = &["/run", "/var/lib", "/var/tmp", "/opt"];

/// The prefix of every cgroup an engine here makes (dockerd's `--cgroup-parent`, podman's
/// `--cgroup-parent`, containerd's namespace), so leftovers are easy to spot.
pub const CGROUP_PREFIX: &str = "nvc-engine-test";

/// The `PATH` engines run with unless a test gives another: the sbin directories first
/// (runc, dockerd and containerd live there), then this process's `PATH`.
pub fn engine_path() -> OsString {
    let mut dirs: Vec<PathBuf> = ["/usr/local/sbin", "/usr/sbin", "/sbin"]
        .map(PathBuf::from)
        .to_vec();
    let current = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&current) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The machine's cache of what the tests make once and keep (the engine roots, CRI-O's
/// programs, the OCI validation programs): `NVC_TESTS_CACHE`, by default
/// `/var/cache/nvc-tests`.
pub(crate) fn tests_cache() -> PathBuf {
    std::env::var_os("NVC_TESTS_CACHE")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/var/cache/nvc-tests"), PathBuf::from)
}

/// Why an engine could not be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A program the engine needs is not installed.
    #[error("{program} is not installed ({package}): run `scripts/deps.sh` as root")]
    Missing {
        /// The program, e.g. `dockerd`.
        program: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// An archive the tests take from the shared folder beside the repository's clone is
    /// not there.
    #[error(
        "{what} is missing: {why}; put it in shared/{shared} beside the repository's \
         clone (../shared), or set {env} to the folder that holds it"
    )]
    MissingShared {
        /// What it is, e.g. "the CRI-O archive (crio-*.tar.xz)".
        what: &'static str,
        /// What was found instead.
        why: String,
        /// Its folder in the shared folder, e.g. `cri-o`.
        shared: &'static str,
        /// The environment variable naming another folder.
        env: &'static str,
    },
    /// A file system operation failed.
    #[error("failed to {op} {path}")]
    Io {
        /// The operation, e.g. "create directory".
        op: &'static str,
        /// The path it was done on.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A program could not be started.
    #[error("failed to start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A daemon exited, or did not answer in time, after it was started.
    #[error("{what} did not come up: {why}; the end of its log ({log}):\n{tail}")]
    NotReady {
        /// The daemon.
        what: &'static str,
        /// What happened instead.
        why: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// A setup command (an image import, an archive step) failed.
    #[error("failed to {step}:\n{outcome:?}")]
    Command {
        /// What it was run for.
        step: &'static str,
        /// What it did.
        outcome: Box<Outcome>,
    },
}

impl EngineError {
    fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| EngineError::Io { op, path, source }
    }

    fn check(step: &'static str, outcome: Outcome) -> Result<Outcome, EngineError> {
        if outcome.success() {
            Ok(outcome)
        } else {
            Err(EngineError::Command {
                step,
                outcome: Box::new(outcome),
            })
        }
    }
}

/// `program` from [`engine_path`], or [`EngineError::Missing`].
pub fn find_program(program: &'static str, package: &'static str) -> Result<PathBuf, EngineError> {
    std::env::split_paths(&engine_path())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or(EngineError::Missing { program, package })
}

fn mkdirs(path: &Path) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(path).map_err(EngineError::io("create directory", path))?;
    std::path::absolute(path).map_err(EngineError::io("make absolute", path))
}
