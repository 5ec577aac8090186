//! Which container uses which GPU (`nvc ps`, `nvc top`): NVML's processes of each GPU
//! (read on the host by `nvc_host::usage`), each mapped to its container through its
//! cgroup ([`cgroup`]), nvc's own records of the containers it set up, and the engines'
//! state ([`engines`]); with its pid inside the container (`NSpid`) and its command.
//!
//! Pure: every file is read through a [`HostProbe`]; what could not be read is said in
//! the result (`unseen`, a process's `notes`), never a failure of the whole table.

pub mod cgroup;
pub mod engines;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::probe::{HostProbe, MAX_TEXT};
use engines::Identity;

/// The most read of a `/proc/<pid>` file.
const PROC_LIMIT: usize = 64 * 1024;
/// The most read of Podman's `containers.json` (one entry per container in the storage).
const CONTAINERS_JSON_LIMIT: usize = 64 << 20;

/// A container engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Docker (dockerd).
    Docker,
    /// containerd: its CRI plugin, nerdctl, ctr.
    Containerd,
    /// CRI-O.
    #[serde(rename = "cri-o")]
    CriO,
    /// Podman.
    Podman,
}

impl Engine {
    /// Its name, as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Containerd => "containerd",
            Engine::CriO => "cri-o",
            Engine::Podman => "podman",
        }
    }
}

/// How a process uses a GPU, as NVML lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ProcessKind {
    /// A compute context (CUDA).
    #[serde(rename = "compute")]
    Compute,
    /// A graphics context.
    #[serde(rename = "graphics")]
    Graphics,
    /// Both.
    #[serde(rename = "compute+graphics")]
    ComputeGraphics,
}

impl ProcessKind {
    /// The kind of a process NVML lists as `self` and as `other`.
    pub fn and(self, other: ProcessKind) -> ProcessKind {
        if self == other {
            self
        } else {
            ProcessKind::ComputeGraphics
        }
    }

    /// Its name, as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessKind::Compute => "compute",
            ProcessKind::Graphics => "graphics",
            ProcessKind::ComputeGraphics => "compute+graphics",
        }
    }
}

/// One process NVML lists on a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlProcess {
    /// Its pid, in the host's PID namespace (the driver's).
    pub pid: u32,
    /// How it uses the GPU.
    pub kind: ProcessKind,
    /// The GPU memory it uses, in bytes, where NVML says.
    pub used_memory: Option<u64>,
    /// Its SM utilisation (percent) in NVML's latest sample, where NVML gives one.
    pub sm_util: Option<u32>,
}

/// One GPU and the processes using it: `P` is [`NvmlProcess`] as NVML lists them
/// ([`GpuReading`]), [`ProcessUsage`] once mapped to their containers ([`GpuUsage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuProcesses<P> {
    /// Its index (bus order, as nvidia-smi counts).
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its PCI bus id.
    pub bus_id: String,
    /// Its name, where known.
    pub name: Option<String>,
    /// GPU memory used, in bytes.
    pub memory_used: Option<u64>,
    /// GPU memory in all, in bytes.
    pub memory_total: Option<u64>,
    /// The processes using it.
    pub processes: Vec<P>,
    /// What NVML could not say of it.
    pub unseen: Vec<String>,
}

impl<P> Default for GpuProcesses<P> {
    fn default() -> Self {
        GpuProcesses {
            index: 0,
            uuid: String::new(),
            bus_id: String::new(),
            name: None,
            memory_used: None,
            memory_total: None,
            processes: Vec::new(),
            unseen: Vec::new(),
        }
    }
}

impl<P> GpuProcesses<P> {
    /// The same GPU with each process turned into another by `f`.
    pub fn map_processes<Q>(&self, f: impl FnMut(&P) -> Q) -> GpuProcesses<Q> {
        GpuProcesses {
            index: self.index,
            uuid: self.uuid.clone(),
            bus_id: self.bus_id.clone(),
            name: self.name.clone(),
            memory_used: self.memory_used,
            memory_total: self.memory_total,
            processes: self.processes.iter().map(f).collect(),
            unseen: self.unseen.clone(),
        }
    }
}

