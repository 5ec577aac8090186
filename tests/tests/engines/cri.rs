//! GPU pods through containerd's CRI plugin, driven over its socket by a CRI client the
//! way the kubelet drives it (`nvc_tests::cri`): containerd configured by `nvc runtime
//! configure --runtime containerd`, every pod on the RuntimeClass handler `nv` it
//! registers, and each of the ways NVIDIA's Kubernetes device plugin hands a container
//! its GPUs (`DEVICE_LIST_STRATEGY`): `envvar`, `volume-mounts`, `cdi-annotations` and
//! `cdi-cri`, with the device plugin's default `DEVICE_ID_STRATEGY`, `uuid`; the CDI
//! strategies with names of nvc's kind, `nvidia.com/gpu`, and of the plugin's own,
//! `k8s.device-plugin.nvidia.com/gpu`, from the spec `nvc cdi generate --vendor` writes
//! for it. `nvc ps` names a pod's GPU process by its container, pod and namespace.
//!
//! Pods use the node's network (no CNI plugin needed) and the test image as their
//! sandbox (pause) image, imported into the `k8s.io` namespace: nothing is pulled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libnvc::report::error_chain;
use nvc_tests::cri::api::{
    CdiDevice, ContainerConfig, ContainerMetadata, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
};
use nvc_tests::cri::{CriClient, CriError, ExitedContainer};
use nvc_tests::{
    container_id, workspace_bin, Containerd, CriSettings, EngineRoot, FakeGpu, Outcome,
    START_TIMEOUT,
};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_untouched, top, World, CTR_IMAGE,
    DEVICE_PLUGIN_VENDOR, PROBE,
};

/// The RuntimeClass handler `nvc runtime configure` registers.
const HANDLER: &str = "nv";

/// Where the device plugin's `volume-mounts` strategy puts a container's GPUs.
const DEVICE_MOUNTS: &str = "/var/run/nvidia-container-devices";

/// What the device plugin's `cdi-annotations` strategy names the annotation after
/// (`cdi.k8s.io/nvidia-device-plugin_<allocation uuid>`).
pub(super) const CDI_ANNOTATION: &str = "cdi.k8s.io/nvidia-device-plugin_e5a0f26b";

/// How long a pod's container may run.
pub(super) const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// After PROBE: whether a device mount reached the container (nvc takes them out of the
/// spec once it has read the GPUs from them).
const DEVICE_MOUNTS_PROBE: &str =
    "; if [ -e /var/run/nvidia-container-devices ]; then echo device-mounts=present; \
     else echo device-mounts=absent; fi; \
     grep -c nvidia-container-devices /proc/self/mountinfo | sed 's/^/device-mount-count=/'";

/// The `[requests]` of the nvc config for the `volume-mounts` strategy.
const ACCEPT_MOUNTS: &str = "\n[requests]\naccept-devices-as-volume-mounts = true\n";

/// The setting for clusters that do not trust pods' environment: GPUs only from the
/// device plugin's mounts.
const SECURE: &str = "\n[requests]\naccept-devices-as-volume-mounts = true\n\
                      accept-envvar-when-unprivileged = false\n";

/// What a container asks for, in the shape the kubelet passes on from a device plugin's
/// Allocate answer.
#[derive(Default)]
pub(super) struct Ask {
    pub(super) env: Vec<(String, String)>,
    /// Names under [`DEVICE_MOUNTS`], each a bind mount of `/dev/null`.
    pub(super) device_mounts: Vec<String>,
    pub(super) annotations: Vec<(String, String)>,
    pub(super) cdi_devices: Vec<String>,
}

impl Ask {
    pub(super) fn env(key: &str, value: &str) -> Ask {
        Ask {
            env: vec![(key.into(), value.into())],
            ..Ask::default()
        }
    }
}

/// A node: containerd with its CRI plugin, set up by `nvc runtime configure`, and a CRI
/// client on its socket.
struct Node<'w> {
    w: &'w World,
    containerd: Containerd,
    cri: CriClient,
    /// containerd's version, as CRI's Version reports it.
    version: String,
}

