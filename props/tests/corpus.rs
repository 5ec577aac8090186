//! Replays every committed fuzz input (`fuzz/corpus/<target>/*`) through its target's
//! property function, so the ordinary test run checks what the fuzzers have kept,
//! including the inputs that once found bugs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_target_has_a_corpus_and_every_input_holds() {
    for (target, check) in nvc_fuzz_props::TARGETS {
        let dir = corpus_dir(target);
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("corpus entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        let started = Instant::now();
        for file in &files {
            let data = fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let replay = std::panic::catch_unwind(|| check(&data));
            if let Err(cause) = replay {
                let why = cause
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| cause.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                panic!("{target}: {} fails: {why}", file.display());
            }
        }
        eprintln!(
            "{target}: {} inputs in {:.2?}",
            files.len(),
            started.elapsed()
        );
    }
}

#[test]
fn no_corpus_without_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for entry in fs::read_dir(&root).expect("fuzz/corpus") {
        let name = entry.expect("corpus folder").file_name();
        let name = name.to_string_lossy();
        assert!(
            nvc_fuzz_props::TARGETS.iter().any(|(t, _)| *t == name),
            "fuzz/corpus/{name} has no target"
        );
    }
}
