//! The one pipeline of a container start: bundle → spec → request → driver → edits.
//!
//! [`Plan::for_bundle`] runs it once, for one [`Stage`], through a [`HostProbe`]; what
//! it does not do is an effect. The runtime shim writes the plan's device nodes and hook
//! into the spec, the prestart hook sets the container up from the plan (nvc-host's
//! `setup`), and `nvc check --bundle` renders the plan, or the step it stopped at, as the
//! rows of its report. None of them runs a step of its own.
//!
//! | step | [`Stage::Runtime`] | [`Stage::Hook`] | [`Stage::Check`] | [`Stage::Attach`] |
//! | --- | --- | --- | --- | --- |
//! | read and view the spec | yes | yes | yes | yes |
//! | refuse a linked `/dev` (any container) | yes | | yes | yes |
//! | the request (policy, environment, annotations) | yes | yes | yes | given (`--gpus`) |
//! | refuse a rootfs that is the host's `/` (GPU containers) | yes | (nvc-host, by fd) | yes | yes (and nvc-host) |
//! | refuse a mount namespace not the container's own (GPU containers) | yes | yes | yes | yes |
//! | discover the driver | devices | all | all | all |
//! | … of the devices: MIG, IMEX | those the request uses | those the request uses | all | those the request uses |
//! | … the MIG devices' UUIDs, of NVML | for a `MIG-<uuid>` | for a `MIG-<uuid>` | all | for a `MIG-<uuid>` |
//! | … the nodes the spec has | from the host | from the spec | from the host | from the host |
//! | select the GPUs, edits | default layout | default layout | the image's layout | default layout |
//! | the prestart hook entry, and that it exists | yes | | yes | |
//! | the requirements (`NVIDIA_REQUIRE_*`) | | yes | yes | |

pub mod attach;
mod handed;

pub use handed::{Handed, HandedError, HandedGpus, DEVICE_MOUNT_ARG, GPUS_ARG};

use std::path::{Path, PathBuf};

use nvc_config::Config;
use serde_json::Value;

use crate::discover::driver_root::resolve_in_root;
use crate::discover::{
    self, DeviceNeeds, DiscoverError, Driver, DriverRoots, FilesCache, Reading, Scope,
};
use crate::edits::{self, ContainerEdits, ContainerLayout, EditsError};
use crate::health;
use crate::oci::namespace::{self, NamespaceError};
use crate::oci::rootfs::{self, RootfsError};
use crate::oci::spec::{self, HookEntry, SpecError, SpecView};
use crate::oci::{request_policy, PolicyError};
use crate::probe::{FileKind, HostProbe};
use crate::request::{Request, RequestError};
use crate::require::Unmet;

/// The hook's whole environment: a fixed PATH, nothing from the container.
pub const HOOK_PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Who runs the plan, which decides its steps (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `nvc-runtime create`: the spec gets device nodes and the hook.
    Runtime,
    /// `nvc-hook prestart`: the container gets the driver's files.
    Hook,
    /// `nvc check --bundle`: both, without acting.
    Check,
    /// `nvc attach` and `nvc detach`: a running container gets (or loses) the GPUs the
    /// command names ([`attach::for_attach`]).
    Attach,
}

/// A step of the plan, named where it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Reading the bundle's config.json.
    Spec,
    /// What the rootfs must not be.
    Rootfs,
    /// A GPU container's mount namespace, its own.
    Namespace,
    /// The request policy of the nvc config.
    Policy,
    /// The container's request.
    Request,
    /// Discovering the driver.
    Driver,
    /// Selecting the GPUs and computing the edits.
    Edits,
    /// The prestart hook.
    Hook,
    /// The request's requirements.
    Requirements,
}

