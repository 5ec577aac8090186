//! Builds a demo OCI bundle: a small glibc rootfs with no NVIDIA file (busybox, libc,
//! a static ldconfig, the `nvc-probe` program) and a config.json running ARGS with ENV.
//!
//! `nvc-demo-bundle DIR [--fake-proc DIR] [-e KEY=VALUE]... -- ARGS...`
//!
//! `--fake-proc` shows a demo driver tree's proc files at /run/fake-proc in the
//! container, for the demo driver's nvidia-smi (runc refuses mounts under /proc).

use std::path::PathBuf;
use std::process::ExitCode;

use nvc_tests::{Bundle, RootfsSpec};

const USAGE: &str = "usage: nvc-demo-bundle DIR [--fake-proc DIR] [-e KEY=VALUE]... -- ARGS...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((dir, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    let mut env: Vec<String> = Vec::new();
    let mut it = rest.iter();
    let mut command = Vec::new();
    let mut fake_proc: Option<PathBuf> = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "-e" => match it.next() {
                Some(kv) if kv.contains('=') => env.push(kv.clone()),
                _ => {
                    eprintln!("-e needs KEY=VALUE\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--fake-proc" => match it.next() {
                Some(p) => fake_proc = Some(PathBuf::from(p)),
                None => {
                    eprintln!("--fake-proc needs a directory\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--" => {
                command = it.by_ref().cloned().collect();
            }
            other => {
                eprintln!("unexpected {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if command.is_empty() {
        eprintln!("no command given\n{USAGE}");
        return ExitCode::from(2);
    }
    let rootfs = dir.join("rootfs");
    let result = RootfsSpec::default()
        .build(&rootfs)
        .and_then(|_| Bundle::new(&dir, &rootfs))
        .and_then(|b| {
            let b = b.args(&command);
            match &fake_proc {
                None => b.env(&env),
                Some(p) => {
                    std::fs::create_dir_all(rootfs.join("run/fake-proc"))
                        .map_err(nvc_tests::FakeError::io("create directory", &rootfs))?;
                    env.push("NVC_FAKE_PROC=/run/fake-proc".into());
                    b.env(&env).set(
                        "/mounts/-",
                        serde_json::json!({"destination": "/run/fake-proc", "type": "bind",
                            "source": p, "options": ["rbind", "ro"]}),
                    )
                }
            }
            .write()
        });
    match result {
        Ok(b) => {
            println!("{}", b.dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvc-demo-bundle: {e}");
            ExitCode::FAILURE
        }
    }
}
