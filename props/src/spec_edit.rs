//! Editing a bundle's `config.json` ([`libnvc::oci::spec`]).
//!
//! The input, when it is JSON, is the spec; it is also merged into a realistic base spec
//! (`runc spec`'s, see [`base_spec`]) so that random fields land around the ones
//! [`apply`] edits. The edits are fixed: the device nodes and prestart hook the runtime
//! shim adds for one GPU ([`edits`], [`hook`]).
//!
//! Properties:
//! - no spec makes [`apply`] or [`view`] panic;
//! - on error, or when [`apply`] reports no change, the spec is exactly as it was;
//! - what [`apply`] does not own survives: every value in the spec before is unchanged
//!   after, at the same place (object keys keep their order; new keys come last), except
//!   that the arrays `apply` adds to (`hooks.prestart`, `linux.devices`,
//!   `linux.resources.devices`) only grow at their end, and that a null or missing
//!   object or array on the way to them becomes one;
//! - after a successful [`apply`] the spec has the hook (or a known driver hook), every
//!   device node's path in `linux.devices`, and every node's allow rule;
//! - applying twice is applying once: the second call reports no change and leaves the
//!   same value, so the same bytes.

use std::path::{Path, PathBuf};

use libnvc::discover::DeviceNode;
use libnvc::edits::ContainerEdits;
use libnvc::oci::spec::{apply, has_driver_hook, to_bytes, view, HookEntry};
use serde_json::{json, Value};

/// The paths (as JSON pointers' components) of the objects and arrays that [`apply`]
/// creates or appends to.
const OWNED: &[&[&str]] = &[
    &["hooks"],
    &["hooks", "prestart"],
    &["hooks", "poststop"],
    &["linux"],
    &["linux", "devices"],
    &["linux", "resources"],
    &["linux", "resources", "devices"],
];

/// Checks every property above for one input.
pub fn check(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut merged = base_spec();
    merge(&mut merged, &input);
    check_spec(input);
    check_spec(merged);
}

fn check_spec(before: Value) {
    let edits = edits();
    let hook = hook();
    let _ = view(&before, std::path::Path::new("/bundle"));
    let _ = has_driver_hook(&before, &hook);

    let mut after = before.clone();
    let changed = match apply(&mut after, &edits, &hook) {
        Ok(changed) => changed,
        Err(_) => {
            assert_eq!(after, before, "a failed apply changed the spec");
            return;
        }
    };
    if !changed {
        assert_eq!(
            after, before,
            "apply reported no change but changed the spec"
        );
    }
    survives(&before, &after, &mut Vec::new());
    assert_has_edits(&after, &edits, &hook);

    let mut twice = after.clone();
    match apply(&mut twice, &edits, &hook) {
        Ok(false) => {}
        Ok(true) => panic!("a second apply changed the spec again:\n{after}\n{twice}"),
        Err(e) => panic!("a second apply failed: {e}"),
    }
    assert_eq!(twice, after, "a second apply changed the spec");
    let (once, again) = (to_bytes(&after), to_bytes(&twice));
    assert_eq!(once.ok(), again.ok(), "a second apply changed the bytes");
    let _ = view(&after, std::path::Path::new("/bundle"));
}

/// Whether `path` is one of the containers `apply` owns.
fn owned(path: &[String]) -> bool {
    OWNED
        .iter()
        .any(|o| o.len() == path.len() && o.iter().zip(path).all(|(a, b)| a == b))
}

/// `path` as a JSON pointer, for messages.
fn pointer(path: &[String]) -> String {
    format!("/{}", path.join("/"))
}

