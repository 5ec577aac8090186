//! GPU containers through a private containerd: the config `nvc runtime configure`
//! writes, loaded by containerd 1.6 (Debian 12), 1.7 (Debian 13) and 2.1 (Debian 14) with
//! their CRI plugins, and `ctr run` with nvc-runtime as its runc.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use libnvc::report::error_chain;
use nvc_engines::containerd::{CDI_ANNOTATIONS, CRI_PLUGIN_V2, CRI_PLUGIN_V3, RUNC_SHIM};
use nvc_tests::{workspace_bin, Containerd, EngineRoot, Outcome};
use toml_edit::{DocumentMut, Item};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_runc_ran, assert_untouched,
    nvc_configure, run, World, CTR_IMAGE, PROBE,
};

/// A private containerd (CRI plugin off) with NVC_CONFIG in its environment, which it
/// passes to the shim, which passes it to the runc binary: that is how it reaches
/// nvc-runtime here.
fn start_containerd(w: &World) -> Containerd {
    let containerd = Containerd::start(
        &w.path("containerd"),
        &[("NVC_CONFIG", w.config.as_os_str())],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    containerd
        .import(&w.tarball, CTR_IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    containerd
}

/// `ctr run` of PROBE with the fake proc tree and `opts`.
fn ctr_probe(containerd: &Containerd, w: &World, mut opts: Vec<String>) -> Outcome {
    opts.extend([
        "--mount".into(),
        format!(
            "type=bind,src={},dst=/run/fake-proc,options=rbind:ro",
            w.fake.proc_root.display()
        ),
        "--env".into(),
        "NVC_FAKE_PROC=/run/fake-proc".into(),
    ]);
    containerd.run(&opts, CTR_IMAGE, &["sh", "-c", PROBE])
}

/// `ctr run` of PROBE with nvc-runtime as its runc binary, the fake proc tree and `env`.
fn ctr_run(containerd: &Containerd, w: &World, env: &[&str]) -> Outcome {
    let mut opts: Vec<String> = vec![
        "--runc-binary".into(),
        workspace_bin("nvc-runtime").display().to_string(),
    ];
    for e in env {
        opts.extend(["--env".to_string(), e.to_string()]);
    }
    ctr_probe(containerd, w, opts)
}

/// Where a containerd comes from: Debian 12's on this machine, or a newer Debian's root.
#[derive(Debug, Clone, Copy)]
enum Install<'a> {
    Host,
    Root(&'a EngineRoot),
}

impl Install<'_> {
    /// `containerd` of this install (add its arguments), seeing the host folder `dir`.
    fn containerd(self, dir: &Path) -> Command {
        match self {
            Install::Host => {
                Command::new(nvc_tests::find_program("containerd", "containerd").unwrap())
            }
            Install::Root(root) => root.command("/usr/bin/containerd", &[dir], None),
        }
    }

    /// Starts this install's containerd on `<dir>/config.toml` (`dir` under the test's
    /// folder).
    fn start(self, w: &World, dir: &Path) -> Containerd {
        let started = match self {
            Install::Host => Containerd::start(dir, &[]),
            Install::Root(root) => Containerd::start_in(root, dir, &[], &[w.dir.path()], None),
        };
        started.unwrap_or_else(|e| panic!("{}", error_chain(&e)))
    }

    /// What `containerd config default` prints: the config a node starts from.
    fn default_config(self, dir: &Path) -> String {
        let out = run(self.containerd(dir).args(["config", "default"]));
        out.assert_success();
        out.stdout
    }
}

/// `config` with every path containerd writes to under `dir` (as
/// `nvc_tests::Containerd` expects them), the rest as it is.
fn paths_under(config: &str, dir: &Path) -> String {
    let mut doc: DocumentMut = config.parse().unwrap();
    let d = dir.display();
    doc["root"] = toml_edit::value(format!("{d}/root"));
    doc["state"] = toml_edit::value(format!("{d}/state"));
    doc["grpc"]["address"] = toml_edit::value(format!("{d}/containerd.sock"));
    doc["ttrpc"]["address"] = toml_edit::value(format!("{d}/containerd.sock.ttrpc"));
    doc["plugins"]["io.containerd.internal.v1.opt"]["path"] = toml_edit::value(format!("{d}/opt"));
    doc.to_string()
}

/// `nvc runtime configure --runtime containerd --config <config> --runtime-path
/// <nvc-runtime> ARGS`.
pub(super) fn configure_containerd(config: &Path, args: &[&str]) {
    let runtime = workspace_bin("nvc-runtime");
    let mut all = vec![
        OsStr::new("--runtime"),
        OsStr::new("containerd"),
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("--runtime-path"),
        runtime.as_os_str(),
    ];
    all.extend(args.iter().map(OsStr::new));
    nvc_configure(&all);
}

/// The CRI runtime plugin's section of `containerd config dump` for `config`: the
/// merged config after imports and, on containerd 2.x, the migration of a version 2
/// file to version 3.
fn dumped_cri(install: Install<'_>, config: &Path) -> (Item, Outcome) {
    let dir = config.parent().unwrap();
    let dump = run(install
        .containerd(dir)
        .arg("--config")
        .arg(config)
        .args(["config", "dump"]));
    dump.assert_success();
    let doc: DocumentMut = dump.stdout.parse().unwrap();
    let plugin = match doc.get("version").and_then(Item::as_integer) {
        Some(3) => CRI_PLUGIN_V3,
        _ => CRI_PLUGIN_V2,
    };
    let cri = doc["plugins"][plugin].clone();
    (cri, dump)
}

/// The item at `path` under `item`, if there is one.
fn at<'a>(item: &'a Item, path: &[&str]) -> Option<&'a Item> {
    path.iter().try_fold(item, |item, key| item.get(key))
}

