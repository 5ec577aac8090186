//! GPU containers through real engines: a private dockerd (`--runtime=nv` and `--gpus`), a
//! private containerd (`ctr run` with nvc-runtime as its runc), podman with nvc-hook from a
//! hooks.d folder, against fake driver trees, asserted from inside the container; and the
//! .deb from `packaging/build-deb.sh`, installed and purged in a scratch root.
//!
//! Needs root and the engines (`scripts/deps.sh` installs docker.io, containerd, podman). An
//! engine that cannot run here fails its test with the reason. Every engine keeps its state
//! under the test's temporary directory, in its own mount and PID namespaces, and is
//! stopped at the end; each test then checks that nothing it started is left running,
//! mounted or in a cgroup, and that the host's engine configs did not change.

#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use nvc_tests::{
    host_mounts, nvc_config_for, require_root, tree_digest, workspace_bin, Containerd, Dockerd,
    FakeDriver, FakeDriverSpec, FakeGpu, Outcome, Podman, RootfsSpec, TestRootfs,
};

/// Prints each `/dev/nvidia*` node as `node PATH MAJ:MIN` (hex), then tries to open GPU
/// minors 0-7 and nvidiactl through nodes it makes itself, printing `open 195:M <errno
/// text>`: "No such device or address" means the device cgroup let it through (there is no
/// driver behind the fake nodes), "Operation not permitted" that the cgroup denied it.
///
/// The pause at the end: `ctr run` copies a task's output from a FIFO and has been seen
/// to lose the last line of a task that exits right after writing it.
const PROBE: &str =
    "for n in /dev/nvidia*; do [ -c $n ] && echo node $(stat -c '%n %t:%T' $n); done; \
    nvc-probe; nvidia-smi -L; \
    for m in 0 1 2 3 4 5 6 7 255; do mknod /tmp/c$m c 195 $m 2>/dev/null; \
    head -c1 /tmp/c$m >/dev/null 2>/tmp/err; echo open 195:$m $(sed 's/.*: //' /tmp/err); done; \
    sleep 0.3; true";

const IMAGE: &str = "localhost/nvc-test:latest";
const CTR_IMAGE: &str = "docker.io/library/nvc-test:latest";

/// One test's world: a fake driver, a rootfs archive, an nvc config, and snapshots of
/// what must be the same at the end.
struct World {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    config: PathBuf,
    tarball: PathBuf,
    host_configs: String,
}

/// Host paths an engine test must leave as they were.
const HOST_PATHS: &[&str] = &[
    "/etc/docker",
    "/etc/containerd",
    "/etc/containers",
    "/etc/nvc",
    "/etc/cdi",
    "/opt",
    "/run/docker",
    "/run/containerd",
];

fn host_configs() -> String {
    HOST_PATHS
        .iter()
        .map(|p| format!("== {p}\n{}", tree_digest(Path::new(p))))
        .collect()
}

