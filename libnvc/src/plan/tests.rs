#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;
use crate::probe::TreeProbe;

/// A host with two GPUs (proc tree and device nodes only), a bundle and a config, all in
/// one temporary folder.
struct Host {
    dir: tempfile::TempDir,
    config: Config,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let nvidia = p.join("proc/driver/nvidia");
        for (i, bus) in ["0000:06:00.0", "0000:07:00.0"].iter().enumerate() {
            let gpu = nvidia.join("gpus").join(bus);
            std::fs::create_dir_all(&gpu).unwrap();
            std::fs::write(
                gpu.join("information"),
                format!(
                    "Model: \t\t NVIDIA H100\nDevice Minor: \t {i}\nGPU UUID: \t GPU-{i}0000000-0000-0000-0000-000000000000\nBus Location: \t {bus}\n"
                ),
            )
            .unwrap();
        }
        std::fs::write(
            nvidia.join("version"),
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  999.88.77  Release Build\n",
        )
        .unwrap();
        std::fs::write(p.join("proc/devices"), "Character devices:\n195 nvidia\n").unwrap();
        std::fs::create_dir_all(p.join("dev")).unwrap();
        std::fs::create_dir_all(p.join("root")).unwrap();
        let hook = p.join("nvc-hook");
        std::fs::write(&hook, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(p.join("bundle/rootfs/dev")).unwrap();
        let mut config = Config::default();
        config.driver.root = p.join("root");
        config.driver.dev_root = p.to_path_buf();
        config.driver.proc_root = p.join("proc");
        config.hook.path = hook;
        let host = Host { dir, config };
        host.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
        host
    }

    fn probe(&self) -> TreeProbe {
        let p = self.dir.path();
        TreeProbe::new()
            .with_device(p.join("dev/nvidia0"), 195, 0, 0o666)
            .with_device(p.join("dev/nvidia1"), 195, 1, 0o666)
            .with_device(p.join("dev/nvidiactl"), 195, 255, 0o666)
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    fn spec(&self, env: &[&str]) {
        self.spec_value(json!({
            "ociVersion": "1.0.2",
            "process": {"env": env, "capabilities": {"bounding": []}},
            "root": {"path": "rootfs"},
            "linux": {"namespaces": [{"type": "mount"}]}
        }));
    }

    fn spec_value(&self, spec: Value) {
        std::fs::write(self.bundle().join("config.json"), spec.to_string()).unwrap();
    }

    fn plan(&self, probe: &TreeProbe, stage: Stage) -> Result<Plan, Stopped> {
        self.plan_handed(probe, stage, &Handed::default())
    }

    /// [`Host::plan`] of a hook handed `handed` by the shim.
    fn plan_handed(
        &self,
        probe: &TreeProbe,
        stage: Stage,
        handed: &Handed,
    ) -> Result<Plan, Stopped> {
        let source = ConfigSource {
            path: Path::new("/etc/nvc/config.toml"),
            from_env: false,
        };
        Plan::for_bundle(&self.bundle(), &self.config, &source, probe, stage, handed)
    }
}

#[test]
fn a_container_asking_for_no_gpu_gets_no_gpu_plan() {
    let host = Host::new();
    host.spec(&["PATH=/bin"]);
    for stage in [Stage::Runtime, Stage::Hook, Stage::Check] {
        let plan = host.plan(&host.probe(), stage).unwrap();
        assert!(plan.gpu.is_none(), "{stage:?}");
        assert_eq!(plan.spec_path, host.bundle().join("config.json"));
    }
}

#[test]
fn the_runtime_stage_plans_device_nodes_and_the_hook() {
    let host = Host::new();
    let plan = host.plan(&host.probe(), Stage::Runtime).unwrap();
    let gpu = plan.gpu.unwrap();
    let nodes: Vec<_> = gpu
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.clone())
        .collect();
    assert_eq!(
        nodes,
        [
            PathBuf::from("/dev/nvidiactl"),
            PathBuf::from("/dev/nvidia0"),
            PathBuf::from("/dev/nvidia1")
        ]
    );
    // Devices only: no library, no file.
    assert!(gpu.driver.libraries.is_empty() && gpu.edits.mounts.is_empty());
    let hook = gpu.hook.unwrap();
    assert!(!hook.in_spec);
    assert_eq!(hook.entry.path, host.config.hook.path);
    assert_eq!(hook.entry.args[..3], ["nvc-hook", "prestart", GPUS_ARG]);
    assert_eq!(hook.entry.env, [HOOK_PATH_ENV]);
    assert!(!gpu.requirements_checked);
    // The GPUs it read go to the hook: the same list, in its arguments.
    let handed = Handed::parse(&hook.entry.args[2..]).unwrap();
    let list = handed
        .gpus
        .unwrap()
        .fresh(&host.dir.path().join("proc/driver/nvidia"));
    let list = list.unwrap();
    assert_eq!(list.driver, "999.88.77");
    let ids = |l: &[crate::discover::proc::ProcGpu]| -> Vec<(String, u32, String)> {
        l.iter()
            .map(|g| (g.bus_id.clone(), g.minor, g.uuid.clone()))
            .collect()
    };
    let read: Vec<(String, u32, String)> = gpu
        .driver
        .gpus
        .iter()
        .map(|g| (g.bus_id.clone(), g.minor, g.uuid.clone()))
        .collect();
    assert_eq!(ids(&list.gpus), read);
}

