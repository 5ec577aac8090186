//! No trace in the image: when a GPU container ends, `nvc-hook poststop` takes away the
//! mount points, folders and links the prestart hook made in its rootfs and puts the
//! image's ld.so.cache back, so that the rootfs reused for another container (or a layer
//! committed from the stopped container) holds nothing nvc put there: no 0-byte
//! `libcuda.so.*` for the loader to find ("file too short"), nothing for ldconfig to call
//! empty. Real runc through nvc-runtime against fake driver trees; each World runs its
//! containers on one rootfs, as a reused rootfs. Needs root.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use nvc_tests::{staged, tree_digest};

mod common;

use common::containers::World;
use common::LIB;

/// A non-GPU container first: whatever runc itself makes in the rootfs is there before the
/// GPU container's snapshot.
fn settled(w: &World) -> String {
    w.ok(&[], "true");
    tree_digest(&w.rootfs.path)
}

/// The rootfs's entries whose names say NVIDIA (or libcuda), with their sizes.
fn driver_names(rootfs: &Path) -> Vec<String> {
    let digest = tree_digest(rootfs);
    digest
        .lines()
        .filter(|l| l.contains("nvidia") || l.contains("libcuda"))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_stopped_gpu_container_leaves_its_rootfs_as_it_was() {
    let w = World::new();
    let before = settled(&w);
    assert!(driver_names(&w.rootfs.path).is_empty(), "{before}");
    let out = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=all",
        ],
        "nvc-probe",
    );
    assert!(out.contains("cuda_version="), "{out}");
    assert_eq!(tree_digest(&w.rootfs.path), before, "{}", w.nvc_log());
    assert!(
        w.nvc_log().contains("things nvc made taken away"),
        "{}",
        w.nvc_log()
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_rootfs_reused_after_a_gpu_container_has_no_driver_debris() {
    let w = World::new();
    w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    // The next container, without nvc's help, on the same rootfs: no empty library for
    // the loader or ldconfig, no cache entry naming one.
    let out = w
        .run(
            &[],
            &format!(
                "ls -la {LIB} | grep -c -e nvidia -e libcuda; ldconfig -p | grep -c -e nvidia \
                 -e libcuda; ldconfig -v 2>&1 | grep -c -e empty -e 'too short'; nvc-probe"
            ),
        )
        .stdout;
    let counts: Vec<&str> = out.lines().take(3).collect();
    assert_eq!(counts, ["0", "0", "0"], "{out}\n{}", w.nvc_log());
    assert!(!out.contains("too short"), "{out}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_users_ldconfig_in_a_gpu_container_still_finds_the_driver_and_leaves_no_stale_entry() {
    let w = World::new();
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "ldconfig && ldconfig -p | grep -c libcuda.so.1 && nvc-probe",
    );
    assert!(
        out.contains(&format!(
            "realpath={}",
            staged(&format!("{LIB}/libcuda.so."))
        )),
        "{out}\n{}",
        w.nvc_log()
    );
    // The user's cache is theirs, but what it says of the driver's files (taken away) is
    // dropped from it.
    let after = w.ok(&[], "ldconfig -p | grep -c -e nvidia -e libcuda || true");
    assert_eq!(after.trim(), "0", "{}", w.nvc_log());
    assert!(w.nvc_log().contains("dropped from it"), "{}", w.nvc_log());
}

/// A package manager in a GPU container replaces a file by renaming a new one over it
/// (dpkg's `.dpkg-new`), a driver file nvc put there too (a distribution's `libnvidia-ml1`
/// upgraded in the container). The name is a link to the mount point on the runtime's
/// `/dev`, not a mount point itself, so the rename works (over a mount point it fails with
/// EBUSY, as upgrades inside containers fail under NVIDIA's toolkit) and ldconfig after
/// it too. The file is then the user's: it stays when the container ends, and the log
/// says so.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_package_manager_can_replace_a_driver_file_in_a_gpu_container() {
    let w = World::new();
    let lib = format!("{LIB}/libnvidia-ml.so.999.88.77");
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &format!(
            "echo from-the-package > {lib}.dpkg-new && mv -f {lib}.dpkg-new {lib} && \
             ldconfig && cat {lib}"
        ),
    );
    assert!(out.contains("from-the-package"), "{out}");
    let kept = std::fs::read_to_string(w.rootfs.path.join(lib.trim_start_matches('/')));
    assert_eq!(kept.ok().as_deref(), Some("from-the-package\n"));
    assert!(w.nvc_log().contains("1 left"), "{}", w.nvc_log());
}

