//! The node installer as a Kubernetes node runs it: the image of
//! `packaging/build-node-image.sh` imported into the node's containerd and run as the
//! DaemonSet of `packaging/kubernetes/` runs it (through the CRI, in the node's PID
//! namespace, with the node's `/` read-only at `/host` and its `/opt`, `/etc/containerd`
//! and `/run/cdi` writable), against a scratch node: a Debian root's containerd whose
//! `/etc/containerd`, `/opt` and `/run/cdi` are folders of the test, a fake driver, and
//! containerd started again whenever it exits, as its systemd unit does. The installer
//! configures containerd and restarts it (SIGHUP); a GPU pod then runs through the `nv`
//! handler it registered and another through its CDI spec; stopping the installer's
//! container (SIGTERM) takes nvc off, and the node's files are as they were, byte for
//! byte.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use libnvc::report::error_chain;
use nvc_tests::cri::api::{
    ContainerConfig, ContainerMetadata, ImageSpec, LinuxContainerConfig,
    LinuxContainerSecurityContext, Mount, NamespaceMode, PodSandboxConfig,
};
use nvc_tests::cri::CriClient;
use nvc_tests::{
    tree_digest, workspace_bin, Containerd, CriSettings, Crio, CrioSettings, EngineRoot, Outcome,
    RootView, START_TIMEOUT,
};

use super::cri::{namespaces, outcome, probe_pod, sandbox, Ask, POD_TIMEOUT};
use super::crio::CAPABILITIES_DROP_IN;
use super::{assert_gpus, assert_gpus_with, World, CTR_IMAGE};

/// The RuntimeClass handler the installer registers (`--runtime-name`'s default).
const HANDLER: &str = "nv";

/// The image's name once imported (build-node-image.sh `--tag test`).
const NODE_IMAGE: &str = "docker.io/library/nvc-node:test";

/// Where the containerd test's installer writes its ready file: a test folder, not the
/// container's own `/run` (the readiness probe's), so that the test sees it. (What the
/// installer prints reaches its CRI log through containerd, which it restarts: a line
/// printed while containerd is down, or before it has found the container again, can
/// be lost.)
const READY_DIR: &str = "/run/nvc-node-test";

/// How long the installer may take to report ready, or to finish after SIGTERM.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(90);

/// The node's files the installer may touch: test folders placed over the root's.
struct NodeFiles {
    /// The folder holding the three below.
    dir: PathBuf,
    etc: PathBuf,
    opt: PathBuf,
    cdi: PathBuf,
}

impl NodeFiles {
    fn new(w: &World) -> NodeFiles {
        let dir = w.path("node");
        let files = NodeFiles {
            etc: dir.join("etc-containerd"),
            opt: dir.join("opt"),
            cdi: dir.join("run-cdi"),
            dir,
        };
        for d in [&files.etc, &files.opt, &files.cdi] {
            std::fs::create_dir_all(d).unwrap();
        }
        files
    }

    /// The root's view: the test's folder at its own path (containerd's state, the fake
    /// driver, nvc's config and log), the node's files over the root's.
    fn view(&self, w: &World) -> RootView {
        RootView {
            binds: vec![w.dir.path().to_path_buf()],
            placed: vec![
                (self.etc.clone(), PathBuf::from("/etc/containerd")),
                (self.opt.clone(), PathBuf::from("/opt")),
                (self.cdi.clone(), PathBuf::from("/run/cdi")),
            ],
            ..RootView::default()
        }
    }
}

