//! Container engines: GPU containers through real engines, a private dockerd
//! (`--runtime=nv` and `--gpus`, [`docker`]), a private containerd (`ctr run` with
//! nvc-runtime as its runc, [`containerd`]; its CRI plugin driven as the kubelet drives it,
//! for each of the device plugin's strategies, [`cri`]), podman with nvc-hook from a
//! hooks.d folder ([`podman`]; with crun, [`crun`]; rootless, [`rootless`]), CRI-O driven
//! over CRI through nvc's handler, its hooks folder and its CDI support, and on a reload
//! and a restart ([`crio`]), against fake driver trees, asserted from inside the
//! container; Debian 12's engines and Debian 13's and 14's from debootstrap roots
//! (`nvc_tests::EngineRoot`); CRI-O 1.37 from `../shared/cri-o`; the .deb from
//! `packaging/build-deb.sh`, installed and purged in a scratch root ([`deb`]); the RPM
//! from `packaging/build-rpm.sh`, held against the .deb, installed, upgraded and erased
//! in one, and both packages for arm64 ([`rpm`]); and
//! `nvc runtime configure` on copies of realistic engine configs ([`configure`]).
//!
//! Needs root and the engines (`scripts/deps.sh` installs docker.io, containerd, podman,
//! conmon, skopeo, debootstrap; the Debian 13 and 14 roots are made on first use, once per
//! build folder or in `NVC_ENGINE_ROOTS`; CRI-O's archive is unpacked on first use into
//! `NVC_TESTS_CACHE`). An engine that cannot run here fails its test with the reason.
//! Every engine keeps its state under the test's temporary directory, in its own mount
//! and PID namespaces, and is stopped at the end; each test then checks that nothing it started is left running,
//! mounted or in a cgroup, and that the host's engine configs did not change. The
//! `configure` tests need neither root nor an engine, except `containerd_reads_the_result`
//! (containerd).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use nvc_tests::{
    dir_names, host_mounts, nvc_config_for, require_root, tree_digest, workspace_bin, Dockerd,
    FakeDriver, FakeDriverSpec, FakeGpu, Outcome, RootfsSpec,
};

use libnvc::report::error_chain;

mod configure;
mod containerd;
mod cri;
mod crio;
mod crun;
mod deb;
mod docker;
mod node;
mod podman;
mod rootless;
mod rpm;
mod top;
mod wsl;

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

/// The vendor of the kind NVIDIA's device plugin names GPUs under in its CDI strategies.
const DEVICE_PLUGIN_VENDOR: &str = libnvc::cdi::DEVICE_PLUGIN_VENDOR;

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

/// Host paths an engine test must leave as they were, contents and all.
const HOST_PATHS: &[&str] = &[
    "/etc/docker",
    "/etc/containerd",
    "/etc/containers",
    "/etc/nvc",
    "/etc/cdi",
    "/opt/containerd",
    "/opt/cni",
    "/run/docker",
    "/run/containerd",
    "/etc/crio",
    "/var/lib/crio",
    "/var/log/crio",
    "/run/crio",
];

/// Folders whose names must stay the same, but whose contents are another program's
/// business: `/opt` holds what the machine installed there (hundreds of megabytes on
/// some machines, read twice a test if digested), and the engines' own folders in it are
/// digested above.
const HOST_FOLDERS: &[&str] = &["/opt"];

fn host_configs() -> String {
    let digests = HOST_PATHS
        .iter()
        .map(|p| format!("== {p}\n{}", tree_digest(Path::new(p))));
    let names = HOST_FOLDERS
        .iter()
        .map(|p| format!("== {p} (names)\n{}\n", dir_names(Path::new(p)).join("\n")));
    digests.chain(names).collect()
}

impl World {
    fn new() -> World {
        World::with(FakeDriverSpec::default())
    }

    /// A world whose fake driver is `spec`'s.
    fn with(spec: FakeDriverSpec) -> World {
        require_root("engines need root: dockerd, containerd, podman, device nodes");
        let host_configs = host_configs();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("driver")).unwrap();
        let fake = spec.build(&dir.path().join("driver")).unwrap();
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

    /// A folder holding the CDI spec `nvc cdi generate` writes for this world's driver.
    fn cdi_spec_dir(&self) -> PathBuf {
        let cdi = self.path("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        let out = Command::new(workspace_bin("nvc"))
            .args(["cdi", "generate", "--output"])
            .arg(cdi.join("nvidia.yaml"))
            .env("NVC_CONFIG", &self.config)
            .output()
            .unwrap();
        assert!(out.status.success(), "nvc cdi generate: {out:?}");
        cdi
    }

    /// Adds to `dir` the spec for NVIDIA's device plugin's CDI strategies: kind
    /// `k8s.device-plugin.nvidia.com/gpu`, GPUs by UUID as the plugin names them, in the
    /// file the plugin would write its own (`<vendor>-<class>.json`), as docs/kubernetes.md
    /// has the admin write it.
    fn device_plugin_cdi_spec(&self, dir: &Path) {
        let out = Command::new(workspace_bin("nvc"))
            .args(["cdi", "generate", "--vendor", DEVICE_PLUGIN_VENDOR])
            .args(["--device-name-strategy", "uuid", "--output"])
            .arg(dir.join(format!("{DEVICE_PLUGIN_VENDOR}-gpu.json")))
            .env("NVC_CONFIG", &self.config)
            .output()
            .unwrap();
        assert!(out.status.success(), "nvc cdi generate --vendor: {out:?}");
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
    assert_gpus_with(out, gpus, &[], context);
}

/// [`assert_gpus`] with more control nodes: nvc's CDI spec gives every container the
/// control nodes of every capability it covers (`nvidia-modeset` too).
fn assert_gpus_with(out: &Outcome, gpus: &[FakeGpu], more: &[&str], context: &str) {
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
        .iter()
        .chain(more)
        .map(|s| s.to_string()),
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
    for want in ["libcuda=ok", "libnvidia-ml=ok", "driver_version=999.88.77"] {
        assert!(
            seen.text.contains(want),
            "{context}: no {want}\n{}",
            seen.text
        );
    }
    // The host's libcuda: mounted where the spec names it (CDI, where the engine makes the
    // mounts), or on the runtime's /dev and linked from there (nvc-hook).
    assert!(
        nvc_tests::loaded_from(&seen.text, "/usr/lib/x86_64-linux-gnu/libcuda.so.999.88.77"),
        "{context}: libcuda's real path\n{}",
        seen.text
    );
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

/// Asserts that nvc-runtime handed this test's containers to the runc its config names
/// (`nvc_tests::runc_path`, a path that inside `root` is the root's own runc), and that
/// this runc is version `version`: the low-level runtime of a root's engines is the
/// root's runc, never Debian 12's.
#[track_caller]
fn assert_runc_ran(w: &World, root: &nvc_tests::EngineRoot, version: &str) {
    let said = root.version("runc");
    assert!(
        said.starts_with(&format!("runc version {version}")),
        "the {} root's runc is not {version}: {said:?}",
        root.suite
    );
    let exec = format!("exec {} ", nvc_tests::runc_path().display());
    let log = w.nvc_log();
    assert!(
        log.contains(&exec),
        "nvc-runtime never ran {exec:?}; nvc log:\n{log}"
    );
}