/// Two GPU containers on one rootfs at once: the one that ends first leaves what it made
/// to the one still running (whose mounts sit on it), and the last one takes it all away.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_rootfs_shared_by_two_gpu_containers_is_cleaned_by_the_last_one() {
    let w = World::new();
    let before = settled(&w);
    let long = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "sleep 60");
    let id = format!("nvc-trace-{}", std::process::id());
    w.rt.create(&long, &id).assert_success();
    w.rt.start(&id).assert_success();

    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    assert!(out.contains("cuda_version="), "{out}");
    assert!(w.nvc_log().contains("still runs on"), "{}", w.nvc_log());
    assert_driver_whole(&w, &id);
    stop(&w, &id);
    assert_eq!(tree_digest(&w.rootfs.path), before, "{}", w.nvc_log());
}

/// The running container `id`'s libcuda is still the driver's (not taken away by another
/// container's end).
#[track_caller]
fn assert_driver_whole(w: &World, id: &str) {
    let inside = w.rt.command(&[
        "exec",
        id,
        "sh",
        "-c",
        &format!("wc -c < {LIB}/libcuda.so.1"),
    ]);
    inside.assert_success();
    let size: u64 = inside.stdout.trim().parse().unwrap();
    assert!(size > 1000, "{inside:?}");
}

/// A GPU container as containerd's CRI (or CRI-O) makes it for the kubelet, running
/// `script` with `env`; its edited spec and outcome.
fn kubernetes_container(
    w: &World,
    annotation: &str,
    env: &[&str],
    script: &str,
) -> (serde_json::Value, nvc_tests::Outcome) {
    w.n.set(w.n.get() + 1);
    let dir = w.dir.path().join(format!("cri{}", w.n.get()));
    let bundle = nvc_tests::Bundle::new(&dir, &w.rootfs.path)
        .unwrap()
        .args(&["sh", "-c", script])
        .env(env)
        .with_fake_proc(&w.fake)
        .set(&format!("/annotations/{annotation}"), "container".into())
        .write()
        .unwrap();
    let id = format!("nvc-test-{}-cri{}", std::process::id(), w.n.get());
    let out = w.rt.run(&bundle, &id);
    (bundle.read_config().unwrap(), out)
}

