//! GPU containers through a private dockerd: `--runtime=nv` with nvc-runtime, and `--gpus`
//! with nvc-hook as the NVIDIA hook.

use std::ffi::OsStr;

use libnvc::report::error_chain;
use nvc_tests::{workspace_bin, Dockerd, EngineRoot};

use super::{
    assert_gpus, assert_gpus_with, assert_refused, assert_runc_ran, assert_untouched,
    configure_docker, nvc_configure, start_dockerd, World, IMAGE, PROBE,
};

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
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
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
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

/// Debian 13's Docker 26.1 (its containerd 1.7 and runc 1.1.15) from a root of their own
/// (see `nvc_tests::EngineRoot`): Docker 26 reads CDI devices only with `features.cdi`,
/// which `nvc runtime configure --cdi` sets.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn docker26_runs_gpu_containers_through_nv_gpus_and_cdi() {
    let w = World::new();
    let root = EngineRoot::debian13().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let docker = RootDocker::start(&w, &root, Cdi::Configure);
    assert!(docker.version.starts_with("26."), "{}", docker.version);
    docker.assert_gpu_containers();
    docker.stop_and_check_clean("1.1.15");
}

/// Debian 14's Docker 28.5 (its containerd 2.1 and runc 1.3) from a root of their own:
/// Docker 28.2 and later read CDI devices without `features.cdi`, from `/etc/cdi` and
/// `/var/run/cdi`, so the daemon.json `nvc runtime configure` writes without `--cdi` is
/// enough for `--device nvidia.com/gpu=...`.
#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn docker28_runs_gpu_containers_through_nv_gpus_and_cdi() {
    let w = World::new();
    let root = EngineRoot::debian14().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let docker = RootDocker::start(&w, &root, Cdi::ByDefault);
    assert!(docker.version.starts_with("28."), "{}", docker.version);
    docker.assert_gpu_containers();
    docker.assert_cdi_leaves_no_trace();
    docker.stop_and_check_clean("1.3.6");
}

/// How a Docker in a root comes to read CDI devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cdi {
    /// `nvc runtime configure --cdi` turns it on (`features.cdi`).
    Configure,
    /// The Docker reads CDI devices as it comes; daemon.json says nothing of CDI.
    ByDefault,
}

/// A Docker (dockerd, its containerd and runc) of a newer Debian's root, set up by `nvc
/// runtime configure` as a user would, with nvc's CDI spec in its `/etc/cdi` and the
/// test image imported.
struct RootDocker<'w> {
    w: &'w World,
    root: &'w EngineRoot,
    dockerd: Dockerd,
    /// `docker version`'s server version.
    version: String,
}