impl World {
    fn new() -> World {
        require_root("engines need root: dockerd, containerd, podman, device nodes");
        let host_configs = host_configs();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("driver")).unwrap();
        let fake = FakeDriverSpec::default()
            .build(&dir.path().join("driver"))
            .unwrap();
        let rootfs = RootfsSpec::default()
            .build(&dir.path().join("rootfs"))
            .unwrap();
        // The mount point of the fake proc tree, for the fake nvidia-smi.
        std::fs::create_dir_all(rootfs.path.join("run/fake-proc")).unwrap();
        let tarball = dir.path().join("rootfs.tar");
        rootfs.tarball(&tarball).unwrap();
        let config = nvc_config_for(&fake, &dir.path().join("nvc")).unwrap();
        World {
            dir,
            fake,
            config,
            tarball,
            host_configs,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn gpus(&self) -> Vec<FakeGpu> {
        let gpus: Vec<FakeGpu> = self
            .fake
            .spec
            .gpus_in_bus_order()
            .into_iter()
            .cloned()
            .collect();
        // PROBE tries minors 0-7.
        assert!(
            gpus.iter().all(|g| g.minor < 8) && gpus.len() >= 3,
            "{gpus:?}"
        );
        gpus
    }

    fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.path("nvc/nvc.log")).unwrap_or_default()
    }

    /// `-v <fake proc>:/run/fake-proc:ro -e NVC_FAKE_PROC=/run/fake-proc` for docker and
    /// podman.
    fn fake_proc_flags(&self) -> Vec<String> {
        vec![
            "-v".into(),
            format!("{}:/run/fake-proc:ro", self.fake.proc_root.display()),
            "-e".into(),
            "NVC_FAKE_PROC=/run/fake-proc".into(),
        ]
    }

    /// After the engines are gone: nothing of this test runs, is mounted or sits in a
    /// cgroup, and the host's engine configs are as they were.
    fn assert_clean(&self, cgroups: &[String]) {
        let dir = self.dir.path().to_string_lossy().into_owned();
        let running = processes_mentioning(&dir);
        assert!(running.is_empty(), "still running: {running:#?}");
        let mounts: Vec<String> = host_mounts()
            .into_iter()
            .filter(|m| m.starts_with(&dir))
            .collect();
        assert!(mounts.is_empty(), "still mounted: {mounts:#?}");
        for name in cgroups {
            let left: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|h| h.path().join(name))
                .filter(|p| p.exists())
                .collect();
            assert!(left.is_empty(), "cgroups left: {left:#?}");
        }
        assert_eq!(
            host_configs(),
            self.host_configs,
            "the host's engine configs changed"
        );
    }
}

/// Command lines of every process whose command line contains `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| e.file_name().to_string_lossy() != me)
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            line.contains(needle)
                .then(|| format!("{} {line}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// What [`PROBE`] printed.
struct Seen {
    /// `/dev/nvidia*` nodes as "PATH MAJ:MIN" (decimal), sorted.
    nodes: Vec<String>,
    /// GPU minors whose open got through the device cgroup.
    allowed: Vec<u32>,
    /// GPU minors the device cgroup denied.
    denied: Vec<u32>,
    /// `nvidia-smi -L` lines.
    gpus: Vec<String>,
    text: String,
}

impl Seen {
    fn from(out: &Outcome) -> Seen {
        let text = out.stdout.clone();
        let mut nodes: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("node "))
            .map(|l| {
                let mut it = l.split_whitespace();
                let path = it.next().unwrap();
                let (maj, min) = it.next().unwrap().split_once(':').unwrap();
                let maj = u32::from_str_radix(maj, 16).unwrap();
                let min = u32::from_str_radix(min, 16).unwrap();
                format!("{path} {maj}:{min}")
            })
            .collect();
        nodes.sort();
        let opens = |what: &str| -> Vec<u32> {
            text.lines()
                .filter_map(|l| l.strip_prefix("open 195:"))
                .filter(|l| l.contains(what))
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .filter(|m| *m != 255)
                .collect()
        };
        Seen {
            allowed: opens("No such device or address"),
            denied: opens("Operation not permitted"),
            gpus: text
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .map(String::from)
                .collect(),
            nodes,
            text,
        }
    }

    fn ctl_allowed(&self) -> bool {
        self.text
            .lines()
            .any(|l| l.starts_with("open 195:255 No such device or address"))
    }
}

/// Asserts the container saw exactly `gpus` (and the control nodes), could open exactly
/// those, loaded libcuda and NVML by soname, and `nvidia-smi -L` listed them in order.
#[track_caller]
fn assert_gpus(out: &Outcome, gpus: &[FakeGpu], context: &str) {
    assert!(out.success(), "{context}: {out:?}");
    let seen = Seen::from(out);
    let mut want: Vec<String> = gpus
        .iter()
        .map(|g| format!("/dev/nvidia{} 195:{}", g.minor, g.minor))
        .collect();
    want.extend(
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
        ]
        .map(String::from),
    );
    want.sort();
    assert_eq!(seen.nodes, want, "{context}: device nodes\n{}", seen.text);
    let mut minors: Vec<u32> = gpus.iter().map(|g| g.minor).collect();
    minors.sort();
    assert_eq!(
        seen.allowed, minors,
        "{context}: device cgroup\n{}",
        seen.text
    );
    assert_eq!(
        seen.denied.len() + seen.allowed.len(),
        8,
        "{context}: every probed minor is either allowed or denied\n{}",
        seen.text
    );
    assert!(seen.ctl_allowed(), "{context}: nvidiactl\n{}", seen.text);
    for want in [
        "libcuda=ok",
        "libnvidia-ml=ok",
        "driver_version=999.88.77",
        "realpath=/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77",
    ] {
        assert!(
            seen.text.contains(want),
            "{context}: no {want}\n{}",
            seen.text
        );
    }
    assert_eq!(
        seen.gpus.len(),
        gpus.len(),
        "{context}: nvidia-smi -L\n{}",
        seen.text
    );
    for (line, gpu) in seen.gpus.iter().zip(gpus) {
        assert!(
            line.contains(&gpu.uuid),
            "{context}: {line} is not {}",
            gpu.uuid
        );
    }
}