impl Step {
    /// The step's name in `nvc check`'s report.
    pub fn name(self) -> &'static str {
        match self {
            Step::Spec => "spec",
            Step::Rootfs => "rootfs",
            Step::Namespace => "namespace",
            Step::Policy => "config",
            Step::Request => "request",
            Step::Driver => "driver",
            Step::Edits => "edits",
            Step::Hook => "hook",
            Step::Requirements => "requirements",
        }
    }

    /// The program whose failure the step is when the container starts: the shim's
    /// steps fail `nvc-runtime`, the requirements fail `nvc-hook`.
    pub fn program(self) -> &'static str {
        match self {
            Step::Requirements => "nvc-hook",
            _ => "nvc-runtime",
        }
    }
}

/// Why a plan stopped.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The spec could not be read.
    #[error(transparent)]
    SpecFile(SpecError),
    /// The spec does not have the shape of an OCI spec.
    #[error("invalid OCI spec {path}")]
    BadSpec {
        /// The spec file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: SpecError,
    },
    /// The rootfs is one the runtime must not be given.
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    /// A GPU container has no mount namespace of its own.
    #[error(transparent)]
    Namespace(#[from] NamespaceError),
    /// The config's `[requests]` section is invalid.
    #[error("invalid config file {path}")]
    Policy {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: PolicyError,
    },
    /// The container's `NVIDIA_*` variables (or CDI annotations) are invalid.
    #[error("invalid GPU request in the container's environment")]
    Request(#[source] RequestError),
    /// The driver could not be read.
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    /// The request cannot be met on this host.
    #[error(transparent)]
    Edits(#[from] EditsError),
    /// The configured hook is missing.
    #[error(
        "the hook {path} is not an executable file: install nvc-hook there or set [hook] path \
         in {config}"
    )]
    Hook {
        /// The configured hook path.
        path: PathBuf,
        /// The config file.
        config: PathBuf,
    },
    /// A requirement does not hold.
    #[error(transparent)]
    Requirement(#[from] Unmet),
    /// The request names a GPU the health record reports broken.
    #[error(transparent)]
    Unhealthy(#[from] health::UnhealthyGpu),
}

impl PlanError {
    /// The step that failed.
    pub fn step(&self) -> Step {
        match self {
            PlanError::SpecFile(_) | PlanError::BadSpec { .. } => Step::Spec,
            PlanError::Rootfs(_) => Step::Rootfs,
            PlanError::Namespace(_) => Step::Namespace,
            PlanError::Policy { .. } => Step::Policy,
            PlanError::Request(_) => Step::Request,
            PlanError::Discover(_) => Step::Driver,
            PlanError::Edits(_) | PlanError::Unhealthy(_) => Step::Edits,
            PlanError::Hook { .. } => Step::Hook,
            PlanError::Requirement(_) => Step::Requirements,
        }
    }
}

/// Where the nvc config came from: the hook entry passes it on.
#[derive(Debug, Clone, Copy)]
pub struct ConfigSource<'a> {
    /// The config file read (or the default path, when none was there). Absolute when
    /// `from_env`: runc does not promise the hook's working directory.
    pub path: &'a Path,
    /// Whether it is another file than `/etc/nvc/config.toml` (`NVC_CONFIG` named it, or
    /// it is the install's own beside the binaries); the hook is then told the same file.
    pub from_env: bool,
}

/// The prestart hook entry for `config`.
pub fn hook_entry(config: &Config, source: &ConfigSource) -> HookEntry {
    let mut env = vec![HOOK_PATH_ENV.to_string()];
    if source.from_env {
        env.push(format!(
            "{}={}",
            nvc_config::CONFIG_ENV,
            source.path.display()
        ));
    }
    HookEntry {
        path: config.hook.path.clone(),
        args: vec!["nvc-hook".into(), "prestart".into()],
        env,
        // runc kills a hook that outlives this; the hook's own deadline (`timeout`)
        // comes first, so the kill only ends a hook that deadline did not.
        timeout: Some(config.hook.runtime_timeout()),
        // Per container: the plan sets it from the spec (`leaves_no_trace`).
        poststop: true,
    }
}

/// Whether a record of what nvc makes in the rootfs of the container whose spec is `spec`
/// (viewed as `view`) is kept on the host: only where its end runs nvc's poststop hook,
/// which reads it. The one decision, for the prestart hook and `nvc attach` alike: the
/// runtime put the poststop hook there when [`leaves_no_trace`] held (Docker's `--gpus`
/// and a hooks.d file without the poststop stage run none).
pub fn keeps_record(config: &Config, view: &SpecView, spec: &Value) -> bool {
    leaves_no_trace(config, view) && spec::has_undo_hook(spec, &config.hook.path)
}

/// [`keeps_record`] for the prestart hook, which also keeps it for Podman's containers
/// ([`spec::from_podman`]): Podman runs nvc's hooks.d poststop stage itself, out of the
/// runtime's spec. A hooks.d file without that stage leaves the record until the next
/// container on the same rootfs sweeps it.
pub fn keeps_record_at_prestart(config: &Config, view: &SpecView, spec: &Value) -> bool {
    leaves_no_trace(config, view)
        && (spec::has_undo_hook(spec, &config.hook.path) || spec::from_podman(spec))
}

/// Whether what nvc makes in the rootfs of the container `view` describes is taken away
/// when it ends (`hook.leave-no-trace`), by its poststop hook.
pub fn leaves_no_trace(config: &Config, view: &SpecView) -> bool {
    match config.hook.leave_no_trace {
        nvc_config::NoTrace::Always => true,
        nvc_config::NoTrace::OutsideKubernetes => !view.from_kubernetes(),
        nvc_config::NoTrace::Never => false,
    }
}

/// What a container gets, as far as the plan's stage goes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The bundle's config.json.
    pub spec_path: PathBuf,
    /// The spec, as read.
    pub spec: Value,
    /// What nvc reads of it.
    pub view: SpecView,
    /// What the container asks for.
    pub request: Request,
    /// The GPU part; `None` when the container asks for no GPU support (it is then left
    /// untouched).
    pub gpu: Option<GpuPlan>,
}

