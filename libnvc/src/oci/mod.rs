//! OCI runtime integration: reading runc's command line ([`runc_args`]), reading and
//! editing a bundle's `config.json` without losing what nvc does not know ([`spec`]), what
//! the shim refuses about a rootfs ([`rootfs`]),
//! the host's request policy from the nvc config ([`policy`]), and the state a hook reads on
//! stdin ([`state`]).

pub mod policy;
pub mod rootfs;
pub mod runc_args;
pub mod spec;
pub mod state;

pub use policy::{request_policy, PolicyError};