impl<'w> Node<'w> {
    /// containerd from `root` with a config of `config_version` (2 or 3) registered with
    /// nvc as a node's would be, nvc's config with `requests` appended, the CDI spec of
    /// `nvc cdi generate` in `cdi_spec_dirs` (kinds `nvidia.com/gpu` and the device
    /// plugin's), and the test image imported.
    fn start(w: &'w World, root: &EngineRoot, config_version: u8, requests: &str) -> Node<'w> {
        let mut config = std::fs::read_to_string(&w.config).unwrap();
        config.push_str(requests);
        std::fs::write(&w.config, config).unwrap();
        let cdi = w.cdi_spec_dir();
        w.device_plugin_cdi_spec(&cdi);
        let dir = w.path("containerd-cri");
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.toml");
        let settings = CriSettings {
            sandbox_image: CTR_IMAGE,
            cdi_spec_dirs: &[&cdi],
            // `nvc runtime configure --cdi` turns it on.
            enable_cdi: false,
        };
        std::fs::write(
            &config,
            Containerd::cri_config(&dir, config_version, &settings),
        )
        .unwrap();
        super::containerd::configure_containerd(&config, &["--cdi"]);
        let drop_in = std::fs::read_to_string(dir.join("conf.d/99-nvc.toml")).unwrap();
        assert!(drop_in.contains("enable_cdi = true"), "{drop_in}");

        let bin_dir = workspace_bin("nvc-runtime").parent().unwrap().to_path_buf();
        let containerd = Containerd::start_in(
            root,
            &dir,
            &[("NVC_CONFIG", w.config.as_os_str())],
            &[w.dir.path(), &bin_dir],
            None,
        )
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        // The sandbox image's command must keep running; containers give their own.
        containerd
            .import_for_cri(&w.tarball, CTR_IMAGE, &["sleep", "86400"])
            .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        let cri =
            CriClient::connect_when_ready(&containerd.socket, START_TIMEOUT).unwrap_or_else(|e| {
                panic!(
                    "{}\ncontainerd log:\n{}",
                    error_chain(&e),
                    containerd.log_tail(40)
                )
            });
        let version = cri.version().unwrap().runtime_version;
        Node {
            w,
            containerd,
            cri,
            version,
        }
    }

    /// A pod `name` whose one unprivileged container runs PROBE (and `more`) with `ask`
    /// and the fake proc tree, through the `nv` handler, to its end; its cgroups under the
    /// containerd harness's cgroup (removed when containerd is).
    fn run(&self, name: &str, ask: Ask, more: &str) -> Outcome {
        let cgroup_parent = format!("/{}", self.containerd.namespace);
        let (sandbox, container) = probe_pod(self.w, name, &cgroup_parent, CTR_IMAGE, ask, more);
        let result = self
            .cri
            .run_to_exit(&sandbox, HANDLER, &container, POD_TIMEOUT);
        outcome(name, result)
    }

    fn context(&self, what: &str) -> String {
        format!(
            "containerd {} CRI: {what}\nnvc log:\n{}\ncontainerd log:\n{}",
            self.version,
            self.w.nvc_log(),
            self.containerd.log_tail(30)
        )
    }

    /// Stops containerd and checks that nothing is left.
    fn finish(self) {
        let namespace = self.containerd.namespace.clone();
        drop(self.cri);
        drop(self.containerd);
        self.w.assert_clean(&[namespace]);
    }
}

/// The kubelet's sandbox for pod `name`: the node's network, the pod's own PID and IPC
/// namespaces, its cgroups under `cgroup_parent`, logs under the test's folder.
pub(super) fn sandbox(w: &World, name: &str, cgroup_parent: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: container_id("uid"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: w.path("pods").join(name).display().to_string(),
        labels: HashMap::from([("app".into(), name.into())]),
        annotations: HashMap::new(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                privileged: false,
            }),
        }),
    }
}

