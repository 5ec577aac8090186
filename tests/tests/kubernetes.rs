//! The Kubernetes files of `packaging/kubernetes/`: the node installer's DaemonSets (one a
//! file, for containerd and for CRI-O, each with the namespace and the RuntimeClass `nv`)
//! and the values for NVIDIA's device plugin chart.
//!
//! Every manifest validates against the API schemas of the oldest and the newest
//! Kubernetes release it is written for ([`KUBERNETES_VERSIONS`]), strictly: a field the
//! schema does not have fails, as does a kind it does not know. The schemas come with
//! PyPI's `kubernetes-validate` ([`TOOL_VERSION`]), which runs offline;
//! `scripts/deps.sh` installs it into a venv in the machine's cache (`NVC_TESTS_CACHE`,
//! default `/var/cache/nvc-tests`), and without it that test fails saying how to get it
//! (the quick tier leaves it out).
//!
//! What no schema says is checked here on the parsed files, without the tool: each
//! DaemonSet mounts exactly the node paths the installer needs (`/` read-only, `/opt`,
//! the engine's config folder, `/run/cdi`), at the place its `--host-root` makes of them;
//! nothing is privileged, nor on the node's network; it passes only flags `node run` has,
//! with values it takes, and the node paths they name are in a writable mount; its
//! capabilities, seccomp profile and PID namespace are those of its reload mode; the
//! readiness probe asks `node ready` for the ready file `node run` writes; the
//! RuntimeClass's handler is the runtime the installer adds, and the device plugin's
//! values name that RuntimeClass and a device list strategy nvc serves as installed.
//! Broken copies of the real files show the rules catch what they are for.
//!
//! Needs nothing but the files, and the tool for the schema test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use nvc_tests::{repo_root, run_command};

/// The folder of the files checked here, from the repository's root.
const FOLDER: &str = "packaging/kubernetes";

/// The file of values for NVIDIA's device plugin chart: not a Kubernetes object.
const DEVICE_PLUGIN_VALUES: &str = "device-plugin-values.yaml";

/// PyPI's kubernetes-validate, as `scripts/deps.sh` pins it.
const TOOL_VERSION: &str = "1.37.0";

/// The Kubernetes releases whose schemas the manifests must pass: the oldest they are
/// written for (`securityContext.appArmorProfile` and `recursiveReadOnly` came in 1.30)
/// and the newest the tool knows.
const KUBERNETES_VERSIONS: &[&str] = &["1.30.0", "1.37.0"];

/// The installer's command, the image's entrypoint.
const NODE_RUN: &[&str] = &["/nvc/bin/nvc", "node", "run"];

/// The readiness probe's command.
const NODE_READY: &[&str] = &["/nvc/bin/nvc", "node", "ready"];

/// The flags of `nvc node run` and the values each takes: `Some(&[])` any value, `None`
/// no value.
const NODE_RUN_FLAGS: &[(&str, Option<&[&str]>)] = &[
    ("--engine", Some(&["containerd", "crio"])),
    ("--host-root", Some(&[])),
    ("--install-dir", Some(&[])),
    ("--engine-config", Some(&[])),
    ("--cdi-spec", Some(&[])),
    ("--driver-root", Some(&[])),
    ("--dev-root", Some(&[])),
    ("--proc-root", Some(&[])),
    ("--nvc-config", Some(&[])),
    ("--binaries", Some(&[])),
    ("--reload", Some(&["signal", "systemd", "none"])),
    ("--socket", Some(&[])),
    ("--systemd-unit", Some(&[])),
    ("--runtime-name", Some(&[])),
    ("--ready-file", Some(&[])),
    ("--keep", None),
];

/// The capabilities every installer holds: SYS_CHROOT (it chroots into the node's root),
/// CHOWN, DAC_OVERRIDE, FOWNER (root's files there). systemd mode needs nothing more: the
/// node's own systemctl, run in the node's root, asks systemd over its socket.
const BASE_CAPABILITIES: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "SYS_CHROOT"];

/// What signal mode adds: the SIGHUP to the engine.
const SIGNAL_CAPABILITIES: &[&str] = &["KILL"];

/// The shortest grace period that leaves time for the revert and the engine's restart.
const MIN_GRACE_SECONDS: i64 = 60;

/// The device list strategies nvc serves with the files as shipped: `volume-mounts` needs
/// keys the ConfigMap does not set; the CDI strategies need the installer's
/// `--device-plugin-cdi-spec`, which the manifests do not pass, and a plugin that does not
/// write its own spec into the node's `/var/run/cdi`, which NVIDIA's chart mounts for it
/// whatever its values say (docs/kubernetes.md, "The CDI strategies").
const SERVED_DEVICE_LIST_STRATEGIES: &[&str] = &["envvar"];

