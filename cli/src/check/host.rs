//! The host's checks: config, driver, versions, GPUs, device nodes, persistence mode,
//! ldconfig, the low-level runtime, nvc-runtime and the hook; then the engines and CDI.
//!
//! This file runs them in order and checks the config; the others check by subject:
//! `driver.rs` the driver (versions, GPUs, persistence mode), `nodes.rs` the device nodes,
//! `programs.rs` the programs around nvc (ldconfig, the low-level runtime, nvc-runtime,
//! the hook).

mod driver;
mod nodes;
mod programs;

use std::path::Path;

use libnvc::discover::{self, Driver, DriverRoots};
use libnvc::report::error_chain;
use nvc_config::Config;

use super::{cdi, engines, show, Probe, Row};

pub use driver::{gpus, persistence, versions};
pub use nodes::{control_nodes, gpu_nodes};
pub use programs::{hook, ldconfig, nvc_runtime, runtime};

use nodes::read_majors;

/// Every check, in order. A malformed config stops here: every nvc program refuses to
/// run with it, so nothing else can be judged. Without a driver, the checks that need
/// one are left out rather than each failing again.
pub fn check_all(probe: &Probe) -> Vec<Row> {
    let (row, config) = config(&probe.config_path);
    let mut rows = vec![row];
    let Some(config) = config else {
        return rows;
    };
    nvc_host::logging::init(&config.log, "nvc");
    let roots = DriverRoots::from_config(&config.driver);
    let driver = match discover::discover(&roots, &nvc_host::probe::RealHost) {
        Ok(d) => {
            rows.push(driver_row(&d));
            Some(d)
        }
        Err(e) => {
            let fix = match e {
                discover::DiscoverError::NoDriver { .. } => format!(
                    "install the NVIDIA driver, or point [driver] in {} at it",
                    show(&probe.config_path)
                ),
                _ => "check that the file is readable (run as root)".to_string(),
            };
            rows.push(Row::fail("driver", error_chain(&e), fix));
            None
        }
    };
    if let Some(wsl) = driver.as_ref().and_then(|d| d.wsl.as_ref()) {
        rows.push(wsl_row(wsl));
    } else if let Some(driver) = &driver {
        rows.push(versions(driver));
        rows.push(gpus(driver));
        let majors = read_majors(&roots.proc_root);
        rows.push(gpu_nodes(driver, &majors));
        rows.push(control_nodes(driver, &majors));
        rows.push(persistence(driver));
        rows.push(health_row(&config, driver));
    }
    rows.push(ldconfig(&config, probe));
    rows.push(runtime(&config, probe));
    rows.push(nvc_runtime(probe));
    rows.push(hook(&config, probe));
    let specs = cdi::scan(&probe.cdi_dirs);
    rows.extend(engines::check(probe, &specs));
    rows.extend(cdi::rows(&specs, driver.as_ref(), &probe.cdi_dirs));
    rows
}

/// The config file: found, absent (the defaults) or malformed.
pub fn config(path: &Path) -> (Row, Option<Config>) {
    let exists = path.exists();
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            return (
                Row::fail(
                    "config",
                    error_chain(&e),
                    format!("fix {}; `nvc config default` shows every key", show(path)),
                ),
                None,
            )
        }
    };
    if let Err(e) = libnvc::oci::request_policy(&config, false) {
        return (
            Row::fail(
                "config",
                format!("invalid config file {}: {}", show(path), error_chain(&e)),
                "name only known capabilities (see `nvc config default`)",
            ),
            None,
        );
    }
    let detail = if exists {
        show(path)
    } else {
        format!("no {}: the defaults", show(path))
    };
    (Row::ok("config", detail), Some(config))
}

/// WSL2's device and folders, in place of the Linux driver's versions, GPUs and nodes.
fn wsl_row(wsl: &discover::wsl::Wsl) -> Row {
    match &wsl.driver_store {
        Some(store) => Row::ok(
            "wsl",
            format!(
                "{} gives every GPU (WSL cannot isolate one); libraries in {} and the driver store {}",
                show(&wsl.dxg),
                show(&wsl.lib_dir),
                show(store)
            ),
        ),
        None => Row::fail(
            "wsl",
            format!(
                "{} is there but no NVIDIA driver store with libcuda.so.1.1 under {}",
                show(&wsl.dxg),
                discover::wsl::DRIVERS_DIR
            ),
            "install or update the NVIDIA driver on Windows, then restart WSL (wsl --shutdown)",
        ),
    }
}

fn driver_row(driver: &Driver) -> Row {
    let roots = &driver.roots;
    let default = DriverRoots::from_config(&nvc_config::DriverConfig::default());
    let mut detail = match driver.wsl {
        Some(_) => format!("WSL2, version {}", driver.version),
        None => driver.version.clone(),
    };
    if *roots != default {
        let dev = if roots.dev_root == roots.root {
            String::new()
        } else {
            format!(", dev root {}", show(&roots.dev_root))
        };
        detail.push_str(&format!(
            " (root {}{dev}, proc root {})",
            show(&roots.root),
            show(&roots.proc_root)
        ));
    }
    Row::ok("driver", detail)
}

/// The GPUs' health as the record says, and whether the record counts.
fn health_row(config: &Config, driver: &Driver) -> Row {
    let assessment = crate::health::assess(config, driver);
    let line = crate::health::record_line(config, &assessment);
    if !config.requests.health_check {
        return Row::info("health", line);
    }
    let Some(record) = assessment.current() else {
        return Row::info("health", format!("not checked: {line}"));
    };
    let bad: Vec<String> = driver
        .gpus
        .iter()
        .filter_map(|g| {
            let h = record.gpu(&g.uuid).filter(|h| !h.is_healthy())?;
            Some(format!("GPU {} ({}) {}", g.index, g.uuid, h.describe()))
        })
        .collect();
    if bad.is_empty() {
        return Row::ok("health", format!("every GPU healthy; {line}"));
    }
    Row::warn(
        "health",
        format!(
            "left out of `all`, refused by name: {}; {line}",
            bad.join(", ")
        ),
        "reset the GPU (nvidia-smi -r -i <index>), then run `nvc health update`",
    )
}