/// What a containerd's CRI plugin must show.
struct Cri<'a> {
    /// The plugins that must load, as `ctr plugins ls` lists them (`type id`).
    plugins: &'a [&'a str],
    /// Whether it reads `enable_cdi` (1.7 and later; 1.6 leaves it out of its view).
    reads_enable_cdi: bool,
}

/// containerd's view of its config holds the "nv" runtime as nvc wrote it: nvc-runtime
/// as the runc shim's binary, the `cdi.k8s.io/` annotations allowed through, CDI on
/// where it `reads_enable_cdi`, and the default runtime still `runc`.
#[track_caller]
fn assert_nv_runtime(cri: &Item, reads_enable_cdi: bool, dump: &Outcome) {
    let nv = |path: &[&str]| at(cri, &[&["containerd", "runtimes", "nv"][..], path].concat());
    let runtime = workspace_bin("nvc-runtime");
    let str_at = |item: Option<&Item>| item.and_then(Item::as_str).map(str::to_string);
    assert_eq!(
        str_at(nv(&["runtime_type"])).as_deref(),
        Some(RUNC_SHIM),
        "{dump:?}"
    );
    assert_eq!(
        str_at(nv(&["options", "BinaryName"])),
        Some(runtime.to_string_lossy().into_owned()),
        "{dump:?}"
    );
    for key in ["pod_annotations", "container_annotations"] {
        let allowed = nv(&[key])
            .and_then(Item::as_array)
            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(CDI_ANNOTATIONS)));
        assert!(allowed, "{key} lacks {CDI_ANNOTATIONS}: {dump:?}");
    }
    let enable_cdi = at(cri, &["enable_cdi"]).and_then(Item::as_bool);
    assert_eq!(enable_cdi, reads_enable_cdi.then_some(true), "{dump:?}");
    assert_eq!(
        str_at(at(cri, &["containerd", "default_runtime_name"])).as_deref(),
        Some("runc"),
        "{dump:?}"
    );
    assert_eq!(
        str_at(at(cri, &["containerd", "runtimes", "runc", "runtime_type"])).as_deref(),
        Some(RUNC_SHIM),
        "{dump:?}"
    );
}

