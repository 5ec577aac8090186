//! GPU selection and device nodes: which GPUs and nodes a request gets (by index, UUID or
//! bus id; MIG devices with their capability nodes; IMEX channels; the MIG config and
//! monitor nodes of privileged containers; `none`, `void` or nothing asked), the errors
//! that name a device the host does not have, and the nodes of real containers, through
//! nvc-runtime or with nvc-hook alone in the spec as Docker's `--gpus` and Podman's
//! hooks.d run it.
//!
//! The edits are computed on the committed driver trees (`testdata/driver-roots`), read
//! through `libnvc::probe::TreeProbe`: no root, no GPU. The containers run under real
//! runc, through nvc-runtime and nvc-hook against fake driver trees, and are asserted from
//! inside: they need root (runc, device nodes, mounts).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libnvc::edits::{self, ContainerLayout, EditsError};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::{tree_digest, Bundle, Runtime};
use serde_json::json;

mod common;

use common::containers::{hook_only, nodes_inside, World, LIST_NODES};
use common::edits::{container_paths, driver, edits_for, gpu_nodes, node_paths, request};
use common::LIB;

// ---------------------------------------------------------------------------------------
// On the committed driver trees.

#[test]
fn selection_by_index_uuid_and_bus_id() {
    let (_tree, d) = driver("basic-2gpu");
    for gpu in &d.gpus {
        let forms = [
            gpu.index.to_string(),
            gpu.uuid.clone(),
            gpu.uuid.to_uppercase(),
            gpu.bus_id.clone(),
            gpu.bus_id[5..].to_string(),
        ];
        for form in forms {
            let env = format!("NVIDIA_VISIBLE_DEVICES={form}");
            let e = edits_for(&d, &[&env]);
            assert_eq!(
                gpu_nodes(&e),
                [format!("/dev/nvidia{}", gpu.minor)],
                "{form}"
            );
            assert_eq!(e.visible_gpus, std::slice::from_ref(&gpu.bus_id), "{form}");
        }
    }
    // Index 0 is the lowest bus id, whose minor is 1.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia1"]);
    // In the order asked, each once.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=1,0,1"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0", "/dev/nvidia1"]);
    assert_eq!(e.visible_gpus, ["0000:1a:00.0", "0000:06:00.0"]);
    let all = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_eq!(all.visible_gpus, ["0000:06:00.0", "0000:1a:00.0"]);
    assert_eq!(gpu_nodes(&all), ["/dev/nvidia1", "/dev/nvidia0"]);
}

#[test]
fn unknown_devices_are_errors_that_name_them() {
    let (_tree, d) = driver("basic-2gpu");
    for (value, named) in [
        ("7", "GPU index 7"),
        (
            "GPU-00000000-0000-0000-0000-000000000000",
            "GPU-00000000-0000-0000-0000-000000000000",
        ),
        ("0000:99:00.0", "0000:99:00.0"),
        ("0:3", "MIG device 0:3"),
    ] {
        let env = format!("NVIDIA_VISIBLE_DEVICES={value}");
        let err = edits::compute(&d, &request(&[&env]), &ContainerLayout::debian()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(named), "{value}: {msg}");
        assert!(msg.contains("NVIDIA_VISIBLE_DEVICES"), "{value}: {msg}");
        assert!(
            msg.contains("this host has 2 GPUs, indices 0-1") || value == "0:3",
            "{msg}"
        );
    }
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=MIG-5d3a2d1c-0b0a-4c5e-9f00-123456789abc"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(matches!(err, EditsError::UnknownDevice { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "NVIDIA_VISIBLE_DEVICES: MIG device MIG-5d3a2d1c-0b0a-4c5e-9f00-123456789abc does \
         not exist (this host has no MIG device)"
    );
}

