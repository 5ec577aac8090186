//! The spec's `nvc-hook cdi-mask-proc` in real runc containers, and run by hand as a
//! runtime that runs createContainer hooks too early would run it. This machine's kernel
//! has no `/proc/driver/nvidia`, so what the mask shows in a container is checked on the
//! mount code itself (`nvc_host::proc_mask`'s tests, on a procfs of their own) and on a
//! GPU machine (`tests/gpu/cdi.sh`); here: what the hook refuses, what it leaves alone,
//! and that it never stops a well-formed CDI container; and `cdi-links` on a read-only
//! rootfs made so before the hooks ran, as older crun releases do. Needs root.

use std::path::Path;
use std::process::{Command, Stdio};

use nvc_tests::{tree_digest, workspace_bin, Bundle};
use serde_json::{json, Value};

use super::containers::{gpu_nodes_inside, run_with_spec, run_with_spec_and, LIST_NODES};
use super::{device, Host};

/// The spec's set-up hook, which masks `/proc/driver/nvidia` among its steps.
fn mask_hook(h: &Host) -> Value {
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let hooks = spec["containerEdits"]["hooks"].as_array().unwrap().clone();
    hooks
        .into_iter()
        .find(|hook| hook["args"][1] == "cdi-setup")
        .unwrap_or_else(|| panic!("no cdi-setup hook in {spec:#}"))
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn every_cdi_container_runs_the_mask_hook_and_starts() {
    let h = Host::new();
    let hook = mask_hook(&h);
    assert_eq!(hook["hookName"], "createRuntime");
    let args = hook["args"].as_array().unwrap();
    assert_eq!(
        args[args.len() - 2..],
        [json!("--proc-root"), json!(h.fake.proc_root)]
    );
    let rootfs = h.rootfs("rootfs");
    let gpus = h.gpus_in_bus_order();
    // GPU 1 alone, and all: the hook finds their nodes among linux.devices, the host's
    // folder (the fake proc root), and a procfs at <rootfs>/proc that has no
    // driver/nvidia on this kernel; the container starts with its GPUs.
    let script = format!("{LIST_NODES}; ls /proc/driver; echo proc=$(stat -f -c %T /proc)");
    let out = run_with_spec(&h, &rootfs, &["1"], &script);
    assert!(out.success(), "{out:?}");
    assert_eq!(
        gpu_nodes_inside(&out.stdout),
        [format!(
            "/dev/nvidia{} 195:{}",
            gpus[1].minor, gpus[1].minor
        )]
    );
    assert!(out.stdout.contains("proc=proc"), "{out:?}");
    let out = run_with_spec(&h, &rootfs, &["all"], &script);
    assert!(out.success(), "{out:?}");
    assert_eq!(gpu_nodes_inside(&out.stdout).len(), gpus.len(), "{out:?}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn a_container_whose_proc_is_no_procfs_is_refused() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    // A tmpfs at /proc, as a hostile spec could ask: the mask would go onto a file
    // system the container can write, showing whatever it put there.
    let out = run_with_spec_and(&h, &rootfs, &["0"], "echo started", |b| {
        b.set(
            "/mounts/0",
            json!({"destination": "/proc", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "nodev"]}),
        )
        .set("/linux/maskedPaths", json!([]))
        .set("/linux/readonlyPaths", json!([]))
    });
    assert!(!out.success(), "{out:?}");
    assert!(!out.stdout.contains("started"), "{out:?}");
    let all = format!("{}{}", out.stderr, out.log);
    assert!(all.contains("nvc-hook cdi-setup: "), "{out:?}");
    assert!(
        all.contains("tmpfs") && all.contains("procfs"),
        "the reason names what /proc is and what it should be: {out:?}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn an_image_whose_proc_driver_leads_out_changes_nothing_outside() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    // The image's /proc/driver leads to a host folder shaped like the driver's; the
    // runtime's procfs hides it, and the hook works on that procfs only.
    let victims = victims(&h);
    link_proc_driver(&rootfs.path, &victims);
    let before = tree_digest(&victims);
    let out = run_with_spec(&h, &rootfs, &["0"], "echo started; ls /proc/driver");
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.contains("started"), "{out:?}");
    assert_eq!(
        tree_digest(&victims),
        before,
        "the hook wrote through the link"
    );
}

/// A host folder shaped like `/proc/driver`, for images to point at.
fn victims(h: &Host) -> std::path::PathBuf {
    let victims = h.dir.path().join("victims");
    std::fs::create_dir_all(victims.join("nvidia/gpus")).unwrap();
    std::fs::write(victims.join("nvidia/params"), "ModifyDeviceFiles: 1\n").unwrap();
    victims
}

/// Makes the image's `/proc/driver` a link to `to`.
fn link_proc_driver(rootfs: &Path, to: &Path) {
    let proc = rootfs.join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    std::os::unix::fs::symlink(to, proc.join("driver")).unwrap();
}

/// Runs `nvc-hook <args>` with `state` on stdin in a private mount namespace.
fn run_hook(args: &[&str], state: &Value) -> (bool, String) {
    run_hook_in(None, args, state)
}

/// [`run_hook`], with `read_only` (a rootfs) mounted read-only in that namespace first:
/// what older crun releases (1.21) give a createContainer hook of a spec with
/// `root.readonly`.
fn run_hook_in(read_only: Option<&Path>, args: &[&str], state: &Value) -> (bool, String) {
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private"]);
    if let Some(rootfs) = read_only {
        command
            .args(["sh", "-c"])
            .arg(r#"mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@""#)
            .arg(rootfs);
    }
    let mut child = command
        .arg(workspace_bin("nvc-hook"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hook that refuses before it reads its state closes the pipe: its answer is what
    // counts, not whether the state got written.
    let wrote =
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), state.to_string().as_bytes());
    if let Err(e) = wrote {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn a_hook_run_before_the_containers_mounts_refuses_the_container() {
    // A runtime that runs createContainer hooks before it mounts the container's /proc
    // (crun between its changes #2094 and #2168) leaves the image's folder at
    // <rootfs>/proc: the fresh procfs, with every GPU, would come after the hook.
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let victims = victims(&h);
    link_proc_driver(&rootfs.path, &victims);
    let before = tree_digest(&victims);
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let node = &device(&spec, "0")["containerEdits"]["deviceNodes"][0];
    let bundle = Bundle::new(&h.dir.path().join("bundle"), &rootfs.path)
        .unwrap()
        .set(
            "/linux/devices/-",
            json!({"path": node["path"], "type": "c", "major": node["major"],
                   "minor": node["minor"]}),
        )
        .write()
        .unwrap();
    let state = json!({"ociVersion": "1.0.2", "id": "early", "status": "creating",
                       "pid": 1, "bundle": bundle.dir});
    let proc_root = h.fake.proc_root.to_str().unwrap();
    let args = ["cdi-mask-proc", "--proc-root", proc_root];
    let (ok, stderr) = run_hook(&args, &state);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.starts_with("nvc-hook cdi-mask-proc: the container's /proc is not mounted yet"),
        "{stderr}"
    );
    assert!(stderr.contains("before the container's mounts"), "{stderr}");

    // The same container with no /proc in its spec (runc refuses to start one, but a
    // runtime need not): its /proc is the image's folder, whose driver entry leads out;
    // nothing of the host is there to hide, and nothing is refused or written.
    let mounts: Vec<Value> = bundle.config["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] != "/proc")
        .cloned()
        .collect();
    let bundle = bundle.set("/mounts", json!(mounts)).write().unwrap();
    let (ok, stderr) = run_hook(&args, &state);
    assert!(ok, "{stderr}");
    assert!(Path::new(&bundle.dir).is_dir());
    assert_eq!(
        tree_digest(&victims),
        before,
        "the hook wrote through the link"
    );

    // Arguments the spec never writes are refused before anything is read.
    let (ok, stderr) = run_hook(&["cdi-mask-proc", "--proc-root", "proc"], &state);
    assert!(!ok);
    assert_eq!(
        stderr.trim_end(),
        "nvc-hook cdi-mask-proc: proc root \"proc\" is not an absolute path on the host"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn soname_links_on_a_rootfs_made_read_only_before_the_hooks_say_why() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let links = spec["containerEdits"]["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|hook| hook["args"][1] == "cdi-setup")
        .unwrap_or_else(|| panic!("no cdi-setup hook in {spec:#}"))["args"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|a| a.as_str().unwrap().to_string())
        // As an earlier spec's createContainer hook, where the runtime's remount shows.
        .filter(|a| a != "--enter")
        .collect::<Vec<_>>();
    let args: Vec<&str> = links.iter().map(String::as_str).collect();
    let before = tree_digest(&rootfs.path);
    for readonly in [true, false] {
        let bundle = Bundle::new(
            &h.dir.path().join(format!("bundle-{readonly}")),
            &rootfs.path,
        )
        .unwrap()
        .set("/root/readonly", json!(readonly))
        .write()
        .unwrap();
        let state = json!({"ociVersion": "1.0.2", "id": "ro", "status": "creating",
                           "pid": 1, "bundle": bundle.dir});
        let (ok, stderr) = run_hook_in(Some(&rootfs.path), &args, &state);
        assert!(!ok, "{stderr}");
        assert!(stderr.contains("Read-only file system"), "{stderr}");
        // Only a spec that asked for a read-only rootfs is the runtime's early remount;
        // a writable one on a read-only file system is something else, said as it is.
        assert_eq!(
            stderr.contains("made it so before running nvc's CDI hook"),
            readonly,
            "readonly {readonly}: {stderr}"
        );
    }
    assert_eq!(tree_digest(&rootfs.path), before);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn cdi_setup_enter_takes_only_a_containers_init_from_its_state() {
    // `cdi-setup --enter` (the spec's, at createRuntime) enters the mount namespace of the
    // state's pid: a pid the runtime reports inside the container (1, at
    // createContainer), or a process in the hook's own mount namespace (a forged or stale
    // state), is refused before anything is made.
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let hook = mask_hook(&h);
    let args: Vec<&str> = hook["args"].as_array().unwrap()[1..]
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--enter"), "{args:?}");
    let bundle = Bundle::new(&h.dir.path().join("bundle"), &rootfs.path)
        .unwrap()
        .write()
        .unwrap();
    let before = tree_digest(&rootfs.path);
    let state = |pid: u32| {
        json!({"ociVersion": "1.0.2", "id": "enter", "status": "creating",
               "pid": pid, "bundle": bundle.dir})
    };
    let (ok, stderr) = run_hook(&args, &state(1));
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("cdi-setup --enter needs the container's init as the host sees it")
            && stderr.contains("and got 1"),
        "{stderr}"
    );
    // The hook in this process's own mount namespace, told this process is the
    // container's init.
    let mut child = Command::new(workspace_bin("nvc-hook"))
        .args(&args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        state(std::process::id()).to_string().as_bytes(),
    )
    .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is in the hook's own mount namespace, so it is not a container's process"),
        "{stderr}"
    );
    assert_eq!(tree_digest(&rootfs.path), before);
}
