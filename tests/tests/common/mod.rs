//! Helpers that several feature suites share (`devices`, `libraries`, `ldcache`,
//! `requests`, `spec`): container edits computed on the committed driver trees
//! ([`edits`]), and a world of real containers under runc through nvc-runtime
//! ([`containers`]). Each suite compiles this module and uses a part of it.

// Each suite uses a part of these helpers.
#![allow(dead_code)]

pub mod containers;
pub mod edits;

/// The Debian library folder, where the driver's libraries go in the container.
pub const LIB: &str = "/usr/lib/x86_64-linux-gnu";
