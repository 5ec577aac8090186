//! The .deb from `packaging/build-deb.sh`: installed, run and purged in a scratch root
//! (`dpkg --root`), and its binaries running GPU containers with a private dockerd.

use std::path::{Path, PathBuf};
use std::process::Command;

use libnvc::report::error_chain;
use nvc_tests::{
    require_root, tree_digest, workspace_bin, Dockerd, FakeDriverSpec, RootfsSpec, TestRootfs,
};

use super::{assert_gpus, host_configs, run, World, IMAGE, PROBE};

/// A scratch root for a package manager: the test rootfs (busybox for the maintainer
/// scripts and scriptlets, glibc and libgcc_s for nvc), which they run chrooted into.
pub(super) fn scratch_root(dir: &Path) -> TestRootfs {
    let rootfs = RootfsSpec::default().build(dir).unwrap();
    // The maintainer scripts use cmp and rmdir (Essential on Debian, in coreutils and
    // diffutils on RPM systems; busybox here) and /dev/null.
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

/// A scratch root for dpkg: [`scratch_root`] with an empty dpkg database.
fn dpkg_root(dir: &Path) -> TestRootfs {
    let rootfs = scratch_root(dir);
    for sub in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(dir.join("var/lib/dpkg").join(sub)).unwrap();
    }
    for file in ["status", "available"] {
        std::fs::write(dir.join("var/lib/dpkg").join(file), "").unwrap();
    }
    rootfs
}

/// The user's own Docker and containerd configs, which a purge must give back byte for
/// byte when nothing but nvc changed them.
pub(super) const USERS_DAEMON_JSON: &str =
    "{\n  \"log-level\": \"warn\",\n  \"runtimes\": {\"other\": {\"path\": \"/usr/bin/other\"}}\n}\n";
pub(super) const USERS_CONTAINERD_TOML: &str =
    "# the user's containerd config\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n";

