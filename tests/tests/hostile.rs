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

#![allow(clippy::unwrap_used)]

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
// Links at every path nvc touches.

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

/// Every path inside the image that nvc reads, writes, lists or mounts onto (or that
/// holds one), the folders of the loaders' json files, and the IPC endpoints' folders.
const LINKED_PATHS: &[&str] = &[
    LIB,
    "/usr/bin",
    "/lib/firmware",
    "/lib/firmware/nvidia/999.88.77",
    "/etc",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf.d",
    "/usr/local/cuda/compat",
    "/dev",
    "/proc/driver/nvidia",
    "/usr/share/vulkan/icd.d",
    "/usr/share/vulkan/implicit_layer.d",
    "/usr/share/glvnd/egl_vendor.d",
    "/usr/share/egl/egl_external_platform.d",
    "/etc/vulkan/icd.d",
    "/run/nvidia-persistenced",
    "/run/nvidia-fabricmanager",
    "/tmp/nvidia-mps",
    "/var/run",
];

/// What a link of `kind` at `path` must end in, and what the container then checks.
fn link_case(path: &'static str, kind: LinkKind) -> Case {
    let name = format!("{path} -> {}", kind.name());
    let plant = move |rootfs: &Path, outside: &Path| kind.plant(rootfs, path, outside);
    match path {
        // runc (1.1) makes its /dev links by joining the rootfs path, which follows a
        // linked /dev out of the rootfs before any hook runs: nvc-runtime refuses it.
        "/dev" => Case::new(
            name,
            path,
            plant,
            Expect::Refused("/dev is a symbolic link"),
        ),
        // A link is never a mount point.
        "/tmp/nvidia-mps" => Case::new(name, path, plant, Expect::Refused("it is a symbolic link")),
        // The library folder is a directory only if it resolves to one inside the rootfs;
        // else the libraries go to /usr/lib64, which the image has.
        LIB => Case::new(name, path, plant, Expect::Starts).checking(
            &format!("[ -f /usr/lib64/libcuda.so.{VERSION} ] && echo libraries-in-lib64"),
            "libraries-in-lib64",
        ),
        // The cache is read through the link (inside the rootfs) and written by
        // replacing the link, never through it.
        "/etc/ld.so.cache" => Case::new(name, path, plant, Expect::Starts).checking(
            "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
            "cache-replaced",
        ),
        // Listed inside the rootfs (compat), or never touched by nvc (the image's own
        // configuration; /proc, over which runc mounts procfs).
        "/etc/ld.so.conf.d"
        | "/usr/local/cuda/compat"
        | "/proc/driver/nvidia"
        | "/etc/vulkan/icd.d"
        | "/var/run" => Case::new(name, path, plant, Expect::Starts),
        // A folder nvc mounts into: nothing is made along the link.
        _ if kind.unfollowable() => Case::new(
            name,
            path,
            plant,
            Expect::Refused("cannot be followed inside the container"),
        ),
        _ => Case::new(
            name,
            path,
            plant,
            Expect::Refused("is a dangling symbolic link"),
        ),
    }
}

#[test]
fn hostile_links_never_reach_outside_the_rootfs() {
    let lab = Lab::new();
    let cases: Vec<Case> = LINKED_PATHS
        .iter()
        .flat_map(|path| LinkKind::ALL.map(|kind| link_case(path, kind)))
        .collect();
    run_all(&lab, &cases);
    // The same with the hook's fd walk, as on kernels without openat2: the same outcomes.
    run_all_with(&lab, &cases, Lab::nvc_without_openat2, "[no openat2] ");
    assert!(
        lab.nvc_log().contains("paths resolved with FdWalk"),
        "the hook never ran without openat2"
    );
}

// ---------------------------------------------------------------------------------------
// The wrong kind of file, and files already there.

/// What can be where nvc expects something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thing {
    Dir,
    Fifo,
    Socket,
    CharDevice,
    File,
}

impl Thing {
    fn name(self) -> &'static str {
        match self {
            Thing::Dir => "a directory",
            Thing::Fifo => "a fifo",
            Thing::Socket => "a socket",
            Thing::CharDevice => "the character device 1:3",
            Thing::File => "a regular file",
        }
    }

    fn plant(self, rootfs: &Path, inner: &str) {
        let p = host_path(rootfs, inner);
        remove_any(&p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let made = match self {
            Thing::Dir => {
                std::fs::create_dir(&p).unwrap();
                // Something inside, so replacing it would lose data.
                std::fs::write(p.join("image-file"), "image").unwrap();
                true
            }
            Thing::File => {
                std::fs::write(&p, "image").unwrap();
                true
            }
            Thing::Fifo => Command::new("mkfifo").arg(&p).status().unwrap().success(),
            Thing::Socket => {
                drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
                true
            }
            Thing::CharDevice => Command::new("mknod")
                .arg(&p)
                .args(["c", "1", "3"])
                .status()
                .unwrap()
                .success(),
        };
        assert!(made, "cannot make {} at {}", self.name(), p.display());
    }
}