/// Pod `name` ([`sandbox`]) and its one unprivileged container, of image `image`, running
/// PROBE (and `more`) with `ask` and the fake proc tree.
pub(super) fn probe_pod(
    w: &World,
    name: &str,
    cgroup_parent: &str,
    image: &str,
    ask: Ask,
    more: &str,
) -> (PodSandboxConfig, ContainerConfig) {
    let mut envs = vec![KeyValue {
        key: "NVC_FAKE_PROC".into(),
        value: "/run/fake-proc".into(),
    }];
    envs.extend(
        ask.env
            .into_iter()
            .map(|(key, value)| KeyValue { key, value }),
    );
    let mut mounts = vec![Mount {
        container_path: "/run/fake-proc".into(),
        host_path: w.fake.proc_root.display().to_string(),
        readonly: true,
    }];
    mounts.extend(ask.device_mounts.iter().map(|id| Mount {
        container_path: format!("{DEVICE_MOUNTS}/{id}"),
        host_path: "/dev/null".into(),
        readonly: false,
    }));
    let container = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "probe".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec::named(image)),
        command: vec!["sh".into(), "-c".into(), format!("{PROBE}{more}")],
        envs,
        mounts,
        annotations: ask.annotations.into_iter().collect(),
        log_path: "probe/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                privileged: false,
                namespace_options: Some(namespaces()),
            }),
        }),
        cdi_devices: ask
            .cdi_devices
            .into_iter()
            .map(|name| CdiDevice { name })
            .collect(),
        ..ContainerConfig::default()
    };
    (sandbox(w, name, cgroup_parent), container)
}

/// The namespaces of a host-network pod as the kubelet sets them (for the sandbox and
/// each container): the node's network, the pod's IPC, the container's own PID.
pub(super) fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node.into(),
        pid: NamespaceMode::Container.into(),
        ipc: NamespaceMode::Pod.into(),
    }
}

/// An [`Outcome`] for the probe's assertions: the container's stdout and stderr from its
/// CRI log and its exit code, or, when the runtime refused it, the CRI error (what
/// `kubectl describe pod` shows) as stderr.
pub(super) fn outcome(name: &str, result: Result<ExitedContainer, CriError>) -> Outcome {
    let command = format!("CRI pod {name}");
    match result {
        Ok(exited) => Outcome {
            command,
            status: exited.status.exit_code,
            timed_out: false,
            stdout: exited.stream("stdout"),
            stderr: exited.stream("stderr"),
            log: format!(
                "reason {:?}, message {:?}",
                exited.status.reason, exited.status.message
            ),
        },
        Err(e @ CriError::Call { .. }) => Outcome {
            command,
            status: -1,
            timed_out: false,
            stdout: String::new(),
            stderr: e.to_string(),
            log: String::new(),
        },
        Err(e) => panic!("{command}: {}", error_chain(&e)),
    }
}

