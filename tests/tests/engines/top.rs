//! `nvc ps` on a GPU container of a private dockerd (`--runtime=nv`): the process the
//! fake NVML lists is shown as Docker's, with the name Docker gave the container (from
//! `--docker-root`, the daemon's data root), its full id and its pid inside.

use std::process::Command;

use nvc_tests::workspace_bin;
use serde_json::Value;

use super::{start_dockerd, World, IMAGE};

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

    let ps = |extra: &[&str]| -> Value {
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
    };
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

/// The pid on the host of the one process whose cgroup names container `id`.
fn host_pid_in_cgroup_of(id: &str) -> u32 {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
        })
        .collect();
    assert_eq!(
        pids.len(),
        1,
        "processes in container {id}'s cgroup: {pids:?}"
    );
    pids[0]
}
