//! Why a benchmark could not run.

use std::path::PathBuf;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The host's state code failed in `--state`.
    #[error("the state benchmark failed: {0}")]
    State(String),
    /// Containers, device nodes and mounts need root.
    #[error("nvc-bench needs root (runc, device nodes, mounts): run it with sudo or as root")]
    NotRoot,
    /// A program the benchmark runs is missing.
    #[error("{what} not found at {path}{hint}")]
    Missing {
        /// What it is.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to get it.
        hint: &'static str,
    },
    /// `--work` names a directory that is not empty.
    #[error("the work directory {path} is not empty: give a new or empty one")]
    WorkNotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// A file-system operation failed.
    #[error("cannot {op} {path}")]
    Io {
        /// What was done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started or waited for.
    #[error("cannot run {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A command failed; a failing configuration is never timed.
    #[error("{command} failed ({status}){details}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr and, for nvc, the end of nvc's log.
        details: String,
    },
    /// A command ran past its time limit and was killed.
    #[error("{command} ran for more than {seconds} s and was killed")]
    TimedOut {
        /// The command line.
        command: String,
        /// The limit.
        seconds: u64,
    },
    /// A helper process ended before it was ready.
    #[error("the mount-namespace helper {command} ended early ({status}){stderr}")]
    Helper {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// A fake driver tree, test rootfs or bundle could not be built.
    #[error(transparent)]
    Fake(#[from] nvc_tests::FakeError),
    /// The host's driver could not be read (`--real`).
    #[error("cannot read the host's driver (--real)")]
    Discover(#[source] libnvc::discover::DiscoverError),
    /// An nvc configuration could not be written.
    #[error("cannot write the nvc configuration {path}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: toml::ser::Error,
    },
    /// The large image's ld.so.cache does not list what was put in it.
    #[error("{path} lists {found} of the {expected} benchmark libraries (ldconfig -r failed?)")]
    LargeImage {
        /// The cache.
        path: PathBuf,
        /// Entries found.
        found: usize,
        /// Entries made.
        expected: usize,
    },
    /// A run changed the large image through a hard link: its results are void.
    #[error("a run changed the large image {path} through a hard link (the hook or runc wrote a file in place): its timings are void")]
    ImageChanged {
        /// The image.
        path: PathBuf,
    },
    /// The large image's ld.so.cache is unreadable.
    #[error("cannot read the large image's ld.so.cache")]
    LdCache(#[source] libnvc::ldcache::LdCacheError),
    /// The floor program's plan could not be made.
    #[error("cannot plan the floor program's run: {0}")]
    FloorPlan(String),
    /// A configuration that asks for GPUs gave its container none: its timings would not
    /// be a GPU start's.
    #[error("a container created through {what} has no /dev/nvidiactl: it did not get the GPUs it asked for")]
    NoGpu {
        /// The configuration.
        what: String,
    },
    /// `--update-doc` found no section to replace.
    #[error(
        "{path} has no `<!-- bench:{section}:start -->` ... `<!-- bench:{section}:end -->` markers"
    )]
    NoSection {
        /// The document.
        path: PathBuf,
        /// The section.
        section: String,
    },
}

impl BenchError {
    /// An [`BenchError::Io`] maker for `map_err`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| BenchError::Io { op, path, source }
    }
}

pub use libnvc::report::error_chain as chain;