/// The top-level values of NVIDIA's nvidia-device-plugin chart: a misspelt one would be
/// ignored by helm.
const DEVICE_PLUGIN_CHART_VALUES: &[&str] = &[
    "affinity",
    "allowDefaultNamespace",
    "cdi",
    "compatWithCPUManager",
    "config",
    "deviceDiscoveryStrategy",
    "deviceIDStrategy",
    "deviceListStrategy",
    "devicePlugin",
    "failOnInitError",
    "fullnameOverride",
    "gdrcopyEnabled",
    "gdsEnabled",
    "gfd",
    "image",
    "imagePullSecrets",
    "migStrategy",
    "mofedEnabled",
    "mps",
    "nameOverride",
    "namespaceOverride",
    "nfd",
    "nodeSelector",
    "nvidiaDriverRoot",
    "podAnnotations",
    "podSecurityContext",
    "priorityClassName",
    "resources",
    "runtimeClassName",
    "securityContext",
    "selectorLabelsOverride",
    "tolerations",
    "updateStrategy",
];

// ---------------------------------------------------------------------------------------
// The files.

/// One file of the folder: its name, its text and its YAML documents (empty ones left
/// out).
#[derive(Clone)]
struct File {
    name: String,
    text: String,
    docs: Vec<Value>,
}

impl File {
    fn parse(name: &str, text: &str) -> File {
        let docs = serde_norway::Deserializer::from_str(text)
            .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: {e}")))
            .filter(|doc| !doc.is_null())
            .collect();
        File {
            name: name.to_string(),
            text: text.to_string(),
            docs,
        }
    }

    /// Whether every document is a Kubernetes object.
    fn is_manifest(&self) -> bool {
        !self.docs.is_empty()
            && self
                .docs
                .iter()
                .all(|d| d.get("apiVersion").is_some() && d.get("kind").is_some())
    }

    fn objects(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }
}

fn folder() -> PathBuf {
    repo_root().join(FOLDER)
}

/// Every file of the folder, sorted by name.
fn read_folder() -> Vec<File> {
    let mut files: Vec<File> = std::fs::read_dir(folder())
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            if name.ends_with(".yaml") {
                File::parse(&name, &text)
            } else {
                File {
                    name,
                    text,
                    docs: Vec::new(),
                }
            }
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

// ---------------------------------------------------------------------------------------
// What no schema says.

/// What one DaemonSet's `node run` was given: its flags (the last of each) and the node
/// paths they make, defaults filled in.
struct Install {
    engine: String,
    reload: String,
    host_root: String,
    runtime_name: String,
    ready_file: String,
    install_dir: String,
    engine_config: String,
    cdi_spec: String,
    /// `--nvc-config`: a file of the ConfigMap volume's.
    nvc_config: Option<String>,
}

/// The engine's config folder: the node path the installer writes its config in.
fn engine_folder(engine: &str) -> &'static str {
    match engine {
        "crio" => "/etc/crio",
        _ => "/etc/containerd",
    }
}

/// A node path as the node resolves it: `/var/run` is `/run`.
fn node_path(path: &str) -> String {
    match path.strip_prefix("/var/run") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("/run{rest}"),
        _ => path.to_string(),
    }
}

/// Whether node path `path` is `folder` or under it.
fn is_under(path: &str, folder: &str) -> bool {
    let folder = folder.trim_end_matches('/');
    path == folder || path.starts_with(&format!("{folder}/")) || folder.is_empty()
}

/// Where node path `path` is in the installer's container.
fn in_container(host_root: &str, path: &str) -> String {
    let root = host_root.trim_end_matches('/');
    if path == "/" {
        root.to_string()
    } else {
        format!("{root}{path}")
    }
}

/// Reads `--flag=value` and `--flag value` arguments against `flags`: the values by flag,
/// or what is wrong.
fn parse_flags(
    args: &[String],
    flags: &[(&str, Option<&[&str]>)],
    what: &str,
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut given = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let Some((_, values)) = flags.iter().find(|(f, _)| *f == flag) else {
            problems.push(format!("{what}: {arg} is not a flag of it"));
            continue;
        };
        let value = match values {
            None => {
                if inline.is_some() {
                    problems.push(format!("{what}: {flag} takes no value"));
                }
                String::new()
            }
            Some(allowed) => {
                let value = inline.or_else(|| {
                    let next = args.get(i).cloned();
                    i += 1;
                    next
                });
                let Some(value) = value else {
                    problems.push(format!("{what}: {flag} has no value"));
                    continue;
                };
                if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
                    problems.push(format!(
                        "{what}: {flag} {value}: it takes one of {}",
                        allowed.join(", ")
                    ));
                }
                value
            }
        };
        if given.insert(flag.to_string(), value).is_some() {
            problems.push(format!("{what}: {flag} is given twice"));
        }
    }
    given
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether any `privileged` key anywhere in `value` is true.
fn privileged_anywhere(value: &Value) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == "privileged" && v == &json!(true)) || privileged_anywhere(v)),
        Value::Array(items) => items.iter().any(privileged_anywhere),
        _ => false,
    }
}

/// The problems of one DaemonSet, each said with where it is.
struct Report<'a> {
    what: String,
    problems: &'a mut Vec<String>,
}

impl Report<'_> {
    fn add(&mut self, problem: impl std::fmt::Display) {
        self.problems.push(format!("{}: {problem}", self.what));
    }
}

