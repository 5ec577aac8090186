#![forbid(unsafe_code)]
//! libnvc: finds the NVIDIA driver on the host, parses what a container asks for, and
//! turns the two into one set of container edits.
//!
//! The pipeline is discover → request → edits: [`discover::discover`] reads the host
//! (rooted at the configured driver, dev and proc roots), [`request::Request::from_env`]
//! reads a container's environment, and [`edits::compute`] combines them into a
//! [`edits::ContainerEdits`] value that the runtime shim, the hook and CDI generation
//! all consume.

pub mod caps;
pub mod cdi;
pub mod devcgroup;
pub mod discover;
pub mod edits;
pub mod elf;
pub mod health;
pub mod ldcache;
pub mod lease;
pub mod node;
pub mod oci;
pub mod plan;
pub mod probe;
pub mod report;
pub mod request;
pub mod require;
pub mod usage;
pub mod version;