/// Checks that `before` survives in `after` at `path`.
fn survives(before: &Value, after: &Value, path: &mut Vec<String>) {
    match (before, after) {
        (Value::Null, Value::Object(_) | Value::Array(_)) if owned(path) => {}
        (Value::Object(b), Value::Object(a)) => {
            let b_keys: Vec<&String> = b.keys().collect();
            let a_keys: Vec<&String> = a.keys().take(b_keys.len()).collect();
            assert_eq!(
                a_keys,
                b_keys,
                "the keys of {} changed order",
                pointer(path)
            );
            for (key, value) in b {
                path.push(key.clone());
                survives(value, &a[key], path);
                path.pop();
            }
            for key in a.keys().skip(b_keys.len()) {
                path.push(key.clone());
                assert!(owned(path), "{} added", pointer(path));
                path.pop();
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            assert!(a.len() >= b.len(), "{} lost items", pointer(path));
            if !owned(path) {
                assert_eq!(a.len(), b.len(), "items added to {}", pointer(path));
            }
            for (i, (x, y)) in b.iter().zip(a).enumerate() {
                path.push(i.to_string());
                survives(x, y, path);
                path.pop();
            }
        }
        (b, a) => assert_eq!(a, b, "{} changed", pointer(path)),
    }
}

fn assert_has_edits(spec: &Value, edits: &ContainerEdits, hook: &HookEntry) {
    assert!(
        matches!(has_driver_hook(spec, hook), Ok(true)),
        "no driver hook after apply: {spec}"
    );
    let devices = spec
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no linux.devices after apply: {spec}"));
    let rules = spec
        .pointer("/linux/resources/devices")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no linux.resources.devices after apply: {spec}"));
    for node in &edits.device_nodes {
        let path = node.path.to_str().unwrap_or_default();
        assert!(
            devices
                .iter()
                .any(|d| d.get("path").and_then(Value::as_str) == Some(path)),
            "{path} not in linux.devices: {spec}"
        );
        let rule = json!({
            "allow": true,
            "type": "c",
            "major": node.major,
            "minor": node.minor,
            "access": "rwm",
        });
        assert!(rules.contains(&rule), "no rule {rule} in {spec}");
    }
}

/// Merges `overlay` into `base`: objects key by key, anything else replaces.
pub fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (key, value) in o {
                match b.get_mut(key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        b.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (slot, value) => *slot = value.clone(),
    }
}

fn node(path: &str, major: u32, minor: u32) -> DeviceNode {
    DeviceNode::in_spec(Path::new(path), Path::new("/"), major, minor)
}

/// The edits the runtime shim applies for GPU 0 of a host whose `nvidia-uvm` major is
/// 508: the GPU's node, the control and UVM nodes, and a MIG capability node.
pub fn edits() -> ContainerEdits {
    ContainerEdits {
        env: vec!["NVIDIA_VISIBLE_DEVICES=void".to_string()],
        device_nodes: vec![
            node("/dev/nvidiactl", 195, 255),
            node("/dev/nvidia-uvm", 508, 0),
            node("/dev/nvidia-uvm-tools", 508, 1),
            node("/dev/nvidia0", 195, 0),
            node("/dev/nvidia-caps/nvidia-cap1", 237, 1),
        ],
        ..ContainerEdits::default()
    }
}

/// The hook entry the runtime shim adds with the default configuration.
pub fn hook() -> HookEntry {
    HookEntry {
        path: PathBuf::from("/usr/bin/nvc-hook"),
        args: vec!["nvc-hook".to_string(), "prestart".to_string()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()],
        // hook.timeout (30 s by default) plus the 2 s the runtime waits before its kill.
        timeout: Some(32),
        poststop: true,
    }
}

/// A spec like `runc spec` writes, trimmed to the fields around the ones [`apply`] edits.
pub fn base_spec() -> Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": true,
            "user": { "uid": 0, "gid": 0 },
            "args": ["sh"],
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "TERM=xterm",
                "NVIDIA_VISIBLE_DEVICES=all"
            ],
            "cwd": "/",
            "capabilities": {
                "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
            },
            "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }],
            "noNewPrivileges": true
        },
        "root": { "path": "rootfs", "readonly": true },
        "hostname": "runc",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" }
        ],
        "hooks": { "createContainer": [{ "path": "/usr/bin/other-hook" }] },
        "linux": {
            "resources": { "devices": [{ "allow": false, "access": "rwm" }] },
            "namespaces": [{ "type": "pid" }, { "type": "mount" }],
            "devices": [{ "path": "/dev/fuse", "type": "c", "major": 10, "minor": 229 }],
            "maskedPaths": ["/proc/kcore"],
            "readonlyPaths": ["/proc/sys"]
        },
        "annotations": { "org.example": "kept" }
    })
}
