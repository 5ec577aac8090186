//! The test kit's CRI client on the command line, for machines where the test suite does
//! not run (tests/gpu/engines.sh on the GPU machine): a CRI node's containerd config, an
//! image archive `ctr images import` takes, and a one-container pod run the way the
//! kubelet runs it, its output printed and its exit code returned.
//!
//! ```text
//! nvc-cri config DIR VERSION SANDBOX_IMAGE [CDI_DIR]...
//!     prints a containerd config (VERSION 2 or 3) keeping its state under DIR
//! nvc-cri image ROOTFS_TAR NAME OUT [-- COMMAND...]
//!     writes OUT, an OCI image archive of one layer running COMMAND (default sh)
//! nvc-cri run SOCKET IMAGE [OPTIONS] -- COMMAND...
//!     --handler NAME        RuntimeClass handler (default nv)
//!     --log-dir DIR         the pod's log folder (default /tmp/nvc-cri-pods)
//!     --cgroup-parent PATH  the pod's cgroup parent (default /nvc-cri)
//!     -e KEY=VALUE          an environment variable
//!     --cdi NAME            a CDI device in the CRI field (device plugin `cdi-cri`)
//!     --annotation K=V      a container annotation (device plugin `cdi-annotations`)
//!     --mount HOST:CTR      a bind mount (device plugin `volume-mounts`)
//!     --timeout SECS        how long the container may run (default 120)
//! ```
//!
//! `run` exits with the container's exit code; a refused pod prints the CRI error (what
//! `kubectl describe pod` would show) and exits 125.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use libnvc::report::error_chain;
use nvc_tests::cri::api::{
    CdiDevice, ContainerConfig, ContainerMetadata, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
};
use nvc_tests::cri::CriClient;
use nvc_tests::{container_id, oci_archive_running, Containerd, CriSettings};

const USAGE: &str = "usage: nvc-cri config DIR VERSION SANDBOX_IMAGE [CDI_DIR]...\n       \
                     nvc-cri image ROOTFS_TAR NAME OUT [-- COMMAND...]\n       \
                     nvc-cri run SOCKET IMAGE [--handler NAME] [--log-dir DIR] \
                     [--cgroup-parent PATH] [-e KEY=VALUE]... [--cdi NAME]... \
                     [--annotation KEY=VALUE]... [--mount HOST:CONTAINER]... \
                     [--timeout SECS] -- COMMAND...";

/// Exit code for a pod the runtime refused or a CRI call that failed.
const REFUSED: u8 = 125;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((cmd, rest)) if cmd == "config" => config(rest),
        Some((cmd, rest)) if cmd == "image" => image(rest),
        Some((cmd, rest)) if cmd == "run" => run(rest),
        _ => Err(Usage("a command: config, image or run".into())),
    };
    result.unwrap_or_else(|Usage(what)| {
        eprintln!("nvc-cri: expected {what}\n{USAGE}");
        ExitCode::from(2)
    })
}

/// A command line that does not parse: what was expected.
struct Usage(String);

fn config(args: &[String]) -> Result<ExitCode, Usage> {
    let [dir, version, image, cdi_dirs @ ..] = args else {
        return Err(Usage("DIR VERSION SANDBOX_IMAGE".into()));
    };
    let version: u8 = match version.as_str() {
        "2" => 2,
        "3" => 3,
        _ => return Err(Usage(format!("VERSION 2 or 3, not {version:?}"))),
    };
    let cdi_dirs: Vec<&Path> = cdi_dirs.iter().map(Path::new).collect();
    let settings = CriSettings {
        sandbox_image: image,
        cdi_spec_dirs: &cdi_dirs,
        enable_cdi: false,
    };
    print!(
        "{}",
        Containerd::cri_config(Path::new(dir), version, &settings)
    );
    Ok(ExitCode::SUCCESS)
}

fn image(args: &[String]) -> Result<ExitCode, Usage> {
    let (paths, command) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let [tar, name, out] = paths else {
        return Err(Usage("ROOTFS_TAR NAME OUT".into()));
    };
    let command: Vec<&str> = if command.is_empty() {
        vec!["sh"]
    } else {
        command.iter().map(String::as_str).collect()
    };
    Ok(
        match oci_archive_running(Path::new(tar), name, &command, Path::new(out)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nvc-cri: {}", error_chain(&e));
                ExitCode::FAILURE
            }
        },
    )
}

