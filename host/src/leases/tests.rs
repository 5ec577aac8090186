use super::*;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command};

use libnvc::lease::{LeasedGpu, LEASE_VERSION};
use libnvc::request::ExclusiveBy;

/// UUIDs of `n` GPUs.
fn uuids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("GPU-{i:08x}-2222-3333-4444-555555555555"))
        .collect()
}

fn refs(uuids: &[String]) -> Vec<GpuRef<'_>> {
    uuids
        .iter()
        .enumerate()
        .map(|(i, u)| GpuRef {
            index: i as u32,
            uuid: u,
        })
        .collect()
}

fn start_time(pid: u32) -> u64 {
    crate::process::stat(pid as i32).unwrap().start_time
}

/// A holder for this test process (live while the test runs).
fn me(container: &str, exclusive: Option<ExclusiveBy>) -> Holder {
    Holder {
        container: container.into(),
        pid: std::process::id() as i32,
        start_time: start_time(std::process::id()),
        since: 1_795_667_412,
        exclusive,
    }
}

/// A process that runs until dropped: another container's live holder.
struct Running(Child);

impl Running {
    fn new() -> Running {
        Running(Command::new("sleep").arg("600").spawn().unwrap())
    }

    fn holder(&self, container: &str, exclusive: Option<ExclusiveBy>) -> Holder {
        Holder {
            container: container.into(),
            pid: self.0.id() as i32,
            start_time: start_time(self.0.id()),
            since: 1_795_000_000,
            exclusive,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A holder whose process has ended (and was reaped).
fn ended(container: &str, exclusive: Option<ExclusiveBy>) -> Holder {
    let running = Running::new();
    let h = running.holder(container, exclusive);
    drop(running);
    h
}

/// Writes `holder`'s lease file for `uuids` into `dir`, as a start would have.
fn put(dir: &Path, holder: &Holder, uuids: &[String]) -> PathBuf {
    let file = LeaseFile {
        version: LEASE_VERSION,
        holder: holder.clone(),
        gpus: uuids
            .iter()
            .enumerate()
            .map(|(i, u)| LeasedGpu {
                index: i as u32,
                uuid: u.clone(),
            })
            .collect(),
    };
    let path = dir.join(lease::file_name(
        &holder.container,
        holder.exclusive.is_some(),
    ));
    fs::write(&path, lease::render(&file)).unwrap();
    path
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn read(path: &Path, container: &str) -> LeaseFile {
    match read_lease(path, container) {
        Found::Lease(file) => file,
        Found::Missing => panic!("{} is missing", path.display()),
        Found::Garbage(reason) => panic!("{}: {reason}", path.display()),
    }
}

#[test]
fn sixty_four_gpus_are_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = uuids(64);
    let taken = take_for(&st(dir.path()), me("big", None), &refs(&gpus)).unwrap();
    assert!(taken.is_some());
    assert_eq!(names(dir.path()), [".lock", "big.shared-lease"]);
    let path = dir.path().join("big.shared-lease");
    let file = read(&path, "big");
    assert_eq!(file.holder, me("big", None));
    assert_eq!(
        file.gpus.iter().map(|g| &g.uuid).collect::<Vec<_>>(),
        gpus.iter().collect::<Vec<_>>()
    );
    assert_eq!(file.gpus[63].index, 63);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // Another container sharing them adds its own file and leaves this one as it is.
    let before = fs::read(&path).unwrap();
    let other = Running::new();
    let second = take_for(&st(dir.path()), other.holder("second", None), &refs(&gpus)).unwrap();
    assert!(second.is_some());
    assert_eq!(
        names(dir.path()),
        [".lock", "big.shared-lease", "second.shared-lease"]
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn exclusive_and_shared_conflict_both_ways_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = uuids(3);
    let holder = Running::new();
    put(
        dir.path(),
        &holder.holder("abc123", Some(ExclusiveBy::Env)),
        &gpus[1..2],
    );
    // A live exclusive holder refuses shared and exclusive requests alike.
    for exclusive in [None, Some(ExclusiveBy::Annotation)] {
        let err = take_for(&st(dir.path()), me("b", exclusive), &refs(&gpus)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "GPU 1 ({}) is held exclusively by container abc123 since 2026-11-18 \
                 11:06:40 UTC (NVC_EXCLUSIVE); stop it or ask for another GPU",
                gpus[1]
            )
        );
    }
    // Refused: nothing written. Other GPUs are free.
    assert_eq!(names(dir.path()), [".lock", "abc123.lease"]);
    let free = take_for(
        &st(dir.path()),
        me("b", Some(ExclusiveBy::Env)),
        &refs(&gpus)[..1],
    );
    assert!(free.unwrap().is_some());

    // A live shared holder refuses an exclusive request, and shares.
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), &holder.holder("shared1", None), &gpus[2..]);
    let err = take_for(
        &st(dir.path()),
        me("b", Some(ExclusiveBy::Config)),
        &refs(&gpus),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "GPU 2 ({}) is in use by container shared1 since 2026-11-18 11:06:40 UTC, and \
             requests.exclusive in the nvc config asks for it alone; stop that container or \
             ask for another GPU",
            gpus[2]
        )
    );
    assert!(matches!(err, LeaseError::Conflict(Conflict::InUse { .. })));
    assert!(take_for(&st(dir.path()), me("b", None), &refs(&gpus))
        .unwrap()
        .is_some());
    assert_eq!(
        names(dir.path()),
        [".lock", "b.shared-lease", "shared1.shared-lease"]
    );
}