#[test]
fn the_wrong_kind_of_file_is_refused_and_files_there_are_replaced_or_mounted_over() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    let libcuda = format!("{LIB}/libcuda.so.{VERSION}");
    let soname = format!("{LIB}/libcuda.so.1");
    let firmware = format!("/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin");
    let wrong: Vec<(String, Vec<Thing>)> = vec![
        // Mount points for files.
        (
            libcuda.clone(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        (
            "/usr/bin/nvidia-smi".into(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        (firmware, vec![Thing::Dir, Thing::Fifo]),
        (
            "/usr/share/vulkan/icd.d/nvidia_icd.json".into(),
            vec![Thing::Dir, Thing::Fifo],
        ),
        (
            "/run/nvidia-persistenced/socket".into(),
            vec![Thing::Dir, Thing::Socket],
        ),
        // A mount point for a directory.
        ("/tmp/nvidia-mps".into(), vec![Thing::File, Thing::Fifo]),
        // A file nvc reads and replaces.
        (
            "/etc/ld.so.cache".into(),
            vec![Thing::Dir, Thing::Fifo, Thing::Socket, Thing::CharDevice],
        ),
        // A link nvc makes.
        (soname.clone(), vec![Thing::Dir, Thing::Fifo]),
    ];
    for (path, things) in wrong {
        for thing in things {
            let inner = path.clone();
            cases.push(Case::new(
                format!("{path} is {}", thing.name()),
                &path,
                move |rootfs, _| thing.plant(rootfs, &inner),
                Expect::Refused(thing.name()),
            ));
        }
    }

    // Files and links already where nvc puts its own.
    let replaced = format!("[ \"$(readlink {soname})\" = libcuda.so.{VERSION} ] && echo replaced");
    let s = soname.clone();
    cases.push(
        Case::new(
            format!("{soname} is the image's own file"),
            &soname,
            move |rootfs, _| Thing::File.plant(rootfs, &s),
            Expect::Starts,
        )
        .checking(&replaced, "replaced"),
    );
    for kind in [LinkKind::Absolute, LinkKind::Proc1Root, LinkKind::DotDot] {
        let s = soname.clone();
        cases.push(
            Case::new(
                format!("{soname} -> {} libcuda.so.1", kind.name()),
                &soname,
                move |rootfs, outside| {
                    let target = kind.target(rootfs, &s, &outside.join("libcuda.so.1"));
                    replace_with_link(rootfs, &s, &target);
                },
                Expect::Starts,
            )
            .checking(&replaced, "replaced"),
        );
    }
    let mesa = format!("{LIB}/libGLX_indirect.so.0");
    cases.push(
        Case::new(
            format!("{mesa} -> libGLX_mesa.so.0 (Mesa)"),
            &mesa,
            |rootfs, _| {
                let lib = host_path(rootfs, LIB);
                std::fs::write(lib.join("libGLX_mesa.so.0"), "mesa").unwrap();
                replace_with_link(rootfs, &format!("{LIB}/libGLX_indirect.so.0"), "libGLX_mesa.so.0");
            },
            Expect::Starts,
        )
        .checking(
            &format!("[ \"$(readlink {mesa})\" = libGLX_nvidia.so.0 ] && [ -f {LIB}/libGLX_mesa.so.0 ] && echo replaced"),
            "replaced",
        ),
    );
    let l = libcuda.clone();
    cases.push(Case::new(
        format!("{libcuda} -> absolute libcuda.so.1"),
        &libcuda,
        move |rootfs, outside| {
            replace_with_link(
                rootfs,
                &l,
                &outside.join("libcuda.so.1").display().to_string(),
            )
        },
        Expect::Refused("it is a symbolic link"),
    ));
    cases.push(
        Case::new(
            "/usr/bin/nvidia-smi is the image's own file".into(),
            "/usr/bin/nvidia-smi",
            |rootfs, _| {
                let p = host_path(rootfs, "/usr/bin/nvidia-smi");
                std::fs::write(&p, "#!/bin/sh\necho image-smi\n").unwrap();
            },
            Expect::Starts,
        )
        .checking(
            "grep -q image-smi /usr/bin/nvidia-smi || echo mounted-over",
            "mounted-over",
        ),
    );
    cases.push(Case::new(
        "/usr/bin/nvidia-smi -> absolute nvidia-smi".into(),
        "/usr/bin/nvidia-smi",
        |rootfs, outside| {
            replace_with_link(
                rootfs,
                "/usr/bin/nvidia-smi",
                &outside.join("nvidia-smi").display().to_string(),
            )
        },
        Expect::Refused("it is a symbolic link"),
    ));
    cases.push(
        Case::new(
            "/etc/ld.so.cache -> absolute ld.so.cache".into(),
            "/etc/ld.so.cache",
            |rootfs, outside| {
                replace_with_link(
                    rootfs,
                    "/etc/ld.so.cache",
                    &outside.join("etc/ld.so.cache").display().to_string(),
                )
            },
            Expect::Starts,
        )
        .checking(
            "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
            "cache-replaced",
        ),
    );
    // A hard link to a file outside the rootfs (same file system): the cache is
    // replaced by a rename, never written into.
    cases.push(
        Case::new(
            "/etc/ld.so.cache is a hard link to a file outside".into(),
            "/etc/ld.so.cache",
            |rootfs, outside| {
                let p = host_path(rootfs, "/etc/ld.so.cache");
                remove_any(&p);
                std::fs::hard_link(outside.join("etc/ld.so.cache"), &p).unwrap();
            },
            Expect::Starts,
        )
        .checking(
            "grep -q nvc-sentinel /etc/ld.so.cache || echo cache-replaced",
            "cache-replaced",
        ),
    );
    // CUDA compat libraries that lead to the host (CVE-2024-0132, CVE-2025-23359): nvc
    // only lists the folder's names for the cache, and never mounts or opens them.
    for kind in [
        LinkKind::Proc1Cwd,
        LinkKind::Proc1Root,
        LinkKind::ProcSelfRoot,
        LinkKind::Absolute,
    ] {
        let file = "/usr/local/cuda/compat/libcuda.so.1000.1.2";
        cases.push(
            Case::new(
                format!("{file} -> {} libcuda.so.1", kind.name()),
                file,
                move |rootfs, outside| {
                    let target = kind.target(rootfs, file, &outside.join("libcuda.so.1"));
                    replace_with_link(rootfs, file, &target);
                    replace_with_link(
                        rootfs,
                        "/usr/local/cuda/compat/libcuda.so.1",
                        "libcuda.so.1000.1.2",
                    );
                },
                Expect::Starts,
            )
            .checking(
                "[ -L /usr/local/cuda/compat/libcuda.so.1000.1.2 ] && echo compat-untouched",
                "compat-untouched",
            ),
        );
    }
    run_all(&lab, &cases);
}

// ---------------------------------------------------------------------------------------
// The image's environment and programs.

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
// Device nodes made inside (CVE-2021-1056).

/// What opening a device node says when the device cgroup forbids it.
const DENIED: &str = "Operation not permitted";

/// Whether the outcome of opening a node says the open got past the device cgroup to the
/// driver: it opened, or the driver is not loaded (the fake tree's 195:N on a machine
/// without a GPU: ENXIO). Not a missing file, not EPERM.
fn reached_the_driver(line: &str) -> bool {
    !line.contains(DENIED) && (line.ends_with(": opened") || line.contains("No such device"))
}

#[test]
fn a_node_made_inside_for_another_gpu_cannot_be_opened() {
    let lab = Lab::new();
    let minors: Vec<u32> = lab
        .fake
        .spec
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.minor)
        .collect();
    // GPU index 1 is given; the node of index 0 is made inside, as root with CAP_MKNOD.
    let (given, other) = (minors[1], minors[0]);
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let mut script = format!("mknod /dev/nvidia{other} c 195 {other} || echo mknod-failed; ");
    for p in [
        format!("/dev/nvidia{given}"),
        "/dev/nvidiactl".to_string(),
        format!("/dev/nvidia{other}"),
    ] {
        script.push_str(&format!(
            "if err=$(cat {p} 2>&1 >/dev/null); then echo \"{p}: opened\"; else echo \"{p}: $err\"; fi; "
        ));
    }
    script.push_str("echo done");
    let caps = json!(["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_MKNOD"]);
    let bundle = lab
        .bundle(
            &rootfs,
            &[
                "NVIDIA_VISIBLE_DEVICES=1".to_string(),
                "NVIDIA_DRIVER_CAPABILITIES=all".to_string(),
            ],
            &script,
        )
        .set("/process/capabilities/bounding", caps.clone())
        .set("/process/capabilities/effective", caps.clone())
        .set("/process/capabilities/permitted", caps)
        .write()
        .unwrap();
    let out = lab.nvc().run(&bundle, &container_id("nvc-hostile-mknod"));
    assert!(out.success() && out.stdout.contains("done"), "{out:?}");
    let line = |p: &str| -> String {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{p}: ")))
            .unwrap_or_else(|| panic!("no result for {p}: {out:?}"))
            .to_string()
    };
    assert!(!out.stdout.contains("mknod-failed"), "{out:?}");
    for granted in [format!("/dev/nvidia{given}"), "/dev/nvidiactl".to_string()] {
        let l = line(&granted);
        assert!(reached_the_driver(&l), "{granted} is the container's: {l}");
    }
    let l = line(&format!("/dev/nvidia{other}"));
    assert!(
        l.contains(DENIED),
        "/dev/nvidia{other} was made inside for a GPU the container was not given: {l}"
    );
    outside.assert_untouched("mknod of another GPU");
}

// ---------------------------------------------------------------------------------------
// A race: directories flipped to links while containers start.

/// Swaps each pair of paths with `renameat2(RENAME_EXCHANGE)` in a tight loop until the
/// file named first exists, then prints how many swaps it made.
const RACER: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
int main(int argc, char **argv) {
    unsigned long swaps = 0, i = 0;
    for (;;) {
        if ((i++ & 255) == 0 && access(argv[1], F_OK) == 0)
            break;
        for (int k = 2; k + 1 < argc; k += 2)
            if (syscall(SYS_renameat2, AT_FDCWD, argv[k], AT_FDCWD, argv[k + 1],
                        RENAME_EXCHANGE) == 0)
                swaps++;
    }
    printf("%lu\n", swaps);
    return 0;
}
"#;

/// Container starts in the race, unless `NVC_RACE_STARTS` says otherwise.
const RACE_STARTS: usize = 2000;

#[test]
fn directories_flipped_to_links_while_containers_start_change_nothing_outside() {
    let lab = Lab::new();
    let starts: usize = std::env::var("NVC_RACE_STARTS")
        .ok()
        .map(|v| v.parse().expect("NVC_RACE_STARTS must be a number"))
        .unwrap_or(RACE_STARTS);
    let racer = lab.path().join("racer");
    gcc(RACER, &racer, &["-O2"]);
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    // A compat folder newer than the driver, so the hook lists it, and the firmware
    // folder the hook mounts into.
    let compat = rootfs.join("usr/local/cuda/compat");
    std::fs::create_dir_all(&compat).unwrap();
    std::fs::write(compat.join("libcuda.so.1000.1.2"), "compat").unwrap();
    std::os::unix::fs::symlink("libcuda.so.1000.1.2", compat.join("libcuda.so.1")).unwrap();
    std::fs::create_dir_all(rootfs.join("usr/lib/firmware/nvidia").join(VERSION)).unwrap();
    // Each real folder and a link to the outside beside it, swapped again and again. The
    // firmware folder is reached by the hook as /lib/firmware/nvidia (/lib -> usr/lib).
    let flipped = [
        (LIB, LinkKind::Absolute),
        ("/usr/local/cuda/compat", LinkKind::DotDot),
        ("/usr/lib/firmware/nvidia", LinkKind::Proc1Root),
    ];
    let mut racer_args = vec![dir.join("stop")];
    for (path, kind) in flipped {
        let real = host_path(&rootfs, path);
        let swap = real.with_extension("nvc-swap");
        let target = kind.target(&rootfs, path, &outside.dir);
        std::os::unix::fs::symlink(target, &swap).unwrap();
        racer_args.extend([real, swap]);
    }
    let named = [LIB, "/usr/local/cuda/compat", "/lib/firmware/nvidia"];
    let script = case_script(LIB, None);

    let racing = Command::new(&racer)
        .args(&racer_args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let begun = Instant::now();
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Result<String, String>>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                let rt = lab.nvc();
                while next.fetch_add(1, Ordering::Relaxed) < starts {
                    let bundle = lab.bundle(&rootfs, &all_gpus(), &script);
                    let out = rt.run(&bundle, &container_id("nvc-race"));
                    let _ = std::fs::remove_dir_all(&bundle.dir);
                    let result =
                        if let Some(leak) = out.stdout.lines().find(|l| l.starts_with("LEAK")) {
                            Err(format!("the outside is visible inside: {leak}\n{out:?}"))
                        } else if out.success() && out.stdout.contains("done") {
                            Ok("started".to_string())
                        } else if out.timed_out {
                            Err(format!("timed out\n{out:?}"))
                        } else {
                            let said = message(&out);
                            if named.iter().any(|p| said.contains(p)) {
                                Ok(said)
                            } else {
                                Err(format!("refused without naming a flipped folder\n{out:?}"))
                            }
                        };
                    outcomes.lock().unwrap().push(result);
                }
            });
        }
    });
    let elapsed = begun.elapsed();
    std::fs::write(dir.join("stop"), "").unwrap();
    let output = racing.wait_with_output().unwrap();
    let swaps: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0);

    outside.assert_untouched("the race");
    let outcomes = outcomes.into_inner().unwrap();
    assert_eq!(outcomes.len(), starts);
    let failures: Vec<&String> = outcomes.iter().filter_map(|r| r.as_ref().err()).collect();
    // Refusals by their message, the rootfs and outside paths left out.
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for said in outcomes.iter().filter_map(|r| r.as_ref().ok()) {
        let shape = said
            .replace(outside.dir.to_string_lossy().as_ref(), "<outside>")
            .replace(rootfs.to_string_lossy().as_ref(), "<rootfs>");
        *kinds.entry(shape).or_default() += 1;
    }
    eprintln!(
        "{starts} starts, {WORKERS} at a time, in {:.1}s while {swaps} swaps were made:",
        elapsed.as_secs_f64()
    );
    for (shape, n) in &kinds {
        eprintln!("{n:>6}  {shape}");
    }
    assert!(
        failures.is_empty(),
        "{} of {starts} starts went wrong; the first:\n{}",
        failures.len(),
        failures[0]
    );
    assert!(swaps > 0, "the racer never swapped: {output:?}");
}

