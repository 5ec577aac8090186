//! What the image brings besides its files: its environment (a payload library for the
//! loader), its own ldconfig, text that would forge lines of nvc's log, and CDI
//! annotations by which an unprivileged container would get GPUs under the strict policy.

use super::*;

/// Where a payload says it ran: a host path the container cannot see, and `/` +
/// [`IN_ROOT_MARKER`], which is the host's root for a host process and the rootfs for the
/// container's.
const IN_ROOT_MARKER: &str = "nvc-payload-ran";

/// A shared library whose constructor (and audit entry point, so `LD_AUDIT` loads it too)
/// appends the program it was loaded into (`/proc/self/exe`) to `host_marker` and to
/// `/nvc-payload-ran`.
fn payload_source(host_marker: &Path) -> String {
    format!(
        r#"#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
static void mark(const char *path) {{
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n < 0 ? 0 : n] = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {{ dprintf(fd, "%s\n", n > 0 ? exe : "?"); close(fd); }}
}}
__attribute__((constructor)) static void payload(void) {{
    mark("{host}");
    mark("/{IN_ROOT_MARKER}");
}}
unsigned la_version(unsigned v) {{ return v; }}
"#,
        host = host_marker.display()
    )
}

/// The programs a payload must never run in: nvc's and the runtime's.
const PRIVILEGED: [&str; 4] = ["nvc-hook", "nvc-runtime", "runc", "nvidia-container"];

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn the_image_environment_never_reaches_the_hook() {
    let lab = Lab::new();
    let host_marker = lab.path().join("payload-ran-on-the-host");
    let host_root_marker = Path::new("/").join(IN_ROOT_MARKER);
    assert!(
        !host_root_marker.exists(),
        "{} exists before the test: remove it (a payload ran on this host before?)",
        host_root_marker.display()
    );
    // The payload on the host, under names the loader looks for.
    let host_dir = lab.path().join("payload");
    std::fs::create_dir(&host_dir).unwrap();
    let poc = host_dir.join("poc.so");
    gcc(&payload_source(&host_marker), &poc, &["-shared", "-fPIC"]);
    for name in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        std::fs::copy(&poc, host_dir.join(name)).unwrap();
    }
    // Programs a PATH from the image would find first.
    let bin = host_dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"script $0\" >>{}\necho \"script $0\" >>/{IN_ROOT_MARKER}\n",
        host_marker.display()
    );
    for name in [
        "ldconfig",
        "ldconfig.real",
        "runc",
        "nvc-hook",
        "mount",
        "modprobe",
    ] {
        let p = bin.join(name);
        std::fs::write(&p, &script).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let host = host_dir.display();
    let cases: [(&str, Vec<String>, bool); 7] = [
        // CVE-2025-23266: a preload relative to the working directory, which is the
        // rootfs for a hook that runs there.
        (
            "LD_PRELOAD=/proc/self/cwd/poc.so",
            vec!["LD_PRELOAD=/proc/self/cwd/poc.so".into()],
            true,
        ),
        (
            "LD_PRELOAD=<host path>",
            vec![format!("LD_PRELOAD={host}/poc.so")],
            false,
        ),
        (
            "LD_AUDIT",
            vec![format!("LD_AUDIT=/proc/self/cwd/poc.so:{host}/poc.so")],
            true,
        ),
        (
            "LD_LIBRARY_PATH",
            vec![format!("LD_LIBRARY_PATH=/proc/self/cwd/payload-lib:{host}")],
            true,
        ),
        (
            "GLIBC_TUNABLES",
            vec![format!(
                "GLIBC_TUNABLES=glibc.malloc.check=3:glibc.malloc.mxfast=glibc.malloc.mxfast={}",
                "A".repeat(4096)
            )],
            false,
        ),
        (
            "PATH",
            vec![format!(
                "PATH=/proc/self/cwd/payload-bin:{host}/bin:{TOOLS}:/usr/sbin:/usr/bin:/sbin:/bin"
            )],
            false,
        ),
        (
            "all at once",
            vec![
                "LD_PRELOAD=/proc/self/cwd/poc.so".into(),
                format!("LD_AUDIT={host}/poc.so"),
                format!("LD_LIBRARY_PATH=/proc/self/cwd/payload-lib:{host}"),
                "GLIBC_TUNABLES=glibc.malloc.check=3".into(),
                format!("PATH=/proc/self/cwd/payload-bin:{host}/bin:{TOOLS}:/usr/bin:/bin"),
            ],
            true,
        ),
    ];
    let rt = lab.nvc();
    for (what, env, loads_inside) in cases {
        let dir = lab.fresh();
        let rootfs = dir.join("rootfs");
        let outside = Outside::new(&dir, lab.path());
        // The same payload and programs inside the rootfs, at the container's working
        // directory (`/`).
        std::fs::copy(&poc, rootfs.join("poc.so")).unwrap();
        std::fs::create_dir(rootfs.join("payload-lib")).unwrap();
        for name in ["libcuda.so.1", "libnvidia-ml.so.1"] {
            std::fs::copy(&poc, rootfs.join("payload-lib").join(name)).unwrap();
        }
        let status = Command::new("cp")
            .arg("-a")
            .arg(&bin)
            .arg(rootfs.join("payload-bin"))
            .status()
            .unwrap();
        assert!(status.success());
        let mut all = all_gpus();
        all.extend(env);
        let bundle = lab.bundle(&rootfs, &all, "/usr/bin/nvc-probe; echo done");
        // Also where the runtime and the hook run: the bundle directory.
        std::fs::copy(&poc, bundle.dir.join("poc.so")).unwrap();
        let out = rt.run(&bundle, &container_id("nvc-hostile-env"));
        assert!(
            out.success() && out.stdout.contains("done"),
            "{what}: {out:?}\n{}",
            tail(&lab.nvc_log(), 20)
        );
        assert!(
            !host_marker.exists(),
            "{what}: a payload from the image's environment ran on the host: {}",
            std::fs::read_to_string(&host_marker).unwrap_or_default()
        );
        assert!(
            !host_root_marker.exists(),
            "{what}: a payload from the image's environment ran on the host: {}",
            std::fs::read_to_string(&host_root_marker).unwrap_or_default()
        );
        let inside = std::fs::read_to_string(rootfs.join(IN_ROOT_MARKER)).unwrap_or_default();
        for line in inside.lines() {
            assert!(
                !PRIVILEGED.iter().any(|p| line.contains(p)) && !line.starts_with("script"),
                "{what}: the payload ran in {line:?}, not in the container's own program"
            );
        }
        // The payload works: the container's own dynamic program loads it, in the
        // container, where it may.
        if loads_inside {
            assert!(
                inside.lines().any(|l| l == "/usr/bin/nvc-probe"),
                "{what}: the payload never loaded, even in the container: {inside:?}\n{out:?}"
            );
        }
        outside.assert_untouched(what);
        eprintln!(
            "{what}: the container started; the payload ran in {:?}",
            inside.lines().collect::<Vec<_>>()
        );
    }
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn the_images_ldconfig_never_runs() {
    let lab = Lab::new();
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let host_marker = lab.path().join("ldconfig-ran-on-the-host");
    let payload = format!(
        "#!/bin/sh\necho \"$0 $*\" >>/ldconfig-ran\necho \"$0 $*\" >>{}\n",
        host_marker.display()
    );
    // /sbin is /usr/sbin in this rootfs: both names reach the same files.
    for name in [
        "/usr/sbin/ldconfig",
        "/usr/sbin/ldconfig.real",
        "/usr/bin/ldconfig",
        "/usr/local/sbin/ldconfig",
        "/usr/local/bin/ldconfig",
    ] {
        let p = host_path(&rootfs, name);
        remove_any(&p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &payload).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    assert!(
        !Path::new("/ldconfig-ran").exists(),
        "/ldconfig-ran exists before the test"
    );
    let bundle = lab.bundle(
        &rootfs,
        &all_gpus(),
        "nvc-probe; ls /ldconfig-ran 2>&1; true",
    );
    let out = lab
        .nvc()
        .run(&bundle, &container_id("nvc-hostile-ldconfig"));
    assert!(out.success(), "{out:?}\n{}", tail(&lab.nvc_log(), 20));
    // The cache nvc wrote natively finds the driver's libcuda.
    assert!(out.stdout.contains("libcuda=ok"), "{out:?}");
    assert!(out.stdout.contains("No such file"), "{out:?}");
    assert!(
        !rootfs.join("ldconfig-ran").exists(),
        "the image's ldconfig ran"
    );
    assert!(
        !host_marker.exists(),
        "the image's ldconfig ran on the host"
    );
    assert!(
        !Path::new("/ldconfig-ran").exists(),
        "the image's ldconfig ran on the host"
    );
    outside.assert_untouched("the image's ldconfig");
}

// ---------------------------------------------------------------------------------------
// The strict policy also holds for annotations.

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn cdi_annotations_give_no_gpu_to_unprivileged_containers_under_the_strict_policy() {
    let lab = Lab::new();
    let strict = lab.config_with("strict", |text| {
        format!("{text}\n[requests]\naccept-envvar-when-unprivileged = false\n")
    });
    let rt = Runtime::nvc(&lab.path().join("state-strict"), &strict).with_timeout(BOUND);
    let script = format!(
        "echo started; \
         if ls /dev | grep -q '^nvidia[0-9]'; then echo gpu-nodes; else echo no-gpu-nodes; fi; \
         if [ -e {LIB}/libcuda.so.1 ]; then echo libcuda; else echo no-libcuda; fi; echo done"
    );
    let annotations = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
    for privileged in [false, true] {
        let what = if privileged {
            "a privileged container (control)"
        } else {
            "an unprivileged container"
        };
        let dir = lab.fresh();
        let outside = Outside::new(&dir, lab.path());
        let bundle = lab.bundle(&dir.join("rootfs"), &[], &script);
        let bundle = if privileged {
            bundle.privileged()
        } else {
            bundle
        };
        let bundle = bundle
            .set("/annotations", annotations.clone())
            .write()
            .unwrap();
        let out = rt.run(&bundle, &container_id("nvc-hostile-strict"));
        assert!(!out.timed_out, "{what}: not done within {BOUND:?}: {out:?}");
        assert!(
            out.success() && out.stdout.contains("done"),
            "{what}: {out:?}\n{}",
            tail(&lab.nvc_log(), 20)
        );
        let want = if privileged {
            ["gpu-nodes", "libcuda"]
        } else {
            ["no-gpu-nodes", "no-libcuda"]
        };
        for line in want {
            assert!(
                out.stdout.lines().any(|l| l == line),
                "{what} with annotation {annotations} under accept-envvar-when-unprivileged \
                 = false: wanted {line:?}\n{out:?}"
            );
        }
        outside.assert_untouched(what);
    }
}

// ---------------------------------------------------------------------------------------
// Image strings in logs.

/// A line shaped like nvc's own log lines (`nvc_host::logging`).
const FORGED_LINE: &str = "1700000000.000000 nvc-hook [1] ERROR: forged-by-image";

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn image_strings_are_escaped_in_the_nvc_log_and_in_messages() {
    let lab = Lab::new();
    // A newline, then a forged log line, then an ESC sequence that clears a terminal.
    let target = format!("/nvc-missing\n{FORGED_LINE}\x1b[2J");
    let rt = lab.nvc_bounded();
    let mut problems = Vec::new();
    for path in ["/usr/bin", "/lib/firmware/nvidia/999.88.77"] {
        let dir = lab.fresh();
        let rootfs = dir.join("rootfs");
        let outside = Outside::new(&dir, lab.path());
        replace_with_link(&rootfs, path, &target);
        let bundle = lab.bundle(&rootfs, &all_gpus(), "echo started");
        let out = rt.run(&bundle, &container_id("nvc-hostile-log"));
        assert!(!out.timed_out, "{path}: not done within {BOUND:?}: {out:?}");
        assert!(!out.success(), "{path}: started: {out:?}");
        let said = message(&out);
        assert!(
            said.contains(path) && said.contains("dangling symbolic link"),
            "{path}: {said:?}\n{out:?}"
        );
        // What runc shows: nvc's message is one line, with no forged line and no ESC.
        let shown = std::iter::once(out.stderr.clone()).chain(out.log_messages());
        for text in shown.filter(|t| t.contains("nvc-hook: ")) {
            if text.contains('\x1b') {
                problems.push(format!("{path}: runc shows a raw ESC: {text:?}"));
            }
            if text.lines().any(|l| l.starts_with(FORGED_LINE)) {
                problems.push(format!(
                    "{path}: runc shows the forged line as a line of its own: {text:?}"
                ));
            }
            // From the start of nvc's message to the image's text: runc may add lines
            // after the message, the image's newline comes before its forged line.
            let at = text.find("nvc-hook: ").unwrap_or_default();
            let message = &text[at..];
            let upto = message.find("forged-by-image").unwrap_or(message.len());
            if message[..upto].contains('\n') {
                problems.push(format!(
                    "{path}: nvc's message has a raw newline: {message:?}"
                ));
            }
        }
        outside.assert_untouched(path);
    }
    let log = lab.nvc_log();
    if let Some(l) = log.lines().find(|l| l.starts_with(FORGED_LINE)) {
        problems.push(format!("the image forged a line of nvc's log: {l:?}"));
    }
    if log.contains('\x1b') {
        problems.push("nvc's log holds a raw ESC".into());
    }
    if !log.contains(&format!("\\n{FORGED_LINE}")) {
        problems.push("nvc's log does not show the link's target escaped (backslash-n)".into());
    }
    assert!(
        problems.is_empty(),
        "{}\nnvc log tail:\n{}",
        problems.join("\n"),
        tail(&log, 12)
    );
}
