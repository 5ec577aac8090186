//! `nvc health`: asks NVML about every GPU and writes the health record that every GPU
//! start reads (`update`, `watch`), and shows it (`show`, also in `nvc info` and `nvc
//! check`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use libnvc::discover::Driver;
use libnvc::health::{self, Assessment, HealthRecord};
use libnvc::probe::HostProbe;
use nvc_config::Config;
use nvc_host::state::StateDir;
use serde_json::json;

use crate::commands::CliError;

/// Options of `nvc health`.
#[derive(Args)]
pub struct HealthArgs {
    #[command(subcommand)]
    command: Option<HealthCommand>,
    /// Print JSON instead of a table (as `nvc health show --json`).
    #[arg(long)]
    json: bool,
}

/// What `nvc health` does.
#[derive(Subcommand)]
enum HealthCommand {
    /// Ask NVML about every GPU once and write the health record.
    Update,
    /// Write the health record every INTERVAL seconds until stopped (where there is no
    /// systemd: nvc-health.timer runs `nvc health update` every minute).
    Watch {
        /// Seconds between two updates; keep it below the config's requests.health-max-age.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
        interval: u64,
    },
    /// Show each GPU's health and the record's age (the default).
    Show {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Why `nvc health` failed.
#[derive(Debug, thiserror::Error)]
pub enum HealthCliError {
    /// The config or the driver could not be read.
    #[error(transparent)]
    Cli(#[from] CliError),
    /// The driver has no NVML to ask.
    #[error("the driver has no libnvidia-ml.so.1 under {root}: nvc health update needs NVML")]
    NoNvml {
        /// The driver root.
        root: PathBuf,
    },
    /// NVML could not be asked, or the record not written.
    #[error(transparent)]
    Health(#[from] nvc_host::health::HealthError),
}

fn load() -> Result<(Config, Driver), CliError> {
    let (config, _, driver) = crate::commands::load()?;
    Ok((config, driver))
}

/// Runs `nvc health`.
pub fn run(args: &HealthArgs) -> Result<(), HealthCliError> {
    match &args.command {
        None => show(args.json),
        Some(HealthCommand::Show { json }) => show(*json || args.json),
        Some(HealthCommand::Update) => {
            let (config, driver) = load()?;
            let record = update(&config, &driver)?;
            print_summary(&StateDir::of(&config), &record);
            Ok(())
        }
        Some(HealthCommand::Watch { interval }) => loop {
            // Each round reads the driver again: a GPU that fell off leaves /proc.
            match load()
                .map_err(HealthCliError::from)
                .and_then(|(c, d)| update(&c, &d))
            {
                Ok(r) => log::info!(
                    "GPU health record written: {} GPUs, {} unhealthy",
                    r.gpus.len(),
                    r.gpus.iter().filter(|g| !g.is_healthy()).count()
                ),
                Err(e) => {
                    let chain = libnvc::report::error_chain(&e);
                    log::error!("nvc health watch: {chain}");
                    eprintln!("nvc health watch: {chain}");
                }
            }
            std::thread::sleep(Duration::from_secs(*interval));
        },
    }
}

/// Asks NVML about every GPU of `driver` and writes the record.
fn update(config: &Config, driver: &Driver) -> Result<HealthRecord, HealthCliError> {
    let nvml = driver
        .library("libnvidia-ml")
        .ok_or_else(|| HealthCliError::NoNvml {
            root: driver.roots.root.clone(),
        })?;
    let uuids: Vec<&str> = driver.gpus.iter().map(|g| g.uuid.as_str()).collect();
    let faults = nvc_host::health::nvml_faults(&nvml.host_path, &uuids)?;
    let record = HealthRecord {
        format: health::RECORD_FORMAT,
        written: nvc_host::health::now(),
        boot_id: nvc_host::health::boot_id().unwrap_or_default(),
        driver_version: driver.version.clone(),
        gpus: driver
            .gpus
            .iter()
            .zip(faults)
            .map(|(g, faults)| health::GpuHealth {
                uuid: g.uuid.clone(),
                bus_id: g.bus_id.clone(),
                faults,
            })
            .collect(),
    };
    nvc_host::health::write_record(&StateDir::of(config), &record)?;
    Ok(record)
}

fn print_summary(state: &StateDir, record: &HealthRecord) {
    let bad: Vec<_> = record.gpus.iter().filter(|g| !g.is_healthy()).collect();
    println!(
        "Wrote {}: {} GPUs, {} unhealthy",
        state.health_record().display(),
        record.gpus.len(),
        bad.len()
    );
    for g in bad {
        println!("  {} ({}): {}", g.uuid, g.bus_id, g.describe());
    }
}

/// The record as a start would judge it now.
pub fn assess(config: &Config, driver: &Driver) -> Assessment {
    let inputs = nvc_host::probe::RealHost.health_inputs(config);
    health::assess(&inputs, &driver.version, config.requests.health_max_age)
}

/// One line on the record: where, how old, whether it counts.
pub fn record_line(config: &Config, assessment: &Assessment) -> String {
    let path = StateDir::of(config).health_record();
    let off = if config.requests.health_check {
        ""
    } else {
        " ([requests] health-check = false: not applied)"
    };
    match assessment {
        Assessment::Current { age, .. } => {
            format!("{}, {age} s old, current{off}", path.display())
        }
        Assessment::Ignored { reason, .. } => {
            format!("{}: ignored, {reason}{off}", path.display())
        }
    }
}

/// A GPU's health as the record says: `ok`, its faults, or `unknown` (no current record;
/// a stale record's faults are shown as such).
pub fn gpu_cell(assessment: &Assessment, uuid: &str) -> String {
    match assessment {
        Assessment::Current { record, .. } => match record.gpu(uuid) {
            Some(g) if g.is_healthy() => "ok".into(),
            Some(g) => faults_text(g),
            None => "unknown (not in the record)".into(),
        },
        Assessment::Ignored {
            record: Some(record),
            ..
        } => match record.gpu(uuid) {
            Some(g) if !g.is_healthy() => format!("unknown (stale: {})", faults_text(g)),
            _ => "unknown".into(),
        },
        Assessment::Ignored { record: None, .. } => "unknown".into(),
    }
}

fn faults_text(g: &health::GpuHealth) -> String {
    let names: Vec<&str> = g.faults.iter().map(|f| f.name()).collect();
    names.join(",")
}

/// The JSON form of the record's state, for `nvc info --json` and `nvc health --json`.
pub fn to_json(config: &Config, driver: &Driver, assessment: &Assessment) -> serde_json::Value {
    let (age, ignored) = match assessment {
        Assessment::Current { age, .. } => (Some(*age), None),
        Assessment::Ignored { reason, .. } => (None, Some(reason.to_string())),
    };
    let gpus: Vec<_> = driver
        .gpus
        .iter()
        .map(|g| {
            let faults = assessment
                .current()
                .and_then(|r| r.gpu(&g.uuid))
                .map(|h| h.faults.iter().map(|f| f.name()).collect::<Vec<_>>());
            json!({
                "index": g.index, "uuid": g.uuid, "busId": g.bus_id,
                "healthy": faults.as_ref().map(Vec::is_empty),
                "faults": faults,
            })
        })
        .collect();
    json!({
        "record": StateDir::of(config).health_record(),
        "check": config.requests.health_check,
        "maxAge": config.requests.health_max_age,
        "current": assessment.current().is_some(),
        "age": age,
        "ignored": ignored,
        "gpus": gpus,
    })
}

fn show(as_json: bool) -> Result<(), HealthCliError> {
    let (config, driver) = load()?;
    let assessment = assess(&config, &driver);
    if as_json {
        let out = to_json(&config, &driver, &assessment);
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    println!("Health record:   {}", record_line(&config, &assessment));
    println!();
    let mut rows = vec![vec![
        "INDEX".to_string(),
        "UUID".into(),
        "BUS ID".into(),
        "HEALTH".into(),
    ]];
    for g in &driver.gpus {
        rows.push(vec![
            g.index.to_string(),
            g.uuid.clone(),
            g.bus_id.clone(),
            gpu_cell(&assessment, &g.uuid),
        ]);
    }
    crate::commands::print_table(&rows);
    if let Some(record) = assessment.current() {
        for g in record.gpus.iter().filter(|g| !g.is_healthy()) {
            println!("{} {}", g.uuid, g.describe());
        }
    }
    Ok(())
}