#[test]
fn none_void_and_unset() {
    let (_tree, d) = driver("basic-2gpu");
    let none = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=none"]);
    let paths = container_paths(&none);
    assert!(paths.contains(&"/dev/nvidiactl".to_string()), "{paths:#?}");
    assert!(paths.iter().any(|p| p.ends_with("libcuda.so.1")));
    assert!(gpu_nodes(&none).is_empty(), "{paths:#?}");
    assert!(none.visible_gpus.is_empty());
    for env in [
        &["NVIDIA_VISIBLE_DEVICES=void"][..],
        &["NVIDIA_VISIBLE_DEVICES="],
        &[],
        &["PATH=/bin"],
    ] {
        assert!(edits_for(&d, env).is_empty(), "{env:?}");
    }
}

#[test]
fn mig_devices_by_gpu_and_instance() {
    let (_tree, d) = driver("mig");
    let gpu0 = &d.gpus[0];
    assert_eq!(gpu0.mig.len(), 2, "the scenario puts GPU 0 in MIG mode");
    for mig in &gpu0.mig {
        let env = format!("NVIDIA_VISIBLE_DEVICES=0:{}", mig.index);
        let e = edits_for(&d, &[&env]);
        let nodes = node_paths(&e);
        assert!(nodes.contains(&"/dev/nvidia1".to_string()), "{nodes:#?}");
        for cap in &mig.caps {
            assert!(
                nodes.contains(&cap.path.display().to_string()),
                "{nodes:#?}"
            );
            assert_eq!(cap.major, 241);
        }
        // The other instance's capabilities are not given.
        let other = &gpu0.mig[1 - mig.index as usize];
        for cap in &other.caps {
            assert!(!nodes.contains(&cap.path.display().to_string()));
        }
        assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    }
    // Both instances and the whole second GPU.
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0:0,0:1,1"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0", "/dev/nvidia1"]);
    assert_eq!(e.device_nodes.iter().filter(|n| n.major == 241).count(), 4);
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=1:0"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("GPU 1 has 0 MIG devices"), "{err}");
}

