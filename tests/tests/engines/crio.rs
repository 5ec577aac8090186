//! GPU pods through CRI-O 1.37's CRI, driven over its socket by a CRI client the way the
//! kubelet drives it (`nvc_tests::cri`), each of the three ways CRI-O gives a container
//! nvc: the RuntimeClass handler `nv` that `nvc runtime configure --runtime crio` adds in
//! a drop-in, nvc-hook from CRI-O's hooks folder (the file `nvc runtime configure
//! --runtime podman` writes) under the default handler, and CRI-O's own CDI support with
//! the spec of `nvc cdi generate`; then what a running CRI-O makes of the `nv` drop-in
//! written while it runs, on SIGHUP and on a restart.
//!
//! CRI-O comes from the archive in the shared folder beside the clone (`nvc_tests::Crio`
//! says where), with Debian 12's conmon and runc; the test image is loaded with skopeo.
//! Pods use the node's network (no CNI plugin needed) and share no PID namespace, so CRI-O
//! runs no pause container; the test image is its `pause_image`.

use std::ffi::OsStr;
use std::path::Path;

use libnvc::report::error_chain;
use nvc_tests::cri::api::ContainerState;
use nvc_tests::cri::{CriClient, CriError};
use nvc_tests::{workspace_bin, Crio, CrioSettings, FakeGpu, Outcome, START_TIMEOUT};

use super::cri::{nvc_ps_of_a_pod, outcome, probe_pod, sandbox, Ask, CDI_ANNOTATION, POD_TIMEOUT};
use super::podman::podman_hooks_dir;
use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_untouched, nvc_configure, World, IMAGE,
};

/// The RuntimeClass handler `nvc runtime configure` registers.
const HANDLER: &str = "nv";

/// The default handler (the kubelet's for a pod without a RuntimeClass): runc.
const DEFAULT_HANDLER: &str = "";

/// CRI-O's default capabilities and MKNOD: PROBE makes device nodes to try the device
/// cgroup, which containerd's CRI plugin allows by default and CRI-O does not.
pub(super) const CAPABILITIES_DROP_IN: &str = "[crio.runtime]\ndefault_capabilities = [\
    \"CHOWN\", \"DAC_OVERRIDE\", \"FSETID\", \"FOWNER\", \"SETGID\", \"SETUID\", \
    \"SETPCAP\", \"NET_BIND_SERVICE\", \"KILL\", \"MKNOD\"]\n";

/// The drop-in `nvc runtime configure --runtime crio` writes, in the node's drop-in folder.
const NVC_DROP_IN: &str = "99-nvc.conf";

/// How a node's CRI-O is set up.
#[derive(Default)]
struct Setup<'a> {
    /// OCI hooks folders.
    hooks_dirs: &'a [&'a Path],
    /// CDI spec folders.
    cdi_spec_dirs: &'a [&'a Path],
    /// Register nvc's handler `nv` before CRI-O starts.
    nv_handler: bool,
}

/// A node: CRI-O with nvc set up as `setup` says, and a CRI client on its socket.
struct Node<'w> {
    w: &'w World,
    crio: Crio,
    cri: CriClient,
    /// CRI-O's version, as CRI's Version reports it.
    version: String,
}