#[test]
fn ended_and_reused_holders_block_nothing_and_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = uuids(2);
    let gone = put(
        dir.path(),
        &ended("gone", Some(ExclusiveBy::Env)),
        &gpus[..1],
    );
    // A running process with the holder's pid but another start time.
    let reused = Holder {
        start_time: start_time(std::process::id()) + 1,
        ..me("reused", Some(ExclusiveBy::Env))
    };
    let reused = put(dir.path(), &reused, &gpus[1..]);
    // Another process holding other GPUs stays.
    let running = Running::new();
    let live = put(
        dir.path(),
        &running.holder("live", Some(ExclusiveBy::Env)),
        &uuids(4)[3..],
    );
    let taken = take_for(
        &st(dir.path()),
        me("x", Some(ExclusiveBy::Env)),
        &refs(&gpus),
    );
    assert!(taken.unwrap().is_some());
    assert!(!gone.exists() && !reused.exists() && live.exists());
    assert_eq!(names(dir.path()), [".lock", "live.lease", "x.lease"]);
}

#[test]
fn the_same_container_id_replaces_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = uuids(2);
    // A container restarted under the same id, its earlier process still there: replaced,
    // as it was when each GPU had its own file.
    let earlier = Running::new();
    put(
        dir.path(),
        &earlier.holder("same", Some(ExclusiveBy::Env)),
        &gpus,
    );
    // An earlier record of this very process under another id goes too.
    let renamed = put(dir.path(), &me("renamed", None), &gpus);
    let now = me("same", Some(ExclusiveBy::Env));
    let taken = take_for(&st(dir.path()), now.clone(), &refs(&gpus[..1]));
    assert!(taken.unwrap().is_some());
    assert!(!renamed.exists());
    assert_eq!(names(dir.path()), [".lock", "same.lease"]);
    let file = read(&dir.path().join("same.lease"), "same");
    assert_eq!(file.holder, now);
    assert_eq!(file.gpus.len(), 1);
}