#[test]
fn mig_devices_by_uuid_get_what_gpu_colon_mig_gets() {
    let (_tree, d) = driver("mig");
    let gpu0 = &d.gpus[0];
    let spec = nvc_tests::trees::scenario("mig").unwrap().spec();
    let uuids: Vec<String> = spec.mig_devices().into_iter().map(|m| m.uuid).collect();
    assert_eq!(uuids.len(), 2);
    for (mig, uuid) in gpu0.mig.iter().zip(&uuids) {
        assert_eq!(mig.uuid.as_ref(), Some(uuid));
        let by_index = edits_for(&d, &[&format!("NVIDIA_VISIBLE_DEVICES=0:{}", mig.index)]);
        let old = format!("MIG-{}/{}/{}", gpu0.uuid, mig.gi, mig.ci);
        for form in [
            uuid.clone(),
            uuid.to_uppercase(),
            format!("nvidia.com/gpu={uuid}"),
            old,
        ] {
            let e = edits_for(&d, &[&format!("NVIDIA_VISIBLE_DEVICES={form}")]);
            // The same nodes (the parent's, the instances' capabilities), the same GPU
            // left in /proc/driver/nvidia, the same files.
            assert_eq!(e, by_index, "{form}");
        }
    }
    let e = edits_for(&d, &[&format!("NVIDIA_VISIBLE_DEVICES={},1", uuids[1])]);
    assert_eq!(e, edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0:1,1"]));
    // An unknown one names itself and the host's MIG devices, by UUID and index.
    let unknown = "MIG-00000000-0000-4000-8000-000000000000";
    let err = edits::compute(
        &d,
        &request(&[&format!("NVIDIA_VISIBLE_DEVICES={unknown}")]),
        &ContainerLayout::debian(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        format!(
            "NVIDIA_VISIBLE_DEVICES: MIG device {unknown} does not exist (this host's MIG \
             devices are {} (0:0), {} (0:1))",
            uuids[0], uuids[1]
        )
    );
}

#[test]
fn imex_channels_and_mig_config_for_privileged() {
    let (_tree, d) = driver("imex");
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"]);
    let nodes = node_paths(&e);
    assert!(
        nodes.contains(&"/dev/nvidia-caps-imex-channels/channel1".to_string()),
        "{nodes:#?}"
    );
    assert!(!nodes.contains(&"/dev/nvidia-caps-imex-channels/channel0".to_string()));
    let all = edits_for(
        &d,
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=all"],
    );
    assert_eq!(
        all.device_nodes.iter().filter(|n| n.major == 242).count(),
        3
    );
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=9"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("channel 9"), "{err}");

    let privileged = RequestPolicy {
        privileged: true,
        ..RequestPolicy::default()
    };
    let req = Request::from_env(
        [
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_MIG_MONITOR_DEVICES=0",
        ],
        &privileged,
    )
    .unwrap();
    let e = edits::compute(&d, &req, &ContainerLayout::debian()).unwrap();
    let nodes = node_paths(&e);
    assert!(
        nodes.contains(&"/dev/nvidia-caps/nvidia-cap1".to_string()),
        "{nodes:#?}"
    );
    assert!(
        nodes.contains(&"/dev/nvidia-caps/nvidia-cap2".to_string()),
        "{nodes:#?}"
    );
    // Unprivileged, the MIG variables are refused.
    let err = Request::from_env(
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"],
        &RequestPolicy::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("needs a privileged container"),
        "{err}"
    );
}

#[test]
fn no_kernel_module_gives_the_files_but_no_gpu() {
    let (_tree, d) = driver("no-kernel-module");
    let e = edits_for(&d, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert!(e.visible_gpus.is_empty());
    assert!(gpu_nodes(&e).is_empty());
    // nvidiactl is given by its numbers: runc makes it; the libraries are there.
    assert_eq!(node_paths(&e), ["/dev/nvidiactl"]);
    assert!(!e.device_nodes[0].on_host);
    assert!(container_paths(&e).contains(&format!("{LIB}/libcuda.so.1")));
    let err = edits::compute(
        &d,
        &request(&["NVIDIA_VISIBLE_DEVICES=0"]),
        &ContainerLayout::debian(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("this host has no GPU"), "{err}");
}

// ---------------------------------------------------------------------------------------
// In containers under runc.

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn index_uuid_and_bus_id_select_exactly_one_node() {
    let w = World::new();
    for (i, g) in w.gpus_in_bus_order().iter().enumerate() {
        for form in [i.to_string(), g.uuid.clone(), g.bus_id.clone()] {
            let out = w.ok(&[&format!("NVIDIA_VISIBLE_DEVICES={form}")], LIST_NODES);
            let gpus: Vec<String> = nodes_inside(&out)
                .into_iter()
                .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
                .collect();
            assert_eq!(
                gpus,
                [format!("/dev/nvidia{} 195:{}", g.minor, g.minor)],
                "{form}: {out}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn none_gives_driver_files_without_gpus() {
    let w = World::new();
    let out = w.ok(
        &["NVIDIA_VISIBLE_DEVICES=none"],
        &format!("{LIST_NODES}; nvc-probe"),
    );
    let nodes = nodes_inside(&out);
    assert!(
        nodes.contains(&"/dev/nvidiactl 195:255".to_string()),
        "{out}"
    );
    assert!(
        !nodes
            .iter()
            .any(|n| n.contains(" 195:") && !n.contains("195:255")),
        "{out}"
    );
    assert!(out.contains("libcuda=ok"), "{out}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn void_and_unset_leave_everything_untouched() {
    let w = World::new();
    for env in [&["NVIDIA_VISIBLE_DEVICES=void"][..], &[]] {
        let before_rootfs = tree_digest(&w.rootfs.path);
        let b = w.bundle(env, &format!("{LIST_NODES}; nvc-probe"));
        let before_config = std::fs::read(b.config_path()).unwrap();
        let out = w.rt.run(&b, &format!("nvc-void-{}", w.n.get()));
        assert!(out.success(), "{out:?}");
        assert!(
            nodes_inside(&out.stdout).is_empty(),
            "{env:?}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("libcuda=missing"), "{}", out.stdout);
        assert_eq!(
            std::fs::read(b.config_path()).unwrap(),
            before_config,
            "config.json changed"
        );
        assert_eq!(tree_digest(&w.rootfs.path), before_rootfs, "rootfs changed");
    }
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn hook_only_mode_makes_nothing_in_a_dev_bound_from_the_host() {
    // `-v /dev:/dev`: the container's /dev is a volume, not the runtime's fresh tmpfs. The
    // hook, which binds the nodes itself here, refuses rather than make mount points in
    // the host folder behind it.
    let w = World::new();
    let config = w.dir.path().join("config.toml");
    // A tmpfs, as the host's devtmpfs is to statfs: only the spec tells it from the
    // runtime's own /dev.
    let host_dev =
        nvc_tests::TestMount::tmpfs(&w.dir.path().join("host-dev"), "mode=0755").unwrap();
    let volume = host_dev.path().to_path_buf();
    let b = w
        .bundle(&["NVIDIA_VISIBLE_DEVICES=all"], "true")
        .set(
            "/mounts/1",
            json!({"destination": "/dev", "type": "bind", "source": volume,
                   "options": ["rbind", "rprivate"]}),
        )
        .set("/hooks", hook_only(&config))
        .write()
        .unwrap();
    assert_eq!(b.config["mounts"][1]["destination"], "/dev");
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    let out = rt.run(&b, &format!("nvc-hostdev-{}", std::process::id()));
    assert!(!out.success(), "{out:?}");
    let said = format!("{}{}", out.stderr, out.log_messages().join("\n"));
    assert!(
        said.contains("/dev") && said.contains("not the container's root filesystem"),
        "{said}"
    );
    let made: Vec<String> = std::fs::read_dir(&volume)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nvidia"))
        .collect();
    assert!(made.is_empty(), "nvc made {made:?} in the host's folder");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn hook_only_mode_binds_the_device_nodes_itself() {
    // As Docker's --gpus or a Podman hooks.d file runs it: plain runc, the hook in the
    // spec, no device in linux.devices.
    let w = World::new();
    let config = w.dir.path().join("config.toml");
    let gpu = w.gpus_in_bus_order()[1].clone();
    let b = w
        .bundle(
            &["NVIDIA_VISIBLE_DEVICES=1"],
            &format!("{LIST_NODES}; nvc-probe"),
        )
        .set("/hooks", hook_only(&config))
        .write()
        .unwrap();
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    let out = rt.run(&b, &format!("nvc-hookonly-{}", std::process::id()));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    let nodes = nodes_inside(&out.stdout);
    assert!(
        nodes.contains(&format!("/dev/nvidia{} 195:{}", gpu.minor, gpu.minor)),
        "{}",
        out.stdout
    );
    assert!(
        nodes.contains(&"/dev/nvidiactl 195:255".to_string()),
        "{}",
        out.stdout
    );
    assert_eq!(
        nodes
            .iter()
            .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
            .count(),
        1,
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("libcuda=ok"), "{}", out.stdout);
}

/// NVIDIA's device plugin with `DEVICE_LIST_STRATEGY=volume-mounts`, under the cluster
/// setting that does not trust pods' environment: the GPU named by a `/dev/null` mount at
/// `/var/run/nvidia-container-devices/<uuid>` is the one the container gets, whatever its
/// `NVIDIA_VISIBLE_DEVICES` says, and nvc-runtime takes the mount out of the container.
/// With the setting off, the mount is no request and is left where it is.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn device_plugin_volume_mounts_give_their_gpus_and_are_taken_out() {
    let w = World::new();
    let config = w.dir.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let secure = w.dir.path().join("secure.toml");
    std::fs::write(
        &secure,
        format!(
            "{text}\n[requests]\naccept-envvar-when-unprivileged = false\n\
             accept-devices-as-volume-mounts = true\n"
        ),
    )
    .unwrap();
    let secure_rt = Runtime::nvc(&w.dir.path().join("state-secure"), &secure);
    let gpus = w.gpus_in_bus_order();
    let wanted = &gpus[1];
    let script = format!(
        "{LIST_NODES}; if [ -e /var/run/nvidia-container-devices ]; then echo mounts-seen; \
         else echo no-mounts; fi"
    );
    let run = |rt: &Runtime, env: &[&str], mount: Option<&str>| {
        w.n.set(w.n.get() + 1);
        let dir = w.dir.path().join(format!("bundle-vm{}", w.n.get()));
        let mut bundle = Bundle::new(&dir, &w.rootfs.path)
            .unwrap()
            .args(&["sh", "-c", &script])
            .env(env)
            .with_fake_proc(&w.fake);
        if let Some(id) = mount {
            bundle = bundle.set(
                "/mounts/-",
                json!({"destination": format!("/var/run/nvidia-container-devices/{id}"),
                       "type": "bind", "source": "/dev/null", "options": ["bind", "ro"]}),
            );
        }
        let bundle = bundle.write().unwrap();
        let out = rt.run(
            &bundle,
            &format!("nvc-vm-{}-{}", std::process::id(), w.n.get()),
        );
        assert!(out.success(), "{out:?}\nnvc log:\n{}", w.nvc_log());
        let gpu_nodes: Vec<String> = nodes_inside(&out.stdout)
            .into_iter()
            .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
            .collect();
        (gpu_nodes, out.stdout, bundle)
    };
    let only_wanted = [format!("/dev/nvidia{} 195:{}", wanted.minor, wanted.minor)];

    let (nodes, out, bundle) = run(
        &secure_rt,
        &["NVIDIA_VISIBLE_DEVICES=all"],
        Some(&wanted.uuid),
    );
    assert_eq!(nodes, only_wanted, "{out}");
    assert!(
        out.contains("no-mounts"),
        "the mount reached the container: {out}"
    );
    let spec = bundle.read_config().unwrap();
    let args = spec["hooks"]["prestart"][0]["args"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        args[..4],
        [
            json!("nvc-hook"),
            json!("prestart"),
            json!("--device-mount"),
            json!(wanted.uuid)
        ],
        "{spec:#}"
    );
    assert_eq!(args[4], json!("--gpus"), "{spec:#}");
    // The environment alone gets nothing under this setting...
    let (nodes, out, _) = run(&secure_rt, &["NVIDIA_VISIBLE_DEVICES=all"], None);
    assert!(nodes.is_empty(), "{out}");
    // ...and the mounts alone get nothing where the setting is off: the mount stays.
    let (nodes, out, _) = run(&w.rt, &[], Some(&wanted.uuid));
    assert!(nodes.is_empty(), "{out}");
    assert!(out.contains("mounts-seen"), "{out}");
}

/// A container in a user namespace (rootless engines, Docker's `userns-remap`, any spec
/// with uid mappings): runc cannot make device nodes there and bind-mounts each of
/// `linux.devices` from the same path on the host, which is not where the driver's nodes
/// are when its dev root is not `/`. nvc gives such a container its nodes as bind mounts
/// from where they are.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn user_namespace_containers_get_their_nodes_from_any_dev_root() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    // The container's root is an unprivileged host user: it must reach the rootfs and
    // the driver's nodes through the test's folders.
    std::fs::set_permissions(w.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    w.n.set(w.n.get() + 1);
    let dir = w.dir.path().join(format!("bundle-userns{}", w.n.get()));
    let mapping = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    let bundle = Bundle::new(&dir, &w.rootfs.path)
        .unwrap()
        .args(&["sh", "-c", LIST_NODES])
        .env(&["NVIDIA_VISIBLE_DEVICES=all"])
        .with_fake_proc(&w.fake)
        .set("/linux/namespaces/-", json!({"type": "user"}))
        .set("/linux/uidMappings", mapping.clone())
        .set("/linux/gidMappings", mapping)
        .write()
        .unwrap();
    let out =
        w.rt.run(&bundle, &format!("nvc-userns-{}", std::process::id()));
    assert!(out.success(), "{out:?}\nnvc log:\n{}", w.nvc_log());
    let nodes = nodes_inside(&out.stdout);
    for g in w.gpus_in_bus_order() {
        let want = format!("/dev/nvidia{} 195:{}", g.minor, g.minor);
        assert!(nodes.contains(&want), "{want} missing: {nodes:?}\n{out:?}");
    }
    assert!(
        nodes.contains(&"/dev/nvidiactl 195:255".to_string()),
        "{nodes:?}"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn nodes_of_a_dev_root_elsewhere_are_bind_mounts_in_containers_started_at_once() {
    // The fake tree's nodes are not at their own paths on the host, as a dev root other
    // than `/` has them: each reaches the container as a bind mount from where it is, so
    // the runtime never makes them, nor binds them from a host path that is not them when
    // mknod is refused (runc 1.1 on cgroup v1, containers starting at once).
    let w = World::new();
    let script = format!("{LIST_NODES}; grep ' /dev/nvidia' /proc/self/mountinfo");
    let bundles: Vec<Bundle> = (0..8)
        .map(|_| w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], &script))
        .collect();
    let outs: Vec<nvc_tests::Outcome> = std::thread::scope(|s| {
        let runs: Vec<_> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let rt = &w.rt;
                s.spawn(move || rt.run(b, &format!("nvc-once-{}-{i}", std::process::id())))
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for out in outs {
        assert!(out.success(), "{out:?}\nnvc log:\n{}", w.nvc_log());
        let nodes = nodes_inside(&out.stdout);
        for g in w.gpus_in_bus_order() {
            let node = format!("/dev/nvidia{}", g.minor);
            assert!(
                nodes.contains(&format!("{node} 195:{}", g.minor)),
                "{node} missing: {nodes:?}\n{out:?}"
            );
            let mounted = out
                .stdout
                .lines()
                .any(|l| l.split_whitespace().nth(4) == Some(node.as_str()));
            assert!(mounted, "{node} is no mount of its own:\n{}", out.stdout);
        }
    }
}

/// Lists the GPU and capability nodes the container has, as [`LIST_NODES`] does.
const LIST_GPU_AND_CAP_NODES: &str = "for n in /dev/nvidia* /dev/nvidia-caps/*; do [ -c $n ] \
     && echo node $(stat -c '%n %t:%T' $n); done; true";

/// NVIDIA's device plugin under its mixed MIG strategy names a MIG device by its UUID:
/// through nvc-runtime (which asks NVML in its own process here, being dynamic) and its
/// prestart hook (which asks `nvc-mig-devices` beside it), and with the hook alone in the
/// spec, the container gets exactly what `<gpu>:<mig>` gives it: the parent GPU's node
/// and the GPU and compute instances' capability nodes, no other MIG device's.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn a_mig_uuid_gets_exactly_its_mig_devices_nodes_through_the_shim_and_the_hook() {
    let w = World::with(
        nvc_tests::FakeDriverSpec {
            mig: true,
            ..nvc_tests::FakeDriverSpec::default()
        },
        nvc_tests::RootfsSpec::default(),
    );
    let parent = w.gpus_in_bus_order()[0].clone();
    let caps = w.fake.spec.mig_caps();
    let config = w.dir.path().join("config.toml");
    let runc = Runtime::runc(&w.dir.path().join("runc-state"));
    let nodes_of = |out: &nvc_tests::Outcome, what: &str| {
        assert!(out.success(), "{what}: {out:?}\nnvc log:\n{}", w.nvc_log());
        let mut nodes = nodes_inside(&out.stdout);
        nodes.sort();
        nodes
    };
    let through_hook_alone = |value: &str| {
        let b = w
            .bundle(
                &[&format!("NVIDIA_VISIBLE_DEVICES={value}")],
                LIST_GPU_AND_CAP_NODES,
            )
            .set("/hooks", hook_only(&config))
            .write()
            .unwrap();
        runc.run(&b, &nvc_tests::container_id("nvc-mig-hook"))
    };
    for (i, mig) in w.fake.spec.mig_devices().iter().enumerate() {
        let by_index = nodes_of(
            &w.run(
                &[&format!("NVIDIA_VISIBLE_DEVICES=0:{i}")],
                LIST_GPU_AND_CAP_NODES,
            ),
            "by index",
        );
        let mut want_caps: Vec<String> = caps
            .iter()
            .filter(|c| c.gi == mig.gi)
            .map(|c| format!("/dev/nvidia-caps/nvidia-cap{} 241:{}", c.minor, c.minor))
            .collect();
        want_caps.sort();
        let got_caps: Vec<String> = by_index
            .iter()
            .filter(|n| n.starts_with("/dev/nvidia-caps/"))
            .cloned()
            .collect();
        assert_eq!(got_caps, want_caps, "0:{i}");
        let gpus: Vec<&String> = by_index
            .iter()
            .filter(|n| n.contains(" 195:") && !n.contains("195:255"))
            .collect();
        assert_eq!(
            gpus,
            [&format!("/dev/nvidia{} 195:{}", parent.minor, parent.minor)],
            "0:{i}"
        );
        let by_uuid = w.run(
            &[&format!("NVIDIA_VISIBLE_DEVICES={}", mig.uuid)],
            LIST_GPU_AND_CAP_NODES,
        );
        assert_eq!(nodes_of(&by_uuid, &mig.uuid), by_index, "{}", mig.uuid);
        let alone = through_hook_alone(&mig.uuid);
        assert_eq!(nodes_of(&alone, "hook alone"), by_index, "{}", mig.uuid);
    }
    // The old form, and the CDI name, through the shim.
    let second = &w.fake.spec.mig_devices()[1];
    let by_index = nodes_of(
        &w.run(&["NVIDIA_VISIBLE_DEVICES=0:1"], LIST_GPU_AND_CAP_NODES),
        "0:1",
    );
    for value in [
        format!("MIG-{}/{}/{}", second.gpu_uuid, second.gi, second.ci),
        format!("nvidia.com/gpu={}", second.uuid),
    ] {
        let out = w.run(
            &[&format!("NVIDIA_VISIBLE_DEVICES={value}")],
            LIST_GPU_AND_CAP_NODES,
        );
        assert_eq!(nodes_of(&out, &value), by_index, "{value}");
    }

    // An unknown MIG UUID stops the start, naming it and the host's MIG devices.
    let unknown = "MIG-00000000-0000-4000-8000-000000000000";
    let out = w.run(
        &[&format!("NVIDIA_VISIBLE_DEVICES={unknown}")],
        "echo started",
    );
    assert!(!out.success(), "{out:?}");
    assert!(!out.stdout.contains("started"), "{out:?}");
    let said = format!("{}{}", out.stderr, out.log);
    assert!(
        said.contains(unknown)
            && w.fake
                .spec
                .mig_devices()
                .iter()
                .all(|m| said.contains(&m.uuid)),
        "{out:?}"
    );
    let out = through_hook_alone(unknown);
    assert!(!out.success(), "{out:?}");
    let said = format!("{}{}", out.stderr, out.log);
    assert!(said.contains(unknown), "{out:?}");

    // The hook asks NVML through the program beside it: alone in a folder, it cannot, and
    // says which program is missing.
    let bin = w.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let hook = bin.join("nvc-hook");
    std::fs::copy(nvc_tests::workspace_bin("nvc-hook"), &hook).unwrap();
    let b = w
        .bundle(
            &[&format!("NVIDIA_VISIBLE_DEVICES={}", second.uuid)],
            "echo started",
        )
        .set(
            "/hooks",
            json!({"prestart": [{
                "path": hook,
                "args": ["nvidia-container-runtime-hook", "prestart"],
                "env": [format!("NVC_CONFIG={}", config.display())],
            }]}),
        )
        .write()
        .unwrap();
    let out = runc.run(&b, &nvc_tests::container_id("nvc-mig-lone"));
    assert!(!out.success(), "started without nvc-mig-devices: {out:?}");
    let said = format!("{}{}", out.stderr, out.log);
    assert!(
        said.contains(&bin.join("nvc-mig-devices").display().to_string())
            && said.contains("reinstall nvc")
            && said.contains("<gpu>:<mig>"),
        "the missing program is not named: {out:?}"
    );
}