/// The records the hook keeps in the test's state folder: the folders holding a
/// `record.json`, wherever the state folder's layout puts them.
fn records(w: &World) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for name in nvc_tests::dir_names(dir) {
            let path = dir.join(&name);
            if path.is_dir() && !path.is_symlink() {
                if path.join("record.json").is_file() {
                    out.push(path.display().to_string());
                }
                walk(&path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&w.dir.path().join("state"), &mut out);
    out
}

/// Every file and folder nvc keeps per container or rootfs in the state folder (records,
/// rootfs folders, locks, however named): all but the driver-files cache and the empty
/// `rootfs/` folder. The test runtime keeps runc's state, log and the containers' output
/// there too (none of runc's for a deleted container).
fn rootfs_state(w: &World) -> Vec<String> {
    fn walk(dir: &Path, shown: &str, out: &mut Vec<String>) {
        for name in nvc_tests::dir_names(dir) {
            let path = dir.join(&name);
            let shown = format!("{shown}{name}");
            if path.is_dir() && !path.is_symlink() {
                walk(&path, &format!("{shown}/"), out);
                if shown != "rootfs" {
                    out.push(shown);
                }
            } else if !(name.starts_with("driver-files-")
                || name == "runc.log"
                || name.ends_with(".stdout")
                || name.ends_with(".stderr"))
            {
                out.push(shown);
            }
        }
    }
    let mut out = Vec::new();
    walk(&w.dir.path().join("state"), "", &mut out);
    out
}

/// Ids runc takes that an earlier record folder name mapped to one (`+` and `_`), for two
/// GPU containers of one bundle on one rootfs at once: two records; the one that ends
/// first leaves what it made to the other, whose driver stays whole, and when both have
/// ended the rootfs is as it was. (With one record folder for both, the second start
/// replaced the first's record and the second's end took the first's driver away while
/// it ran.)
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn containers_whose_ids_differ_only_in_characters_a_file_name_escapes_keep_apart() {
    let w = World::new();
    let before = settled(&w);
    let bundle = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "sleep 60");
    let first = format!("nvc-ids-{}+1", std::process::id());
    let second = format!("nvc-ids-{}_1", std::process::id());
    for id in [&first, &second] {
        w.rt.create(&bundle, id).assert_success();
        w.rt.start(id).assert_success();
    }
    assert_eq!(records(&w).len(), 2, "{:?}", records(&w));
    stop(&w, &second);
    assert_eq!(records(&w).len(), 1, "{:?}\n{}", records(&w), w.nvc_log());
    assert_driver_whole(&w, &first);
    stop(&w, &first);
    assert_eq!(tree_digest(&w.rootfs.path), before, "{}", w.nvc_log());
    assert!(rootfs_state(&w).is_empty(), "{:?}", rootfs_state(&w));
}

/// Kills and deletes the running container `id` (runc runs its poststop hook).
fn stop(w: &World, id: &str) {
    w.rt.command(&["kill", id, "KILL"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !w.rt.state(id).stdout.contains("\"stopped\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    w.rt.delete(id).assert_success();
}

/// A start the hook refuses part way (the image's firmware folder is a dangling link, so
/// the firmware cannot be mounted) leaves the rootfs and the state folder as they were:
/// runc runs no poststop hook for a container that never started.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_start_refused_part_way_leaves_the_rootfs_and_the_state_folder_as_they_were() {
    let w = World::new();
    settled(&w);
    let firmware = w.rootfs.path.join("lib/firmware");
    std::fs::create_dir_all(&firmware).unwrap();
    std::os::unix::fs::symlink("/nonexistent/nvidia-firmware", firmware.join("nvidia")).unwrap();
    let before = tree_digest(&w.rootfs.path);
    let out = w.run(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=all",
        ],
        "true",
    );
    assert!(!out.success(), "{out:?}\n{}", w.nvc_log());
    assert!(w.nvc_log().contains("was not started"), "{}", w.nvc_log());
    assert_eq!(tree_digest(&w.rootfs.path), before, "{}", w.nvc_log());
    assert!(rootfs_state(&w).is_empty(), "{:?}", rootfs_state(&w));
    let leases = nvc_tests::dir_names(&w.dir.path().join("leases"));
    assert!(
        leases.iter().all(|l| l == ".lock"),
        "the lease was given back: {leases:?}"
    );
}

/// Many lifecycles, with and without a poststop hook (Kubernetes' containers keep no
/// record), leave nothing in the state folder's rootfs/: no record, no rootfs folder, no
/// lock file.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn lifecycles_leave_no_lock_file_nor_record_behind() {
    let w = World::new();
    for _ in 0..3 {
        w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "true");
        let (_, out) = kubernetes_container(
            &w,
            "io.kubernetes.cri.container-type",
            &["NVIDIA_VISIBLE_DEVICES=all"],
            "true",
        );
        assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    }
    assert!(rootfs_state(&w).is_empty(), "{:?}", rootfs_state(&w));
}

fn poststop_hooks(spec: &serde_json::Value) -> usize {
    spec.pointer("/hooks/poststop")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len)
}