/// `nvc runtime configure --runtime containerd --cdi` on `original` (a config with its
/// paths under `dir`), as on a Kubernetes node: containerd's view of the result holds the
/// "nv" runtime ([`assert_nv_runtime`]), containerd starts with it, every plugin in
/// `cri.plugins` loads and the CRI plugin starts with the "nv" runtime, and `--revert` gives
/// the file back byte for byte. Returns the containerd namespace, for
/// `World::assert_clean`. (`ctr` does not use the CRI plugin's runtimes; the `ctr
/// run` tests set the same shim option, `BinaryName`, with `--runc-binary`.)
fn assert_loads_the_config_nvc_writes(
    w: &World,
    install: Install<'_>,
    dir: &Path,
    original: &str,
    cri: &Cri<'_>,
) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, original).unwrap();
    configure_containerd(&config, &["--cdi"]);
    let (view, dump) = dumped_cri(install, &config);
    assert_nv_runtime(&view, cri.reads_enable_cdi, &dump);

    let containerd = install.start(w, dir);
    let plugins = containerd.ctr(&["plugins", "ls"]);
    let version = containerd.ctr(&["version"]);
    // The CRI plugin logs the config it starts with: 1.x as a Go struct, 2.x as JSON
    // (and after containerd says it booted).
    let cri_start = |l: &str| {
        l.contains("msg=\"Start cri plugin with config ")
            || l.contains("msg=\"starting cri plugin\"")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut log = containerd.log_tail(2000);
    while !log.lines().any(cri_start) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        log = containerd.log_tail(2000);
    }
    let namespace = containerd.namespace.clone();
    drop(containerd);
    for plugin in cri.plugins {
        let (kind, id) = plugin.split_once(' ').unwrap();
        let ok = plugins
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .any(|cols| cols.len() == 4 && cols[0] == kind && cols[1] == id && cols[3] == "ok");
        assert!(
            ok,
            "{plugin} did not load the config nvc wrote: {plugins:?}\n{version:?}\n{}",
            log.lines()
                .filter(|l| l.contains("failed to load plugin") || l.contains("level=error"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    let runtime = workspace_bin("nvc-runtime");
    let started = log
        .lines()
        .find(|l| cri_start(l))
        .unwrap_or_else(|| panic!("the CRI plugin did not start:\n{log}"));
    let nv_entry = [
        "nv:{Type:io.containerd.runc.v2 ",
        r#"\"nv\":{\"runtimeType\":\"io.containerd.runc.v2\""#,
    ];
    assert!(
        nv_entry.iter().any(|e| started.contains(e))
            && started.contains(&runtime.to_string_lossy().into_owned())
            && started.contains(CDI_ANNOTATIONS),
        "the CRI plugin started without the nv runtime: {started}"
    );

    configure_containerd(&config, &["--revert"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert!(!dir.join("conf.d/99-nvc.toml").exists());
    namespace
}

/// Debian 12's containerd 1.6 and its own default config.
#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn containerd_loads_the_config_nvc_writes() {
    let w = World::new();
    let dir = w.path("containerd");
    let original = paths_under(&Install::Host.default_config(&dir), &dir);
    let namespace = assert_loads_the_config_nvc_writes(
        &w,
        Install::Host,
        &dir,
        &original,
        &Cri {
            plugins: &["io.containerd.grpc.v1 cri"],
            reads_enable_cdi: false,
        },
    );
    w.assert_clean(&[namespace]);
}

/// Debian 13's containerd 1.7 with its own default config (version 2) and with the one
/// Debian's package installs (version 2, a few keys).
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn containerd17_loads_the_config_nvc_writes() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let cri = Cri {
        plugins: &["io.containerd.grpc.v1 cri"],
        reads_enable_cdi: true,
    };
    let namespaces = assert_root_loads_the_config_nvc_writes(&w, &root, &cri);
    w.assert_clean(&namespaces);
}

/// Debian 14's containerd 2.1 with its own default config (version 3, the CRI runtime
/// plugin `io.containerd.cri.v1.runtime`) and with the version 2 one Debian's package
/// installs (which containerd 2.1 migrates); and `--cdi` turning on CDI in a version 3
/// config that had it off.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn containerd21_loads_the_config_nvc_writes() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let cri = Cri {
        plugins: &[
            "io.containerd.grpc.v1 cri",
            "io.containerd.cri.v1 runtime",
            "io.containerd.cri.v1 images",
        ],
        reads_enable_cdi: true,
    };
    let namespaces = assert_root_loads_the_config_nvc_writes(&w, &root, &cri);

    let install = Install::Root(&root);

    let dir = w.path("containerd-cdi-off");
    std::fs::create_dir_all(&dir).unwrap();
    let mut off: DocumentMut = install.default_config(&dir).parse().unwrap();
    off["plugins"][CRI_PLUGIN_V3]["enable_cdi"] = toml_edit::value(false);
    let config = dir.join("config.toml");
    std::fs::write(&config, off.to_string()).unwrap();
    let (view, dump) = dumped_cri(install, &config);
    assert_eq!(
        at(&view, &["enable_cdi"]).and_then(Item::as_bool),
        Some(false),
        "{dump:?}"
    );
    configure_containerd(&config, &["--cdi"]);
    let (view, dump) = dumped_cri(install, &config);
    assert_nv_runtime(&view, true, &dump);
    w.assert_clean(&namespaces);
}

/// [`assert_loads_the_config_nvc_writes`] for `root`'s containerd, on the configs a node
/// running it starts from: `containerd config default`, and the file Debian's package
/// installs. Returns the containerd namespaces.
fn assert_root_loads_the_config_nvc_writes(
    w: &World,
    root: &EngineRoot,
    cri: &Cri<'_>,
) -> Vec<String> {
    let install = Install::Root(root);
    let packaged = std::fs::read_to_string(root.path.join("etc/containerd/config.toml")).unwrap();
    let configs = [
        ("default", install.default_config(w.dir.path())),
        ("debian", packaged),
    ];
    configs
        .iter()
        .map(|(name, config)| {
            let dir = w.path(&format!("containerd-{name}"));
            let original = paths_under(config, &dir);
            assert_loads_the_config_nvc_writes(w, install, &dir, &original, cri)
        })
        .collect()
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn containerd_ctr_runs_gpu_containers_through_nvc_runtime() {
    let w = World::new();
    let containerd = start_containerd(&w);
    let gpus = w.gpus();
    let run = |env: &[&str]| ctr_run(&containerd, &w, env);
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ncontainerd log:\n{}",
            w.nvc_log(),
            containerd.log_tail(20)
        )
    };

    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("ctr run NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[1].bus_id)]),
        &gpus[1..2],
        &context("ctr run one GPU by bus id"),
    );
    assert_untouched(&run(&[]), "ctr run without NVIDIA_VISIBLE_DEVICES");
    assert_refused(
        &run(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
        ]),
        "cuda>=100.0",
        "ctr run NVIDIA_REQUIRE_CUDA=cuda>=100.0",
    );

    let namespace = containerd.namespace.clone();
    drop(containerd);
    w.assert_clean(&[namespace]);
}