#[test]
fn garbage_and_earlier_versions_are_removed_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gpus = uuids(1);
    fs::write(d.join("bad.lease"), b"\x00\xffnot json").unwrap();
    fs::write(d.join("big.lease"), vec![b'x'; 100_000]).unwrap();
    // Names another container than its own name.
    let running = Running::new();
    let lying = put(d, &running.holder("liar", Some(ExclusiveBy::Env)), &gpus);
    fs::rename(&lying, d.join("other.lease")).unwrap();
    // A link to what looks like a live exclusive lease: never read, removed.
    let outside = tempfile::tempdir().unwrap();
    let precious = put(
        outside.path(),
        &running.holder("link", Some(ExclusiveBy::Env)),
        &gpus,
    );
    let precious_bytes = fs::read(&precious).unwrap();
    std::os::unix::fs::symlink(&precious, d.join("link.lease")).unwrap();
    let fifo = d.join("fifo.lease");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    fs::create_dir(d.join("folder.lease")).unwrap();
    // Version 1's per-GPU file, looking held: harmless, removed.
    fs::write(
        d.join(&gpus[0]),
        format!(
            r#"{{"version":1,"gpu":"{}","index":0,"holders":[{{"container":"old","pid":{},"startTime":{},"since":1,"exclusive":"env"}}]}}"#,
            gpus[0],
            std::process::id(),
            start_time(std::process::id())
        ),
    )
    .unwrap();
    // What a killed writer left, and what a running one is writing.
    let killed = ".gone.lease.99999999-1.0123456789abcdef.nvc-tmp";
    fs::write(d.join(killed), "{").unwrap();
    let writing = format!(
        ".w.lease.{}-{}.0123456789abcdef.nvc-tmp",
        std::process::id(),
        start_time(std::process::id())
    );
    fs::write(d.join(&writing), "{").unwrap();
    // Not nvc's: left alone.
    fs::write(d.join("notes"), "mine").unwrap();

    let listed = list(&st(d)).unwrap();
    let garbage: Vec<&Path> = listed
        .iter()
        .filter_map(|l| match l {
            Listed::Garbage { path, .. } => Some(path.as_path()),
            Listed::Holder { .. } => None,
        })
        .collect();
    assert_eq!(garbage.len(), 7, "{listed:#?}");
    assert!(listed.iter().all(|l| matches!(l, Listed::Garbage { .. })));

    let taken = take_for(&st(d), me("me", Some(ExclusiveBy::Env)), &refs(&gpus));
    assert!(taken.unwrap().is_some());
    let mut want = vec![".lock", "me.lease", "notes", writing.as_str()];
    want.sort();
    assert_eq!(names(d), want);
    assert_eq!(fs::read(&precious).unwrap(), precious_bytes);

    // A folder in place of this container's own file is removed, else it stops the start.
    fs::create_dir(d.join("again.shared-lease")).unwrap();
    assert!(take_for(&st(d), me("again", None), &refs(&gpus))
        .unwrap()
        .is_some());
    assert!(fs::symlink_metadata(d.join("again.shared-lease"))
        .unwrap()
        .is_file());
    fs::remove_file(d.join("again.shared-lease")).unwrap();
    fs::create_dir(d.join("again.shared-lease")).unwrap();
    fs::write(d.join("again.shared-lease/x"), "").unwrap();
    let err = take_for(&st(d), me("again", None), &refs(&gpus)).unwrap_err();
    let said = libnvc::report::error_chain(&err);
    assert!(
        said.starts_with(
            "GPU leases ([leases] dir in the nvc config): cannot remove the folder in place of \
             a lease file "
        ),
        "{said}"
    );
}

#[test]
fn release_and_end_remove_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = uuids(2);
    let taken = take_for(&st(dir.path()), me("a", None), &refs(&gpus))
        .unwrap()
        .unwrap();
    taken.release();
    assert_eq!(names(dir.path()), [".lock"]);

    // The poststop hook: the container's process has ended.
    let holder = ended("b", Some(ExclusiveBy::Env));
    let path = put(dir.path(), &holder, &gpus);
    assert!(end(&st(dir.path()), "b").unwrap());
    assert!(!path.exists());
    assert!(!end(&st(dir.path()), "b").unwrap());
    // A live holder of that id is another container that took the id since: kept.
    let path = put(dir.path(), &me("c", None), &gpus);
    assert!(!end(&st(dir.path()), "c").unwrap());
    assert!(path.exists());
    // Garbage under the name goes.
    fs::write(dir.path().join("d.lease"), "garbage").unwrap();
    assert!(end(&st(dir.path()), "d").unwrap());
    // No folder, an id that cannot be one: nothing to do, and no folder made.
    let missing = dir.path().join("missing");
    assert!(!end(&st(&missing), "e").unwrap());
    assert!(!missing.exists());
    assert!(!end(&st(dir.path()), "../x").unwrap());

    // Giving back a lease another process took over under the same id keeps it.
    let taken = take_for(&st(dir.path()), ended("f", None), &refs(&gpus))
        .unwrap()
        .unwrap();
    put(dir.path(), &me("f", None), &gpus);
    taken.release();
    assert!(dir.path().join("f.shared-lease").exists());
}

