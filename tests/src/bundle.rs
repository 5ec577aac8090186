//! OCI bundles for tests: a directory with a `config.json` like the one `runc spec` writes,
//! edited through small builder methods or JSON pointers.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::FakeError;

/// The `PATH` every bundle's process starts with; [`Bundle::env`] appends after it.
pub const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Docker's default capability set, which GPU containers usually run with.
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability up to `CAP_CHECKPOINT_RESTORE` (40), in the kernel's numbering order.
pub const ALL_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// An OCI bundle: `dir/config.json`, kept in memory as JSON so tests can edit any field.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle directory, absolute.
    pub dir: PathBuf,
    /// The configuration [`Bundle::write`] saves.
    pub config: Value,
}

impl Bundle {
    /// Creates `dir` if needed and writes a default `config.json` (see [`default_config`])
    /// for the rootfs at `rootfs`. `root.path` is relative (as `runc spec` writes it) when
    /// the rootfs is inside `dir`, absolute (as Docker and containerd write it) otherwise.
    pub fn new(dir: &Path, rootfs: &Path) -> Result<Bundle, FakeError> {
        let dir = std::path::absolute(dir).map_err(FakeError::io("make absolute", dir))?;
        let rootfs = std::path::absolute(rootfs).map_err(FakeError::io("make absolute", rootfs))?;
        std::fs::create_dir_all(&dir).map_err(FakeError::io("create directory", &dir))?;
        let root_path = match rootfs.strip_prefix(&dir) {
            Ok(relative) if !relative.as_os_str().is_empty() => relative.to_path_buf(),
            _ => rootfs.clone(),
        };
        Bundle {
            dir,
            config: default_config(&root_path.to_string_lossy()),
        }
        .write()
    }

    /// `<dir>/config.json`.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    /// Sets `process.args`.
    pub fn args<S: AsRef<str>>(self, args: &[S]) -> Self {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        self.set("/process/args", json!(args))
    }

    /// Appends `KEY=value` entries to `process.env` (after `PATH`).
    pub fn env<S: AsRef<str>>(mut self, env: &[S]) -> Self {
        let list = self.array_at("/process/env");
        list.extend(env.iter().map(|e| json!(e.as_ref())));
        self
    }

    /// Sets `root.readonly`.
    pub fn readonly(self, readonly: bool) -> Self {
        self.set("/root/readonly", json!(readonly))
    }

    /// Makes the container privileged the way `docker run --privileged` does, less the host's
    /// device nodes: every capability of this process's bounding set (runc fails with
    /// "unable to apply caps" on one outside it, as in a container that dropped some), no
    /// masked or read-only paths, `/sys` writable, every device allowed in the device cgroup.
    pub fn privileged(self) -> Self {
        let caps = bounding_set();
        let mut bundle = self
            .set("/process/capabilities", capabilities(&caps))
            .set("/linux/maskedPaths", json!([]))
            .set("/linux/readonlyPaths", json!([]))
            .set(
                "/linux/resources/devices",
                json!([{ "allow": true, "access": "rwm" }]),
            );
        for mount in bundle.array_at("/mounts").iter_mut() {
            if mount["destination"] == "/sys" {
                if let Some(options) = mount["options"].as_array_mut() {
                    options.retain(|o| o != "ro");
                    options.push(json!("rw"));
                }
            }
        }
        bundle
    }

    /// Sets the value at JSON pointer `pointer` (RFC 6901, `~0`/`~1` escapes), creating
    /// missing objects on the way; `-` as the last token of an array appends.
    ///
    /// # Panics
    ///
    /// When the pointer goes through a value that is not an object or array, or indexes an
    /// array past its end: a mistake in the test.
    #[track_caller]
    pub fn set(mut self, pointer: &str, value: Value) -> Self {
        if let Err(why) = set_pointer(&mut self.config, pointer, value) {
            panic!("Bundle::set({pointer:?}): {why}");
        }
        self
    }

