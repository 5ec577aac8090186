//! The OCI runtime specification's validation suite (opencontainers/runtime-tools, the
//! programs `validation/*/*.t`) against plain runc and against nvc-runtime in front of
//! the same runc, where every container asks for all the GPUs of a fake driver tree with
//! a dev root of its own. An assertion that passes under runc and fails under
//! nvc-runtime fails the test, except the deliberate refusals of [`REFUSALS`], each
//! checked to still happen, for its reason.
//!
//! The programs write their own config.json and call `$RUNTIME create/start/state/kill/
//! delete`; `RUNTIME` is a wrapper the test writes: runc with a state root of its own, or
//! `nvc-all-gpus` (a binary of this crate: it adds `NVIDIA_VISIBLE_DEVICES=all` to the
//! spec of a `create` or `run`) in front of nvc-runtime with the test's nvc config and
//! another state root. The programs run several at a time, over both runtimes (each
//! names its containers by a fresh UUID), but for those that use the fixed cgroup
//! `cgrouptest` ([`EXCLUSIVE`]), which run one at a time beside the others. An assertion is
//! matched by its text and rank among those with the same text (nvc's device nodes give
//! runtimetest more to check, which moves the numbers); a skipped one passed nothing; a
//! program that fails under nvc-runtime what it passed under runc runs again, alone, up
//! to [`RETRIES`] times, as some race with their container under runc too.
//!
//! `scripts/oci-suite.sh` builds the programs once per machine from the archive in the
//! shared folder beside the clone (`../shared/oci-runtime-tools`, or `NVC_OCI_TOOLS`); a
//! missing archive fails the test, saying so. The summary (program, runc ok/fail, nvc
//! ok/fail) is printed, and written to `oci-validation.txt` in cargo's target tmp dir.
//! Needs root (runc, device nodes, mounts).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvc_tests::{
    nvc_config_for, oci_runtime_tools, parse_tap, require_root, run_command, runc_containers,
    runc_delete, runc_path, validation_programs, workspace_bin, FakeDriverSpec, Sweep, TapLine,
};

/// How long one program may run; the slowest take about 15 s under runc (they wait for
/// a container to stop).
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(120);

/// How many times more a program runs under nvc-runtime when it fails there what it
/// passed under runc, alone: some assertions race with the container and fail now and
/// then under runc too (`killsig` signals a shell that may not have set its trap yet,
/// `pidfile` kills a container whose `true` may have ended already).
const RETRIES: usize = 2;

/// The programs that put their container in the fixed cgroup `cgrouptest` (or another
/// fixed place in the cgroup tree): they run one at a time.
const EXCLUSIVE: &[&str] = &[
    "linux_cgroups_",
    "delete_resources",
    "delete_only_create_resources",
];

/// The programs that take longest (they wait for a container to stop, or for a signal),
/// longest first: started first, so that the last to end is a short one.
const LONGEST: &[&str] = &[
    "linux_cgroups_cpus",
    "delete",
    "kill",
    "pidfile",
    "linux_readonly_paths",
    "linux_masked_paths",
    "linux_cgroups_memory",
    "linux_ns_path",
    "linux_rootfs_propagation",
];

/// An assertion nvc-runtime fails on purpose, where runc passes it.
struct Refusal {
    /// The program.
    program: &'static str,
    /// What the refused assertions' descriptions hold; `None`: every assertion of the
    /// program (its one container is refused).
    assertion: Option<&'static str>,
    /// What nvc-runtime says when it refuses (in the program's output), so that another
    /// failure of the same assertion is not taken for this one.
    says: &'static str,
    /// Why.
    why: &'static str,
}

/// The deliberate refusals.
const REFUSALS: &[Refusal] = &[
    Refusal {
        program: "linux_ns_itype",
        assertion: None,
        says: "has no \"mount\" entry",
        why: "the container shares the runtime's mount namespace (linux.namespaces has no \
              \"mount\"): the driver's files would be mounted on the host",
    },
    Refusal {
        program: "linux_ns_path",
        assertion: Some("set mnt namespace by path"),
        says: "joins the one at /proc/",
        why: "the container joins an existing mount namespace (a \"mount\" entry with a \
              path): the driver's mounts would be made in a namespace other processes \
              share and that outlives the container",
    },
];

/// One run of one program.
struct ProgramRun {
    status: i32,
    timed_out: bool,
    lines: Vec<TapLine>,
    /// Its stdout (TAP, with YAML diagnostics) and stderr.
    output: String,
    seconds: f64,
}