/// The image, built by the packaging script from this build's binaries.
fn build_image(w: &World) -> PathBuf {
    let image = w.path("nvc-node.oci.tar");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/build-node-image.sh");
    let bin_dir = workspace_bin("nvc").parent().unwrap().to_path_buf();
    let out = Command::new("bash")
        .arg(&script)
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--output")
        .arg(&image)
        .args(["--tag", "test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "build-node-image.sh: {out:?}");
    image
}

/// The DaemonSet's container, as `packaging/kubernetes/` has it, with the test's driver
/// roots, engine socket and nvc config (a ConfigMap's, in a cluster).
fn installer(w: &World, socket: &Path) -> ContainerConfig {
    let fake = &w.fake;
    let mount = |host: &Path, container: &str, readonly: bool| Mount {
        container_path: container.into(),
        host_path: host.display().to_string(),
        readonly,
    };
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "nvc-node".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec::named(NODE_IMAGE)),
        // The image's entry point, `nvc node run`, with the DaemonSet's arguments.
        args: vec![
            "--engine=containerd".into(),
            format!("--socket={}", socket.display()),
            format!("--driver-root={}", fake.root.display()),
            format!("--dev-root={}", fake.dev_root.display()),
            format!("--proc-root={}", fake.proc_root.display()),
            "--nvc-config=/etc/nvc-node/config.toml".into(),
            format!("--ready-file={READY_DIR}/ready"),
        ],
        mounts: vec![
            mount(Path::new("/"), "/host", true),
            mount(&w.path("installer-run"), READY_DIR, false),
            mount(Path::new("/opt"), "/host/opt", false),
            mount(Path::new("/etc/containerd"), "/host/etc/containerd", false),
            mount(Path::new("/run/cdi"), "/host/run/cdi", false),
            mount(&w.config, "/etc/nvc-node/config.toml", true),
        ],
        log_path: "nvc-node/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                privileged: false,
                namespace_options: Some(host_pid()),
            }),
        }),
        ..ContainerConfig::default()
    }
}

/// A pod's namespaces with the node's PID namespace (`hostPID: true`).
fn host_pid() -> nvc_tests::cri::api::NamespaceOption {
    nvc_tests::cri::api::NamespaceOption {
        pid: NamespaceMode::Node.into(),
        ..namespaces()
    }
}