/// `--gpus` as nvc-runtime writes it, for `driver`, `age_ms` old, each GPU's model `model`.
fn handed_gpus(driver: &str, age_ms: u64, model: &str) -> Handed {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let gpu = |i: u32, bus: &str| {
        json!([
            bus,
            i,
            format!("GPU-{i}0000000-0000-0000-0000-000000000000"),
            model
        ])
    };
    let list = json!({
        "driver": driver,
        "at_ms": now - age_ms,
        "gpus": [gpu(0, "0000:06:00.0"), gpu(1, "0000:07:00.0")],
    });
    Handed::parse(&[GPUS_ARG.to_string(), list.to_string()]).unwrap()
}

#[test]
fn the_hook_takes_the_gpus_handed_to_it_only_fresh_and_for_the_running_driver() {
    let host = Host::new();
    let models = |handed: &Handed| -> Vec<String> {
        let plan = host
            .plan_handed(&host.probe(), Stage::Hook, handed)
            .unwrap();
        plan.gpu
            .unwrap()
            .driver
            .gpus
            .iter()
            .map(|g| g.model.clone())
            .collect()
    };
    // The proc files say "NVIDIA H100"; a handed list that says otherwise shows which
    // one the plan used.
    assert_eq!(models(&Handed::default()), ["NVIDIA H100"; 2]);
    assert_eq!(
        models(&handed_gpus("999.88.77", 0, "handed")),
        ["handed"; 2]
    );
    // Another driver since, or a list older than a start takes: read afresh.
    assert_eq!(
        models(&handed_gpus("999.88.76", 0, "handed")),
        ["NVIDIA H100"; 2]
    );
    let stale = HandedGpus::MAX_AGE.as_millis() as u64 + 1000;
    assert_eq!(
        models(&handed_gpus("999.88.77", stale, "handed")),
        ["NVIDIA H100"; 2]
    );
    // Only the hook takes it; `nvc check` and the shim read the host.
    let handed = handed_gpus("999.88.77", 0, "handed");
    let plan = host
        .plan_handed(&host.probe(), Stage::Check, &handed)
        .unwrap();
    assert_eq!(plan.gpu.unwrap().driver.gpus[0].model, "NVIDIA H100");
}

#[test]
fn each_stage_stops_where_its_program_would() {
    let host = Host::new();
    // A linked /dev: refused by the runtime and the check, left to runc by the hook.
    let dev = host.bundle().join("rootfs/dev");
    std::fs::remove_dir(&dev).unwrap();
    std::os::unix::fs::symlink("/tmp", &dev).unwrap();
    for stage in [Stage::Runtime, Stage::Check] {
        let stopped = host.plan(&host.probe(), stage).unwrap_err();
        assert_eq!(stopped.error.step(), Step::Rootfs, "{stage:?}");
        assert!(stopped.progress.view.is_some() && stopped.progress.request.is_none());
        assert!(matches!(
            stopped.error,
            PlanError::Rootfs(RootfsError::LinkedDev { .. })
        ));
    }
    assert!(host.plan(&host.probe(), Stage::Hook).unwrap().gpu.is_some());
    std::fs::remove_file(&dev).unwrap();
    std::fs::create_dir(&dev).unwrap();

    // A rootfs that is the host's `/`, for GPU containers only.
    let probe = host.probe().with_host_root(host.bundle().join("rootfs"));
    let stopped = host.plan(&probe, Stage::Runtime).unwrap_err();
    assert!(
        matches!(
            stopped.error,
            PlanError::Rootfs(RootfsError::HostRoot { .. })
        ),
        "{:?}",
        stopped.error
    );
    assert!(stopped.progress.request.is_some());
    host.spec(&["PATH=/bin"]);
    assert!(host.plan(&probe, Stage::Runtime).is_ok());
}

