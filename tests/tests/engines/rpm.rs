//! The RPM from `packaging/build-rpm.sh`, held against the .deb from
//! `packaging/build-deb.sh`: the same files, modes, config file and dependencies, and
//! scriptlets made of the .deb's maintainer scripts; installed, upgraded and erased with
//! `rpm --root` in a scratch root, its scriptlets run chrooted there, the erase giving the
//! root back byte for byte; rpmlint with `packaging/rpm/nvc.rpmlintrc`; and both packages
//! for arm64 (aarch64), refusing binaries of another architecture.
//!
//! Needs rpm (rpmbuild, rpm2archive), rpmlint and gcc-aarch64-linux-gnu
//! (`scripts/deps.sh` installs them); the install test needs root (`rpm --root`, chroot).

use std::path::{Path, PathBuf};
use std::process::Command;

use nvc_tests::{require_root, tree_digest, workspace_bin, FakeDriverSpec, Outcome};

use super::deb::{
    built_deb, scratch_root, RECORDING_TOOL, USERS_CONTAINERD_TOML, USERS_DAEMON_JSON,
};
use super::run;

/// The workspace's version, which the packages carry.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Fails the test, saying what to install, when `tool` is not on PATH.
fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is missing: install {package} (scripts/deps.sh does, as root)"
    );
}

/// `packaging/build-rpm.sh ARGS --xz-level 0 --out OUT` (xz's fastest: the debug build is
/// large), which must succeed; the RPM it made.
fn build_rpm(out: &Path, args: &[&std::ffi::OsStr]) -> PathBuf {
    require_tool("rpmbuild", "rpm");
    let built = run(Command::new("bash")
        .arg(nvc_tests::repo_root().join("packaging/build-rpm.sh"))
        .args(args)
        .args(["--xz-level", "0", "--out"])
        .arg(out));
    built.assert_success();
    let rpm = PathBuf::from(built.stdout.lines().last().unwrap());
    assert!(rpm.is_file(), "{built:?}");
    rpm
}

/// The RPMs `packaging/build-rpm.sh` makes of this build's binaries, release 1 and
/// release 2 (the upgrade), built once for the tests of this file in
/// `target/tmp/nvc-rpm`, which the next run makes anew.
fn built_rpms() -> (PathBuf, PathBuf) {
    static RPMS: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    RPMS.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvc-rpm");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let bin_dir = workspace_bin("nvc").parent().unwrap().to_path_buf();
        let build = |release: &str| {
            build_rpm(
                &out,
                &[
                    "--bin-dir".as_ref(),
                    bin_dir.as_os_str(),
                    "--release".as_ref(),
                    release.as_ref(),
                ],
            )
        };
        (build("1"), build("2"))
    })
    .clone()
}

/// `rpm -qp --qf FORMAT PACKAGE`.
fn query(package: &Path, format: &str) -> String {
    let out = run(Command::new("rpm")
        .args(["-qp", "--qf", format])
        .arg(package));
    out.assert_success();
    out.stdout
}

/// The field `name` of a .deb's control file.
fn deb_field(deb: &Path, name: &str) -> String {
    let out = run(Command::new("dpkg-deb").arg("-f").arg(deb).arg(name));
    out.assert_success();
    out.stdout.trim().to_string()
}

/// The files of `package` (a .deb or an RPM) unpacked into `dir`, without running anything.
fn unpack(package: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = if package.extension().is_some_and(|e| e == "deb") {
        run(Command::new("dpkg-deb").arg("-x").arg(package).arg(dir))
    } else {
        run(Command::new("sh")
            .arg("-c")
            .arg("rpm2archive -n - <\"$1\" | tar -xf - -C \"$2\"")
            .arg("sh")
            .arg(package)
            .arg(dir))
    };
    out.assert_success();
}

/// The ELF machine of an executable (`e_machine`): 62 for x86-64, 183 for AArch64.
fn elf_machine(file: &Path) -> u16 {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "{} is not ELF", file.display());
    u16::from_le_bytes([bytes[18], bytes[19]])
}