/// `key=value` lines the probe's extra commands printed.
fn probe_value<'o>(out: &'o Outcome, key: &str) -> Option<&'o str> {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// The four device list strategies of NVIDIA's device plugin, each with the GPU ids the
/// plugin hands out (UUIDs), the CDI ones under nvc's kind and the plugin's, a pod asking
/// for no GPU, and a bad request whose error reaches the CRI caller.
fn device_list_strategies(node: &Node<'_>, gpus: &[FakeGpu]) {
    // envvar: the ids in NVIDIA_VISIBLE_DEVICES.
    let two = [gpus[0].clone(), gpus[2].clone()];
    let ids = format!("{},{}", two[0].uuid, two[1].uuid);
    assert_gpus(
        &node.run("envvar", Ask::env("NVIDIA_VISIBLE_DEVICES", &ids), ""),
        &two,
        &node.context(&format!("envvar NVIDIA_VISIBLE_DEVICES={ids}")),
    );

    // volume-mounts: /dev/null bound at /var/run/nvidia-container-devices/<id>, and the
    // variable pointing there (what the plugin sets with this strategy).
    let out = node.run(
        "volume-mounts",
        Ask {
            device_mounts: vec![gpus[1].uuid.clone()],
            ..Ask::env("NVIDIA_VISIBLE_DEVICES", DEVICE_MOUNTS)
        },
        DEVICE_MOUNTS_PROBE,
    );
    let what = node.context("volume-mounts");
    assert_gpus(&out, &gpus[1..2], &what);
    assert_eq!(probe_value(&out, "device-mounts"), Some("absent"), "{what}");
    assert_eq!(probe_value(&out, "device-mount-count"), Some("0"), "{what}");

    // cdi-annotations: containerd resolves the annotation with nvc's CDI spec.
    let name = format!("nvidia.com/gpu={}", gpus[2].uuid);
    assert_gpus_with(
        &node.run(
            "cdi-annotations",
            Ask {
                annotations: vec![(CDI_ANNOTATION.into(), name.clone())],
                ..Ask::default()
            },
            "",
        ),
        &gpus[2..3],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("cdi-annotations {CDI_ANNOTATION}={name}")),
    );

    // cdi-cri: the CDI device in the CRI request.
    let name = format!("nvidia.com/gpu={}", gpus[0].uuid);
    assert_gpus_with(
        &node.run(
            "cdi-cri",
            Ask {
                cdi_devices: vec![name.clone()],
                ..Ask::default()
            },
            "",
        ),
        &gpus[0..1],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("cdi-cri CDIDevice {name}")),
    );

    // The device plugin's own CDI names, `k8s.device-plugin.nvidia.com/gpu=<uuid>`, as
    // its CDI strategies give them, resolved from nvc's spec for that kind: two GPUs in
    // one annotation (the plugin joins a container's names with commas), one CDI device.
    let names = format!(
        "{DEVICE_PLUGIN_VENDOR}/gpu={},{DEVICE_PLUGIN_VENDOR}/gpu={}",
        gpus[1].uuid, gpus[2].uuid
    );
    assert_gpus_with(
        &node.run(
            "plugin-cdi-annotations",
            Ask {
                annotations: vec![(CDI_ANNOTATION.into(), names.clone())],
                ..Ask::default()
            },
            "",
        ),
        &gpus[1..3],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("cdi-annotations {CDI_ANNOTATION}={names}")),
    );
    let name = format!("{DEVICE_PLUGIN_VENDOR}/gpu={}", gpus[2].uuid);
    assert_gpus_with(
        &node.run(
            "plugin-cdi-cri",
            Ask {
                cdi_devices: vec![name.clone()],
                ..Ask::default()
            },
            "",
        ),
        &gpus[2..3],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("cdi-cri CDIDevice {name}")),
    );

    assert_untouched(
        &node.run("no-gpu", Ask::default(), ""),
        &node.context("a pod that asks for no GPU"),
    );
    assert_refused(
        &node.run("bad", Ask::env("NVIDIA_VISIBLE_DEVICES", "7"), ""),
        "GPU index 7",
        &node.context("NVIDIA_VISIBLE_DEVICES=7"),
    );
}

/// `nvc-cri run`, the CRI client on the command line that tests/gpu/engines.sh drives the
/// GPU machine's containerd with: a GPU by CDI name reaches its pod, the container's
/// output and exit code come back, and a refusal exits 125 with the CRI error.
fn command_line_client(node: &Node<'_>, gpus: &[FakeGpu]) {
    let cli = |name: &str, options: &[&str]| -> Outcome {
        let fake_proc = format!("{}:/run/fake-proc", node.w.fake.proc_root.display());
        let log_dir = node.w.path("cli-pods");
        let cgroup_parent = format!("/{}", node.containerd.namespace);
        let mut command = std::process::Command::new(workspace_bin("nvc-cri"));
        command
            .arg("run")
            .arg(&node.containerd.socket)
            .arg(CTR_IMAGE)
            .args(["--log-dir".as_ref(), log_dir.as_os_str()])
            .args(["--cgroup-parent", &cgroup_parent, "--mount", &fake_proc])
            .args(["-e", "NVC_FAKE_PROC=/run/fake-proc"])
            .args(options)
            .args(["--", "sh", "-c", PROBE]);
        let out = command.output().unwrap();
        Outcome {
            command: format!("nvc-cri run {name}"),
            status: out.status.code().unwrap_or(-1),
            timed_out: false,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            log: String::new(),
        }
    };
    let name = format!("nvidia.com/gpu={}", gpus[1].uuid);
    assert_gpus_with(
        &cli("cdi-cri", &["--cdi", &name]),
        &gpus[1..2],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("nvc-cri run --cdi {name}")),
    );
    let out = cli("bad", &["-e", "NVIDIA_VISIBLE_DEVICES=7"]);
    assert_eq!(
        out.status,
        125,
        "{out:?}\n{}",
        node.context("nvc-cri run, refused")
    );
    assert!(out.stderr.contains("GPU index 7"), "{out:?}");
}

