//! `nvc info`, `nvc list` and `nvc config` against fake driver trees, through the built
//! binary. The tests on a fake driver tree need root (its device nodes); the others
//! need nothing.

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

use nvc_tests::{require_root, FakeDriverSpec};

/// The workspace's built `nvc` (next to this test's deps folder).
fn nvc() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|p| p.parent()).unwrap();
    let bin = dir.join("nvc");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

fn run(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(nvc())
        .args(args)
        .env("NVC_CONFIG", config)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn info_lists_gpus_in_pci_order_with_minors() {
    require_root("fake driver trees have device nodes");
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeDriverSpec::default().build(dir.path()).unwrap();
    let (ok, out, err) = run(&fake.config, &["info"]);
    assert!(ok, "{err}");
    assert!(out.contains("Driver version:  999.88.77"), "{out}");
    assert!(out.contains("CUDA version:    99.1"), "{out}");
    let mut gpus = fake.spec.gpus.clone();
    gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("GPU-")).collect();
    assert_eq!(rows.len(), gpus.len(), "{out}");
    for (i, (row, gpu)) in rows.iter().zip(&gpus).enumerate() {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], i.to_string(), "{row}");
        assert_eq!(cols[1], gpu.uuid, "{row}");
        assert_eq!(cols[2], gpu.bus_id, "{row}");
        assert_eq!(cols[3], gpu.minor.to_string(), "{row}");
        assert!(row.contains(&gpu.model), "{row}");
    }

    let (ok, out, _) = run(&fake.config, &["info", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["driverVersion"], "999.88.77");
    assert_eq!(v["gpus"][0]["busId"], gpus[0].bus_id.as_str());
    assert_eq!(v["gpus"][0]["minor"], gpus[0].minor);
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn list_shows_what_a_request_gets() {
    require_root("fake driver trees have device nodes");
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeDriverSpec::default().build(dir.path()).unwrap();
    let mut gpus = fake.spec.gpus.clone();
    gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));

    let (ok, out, err) = run(&fake.config, &["list", "--devices", "1"]);
    assert!(ok, "{err}");
    let root = fake.root.display().to_string();
    for want in [
        format!("{root}/usr/local/nvidia/lib64/libcuda.so.999.88.77"),
        format!("{root}/usr/local/nvidia/lib64/libnvidia-ml.so.999.88.77"),
        format!("{root}/usr/local/nvidia/bin/nvidia-smi"),
        "/dev/nvidiactl 195:255".to_string(),
        format!("/dev/nvidia{} 195:{}", gpus[1].minor, gpus[1].minor),
    ] {
        assert!(out.contains(&want), "missing {want} in\n{out}");
    }
    for other in [&gpus[0], &gpus[2]] {
        assert!(
            !out.contains(&format!("/dev/nvidia{} ", other.minor)),
            "unselected GPU listed:\n{out}"
        );
    }

    let (ok, out, _) = run(
        &fake.config,
        &["list", "--capabilities", "utility", "--json"],
    );
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mounts = v["mounts"].as_array().unwrap();
    assert!(mounts
        .iter()
        .any(|m| m["containerPath"] == "/usr/bin/nvidia-smi"));
    assert!(!mounts
        .iter()
        .any(|m| m["containerPath"].as_str().unwrap().contains("libcuda")));

    let (ok, _, err) = run(&fake.config, &["list", "--devices", "9"]);
    assert!(!ok);
    assert!(err.contains("GPU index 9"), "{err}");
    let (ok, _, err) = run(&fake.config, &["list", "--capabilities", "compute,warp"]);
    assert!(!ok);
    assert!(err.contains("\"warp\""), "{err}");
}

#[test]
#[ignore = "needs root: fake driver trees have device nodes"]
fn info_and_list_show_the_mig_devices_uuids() {
    require_root("fake driver trees have device nodes");
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeDriverSpec {
        mig: true,
        ..FakeDriverSpec::default()
    }
    .build(dir.path())
    .unwrap();
    let migs = fake.spec.mig_devices();
    let caps = fake.spec.mig_caps();
    assert_eq!(migs.len(), 2);

    // The dynamic nvc asks the driver's NVML (the fake one reads the tree's file).
    let (ok, out, err) = run(&fake.config, &["info"]);
    assert!(ok, "{err}");
    for (i, m) in migs.iter().enumerate() {
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("0:{i} ")))
            .unwrap_or_else(|| panic!("no row 0:{i} in\n{out}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                format!("0:{i}"),
                m.uuid.clone(),
                "MIG".into(),
                "gi".into(),
                m.gi.to_string(),
                "ci".into(),
                m.ci.to_string()
            ],
            "{out}"
        );
    }
    assert!(!out.contains("UUIDs are unknown"), "{out}");
    let (ok, out, _) = run(&fake.config, &["info", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for (i, m) in migs.iter().enumerate() {
        let j = &v["gpus"][0]["mig"][i];
        assert_eq!(
            (j["uuid"].as_str(), j["gi"].as_u64(), j["ci"].as_u64()),
            (Some(m.uuid.as_str()), Some(m.gi.into()), Some(m.ci.into())),
            "{out}"
        );
    }
    assert!(v["migUuidsUnknown"].is_null(), "{out}");

    // `nvc list` by UUID: the MIG device's row, and its capability nodes only.
    let (ok, out, err) = run(&fake.config, &["list", "--devices", &migs[1].uuid]);
    assert!(ok, "{err}");
    let row = out.lines().find(|l| l.starts_with("mig ")).unwrap_or("");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "mig",
            migs[1].uuid.as_str(),
            "0:1",
            "(GPU",
            "0,",
            "GPU",
            "instance",
            "2,",
            "compute",
            "instance",
            "0)"
        ],
        "{out}"
    );
    for c in &caps {
        let node = format!("/dev/nvidia-caps/nvidia-cap{} 241:{}", c.minor, c.minor);
        assert_eq!(out.contains(&node), c.gi == 2, "{node} in\n{out}");
    }
    let unknown = "MIG-00000000-0000-4000-8000-000000000000";
    let (ok, _, err) = run(&fake.config, &["list", "--devices", unknown]);
    assert!(!ok);
    assert!(
        err.contains(unknown) && migs.iter().all(|m| err.contains(&m.uuid)),
        "{err}"
    );
}

#[test]
fn no_driver_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let empty = dir.path().display();
    std::fs::write(
        &config,
        format!("[driver]\nroot = \"{empty}\"\ndev-root = \"{empty}\"\nproc-root = \"{empty}/proc\"\n[log]\nfile = \"\"\n"),
    )
    .unwrap();
    for cmd in [&["info"][..], &["list"]] {
        let (ok, out, err) = run(&config, cmd);
        assert!(!ok, "{cmd:?} should fail");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("nvc: no NVIDIA driver found"), "{err}");
    }
}

#[test]
fn bad_config_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[driver]\nroot = \"/\"\nproc-rot = \"/proc\"\n").unwrap();
    let (ok, _, err) = run(&config, &["info"]);
    assert!(!ok);
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(
        err.contains("line 3") && err.contains("driver.proc-rot"),
        "{err}"
    );
}

#[test]
fn config_default_prints_the_shipped_file() {
    let out = Command::new(nvc())
        .args(["config", "default"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        nvc_config::DEFAULT_TOML
    );
}