/// The maintainer script as the RPM's scriptlet runs it: its head from packaging/rpm,
/// then the .deb's script without its `#!` line.
fn scriptlet(head: &str, deb_script: &str) -> String {
    let repo = nvc_tests::repo_root();
    let mut text = std::fs::read_to_string(repo.join("packaging/rpm").join(head)).unwrap();
    if !deb_script.is_empty() {
        let deb = std::fs::read_to_string(repo.join("packaging/deb").join(deb_script)).unwrap();
        text.push_str(deb.split_once('\n').unwrap().1);
    }
    text
}

#[test]
#[ignore = "needs root: rpm and rpmlint, which scripts/deps.sh installs as root"]
fn rpm_holds_the_debs_files_config_dependencies_and_scripts() {
    require_tool("rpmlint", "rpmlint");
    let dir = tempfile::tempdir().unwrap();
    let repo = nvc_tests::repo_root();
    let deb = built_deb();
    let (rpm, _) = built_rpms();

    // The same files with the same modes, owners and bytes (the folders the RPM does not
    // own, /usr/bin and such, are the system's).
    unpack(&deb, &dir.path().join("deb"));
    unpack(&rpm, &dir.path().join("rpm"));
    let files = tree_digest(&dir.path().join("deb"));
    assert_eq!(tree_digest(&dir.path().join("rpm")), files);
    for file in [
        "./usr/bin/nvc 0755 0:0 file",
        "./usr/bin/nvc-runtime 0755 0:0 file",
        "./usr/bin/nvc-hook 0755 0:0 file",
        "./usr/bin/nvc-cuda-version 0755 0:0 file",
        "./usr/bin/nvc-mig-devices 0755 0:0 file",
        "./usr/bin/nv-docker 0755 0:0 file",
        "./etc/nvc/config.toml 0644 0:0 file",
        "./usr/lib/systemd/system/nvc-cdi-refresh.path 0644 0:0 file",
        "./usr/lib/systemd/system/nvc-health.service 0644 0:0 file",
        "./usr/lib/systemd/system/nvc-health.timer 0644 0:0 file",
        "./usr/share/containers/oci/hooks.d/oci-nvc-hook.json 0644 0:0 file",
    ] {
        assert!(files.contains(file), "no {file} in\n{files}");
    }
    let field = |f: &str| deb_field(&deb, f);
    let arch = match field("Architecture").as_str() {
        "amd64" => "x86_64".to_string(),
        other => other.to_string(),
    };
    assert_eq!(
        query(&rpm, "%{NAME} %{VERSION} %{ARCH}"),
        format!("{} {} {arch}", field("Package"), field("Version"))
    );

    // The .deb's conffiles are the RPM's %config(noreplace) files; the folders the RPM
    // owns are nvc's own and hooks.d's (containers-common owns those too, where it is).
    let conffiles = run(Command::new("dpkg-deb")
        .args(["-I"])
        .arg(&deb)
        .arg("conffiles"));
    conffiles.assert_success();
    let flags = query(
        &rpm,
        "[%{FILENAMES} %{FILEFLAGS:fflags} %{FILEMODES:perms}\n]",
    );
    let config: Vec<&str> = flags
        .lines()
        .filter(|l| l.split(' ').nth(1).is_some_and(|f| f.contains('c')))
        .collect();
    assert_eq!(
        config,
        conffiles
            .stdout
            .lines()
            .map(|c| format!("{c} cn -rw-r--r--"))
            .collect::<Vec<_>>(),
        "{flags}"
    );
    let dirs: Vec<&str> = flags
        .lines()
        .filter(|l| l.ends_with(" drwxr-xr-x"))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(
        dirs,
        [
            "/etc/nvc",
            "/usr/share/containers",
            "/usr/share/containers/oci",
            "/usr/share/containers/oci/hooks.d",
            "/usr/share/doc/nvc"
        ],
        "{flags}"
    );

    // Dependencies: the .deb's libc6 (>= the newest glibc symbol version) and libgcc-s1,
    // as rpmbuild's ELF dependency generator writes them; Recommends and Suggests.
    let depends = field("Depends");
    let glibc = depends
        .split(", ")
        .find_map(|d| d.strip_prefix("libc6 (>= ")?.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no libc6 in {depends}"));
    assert!(depends.contains("libgcc-s1"), "{depends}");
    let requires = query(&rpm, "[%{REQUIRENAME}\n]");
    let newest = requires
        .lines()
        .filter_map(|r| r.strip_prefix("libc.so.6(GLIBC_")?.strip_suffix(")(64bit)"))
        .max_by_key(|v| {
            v.split('.')
                .map(|n| n.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        });
    assert_eq!(newest, Some(glibc), "{requires}");
    assert!(
        requires.lines().any(|r| r.starts_with("libgcc_s.so.1(")),
        "{requires}"
    );
    assert_eq!(field("Recommends"), "runc | crun");
    assert_eq!(query(&rpm, "[%{RECOMMENDNAME}\n]"), "(runc or crun)\n");
    assert_eq!(field("Suggests"), "docker.io | podman | containerd");
    assert_eq!(
        query(&rpm, "[%{SUGGESTNAME}\n]"),
        "(podman or docker or moby-engine or docker-ce or containerd)\n"
    );

    // The scriptlets: %post the RPM's own (what rpm's $1 means for enabling the units),
    // %preun and %postun the .deb's prerm and postrm after a head that maps rpm's $1.
    for (tag, head, deb_script) in [
        ("POSTIN", "post", ""),
        ("PREUN", "preun", "prerm"),
        ("POSTUN", "postun", "postrm"),
    ] {
        assert_eq!(query(&rpm, &format!("%{{{tag}PROG}}")), "/bin/sh");
        let want = scriptlet(head, deb_script);
        assert_eq!(
            query(&rpm, &format!("%{{{tag}}}")).trim_end(),
            want.trim_end(),
            "{tag}"
        );
    }

    // rpmlint finds nothing but what nvc.rpmlintrc lets through, each for its reason.
    let lint = run(Command::new("rpmlint")
        .arg("-r")
        .arg(repo.join("packaging/rpm/nvc.rpmlintrc"))
        .arg(&rpm));
    lint.assert_success();
    assert!(lint.stdout.contains(" 0 errors, 0 warnings"), "{lint:?}");
}

/// `tree_digest` of `root` without the contents of rpm's database.
fn digest_without_rpm_db(root: &Path) -> String {
    tree_digest(root)
        .lines()
        .filter(|l| !l.starts_with("./var/lib/rpm/"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
#[ignore = "needs root: rpm --root and chroot need root"]
fn rpm_installs_upgrades_and_erases_back_to_the_users_config() {
    require_root("rpm --root and chroot need root");
    let dir = tempfile::tempdir().unwrap();
    let (rpm1, rpm2) = built_rpms();
    let root = dir.path().join("root");
    scratch_root(&root);
    // A host whose systemd runs, its systemctl recording what the scriptlets ask; an RPM
    // system's own folders (the `filesystem` and `systemd` packages').
    std::fs::create_dir_all(root.join("run/systemd/system")).unwrap();
    let systemctl = root.join("usr/bin/systemctl");
    std::fs::write(&systemctl, RECORDING_TOOL).unwrap();
    std::fs::set_permissions(
        &systemctl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // /var/tmp, where rpm writes the scriptlets it runs; rpm's database; /var/run/cdi,
    // where CDI specs go (the spec goes at erase, the CDI's folder stays).
    for folder in [
        "usr/share/doc",
        "usr/lib/systemd/system",
        "var/log",
        "var/tmp",
        "var/lib/rpm",
        "var/run/cdi",
    ] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    for (file, text) in [
        ("etc/docker/daemon.json", USERS_DAEMON_JSON),
        ("etc/containerd/config.toml", USERS_CONTAINERD_TOML),
    ] {
        std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
        std::fs::write(root.join(file), text).unwrap();
    }
    // A fake driver there, for the service's `nvc cdi generate`; nvc logs to its log file.
    std::fs::create_dir(root.join("fake")).unwrap();
    let fake = FakeDriverSpec::default().build(&root.join("fake")).unwrap();
    let inside = |p: &Path| Path::new("/").join(p.strip_prefix(&root).unwrap());
    std::fs::write(
        root.join("fake/config.toml"),
        format!(
            "[driver]\nroot = \"{}\"\ndev-root = \"{}\"\nproc-root = \"{}\"\n\n[hook]\npath = \"/usr/bin/nvc-hook\"\n\n[log]\nfile = \"/var/log/nvc.log\"\n",
            inside(&fake.root).display(),
            inside(&fake.dev_root).display(),
            inside(&fake.proc_root).display()
        ),
    )
    .unwrap();
    let before = digest_without_rpm_db(&root);

    let rpm = |args: &[&str]| -> Outcome {
        run(Command::new("rpm")
            .arg("--root")
            .arg(&root)
            .args(["--dbpath", "/var/lib/rpm"])
            .args(args))
    };
    let calls = || -> Vec<String> {
        let text = std::fs::read_to_string(root.join("systemd-calls")).unwrap_or_default();
        let _ = std::fs::remove_file(root.join("systemd-calls"));
        text.lines().map(str::to_string).collect()
    };
    let chroot = |args: &[&str]| {
        run(Command::new("chroot")
            .arg(&root)
            .args(args)
            .env("NVC_CONFIG", "/fake/config.toml"))
    };
    let read = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    let units = "nvc-cdi-refresh.path nvc-cdi-refresh.service nvc-health.timer";
    // What the .deb's postinst asks of systemd once deb-systemd-helper enabled the units:
    // reload, and start each enabled unit.
    let reload_and_start: Vec<String> = std::iter::once("systemctl --system daemon-reload".into())
        .chain(units.split(' ').flat_map(|u| {
            [
                format!("systemctl --quiet is-enabled {u}"),
                format!("systemctl start {u}"),
            ]
        }))
        .collect();

    // Install, --nodeps: the scratch root's rpm database lacks glibc and libgcc.
    let installed = rpm(&["-i", "--nodeps", &rpm1.to_string_lossy()]);
    installed.assert_success();
    let mut want = vec![format!("systemctl --no-reload enable {units}")];
    want.extend(reload_and_start.clone());
    assert_eq!(calls(), want, "{installed:?}");
    let unpacked = dir.path().join("unpacked");
    unpack(&rpm1, &unpacked);
    for line in tree_digest(&unpacked)
        .lines()
        .filter(|l| l.contains(" file "))
    {
        let path = line.split(' ').next().unwrap();
        let here = tree_digest(&root.join(path));
        assert_eq!(
            here.split_once(' ').unwrap().1.trim_end(),
            line.split_once(' ').unwrap().1,
            "{path} as installed"
        );
    }
    let version = chroot(&["/usr/bin/nvc", "--version"]);
    version.assert_success();
    assert!(version.stdout.starts_with("nvc 0."), "{version:?}");

    // The service's command writes the spec; the admin registers nvc with the engines and
    // edits nvc's config.
    let exec = super::deb::unit_value(
        &read("usr/lib/systemd/system/nvc-cdi-refresh.service"),
        "ExecStart",
    )
    .concat();
    let argv: Vec<&str> = exec.split_whitespace().collect();
    chroot(&argv).assert_success();
    assert!(read("var/run/cdi/nvidia.yaml").contains("/usr/bin/nvc-hook"));
    assert!(root.join("var/log/nvc.log").is_file());
    for args in [
        &["--runtime", "docker", "--gpus-alias"][..],
        &["--runtime", "containerd"],
        &["--runtime", "crio"],
    ] {
        let mut command = vec!["/usr/bin/nvc", "runtime", "configure"];
        command.extend(args);
        chroot(&command).assert_success();
    }
    let json: serde_json::Value = serde_json::from_str(&read("etc/docker/daemon.json")).unwrap();
    assert_eq!(
        json["runtimes"]["nv"]["path"], "/usr/bin/nvc-runtime",
        "{json}"
    );
    let edited = format!("{}# the admin's edit\n", read("etc/nvc/config.toml"));
    std::fs::write(root.join("etc/nvc/config.toml"), &edited).unwrap();

    // Upgrade to release 2: the units stay as the admin left them (not enabled again),
    // systemd reloads and the enabled ones start; the engines keep nvc; the edited config
    // stays (%config(noreplace), unchanged in the package: no .rpmnew).
    let upgraded = rpm(&["-U", "--nodeps", &rpm2.to_string_lossy()]);
    upgraded.assert_success();
    assert_eq!(calls(), reload_and_start, "{upgraded:?}");
    assert_eq!(
        rpm(&["-q", "nvc"]).stdout.trim(),
        format!("nvc-{VERSION}-2.x86_64")
    );
    assert_eq!(read("etc/nvc/config.toml"), edited);
    assert!(!root.join("etc/nvc/config.toml.rpmnew").exists());
    assert!(read("etc/docker/daemon.json").contains("/usr/bin/nvc-runtime"));
    assert!(read("etc/containerd/conf.d/99-nvc.toml").contains("/usr/bin/nvc-runtime"));
    assert!(read("var/run/cdi/nvidia.yaml").contains("/usr/bin/nvc-hook"));

    // Erase: the units disabled and stopped, nvc out of the engines' configs (the user's
    // files back byte for byte), its drop-ins, spec and log gone, systemd reloaded; rpm
    // keeps the edited config as .rpmsave. Nothing else of nvc is left.
    let erased = rpm(&["-e", "nvc"]);
    erased.assert_success();
    assert_eq!(
        calls(),
        [
            format!("systemctl --no-reload disable {units}"),
            format!("systemctl stop {units}"),
            "systemctl --system daemon-reload".into(),
        ],
        "{erased:?}"
    );
    assert_eq!(
        read("etc/docker/daemon.json"),
        USERS_DAEMON_JSON,
        "{erased:?}"
    );
    assert_eq!(
        read("etc/containerd/config.toml"),
        USERS_CONTAINERD_TOML,
        "{erased:?}"
    );
    assert_eq!(read("etc/nvc/config.toml.rpmsave"), edited, "{erased:?}");
    std::fs::remove_file(root.join("etc/nvc/config.toml.rpmsave")).unwrap();
    std::fs::remove_dir(root.join("etc/nvc")).unwrap();
    assert_eq!(digest_without_rpm_db(&root), before, "{erased:?}");
    assert!(!rpm(&["-q", "nvc"]).success());
}

#[test]
#[ignore = "needs root: rpm, dpkg-deb and gcc-aarch64-linux-gnu, which scripts/deps.sh installs as root"]
fn arm64_packages_hold_arm64_binaries_and_refuse_others() {
    require_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu");
    require_tool("aarch64-linux-gnu-strip", "binutils-aarch64-linux-gnu");
    let dir = tempfile::tempdir().unwrap();
    // Stand-ins, not nvc: small aarch64 programs under nvc's names, one for each, to check
    // that the packaging takes and labels aarch64 binaries. The real aarch64 build is
    // checked where it runs. The --help text comes from this build's nvc.
    let arm = dir.path().join("arm");
    std::fs::create_dir(&arm).unwrap();
    let source = dir.path().join("main.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\nint main(void) { puts(NAME); return 0; }\n",
    )
    .unwrap();
    for name in [
        "nvc",
        "nvc-runtime",
        "nvc-hook",
        "nvc-cuda-version",
        "nvc-mig-devices",
    ] {
        run(Command::new("aarch64-linux-gnu-gcc")
            .arg(format!("-DNAME=\"{name}\""))
            .arg(&source)
            .arg("-o")
            .arg(arm.join(name)))
        .assert_success();
    }
    let nvc = workspace_bin("nvc");
    let help: [&std::ffi::OsStr; 4] = [
        "--bin-dir".as_ref(),
        arm.as_os_str(),
        "--help-from".as_ref(),
        nvc.as_os_str(),
    ];
    let out = dir.path().join("out");

    let rpm = build_rpm(
        &out,
        &[&["--arch".as_ref(), "aarch64".as_ref()][..], &help].concat(),
    );
    assert_eq!(
        rpm.file_name().unwrap().to_string_lossy(),
        format!("nvc-{VERSION}-1.aarch64.rpm")
    );
    assert_eq!(query(&rpm, "%{ARCH}"), "aarch64");
    let deb = run(Command::new("bash")
        .arg(nvc_tests::repo_root().join("packaging/build-deb.sh"))
        .args(["--arch", "arm64"])
        .args(help)
        .args(["--xz-level", "0", "--out"])
        .arg(&out));
    deb.assert_success();
    let deb = PathBuf::from(deb.stdout.lines().last().unwrap());
    assert_eq!(
        deb.file_name().unwrap().to_string_lossy(),
        format!("nvc_{VERSION}_arm64.deb")
    );
    assert_eq!(deb_field(&deb, "Architecture"), "arm64");
    for package in [&rpm, &deb] {
        let files = dir.path().join(package.file_name().unwrap());
        unpack(package, &files);
        for name in [
            "nvc",
            "nvc-runtime",
            "nvc-hook",
            "nvc-cuda-version",
            "nvc-mig-devices",
        ] {
            assert_eq!(
                elf_machine(&files.join("usr/bin").join(name)),
                183,
                "{name}"
            );
        }
        let help = std::fs::read_to_string(files.join("usr/share/doc/nvc/nvc.txt")).unwrap();
        assert!(help.contains("==> nvc runtime configure --help"), "{help}");
    }
    let requires = query(&rpm, "[%{REQUIRENAME}\n]");
    assert!(
        requires.lines().any(|r| r.starts_with("libc.so.6(GLIBC_")),
        "{requires}"
    );
    let lint = run(Command::new("rpmlint")
        .arg("-r")
        .arg(nvc_tests::repo_root().join("packaging/rpm/nvc.rpmlintrc"))
        .arg(&rpm));
    assert!(lint.stdout.contains(" 0 errors, 0 warnings"), "{lint:?}");

    // Binaries of another architecture are refused, saying which they are.
    let bin_dir = nvc.parent().unwrap();
    for (script, arch, bins, found) in [
        (
            "build-rpm.sh",
            "aarch64",
            bin_dir,
            "Advanced Micro Devices X86-64",
        ),
        (
            "build-deb.sh",
            "arm64",
            bin_dir,
            "Advanced Micro Devices X86-64",
        ),
        ("build-rpm.sh", "x86_64", arm.as_path(), "AArch64"),
        ("build-deb.sh", "amd64", arm.as_path(), "AArch64"),
    ] {
        let refused = run(Command::new("bash")
            .arg(nvc_tests::repo_root().join("packaging").join(script))
            .args(["--arch", arch, "--bin-dir"])
            .arg(bins)
            .args(["--help-from"])
            .arg(&nvc)
            .arg("--out")
            .arg(dir.path().join("refused")));
        assert!(!refused.success(), "{refused:?}");
        assert!(
            refused
                .stderr
                .contains(&format!("/nvc is for {found}, not ")),
            "{refused:?}"
        );
    }
    assert!(std::fs::read_dir(dir.path().join("refused"))
        .map(|d| d.count() == 0)
        .unwrap_or(true));
}
