//! Faults and bad input, through nvc-runtime, nvc-hook and real runc against fake driver
//! trees. [`startup`]: the container's init killed before or while the hook runs, the hook
//! killed mid-way or past its timeout, the low-level runtime failing after the shim edited
//! the spec, and a hundred containers at once. [`bad_input`]: malformed specs, hostile
//! environment values, broken nvc configs, a missing driver, a bundle that cannot be
//! written (read-only, full disk), megabytes of annotations, and a shim killed while it
//! saves the spec.
//!
//! Every start either succeeds or fails with a message naming the file, variable or value
//! and what is wrong; afterwards the host is as it was: config.json never half-written,
//! the same mounts, the same files outside, no temporary file in the bundle, no process
//! left in the rootfs, no container left in runc's state. Needs root.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bad_input;
mod startup;

/// The device nodes a spec gives the container: `linux.devices`, which the runtime makes,
/// and the bind mounts under `/dev` of the nodes that are elsewhere on the host (a fake
/// tree's are).
fn spec_nodes(spec: &serde_json::Value) -> Vec<String> {
    let list = |v: &serde_json::Value| v.as_array().cloned().unwrap_or_default();
    let made = list(&spec["linux"]["devices"])
        .into_iter()
        .filter_map(|d| d["path"].as_str().map(String::from));
    let bound = list(&spec["mounts"])
        .into_iter()
        .filter(|m| m["type"] == "bind")
        .filter_map(|m| m["destination"].as_str().map(String::from))
        .filter(|d| d.starts_with("/dev/nvidia"));
    made.chain(bound).collect()
}
