//! Device nodes made inside the container (CVE-2021-1056).

use super::*;

/// What opening a device node says when the device cgroup forbids it.
const DENIED: &str = "Operation not permitted";

/// Whether the outcome of opening a node says the open got past the device cgroup to the
/// driver: it opened, or the driver is not loaded (the fake tree's 195:N on a machine
/// without a GPU: ENXIO). Not a missing file, not EPERM.
fn reached_the_driver(line: &str) -> bool {
    !line.contains(DENIED) && (line.ends_with(": opened") || line.contains("No such device"))
}

#[test]
#[ignore = "needs root: hostile images need runc, device nodes and mounts"]
fn a_node_made_inside_for_another_gpu_cannot_be_opened() {
    let lab = Lab::new();
    let minors: Vec<u32> = lab
        .fake
        .spec
        .gpus_in_bus_order()
        .iter()
        .map(|g| g.minor)
        .collect();
    // GPU index 1 is given; the node of index 0 is made inside, as root with CAP_MKNOD.
    let (given, other) = (minors[1], minors[0]);
    let dir = lab.fresh();
    let rootfs = dir.join("rootfs");
    let outside = Outside::new(&dir, lab.path());
    let mut script = format!("mknod /dev/nvidia{other} c 195 {other} || echo mknod-failed; ");
    for p in [
        format!("/dev/nvidia{given}"),
        "/dev/nvidiactl".to_string(),
        format!("/dev/nvidia{other}"),
    ] {
        script.push_str(&format!(
            "if err=$(cat {p} 2>&1 >/dev/null); then echo \"{p}: opened\"; else echo \"{p}: $err\"; fi; "
        ));
    }
    script.push_str("echo done");
    let caps = json!(["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_MKNOD"]);
    let bundle = lab
        .bundle(
            &rootfs,
            &[
                "NVIDIA_VISIBLE_DEVICES=1".to_string(),
                "NVIDIA_DRIVER_CAPABILITIES=all".to_string(),
            ],
            &script,
        )
        .set("/process/capabilities/bounding", caps.clone())
        .set("/process/capabilities/effective", caps.clone())
        .set("/process/capabilities/permitted", caps)
        .write()
        .unwrap();
    let out = lab.nvc().run(&bundle, &container_id("nvc-hostile-mknod"));
    assert!(out.success() && out.stdout.contains("done"), "{out:?}");
    let line = |p: &str| -> String {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{p}: ")))
            .unwrap_or_else(|| panic!("no result for {p}: {out:?}"))
            .to_string()
    };
    assert!(!out.stdout.contains("mknod-failed"), "{out:?}");
    for granted in [format!("/dev/nvidia{given}"), "/dev/nvidiactl".to_string()] {
        let l = line(&granted);
        assert!(reached_the_driver(&l), "{granted} is the container's: {l}");
    }
    let l = line(&format!("/dev/nvidia{other}"));
    assert!(
        l.contains(DENIED),
        "/dev/nvidia{other} was made inside for a GPU the container was not given: {l}"
    );
    outside.assert_untouched("mknod of another GPU");
}
