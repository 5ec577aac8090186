//! CDI in real containers: runc with the generated spec's edits applied as an engine
//! applies them (and nvc-hook's createContainer hooks), Podman 4.3 reading the spec from
//! its CDI folder, and nvc-runtime honouring CDI names in `NVIDIA_VISIBLE_DEVICES` and
//! `cdi.k8s.io/` annotations. Needs root (runc, device nodes, mounts).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nvc_tests::{add_compat_libcuda, runc_path, tree_digest, Bundle, Outcome, Runtime, TestRootfs};
use serde_json::{json, Value};

use super::{Host, LIB};
use nvc_tests::FakeDriverSpec;

pub(super) const LIST_NODES: &str =
    "for n in /dev/nvidia*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; true";

/// The `/dev/nvidia*` nodes the container has, as "path major:minor" (decimal).
pub(super) fn nodes_inside(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("node "))
        .map(|l| {
            let mut it = l.split_whitespace();
            let path = it.next().unwrap();
            let (maj, min) = it.next().unwrap().split_once(':').unwrap();
            let maj = u32::from_str_radix(maj, 16).unwrap();
            let min = u32::from_str_radix(min, 16).unwrap();
            format!("{path} {maj}:{min}")
        })
        .collect()
}

/// The GPU nodes among [`nodes_inside`] (not the control nodes).
pub(super) fn gpu_nodes_inside(out: &str) -> Vec<String> {
    nodes_inside(out)
        .into_iter()
        .filter(|n| n.contains(" 195:") && !n.contains(" 195:255") && !n.contains(" 195:254"))
        .collect()
}

/// Runs `script` in a runc container from `rootfs` with the spec's `devices` applied.
pub(super) fn run_with_spec(
    h: &Host,
    rootfs: &TestRootfs,
    devices: &[&str],
    script: &str,
) -> Outcome {
    run_with_spec_and(h, rootfs, devices, script, |b| b)
}

/// [`run_with_spec`] with `more` done to the bundle first.
pub(super) fn run_with_spec_and(
    h: &Host,
    rootfs: &TestRootfs,
    devices: &[&str],
    script: &str,
    more: impl FnOnce(Bundle) -> Bundle,
) -> Outcome {
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let n = devices.join("-").replace(':', "_");
    let bundle = Bundle::new(&h.dir.path().join(format!("bundle-{n}")), &rootfs.path).unwrap();
    let bundle = more(bundle)
        .args(&["sh", "-c", script])
        .env(&["NVC_FAKE_PROC=/run/fake-proc"])
        .set(
            "/mounts/-",
            json!({"destination": "/run/fake-proc", "type": "bind",
                   "source": h.fake.proc_root, "options": ["rbind", "ro"]}),
        );
    let bundle = bundle
        .with_cdi_edits(&spec, devices, |_| true)
        .write()
        .unwrap();
    let rt = Runtime::runc(&h.dir.path().join(format!("state-{n}")));
    rt.run(&bundle, &nvc_tests::container_id("nvc-cdi"))
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn runc_with_the_spec_applied_gets_the_gpu_and_loads_libcuda() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let gpus = h.gpus_in_bus_order();
    let script = format!(
        "{LIST_NODES}; nvc-probe; ls -l {LIB}/libcuda.so.1; ldconfig -p | grep -E 'libcuda|libnvidia-ml|libc.so'; \
         echo env=$NVIDIA_VISIBLE_DEVICES"
    );
    let out = run_with_spec(&h, &rootfs, &["1"], &script);
    assert!(out.success(), "{out:?}");
    let g = &gpus[1];
    assert_eq!(
        gpu_nodes_inside(&out.stdout),
        [format!("/dev/nvidia{} 195:{}", g.minor, g.minor)],
        "{out:?}"
    );
    assert!(nodes_inside(&out.stdout).contains(&"/dev/nvidiactl 195:255".to_string()));
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("realpath={LIB}/libcuda.so.999.88.77")),
        "{out:?}"
    );
    assert!(out.stdout.contains("libnvidia-ml=ok"), "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
        )),
        "{out:?}"
    );
    // the image's own entries are kept
    assert!(out.stdout.contains("libc.so.6 (libc6,x86-64)"), "{out:?}");
    assert!(out.stdout.contains("env=void"), "{out:?}");

    // a second container on the same rootfs: the hooks find their work done
    let cache = std::fs::read(rootfs.ld_cache()).unwrap();
    let again = run_with_spec(&h, &rootfs, &["all"], &format!("{LIST_NODES}; nvc-probe"));
    assert!(again.success(), "{again:?}");
    assert_eq!(
        gpu_nodes_inside(&again.stdout).len(),
        gpus.len(),
        "{again:?}"
    );
    assert!(again.stdout.contains("libcuda=ok"), "{again:?}");
    assert_eq!(std::fs::read(rootfs.ld_cache()).unwrap(), cache);
}

