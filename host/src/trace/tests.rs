//! Records on a rootfs in a temporary folder (no root needed: nothing is mounted).

use std::path::Path;

use super::*;
use crate::state::StateDir;

struct World {
    dir: tempfile::TempDir,
    rootfs: PathBuf,
    state: StateDir,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    let run = dir.path().join("run/nvc");
    let state = StateDir::new(&run, &run.join("leases"));
    World { dir, rootfs, state }
}

/// A pid that names no process: a child that has been reaped.
fn ended_pid() -> i32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    child.wait().unwrap();
    pid
}

/// Makes `files` in the rootfs as set-up does, journaled into `record`.
fn make(w: &World, record: &RecordDir, files: &[&str]) -> Trace {
    let root = ContainerRoot::open(&w.rootfs).unwrap();
    root.journal_to(record.journal());
    for f in files {
        root.file_mount_point(Path::new(f), 0o644).unwrap();
    }
    Trace {
        made: root.made(),
        ldcache: None,
    }
}

fn me() -> i32 {
    std::process::id() as i32
}

#[test]
fn ids_runc_tells_apart_have_records_apart() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    // runc takes both; they once shared one folder (`a_1`), and the second start's
    // record replaced the first's.
    let plus = RecordDir::create(&lock, "a+1", &bundle, &w.rootfs, me()).unwrap();
    let plus_trace = make(&w, &plus, &["/usr/lib/plus.so"]);
    let under = RecordDir::create(&lock, "a_1", &bundle, &w.rootfs, me()).unwrap();
    let under_trace = make(&w, &under, &["/usr/lib/under.so"]);
    plus.save(&lock, &plus_trace).unwrap();
    under.save(&lock, &under_trace).unwrap();
    assert_eq!(lock.records().unwrap().len(), 2);

    // Both run (on this process): the first to end leaves what it made to the other,
    // whose record, its own, then takes both away.
    let undone = undo(&lock, "a+1", &bundle, &w.rootfs).unwrap();
    assert_eq!(undone.handed_to.as_deref(), Some("a_1"), "{undone:?}");
    assert_eq!(lock.records().unwrap().len(), 1);
    assert!(w.rootfs.join("usr/lib/plus.so").exists());
    let undone = undo(&lock, "a_1", &bundle, &w.rootfs).unwrap();
    assert_eq!(undone.removed, 2, "{undone:?}");
    assert!(!w.rootfs.join("usr/lib/plus.so").exists());
    assert!(!w.rootfs.join("usr/lib/under.so").exists());
    drop(lock);
    // Nothing stays: no record, no rootfs folder, no lock.
    assert_eq!(
        std::fs::read_dir(w.state.root().join("rootfs"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn ids_equal_in_their_first_128_characters_have_records_apart() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let stem = "c".repeat(128);
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let one = RecordDir::create(&lock, &format!("{stem}1"), &bundle, &w.rootfs, me()).unwrap();
    let trace = make(&w, &one, &["/usr/lib/one.so"]);
    one.save(&lock, &trace).unwrap();
    let two = RecordDir::create(&lock, &format!("{stem}2"), &bundle, &w.rootfs, me()).unwrap();
    two.save(&lock, &Trace::default()).unwrap();
    let undone = undo(&lock, &format!("{stem}1"), &bundle, &w.rootfs).unwrap();
    assert_eq!(undone.removed, 1, "{undone:?}");
}

#[test]
fn a_record_is_read_only_by_its_own_container() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let rec = RecordDir::create(&lock, "web", &bundle, &w.rootfs, me()).unwrap();
    let trace = make(&w, &rec, &["/usr/lib/web.so"]);
    rec.save(&lock, &trace).unwrap();
    // Another container's record put under web's name (no name the state folder makes
    // can be): web's poststop leaves it and what it names alone.
    let name = RootfsState::record_name("web", &bundle);
    let file = lock.path().join(&name).join(RECORD);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("\"web\"", "\"other\"")).unwrap();
    // Its process runs (this one): the sweep leaves it too.
    let undone = undo(&lock, "web", &bundle, &w.rootfs).unwrap();
    assert_eq!(undone, Undone::default());
    assert!(w.rootfs.join("usr/lib/web.so").exists());
    assert!(lock.path().join(&name).exists());
}