/// Checks one DaemonSet of `file` (the workspace's `version`): what its installer was
/// given, when its arguments could be read.
fn check_daemonset(
    file: &str,
    ds: &Value,
    version: &str,
    problems: &mut Vec<String>,
) -> Option<Install> {
    let name = ds["metadata"]["name"].as_str().unwrap_or("?");
    let mut r = Report {
        what: format!("{file}: DaemonSet {name}"),
        problems,
    };
    let pod = &ds["spec"]["template"]["spec"];
    if privileged_anywhere(ds) {
        r.add("privileged: true (the installer needs no more than its capabilities)");
    }
    for key in ["hostNetwork", "hostIPC"] {
        if pod[key] == json!(true) {
            r.add(format!("{key}: true (the installer needs neither)"));
        }
    }
    for key in ["initContainers", "ephemeralContainers"] {
        if pod.get(key).is_some() {
            r.add(format!("{key}: the installer is its one container"));
        }
    }
    let containers = pod["containers"].as_array().cloned().unwrap_or_default();
    let [container] = containers.as_slice() else {
        r.add(format!("{} containers, expected one", containers.len()));
        return None;
    };

    // The image and the command.
    let image = container["image"].as_str().unwrap_or("");
    if !image.ends_with(&format!("/nvc-node:{version}")) {
        r.add(format!(
            "image {image}: expected REGISTRY/nvc-node:{version}, the version of the workspace"
        ));
    }
    if strings(&container["command"]) != NODE_RUN {
        r.add(format!(
            "command {}: expected {NODE_RUN:?}",
            container["command"]
        ));
    }

    let install = read_install(container, &mut r)?;
    check_node_paths(pod, container, &install, &mut r);
    check_privileges(pod, container, &install, &mut r);
    check_probe(container, &install, &mut r);
    check_life_and_placement(ds, &mut r);
    Some(install)
}

/// What `node run` is given, defaults filled in.
fn read_install(container: &Value, r: &mut Report) -> Option<Install> {
    let mut arg_problems = Vec::new();
    let args = parse_flags(
        &strings(&container["args"]),
        NODE_RUN_FLAGS,
        "args",
        &mut arg_problems,
    );
    for p in arg_problems {
        r.add(p);
    }
    let Some(engine) = args.get("--engine").cloned() else {
        r.add("args: no --engine (node run requires it)");
        return None;
    };
    let Some(reload) = args.get("--reload").cloned() else {
        r.add("args: no --reload: each manifest says how its engine is reloaded");
        return None;
    };
    let expected_reload = if engine == "crio" {
        "systemd"
    } else {
        "signal"
    };
    if reload != expected_reload {
        r.add(format!(
            "--reload {reload}: {engine} is reloaded by {expected_reload} (docs/kubernetes.md)"
        ));
    }
    let default = |flag: &str, value: &str| args.get(flag).cloned().unwrap_or(value.into());
    let engine_config = default(
        "--engine-config",
        if engine == "crio" {
            "/etc/crio/crio.conf"
        } else {
            "/etc/containerd/config.toml"
        },
    );

    Some(Install {
        host_root: default("--host-root", "/host"),
        runtime_name: default("--runtime-name", "nv"),
        ready_file: default("--ready-file", "/run/nvc-node.ready"),
        install_dir: node_path(&default("--install-dir", "/opt/nvc")),
        engine_config: node_path(&engine_config),
        cdi_spec: node_path(&default("--cdi-spec", "/var/run/cdi/nvidia.yaml")),
        nvc_config: args.get("--nvc-config").cloned(),
        engine,
        reload,
    })
}

/// nvc's config for the nodes: the ConfigMap `nvc-config`, mounted read-only where
/// `--nvc-config` reads its `config.toml`.
fn check_config_volume(volume: &Value, mounts: &[Value], install: &Install, r: &mut Report) {
    let vname = volume["name"].as_str().unwrap_or("?");
    if volume["configMap"]["name"] != json!("nvc-config") {
        r.add(format!("volume {vname}: the ConfigMap is not nvc-config"));
    }
    let Some(file) = &install.nvc_config else {
        r.add(format!(
            "volume {vname}: a ConfigMap, but no --nvc-config reads it"
        ));
        return;
    };
    let mounted: Vec<&Value> = mounts.iter().filter(|m| m["name"] == vname).collect();
    let [mount] = mounted.as_slice() else {
        r.add(format!(
            "volume {vname} is mounted {} times, expected once",
            mounted.len()
        ));
        return;
    };
    let at = mount["mountPath"].as_str().unwrap_or("?");
    if *file != format!("{at}/config.toml") {
        r.add(format!(
            "--nvc-config {file}: the ConfigMap's config.toml is {at}/config.toml"
        ));
    }
    if mount["readOnly"] != json!(true) {
        r.add(format!("the ConfigMap at {at} is mounted read-write"));
    }
}

