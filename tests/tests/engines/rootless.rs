//! Rootless podman: Debian 13's Podman 5.4 and Debian 14's Podman 5.8 run by a user of
//! their root (subordinate ids, `newuidmap` from uidmap, vfs storage in a folder the user
//! owns, `--network none`, cgroupfs on cgroup v1: no cgroups of the containers' own), with
//! runc (and crun: `crun.rs`), through nvc-hook from hooks.d and through CDI: the checks of
//! `assert_podman5_gpu_containers`, with what is true of a rootless container:
//!
//! - In a user namespace nothing may mknod a device: runc and podman bind the nodes (CDI)
//!   and nvc-hook binds them (hooks.d). So PROBE's device cgroup check, which makes its own
//!   nodes, finds none to open; each node present is opened instead and must reach the
//!   device (there is no driver behind the fake nodes: "No such device or address"), not be
//!   refused by a device cgroup or a `nodev` mount.
//! - Rootless podman on cgroup v1 puts the container in no cgroup of its own, and nvc-hook,
//!   in a user namespace of its own, leaves the device cgroup alone and says so in its log.
//!   What keeps the other GPUs out is that their nodes are not there and cannot be made.

use std::os::unix::fs::PermissionsExt;

use libnvc::report::error_chain;
use nvc_tests::{EngineRoot, FakeGpu, Outcome, Podman};

use super::podman::{check_podman5, User, DEBIAN13, DEBIAN14};
use super::{Seen, World};

/// Prepended to PROBE for rootless containers: each `/dev/nvidia*` node opened as it is,
/// printing `direct PATH <errno text>`.
pub(super) const OPEN_NODES: &str = "for n in /dev/nvidia*; do [ -c $n ] && \
    { head -c1 $n >/dev/null 2>/tmp/err; echo direct $n $(sed 's/.*: //' /tmp/err); }; done;";

/// The rootless user's uid and gid (its subordinate ids: `nvc_tests::RootUser`).
const UID: u32 = 4242;

/// What nvc-hook logs when it leaves the device cgroup to the runtime.
const LEFT_DEVICE_CGROUP: &str = "in a user namespace of its own (rootless): the container's \
    device cgroup is left as the runtime made it";

/// Asserts a rootless container saw exactly the nodes of `gpus` (and the control nodes,
/// and `more`), could open each, could make no node of its own, loaded libcuda and NVML by
/// soname, and `nvidia-smi -L` listed `gpus` in order.
#[track_caller]
pub(super) fn assert_gpus_bound(out: &Outcome, gpus: &[FakeGpu], more: &[&str], context: &str) {
    assert!(out.success(), "{context}: {out:?}");
    let seen = Seen::from(out);
    let mut want: Vec<String> = ["nvidiactl 195:255", "nvidia-uvm 238:0"]
        .iter()
        .chain(&["nvidia-uvm-tools 238:1"])
        .map(|n| format!("/dev/{n}"))
        .chain(more.iter().map(|n| n.to_string()))
        .chain(
            gpus.iter()
                .map(|g| format!("/dev/nvidia{0} 195:{0}", g.minor)),
        )
        .collect();
    want.sort();
    assert_eq!(seen.nodes, want, "{context}: device nodes\n{}", seen.text);
    let direct: Vec<&str> = seen
        .text
        .lines()
        .filter(|l| l.starts_with("direct "))
        .collect();
    assert_eq!(direct.len(), want.len(), "{context}\n{}", seen.text);
    for line in direct {
        assert!(
            line.ends_with("No such device or address"),
            "{context}: a node present is not usable: {line}\n{}",
            seen.text
        );
    }
    let made: Vec<&str> = seen
        .text
        .lines()
        .filter(|l| l.starts_with("open 195:"))
        .collect();
    assert_eq!(made.len(), 9, "{context}\n{}", seen.text);
    assert!(
        made.iter()
            .all(|l| l.ends_with("No such file or directory")),
        "{context}: a node was made in the user namespace\n{}",
        seen.text
    );
    let loaded = ["libcuda=ok", "libnvidia-ml=ok", "driver_version=999.88.77"];
    let missing: Vec<&&str> = loaded.iter().filter(|l| !seen.text.contains(*l)).collect();
    assert!(
        missing.is_empty(),
        "{context}: no {missing:?}\n{}",
        seen.text
    );
    assert!(
        nvc_tests::loaded_from(&seen.text, "/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77"),
        "{context}: libcuda's real path\n{}",
        seen.text
    );
    let listed: Vec<bool> = seen
        .gpus
        .iter()
        .zip(gpus)
        .map(|(line, gpu)| line.contains(&gpu.uuid))
        .collect();
    assert_eq!(
        listed,
        vec![true; gpus.len()],
        "{context}: nvidia-smi -L\n{}",
        seen.text
    );
}

/// `podman` run by a new user of `root` (uid [`UID`]), with the fake driver's nodes in
/// `/dev` (see `nvc_tests::RootView::dev_nodes`), allowed to read the test's folder
/// (tempfile makes it 0700) and to write nvc's log: the hook runs as the user.
pub(super) fn run_as_user(w: &World, root: &EngineRoot, podman: Podman) -> Podman {
    let user = root
        .user(&w.path("user"), "nvc-rootless", UID)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    std::fs::set_permissions(w.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for path in [w.path("nvc"), w.path("nvc/nvc.log")] {
        if path.exists() {
            std::os::unix::fs::chown(&path, Some(UID), Some(UID)).unwrap();
        }
    }
    podman
        .with_dev_nodes(&w.fake.dev_dir())
        .rootless(&user)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

/// Asserts nvc-hook said, in its log, that it left the device cgroup to the runtime, and
/// wrote none.
pub(super) fn assert_device_cgroup_left(w: &World, label: &str) {
    let log = w.nvc_log();
    assert!(
        log.contains(LEFT_DEVICE_CGROUP),
        "{label}: the hook did not say it left the device cgroup:\n{log}"
    );
    assert!(
        !log.contains("allowed c ") && !log.contains("replaced device program"),
        "{label}: the hook changed a device cgroup:\n{log}"
    );
}

#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn rootless_podman5_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN13, "runc", User::Rootless);
}

#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn rootless_podman58_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN14, "runc", User::Rootless);
}
