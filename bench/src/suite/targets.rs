//! The targets (added start time with and without GPUs, the hook alone, scaling
//! to 64 GPUs, parallel starts, the programs' memory), each judged met or not on the
//! medians the tables found.

use crate::report::Table;
use crate::stats::{mib, ms, signed_ms, Samples};

use super::tables::median;
use super::{Findings, ParallelFinding, PodmanFinding};

/// The targets of the issue.
const TARGET_ADDED_MS: f64 = 3.0;
const TARGET_NO_GPU_MS: f64 = 0.5;
const TARGET_HOOK_MS: f64 = 2.0;
const TARGET_RSS_KIB: u64 = 4 * 1024;
const TARGET_SCALING: f64 = 1.5;
const TARGET_PARALLEL: f64 = 1.2;
const TARGET_PODMAN_CDI_MS: f64 = 2.0;

/// 5. The targets of the issue, judged on the findings.
pub(super) fn targets(found: &Findings) -> Table {
    let (starts, parts) = (&found.started, &found.parts);
    let (runc, runc_cpu) = (median(&starts[0]), starts[0].cpu_median_ms());
    let added_uc = median(&starts[2]) - runc;
    let added_none = median(&starts[1]) - runc;
    let to_exit = |i: usize| median(&found.starts[i]) - median(&found.starts[0]);
    let shim_none = median(&parts[1]) - median(&parts[0]);
    let hook_alone = median(&parts[4]);
    // The floor program's (nvc-floor): what the same container-side work costs alone.
    let floor_none = median(&starts[4]) - runc;
    let floor_added = median(&starts[5]) - runc;
    let floor_hook = median(&parts[6]);
    let floor_shim_none = median(&parts[7]) - median(&parts[0]);
    let shim_rss = parts[1..4].iter().filter_map(Samples::peak_rss_kib).max();
    let hook_rss = parts[4..6].iter().filter_map(Samples::peak_rss_kib).max();
    let floor_rss = parts[0].peak_rss_kib();
    let mut table = Table::new(
        "Targets",
        "From the tables above: met or not on the wall-clock medians, which the targets \
         are about (added start: to the container's first instruction, `create` + \
         `start`; the start-to-exit figure beside it includes the poststop hook); the CPU figures say how much of it is work done, not waiting. Peak \
         RSS as measured, the measuring process's own floor (the `/bin/true` row) \
         included.",
        &["target", "measured", "met"],
    )
    .text();
    table.row([
        format!(
            "added start, all GPUs, utility,compute, ld.so.cache updated ≤ {TARGET_ADDED_MS} ms"
        ),
        format!(
            "{} ms (CPU {} ms; start to exit: {} ms); the floor program: {} ms",
            signed_ms(added_uc),
            signed_ms(starts[2].cpu_median_ms() - runc_cpu),
            signed_ms(to_exit(2)),
            signed_ms(floor_added)
        ),
        yes_no(added_uc <= TARGET_ADDED_MS),
    ]);
    table.row([
        format!("added start, no GPU asked for ≤ {TARGET_NO_GPU_MS} ms"),
        format!(
            "{} ms (CPU {} ms; start to exit: {} ms; shim alone minus the floor: {} ms); \
             the floor program: {} ms (as the runtime alone, minus the floor: {} ms)",
            signed_ms(added_none),
            signed_ms(starts[1].cpu_median_ms() - runc_cpu),
            signed_ms(to_exit(1)),
            signed_ms(shim_none),
            signed_ms(floor_none),
            signed_ms(floor_shim_none)
        ),
        yes_no(added_none <= TARGET_NO_GPU_MS),
    ]);
    table.row([
        format!("nvc-hook prestart alone, all GPUs, utility,compute ≤ {TARGET_HOOK_MS} ms"),
        format!(
            "{} ms; the floor program: {} ms",
            ms(hook_alone),
            ms(floor_hook)
        ),
        yes_no(hook_alone <= TARGET_HOOK_MS),
    ]);
    let (mut measured, met) = scaling_target(&found.scaling);
    if let Some(ratio) = scaling_ratio(&found.scaling_floor) {
        measured.push_str(&format!("; the floor program: {ratio:.2} ×"));
    }
    table.row([
        format!("added start with 64 GPUs ≤ {TARGET_SCALING} × with 1"),
        measured,
        met,
    ]);
    let (measured, met) = parallel_target(found.parallel);
    table.row([
        format!("parallel GPU starts ≤ {TARGET_PARALLEL} × plain runc's"),
        measured,
        met,
    ]);
    let (measured, met) = podman_target(found.podman);
    table.row([
        format!("Podman: CDI start ≤ hooks.d start + {TARGET_PODMAN_CDI_MS} ms"),
        measured,
        met,
    ]);
    let floor = floor_rss.map_or_else(String::new, |f| format!(" (floor {})", mib(f)));
    for (what, rss) in [("nvc-hook", hook_rss), ("nvc-runtime", shim_rss)] {
        table.row([
            format!("{what} peak RSS ≤ {}", mib(TARGET_RSS_KIB)),
            rss.map_or_else(|| "not measured".into(), |r| format!("{}{floor}", mib(r))),
            rss.map_or("not measured".into(), |r| yes_no(r <= TARGET_RSS_KIB)),
        ]);
    }
    table
}

