//! `nvc cdi generate` and `nvc cdi list` through the built binary, on a fake driver tree
//! built at run time (root: the tree has device nodes).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use libnvc::cdi::Spec;
use nvc_tests::{workspace_bin, FakeDriverSpec};
use serde_json::{json, Value};

use super::{device, spec_nodes, Host, HOOK_ENV, LIB};

fn names(spec: &Value) -> Vec<String> {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn generated_spec_describes_the_fake_driver() {
    let h = Host::new();
    let text = h.ok(&["cdi", "generate", "--format", "json"]);
    let spec: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(spec["kind"], "nvidia.com/gpu");
    // Each GPU by index and by UUID (the device plugin's names), in bus order.
    let gpus = h.gpus_in_bus_order();
    let mut want_names: Vec<String> = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        want_names.push(i.to_string());
        want_names.push(g.uuid.clone());
    }
    want_names.push("all".into());
    assert_eq!(names(&spec), want_names);

    // one node per GPU, with the numbers of its /dev/nvidia<minor>, in bus order
    let mut all = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let want = format!("/dev/nvidia{} 195:{}", g.minor, g.minor);
        let d = device(&spec, &i.to_string());
        assert_eq!(
            spec_nodes(&d["containerEdits"]),
            std::slice::from_ref(&want)
        );
        assert_eq!(
            device(&spec, &g.uuid)["containerEdits"],
            d["containerEdits"]
        );
        let node = &d["containerEdits"]["deviceNodes"][0];
        assert_eq!(node["type"], "c");
        assert_eq!(
            node["hostPath"],
            json!(h.fake.dev_root.join(format!("dev/nvidia{}", g.minor)))
        );
        all.push(want);
    }
    assert_eq!(spec_nodes(&device(&spec, "all")["containerEdits"]), all);

    let edits = &spec["containerEdits"];
    assert_eq!(edits["env"], json!(["NVIDIA_VISIBLE_DEVICES=void"]));
    let control = spec_nodes(edits);
    for want in [
        "/dev/nvidiactl 195:255",
        "/dev/nvidia-uvm 238:0",
        "/dev/nvidia-uvm-tools 238:1",
    ] {
        assert!(control.contains(&want.to_string()), "{control:?}");
    }

    // every mount's host file exists; libraries go to the Debian folder, read-only
    let mounts = edits["mounts"].as_array().unwrap();
    assert!(!mounts.is_empty());
    for m in mounts {
        let host = Path::new(m["hostPath"].as_str().unwrap());
        assert!(host.is_absolute() && host.exists(), "{m}");
        assert!(host.starts_with(&h.fake.root), "{m}");
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
    let libcuda = mounts
        .iter()
        .find(|m| m["containerPath"] == format!("{LIB}/libcuda.so.999.88.77"))
        .unwrap();
    assert_eq!(libcuda["options"], json!(["ro", "nosuid", "nodev", "bind"]));
    assert!(mounts
        .iter()
        .any(|m| m["containerPath"] == "/usr/bin/nvidia-smi"));

    // hooks: one createContainer set-up and its poststop, the configured absolute hook
    // path, PATH and the config
    let hook_path = workspace_bin("nvc-hook");
    let hooks = edits["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    for hook in hooks {
        assert_eq!(hook["path"], json!(hook_path));
        assert!(Path::new(hook["path"].as_str().unwrap()).is_absolute());
        // the config `nvc cdi generate` read (NVC_CONFIG's), named to the hooks
        let named = format!("NVC_CONFIG={}", h.config.display());
        assert_eq!(hook["env"], json!([HOOK_ENV, named]));
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
    // the cache's folder, the compat rule's driver, and the /proc/driver/nvidia mask,
    // reading the GPUs under the configured proc root
    let proc_root = h.fake.proc_root.to_str().unwrap();
    let tail = [
        "--folder",
        LIB,
        "--cuda-compat-above",
        "999.88.77",
        "--proc-root",
        proc_root,
    ];
    assert_eq!(setup[setup.len() - tail.len()..], tail);

    // the YAML form holds the same spec
    let yaml = h.ok(&["cdi", "generate", "--format", "yaml"]);
    assert!(
        yaml.starts_with("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"),
        "{yaml}"
    );
    assert_eq!(
        Spec::parse(&yaml).unwrap(),
        serde_json::from_value::<Spec>(spec).unwrap()
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn device_names_follow_the_strategy() {
    let h = Host::new();
    let uuids: Vec<String> = h
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.uuid.clone())
        .collect();
    let cases: [(&str, Vec<String>); 3] = [
        ("index", vec!["0".into(), "1".into(), "2".into()]),
        ("uuid", uuids.clone()),
        (
            "both",
            (0..3)
                .flat_map(|i| [i.to_string(), uuids[i].clone()])
                .collect(),
        ),
    ];
    for (strategy, mut want) in cases {
        want.push("all".into());
        let spec: Value = serde_json::from_str(&h.ok(&[
            "cdi",
            "generate",
            "--format",
            "json",
            "--device-name-strategy",
            strategy,
        ]))
        .unwrap();
        assert_eq!(names(&spec), want, "{strategy}");
        // a GPU's devices under both names carry the same edits
        if strategy == "both" {
            assert_eq!(
                device(&spec, "1")["containerEdits"],
                device(&spec, &uuids[1])["containerEdits"]
            );
        }
        let listed = h.ok(&["cdi", "list", "--device-name-strategy", strategy]);
        let qualified: Vec<String> = want.iter().map(|n| format!("nvidia.com/gpu={n}")).collect();
        assert_eq!(listed.lines().collect::<Vec<_>>(), qualified, "{strategy}");
    }
    // `list --spec` reads a spec file, JSON or YAML
    let file = h.dir.path().join("nvidia.yaml");
    h.ok(&[
        "cdi",
        "generate",
        "--device-name-strategy",
        "uuid",
        "--output",
        file.to_str().unwrap(),
    ]);
    let listed = h.ok(&["cdi", "list", "--spec", file.to_str().unwrap()]);
    assert_eq!(
        listed.lines().next(),
        Some(&*format!("nvidia.com/gpu={}", uuids[0]))
    );
    assert_eq!(listed.lines().last(), Some("nvidia.com/gpu=all"));
    let bad = h.dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: [").unwrap();
    let out = h.nvc(&["cdi", "list", "--spec", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "nvc: cannot read the CDI spec {}: invalid CDI spec",
            bad.display()
        )),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn generation_is_deterministic_and_writes_files_atomically() {
    let h = Host::new();
    for format in ["json", "yaml"] {
        let first = h.ok(&["cdi", "generate", "--format", format]);
        let second = h.ok(&["cdi", "generate", "--format", format]);
        assert_eq!(first, second, "{format}");
    }
    // the format comes from the extension; stdout is YAML
    let stdout_yaml = h.ok(&["cdi", "generate"]);
    assert_eq!(stdout_yaml, h.ok(&["cdi", "generate", "--format", "yaml"]));
    let out_dir = h.dir.path().join("cdi");
    for (name, want) in [
        (
            "nvidia.json",
            h.ok(&["cdi", "generate", "--format", "json"]),
        ),
        ("nvidia.yml", stdout_yaml.clone()),
    ] {
        let path = out_dir.join(name);
        assert_eq!(
            h.ok(&["cdi", "generate", "--output", path.to_str().unwrap()]),
            ""
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want, "{name}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{name}");
    }
    // replacing keeps nothing else behind
    let path = out_dir.join("nvidia.json");
    h.ok(&["cdi", "generate", "--output", path.to_str().unwrap()]);
    let mut left: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["nvidia.json", "nvidia.yml"]);
    // an extension that says nothing is an error naming the fix
    let odd = h.dir.path().join("nvidia.spec");
    let out = h.nvc(&["cdi", "generate", "--output", odd.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "nvc: cannot tell the format of {} from its extension: name it .json, .yaml or .yml, or pass --format",
            odd.display()
        )
    );
    assert!(!odd.exists());
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn mig_devices_are_named_gpu_colon_mig_and_by_uuid_with_their_capability_nodes() {
    let h = Host::with(FakeDriverSpec {
        mig: true,
        ..FakeDriverSpec::default()
    });
    let spec: Value =
        serde_json::from_str(&h.ok(&["cdi", "generate", "--format", "json"])).unwrap();
    let gpus = h.gpus_in_bus_order();
    let caps = h.fake.spec.mig_caps();
    let nodes = h.fake.spec.device_nodes();
    let migs = h.fake.spec.mig_devices();
    // GPU 0 (the lowest bus id) is in MIG mode with GPU instances 1 and 2, one compute
    // instance each: MIG devices 0:0 and 0:1, each also by the UUID NVML gives it, after
    // the GPUs, before all.
    let mut want_names: Vec<String> = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        want_names.push(i.to_string());
        want_names.push(g.uuid.clone());
    }
    for (i, m) in migs.iter().enumerate() {
        want_names.push(format!("0:{i}"));
        want_names.push(m.uuid.clone());
    }
    want_names.push("all".into());
    assert_eq!(names(&spec), want_names);
    let listed = h.ok(&["cdi", "list"]);
    let qualified: Vec<String> = want_names
        .iter()
        .map(|n| format!("nvidia.com/gpu={n}"))
        .collect();
    assert_eq!(listed.lines().collect::<Vec<_>>(), qualified);
    // By index only, the MIG devices keep their index names; by UUID, their UUIDs.
    for (strategy, mig_names) in [
        ("index", vec!["0:0".to_string(), "0:1".into()]),
        ("uuid", migs.iter().map(|m| m.uuid.clone()).collect()),
    ] {
        let listed = h.ok(&["cdi", "list", "--device-name-strategy", strategy]);
        let got: Vec<&str> = listed
            .lines()
            .filter_map(|l| l.strip_prefix("nvidia.com/gpu="))
            .filter(|n| n.contains(':') || n.starts_with("MIG-"))
            .collect();
        assert_eq!(got, mig_names, "{strategy}");
    }

    let parent = format!("/dev/nvidia{} 195:{}", gpus[0].minor, gpus[0].minor);
    let all = spec_nodes(&device(&spec, "all")["containerEdits"]);
    for (mig, gi) in [(0, 1), (1, 2)] {
        // The parent GPU's node, then the GPU instance's and the compute instance's
        // access nodes, with the numbers of the host's nodes.
        let mut want = vec![parent.clone()];
        for cap in caps.iter().filter(|c| c.gi == gi) {
            let path = format!("dev/nvidia-caps/nvidia-cap{}", cap.minor);
            let node = nodes
                .iter()
                .find(|n| n.path == Path::new(&path))
                .unwrap_or_else(|| panic!("the fake tree has no {path}"));
            want.push(format!("/{path} {}:{}", node.major, node.minor));
        }
        let dev = device(&spec, &format!("0:{mig}"));
        assert_eq!(spec_nodes(&dev["containerEdits"]), want, "0:{mig}");
        let by_uuid = device(&spec, &migs[mig].uuid);
        assert_eq!(by_uuid["containerEdits"], dev["containerEdits"], "0:{mig}");
        for w in &want {
            assert!(all.contains(w), "{w} not in all: {all:?}");
        }
    }
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes; containers need runc"]
fn vendor_and_class_make_the_kind_of_every_name() {
    let h = Host::new();
    let uuids: Vec<String> = h
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.uuid.clone())
        .collect();
    // NVIDIA's device plugin's kind, by UUID as the plugin names GPUs: the devices and
    // edits of nvidia.com/gpu's spec under another kind.
    let plugin = [
        "--vendor",
        "k8s.device-plugin.nvidia.com",
        "--class",
        "gpu",
        "--device-name-strategy",
        "uuid",
    ];
    let text = h.ok(&[&["cdi", "generate", "--format", "json"][..], &plugin].concat());
    let mut spec: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(spec["kind"], "k8s.device-plugin.nvidia.com/gpu");
    let mut want: Vec<String> = uuids.clone();
    want.push("all".into());
    assert_eq!(names(&spec), want);
    let nvidia: Value = serde_json::from_str(&h.ok(&[
        "cdi",
        "generate",
        "--format",
        "json",
        "--device-name-strategy",
        "uuid",
    ]))
    .unwrap();
    spec["kind"] = json!("nvidia.com/gpu");
    assert_eq!(spec, nvidia);

    // `list` prints the names the same options give, and those of the file written.
    let qualified: Vec<String> = want
        .iter()
        .map(|n| format!("k8s.device-plugin.nvidia.com/gpu={n}"))
        .collect();
    let listed = h.ok(&[&["cdi", "list"][..], &plugin].concat());
    assert_eq!(listed.lines().collect::<Vec<_>>(), qualified);
    let file = h.dir.path().join("k8s.device-plugin.nvidia.com-gpu.json");
    let output = ["--output", file.to_str().unwrap()];
    h.ok(&[&["cdi", "generate"][..], &plugin, &output].concat());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let listed = h.ok(&["cdi", "list", "--spec", file.to_str().unwrap()]);
    assert_eq!(listed.lines().collect::<Vec<_>>(), qualified);
    // --spec names its own devices: the naming options go without it.
    let out = h.nvc(&[
        "cdi",
        "list",
        "--spec",
        file.to_str().unwrap(),
        "--vendor",
        "example.com",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{out:?}"
    );

    // Any kind CDI takes; a class with a dot needs CDI 0.6.0.
    let spec: Value = serde_json::from_str(&h.ok(&[
        "cdi",
        "generate",
        "--format",
        "json",
        "--vendor",
        "example.com",
        "--class",
        "accel.v2",
    ]))
    .unwrap();
    assert_eq!(spec["kind"], "example.com/accel.v2");
    assert_eq!(spec["cdiVersion"], "0.6.0");
    assert_eq!(names(&spec).last().map(String::as_str), Some("all"));

    // One CDI does not take is refused before anything is read or written, naming the
    // rule.
    let bad = h.dir.path().join("bad.json");
    for (flag, value, why) in [
        (
            "--vendor",
            "NVIDIA.com",
            "'N' is not allowed (a CDI vendor is a DNS subdomain",
        ),
        ("--vendor", "3com.com", "it does not start with a letter"),
        ("--vendor", "nvidia..com", "its label \"\" is no DNS label"),
        (
            "--class",
            "gpu/0",
            "'/' is not allowed (a CDI class is at most 63",
        ),
        ("--class", "gpu-", "it does not end with a letter or digit"),
        ("--class", "", "it is empty"),
    ] {
        for sub in ["generate", "list"] {
            let mut args = vec!["cdi", sub, flag, value];
            if sub == "generate" {
                args.extend(["--output", bad.to_str().unwrap()]);
            }
            let out = h.nvc(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("invalid value '{value}' for '{flag} ")),
                "{args:?}: {err}"
            );
            assert!(err.contains(why), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}");
        }
    }
    assert!(!bad.exists());
}
