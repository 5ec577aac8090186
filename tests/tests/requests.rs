//! Requests and requirements: what a container asks for through `cdi.k8s.io/` annotations
//! beside `NVIDIA_VISIBLE_DEVICES`; the `NVIDIA_REQUIRE_*` constraints (CUDA, driver, arch,
//! brand; a legacy image's `CUDA_VERSION`; `NVIDIA_DISABLE_REQUIRE`) checked against the
//! driver and the selected GPUs; and bad requests (a GPU that is not there, an unknown
//! capability, an unmet requirement) stopping a real container with the reason.
//!
//! The requests and checks are computed on the committed driver trees
//! (`testdata/driver-roots`), read through `libnvc::probe::TreeProbe`: no root, no GPU.
//! The containers run under real runc through nvc-runtime against fake driver trees: they
//! need root (runc, device nodes, mounts). Bad values of the variables themselves are in
//! `faults` (`bad_input`).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use libnvc::discover::GpuDetails;
use libnvc::edits::{self, ContainerLayout};
use libnvc::request::{Request, RequestPolicy};
use nvc_tests::trees::CUDA_VERSION;

mod common;

use common::containers::World;
use common::edits::{driver, gpu_nodes, request};

// ---------------------------------------------------------------------------------------
// On the committed driver trees.

#[test]
fn requests_from_the_container_take_cdi_annotations() {
    let (_tree, d) = driver("basic-2gpu");
    let policy = RequestPolicy::default();
    let annotations = |value: &str| {
        BTreeMap::from([(
            "cdi.k8s.io/nvidia-device-plugin".to_string(),
            value.to_string(),
        )])
    };
    let edits_of = |env: &[&str], value: &str| {
        let req = Request::from_container(env.iter().copied(), &annotations(value), &[], &policy)
            .unwrap();
        edits::compute(&d, &req, &ContainerLayout::debian()).unwrap()
    };
    let e = edits_of(&[], "nvidia.com/gpu=1");
    assert_eq!(e.visible_gpus, ["0000:1a:00.0"]);
    assert_eq!(gpu_nodes(&e), ["/dev/nvidia0"]);
    let uuid = d.gpus[0].uuid.clone();
    let e = edits_of(&[], &format!("nvidia.com/gpu={uuid},vendor.com/other=x"));
    assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    assert_eq!(edits_of(&[], "nvidia.com/gpu=all").visible_gpus.len(), 2);
    // The variable decides when set; void (what nvc's CDI spec sets) always wins.
    let e = edits_of(&["NVIDIA_VISIBLE_DEVICES=0"], "nvidia.com/gpu=1");
    assert_eq!(e.visible_gpus, ["0000:06:00.0"]);
    assert!(edits_of(&["NVIDIA_VISIBLE_DEVICES=void"], "nvidia.com/gpu=1").is_empty());
    // Without the annotation, nothing is asked.
    let req = Request::from_container(std::iter::empty(), &BTreeMap::new(), &[], &policy).unwrap();
    assert!(!req.wants_gpu_support());
}

#[test]
fn requirements_against_the_fake_driver() {
    let (tree, d) = driver("basic-2gpu");
    let probe = tree.probe().unwrap().with_cuda_version(CUDA_VERSION);
    let check = |env: &[&str]| edits::check_requirements(&d, &probe, &request(env));
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0"
    ])
    .is_ok());
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_DRIVER=driver>=999.88"
    ])
    .is_ok());
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
    ])
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("cuda>=100.0") && msg.contains("99.1"), "{msg}");
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_DRIVER=driver<500",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("999.88.77"), "{err}");
    // Legacy image: CUDA_VERSION without NVIDIA_REQUIRE_CUDA.
    let err = check(&["CUDA_VERSION=100.2.1"]).unwrap_err();
    assert!(err.to_string().contains("cuda>=100.2"), "{err}");
    assert!(check(&["CUDA_VERSION=100.2.1", "NVIDIA_DISABLE_REQUIRE=1"]).is_ok());
    // An alternative that holds is enough.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_REQUIRE_CUDA=cuda>=100.0 driver>=999"
    ])
    .is_ok());

    // A tree that cannot say its CUDA version: the check cannot be made, and says why.
    let silent = tree.probe().unwrap();
    let err = edits::check_requirements(
        &d,
        &silent,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("cannot check requirement"), "{chain}");
    assert!(chain.contains("libcuda.so.999.88.77"), "{chain}");
}

fn details(uuid: &str, arch: &str, brand: &str) -> GpuDetails {
    GpuDetails {
        uuid: uuid.to_string(),
        compute_capability: Some(arch.to_string()),
        brand: Some(brand.to_string()),
        memory_total: Some(80 << 30),
    }
}