impl ProgramRun {
    fn counts(&self) -> String {
        let ok = self.lines.iter().filter(|l| !l.failed()).count();
        let failed = self.lines.iter().filter(|l| l.failed()).count();
        let mut text = format!("{ok}/{failed}");
        if self.timed_out {
            text.push_str(" (timed out)");
        } else if self.status != 0 {
            text.push_str(&format!(" (exit {})", self.status));
        }
        text
    }
}

/// One runtime the programs run against.
struct Target {
    name: &'static str,
    /// The `RUNTIME` the programs are given.
    wrapper: PathBuf,
    /// runc's `--root`.
    state_root: PathBuf,
    /// The programs' `TMPDIR`, where they make their bundles.
    tmp: PathBuf,
    /// The fake driver's device nodes, copied into the `/dev` each program sees.
    dev_nodes: PathBuf,
}

/// What `unshare` runs a validation program in: a mount namespace of its own whose `/dev`
/// is a copy of the host's (with its `pts`, `shm` and `mqueue`) plus the fake driver's
/// nodes, at their own paths as a host with the driver has them, so that the runtime
/// makes them (a node elsewhere on the host would be a bind mount, which runtimetest
/// cannot check: "we need an (r)bind spec to test against"). The host's `/dev` is not
/// changed. `$1`: the nodes' folder; then the program.
const DEV_SCRIPT: &str = r#"set -e
old=$(mktemp -d)
mount --rbind /dev "$old"
mount -t tmpfs -o mode=0755,nosuid nvc-dev /dev
cp -ax "$old/." /dev/
for m in pts shm mqueue hugepages; do
  if mountpoint -q "$old/$m"; then mkdir -p "/dev/$m"; mount --rbind "$old/$m" "/dev/$m"; fi
done
umount -l "$old"
rmdir "$old"
cp -a "$1/." /dev/
shift
exec "$@""#;

fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A shell word.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

fn target(dir: &Path, name: &'static str, command: String, dev_nodes: &Path) -> Target {
    let state_root = dir.join(format!("state-{name}"));
    let tmp = dir.join(format!("tmp-{name}"));
    std::fs::create_dir_all(&state_root).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let wrapper = dir.join(format!("{name}-runtime"));
    write_executable(
        &wrapper,
        &format!(
            "#!/bin/sh\nexec {command} --root {} \"$@\"\n",
            quoted(&state_root)
        ),
    );
    Target {
        name,
        wrapper,
        state_root,
        tmp,
        dev_nodes: dev_nodes.to_path_buf(),
    }
}

fn run_program(tree: &Path, program: &Path, target: &Target) -> ProgramRun {
    let start = Instant::now();
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            DEV_SCRIPT,
            "sh",
        ])
        .arg(&target.dev_nodes)
        .arg(program)
        .current_dir(tree)
        .env("RUNTIME", &target.wrapper)
        .env("TMPDIR", &target.tmp);
    let out = run_command(&mut command, &target.tmp, PROGRAM_TIMEOUT);
    ProgramRun {
        status: out.status,
        timed_out: out.timed_out,
        lines: parse_tap(&out.stdout),
        output: format!("{}\n{}", out.stdout, out.stderr),
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// How many programs run at once, over both runtimes: they mostly wait (on a container
/// that sleeps, or for a signal to land), so more than the cores. One of them runs the
/// programs of [`EXCLUSIVE`], one after the other.
const WORKERS: usize = 6;

/// Runs every program against each of `targets`: those of [`EXCLUSIVE`] one after the
/// other (they share a cgroup), beside the others, [`WORKERS`] at a time in all, the
/// longest first as far as [`LONGEST`] knows. The runs, by target, then by program.
fn run_all(
    tree: &Path,
    programs: &[(String, PathBuf)],
    targets: &[&Target],
) -> Vec<BTreeMap<String, ProgramRun>> {
    let rank = |name: &str| {
        LONGEST
            .iter()
            .position(|p| name.starts_with(p))
            .unwrap_or(LONGEST.len())
    };
    let mut all: Vec<(usize, &String, &PathBuf)> = programs
        .iter()
        .flat_map(|(name, path)| (0..targets.len()).map(move |t| (t, name, path)))
        .collect();
    all.sort_by_key(|(_, name, _)| rank(name));
    let (exclusive, shared): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|(_, name, _)| EXCLUSIVE.iter().any(|p| name.starts_with(p)));
    let runs: Mutex<Vec<BTreeMap<String, ProgramRun>>> =
        Mutex::new(targets.iter().map(|_| BTreeMap::new()).collect());
    let run = |&(t, name, path): &(usize, &String, &PathBuf)| {
        let run = run_program(tree, path, targets[t]);
        runs.lock().unwrap()[t].insert(name.clone(), run);
    };
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| exclusive.iter().for_each(run));
        for _ in 1..WORKERS {
            s.spawn(|| {
                while let Some(item) = shared.get(next.fetch_add(1, Ordering::Relaxed)) {
                    run(item);
                }
            });
        }
    });
    runs.into_inner().unwrap()
}

