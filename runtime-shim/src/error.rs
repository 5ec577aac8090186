//! Why the shim could not start the container.

use std::io;
use std::path::PathBuf;

use libnvc::oci::spec::SpecError;
use libnvc::plan::PlanError;

/// Everything that stops the shim; each is reported on stderr, in runc's log and in
/// nvc's log, and the shim exits with status 1.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The nvc config could not be read.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
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
    /// The edited spec could not be saved; the file keeps its old content.
    #[error("cannot save the edited OCI spec {path} (it was left as it was)")]
    SaveSpec {
        /// The spec file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: nvc_host::files::FileError,
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
    /// The plan stopped: the spec, the rootfs, the request, the driver or the hook.
    #[error(transparent)]
    Plan(#[from] PlanError),
}
