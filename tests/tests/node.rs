//! `nvc node install`, `uninstall`, `run` and `ready` on a scratch node root (the built
//! binary, `--host-root` a test folder holding a fake driver and an engine's config): what
//! the installer writes, that uninstalling puts the node back byte for byte, that
//! installing again changes nothing, what it refuses (and that it then writes nothing),
//! a change of the admin's kept, the SIGHUP of signal mode, and `run`'s whole life. The
//! same through real containerd and a pod: tests/tests/engines/node.rs.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nvc_tests::{require_root, tree_digest, workspace_bin, FakeDriverSpec};

/// A node's `/`: an engine's config, `/opt`, and a fake driver under `/driver`.
struct Node {
    dir: tempfile::TempDir,
}

const CONTAINERD_CONFIG: &str = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  \
                                 sandbox_image = \"registry.k8s.io/pause:3.10\"\n";
const CRIO_CONFIG: &str = "[crio.runtime]\ndefault_runtime = \"runc\"\n";

impl Node {
    fn new(engine: &str) -> Node {
        require_root("nvc node chroots into the node's root; fake drivers have device nodes");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("opt")).unwrap();
        match engine {
            "containerd" => {
                std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
                std::fs::write(root.join("etc/containerd/config.toml"), CONTAINERD_CONFIG).unwrap();
            }
            "crio" => {
                std::fs::create_dir_all(root.join("etc/crio")).unwrap();
                std::fs::write(root.join("etc/crio/crio.conf"), CRIO_CONFIG).unwrap();
            }
            _ => {}
        }
        std::fs::create_dir(root.join("driver")).unwrap();
        FakeDriverSpec::default()
            .build(&root.join("driver"))
            .unwrap();
        Node { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// What the installer may touch, as a digest (paths, modes, owners, contents).
    fn files(&self) -> String {
        ["etc", "opt", "var"]
            .iter()
            .map(|d| format!("== {d}\n{}", tree_digest(&self.root().join(d))))
            .collect()
    }

    /// The options every call gives: this node, its fake driver.
    fn args(&self, engine: &str) -> Vec<String> {
        vec![
            format!("--engine={engine}"),
            format!("--host-root={}", self.root().display()),
            "--driver-root=/driver/root".into(),
            "--dev-root=/driver/root".into(),
            "--proc-root=/driver/proc".into(),
            format!("--binaries={}", bin_dir().display()),
            format!("--ready-file={}", self.root().join("ready").display()),
        ]
    }

    /// `nvc node SUB` with this node's options and `more`.
    fn nvc(&self, sub: &str, engine: &str, more: &[&str]) -> Output {
        Command::new(workspace_bin("nvc"))
            .args(["node", sub])
            .args(self.args(engine))
            .args(more)
            .output()
            .unwrap()
    }
}

fn bin_dir() -> PathBuf {
    workspace_bin("nvc").parent().unwrap().to_path_buf()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(out));
    text(out)
}

