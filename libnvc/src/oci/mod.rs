//! OCI runtime integration: reading runc's command line ([`runc_args`]), reading and
//! editing a bundle's `config.json` without losing what nvc does not know ([`spec`]), what
//! the shim refuses about a rootfs ([`rootfs`]) and about a GPU container's namespaces
//! ([`namespace`]),
//! the host's request policy from the nvc config ([`policy`]), and the state a hook reads on
//! stdin ([`state`]).

pub mod namespace;
pub mod policy;
pub mod rootfs;
pub mod runc_args;
pub mod spec;
pub mod state;

pub use policy::{request_policy, PolicyError};
