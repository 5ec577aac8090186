//! Why building a fake driver tree failed.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// A failed step of building a fake driver tree, naming the step and the path or program.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// The step needs root (mknod for device nodes, chroot for `ldconfig -r`).
    #[error(
        "building a fake driver tree needs root (CAP_MKNOD/chroot for ldconfig): {what}; run as root"
    )]
    NeedsRoot {
        /// What needed it.
        what: String,
    },
    /// The spec describes something no driver tree can hold.
    #[error("invalid fake driver spec: {reason}")]
    InvalidSpec {
        /// Why.
        reason: String,
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
    /// A program (gcc, ldconfig, mknod) could not be started.
    #[error("failed to run {program} to {step}")]
    Spawn {
        /// What it was run for.
        step: &'static str,
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A program ran and failed.
    #[error("{command} failed to {step} ({status}): {stderr}")]
    Command {
        /// What it was run for.
        step: &'static str,
        /// The command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },
    /// The built tree is not what it should be, e.g. the ld.so.cache lacks libcuda.so.1.
    #[error("fake driver tree check failed: {what} ({path})")]
    Check {
        /// What is wrong.
        what: String,
        /// The file that shows it.
        path: PathBuf,
    },
}

impl FakeError {
    /// A mapper from an I/O error of `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| FakeError::Io { op, path, source }
    }
}