/// With the secure setting, an unprivileged pod's NVIDIA_VISIBLE_DEVICES is ignored
/// (nvc logs why) while the device plugin's mounts are honoured.
fn secure_setting(node: &Node<'_>, gpus: &[FakeGpu]) {
    let uuid = &gpus[1].uuid;
    let out = node.run("envvar", Ask::env("NVIDIA_VISIBLE_DEVICES", uuid), "");
    assert_untouched(&out, &node.context("NVIDIA_VISIBLE_DEVICES, unprivileged"));
    let warning = format!("ignoring NVIDIA_VISIBLE_DEVICES=\"{uuid}\"");
    assert!(
        node.w.nvc_log().contains(&warning),
        "{}",
        node.context(&format!("no {warning:?}"))
    );

    let out = node.run(
        "volume-mounts",
        Ask {
            device_mounts: vec![gpus[2].uuid.clone()],
            ..Ask::env("NVIDIA_VISIBLE_DEVICES", DEVICE_MOUNTS)
        },
        DEVICE_MOUNTS_PROBE,
    );
    let what = node.context("volume-mounts, unprivileged");
    assert_gpus(&out, &gpus[2..3], &what);
    assert_eq!(probe_value(&out, "device-mounts"), Some("absent"), "{what}");
}

/// `nvc ps` while a pod's container holds GPU 2 (the fake NVML says so): the process is
/// containerd's, named as the kubelet named it: container, pod and Kubernetes namespace
/// from the CRI annotations of its bundle in containerd's `k8s.io` namespace.
fn nvc_ps_names_the_pod(node: &Node<'_>, gpus: &[FakeGpu]) {
    let tasks = node
        .containerd
        .dir
        .join("state/io.containerd.runtime.v2.task");
    let context = |what: &str| node.context(what);
    let container = nvc_ps_of_a_pod(
        node.w,
        gpus,
        &["--containerd-tasks", tasks.to_str().unwrap()],
        |ask, more| node.run("gpu-job", ask, more),
        &context,
    );
    assert_eq!(container["engine"], "containerd", "{container:#}");
    // Found in containerd's tasks (`--containerd-tasks`), whether or not nvc keeps a
    // record of it (it keeps none where no poststop hook runs).
    let id = container["id"].as_str().unwrap();
    assert_eq!(
        container["bundle"],
        tasks.join("k8s.io").join(id).to_str().unwrap(),
        "{container:#}"
    );
}