impl<'w> Node<'w> {
    fn start(w: &'w World, setup: &Setup<'_>) -> Node<'w> {
        let dir = w.path("crio");
        std::fs::create_dir_all(dir.join(nvc_tests::CRIO_CONF_D)).unwrap();
        let settings = CrioSettings {
            pause_image: IMAGE,
            hooks_dirs: setup.hooks_dirs,
            cdi_spec_dirs: setup.cdi_spec_dirs,
            // conmon passes it on to nvc-runtime and runc.
            monitor_env: &[("NVC_CONFIG", w.config.as_os_str())],
        };
        let config =
            Crio::config(&dir, &settings).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        std::fs::write(dir.join(nvc_tests::CRIO_CONF), config).unwrap();
        std::fs::write(
            dir.join(nvc_tests::CRIO_CONF_D)
                .join("10-capabilities.conf"),
            CAPABILITIES_DROP_IN,
        )
        .unwrap();
        if setup.nv_handler {
            configure_nv(&dir);
        }
        let crio = Crio::start(&dir, &[]).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        crio.import(&w.tarball, IMAGE)
            .unwrap_or_else(|e| panic!("{}\nCRI-O log:\n{}", error_chain(&e), crio.log_tail(30)));
        let cri = connect(&crio);
        let version = cri.version().unwrap().runtime_version;
        assert_eq!(version, "1.37.0", "CRI-O's version");
        Node {
            w,
            crio,
            cri,
            version,
        }
    }

    /// A pod `name` whose one unprivileged container runs PROBE with `ask` and the fake
    /// proc tree, through `handler`, to its end.
    fn run(&self, name: &str, handler: &str, ask: Ask) -> Outcome {
        self.run_more(name, handler, ask, "")
    }

    /// [`Node::run`], the container running `more` after PROBE.
    fn run_more(&self, name: &str, handler: &str, ask: Ask, more: &str) -> Outcome {
        let (sandbox, container) = probe_pod(self.w, name, &self.cgroup_parent(), IMAGE, ask, more);
        let result = self
            .cri
            .run_to_exit(&sandbox, handler, &container, POD_TIMEOUT);
        outcome(name, result)
    }

    /// The pods' `cgroup_parent`: under the harness's cgroup, removed with it.
    fn cgroup_parent(&self) -> String {
        format!("/{}", self.crio.cgroup_parent)
    }

    fn context(&self, what: &str) -> String {
        format!(
            "CRI-O {} CRI: {what}\nnvc log:\n{}\nCRI-O log:\n{}",
            self.version,
            self.w.nvc_log(),
            self.crio.log_tail(30)
        )
    }

    /// Stops CRI-O and checks that nothing is left.
    fn finish(self) {
        let cgroup = self.crio.cgroup_parent.clone();
        drop(self.cri);
        drop(self.crio);
        self.w.assert_clean(&[cgroup]);
    }
}

/// A CRI client on `crio`'s socket, once it answers.
fn connect(crio: &Crio) -> CriClient {
    CriClient::connect_when_ready(&crio.socket, START_TIMEOUT)
        .unwrap_or_else(|e| panic!("{}\nCRI-O log:\n{}", error_chain(&e), crio.log_tail(40)))
}

/// `nvc runtime configure --runtime crio` for the CRI-O in `dir`, as a node's admin runs
/// it (with the workspace's nvc-runtime): the handler `nv` in the drop-in
/// `crio.conf.d/99-nvc.conf`, copying the `runc` handler's settings (its runc state
/// folder, and its `monitor_env` with NVC_CONFIG).
fn configure_nv(dir: &Path) {
    let config = dir.join(nvc_tests::CRIO_CONF);
    let drop_in = dir.join(nvc_tests::CRIO_CONF_D).join(NVC_DROP_IN);
    let runtime = workspace_bin("nvc-runtime");
    nvc_configure(&[
        OsStr::new("--runtime"),
        OsStr::new("crio"),
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("--drop-in"),
        drop_in.as_os_str(),
        OsStr::new("--runtime-path"),
        runtime.as_os_str(),
    ]);
    let text = std::fs::read_to_string(&drop_in).unwrap();
    assert!(text.contains("[crio.runtime.runtimes.nv]"), "{text}");
    assert!(
        text.contains(&format!("runtime_path = \"{}\"", runtime.display())),
        "{text}"
    );
    assert!(
        text.contains("NVC_CONFIG="),
        "monitor_env not copied:\n{text}"
    );
}

/// GPUs by UUID in NVIDIA_VISIBLE_DEVICES, a pod asking for none, and a bad request
/// whose error reaches the CRI caller, through `handler`.
fn env_requests(node: &Node<'_>, handler: &str, gpus: &[FakeGpu], how: &str) {
    let two = [gpus[0].clone(), gpus[2].clone()];
    let ids = format!("{},{}", two[0].uuid, two[1].uuid);
    assert_gpus(
        &node.run("envvar", handler, Ask::env("NVIDIA_VISIBLE_DEVICES", &ids)),
        &two,
        &node.context(&format!("{how}: NVIDIA_VISIBLE_DEVICES={ids}")),
    );
    assert_untouched(
        &node.run("no-gpu", handler, Ask::default()),
        &node.context(&format!("{how}: a pod that asks for no GPU")),
    );
    assert_refused(
        &node.run("bad", handler, Ask::env("NVIDIA_VISIBLE_DEVICES", "7")),
        "GPU index 7",
        &node.context(&format!("{how}: NVIDIA_VISIBLE_DEVICES=7")),
    );
}