/// What the installer's container has written to its log so far.
fn installer_log(w: &World) -> String {
    let path = w.path("pods/nvc-node/nvc-node/0.log");
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Pod `name`'s probe container (of `image`) through `handler`, to its end.
fn probe(
    w: &World,
    cri: &CriClient,
    cgroup: &str,
    image: &str,
    name: &str,
    handler: &str,
    ask: Ask,
) -> Outcome {
    let (pod_sandbox, container) = probe_pod(w, name, cgroup, image, ask, "");
    outcome(
        name,
        cri.run_to_exit(&pod_sandbox, handler, &container, POD_TIMEOUT),
    )
}

/// GPU pods through the nvc the installer put on the node: the `nv` handler
/// (nvc-runtime from the install folder, its config beside it), and a CDI name the engine
/// resolves from the spec it wrote.
fn installed_nvc_gives_gpus(
    w: &World,
    cri: &CriClient,
    cgroup: &str,
    image: &str,
    context: &dyn Fn(&str) -> String,
) {
    let gpus = w.gpus();
    let ask = Ask::env("NVIDIA_VISIBLE_DEVICES", &gpus[1].uuid);
    let out = probe(w, cri, cgroup, image, "handler-nv", HANDLER, ask);
    assert_gpus(&out, &gpus[1..2], &context("the nv handler"));
    let ask = Ask {
        cdi_devices: vec![format!("nvidia.com/gpu={}", gpus[0].uuid)],
        ..Ask::default()
    };
    let out = probe(w, cri, cgroup, image, "cdi", "", ask);
    let modeset = ["/dev/nvidia-modeset 195:254"];
    assert_gpus_with(&out, &gpus[0..1], &modeset, &context("CDI"));
}

/// Once nvc is uninstalled and the engine restarted: no runtime `nv`.
fn nv_is_gone(w: &World, cri: &CriClient, cgroup: &str, image: &str) {
    let ask = Ask::env("NVIDIA_VISIBLE_DEVICES", &w.gpus()[1].uuid);
    let out = probe(w, cri, cgroup, image, "after", HANDLER, ask);
    assert!(
        !out.success(),
        "the nv handler outlived the uninstall: {out:?}"
    );
}

/// How many times containerd exited and was started again (the namespace's first process
/// says so in its log).
fn restarts(containerd: &Containerd) -> usize {
    containerd
        .log_tail(100_000)
        .matches("exited; starting it again")
        .count()
}

/// Container `id` once it has exited, asked of containerd until it answers (it restarts
/// as the container ends), and a client of the containerd that answered.
fn exited_after_restart(
    containerd: &Containerd,
    id: &str,
) -> (CriClient, nvc_tests::cri::api::ContainerStatus) {
    let deadline = Instant::now() + INSTALL_TIMEOUT;
    loop {
        let answer =
            CriClient::connect_when_ready(&containerd.socket, START_TIMEOUT).and_then(|cri| {
                cri.wait_exited(id, Duration::from_secs(5))
                    .map(|s| (cri, s))
            });
        match answer {
            Ok(done) => return done,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the installer's container did not end: {}
containerd log:
{}",
                error_chain(&e),
                containerd.log_tail(40)
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The whole life of the DaemonSet's pod on a node of `root`'s containerd, with a config
/// of `config_version`.
fn install_use_uninstall(root: &EngineRoot, config_version: u8) {
    let w = World::new();
    let node = NodeFiles::new(&w);
    let state = w.path("containerd");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(w.path("installer-run")).unwrap();
    let settings = CriSettings {
        sandbox_image: CTR_IMAGE,
        cdi_spec_dirs: &[Path::new("/var/run/cdi")],
        enable_cdi: false,
    };
    std::fs::write(
        node.etc.join("config.toml"),
        Containerd::cri_config(&state, config_version, &settings),
    )
    .unwrap();
    let before = tree_digest(&node.dir);
    let image = build_image(&w);

    let containerd = Containerd::start_node(
        root,
        &node.view(&w),
        &state,
        Path::new("/etc/containerd/config.toml"),
        &[],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let namespace = containerd.namespace.clone();
    containerd
        .import_for_cri(&w.tarball, CTR_IMAGE, &["sleep", "86400"])
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    containerd
        .import_oci_for_cri(&image)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let connect = || {
        CriClient::connect_when_ready(&containerd.socket, START_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "{}\ncontainerd log:\n{}",
                error_chain(&e),
                containerd.log_tail(40)
            )
        })
    };
    let cri = connect();

    // The DaemonSet's pod.
    let cgroup = format!("/{namespace}");
    let mut installer_pod: PodSandboxConfig = sandbox(&w, "nvc-node", &cgroup);
    if let Some(linux) = installer_pod.linux.as_mut() {
        if let Some(ctx) = linux.security_context.as_mut() {
            ctx.namespace_options = Some(host_pid());
        }
    }
    let pod = cri.run_pod_sandbox(&installer_pod, "").unwrap();
    std::fs::create_dir_all(w.path("pods/nvc-node/nvc-node")).unwrap();
    let id = cri
        .create_container(&pod, &installer(&w, &containerd.socket), &installer_pod)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    cri.start_container(&id).unwrap();
    let ready = w.path("installer-run/ready");
    let deadline = Instant::now() + INSTALL_TIMEOUT;
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "the installer was not ready within {}s:\n{}\ncontainerd log:\n{}",
            INSTALL_TIMEOUT.as_secs(),
            installer_log(&w),
            containerd.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        restarts(&containerd),
        1,
        "containerd was not restarted once:\n{}",
        containerd.log_tail(40)
    );
    assert!(node.opt.join("nvc/bin/nvc-runtime").is_file());
    assert!(node.opt.join("nvc/etc/config.toml").is_file());
    assert!(node.cdi.join("nvidia.yaml").is_file());

    // The restarted containerd runs GPU pods with the nvc it installed: the `nv` handler
    // (nvc-runtime from /opt/nvc/bin, its config beside it), and CDI names resolved from
    // the spec it wrote.
    let cri = connect();
    installed_nvc_gives_gpus(&w, &cri, &cgroup, CTR_IMAGE, &|what| {
        format!(
            "containerd: {what}\nnvc log:\n{}\ninstaller log:\n{}\ncontainerd log:\n{}",
            w.nvc_log(),
            installer_log(&w),
            containerd.log_tail(30)
        )
    });

    // The DaemonSet's pod stops: SIGTERM. The installer restarts containerd under the
    // call, which then fails, and ends once containerd is back, which finds the container
    // exited.
    let _ = cri.stop_container(&id, INSTALL_TIMEOUT);
    drop(cri);
    let (cri, status) = exited_after_restart(&containerd, &id);
    let log = installer_log(&w);
    assert_eq!(status.exit_code, 0, "{log}\n{status:?}");
    assert!(
        !ready.exists(),
        "the ready file outlived the install:\n{log}"
    );
    assert_eq!(
        restarts(&containerd),
        2,
        "containerd was not restarted again:\n{}",
        containerd.log_tail(40)
    );

    // The node is as it was, and the `nv` handler is gone with nvc.
    assert_eq!(
        tree_digest(&node.dir),
        before,
        "the node's files changed:\n{log}"
    );
    nv_is_gone(&w, &cri, &cgroup, CTR_IMAGE);

    cri.stop_pod_sandbox(&pod).unwrap();
    cri.remove_pod_sandbox(&pod).unwrap();
    drop(cri);
    drop(containerd);
    w.assert_clean(&[namespace]);
}

/// Debian 14's containerd 2.1 (config version 3).
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): containerd, device nodes"]
fn node_installer_through_containerd21() {
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    install_use_uninstall(&root, 3);
}

/// Debian 13's containerd 1.7 (config version 2: the drop-in carries the CRI section).
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): containerd, device nodes"]
fn node_installer_through_containerd17() {
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    install_use_uninstall(&root, 2);
}