/// After [`LIST_NODES`]: a script listing a container's `/dev/nvidia-caps` nodes, then
/// probing libcuda.
const MIG_NODES: &str = "for n in /dev/nvidia-caps/*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; nvc-probe";

/// A host whose fake driver has MIG devices.
fn mig_host() -> Host {
    Host::with(FakeDriverSpec {
        mig: true,
        ..FakeDriverSpec::default()
    })
}

/// The `/dev/nvidia-caps` nodes of GPU instance `gi`'s capabilities on `h`'s fake driver,
/// as `nodes_inside` lists them, sorted.
fn cap_nodes(h: &Host, gi: u32) -> Vec<String> {
    let mut nodes: Vec<String> = h
        .fake
        .spec
        .mig_caps()
        .iter()
        .filter(|c| c.gi == gi)
        .map(|c| format!("/dev/nvidia-caps/nvidia-cap{} 241:{}", c.minor, c.minor))
        .collect();
    nodes.sort();
    nodes
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn runc_with_a_mig_device_gets_its_parent_and_capability_nodes_only() {
    let h = mig_host();
    let rootfs = h.rootfs("rootfs");
    let parent = &h.gpus_in_bus_order()[0];
    let script = format!("{LIST_NODES}; {MIG_NODES}");
    // By index, and by the UUID NVML gives it (the name NVIDIA's device plugin uses).
    let uuid = h.fake.spec.mig_devices()[1].uuid.clone();
    for name in ["0:1", uuid.as_str()] {
        let out = run_with_spec(&h, &rootfs, &[name], &script);
        assert!(out.success(), "{name}: {out:?}");
        assert_eq!(
            gpu_nodes_inside(&out.stdout),
            [format!("/dev/nvidia{} 195:{}", parent.minor, parent.minor)],
            "{name}: {out:?}"
        );
        // GPU instance 2 and its compute instance: MIG device 1 of GPU 0.
        let want = cap_nodes(&h, 2);
        let mut got: Vec<String> = nodes_inside(&out.stdout)
            .into_iter()
            .filter(|n| n.starts_with("/dev/nvidia-caps/"))
            .collect();
        got.sort();
        assert_eq!(got, want, "{name}: {out:?}");
        assert!(out.stdout.contains("libcuda=ok"), "{name}: {out:?}");
    }
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn createcontainer_hooks_read_a_state_as_large_as_the_prestart_hook_does() {
    // runc copies the annotations into the state on every hook's stdin: megabytes of them
    // reach the CDI hooks as they reach the prestart hook (one limit, one error past it).
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let out = run_with_spec_and(&h, &rootfs, &["all"], "nvc-probe", |b| {
        b.set("/annotations/org.example.big", json!("a".repeat(3 << 20)))
    });
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn cdi_containers_keep_cuda_forward_compatibility() {
    // As through the prestart hook (ldcache::newer_cuda_compat_libraries_come_first):
    // the image's newer compat libcuda is the one loaded; an older one is ignored.
    let h = Host::new();
    let newer = h.rootfs("newer");
    add_compat_libcuda(&newer.path, h.dir.path(), "1000.1.2", 123450);
    let out = run_with_spec(&h, &newer, &["all"], "nvc-probe");
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout
            .contains("realpath=/usr/local/cuda/compat/libcuda.so.1000.1.2"),
        "{out:?}"
    );
    assert!(out.stdout.contains("cuda_version=123450"), "{out:?}");

    let older = h.rootfs("older");
    add_compat_libcuda(&older.path, h.dir.path(), "500.1.2", 111110);
    let out = run_with_spec(&h, &older, &["all"], "nvc-probe");
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("realpath={LIB}/libcuda.so.999.88.77")),
        "{out:?}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn createcontainer_hooks_never_write_outside_a_hostile_rootfs() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    // The image's ld.so.cache and soname link point at host files; a lib-folder entry named
    // like a library leads out with `..`.
    let victims = h.dir.path().join("victims");
    std::fs::create_dir(&victims).unwrap();
    std::fs::write(victims.join("ld.so.cache"), b"host cache").unwrap();
    std::fs::write(victims.join("libcuda.so.1"), b"host lib").unwrap();
    let cache = rootfs.ld_cache();
    std::fs::remove_file(&cache).unwrap();
    std::os::unix::fs::symlink(victims.join("ld.so.cache"), &cache).unwrap();
    let lib = rootfs.host_path(LIB);
    std::os::unix::fs::symlink(victims.join("libcuda.so.1"), lib.join("libcuda.so.1")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../../../../../../..".to_string() + victims.to_str().unwrap() + "/libcuda.so.1",
        lib.join("libevil.so.1"),
    )
    .unwrap();
    let before = tree_digest(&victims);

    let out = run_with_spec(
        &h,
        &rootfs,
        &["0"],
        &format!("nvc-probe; ls -l /etc/ld.so.cache {LIB}/libcuda.so.1"),
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(
        tree_digest(&victims),
        before,
        "a hook wrote outside the rootfs"
    );
    // the links were replaced inside the rootfs, not followed: the container loaded the
    // driver's libcuda, its cache was a file
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("{LIB}/libcuda.so.1 -> libcuda.so.999.88.77")),
        "{out:?}"
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("-") && l.ends_with("/etc/ld.so.cache")),
        "{out:?}"
    );
    // and once it ended, the poststop hook put the image's link back (the image's cache,
    // a link nvc never reads through, is not known to nvc, and stays as written, as on
    // the prestart path); nothing outside was touched
    assert_eq!(
        std::fs::read_link(lib.join("libcuda.so.1")).unwrap(),
        victims.join("libcuda.so.1")
    );
    assert_eq!(tree_digest(&victims), before);
}

