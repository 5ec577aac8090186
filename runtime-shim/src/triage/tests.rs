//! The fast path's test against the full pipeline: on every spec where
//! [`may_ask_for_gpu`] says no, under every configuration, the plan of the runtime
//! stage leaves the container alone (no GPU, no error).

use std::path::{Path, PathBuf};

use libnvc::plan::{ConfigSource, Handed, Plan, Stage};
use nvc_config::Config;
use nvc_host::probe::RealHost;
use serde_json::{json, Value};

use super::*;

const ENV: &[&str] = &[
    "PATH=/usr/bin",
    "HOME=/root",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_VISIBLE_DEVICES=void",
    "NVIDIA_VISIBLE_DEVICES=none",
    "NVIDIA_VISIBLE_DEVICES=",
    "NVIDIA_VISIBLE_DEVICES=0,1",
    "NVIDIA_VISIBLE_DEVICES=bogus!",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES=all",
    "NVIDIA_DRIVER_CAPABILITIES=warp",
    "NVIDIA_REQUIRE_CUDA=cuda>=11.0",
    "NVIDIA_REQUIRE_X=???",
    "NVIDIA_DISABLE_REQUIRE=maybe",
    "NVIDIA_IMEX_CHANNELS=0",
    "NVIDIA_MIG_CONFIG_DEVICES=all",
    "NVIDIA_MIG_MONITOR_DEVICES=x",
    "CUDA_VERSION=12.2",
    "CUDA_VERSION=",
    "CUDA_VERSION",
    "CUDA_VERSIONS=12",
    "nvidia_visible_devices=all",
    "XNVIDIA_VISIBLE_DEVICES=all",
    " NVIDIA_VISIBLE_DEVICES=all",
    "=NVIDIA_VISIBLE_DEVICES=all",
];

const ANNOTATIONS: &[(&str, &str)] = &[
    ("cdi.k8s.io/gpu", "nvidia.com/gpu=all"),
    ("cdi.k8s.io/net", "example.com/net=eth0"),
    ("cdi.k8s.io/bad", "garbage"),
    ("cdi.k8s.io", "nvidia.com/gpu=0"),
    ("nvidia.com/gpu", "all"),
    ("io.kubernetes.cri.container-type", "container"),
];

const MOUNTS: &[&str] = &[
    "/var/run/nvidia-container-devices/0",
    "/var/run/nvidia-container-devices/all",
    "/var/run/nvidia-container-devices/imex/1",
    "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=0",
    "/var/run/nvidia-container-devices/bad!",
    "/var/run/nvidia-container-devices",
    "/run/nvidia-container-devices/0",
    "/data",
];

/// The configurations a node may run: the defaults, the strict policy, device mounts
/// read, requirements off, no default capabilities.
fn configs(dir: &Path) -> Vec<(Config, PathBuf)> {
    let mut out = Vec::new();
    let mut add = |name: &str, edit: &dyn Fn(&mut Config)| {
        let mut config = Config::default();
        // A driver that is not there: a plan that gets as far as the driver fails.
        config.driver.root = dir.join("no-driver");
        config.driver.dev_root = dir.join("no-driver");
        config.driver.proc_root = dir.join("no-driver");
        edit(&mut config);
        out.push((config, dir.join(format!("{name}.toml"))));
    };
    add("default", &|_| {});
    add("strict", &|c| {
        c.requests.accept_envvar_when_unprivileged = false
    });
    add("mounts", &|c| {
        c.requests.accept_devices_as_volume_mounts = true
    });
    add("strict-mounts", &|c| {
        c.requests.accept_envvar_when_unprivileged = false;
        c.requests.accept_devices_as_volume_mounts = true;
    });
    add("no-require", &|c| c.requests.disable_require = true);
    add("no-defaults", &|c| c.requests.default_capabilities.clear());
    out
}

/// A small deterministic generator (xorshift), so that a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T], most: usize) -> Vec<&'a T> {
        (0..self.below(most + 1))
            .map(|_| &items[self.below(items.len())])
            .collect()
    }
}

fn spec(env: &[&&str], annotations: &[&(&str, &str)], mounts: &[&&str], privileged: bool) -> Value {
    let caps: Vec<&str> = if privileged {
        vec!["CAP_SYS_ADMIN", "CAP_CHOWN"]
    } else {
        vec!["CAP_CHOWN"]
    };
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "args": ["/bin/true"],
            "env": env,
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        },
        "root": {"path": "rootfs"},
        "annotations": annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "mounts": mounts.iter().map(|d| json!({"destination": d, "type": "bind", "source": "/tmp", "options": ["rbind"]})).collect::<Vec<_>>(),
    })
}

#[test]
fn no_container_the_plan_would_touch_passes_the_fast_path() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let configs = configs(dir.path());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut fast, mut slow, mut slow_but_untouched) = (0, 0, 0);
    for case in 0..1500 {
        let env = rng.pick(ENV, 3);
        let annotations = rng.pick(ANNOTATIONS, 2);
        let mounts = rng.pick(MOUNTS, 2);
        let privileged = rng.below(2) == 0;
        let spec = spec(&env, &annotations, &mounts, privileged);
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let view = read_view(&bundle).unwrap();
        let asks = may_ask_for_gpu(&view);
        for (config, path) in &configs {
            let source = ConfigSource {
                path,
                from_env: true,
            };
            let plan = Plan::for_bundle(
                &bundle,
                config,
                &source,
                &RealHost,
                Stage::Runtime,
                &Handed::default(),
            );
            let untouched = matches!(&plan, Ok(p) if p.gpu.is_none());
            if !asks {
                assert!(
                    untouched,
                    "case {case}: the fast path would pass a container the plan {} \
                     ({path:?}):\n{spec:#}",
                    match &plan {
                        Ok(_) => "gives a GPU".to_string(),
                        Err(e) => format!("refuses: {}", e.error),
                    }
                );
                fast += 1;
            } else {
                slow += 1;
                slow_but_untouched += usize::from(untouched);
            }
        }
    }
    // Both paths are exercised, and the slow one is not taken for nothing everywhere.
    assert!(fast > 500 && slow > 500, "fast {fast}, slow {slow}");
    assert!(slow_but_untouched < slow, "{slow_but_untouched} of {slow}");
}

#[test]
fn each_way_of_asking_takes_the_slow_path() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let asks = |spec: Value| {
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        may_ask_for_gpu(&read_view(&bundle).unwrap())
    };
    assert!(!asks(spec(&[&"PATH=/bin"], &[], &[&"/data"], true)));
    assert!(!asks(spec(
        &[&"CUDA_VERSION"],
        &[&("nvidia.com/gpu", "all")],
        &[],
        false
    )));
    assert!(asks(spec(
        &[&"NVIDIA_VISIBLE_DEVICES=void"],
        &[],
        &[],
        false
    )));
    assert!(asks(spec(&[&"CUDA_VERSION=12.2"], &[], &[], false)));
    assert!(asks(spec(
        &[],
        &[&("cdi.k8s.io/x", "nvidia.com/gpu=0")],
        &[],
        false
    )));
    assert!(asks(spec(
        &[],
        &[],
        &[&"/var/run/nvidia-container-devices/0"],
        false
    )));
    // A spec without a process asks for nothing.
    let mut bare = spec(&[], &[], &[], false);
    bare.as_object_mut().unwrap().remove("process");
    assert!(!asks(bare));
}
