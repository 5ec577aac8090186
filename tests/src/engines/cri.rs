//! A CRI client: Kubernetes' `runtime.v1` gRPC API spoken to a CRI runtime (containerd's
//! CRI plugin, CRI-O) over its unix socket, the way the kubelet does, so that tests can run
//! pods through the runtime handler `nvc runtime configure` registers.
//!
//! The messages (`api.rs`) are hand-written prost structs holding only the fields used;
//! calls go through `tonic::client::Grpc` with prost's codec. The API is blocking: each
//! client owns a current-thread tokio runtime and waits on it for each call.
//! [`CriClient::run_to_exit`] is the kubelet's flow for one container: RunPodSandbox,
//! CreateContainer, StartContainer, ContainerStatus until it exits, its log file, then
//! StopPodSandbox and RemovePodSandbox. As the kubelet does, the client makes a
//! container's log folder before CreateContainer (CRI-O's conmon does not make it) and
//! names its image in `user_specified_image` too ([`api::ImageSpec::named`]).

pub mod api;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::client::Grpc;
use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

use api::{
    ContainerConfig, ContainerIdRequest, ContainerState, ContainerStatus, ContainerStatusResponse,
    CreateContainerRequest, CreateContainerResponse, Empty, PodSandboxConfig, PodSandboxIdRequest,
    RunPodSandboxRequest, RunPodSandboxResponse, VersionRequest, VersionResponse,
};