/// `podman` with a private store under `dir`, as root, in this container's limits.
fn podman(dir: &Path) -> Vec<String> {
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    vec![
        "podman".into(),
        "--root".into(),
        p("storage"),
        "--runroot".into(),
        p("run"),
        "--tmpdir".into(),
        p("tmp"),
        "--storage-driver".into(),
        "vfs".into(),
        "--cgroup-manager".into(),
        "cgroupfs".into(),
        "--events-backend".into(),
        "file".into(),
    ]
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `podman run --rm ARGS` with the store `store`, runc, the fake proc tree, and the CDI
/// specs of `spec_dir` alone. Podman 4.3 reads specs only from /etc/cdi and /var/run/cdi
/// (no --cdi-spec-dir): it runs in a private mount namespace with a fresh /run holding
/// only that folder, and an empty /etc/cdi over any the host has.
fn run_podman(
    h: &Host,
    podman_bin: &str,
    store: &Path,
    spec_dir: &Path,
    args: &[&str],
) -> (bool, String, String) {
    let mut run = podman(store);
    run[0] = podman_bin.into();
    run.extend(
        [
            "run",
            "--rm",
            "--network",
            "none",
            "--runtime",
            runc_path().to_str().unwrap(),
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
            "-e",
            "NVC_FAKE_PROC=/run/fake-proc",
            "-v",
            &format!("{}:/run/fake-proc:ro", h.fake.proc_root.display()),
        ]
        .map(String::from),
    );
    run.extend(args.iter().map(|a| a.to_string()));
    let command = run
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let shell = format!(
        "set -e; mount -t tmpfs tmpfs /run; mkdir /run/cdi; mount --bind {} /run/cdi; \
         if [ -d /etc/cdi ]; then mount -t tmpfs tmpfs /etc/cdi; fi; exec {command}",
        shell_quote(spec_dir.to_str().unwrap())
    );
    let argv: Vec<String> = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &shell,
    ]
    .map(String::from)
    .to_vec();
    let (ok, out, err) = run_timeout(&argv, 180);
    (ok, out, format!("{err}\n$ {command}"))
}