/// The refusal that covers `assertion` of `program`, if any.
fn refusal(program: &str, assertion: &TapLine) -> Option<&'static Refusal> {
    REFUSALS.iter().find(|r| {
        r.program == program
            && r.assertion
                .is_none_or(|a| assertion.description.contains(a))
    })
}

/// What one program's two runs say, compared.
#[derive(Default)]
struct Comparison {
    /// Assertions runc passes and nvc-runtime fails (or never reaches), for no listed
    /// reason.
    regressions: Vec<String>,
    /// Those it fails for a listed reason.
    refused: Vec<String>,
}

/// Compares a program's run under runc with its runs under nvc-runtime: an assertion
/// passes under nvc-runtime if it passes in one of them (see [`RETRIES`]).
fn compare(program: &str, runc: &ProgramRun, nvc: &[ProgramRun]) -> Comparison {
    let mut c = Comparison::default();
    // An assertion is the k-th with its text: numbers move when a container has more to
    // check (runtimetest checks each of `linux.devices`, and nvc adds the GPUs').
    let nth = |lines: &[TapLine], line: &TapLine| {
        lines
            .iter()
            .take_while(|l| !std::ptr::eq(*l, line))
            .filter(|l| l.text == line.text)
            .count()
    };
    let find = |run: &ProgramRun, text: &str, k: usize| -> Option<bool> {
        run.lines
            .iter()
            .filter(|l| l.text == text)
            .nth(k)
            .map(|l| !l.failed())
    };
    // A skipped check passed nothing: runtimetest skips the devices' checks for a spec
    // with no `linux.devices`, and makes them for nvc's.
    for passed in runc.lines.iter().filter(|l| l.ok && !l.skip) {
        let k = nth(&runc.lines, passed);
        let under_nvc: Vec<Option<bool>> = nvc.iter().map(|r| find(r, &passed.text, k)).collect();
        if under_nvc.contains(&Some(true)) {
            continue;
        }
        let what = format!(
            "{program} {} - {}: {}",
            passed.number,
            passed.text,
            if under_nvc.iter().any(Option::is_some) {
                "not ok"
            } else {
                "not reached"
            }
        );
        match refusal(program, passed) {
            Some(r) if nvc.iter().all(|run| run.output.contains(r.says)) => c.refused.push(what),
            Some(r) => c.regressions.push(format!(
                "{what}, and nvc-runtime did not say {:?} (listed as refused: {})",
                r.says, r.why
            )),
            None => c.regressions.push(what),
        }
    }
    // A program that ran to its end under runc must under nvc-runtime too.
    let refused_whole = REFUSALS
        .iter()
        .any(|r| r.program == program && r.assertion.is_none());
    if runc.status == 0 && nvc.iter().all(|r| r.status != 0) && !refused_whole {
        c.regressions.push(format!(
            "{program}: exit {} under nvc-runtime, 0 under runc",
            nvc[0].status
        ));
    }
    c
}

#[test]
fn tap_lines_are_read() {
    let text = "TAP version 13\n\
                ok 1 - the first\n\
                not ok 2 - a # in it\n  ---\n  {\"stdout\": \"ok 9 - inside\"}\n  ...\n\
                not ok 3 - later # TODO not yet\n\
                ok 4 # skip no cgroup v1\n\
                okay 5\n\
                1..4\n";
    let lines = parse_tap(text);
    let got: Vec<(u32, bool, &str, bool, bool)> = lines
        .iter()
        .map(|l| (l.number, l.ok, l.description.as_str(), l.todo, l.skip))
        .collect();
    assert_eq!(
        got,
        [
            (1, true, "the first", false, false),
            (2, false, "a # in it", false, false),
            (3, false, "later", true, false),
            (4, true, "", false, true),
        ]
    );
    assert_eq!(
        lines.iter().map(TapLine::failed).collect::<Vec<_>>(),
        [false, true, false, false]
    );
    assert_eq!(lines[2].text, "later # TODO not yet");
    assert_eq!(lines[3].text, "# skip no cgroup v1");
}