/// The GPU part of a plan.
#[derive(Debug, Clone)]
pub struct GpuPlan {
    /// The driver (for [`Stage::Runtime`], its devices only).
    pub driver: Driver,
    /// The library folders the edits use.
    pub layout: ContainerLayout,
    /// The edits.
    pub edits: ContainerEdits,
    /// The prestart hook entry ([`Stage::Runtime`] and [`Stage::Check`]).
    pub hook: Option<HookPlan>,
    /// The spec's device mounts are to be removed ([`Stage::Runtime`]): the request came
    /// from them and the hook entry hands them on in its arguments.
    pub drop_device_mounts: bool,
    /// Whether the requirements were checked (false: none, disabled, or not this stage).
    pub requirements_checked: bool,
    /// The nodes of the GPUs selected alone (`/dev/nvidiaN`), without the nodes every
    /// GPU shares.
    pub gpu_nodes: Vec<crate::discover::DeviceNode>,
    /// Whether a MIG device was selected.
    pub names_mig: bool,
}

/// The prestart hook of a plan.
#[derive(Debug, Clone)]
pub struct HookPlan {
    /// The entry the spec gets.
    pub entry: HookEntry,
    /// The spec already has a hook that does the job: none is added.
    pub in_spec: bool,
}

/// How far a plan got before it stopped: what `nvc check` shows of the steps that
/// passed.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The spec's view, once read.
    pub view: Option<SpecView>,
    /// The request, once read.
    pub request: Option<Request>,
    /// The driver, once discovered.
    pub driver: Option<Driver>,
    /// The edits, once computed.
    pub edits: Option<ContainerEdits>,
    /// The layout of the edits.
    pub layout: Option<ContainerLayout>,
    /// The hook, once checked.
    pub hook: Option<HookPlan>,
}