/// Runs pod `gpu-job` (`run`: its container asking for `ask`, running PROBE and then
/// `more`) holding GPU 2, reads `nvc ps --json PS_ARGS` while it runs (the fake NVML
/// listing its process), ends it, and checks what every CRI engine must give: the
/// process's pid, its pid 1 inside, its memory, the container `probe` of pod `gpu-job` in
/// namespace `default`. Returns the process's `container` for the engine's own checks.
pub(super) fn nvc_ps_of_a_pod(
    w: &World,
    gpus: &[FakeGpu],
    ps_args: &[&str],
    run: impl FnOnce(Ask, &str) -> Outcome,
    context: &dyn Fn(&str) -> String,
) -> serde_json::Value {
    const HOLD: [&str; 2] = ["sleep", "3601"];
    let ended = AtomicBool::new(false);
    let (out, seen) = std::thread::scope(|scope| {
        // Waits for the container's `sleep`, reads `nvc ps`, then ends the container.
        let watcher = scope.spawn(|| {
            let deadline = Instant::now() + POD_TIMEOUT;
            let pid = loop {
                if let Some(pid) = top::host_pid_running(&HOLD) {
                    break pid;
                }
                if ended.load(Ordering::SeqCst) || Instant::now() > deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            std::fs::write(
                w.fake.dir.join("nvml-processes.txt"),
                format!("{} {pid} {} compute 90\n", gpus[2].uuid, 7u64 << 30),
            )
            .unwrap();
            let found = top::nvc_ps(w, ps_args);
            top::kill(pid);
            Some((pid, found))
        });
        let out = run(
            Ask::env("NVIDIA_VISIBLE_DEVICES", &gpus[2].uuid),
            &format!("; exec {}", HOLD.join(" ")),
        );
        ended.store(true, Ordering::SeqCst);
        (out, watcher.join().unwrap())
    });
    let what = context(&format!("nvc ps of a pod: {out:?}"));
    let (pid, found) = seen.unwrap_or_else(|| panic!("the pod's process never ran\n{what}"));
    // Killed by the watcher, after the probe saw its GPU.
    assert_eq!(out.status, 137, "{what}");
    assert!(
        out.stdout.contains(&format!(
            "GPU 0: NVIDIA Fake H100 80GB HBM3 (UUID: {})",
            gpus[2].uuid
        )),
        "{what}"
    );
    let gpu = &found["gpus"][2];
    assert_eq!(gpu["uuid"], gpus[2].uuid.as_str(), "{found:#}");
    let process = &gpu["processes"][0];
    let container = &process["container"];
    assert_eq!(process["pid"], pid, "{found:#}");
    assert_eq!(process["owner"], "container", "{found:#}");
    assert_eq!(process["containerPid"], 1, "{found:#}");
    assert_eq!(process["usedMemory"], 7u64 << 30, "{found:#}");
    assert_eq!(container["name"], "probe", "{found:#}");
    assert_eq!(container["pod"], "gpu-job", "{found:#}");
    assert_eq!(container["namespace"], "default", "{found:#}");
    container.clone()
}

/// Debian 13's containerd 1.7.24 (config version 2, plugin `io.containerd.grpc.v1.cri`).
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn cri_containerd17_device_list_strategies() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let node = Node::start(&w, &root, 2, ACCEPT_MOUNTS);
    assert!(
        node.version.trim_start_matches('v').starts_with("1.7."),
        "{}",
        node.version
    );
    device_list_strategies(&node, &w.gpus());
    command_line_client(&node, &w.gpus());
    node.finish();
}

/// Debian 13's containerd 1.7.24 with `accept-envvar-when-unprivileged = false` and
/// `accept-devices-as-volume-mounts = true`.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn cri_containerd17_secure_setting() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let node = Node::start(&w, &root, 2, SECURE);
    assert!(
        node.version.trim_start_matches('v').starts_with("1.7."),
        "{}",
        node.version
    );
    secure_setting(&node, &w.gpus());
    node.finish();
}

/// Debian 14's containerd 2.1 (config version 3, plugins `io.containerd.cri.v1.runtime`
/// and `io.containerd.cri.v1.images`).
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn cri_containerd21_device_list_strategies() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let node = Node::start(&w, &root, 3, ACCEPT_MOUNTS);
    assert!(
        node.version.trim_start_matches('v').starts_with("2.1."),
        "{}",
        node.version
    );
    device_list_strategies(&node, &w.gpus());
    nvc_ps_names_the_pod(&node, &w.gpus());
    node.finish();
}

/// Debian 14's containerd 2.1 with the secure setting.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn cri_containerd21_secure_setting() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let node = Node::start(&w, &root, 3, SECURE);
    assert!(
        node.version.trim_start_matches('v').starts_with("2.1."),
        "{}",
        node.version
    );
    secure_setting(&node, &w.gpus());
    node.finish();
}
