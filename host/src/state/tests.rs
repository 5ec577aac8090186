use std::collections::HashSet;

use super::*;

fn state(dir: &Path) -> StateDir {
    StateDir::new(&dir.join("run/nvc"), &dir.join("run/nvc/leases"))
}

#[test]
fn keys_differ_for_every_id_runc_takes_and_fit_a_file_name() {
    let bundle = b"/run/bundle";
    let long_a = format!("{}a", "x".repeat(200));
    let long_b = format!("{}b", "x".repeat(200));
    let huge = "y".repeat(1024);
    let ids = ["a+1", "a_1", "a,1", "a.1", "a-1", &long_a, &long_b, &huge];
    let keys: HashSet<String> = ids.iter().map(|id| key(id, bundle)).collect();
    assert_eq!(keys.len(), ids.len(), "{keys:?}");
    for k in &keys {
        assert!(k.len() < 100, "{k}");
        assert!(!k.contains('/') && !k.starts_with('.'), "{k}");
    }
    // The same id in two bundles, or two runtimes' state folders.
    assert_ne!(key("web", b"/a"), key("web", b"/b"));
    // Where the id ends and the scope begins is part of the hash.
    assert_ne!(key("ab", b"c"), key("a", b"bc"));
    assert_eq!(key("web", b"/a"), key("web", b"/a"));
    assert!(key("web+1", b"/a").starts_with("web_1."));
}

#[test]
fn attach_records_are_per_runtime_state_folder_and_id_under_attached() {
    let s = StateDir::new(Path::new("/run/nvc"), Path::new("/run/nvc/leases"));
    let a = s.attach_record(Path::new("/run/runc"), "web");
    let b = s.attach_record(Path::new("/run/docker/runtime-runc/moby"), "web");
    let c = s.attach_record(Path::new("/run/runc"), "web+1");
    let d = s.attach_record(Path::new("/run/runc"), "web_1");
    assert_ne!(a, b);
    assert_ne!(c, d);
    assert!(a.starts_with("/run/nvc/attached"), "{}", a.display());
    assert_eq!(a, s.attach_record(Path::new("/run/runc"), "web"));
}

#[test]
fn a_rootfs_folder_goes_with_its_last_record_and_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let s = state(dir.path());
    let lock = s.lock_rootfs(&rootfs).unwrap();
    let folder = lock.path().to_path_buf();
    assert!(folder.join(LOCK).is_file());
    assert!(folder.starts_with(dir.path().join("run/nvc/rootfs")));
    std::fs::create_dir(folder.join("rec")).unwrap();
    assert_eq!(lock.records().unwrap(), ["rec"]);
    drop(lock);
    // A record in it: it stays, lock and all.
    assert!(folder.join(LOCK).is_file());
    let lock = s.lock_rootfs(&rootfs).unwrap();
    std::fs::remove_dir(folder.join("rec")).unwrap();
    drop(lock);
    assert!(!folder.exists());
    assert_eq!(
        std::fs::read_dir(dir.path().join("run/nvc/rootfs"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_waiter_whose_lock_was_removed_under_it_takes_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let s = state(dir.path());
    let first = s.lock_rootfs(&rootfs).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let s = s.clone();
        let rootfs = rootfs.clone();
        std::thread::spawn(move || {
            let lock = s.lock_rootfs(&rootfs).unwrap();
            // It holds the folder's lock as the folder names it now.
            assert!(same_file(&lock.parent, &lock.name, &lock.dir));
            assert!(same_file(&lock.dir, LOCK, &lock._lock));
            tx.send(()).unwrap();
            drop(lock);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "the lock is held");
    // Dropped empty: folder and lock are removed while the waiter waits on the old lock.
    drop(first);
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    waiter.join().unwrap();
    assert!(!dir
        .path()
        .join("run/nvc/rootfs")
        .read_dir()
        .unwrap()
        .any(|_| true));
}

#[test]
fn a_missing_rootfs_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = state(dir.path())
        .lock_rootfs(&dir.path().join("gone"))
        .unwrap_err();
    let said = libnvc::report::error_chain(&err);
    assert!(
        said.contains("state-dir") && said.contains("gone"),
        "{said}"
    );
}