/// A plan that stopped at a step.
#[derive(Debug)]
pub struct Stopped {
    /// Why.
    pub error: PlanError,
    /// What was done before.
    pub progress: Box<Progress>,
}

impl From<Stopped> for PlanError {
    fn from(s: Stopped) -> PlanError {
        s.error
    }
}

impl Plan {
    /// Runs the pipeline for the bundle at `bundle` under `config` (read from
    /// `source`), reading the host and the bundle through `probe`.
    ///
    /// `handed`: what the runtime shim handed the hook in its arguments ([`Handed`]): the
    /// device mounts it removed from the spec, read as if the spec had them, and the
    /// GPUs it read, taken instead of reading them again when they are fresh.
    pub fn for_bundle(
        bundle: &Path,
        config: &Config,
        source: &ConfigSource,
        probe: &dyn HostProbe,
        stage: Stage,
        handed: &Handed,
    ) -> Result<Plan, Stopped> {
        Plan::for_bundle_cached(bundle, config, source, probe, stage, handed, None)
    }

    /// [`Plan::for_bundle`], the driver's files taken from (and given to) `cache` when
    /// one is given ([`discover::discover_cached`]).
    pub fn for_bundle_cached(
        bundle: &Path,
        config: &Config,
        source: &ConfigSource,
        probe: &dyn HostProbe,
        stage: Stage,
        handed: &Handed,
        cache: Option<&dyn FilesCache>,
    ) -> Result<Plan, Stopped> {
        let inputs = Inputs {
            bundle,
            config,
            source,
            probe,
            stage,
            handed,
            cache,
            gpus: None,
        };
        plan_of(&inputs)
    }
}

/// [`plan`], with what it had learnt when it stopped.
fn plan_of(inputs: &Inputs<'_>) -> Result<Plan, Stopped> {
    let mut progress = Progress::default();
    match plan(inputs, &mut progress) {
        Ok(plan) => Ok(plan),
        Err(error) => Err(Stopped {
            error,
            progress: Box::new(progress),
        }),
    }
}

/// The bundle's `config.json`: its path, the spec, and the view of it nvc works from.
pub(crate) fn read_bundle_spec(
    probe: &dyn HostProbe,
    bundle: &Path,
) -> Result<(PathBuf, Value, spec::SpecView), PlanError> {
    let spec_path = bundle.join("config.json");
    let spec = spec::read_spec(probe, &spec_path).map_err(PlanError::SpecFile)?;
    let view = spec::view(&spec, bundle).map_err(|source| PlanError::BadSpec {
        path: spec_path.clone(),
        source,
    })?;
    Ok((spec_path, spec, view))
}

/// What [`plan`] runs on.
struct Inputs<'a> {
    bundle: &'a Path,
    config: &'a Config,
    source: &'a ConfigSource<'a>,
    probe: &'a dyn HostProbe,
    stage: Stage,
    handed: &'a Handed,
    cache: Option<&'a dyn FilesCache>,
    /// The GPUs the caller names, as `NVIDIA_VISIBLE_DEVICES` takes them
    /// ([`Stage::Attach`]): the request instead of the container's.
    gpus: Option<&'a str>,
}

