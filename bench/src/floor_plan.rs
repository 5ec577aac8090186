//! The plan of `nvc-floor` (the floor program, `src/floor/main.rs`): what nvc-runtime adds
//! to a spec and what nvc-hook mounts, links and writes, for one request on one image,
//! worked out once before the timed runs by nvc's own code, so that the floor program
//! does the same container-side work and nothing else.

use std::path::{Path, PathBuf};

use libnvc::edits::{ContainerLayout, MountKind};
use libnvc::plan::{ConfigSource, Handed, Plan, Stage};
use nvc_config::Config;
use nvc_tests::Bundle;
use serde_json::{json, Value};

use crate::error::BenchError;
use crate::large_image::run_quiet;
use crate::runner::Bench;

/// The environment variable naming the plan, read by `nvc-floor`.
pub const PLAN_ENV: &str = "NVC_FLOOR_PLAN";

/// The environment variable naming the runc `nvc-floor` execs as the runtime.
pub const RUNC_ENV: &str = "NVC_FLOOR_RUNC";

/// Where the floor program's hooks log their phases (`--debug-log`), in the working
/// directory.
pub const PHASES_LOG: &str = "floor-phases.log";

/// Writes the plan `name` for a container of `image` asking for `env`, with the driver of
/// `config` (an nvc configuration whose runtime is the no-op), into the working
/// directory (`floor-<name>.json`, its cache beside it); returns its path.
pub fn write(
    bench: &Bench,
    name: &str,
    config: &Path,
    image: &Path,
    env: &[&str],
) -> Result<PathBuf, BenchError> {
    // The spec nvc-runtime writes, on a bundle of the image (the shim never looks in it).
    let (dir, _) = bench.fresh_run("floor-plan")?;
    let bundle = Bundle::new(&dir, image)?
        .args(&["/bin/true"])
        .env(env)
        .write()?;
    let spec_path = bundle.config_path();
    let pristine = read_json(&spec_path)?;
    let mut shim = std::process::Command::new(&bench.programs.shim);
    shim.arg("--root")
        .arg(dir.join("state"))
        .args(["create", "--bundle"])
        .arg(&dir)
        .arg("floor-plan")
        .env(nvc_config::CONFIG_ENV, config);
    run_quiet(&mut shim)?;
    let edited = read_json(&spec_path)?;
    let added = |pointer: &str| -> Vec<Value> {
        let before = pristine
            .pointer(pointer)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        edited
            .pointer(pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| !before.contains(v))
            .cloned()
            .collect()
    };
    let devices = added("/linux/devices");
    let rules = added("/linux/resources/devices");

    // What the hook does with that spec: nvc's plan, moved to the image's library folder.
    let loaded = Config::load(config).map_err(|e| BenchError::FloorPlan(e.to_string()))?;
    let source = ConfigSource {
        path: config,
        from_env: false,
    };
    let plan = Plan::for_bundle_cached(
        &dir,
        &loaded,
        &source,
        &nvc_host::probe::RealHost,
        Stage::Hook,
        &Handed::default(),
        None,
    )
    .map_err(|e| {
        BenchError::FloorPlan(libnvc::report::error_chain(&libnvc::plan::PlanError::from(
            e,
        )))
    })?;
    let gpu = plan
        .gpu
        .ok_or_else(|| BenchError::FloorPlan(format!("{env:?} asks for no GPU")))?;
    let arch = gpu.driver.arch().unwrap_or(libnvc::elf::Arch::X86_64);
    let layout = ContainerLayout::of_image(arch, |p| in_image(image, p).is_dir());
    let edits = gpu.edits.relocated(&ContainerLayout::default(), &layout);
    let mounts: Vec<Value> = edits
        .mounts
        .iter()
        .map(|m| {
            let p = m.kind.policy();
            json!({
                "host": m.host_path,
                "path": m.container_path,
                "dir": m.kind == MountKind::Directory,
                "readonly": p.readonly,
                "nosuid": p.nosuid,
                "nodev": p.nodev,
                "noexec": p.noexec,
            })
        })
        .collect();
    let links: Vec<Value> = edits
        .symlinks
        .iter()
        .map(|l| json!({"path": l.link, "target": l.target}))
        .collect();

    // The cache the hook writes: the driver's libraries, then the image's entries.
    let mut entries = nvc_host::setup::cache_entries(&gpu.driver, &edits);
    let image_cache = in_image(image, Path::new("/etc/ld.so.cache"));
    if let Ok(data) = std::fs::read(&image_cache) {
        let cache = libnvc::ldcache::parse(&data).map_err(BenchError::LdCache)?;
        entries.extend(
            cache
                .entries
                .into_iter()
                .filter(|e| e.hwcaps_index().is_none()),
        );
    }
    libnvc::ldcache::sort_entries(&mut entries);
    let cache = libnvc::ldcache::write(&entries).map_err(BenchError::LdCache)?;
    let cache_path = bench.work.join(format!("floor-{name}.ld.so.cache"));
    std::fs::write(&cache_path, cache).map_err(BenchError::io("write", &cache_path))?;

    let mut plan = json!({
        "devices": devices,
        "rules": rules,
        "mounts": mounts,
        "links": links,
        "cache": cache_path,
    });
    // With nvc's log at debug level (`--debug-log`), the floor's hooks time their phases
    // too, as nvc-hook does, a line each in `<work>/floor-phases.log`.
    if bench.debug_log {
        plan["phases"] = json!(bench.work.join(PHASES_LOG));
    }
    let path = bench.work.join(format!("floor-{name}.json"));
    let text = serde_json::to_vec_pretty(&plan)
        .map_err(|e| BenchError::FloorPlan(format!("write the plan: {e}")))?;
    std::fs::write(&path, text).map_err(BenchError::io("write", &path))?;
    std::fs::remove_dir_all(&dir).map_err(BenchError::io("remove", &dir))?;
    Ok(path)
}

