//! The `info` and `list` commands (`list --leases`: [`crate::leases`]).

use std::path::PathBuf;

use clap::Args;
use libnvc::discover::{self, Driver, DriverRoots, MigUuids};
use libnvc::edits::{self, ContainerLayout};
use libnvc::request::{Request, RequestPolicy};
use nvc_config::Config;
use serde_json::json;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Config(#[from] nvc_config::ConfigError),
    /// The driver could not be discovered.
    #[error(transparent)]
    Discover(#[from] discover::DiscoverError),
    /// The request given on the command line is invalid.
    #[error(transparent)]
    Request(#[from] libnvc::request::RequestError),
    /// The request cannot be met on this host.
    #[error(transparent)]
    Edits(#[from] edits::EditsError),
    /// The configuration holds an unknown capability.
    #[error("invalid config file {path}")]
    ConfigCapabilities {
        /// The config file.
        path: PathBuf,
        /// Which setting.
        #[source]
        source: libnvc::oci::PolicyError,
    },
    /// The GPU leases could not be read.
    #[error(transparent)]
    Leases(#[from] nvc_host::leases::LeaseError),
}

pub(crate) fn load() -> Result<(Config, PathBuf, Driver), CliError> {
    let (config, path) = Config::load_from_env()?;
    nvc_host::logging::init(&config.log, "nvc");
    let driver = discover::discover(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    )?;
    Ok((config, path, driver))
}

/// `nvc info`.
pub fn info(as_json: bool) -> Result<(), CliError> {
    let (config, _, driver) = load()?;
    let leases = nvc_host::leases::list(&nvc_host::state::StateDir::of(&config));
    let cuda = driver
        .cuda_version(&nvc_host::probe::RealHost)
        .map(|v| v.to_string());
    // NVML's columns only when it knows something: a driver whose NVML loads but
    // answers nothing (a fake tree, a broken install) gets the plain table.
    let details = driver
        .gpu_details(&nvc_host::probe::RealHost)
        .ok()
        .filter(|d| {
            d.iter().any(|g| {
                g.compute_capability.is_some() || g.brand.is_some() || g.memory_total.is_some()
            })
        });
    let health = crate::health::assess(&config, &driver);
    let detail = |uuid: &str| {
        details
            .as_ref()
            .and_then(|d| d.iter().find(|g| g.uuid == uuid))
    };
    if as_json {
        let gpus: Vec<_> = driver
            .gpus
            .iter()
            .map(|g| {
                let d = detail(&g.uuid);
                json!({
                    "index": g.index, "uuid": g.uuid, "busId": g.bus_id, "minor": g.minor,
                    "model": g.model, "devicePath": g.node.path,
                    "computeCapability": d.and_then(|d| d.compute_capability.clone()),
                    "brand": d.and_then(|d| d.brand.clone()),
                    "memoryTotal": d.and_then(|d| d.memory_total),
                    "mig": g.mig.iter().map(|m| json!({"index": m.index, "gi": m.gi, "ci": m.ci, "uuid": m.uuid})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let out = json!({
            "driverVersion": driver.version,
            "platform": if driver.wsl.is_some() { "wsl" } else { "linux" },
            "wsl": driver.wsl,
            "cudaVersion": cuda.as_ref().ok(),
            "gpus": gpus,
            "migUuidsUnknown": mig_uuids_unknown(&driver),
            "leases": leases.as_ref().map(|l| crate::leases::to_json(l)).ok(),
            "health": crate::health::to_json(&config, &driver, &health),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    println!("Driver version:  {}", driver.version);
    if let Some(wsl) = &driver.wsl {
        println!(
            "Platform:        WSL2 ({} gives every GPU, or none)",
            wsl.dxg.display()
        );
        println!("WSL libraries:   {}", wsl.lib_dir.display());
        match &wsl.driver_store {
            Some(s) => println!("Driver store:    {}", s.display()),
            None => println!("Driver store:    none with libcuda.so.1.1"),
        }
    }
    match &cuda {
        Ok(v) => println!("CUDA version:    {v}"),
        Err(e) => println!(
            "CUDA version:    unknown ({})",
            libnvc::report::error_chain(e)
        ),
    }
    if driver.wsl.is_none() {
        println!(
            "Health record:   {}",
            crate::health::record_line(&config, &health)
        );
    }
    println!();
    let mut rows = vec![vec![
        "INDEX".to_string(),
        "UUID".into(),
        "BUS ID".into(),
        "MINOR".into(),
        "MODEL".into(),
    ]];
    if details.is_some() {
        rows[0].extend(["ARCH".to_string(), "BRAND".into(), "MEMORY".into()]);
    }
    rows[0].push("HEALTH".into());
    for g in &driver.gpus {
        let mut row = vec![
            g.index.to_string(),
            g.uuid.clone(),
            g.bus_id.clone(),
            g.minor.to_string(),
            g.model.clone(),
        ];
        if details.is_some() {
            let d = detail(&g.uuid);
            let or_dash = |s: Option<String>| s.unwrap_or_else(|| "-".into());
            row.push(or_dash(d.and_then(|d| d.compute_capability.clone())));
            row.push(or_dash(d.and_then(|d| d.brand.clone())));
            row.push(or_dash(
                d.and_then(|d| d.memory_total)
                    .map(|m| format!("{} MiB", m >> 20)),
            ));
        }
        row.push(crate::health::gpu_cell(&health, &g.uuid));
        rows.push(row);
        for m in &g.mig {
            rows.push(vec![
                format!("  {}:{}", g.index, m.index),
                m.uuid.clone().unwrap_or_else(|| "-".into()),
                String::new(),
                String::new(),
                format!("MIG gi {} ci {}", m.gi, m.ci),
            ]);
        }
    }
    print_table(&rows);
    if let Some(why) = mig_uuids_unknown(&driver) {
        println!("(the MIG devices' UUIDs are unknown: {why})");
    }
    if driver.wsl.is_some() {
        println!("(WSL2 lists no GPU: a container gets all of them through /dev/dxg; nvidia-smi shows them)");
    } else if driver.gpus.is_empty() {
        println!(
            "(no GPU listed under {})",
            driver.roots.nvidia_proc().join("gpus").display()
        );
    }
    println!();
    match &leases {
        Ok(l) if l.is_empty() => println!("GPU leases:      none"),
        Ok(l) => {
            println!("GPU leases:");
            print_table(&crate::leases::rows(l));
        }
        Err(e) => println!(
            "GPU leases:      unknown ({})",
            libnvc::report::error_chain(e)
        ),
    }
    Ok(())
}

/// Why NVML did not say the MIG devices' UUIDs, when it was asked and could not.
fn mig_uuids_unknown(driver: &Driver) -> Option<String> {
    match &driver.mig_uuids {
        MigUuids::Unknown(why) => Some(libnvc::report::error_chain(&**why)),
        MigUuids::NotAsked | MigUuids::Known => None,
    }
}

/// Options of `nvc list`.
#[derive(Args)]
pub struct ListArgs {
    /// Devices, as NVIDIA_VISIBLE_DEVICES takes them (all, none, indices, UUIDs, bus ids,
    /// MIG devices as GPU:MIG indices or by MIG-UUID).
    #[arg(long, short = 'd', default_value = "all")]
    devices: String,
    /// Capabilities, as NVIDIA_DRIVER_CAPABILITIES takes them (default: the configured default).
    #[arg(long, short = 'c')]
    capabilities: Option<String>,
    /// Print JSON (the container edits) instead of a table.
    #[arg(long)]
    json: bool,
    /// Place libraries in /usr/lib64 (Red Hat-like images) rather than Debian's multiarch folder.
    #[arg(long)]
    lib64: bool,
    /// List the GPU leases instead: which container holds which GPU, shared or
    /// exclusively, live or stale.
    #[arg(long)]
    leases: bool,
}

/// `nvc list`.
pub fn list(args: &ListArgs) -> Result<(), CliError> {
    if args.leases {
        let (config, _) = Config::load_from_env()?;
        nvc_host::logging::init(&config.log, "nvc");
        return Ok(crate::leases::print(
            &nvc_host::state::StateDir::of(&config),
            args.json,
        )?);
    }
    let (config, path, driver) = load()?;
    // `nvc list` answers for any container: privileged, environment accepted,
    // requirements not checked.
    let policy = libnvc::oci::request_policy(&config, true)
        .map_err(|source| CliError::ConfigCapabilities { path, source })?;
    let policy = RequestPolicy {
        accept_envvar_unprivileged: true,
        disable_require: true,
        ..policy
    };
    let mut env = vec![format!("NVIDIA_VISIBLE_DEVICES={}", args.devices)];
    if let Some(c) = &args.capabilities {
        env.push(format!("NVIDIA_DRIVER_CAPABILITIES={c}"));
    }
    let request = Request::from_env(env.iter().map(String::as_str), &policy)?;
    let layout = if args.lib64 {
        ContainerLayout::lib64()
    } else {
        ContainerLayout::for_driver(&driver)
    };
    // Selected once, for the edits and the rows naming the MIG devices selected.
    let selected = edits::select(&driver, &request.devices, libnvc::request::VISIBLE_DEVICES)?;
    let edits = edits::build(&driver, &request, &selected, &layout)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&edits).unwrap_or_default()
        );
        return Ok(());
    }
    let mut rows = vec![vec!["KIND".to_string(), "HOST".into(), "CONTAINER".into()]];
    for (gpu, mig) in &selected.mig {
        rows.push(vec![
            "mig".into(),
            mig.uuid
                .clone()
                .unwrap_or_else(|| "(no UUID from NVML)".into()),
            format!(
                "{}:{} (GPU {}, GPU instance {}, compute instance {})",
                gpu.index, mig.index, gpu.index, mig.gi, mig.ci
            ),
        ]);
    }
    for n in &edits.device_nodes {
        let host = if n.on_host {
            n.host_path.display().to_string()
        } else {
            "(not on host)".to_string()
        };
        rows.push(vec![
            "device".into(),
            host,
            format!("{} {}:{}", n.path.display(), n.major, n.minor),
        ]);
    }
    for m in &edits.mounts {
        rows.push(vec![
            format!("{:?}", m.kind).to_lowercase(),
            m.host_path.display().to_string(),
            m.container_path.display().to_string(),
        ]);
    }
    for s in &edits.symlinks {
        rows.push(vec![
            "symlink".into(),
            String::new(),
            format!("{} -> {}", s.link.display(), s.target),
        ]);
    }
    print_table(&rows);
    if let Some(wsl) = &driver.wsl {
        println!(
            "(WSL2: {} gives every GPU; the driver's folders are mounted where the host has them)",
            wsl.dxg.display()
        );
    }
    Ok(())
}

/// Prints aligned columns; a closed stdout (`nvc list | head`) is not an error.
pub fn print_table(rows: &[Vec<String>]) {
    use std::io::Write;
    let text = crate::check::render_table(rows);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
