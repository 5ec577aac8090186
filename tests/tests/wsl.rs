//! WSL2's driver layout in real containers: a fake WSL tree built at run time
//! (`FakeDriverSpec { wsl: true, .. }`: `/dev/dxg` as a real character device 10:125,
//! `/usr/lib/wsl/lib` and a driver store folder with gcc-built libcuda and NVML), under
//! real runc through nvc-runtime (the shim path) and with nvc-hook as the spec's prestart
//! hook (the hook-only path, as Docker's `--gpus` and Podman's hooks.d run it); `nvc info`,
//! `nvc list` and `nvc check` on it. Everything asserted from inside the container or from
//! the programs' output. Needs root (runc, device nodes, mounts).
//!
//! Discovery, selection and refusals on the committed tree (`testdata/driver-roots/wsl`)
//! are libnvc's unit tests (`libnvc/src/discover/wsl/tests.rs`); its CDI spec is in the
//! `cdi` suite (`generate`).

// The helpers below are test code too; clippy's allow-*-in-tests only covers #[test] fns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use nvc_tests::{Bundle, FakeDriverSpec, Outcome, RootfsSpec, Runtime, WSL_DRIVER_STORE};
use serde_json::json;

mod common;

use common::containers::World;

const WSL_LIB: &str = "/usr/lib/wsl/lib";

fn world() -> World {
    World::with(
        FakeDriverSpec {
            wsl: true,
            ..FakeDriverSpec::default()
        },
        RootfsSpec::default(),
    )
}

/// What the container shows of the WSL driver: its node, the loader's answers, the link
/// in the driver store, the ld.so.cache, nvidia-smi.
fn script() -> String {
    format!(
        "if [ -c /dev/dxg ]; then echo dxg $(stat -c '%t:%T' /dev/dxg); else echo no-dxg; fi; \
         nvc-probe; \
         echo link $(readlink {WSL_DRIVER_STORE}/libcuda.so.1); \
         ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1|libdxcore' ; \
         if [ -e {WSL_LIB}/libcuda.so.1 ]; then echo lib-dir; fi; \
         for f in {WSL_LIB}/libcuda.so.1 {WSL_DRIVER_STORE}/libcuda.so.1.1; do \
           if (: >> $f) 2>/dev/null; then echo writable $f; fi; done; \
         command -v nvidia-smi; nvidia-smi >/dev/null 2>&1; echo smi=$?; \
         ls /usr/lib/x86_64-linux-gnu | grep -c -E 'libcuda|nvidia' ; true"
    )
}

/// Whether the container ran the driver's nvidia-smi: found and executed (the fake one
/// exits 9, as the real one does, where it finds no `/proc/driver/nvidia`; WSL's asks NVML
/// instead).
fn ran_smi(out: &str) -> bool {
    out.lines()
        .find_map(|l| l.strip_prefix("smi="))
        .is_some_and(|code| code != "126" && code != "127")
}