#[test]
fn arch_and_brand_requirements_ask_nvml_per_selected_gpu() {
    let (tree, d) = driver("basic-2gpu");
    let probe = tree.probe().unwrap().with_gpu_details(vec![
        details(&d.gpus[0].uuid, "9.0", "nvidia"),
        details(&d.gpus[1].uuid, "8.0", "tesla"),
    ]);
    let check = |env: &[&str]| edits::check_requirements(&d, &probe, &request(env));
    assert!(check(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]).is_ok());
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=1",
        "NVIDIA_REQUIRE_BRAND=brand=tesla"
    ])
    .is_ok());
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_ARCH=arch>=9.0",
    ])
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("arch>=9.0") && msg.contains("8.0"), "{msg}");
    let err = check(&[
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_REQUIRE_BRAND=brand=tesla",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("nvidia"), "{err}");
    // Each GPU may meet a different alternative.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_REQUIRE_GPU=arch>=9.0 brand=tesla"
    ])
    .is_ok());
    // No GPU selected: per-GPU constraints hold.
    assert!(check(&[
        "NVIDIA_VISIBLE_DEVICES=none",
        "NVIDIA_REQUIRE_ARCH=arch>=10.0"
    ])
    .is_ok());
    // The selection is checked first.
    let err = check(&["NVIDIA_VISIBLE_DEVICES=5", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]).unwrap_err();
    assert!(err.to_string().contains("GPU index 5"), "{err}");

    // Without NVML answers, arch and brand cannot be checked.
    let silent = tree.probe().unwrap();
    let err = edits::check_requirements(
        &d,
        &silent,
        &request(&["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("NVML"), "{chain}");
    // NVML that does not know a GPU: said so, naming it.
    let partial =
        tree.probe()
            .unwrap()
            .with_gpu_details(vec![details(&d.gpus[0].uuid, "9.0", "nvidia")]);
    let err = edits::check_requirements(
        &d,
        &partial,
        &request(&["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]),
    )
    .unwrap_err();
    let chain = libnvc::report::error_chain(&err);
    assert!(chain.contains("compute capability of GPU"), "{chain}");
}

// ---------------------------------------------------------------------------------------
// In containers under runc.

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn bad_requests_stop_the_container_with_the_reason() {
    let w = World::new();
    for (env, reason) in [
        (&["NVIDIA_VISIBLE_DEVICES=7"][..], "GPU index 7"),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,warp",
            ],
            "\"warp\"",
        ),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
            ],
            "cuda>=100.0",
        ),
        (
            &[
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_REQUIRE_DRIVER=driver<500",
            ],
            "driver<500",
        ),
    ] {
        let out = w.run(env, "echo started");
        assert!(!out.success(), "{env:?} started: {out:?}");
        assert!(!out.stdout.contains("started"), "{out:?}");
        let said = format!("{}{}", out.stderr, out.log);
        assert!(
            said.contains(reason),
            "{env:?}: the user is not told {reason:?}: {out:?}"
        );
    }
}

/// The hook is linked statically and never loads libcuda: the CUDA version a requirement
/// is checked against comes from `nvc-cuda-version` beside it, asked on a start that finds
/// no answer in the driver-files cache. Without that program, the start stops and says
/// which program is missing.
#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_cuda_version_comes_from_the_helper_beside_the_hook() {
    let w = World::new();
    // A fresh state folder: the first start has no cached CUDA version.
    let out = w.run(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=100.0",
        ],
        "echo started",
    );
    assert!(!out.success(), "{out:?}");
    let said = format!("{}{}", out.stderr, out.log);
    assert!(
        said.contains("cuda>=100.0") && said.contains("99.1"),
        "the refusal does not give the driver's CUDA version (99.1, {CUDA_VERSION}): {out:?}"
    );
    w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        ],
        "echo started",
    );

    // The same hook program alone in a folder, in a world whose cache is empty.
    let lone = World::new();
    let bin = lone.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let hook = bin.join("nvc-hook");
    std::fs::copy(nvc_tests::workspace_bin("nvc-hook"), &hook).unwrap();
    let config = lone.dir.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let quoted = |p: &std::path::Path| toml_edit::Value::from(p.display().to_string()).to_string();
    let old = format!("path = {}", quoted(&nvc_tests::workspace_bin("nvc-hook")));
    assert!(text.contains(&old), "{text}");
    std::fs::write(
        &config,
        text.replace(&old, &format!("path = {}", quoted(&hook))),
    )
    .unwrap();
    let out = lone.run(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        ],
        "echo started",
    );
    assert!(!out.success(), "started without nvc-cuda-version: {out:?}");
    let said = format!("{}{}", out.stderr, out.log);
    assert!(
        said.contains(&bin.join("nvc-cuda-version").display().to_string())
            && said.contains("reinstall nvc"),
        "the missing program is not named: {out:?}"
    );
}