fn run_of(tap: &str, status: i32, stderr: &str) -> ProgramRun {
    ProgramRun {
        status,
        timed_out: false,
        lines: parse_tap(tap),
        output: format!("{tap}\n{stderr}"),
        seconds: 0.0,
    }
}

#[test]
fn runs_are_compared_by_text_and_rank() {
    let runc = run_of(
        "ok 1 - a\nok 2 - b\nok 3 - b\nok 4 # SKIP linux.devices is not set\nnot ok 5 - c\n",
        0,
        "",
    );
    // Numbers moved (one more check), the skip became checks, the second `b` fails.
    let nvc = run_of(
        "ok 1 - a\nok 2 - device\nok 3 - b\nnot ok 4 - b\nnot ok 5 - c\n",
        0,
        "",
    );
    let c = compare("p", &runc, std::slice::from_ref(&nvc));
    assert_eq!(c.regressions, ["p 3 - b: not ok"]);
    // One run of several that passes it is enough; an exit status alone fails.
    let again = run_of("ok 1 - a\nok 2 - b\nok 3 - b\n", 1, "");
    let c = compare("p", &runc, &[nvc, again]);
    assert!(c.regressions.is_empty(), "{:?}", c.regressions);
    let c = compare(
        "p",
        &runc,
        &[run_of("ok 1 - a\nok 2 - b\nok 3 - b\n", 1, "")],
    );
    assert_eq!(c.regressions, ["p: exit 1 under nvc-runtime, 0 under runc"]);

    // A listed refusal counts only where nvc-runtime says why.
    let runc = run_of(
        "ok 1 - set ipc namespace by path\nok 2 - set mnt namespace by path\n",
        0,
        "",
    );
    let refused = run_of(
        "ok 1 - set ipc namespace by path\nnot ok 2 - set mnt namespace by path\n",
        0,
        "nvc-runtime: ... joins the one at /proc/7/ns/mnt: ...",
    );
    let c = compare("linux_ns_path", &runc, &[refused]);
    assert!(c.regressions.is_empty(), "{:?}", c.regressions);
    assert_eq!(c.refused.len(), 1);
    let other = run_of(
        "ok 1 - set ipc namespace by path\nnot ok 2 - set mnt namespace by path\n",
        0,
        "something else",
    );
    let c = compare("linux_ns_path", &runc, &[other]);
    assert_eq!(c.regressions.len(), 1, "{:?}", c.regressions);
    // A refused program's other assertions still count.
    let c = compare(
        "linux_ns_path",
        &runc,
        &[run_of("not ok 1 - set ipc namespace by path\n", 0, "")],
    );
    assert_eq!(c.regressions.len(), 2, "{:?}", c.regressions);
}