/// What NVML says of one GPU (and what discovery says: index, bus id).
pub type GpuReading = GpuProcesses<NvmlProcess>;

/// One GPU and its processes, each mapped to its container.
pub type GpuUsage = GpuProcesses<ProcessUsage>;

/// A container nvc set up, from its record in nvc's state folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedContainer {
    /// Its id.
    pub id: String,
    /// Its bundle.
    pub bundle: PathBuf,
}

/// Where the host's `/proc` and the engines' state are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRoots {
    /// The host's `/proc`.
    pub proc: PathBuf,
    /// Docker's data roots (`/var/lib/docker`): `containers/<id>/config.v2.json`.
    pub docker: Vec<PathBuf>,
    /// containerd's folders of its v2 tasks' bundles
    /// (`/run/containerd/io.containerd.runtime.v2.task`): `<namespace>/<id>/config.json`.
    pub containerd_tasks: Vec<PathBuf>,
    /// Podman's and CRI-O's storage folders (`/var/lib/containers/storage`,
    /// `/run/containers/storage`): `<driver>-containers/<id>/userdata/config.json`.
    pub storage: Vec<PathBuf>,
}

impl Default for UsageRoots {
    fn default() -> Self {
        UsageRoots {
            proc: PathBuf::from("/proc"),
            docker: vec![PathBuf::from("/var/lib/docker")],
            containerd_tasks: vec![Path::new("/run/containerd").join(engines::CONTAINERD_TASKS)],
            storage: vec![
                PathBuf::from("/var/lib/containers/storage"),
                PathBuf::from("/run/containers/storage"),
            ],
        }
    }
}

/// A container, as far as nvc could tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRef {
    /// Its id, from its cgroup.
    pub id: String,
    /// Its engine, where the engine's state (or its cgroup's name) says.
    pub engine: Option<Engine>,
    /// Its name.
    pub name: Option<String>,
    /// Its Kubernetes pod.
    pub pod: Option<String>,
    /// Its Kubernetes namespace, or containerd's namespace.
    pub namespace: Option<String>,
    /// Its bundle, where found.
    pub bundle: Option<PathBuf>,
    /// Whether nvc set it up (nvc has a record of it).
    pub recorded: bool,
}

/// Whose a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Owner {
    /// The host's: in no container.
    Host,
    /// A container's ([`ProcessUsage::container`]).
    Container,
    /// Unknown: its cgroup could not be read (see its notes).
    Unknown,
}

/// One process on a GPU, mapped to its container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessUsage {
    /// Its pid on the host.
    pub pid: u32,
    /// Its pid in its own PID namespace (the container's), from `NSpid`.
    pub container_pid: Option<u32>,
    /// Its command (`comm`).
    pub command: Option<String>,
    /// How it uses the GPU.
    pub kind: ProcessKind,
    /// The GPU memory it uses, in bytes.
    pub used_memory: Option<u64>,
    /// Its SM utilisation, percent; unknown where NVML gave no sample.
    pub sm_util: Option<u32>,
    /// Whose it is.
    pub owner: Owner,
    /// Its container.
    pub container: Option<ContainerRef>,
    /// What could not be seen of it.
    pub notes: Vec<String>,
}

/// Maps each GPU's processes (`gpus`, NVML's) to their containers, reading the host's
/// `/proc` and the engines' state (`roots`) through `probe`; `records` are the containers
/// nvc set up. Never fails: what it could not read is in the notes.
pub fn map(
    gpus: &[GpuReading],
    records: &[RecordedContainer],
    roots: &UsageRoots,
    probe: &dyn HostProbe,
) -> Vec<GpuUsage> {
    let mut lookup = Lookup {
        records,
        roots,
        probe,
        known: HashMap::new(),
    };
    gpus.iter()
        .map(|gpu| gpu.map_processes(|p| lookup.process(p)))
        .collect()
}