/// The checks of [`script`]'s output for a container that got every GPU.
fn assert_all_gpus(out: &str, log: &str) {
    assert!(out.contains("dxg a:7d"), "/dev/dxg 10:125:\n{out}\n{log}");
    assert!(out.contains("libcuda=ok"), "{out}\n{log}");
    assert!(out.contains("cuda_version=99010"), "{out}");
    assert!(out.contains("libnvidia-ml=ok"), "{out}");
    assert!(out.contains("link libcuda.so.1.1"), "{out}");
    assert!(out.contains("lib-dir"), "{out}");
    assert!(
        !out.contains("writable"),
        "the folders are read-only: {out}"
    );
    // The loader finds libcuda.so.1 in the driver store first, then /usr/lib/wsl/lib.
    let cuda: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("libcuda.so.1 "))
        .collect();
    assert!(
        cuda.first()
            .is_some_and(|l| l.ends_with(&format!("{WSL_DRIVER_STORE}/libcuda.so.1"))),
        "{out}"
    );
    assert!(
        cuda.iter()
            .any(|l| l.ends_with(&format!("{WSL_LIB}/libcuda.so.1"))),
        "{out}"
    );
    assert!(out.contains(&format!("{WSL_LIB}/libdxcore.so")), "{out}");
    assert!(out.contains("/usr/bin/nvidia-smi\n"), "{out}");
    assert!(ran_smi(out), "{out}");
    // Nothing in the image's own library folder.
    assert!(out.trim_end().ends_with("\n0"), "{out}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_shim_gives_dxg_and_the_wsl_folders() {
    let w = world();
    let bundle = w.bundle(&["NVIDIA_VISIBLE_DEVICES=all"], &script());
    let out = w.rt.run(&bundle, &nvc_tests::container_id("nvc-wsl"));
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert_all_gpus(&out.stdout, &w.nvc_log());
    // The shim wrote the node and its device cgroup rule into config.json: the node as
    // a bind mount from the fake tree, whose dev root is not the host's `/`.
    let spec = bundle.read_config().unwrap();
    let dxg = w.fake.dev_dir().join("dxg");
    assert!(
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["destination"] == "/dev/dxg" && m["source"] == dxg.to_str().unwrap()),
        "{spec:#}"
    );
    let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["allow"] == true
            && r["type"] == "c"
            && r["major"] == 10
            && r["minor"] == nvc_tests::DXG_MINOR
            && r["access"] == "rwm"),
        "{rules:#?}"
    );
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn one_gpu_is_refused_and_none_gets_no_device() {
    let w = world();
    for devices in ["0", "GPU-11111111-2222-3333-4444-555555555555"] {
        let out = w.run(
            &[&format!("NVIDIA_VISIBLE_DEVICES={devices}")],
            "echo started",
        );
        assert!(!out.success(), "{devices}: {out:?}");
        assert!(!out.stdout.contains("started"), "{out:?}");
        let said = format!("{}{}", out.stderr, w.nvc_log());
        assert!(
            said.contains("WSL cannot give a container one GPU")
                && said.contains("NVIDIA_VISIBLE_DEVICES=all"),
            "{devices}: {out:?}\n{said}"
        );
    }
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=none"], &script());
    assert!(out.contains("no-dxg"), "{out}");
    assert!(out.contains("lib-dir"), "the driver's files still: {out}");
    let out = w.ok(&["NVIDIA_VISIBLE_DEVICES=void"], &script());
    assert!(out.contains("no-dxg") && !out.contains("lib-dir"), "{out}");
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn utility_gets_nvml_and_nvidia_smi_but_no_libcuda() {
    let w = world();
    let out = w.ok(
        &[
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
        &script(),
    );
    assert!(out.contains("libnvidia-ml=ok"), "{out}");
    assert!(ran_smi(&out), "{out}");
    assert!(!out.contains("libcuda=ok"), "{out}");
    assert!(!out.contains("lib-dir"), "no libcuda.so.1: {out}");
}

/// A bundle with nvc-hook as its prestart hook and no NVIDIA device in the spec, as
/// Docker's `--gpus` and Podman's hooks.d start it, run by plain runc.
fn run_hook_only(w: &World, env: &str) -> Outcome {
    let config = w.dir.path().join("config.toml");
    let bundle = Bundle::new(&w.dir.path().join("hook-only"), &w.rootfs.path)
        .unwrap()
        .args(&["sh", "-c", &script()])
        .env(&[env])
        .with_fake_proc(&w.fake)
        .set(
            "/hooks",
            json!({"prestart": [{
                "path": nvc_tests::workspace_bin("nvc-hook"),
                "args": ["nvidia-container-runtime-hook", "prestart"],
                "env": [format!("NVC_CONFIG={}", config.display())],
            }]}),
        )
        .write()
        .unwrap();
    let rt = Runtime::runc(&w.dir.path().join("runc-state"));
    rt.run(&bundle, &nvc_tests::container_id("nvc-wsl"))
}

#[test]
#[ignore = "needs root: containers need runc, device nodes and mounts"]
fn the_hook_alone_gives_dxg_and_the_wsl_folders() {
    let w = world();
    let out = run_hook_only(&w, "NVIDIA_VISIBLE_DEVICES=all");
    assert!(out.success(), "{out:?}\n{}", w.nvc_log());
    assert_all_gpus(&out.stdout, &w.nvc_log());
}

/// `nvc ARGS` with the world's config.
fn nvc(w: &World, args: &[&str]) -> std::process::Output {
    Command::new(nvc_tests::workspace_bin("nvc"))
        .args(args)
        .env("NVC_CONFIG", w.dir.path().join("config.toml"))
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs root: the fake WSL tree has a real /dev/dxg"]
fn info_list_and_check_say_it_is_wsl() {
    let w = world();
    let info = nvc(&w, &["info"]);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(info.status.success(), "{info:?}");
    assert!(text.contains("Platform:        WSL2"), "{text}");
    assert!(text.contains(WSL_DRIVER_STORE), "{text}");
    assert!(text.contains("WSL2 lists no GPU"), "{text}");
    let json: serde_json::Value =
        serde_json::from_slice(&nvc(&w, &["info", "--json"]).stdout).unwrap();
    assert_eq!(json["platform"], "wsl");
    assert!(json["wsl"]["driver_store"]
        .as_str()
        .unwrap()
        .ends_with(WSL_DRIVER_STORE));

    let list = nvc(&w, &["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{list:?}");
    assert!(text.contains("/dev/dxg 10:125"), "{text}");
    assert!(
        text.contains(&format!("{WSL_DRIVER_STORE}/libcuda.so.1.1")),
        "{text}"
    );
    assert!(text.contains("WSL2"), "{text}");
    let one = nvc(&w, &["list", "--devices", "0"]);
    assert!(!one.status.success());
    assert!(
        String::from_utf8_lossy(&one.stderr).contains("WSL cannot give a container one GPU"),
        "{one:?}"
    );

    let check = nvc(&w, &["check"]);
    let text = String::from_utf8_lossy(&check.stdout);
    let wsl_row = text
        .lines()
        .find(|l| l.trim_start().starts_with("wsl") || l.contains(" wsl "))
        .unwrap_or_else(|| panic!("no wsl row:\n{text}"));
    assert!(
        wsl_row.contains("/dev/dxg") && wsl_row.contains(WSL_DRIVER_STORE),
        "{text}"
    );
    assert!(text.contains("WSL2"), "{text}");
}