/// Debian 12's podman, which the suite needs.
fn podman_bin() -> &'static str {
    ["/usr/bin/podman", "/usr/local/bin/podman"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or_else(|| {
            panic!("podman is not installed: run `scripts/deps.sh podman` (Debian 12's podman 4.3)")
        })
}

/// Runs `argv` with a timeout; returns (success, stdout, stderr).
fn run_timeout(argv: &[String], secs: u32) -> (bool, String, String) {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn podman_runs_a_gpu_container_from_the_generated_spec() {
    let h = Host::new();
    let podman_bin = podman_bin();
    let rootfs = h.rootfs("rootfs");
    let store = h.dir.path().join("podman");
    std::fs::create_dir(&store).unwrap();
    let tarball = h.dir.path().join("rootfs.tar");
    rootfs.tarball(&tarball).unwrap();
    let image = format!("localhost/nvc-cdi-test:{}", std::process::id());
    let mut import = podman(&store);
    import[0] = podman_bin.into();
    import.extend([
        "import".into(),
        tarball.to_string_lossy().into_owned(),
        image.clone(),
    ]);
    let (ok, _, err) = run_timeout(&import, 120);
    assert!(ok, "podman import failed: {err}");

    let spec_dir = h.dir.path().join("cdi");
    let spec_file = spec_dir.join("nvidia.yaml");
    h.ok(&["cdi", "generate", "--output", spec_file.to_str().unwrap()]);
    let gpus = h.gpus_in_bus_order();
    let script = format!("{LIST_NODES}; nvc-probe; ldconfig -p | grep libcuda.so.1");
    for (device, want_gpus) in [
        ("nvidia.com/gpu=0", vec![&gpus[0]]),
        ("nvidia.com/gpu=all", gpus.iter().collect()),
    ] {
        let (ok, out, err) = run_podman(
            &h,
            podman_bin,
            &store,
            &spec_dir,
            &["--device", device, &image, "sh", "-c", &script],
        );
        assert!(ok, "podman run --device {device} failed:\n{err}\n{out}");
        let mut got = gpu_nodes_inside(&out);
        got.sort();
        let mut want: Vec<String> = want_gpus
            .iter()
            .map(|g| format!("/dev/nvidia{} 195:{}", g.minor, g.minor))
            .collect();
        want.sort();
        assert_eq!(got, want, "{device}: {out}\n{err}");
        assert!(
            nodes_inside(&out).contains(&"/dev/nvidiactl 195:255".to_string()),
            "{out}"
        );
        assert!(out.contains("libcuda=ok"), "{device}: {out}\n{err}");
        assert!(
            out.contains(&format!("realpath={LIB}/libcuda.so.999.88.77")),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1"
            )),
            "{out}"
        );
    }
}