// ---------------------------------------------------------------------------------------
// The rootfs's own mount: what the hook reads, creates or mounts onto is on the mount
// `root.path` is, never on another one that a link from the image reaches (a volume,
// /proc, /sys, runc's /dev tmpfs).

/// What a path the hook reads may lead to instead of an image file: a file that blocks
/// or never ends, another file system's file or folder, a special file in the rootfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocker {
    /// Blocks once the host's kernel log is drained, and reading it drains it.
    Kmsg,
    /// A procfs file: the reader's hostname.
    ProcSysFile,
    /// A procfs file of the container's init.
    ProcEnviron,
    /// A procfs folder.
    ProcDir,
    /// A sysfs file.
    SysFile,
    /// A sysfs folder.
    SysDir,
    /// runc's /dev tmpfs: an endless read.
    DevZero,
    /// A tmpfs folder runc mounts.
    DevShm,
    /// A fifo inside the rootfs: opening it for reading blocks.
    Fifo,
    /// A character device node inside the rootfs (1:5, zero).
    CharDevice,
}

impl Blocker {
    const ALL: [Blocker; 10] = [
        Blocker::Kmsg,
        Blocker::ProcSysFile,
        Blocker::ProcEnviron,
        Blocker::ProcDir,
        Blocker::SysFile,
        Blocker::SysDir,
        Blocker::DevZero,
        Blocker::DevShm,
        Blocker::Fifo,
        Blocker::CharDevice,
    ];