#[test]
fn a_gpu_container_needs_a_mount_namespace_of_its_own_at_every_stage() {
    let host = Host::new();
    let spec = |namespaces: Value, env: &[&str]| {
        host.spec_value(json!({
            "process": {"env": env},
            "root": {"path": "rootfs"},
            "linux": {"namespaces": namespaces}
        }))
    };
    let all = ["NVIDIA_VISIBLE_DEVICES=all"];
    for (namespaces, joined) in [
        (json!([{"type": "pid"}, {"type": "network"}]), false),
        (json!(null), false),
        (json!([{"type": "mount", "path": "/proc/1/ns/mnt"}]), true),
    ] {
        spec(namespaces.clone(), &all);
        for stage in [Stage::Runtime, Stage::Hook, Stage::Check] {
            let stopped = host.plan(&host.probe(), stage).unwrap_err();
            assert_eq!(stopped.error.step(), Step::Namespace, "{stage:?}");
            assert_eq!(stopped.error.step().name(), "namespace");
            assert_eq!(stopped.error.step().program(), "nvc-runtime");
            // Named before the driver is read, once the request is known.
            assert!(stopped.progress.request.is_some() && stopped.progress.driver.is_none());
            let text = stopped.error.to_string();
            assert!(
                text.contains("needs a mount namespace of its own"),
                "{namespaces}: {text}"
            );
            assert_eq!(
                text.contains("joins the one at /proc/1/ns/mnt"),
                joined,
                "{text}"
            );
            assert!(matches!(
                stopped.error,
                PlanError::Namespace(
                    NamespaceError::Inherited { .. } | NamespaceError::Joined { .. }
                )
            ));
        }
        // A container that asks for no GPU is the runtime's business alone.
        spec(namespaces, &["PATH=/bin"]);
        assert!(host
            .plan(&host.probe(), Stage::Runtime)
            .unwrap()
            .gpu
            .is_none());
    }
    spec(json!([{"type": "mount", "path": ""}]), &all);
    assert!(host
        .plan(&host.probe(), Stage::Runtime)
        .unwrap()
        .gpu
        .is_some());
}

#[test]
fn the_hook_must_exist_unless_the_spec_has_one() {
    let mut host = Host::new();
    host.config.hook.path = host.dir.path().join("absent/nvc-hook");
    let stopped = host.plan(&host.probe(), Stage::Runtime).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Hook);
    assert!(stopped.progress.edits.is_some());
    assert!(stopped.error.to_string().contains("absent/nvc-hook"));
    // The hook stage has no hook entry to check.
    assert!(host.plan(&host.probe(), Stage::Hook).is_ok());
    host.spec_value(json!({
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "mount"}]},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}
    }));
    let plan = host.plan(&host.probe(), Stage::Runtime).unwrap();
    assert!(plan.gpu.unwrap().hook.unwrap().in_spec);
}

#[test]
fn requirements_are_the_hook_s_and_checked_once_on_the_selected_gpus() {
    let host = Host::new();
    host.spec(&["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"]);
    let old = host.probe().with_cuda_version(12040);
    // The runtime does not check them: the hook does.
    assert!(host.plan(&old, Stage::Runtime).is_ok());
    for stage in [Stage::Hook, Stage::Check] {
        let stopped = host.plan(&old, stage).unwrap_err();
        assert_eq!(stopped.error.step(), Step::Requirements);
        assert_eq!(stopped.error.step().program(), "nvc-hook");
        assert!(
            stopped.error.to_string().contains("cuda>=13.0"),
            "{}",
            stopped.error
        );
    }
    let new = host.probe().with_cuda_version(13000);
    let plan = host.plan(&new, Stage::Hook).unwrap();
    assert!(plan.gpu.unwrap().requirements_checked);
    // Disabled: not checked at all (libcuda is not asked).
    host.spec(&[
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
        "NVIDIA_DISABLE_REQUIRE=1",
    ]);
    let plan = host.plan(&host.probe(), Stage::Check).unwrap();
    assert!(!plan.gpu.unwrap().requirements_checked);
}