/// The measured text and verdict of the parallel-start target.
fn parallel_target(found: Option<ParallelFinding>) -> (String, String) {
    match found {
        Some(p) => (
            format!(
                "{:.2} × ({} containers, {} in flight; Kubernetes' containers, which get \
                 no poststop hook: {:.2} ×); the floor program: {:.2} ×, with its undo \
                 (the floor of leaving no trace): {:.2} ×",
                p.ratio,
                p.count,
                p.in_flight,
                p.kubernetes_ratio,
                p.floor_ratio,
                p.floor_undo_ratio
            ),
            yes_no(p.ratio <= TARGET_PARALLEL),
        ),
        None => ("not measured (--parallel 0)".into(), "–".into()),
    }
}

/// The measured text and verdict of the Podman target: the CDI row's median against the
/// hooks.d row's, of one run.
fn podman_target(found: Option<PodmanFinding>) -> (String, String) {
    match found {
        Some(p) => (
            format!(
                "CDI {} ms over hooks.d (CDI {} ms, hooks.d {} ms over runc under Podman)",
                signed_ms(p.cdi - p.hooks),
                signed_ms(p.cdi - p.plain),
                signed_ms(p.hooks - p.plain)
            ),
            yes_no(p.cdi - p.hooks <= TARGET_PODMAN_CDI_MS),
        ),
        None => (
            "not measured (no --podman, or a row failed its check)".into(),
            "–".into(),
        ),
    }
}

/// The ratio of the added time with 64 GPUs to that with 1, when both were measured and
/// the one with 1 is above zero.
fn scaling_ratio(scaling: &[(u32, f64)]) -> Option<f64> {
    let added = |n: u32| scaling.iter().find(|(g, _)| *g == n).map(|(_, a)| *a);
    match (added(1), added(64)) {
        (Some(one), Some(many)) if one > 0.0 => Some(many / one),
        _ => None,
    }
}

/// The measured text and verdict of the scaling target, from (GPUs, added ms) pairs.
pub fn scaling_target(scaling: &[(u32, f64)]) -> (String, String) {
    let added = |n: u32| scaling.iter().find(|(g, _)| *g == n).map(|(_, a)| *a);
    match (added(1), added(64)) {
        (Some(one), Some(many)) => {
            let ratio = if one > 0.0 {
                format!(", {:.2} ×", many / one)
            } else {
                String::new()
            };
            (
                format!(
                    "1 GPU {} ms, 64 GPUs {} ms{ratio}",
                    signed_ms(one),
                    signed_ms(many)
                ),
                yes_no(many <= TARGET_SCALING * one.max(0.0)),
            )
        }
        _ => (
            "not measured (needs --gpus with 1 and 64)".into(),
            "–".into(),
        ),
    }
}

fn yes_no(met: bool) -> String {
    if met { "yes" } else { "**no**" }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_verdicts() {
        let (text, met) = scaling_target(&[(1, 10.0), (8, 12.0), (64, 14.0)]);
        assert_eq!(text, "1 GPU +10.00 ms, 64 GPUs +14.00 ms, 1.40 ×");
        assert_eq!(met, "yes");
        assert_eq!(scaling_target(&[(1, 10.0), (64, 16.0)]).1, "**no**");
        // Noise can make the 1-GPU figure negative: no ratio then.
        assert_eq!(scaling_target(&[(1, -0.5), (64, 1.0)]).1, "**no**");
        assert!(scaling_target(&[(8, 1.0)]).0.starts_with("not measured"));
        assert_eq!(scaling_ratio(&[(1, 2.0), (64, 3.0)]), Some(1.5));
        assert_eq!(scaling_ratio(&[(1, -0.5), (64, 3.0)]), None);
    }

    #[test]
    fn parallel_verdicts() {
        let p = |ratio| {
            parallel_target(Some(ParallelFinding {
                count: 100,
                in_flight: 16,
                ratio,
                kubernetes_ratio: 1.12,
                floor_ratio: 1.1,
                floor_undo_ratio: 1.2,
            }))
        };
        assert_eq!(
            p(1.15),
            (
                "1.15 × (100 containers, 16 in flight; Kubernetes' containers, which get no \
                 poststop hook: 1.12 ×); the floor program: 1.10 ×, with its undo (the floor \
                 of leaving no trace): 1.20 ×"
                    .into(),
                "yes".into()
            )
        );
        assert_eq!(p(1.25).1, "**no**");
        assert_eq!(parallel_target(None).1, "–");
    }

    #[test]
    fn the_podman_target_compares_cdi_with_hooks_d() {
        let found = |cdi| {
            Some(PodmanFinding {
                plain: 100.0,
                hooks: 110.0,
                cdi,
            })
        };
        let (text, met) = podman_target(found(111.5));
        assert_eq!(met, "yes");
        assert!(text.starts_with("CDI +1.50 ms over hooks.d"), "{text}");
        assert!(text.contains("CDI +11.50 ms, hooks.d +10.00 ms"), "{text}");
        assert_eq!(podman_target(found(112.5)).1, "**no**");
        assert_eq!(podman_target(found(90.0)).1, "yes");
        assert_eq!(podman_target(None).1, "–");
    }
}
