//! GPU containers through podman, with nvc-hook from a hooks.d folder that
//! `nvc runtime configure --runtime podman` writes, and CDI: Debian 12's Podman 4.3, and
//! Podman 5 from newer Debian roots with runc. The checks every podman 5 passes are
//! [`assert_podman5_gpu_containers`]; `crun.rs` runs them with crun (and nvc-runtime over
//! crun), `rootless.rs` with rootless podman.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, EngineError, EngineRoot, FakeGpu, Outcome, Podman};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_untouched, nvc_configure, rootless,
    World, IMAGE, PROBE,
};

/// `<hooks>/oci-nvc-hook.json`: written by `nvc runtime configure --runtime podman` for the
/// workspace's nvc-hook, plus `NVC_CONFIG` in the hook's environment (the test's config is
/// not /etc/nvc/config.toml).
pub(super) fn podman_hooks_dir(w: &World) -> PathBuf {
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

/// This host's podman with nvc's hooks.d folder ([`podman_hooks_dir`]) and the test image.
pub(super) fn podman_with_image(w: &World) -> Podman {
    let podman = Podman::new(&w.path("podman"), &podman_hooks_dir(w))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    podman
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn podman_runs_nvc_hook_from_its_hooks_dir() {
    let w = World::new();
    let podman = podman_with_image(&w);
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

/// A newer Debian's podman with `runtime` (see `Podman::in_root`), the OCI hooks of
/// `hooks` and the CDI spec `nvc cdi generate` writes as its `/etc/cdi`; the test image is
/// imported by [`assert_podman5_gpu_containers`]. crun runs on the legacy cgroup view of
/// this hybrid host, the only one it takes (see `crun.rs`).
pub(super) fn podman5(w: &World, root: &EngineRoot, runtime: &str, hooks: &Path) -> Podman {
    let cdi = w.cdi_spec_dir();
    let bin_dir = workspace_bin("nvc-hook").parent().unwrap().to_path_buf();
    let podman = Podman::in_root(
        root,
        runtime,
        &w.path("podman5"),
        hooks,
        &[w.dir.path(), &bin_dir],
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
    .with_cdi_dir(&cdi);
    if runtime == "crun" {
        podman.with_legacy_cgroups()
    } else {
        podman
    }
}

/// What `program --version` says in `root`, which must contain `want`.
fn version_in(root: &EngineRoot, program: &str, want: &str) -> String {
    let version = root.version(program);
    assert!(
        version.contains(want),
        "{program} in {}: {version}",
        root.suite
    );
    version
}

/// Where the user reads why nvc refused a container.
pub(super) enum Refusal {
    /// In podman's error: runc passes the hook's stderr on, nvc-runtime prints its own.
    OnStderr,
    /// crun sends a hook's stdout and stderr to /dev/null (unless the container's
    /// `run.oci.hooks.stderr` annotation names a file): podman's error names the hook that
    /// failed, and nvc's reason is in nvc's log.
    InLog,
}

impl Refusal {
    /// Where nvc-hook's refusal shows under podman's low-level `runtime`.
    fn of_hook_under(runtime: &str) -> Refusal {
        if runtime == "crun" {
            Refusal::InLog
        } else {
            Refusal::OnStderr
        }
    }
}

/// Who runs podman.
pub(super) enum User {
    /// root, with the containers' cgroups under their own parent.
    Root,
    /// A user of the root (see `rootless.rs`).
    Rootless,
}

/// A newer Debian's root and what its engines' `--version` say (how it starts).
pub(super) struct Release {
    make: fn() -> Result<EngineRoot, EngineError>,
    podman: &'static str,
    runc: &'static str,
    crun: &'static str,
}

/// Debian 13 (trixie): Podman 5.4.2, runc 1.1.15, crun 1.21.
pub(super) const DEBIAN13: Release = Release {
    make: EngineRoot::debian13,
    podman: "podman version 5.4.",
    runc: "runc version 1.1.",
    crun: "crun version 1.21",
};

/// Debian 14 (forky): Podman 5.8, runc 1.3, crun 1.28.
pub(super) const DEBIAN14: Release = Release {
    make: EngineRoot::debian14,
    podman: "podman version 5.8.",
    runc: "runc version 1.3.",
    crun: "crun version 1.28",
};

impl Release {
    /// The root, made if it is not there yet.
    pub(super) fn root(&self) -> EngineRoot {
        (self.make)().unwrap_or_else(|e| panic!("{}", error_chain(&e)))
    }

    /// "PODMAN with RUNTIME" as their versions say, which must be the expected ones.
    pub(super) fn label(&self, root: &EngineRoot, runtime: &str) -> String {
        let want = if runtime == "crun" {
            self.crun
        } else {
            self.runc
        };
        format!(
            "{} with {}",
            version_in(root, "podman", self.podman),
            version_in(root, runtime, want)
        )
    }
}

/// `release`'s podman with its `runtime` (`runc` or `crun`), run by `user`, nvc-hook from
/// hooks.d and nvc's CDI spec: the checks of [`assert_podman5_gpu_containers`], and for a
/// rootless podman `rootless::assert_device_cgroup_left`.
pub(super) fn check_podman5(release: &Release, runtime: &str, user: User) {
    let w = World::new();
    let root = release.root();
    let mut label = release.label(&root, runtime);
    let mut engine = podman5(&w, &root, runtime, &podman_hooks_dir(&w));
    if let User::Rootless = user {
        label = format!("rootless {label}");
        engine = rootless::run_as_user(&w, &root, engine);
    }
    assert_podman5_gpu_containers(&w, engine, Refusal::of_hook_under(runtime), &label);
    if let User::Rootless = user {
        rootless::assert_device_cgroup_left(&w, &label);
    }
}

/// The checks every podman 5 here passes, whatever runs its containers (runc, crun,
/// nvc-runtime; as root or rootless): GPU containers asked for by `NVIDIA_VISIBLE_DEVICES`
/// (`all` and `1`: nvc-hook from hooks.d, or nvc-runtime) and by CDI, by index and by the
/// UUID NVIDIA's device plugin names GPUs by, a container without a request that gets
/// nothing, and a bad request that does not start, with nvc's reason where `refusal` says.
/// Then `podman` is stopped and nothing of the test may be left.
pub(super) fn assert_podman5_gpu_containers(
    w: &World,
    podman: Podman,
    refusal: Refusal,
    label: &str,
) {
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{label}: {}", error_chain(&e)));
    let gpus = w.gpus();
    let rootless = podman.user().is_some();
    let probe = if rootless {
        format!("{} {PROBE}", rootless::OPEN_NODES)
    } else {
        PROBE.to_string()
    };
    let run = |opts: &[&str]| {
        // Podman's default capabilities lack CAP_MKNOD, which PROBE's device cgroup check
        // uses.
        let mut all: Vec<String> = vec!["--cap-add".into(), "MKNOD".into()];
        all.extend(w.fake_proc_flags());
        all.extend(opts.iter().map(|o| o.to_string()));
        podman.run(&all, IMAGE, &["sh", "-c", &probe])
    };
    let context = |what: &str| format!("{label}: {what}\nnvc log:\n{}", w.nvc_log());
    let assert_sees = |out: &Outcome, gpus: &[FakeGpu], more: &[&str], what: &str| {
        if rootless {
            rootless::assert_gpus_bound(out, gpus, more, &context(what));
        } else {
            assert_gpus_with(out, gpus, more, &context(what));
        }
    };

    let all = run(&["-e", "NVIDIA_VISIBLE_DEVICES=all"]);
    assert_sees(&all, &gpus, &[], "NVIDIA_VISIBLE_DEVICES=all");
    let one = run(&["-e", "NVIDIA_VISIBLE_DEVICES=1"]);
    assert_sees(&one, &gpus[1..2], &[], "NVIDIA_VISIBLE_DEVICES=1");
    let modeset = ["/dev/nvidia-modeset 195:254"];
    let first = run(&["--device", "nvidia.com/gpu=0"]);
    assert_sees(&first, &gpus[0..1], &modeset, "CDI nvidia.com/gpu=0");
    let by_uuid = format!("nvidia.com/gpu={}", gpus[2].uuid);
    let third = run(&["--device", &by_uuid]);
    assert_sees(&third, &gpus[2..3], &modeset, &format!("CDI {by_uuid}"));
    // Podman 5's --gpus names CDI devices of nvidia.com/gpu too: here nvc's spec's `all`.
    let gpus_all = run(&["--gpus", "all"]);
    assert_sees(&gpus_all, &gpus, &modeset, "--gpus all");
    assert_untouched(&run(&[]), &format!("{label}: without a GPU request"));
    let bad = run(&["-e", "NVIDIA_VISIBLE_DEVICES=7"]);
    let reason = "GPU index 7 does not exist";
    let what = format!("{label}: NVIDIA_VISIBLE_DEVICES=7");
    match refusal {
        Refusal::OnStderr => assert_refused(&bad, reason, &what),
        Refusal::InLog => {
            assert_refused(&bad, "error executing hook", &what);
            assert!(bad.stderr.contains("nvc-hook"), "{what}: {bad:?}");
            let log = w.nvc_log();
            assert!(log.contains(reason), "{what}: not in nvc's log:\n{log}");
        }
    }

    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

/// Debian 13's Podman 5.4 with runc 1.1.15, from a root of their own (see
/// `nvc_tests::EngineRoot`), on this machine's hybrid cgroups: the checks of
/// [`assert_podman5_gpu_containers`]. (Its crun: `crun.rs`.)
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn podman5_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN13, "runc", User::Root);
}

/// Debian 14's Podman 5.8 with runc 1.3, the same way.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn podman58_runs_gpu_containers_through_its_hooks_dir_and_cdi() {
    check_podman5(&DEBIAN14, "runc", User::Root);
}

/// Podman runs a hooks.d file's poststop stage itself, after the runtime deleted the
/// container, and leaves it out of the spec it gives the runtime: the prestart hook keeps
/// its record for Podman's specs all the same, and the poststop Podman runs takes nvc's
/// links away and puts the image's ld.so.cache back, so that the container's layer is the
/// image's again once it has ended (kept, not removed: `podman mount` shows it).
#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn a_podman_hooks_d_container_leaves_its_layer_as_the_image_was() {
    let w = World::new();
    let podman = podman_with_image(&w);
    let image = w.dir.path().join("rootfs");
    let cgroup_parent = format!("/{}", podman.cgroup_parent);
    let mut args = vec![
        "run",
        "--name",
        "nvc-no-trace",
        "--network",
        "none",
        "--cgroup-parent",
        &cgroup_parent,
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "-e",
        "NVIDIA_VISIBLE_DEVICES=all",
    ];
    let proc_flags = w.fake_proc_flags();
    args.extend(proc_flags.iter().map(String::as_str));
    args.extend([
        IMAGE,
        "sh",
        "-c",
        "test -e /dev/nvidiactl && ls /usr/lib/x86_64-linux-gnu | grep -c libcuda",
    ]);
    let run = podman.podman(&args);
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());
    assert_eq!(run.status, 0, "{}", context(&format!("{run:?}")));
    assert_ne!(
        run.stdout.trim(),
        "0",
        "{}",
        context("no libcuda in the container")
    );
    let mount = podman.podman(&["mount", "nvc-no-trace"]);
    assert_eq!(mount.status, 0, "{mount:?}");
    let layer = PathBuf::from(mount.stdout.trim());
    for part in ["usr", "etc/ld.so.cache"] {
        assert_eq!(
            nvc_tests::tree_digest(&layer.join(part)),
            nvc_tests::tree_digest(&image.join(part)),
            "{}",
            context(&format!("the container's {part} after it ended"))
        );
    }
    let removed = podman.podman(&["rm", "-f", "nvc-no-trace"]);
    assert_eq!(removed.status, 0, "{removed:?}");
    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn podman_leaves_out_and_refuses_an_unhealthy_gpu() {
    // No broken GPU handed out, through Podman's hooks.d: `nvc health update` records
    // what the fake NVML says (GPU 1 fell off the bus), and nvc-hook reads the record.
    let w = World::new();
    let podman = podman_with_image(&w);
    let gpus = w.gpus();
    std::fs::write(
        w.fake.dir.join("nvml-health.txt"),
        format!("{} lost\n", gpus[1].uuid),
    )
    .unwrap();
    let update = std::process::Command::new(workspace_bin("nvc"))
        .args(["health", "update"])
        .env("NVC_CONFIG", &w.config)
        .output()
        .unwrap();
    assert!(update.status.success(), "{update:?}");
    let run = |env: &str| {
        let mut opts: Vec<String> = vec!["--cap-add".into(), "MKNOD".into()];
        opts.extend(w.fake_proc_flags());
        opts.extend(["-e".to_string(), env.to_string()]);
        podman.run(&opts, IMAGE, &["sh", "-c", PROBE])
    };
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());
    let healthy = [gpus[0].clone(), gpus[2].clone()];
    assert_gpus(
        &run("NVIDIA_VISIBLE_DEVICES=all"),
        &healthy,
        &context("podman NVIDIA_VISIBLE_DEVICES=all, GPU 1 lost"),
    );
    assert!(
        w.nvc_log().contains(&format!(
            "NVIDIA_VISIBLE_DEVICES=all: left out GPU 1 ({}) fell off the bus",
            gpus[1].uuid
        )),
        "{}",
        w.nvc_log()
    );
    assert_refused(
        &run("NVIDIA_VISIBLE_DEVICES=1"),
        &format!(
            "GPU 1 ({}, bus {}) fell off the bus",
            gpus[1].uuid, gpus[1].bus_id
        ),
        &context("podman NVIDIA_VISIBLE_DEVICES=1, GPU 1 lost"),
    );
}