/// The node's paths: exactly the hostPath volumes the installer needs, each mounted once
/// where its `--host-root` makes it, only `/` read-only; what it writes in a writable one.
fn check_node_paths(pod: &Value, container: &Value, install: &Install, r: &mut Report) {
    let writable = [
        ("/opt", "Directory"),
        (engine_folder(&install.engine), "Directory"),
        ("/run/cdi", "DirectoryOrCreate"),
    ];
    let mut allowed: BTreeMap<&str, &str> = writable.iter().copied().collect();
    allowed.insert("/", "Directory");
    let mut found = BTreeSet::new();
    let mounts = container["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for volume in pod["volumes"].as_array().cloned().unwrap_or_default() {
        let vname = volume["name"].as_str().unwrap_or("?");
        if volume.get("configMap").is_some() {
            check_config_volume(&volume, &mounts, install, r);
            continue;
        }
        let Some(host_path) = volume.get("hostPath") else {
            r.add(format!(
                "volume {vname} is neither a hostPath nor nvc's ConfigMap: the installer \
                 needs no other"
            ));
            continue;
        };
        let path = host_path["path"].as_str().unwrap_or("?");
        let kind = host_path["type"].as_str().unwrap_or("");
        match allowed.get(path) {
            None => r.add(format!(
                "hostPath {path}: not a node path the installer needs (it needs {})",
                allowed.keys().copied().collect::<Vec<_>>().join(", ")
            )),
            Some(expected) if *expected != kind => r.add(format!(
                "hostPath {path} has type {kind:?}, expected {expected}"
            )),
            Some(_) => {}
        }
        if !found.insert(path.to_string()) {
            r.add(format!("hostPath {path} is there twice"));
        }
        let mounted: Vec<&Value> = mounts.iter().filter(|m| m["name"] == vname).collect();
        let [mount] = mounted.as_slice() else {
            r.add(format!(
                "volume {vname} ({path}) is mounted {} times, expected once",
                mounted.len()
            ));
            continue;
        };
        let at = mount["mountPath"].as_str().unwrap_or("?");
        let expected_at = in_container(&install.host_root, path);
        if at != expected_at {
            r.add(format!(
                "{path} is mounted at {at}: --host-root {} makes it {expected_at}",
                install.host_root
            ));
        }
        let read_only = mount["readOnly"] == json!(true);
        if path == "/" {
            if !read_only {
                r.add("the node's / is mounted read-write");
            }
            let recursive = mount["recursiveReadOnly"].as_str().unwrap_or("Disabled");
            if recursive == "Disabled" {
                r.add(
                    "the node's / is read-only only at its top: its submounts (/run, /dev, \
                     /proc) stay writable without recursiveReadOnly",
                );
            }
        } else if read_only {
            r.add(format!(
                "{path} is mounted read-only: the installer writes it"
            ));
        }
    }
    for path in allowed.keys() {
        if !found.contains(*path) {
            r.add(format!(
                "no hostPath volume for {path}, which the installer needs"
            ));
        }
    }
    // What the installer writes is in a writable mount.
    if !is_under(&install.install_dir, "/opt") || install.install_dir == "/opt" {
        r.add(format!(
            "--install-dir {}: not a folder under /opt, the writable mount it is made and \
             removed in",
            install.install_dir
        ));
    }
    if !is_under(&install.engine_config, engine_folder(&install.engine)) {
        r.add(format!(
            "--engine-config {}: not in {}, the writable mount",
            install.engine_config,
            engine_folder(&install.engine)
        ));
    }
    if !is_under(&install.cdi_spec, "/run/cdi") {
        r.add(format!(
            "--cdi-spec {}: not in /run/cdi, the writable mount",
            install.cdi_spec
        ));
    }
}

/// The capabilities, seccomp profile and PID namespace of the reload mode.
fn check_privileges(pod: &Value, container: &Value, install: &Install, r: &mut Report) {
    let security = &container["securityContext"];
    if security["runAsUser"] != json!(0) {
        r.add("runAsUser is not 0: the installer runs as root");
    }
    let drop = strings(&security["capabilities"]["drop"]);
    if !drop.iter().any(|c| c == "ALL") {
        r.add(
            "capabilities drop no ALL: the engine's default set would be added to the listed \
             ones (and CRI-O's lacks SYS_CHROOT)",
        );
    }
    let signal = install.reload == "signal";
    let mut expected_caps: BTreeSet<String> =
        BASE_CAPABILITIES.iter().map(|c| c.to_string()).collect();
    if signal {
        expected_caps.extend(SIGNAL_CAPABILITIES.iter().map(|c| c.to_string()));
    }
    let added: BTreeSet<String> = strings(&security["capabilities"]["add"])
        .into_iter()
        .map(|c| c.trim_start_matches("CAP_").to_string())
        .collect();
    if added != expected_caps {
        r.add(format!(
            "capabilities add {added:?}, expected {expected_caps:?} for --reload {}",
            install.reload
        ));
    }
    if security["allowPrivilegeEscalation"] != json!(false) {
        r.add("no allowPrivilegeEscalation: false: nothing the installer runs needs more");
    }
    let seccomp = security["seccompProfile"]["type"].as_str().unwrap_or("");
    if seccomp != "RuntimeDefault" {
        r.add(format!(
            "seccompProfile {seccomp:?}, expected RuntimeDefault: the installer makes no \
             call the runtime's default filter refuses"
        ));
    }
    if signal && pod["hostPID"] != json!(true) {
        r.add(
            "no hostPID: --reload signal finds and signals the engine among the node's processes",
        );
    }
    if !signal && pod["hostPID"] == json!(true) {
        r.add(format!(
            "hostPID with --reload {}, which needs no process of the node's",
            install.reload
        ));
    }
}