    /// Applies a CDI spec (as JSON) to the bundle the way CDI's own library does for
    /// Podman and containerd: the spec's common edits, then those of each device named in
    /// `devices` (env, device nodes with their cgroup rules, bind mounts, hooks), leaving
    /// out the hooks `keep_hook` says no to.
    ///
    /// # Panics
    ///
    /// When the spec has no device of a name in `devices`, or a hook without `hookName`.
    #[track_caller]
    pub fn with_cdi_edits(
        mut self,
        spec: &Value,
        devices: &[&str],
        keep_hook: impl Fn(&Value) -> bool,
    ) -> Self {
        let mut edits = vec![&spec["containerEdits"]];
        for name in devices {
            let device = spec["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|d| d["name"] == *name)
                .unwrap_or_else(|| panic!("the CDI spec has no device {name}"));
            edits.push(&device["containerEdits"]);
        }
        let list = |e: &Value, key: &str| e[key].as_array().cloned().unwrap_or_default();
        for e in edits {
            for env in list(e, "env") {
                self = self.env(&[env.as_str().unwrap_or_default()]);
            }
            for n in list(e, "deviceNodes") {
                self = self
                    .set(
                        "/linux/devices/-",
                        json!({"path": n["path"], "type": "c", "major": n["major"],
                               "minor": n["minor"], "fileMode": n["fileMode"],
                               "uid": n["uid"], "gid": n["gid"]}),
                    )
                    .set(
                        "/linux/resources/devices/-",
                        json!({"allow": true, "type": "c", "major": n["major"],
                               "minor": n["minor"], "access": "rwm"}),
                    );
            }
            for m in list(e, "mounts") {
                self = self.set(
                    "/mounts/-",
                    json!({"destination": m["containerPath"], "source": m["hostPath"],
                           "type": "bind", "options": m["options"]}),
                );
            }
            for h in list(e, "hooks").into_iter().filter(|h| keep_hook(h)) {
                let stage = h["hookName"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a CDI hook without hookName: {h}"));
                self = self.set(
                    &format!("/hooks/{stage}/-"),
                    json!({"path": h["path"], "args": h["args"], "env": h["env"]}),
                );
            }
        }
        self
    }

    /// Saves [`Bundle::config`] to `<dir>/config.json`.
    pub fn write(self) -> Result<Self, FakeError> {
        let path = self.config_path();
        let mut text = serde_json::to_string_pretty(&self.config).unwrap_or_default();
        text.push('\n');
        std::fs::write(&path, text).map_err(FakeError::io("write", &path))?;
        Ok(self)
    }

    /// Reads `<dir>/config.json` as it is on disk now, e.g. after a runtime shim edited it.
    pub fn read_config(&self) -> Result<Value, FakeError> {
        let path = self.config_path();
        let text = std::fs::read_to_string(&path).map_err(FakeError::io("read", &path))?;
        serde_json::from_str(&text).map_err(|e| FakeError::Check {
            what: format!("config.json is not valid JSON: {e}"),
            path,
        })
    }

    /// The array at `pointer`, made an empty array first if it is anything else.
    fn array_at(&mut self, pointer: &str) -> &mut Vec<Value> {
        if !self.config.pointer(pointer).is_some_and(Value::is_array) {
            if let Err(why) = set_pointer(&mut self.config, pointer, json!([])) {
                unreachable!("{pointer} is a valid path: {why}");
            }
        }
        match self.config.pointer_mut(pointer) {
            Some(Value::Array(list)) => list,
            _ => unreachable!("{pointer} was just made an array"),
        }
    }
}

/// The names of [`ALL_CAPABILITIES`] in this process's bounding set (`CapBnd` of
/// `/proc/self/status`); all of them if that cannot be read.
pub fn bounding_set() -> Vec<&'static str> {
    let mask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|l| l.starts_with("CapBnd:"))?
                .to_string();
            u64::from_str_radix(line.trim_start_matches("CapBnd:").trim(), 16).ok()
        })
        .unwrap_or(u64::MAX);
    // ALL_CAPABILITIES is in the kernel's numbering order.
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1 << bit) != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// The `process.capabilities` object with `caps` in the bounding, effective and permitted
/// sets, as Docker writes it.
fn capabilities(caps: &[&str]) -> Value {
    json!({ "bounding": caps, "effective": caps, "permitted": caps })
}