/// The DaemonSet's container for a CRI-O node, as `crio.yaml` has it but for what the
/// test's node puts elsewhere: CRI-O's config folder, the install folder and the CDI
/// spec's folder are the test's, at the same paths on the node (CRI-O runs on this
/// machine, whose `/etc/crio` and `/opt` are not the test's to change). `--reload=none`:
/// there is no systemd here to run `systemctl restart crio`; the test restarts CRI-O
/// where systemd would.
fn crio_installer(w: &World, node: &CrioNode) -> ContainerConfig {
    let fake = &w.fake;
    let mount = |host: &Path, container: &str, readonly: bool| Mount {
        container_path: container.into(),
        host_path: host.display().to_string(),
        readonly,
    };
    let under_host = |p: &Path| format!("/host{}", p.display());
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "nvc-node".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec::named(CRIO_NODE_IMAGE)),
        args: vec![
            "--engine=crio".into(),
            "--reload=none".into(),
            format!("--engine-config={}", node.etc.join("crio.conf").display()),
            format!("--install-dir={}", node.opt.join("nvc").display()),
            format!("--cdi-spec={}", node.cdi.join("nvidia.yaml").display()),
            format!("--driver-root={}", fake.root.display()),
            format!("--dev-root={}", fake.dev_root.display()),
            format!("--proc-root={}", fake.proc_root.display()),
            "--nvc-config=/etc/nvc-node/config.toml".into(),
        ],
        mounts: vec![
            mount(Path::new("/"), "/host", true),
            mount(&node.opt, &under_host(&node.opt), false),
            mount(&node.etc, &under_host(&node.etc), false),
            mount(&node.cdi, &under_host(&node.cdi), false),
            mount(&w.config, "/etc/nvc-node/config.toml", true),
        ],
        log_path: "nvc-node/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                privileged: false,
                namespace_options: Some(namespaces()),
            }),
        }),
        ..ContainerConfig::default()
    }
}

/// The image's name in CRI-O's storage.
const CRIO_NODE_IMAGE: &str = "localhost/nvc-node:test";

/// A CRI-O node's files: its config folder, `/opt` and the CDI folder, test folders.
struct CrioNode {
    dir: PathBuf,
    etc: PathBuf,
    opt: PathBuf,
    cdi: PathBuf,
}