impl<'w> RootDocker<'w> {
    fn start(w: &'w World, root: &'w EngineRoot, cdi: Cdi) -> RootDocker<'w> {
        let (daemon_json, alias_dir) = configure_docker(w);
        if cdi == Cdi::Configure {
            let runtime = workspace_bin("nvc-runtime");
            nvc_configure(&[
                OsStr::new("--runtime"),
                OsStr::new("docker"),
                OsStr::new("--config"),
                daemon_json.as_os_str(),
                OsStr::new("--runtime-path"),
                runtime.as_os_str(),
                OsStr::new("--cdi"),
            ]);
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&daemon_json).unwrap()).unwrap();
        let want_features = match cdi {
            Cdi::Configure => serde_json::json!({"cdi": true}),
            Cdi::ByDefault => serde_json::Value::Null,
        };
        assert_eq!(json["features"], want_features, "{json}");
        let spec_dir = w.cdi_spec_dir();
        let path = std::env::join_paths(
            std::iter::once(alias_dir).chain(std::env::split_paths(&nvc_tests::engine_path())),
        )
        .unwrap();
        let bin_dir = workspace_bin("nvc-hook").parent().unwrap().to_path_buf();
        let dockerd = Dockerd::start_in(
            root,
            &w.path(&format!("docker-{}", root.suite)),
            &daemon_json,
            &[("PATH", &path), ("NVC_CONFIG", w.config.as_os_str())],
            &[w.dir.path(), &bin_dir],
            Some(&spec_dir),
        )
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        let version = dockerd.docker(&["version", "--format", "{{.Server.Version}}"]);
        version.assert_success();
        // The folders this dockerd reads CDI specs from: none when CDI is off.
        let spec_dirs = dockerd.docker(&["info", "--format", "{{json .CDISpecDirs}}"]);
        assert!(
            spec_dirs.stdout.contains("\"/etc/cdi\""),
            "dockerd does not read CDI specs from /etc/cdi: {spec_dirs:?}"
        );
        dockerd
            .import(&w.tarball, IMAGE)
            .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        RootDocker {
            w,
            root,
            dockerd,
            version: version.stdout.trim().to_string(),
        }
    }

    fn run(&self, opts: &[&str]) -> nvc_tests::Outcome {
        let mut all: Vec<String> = opts.iter().map(|o| o.to_string()).collect();
        all.extend(self.w.fake_proc_flags());
        self.dockerd.run(&all, IMAGE, &["sh", "-c", PROBE])
    }

    fn context(&self, what: &str) -> String {
        format!(
            "Docker {}: {what}\nnvc log:\n{}\ndockerd log:\n{}",
            self.version,
            self.w.nvc_log(),
            self.dockerd.log_tail(20)
        )
    }

    /// `--runtime=nv` (all GPUs), `--gpus all`, `--gpus device=1`, CDI by index and by
    /// UUID (the name NVIDIA's device plugin uses), a container that asks for no GPU, and
    /// requests nvc refuses, through `--runtime=nv` and through `--gpus`.
    fn assert_gpu_containers(&self) {
        let gpus = self.w.gpus();
        let modeset = ["/dev/nvidia-modeset 195:254"];
        assert_gpus(
            &self.run(&["--runtime=nv", "-e", "NVIDIA_VISIBLE_DEVICES=all"]),
            &gpus,
            &self.context("--runtime=nv NVIDIA_VISIBLE_DEVICES=all"),
        );
        assert_gpus(
            &self.run(&["--gpus", "all"]),
            &gpus,
            &self.context("--gpus all"),
        );
        assert_gpus(
            &self.run(&["--gpus", "device=1"]),
            &gpus[1..2],
            &self.context("--gpus device=1"),
        );
        assert_gpus_with(
            &self.run(&["--device", "nvidia.com/gpu=0"]),
            &gpus[0..1],
            &modeset,
            &self.context("CDI nvidia.com/gpu=0"),
        );
        let by_uuid = format!("nvidia.com/gpu={}", gpus[2].uuid);
        assert_gpus_with(
            &self.run(&["--device", &by_uuid]),
            &gpus[2..3],
            &modeset,
            &self.context(&format!("CDI {by_uuid}")),
        );
        assert_untouched(
            &self.run(&["--runtime=nv"]),
            &self.context("--runtime=nv, no GPU asked for"),
        );
        assert_refused(
            &self.run(&["--runtime=nv", "-e", "NVIDIA_VISIBLE_DEVICES=7"]),
            "GPU index 7",
            &self.context("--runtime=nv NVIDIA_VISIBLE_DEVICES=7"),
        );
        assert_refused(
            &self.run(&["--gpus", "device=7"]),
            "GPU index 7",
            &self.context("--gpus device=7"),
        );
    }

    /// A CDI container that ended, kept: its layer (`docker diff`) has none of the links
    /// nvc's set-up made (the engine's mount points for the spec's mounts stay, as for
    /// any mount), and its ld.so.cache is the image's again, byte for byte: nvc's
    /// poststop hook, which the spec names and runc runs when the container is deleted.
    fn assert_cdi_leaves_no_trace(&self) {
        let name = nvc_tests::container_id("nvc-cdi-trace");
        let mut opts: Vec<String> = ["run", "--network", "none", "--name", name.as_str()]
            .map(String::from)
            .to_vec();
        opts.extend(["--device".to_string(), "nvidia.com/gpu=0".to_string()]);
        opts.extend(self.w.fake_proc_flags());
        opts.extend([IMAGE.into(), "sh".into(), "-c".into(), PROBE.into()]);
        let out = self.dockerd.docker(&opts);
        let modeset = ["/dev/nvidia-modeset 195:254"];
        let gpus = self.w.gpus();
        assert_gpus_with(&out, &gpus[0..1], &modeset, &self.context("CDI, kept"));
        let diff = self.dockerd.docker(&["diff", name.as_str()]);
        diff.assert_success();
        for link in ["libcuda.so.1", "libnvidia-ml.so.1"] {
            assert!(
                !diff
                    .stdout
                    .lines()
                    .any(|l| l.ends_with(&format!("/{link}"))),
                "{}",
                self.context(&format!(
                    "docker diff lists nvc's link {link}:\n{}",
                    diff.stdout
                ))
            );
        }
        let copy = self.w.path("ld.so.cache.after");
        self.dockerd
            .docker(&[
                "cp",
                &format!("{name}:/etc/ld.so.cache"),
                copy.to_str().unwrap(),
            ])
            .assert_success();
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(self.w.path("rootfs/etc/ld.so.cache")).unwrap(),
            "{}",
            self.context("the ld.so.cache after a CDI container")
        );
        self.dockerd.docker(&["rm", name.as_str()]).assert_success();
    }

    /// Checks that the root's runc `runc_version` ran the containers, stops dockerd, and
    /// checks that nothing is left.
    fn stop_and_check_clean(self, runc_version: &str) {
        let runc = self
            .dockerd
            .docker(&["info", "--format", "{{.RuncCommit.ID}}"]);
        assert!(
            runc.stdout.trim().starts_with(runc_version),
            "dockerd's runc is not {runc_version}: {runc:?}"
        );
        assert_runc_ran(self.w, self.root, runc_version);
        let cgroup = self.dockerd.cgroup_parent.clone();
        drop(self.dockerd);
        self.w.assert_clean(&[cgroup]);
    }
}