    /// The link's target, as seen in the container.
    fn path(self) -> &'static str {
        match self {
            Blocker::Kmsg => "/proc/kmsg",
            Blocker::ProcSysFile => "/proc/sys/kernel/hostname",
            // Not /proc/self/...: the hook is not in the container's pid namespace, whose
            // procfs runc mounted, so /proc/self leads nowhere for it.
            Blocker::ProcEnviron => "/proc/1/environ",
            Blocker::ProcDir => "/proc/sys/kernel",
            Blocker::SysFile => "/sys/kernel/mm/transparent_hugepage/enabled",
            Blocker::SysDir => "/sys/class",
            Blocker::DevZero => "/dev/zero",
            Blocker::DevShm => "/dev/shm",
            Blocker::Fifo => "/.blockers/fifo",
            Blocker::CharDevice => "/.blockers/zero",
        }
    }

    /// Links `inner` in `rootfs` to it, making the fifo or node first.
    fn plant(self, rootfs: &Path, inner: &str) {
        let made = |program: &str, args: &[&str]| {
            let p = host_path(rootfs, self.path());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let status = Command::new(program).arg(&p).args(args).status().unwrap();
            assert!(status.success(), "{program} {}", p.display());
        };
        match self {
            Blocker::Fifo => made("mkfifo", &[]),
            Blocker::CharDevice => made("mknod", &["c", "1", "5"]),
            _ => {}
        }
        replace_with_link(rootfs, inner, self.path());
    }
}

