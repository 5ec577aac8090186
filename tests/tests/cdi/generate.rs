//! CDI specs (`libnvc::cdi::generate`, what `nvc cdi generate` writes) for the committed
//! driver trees (`testdata/driver-roots`), read through `libnvc::probe::TreeProbe`: no
//! root, no GPU.
//!
//! Each scenario's spec is compared with `testdata/driver-roots/golden/cdi/<scenario>.yaml`,
//! where `$TREE` stands for the scenario's folder. After an intended change, run
//! `NVC_BLESS=1 cargo test -p nvc-tests --test cdi golden` to rewrite them, and review the
//! diff.

use std::path::Path;

use libnvc::cdi::{self, CdiError, Format, GenerateOptions, NameStrategy, Spec};
use libnvc::discover::{discover, Driver};
use nvc_tests::trees::{self, DriverTree};
use serde_json::{json, Value};

use super::{device, spec_nodes, HOOK_ENV, LIB};

const HOOK: &str = "/usr/bin/nvc-hook";

fn driver(name: &str) -> (DriverTree, Driver) {
    let tree = DriverTree::committed(name);
    let d = discover(&tree.roots(), &tree.probe().unwrap()).unwrap();
    (tree, d)
}

fn generate(d: &Driver, strategy: NameStrategy) -> Spec {
    let options = GenerateOptions {
        strategy,
        ..GenerateOptions::new(HOOK)
    };
    cdi::generate(d, &options).unwrap()
}

fn as_json(spec: &Spec) -> Value {
    serde_json::from_str(&spec.to_string_as(Format::Json).unwrap()).unwrap()
}

fn names(spec: &Spec) -> Vec<String> {
    spec.devices.iter().map(|d| d.name.clone()).collect()
}

#[test]
fn every_scenarios_spec_matches_its_golden() {
    for s in trees::SCENARIOS {
        let (tree, d) = driver(s.name);
        let spec = generate(&d, NameStrategy::Index);
        let yaml = spec.to_string_as(Format::Yaml).unwrap();
        let dir = tree.dir.to_str().unwrap();
        assert!(yaml.contains(dir), "{}: no host path in the spec?", s.name);
        let portable = yaml.replace(dir, "$TREE");
        trees::assert_golden(&format!("cdi/{}.yaml", s.name), &portable);
        // The golden is a spec: read back, with the folder put in, it is this one.
        assert_eq!(
            Spec::parse(&portable.replace("$TREE", dir)).unwrap(),
            spec,
            "{}",
            s.name
        );
    }
}