#[test]
fn bad_input_names_its_step() {
    let host = Host::new();
    host.spec(&["NVIDIA_VISIBLE_DEVICES=7"]);
    let stopped = host.plan(&host.probe(), Stage::Runtime).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Edits);
    assert!(stopped.progress.driver.is_some());
    assert!(
        stopped.error.to_string().contains("GPU index 7"),
        "{}",
        stopped.error
    );

    host.spec(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=warp",
    ]);
    let stopped = host.plan(&host.probe(), Stage::Runtime).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Request);
    assert!(stopped.progress.view.is_some());

    host.spec_value(json!({"process": {"env": "x"}, "root": {"path": "rootfs"}}));
    let stopped = host.plan(&host.probe(), Stage::Hook).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Spec);
    assert!(stopped.error.to_string().starts_with("invalid OCI spec"));

    std::fs::remove_file(host.bundle().join("config.json")).unwrap();
    let stopped = host.plan(&host.probe(), Stage::Hook).unwrap_err();
    assert_eq!(stopped.error.step(), Step::Spec);
    assert!(matches!(stopped.error, PlanError::SpecFile(_)));
}

#[test]
fn the_check_uses_the_image_s_library_folders() {
    let host = Host::new();
    let rootfs = host.bundle().join("rootfs");
    let plan = host.plan(&host.probe(), Stage::Check).unwrap();
    assert_eq!(plan.gpu.unwrap().layout, ContainerLayout::debian());
    std::fs::create_dir_all(rootfs.join("usr/lib64")).unwrap();
    let plan = host.plan(&host.probe(), Stage::Check).unwrap();
    assert_eq!(plan.gpu.unwrap().layout, ContainerLayout::lib64());
    // The runtime and the hook plan for the default folders.
    let plan = host.plan(&host.probe(), Stage::Hook).unwrap();
    assert_eq!(plan.gpu.unwrap().layout, ContainerLayout::debian());
}

#[test]
fn device_mounts_are_handed_from_the_runtime_to_the_hook() {
    let mut host = Host::new();
    host.config.requests.accept_envvar_when_unprivileged = false;
    host.config.requests.accept_devices_as_volume_mounts = true;
    let uuid = "GPU-10000000-0000-0000-0000-000000000000";
    let mount = |d: &str| json!({"destination": d, "source": "/dev/null", "type": "bind", "options": ["bind", "ro"]});
    host.spec_value(json!({
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "mount"}]},
        "mounts": [
            mount("/proc"),
            mount(&format!("/var/run/nvidia-container-devices/{uuid}")),
        ]
    }));
    // The runtime reads the mount, and hands it to the hook it adds.
    let plan = host.plan(&host.probe(), Stage::Runtime).unwrap();
    let gpu = plan.gpu.unwrap();
    assert!(gpu.drop_device_mounts);
    let nodes: Vec<_> = gpu
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.clone())
        .collect();
    assert!(nodes.contains(&PathBuf::from("/dev/nvidia1")), "{nodes:?}");
    assert!(!nodes.contains(&PathBuf::from("/dev/nvidia0")), "{nodes:?}");
    let args = gpu.hook.unwrap().entry.args;
    assert_eq!(args[..4], ["nvc-hook", "prestart", DEVICE_MOUNT_ARG, uuid]);
    assert_eq!(args[4], GPUS_ARG);
    // A hook run without nvc-runtime (hooks.d, Docker's --gpus) reads the mount in the spec.
    assert!(host.plan(&host.probe(), Stage::Hook).unwrap().gpu.is_some());

    // With the mount gone from the spec, the hook plans from what it was handed; without
    // it, the container asks for nothing (the environment is not accepted).
    let mut spec = plan.spec.clone();
    assert!(spec::drop_device_mounts(&mut spec).unwrap());
    assert!(!spec::drop_device_mounts(&mut spec).unwrap());
    assert_eq!(spec["mounts"].as_array().unwrap().len(), 1);
    host.spec_value(spec);
    let handed = Handed {
        device_mounts: vec![uuid.to_string()],
        gpus: None,
    };
    let plan = host
        .plan_handed(&host.probe(), Stage::Hook, &handed)
        .unwrap();
    assert_eq!(plan.gpu.unwrap().driver.gpus.len(), 2);
    assert!(host.plan(&host.probe(), Stage::Hook).unwrap().gpu.is_none());

    // A hook already in the spec reads the mounts where they are: they stay.
    host.spec_value(json!({
        "process": {"env": []},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "mount"}]},
        "mounts": [mount(&format!("/var/run/nvidia-container-devices/{uuid}"))],
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}
    }));
    let gpu = host
        .plan(&host.probe(), Stage::Runtime)
        .unwrap()
        .gpu
        .unwrap();
    assert!(!gpu.drop_device_mounts);
    // Not accepted: the mount is no request.
    host.config.requests.accept_devices_as_volume_mounts = false;
    assert!(host
        .plan(&host.probe(), Stage::Runtime)
        .unwrap()
        .gpu
        .is_none());
}