/// `tree_digest` of `root` without dpkg's database.
fn digest_without_dpkg_db(root: &Path) -> String {
    tree_digest(root)
        .lines()
        .filter(|l| !l.starts_with("./var/lib/dpkg/"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The .deb `packaging/build-deb.sh` makes of this build's binaries, built once for the
/// tests of this file and rpm.rs (xz's fastest level: the debug build is large), in
/// the build's scratch folder, `target/tmp/nvc-deb`, which the next run makes anew.
pub(super) fn built_deb() -> PathBuf {
    static DEB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DEB.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvc-deb");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let repo = nvc_tests::repo_root();
        let bin_dir = workspace_bin("nvc").parent().unwrap().to_path_buf();
        let built = run(Command::new("bash")
            .arg(repo.join("packaging/build-deb.sh"))
            .arg("--bin-dir")
            .arg(&bin_dir)
            .args(["--xz-level", "0", "--out"])
            .arg(&out));
        built.assert_success();
        let deb = PathBuf::from(built.stdout.lines().last().unwrap());
        assert!(deb.is_file(), "{built:?}");
        deb
    })
    .clone()
}

#[test]
#[ignore = "needs root: dpkg --root and chroot need root"]
fn deb_installs_runs_and_purges_back_to_the_users_config() {
    require_root("dpkg --root and chroot need root");
    let host_before = host_configs();
    let dir = tempfile::tempdir().unwrap();
    let repo = nvc_tests::repo_root();
    let deb = built_deb();

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
        "usr/bin/nvc-cuda-version",
        "usr/bin/nvc-mig-devices",
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
            "stages": ["prestart", "poststop"],
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
    // CRI-O is not installed there: the folders nvc makes for its drop-in go too.
    configure(&["--runtime", "crio"]);
    assert!(read("etc/crio/crio.conf.d/99-nvc.conf").contains("/usr/bin/nvc-runtime"));
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
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn deb_binaries_run_gpu_containers_with_dockerd() {
    let w = World::new();
    let deb = built_deb();
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

/// Records every call of a systemd tool in the scratch root's `/systemd-calls`, one line
/// each, and succeeds: the maintainer scripts' calls, where systemd cannot run.
pub(super) const RECORDING_TOOL: &str = "#!/bin/sh\necho \"${0##*/} $*\" >>/systemd-calls\n";

/// The `KEY=` line of a unit file, without the key.
pub(super) fn unit_value<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

#[test]
#[ignore = "needs root: dpkg --root, chroot, and a fake driver's device nodes need root"]
fn deb_installs_the_cdi_refresh_and_its_command_writes_a_spec() {
    require_root("dpkg --root, chroot, and a fake driver's device nodes need root");
    let dir = tempfile::tempdir().unwrap();
    let repo = nvc_tests::repo_root();
    let deb = built_deb();
    let root = dir.path().join("root");
    dpkg_root(&root);
    // systemd "running" there, its tools recording what the maintainer scripts ask.
    std::fs::create_dir_all(root.join("run/systemd/system")).unwrap();
    for tool in ["systemctl", "deb-systemd-helper"] {
        let path = root.join("usr/bin").join(tool);
        std::fs::write(&path, RECORDING_TOOL).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let calls = || -> Vec<String> {
        let text = std::fs::read_to_string(root.join("systemd-calls")).unwrap_or_default();
        std::fs::write(root.join("systemd-calls"), "").unwrap();
        text.lines().map(str::to_string).collect()
    };
    let dpkg = |args: &[&str]| {
        run(Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(args))
    };
    dpkg(&["--force-depends", "-i", &deb.to_string_lossy()]).assert_success();

    // The units, where systemd reads a package's, as they are in packaging/systemd.
    let units = Path::new("usr/lib/systemd/system");
    for unit in ["nvc-cdi-refresh.service", "nvc-cdi-refresh.path"] {
        assert_eq!(
            std::fs::read(root.join(units).join(unit)).unwrap(),
            std::fs::read(repo.join("packaging/systemd").join(unit)).unwrap(),
            "{unit}"
        );
    }
    let service =
        std::fs::read_to_string(root.join(units).join("nvc-cdi-refresh.service")).unwrap();
    let path_unit = std::fs::read_to_string(root.join(units).join("nvc-cdi-refresh.path")).unwrap();
    assert_eq!(
        unit_value(&path_unit, "PathChanged"),
        [
            "/lib/modules/%v/modules.dep",
            "/lib/modules/%v/modules.dep.bin",
            "/etc/ld.so.cache"
        ]
    );
    assert_eq!(unit_value(&service, "Type"), ["oneshot"]);
    assert!(
        unit_value(&service, "RemainAfterExit").is_empty(),
        "{service}"
    );
    for unit in [&service, &path_unit] {
        assert_eq!(unit_value(unit, "WantedBy"), ["multi-user.target"]);
    }
    // postinst enabled both and the health timer and, systemd running, started them.
    let units_named = "nvc-cdi-refresh.path nvc-cdi-refresh.service nvc-health.timer";
    let mut want = Vec::new();
    for unit in units_named.split(' ') {
        want.extend([
            format!("deb-systemd-helper unmask {unit}"),
            format!("deb-systemd-helper --quiet was-enabled {unit}"),
            format!("deb-systemd-helper enable {unit}"),
        ]);
    }
    want.push("systemctl --system daemon-reload".into());
    for unit in units_named.split(' ') {
        want.extend([
            format!("systemctl --quiet is-enabled {unit}"),
            format!("systemctl start {unit}"),
        ]);
    }
    assert_eq!(calls(), want);

    // systemd's own check of both units: in a root holding this host's system units
    // (their dependencies) and what the units run.
    let version = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "systemd-analyze is missing: install systemd (scripts/deps.sh does)"
    );
    let host_units = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .find(|d| Path::new(d).join("sysinit.target").is_file())
        .expect("this host's systemd units (sysinit.target), for systemd-analyze verify");
    let verify_root = dir.path().join("verify");
    std::fs::create_dir_all(verify_root.join("usr/lib/systemd")).unwrap();
    std::fs::create_dir_all(verify_root.join("bin")).unwrap();
    run(Command::new("cp")
        .arg("-a")
        .arg(host_units)
        .arg(verify_root.join("usr/lib/systemd/system")))
    .assert_success();
    for file in [
        "usr/lib/systemd/system/nvc-cdi-refresh.service",
        "usr/lib/systemd/system/nvc-cdi-refresh.path",
        "usr/lib/systemd/system/nvc-health.service",
        "usr/lib/systemd/system/nvc-health.timer",
        "usr/bin/nvc",
    ] {
        std::fs::create_dir_all(verify_root.join(file).parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), verify_root.join(file)).unwrap();
    }
    let busybox = ["usr/bin/busybox", "bin/busybox"]
        .into_iter()
        .map(|b| root.join(b))
        .find(|b| b.is_file())
        .unwrap();
    std::fs::copy(busybox, verify_root.join("bin/sh")).unwrap();
    let verify = |units: &[&str]| {
        let out = run(Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", verify_root.display()))
            .arg("--man=no")
            .args(units.iter().map(|u| format!("/usr/lib/systemd/system/{u}"))));
        (out.status, format!("{}{}", out.stdout, out.stderr))
    };
    let (status, said) = verify(&["nvc-cdi-refresh.service", "nvc-cdi-refresh.path"]);
    assert_eq!((status, said.as_str()), (0, ""), "systemd-analyze verify");
    // The GPU health record's timer (enabled and started above) and service, installed as
    // they are in packaging/systemd.
    for unit in ["nvc-health.service", "nvc-health.timer"] {
        assert_eq!(
            std::fs::read(root.join(units).join(unit)).unwrap(),
            std::fs::read(repo.join("packaging/systemd").join(unit)).unwrap(),
            "{unit}"
        );
    }
    let (status, said) = verify(&["nvc-health.service", "nvc-health.timer"]);
    assert_eq!((status, said.as_str()), (0, ""), "systemd-analyze verify");
    // It says so when a unit is wrong (it still exits 0 on an unknown key).
    std::fs::write(
        verify_root.join("usr/lib/systemd/system/nvc-cdi-refresh-bad.path"),
        path_unit.replace("PathChanged=/etc", "PathChange=/etc"),
    )
    .unwrap();
    let (_, said) = verify(&["nvc-cdi-refresh-bad.path"]);
    assert!(said.contains("Unknown key 'PathChange'"), "{said}");

    // The service's command as the unit writes it, chrooted into the installed root, on a
    // fake driver there: it writes a spec that `nvc cdi list` reads.
    let exec = unit_value(&service, "ExecStart");
    assert_eq!(
        exec,
        ["/usr/bin/nvc cdi generate --output /var/run/cdi/nvidia.yaml"]
    );
    let argv: Vec<&str> = exec[0].split_whitespace().collect();
    std::fs::create_dir(root.join("fake")).unwrap();
    let fake = FakeDriverSpec::default().build(&root.join("fake")).unwrap();
    let inside = |p: &Path| Path::new("/").join(p.strip_prefix(&root).unwrap());
    std::fs::write(
        root.join("fake/config.toml"),
        format!(
            "[driver]\nroot = \"{}\"\ndev-root = \"{}\"\nproc-root = \"{}\"\n\n[hook]\npath = \"/usr/bin/nvc-hook\"\n\n[log]\nfile = \"/fake/nvc.log\"\n",
            inside(&fake.root).display(),
            inside(&fake.dev_root).display(),
            inside(&fake.proc_root).display()
        ),
    )
    .unwrap();
    let chroot = |args: &[&str]| {
        run(Command::new("chroot")
            .arg(&root)
            .args(args)
            .env("NVC_CONFIG", "/fake/config.toml"))
    };
    let generated = chroot(&argv);
    generated.assert_success();
    let spec_file = root.join("var/run/cdi/nvidia.yaml");
    let mode = std::fs::metadata(&spec_file).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o644
    );
    let listed = chroot(&[
        "/usr/bin/nvc",
        "cdi",
        "list",
        "--spec",
        "/var/run/cdi/nvidia.yaml",
    ]);
    listed.assert_success();
    let mut want: Vec<String> = Vec::new();
    for (i, gpu) in fake.spec.gpus_in_bus_order().iter().enumerate() {
        want.push(format!("nvidia.com/gpu={i}"));
        want.push(format!("nvidia.com/gpu={}", gpu.uuid));
    }
    want.push("nvidia.com/gpu=all".into());
    assert_eq!(
        listed.stdout.lines().collect::<Vec<_>>(),
        want,
        "{listed:?}"
    );
    assert!(std::fs::read_to_string(&spec_file)
        .unwrap()
        .contains("/usr/bin/nvc-hook"));

    // Purge: the units stopped, masked, then forgotten; the spec, whose hooks would run a
    // missing nvc-hook, gone.
    let purge = dpkg(&["--purge", "nvc"]);
    purge.assert_success();
    assert!(!spec_file.exists(), "{purge:?}");
    let mut want = vec![format!("systemctl stop {units_named}")];
    for stage in ["remove", "purge"] {
        want.push("systemctl --system daemon-reload".into());
        for unit in units_named.split(' ') {
            if stage == "remove" {
                want.push(format!("deb-systemd-helper mask {unit}"));
            } else {
                want.push(format!("deb-systemd-helper purge {unit}"));
                want.push(format!("deb-systemd-helper unmask {unit}"));
            }
        }
    }
    assert_eq!(calls(), want, "{purge:?}");
    for unit in ["nvc-cdi-refresh.service", "nvc-cdi-refresh.path"] {
        assert!(!root.join(units).join(unit).exists(), "{unit}");
    }
}