/// Sets `hook.leave-no-trace` in the world's nvc config.
fn leave_no_trace(w: &World, value: &str) {
    let config = w.dir.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "[hook]\n",
        &format!("[hook]\nleave-no-trace = \"{value}\"\n"),
    );
    std::fs::write(&config, text).unwrap();
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_kubernetes_container_keeps_no_record_and_gets_no_poststop_hook() {
    let w = World::new();
    for annotation in [
        "io.kubernetes.cri.container-type",
        "io.kubernetes.cri-o.ContainerType",
    ] {
        // The kubelet never starts it again and its rootfs goes with it: no poststop hook,
        // no record; the container itself gets its GPUs as any other.
        let (spec, out) =
            kubernetes_container(&w, annotation, &["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
        assert!(out.success(), "{out:?}\n{}", w.nvc_log());
        assert!(out.stdout.contains("cuda_version="), "{out:?}");
        assert_eq!(poststop_hooks(&spec), 0, "{spec:#}");
        assert_eq!(
            spec["hooks"]["prestart"].as_array().map(Vec::len),
            Some(1),
            "{spec:#}"
        );
        assert!(records(&w).is_empty(), "{:?}", records(&w));
        assert!(
            !driver_names(&w.rootfs.path).is_empty(),
            "what nvc made stays"
        );
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn always_cleans_after_a_kubernetes_container_too() {
    let w = World::new();
    leave_no_trace(&w, "always");
    let before = settled(&w);
    let (spec, out) = kubernetes_container(
        &w,
        "io.kubernetes.cri.container-type",
        &["NVIDIA_VISIBLE_DEVICES=all"],
        "nvc-probe",
    );
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert_eq!(poststop_hooks(&spec), 1, "{spec:#}");
    assert_eq!(tree_digest(&w.rootfs.path), before, "{}", w.nvc_log());
    assert!(records(&w).is_empty(), "the record goes with the container");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn never_leaves_what_nvc_made_and_keeps_no_record() {
    let w = World::new();
    leave_no_trace(&w, "never");
    let b = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "nvc-probe");
    let out =
        w.rt.run(&b, &format!("nvc-test-{}-never", std::process::id()));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert_eq!(poststop_hooks(&b.read_config().unwrap()), 0);
    assert!(records(&w).is_empty(), "{:?}", records(&w));
    assert!(
        !driver_names(&w.rootfs.path).is_empty(),
        "what nvc made stays"
    );
}

/// The hook bounds its capabilities before it reads the container and holds in each
/// phase only what that phase needs (nvc_host::privileges), from the prestart hook's
/// start to the poststop hook's end: what its debug log says it entered, in order.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_hooks_hold_only_what_each_phase_needs() {
    let w = World::new();
    w.ok(&["NVIDIA_VISIBLE_DEVICES=all"], "true");
    let log = w.nvc_log();
    let entered: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("privileges: phase ").map(|(_, rest)| rest))
        .collect();
    let effective = |phase: &str| -> Vec<&str> {
        entered
            .iter()
            .filter(|l| l.starts_with(&format!("{phase}:")))
            .map(|l| {
                l.split_once("effective ")
                    .and_then(|(_, r)| r.split(';').next())
                    .unwrap_or_default()
            })
            .collect()
    };
    // The prestart hook: the host's files, then set-up's phases, then the record.
    assert_eq!(effective("host")[0], "cap_dac_read_search", "{entered:#?}");
    let rootfs = effective("rootfs");
    assert!(
        !rootfs.is_empty()
            && rootfs
                .iter()
                .all(|e| *e == "cap_dac_override,cap_sys_admin"),
        "{entered:#?}"
    );
    assert_eq!(
        effective("enter-container"),
        ["cap_sys_chroot,cap_sys_ptrace,cap_sys_admin"],
        "{entered:#?}"
    );
    // Saved (prestart), leases ended (poststop): nothing.
    assert_eq!(effective("state"), ["none", "none"], "{entered:#?}");
    // The poststop hook takes things away with DAC override alone.
    assert_eq!(
        effective("undo").last(),
        Some(&"cap_dac_override"),
        "{entered:#?}"
    );
    assert!(log.contains("privileges: finished, none left"), "{log}");
}
