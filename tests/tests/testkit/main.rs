//! The test kit itself, what the other suites stand on: the test rootfs, OCI bundles and
//! the runtime harness ([`harness`], with plain runc; root); the fake driver trees built
//! at run time ([`fake_driver`]; root); and the committed driver trees of
//! `testdata/driver-roots` with their generator ([`committed_trees`]; no root).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod committed_trees;
mod fake_driver;
mod harness;