fn plan(inputs: &Inputs<'_>, progress: &mut Progress) -> Result<Plan, PlanError> {
    let Inputs {
        bundle,
        config,
        source,
        probe,
        stage,
        handed,
        cache,
        gpus,
    } = *inputs;
    let (spec_path, spec, view) = read_bundle_spec(probe, bundle)?;
    progress.view = Some(view.clone());
    if stage != Stage::Hook {
        rootfs::refuse_linked_dev(probe, &view.rootfs)?;
    }
    let policy = request_policy(config, view.privileged).map_err(|e| PlanError::Policy {
        path: source.path.to_path_buf(),
        source: e,
    })?;
    // The device mounts, the environment, or the `cdi.k8s.io/` annotations naming
    // `nvidia.com/gpu` devices.
    let mut device_mounts = view.device_mounts.clone();
    for name in &handed.device_mounts {
        if !device_mounts.contains(name) {
            device_mounts.push(name.clone());
        }
    }
    let request = match gpus {
        Some(gpus) => attach::request(gpus, &view, config, source.path)?,
        None => Request::from_container(
            view.env.iter().map(String::as_str),
            &view.annotations,
            &device_mounts,
            &policy,
        )
        .map_err(PlanError::Request)?,
    };
    progress.request = Some(request.clone());
    if !request.wants_gpu_support() {
        return Ok(Plan {
            spec_path,
            spec,
            view,
            request,
            gpu: None,
        });
    }
    if stage != Stage::Hook {
        rootfs::refuse_host_root(probe, &view.rootfs, &spec_path)?;
    }
    // Before the driver is read: the hook would otherwise refuse only once the container
    // exists, and for a reason that hides this one (its process in the hook's namespace).
    namespace::refuse_shared_mount_namespace(&view.mount_namespace, &spec_path)?;
    let scope = match stage {
        // Only the GPUs and their nodes: the files are the hook's business.
        Stage::Runtime => Scope::Devices,
        Stage::Hook | Stage::Check | Stage::Attach => Scope::Full,
    };
    // A start reads only the devices its request can use; the hook takes the nodes the
    // spec has from the spec (the shim put them there, and the runtime made them), as
    // it only binds the nodes the spec lacks, and the GPUs the shim read, when it
    // handed them on. `nvc check` reads everything, to show it.
    let roots = DriverRoots::from_config(&config.driver);
    let handed_gpus = match stage {
        Stage::Hook => handed
            .gpus
            .as_ref()
            .and_then(|g| g.fresh(&roots.nvidia_proc())),
        Stage::Runtime | Stage::Check | Stage::Attach => None,
    };
    let reading = Reading {
        scope,
        cache,
        needs: match stage {
            Stage::Runtime | Stage::Hook | Stage::Attach => DeviceNeeds::of(&request),
            Stage::Check => DeviceNeeds::ALL,
        },
        in_spec: match stage {
            Stage::Hook => &view.devices,
            Stage::Runtime | Stage::Check | Stage::Attach => &[],
        },
        gpus: handed_gpus.as_ref(),
    };
    let driver = discover::discover_with(&roots, probe, &reading)?;
    progress.driver = Some(driver.clone());
    let layout = match stage {
        // The hook learns the image's folders inside the container (nvc-host relocates
        // the edits there); the spec gets no library.
        Stage::Runtime | Stage::Hook | Stage::Attach => ContainerLayout::default(),
        Stage::Check => image_layout(probe, &view.rootfs, &driver),
    };
    // The GPUs are selected once, for the edits and the requirements alike.
    let named_by = match stage {
        Stage::Attach => attach::GPUS_OPTION,
        _ => crate::request::VISIBLE_DEVICES,
    };
    let mut selected = edits::select(&driver, &request.devices, named_by)?;
    if config.requests.health_check {
        screen_health(config, probe, &driver, &request, &mut selected, named_by)?;
    }
    let edits = edits::build(&driver, &request, &selected, &layout)?;
    progress.edits = Some(edits.clone());
    progress.layout = Some(layout.clone());
    // The runtime takes the mounts out of the container and hands them to the hook it
    // adds; a hook already in the spec (Docker's `--gpus`) reads them where they are.
    let mut drop_device_mounts = false;
    let hook = match stage {
        Stage::Hook | Stage::Attach => None,
        Stage::Runtime | Stage::Check => {
            let mut entry = hook_entry(config, source);
            entry.poststop = leaves_no_trace(config, &view);
            let in_spec =
                spec::has_driver_hook(&spec, &entry).map_err(|source| PlanError::BadSpec {
                    path: spec_path.clone(),
                    source,
                })?;
            // runc runs the hook by absolute path; anything else fails late and obscurely.
            if !in_spec && !is_executable(probe, &entry.path) {
                return Err(PlanError::Hook {
                    path: entry.path,
                    config: source.path.to_path_buf(),
                });
            }
            if stage == Stage::Runtime
                && !in_spec
                && request.from_device_mounts
                && !view.device_mounts.is_empty()
            {
                drop_device_mounts = true;
                for name in &view.device_mounts {
                    entry.args.push(DEVICE_MOUNT_ARG.to_string());
                    entry.args.push(name.clone());
                }
            }
            // The GPUs just read, so that the hook reads them only when this list is
            // stale. Not MIG instances: a request for one has the hook read them all.
            if stage == Stage::Runtime && !in_spec && !reading.needs.mig_devices {
                if let Some(gpus) = HandedGpus::of(&driver) {
                    entry.args.push(GPUS_ARG.to_string());
                    entry.args.push(gpus.to_arg());
                }
            }
            let hook = HookPlan { entry, in_spec };
            progress.hook = Some(hook.clone());
            Some(hook)
        }
    };
    let gpu_nodes = selected.gpus.iter().map(|g| g.node.clone()).collect();
    let names_mig = !selected.mig.is_empty();
    let requirements_checked = matches!(stage, Stage::Hook | Stage::Check)
        && request.check_requirements
        && !request.requirements.is_empty();
    if requirements_checked {
        let loaded = edits::check_selected(&driver, probe, &request, &selected)?;
        // The next start answers `cuda` constraints without loading libcuda.
        if let (Some(cache), Some(version), true) = (cache, loaded, driver.cacheable) {
            cache.store(&driver.roots, &driver.files(Some(version)));
        }
    }
    Ok(Plan {
        spec_path,
        spec,
        view,
        request,
        gpu: Some(GpuPlan {
            driver,
            layout,
            edits,
            hook,
            drop_device_mounts,
            requirements_checked,
            gpu_nodes,
            names_mig,
        }),
    })
}