/// Debian 13's containerd 1.7.24 (and its `ctr` and runc 1.1.15) from a root of their own
/// (see `nvc_tests::EngineRoot`), running containers with nvc-runtime as their runc
/// binary. (Its `ctr` has no CDI flag; CDI on 1.7 goes through the CRI plugin.)
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn containerd17_ctr_runs_gpu_containers_through_nvc_runtime() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let ctr = RootCtr::start(&w, &root);
    assert!(ctr.version.contains(" 1.7."), "{}", ctr.version);
    ctr.assert_gpu_containers();
    ctr.stop_and_check_clean("1.1.15");
}

/// Debian 14's containerd 2.1 (and its `ctr` and runc 1.3.6) from a root of their own,
/// running containers with nvc-runtime as their runc binary; and its `ctr run --device
/// nvidia.com/gpu=...`, which reads nvc's CDI spec itself and runs the root's runc.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn containerd21_ctr_runs_gpu_containers_through_nvc_runtime_and_cdi() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let ctr = RootCtr::start(&w, &root);
    assert!(ctr.version.contains(" 2.1."), "{}", ctr.version);
    ctr.assert_gpu_containers();
    let gpus = w.gpus();
    let modeset = ["/dev/nvidia-modeset 195:254"];
    for (name, want) in [("0", &gpus[0..1]), (gpus[2].uuid.as_str(), &gpus[2..3])] {
        let device = format!("nvidia.com/gpu={name}");
        assert_gpus_with(
            &ctr_probe(&ctr.containerd, &w, vec!["--device".into(), device.clone()]),
            want,
            &modeset,
            &ctr.context(&format!("ctr run --device {device}")),
        );
    }
    ctr.stop_and_check_clean("1.3.6");
}