/// A GPU container that ended leaves nothing of the driver in its layer: `docker diff`
/// shows none of nvc's mount points or links, and an image committed from it runs
/// without nvc like the image it came from (no 0-byte `libcuda.so.*`, no cache entry for
/// one).
#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn docker_commit_of_an_ended_gpu_container_carries_nothing_of_the_driver() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let name = nvc_tests::container_id("nvc-commit");
    let mut opts: Vec<String> = vec![
        "run".into(),
        "--network".into(),
        "none".into(),
        "--runtime=nv".into(),
        "--name".into(),
        name.clone(),
        "-e".into(),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
    ];
    opts.extend(w.fake_proc_flags());
    opts.extend([IMAGE.into(), "sh".into(), "-c".into(), PROBE.into()]);
    let out = dockerd.docker(&opts);
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };
    assert_gpus(
        &out,
        &w.gpus(),
        &context("--runtime=nv, kept after it ended"),
    );

    let diff = dockerd.docker(&["diff", name.as_str()]);
    diff.assert_success();
    assert!(
        !diff.stdout.contains("nvidia") && !diff.stdout.contains("libcuda"),
        "{}",
        context(&format!("docker diff:\n{}", diff.stdout))
    );
    let image = format!("localhost/{name}:committed");
    dockerd
        .docker(&["commit", name.as_str(), image.as_str()])
        .assert_success();
    let plain = dockerd.run(
        &[] as &[&str],
        &image,
        &[
            "sh",
            "-c",
            "ls -la /usr/lib/x86_64-linux-gnu | grep -c -e nvidia -e libcuda; \
             ldconfig -p | grep -c -e nvidia -e libcuda; true",
        ],
    );
    plain.assert_success();
    assert_eq!(
        plain.stdout.lines().collect::<Vec<_>>(),
        ["0", "0"],
        "{}",
        context("the committed image without nvc")
    );
    dockerd.docker(&["rm", name.as_str()]);
    dockerd.docker(&["rmi", image.as_str()]);
    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

/// What an image holds of the driver, as seen without nvc: every regular file that is
/// empty (a leftover mount point) outside `/proc`, `/sys` and `/dev`; what loading
/// libcuda says; whether ldconfig calls a file empty.
const DEBRIS: &str =
    "find / -path /proc -prune -o -path /sys -prune -o -path /dev -prune -o -type f -print \
     | while read -r f; do [ -s \"$f\" ] || echo \"empty file $f\"; done; \
     nvc-probe 2>&1 | grep '^libcuda='; ldconfig 2>&1 | grep -i empty; true";