/// The plan at `plan` with `"undo": true` beside it (`<name>-undo.json`): the floor of a
/// start that leaves no trace (nvc-floor's poststop hook takes away what its prestart hook
/// made and puts the image's cache back). Returns its path.
pub fn with_undo(plan: &Path) -> Result<PathBuf, BenchError> {
    let mut value = read_json(plan)?;
    value["undo"] = json!(true);
    let path = plan.with_extension("undo.json");
    let text = serde_json::to_vec_pretty(&value)
        .map_err(|e| BenchError::FloorPlan(format!("write the plan: {e}")))?;
    std::fs::write(&path, text).map_err(BenchError::io("write", &path))?;
    Ok(path)
}

/// Checks, after a run of the floor program's hook on `rootfs` (its host path), that it
/// did its work: every mount point and link of the plan is there, and the ld.so.cache is
/// the plan's. A floor that skipped work would not be one.
pub fn check(plan: &Path, rootfs: &Path) -> Result<(), BenchError> {
    let plan = read_json(plan)?;
    let missing = |what: &str, p: &Path| {
        BenchError::FloorPlan(format!("nvc-floor left no {what} at {}", p.display()))
    };
    for (list, key) in [("mounts", "path"), ("links", "path")] {
        for entry in plan[list].as_array().into_iter().flatten() {
            let p = in_image(rootfs, Path::new(entry[key].as_str().unwrap_or_default()));
            if std::fs::symlink_metadata(&p).is_err() {
                return Err(missing(list, &p));
            }
        }
    }
    let cache = in_image(rootfs, Path::new("/etc/ld.so.cache"));
    let want = std::fs::read(plan["cache"].as_str().unwrap_or_default()).ok();
    if want.is_none() || std::fs::read(&cache).ok() != want {
        return Err(missing("ld.so.cache of the plan", &cache));
    }
    Ok(())
}

/// Checks, after a whole container (start to exit) through the floor program with
/// `plan`, that its undo did its work when the plan asks for one: none of the plan's
/// mount points and links is left in `rootfs`, and its ld.so.cache is the image's again.
pub fn check_undone(plan: &Path, rootfs: &Path, image: &Path) -> Result<(), BenchError> {
    let plan = read_json(plan)?;
    if plan["undo"].as_bool() != Some(true) {
        return Ok(());
    }
    let left = |p: &Path| BenchError::FloorPlan(format!("nvc-floor's undo left {}", p.display()));
    for list in ["mounts", "links"] {
        for entry in plan[list].as_array().into_iter().flatten() {
            let p = in_image(
                rootfs,
                Path::new(entry["path"].as_str().unwrap_or_default()),
            );
            if std::fs::symlink_metadata(&p).is_ok() {
                return Err(left(&p));
            }
        }
    }
    let cache = Path::new("/etc/ld.so.cache");
    if std::fs::read(in_image(rootfs, cache)).ok() != std::fs::read(in_image(image, cache)).ok() {
        return Err(left(&in_image(rootfs, cache)));
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value, BenchError> {
    let data = std::fs::read(path).map_err(BenchError::io("read", path))?;
    serde_json::from_slice(&data)
        .map_err(|e| BenchError::FloorPlan(format!("{}: {e}", path.display())))
}

/// `path` (absolute, as seen in the container) inside the image at `image`.
fn in_image(image: &Path, path: &Path) -> PathBuf {
    image.join(path.strip_prefix("/").unwrap_or(path))
}