/// The handler `nv` of nvc's drop-in: nvc-runtime in place of runc.
#[test]
#[ignore = "needs root and CRI-O (../shared/cri-o, conmon, skopeo): device nodes, namespaces"]
fn crio_runtime_handler_nv() {
    let w = World::new();
    let node = Node::start(
        &w,
        &Setup {
            nv_handler: true,
            ..Setup::default()
        },
    );
    env_requests(&node, HANDLER, &w.gpus(), "handler nv");
    nvc_ps_names_the_pod(&node, &w.gpus());
    node.finish();
}

/// `nvc ps` while a pod's container holds GPU 2: the process is CRI-O's, named by the
/// kubelet's container, pod and namespace from its bundle's annotations, the bundle in
/// the vfs storage's run folder (`<runroot>/vfs-containers/<id>/userdata`).
fn nvc_ps_names_the_pod(node: &Node<'_>, gpus: &[FakeGpu]) {
    let runroot = node.crio.dir.join("runroot");
    let context = |what: &str| node.context(what);
    let container = nvc_ps_of_a_pod(
        node.w,
        gpus,
        &["--storage", runroot.to_str().unwrap()],
        |ask, more| node.run_more("gpu-job", HANDLER, ask, more),
        &context,
    );
    assert_eq!(container["engine"], "cri-o", "{container:#}");
    let id = container["id"].as_str().unwrap();
    assert_eq!(
        container["bundle"],
        runroot
            .join("vfs-containers")
            .join(id)
            .join("userdata")
            .to_str()
            .unwrap(),
        "{container:#}"
    );
}

/// nvc-hook from CRI-O's hooks folder, under the default handler (runc): the hooks.d
/// file `nvc runtime configure --runtime podman` writes (the package's), the GPUs in the
/// container's environment.
#[test]
#[ignore = "needs root and CRI-O (../shared/cri-o, conmon, skopeo): device nodes, namespaces"]
fn crio_hooks_dir() {
    let w = World::new();
    let hooks = podman_hooks_dir(&w);
    let node = Node::start(
        &w,
        &Setup {
            hooks_dirs: &[&hooks],
            ..Setup::default()
        },
    );
    env_requests(&node, DEFAULT_HANDLER, &w.gpus(), "hooks.d, handler runc");
    node.finish();
}

/// CRI-O's CDI support with nvc's spec, under the default handler (runc): a GPU in CRI's
/// CDI_devices field, another in a `cdi.k8s.io/` annotation (the device plugin's
/// `cdi-cri` and `cdi-annotations` strategies), by UUID.
#[test]
#[ignore = "needs root and CRI-O (../shared/cri-o, conmon, skopeo): device nodes, namespaces"]
fn crio_cdi() {
    let w = World::new();
    let cdi = w.cdi_spec_dir();
    let node = Node::start(
        &w,
        &Setup {
            cdi_spec_dirs: &[&cdi],
            ..Setup::default()
        },
    );
    let gpus = w.gpus();

    let name = format!("nvidia.com/gpu={}", gpus[0].uuid);
    assert_gpus_with(
        &node.run(
            "cdi-cri",
            DEFAULT_HANDLER,
            Ask {
                cdi_devices: vec![name.clone()],
                ..Ask::default()
            },
        ),
        &gpus[0..1],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("CDIDevice {name}")),
    );

    let name = format!("nvidia.com/gpu={}", gpus[2].uuid);
    assert_gpus_with(
        &node.run(
            "cdi-annotations",
            DEFAULT_HANDLER,
            Ask {
                annotations: vec![(CDI_ANNOTATION.into(), name.clone())],
                ..Ask::default()
            },
        ),
        &gpus[2..3],
        &["/dev/nvidia-modeset 195:254"],
        &node.context(&format!("{CDI_ANNOTATION}={name}")),
    );

    assert_untouched(
        &node.run("no-gpu", DEFAULT_HANDLER, Ask::default()),
        &node.context("CDI: a pod that asks for no GPU"),
    );
    node.finish();
}

