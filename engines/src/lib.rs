//! Registering nvc with container engines: Docker, containerd, CRI-O and Podman.
//!
//! Each engine module is pure over text: it takes the engine's current config files
//! (their text, as the caller read them; a missing file is empty text, or left out
//! where a function takes a list) and returns what they must become, leaving every
//! setting it does not own as it was (keys, order, comments, formatting). Running it on
//! its own output changes nothing.
//!
//! The crate does no I/O and does not depend on nvc-host: the CLI (`nvc runtime
//! configure`) reads the files, and writes what this returns through nvc-host's one
//! atomic writer (`nvc_host::files`), with the engines' write policy and the one-time
//! backup (`cli/src/configure/engine_file.rs`).

pub mod containerd;
pub mod crio;
pub mod docker;
pub mod podman;
mod tomlutil;

pub use tomlutil::TomlSyntax;

use std::path::Path;

/// The first line of every drop-in file nvc writes; a file at a drop-in path without it
/// belongs to someone else and is never overwritten or removed.
pub const MARKER: &str = "# Written by `nvc runtime configure`";

/// A config file as the caller read it: where it is (for messages) and its text.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The file's path.
    pub path: &'a Path,
    /// Its contents.
    pub text: &'a str,
}

/// Whether `text` is a drop-in file that nvc wrote (it starts with [`MARKER`]).
pub fn written_by_nvc(text: &str) -> bool {
    text.starts_with(MARKER)
}
