//! A race: directories flipped to links while containers start.

use super::*;

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
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
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
