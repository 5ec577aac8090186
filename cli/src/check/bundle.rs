//! `nvc check --bundle DIR`: what the container of one OCI bundle would receive, and
//! why, following the steps nvc-runtime and nvc-hook take, in their order; the first
//! that fails is the error the container would fail with.

use std::path::{Path, PathBuf};

use libnvc::discover::{self, rootfs, DriverRoots};
use libnvc::edits::{self, ContainerEdits, ContainerLayout};
use libnvc::oci::spec::{self, HookEntry};
use libnvc::report::error_chain;
use libnvc::request::{
    ChannelSelection, DeviceId, DeviceSelection, Request, CDI_ANNOTATION_PREFIX,
    DRIVER_CAPABILITIES, VISIBLE_DEVICES,
};
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

/// The library folders of the image: Debian's multiarch folder, else `/usr/lib64`, as
/// the hook picks them (resolved inside the rootfs, links and all).
fn layout_of(rootfs_dir: &Path) -> ContainerLayout {
    let is_dir = |p: &Path| {
        rootfs::resolve_in_root(&nvc_host::probe::RealHost, rootfs_dir, p)
            .ok()
            .is_some_and(|h| h.is_dir())
    };
    let debian = ContainerLayout::debian();
    let rh = ContainerLayout::lib64();
    if !is_dir(&debian.lib64) && is_dir(&rh.lib64) {
        rh
    } else {
        debian
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

/// Follows the shim's and the hook's steps for the bundle at `dir`.
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

    let spec_path = dir.join("config.json");
    let fix_spec = "give the bundle a valid OCI config.json (`runc spec` writes one)";
    let spec = match spec::read_spec(&spec_path) {
        Ok(s) => s,
        Err(e) => {
            let e = error_chain(&e);
            return report.fail(Row::fail("spec", e.clone(), fix_spec), "nvc-runtime", e);
        }
    };
    let view = match spec::view(&spec, dir) {
        Ok(v) => v,
        Err(e) => {
            let e = format!("invalid OCI spec {}: {}", show(&spec_path), error_chain(&e));
            return report.fail(Row::fail("spec", e.clone(), fix_spec), "nvc-runtime", e);
        }
    };
    // What nvc-runtime refuses before anything else, for any container.
    if let Err(e) = libnvc::oci::rootfs::refuse_linked_dev(&nvc_host::probe::RealHost, &view.rootfs)
    {
        let e = error_chain(&e);
        let fix = "remove the link from the image: /dev is a tmpfs the runtime makes";
        return report.fail(Row::fail("rootfs", e.clone(), fix), "nvc-runtime", e);
    }
    report.steps.push(Row::ok(
        "spec",
        format!(
            "{}: rootfs {}, {}",
            show(&spec_path),
            show(&view.rootfs),
            if view.privileged {
                "privileged (CAP_SYS_ADMIN)"
            } else {
                "unprivileged"
            }
        ),
    ));

    // The config check above has already refused a policy that does not parse.
    let Ok(policy) = libnvc::oci::request_policy(&config, view.privileged) else {
        return report;
    };
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
        .collect();
    let request = match Request::from_container(
        view.env.iter().map(String::as_str),
        &view.annotations,
        &policy,
    ) {
        Ok(r) => r,
        Err(e) => {
            let e = format!(
                "invalid GPU request in the container's environment: {}",
                error_chain(&e)
            );
            return report.fail(
                Row::fail(
                    "request",
                    e.clone(),
                    "fix the container's NVIDIA_* variables (see README: What a container asks for)",
                ),
                "nvc-runtime",
                e,
            );
        }
    };
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
    report.steps.push(Row::ok("request", detail));
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
    if let Err(e) =
        libnvc::oci::rootfs::refuse_host_root(&nvc_host::probe::RealHost, &view.rootfs, &spec_path)
    {
        let e = error_chain(&e);
        let fix = "give the bundle a root.path of its own";
        return report.fail(Row::fail("rootfs", e.clone(), fix), "nvc-runtime", e);
    }
    report.gpu_support = true;

    let driver = match discover::discover(
        &DriverRoots::from_config(&config.driver),
        &nvc_host::probe::RealHost,
    ) {
        Ok(d) => d,
        Err(e) => {
            let e = error_chain(&e);
            return report.fail(
                Row::fail("driver", e.clone(), "see `nvc check` without --bundle"),
                "nvc-runtime",
                e,
            );
        }
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

    let layout = layout_of(&view.rootfs);
    let edits = match edits::compute(&driver, &request, &layout) {
        Ok(e) => e,
        Err(e) => {
            let e = error_chain(&e);
            return report.fail(
                Row::fail(
                    "edits",
                    e.clone(),
                    "ask only for GPUs this host has (see `nvc info`)",
                ),
                "nvc-runtime",
                e,
            );
        }
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
    report.edits = Some(edits);

    let entry = HookEntry {
        path: config.hook.path.clone(),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env: Vec::new(),
        timeout: Some(config.hook.runtime_timeout()),
    };
    if spec::has_driver_hook(&spec, &entry).unwrap_or(false) {
        report
            .steps
            .push(Row::ok("hook", "the spec already has a driver hook"));
    } else {
        let row = host::hook(&config, probe);
        if row.status == Status::Fail {
            let e = format!(
                "the hook {} is not an executable file: install nvc-hook there or set [hook] path in {}",
                show(&config.hook.path),
                show(&probe.config_path)
            );
            return report.fail(row, "nvc-runtime", e);
        }
        report.steps.push(row);
    }

    if !request.check_requirements {
        report
            .steps
            .push(Row::ok("requirements", "not checked (disabled)"));
    } else if request.requirements.is_empty() {
        report.steps.push(Row::ok("requirements", "none"));
    } else {
        match edits::check_requirements(&driver, &nvc_host::probe::RealHost, &request) {
            Ok(()) => {
                let reqs: Vec<String> = request
                    .requirements
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                report
                    .steps
                    .push(Row::ok("requirements", format!("met: {}", reqs.join(" "))));
            }
            Err(e) => {
                let e = error_chain(&e);
                return report.fail(
                    Row::fail(
                        "requirements",
                        e.clone(),
                        "run it on a host that meets them, or set NVIDIA_DISABLE_REQUIRE=1",
                    ),
                    "nvc-hook",
                    e,
                );
            }
        }
    }
    report.would_start = true;
    report
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
