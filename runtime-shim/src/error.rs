//! Why the shim could not start the container.

use std::io;
use std::path::PathBuf;

use libnvc::discover::DiscoverError;
use libnvc::edits::EditsError;
use libnvc::oci::spec::SpecError;
use libnvc::oci::PolicyError;
use libnvc::request::RequestError;

/// Everything that stops the shim; each is reported on stderr, in runc's log and in
/// nvc's log, and the shim exits with status 1.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The nvc config could not be read.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The config's `[requests]` section is invalid.
    #[error("invalid config file {path}")]
    Policy {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: PolicyError,
    },
    /// No configured runtime exists.
    #[error(
        "no low-level runtime found: none of {candidates} is an executable file named by \
         absolute path or found on PATH={search_path}; set [runtime] runtimes in {config}"
    )]
    NoRuntime {
        /// The candidates, as configured.
        candidates: String,
        /// The PATH they were looked up in.
        search_path: String,
        /// The config file.
        config: PathBuf,
    },
    /// The runtime could not be executed.
    #[error("cannot execute the runtime {runtime}")]
    Exec {
        /// The runtime.
        runtime: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The current directory, the default bundle, is unknown.
    #[error("cannot read the current directory, the default bundle")]
    CurrentDir(#[source] io::Error),
    /// The spec could not be read or written.
    #[error(transparent)]
    SpecFile(SpecError),
    /// The edited spec could not be saved; the file keeps its old content.
    #[error("cannot save the edited OCI spec {path} (it was left as it was)")]
    SaveSpec {
        /// The spec file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: SpecError,
    },
    /// The spec does not have the shape of an OCI spec.
    #[error("invalid OCI spec {path}")]
    BadSpec {
        /// The spec file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: SpecError,
    },
    /// The spec could not be edited.
    #[error("cannot edit the OCI spec {path}")]
    Edit {
        /// The spec file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: SpecError,
    },
    /// The container's `NVIDIA_*` variables are invalid.
    #[error("invalid GPU request in the container's environment")]
    Request(#[source] RequestError),
    /// The driver could not be read.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// The request cannot be met on this host.
    #[error(transparent)]
    Edits(#[from] EditsError),
    /// The configured hook is missing.
    #[error(
        "the hook {path} is not an executable file: install nvc-hook there or set [hook] path \
         in {config}"
    )]
    Hook {
        /// The configured hook path.
        path: PathBuf,
        /// The config file.
        config: PathBuf,
    },
    /// The rootfs is one the runtime must not be given (a linked `/dev`, the host's `/`).
    #[error(transparent)]
    Rootfs(#[from] libnvc::oci::rootfs::RootfsError),
}
