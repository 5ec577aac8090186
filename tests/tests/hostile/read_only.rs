//! `root.readonly`: a read-only rootfs gets only empty mount points and keeps every file.

use super::*;

/// `bundle` with root.readonly, saved.
fn read_only(bundle: Bundle) -> Bundle {
    bundle.readonly(true).write().unwrap()
}

/// Runs `bundle` as `create` (the prestart hook has run when it returns), then `start`,
/// until it ends, then `delete` (the poststop hook): the rootfs's digest while the
/// container exists, and the container's outcome (its output; the create's status).
fn run_seen_while_created(
    rt: &Runtime,
    bundle: &Bundle,
    id: &str,
    rootfs: &std::path::Path,
) -> (String, Outcome) {
    let mut out = rt.create(bundle, id);
    let during = tree_digest(rootfs);
    if out.success() {
        rt.start(id);
        let deadline = std::time::Instant::now() + BOUND;
        while !rt.state(id).stdout.contains("\"stopped\"") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        (out.stdout, out.stderr) = rt.container_output(id);
    }
    rt.delete(id);
    (during, out)
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn a_read_only_rootfs_gets_only_empty_mount_points_and_keeps_every_file() {
    let lab = Lab::new();
    let rt = lab.nvc_bounded();
    // Control: runc alone leaves a read-only rootfs as it was, so any change is nvc's.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let before = tree_digest(&rootfs);
    let out = rt.run(
        &read_only(lab.bundle(&rootfs, &[], "echo started")),
        &container_id("nvc-hostile-ro"),
    );
    assert!(out.success() && out.stdout.contains("started"), "{out:?}");
    assert_eq!(
        tree_digest(&rootfs),
        before,
        "runc alone changed the rootfs"
    );

    // nvc in a read-only rootfs adds only what the runtime adds for the spec's own mounts:
    // empty mount points. Its soname names are mounts of the library, and its ld.so.cache
    // is mounted over the image's.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let before = tree_digest(&rootfs);
    let script = format!(
        "head -c 4 {LIB}/libcuda.so.1 | grep -q ELF && echo soname-readable; \
         [ ! -L {LIB}/libcuda.so.1 ] && echo soname-not-a-link; echo done"
    );
    let (after, out) = run_seen_while_created(
        &rt,
        &read_only(lab.bundle(&rootfs, &all_gpus(), &script)),
        &container_id("nvc-hostile-ro"),
        &rootfs,
    );
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    for line in ["soname-readable", "soname-not-a-link"] {
        assert!(
            out.success() && out.stdout.lines().any(|l| l == line),
            "a read-only GPU container did not print {line}: {out:?}\n{}",
            tail(&lab.nvc_log(), 10)
        );
    }
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    let new: std::collections::BTreeSet<&str> = after.lines().collect();
    let changed: Vec<&&str> = old.difference(&new).collect();
    assert!(
        changed.is_empty(),
        "nvc changed files of a read-only rootfs:\n{}",
        digest_diff(&before, &after)
    );
    let added: Vec<&&str> = new.difference(&old).collect();
    assert!(!added.is_empty(), "no mount point was made");
    for line in added {
        assert!(
            line.ends_with(" dir") || line.contains(" file 0 bytes "),
            "nvc wrote more than an empty mount point into a read-only rootfs: {line}"
        );
    }
    // Once the container has ended, not even those: the poststop hook took them away.
    let ended = tree_digest(&rootfs);
    assert!(
        ended == before,
        "nvc left mount points in a read-only rootfs after the container:\n{}",
        digest_diff(&before, &ended)
    );
    outside.assert_untouched("root.readonly");
}

/// One entry of a [`tree_digest`]: the relative path, the mode, the kind.
fn digest_entries(digest: &str) -> std::collections::BTreeMap<String, (u32, String)> {
    digest
        .lines()
        .filter_map(|l| {
            let mut fields = l.split(' ');
            let path = fields.next()?.to_string();
            let mode = u32::from_str_radix(fields.next()?, 8).ok()?;
            let _owner = fields.next()?;
            let kind = fields.next()?.to_string();
            Some((path, (mode, kind)))
        })
        .collect()
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn a_read_only_rootfs_with_every_mount_point_in_place_starts_unchanged() {
    let lab = Lab::new();
    let rt = lab.nvc_bounded();
    // Learn what nvc creates: the same image, writable.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let before = digest_entries(&tree_digest(&rootfs));
    // Seen while the container exists: once it has ended, the poststop hook takes it away.
    let (during, out) = run_seen_while_created(
        &rt,
        &lab.bundle(&rootfs, &all_gpus(), "echo started"),
        &container_id("nvc-hostile-ro"),
        &rootfs,
    );
    assert!(out.success() && out.stdout.contains("started"), "{out:?}");
    let created: Vec<(String, (u32, String))> = digest_entries(&during)
        .into_iter()
        .filter(|(path, _)| !before.contains_key(path))
        .collect();
    assert!(
        created
            .iter()
            .any(|(p, _)| p.ends_with(&format!("libcuda.so.{VERSION}"))),
        "no libcuda mount point among what nvc created: {created:#?}"
    );

    // The mount points made beforehand, as plain files and folders; where nvc makes a
    // link in a writable rootfs, a read-only one gets a mount of the file: an empty file.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let mut made = Vec::new();
    for (path, (mode, kind)) in &created {
        let p = rootfs.join(path);
        match kind.as_str() {
            "dir" => std::fs::create_dir(&p).unwrap(),
            "file" => std::fs::write(&p, "").unwrap(),
            "link" if !path.ends_with("ld.so.cache") => std::fs::write(&p, "").unwrap(),
            _ => continue,
        }
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
        made.push(path.as_str());
    }
    let before = tree_digest(&rootfs);
    let readable = format!(
        "head -c 4 {LIB}/libcuda.so.{VERSION} | grep -q ELF && echo libcuda-readable; echo done"
    );
    let out = rt.run(
        &read_only(lab.bundle(&rootfs, &all_gpus(), &readable)),
        &container_id("nvc-hostile-ro"),
    );
    let after = tree_digest(&rootfs);
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    assert!(
        out.success() && out.stdout.lines().any(|l| l == "libcuda-readable"),
        "a read-only rootfs with the mount points {made:?} did not start with libcuda: {out:?}\n{}",
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        before == after,
        "nvc changed a read-only rootfs:\n{}",
        digest_diff(&before, &after)
    );
    outside.assert_untouched("root.readonly with mount points");
}
