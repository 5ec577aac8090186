//! `nvc check --bundle DIR`: what the container of one OCI bundle would receive, and
//! why. It renders the one plan nvc-runtime and nvc-hook follow (`libnvc::plan`, stage
//! `Check`), step by step; the first that fails is the error the container would fail
//! with, as the program that fails prints it.

use std::path::{Path, PathBuf};

use libnvc::discover::Driver;
use libnvc::edits::{ContainerEdits, ContainerLayout};
use libnvc::oci::spec::SpecView;
use libnvc::plan::{ConfigSource, Handed, HookPlan, Plan, Stage, Step, Stopped};
use libnvc::report::error_chain;
use libnvc::request::{
    ChannelSelection, DeviceId, DeviceSelection, Request, CDI_ANNOTATION_PREFIX,
    DRIVER_CAPABILITIES, VISIBLE_DEVICES,
};
use nvc_host::probe::RealHost;
use serde::Serialize;

use super::{host, render_rows, render_table, show, Probe, Row, Status};

/// What `--bundle` found.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleReport {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// Whether the container would start.
    pub would_start: bool,
    /// Whether it asks for GPU support at all.
    pub gpu_support: bool,
    /// The steps taken, one row each, up to the first that fails.
    pub steps: Vec<Row>,
    /// The request read from the container's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestSummary>,
    /// What the container would receive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edits: Option<ContainerEdits>,
    /// The error the container would fail with, as the program that fails prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A request, in words.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    /// `CAP_SYS_ADMIN` in the bounding set.
    pub privileged: bool,
    /// The container's `NVIDIA_*` and `CUDA_VERSION` variables and its `cdi.k8s.io/`
    /// annotations, as written.
    pub variables: Vec<String>,
    /// The GPUs asked for.
    pub devices: String,
    /// The driver capabilities.
    pub capabilities: String,
    /// The requirements, normalised.
    pub requirements: Vec<String>,
    /// Whether the requirements are checked.
    pub check_requirements: bool,
    /// A legacy CUDA image (`CUDA_VERSION` without `NVIDIA_REQUIRE_CUDA`).
    pub legacy_image: bool,
    /// `NVIDIA_MIG_CONFIG_DEVICES`.
    pub mig_config: String,
    /// `NVIDIA_MIG_MONITOR_DEVICES`.
    pub mig_monitor: String,
    /// `NVIDIA_IMEX_CHANNELS`.
    pub imex_channels: String,
}