#[track_caller]
fn refused(out: &Output, why: &str) {
    assert!(!out.status.success(), "not refused: {}", text(out));
    assert!(text(out).contains(why), "no {why:?} in: {}", text(out));
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn containerd_install_then_uninstall_leaves_the_node_byte_for_byte() {
    let node = Node::new("containerd");
    let before = node.files();
    let said = ok(&node.nvc("install", "containerd", &["--reload=none"]));
    let root = node.root();
    for file in [
        "nvc",
        "nvc-runtime",
        "nvc-hook",
        "nvc-cuda-version",
        "nvc-mig-devices",
    ] {
        let installed = std::fs::read(root.join("opt/nvc/bin").join(file)).unwrap();
        assert!(!installed.is_empty(), "{file}");
    }
    let config = std::fs::read_to_string(root.join("opt/nvc/etc/config.toml")).unwrap();
    assert!(config.contains("root = \"/driver/root\""), "{config}");
    assert!(
        config.contains("path = \"/opt/nvc/bin/nvc-hook\""),
        "{config}"
    );
    let main = std::fs::read_to_string(root.join("etc/containerd/config.toml")).unwrap();
    assert!(
        main.contains("imports = [\"/etc/containerd/conf.d/*.toml\"]"),
        "the import names the node's path: {main}"
    );
    let drop_in = std::fs::read_to_string(root.join("etc/containerd/conf.d/99-nvc.toml")).unwrap();
    assert!(drop_in.contains("/opt/nvc/bin/nvc-runtime"), "{drop_in}");
    assert!(drop_in.contains("enable_cdi = true"), "{drop_in}");
    let spec = std::fs::read_to_string(root.join("var/run/cdi/nvidia.yaml")).unwrap();
    assert!(
        spec.contains("hostPath: /driver/root/dev/nvidia0"),
        "{spec}"
    );
    assert!(said.contains("--reload none: restart containerd"), "{said}");

    // Again, as a restarted pod does: nothing changes, the engine is not reloaded.
    let after = node.files();
    let said = ok(&node.nvc("install", "containerd", &["--reload=none"]));
    assert!(said.contains("already configured: not reloaded"), "{said}");
    assert_eq!(node.files(), after);

    let said = ok(&node.nvc("uninstall", "containerd", &["--reload=none"]));
    assert!(said.contains("nvc uninstalled"), "{said}");
    assert_eq!(node.files(), before, "{said}");
    assert!(!root.join("opt/nvc").exists());
    // Nothing left to undo.
    let said = ok(&node.nvc("uninstall", "containerd", &["--reload=none"]));
    assert!(said.contains("nothing to undo"), "{said}");
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn crio_install_then_uninstall_leaves_the_node_byte_for_byte() {
    let node = Node::new("crio");
    let before = node.files();
    ok(&node.nvc("install", "crio", &["--reload=none"]));
    let drop_in =
        std::fs::read_to_string(node.root().join("etc/crio/crio.conf.d/99-nvc.conf")).unwrap();
    assert!(drop_in.contains("/opt/nvc/bin/nvc-runtime"), "{drop_in}");
    ok(&node.nvc("uninstall", "crio", &["--reload=none"]));
    assert_eq!(node.files(), before);
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn the_device_plugin_s_spec_is_written_beside_nvc_s_and_taken_away() {
    let node = Node::new("containerd");
    let before = node.files();
    let plugin = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json";
    let flag = format!("--device-plugin-cdi-spec={plugin}");
    let said = ok(&node.nvc("install", "containerd", &["--reload=none", &flag]));
    assert!(
        said.contains(&format!("wrote the CDI spec {plugin}")),
        "{said}"
    );
    let root = node.root();
    // JSON, as its name says; the kind the plugin names GPUs under, by UUID and by
    // index (its DEVICE_ID_STRATEGY), with the edits of nvc's own spec.
    let text = std::fs::read_to_string(root.join(plugin.trim_start_matches('/'))).unwrap();
    let spec: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(spec["kind"], "k8s.device-plugin.nvidia.com/gpu");
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"0") && names.contains(&"all"), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("GPU-")), "{names:?}");
    let nvidia = std::fs::read_to_string(root.join("var/run/cdi/nvidia.yaml")).unwrap();
    assert!(nvidia.contains("kind: nvidia.com/gpu\n"), "{nvidia}");
    let nvidia: serde_json::Value = serde_norway::from_str(&nvidia).unwrap();
    assert_eq!(spec["containerEdits"], nvidia["containerEdits"]);

    // Again: nothing changes.
    let after = node.files();
    let said = ok(&node.nvc("install", "containerd", &["--reload=none", &flag]));
    assert!(!said.contains("wrote the CDI spec"), "{said}");
    assert_eq!(node.files(), after);

    // A relative path is refused.
    let out = node.nvc(
        "install",
        "containerd",
        &["--reload=none", "--device-plugin-cdi-spec=k8s.json"],
    );
    refused(
        &out,
        "--device-plugin-cdi-spec k8s.json: give an absolute path",
    );

    ok(&node.nvc("uninstall", "containerd", &["--reload=none", &flag]));
    assert_eq!(node.files(), before);
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn what_the_node_cannot_take_is_refused_with_nothing_written() {
    // No driver where it is said to be.
    let node = Node::new("containerd");
    let before = node.files();
    let out = Command::new(workspace_bin("nvc"))
        .args(["node", "install", "--engine=containerd", "--reload=none"])
        .arg(format!("--host-root={}", node.root().display()))
        .arg(format!("--binaries={}", bin_dir().display()))
        .args(["--driver-root=/nowhere", "--proc-root=/nowhere/proc"])
        .output()
        .unwrap();
    refused(&out, "no NVIDIA driver on this node");
    assert_eq!(node.files(), before);

    // An engine the node does not have.
    let out = node.nvc("install", "crio", &["--reload=none"]);
    refused(&out, "this node has no crio config folder /etc/crio");
    assert_eq!(node.files(), before);

    // An engine nvc does not know.
    let out = node.nvc("install", "docker", &[]);
    refused(&out, "invalid value 'docker' for '--engine <ENGINE>'");

    // A packaged nvc.
    std::fs::create_dir_all(node.root().join("etc/nvc")).unwrap();
    std::fs::write(node.root().join("etc/nvc/config.toml"), "").unwrap();
    let before = node.files();
    let out = node.nvc("install", "containerd", &["--reload=none"]);
    refused(&out, "nvc is installed on this node from a package");
    assert_eq!(node.files(), before);
    std::fs::remove_dir_all(node.root().join("etc/nvc")).unwrap();

    // An install folder that is someone else's.
    std::fs::create_dir_all(node.root().join("opt/nvc")).unwrap();
    let before = node.files();
    let out = node.nvc("install", "containerd", &["--reload=none"]);
    refused(&out, "holds no record of `nvc node install`");
    assert_eq!(node.files(), before);
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn run_undoes_an_install_cut_short() {
    let node = Node::new("containerd");
    let before = node.files();
    // The CDI spec's folder is a file: the install fails after it configured containerd.
    std::fs::create_dir_all(node.root().join("var/run")).unwrap();
    std::fs::write(node.root().join("var/run/cdi"), "not a folder").unwrap();
    let with_file = node.files();
    let out = node.nvc("run", "containerd", &["--reload=none"]);
    refused(&out, "the install failed: undoing what it did");
    assert!(
        text(&out).contains("removed /etc/containerd/conf.d/99-nvc.toml"),
        "{}",
        text(&out)
    );
    assert_eq!(node.files(), with_file, "{}", text(&out));
    assert!(!node.root().join("ready").exists());
    std::fs::remove_dir_all(node.root().join("var")).unwrap();
    assert_eq!(node.files(), before);
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn a_change_made_after_the_install_is_kept_by_the_uninstall() {
    let node = Node::new("containerd");
    ok(&node.nvc("install", "containerd", &["--reload=none"]));
    let main = node.root().join("etc/containerd/config.toml");
    let mut edited = std::fs::read_to_string(&main).unwrap();
    edited.push_str("# the admin's\n");
    std::fs::write(&main, &edited).unwrap();
    let site = node.root().join("etc/containerd/conf.d/50-site.toml");
    std::fs::write(&site, "# site\n").unwrap();
    let said = ok(&node.nvc("uninstall", "containerd", &["--reload=none"]));
    assert!(
        said.contains("kept /etc/containerd/config.toml: it changed after nvc was installed"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&main).unwrap(), edited);
    // nvc's drop-in went; the admin's file, and so its folder, stayed.
    assert!(site.exists());
    assert!(!node
        .root()
        .join("etc/containerd/conf.d/99-nvc.toml")
        .exists());
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn signal_mode_sends_sighup_to_the_socket_s_listener() {
    let node = Node::new("crio");
    let socket = node.root().join("run/crio.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let got = node.root().join("got-signal");
    // An engine: listens on its socket, writes down the signal it gets.
    let mut engine = Command::new("python3")
        .args([
            "-c",
            "import signal, socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.bind(sys.argv[1]); s.listen()\n\
             def hup(*_):\n    open(sys.argv[2], 'w').write('SIGHUP'); sys.exit(0)\n\
             signal.signal(signal.SIGHUP, hup)\n\
             print('listening', flush=True)\n\
             signal.pause()\n",
        ])
        .arg(&socket)
        .arg(&got)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/deps.sh installs it)");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(engine.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "listening");
    let said = ok(&node.nvc(
        "install",
        "crio",
        &["--reload=signal", "--socket=/run/crio.sock"],
    ));
    assert!(
        said.contains(&format!("sent SIGHUP to crio (pid {}", engine.id())),
        "{said}"
    );
    let status = engine.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "SIGHUP");
    // No listener: a clear error.
    let out = node.nvc(
        "uninstall",
        "crio",
        &["--reload=signal", "--socket=/run/crio.sock"],
    );
    refused(&out, "cannot connect to /run/crio.sock");
}

#[test]
#[ignore = "needs root: nvc node chroots; the fake driver has device nodes"]
fn run_installs_reports_ready_and_uninstalls_on_sigterm() {
    let node = Node::new("containerd");
    let before = node.files();
    let ready = node.root().join("ready");
    let mut run = Command::new(workspace_bin("nvc"))
        .args(["node", "run"])
        .args(node.args("containerd"))
        .arg("--reload=none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "never ready");
        assert!(run.try_wait().unwrap().is_none(), "nvc node run exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = |ready: &Path| {
        Command::new(workspace_bin("nvc"))
            .args(["node", "ready", "--ready-file"])
            .arg(ready)
            .output()
            .unwrap()
    };
    ok(&probe(&ready));
    assert!(node.root().join("opt/nvc/bin/nvc-runtime").exists());
    let term = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let out = run.wait_with_output().unwrap();
    let said = ok(&out);
    assert!(said.contains("SIGTERM: uninstalling"), "{said}");
    assert!(!ready.exists(), "the ready file outlived the install");
    refused(&probe(&ready), "not ready");
    assert_eq!(node.files(), before, "{said}");
}
