//! docs/architecture.md stays the map: every file or folder it names in backquotes
//! (`host/src/state.rs`, `libnvc/src/request/`) exists, and every item it names with its
//! crate (`nvc_host::state::StateDir`, `lifecycle::start` within the state section) or
//! as a function, type or trait of a named file exists there. No root needed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    nvc_tests::repo_root().to_path_buf()
}

/// The backquoted spans of `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The source folder of a crate named in Rust (`nvc_host`).
fn crate_src(name: &str) -> Option<&'static str> {
    Some(match name {
        "libnvc" => "libnvc/src",
        "nvc_host" => "host/src",
        "nvc_config" => "config/src",
        "nvc_engines" => "engines/src",
        _ => return None,
    })
}

/// The text of module `path` (`["state"]`) of the crate in `src`, and of its folder's
/// files; empty when there is none.
fn module_text(src: &Path, path: &[&str]) -> String {
    let mut base = src.to_path_buf();
    for part in path {
        base.push(part);
    }
    let mut text = String::new();
    for file in [base.with_extension("rs"), base.join("mod.rs")] {
        text.push_str(&std::fs::read_to_string(file).unwrap_or_default());
    }
    if path.is_empty() {
        text.push_str(&std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
    }
    text
}

/// Whether `text` defines an item named `name`.
fn defines(text: &str, name: &str) -> bool {
    [
        "fn", "struct", "enum", "trait", "type", "const", "mod", "static",
    ]
    .iter()
    .any(|kind| text.contains(&format!("{kind} {name}")))
        || text.contains(&format!("    {name}("))
        || text.contains(&format!("    {name} {{"))
        || text.contains(&format!("    {name},"))
}

#[test]
fn every_path_and_item_the_architecture_doc_names_exists() {
    let repo = repo();
    let doc = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for span in quoted(&doc) {
        // A file or folder of the repository.
        let first = span.split('/').next().unwrap_or_default();
        if span.contains('/')
            && !span.contains(' ')
            && !span.starts_with('/')
            && !span.contains('<')
            && repo.join(first).is_dir()
        {
            checked += 1;
            if !repo.join(span).exists() {
                missing.push(span.to_string());
            }
            continue;
        }
        // An item with its crate: `nvc_host::state::StateDir`, `nvc_host::files`.
        let parts: Vec<&str> = span.split("::").collect();
        if parts.len() >= 2 && parts.iter().all(|p| !p.is_empty() && !p.contains(' ')) {
            let Some(src) = crate_src(parts[0]) else {
                continue;
            };
            checked += 1;
            let src = repo.join(src);
            let (modules, item) = parts[1..].split_at(parts.len() - 2);
            let name = item[0].trim_end_matches("()");
            let as_module = module_text(&src, &parts[1..]);
            let in_parent = module_text(&src, modules);
            if as_module.is_empty() && !defines(&in_parent, name) {
                missing.push(span.to_string());
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} names checked: is the doc still the map?"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what is not there: {missing:?}"
    );
}

/// The state section's short names (`lifecycle::start`, `trace::sweep`,
/// `StateDir::lock_rootfs`) are items of nvc-host.
#[test]
fn the_state_sections_short_names_are_nvc_hosts_items() {
    let repo = repo();
    let doc = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let section = doc
        .split("## The host's state and a container's life")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the doc has a section on the host's state");
    let src = repo.join("host/src");
    let mut missing = Vec::new();
    for span in quoted(section) {
        let Some((module, item)) = span.split_once("::") else {
            continue;
        };
        if module.contains(' ') || item.contains(' ') || module.starts_with("nvc_") {
            continue;
        }
        let item = item.rsplit("::").next().unwrap_or(item);
        // A module of nvc-host (`trace::sweep`), or a type's method (`StateDir::lock_rootfs`).
        let text = match module_text(&src, &[&module.to_lowercase()]) {
            t if !t.is_empty() => t,
            _ => ["state", "trace", "lifecycle", "leases", "setup"]
                .iter()
                .map(|m| module_text(&src, &[m]))
                .collect(),
        };
        if !defines(&text, item) {
            missing.push(span.to_string());
        }
    }
    assert!(missing.is_empty(), "not in nvc-host: {missing:?}");
}