/// A containerd (with its `ctr` and runc) of a newer Debian's root, NVC_CONFIG in its
/// environment, nvc's CDI spec in its and `ctr`'s `/etc/cdi`, the test image imported.
struct RootCtr<'w> {
    w: &'w World,
    root: &'w EngineRoot,
    containerd: Containerd,
    /// What `ctr version` says.
    version: String,
}

impl<'w> RootCtr<'w> {
    fn start(w: &'w World, root: &'w EngineRoot) -> RootCtr<'w> {
        let bin_dir: PathBuf = workspace_bin("nvc-runtime").parent().unwrap().to_path_buf();
        let dir = w.path(&format!("containerd-{}", root.suite));
        std::fs::create_dir_all(&dir).unwrap();
        // containerd 2.x imports through its transfer service, which unpacks only for
        // the snapshotters its config names (overlayfs by default): `ctr images import
        // --snapshotter native` needs native named. containerd 1.7 reads the same key.
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        let config = format!(
            "{}\n[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n  \
             platform = \"linux/{arch}\"\n  snapshotter = \"native\"\n",
            Containerd::default_config(&dir, false)
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let containerd = Containerd::start_in(
            root,
            &dir,
            &[("NVC_CONFIG", w.config.as_os_str())],
            &[w.dir.path(), &bin_dir],
            Some(&w.cdi_spec_dir()),
        )
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        let version = containerd.ctr(&["version"]);
        version.assert_success();
        containerd
            .import(&w.tarball, CTR_IMAGE)
            .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        RootCtr {
            w,
            root,
            containerd,
            version: version.stdout,
        }
    }

    fn context(&self, what: &str) -> String {
        format!(
            "containerd of {}: {what}\nnvc log:\n{}\ncontainerd log:\n{}",
            self.root.suite,
            self.w.nvc_log(),
            self.containerd.log_tail(20)
        )
    }

    /// All GPUs, one by UUID, a container that asks for none, and a request nvc refuses.
    fn assert_gpu_containers(&self) {
        let gpus = self.w.gpus();
        let run = |env: &[&str]| ctr_run(&self.containerd, self.w, env);
        assert_gpus(
            &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
            &gpus,
            &self.context("ctr run NVIDIA_VISIBLE_DEVICES=all"),
        );
        assert_gpus(
            &run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[2].uuid)]),
            &gpus[2..3],
            &self.context("ctr run one GPU by UUID"),
        );
        assert_untouched(
            &run(&[]),
            &self.context("ctr run without NVIDIA_VISIBLE_DEVICES"),
        );
        assert_refused(
            &run(&["NVIDIA_VISIBLE_DEVICES=7"]),
            "GPU index 7",
            &self.context("ctr run NVIDIA_VISIBLE_DEVICES=7"),
        );
    }

    /// Checks that the root's runc `runc_version` ran the containers, stops containerd,
    /// and checks that nothing is left.
    fn stop_and_check_clean(self, runc_version: &str) {
        assert_runc_ran(self.w, self.root, runc_version);
        let namespace = self.containerd.namespace.clone();
        drop(self.containerd);
        self.w.assert_clean(&[namespace]);
    }
}
