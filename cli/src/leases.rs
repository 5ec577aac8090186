//! The GPU leases as `nvc list --leases` and `nvc info` show them: which container holds
//! which GPU, since when, shared or exclusively, and whether it still runs.

use libnvc::lease::{utc, Liveness};
use nvc_host::leases::{self, LeaseError, Listed};
use serde_json::{json, Value};

/// The table's rows, header first.
pub fn rows(listed: &[Listed]) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "GPU".to_string(),
        "UUID".into(),
        "CONTAINER".into(),
        "PID".into(),
        "SINCE".into(),
        "MODE".into(),
        "STATE".into(),
    ]];
    for l in listed {
        rows.push(match l {
            Listed::Holder {
                index,
                gpu,
                holder,
                liveness,
            } => vec![
                index.to_string(),
                gpu.clone(),
                holder.container.clone(),
                holder.pid.to_string(),
                utc(holder.since),
                holder.exclusive.map_or("shared".to_string(), |by| {
                    format!("exclusive ({})", by.name())
                }),
                liveness.name().to_string(),
            ],
            Listed::Garbage { path, reason } => vec![
                "-".into(),
                path.display().to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("garbage ({reason}), removed when a GPU is next taken"),
            ],
        });
    }
    rows
}

/// The leases as JSON.
pub fn to_json(listed: &[Listed]) -> Value {
    Value::Array(
        listed
            .iter()
            .map(|l| match l {
                Listed::Holder {
                    index,
                    gpu,
                    holder,
                    liveness,
                } => json!({
                    "index": index, "uuid": gpu, "container": holder.container,
                    "pid": holder.pid, "startTime": holder.start_time, "since": holder.since,
                    "exclusive": holder.exclusive.is_some(),
                    "exclusiveBy": holder.exclusive,
                    "live": *liveness == Liveness::Live,
                    "state": liveness.name(),
                }),
                Listed::Garbage { path, reason } => json!({
                    "garbage": path, "reason": reason,
                }),
            })
            .collect(),
    )
}

/// `nvc list --leases`.
pub fn print(state: &nvc_host::state::StateDir, as_json: bool) -> Result<(), LeaseError> {
    let listed = leases::list(state)?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&listed)).unwrap_or_default()
        );
        return Ok(());
    }
    if listed.is_empty() {
        println!("(no GPU lease under {})", state.leases().display());
        return Ok(());
    }
    crate::commands::print_table(&rows(&listed));
    Ok(())
}