/// The container's cache is a regular file nvc wrote, not the link.
const CACHE_REPLACED: (&str, &str) = (
    "[ -f /etc/ld.so.cache ] && [ ! -L /etc/ld.so.cache ] && echo cache-replaced",
    "cache-replaced",
);
/// The container's loader finds the driver's libcuda through the cache.
const LIBCUDA_FOUND: (&str, &str) = (
    "nvc-probe 2>&1 | grep -q libcuda=ok && echo libcuda-found",
    "libcuda-found",
);

fn lib64_check() -> (String, String) {
    (
        format!("[ -f /usr/lib64/libcuda.so.{VERSION} ] && echo libraries-in-lib64"),
        "libraries-in-lib64".to_string(),
    )
}

#[test]
fn links_from_read_paths_to_blockers_are_never_read_and_the_container_starts_in_time() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    for path in ["/etc/ld.so.cache", "/usr/local/cuda/compat", LIB] {
        for blocker in Blocker::ALL {
            let case = Case::new(
                format!("{path} -> {}", blocker.path()),
                path,
                move |rootfs, _| blocker.plant(rootfs, path),
                Expect::Starts,
            );
            cases.push(match path {
                // Not read (a blocking or endless read, the host's kernel log), and
                // replaced by a regular file.
                "/etc/ld.so.cache" => case
                    .checking(CACHE_REPLACED.0, CACHE_REPLACED.1)
                    .checking(LIBCUDA_FOUND.0, LIBCUDA_FOUND.1),
                // Not listed: no compat libraries.
                "/usr/local/cuda/compat" => case.checking(LIBCUDA_FOUND.0, LIBCUDA_FOUND.1),
                // Not a folder on the rootfs's mount: the libraries go to /usr/lib64.
                _ => {
                    let (command, line) = lib64_check();
                    case.checking(&command, &line)
                }
            });
        }
    }
    run_cases(&lab, &cases, Lab::nvc_bounded, "", WORKERS);
}

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

/// Paths the hook writes or mounts under, and where an image links them into the volume.
const INTO_THE_VOLUME: &[(&str, &str)] = &[
    ("/etc", VOLUME_AT),
    ("/lib/firmware", VOLUME_AT),
    ("/lib/firmware/nvidia/999.88.77", "/data/fw"),
    ("/usr/bin", VOLUME_AT),
    ("/usr/share/vulkan/icd.d", VOLUME_AT),
    ("/run/nvidia-persistenced", VOLUME_AT),
    (LIB, VOLUME_AT),
];

/// The container's user cannot write to a [`Volume::NotTheUsers`] volume.
const USER_CANNOT_WRITE: (&str, &str) = (
    "if touch /data/by-the-user 2>/dev/null; then echo user-wrote; else echo user-cannot-write; fi",
    "user-cannot-write",
);

#[test]
fn links_into_a_volume_are_refused_and_leave_it_and_the_host_unchanged() {
    let lab = Lab::new();
    let mut cases = Vec::new();
    for kind in [Volume::Private, Volume::Shared, Volume::NotTheUsers] {
        // Controls: without a GPU the volume is mounted, unchanged, nothing is left
        // mounted under it, and its user cannot write to it.
        let control = Case::new(
            format!("[{kind:?} volume] control, no GPU"),
            VOLUME_AT,
            |_, _| {},
            Expect::Starts,
        )
        .without_gpus()
        .with_volume(kind)
        .checking(
            "[ -f /data/volume-file ] && echo volume-mounted",
            "volume-mounted",
        );
        cases.push(match kind {
            Volume::NotTheUsers => control.checking(USER_CANNOT_WRITE.0, USER_CANNOT_WRITE.1),
            _ => control,
        });
        for &(path, target) in INTO_THE_VOLUME {
            let plant = move |rootfs: &Path, _: &Path| replace_with_link(rootfs, path, target);
            let name = format!("[{kind:?} volume] {path} -> {target}");
            let case = if path == LIB {
                let (command, line) = lib64_check();
                Case::new(name, path, plant, Expect::Starts).checking(&command, &line)
            } else {
                Case::new(name, path, plant, Expect::Refused(OTHER_MOUNT))
            };
            let case = case.with_volume(kind);
            cases.push(match kind {
                Volume::NotTheUsers => case.checking(USER_CANNOT_WRITE.0, USER_CANNOT_WRITE.1),
                _ => case,
            });
        }
    }
    // One at a time: a mount that propagates to the host would show in every other
    // case's snapshot of the host's mount table.
    run_cases(&lab, &cases, Lab::nvc_bounded, "", 1);
}