#[test]
fn generated_spec_describes_the_fake_driver() {
    let (tree, d) = driver("basic-2gpu");
    let spec = as_json(&generate(&d, NameStrategy::Index));
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(spec["kind"], "nvidia.com/gpu");
    let spec_names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(spec_names, ["0", "1", "all"]);

    // One node per GPU, with the numbers of its /dev/nvidia<minor>, in bus order.
    let mut all = Vec::new();
    for (i, minor) in [(0, 1), (1, 0)] {
        let want = format!("/dev/nvidia{minor} 195:{minor}");
        let dev = device(&spec, &i.to_string());
        assert_eq!(
            spec_nodes(&dev["containerEdits"]),
            std::slice::from_ref(&want)
        );
        let node = &dev["containerEdits"]["deviceNodes"][0];
        assert_eq!(node["type"], "c");
        assert_eq!(node["fileMode"], 0o666);
        assert_eq!(
            node["hostPath"],
            json!(tree.dir.join(format!("dev/nvidia{minor}")))
        );
        all.push(want);
    }
    assert_eq!(spec_nodes(&device(&spec, "all")["containerEdits"]), all);

    let edits = &spec["containerEdits"];
    assert_eq!(edits["env"], json!(["NVIDIA_VISIBLE_DEVICES=void"]));
    assert_eq!(
        spec_nodes(edits),
        [
            "/dev/nvidiactl 195:255",
            "/dev/nvidia-uvm 238:0",
            "/dev/nvidia-uvm-tools 238:1",
            "/dev/nvidia-modeset 195:254"
        ]
    );

    // Every mount's host file is in the tree; libraries go to the Debian folder.
    let mounts = edits["mounts"].as_array().unwrap();
    for m in mounts {
        let host = Path::new(m["hostPath"].as_str().unwrap());
        assert!(host.starts_with(&tree.root), "{m}");
        assert!(host.exists(), "{m}");
        assert!(Path::new(m["containerPath"].as_str().unwrap()).is_absolute());
        let options: Vec<&str> = m["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert!(
            options.contains(&"bind") && options.contains(&"nosuid"),
            "{m}"
        );
    }
    let find = |container: &str| {
        mounts
            .iter()
            .find(|m| m["containerPath"] == container)
            .unwrap_or_else(|| panic!("no mount at {container}"))
    };
    assert_eq!(
        find(&format!("{LIB}/libcuda.so.999.88.77"))["options"],
        json!(["ro", "nosuid", "nodev", "bind"])
    );
    find("/usr/bin/nvidia-smi");
    find("/usr/share/vulkan/icd.d/nvidia_icd.json");
    find("/lib/firmware/nvidia/999.88.77/gsp_ga10x.bin");
    find("/run/nvidia-persistenced/socket");
    // Every library but the 32-bit ones (none here): the spec covers every capability.
    let libraries = mounts
        .iter()
        .filter(|m| {
            m["containerPath"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{LIB}/lib"))
        })
        .count();
    assert_eq!(libraries, d.libraries.len());

    // Hooks: one createContainer set-up and the poststop hook that takes away what it
    // made, by the configured absolute hook path, with only PATH.
    let hooks = edits["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    for hook in hooks {
        assert_eq!(hook["path"], HOOK);
        assert_eq!(hook["env"], json!([HOOK_ENV]));
        assert_eq!(hook["args"][0], "nvc-hook");
    }
    assert_eq!(hooks[0]["hookName"], "createRuntime");
    assert_eq!(hooks[1]["hookName"], "poststop");
    assert_eq!(hooks[1]["args"], json!(["nvc-hook", "poststop"]));
    let setup: Vec<&str> = hooks[0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(setup[1..3], ["cdi-setup", "--enter"]);
    assert!(setup.contains(&&*format!("libcuda.so.999.88.77::{LIB}/libcuda.so.1")));
    assert!(setup.contains(&&*format!(
        "libnvidia-ml.so.999.88.77::{LIB}/libnvidia-ml.so.1"
    )));
    // The cache's folder and the compat rule's driver, then the mask over
    // /proc/driver/nvidia, which reads the GPUs under the tree's proc root.
    let proc_root = tree.proc_root.to_str().unwrap();
    let tail = [
        "--folder",
        LIB,
        "--cuda-compat-above",
        "999.88.77",
        "--proc-root",
        proc_root,
    ];
    assert_eq!(setup[setup.len() - tail.len()..], tail);
}

#[test]
fn the_proc_mask_hook_is_there_wherever_there_are_gpus() {
    // Spec-level, so every device (a GPU, a MIG device, all) gets it; without the
    // kernel module there is no /proc/driver/nvidia and no GPU, so no mask.
    for s in trees::SCENARIOS {
        let (tree, d) = driver(s.name);
        let spec = generate(&d, NameStrategy::Both);
        let masks: Vec<Vec<String>> = spec
            .container_edits
            .hooks
            .iter()
            .map(|h| &h.args)
            .filter(|a| a[1] == "cdi-setup")
            .filter_map(|a| {
                let at = a.iter().position(|x| x == "--proc-root")?;
                Some(a[at..].to_vec())
            })
            .collect();
        assert!(spec
            .devices
            .iter()
            .all(|dev| dev.container_edits.hooks.is_empty()));
        if d.gpus.is_empty() {
            assert!(masks.is_empty(), "{}: {masks:?}", s.name);
            assert!(
                !tree.proc_root.join("driver/nvidia/gpus").is_dir(),
                "{}",
                s.name
            );
        } else {
            let want = vec![
                "--proc-root".to_string(),
                tree.proc_root.to_str().unwrap().into(),
            ];
            assert_eq!(masks, [want], "{}", s.name);
        }
    }
}

#[test]
fn device_names_follow_the_strategy() {
    let (_tree, d) = driver("basic-2gpu");
    let uuids: Vec<String> = d.gpus.iter().map(|g| g.uuid.clone()).collect();
    let cases: [(NameStrategy, Vec<String>); 3] = [
        (NameStrategy::Index, vec!["0".into(), "1".into()]),
        (NameStrategy::Uuid, uuids.clone()),
        (
            NameStrategy::Both,
            vec!["0".into(), uuids[0].clone(), "1".into(), uuids[1].clone()],
        ),
    ];
    for (strategy, mut want) in cases {
        want.push("all".into());
        let spec = generate(&d, strategy);
        assert_eq!(names(&spec), want, "{}", strategy.name());
        let qualified: Vec<String> = want.iter().map(|n| format!("nvidia.com/gpu={n}")).collect();
        assert_eq!(spec.qualified_names(), qualified);
        if strategy == NameStrategy::Both {
            let json = as_json(&spec);
            assert_eq!(
                device(&json, "1")["containerEdits"],
                device(&json, &uuids[1])["containerEdits"]
            );
        }
        // Only the devices differ between strategies.
        assert_eq!(
            spec.container_edits,
            generate(&d, NameStrategy::Index).container_edits
        );
    }
}

#[test]
fn mig_devices_carry_their_capability_nodes() {
    let (_tree, d) = driver("mig");
    let spec = generate(&d, NameStrategy::Uuid);
    let json = as_json(&spec);
    let gpu0 = &d.gpus[0];
    // MIG devices are named as GPUs are: here by the UUIDs NVML gave them.
    let uuids: Vec<String> = gpu0.mig.iter().map(|m| m.uuid.clone().unwrap()).collect();
    assert_eq!(
        names(&spec),
        [
            d.gpus[0].uuid.clone(),
            d.gpus[1].uuid.clone(),
            uuids[0].clone(),
            uuids[1].clone(),
            "all".into()
        ]
    );
    let by_index = as_json(&generate(&d, NameStrategy::Index));
    for (mig, uuid) in gpu0.mig.iter().zip(&uuids) {
        let dev = device(&json, uuid);
        assert_eq!(
            dev["containerEdits"],
            device(&by_index, &format!("0:{}", mig.index))["containerEdits"]
        );
        let mut want = vec![format!("/dev/nvidia{} 195:{}", gpu0.minor, gpu0.minor)];
        want.extend(
            mig.caps
                .iter()
                .map(|c| format!("{} {}:{}", c.path.display(), c.major, c.minor)),
        );
        assert_eq!(spec_nodes(&dev["containerEdits"]), want);
        let all = spec_nodes(&device(&json, "all")["containerEdits"]);
        for w in &want {
            assert!(all.contains(w), "{w} not in {all:?}");
        }
    }
}

#[test]
fn generation_is_deterministic_in_both_formats() {
    for name in ["basic-2gpu", "lib32", "broken"] {
        let (_tree, d) = driver(name);
        let a = generate(&d, NameStrategy::Both);
        let (_tree, d2) = driver(name);
        let b = generate(&d2, NameStrategy::Both);
        for format in [Format::Json, Format::Yaml] {
            assert_eq!(
                a.to_string_as(format).unwrap(),
                b.to_string_as(format).unwrap(),
                "{name}"
            );
        }
        let from_json = Spec::parse(&a.to_string_as(Format::Json).unwrap()).unwrap();
        let from_yaml = Spec::parse(&a.to_string_as(Format::Yaml).unwrap()).unwrap();
        assert_eq!(from_json, a);
        assert_eq!(from_yaml, a);
    }
}

#[test]
fn the_spec_leaves_out_32_bit_libraries_and_skipped_files() {
    let (tree, d) = driver("lib32");
    let spec = as_json(&generate(&d, NameStrategy::Index));
    let lib32 = tree.root.join("usr/lib/i386-linux-gnu");
    for m in spec["containerEdits"]["mounts"].as_array().unwrap() {
        let host = Path::new(m["hostPath"].as_str().unwrap());
        assert!(!host.starts_with(&lib32), "{m}");
    }
    let (_tree, d) = driver("broken");
    let yaml = generate(&d, NameStrategy::Index)
        .to_string_as(Format::Yaml)
        .unwrap();
    for gone in [
        "libnvidia-cfg",
        "libnvidia-fbc",
        "libnvidia-opencl",
        "nvidia-smi",
    ] {
        assert!(!yaml.contains(gone), "{gone} in\n{yaml}");
    }
}

#[test]
fn a_relative_hook_path_is_refused() {
    let (_tree, d) = driver("basic-2gpu");
    let err = cdi::generate(&d, &GenerateOptions::new("nvc-hook")).unwrap_err();
    assert!(matches!(err, CdiError::RelativeHookPath(_)), "{err}");
    assert!(err.to_string().contains("hook.path"), "{err}");
}

#[test]
fn a_wsl_spec_has_one_device_all_with_dxg() {
    let (tree, d) = driver("wsl");
    for strategy in [NameStrategy::Index, NameStrategy::Uuid, NameStrategy::Both] {
        let spec = as_json(&generate(&d, strategy));
        assert_eq!(names(&generate(&d, strategy)), ["all"]);
        let all = device(&spec, "all");
        assert_eq!(spec_nodes(&all["containerEdits"]), ["/dev/dxg 10:125"]);
        assert_eq!(
            all["containerEdits"]["deviceNodes"][0]["hostPath"],
            json!(tree.dir.join("dev/dxg"))
        );
        // No node for every container of the spec: /dev/dxg is every GPU.
        let edits = &spec["containerEdits"];
        assert!(spec_nodes(edits).is_empty(), "{edits}");
        // The driver's folders where the host has them, and in the ld.so.cache; no
        // /proc/driver/nvidia to mask.
        let store = nvc_tests::WSL_DRIVER_STORE;
        let mounts: Vec<&str> = edits["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["containerPath"].as_str().unwrap())
            .collect();
        for want in [
            format!("{store}/libcuda.so.1.1"),
            "/usr/lib/wsl/lib/libcuda.so.1".to_string(),
            "/usr/bin/nvidia-smi".to_string(),
        ] {
            assert!(mounts.contains(&want.as_str()), "{want}: {mounts:?}");
        }
        let hooks = edits["hooks"].to_string();
        assert!(
            hooks.contains(&format!("{store}/libcuda.so.1")),
            "the link libcuda.so.1 -> libcuda.so.1.1: {hooks}"
        );
        assert!(
            hooks.contains("cdi-setup") && hooks.contains(&format!("\"--folder\",\"{store}\"")),
            "{hooks}"
        );
        assert!(!hooks.contains("--proc-root"), "{hooks}");
    }
}
