//! Hostile images through real runc and nvc-runtime: root file systems built to attack the
//! hook, which runs as root on the host and works inside the container's rootfs. Links out
//! of the rootfs at every path nvc reads, writes, lists or mounts onto; the wrong kind of
//! file where nvc expects a file or a directory; a payload library in the image's
//! environment; the image's own ldconfig; a directory flipped to a link while containers
//! start; device nodes made inside the container. And the rootfs's own mount: links from
//! the paths the hook reads to files that block or belong to /proc, /sys or /dev, links
//! into a volume the spec mounts (private, shared with the host, not the user's); the
//! strict policy for annotations; image text forging nvc's log; `root.path` `/`; a state
//! whose pid is a host process; `root.readonly`.
//!
//! Every case asserts both that the attack had no effect (a sentinel tree outside the
//! rootfs, the host's mount table and `/etc/ld.so.cache` unchanged, no marker written,
//! nothing of the outside visible inside) and that the container either started or was
//! refused with a message naming the attacked path. Needs root.
//!
//! This file holds the lab every case runs in (a fake driver, a pristine rootfs, the
//! outside that must not change, runc through nvc-runtime with and without openat2) and
//! the table of cases; the attacks are in the modules, one a kind: [`links`],
//! [`file_kinds`], [`image`], [`device_nodes`], [`races`], [`mounts`], [`host_root`],
//! [`read_only`].

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nvc_tests::{
    container_id, host_mounts, mounts_under, nvc_config_for, require_root, run_command,
    run_with_stdin, tree_digest, workspace_bin, Bundle, FakeDriver, FakeDriverSpec, KillOnDrop,
    Outcome, RootfsSpec, Runtime, Sweep, TestMount, BUSYBOX_APPLETS, DEFAULT_PATH_ENV,
};
use serde_json::{json, Value};

mod device_nodes;
mod file_kinds;
mod host_root;
mod image;
mod links;
mod mounts;
mod races;
mod read_only;

/// The fake driver's version.
const VERSION: &str = "999.88.77";
/// The image's library folder.
const LIB: &str = "/usr/lib/x86_64-linux-gnu";
/// A name and a content only the outside tree has: seeing it inside is a leak.
const SENTINEL: &str = "nvc-sentinel-outside";
/// The containers' own tools: a static busybox that no attack on `/usr/bin` or the
/// library folder reaches.
const TOOLS: &str = "/.hostile/bin";
/// Containers started at once.
const WORKERS: usize = 3;
/// How long a start of a case that could hang (a blocking read, a deadline) may take: a
/// start takes about a second here, three at a time on two cores.
const BOUND: Duration = Duration::from_secs(20);

// What the hook says when it refuses, besides the path it names.
/// A path that leaves the mount of the container's root filesystem (a volume, /proc,
/// /sys, /dev, a tmpfs).
const OTHER_MOUNT: &str = "not the container's root filesystem";
/// A state whose pid is not in a container's mount namespace.
const OWN_NAMESPACE: &str = "the hook's own mount namespace";
/// `root.path` is `/`.
const HOST_ROOT: &str = "is the host's root directory";

// ---------------------------------------------------------------------------------------
// What must not change.

/// A sentinel tree outside the rootfs, and the host's view of what must not change.
struct Outside {
    dir: PathBuf,
    digest: String,
    mounts: Vec<String>,
    ld_cache: Vec<u8>,
    lab: PathBuf,
}

/// The host's mount points, less those that other processes make and remove on their
/// own while containers run: runc's transient bind mount of its own binary (`runc.XXXX`
/// in a container's state directory) and anything in another test's temporary directory.
/// A mount by the hook outside the rootfs would land anywhere else, or in `lab`.
fn host_mounts_of_interest(lab: &Path) -> Vec<String> {
    let tmp = std::env::temp_dir();
    host_mounts()
        .into_iter()
        .filter(|m| {
            let m = Path::new(m);
            if m.starts_with(lab) {
                let runc_clone = m
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("runc."));
                return !runc_clone;
            }
            !(m.starts_with(&tmp) && m != tmp)
        })
        .collect()
}