/// The readiness probe asks `node ready` for the ready file `node run` writes.
fn check_probe(container: &Value, install: &Install, r: &mut Report) {
    let probe = strings(&container["readinessProbe"]["exec"]["command"]);
    if !probe.starts_with(&NODE_READY.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
        r.add(format!(
            "readinessProbe exec {probe:?}: expected {NODE_READY:?}"
        ));
    } else {
        let mut probe_problems = Vec::new();
        let ready = parse_flags(
            &probe[NODE_READY.len()..],
            &[("--ready-file", Some(&[]))],
            "readinessProbe",
            &mut probe_problems,
        );
        for p in probe_problems {
            r.add(p);
        }
        let probed = ready
            .get("--ready-file")
            .cloned()
            .unwrap_or_else(|| "/run/nvc-node.ready".to_string());
        if probed != install.ready_file {
            r.add(format!(
                "the probe asks for {probed}, node run writes {}",
                install.ready_file
            ));
        }
    }
}

/// Time for the revert, one installer a node, GPU nodes with their taint tolerated.
fn check_life_and_placement(ds: &Value, r: &mut Report) {
    let pod = &ds["spec"]["template"]["spec"];
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
    if grace < MIN_GRACE_SECONDS {
        r.add(format!(
            "terminationGracePeriodSeconds {grace}: the revert (the engine restarted) needs \
             at least {MIN_GRACE_SECONDS}"
        ));
    }
    let strategy = &ds["spec"]["updateStrategy"];
    let surge = &strategy["rollingUpdate"]["maxSurge"];
    if !(surge.is_null() || surge == &json!(0) || surge == &json!("0%")) {
        r.add(format!(
            "updateStrategy maxSurge {surge}: two installers on a node undo each other's work"
        ));
    }

    // GPU nodes, with the GPU taint tolerated.
    let gpu_label = pod["nodeSelector"]["nvidia.com/gpu.present"] == json!("true")
        || pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"]
            .as_array()
            .is_some_and(|terms| {
                terms.iter().any(|t| {
                    t["matchExpressions"].as_array().is_some_and(|es| {
                        es.iter().any(|e| {
                            e["key"] == "nvidia.com/gpu.present"
                                && e["operator"] == "In"
                                && strings(&e["values"]) == ["true"]
                        })
                    })
                })
            });
    if !gpu_label {
        r.add("not placed by nvidia.com/gpu.present=true, the GPU nodes' label");
    }
    let tolerates = pod["tolerations"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == "nvidia.com/gpu"));
    if !tolerates {
        r.add("no toleration of the nvidia.com/gpu taint");
    }
}

/// Everything wrong with the folder's files, as `FILE: what` lines; `version` is the
/// workspace's.
fn problems(files: &[File], version: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut shared: Option<(String, Vec<Value>)> = None;
    let mut engines = BTreeMap::new();
    let mut runtime_classes = BTreeSet::new();
    let mut values = None;
    for file in files {
        let name = &file.name;
        if name == "README.md" {
            continue;
        }
        if !name.ends_with(".yaml") {
            problems.push(format!(
                "{name}: neither a manifest (.yaml) nor README.md: nothing checks it"
            ));
            continue;
        }
        if !file.text.starts_with("# ") {
            problems.push(format!("{name}: no header comment saying what it is for"));
        }
        if name == DEVICE_PLUGIN_VALUES {
            values = file.docs.first().cloned();
            continue;
        }
        if !file.is_manifest() {
            problems.push(format!(
                "{name}: a document without apiVersion and kind: not a manifest, and not the \
                 device plugin's values"
            ));
            continue;
        }
        // The namespace and the RuntimeClass: one each, the same in every file.
        let others: Vec<Value> = file
            .docs
            .iter()
            .filter(|d| d["kind"] != "DaemonSet")
            .cloned()
            .collect();
        for kind in ["Namespace", "RuntimeClass"] {
            if file.objects(kind).len() != 1 {
                problems.push(format!("{name}: expected one {kind}"));
            }
        }
        match &shared {
            None => shared = Some((name.clone(), others)),
            Some((first, objects)) if *objects != others => problems.push(format!(
                "{name}: its Namespace and RuntimeClass differ from {first}'s"
            )),
            Some(_) => {}
        }
        let namespace = file
            .objects("Namespace")
            .first()
            .map(|n| n["metadata"].clone());
        if let Some(ns) = &namespace {
            if ns["labels"]["pod-security.kubernetes.io/enforce"] != "privileged" {
                problems.push(format!(
                    "{name}: the namespace's Pod Security level is not privileged, which \
                     refuses hostPath volumes and hostPID"
                ));
            }
        }
        let handlers: BTreeSet<String> = file
            .objects("RuntimeClass")
            .iter()
            .map(|rc| rc["handler"].as_str().unwrap_or("").to_string())
            .collect();
        runtime_classes.extend(
            file.objects("RuntimeClass")
                .iter()
                .map(|rc| rc["metadata"]["name"].as_str().unwrap_or("").to_string()),
        );
        let daemonsets = file.objects("DaemonSet");
        if daemonsets.len() != 1 {
            problems.push(format!(
                "{name}: {} DaemonSets, expected one",
                daemonsets.len()
            ));
        }
        for ds in daemonsets {
            if let Some(ns) = &namespace {
                if ds["metadata"]["namespace"] != ns["name"] {
                    problems.push(format!(
                        "{name}: the DaemonSet is not in the file's namespace {}",
                        ns["name"]
                    ));
                }
            }
            let Some(install) = check_daemonset(name, ds, version, &mut problems) else {
                continue;
            };
            if !handlers.contains(&install.runtime_name) {
                problems.push(format!(
                    "{name}: the installer adds the runtime {:?}, the RuntimeClass's handler \
                     is {handlers:?}",
                    install.runtime_name
                ));
            }
            if *name != format!("{}.yaml", install.engine) {
                problems.push(format!(
                    "{name}: its installer is for {}; the file is named by its engine",
                    install.engine
                ));
            }
            if let Some(other) = engines.insert(install.engine.clone(), name.clone()) {
                problems.push(format!(
                    "{name}: {other} installs for {} too",
                    install.engine
                ));
            }
        }
    }
    for engine in ["containerd", "crio"] {
        if !engines.contains_key(engine) {
            problems.push(format!("no installer for {engine}"));
        }
    }

    // The device plugin's values.
    let Some(values) = values else {
        problems.push(format!("{DEVICE_PLUGIN_VALUES}: missing or empty"));
        return problems;
    };
    let what = DEVICE_PLUGIN_VALUES;
    for key in values
        .as_object()
        .map(|m| m.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if !DEVICE_PLUGIN_CHART_VALUES.contains(&key.as_str()) {
            problems.push(format!("{what}: {key} is not a value of the chart"));
        }
    }
    let class = values["runtimeClassName"].as_str().unwrap_or("");
    if !runtime_classes.contains(class) {
        problems.push(format!(
            "{what}: runtimeClassName {class:?}: the plugin's own container needs nvc, the \
             RuntimeClass {runtime_classes:?}"
        ));
    }
    let strategy = values["deviceListStrategy"].as_str().unwrap_or("");
    if !SERVED_DEVICE_LIST_STRATEGIES.contains(&strategy) {
        problems.push(format!(
            "{what}: deviceListStrategy {strategy:?}: nvc as installed serves {}",
            SERVED_DEVICE_LIST_STRATEGIES.join(", ")
        ));
    }
    let ids = values["deviceIDStrategy"].as_str().unwrap_or("");
    if !["uuid", "index"].contains(&ids) {
        problems.push(format!("{what}: deviceIDStrategy {ids:?}: uuid or index"));
    }
    problems
}

