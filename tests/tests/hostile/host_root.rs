//! The host itself as the container: `root.path` is the host's root directory, and a
//! forged state whose pid is a process in the hook's own mount namespace.

use super::*;

/// An overlay whose lower layer is the host's `/` and whose upper and work layers are
/// on a tmpfs in the lab: mounted over `/` in a mount namespace of its own, whatever is
/// written to "/" there lands in the upper layer, never on the host.
struct Overlay {
    tmpfs: TestMount,
}

impl Overlay {
    fn new(lab: &Lab, name: &str) -> Overlay {
        let tmpfs = TestMount::tmpfs(&lab.path().join(name), "size=64m,mode=0700").unwrap();
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir(tmpfs.path().join(d)).unwrap();
        }
        Overlay { tmpfs }
    }

    fn layer(&self, name: &str) -> PathBuf {
        self.tmpfs.path().join(name)
    }

    /// `mount` options for it.
    fn options(&self) -> String {
        format!(
            "lowerdir=/,upperdir={},workdir={}",
            self.layer("upper").display(),
            self.layer("work").display()
        )
    }

    /// A `sleep` in a new mount namespace whose `/` has the overlay mounted over it.
    fn holder(&self) -> KillOnDrop {
        let script = format!(
            "mount -t overlay overlay -o {} / && echo ready && exec sleep 120",
            self.options()
        );
        let mut child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        let stdout = child.stdout.take().unwrap();
        let held = KillOnDrop(child);
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).unwrap();
        assert_eq!(
            ready.trim(),
            "ready",
            "the overlay could not be mounted over /"
        );
        let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", held.pid())).unwrap();
        assert!(
            mountinfo.lines().any(|l| l.split(' ').nth(4) == Some("/")
                && l.contains(" - overlay ")
                && l.contains(&self.options())),
            "no overlay over / in the holder's namespace:\n{mountinfo}"
        );
        held
    }

    /// Every path in the upper layer, with its type for what is not a folder.
    fn written(&self, files_only: bool) -> Vec<String> {
        tree_digest(&self.layer("upper"))
            .lines()
            .skip(1)
            .filter(|l| !files_only || !l.ends_with(" dir"))
            .map(str::to_string)
            .collect()
    }
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn the_hook_refuses_the_hosts_root_directory_as_rootfs() {
    let lab = Lab::new();
    // The overlay's tmpfs is the test's own mount: made before the host's is recorded.
    let overlay = Overlay::new(&lab, "overlay");
    let outside = Outside::new(lab.path(), lab.path());
    // The container's init stand-in: the hook enters its mount namespace, whose "/" is
    // the overlay, so that a hook that goes ahead writes into the overlay, not the host.
    let holder = overlay.holder();
    let bundle = Bundle::new(&lab.path().join("bundle-host-root"), Path::new("/"))
        .unwrap()
        .env(&all_gpus())
        // Every device allowed: a hook that went ahead grants nothing to the cgroup the
        // test runs in, which the holder shares.
        .set(
            "/linux/resources/devices",
            json!([{"allow": true, "access": "rwm"}]),
        )
        .write()
        .unwrap();
    assert_eq!(bundle.config["root"]["path"], "/");
    let begun = Instant::now();
    let out = lab.hook(&lab.config, &oci_state(holder.pid(), &bundle));
    let took = begun.elapsed();
    drop(holder);
    let written = overlay.written(false);
    assert!(
        !out.timed_out,
        "the hook did not end within {BOUND:?}: {out:?}"
    );
    assert!(
        !out.success() && out.stderr.contains(HOST_ROOT),
        "root.path \"/\" was not refused as the host's root directory ({took:?}): {out:?}\n\
         it wrote {} entries into \"/\" (the overlay's upper layer), e.g. {:?}\n{}",
        written.len(),
        written.iter().find(|l| l.contains("ld.so.cache")),
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        written.is_empty(),
        "the hook wrote into \"/\" (the overlay's upper layer): {written:#?}"
    );
    outside.assert_untouched("root.path \"/\" through the hook");
}

