use std::fs;
use std::path::Path;

use super::*;
use crate::probe::TreeProbe;

const DOCKER_ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const CRI_ID: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const PODMAN_ID: &str = "3333333333333333333333333333333333333333333333333333333333333333";
const CRIO_ID: &str = "4444444444444444444444444444444444444444444444444444444444444444";
const LOST_ID: &str = "5555555555555555555555555555555555555555555555555555555555555555";
const PODMAN_VFS_ID: &str = "6666666666666666666666666666666666666666666666666666666666666666";

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A host: `/proc` with one process per case, Docker's, containerd's and the storage's
/// state.
struct World {
    dir: tempfile::TempDir,
    roots: UsageRoots,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let roots = UsageRoots {
            proc: root.join("proc"),
            docker: vec![root.join("docker")],
            containerd_tasks: vec![root.join("containerd").join(engines::CONTAINERD_TASKS)],
            storage: vec![root.join("storage")],
        };
        World { dir, roots }
    }

    fn process(&self, pid: u32, cgroup: &str, nspid: &str, comm: &str) {
        let dir = self.roots.proc.join(pid.to_string());
        write(&dir.join("cgroup"), cgroup);
        write(
            &dir.join("status"),
            &format!("Name:\t{comm}\nTgid:\t{pid}\nNSpid:\t{nspid}\nPPid:\t1\n"),
        );
        write(&dir.join("comm"), &format!("{comm}\n"));
    }

    /// Podman's container `id` named `name`, its process `pid` (pid 1 inside), on the
    /// storage driver `driver`; returns its bundle.
    fn podman(&self, pid: u32, id: &str, driver: &str, name: &str) -> PathBuf {
        self.process(
            pid,
            &format!("0::/machine.slice/libpod-{id}.scope/container\n"),
            &format!("{pid}\t1"),
            "sleep",
        );
        let folder = self.roots.storage[0].join(format!("{driver}-containers"));
        let bundle = folder.join(id).join("userdata");
        self.bundle(&bundle, r#"{"io.container.manager":"libpod"}"#);
        write(
            &folder.join("containers.json"),
            &format!(r#"[{{"id":"{id}","names":["{name}"]}}]"#),
        );
        bundle
    }

    fn bundle(&self, path: &Path, annotations: &str) {
        write(
            &path.join("config.json"),
            &format!(r#"{{"ociVersion":"1.0.2","annotations":{annotations}}}"#),
        );
    }

    fn reading(pids: &[u32]) -> GpuReading {
        GpuReading {
            index: 0,
            uuid: "GPU-a".into(),
            bus_id: "0000:01:00.0".into(),
            name: Some("Fake".into()),
            memory_used: Some(3 << 20),
            memory_total: Some(80 << 30),
            processes: pids
                .iter()
                .map(|&pid| NvmlProcess {
                    pid,
                    kind: ProcessKind::Compute,
                    used_memory: Some(u64::from(pid) << 20),
                    sm_util: (pid % 2 == 0).then_some(pid % 100),
                })
                .collect(),
            unseen: Vec::new(),
        }
    }

    fn map(&self, pids: &[u32], records: &[RecordedContainer]) -> Vec<ProcessUsage> {
        let gpus = map(
            &[World::reading(pids)],
            records,
            &self.roots,
            &TreeProbe::new(),
        );
        gpus.into_iter().next().unwrap().processes
    }
}

#[test]
fn each_process_is_mapped_to_its_engines_container() {
    let w = World::new();
    let root = w.dir.path();
    // Docker: its name from config.v2.json, its bundle in containerd's moby namespace.
    w.process(
        101,
        &format!("0::/system.slice/docker-{DOCKER_ID}.scope\n"),
        "101\t1",
        "python3",
    );
    write(
        &root.join(format!("docker/containers/{DOCKER_ID}/config.v2.json")),
        r#"{"Name":"/trainer-1"}"#,
    );
    // containerd's CRI: pod, container and namespace from the bundle's annotations.
    w.process(
        102,
        &format!("0::/kubepods.slice/kubepods-pod9.slice/cri-containerd-{CRI_ID}.scope\n"),
        "102\t7",
        "train",
    );
    w.bundle(
        &w.roots.containerd_tasks[0].join("k8s.io").join(CRI_ID),
        r#"{"io.kubernetes.cri.container-name":"cuda","io.kubernetes.cri.sandbox-name":"job-1","io.kubernetes.cri.sandbox-namespace":"ml"}"#,
    );
    // Podman: its name from containers.json beside the bundle; on the overlay storage
    // driver and on vfs.
    let podman_bundle = w.podman(103, PODMAN_ID, "overlay", "gpu-job");
    w.podman(106, PODMAN_VFS_ID, "vfs", "on-vfs");
    // CRI-O.
    w.process(
        104,
        &format!("0::/kubepods/besteffort/pod1/crio-{CRIO_ID}\n"),
        "104\t3",
        "infer",
    );
    w.bundle(
        &root.join(format!("storage/overlay-containers/{CRIO_ID}/userdata")),
        r#"{"io.kubernetes.container.name":"infer","io.kubernetes.pod.name":"srv","io.kubernetes.pod.namespace":"prod"}"#,
    );
    // The host's.
    w.process(
        105,
        "0::/user.slice/user-0.slice/session-1.scope\n",
        "105",
        "Xorg",
    );

    let ps = w.map(&[101, 102, 103, 104, 105, 106], &[]);
    let c = |i: usize| ps[i].container.clone().unwrap();
    assert_eq!(ps[0].owner, Owner::Container);
    assert_eq!(
        (c(0).id.as_str(), c(0).engine, c(0).name.as_deref()),
        (DOCKER_ID, Some(Engine::Docker), Some("trainer-1"))
    );
    assert_eq!(ps[0].container_pid, Some(1));
    assert_eq!(ps[0].command.as_deref(), Some("python3"));
    assert_eq!(ps[0].used_memory, Some(101 << 20));
    assert_eq!(
        (
            c(1).engine,
            c(1).name.as_deref(),
            c(1).pod.as_deref(),
            c(1).namespace.as_deref()
        ),
        (
            Some(Engine::Containerd),
            Some("cuda"),
            Some("job-1"),
            Some("ml")
        )
    );
    assert_eq!(ps[1].container_pid, Some(7));
    assert_eq!(ps[1].sm_util, Some(2));
    assert_eq!(
        (c(2).engine, c(2).name.as_deref(), c(2).bundle.as_deref()),
        (
            Some(Engine::Podman),
            Some("gpu-job"),
            Some(podman_bundle.as_path())
        )
    );
    assert_eq!(
        (c(3).engine, c(3).name.as_deref(), c(3).pod.as_deref()),
        (Some(Engine::CriO), Some("infer"), Some("srv"))
    );
    assert_eq!(ps[4].owner, Owner::Host);
    assert_eq!(ps[4].container, None);
    assert_eq!(ps[4].command.as_deref(), Some("Xorg"));
    assert_eq!(
        (c(5).engine, c(5).name.as_deref()),
        (Some(Engine::Podman), Some("on-vfs"))
    );
    assert!(ps.iter().all(|p| !c_recorded(p)), "{ps:#?}");
    for p in &ps {
        assert!(p.notes.is_empty(), "{p:#?}");
    }
}

fn c_recorded(p: &ProcessUsage) -> bool {
    p.container.as_ref().is_some_and(|c| c.recorded)
}

#[test]
fn nvcs_records_name_plain_runc_containers_and_their_bundles() {
    let w = World::new();
    let bundle = w.dir.path().join("bundles/one");
    w.bundle(&bundle, r#"{"nerdctl/name":"web"}"#);
    w.process(201, "0::/nvc-top-1\n", "201\t1", "sleep");
    w.process(
        202,
        "0::/system.slice/runc-nvc-top-2.scope\n",
        "202\t4",
        "sleep",
    );
    // A name no record knows is the host's.
    w.process(203, "0::/nvc-top-3\n", "203\t1", "sleep");
    let records = [
        RecordedContainer {
            id: "nvc-top-1".into(),
            bundle: bundle.clone(),
        },
        RecordedContainer {
            id: "nvc-top-2".into(),
            bundle: w.dir.path().join("bundles/gone"),
        },
    ];
    let ps = w.map(&[201, 202, 203], &records);
    let one = ps[0].container.clone().unwrap();
    assert_eq!(one.id, "nvc-top-1");
    assert!(one.recorded);
    assert_eq!(one.bundle.as_deref(), Some(bundle.as_path()));
    assert_eq!(
        (one.engine, one.name.as_deref()),
        (Some(Engine::Containerd), Some("web"))
    );
    let two = ps[1].container.clone().unwrap();
    assert_eq!((two.id.as_str(), two.engine), ("nvc-top-2", None));
    assert_eq!(ps[1].container_pid, Some(4));
    // Its bundle is gone: said, not fatal.
    assert!(
        ps[1]
            .notes
            .iter()
            .any(|n| n.contains("bundles/gone/config.json")),
        "{:?}",
        ps[1].notes
    );
    assert_eq!(ps[2].owner, Owner::Host);
    assert!(
        ps[2].notes.iter().any(|n| n.contains("PID namespace")),
        "{:?}",
        ps[2].notes
    );
}

#[test]
fn what_cannot_be_seen_is_said_and_the_rest_still_shown() {
    let w = World::new();
    // An id no engine state knows: its id and the engine its cgroup names, and a note.
    w.process(
        301,
        &format!("0::/system.slice/docker-{LOST_ID}.scope\n"),
        "301\t1",
        "x",
    );
    // A process that ended.
    // A process whose cgroup cannot be read: a folder where the file should be.
    fs::create_dir_all(w.roots.proc.join("303/cgroup")).unwrap();
    w.process(304, "0::/init.scope\n", "304", "nvidia-persistenced");
    let ps = w.map(&[301, 302, 303, 304], &[]);
    let lost = ps[0].container.clone().unwrap();
    assert_eq!(
        (lost.id.as_str(), lost.engine),
        (LOST_ID, Some(Engine::Docker))
    );
    assert!(ps[0].notes.iter().any(|n| n.contains("no engine state")));
    assert_eq!(ps[1].owner, Owner::Unknown);
    assert!(
        ps[1].notes[0].contains("the process ended"),
        "{:?}",
        ps[1].notes
    );
    assert_eq!(ps[2].owner, Owner::Unknown);
    assert!(ps[2].notes[0].contains("cannot read"), "{:?}", ps[2].notes);
    assert_eq!(ps[3].owner, Owner::Host);
    assert_eq!(ps[1].used_memory, Some(302 << 20));
}

#[test]
fn docker_in_docker_is_shown_as_the_container_the_host_knows() {
    let w = World::new();
    w.process(
        401,
        &format!("0::/docker/{DOCKER_ID}/docker/{LOST_ID}\n"),
        "401\t50\t1",
        "x",
    );
    write(
        &w.dir
            .path()
            .join(format!("docker/containers/{DOCKER_ID}/config.v2.json")),
        r#"{"Name":"/dind"}"#,
    );
    let ps = w.map(&[401], &[]);
    let c = ps[0].container.clone().unwrap();
    assert_eq!(
        (c.id.as_str(), c.name.as_deref()),
        (DOCKER_ID, Some("dind"))
    );
    assert_eq!(ps[0].container_pid, Some(1));
}

#[test]
fn the_innermost_pid() {
    assert_eq!(innermost_pid("Name:\tx\nNSpid:\t42\t7\t1\n"), Some(1));
    assert_eq!(innermost_pid("NSpid:\t42\n"), Some(42));
    assert_eq!(innermost_pid("Name:\tx\n"), None);
    assert_eq!(innermost_pid("NSpid:\n"), None);
}

#[test]
fn kinds_merge_and_serialize_as_nvidia_smi_says_them() {
    use ProcessKind::*;
    assert_eq!(Compute.and(Compute), Compute);
    assert_eq!(Compute.and(Graphics), ComputeGraphics);
    assert_eq!(
        serde_json::to_string(&[Compute, Graphics, ComputeGraphics]).unwrap(),
        r#"["compute","graphics","compute+graphics"]"#
    );
    assert_eq!(
        serde_json::to_string(&[Engine::CriO, Engine::Docker]).unwrap(),
        r#"["cri-o","docker"]"#
    );
}