/// A GPU container committed while it runs (`docker commit` reads the writable layer
/// under the live mounts), and one started with `--gpus` committed once ended: neither
/// layer holds an empty driver file. nvc-hook puts its file
/// mounts on the container's own `/dev` and names each in the image's folder by a link to
/// it, which dangles anywhere else: the committed image, run without nvc, behaves like the
/// image it came from (libcuda not found rather than "file too short", ldconfig quiet).
#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn docker_commit_of_a_running_or_a_gpus_flag_container_carries_no_empty_driver_file() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let name = nvc_tests::container_id("nvc-commit-live");
    let mut opts: Vec<String> = ["run", "-d", "--network", "none", "--runtime=nv", "--name"]
        .map(String::from)
        .to_vec();
    opts.extend([
        name.clone(),
        "-e".into(),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
    ]);
    opts.extend(w.fake_proc_flags());
    opts.extend([IMAGE.into(), "sleep".into(), "300".into()]);
    dockerd.docker(&opts).assert_success();
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };
    let inside = dockerd.docker(&["exec", name.as_str(), "sh", "-c", PROBE]);
    assert_gpus(
        &inside,
        &w.gpus(),
        &context("docker exec in the running container"),
    );

    let image = format!("localhost/{name}:committed");
    dockerd
        .docker(&["commit", name.as_str(), image.as_str()])
        .assert_success();
    let committed = dockerd.run(&[] as &[&str], &image, &["sh", "-c", DEBRIS]);
    let original = dockerd.run(&[] as &[&str], IMAGE, &["sh", "-c", DEBRIS]);
    committed.assert_success();
    original.assert_success();
    let debris = |l: &&str| {
        l.contains("too short")
            || (l.starts_with("empty file") && (l.contains("nvidia") || l.contains("libcuda")))
    };
    assert!(
        !committed.stdout.lines().any(|l| debris(&l)),
        "{}",
        context(&format!("the committed image:\n{}", committed.stdout))
    );
    assert!(original.stdout.contains("libcuda="), "{original:?}");
    assert_eq!(
        committed.stdout,
        original.stdout,
        "{}",
        context("the committed image against the original, both without nvc")
    );
    dockerd.docker(&["rm", "-f", name.as_str()]);
    dockerd.docker(&["rmi", image.as_str()]);

    // Docker's `--gpus` runs nvc-hook as a prestart hook alone: nothing takes the links
    // and the cache away when the container ends, yet an image committed from it still
    // behaves like the original.
    let ended = nvc_tests::container_id("nvc-commit-gpus");
    let mut opts: Vec<String> = ["run", "--network", "none", "--gpus", "all", "--name"]
        .map(String::from)
        .to_vec();
    opts.push(ended.clone());
    opts.extend(w.fake_proc_flags());
    opts.extend([IMAGE.into(), "sh".into(), "-c".into(), PROBE.into()]);
    let out = dockerd.docker(&opts);
    assert_gpus(&out, &w.gpus(), &context("--gpus all, kept after it ended"));
    let image = format!("localhost/{ended}:committed");
    dockerd
        .docker(&["commit", ended.as_str(), image.as_str()])
        .assert_success();
    let committed = dockerd.run(&[] as &[&str], &image, &["sh", "-c", DEBRIS]);
    committed.assert_success();
    assert_eq!(
        committed.stdout,
        original.stdout,
        "{}",
        context("committed from an ended --gpus container, against the original")
    );
    dockerd.docker(&["rm", ended.as_str()]);
    dockerd.docker(&["rmi", image.as_str()]);
    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

/// `nvc attach` on a container Docker started without a GPU, found through the runc
/// state Docker's containerd shim keeps (`<exec-root>/runtime-runc/moby`), run in
/// dockerd's namespaces as on a host: `docker exec`
/// then sees the GPU, its node passing the device cgroup, and the driver.
#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn docker_container_started_without_a_gpu_gets_one_from_nvc_attach() {
    let w = World::new();
    let dockerd = start_dockerd(&w);
    let gpus = w.gpus();
    let name = nvc_tests::container_id("nvc-attach");
    let mut opts: Vec<String> = ["run", "-d", "--network", "none", "--name", name.as_str()]
        .map(String::from)
        .to_vec();
    opts.extend(w.fake_proc_flags());
    opts.extend([IMAGE.to_string(), "sleep".into(), "300".into()]);
    dockerd.docker(&opts).assert_success();
    let id = dockerd.docker(&["inspect", "-f", "{{.Id}}", name.as_str()]);
    id.assert_success();
    let id = id.stdout.trim().to_string();
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };
    let before = dockerd.docker(&["exec", name.as_str(), "sh", "-c", PROBE]);
    assert_untouched(&before, &context("before nvc attach"));

    let root = dockerd.dir.join("exec/runtime-runc/moby");
    // dockerd runs in namespaces of its own here: nvc runs there, as on a host.
    let attach = dockerd
        .in_namespaces(&workspace_bin("nvc"))
        .env("NVC_CONFIG", &w.config)
        .arg("attach")
        .arg("--root")
        .arg(&root)
        .arg("--runtime")
        .arg(nvc_tests::runc_path())
        .args([id.as_str(), "--gpus", gpus[1].uuid.as_str()])
        .output()
        .unwrap();
    assert!(
        attach.status.success(),
        "{}",
        context(&format!(
            "nvc attach: {}{}",
            String::from_utf8_lossy(&attach.stdout),
            String::from_utf8_lossy(&attach.stderr)
        ))
    );
    let after = dockerd.docker(&["exec", name.as_str(), "sh", "-c", PROBE]);
    assert_gpus(
        &after,
        &gpus[1..2],
        &context("docker exec after nvc attach"),
    );

    dockerd.docker(&["rm", "-f", name.as_str()]);
    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}