/// The workspace's version, from the root Cargo.toml: the image's tag.
fn workspace_version() -> String {
    let text = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    doc["workspace"]["package"]["version"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_manifests_give_the_installer_what_it_needs_and_no_more() {
    let files = read_folder();
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    for needed in [
        "README.md",
        "containerd.yaml",
        "crio.yaml",
        DEVICE_PLUGIN_VALUES,
    ] {
        assert!(
            names.contains(&needed),
            "{FOLDER}/{needed} is missing: {names:?}"
        );
    }
    let problems = problems(&files, &workspace_version());
    assert!(problems.is_empty(), "{FOLDER}:\n{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Each rule, on a broken copy of the real files.

/// The folder's files with `containerd.yaml`'s DaemonSet changed by `edit`.
fn with_containerd(edit: impl FnOnce(&mut Value)) -> Vec<File> {
    let mut files = read_folder();
    let file = files
        .iter_mut()
        .find(|f| f.name == "containerd.yaml")
        .unwrap();
    let ds = file
        .docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap();
    edit(ds);
    files
}

fn pod(ds: &mut Value) -> &mut Value {
    &mut ds["spec"]["template"]["spec"]
}

fn container(ds: &mut Value) -> &mut Value {
    &mut pod(ds)["containers"][0]
}

/// The problems of the broken copy, which must include one containing each of `expected`.
#[track_caller]
fn assert_caught(files: &[File], expected: &[&str]) {
    let problems = problems(files, &workspace_version());
    for e in expected {
        assert!(
            problems.iter().any(|p| p.contains(e)),
            "no problem says {e:?}; the problems:\n{}",
            problems.join("\n")
        );
    }
}

#[test]
fn a_privileged_or_host_network_installer_is_caught() {
    assert_caught(
        &with_containerd(|ds| {
            container(ds)["securityContext"]["privileged"] = json!(true);
            pod(ds)["hostNetwork"] = json!(true);
        }),
        &["privileged: true", "hostNetwork: true"],
    );
}

#[test]
fn a_node_path_beyond_the_allowed_ones_is_caught() {
    assert_caught(
        &with_containerd(|ds| {
            pod(ds)["volumes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "etc", "hostPath": {"path": "/etc"}}));
            container(ds)["volumeMounts"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "etc", "mountPath": "/host/etc"}));
        }),
        &["hostPath /etc: not a node path the installer needs"],
    );
    assert_caught(
        &with_containerd(|ds| {
            pod(ds)["volumes"][1]["hostPath"]["path"] = json!("/opt/nvc");
            pod(ds)["volumes"][1]["hostPath"]["type"] = json!("DirectoryOrCreate");
        }),
        &["hostPath /opt/nvc", "no hostPath volume for /opt"],
    );
}

#[test]
fn a_writable_root_or_a_misplaced_mount_is_caught() {
    assert_caught(
        &with_containerd(|ds| {
            let mounts = container(ds)["volumeMounts"].as_array_mut().unwrap();
            mounts[0]["readOnly"] = json!(false);
            mounts[2]["mountPath"] = json!("/etc/containerd");
        }),
        &[
            "the node's / is mounted read-write",
            "/etc/containerd is mounted at /etc/containerd: --host-root /host makes it \
             /host/etc/containerd",
        ],
    );
    assert_caught(
        &with_containerd(|ds| {
            container(ds)["volumeMounts"][0]
                .as_object_mut()
                .unwrap()
                .remove("recursiveReadOnly");
        }),
        &["read-only only at its top"],
    );
}

#[test]
fn a_flag_node_run_does_not_have_is_caught() {
    assert_caught(
        &with_containerd(|ds| {
            let args = container(ds)["args"].as_array_mut().unwrap();
            args.push(json!("--engine-root=/"));
            args.push(json!("--reload=sighup"));
            args.push(json!("--keep=yes"));
        }),
        &[
            "--engine-root=/ is not a flag of it",
            "--reload sighup: it takes one of signal, systemd, none",
            "--keep takes no value",
            "--reload is given twice",
        ],
    );
}

#[test]
fn paths_outside_the_writable_mounts_are_caught() {
    assert_caught(
        &with_containerd(|ds| {
            let args = container(ds)["args"].as_array_mut().unwrap();
            args.push(json!("--install-dir=/usr/local/nvc"));
            args.push(json!("--engine-config=/etc/containerd.toml"));
            args.push(json!("--cdi-spec=/etc/cdi/nvidia.yaml"));
        }),
        &[
            "--install-dir /usr/local/nvc",
            "--engine-config /etc/containerd.toml",
            "--cdi-spec /etc/cdi/nvidia.yaml",
        ],
    );
    // /var/run is /run.
    let files = with_containerd(|ds| {
        let args = container(ds)["args"].as_array_mut().unwrap();
        args.push(json!("--cdi-spec=/run/cdi/nvc.yaml"));
    });
    assert_eq!(problems(&files, &workspace_version()), Vec::<String>::new());
}

#[test]
fn a_runtime_class_for_another_runtime_is_caught() {
    assert_caught(
        &with_containerd(|ds| {
            let args = container(ds)["args"].as_array_mut().unwrap();
            args.retain(|a| !a.as_str().unwrap().starts_with("--runtime-name"));
            args.push(json!("--runtime-name=nvidia"));
        }),
        &["the installer adds the runtime \"nvidia\""],
    );
}

#[test]
fn privileges_of_the_other_reload_mode_are_caught() {
    assert_caught(
        &with_containerd(|ds| {
            let security = &mut container(ds)["securityContext"];
            security["capabilities"]["add"]
                .as_array_mut()
                .unwrap()
                .push(json!("SYS_ADMIN"));
            security["seccompProfile"]["type"] = json!("Unconfined");
            security
                .as_object_mut()
                .unwrap()
                .remove("allowPrivilegeEscalation");
        }),
        &[
            "capabilities add",
            "no allowPrivilegeEscalation: false",
            "seccompProfile \"Unconfined\", expected RuntimeDefault",
        ],
    );
    assert_caught(
        &with_containerd(|ds| {
            pod(ds).as_object_mut().unwrap().remove("hostPID");
            container(ds)["securityContext"]["capabilities"]
                .as_object_mut()
                .unwrap()
                .remove("drop");
        }),
        &["no hostPID", "capabilities drop no ALL"],
    );
}

#[test]
fn a_probe_for_another_ready_file_and_a_short_grace_are_caught() {
    assert_caught(
        &with_containerd(|ds| {
            container(ds)["args"]
                .as_array_mut()
                .unwrap()
                .push(json!("--ready-file=/tmp/ready"));
            pod(ds)["terminationGracePeriodSeconds"] = json!(30);
            ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] = json!(1);
        }),
        &[
            "the probe asks for /run/nvc-node.ready, node run writes /tmp/ready",
            "terminationGracePeriodSeconds 30",
            "maxSurge 1",
        ],
    );
}

#[test]
fn an_image_of_another_version_and_a_missing_gpu_selector_are_caught() {
    assert_caught(
        &with_containerd(|ds| {
            container(ds)["image"] = json!("REGISTRY/nvc-node:0.0.9");
            pod(ds).as_object_mut().unwrap().remove("affinity");
            pod(ds).as_object_mut().unwrap().remove("tolerations");
        }),
        &[
            "image REGISTRY/nvc-node:0.0.9",
            "not placed by nvidia.com/gpu.present=true",
            "no toleration of the nvidia.com/gpu taint",
        ],
    );
}

#[test]
fn device_plugin_values_nvc_does_not_serve_are_caught() {
    let mut files = read_folder();
    let values = files
        .iter_mut()
        .find(|f| f.name == DEVICE_PLUGIN_VALUES)
        .unwrap();
    values.docs[0]["deviceListStrategy"] = json!("cdi-cri");
    values.docs[0]["runtimeClassName"] = json!("nvidia");
    values.docs[0]["deviceIdStrategy"] = json!("uuid");
    assert_caught(
        &files,
        &[
            "deviceListStrategy \"cdi-cri\"",
            "runtimeClassName \"nvidia\"",
            "deviceIdStrategy is not a value of the chart",
        ],
    );
}

#[test]
fn a_file_nothing_checks_is_caught() {
    let mut files = read_folder();
    files.push(File::parse(
        "kustomization.yaml",
        "resources: [containerd.yaml]\n",
    ));
    files.push(File {
        name: "values.json".into(),
        text: "{}".into(),
        docs: Vec::new(),
    });
    assert_caught(
        &files,
        &[
            "kustomization.yaml: no header comment",
            "kustomization.yaml: a document without apiVersion and kind",
            "values.json: neither a manifest",
        ],
    );
}

// ---------------------------------------------------------------------------------------
// The schemas.

/// The kubernetes-validate program `scripts/deps.sh` installs.
fn tool() -> PathBuf {
    let cache = std::env::var_os("NVC_TESTS_CACHE")
        .filter(|c| !c.is_empty())
        .map_or_else(|| PathBuf::from("/var/cache/nvc-tests"), PathBuf::from);
    let venv = cache.join(format!("kubernetes-validate-{TOOL_VERSION}"));
    let program = venv.join("bin/kubernetes-validate");
    assert!(
        program.is_file() && venv.join("installed").is_file(),
        "kubernetes-validate {TOOL_VERSION} (PyPI), which checks the manifests against \
         Kubernetes' API schemas, is not installed at {}: scripts/deps.sh installs it (as \
         root, with PyPI reachable), or by hand: python3 -m venv {venv} && {venv}/bin/pip \
         install kubernetes-validate=={TOOL_VERSION} && touch {venv}/installed",
        program.display(),
        venv = venv.display(),
    );
    program
}

/// Runs the tool on `file` for Kubernetes `version`, strictly: (passed, its output).
fn validate(tool: &Path, file: &Path, version: &str, io: &Path) -> (bool, String) {
    let mut command = Command::new(tool);
    command
        .args(["--strict", "--kubernetes-version", version])
        .arg(file);
    let outcome = run_command(&mut command, io, Duration::from_secs(120));
    assert!(!outcome.timed_out, "{} did not end", outcome.command);
    let output = format!("{}{}", outcome.stdout, outcome.stderr);
    // A kind it has no schema for is only a warning to it.
    let passed = outcome.success() && !output.contains("WARN") && !output.contains("ERROR");
    (passed, output)
}

#[test]
fn scripts_deps_sh_installs_the_tool_version_this_suite_runs() {
    let deps = std::fs::read_to_string(repo_root().join("scripts/deps.sh")).unwrap();
    assert!(
        deps.lines()
            .any(|l| l.trim() == format!("KUBERNETES_VALIDATE_VERSION={TOOL_VERSION}")),
        "scripts/deps.sh does not pin kubernetes-validate {TOOL_VERSION}"
    );
}

#[test]
#[ignore = "needs kubernetes-validate (PyPI), which scripts/deps.sh installs as root"]
fn every_manifest_validates_strictly_against_the_kubernetes_api_schemas() {
    let tool = tool();
    let io = tempfile::tempdir().unwrap();
    let manifests: Vec<File> = read_folder()
        .into_iter()
        .filter(|f| f.name.ends_with(".yaml") && f.is_manifest())
        .collect();
    assert!(manifests.len() >= 2, "too few manifests in {FOLDER}");
    let mut failures = Vec::new();
    for file in &manifests {
        for version in KUBERNETES_VERSIONS {
            let (passed, output) = validate(&tool, &folder().join(&file.name), version, io.path());
            let objects = output.matches(" passed for resource ").count();
            if !passed || objects != file.docs.len() {
                failures.push(format!(
                    "{FOLDER}/{} against Kubernetes {version} ({objects} of {} objects \
                     passed):\n{output}",
                    file.name,
                    file.docs.len()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The tool as run here does reject an unknown field and an unknown kind: a pass above
/// means something.
#[test]
#[ignore = "needs kubernetes-validate (PyPI), which scripts/deps.sh installs as root"]
fn the_schema_check_rejects_an_unknown_field_and_an_unknown_kind() {
    let tool = tool();
    let io = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(folder().join("containerd.yaml")).unwrap();
    let broken = text.replacen(
        "runAsUser: 0\n",
        "runAsUser: 0\n            runAsUsr: 0\n",
        1,
    );
    assert_ne!(broken, text);
    let unknown_kind = "apiVersion: nvc.example/v1\nkind: Installer\nmetadata:\n  name: x\n";
    for (name, text, says) in [
        ("field.yaml", broken.as_str(), "'runAsUsr' was unexpected"),
        ("kind.yaml", unknown_kind, "Couldn't find schema"),
    ] {
        let path = io.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (passed, output) = validate(&tool, &path, KUBERNETES_VERSIONS[0], io.path());
        assert!(!passed, "{name} passed:\n{output}");
        assert!(output.contains(says), "{name}: no {says:?} in:\n{output}");
    }
}
