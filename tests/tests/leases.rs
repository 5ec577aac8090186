//! Exclusive GPUs and GPU leases, through real runc, nvc-runtime and nvc-hook against
//! fake driver trees: a container holding a GPU exclusively (`NVC_EXCLUSIVE=1`, the
//! annotation `nvc.exclusive`, `[requests] exclusive`) keeps every other container off
//! it, naming itself; an exclusive request is refused on a GPU a running container
//! shares; leases end with their container (killed, deleted or not); a container's
//! lease is one file, `<id>.lease` when exclusive and `<id>.shared-lease` when shared,
//! whatever the number of GPUs, removed when the container is deleted; stale, reused, garbage and linked lease files, and the per-GPU
//! files of an earlier nvc, block nothing and are removed; of concurrent exclusive starts
//! exactly one wins. Each test has its own lease folder (`[leases] dir`). Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use nvc_tests::{container_id, workspace_bin, Bundle, Outcome};
use serde_json::json;

mod common;

use common::containers::World;

const EXCLUSIVE: &str = "NVC_EXCLUSIVE=1";

/// A world whose nvc config ends with `extra` (TOML tables).
fn world(extra: &str) -> World {
    let w = World::new();
    if !extra.is_empty() {
        let path = w.dir.path().join("config.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push('\n');
        text.push_str(extra);
        std::fs::write(&path, text).unwrap();
    }
    w
}

fn lease_dir(w: &World) -> PathBuf {
    w.dir.path().join("leases")
}

fn uuid(w: &World, index: usize) -> String {
    w.gpus_in_bus_order()[index].uuid.clone()
}

fn gpu(index: usize) -> String {
    format!("NVIDIA_VISIBLE_DEVICES={index}")
}

/// A bundle running `script` with `env` and the annotations `annotations`.
fn bundle(w: &World, env: &[&str], annotations: &[(&str, &str)], script: &str) -> Bundle {
    w.n.set(w.n.get() + 1);
    let dir = w.dir.path().join(format!("bundle{}", w.n.get()));
    let mut b = Bundle::new(&dir, &w.rootfs.path)
        .unwrap()
        .args(&["sh", "-c", script])
        .env(env)
        .with_fake_proc(&w.fake);
    for (k, v) in annotations {
        b = b.set(&format!("/annotations/{k}"), json!(v));
    }
    b.write().unwrap()
}

/// Starts a container that sleeps, asking for `env` (and `annotations`); returns its id.
fn hold(w: &World, env: &[&str], annotations: &[(&str, &str)]) -> String {
    let b = bundle(w, env, annotations, "sleep 1000");
    let id = container_id("lease");
    let out = w.rt.create(&b, &id);
    assert!(out.success(), "{out:?}\nnvc log:\n{}", w.nvc_log());
    w.rt.start(&id).assert_success();
    id
}

/// What the runtime and the hook said: stderr and the runtime's log.
fn said(out: &Outcome) -> String {
    format!("{}\n{}", out.stderr, out.log_messages().join("\n"))
}

#[track_caller]
fn assert_refused(out: &Outcome, parts: &[&str]) {
    assert!(!out.success(), "started, expected a refusal: {out:?}");
    let text = said(out);
    for part in parts {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
}

#[track_caller]
fn assert_started(w: &World, out: &Outcome) {
    assert!(out.success(), "{out:?}\nnvc log:\n{}", w.nvc_log());
}

/// Kills the container `id` with SIGKILL and waits until runc says it stopped.
fn kill(w: &World, id: &str) {
    w.rt.command(&["kill", id, "KILL"]).assert_success();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.rt.state(id).stdout.contains("\"stopped\"") {
        assert!(Instant::now() < deadline, "{id} did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `nvc list --leases` (with `--json` when `json`) under the world's config.
fn nvc_list_leases(w: &World, json: bool) -> String {
    let mut cmd = Command::new(workspace_bin("nvc"));
    cmd.env("NVC_CONFIG", w.dir.path().join("config.toml"))
        .args(["list", "--leases"]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The lease file of `container` holding GPU `uuid` (pid, start time, exclusive).
fn lease_file(container: &str, uuid: &str, pid: i32, start: u64, exclusive: bool) -> String {
    json!({
        "version": 2,
        "holder": {"container": container, "pid": pid, "startTime": start,
                   "since": 1_795_667_412u64,
                   "exclusive": if exclusive { Some("env") } else { None }},
        "gpus": [{"index": 0, "uuid": uuid}],
    })
    .to_string()
}

/// Where the lease file of `container` is when it holds its GPUs exclusively.
fn lease_path(w: &World, container: &str) -> PathBuf {
    lease_dir(w).join(format!("{container}.lease"))
}

/// Where it is when it shares them.
fn shared_lease_path(w: &World, container: &str) -> PathBuf {
    lease_dir(w).join(format!("{container}.shared-lease"))
}

/// The names in the lease folder, sorted.
fn lease_names(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(lease_dir(w))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn own_start_time() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    libnvc::lease::parse_proc_stat(&stat).unwrap().start_time
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn an_exclusive_container_keeps_others_off_its_gpu_until_it_is_killed() {
    let w = world("");
    let a = hold(&w, &[&gpu(0), EXCLUSIVE], &[]);
    let gpu0 = uuid(&w, 0);
    let held = format!("GPU 0 ({gpu0}) is held exclusively by container {a} since ");
    // Shared or exclusive, GPU 0 is refused, naming A; so is "all".
    assert_refused(
        &w.run(&[&gpu(0)], "true"),
        &[&held, "(NVC_EXCLUSIVE); stop it or ask for another GPU"],
    );
    assert_refused(&w.run(&[&gpu(0), EXCLUSIVE], "true"), &[&held]);
    assert_refused(&w.run(&["NVIDIA_VISIBLE_DEVICES=all"], "true"), &[&held]);
    // Another GPU is free.
    assert_started(&w, &w.run(&[&gpu(1)], "true"));
    assert_started(&w, &w.run(&[&gpu(2), EXCLUSIVE], "true"));
    // The lease shows, live.
    let listed = nvc_list_leases(&w, false);
    assert!(listed.contains(&a) && listed.contains("live"), "{listed}");
    assert!(listed.contains("exclusive (NVC_EXCLUSIVE)"), "{listed}");
    let listed: serde_json::Value = serde_json::from_str(&nvc_list_leases(&w, true)).unwrap();
    let mine: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["container"] == json!(a))
        .collect();
    assert_eq!(mine.len(), 1, "{listed}");
    assert_eq!(mine[0]["uuid"], json!(gpu0));
    assert_eq!(mine[0]["exclusive"], json!(true));
    assert_eq!(mine[0]["live"], json!(true));
    // Killed, its state left in place: the GPU is free again.
    kill(&w, &a);
    assert!(nvc_list_leases(&w, false).contains("stale (process gone)"));
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    // Deleted too: still free.
    w.rt.delete(&a).assert_success();
    assert_started(&w, &w.run(&[&gpu(0)], "true"));
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_deleted_exclusive_container_frees_its_gpu() {
    let w = world("");
    let a = hold(&w, &[&gpu(1), EXCLUSIVE], &[]);
    assert_refused(&w.run(&[&gpu(1)], "true"), &[&a]);
    assert!(lease_path(&w, &a).is_file());
    // The poststop hook removes its lease file.
    w.rt.delete(&a).assert_success();
    assert!(!lease_path(&w, &a).exists(), "{:?}", lease_names(&w));
    assert_started(&w, &w.run(&[&gpu(1), EXCLUSIVE], "true"));
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_container_with_every_gpu_writes_one_lease_file() {
    let w = world("");
    let a = hold(&w, &["NVIDIA_VISIBLE_DEVICES=all"], &[]);
    assert_eq!(
        lease_names(&w),
        [".lock".to_string(), format!("{a}.shared-lease")]
    );
    let text = std::fs::read_to_string(shared_lease_path(&w, &a)).unwrap();
    let file = libnvc::lease::parse(text.as_bytes(), &a).unwrap();
    let all: Vec<String> = w
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.uuid.clone())
        .collect();
    let mut held: Vec<String> = file.gpus.iter().map(|g| g.uuid.clone()).collect();
    let mut want = all.clone();
    held.sort();
    want.sort();
    assert_eq!(held, want);
    assert!(all.len() > 1, "{all:?}");
    // A second shared container adds its own file; a container that has run to its end
    // leaves none.
    let b = hold(&w, &[&gpu(0)], &[]);
    assert_started(&w, &w.run(&[&gpu(1)], "true"));
    let mut want = vec![
        ".lock".to_string(),
        format!("{a}.shared-lease"),
        format!("{b}.shared-lease"),
    ];
    want.sort();
    assert_eq!(lease_names(&w), want);
    let listed = nvc_list_leases(&w, false);
    assert_eq!(listed.matches(&a).count(), all.len(), "{listed}");
    assert_eq!(listed.matches(&b).count(), 1, "{listed}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn an_exclusive_request_is_refused_on_a_gpu_a_running_container_shares() {
    let w = world("");
    let shared = hold(&w, &[&gpu(0)], &[]);
    let gpu0 = uuid(&w, 0);
    assert_refused(
        &w.run(&[&gpu(0), EXCLUSIVE], "true"),
        &[
            &format!("GPU 0 ({gpu0}) is in use by container {shared} since "),
            "and NVC_EXCLUSIVE asks for it alone",
        ],
    );
    // Sharing is fine, and so is another GPU exclusively.
    assert_started(&w, &w.run(&[&gpu(0)], "true"));
    assert_started(&w, &w.run(&[&gpu(1), EXCLUSIVE], "true"));
    let listed = nvc_list_leases(&w, false);
    assert!(
        listed.contains(&shared) && listed.contains("shared"),
        "{listed}"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_annotation_and_the_config_key_make_containers_exclusive() {
    let w = world("");
    let a = hold(&w, &[&gpu(0)], &[("nvc.exclusive", "true")]);
    assert_refused(
        &w.run(&[&gpu(0)], "true"),
        &[&a, "(annotation nvc.exclusive)"],
    );

    let w = world("[requests]\nexclusive = true\n");
    let a = hold(&w, &[&gpu(0)], &[]);
    assert_refused(
        &w.run(&[&gpu(0)], "true"),
        &[&a, "(requests.exclusive in the nvc config)"],
    );
    // NVC_EXCLUSIVE=0 does not opt out of the config key.
    assert_refused(&w.run(&[&gpu(0), "NVC_EXCLUSIVE=0"], "true"), &[&a]);
    assert_started(&w, &w.run(&[&gpu(1)], "true"));
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_bad_exclusive_value_stops_the_container() {
    let w = world("");
    let out = w.run(&[&gpu(0), "NVC_EXCLUSIVE=maybe"], "true");
    assert_refused(&out, &["NVC_EXCLUSIVE=\"maybe\" is not a boolean"]);
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn stale_and_reused_leases_block_nothing() {
    let w = world("");
    let dir = lease_dir(&w);
    std::fs::create_dir_all(&dir).unwrap();
    let gpu0 = uuid(&w, 0);
    // A process that has ended.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id() as i32;
    child.wait().unwrap();
    let path = lease_path(&w, "dead-holder");
    std::fs::write(&path, lease_file("dead-holder", &gpu0, dead, 12345, true)).unwrap();
    assert!(nvc_list_leases(&w, false).contains("stale (process gone)"));
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert!(!path.exists(), "the stale lease file stays");
    // A running process with the holder's pid but another start time: the pid was reused.
    let me = std::process::id() as i32;
    let start = own_start_time();
    let path = lease_path(&w, "reused-holder");
    std::fs::write(
        &path,
        lease_file("reused-holder", &gpu0, me, start + 1, true),
    )
    .unwrap();
    assert!(nvc_list_leases(&w, false).contains("stale (pid reused)"));
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert!(!path.exists(), "the stale lease file stays");
    // The same pid and start time is the holder: refused (the file is read as written).
    let path = lease_path(&w, "live-holder");
    std::fs::write(&path, lease_file("live-holder", &gpu0, me, start, true)).unwrap();
    assert_refused(
        &w.run(&[&gpu(0)], "true"),
        &["held exclusively by container live-holder since 2026-11-26 04:30:12 UTC"],
    );
    assert!(path.exists());
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn garbage_linked_odd_and_earlier_lease_files_are_removed() {
    let w = world("");
    let dir = lease_dir(&w);
    std::fs::create_dir_all(&dir).unwrap();
    let gpu0 = uuid(&w, 0);
    let path = lease_path(&w, "garbage");
    for garbage in [
        &b"\x00\xffnot json"[..],
        b"",
        b"{\"version\":2}",
        &[b'x'; 100_000],
    ] {
        std::fs::write(&path, garbage).unwrap();
        assert!(nvc_list_leases(&w, false).contains("garbage ("));
        assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
        assert!(!path.exists(), "{garbage:?} stays");
    }
    // A link, to a file that looks like a live exclusive lease: never followed, removed.
    let target = w.dir.path().join("precious");
    let me = std::process::id() as i32;
    let looks_held = lease_file("via-link", &gpu0, me, own_start_time(), true);
    std::fs::write(&target, &looks_held).unwrap();
    let link = lease_path(&w, "via-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), looks_held);
    assert!(std::fs::symlink_metadata(&link).is_err());
    // A FIFO blocks nothing; an empty folder is removed.
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert!(std::fs::symlink_metadata(&path).is_err());
    std::fs::create_dir(&path).unwrap();
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert!(std::fs::symlink_metadata(&path).is_err());
    // An earlier nvc's per-GPU file, looking held by a live process: harmless, removed.
    let earlier = dir.join(&gpu0);
    std::fs::write(
        &earlier,
        json!({"version": 1, "gpu": gpu0, "index": 0, "holders": [
            {"container": "earlier", "pid": me, "startTime": own_start_time(),
             "since": 1_795_667_412u64, "exclusive": "env"}]})
        .to_string(),
    )
    .unwrap();
    assert!(nvc_list_leases(&w, false).contains("an earlier nvc"));
    assert_started(&w, &w.run(&[&gpu(0), EXCLUSIVE], "true"));
    assert!(!earlier.exists());
    assert_eq!(lease_names(&w), [".lock"]);
    // The lease folder itself as a link: refused with what to do, nothing followed.
    let w = world("");
    let elsewhere = w.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, lease_dir(&w)).unwrap();
    assert_refused(
        &w.run(&[&gpu(0)], "true"),
        &["is a symlink or not a folder"],
    );
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn of_concurrent_exclusive_starts_exactly_one_wins() {
    let w = world("");
    let ids: Vec<String> = (0..8).map(|_| container_id("race")).collect();
    let bundles: Vec<Bundle> = ids
        .iter()
        .map(|_| bundle(&w, &[&gpu(0), EXCLUSIVE], &[], "sleep 1000"))
        .collect();
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .zip(&bundles)
            .map(|(id, b)| s.spawn(|| w.rt.create(b, id)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&String> = ids
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| o.success())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:#?}\nnvc log:\n{}", w.nvc_log());
    let winner = winners[0];
    for (id, out) in ids.iter().zip(&outcomes) {
        if id != winner {
            assert_refused(
                out,
                &[&format!("held exclusively by container {winner} since")],
            );
        }
    }
    w.rt.start(winner).assert_success();
    assert_refused(&w.run(&[&gpu(0)], "true"), &[winner]);
}