impl Outside {
    /// Writes `<base>/outside`: files named and filled like the ones nvc writes or mounts
    /// onto, each holding [`SENTINEL`], and a file named [`SENTINEL`]. `base` is in the
    /// lab's directory.
    fn new(base: &Path, lab: &Path) -> Outside {
        let dir = base.join("outside");
        for file in [
            "etc/ld.so.cache",
            "libcuda.so.1",
            "nvidia-smi",
            "nvc-sentinel-outside",
            "gsp_ga10x.bin",
            "nvidia_icd.json",
            "socket",
        ] {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, SENTINEL).unwrap();
        }
        Outside {
            digest: tree_digest(&dir),
            mounts: host_mounts_of_interest(lab),
            ld_cache: std::fs::read("/etc/ld.so.cache").unwrap_or_default(),
            lab: lab.to_path_buf(),
            dir,
        }
    }

    /// What changed, if anything.
    fn changes(&self) -> Option<String> {
        if let Some(digest) = self.tree_change() {
            return Some(format!(
                "the outside tree changed:\nbefore:\n{}after:\n{digest}",
                self.digest
            ));
        }
        let mounts = host_mounts_of_interest(&self.lab);
        if mounts != self.mounts {
            let added: Vec<&String> = mounts.iter().filter(|m| !self.mounts.contains(m)).collect();
            let gone: Vec<&String> = self.mounts.iter().filter(|m| !mounts.contains(m)).collect();
            return Some(format!(
                "the host's mount table changed: added {added:?}, removed {gone:?}"
            ));
        }
        if std::fs::read("/etc/ld.so.cache").unwrap_or_default() != self.ld_cache {
            return Some("the host's /etc/ld.so.cache changed".into());
        }
        None
    }

    /// The outside tree's digest now, if it is not what it was.
    fn tree_change(&self) -> Option<String> {
        let digest = tree_digest(&self.dir);
        (digest != self.digest).then_some(digest)
    }

    #[track_caller]
    fn assert_untouched(&self, what: &str) {
        if let Some(change) = self.changes() {
            panic!("{what}: {change}");
        }
    }
}

/// Replaces whatever is at `inner` (a path inside `rootfs`) with a link to `target`.
fn replace_with_link(rootfs: &Path, inner: &str, target: &str) {
    let p = host_path(rootfs, inner);
    remove_any(&p);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &p).unwrap();
}

/// `rootfs` joined with the in-root path `inner`, links not resolved.
fn host_path(rootfs: &Path, inner: &str) -> PathBuf {
    rootfs.join(inner.trim_start_matches('/'))
}

/// Removes what is at `p`, whatever it is; nothing if nothing is there.
fn remove_any(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).unwrap(),
        Ok(_) => std::fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

// ---------------------------------------------------------------------------------------
// The lab: one fake driver and one pristine rootfs per test.

/// Every GPU and every capability, so every kind of file is injected.
fn all_gpus() -> Vec<String> {
    vec![
        "NVIDIA_VISIBLE_DEVICES=all".to_string(),
        "NVIDIA_DRIVER_CAPABILITIES=all".to_string(),
    ]
}

struct Lab {
    dir: tempfile::TempDir,
    fake: FakeDriver,
    pristine: PathBuf,
    config: PathBuf,
    /// The configuration whose hook runs without openat2, made on first use.
    no_openat2: OnceLock<PathBuf>,
    next: AtomicUsize,
}