/// Asserts the container got nothing from nvc.
#[track_caller]
fn assert_untouched(out: &Outcome, context: &str) {
    assert!(out.success(), "{context}: {out:?}");
    let seen = Seen::from(out);
    assert!(seen.nodes.is_empty(), "{context}: {}", seen.text);
    assert!(seen.allowed.is_empty(), "{context}: {}", seen.text);
    assert!(
        seen.text.contains("libcuda=missing"),
        "{context}: {}",
        seen.text
    );
}

/// Asserts the container did not start and the engine told the user `reason`.
#[track_caller]
fn assert_refused(out: &Outcome, reason: &str, context: &str) {
    assert!(!out.success(), "{context}: started: {out:?}");
    assert!(!out.stdout.contains("probe=done"), "{context}: {out:?}");
    assert!(
        out.stderr.contains(reason),
        "{context}: the user is not told {reason:?}: {out:?}"
    );
}

/// `nvc runtime configure ARGS` with the workspace's nvc, which must succeed.
fn nvc_configure(args: &[&OsStr]) -> Outcome {
    let mut command = Command::new(workspace_bin("nvc"));
    command
        .args(["runtime", "configure"])
        .args(args)
        .env_remove("NVC_CONFIG");
    let out = run(&mut command);
    out.assert_success();
    out
}