/// What RunPodSandbox with handler `nv` answers: the sandbox's id, or CRI-O's error.
fn sandbox_on_nv(node: &Node<'_>, name: &str) -> Result<String, String> {
    let sandbox = sandbox(node.w, name, &node.cgroup_parent());
    match node.cri.run_pod_sandbox(&sandbox, HANDLER) {
        Ok(id) => Ok(id),
        Err(CriError::Call { message, .. }) => Err(message),
        Err(e) => panic!("RunPodSandbox {name}: {}", error_chain(&e)),
    }
}

/// nvc's drop-in written while CRI-O 1.37 runs: SIGHUP is not enough, a restart is.
///
/// Seen here with CRI-O 1.37.0, as upstream's cri-o/cri-o#10202 reports: after SIGHUP,
/// CRI-O logs "Reloading configuration", `Runtime handler "nv" ...` and "Configuration
/// reload completed", and `crio status config` lists `[crio.runtime.runtimes.nv]`, but
/// RunPodSandbox with handler `nv` still fails with "failed to find runtime handler nv
/// from runtime list map[runc:...]", the list CRI-O started with. After a restart the
/// handler works. A node installer must therefore restart CRI-O, not reload it, after writing the
/// drop-in. Should a later CRI-O take the handler on SIGHUP, this test fails at the
/// assertion that says so.
///
/// The restart keeps a running pod running (as under systemd, conmon outlives CRI-O) and
/// CRI-O finds it again.
#[test]
#[ignore = "needs root and CRI-O (../shared/cri-o, conmon, skopeo): device nodes, namespaces"]
fn crio_nv_drop_in_needs_a_restart_not_sighup() {
    let w = World::new();
    let mut node = Node::start(&w, &Setup::default());
    let dir = node.crio.dir.clone();

    let before = sandbox_on_nv(&node, "before");
    let Err(message) = before else {
        panic!(
            "{}",
            node.context("handler nv worked before nvc's drop-in was written")
        );
    };
    assert!(
        message.contains("failed to find runtime handler nv"),
        "{message}\n{}",
        node.context("RunPodSandbox nv, before the drop-in")
    );

    // A pod that runs across the reload and the restart.
    let (sleeper, mut container) = probe_pod(
        &w,
        "sleeper",
        &node.cgroup_parent(),
        IMAGE,
        Ask::default(),
        "",
    );
    // The first process of its PID namespace: SIGTERM ends it only through a handler.
    container.command = ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]
        .map(String::from)
        .to_vec();
    let sleeper_id = node.cri.run_pod_sandbox(&sleeper, DEFAULT_HANDLER).unwrap();
    let sleeper_ctr = node
        .cri
        .create_container(&sleeper_id, &container, &sleeper)
        .unwrap();
    node.cri.start_container(&sleeper_ctr).unwrap();

    configure_nv(&dir);
    node.crio
        .sighup()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let status = node.crio.status_config();
    status.assert_success();
    assert!(
        status.stdout.contains("[crio.runtime.runtimes.nv]"),
        "after SIGHUP, `crio status config` does not list the handler nv:\n{}",
        status.stdout
    );
    match sandbox_on_nv(&node, "after-sighup") {
        Err(message) => assert!(
            message.contains("failed to find runtime handler nv"),
            "RunPodSandbox nv after SIGHUP failed otherwise than CRI-O 1.37 was seen to: \
             {message}\n{}",
            node.context("after SIGHUP")
        ),
        Ok(id) => panic!(
            "CRI-O {} now takes the handler nv on SIGHUP (sandbox {id}): a node installer \
             may reload it instead of restarting it; update this test and the installer",
            node.version
        ),
    }

    node.crio
        .restart()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    node.cri = connect(&node.crio);
    let state = node.cri.container_status(&sleeper_ctr).unwrap().state;
    assert_eq!(
        ContainerState::try_from(state),
        Ok(ContainerState::Running),
        "{}",
        node.context("the pod running across the restart")
    );
    assert_gpus(
        &node.run(
            "after-restart",
            HANDLER,
            Ask::env("NVIDIA_VISIBLE_DEVICES", &w.gpus()[1].uuid),
        ),
        &w.gpus()[1..2],
        &node.context("handler nv after a restart"),
    );
    node.cri.stop_pod_sandbox(&sleeper_id).unwrap();
    node.cri.remove_pod_sandbox(&sleeper_id).unwrap();
    node.finish();
}
