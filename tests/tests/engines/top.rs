//! `nvc ps` on a GPU container of a private dockerd (`--runtime=nv`) and of Podman (nvc's
//! hooks.d hook): the process the fake NVML lists is shown as the engine's, with the name
//! the engine gave the container (Docker's from `--docker-root`, the daemon's data root;
//! Podman's from its storage's `containers.json`), its full id and its pid inside.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nvc_tests::workspace_bin;
use serde_json::Value;

use super::podman::podman_with_image;
use super::{start_dockerd, World, IMAGE};

/// `nvc ps --json EXTRA...` with the test's config.
pub(super) fn nvc_ps(w: &World, extra: &[&str]) -> Value {
    let out = Command::new(workspace_bin("nvc"))
        .env("NVC_CONFIG", &w.config)
        .args(["ps", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nvc ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn nvc_ps_names_dockers_container() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let name = format!("gpu-job-{}", std::process::id());
    let mut args: Vec<String> = ["run", "-d", "--rm", "--network", "none", "--runtime=nv"]
        .map(String::from)
        .to_vec();
    args.extend(["--name".into(), name.clone()]);
    args.extend(["-e".into(), "NVIDIA_VISIBLE_DEVICES=all".into()]);
    args.extend([IMAGE.to_string(), "sleep".into(), "600".into()]);
    let out = dockerd.docker(&args);
    assert!(
        out.status == 0,
        "docker run: {}\nnvc log:\n{}\ndockerd log:\n{}",
        out.stderr,
        w.nvc_log(),
        dockerd.log_tail(20)
    );
    let inspect = dockerd.docker(&["inspect", "-f", "{{.State.Pid}} {{.Id}}", &name]);
    let (pid, id) = inspect
        .stdout
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("docker inspect: {inspect:?}"));
    // dockerd runs in a PID namespace of its own: its pid is not the host's, which NVML
    // (the driver) reports.
    let inner: u32 = pid.parse().unwrap();
    let pid = host_pid_in_cgroup_of(id);
    assert_ne!(pid, inner, "dockerd should have a PID namespace of its own");
    let uuid = &w.gpus()[1].uuid;
    std::fs::write(
        w.fake.dir.join("nvml-processes.txt"),
        format!("{uuid} {pid} {} compute 12\n", 3u64 << 30),
    )
    .unwrap();

    let ps = |extra: &[&str]| nvc_ps(&w, extra);
    let data_root = w.path("docker").join("data");
    let found = ps(&["--docker-root", data_root.to_str().unwrap()]);
    let process = &found["gpus"][1]["processes"][0];
    assert_eq!(found["gpus"][1]["uuid"], uuid.as_str(), "{found:#}");
    assert_eq!(process["pid"], pid, "{found:#}");
    assert_eq!(process["owner"], "container", "{found:#}");
    assert_eq!(process["container"]["id"], id, "{found:#}");
    assert_eq!(process["container"]["engine"], "docker", "{found:#}");
    assert_eq!(process["container"]["name"], name.as_str(), "{found:#}");
    // Through nvc's runtime: nvc set it up and has its bundle, containerd's task folder.
    assert_eq!(process["container"]["recorded"], true, "{found:#}");
    assert!(
        process["container"]["bundle"]
            .as_str()
            .unwrap()
            .ends_with(&format!("io.containerd.runtime.v2.task/moby/{id}")),
        "{found:#}"
    );
    assert_eq!(process["containerPid"], 1, "{found:#}");
    assert_eq!(process["usedMemory"], 3u64 << 30, "{found:#}");
    assert_eq!(process["smUtil"], 12, "{found:#}");

    // Without Docker's data root: still Docker's (its bundle is in containerd's `moby`
    // namespace), but nameless.
    let found = ps(&[]);
    let process = &found["gpus"][1]["processes"][0];
    assert_eq!(process["container"]["engine"], "docker", "{found:#}");
    assert_eq!(process["container"]["name"], Value::Null, "{found:#}");

    let removed = dockerd.docker(&["rm", "-f", &name]);
    assert!(removed.status == 0, "docker rm: {}", removed.stderr);
    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn nvc_ps_names_podmans_container() {
    // Podman (Debian 12's 4.3) on the vfs storage driver, nvc-hook from its hooks.d: the
    // container's folder is `vfs-containers/<id>/userdata`, its name in the
    // `containers.json` beside it.
    let w = World::new();
    let podman = podman_with_image(&w);
    let name = format!("gpu-job-{}", std::process::id());
    let sync = w.path("sync");
    std::fs::create_dir_all(&sync).unwrap();
    let cidfile = w.path("cid");
    let options = [
        "--name".to_string(),
        name.clone(),
        "--cidfile".into(),
        cidfile.to_string_lossy().into_owned(),
        "-v".into(),
        format!("{}:/sync", sync.display()),
        "-e".into(),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
    ];
    std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            podman.run(
                &options,
                IMAGE,
                &["sh", "-c", "touch /sync/ready && exec sleep 600"],
            )
        });
        let ready = sync.join("ready");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() && !running.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the podman container never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        if running.is_finished() {
            let out = running.join().unwrap();
            panic!("podman run ended: {out:?}\nnvc log:\n{}", w.nvc_log());
        }
        let id = std::fs::read_to_string(&cidfile)
            .unwrap()
            .trim()
            .to_string();
        let pid = host_pid_in_cgroup_of(&id);
        let uuid = &w.gpus()[0].uuid;
        std::fs::write(
            w.fake.dir.join("nvml-processes.txt"),
            format!("{uuid} {pid} {} compute 40\n", 5u64 << 30),
        )
        .unwrap();

        let storage = podman.dir.join("root");
        let found = nvc_ps(&w, &["--storage", storage.to_str().unwrap()]);
        // Stop the container before asserting: a failed assertion must not leave it.
        kill(pid);
        let out = running.join().unwrap();
        assert_eq!(out.status, 137, "podman run: {out:?}");

        let process = &found["gpus"][0]["processes"][0];
        assert_eq!(found["gpus"][0]["uuid"], uuid.as_str(), "{found:#}");
        assert_eq!(process["pid"], pid, "{found:#}");
        assert_eq!(process["owner"], "container", "{found:#}");
        assert_eq!(process["container"]["id"], id.as_str(), "{found:#}");
        assert_eq!(process["container"]["engine"], "podman", "{found:#}");
        assert_eq!(process["container"]["name"], name.as_str(), "{found:#}");
        assert_eq!(process["containerPid"], 1, "{found:#}");
        assert_eq!(process["usedMemory"], 5u64 << 30, "{found:#}");
        assert_eq!(process["smUtil"], 40, "{found:#}");
        let bundle = Path::new(process["container"]["bundle"].as_str().unwrap());
        assert_eq!(
            bundle,
            storage.join("vfs-containers").join(&id).join("userdata"),
            "{found:#}"
        );
    });
    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

/// The pid on the host of the one process whose cgroup names container `id` (an engine's
/// monitor, e.g. `libpod-conmon-<id>`, left out).
fn host_pid_in_cgroup_of(id: &str) -> u32 {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(id) && !c.contains("conmon"))
        })
        .collect();
    assert_eq!(
        pids.len(),
        1,
        "processes in container {id}'s cgroup: {pids:?}"
    );
    pids[0]
}

/// SIGKILL to `pid`.
pub(super) fn kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

/// The host's pid of the one process whose command line is `argv`, if any.
pub(super) fn host_pid_running(argv: &[&str]) -> Option<u32> {
    let mut want: Vec<u8> = Vec::new();
    for a in argv {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect();
    assert!(pids.len() <= 1, "processes running {argv:?}: {pids:?}");
    pids.first().copied()
}
