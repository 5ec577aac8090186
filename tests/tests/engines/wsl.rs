//! WSL2's driver layout through Docker's `--gpus` (the hook-only path, as Docker Engine
//! in a WSL2 distribution runs it): a fake WSL tree (`FakeDriverSpec { wsl: true, .. }`),
//! `--gpus all` giving `/dev/dxg` and the driver's folders, one GPU refused.

use nvc_tests::{FakeDriverSpec, WSL_DRIVER_STORE};

use super::{start_dockerd, World, IMAGE};

const SCRIPT: &str = "stat -c 'dxg %t:%T' /dev/dxg; nvc-probe; \
     readlink /usr/lib/wsl/drivers/*/libcuda.so.1; ls /usr/lib/wsl/lib; true";

#[test]
#[ignore = "needs root: dockerd, containerd, podman, device nodes"]
fn docker_gpus_all_gives_dxg_and_the_wsl_folders() {
    let w = World::with(FakeDriverSpec {
        wsl: true,
        ..FakeDriverSpec::default()
    });
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

    let out = run("all");
    assert!(out.success(), "{}", context(&format!("{out:?}")));
    let want = format!("dxg a:{:x}", nvc_tests::DXG_MINOR);
    for line in [
        want.as_str(),
        "libcuda=ok",
        "cuda_version=99010",
        "libnvidia-ml=ok",
        "libcuda.so.1.1",
        "libdxcore.so",
    ] {
        assert!(out.stdout.contains(line), "no {line}: {}", context(&out.stdout));
    }
    assert!(
        out.stdout
            .contains(&format!("path={WSL_DRIVER_STORE}/libcuda.so.1 ")),
        "libcuda.so.1 from the driver store: {}",
        out.stdout
    );

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
