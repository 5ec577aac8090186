//! Golden tests of `libnvc::oci::spec`: a realistic config.json (`runc spec` output with
//! unknown top-level and nested keys, no `process.user`) → `apply` → compared with the
//! expected file under `tests/data/`. Run with `NVC_BLESS=1` to rewrite the expected
//! files after an intended change, then review the diff.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use libnvc::discover::DeviceNode;
use libnvc::edits::ContainerEdits;
use libnvc::oci::spec::{self, HookEntry};
use serde_json::Value;

/// The spec at `path`, parsed as the shim parses it.
fn read(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    spec::parse_spec(&bytes, false, path).unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn node(name: &str, major: u32, minor: u32) -> DeviceNode {
    DeviceNode::in_spec(&Path::new("/dev").join(name), Path::new("/"), major, minor)
}

/// What a two-GPU host gives a `compute,utility` container.
fn edits() -> ContainerEdits {
    ContainerEdits {
        device_nodes: vec![
            node("nvidiactl", 195, 255),
            node("nvidia-uvm", 510, 0),
            node("nvidia-uvm-tools", 510, 1),
            node("nvidia0", 195, 0),
            node("nvidia1", 195, 1),
        ],
        ..ContainerEdits::default()
    }
}

fn hook() -> HookEntry {
    HookEntry {
        path: PathBuf::from("/usr/bin/nvc-hook"),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "NVC_CONFIG=/etc/nvc/test.toml".into(),
        ],
        timeout: Some(32),
        poststop: true,
    }
}

/// Compares `got` with the expected file, showing both in full on a difference.
fn golden(got: &Value, expected: &str) {
    let got = serde_json::to_string_pretty(got).unwrap() + "\n";
    let path = data(expected);
    if std::env::var_os("NVC_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "{} differs from the result at line {} (NVC_BLESS=1 rewrites it)\n--- got\n{got}\n--- want\n{want}",
            path.display(),
            first + 1
        );
    }
}

fn input() -> Value {
    read(&data("runc-spec.json"))
}

#[test]
fn golden_apply() {
    let mut spec = input();
    assert!(spec::apply(&mut spec, &edits(), &hook()).unwrap());
    golden(&spec, "runc-spec.expected.json");
}

#[test]
fn apply_is_idempotent_to_the_byte() {
    let mut spec = input();
    spec::apply(&mut spec, &edits(), &hook()).unwrap();
    let once = spec::to_bytes(&spec).unwrap();
    assert!(!spec::apply(&mut spec, &edits(), &hook()).unwrap());
    assert_eq!(spec::to_bytes(&spec).unwrap(), once);

    // Through the file as well: save the bytes, read back, apply, same bytes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, &once).unwrap();
    let mut again = read(&path);
    assert!(!spec::apply(&mut again, &edits(), &hook()).unwrap());
    assert_eq!(
        spec::to_bytes(&again).unwrap(),
        std::fs::read(&path).unwrap()
    );
}

#[test]
fn unknown_fields_survive_in_place() {
    let before = input();
    let mut after = before.clone();
    spec::apply(&mut after, &edits(), &hook()).unwrap();
    for pointer in [
        "/vendorExtension",
        "/process/x-vendorProcessKnob",
        "/linux/unknownKnob",
        "/linux/resources/unknownResource",
        "/hooks/createContainer",
        "/mounts",
        "/process/env",
    ] {
        assert_eq!(after.pointer(pointer), before.pointer(pointer), "{pointer}");
    }
    // The annotations keep their values and order, and nvc adds none: every hook reads
    // them in the container's state (the one for crun's hook output is the shim's, and
    // only under crun).
    let annotations = before["annotations"].clone();
    assert_eq!(after["annotations"], annotations);
    assert!(
        after.pointer("/process/user").is_none(),
        "nothing is invented"
    );
    // Every key keeps its place; new keys only follow the old ones.
    fn keys(v: &Value) -> Vec<&String> {
        v.as_object().unwrap().keys().collect()
    }
    assert_eq!(keys(&after["annotations"]), keys(&annotations));
    for pointer in ["", "/process", "/linux", "/linux/resources", "/hooks"] {
        let (b, a) = (
            keys(before.pointer(pointer).unwrap()),
            keys(after.pointer(pointer).unwrap()),
        );
        assert_eq!(&a[..b.len()], &b[..], "{pointer}");
    }
    // 2^64-1 and -2^63 survive as written.
    let text = String::from_utf8(spec::to_bytes(&after).unwrap()).unwrap();
    assert!(text.contains("\"big\":18446744073709551615"), "{text}");
    assert!(text.contains("\"neg\":-9223372036854775808"), "{text}");
}

#[test]
fn docker_gpus_hook_is_not_duplicated() {
    let mut spec = input();
    spec["hooks"]["prestart"] = serde_json::json!([{
        "path": "/usr/bin/nvidia-container-runtime-hook",
        "args": ["/usr/bin/nvidia-container-runtime-hook", "prestart"]
    }]);
    spec::apply(&mut spec, &edits(), &hook()).unwrap();
    let prestart = spec["hooks"]["prestart"].as_array().unwrap();
    assert_eq!(prestart.len(), 1);
    assert_eq!(
        prestart[0]["path"],
        "/usr/bin/nvidia-container-runtime-hook"
    );
    // The device nodes are still added.
    assert_eq!(spec["linux"]["devices"].as_array().unwrap().len(), 6);
}

#[test]
fn view_of_the_golden_input() {
    let view = spec::view(&input(), Path::new("/run/bundle")).unwrap();
    assert!(view.env.contains(&"NVIDIA_VISIBLE_DEVICES=all".to_string()));
    assert!(!view.privileged);
    assert_eq!(view.rootfs, PathBuf::from("/run/bundle/rootfs"));
    assert!(view.readonly);
    assert_eq!(view.devices, vec![(PathBuf::from("/dev/fuse"), 10, 229)]);
    assert_eq!(view.annotations.len(), 2);
}

#[test]
fn wrong_type_in_a_real_spec_is_an_error() {
    let mut spec = input();
    spec["linux"]["devices"] = Value::String("/dev/nvidia0".into());
    let before = spec.clone();
    let e = spec::apply(&mut spec, &edits(), &hook()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the spec's linux.devices is a string, expected an array"
    );
    assert_eq!(spec, before);
}