fn selection(s: &DeviceSelection) -> String {
    match s {
        DeviceSelection::NotRequested => "not requested".into(),
        DeviceSelection::None => "none (the driver's files, no GPU)".into(),
        DeviceSelection::All => "all GPUs".into(),
        DeviceSelection::List(ids) => ids
            .iter()
            .map(|id| match id {
                DeviceId::Index(i) => format!("GPU {i}"),
                DeviceId::BusId(b) => format!("the GPU at {b}"),
                DeviceId::MigIndex { gpu, mig } => format!("MIG device {gpu}:{mig}"),
                DeviceId::GpuUuid(u) | DeviceId::MigUuid(u) => u.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn channels(c: &ChannelSelection) -> String {
    match c {
        ChannelSelection::None => "none".into(),
        ChannelSelection::All => "all".into(),
        ChannelSelection::List(l) => l
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The last value of `key` in `env`, as the request reader takes it.
fn env_value<'a>(env: &'a [String], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .filter_map(|e| e.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Why a container does not ask for GPU support; `annotated`: it has `cdi.k8s.io/`
/// annotations.
fn why_not_requested(
    env: &[String],
    annotated: bool,
    privileged: bool,
    accept_unprivileged: bool,
) -> String {
    let ignored = !privileged && !accept_unprivileged;
    let why = why_env_asks_for_nothing(env, ignored);
    let void =
        env_value(env, VISIBLE_DEVICES).is_some_and(|v| v.trim().eq_ignore_ascii_case("void"));
    if annotated && ignored && !void {
        format!(
            "{why}; its {CDI_ANNOTATION_PREFIX} annotations are ignored too: the container is unprivileged and requests.accept-envvar-when-unprivileged is false"
        )
    } else {
        why
    }
}

/// Why the container's variables ask for no GPU; `ignored`: the policy ignores them.
fn why_env_asks_for_nothing(env: &[String], ignored: bool) -> String {
    match env_value(env, VISIBLE_DEVICES) {
        None if env_value(env, "CUDA_VERSION").is_some_and(|v| !v.is_empty()) && ignored => format!(
            "a legacy CUDA image implies {VISIBLE_DEVICES}=all, but the container is unprivileged and requests.accept-envvar-when-unprivileged is false"
        ),
        None => format!("{VISIBLE_DEVICES} is unset"),
        Some("") => format!("{VISIBLE_DEVICES} is empty"),
        Some(v) if v.trim().eq_ignore_ascii_case("void") => format!("{VISIBLE_DEVICES}=void"),
        Some(v) if ignored => format!(
            "{VISIBLE_DEVICES}={v} is ignored: the container is unprivileged and requests.accept-envvar-when-unprivileged is false"
        ),
        Some(v) => format!("{VISIBLE_DEVICES}={v} asks for nothing"),
    }
}

impl BundleReport {
    fn new(bundle: &Path) -> Self {
        BundleReport {
            bundle: bundle.to_path_buf(),
            would_start: false,
            gpu_support: false,
            steps: Vec::new(),
            request: None,
            edits: None,
            error: None,
        }
    }

    /// Records a failed step and the error the container would fail with.
    fn fail(mut self, row: Row, program: &str, error: String) -> Self {
        self.steps.push(row);
        self.error = Some(format!("{program}: {error}"));
        self
    }
}

/// What the plan had done when it finished or stopped.
struct Seen {
    view: Option<SpecView>,
    request: Option<Request>,
    driver: Option<Driver>,
    edits: Option<ContainerEdits>,
    layout: Option<ContainerLayout>,
    hook: Option<HookPlan>,
    requirements_checked: bool,
}

impl Seen {
    fn of(outcome: &Result<Plan, Stopped>) -> Seen {
        match outcome {
            Ok(plan) => Seen {
                view: Some(plan.view.clone()),
                request: Some(plan.request.clone()),
                driver: plan.gpu.as_ref().map(|g| g.driver.clone()),
                edits: plan.gpu.as_ref().map(|g| g.edits.clone()),
                layout: plan.gpu.as_ref().map(|g| g.layout.clone()),
                hook: plan.gpu.as_ref().and_then(|g| g.hook.clone()),
                requirements_checked: plan.gpu.as_ref().is_some_and(|g| g.requirements_checked),
            },
            Err(stopped) => {
                let p = &stopped.progress;
                Seen {
                    view: p.view.clone(),
                    request: p.request.clone(),
                    driver: p.driver.clone(),
                    edits: p.edits.clone(),
                    layout: p.layout.clone(),
                    hook: p.hook.clone(),
                    requirements_checked: false,
                }
            }
        }
    }
}

/// What to do about a step that failed.
fn fix_for(step: Step) -> &'static str {
    match step {
        Step::Spec => "give the bundle a valid OCI config.json (`runc spec` writes one)",
        Step::Rootfs => "",
        Step::Namespace => {
            "give the container a mount namespace of its own: {\"type\": \"mount\"}, with no path, in linux.namespaces"
        }
        Step::Policy => "fix [requests] in the nvc config",
        Step::Request => {
            "fix the container's NVIDIA_* variables (docs/configuration.md: What a container asks for)"
        }
        Step::Driver => "see `nvc check` without --bundle",
        Step::Edits => "ask only for GPUs this host has (see `nvc info`)",
        Step::Hook => "install nvc-hook there or set [hook] path in the nvc config",
        Step::Requirements => "run it on a host that meets them, or set NVIDIA_DISABLE_REQUIRE=1",
    }
}

/// Renders the plan `nvc-runtime` and `nvc-hook` follow for the bundle at `dir`
/// (`libnvc::plan`, stage `Check`): a row per step, up to the first that fails.
pub fn explain(dir: &Path, probe: &Probe) -> BundleReport {
    let mut report = BundleReport::new(dir);
    let (row, config) = host::config(&probe.config_path);
    let Some(config) = config else {
        let e = row.detail.clone();
        return report.fail(row, "nvc-runtime", e);
    };
    report.steps.push(row);
    nvc_host::logging::init(&config.log, "nvc");

    let row = host::runtime(&config, probe);
    if row.status == Status::Fail {
        let e = format!(
            "no low-level runtime found: {}; set [runtime] runtimes in {}",
            row.detail,
            show(&probe.config_path)
        );
        return report.fail(row, "nvc-runtime", e);
    }
    report.steps.push(row);

    let source = ConfigSource {
        path: &probe.config_path,
        from_env: false,
    };
    let outcome = Plan::for_bundle(
        dir,
        &config,
        &source,
        &RealHost,
        Stage::Check,
        &Handed::default(),
    );
    let seen = Seen::of(&outcome);
    let stopped = outcome.as_ref().err();
    let fail = |report: BundleReport, stopped: &Stopped, row: Option<Row>| {
        let step = stopped.error.step();
        let e = error_chain(&stopped.error);
        let fix = match (step, seen.request.is_some()) {
            (Step::Rootfs, false) => {
                "remove the link from the image: /dev is a tmpfs the runtime makes"
            }
            (Step::Rootfs, true) => "give the bundle a root.path of its own",
            (step, _) => fix_for(step),
        };
        let row = row.unwrap_or_else(|| Row::fail(step.name(), e.clone(), fix));
        report.fail(row, step.program(), e)
    };

    // The spec, and what nvc-runtime refuses of any rootfs.
    let Some(view) = &seen.view else {
        return match stopped {
            Some(s) => fail(report, s, None),
            None => report,
        };
    };
    let spec_path = dir.join("config.json");
    let Some(request) = &seen.request else {
        return match stopped {
            Some(s) if s.error.step() == Step::Rootfs => fail(report, s, None),
            Some(s) => {
                report.steps.push(spec_row(&spec_path, view));
                // The config check above has already refused a policy that does not parse.
                if s.error.step() == Step::Policy {
                    report
                } else {
                    fail(report, s, None)
                }
            }
            None => report,
        };
    };
    report.steps.push(spec_row(&spec_path, view));
    let (row, summary) = request_row(view, request);
    report.steps.push(row);
    report.request = Some(summary);

    if !request.wants_gpu_support() {
        let annotated = view
            .annotations
            .keys()
            .any(|k| k.starts_with(CDI_ANNOTATION_PREFIX));
        let why = why_not_requested(
            &view.env,
            annotated,
            view.privileged,
            config.requests.accept_envvar_when_unprivileged,
        );
        report.steps.push(Row::info(
            "GPU support",
            format!("not requested: {why}; nvc leaves the container untouched"),
        ));
        report.would_start = true;
        return report;
    }
    // What the shim refuses of a GPU container before it reads the driver.
    if let Some(s) = stopped.filter(|s| matches!(s.error.step(), Step::Rootfs | Step::Namespace)) {
        return fail(report, s, None);
    }
    report.gpu_support = true;

    let Some(driver) = &seen.driver else {
        return match stopped {
            Some(s) => fail(report, s, None),
            None => report,
        };
    };
    report.steps.push(Row::ok(
        "driver",
        format!(
            "{}, {} GPU{}",
            driver.version,
            driver.gpus.len(),
            if driver.gpus.len() == 1 { "" } else { "s" }
        ),
    ));

    let (Some(edits), Some(layout)) = (&seen.edits, &seen.layout) else {
        return match stopped {
            Some(s) => fail(report, s, None),
            None => report,
        };
    };
    report.steps.push(Row::ok(
        "edits",
        format!(
            "{} device nodes, {} mounts, {} links; libraries in {}",
            edits.device_nodes.len(),
            edits.mounts.len(),
            edits.symlinks.len(),
            show(&layout.lib64)
        ),
    ));
    report.edits = Some(edits.clone());

    match &seen.hook {
        Some(hook) if hook.in_spec => report
            .steps
            .push(Row::ok("hook", "the spec already has a driver hook")),
        Some(_) => report.steps.push(host::hook(&config, probe)),
        None => {
            return match stopped {
                // The hook's own check says what is wrong with the file.
                Some(s) => {
                    let row = host::hook(&config, probe);
                    fail(report, s, Some(row))
                }
                None => report,
            };
        }
    }

    if let Some(s) = stopped {
        return fail(report, s, None);
    }
    let row = if !request.check_requirements {
        Row::ok("requirements", "not checked (disabled)")
    } else if !seen.requirements_checked {
        Row::ok("requirements", "none")
    } else {
        let reqs: Vec<String> = request
            .requirements
            .iter()
            .map(ToString::to_string)
            .collect();
        Row::ok("requirements", format!("met: {}", reqs.join(" ")))
    };
    report.steps.push(row);
    report.would_start = true;
    report
}

fn spec_row(spec_path: &Path, view: &SpecView) -> Row {
    Row::ok(
        "spec",
        format!(
            "{}: rootfs {}, {}",
            show(spec_path),
            show(&view.rootfs),
            if view.privileged {
                "privileged (CAP_SYS_ADMIN)"
            } else {
                "unprivileged"
            }
        ),
    )
}

/// The request's row, and the request in words.
fn request_row(view: &SpecView, request: &Request) -> (Row, RequestSummary) {
    // What the request is read from: the variables, and the annotations that name CDI
    // devices (Kubernetes device plugins, CDI-aware engines).
    let variables: Vec<String> = view
        .env
        .iter()
        .filter(|e| e.starts_with("NVIDIA_") || e.starts_with("CUDA_VERSION="))
        .cloned()
        .chain(
            view.annotations
                .iter()
                .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX))
                .map(|(k, v)| format!("annotation {k}={v}")),
        )
        .chain(
            view.device_mounts
                .iter()
                .map(|n| format!("mount {}/{n}", libnvc::request::DEVICE_MOUNTS_ROOT)),
        )
        .collect();
    let caps_note = if env_value(&view.env, DRIVER_CAPABILITIES).is_some_and(|v| !v.is_empty()) {
        ""
    } else {
        " (the default)"
    };
    let summary = RequestSummary {
        privileged: view.privileged,
        variables: variables.clone(),
        devices: selection(&request.devices),
        capabilities: request.capabilities.to_string(),
        requirements: request
            .requirements
            .iter()
            .map(ToString::to_string)
            .collect(),
        check_requirements: request.check_requirements,
        legacy_image: request.legacy_image,
        mig_config: selection(&request.mig_config),
        mig_monitor: selection(&request.mig_monitor),
        imex_channels: channels(&request.imex_channels),
    };
    let mut detail = format!(
        "devices: {}; capabilities: {}{caps_note}",
        summary.devices, summary.capabilities
    );
    if request.legacy_image {
        detail.push_str("; a legacy CUDA image");
    }
    if request.imex_channels != ChannelSelection::None {
        detail.push_str(&format!("; IMEX channels: {}", summary.imex_channels));
    }
    if variables.is_empty() {
        detail.push_str(" (no NVIDIA_* variable nor CDI annotation)");
    } else {
        detail.push_str(&format!(" (from {})", variables.join(" ")));
    }
    (Row::ok("request", detail), summary)
}

/// The report as text: the steps, the edits like `nvc list`, the verdict.
pub fn render(report: &BundleReport) -> String {
    let mut out = format!("Bundle {}\n\n", show(&report.bundle));
    out.push_str(&render_rows(&report.steps));
    if let Some(edits) = &report.edits {
        out.push('\n');
        out.push_str(&render_table(&edits_table(edits)));
    }
    out.push('\n');
    match (&report.error, report.gpu_support) {
        (Some(e), _) => out.push_str(&format!(
            "The container would not start: {}\n",
            libnvc::report::shorten(e)
        )),
        (None, true) => out.push_str("The container would start with the GPUs above.\n"),
        (None, false) => out.push_str("The container would start, without GPU support.\n"),
    }
    out
}

fn edits_table(edits: &ContainerEdits) -> Vec<Vec<String>> {
    let mut rows = vec![vec!["KIND".to_string(), "HOST".into(), "CONTAINER".into()]];
    for n in &edits.device_nodes {
        let host = if n.on_host {
            show(&n.host_path)
        } else {
            "(not on host)".to_string()
        };
        rows.push(vec![
            "device".into(),
            host,
            format!("{} {}:{}", show(&n.path), n.major, n.minor),
        ]);
    }
    for m in &edits.mounts {
        rows.push(vec![
            format!("{:?}", m.kind).to_lowercase(),
            show(&m.host_path),
            show(&m.container_path),
        ]);
    }
    for s in &edits.symlinks {
        rows.push(vec![
            "symlink".into(),
            String::new(),
            format!("{} -> {}", show(&s.link), s.target),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reasons_for_no_gpu() {
        let cases = [
            (vec![], true, "NVIDIA_VISIBLE_DEVICES is unset"),
            (vec!["NVIDIA_VISIBLE_DEVICES="], true, "is empty"),
            (vec!["NVIDIA_VISIBLE_DEVICES=void"], true, "=void"),
            (vec!["NVIDIA_VISIBLE_DEVICES=all"], false, "is ignored"),
            (vec!["CUDA_VERSION=12.4"], false, "legacy CUDA image"),
            (
                vec!["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"],
                true,
                "=void",
            ),
        ];
        for (e, accept, want) in cases {
            let got = why_not_requested(&env(&e), false, false, accept);
            assert!(got.contains(want), "{e:?}: {got}");
            assert!(!got.contains("annotations"), "{e:?}: {got}");
        }
        // The annotations obey the same policy as the variables.
        let got = why_not_requested(&[], true, false, false);
        assert!(
            got.contains("cdi.k8s.io/ annotations are ignored too"),
            "{got}"
        );
        assert!(!why_not_requested(&[], true, true, false).contains("annotations"));
        let void = env(&["NVIDIA_VISIBLE_DEVICES=void"]);
        assert!(!why_not_requested(&void, true, false, false).contains("annotations"));
    }
}
