//! WSL2's driver layout through engines, as Docker Engine or Podman in a WSL2
//! distribution run it, on a fake WSL tree (`FakeDriverSpec { wsl: true, .. }`): Docker's
//! `--gpus` (the hook-only path), Podman 4.3's hooks.d, and Podman 5.4's CDI with the spec
//! `nvc cdi generate` writes (its one device, `nvidia.com/gpu=all`). Each gives `/dev/dxg`
//! and the driver's folders, and refuses one GPU.

use libnvc::report::error_chain;
use nvc_tests::{FakeDriverSpec, Outcome, Podman, WSL_DRIVER_STORE};

use super::podman::{podman5, podman_hooks_dir, DEBIAN13};
use super::{start_dockerd, World, IMAGE};

fn world() -> World {
    World::with(FakeDriverSpec {
        wsl: true,
        ..FakeDriverSpec::default()
    })
}

/// What a container that got every GPU shows.
#[track_caller]
fn assert_wsl_gpus(out: &Outcome, context: &str) {
    assert!(out.success(), "{context}: {out:?}");
    let want = format!("dxg a:{:x}", nvc_tests::DXG_MINOR);
    for line in [
        want.as_str(),
        "libcuda=ok",
        "cuda_version=99010",
        "libnvidia-ml=ok",
        "libcuda.so.1.1",
        "libdxcore.so",
    ] {
        assert!(
            out.stdout.contains(line),
            "{context}: no {line}\n{}",
            out.stdout
        );
    }
    assert!(
        out.stdout
            .contains(&format!("path={WSL_DRIVER_STORE}/libcuda.so.1 ")),
        "{context}: libcuda.so.1 from the driver store\n{}",
        out.stdout
    );
}

const SCRIPT: &str = "stat -c 'dxg %t:%T' /dev/dxg; nvc-probe; \
     readlink /usr/lib/wsl/drivers/*/libcuda.so.1; ls /usr/lib/wsl/lib; true";

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn docker_gpus_all_gives_dxg_and_the_wsl_folders() {
    let w = world();
    let dockerd = start_dockerd(&w);
    let context = |what: &str| {
        format!(
            "{what}\nnvc log:\n{}\ndockerd log:\n{}",
            w.nvc_log(),
            dockerd.log_tail(20)
        )
    };
    let run = |gpus: &str| {
        dockerd.run(
            &["--gpus".to_string(), gpus.to_string()],
            IMAGE,
            &["sh", "-c", SCRIPT],
        )
    };
    assert_wsl_gpus(&run("all"), &context("--gpus all"));
    let out = run("device=0");
    assert!(!out.success(), "{}", context(&format!("{out:?}")));
    assert!(
        out.stderr.contains("WSL cannot give a container one GPU"),
        "the user is not told why: {out:?}"
    );

    let cgroup = dockerd.cgroup_parent.clone();
    drop(dockerd);
    w.assert_clean(&[cgroup]);
}

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn podman_hooks_dir_gives_dxg_and_the_wsl_folders() {
    let w = world();
    let podman = Podman::new(&w.path("podman"), &podman_hooks_dir(&w))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let run = |env: &str| podman.run(&["-e", env], IMAGE, &["sh", "-c", SCRIPT]);
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());
    assert_wsl_gpus(
        &run("NVIDIA_VISIBLE_DEVICES=all"),
        &context("podman NVIDIA_VISIBLE_DEVICES=all"),
    );
    let out = run("NVIDIA_VISIBLE_DEVICES=0");
    assert!(!out.success(), "{}", context(&format!("{out:?}")));
    assert!(
        out.stderr.contains("WSL cannot give a container one GPU"),
        "the user is not told why: {out:?}"
    );
    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}

#[test]
#[ignore = "needs root and the network (a newer Debian's engines, by debootstrap): dockerd, containerd, podman, device nodes"]
fn podman5_cdi_all_gives_dxg_and_the_wsl_folders() {
    let w = world();
    let root = DEBIAN13.root();
    let podman = podman5(&w, &root, "runc", &podman_hooks_dir(&w));
    podman
        .import(&w.tarball, IMAGE)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let run = |device: &str| podman.run(&["--device", device], IMAGE, &["sh", "-c", SCRIPT]);
    let context = |what: &str| format!("{what}\nnvc log:\n{}", w.nvc_log());
    assert_wsl_gpus(
        &run("nvidia.com/gpu=all"),
        &context("CDI nvidia.com/gpu=all"),
    );
    // The spec has no other device.
    let out = run("nvidia.com/gpu=0");
    assert!(!out.success(), "{}", context(&format!("{out:?}")));
    let cgroup = podman.cgroup_parent.clone();
    drop(podman);
    w.assert_clean(&[cgroup]);
}