#[test]
fn what_a_killed_hook_made_is_taken_away_by_the_next_start_or_poststop_on_the_rootfs() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let killed = RecordDir::create(&lock, "killed", &bundle, &w.rootfs, ended_pid()).unwrap();
    make(&w, &killed, &["/usr/lib/a.so", "/usr/lib/deep/b.so"]);
    // Killed: no save, only the journal.
    std::mem::forget(killed);
    drop(lock);
    assert!(w.rootfs.join("usr/lib/deep/b.so").exists());

    // A later container on the same rootfs ends (its own record is empty).
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let undone = undo(&lock, "later", &bundle, &w.rootfs).unwrap();
    assert_eq!(undone.swept, 1, "{undone:?}");
    assert!(!w.rootfs.join("usr/lib/a.so").exists());
    assert!(!w.rootfs.join("usr/lib/deep").exists());
    assert!(
        w.rootfs.join("usr/lib").is_dir(),
        "the image's own folder stays"
    );
    drop(lock);
    assert_eq!(
        std::fs::read_dir(w.state.root().join("rootfs"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn the_journal_keeps_the_images_cache_before_it_is_replaced() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    std::fs::create_dir_all(w.rootfs.join("etc")).unwrap();
    std::fs::write(w.rootfs.join("etc/ld.so.cache"), b"the image's").unwrap();
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let killed = RecordDir::create(&lock, "k", &bundle, &w.rootfs, ended_pid()).unwrap();
    let root = ContainerRoot::open(&w.rootfs).unwrap();
    root.journal_to(killed.journal());
    root.note_cache(Some(b"the image's"), b"nvc's");
    root.write_file(Path::new("/etc/ld.so.cache"), b"nvc's", 0o644)
        .unwrap();
    std::mem::forget(killed);
    let swept = sweep(&lock, &w.rootfs, None);
    assert_eq!(swept, 1);
    assert_eq!(
        std::fs::read(w.rootfs.join("etc/ld.so.cache")).unwrap(),
        b"the image's"
    );
}

#[test]
fn a_stale_record_naming_another_rootfs_path_is_removed_without_touching_this_one() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let other = w.dir.path().join("other-path");
    std::os::unix::fs::symlink(&w.rootfs, &other).unwrap();
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let stale = RecordDir::create(&lock, "s", &bundle, &other, ended_pid()).unwrap();
    make(&w, &stale, &["/usr/lib/s.so"]);
    std::mem::forget(stale);
    assert_eq!(sweep(&lock, &w.rootfs, None), 1);
    assert!(w.rootfs.join("usr/lib/s.so").exists());
    assert!(lock.records().unwrap().is_empty());
}

#[test]
fn a_hundred_lifecycles_leave_the_state_folder_as_one() {
    let w = world();
    let bundle = w.dir.path().join("bundle");
    let count = |w: &World| walk(w.state.root());
    for i in 0..100 {
        let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
        let rec = RecordDir::create(&lock, &format!("c{i}"), &bundle, &w.rootfs, me()).unwrap();
        let trace = make(&w, &rec, &["/usr/lib/x.so"]);
        rec.save(&lock, &trace).unwrap();
        drop(lock);
        let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
        undo(&lock, &format!("c{i}"), &bundle, &w.rootfs).unwrap();
        drop(lock);
        if i == 0 {
            assert_eq!(count(&w), 1, "only the rootfs/ folder");
        }
    }
    assert_eq!(count(&w), 1);
}

/// How many files and folders are under `dir`.
fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    1 + match e.file_type().is_ok_and(|t| t.is_dir()) {
                        true => walk(&e.path()),
                        false => 0,
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn nvc_ps_lists_every_record_read_only_those_whose_init_runs_first() {
    let w = world();
    // No state folder yet: no record, no error.
    assert_eq!(recorded_containers(&w.state).unwrap(), vec![]);
    let second = w.dir.path().join("rootfs2");
    std::fs::create_dir_all(second.join("usr/lib")).unwrap();
    let lock = w.state.lock_rootfs(&w.rootfs).unwrap();
    let gone = RecordDir::create(
        &lock,
        "gone",
        &w.dir.path().join("b1"),
        &w.rootfs,
        ended_pid(),
    )
    .unwrap();
    let trace = make(&w, &gone, &["/usr/lib/gone.so"]);
    gone.save(&lock, &trace).unwrap();
    drop(lock);
    let lock = w.state.lock_rootfs(&second).unwrap();
    let root = ContainerRoot::open(&second).unwrap();
    let runs = RecordDir::create(&lock, "runs", &w.dir.path().join("b2"), &second, me()).unwrap();
    root.journal_to(runs.journal());
    root.file_mount_point(Path::new("/usr/lib/runs.so"), 0o644)
        .unwrap();
    // Still being set up (its journal not yet folded in): listed all the same, without
    // waiting for the lock this test holds.
    let listed = recorded_containers(&w.state).unwrap();
    let ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["runs", "gone"]);
    assert_eq!(listed[0].bundle, w.dir.path().join("b2"));
    // Listing made nothing and removed nothing.
    assert_eq!(w.state.record_folders().unwrap().len(), 2);
    drop(runs);
    drop(lock);
}