/// How long one CRI call may take (RunPodSandbox starts a container; containerd answers
/// slowly on a loaded machine).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a CRI call failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The client's tokio runtime could not be made.
    #[error("failed to start the CRI client's tokio runtime")]
    Runtime(#[source] std::io::Error),
    /// No connection to the socket.
    #[error("failed to connect to the CRI socket {socket}: is its runtime running?")]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// The connection broke before the call was sent.
    #[error("{method}: the connection to {socket} broke")]
    Transport {
        /// The method, e.g. `RunPodSandbox`.
        method: &'static str,
        /// The socket.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// The runtime answered with an error: `message` is what the kubelet shows.
    #[error("{method} failed ({code:?}): {message}")]
    Call {
        /// The method.
        method: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The runtime's message.
        message: String,
    },
    /// An answer lacks a field it must have.
    #[error("{method} answered without {field}")]
    Incomplete {
        /// The method.
        method: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// The CRI service did not answer Version in time after the daemon came up.
    #[error("the CRI service at {socket} did not answer within {secs}s: {last}")]
    NotReady {
        /// The socket.
        socket: PathBuf,
        /// The time waited.
        secs: u64,
        /// The last error.
        last: Box<CriError>,
    },
    /// A container did not exit in time.
    #[error("container {id} did not exit within {secs}s (last state {state:?})")]
    NoExit {
        /// The container's id.
        id: String,
        /// The time waited.
        secs: u64,
        /// Its last state.
        state: ContainerState,
    },
    /// A container's log folder could not be made.
    #[error("failed to create the container log folder {path}")]
    LogFolder {
        /// The folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A container's log file could not be read.
    #[error("failed to read the container log {path}")]
    Log {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A log line is not in the CRI log format.
    #[error("{path}:{line}: not a CRI log line (<timestamp> <stream> <F|P> <content>): {text:?}")]
    LogFormat {
        /// The file.
        path: PathBuf,
        /// The line number (from 1).
        line: usize,
        /// The line.
        text: String,
    },
}

/// A blocking CRI client on one unix socket.
#[derive(Debug)]
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    grpc: Grpc<Channel>,
    socket: PathBuf,
}

impl CriClient {
    /// Connects to the CRI service at `socket` (containerd's gRPC socket, CRI-O's
    /// `listen`).
    pub fn connect(socket: &Path) -> Result<CriClient, CriError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let path = socket.to_path_buf();
        // tonic needs a URI; the connector ignores it and opens the socket.
        let endpoint = Endpoint::from_static("http://cri.localhost")
            .timeout(CALL_TIMEOUT)
            .connect_timeout(Duration::from_secs(10));
        let connector = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        });
        let channel = runtime
            .block_on(endpoint.connect_with_connector(connector))
            .map_err(|source| CriError::Connect {
                socket: socket.to_path_buf(),
                source,
            })?;
        Ok(CriClient {
            runtime,
            grpc: Grpc::new(channel),
            socket: socket.to_path_buf(),
        })
    }

    /// Connects and waits until the CRI service answers Version (containerd's CRI plugin
    /// starts serving a moment after containerd itself; a restarted runtime takes a moment
    /// to listen again), for up to `timeout`.
    pub fn connect_when_ready(socket: &Path, timeout: Duration) -> Result<CriClient, CriError> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match CriClient::connect(socket) {
                Ok(client) => match client.version() {
                    Ok(_) => return Ok(client),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(CriError::NotReady {
                    socket: socket.to_path_buf(),
                    secs: timeout.as_secs(),
                    last: Box::new(last),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One unary call of `/runtime.v1.RuntimeService/<method>`.
    fn call<Req, Resp>(
        &self,
        method: &'static str,
        path: &'static str,
        request: Req,
    ) -> Result<Resp, CriError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
        self.runtime.block_on(async move {
            grpc.ready().await.map_err(|source| CriError::Transport {
                method,
                socket: self.socket.clone(),
                source,
            })?;
            let codec: ProstCodec<Req, Resp> = ProstCodec::default();
            grpc.unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Call {
                method,
                code: status.code(),
                message: status.message().to_string(),
            })
        })
    }

    /// `Version`: the runtime's name and version.
    pub fn version(&self) -> Result<VersionResponse, CriError> {
        let request = VersionRequest {
            version: "v1".into(),
        };
        self.call("Version", "/runtime.v1.RuntimeService/Version", request)
    }

    /// `RunPodSandbox` with the runtime handler `handler`; returns the sandbox's id.
    pub fn run_pod_sandbox(
        &self,
        config: &PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        let request = RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.into(),
        };
        let response: RunPodSandboxResponse = self.call(
            "RunPodSandbox",
            "/runtime.v1.RuntimeService/RunPodSandbox",
            request,
        )?;
        Ok(response.pod_sandbox_id)
    }

    /// `StopContainer`: SIGTERM, SIGKILL after `timeout`.
    pub fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), CriError> {
        let request = api::StopContainerRequest {
            container_id: id.into(),
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        let _: Empty = self.call(
            "StopContainer",
            "/runtime.v1.RuntimeService/StopContainer",
            request,
        )?;
        Ok(())
    }

    /// `StopPodSandbox`.
    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = PodSandboxIdRequest {
            pod_sandbox_id: id.into(),
        };
        let _: Empty = self.call(
            "StopPodSandbox",
            "/runtime.v1.RuntimeService/StopPodSandbox",
            request,
        )?;
        Ok(())
    }

    /// `RemovePodSandbox` (which removes its containers too).
    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = PodSandboxIdRequest {
            pod_sandbox_id: id.into(),
        };
        let _: Empty = self.call(
            "RemovePodSandbox",
            "/runtime.v1.RuntimeService/RemovePodSandbox",
            request,
        )?;
        Ok(())
    }

    /// `CreateContainer` in sandbox `sandbox_id` (made from `sandbox`); returns the
    /// container's id. First makes the folder of the container's log file (the
    /// sandbox's `log_directory` joined with the container's `log_path`), as the kubelet
    /// does: CRI-O's conmon fails to open a log file whose folder is missing.
    pub fn create_container(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox: &PodSandboxConfig,
    ) -> Result<String, CriError> {
        if !sandbox.log_directory.is_empty() && !config.log_path.is_empty() {
            let log = Path::new(&sandbox.log_directory).join(&config.log_path);
            if let Some(folder) = log.parent() {
                std::fs::create_dir_all(folder).map_err(|source| CriError::LogFolder {
                    path: folder.to_path_buf(),
                    source,
                })?;
            }
        }
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config.clone()),
            sandbox_config: Some(sandbox.clone()),
        };
        let response: CreateContainerResponse = self.call(
            "CreateContainer",
            "/runtime.v1.RuntimeService/CreateContainer",
            request,
        )?;
        Ok(response.container_id)
    }

    /// `StartContainer`: where the runtime (runc, or nvc-runtime in its place) creates
    /// and starts the container, so where a refused GPU request fails.
    pub fn start_container(&self, id: &str) -> Result<(), CriError> {
        let request = ContainerIdRequest {
            container_id: id.into(),
        };
        let _: Empty = self.call(
            "StartContainer",
            "/runtime.v1.RuntimeService/StartContainer",
            request,
        )?;
        Ok(())
    }

    /// `ContainerStatus`.
    pub fn container_status(&self, id: &str) -> Result<ContainerStatus, CriError> {
        let request = ContainerIdRequest {
            container_id: id.into(),
        };
        let response: ContainerStatusResponse = self.call(
            "ContainerStatus",
            "/runtime.v1.RuntimeService/ContainerStatus",
            request,
        )?;
        response.status.ok_or(CriError::Incomplete {
            method: "ContainerStatus",
            field: "status",
        })
    }

    /// Polls `ContainerStatus` until the container has exited, as the kubelet's status
    /// loop does; fails after `timeout`.
    pub fn wait_exited(&self, id: &str, timeout: Duration) -> Result<ContainerStatus, CriError> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.container_status(id)?;
            let state = ContainerState::try_from(status.state).unwrap_or(ContainerState::Unknown);
            if state == ContainerState::Exited {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(CriError::NoExit {
                    id: id.into(),
                    secs: timeout.as_secs(),
                    state,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The kubelet's flow for a pod of one container that runs to its end: RunPodSandbox
    /// with `handler`, CreateContainer, StartContainer, ContainerStatus until it exits
    /// (within `timeout`), its log file read; then, whatever happened,
    /// StopPodSandbox and RemovePodSandbox. The first error wins.
    pub fn run_to_exit(
        &self,
        sandbox: &PodSandboxConfig,
        handler: &str,
        container: &ContainerConfig,
        timeout: Duration,
    ) -> Result<ExitedContainer, CriError> {
        let sandbox_id = self.run_pod_sandbox(sandbox, handler)?;
        let result = self.run_in_sandbox(&sandbox_id, sandbox, container, timeout);
        let stopped = self
            .stop_pod_sandbox(&sandbox_id)
            .and_then(|()| self.remove_pod_sandbox(&sandbox_id));
        let exited = result?;
        stopped.map(|()| exited)
    }

    fn run_in_sandbox(
        &self,
        sandbox_id: &str,
        sandbox: &PodSandboxConfig,
        container: &ContainerConfig,
        timeout: Duration,
    ) -> Result<ExitedContainer, CriError> {
        let id = self.create_container(sandbox_id, container, sandbox)?;
        self.start_container(&id)?;
        let status = self.wait_exited(&id, timeout)?;
        let path = PathBuf::from(&status.log_path);
        let text = std::fs::read_to_string(&path).map_err(|source| CriError::Log {
            path: path.clone(),
            source,
        })?;
        let log = parse_log(&path, &text)?;
        Ok(ExitedContainer { id, status, log })
    }
}

/// A container that ran to its end, as the kubelet sees it.
#[derive(Debug, Clone)]
pub struct ExitedContainer {
    /// Its id.
    pub id: String,
    /// Its last status (exit code, reason, log path).
    pub status: ContainerStatus,
    /// Its log file's lines.
    pub log: Vec<LogLine>,
}

impl ExitedContainer {
    /// What the container wrote on `stream` (`stdout` or `stderr`), partial lines
    /// joined with what follows them.
    pub fn stream(&self, stream: &str) -> String {
        let mut out = String::new();
        for line in self.log.iter().filter(|l| l.stream == stream) {
            out.push_str(&line.content);
            if !line.partial {
                out.push('\n');
            }
        }
        out
    }
}

/// One line of a CRI container log: `<RFC 3339 timestamp> <stream> <tag> <content>`,
/// tag `F` for a full line, `P` for part of a longer one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When it was written (RFC 3339, nanoseconds).
    pub timestamp: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Tag `P`: the line goes on in the next one of its stream.
    pub partial: bool,
    /// The text, without its newline.
    pub content: String,
}

/// The lines of the CRI log `text` (read from `path`), each checked for the format.
pub fn parse_log(path: &Path, text: &str) -> Result<Vec<LogLine>, CriError> {
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            parse_log_line(line).ok_or_else(|| CriError::LogFormat {
                path: path.to_path_buf(),
                line: n + 1,
                text: line.to_string(),
            })
        })
        .collect()
}