/// A files cache in memory.
#[derive(Default)]
struct Kept(std::cell::RefCell<Option<crate::discover::DriverFiles>>);

impl FilesCache for Kept {
    fn load(&self, _: &DriverRoots, _: &str) -> Option<crate::discover::DriverFiles> {
        self.0.borrow().clone()
    }
    fn store(&self, _: &DriverRoots, files: &crate::discover::DriverFiles) {
        *self.0.borrow_mut() = Some(files.clone());
    }
}

#[test]
fn a_cuda_requirement_loads_libcuda_once_per_driver() {
    let host = Host::new();
    let kept = Kept::default();
    let source = ConfigSource {
        path: Path::new("/etc/nvc/config.toml"),
        from_env: false,
    };
    let plan = |probe: &TreeProbe| {
        Plan::for_bundle_cached(
            &host.bundle(),
            &host.config,
            &source,
            probe,
            Stage::Hook,
            &Handed::default(),
            Some(&kept),
        )
    };
    host.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
    plan(&host.probe()).unwrap();
    assert_eq!(kept.0.borrow().as_ref().unwrap().cuda_version, None);
    // The first start with a `cuda` constraint asks libcuda; the answer is kept with the
    // driver's files.
    host.spec(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
    ]);
    plan(&host.probe().with_cuda_version(12040)).unwrap();
    assert_eq!(kept.0.borrow().as_ref().unwrap().cuda_version, Some(12040));
    // The next ones are answered from it: this probe's libcuda cannot be loaded at all.
    let gpu = plan(&host.probe()).unwrap().gpu.unwrap();
    assert_eq!(gpu.driver.known_cuda_version, Some(12040));
    host.spec(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
    ]);
    let err = crate::report::error_chain(&plan(&host.probe()).unwrap_err().error);
    assert!(err.contains("cuda>=13.0") && err.contains("12.4"), "{err}");
    // Without a cache, libcuda is asked every time.
    assert!(host.plan(&host.probe(), Stage::Hook).is_err());
}

#[test]
fn the_health_record_read_through_the_probe_drops_or_refuses_a_broken_gpu() {
    use crate::health::{Fault, GpuHealth, HealthRecord, RECORD_FORMAT};
    let mut host = Host::new();
    let record = |driver: &str| {
        HealthRecord {
            format: RECORD_FORMAT,
            written: 5000,
            boot_id: "boot".into(),
            driver_version: driver.into(),
            gpus: vec![
                GpuHealth {
                    uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
                    bus_id: "0000:06:00.0".into(),
                    faults: Vec::new(),
                },
                GpuHealth {
                    uuid: "GPU-10000000-0000-0000-0000-000000000000".into(),
                    bus_id: "0000:07:00.0".into(),
                    faults: vec![Fault::Lost],
                },
            ],
        }
        .to_bytes()
    };
    let current = host
        .probe()
        .with_health_record(record("999.88.77"), "boot", 5010);
    let gpu_nodes = |plan: Plan| -> Vec<PathBuf> {
        plan.gpu
            .unwrap()
            .edits
            .device_nodes
            .iter()
            .map(|n| n.path.clone())
            .filter(|p| p != Path::new("/dev/nvidiactl"))
            .collect()
    };
    for stage in [Stage::Runtime, Stage::Hook, Stage::Check] {
        host.spec(&["NVIDIA_VISIBLE_DEVICES=all"]);
        let plan = host.plan(&current, stage).unwrap();
        assert_eq!(
            gpu_nodes(plan),
            [PathBuf::from("/dev/nvidia0")],
            "{stage:?}"
        );
        host.spec(&["NVIDIA_VISIBLE_DEVICES=1"]);
        let stopped = host.plan(&current, stage).unwrap_err();
        assert_eq!(stopped.error.step(), Step::Edits, "{stage:?}");
        assert!(
            matches!(&stopped.error, PlanError::Unhealthy(u) if u.index == 1),
            "{stage:?}: {}",
            stopped.error
        );
    }
    // A record of another driver, or none, blocks nothing.
    let other = host
        .probe()
        .with_health_record(record("550.54.15"), "boot", 5010);
    for probe in [&other, &host.probe()] {
        let plan = host.plan(probe, Stage::Runtime).unwrap();
        assert_eq!(gpu_nodes(plan), [PathBuf::from("/dev/nvidia1")]);
    }
    // Turned off.
    host.config.requests.health_check = false;
    let plan = host.plan(&current, Stage::Runtime).unwrap();
    assert_eq!(gpu_nodes(plan), [PathBuf::from("/dev/nvidia1")]);
}