impl Lab {
    fn new() -> Lab {
        require_root("hostile images need runc, device nodes and mounts");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("driver")).unwrap();
        let fake = FakeDriverSpec::default()
            .build(&dir.path().join("driver"))
            .unwrap();
        let rootfs = RootfsSpec::default()
            .build(&dir.path().join("pristine"))
            .unwrap();
        let tools = host_path(&rootfs.path, TOOLS);
        std::fs::create_dir_all(&tools).unwrap();
        std::fs::copy(rootfs.path.join("usr/bin/busybox"), tools.join("busybox")).unwrap();
        for applet in BUSYBOX_APPLETS {
            std::os::unix::fs::symlink("busybox", tools.join(applet)).unwrap();
        }
        let config = nvc_config_for(&fake, dir.path()).unwrap();
        Lab {
            pristine: rootfs.path,
            dir,
            fake,
            config,
            no_openat2: OnceLock::new(),
            next: AtomicUsize::new(0),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn n(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// nvc-runtime with a state directory (and so a runc log) of its own, so that a
    /// failure's message is this runtime's.
    fn nvc(&self) -> Runtime {
        Runtime::nvc(
            &self.path().join(format!("state{}", self.n())),
            &self.config,
        )
    }

    /// nvc-runtime whose hook runs under a seccomp filter that fails `openat2` with
    /// `ENOSYS`, as on kernels before 5.6: the hook resolves container paths with its fd
    /// walk instead.
    fn nvc_without_openat2(&self) -> Runtime {
        let config = self.no_openat2.get_or_init(|| {
            let dir = self.path().join("no-openat2");
            std::fs::create_dir_all(&dir).unwrap();
            let wrapper = dir.join("nvc-hook");
            let hook = nvc_tests::workspace_bin("nvc-hook");
            let source = NO_OPENAT2.replace("@HOOK@", &hook.display().to_string());
            gcc(&source, &wrapper, &["-O2"]);
            let config = std::fs::read_to_string(&self.config).unwrap();
            let hook_line = format!("path = \"{}\"", hook.display());
            assert!(config.contains(&hook_line), "no hook path in {config}");
            let config = config.replace(&hook_line, &format!("path = \"{}\"", wrapper.display()));
            std::fs::write(dir.join("config.toml"), config).unwrap();
            dir.join("config.toml")
        });
        let state = self.path().join(format!("state{}", self.n()));
        Runtime::nvc(&state, config)
    }

    /// A fresh directory with a copy of the pristine rootfs at `<dir>/rootfs`.
    fn fresh(&self) -> PathBuf {
        let dir = self.path().join(format!("case{}", self.n()));
        std::fs::create_dir(&dir).unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(&self.pristine)
            .arg(dir.join("rootfs"))
            .status()
            .unwrap();
        assert!(status.success(), "cp -a of the pristine rootfs failed");
        dir
    }

    /// A bundle for `rootfs` in a fresh directory, running `script` with the tools first
    /// on PATH and `env` after it.
    fn bundle(&self, rootfs: &Path, env: &[String], script: &str) -> Bundle {
        let path = DEFAULT_PATH_ENV.replacen("PATH=", &format!("PATH={TOOLS}:"), 1);
        Bundle::new(&self.path().join(format!("bundle{}", self.n())), rootfs)
            .unwrap()
            .args(&[format!("{TOOLS}/sh"), "-c".into(), script.into()])
            .set("/process/env/0", json!(path))
            .env(env)
            .write()
            .unwrap()
    }

    fn nvc_log(&self) -> String {
        std::fs::read_to_string(self.path().join("nvc.log")).unwrap_or_default()
    }

    /// [`Lab::nvc`] whose every command is killed after [`BOUND`].
    fn nvc_bounded(&self) -> Runtime {
        self.nvc().with_timeout(BOUND)
    }

    /// The lab's nvc config changed by `edit`, saved as `<name>.toml` in the lab.
    fn config_with(&self, name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let path = self.path().join(format!("{name}.toml"));
        std::fs::write(&path, edit(text)).unwrap();
        path
    }

    /// `nvc-hook prestart` run directly, as a runtime would, with `state` on stdin and
    /// the nvc config `config`, killed after [`BOUND`].
    fn hook(&self, config: &Path, state: &Value) -> Outcome {
        let mut command = Command::new(workspace_bin("nvc-hook"));
        command.arg("prestart").env("NVC_CONFIG", config);
        run_with_stdin(
            &mut command,
            state.to_string().as_bytes(),
            self.path(),
            BOUND,
        )
    }
}

impl Drop for Lab {
    /// An attack that worked may have left mounts (in the host's namespace) and processes
    /// under the lab: they go before the lab's directory is removed, which would otherwise
    /// remove files through a leaked bind mount.
    fn drop(&mut self) {
        if let Some(what) = Sweep::new(self.path()).now() {
            eprintln!("lab cleanup: {what}");
        }
    }
}

/// The OCI state a runtime hands a prestart hook, for the container whose init is `pid`.
fn oci_state(pid: u32, bundle: &Bundle) -> Value {
    json!({
        "ociVersion": "1.0.2",
        "id": "nvc-hostile-direct",
        "status": "creating",
        "pid": pid,
        "bundle": bundle.dir,
    })
}

/// Runs the hook (`@HOOK@`) with `openat2` failing with `ENOSYS`.
const NO_OPENAT2: &str = r#"#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
int main(int argc, char **argv) {
    (void)argc;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        return 1;
    }
    execv("@HOOK@", argv);
    perror("execv @HOOK@");
    return 1;
}
"#;

/// The hook's message in a failed outcome (from runc's log or stderr), else the last line
/// of stderr.
fn message(out: &Outcome) -> String {
    let said = format!("{}\n{}", out.stderr, out.log_messages().join("\n"));
    if let Some(at) = said.find("nvc-hook: ") {
        let rest = &said[at..];
        let end = rest.find('\n').unwrap_or(rest.len());
        return rest[..end].trim_end().to_string();
    }
    said.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no message)")
        .to_string()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Compiles `source` (C) with gcc into `out`, with `flags`.
fn gcc(source: &str, out: &Path, flags: &[&str]) {
    let src = out.with_extension("c");
    std::fs::write(&src, source).unwrap();
    let output = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "gcc {}: {}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Cases.

/// What a case must end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The container started and ran its script.
    Starts,
    /// The container was refused with a message naming the attacked path and saying this.
    Refused(&'static str),
}

type Plant = Box<dyn Fn(&Path, &Path) + Send + Sync>;

/// One hostile rootfs.
struct Case {
    /// Says which case failed.
    name: String,
    /// The path attacked, inside the container: a refusal names it, and nothing of the
    /// outside may be visible there.
    attacked: String,
    /// Makes the rootfs hostile: called with the rootfs and the outside tree.
    plant: Plant,
    /// How it must end.
    expect: Expect,
    /// Shell commands run in the container when it starts, each with a line it must print.
    checks: Vec<(String, String)>,
    /// A host folder the spec mounts at `/data`, if any.
    volume: Option<Volume>,
    /// Whether the container asks for every GPU and capability (else for nothing).
    gpus: bool,
}

impl Case {
    fn new(
        name: String,
        attacked: &str,
        plant: impl Fn(&Path, &Path) + Send + Sync + 'static,
        expect: Expect,
    ) -> Case {
        Case {
            name,
            attacked: attacked.to_string(),
            plant: Box::new(plant),
            expect,
            checks: Vec::new(),
            volume: None,
            gpus: true,
        }
    }

    /// Runs `command` in the container, which must print `line`.
    fn checking(mut self, command: &str, line: &str) -> Case {
        self.checks.push((command.to_string(), line.to_string()));
        self
    }

    /// Mounts a host folder of `kind` at `/data`.
    fn with_volume(mut self, kind: Volume) -> Case {
        self.volume = Some(kind);
        self
    }

    /// Asks for no GPU: a control, where nvc does nothing.
    fn without_gpus(mut self) -> Case {
        self.gpus = false;
        self
    }
}

/// The script every case's container runs: it says it started, looks for the outside's
/// sentinel everywhere and at the attacked path, runs the case's check, and says done.
fn case_script(attacked: &str, check: Option<&str>) -> String {
    format!(
        "echo started; \
         find / \\( -path /proc -o -path /sys \\) -prune -o -name '{SENTINEL}*' -print 2>/dev/null | sed 's/^/LEAK name /'; \
         p='{attacked}'; \
         if [ -f \"$p\" ] && grep -q {SENTINEL} \"$p\" 2>/dev/null; then echo \"LEAK content $p\"; fi; \
         if [ -d \"$p\" ] && ls -a \"$p/\" 2>/dev/null | grep -q {SENTINEL}; then echo \"LEAK listing $p\"; fi; \
         {}; echo done",
        check.unwrap_or("true")
    )
}

/// Runs `case` in a fresh rootfs: `Ok` with a one-line outcome, or `Err` saying what went
/// wrong.
fn run_case(lab: &Lab, nvc: &Runtime, case: &Case) -> Result<String, String> {
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    // Made before the outside's snapshot: a shared volume is a mount of the host's.
    let volume = case.volume.map(|kind| VolumeDir::new(&dir, kind));
    let outside = Outside::new(&dir, lab.path());
    (case.plant)(&rootfs, &outside.dir);
    let checks: Vec<&str> = case.checks.iter().map(|(c, _)| c.as_str()).collect();
    let checks = checks.join("; ");
    let script = case_script(
        &case.attacked,
        (!checks.is_empty()).then_some(checks.as_str()),
    );
    let env = if case.gpus { all_gpus() } else { Vec::new() };
    let mut bundle = lab.bundle(&rootfs, &env, &script);
    if let Some(volume) = &volume {
        bundle = volume.mount_in(bundle);
    }
    let out = nvc.run(&bundle, &container_id("nvc-hostile"));
    // A case that failed may have left mounts in its directory (a shared volume's, or
    // the hook's own): they go now, so that they do not show up in other cases.
    let fail = |why: String| {
        let swept = Sweep::new(&dir)
            .now()
            .map(|s| format!("\n(cleanup: {s})"))
            .unwrap_or_default();
        Err(format!("{}: {why}{swept}\n{out:?}", case.name))
    };
    if let Some(after) = outside.tree_change() {
        return fail(format!(
            "the outside tree changed:\nbefore:\n{}after:\n{after}",
            outside.digest
        ));
    }
    if let Some(change) = volume.as_ref().and_then(VolumeDir::changes) {
        return fail(change);
    }
    if let Some(change) = outside.changes() {
        return fail(change);
    }
    if let Some(leak) = out.stdout.lines().find(|l| l.starts_with("LEAK")) {
        return fail(format!("the outside is visible inside: {leak}"));
    }
    if out.timed_out {
        return fail(format!(
            "the start did not end within {:?} and was killed",
            nvc.timeout
        ));
    }
    let outcome = if out.success() {
        if !(out.stdout.contains("started") && out.stdout.contains("done")) {
            return fail("exited 0 without running its script".into());
        }
        for (_, want) in &case.checks {
            if !out.stdout.lines().any(|l| l == want) {
                return fail(format!("the container did not print {want:?}"));
            }
        }
        "started".to_string()
    } else {
        let said = message(&out);
        if !said.contains(&case.attacked) {
            return fail(format!(
                "refused without naming {}: {said:?}",
                case.attacked
            ));
        }
        format!("refused: {said}")
    };
    let judged = match case.expect {
        Expect::Starts if !outcome.starts_with("started") => {
            Err(format!("should start, but {outcome}"))
        }
        Expect::Refused(_) if outcome.starts_with("started") => {
            Err("should be refused, but started".to_string())
        }
        Expect::Refused(says) if !outcome.contains(says) => {
            Err(format!("the refusal does not say {says:?}: {outcome}"))
        }
        _ => Ok(outcome),
    };
    match judged {
        Ok(outcome) => {
            drop(volume);
            let _ = std::fs::remove_dir_all(&dir);
            let _ = std::fs::remove_dir_all(&bundle.dir);
            Ok(outcome)
        }
        Err(why) => fail(why),
    }
}

/// Runs every case, [`WORKERS`] at a time, prints a table of outcomes, and fails listing
/// every case that went wrong.
fn run_all(lab: &Lab, cases: &[Case]) {
    run_all_with(lab, cases, Lab::nvc, "");
}

/// [`run_all`] with nvc-runtime from `nvc`, `label` before each case's name.
fn run_all_with(lab: &Lab, cases: &[Case], nvc: fn(&Lab) -> Runtime, label: &str) {
    run_cases(lab, cases, nvc, label, WORKERS);
}

/// [`run_all_with`], `workers` cases at a time.
fn run_cases(lab: &Lab, cases: &[Case], nvc: fn(&Lab) -> Runtime, label: &str, workers: usize) {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<String, String>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let runtime = nvc(lab);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let result = run_case(lab, &runtime, case);
                    results.lock().unwrap().push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    let mut failures = Vec::new();
    for (i, result) in results {
        // The rootfs path in messages differs from run to run; the table leaves it out.
        match result {
            Ok(outcome) => eprintln!(
                "{label}{:<56} {}",
                cases[i].name,
                outcome.replace(lab.path().to_string_lossy().as_ref(), "…")
            ),
            Err(e) => {
                eprintln!("{label}{:<56} FAILED", cases[i].name);
                failures.push(format!("{label}{e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} hostile cases failed:\n\n{}\n\nnvc log tail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n"),
        tail(&lab.nvc_log(), 40)
    );
}

// ---------------------------------------------------------------------------------------
// Volumes: a host folder the spec mounts into the container.

/// A host folder a container engine mounts into the container (a volume), at `/data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Volume {
    /// `rbind`, `rprivate`.
    Private,
    /// A shared mount on the host, mounted `rbind`, `rshared` with the rootfs's
    /// propagation shared, as Docker does for a shared volume: a mount made under it in
    /// the container shows up on the host, and stays there.
    Shared,
    /// Root's, mode 0755, and the container runs as 1000:1000, who cannot write to it.
    NotTheUsers,
}

/// Where a container mounts its volume.
const VOLUME_AT: &str = "/data";

/// A volume's folder on the host, in a case's directory.
struct VolumeDir {
    kind: Volume,
    path: PathBuf,
    digest: String,
    /// The shared bind mount, for [`Volume::Shared`]; unmounted when dropped.
    _shared: Option<TestMount>,
}

impl VolumeDir {
    /// `<case_dir>/volume`: a file and a folder `fw` with a file, root's, 0755 and 0644.
    fn new(case_dir: &Path, kind: Volume) -> VolumeDir {
        let path = case_dir.join("volume");
        std::fs::create_dir_all(path.join("fw")).unwrap();
        std::fs::write(path.join("volume-file"), "volume").unwrap();
        std::fs::write(path.join("fw/volume-firmware"), "volume").unwrap();
        for (p, mode) in [
            (path.clone(), 0o755),
            (path.join("fw"), 0o755),
            (path.join("volume-file"), 0o644),
            (path.join("fw/volume-firmware"), 0o644),
        ] {
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
        let shared = (kind == Volume::Shared).then(|| TestMount::shared(&path).unwrap());
        VolumeDir {
            kind,
            digest: tree_digest(&path),
            path,
            _shared: shared,
        }
    }

    /// `bundle` with the volume mounted at [`VOLUME_AT`], saved.
    fn mount_in(&self, bundle: Bundle) -> Bundle {
        let propagation = match self.kind {
            Volume::Shared => "rshared",
            _ => "rprivate",
        };
        let mut bundle = bundle.set(
            "/mounts/-",
            json!({"destination": VOLUME_AT, "type": "bind", "source": self.path,
                   "options": ["rbind", propagation]}),
        );
        match self.kind {
            Volume::Private => {}
            Volume::Shared => bundle = bundle.set("/linux/rootfsPropagation", json!("shared")),
            Volume::NotTheUsers => {
                bundle = bundle.set("/process/user", json!({"uid": 1000, "gid": 1000}))
            }
        }
        bundle.write().unwrap()
    }

    /// What changed in the volume, or was left mounted under it, if anything.
    fn changes(&self) -> Option<String> {
        let left: Vec<PathBuf> = mounts_under(&self.path)
            .into_iter()
            .filter(|m| *m != self.path)
            .collect();
        let digest = tree_digest(&self.path);
        let mut changes = Vec::new();
        if !left.is_empty() {
            changes.push(format!(
                "mounts remain under the {:?} volume after the container is gone: {left:?}",
                self.kind
            ));
        }
        if digest != self.digest {
            changes.push(format!(
                "the {:?} volume changed:\n{}",
                self.kind,
                digest_diff(&self.digest, &digest)
            ));
        }
        (!changes.is_empty()).then(|| changes.join("\n"))
    }
}

/// The lines of two [`tree_digest`]s that differ: `-` only before, `+` only after.
fn digest_diff(before: &str, after: &str) -> String {
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    let new: std::collections::BTreeSet<&str> = after.lines().collect();
    let mut out: Vec<String> = old.difference(&new).map(|l| format!("- {l}")).collect();
    out.extend(new.difference(&old).map(|l| format!("+ {l}")));
    out.join("\n")
}

// ---------------------------------------------------------------------------------------
// Hostile links, planted at paths the hook touches.

/// The kinds of hostile link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkKind {
    /// To the outside tree's host path.
    Absolute,
    /// `../../…` climbing out of the rootfs to the outside tree.
    DotDot,
    /// Through the container's init's root: the host's `/` until runc pivots.
    Proc1Root,
    /// Through the container's init's working directory.
    Proc1Cwd,
    /// Through the resolving process's root.
    ProcSelfRoot,
    /// Through the resolving process's working directory.
    ProcSelfCwd,
    /// Through the resolving thread's root.
    ThreadSelfRoot,
    /// A magic file-descriptor link.
    ProcSelfFd,
    /// 41 links in a row, the last to the outside.
    Chain41,
    /// `a -> b -> a`.
    Loop,
    /// To a path missing inside the rootfs.
    Dangling,
}

impl LinkKind {
    const ALL: [LinkKind; 11] = [
        LinkKind::Absolute,
        LinkKind::DotDot,
        LinkKind::Proc1Root,
        LinkKind::Proc1Cwd,
        LinkKind::ProcSelfRoot,
        LinkKind::ProcSelfCwd,
        LinkKind::ThreadSelfRoot,
        LinkKind::ProcSelfFd,
        LinkKind::Chain41,
        LinkKind::Loop,
        LinkKind::Dangling,
    ];

    fn name(self) -> &'static str {
        match self {
            LinkKind::Absolute => "absolute",
            LinkKind::DotDot => "../ escape",
            LinkKind::Proc1Root => "/proc/1/root",
            LinkKind::Proc1Cwd => "/proc/1/cwd",
            LinkKind::ProcSelfRoot => "/proc/self/root",
            LinkKind::ProcSelfCwd => "/proc/self/cwd",
            LinkKind::ThreadSelfRoot => "/proc/thread-self/root",
            LinkKind::ProcSelfFd => "/proc/self/fd/N",
            LinkKind::Chain41 => "41-link chain",
            LinkKind::Loop => "loop",
            LinkKind::Dangling => "dangling",
        }
    }

    /// The target of a link of this kind at `inner` in `rootfs` aimed at `outside` (a
    /// host path); makes the links a chain or a loop needs on the way.
    fn target(self, rootfs: &Path, inner: &str, outside: &Path) -> String {
        let out = outside.display().to_string();
        let climb = "../".repeat(24);
        let out_rel = out.trim_start_matches('/');
        match self {
            LinkKind::Absolute => out,
            LinkKind::DotDot => format!("{climb}{out_rel}"),
            LinkKind::Proc1Root => format!("/proc/1/root{out}"),
            LinkKind::Proc1Cwd => format!("/proc/1/cwd/{climb}{out_rel}"),
            LinkKind::ProcSelfRoot => format!("/proc/self/root{out}"),
            LinkKind::ProcSelfCwd => format!("/proc/self/cwd/{climb}{out_rel}"),
            LinkKind::ThreadSelfRoot => format!("/proc/thread-self/root{out}"),
            LinkKind::ProcSelfFd => "/proc/self/fd/3".to_string(),
            LinkKind::Chain41 => {
                let chain = rootfs.join(".chain");
                std::fs::create_dir_all(&chain).unwrap();
                for k in 1..40 {
                    let link = chain.join(k.to_string());
                    std::os::unix::fs::symlink(format!("/.chain/{}", k + 1), link).unwrap();
                }
                std::os::unix::fs::symlink(&out, chain.join("40")).unwrap();
                "/.chain/1".to_string()
            }
            LinkKind::Loop => {
                let dir = rootfs.join(".loop");
                std::fs::create_dir_all(&dir).unwrap();
                std::os::unix::fs::symlink(inner, dir.join("b")).unwrap();
                "/.loop/b".to_string()
            }
            LinkKind::Dangling => "/nvc-missing/target".to_string(),
        }
    }

    /// Puts a link of this kind at `inner` in `rootfs`, aimed at `outside`.
    fn plant(self, rootfs: &Path, inner: &str, outside: &Path) {
        let target = self.target(rootfs, inner, outside);
        replace_with_link(rootfs, inner, &target);
    }

    /// Whether the hook, resolving inside the rootfs, meets a loop, too long a chain or a
    /// magic link (`ELOOP`) rather than a missing target. `/proc/self` is missing for the
    /// hook: it is not in the container's pid namespace, whose procfs runc has mounted.
    fn unfollowable(self) -> bool {
        matches!(
            self,
            LinkKind::Proc1Root | LinkKind::Proc1Cwd | LinkKind::Chain41 | LinkKind::Loop
        )
    }
}