#[test]
#[ignore = "needs root, and the network the first time (Go from PyPI): runc, a fake driver tree's device nodes, the containers' mounts"]
fn nvc_runtime_passes_what_runc_passes() {
    require_root("runc, a fake driver tree's device nodes, the containers' mounts");
    let tree = oci_runtime_tools();
    let programs = validation_programs(&tree);
    assert!(
        programs.len() > 50,
        "{}: only {} validation programs",
        tree.display(),
        programs.len()
    );
    let dir = tempfile::tempdir().unwrap();
    // Declared after the folder: it runs first, killing and unmounting what is left.
    let _sweep = Sweep::new(dir.path());
    let driver = dir.path().join("driver");
    std::fs::create_dir(&driver).unwrap();
    let fake = FakeDriverSpec {
        split_dev_root: true,
        ..FakeDriverSpec::default()
    }
    .build(&driver)
    .unwrap();
    let config = nvc_config_for(&fake, dir.path()).unwrap();
    // The nodes are where each program's /dev has them (DEV_SCRIPT): dev root `/`.
    let text = std::fs::read_to_string(&config).unwrap();
    let dev_root = format!("dev-root = \"{}\"\n", fake.dev_root.display());
    assert!(text.contains(&dev_root), "{text}");
    std::fs::write(&config, text.replace(&dev_root, "dev-root = \"/\"\n")).unwrap();
    let nodes = fake.dev_root.join("dev");
    let runc = target(dir.path(), "runc", quoted(&runc_path()), &nodes);
    let nvc = target(
        dir.path(),
        "nvc",
        format!(
            "env NVC_CONFIG={} {} {}",
            quoted(&config),
            quoted(Path::new(env!("CARGO_BIN_EXE_nvc-all-gpus"))),
            quoted(&workspace_bin("nvc-runtime")),
        ),
        &nodes,
    );

    let start = Instant::now();
    let mut runs = run_all(&tree, &programs, &[&runc, &nvc]).into_iter();
    let (runc_runs, nvc_runs) = (runs.next().unwrap(), runs.next().unwrap());
    let mut nvc_runs: BTreeMap<String, Vec<ProgramRun>> =
        nvc_runs.into_iter().map(|(k, v)| (k, vec![v])).collect();
    for (name, path) in &programs {
        let runs = nvc_runs.get_mut(name).unwrap();
        while runs.len() <= RETRIES && !compare(name, &runc_runs[name], runs).regressions.is_empty()
        {
            runs.push(run_program(&tree, path, &nvc));
        }
    }
    let elapsed = start.elapsed();
    // What the programs left: containers they did not delete.
    let mut left = Vec::new();
    for t in [&runc, &nvc] {
        for id in runc_containers(&t.state_root) {
            runc_delete(&t.state_root, &id);
            left.push(format!("{} container {id}", t.name));
        }
    }

    let mut table = format!(
        "{:<34} {:>14} {:>14}  {:>6} {:>6}\n",
        "program", "runc ok/fail", "nvc ok/fail", "runc s", "nvc s"
    );
    let mut regressions = Vec::new();
    let mut refused = Vec::new();
    for (name, _) in &programs {
        let (r, n) = (&runc_runs[name], &nvc_runs[name]);
        let c = compare(name, r, n);
        let mut note = match (c.regressions.len(), c.refused.len()) {
            (0, 0) => String::new(),
            (0, k) => format!("  refused: {k}"),
            (k, _) => format!("  FAILED: {k}"),
        };
        if n.len() > 1 {
            note.push_str(&format!("  (nvc: {} runs)", n.len()));
        }
        let last = &n[n.len() - 1];
        let _ = writeln!(
            table,
            "{name:<34} {:>14} {:>14}  {:>6.1} {:>6.1}{note}",
            r.counts(),
            last.counts(),
            r.seconds,
            n.iter().map(|run| run.seconds).sum::<f64>()
        );
        regressions.extend(c.regressions);
        refused.extend(c.refused);
    }
    let _ = writeln!(
        table,
        "\n{} programs against runc and nvc-runtime in {:.0} s",
        programs.len(),
        elapsed.as_secs_f64()
    );
    for r in REFUSALS {
        let _ = writeln!(
            table,
            "refused on purpose: {} {}: {}",
            r.program,
            r.assertion.unwrap_or("(every assertion)"),
            r.why
        );
    }
    if !left.is_empty() {
        let _ = writeln!(table, "left behind, deleted: {left:?}");
    }
    println!("{table}");
    let summary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oci-validation.txt");
    let _ = std::fs::write(&summary, &table);

    // Each listed refusal still happens: a refusal that is gone leaves the list.
    let stale: Vec<&str> = REFUSALS
        .iter()
        .filter(|r| {
            !refused
                .iter()
                .any(|f| f.starts_with(&format!("{} ", r.program)))
        })
        .map(|r| r.program)
        .collect();
    let detail = |names: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for name in names {
            let _ = write!(
                text,
                "\n--- {name} under runc:\n{}\n--- {name} under nvc-runtime:\n{}",
                runc_runs[name].output.trim_end(),
                nvc_runs[name][0].output.trim_end()
            );
        }
        text
    };
    let mut failing: Vec<&str> = regressions
        .iter()
        .filter_map(|r| r.split([' ', ':']).next())
        .collect();
    failing.dedup();
    assert!(
        regressions.is_empty(),
        "nvc-runtime fails what runc passes:\n{}\n\n{table}{}\n\nnvc's log:\n{}",
        regressions.join("\n"),
        detail(&mut failing.into_iter()),
        tail(&dir.path().join("nvc.log"), 40)
    );
    assert!(
        stale.is_empty(),
        "listed as refused by nvc-runtime, but not refused: {stale:?}\n\n{table}{}",
        detail(&mut stale.iter().copied())
    );
}

/// The last `n` lines of the file at `path`.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