#[test]
fn the_list_has_a_line_per_gpu_and_holder() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(list(&st(&dir.path().join("missing"))).unwrap(), Vec::new());
    let gpus = uuids(2);
    let running = Running::new();
    let live = running.holder("live", Some(ExclusiveBy::Env));
    put(dir.path(), &live, &gpus[..1]);
    let gone = Holder {
        since: 1,
        ..ended("gone", None)
    };
    put(dir.path(), &gone, &gpus);
    fs::write(dir.path().join(&gpus[1]), "{}").unwrap();
    let listed = list(&st(dir.path())).unwrap();
    let row = |index: u32, holder: &Holder, liveness| Listed::Holder {
        index,
        gpu: gpus[index as usize].clone(),
        holder: holder.clone(),
        liveness,
    };
    assert_eq!(
        listed,
        vec![
            row(0, &gone, Liveness::Gone),
            row(0, &live, Liveness::Live),
            row(1, &gone, Liveness::Gone),
            Listed::Garbage {
                path: dir.path().join(&gpus[1]),
                reason: "a lease file of an earlier nvc, one file per GPU".into(),
            },
        ]
    );
}

#[test]
fn a_shared_start_reads_only_what_can_refuse_it_and_sweeps_a_few() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gpus = uuids(1);
    // Ten shared holders' files a shared start must not need: garbage, so that reading
    // one removes it.
    for i in 0..10 {
        fs::write(d.join(lease::file_name(&format!("s{i}"), false)), "{").unwrap();
    }
    // An earlier nvc's file of a shared holder (`.lease`) is read by every start, and
    // its holder shares.
    let running = Running::new();
    let earlier = put(d, &running.holder("old", None), &gpus);
    fs::rename(&earlier, d.join("old.lease")).unwrap();
    assert!(take_for(&st(d), me("a", None), &refs(&gpus))
        .unwrap()
        .is_some());
    let garbage = |d: &Path| {
        names(d)
            .iter()
            .filter(|n| n.starts_with('s') && n.ends_with(lease::SHARED_SUFFIX))
            .count()
    };
    assert_eq!(garbage(d), 10 - SWEPT, "{:?}", names(d));
    assert!(d.join("old.lease").exists() && d.join("a.shared-lease").exists());
    // An exclusive start reads every file: the rest of the garbage goes, and the live
    // shared holders refuse it.
    let err = take_for(&st(d), me("x", Some(ExclusiveBy::Env)), &refs(&gpus)).unwrap_err();
    assert!(matches!(err, LeaseError::Conflict(Conflict::InUse { .. })));
    assert_eq!(garbage(d), 0, "{:?}", names(d));
}

#[test]
fn stale_shared_files_are_swept_by_later_shared_starts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gpus = uuids(1);
    // Holders that ended without a poststop hook (Kubernetes' containers, Docker's
    // --gpus).
    for i in 0..12 {
        put(d, &ended(&format!("gone{i}"), None), &gpus);
    }
    let stale = |d: &Path| names(d).iter().filter(|n| n.starts_with("gone")).count();
    let running: Vec<Running> = (0..4).map(|_| Running::new()).collect();
    for (i, r) in running.iter().enumerate() {
        let before = stale(d);
        let taken = take_for(&st(d), r.holder(&format!("live{i}"), None), &refs(&gpus));
        assert!(taken.unwrap().is_some());
        // Each start reads SWEPT of the others, live or not: it never keeps a stale one
        // it read, nor removes a live one.
        assert!(stale(d) <= before, "{:?}", names(d));
        assert!(stale(d) + SWEPT >= before, "{:?}", names(d));
        if i == 0 {
            // Only stale ones to pick from.
            assert_eq!(stale(d) + SWEPT, before, "{:?}", names(d));
        }
    }
    assert_eq!(names(d).iter().filter(|n| n.starts_with("live")).count(), 4);
    // The poststop hook of a shared container removes its shared file.
    let holder = ended("done", None);
    let path = put(d, &holder, &gpus);
    assert!(path.ends_with("done.shared-lease"));
    assert!(end(&st(d), "done").unwrap());
    assert!(!path.exists());
}

/// The state whose lease folder is `dir`.
fn st(dir: &Path) -> crate::state::StateDir {
    crate::state::StateDir::new(dir, dir)
}