/// Registers nvc with a Docker whose config is `<dir>/daemon.json`, as a user would:
/// `nvc runtime configure --runtime docker --gpus-alias`, for the workspace's binaries,
/// with the `nvidia-container-runtime-hook` link (what `docker run --gpus` looks up on
/// dockerd's PATH) in `<dir>/hook-bin`. Returns the config and that directory.
fn configure_docker(w: &World) -> (PathBuf, PathBuf) {
    let path = w.path("daemon.json");
    let alias_dir = w.path("hook-bin");
    std::fs::create_dir_all(&alias_dir).unwrap();
    let runtime = workspace_bin("nvc-runtime");
    let hook = workspace_bin("nvc-hook");
    nvc_configure(&[
        OsStr::new("--runtime"),
        OsStr::new("docker"),
        OsStr::new("--config"),
        path.as_os_str(),
        OsStr::new("--runtime-path"),
        runtime.as_os_str(),
        OsStr::new("--hook-path"),
        hook.as_os_str(),
        OsStr::new("--gpus-alias"),
        OsStr::new("--alias-dir"),
        alias_dir.as_os_str(),
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        json["runtimes"]["nv"]["path"],
        runtime.to_string_lossy().as_ref(),
        "{text}"
    );
    let link = alias_dir.join("nvidia-container-runtime-hook");
    assert_eq!(std::fs::read_link(&link).unwrap(), hook);
    (path, alias_dir)
}

fn start_dockerd(w: &World) -> Dockerd {
    let (daemon_json, alias_dir) = configure_docker(w);
    let path = std::env::join_paths(
        std::iter::once(alias_dir).chain(std::env::split_paths(&nvc_tests::engine_path())),
    )
    .unwrap();
    // Docker passes its own environment to the --gpus hook, and to the runtime through
    // containerd and its shim: NVC_CONFIG reaches nvc-runtime and nvc-hook that way.
    let dockerd = Dockerd::start(
        &w.path("docker"),
        &daemon_json,
        &[("PATH", &path), ("NVC_CONFIG", w.config.as_os_str())],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    dockerd
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    dockerd
}

use libnvc::report::error_chain;

#[test]
fn docker_runtime_nv_gives_the_requested_gpus() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let gpus = w.gpus();
    let run = |env: &[&str]| {
        let mut opts: Vec<String> = vec!["--runtime=nv".into()];
        opts.extend(w.fake_proc_flags());
        for e in env {
            opts.extend(["-e".to_string(), e.to_string()]);
        }
        dockerd.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };

    let out = run(&["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_gpus(
        &out,
        &gpus,
        &context("--runtime=nv NVIDIA_VISIBLE_DEVICES=all"),
    );
    let out = run(&[&format!("NVIDIA_VISIBLE_DEVICES={}", gpus[2].uuid)]);
    assert_gpus(&out, &gpus[2..3], &context("--runtime=nv one GPU by UUID"));
    let out = run(&[]);
    assert_untouched(&out, "--runtime=nv without NVIDIA_VISIBLE_DEVICES");
    let out = run(&["NVIDIA_VISIBLE_DEVICES=7"]);
    assert_refused(&out, "GPU index 7", "--runtime=nv NVIDIA_VISIBLE_DEVICES=7");

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

#[test]
fn docker_gpus_flag_runs_nvc_hook() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let gpus = w.gpus();
    let run = |gpus_flag: &str| {
        let mut opts: Vec<String> = vec!["--gpus".into(), gpus_flag.into()];
        opts.extend(w.fake_proc_flags());
        dockerd.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };

    assert_gpus(&run("all"), &gpus, &context("--gpus all"));
    assert_gpus(&run("device=1"), &gpus[1..2], &context("--gpus device=1"));
    assert_gpus(&run("2"), &gpus[0..2], &context("--gpus 2"));
    let out = dockerd.run(&w.fake_proc_flags(), IMAGE, &["sh", "-c", PROBE]);
    assert_untouched(&out, "no --gpus, no --runtime");

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

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

/// containerd with a config registered by `nvc runtime configure --runtime containerd`, as
/// a Kubernetes node's would be: containerd reads the "nv" runtime with nvc-runtime as its
/// binary, its CRI plugin loads (it refuses a config whose runtimes lack the default
/// `runc`), and removing nvc again gives the config back. (`ctr` does not use the CRI
/// plugin's runtimes; the test above runs containers with `--runc-binary`, which sets the
/// same shim option, `BinaryName`, that the "nv" runtime sets.)
#[test]
fn containerd_loads_the_config_nvc_writes() {
    let w = World::new();
    let dir = w.path("containerd");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    let original = Containerd::default_config(&dir, true);
    std::fs::write(&config, &original).unwrap();
    let runtime = workspace_bin("nvc-runtime");
    let configure = |extra: &[&str]| {
        let mut args = vec![
            OsStr::new("--runtime"),
            OsStr::new("containerd"),
            OsStr::new("--config"),
            config.as_os_str(),
            OsStr::new("--runtime-path"),
            runtime.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        nvc_configure(&args)
    };
    configure(&[]);
    let dump = run(
        Command::new(nvc_tests::find_program("containerd", "containerd").unwrap())
            .arg("--config")
            .arg(&config)
            .args(["config", "dump"]),
    );
    dump.assert_success();
    let nv = dump
        .stdout
        .split("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv.options]")
        .nth(1)
        .unwrap_or_else(|| panic!("no nv runtime in containerd's view of its config: {dump:?}"));
    assert!(
        nv.contains(&format!("BinaryName = \"{}\"", runtime.display())),
        "{dump:?}"
    );

    let containerd = Containerd::start(&dir, &[]).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let plugins = containerd.ctr(&["plugins", "ls"]);
    let cri_ok = plugins
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .any(|cols| {
            cols.len() == 4
                && cols[0] == "io.containerd.grpc.v1"
                && cols[1] == "cri"
                && cols[3] == "ok"
        });
    let log = containerd.log_tail(200);
    let namespace = containerd.namespace.clone();
    drop(containerd);
    assert!(
        cri_ok,
        "the CRI plugin refused the config nvc wrote: {plugins:?}\n{}",
        log.lines()
            .filter(|l| l.contains("failed to load plugin io.containerd.grpc.v1.cri"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    configure(&["--revert"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert!(!dir.join("conf.d/99-nvc.toml").exists());
    w.assert_clean(&[namespace]);
}

#[test]
fn containerd_ctr_runs_gpu_containers_through_nvc_runtime() {
    let w = World::new();
    let containerd = start_containerd(&w);
    let gpus = w.gpus();
    let runtime = workspace_bin("nvc-runtime");
    let run = |env: &[&str]| {
        let mut opts: Vec<String> = vec![
            "--runc-binary".into(),
            runtime.display().to_string(),
            "--mount".into(),
            format!(
                "type=bind,src={},dst=/run/fake-proc,options=rbind:ro",
                w.fake.proc_root.display()
            ),
            "--env".into(),
            "NVC_FAKE_PROC=/run/fake-proc".into(),
        ];
        for e in env {
            opts.extend(["--env".to_string(), e.to_string()]);
        }
        containerd.run(&opts, CTR_IMAGE, &["sh", "-c", PROBE])
    };
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

/// `<hooks>/oci-nvc-hook.json`: written by `nvc runtime configure --runtime podman` for the
/// workspace's nvc-hook, plus `NVC_CONFIG` in the hook's environment (the test's config is
/// not /etc/nvc/config.toml).
fn podman_hooks_dir(w: &World) -> PathBuf {
    let dir = w.path("hooks.d");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("oci-nvc-hook.json");
    let hook = workspace_bin("nvc-hook");
    let args = [
        OsStr::new("--runtime"),
        OsStr::new("podman"),
        OsStr::new("--config"),
        path.as_os_str(),
        OsStr::new("--hook-path"),
        hook.as_os_str(),
    ];
    nvc_configure(&args);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        json["hook"]["path"],
        hook.to_string_lossy().as_ref(),
        "{json}"
    );
    let env = json["hook"]["env"].as_array_mut().unwrap();
    env.push(format!("NVC_CONFIG={}", w.config.display()).into());
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    dir
}

#[test]
fn podman_runs_nvc_hook_from_its_hooks_dir() {
    let w = World::new();
    let podman = Podman::new(&w.path("podman"), &podman_hooks_dir(&w))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let gpus = w.gpus();
    let run = |env: &[&str]| {
        // Podman's default capabilities lack CAP_MKNOD, which PROBE's device cgroup check
        // uses.
        let mut opts: Vec<String> = vec!["--cap-add".into(), "MKNOD".into()];
        opts.extend(w.fake_proc_flags());
        for e in env {
            opts.extend(["-e".to_string(), e.to_string()]);
        }
        podman.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());

    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=all"]),
        &gpus,
        &context("podman NVIDIA_VISIBLE_DEVICES=all"),
    );
    assert_gpus(
        &run(&["NVIDIA_VISIBLE_DEVICES=1"]),
        &gpus[1..2],
        &context("podman NVIDIA_VISIBLE_DEVICES=1"),
    );
    assert_untouched(&run(&[]), "podman without NVIDIA_VISIBLE_DEVICES");
    assert_refused(
        &run(&[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
        ]),
        "warp",
        "podman NVIDIA_DRIVER_CAPABILITIES=compute,warp",
    );

    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

/// A scratch root for dpkg: the test rootfs (busybox for the maintainer scripts, glibc and
/// libgcc_s for nvc) with an empty dpkg database. Maintainer scripts run chrooted into it.
fn dpkg_root(dir: &Path) -> TestRootfs {
    let rootfs = RootfsSpec::default().build(dir).unwrap();
    for sub in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(dir.join("var/lib/dpkg").join(sub)).unwrap();
    }
    for file in ["status", "available"] {
        std::fs::write(dir.join("var/lib/dpkg").join(file), "").unwrap();
    }
    // The maintainer scripts use cmp and rmdir (Essential on Debian; busybox here) and
    // /dev/null.
    for applet in ["cmp", "rmdir"] {
        std::os::unix::fs::symlink("busybox", dir.join("usr/bin").join(applet)).unwrap();
    }
    let null = dir.join("dev/null");
    assert!(Command::new("mknod")
        .args(["-m", "0666"])
        .arg(&null)
        .args(["c", "1", "3"])
        .status()
        .unwrap()
        .success());
    let libgcc = [
        "/lib/x86_64-linux-gnu/libgcc_s.so.1",
        "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libgcc_s.so.1 (package libgcc-s1) is installed");
    std::fs::copy(libgcc, dir.join("usr/lib/x86_64-linux-gnu/libgcc_s.so.1")).unwrap();
    rootfs
}

fn run(command: &mut Command) -> Outcome {
    let line = format!("{command:?}");
    let out = command.output().unwrap();
    Outcome {
        command: line,
        status: out.status.code().unwrap_or(-1),
        timed_out: false,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        log: String::new(),
    }
}

/// The user's own Docker and containerd configs, which a purge must give back byte for
/// byte when nothing but nvc changed them.
const USERS_DAEMON_JSON: &str =
    "{\n  \"log-level\": \"warn\",\n  \"runtimes\": {\"other\": {\"path\": \"/usr/bin/other\"}}\n}\n";
const USERS_CONTAINERD_TOML: &str =
    "# the user's containerd config\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n";

/// `tree_digest` of `root` without dpkg's database.
fn digest_without_dpkg_db(root: &Path) -> String {
    tree_digest(root)
        .lines()
        .filter(|l| !l.starts_with("./var/lib/dpkg/"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn deb_installs_runs_and_purges_back_to_the_users_config() {
    require_root("dpkg --root and chroot need root");
    let host_before = host_configs();
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let bin_dir = workspace_bin("nvc").parent().unwrap().to_path_buf();
    let built = run(Command::new("bash")
        .arg(repo.join("packaging/build-deb.sh"))
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--out")
        .arg(dir.path()));
    built.assert_success();
    let deb = PathBuf::from(built.stdout.lines().last().unwrap());
    assert!(deb.is_file(), "{built:?}");

    let root = dir.path().join("root");
    dpkg_root(&root);
    for (file, text) in [
        ("etc/docker/daemon.json", USERS_DAEMON_JSON),
        ("etc/containerd/config.toml", USERS_CONTAINERD_TOML),
    ] {
        std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
        std::fs::write(root.join(file), text).unwrap();
    }
    let before = digest_without_dpkg_db(&root);
    let dpkg = |args: &[&str]| {
        run(Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(args))
    };
    let chroot = |args: &[&str]| run(Command::new("chroot").arg(&root).args(args));
    let read = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    // The scratch root's dpkg database lacks libc6 and libgcc-s1.
    let install = || {
        dpkg(&["--force-depends", "-i", &deb.to_string_lossy()])
            .assert_success()
            .clone()
    };

    install();
    for file in [
        "usr/bin/nvc",
        "usr/bin/nvc-runtime",
        "usr/bin/nvc-hook",
        "etc/nvc/config.toml",
        "usr/share/containers/oci/hooks.d/oci-nvc-hook.json",
        "usr/share/doc/nvc/README.md",
        "usr/share/doc/nvc/nvc.txt",
        "usr/share/doc/nvc/copyright",
    ] {
        assert!(root.join(file).is_file(), "{file} is not installed");
    }
    assert_eq!(
        read("etc/nvc/config.toml"),
        std::fs::read_to_string(repo.join("config/config.toml")).unwrap()
    );
    let hook: serde_json::Value =
        serde_json::from_str(&read("usr/share/containers/oci/hooks.d/oci-nvc-hook.json")).unwrap();
    assert_eq!(
        hook,
        serde_json::json!({
            "version": "1.0.0",
            "hook": {
                "path": "/usr/bin/nvc-hook",
                "args": ["nvc-hook", "prestart"],
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "timeout": 32,
            },
            "when": {"always": true},
            "stages": ["prestart"],
        })
    );
    let help = read("usr/share/doc/nvc/nvc.txt");
    for command in [
        "nvc --help",
        "nvc runtime configure --help",
        "nvc cdi generate --help",
    ] {
        assert!(
            help.contains(&format!("==> {command}")),
            "nvc.txt lacks {command}"
        );
    }
    let status = dpkg(&["-s", "nvc"]);
    assert!(
        status.stdout.contains("Status: install ok installed"),
        "{status:?}"
    );
    assert!(
        status.stdout.contains("Conffiles:\n /etc/nvc/config.toml"),
        "{status:?}"
    );

    // The installed binaries run (chrooted: the scratch root's glibc).
    let version = chroot(&["/usr/bin/nvc", "--version"]);
    version.assert_success();
    assert!(version.stdout.starts_with("nvc 0."), "{version:?}");

    // Register with Docker and containerd as a user would; purge gives their configs back.
    let configure = |args: &[&str]| {
        let mut command = vec!["/usr/bin/nvc", "runtime", "configure"];
        command.extend(args);
        chroot(&command).assert_success().clone()
    };
    configure(&["--runtime", "docker", "--gpus-alias"]);
    configure(&["--runtime", "containerd"]);
    assert_eq!(
        std::fs::read_link(root.join("usr/bin/nvidia-container-runtime-hook")).unwrap(),
        Path::new("nvc-hook")
    );
    let json: serde_json::Value = serde_json::from_str(&read("etc/docker/daemon.json")).unwrap();
    assert_eq!(
        json["runtimes"]["nv"]["path"], "/usr/bin/nvc-runtime",
        "{json}"
    );
    assert!(read("etc/containerd/conf.d/99-nvc.toml").contains("/usr/bin/nvc-runtime"));
    let purge = dpkg(&["--purge", "nvc"]);
    purge.assert_success();
    assert_eq!(
        read("etc/docker/daemon.json"),
        USERS_DAEMON_JSON,
        "{purge:?}"
    );
    assert_eq!(
        read("etc/containerd/config.toml"),
        USERS_CONTAINERD_TOML,
        "{purge:?}"
    );
    // Everything the package installed or nvc wrote is gone, the user's files are back.
    assert_eq!(digest_without_dpkg_db(&root), before, "{purge:?}");
    let status = dpkg(&["-s", "nvc"]);
    assert!(
        !status.stdout.contains("Status: install ok installed"),
        "{status:?}"
    );

    // A user who edits daemon.json after configuring keeps the edit; only nvc's runtime
    // goes.
    install();
    configure(&["--runtime", "docker"]);
    let mut json: serde_json::Value =
        serde_json::from_str(&read("etc/docker/daemon.json")).unwrap();
    json["debug"] = true.into();
    std::fs::write(root.join("etc/docker/daemon.json"), json.to_string()).unwrap();
    let purge = dpkg(&["--purge", "nvc"]);
    purge.assert_success();
    let json: serde_json::Value = serde_json::from_str(&read("etc/docker/daemon.json")).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "log-level": "warn",
            "runtimes": {"other": {"path": "/usr/bin/other"}},
            "debug": true,
        }),
        "{purge:?}"
    );
    assert!(!root.join("etc/docker/daemon.json.nvc-backup").exists());
    assert!(!root.join("usr/bin/nvc").exists());

    // A daemon.json that nvc made goes with it, and so does the --gpus-alias link.
    std::fs::remove_file(root.join("etc/docker/daemon.json")).unwrap();
    install();
    configure(&["--runtime", "docker", "--gpus-alias"]);
    let purge = dpkg(&["--purge", "nvc"]);
    purge.assert_success();
    assert!(!root.join("etc/docker/daemon.json").exists(), "{purge:?}");
    assert!(
        std::fs::symlink_metadata(root.join("usr/bin/nvidia-container-runtime-hook")).is_err(),
        "{purge:?}"
    );
    assert_eq!(
        host_configs(),
        host_before,
        "the host's engine configs changed"
    );
}

/// The packaged binaries, not the workspace's: the .deb's `nvc` registers the .deb's
/// `nvc-runtime` with dockerd, and `docker run --runtime=nv` gets its GPUs through them
/// and the .deb's `nvc-hook`.
#[test]
fn deb_binaries_run_gpu_containers_with_dockerd() {
    let w = World::new();
    let bin_dir = workspace_bin("nvc").parent().unwrap().to_path_buf();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out_dir = w.path("deb");
    let built = run(Command::new("bash")
        .arg(repo.join("packaging/build-deb.sh"))
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--out")
        .arg(&out_dir));
    built.assert_success();
    let deb = PathBuf::from(built.stdout.lines().last().unwrap());
    let pkg = w.path("pkg");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&pkg)).assert_success();
    let packaged = |name: &str| pkg.join("usr/bin").join(name);

    // The test's nvc config, with the packaged hook.
    let config = w.path("deb-config.toml");
    let text = std::fs::read_to_string(&w.config).unwrap().replace(
        &workspace_bin("nvc-hook").display().to_string(),
        &packaged("nvc-hook").display().to_string(),
    );
    assert!(
        text.contains(&packaged("nvc-hook").display().to_string()),
        "{text}"
    );
    std::fs::write(&config, text).unwrap();
    let daemon_json = w.path("deb-daemon.json");
    let configured = run(Command::new(packaged("nvc"))
        .args(["runtime", "configure", "--runtime", "docker", "--config"])
        .arg(&daemon_json)
        .arg("--runtime-path")
        .arg(packaged("nvc-runtime"))
        .env_remove("NVC_CONFIG"));
    configured.assert_success();

    let dockerd = Dockerd::start(
        &w.path("docker"),
        &daemon_json,
        &[
            ("PATH", nvc_tests::engine_path().as_os_str()),
            ("NVC_CONFIG", config.as_os_str()),
        ],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    dockerd
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let mut opts: Vec<String> = vec![
        "--runtime=nv".into(),
        "-e".into(),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
    ];
    opts.extend(w.fake_proc_flags());
    let out = dockerd.run(&opts, IMAGE, &["sh", "-c", PROBE]);
    let context = format!(
        "packaged binaries\nnvc log:\n{}\ndockerd log:\n{}",
        w.nvc_log(),
        dockerd.log_tail(20)
    );
    assert_gpus(&out, &w.gpus(), &context);
    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}