// ---------------------------------------------------------------------------------------
// The strict policy also holds for annotations.

#[test]
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

// ---------------------------------------------------------------------------------------
// root.path is the host's root directory.

/// An overlay whose lower layer is the host's `/` and whose upper and work layers are
/// on a tmpfs in the lab: mounted over `/` in a mount namespace of its own, whatever is
/// written to "/" there lands in the upper layer, never on the host.
struct Overlay {
    tmpfs: TestMount,
}

impl Overlay {
    fn new(lab: &Lab, name: &str) -> Overlay {
        let tmpfs = TestMount::tmpfs(&lab.path().join(name), "size=64m,mode=0700").unwrap();
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir(tmpfs.path().join(d)).unwrap();
        }
        Overlay { tmpfs }
    }

    fn layer(&self, name: &str) -> PathBuf {
        self.tmpfs.path().join(name)
    }

    /// `mount` options for it.
    fn options(&self) -> String {
        format!(
            "lowerdir=/,upperdir={},workdir={}",
            self.layer("upper").display(),
            self.layer("work").display()
        )
    }

    /// A `sleep` in a new mount namespace whose `/` has the overlay mounted over it.
    fn holder(&self) -> KillOnDrop {
        let script = format!(
            "mount -t overlay overlay -o {} / && echo ready && exec sleep 120",
            self.options()
        );
        let mut child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        let stdout = child.stdout.take().unwrap();
        let held = KillOnDrop(child);
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).unwrap();
        assert_eq!(
            ready.trim(),
            "ready",
            "the overlay could not be mounted over /"
        );
        let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", held.pid())).unwrap();
        assert!(
            mountinfo.lines().any(|l| l.split(' ').nth(4) == Some("/")
                && l.contains(" - overlay ")
                && l.contains(&self.options())),
            "no overlay over / in the holder's namespace:\n{mountinfo}"
        );
        held
    }

    /// Every path in the upper layer, with its type for what is not a folder.
    fn written(&self, files_only: bool) -> Vec<String> {
        tree_digest(&self.layer("upper"))
            .lines()
            .skip(1)
            .filter(|l| !files_only || !l.ends_with(" dir"))
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn the_hook_refuses_the_hosts_root_directory_as_rootfs() {
    let lab = Lab::new();
    // The overlay's tmpfs is the test's own mount: made before the host's is recorded.
    let overlay = Overlay::new(&lab, "overlay");
    let outside = Outside::new(lab.path(), lab.path());
    // The container's init stand-in: the hook enters its mount namespace, whose "/" is
    // the overlay, so that a hook that goes ahead writes into the overlay, not the host.
    let holder = overlay.holder();
    let bundle = Bundle::new(&lab.path().join("bundle-host-root"), Path::new("/"))
        .unwrap()
        .env(&all_gpus())
        // Every device allowed: a hook that went ahead grants nothing to the cgroup the
        // test runs in, which the holder shares.
        .set(
            "/linux/resources/devices",
            json!([{"allow": true, "access": "rwm"}]),
        )
        .write()
        .unwrap();
    assert_eq!(bundle.config["root"]["path"], "/");
    let begun = Instant::now();
    let out = lab.hook(&lab.config, &oci_state(holder.pid(), &bundle));
    let took = begun.elapsed();
    drop(holder);
    let written = overlay.written(false);
    assert!(
        !out.timed_out,
        "the hook did not end within {BOUND:?}: {out:?}"
    );
    assert!(
        !out.success() && out.stderr.contains(HOST_ROOT),
        "root.path \"/\" was not refused as the host's root directory ({took:?}): {out:?}\n\
         it wrote {} entries into \"/\" (the overlay's upper layer), e.g. {:?}\n{}",
        written.len(),
        written.iter().find(|l| l.contains("ld.so.cache")),
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        written.is_empty(),
        "the hook wrote into \"/\" (the overlay's upper layer): {written:#?}"
    );
    outside.assert_untouched("root.path \"/\" through the hook");
}

/// A low-level runtime that only records that it ran: `runc` is never reached.
const RECORDING_RUNTIME: &str = "#!/bin/sh\necho \"$@\" >>\"$(dirname \"$0\")/runtime-ran\"\n";

#[test]
fn nvc_runtime_refuses_the_hosts_root_directory_before_the_runtime_runs() {
    let lab = Lab::new();
    // The overlay's tmpfs is the test's own mount: made before the host's is recorded.
    let overlay = Overlay::new(&lab, "overlay");
    let outside = Outside::new(lab.path(), lab.path());
    let fake = lab.path().join("fake-runtime");
    std::fs::create_dir(&fake).unwrap();
    let runtime = fake.join("runc");
    std::fs::write(&runtime, RECORDING_RUNTIME).unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ran = fake.join("runtime-ran");
    let config = lab.config_with("recording-runtime", |text| {
        let line = text.lines().find(|l| l.starts_with("runtimes = ")).unwrap();
        let with = format!("runtimes = [\"{}\"]", runtime.display());
        text.replace(line, &with)
    });
    let bundle = Bundle::new(&lab.path().join("bundle-host-root"), Path::new("/"))
        .unwrap()
        .env(&all_gpus())
        .write()
        .unwrap();
    let shim = workspace_bin("nvc-runtime");
    let bin_dir = shim.parent().unwrap().to_path_buf();
    let state = lab.path().join("state-host-root");
    let log = state.join("runc.log");
    // The shim runs as pid 1 of new mount and pid namespaces whose "/" is the overlay
    // (pivot_root): if it went ahead, whatever it or anything it ran wrote to "/" would
    // land in the overlay. The lab and the binaries are bound in from the host.
    let merged = overlay.layer("merged");
    let script = format!(
        "set -e; M='{m}'; \
         mount -t overlay overlay -o {options} \"$M\"; \
         for d in '{lab}' '{bin}'; do mkdir -p \"$M$d\"; mount --bind \"$d\" \"$M$d\"; done; \
         mount -t proc proc \"$M/proc\"; mount --rbind /dev \"$M/dev\"; mount --rbind /sys \"$M/sys\"; \
         cd \"$M\"; mkdir .nvc-old-root; pivot_root . .nvc-old-root; umount -l /.nvc-old-root; \
         rmdir /.nvc-old-root; cd /; \
         exec env NVC_CONFIG='{config}' '{shim}' --root '{state}' --log '{log}' --log-format json \
           run --bundle '{bundle}' nvc-hostile-host-root",
        m = merged.display(),
        options = overlay.options(),
        lab = lab.path().display(),
        bin = bin_dir.display(),
        config = config.display(),
        shim = shim.display(),
        state = state.display(),
        log = log.display(),
        bundle = bundle.dir.display(),
    );
    std::fs::create_dir_all(&state).unwrap();
    let mut command = Command::new("unshare");
    command.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]);
    let out = run_command(&mut command, lab.path(), BOUND);
    let said = format!(
        "{}\n{}",
        out.stderr,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    assert!(
        !ran.exists(),
        "nvc-runtime ran the low-level runtime for root.path \"/\": {:?}\n{out:?}\n{said}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
    assert!(
        !out.success() && said.contains(HOST_ROOT),
        "root.path \"/\" was not refused as the host's root directory: {out:?}\n{said}"
    );
    // The mount points made for the binds may be there; nothing else.
    let written = overlay.written(true);
    assert!(
        written.is_empty(),
        "something wrote into \"/\" (the overlay's upper layer): {written:#?}"
    );
    outside.assert_untouched("root.path \"/\" through nvc-runtime");
}

// ---------------------------------------------------------------------------------------
// A forged state.

#[test]
fn a_state_pid_in_the_hooks_own_mount_namespace_is_refused() {
    let lab = Lab::new();
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let before = tree_digest(&rootfs);
    // A host process, in the mount namespace the test and so the hook run in.
    let host_process = KillOnDrop(
        Command::new("sleep")
            .arg("120")
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let bundle = lab
        .bundle(&rootfs, &all_gpus(), "true")
        // Every device allowed: a hook that went ahead grants nothing to the cgroup the
        // test runs in, which the sleep shares.
        .set(
            "/linux/resources/devices",
            json!([{"allow": true, "access": "rwm"}]),
        )
        .write()
        .unwrap();
    let out = lab.hook(&lab.config, &oci_state(host_process.pid(), &bundle));
    drop(host_process);
    // What a hook that went ahead left: mounts in the host's namespace, on the rootfs.
    let leaked = mounts_under(lab.path());
    let tree_changed = outside.tree_change();
    let host_changed = outside.changes();
    let swept = Sweep::new(lab.path()).now();
    let after = tree_digest(&rootfs);
    assert!(
        !out.timed_out,
        "the hook did not end within {BOUND:?}: {out:?}"
    );
    assert!(
        !out.success() && out.stderr.contains(OWN_NAMESPACE),
        "a state pid in the hook's own mount namespace was not refused: {out:?}\n\
         it left {} mounts in the host's namespace, e.g. {:?} ({swept:?})\n{}",
        leaked.len(),
        leaked.first(),
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        leaked.is_empty(),
        "the hook mounted into the host's mount namespace: {leaked:#?} ({swept:?})"
    );
    assert!(tree_changed.is_none(), "the outside tree changed");
    assert!(host_changed.is_none(), "{host_changed:?}");
    assert!(
        before == after,
        "the rootfs changed:\n{}",
        digest_diff(&before, &after)
    );
}

// ---------------------------------------------------------------------------------------
// root.readonly.

/// The lines of two [`tree_digest`]s that differ: `-` only before, `+` only after.
fn digest_diff(before: &str, after: &str) -> String {
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    let new: std::collections::BTreeSet<&str> = after.lines().collect();
    let mut out: Vec<String> = old.difference(&new).map(|l| format!("- {l}")).collect();
    out.extend(new.difference(&old).map(|l| format!("+ {l}")));
    out.join("\n")
}

/// `bundle` with root.readonly, saved.
fn read_only(bundle: Bundle) -> Bundle {
    bundle.readonly(true).write().unwrap()
}

#[test]
fn a_read_only_rootfs_gets_only_empty_mount_points_and_keeps_every_file() {
    let lab = Lab::new();
    let rt = lab.nvc_bounded();
    // Control: runc alone leaves a read-only rootfs as it was, so any change is nvc's.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let before = tree_digest(&rootfs);
    let out = rt.run(
        &read_only(lab.bundle(&rootfs, &[], "echo started")),
        &container_id("nvc-hostile-ro"),
    );
    assert!(out.success() && out.stdout.contains("started"), "{out:?}");
    assert_eq!(
        tree_digest(&rootfs),
        before,
        "runc alone changed the rootfs"
    );

    // nvc in a read-only rootfs adds only what the runtime adds for the spec's own mounts:
    // empty mount points. Its soname names are mounts of the library, and its ld.so.cache
    // is mounted over the image's.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let before = tree_digest(&rootfs);
    let script = format!(
        "head -c 4 {LIB}/libcuda.so.1 | grep -q ELF && echo soname-readable; \
         [ ! -L {LIB}/libcuda.so.1 ] && echo soname-not-a-link; echo done"
    );
    let out = rt.run(
        &read_only(lab.bundle(&rootfs, &all_gpus(), &script)),
        &container_id("nvc-hostile-ro"),
    );
    let after = tree_digest(&rootfs);
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    for line in ["soname-readable", "soname-not-a-link"] {
        assert!(
            out.success() && out.stdout.lines().any(|l| l == line),
            "a read-only GPU container did not print {line}: {out:?}\n{}",
            tail(&lab.nvc_log(), 10)
        );
    }
    let old: std::collections::BTreeSet<&str> = before.lines().collect();
    let new: std::collections::BTreeSet<&str> = after.lines().collect();
    let changed: Vec<&&str> = old.difference(&new).collect();
    assert!(
        changed.is_empty(),
        "nvc changed files of a read-only rootfs:\n{}",
        digest_diff(&before, &after)
    );
    let added: Vec<&&str> = new.difference(&old).collect();
    assert!(!added.is_empty(), "no mount point was made");
    for line in added {
        assert!(
            line.ends_with(" dir") || line.contains(" file 0 bytes "),
            "nvc wrote more than an empty mount point into a read-only rootfs: {line}"
        );
    }
    outside.assert_untouched("root.readonly");
}

/// One entry of a [`tree_digest`]: the relative path, the mode, the kind.
fn digest_entries(digest: &str) -> std::collections::BTreeMap<String, (u32, String)> {
    digest
        .lines()
        .filter_map(|l| {
            let mut fields = l.split(' ');
            let path = fields.next()?.to_string();
            let mode = u32::from_str_radix(fields.next()?, 8).ok()?;
            let _owner = fields.next()?;
            let kind = fields.next()?.to_string();
            Some((path, (mode, kind)))
        })
        .collect()
}

#[test]
fn a_read_only_rootfs_with_every_mount_point_in_place_starts_unchanged() {
    let lab = Lab::new();
    let rt = lab.nvc_bounded();
    // Learn what nvc creates: the same image, writable.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let before = digest_entries(&tree_digest(&rootfs));
    let out = rt.run(
        &lab.bundle(&rootfs, &all_gpus(), "echo started"),
        &container_id("nvc-hostile-ro"),
    );
    assert!(out.success() && out.stdout.contains("started"), "{out:?}");
    let created: Vec<(String, (u32, String))> = digest_entries(&tree_digest(&rootfs))
        .into_iter()
        .filter(|(path, _)| !before.contains_key(path))
        .collect();
    assert!(
        created
            .iter()
            .any(|(p, _)| p.ends_with(&format!("libcuda.so.{VERSION}"))),
        "no libcuda mount point among what nvc created: {created:#?}"
    );

    // The mount points made beforehand, as plain files and folders; where nvc makes a
    // link in a writable rootfs, a read-only one gets a mount of the file: an empty file.
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let mut made = Vec::new();
    for (path, (mode, kind)) in &created {
        let p = rootfs.join(path);
        match kind.as_str() {
            "dir" => std::fs::create_dir(&p).unwrap(),
            "file" => std::fs::write(&p, "").unwrap(),
            "link" if !path.ends_with("ld.so.cache") => std::fs::write(&p, "").unwrap(),
            _ => continue,
        }
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
        made.push(path.as_str());
    }
    let before = tree_digest(&rootfs);
    let readable = format!(
        "head -c 4 {LIB}/libcuda.so.{VERSION} | grep -q ELF && echo libcuda-readable; echo done"
    );
    let out = rt.run(
        &read_only(lab.bundle(&rootfs, &all_gpus(), &readable)),
        &container_id("nvc-hostile-ro"),
    );
    let after = tree_digest(&rootfs);
    assert!(!out.timed_out, "not done within {BOUND:?}: {out:?}");
    assert!(
        out.success() && out.stdout.lines().any(|l| l == "libcuda-readable"),
        "a read-only rootfs with the mount points {made:?} did not start with libcuda: {out:?}\n{}",
        tail(&lab.nvc_log(), 10)
    );
    assert!(
        before == after,
        "nvc changed a read-only rootfs:\n{}",
        digest_diff(&before, &after)
    );
    outside.assert_untouched("root.readonly with mount points");
}