/// A `config.json` like `runc spec`'s for a non-terminal container running `sh`: pid, ipc,
/// uts, mount and network namespaces, the standard `/proc`, `/dev`, `/dev/pts`, `/dev/shm`,
/// `/dev/mqueue`, `/sys` and `/sys/fs/cgroup` mounts, Docker's default capabilities, runc's
/// masked and read-only paths, a device cgroup that denies everything runc does not add
/// itself, and a writable rootfs at `root_path`.
pub fn default_config(root_path: &str) -> Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": ["sh"],
            "env": [DEFAULT_PATH_ENV],
            "cwd": "/",
            "capabilities": capabilities(DEFAULT_CAPABILITIES),
            "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }],
            "noNewPrivileges": true
        },
        "root": { "path": root_path, "readonly": false },
        "hostname": "nvc-test",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" },
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]
            },
            {
                "destination": "/dev/mqueue",
                "type": "mqueue",
                "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"]
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"]
            },
            {
                "destination": "/sys/fs/cgroup",
                "type": "cgroup",
                "source": "cgroup",
                "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]
            }
        ],
        "linux": {
            "resources": { "devices": [{ "allow": false, "access": "rwm" }] },
            "namespaces": [
                { "type": "pid" },
                { "type": "network" },
                { "type": "ipc" },
                { "type": "uts" },
                { "type": "mount" }
            ],
            "maskedPaths": [
                "/proc/acpi",
                "/proc/asound",
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/sys/firmware",
                "/proc/scsi"
            ],
            "readonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger"
            ]
        }
    })
}

/// Sets `value` at `pointer` in `target`; see [`Bundle::set`].
fn set_pointer(target: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        *target = value;
        return Ok(());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("a JSON pointer starts with '/'".to_string());
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last().ok_or("empty pointer")?;
    let mut current = target;
    for (i, token) in parents.iter().enumerate() {
        if current.is_null() {
            *current = json!({});
        }
        let next_is_index = tokens[i + 1] == "-" || tokens[i + 1].parse::<usize>().is_ok();
        current = match current {
            Value::Object(map) => map.entry(token.clone()).or_insert_with(|| {
                if next_is_index {
                    json!([])
                } else {
                    Value::Null
                }
            }),
            Value::Array(list) => {
                let len = list.len();
                let index = token
                    .parse::<usize>()
                    .map_err(|_| format!("{token:?} is not an index of an array"))?;
                list.get_mut(index)
                    .ok_or(format!("index {index} is past the end ({len})"))?
            }
            other => return Err(format!("{token:?} goes through a {}", kind(other))),
        };
    }
    if current.is_null() {
        *current = json!({});
    }
    match current {
        Value::Object(map) => {
            map.insert(last.clone(), value);
        }
        Value::Array(list) if last == "-" => list.push(value),
        Value::Array(list) => {
            let len = list.len();
            let index = last
                .parse::<usize>()
                .map_err(|_| format!("{last:?} is not an index of an array"))?;
            let slot = list
                .get_mut(index)
                .ok_or(format!("index {index} is past the end ({len})"))?;
            *slot = value;
        }
        other => return Err(format!("{last:?} sets a field of a {}", kind(other))),
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_edits() {
        let mut v = json!({ "a": { "b": [1, 2] } });
        set_pointer(&mut v, "/a/b/0", json!(9)).unwrap();
        set_pointer(&mut v, "/a/b/-", json!(3)).unwrap();
        set_pointer(&mut v, "/a/c~1d/e", json!("x")).unwrap();
        set_pointer(&mut v, "/new/list/-", json!(1)).unwrap();
        assert_eq!(
            v,
            json!({ "a": { "b": [9, 2, 3], "c/d": { "e": "x" } }, "new": { "list": [1] } })
        );
        assert!(set_pointer(&mut v, "/a/b/7", json!(0)).is_err());
        assert!(set_pointer(&mut v, "/a/c~1d/e/f", json!(0)).is_err());
        assert!(set_pointer(&mut v, "a", json!(0)).is_err());
    }
}