/// The pid of a process in its innermost PID namespace, from its `/proc/<pid>/status`
/// (`NSpid:\t<host pid>\t...\t<innermost>`); `None` on a kernel without `NSpid` (before
/// 4.1).
pub fn innermost_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The engines' state, read once per container.
struct Lookup<'a> {
    records: &'a [RecordedContainer],
    roots: &'a UsageRoots,
    probe: &'a dyn HostProbe,
    known: HashMap<String, Option<(ContainerRef, Vec<String>)>>,
}

impl Lookup<'_> {
    fn process(&mut self, p: &NvmlProcess) -> ProcessUsage {
        let mut usage = ProcessUsage {
            pid: p.pid,
            container_pid: None,
            command: None,
            kind: p.kind,
            used_memory: p.used_memory,
            sm_util: p.sm_util,
            owner: Owner::Unknown,
            container: None,
            notes: Vec::new(),
        };
        let dir = self.roots.proc.join(p.pid.to_string());
        let cgroup = match self.read_proc(&dir, "cgroup") {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                usage.notes.push(format!(
                    "no {}: the process ended, or nvc runs in another PID namespace than the \
                     driver's (run nvc on the host)",
                    dir.display()
                ));
                return usage;
            }
            Err(e) => {
                usage.notes.push(format!(
                    "cannot read {}: {e} (run nvc as root to see every process's container)",
                    dir.join("cgroup").display()
                ));
                return usage;
            }
        };
        match self.read_proc(&dir, "status") {
            Ok(status) => usage.container_pid = innermost_pid(&status),
            Err(e) => usage
                .notes
                .push(format!("cannot read {}: {e}", dir.join("status").display())),
        }
        match self.read_proc(&dir, "comm") {
            Ok(comm) => usage.command = Some(comm.trim_end_matches('\n').to_string()),
            Err(e) => usage
                .notes
                .push(format!("cannot read {}: {e}", dir.join("comm").display())),
        }
        let ids = cgroup::parse(&cgroup);
        match self.container(&ids) {
            Some((container, notes)) => {
                usage.owner = Owner::Container;
                usage.container = Some(container);
                usage.notes.extend(notes);
            }
            None => {
                usage.owner = Owner::Host;
                // Its own PID namespace but no container found: say so rather than guess.
                if usage.container_pid.is_some_and(|c| c != p.pid) {
                    usage.notes.push(
                        "in a PID namespace of its own, but its cgroup names no container \
                         nvc knows"
                            .into(),
                    );
                }
            }
        }
        usage
    }

    fn read_proc(&self, dir: &Path, name: &str) -> io::Result<String> {
        let (bytes, _) = self.probe.read(&dir.join(name), PROC_LIMIT)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The container that `ids` names: the first hex id an engine's state or nvc's
    /// records know, else the deepest hex id, else the first name that is a known id.
    fn container(&mut self, ids: &cgroup::CgroupIds) -> Option<(ContainerRef, Vec<String>)> {
        let mut fallback = None;
        for (id, hint) in &ids.hex {
            if let Some(found) = self.identify(id, *hint) {
                return Some(found);
            }
            if fallback.is_none() {
                let mut found = self.unknown(id, *hint);
                found.1.push(format!(
                    "no engine state nvc reads knows container {id} (give its engine's \
                     folder with --docker-root, --containerd-tasks or --storage)"
                ));
                fallback = Some(found);
            }
        }
        if fallback.is_some() {
            return fallback;
        }
        ids.names.iter().find_map(|n| self.identify(n, None))
    }

    fn unknown(&self, id: &str, engine: Option<Engine>) -> (ContainerRef, Vec<String>) {
        let container = ContainerRef {
            id: id.to_string(),
            engine,
            name: None,
            pod: None,
            namespace: None,
            bundle: None,
            recorded: false,
        };
        (container, Vec::new())
    }

    /// Container `id` as nvc's records and the engines' state know it; `None` where none
    /// does.
    fn identify(&mut self, id: &str, hint: Option<Engine>) -> Option<(ContainerRef, Vec<String>)> {
        if let Some(known) = self.known.get(id) {
            return known.clone();
        }
        let found = self.identify_anew(id, hint);
        self.known.insert(id.to_string(), found.clone());
        found
    }

    fn identify_anew(&self, id: &str, hint: Option<Engine>) -> Option<(ContainerRef, Vec<String>)> {
        let mut notes = Vec::new();
        let recorded = self.records.iter().find(|r| r.id == id);
        let bundle = match recorded {
            Some(r) => Some(r.bundle.clone()),
            None => self.engine_bundle(id, &mut notes),
        };
        let docker = self.docker_name(id, &mut notes);
        if recorded.is_none() && bundle.is_none() && docker.is_none() {
            // Only a 64-hex id may stand without a state that knows it; the caller says so.
            return None;
        }
        let mut identity = Identity::default();
        if let Some(bundle) = &bundle {
            let config = bundle.join("config.json");
            match self.probe.read(&config, MAX_TEXT) {
                Ok((bytes, _)) => identity = engines::from_annotations(&bytes),
                Err(e) => notes.push(format!("cannot read {}: {e}", config.display())),
            }
            if let Some(ns) = engines::containerd_namespace(bundle) {
                let engine = if ns == "moby" {
                    Engine::Docker
                } else {
                    Engine::Containerd
                };
                identity = identity.or(Identity {
                    engine: Some(engine),
                    namespace: (engine == Engine::Containerd).then_some(ns),
                    ..Identity::default()
                });
            }
            if identity.engine == Some(Engine::Podman) && identity.name.is_none() {
                identity.name = self.podman_name(bundle, id, &mut notes);
            }
        }
        if let Some(name) = docker {
            identity = Identity {
                engine: Some(Engine::Docker),
                name: Some(name),
                ..Identity::default()
            }
            .or(identity);
        }
        let container = ContainerRef {
            id: id.to_string(),
            engine: identity.engine.or(hint),
            name: identity.name,
            pod: identity.pod,
            namespace: identity.namespace,
            bundle,
            recorded: recorded.is_some(),
        };
        Some((container, notes))
    }

    /// The bundle of container `id` in containerd's tasks or Podman's and CRI-O's storage.
    fn engine_bundle(&self, id: &str, notes: &mut Vec<String>) -> Option<PathBuf> {
        for tasks in &self.roots.containerd_tasks {
            let namespaces = match self.probe.read_dir(tasks) {
                Ok(n) => n,
                Err(e) => {
                    note_unless_absent(notes, tasks, &e);
                    continue;
                }
            };
            for ns in namespaces {
                let bundle = tasks.join(ns).join(id);
                if self.probe.stat(&bundle.join("config.json")).is_ok() {
                    return Some(bundle);
                }
            }
        }
        for storage in &self.roots.storage {
            for folder in engines::CONTAINERS_FOLDERS {
                let bundle = storage.join(folder).join(id).join("userdata");
                match self.probe.stat(&bundle.join("config.json")) {
                    Ok(_) => return Some(bundle),
                    Err(e) => note_unless_absent(notes, &bundle, &e),
                }
            }
        }
        None
    }

    fn docker_name(&self, id: &str, notes: &mut Vec<String>) -> Option<String> {
        for root in &self.roots.docker {
            let path = root.join("containers").join(id).join("config.v2.json");
            match self.probe.read(&path, MAX_TEXT) {
                Ok((bytes, _)) => return engines::docker_name(&bytes),
                Err(e) => note_unless_absent(notes, &path, &e),
            }
        }
        None
    }

    fn podman_name(&self, bundle: &Path, id: &str, notes: &mut Vec<String>) -> Option<String> {
        let path = engines::storage_containers(bundle)?.join("containers.json");
        match self.probe.read(&path, CONTAINERS_JSON_LIMIT) {
            Ok((bytes, _)) => engines::podman_name(&bytes, id),
            Err(e) => {
                notes.push(format!("cannot read {}: {e}", path.display()));
                None
            }
        }
    }
}

/// Notes an error reading `path` unless it only says the file is not there.
fn note_unless_absent(notes: &mut Vec<String>, path: &Path, e: &io::Error) {
    if !matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    ) {
        let note = format!(
            "cannot read {}: {e} (run nvc as root to see it)",
            path.display()
        );
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
}

#[cfg(test)]
mod tests;