/// The container paths of the mounts of `spec`'s edits (every device's and the spec's).
fn spec_mount_points(spec: &Value) -> Vec<String> {
    let mut edits = vec![&spec["containerEdits"]];
    edits.extend(
        spec["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| &d["containerEdits"]),
    );
    edits
        .into_iter()
        .flat_map(|e| e["mounts"].as_array().into_iter().flatten())
        .filter_map(|m| m["containerPath"].as_str().map(str::to_string))
        .collect()
}

/// Asserts that a rootfs whose digest was `before` and is `after` changed by nothing but
/// the mount points an engine made for mounts at `points` (container paths): empty files
/// and folders there and the folders above them, added; nothing removed or changed (the
/// links and the ld.so.cache of nvc's set-up taken back).
fn assert_only_mount_points(rootfs: &Path, before: &str, after: &str, points: &[String]) {
    let points: Vec<String> = points.iter().map(|p| resolved(rootfs, p)).collect();
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    let new: std::collections::BTreeSet<&str> = after.lines().collect();
    let gone: Vec<&&str> = old.difference(&new).collect();
    assert!(
        gone.is_empty(),
        "changed or removed in the rootfs: {gone:#?}"
    );
    for line in new.difference(&old) {
        let path = line.split(' ').next().unwrap().trim_start_matches('.');
        let a_point = points
            .iter()
            .any(|p| Path::new(p).starts_with(path) && !path.is_empty());
        let is_point = line.ends_with(" dir") || line.contains(" file 0 bytes ");
        assert!(a_point && is_point, "left in the rootfs: {line}");
    }
}

/// `path` (a container path) with the links of `rootfs` on the way followed, as the
/// engine's mounts followed them (`/lib` is `usr/lib` in a merged-/usr image).
fn resolved(rootfs: &Path, path: &str) -> String {
    let mut at = PathBuf::from("/");
    for part in Path::new(path).components().skip(1) {
        let next = at.join(part);
        match std::fs::read_link(rootfs.join(next.strip_prefix("/").unwrap())) {
            Ok(target) if target.is_relative() => at = at.join(target),
            Ok(target) => at = target,
            Err(_) => at = next,
        }
    }
    at.display().to_string()
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn a_cdi_container_leaves_its_rootfs_as_it_was_but_for_the_engine_s_mount_points() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let before = tree_digest(&rootfs.path);
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let out = run_with_spec(&h, &rootfs, &["all"], "nvc-probe; ls -l /etc/ld.so.cache");
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");
    let mut points = spec_mount_points(&spec);
    points.push("/run/fake-proc".into());
    assert_only_mount_points(&rootfs.path, &before, &tree_digest(&rootfs.path), &points);
    // The links and cache were there while it ran, and its record is gone with it.
    assert!(!rootfs.host_path(LIB).join("libcuda.so.1").exists());
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need podman and runc"]
fn a_podman_cdi_container_leaves_its_rootfs_as_it_was_but_for_the_engine_s_mount_points() {
    // Podman runs the spec's hooks through runc: the set-up at createContainer, nvc's
    // poststop when it removes the container (`--rm`). `--rootfs`: the folder is the
    // container's root as it is, no overlay over it, so what stays in it is seen.
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let store = h.dir.path().join("podman");
    std::fs::create_dir(&store).unwrap();
    let spec_dir = h.dir.path().join("cdi");
    let spec_file = spec_dir.join("nvidia.yaml");
    h.ok(&["cdi", "generate", "--output", spec_file.to_str().unwrap()]);
    let root = rootfs.path.to_str().unwrap();
    // What Podman itself makes in a root (its mount points for /etc/hosts and the like)
    // is made by a container without a GPU first.
    let (ok, out, err) = run_podman(
        &h,
        podman_bin(),
        &store,
        &spec_dir,
        &["--rootfs", root, "true"],
    );
    assert!(ok, "{err}\n{out}");
    let before = tree_digest(&rootfs.path);
    let script = format!("nvc-probe; ls -l {LIB}/libcuda.so.1");
    let (ok, out, err) = run_podman(
        &h,
        podman_bin(),
        &store,
        &spec_dir,
        &[
            "--device",
            "nvidia.com/gpu=all",
            "--rootfs",
            root,
            "sh",
            "-c",
            &script,
        ],
    );
    assert!(ok, "{err}\n{out}");
    assert!(out.contains("libcuda=ok"), "{out}\n{err}");
    assert!(
        out.contains("libcuda.so.1 -> libcuda.so.999.88.77"),
        "{out}\n{err}"
    );
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let mut points = spec_mount_points(&spec);
    points.push("/run/fake-proc".into());
    assert_only_mount_points(&rootfs.path, &before, &tree_digest(&rootfs.path), &points);
}

/// A bundle run through nvc-runtime (runc underneath) with `env` and `annotations`.
fn run_through_shim(
    h: &Host,
    rootfs: &TestRootfs,
    env: &[&str],
    annotations: Value,
    script: &str,
) -> Outcome {
    let id = nvc_tests::container_id("nvc-cdi-shim");
    let mut env: Vec<String> = env.iter().map(|s| s.to_string()).collect();
    env.push("NVC_FAKE_PROC=/run/fake-proc".into());
    let bundle = Bundle::new(&h.dir.path().join(&id), &rootfs.path)
        .unwrap()
        .args(&["sh", "-c", script])
        .env(&env)
        .set("/annotations", annotations)
        .set(
            "/mounts/-",
            json!({"destination": "/run/fake-proc", "type": "bind",
                   "source": h.fake.proc_root, "options": ["rbind", "ro"]}),
        )
        .write()
        .unwrap();
    let rt = Runtime::nvc(&h.dir.path().join("state"), &h.config);
    rt.run(&bundle, &id)
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn shim_takes_cdi_names_in_nvidia_visible_devices() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let gpus = h.gpus_in_bus_order();
    let script = format!("{LIST_NODES}; nvc-probe");
    for (value, want) in [
        ("nvidia.com/gpu=1".to_string(), vec![&gpus[1]]),
        (format!("nvidia.com/gpu={}", gpus[2].uuid), vec![&gpus[2]]),
        ("nvidia.com/gpu=all".to_string(), gpus.iter().collect()),
    ] {
        let out = run_through_shim(
            &h,
            &rootfs,
            &[&format!("NVIDIA_VISIBLE_DEVICES={value}")],
            json!({}),
            &script,
        );
        assert!(out.success(), "{value}: {out:?}");
        let mut got = gpu_nodes_inside(&out.stdout);
        got.sort();
        let mut want: Vec<String> = want
            .iter()
            .map(|g| format!("/dev/nvidia{} 195:{}", g.minor, g.minor))
            .collect();
        want.sort();
        assert_eq!(got, want, "{value}: {out:?}");
        assert!(out.stdout.contains("libcuda=ok"), "{value}: {out:?}");
    }
    // a name of the wrong GPU is an error that names it
    let out = run_through_shim(
        &h,
        &rootfs,
        &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7"],
        json!({}),
        "true",
    );
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("GPU index 7 does not exist"), "{out:?}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn shim_takes_mig_devices_by_cdi_name_and_uuid() {
    let h = mig_host();
    let rootfs = h.rootfs("rootfs");
    let parent = &h.gpus_in_bus_order()[0];
    let script = format!("{LIST_NODES}; {MIG_NODES}");
    for mig in h.fake.spec.mig_devices() {
        let mut want = vec![format!("/dev/nvidia{} 195:{}", parent.minor, parent.minor)];
        want.extend(cap_nodes(&h, mig.gi));
        want.sort();
        let name = format!("nvidia.com/gpu={}", mig.uuid);
        for (env, annotations) in [
            (format!("NVIDIA_VISIBLE_DEVICES={name}"), json!({})),
            (String::new(), json!({"cdi.k8s.io/mig": name})),
        ] {
            let env: Vec<&str> = [env.as_str()]
                .into_iter()
                .filter(|e| !e.is_empty())
                .collect();
            let out = run_through_shim(&h, &rootfs, &env, annotations, &script);
            assert!(out.success(), "{name}: {out:?}");
            let mut got: Vec<String> = nodes_inside(&out.stdout)
                .into_iter()
                .filter(|n| {
                    n.starts_with("/dev/nvidia-caps/")
                        || (n.contains(" 195:") && !n.contains(" 195:25"))
                })
                .collect();
            got.sort();
            assert_eq!(got, want, "{name}: {out:?}");
            assert!(out.stdout.contains("libcuda=ok"), "{name}: {out:?}");
        }
    }
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn shim_takes_gpus_from_cdi_annotations() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let gpus = h.gpus_in_bus_order();
    let script = format!("{LIST_NODES}; nvc-probe");
    let out = run_through_shim(
        &h,
        &rootfs,
        &[],
        json!({"cdi.k8s.io/x": "nvidia.com/gpu=0", "io.other": "nvidia.com/gpu=1"}),
        &script,
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(
        gpu_nodes_inside(&out.stdout),
        [format!(
            "/dev/nvidia{} 195:{}",
            gpus[0].minor, gpus[0].minor
        )],
        "{out:?}"
    );
    // the hook read the same request: the driver's files are there
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");

    // another vendor's devices only: not a GPU container
    let out = run_through_shim(
        &h,
        &rootfs,
        &[],
        json!({"cdi.k8s.io/nic": "vendor.com/nic=eth1"}),
        &script,
    );
    assert!(out.success(), "{out:?}");
    assert!(nodes_inside(&out.stdout).is_empty(), "{out:?}");
    assert!(out.stdout.contains("libcuda=missing"), "{out:?}");

    // void, what the CDI spec sets once an engine injected the devices, wins
    let out = run_through_shim(
        &h,
        &rootfs,
        &["NVIDIA_VISIBLE_DEVICES=void"],
        json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"}),
        &script,
    );
    assert!(out.success(), "{out:?}");
    assert!(nodes_inside(&out.stdout).is_empty(), "{out:?}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn a_failing_cdi_hook_stops_the_container_with_its_reason() {
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let mut spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    spec["containerEdits"]["hooks"][0]["args"] = json!(["nvc-hook", "cdi-links", "--link", "x"]);
    let bundle = Bundle::new(&h.dir.path().join("bundle"), &rootfs.path)
        .unwrap()
        .args(&["sh", "-c", "echo started"]);
    let bundle = bundle
        .with_cdi_edits(&spec, &["0"], |_| true)
        .write()
        .unwrap();
    let rt = Runtime::runc(&h.dir.path().join("state"));
    let out = rt.run(&bundle, &nvc_tests::container_id("nvc-cdi-bad"));
    assert!(!out.success(), "{out:?}");
    assert!(!out.stdout.contains("started"), "{out:?}");
    // runc shows the hook's stderr; the message names the mode and the bad value
    let all = format!("{}{}", out.stderr, out.log);
    assert!(all.contains("nvc-hook cdi-links: invalid link"), "{out:?}");
    assert!(
        all.contains("<target>::<absolute path in the container>"),
        "{out:?}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn a_cdi_container_given_a_broken_gpu_is_refused_before_anything_is_made() {
    // The engine resolves CDI names, `all` included, to device nodes before nvc runs:
    // cdi-setup can only refuse a container given a GPU the health record says is broken,
    // as the prestart path refuses a request naming one.
    let h = Host::new();
    let rootfs = h.rootfs("rootfs");
    let gpus = h.gpus_in_bus_order();
    let bad = &gpus[1];
    std::fs::write(
        h.fake.dir.join("nvml-health.txt"),
        format!("{} lost\n", bad.uuid),
    )
    .unwrap();
    let update = h.nvc(&["health", "update"]);
    assert!(update.status.success(), "{update:?}");
    let record = h.dir.path().join("state/gpu-health.json");
    assert!(record.is_file(), "no record at {}", record.display());
    let soname_link = rootfs.path.join(&LIB[1..]).join("libcuda.so.1");

    for devices in [&["all"][..], &["1"][..]] {
        let out = run_with_spec(&h, &rootfs, devices, LIST_NODES);
        assert!(!out.success(), "{devices:?} started: {out:?}");
        let said = format!("{}{}", out.stderr, out.log);
        for part in [
            format!("the container's CDI devices: GPU 1 ({}", bad.uuid),
            "fell off the bus".to_string(),
            "nvidia-smi -r -i 1".to_string(),
            "health-check = false".to_string(),
        ] {
            assert!(
                said.contains(&part),
                "{devices:?}: {part:?} not said: {said}"
            );
        }
        assert!(
            std::fs::symlink_metadata(&soname_link).is_err(),
            "{devices:?}: the refused container's hook made its links"
        );
    }
    // A healthy GPU by name starts.
    let out = run_with_spec(&h, &rootfs, &["0"], LIST_NODES);
    assert!(out.success(), "{out:?}");
    assert_eq!(
        gpu_nodes_inside(&out.stdout),
        [format!(
            "/dev/nvidia{} 195:{}",
            gpus[0].minor, gpus[0].minor
        )]
    );
    // No record: nothing is blocked.
    std::fs::remove_file(&record).unwrap();
    let out = run_with_spec(&h, &rootfs, &["2", "1"], LIST_NODES);
    assert!(out.success(), "{out:?}");
    assert_eq!(gpu_nodes_inside(&out.stdout).len(), 2, "{out:?}");
}