fn parse_log_line(line: &str) -> Option<LogLine> {
    let mut fields = line.splitn(4, ' ');
    let timestamp = fields.next()?;
    let stream = fields.next()?;
    let tag = fields.next()?;
    // An empty line has no content field, but keeps the space before it.
    let content = fields.next().unwrap_or_default();
    let rfc3339 = timestamp.len() >= 20
        && timestamp.as_bytes().get(10) == Some(&b'T')
        && (timestamp.ends_with('Z') || timestamp[19..].contains(['+', '-']));
    let partial = match tag {
        "F" => false,
        "P" => true,
        _ => return None,
    };
    (rfc3339 && matches!(stream, "stdout" | "stderr")).then(|| LogLine {
        timestamp: timestamp.into(),
        stream: stream.into(),
        partial,
        content: content.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_parsed_and_joined_per_stream() {
        let text = "2016-10-06T00:17:09.669794202Z stdout F hello world\n\
                    2016-10-06T00:17:09.669794203Z stderr P par\n\
                    2016-10-06T00:17:09.669794204Z stdout F \n\
                    2016-10-06T00:17:09.669794205+02:00 stderr F tial\n";
        let log = parse_log(Path::new("x.log"), text).unwrap();
        assert_eq!(log.len(), 4);
        let exited = ExitedContainer {
            id: "c".into(),
            status: ContainerStatus::default(),
            log,
        };
        assert_eq!(exited.stream("stdout"), "hello world\n\n");
        assert_eq!(exited.stream("stderr"), "partial\n");
    }

    #[test]
    fn malformed_log_lines_are_refused() {
        for bad in [
            "hello",
            "2016-10-06T00:17:09Z stdin F x",
            "2016-10-06T00:17:09Z stdout X x",
            "yesterday stdout F x",
        ] {
            let e = parse_log(Path::new("x.log"), bad).unwrap_err();
            assert!(
                matches!(e, CriError::LogFormat { line: 1, .. }),
                "{bad}: {e}"
            );
        }
    }

    /// The wire format: a field's tag is what the server reads, so a message encodes its
    /// fields with api.proto's numbers (checked here on the bytes prost writes).
    #[test]
    fn fields_carry_api_proto_numbers() {
        use prost::Message;
        let config = ContainerConfig {
            log_path: "x".into(),
            cdi_devices: vec![api::CdiDevice { name: "n".into() }],
            ..Default::default()
        };
        // log_path = 11 (wire type 2): key 0x5a; CDI_devices = 17: key 0x8a 0x01.
        assert_eq!(
            config.encode_to_vec(),
            [0x5a, 1, b'x', 0x8a, 0x01, 3, 0x0a, 1, b'n']
        );
    }
}