/// What `run` was asked for.
struct Pod {
    socket: PathBuf,
    image: String,
    handler: String,
    log_dir: PathBuf,
    cgroup_parent: String,
    env: Vec<KeyValue>,
    cdi: Vec<CdiDevice>,
    annotations: HashMap<String, String>,
    mounts: Vec<Mount>,
    timeout: Duration,
    command: Vec<String>,
}

fn parse_pod(args: &[String]) -> Result<Pod, Usage> {
    let [socket, image, rest @ ..] = args else {
        return Err(Usage("SOCKET IMAGE".into()));
    };
    let mut pod = Pod {
        socket: socket.into(),
        image: image.clone(),
        handler: "nv".into(),
        log_dir: "/tmp/nvc-cri-pods".into(),
        cgroup_parent: "/nvc-cri".into(),
        env: Vec::new(),
        cdi: Vec::new(),
        annotations: HashMap::new(),
        mounts: Vec::new(),
        timeout: Duration::from_secs(120),
        command: Vec::new(),
    };
    let pair = |v: &str, sep: char, what: &str| -> Result<(String, String), Usage> {
        v.split_once(sep)
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .ok_or_else(|| Usage(format!("{what}, not {v:?}")))
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        if flag == "--" {
            pod.command = it.by_ref().cloned().collect();
            break;
        }
        let value = it
            .next()
            .ok_or_else(|| Usage(format!("a value after {flag}")))?;
        match flag.as_str() {
            "--handler" => pod.handler = value.clone(),
            "--log-dir" => pod.log_dir = value.into(),
            "--cgroup-parent" => pod.cgroup_parent = value.clone(),
            "-e" => {
                let (key, value) = pair(value, '=', "-e KEY=VALUE")?;
                pod.env.push(KeyValue { key, value });
            }
            "--cdi" => pod.cdi.push(CdiDevice {
                name: value.clone(),
            }),
            "--annotation" => {
                let (key, value) = pair(value, '=', "--annotation KEY=VALUE")?;
                pod.annotations.insert(key, value);
            }
            "--mount" => {
                let (host_path, container_path) = pair(value, ':', "--mount HOST:CONTAINER")?;
                pod.mounts.push(Mount {
                    container_path,
                    host_path,
                    readonly: false,
                });
            }
            "--timeout" => {
                let secs = value
                    .parse()
                    .map_err(|_| Usage(format!("--timeout SECS, not {value:?}")))?;
                pod.timeout = Duration::from_secs(secs);
            }
            other => return Err(Usage(format!("an option, not {other:?}"))),
        }
    }
    if pod.command.is_empty() {
        return Err(Usage("-- COMMAND...".into()));
    }
    Ok(pod)
}

/// The namespaces of a host-network pod as the kubelet sets them (for the sandbox and
/// each container): the node's network, the pod's IPC, the container's own PID.
fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node.into(),
        pid: NamespaceMode::Container.into(),
        ipc: NamespaceMode::Pod.into(),
    }
}

fn run(args: &[String]) -> Result<ExitCode, Usage> {
    let pod = parse_pod(args)?;
    let name = container_id("nvc-cri");
    let sandbox = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: container_id("uid"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: pod.log_dir.join(&name).display().to_string(),
        labels: HashMap::from([("app".into(), name)]),
        annotations: HashMap::new(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: pod.cgroup_parent,
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                privileged: false,
            }),
        }),
    };
    let container = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec::named(&pod.image)),
        command: pod.command,
        envs: pod.env,
        mounts: pod.mounts,
        annotations: pod.annotations,
        log_path: "main/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                privileged: false,
                namespace_options: Some(namespaces()),
            }),
        }),
        cdi_devices: pod.cdi,
        ..ContainerConfig::default()
    };
    let exited = CriClient::connect(&pod.socket)
        .and_then(|cri| cri.run_to_exit(&sandbox, &pod.handler, &container, pod.timeout));
    Ok(match exited {
        Ok(exited) => {
            print!("{}", exited.stream("stdout"));
            eprint!("{}", exited.stream("stderr"));
            let code = exited.status.exit_code;
            ExitCode::from(u8::try_from(code).unwrap_or(REFUSED))
        }
        Err(e) => {
            eprintln!("nvc-cri: {}", error_chain(&e));
            ExitCode::from(REFUSED)
        }
    })
}