/// A low-level runtime that only records that it ran: `runc` is never reached.
const RECORDING_RUNTIME: &str = "#!/bin/sh\necho \"$@\" >>\"$(dirname \"$0\")/runtime-ran\"\n";

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn nvc_runtime_refuses_the_hosts_root_directory_before_the_runtime_runs() {
    let lab = Lab::new();
    // The overlay's tmpfs is the test's own mount: made before the host's is recorded.
    let overlay = Overlay::new(&lab, "overlay");
    let outside = Outside::new(lab.path(), lab.path());
    let fake = lab.path().join("fake-runtime");
    std::fs::create_dir(&fake).unwrap();
    let runtime = fake.join("runc");
    std::fs::write(&runtime, RECORDING_RUNTIME).unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ran = fake.join("runtime-ran");
    let config = lab.config_with("recording-runtime", |text| {
        let line = text.lines().find(|l| l.starts_with("runtimes = ")).unwrap();
        let with = format!("runtimes = [\"{}\"]", runtime.display());
        text.replace(line, &with)
    });
    let bundle = Bundle::new(&lab.path().join("bundle-host-root"), Path::new("/"))
        .unwrap()
        .env(&all_gpus())
        .write()
        .unwrap();
    let shim = workspace_bin("nvc-runtime");
    let bin_dir = shim.parent().unwrap().to_path_buf();
    let state = lab.path().join("state-host-root");
    let log = state.join("runc.log");
    // The shim runs as pid 1 of new mount and pid namespaces whose "/" is the overlay
    // (pivot_root): if it went ahead, whatever it or anything it ran wrote to "/" would
    // land in the overlay. The lab and the binaries are bound in from the host.
    let merged = overlay.layer("merged");
    let script = format!(
        "set -e; M='{m}'; \
         mount -t overlay overlay -o {options} \"$M\"; \
         for d in '{lab}' '{bin}'; do mkdir -p \"$M$d\"; mount --bind \"$d\" \"$M$d\"; done; \
         mount -t proc proc \"$M/proc\"; mount --rbind /dev \"$M/dev\"; mount --rbind /sys \"$M/sys\"; \
         cd \"$M\"; mkdir .nvc-old-root; pivot_root . .nvc-old-root; umount -l /.nvc-old-root; \
         rmdir /.nvc-old-root; cd /; \
         exec env NVC_CONFIG='{config}' '{shim}' --root '{state}' --log '{log}' --log-format json \
           run --bundle '{bundle}' nvc-hostile-host-root",
        m = merged.display(),
        options = overlay.options(),
        lab = lab.path().display(),
        bin = bin_dir.display(),
        config = config.display(),
        shim = shim.display(),
        state = state.display(),
        log = log.display(),
        bundle = bundle.dir.display(),
    );
    std::fs::create_dir_all(&state).unwrap();
    let mut command = Command::new("unshare");
    command.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]);
    let out = run_command(&mut command, lab.path(), BOUND);
    let said = format!(
        "{}\n{}",
        out.stderr,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    assert!(
        !ran.exists(),
        "nvc-runtime ran the low-level runtime for root.path \"/\": {:?}\n{out:?}\n{said}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
    assert!(
        !out.success() && said.contains(HOST_ROOT),
        "root.path \"/\" was not refused as the host's root directory: {out:?}\n{said}"
    );
    // The mount points made for the binds may be there; nothing else.
    let written = overlay.written(true);
    assert!(
        written.is_empty(),
        "something wrote into \"/\" (the overlay's upper layer): {written:#?}"
    );
    outside.assert_untouched("root.path \"/\" through nvc-runtime");
}

// ---------------------------------------------------------------------------------------
// A forged state.

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn a_state_pid_in_the_hooks_own_mount_namespace_is_refused() {
    let lab = Lab::new();
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let before = tree_digest(&rootfs);
    // A host process, in the mount namespace the test and so the hook run in.
    let host_process = KillOnDrop(
        Command::new("sleep")
            .arg("120")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let bundle = lab
        .bundle(&rootfs, &all_gpus(), "true")
        // Every device allowed: a hook that went ahead grants nothing to the cgroup the
        // test runs in, which the sleep shares.
        .set(
            "/linux/resources/devices",
            json!([{"allow": true, "access": "rwm"}]),
        )
        .write()
        .unwrap();
    let out = lab.hook(&lab.config, &oci_state(host_process.pid(), &bundle));
    drop(host_process);
    // What a hook that went ahead left: mounts in the host's namespace, on the rootfs.
    let leaked = mounts_under(lab.path());
    let tree_changed = outside.tree_change();
    let host_changed = outside.changes();
    let swept = Sweep::new(lab.path()).now();
    let after = tree_digest(&rootfs);
    assert!(
        !out.timed_out,
        "the hook did not end within {BOUND:?}: {out:?}"
    );
    assert!(
        !out.success() && out.stderr.contains(OWN_NAMESPACE),
        "a state pid in the hook's own mount namespace was not refused: {out:?}\n\
         it left {} mounts in the host's namespace, e.g. {:?} ({swept:?})\n{}",
        leaked.len(),
        leaked.first(),
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        leaked.is_empty(),
        "the hook mounted into the host's mount namespace: {leaked:#?} ({swept:?})"
    );
    assert!(tree_changed.is_none(), "the outside tree changed");
    assert!(host_changed.is_none(), "{host_changed:?}");
    assert!(
        before == after,
        "the rootfs changed:\n{}",
        digest_diff(&before, &after)
    );
}