/// The DaemonSet's pod on a CRI-O 1.37 node: install, a CRI-O restart (systemd's, for
/// `systemctl restart crio`), GPU pods through `nv` and CDI, SIGTERM, the node's files as
/// before, and `nv` gone after the next restart.
#[test]
#[ignore = "needs root and ../shared/cri-o: CRI-O, conmon, skopeo, device nodes"]
fn node_installer_through_crio137() {
    let w = World::new();
    let dir = w.path("node");
    let node = CrioNode {
        etc: dir.join("etc-crio"),
        opt: dir.join("opt"),
        cdi: dir.join("cdi"),
        dir,
    };
    for d in [&node.etc.join(nvc_tests::CRIO_CONF_D), &node.opt, &node.cdi] {
        std::fs::create_dir_all(d).unwrap();
    }
    let state = w.path("crio");
    let settings = CrioSettings {
        pause_image: super::IMAGE,
        cdi_spec_dirs: &[&node.cdi],
        ..CrioSettings::default()
    };
    let config = Crio::config(&state, &settings).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    std::fs::write(node.etc.join("crio.conf"), config).unwrap();
    // The probe's MKNOD, and the installer's SYS_CHROOT (crio.yaml lists it: CRI-O's
    // default set lacks it).
    let capabilities = CAPABILITIES_DROP_IN.replace("\"MKNOD\"]", "\"MKNOD\", \"SYS_CHROOT\"]");
    std::fs::write(
        node.etc
            .join(nvc_tests::CRIO_CONF_D)
            .join("10-capabilities.conf"),
        capabilities,
    )
    .unwrap();
    let before = tree_digest(&node.dir);
    let image = build_image(&w);

    let mut crio = Crio::start_with(
        &state,
        &node.etc.join("crio.conf"),
        &node.etc.join(nvc_tests::CRIO_CONF_D),
        &[],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    crio.import(&w.tarball, super::IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    crio.load_archive(&image, CRIO_NODE_IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let connect = |crio: &Crio| {
        CriClient::connect_when_ready(&crio.socket, START_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}\nCRI-O log:\n{}", error_chain(&e), crio.log_tail(40)))
    };
    let cri = connect(&crio);
    let cgroup = format!("/{}", crio.cgroup_parent);
    let installer_pod = sandbox(&w, "nvc-node", &cgroup);
    let pod = cri.run_pod_sandbox(&installer_pod, "").unwrap();
    let id = cri
        .create_container(&pod, &crio_installer(&w, &node), &installer_pod)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    cri.start_container(&id).unwrap();
    let deadline = Instant::now() + INSTALL_TIMEOUT;
    while !installer_log(&w).contains("nvc node: ready") {
        assert!(
            Instant::now() < deadline,
            "the installer was not ready within {}s:\n{}\nCRI-O log:\n{}",
            INSTALL_TIMEOUT.as_secs(),
            installer_log(&w),
            crio.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        installer_log(&w).contains("--reload none: restart crio to apply"),
        "{}",
        installer_log(&w)
    );
    drop(cri);
    crio.restart()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let cri = connect(&crio);

    installed_nvc_gives_gpus(&w, &cri, &cgroup, super::IMAGE, &|what| {
        format!(
            "CRI-O: {what}\nnvc log:\n{}\ninstaller log:\n{}\nCRI-O log:\n{}",
            w.nvc_log(),
            installer_log(&w),
            crio.log_tail(30)
        )
    });

    // SIGTERM: the revert, no reload (--reload none); the container ends by itself.
    cri.stop_container(&id, INSTALL_TIMEOUT).unwrap();
    let status = cri.wait_exited(&id, INSTALL_TIMEOUT).unwrap();
    let log = installer_log(&w);
    assert_eq!(status.exit_code, 0, "{log}\n{status:?}");
    assert!(log.contains("nvc uninstalled"), "{log}");
    assert_eq!(
        tree_digest(&node.dir),
        before,
        "the node's files changed:\n{log}"
    );
    drop(cri);
    crio.restart()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let cri = connect(&crio);
    nv_is_gone(&w, &cri, &cgroup, super::IMAGE);

    cri.stop_pod_sandbox(&pod).unwrap();
    cri.remove_pod_sandbox(&pod).unwrap();
    drop(cri);
    let cgroup_name = crio.cgroup_parent.clone();
    drop(crio);
    w.assert_clean(&[cgroup_name]);
}
