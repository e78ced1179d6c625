//! The seam between a sandbox and where its servers run: a [`Backend`] starts a server
//! (`jianmu serve` from the sandbox image, with the workspace, user, limits and runtime
//! asked for), hands back a duplex byte stream to it, says how it ended, and removes
//! it. Everything above — the wire protocol (`conn.rs`, `wire.rs`), placement over
//! engines, the warm pool, the copied workspace — only talks to this trait.
//! [`DockerBackend`] is a Docker engine through bollard; `RemoteBackend` (`remote.rs`)
//! a runner already listening (`jianmu serve --listen`); docs/scale-out.md says how a
//! Kubernetes one would map onto them.

use std::path::Path;
use std::pin::Pin;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use futures::{Stream, StreamExt as _};
use tokio::io::AsyncWrite;

use super::container;
use super::settings::DockerSettings;
use crate::SandboxError;

/// A piece of a runner's output.
pub(crate) enum Chunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// What a server writes; an `Err` when the stream broke (its words).
pub(crate) type Output = Pin<Box<dyn Stream<Item = Result<Chunk, String>> + Send>>;
/// The server's stdin.
pub(crate) type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// How a server stands, once its stream ended.
pub(crate) enum Ended {
    /// Still running: only the stream broke.
    Running,
    /// Killed for exceeding its memory limit.
    OutOfMemory,
    /// Exited with this code.
    Exited(i64),
    /// The backend cannot say (its words).
    Unknown(String),
    /// Gone with the machine it ran on (its words: which, and what was seen).
    Lost(String),
}

/// What a server is created from.
pub(crate) struct Spec<'a> {
    pub(crate) settings: &'a DockerSettings,
    pub(crate) workspace: &'a Path,
    pub(crate) user: &'a str,
    /// The owner label, for sweeps.
    pub(crate) owner: &'a str,
    /// The workspace is copied in (a volume) rather than mounted.
    pub(crate) copy: bool,
}

/// Where sandbox servers run. See the module docs.
#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync {
    /// Creates a runner, not started yet, with its stdin and output.
    async fn create(&self, spec: &Spec<'_>) -> Result<(String, Input, Output), SandboxError>;
    /// Starts a created runner.
    async fn start(&self, id: &str) -> Result<(), SandboxError>;
    /// Kills a server (its stream ends).
    async fn kill(&self, id: &str);
    /// Kills and removes a server and what it holds (a copied workspace).
    async fn remove(&self, id: &str);
    /// How a server whose stream ended stands.
    async fn ended(&self, id: &str) -> Ended;
    /// Removes servers whose owning process is gone.
    async fn sweep(&self);
    /// Whether the backend answers.
    async fn ping(&self) -> bool;
    /// Keeps spares started where the backend has a pool of its own (Swarm's
    /// replicated service); false where the sandbox's own pool must do it.
    async fn fill(&self, _spec: &Spec<'_>) -> bool {
        false
    }
    /// Removes what the backend made for this sandbox beyond its servers (a pool).
    async fn shutdown(&self) {}
    /// Unpacks `tar` into `dir` inside the server.
    async fn upload(&self, id: &str, dir: &Path, tar: Vec<u8>) -> Result<(), SandboxError>;
    /// `path` inside the server as a tar, sent to `sink` as it arrives; stops when
    /// the receiver is gone.
    async fn download(
        &self,
        id: &str,
        path: &Path,
        sink: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<(), SandboxError>;
}

/// A Docker engine.
pub(crate) struct DockerBackend {
    pub(crate) docker: Docker,
}

impl DockerBackend {
    /// The stdin and output of container `id` (created or running).
    pub(crate) async fn attach(&self, id: &str) -> Result<(Input, Output), SandboxError> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .map_err(|e| SandboxError::engine("cannot attach to the sandbox container", e))?;
        let output = attached.output.filter_map(|item| async move {
            match item {
                Ok(LogOutput::StdOut { message }) => Some(Ok(Chunk::Stdout(message.into()))),
                Ok(LogOutput::StdErr { message }) => Some(Ok(Chunk::Stderr(message.into()))),
                Ok(_) => None,
                Err(e) => Some(Err(e.to_string())),
            }
        });
        Ok((attached.input, Box::pin(output)))
    }
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    async fn create(&self, spec: &Spec<'_>) -> Result<(String, Input, Output), SandboxError> {
        let s = spec.settings;
        let body = container::body(s, spec.workspace, spec.user, spec.owner, spec.copy);
        let created = self
            .docker
            .create_container(None, body)
            .await
            .map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => SandboxError::MissingImage {
                    image: s.image.clone(),
                },
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 400 | 500,
                    ref message,
                } if s.runtime.is_some() && message.to_ascii_lowercase().contains("runtime") => {
                    SandboxError::MissingRuntime {
                        runtime: s.runtime.clone().unwrap_or_default(),
                    }
                }
                e => SandboxError::engine("cannot create the sandbox container", e),
            })?;
        let id = created.id;
        match self.attach(&id).await {
            Ok((input, output)) => Ok((id, input, output)),
            Err(e) => {
                container::remove(&self.docker, &id).await;
                Err(e)
            }
        }
    }

    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| SandboxError::engine("cannot start the sandbox container", e))
    }

    async fn kill(&self, id: &str) {
        let _ = self.docker.kill_container(id, None).await;
    }

    async fn remove(&self, id: &str) {
        container::remove(&self.docker, id).await;
    }

    async fn ended(&self, id: &str) -> Ended {
        let inspected = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            self.docker.inspect_container(id, None),
        )
        .await
        .unwrap_or_else(|_| Err(bollard::errors::Error::RequestTimeoutError));
        let state = match inspected {
            Ok(info) => info.state.unwrap_or_default(),
            Err(e) => return Ended::Unknown(e.to_string()),
        };
        if state.oom_killed == Some(true) {
            Ended::OutOfMemory
        } else if state.running == Some(true) {
            Ended::Running
        } else {
            Ended::Exited(state.exit_code.unwrap_or(-1))
        }
    }

    async fn sweep(&self) {
        container::sweep(&self.docker).await;
    }

    async fn ping(&self) -> bool {
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(2), self.docker.ping()).await,
            Ok(Ok(_))
        )
    }

    async fn upload(&self, id: &str, dir: &Path, tar: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptionsBuilder::default()
            .path(&dir.to_string_lossy())
            .build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(|e| SandboxError::engine("cannot copy the workspace into the sandbox", e))
    }

    async fn download(
        &self,
        id: &str,
        path: &Path,
        sink: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<(), SandboxError> {
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(&path.to_string_lossy())
            .build();
        let mut stream = self.docker.download_from_container(id, Some(options));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                SandboxError::engine("cannot copy the workspace out of the sandbox", e)
            })?;
            if sink.send(chunk.to_vec()).await.is_err() {
                break;
            }
        }
        Ok(())
    }
}