/// Takes the GPUs the health record reports broken out of `selected` (`all`), or
/// refuses a request that names one; a record that is not current blocks nothing, and
/// says why in one log line.
fn screen_health(
    config: &Config,
    probe: &dyn HostProbe,
    driver: &Driver,
    request: &Request,
    selected: &mut edits::Selected<'_>,
    named_by: &'static str,
) -> Result<(), PlanError> {
    if selected.gpus.is_empty() && selected.mig.is_empty() {
        return Ok(());
    }
    let inputs = probe.health_inputs(config);
    let assessment = health::assess(&inputs, &driver.version, config.requests.health_max_age);
    let record = match assessment {
        health::Assessment::Current { record, .. } => record,
        health::Assessment::Ignored { reason, .. } => {
            log::info!("GPU health not checked: {reason}");
            return Ok(());
        }
    };
    let left_out = health::screen(selected, &request.devices, &record, named_by)?;
    for gpu in left_out {
        log::warn!("{named_by}=all: left out {gpu} (reset it, then run `nvc health update`)");
    }
    Ok(())
}

/// Whether `path` is an absolute path to an executable file.
fn is_executable(probe: &dyn HostProbe, path: &Path) -> bool {
    path.is_absolute()
        && probe
            .stat(path)
            .is_ok_and(|s| s.kind == FileKind::File && s.mode & 0o111 != 0)
}

/// The library folders of the image ([`ContainerLayout::of_image`]), its folders
/// resolved inside the rootfs, links and all.
pub fn image_layout(probe: &dyn HostProbe, rootfs: &Path, driver: &Driver) -> ContainerLayout {
    let arch = driver.arch().unwrap_or(crate::elf::Arch::X86_64);
    ContainerLayout::of_image(arch, |p| {
        resolve_in_root(probe, rootfs, p)
            .ok()
            .and_then(|h| probe.stat(&h).ok())
            .is_some_and(|s| s.kind == FileKind::Dir)
    })
}

#[cfg(test)]
mod tests;
