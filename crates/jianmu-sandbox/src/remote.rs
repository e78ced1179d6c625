//! A runner reached over the network (`jianmu://HOST:PORT` in `hosts`): the
//! [`Backend`] that connects to `jianmu serve --listen` over mutual TLS instead of
//! creating a container. The runner exists already (a Swarm task, a pod, any host), so
//! creating is connecting, killing is dropping the connection, and the copied
//! workspace travels through connections of its own (`put_archive`, `get_archive`;
//! see `listen.rs`). A runner serves one session at a time.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use super::backend::{Backend, Chunk, Ended, Input, Output, Spec};
use crate::{SandboxError, TlsFiles, lock};

/// How long connecting and the TLS handshake may take.
const CONNECT: Duration = Duration::from_secs(10);

/// The scheme of a runner's address in `hosts`.
pub(crate) const SCHEME: &str = "jianmu://";

/// Runners at one address.
pub(crate) struct RemoteBackend {
    /// `HOST:PORT`.
    address: String,
    /// The host's own certificate, or the authority each session's is minted from.
    identity: Identity,
    name: rustls::pki_types::ServerName<'static>,
    /// The sockets of this backend's sessions, by id, to cut on `kill`.
    sockets: std::sync::Mutex<std::collections::HashMap<String, OwnedFd>>,
    next: std::sync::atomic::AtomicU64,
}

/// What the host shows a runner.
enum Identity {
    /// One certificate (`cert`, `key`) for every session.
    Fixed(tokio_rustls::TlsConnector),
    /// A certificate minted for each session from the authority's key (`ca_key`).
    Minted {
        issuer: Box<rcgen::Issuer<'static, rcgen::KeyPair>>,
        /// The authorities a runner's certificate must chain to (`ca`), read once.
        roots: rustls::RootCertStore,
    },
}

impl RemoteBackend {
    /// The runner at `url` (`jianmu://HOST:PORT`), reached with `tls`.
    pub(crate) fn new(
        url: &str,
        tls: Option<&TlsFiles>,
        ca_key: Option<&Path>,
    ) -> Result<Self, SandboxError> {
        let bad = |why: String| SandboxError::Settings(format!("runner `{url}`: {why}"));
        let address = url
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("not a jianmu:// address".into()))?
            .trim_end_matches('/')
            .to_owned();
        let Some(tls) = tls else {
            return Err(bad(
                "a runner is reached over mutual TLS only: give its `ca`, `cert` and `key`".into(),
            ));
        };
        let host = match address.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            _ => return Err(bad("the address needs a port: jianmu://HOST:PORT".into())),
        };
        let name = rustls::pki_types::ServerName::try_from(host)
            .map_err(|e| bad(format!("not a host name or address: {e}")))?;
        let identity = match ca_key {
            Some(ca_key) => Identity::Minted {
                issuer: Box::new(
                    crate::certs::issuer(&tls.ca, ca_key).map_err(|e| bad(e.to_string()))?,
                ),
                roots: crate::listen::roots(&tls.ca).map_err(|e| bad(e.to_string()))?,
            },
            None => {
                let config = crate::listen::client_config(&tls.ca, &tls.cert, &tls.key)
                    .map_err(|e| bad(e.to_string()))?;
                Identity::Fixed(tokio_rustls::TlsConnector::from(Arc::new(config)))
            }
        };
        Ok(Self {
            address,
            identity,
            name,
            sockets: std::sync::Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// The connector of session `id`: the host's, or one showing a certificate minted
    /// for the session now (each connection gets a fresh one, named for the session,
    /// which the runner checks its archives against).
    fn connector(&self, id: &str) -> Result<tokio_rustls::TlsConnector, SandboxError> {
        let (issuer, roots) = match &self.identity {
            Identity::Fixed(connector) => return Ok(connector.clone()),
            Identity::Minted { issuer, roots } => (issuer, roots),
        };
        let (certs, key) = crate::certs::session_certificate(issuer, id)?;
        let config = crate::listen::client_config_with(roots.clone(), certs, key)
            .map_err(|e| SandboxError::Settings(format!("runner `{}`: {e}", self.address)))?;
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }

    /// A new mutual TLS connection to the runner through `connector`, and a handle on
    /// its socket.
    async fn connect(
        &self,
        connector: tokio_rustls::TlsConnector,
    ) -> Result<
        (
            tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
            OwnedFd,
        ),
        SandboxError,
    > {
        let lost = |why: String| {
            SandboxError::Lost(format!(
                "cannot reach the runner at {}: {why}",
                self.address
            ))
        };
        tokio::time::timeout(CONNECT, async {
            let tcp = tokio::net::TcpStream::connect(&self.address)
                .await
                .map_err(|e| lost(e.to_string()))?;
            tcp.set_nodelay(true).map_err(|e| lost(e.to_string()))?;
            let socket = rustix::io::dup(&tcp).map_err(|e| lost(e.to_string()))?;
            let tls = connector
                .connect(self.name.clone(), tcp)
                .await
                .map_err(|e| lost(format!("the TLS handshake failed: {e}")))?;
            Ok((tls, socket))
        })
        .await
        .map_err(|_| lost("no answer within 10 s".into()))?
    }
}

#[async_trait::async_trait]
impl Backend for RemoteBackend {
    async fn create(&self, _spec: &Spec<'_>) -> Result<(String, Input, Output), SandboxError> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}#{n}", self.address);
        let (tls, socket) = self.connect(self.connector(&id)?).await?;
        lock(&self.sockets).insert(id.clone(), socket);
        let (read, write) = tokio::io::split(tls);
        let output = futures::stream::unfold(read, |mut read| async move {
            let mut buf = vec![0u8; 64 * 1024];
            match read.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Chunk::Stdout(buf)), read))
                }
                Err(e) => Some((Err(e.to_string()), read)),
            }
        });
        Ok((id, Box::pin(write), Box::pin(output)))
    }

    async fn start(&self, _id: &str) -> Result<(), SandboxError> {
        Ok(())
    }

    async fn kill(&self, id: &str) {
        if let Some(socket) = lock(&self.sockets).remove(id) {
            let _ = rustix::net::shutdown(&socket, rustix::net::Shutdown::Both);
        }
    }

    async fn remove(&self, id: &str) {
        self.kill(id).await;
    }

    async fn ended(&self, id: &str) -> Ended {
        lock(&self.sockets).remove(id);
        Ended::Unknown(format!(
            "the connection to the runner at {} ended",
            self.address
        ))
    }

    async fn sweep(&self) {}

    async fn ping(&self) -> bool {
        matches!(
            tokio::time::timeout(
                Duration::from_secs(2),
                tokio::net::TcpStream::connect(&self.address)
            )
            .await,
            Ok(Ok(_))
        )
    }

    async fn upload(&self, id: &str, dir: &Path, tar: Vec<u8>) -> Result<(), SandboxError> {
        let failed = |why: String| {
            SandboxError::Lost(format!("cannot copy the workspace into the runner: {why}"))
        };
        let (tls, _) = self.connect(self.connector(id)?).await?;
        let (read, mut write) = tokio::io::split(tls);
        let first = serde_json::json!({"op": "put_archive", "path": dir});
        write
            .write_all(format!("{first}\n").as_bytes())
            .await
            .map_err(|e| failed(e.to_string()))?;
        write
            .write_all(&tar)
            .await
            .map_err(|e| failed(e.to_string()))?;
        write.shutdown().await.map_err(|e| failed(e.to_string()))?;
        let mut line = String::new();
        tokio::io::BufReader::new(read.take(64 * 1024))
            .read_line(&mut line)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let reply: serde_json::Value =
            serde_json::from_str(&line).map_err(|_| failed("no answer".into()))?;
        if reply["ok"] == true {
            return Ok(());
        }
        Err(failed(
            reply["message"].as_str().unwrap_or("refused").to_owned(),
        ))
    }

    async fn download(
        &self,
        id: &str,
        path: &Path,
        sink: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<(), SandboxError> {
        let failed = |why: String| {
            SandboxError::Lost(format!(
                "cannot copy the workspace out of the runner: {why}"
            ))
        };
        let (tls, _) = self.connect(self.connector(id)?).await?;
        let (mut read, mut write) = tokio::io::split(tls);
        let first = serde_json::json!({"op": "get_archive", "path": path});
        write
            .write_all(format!("{first}\n").as_bytes())
            .await
            .map_err(|e| failed(e.to_string()))?;
        loop {
            let mut buf = vec![0u8; 64 * 1024];
            let n = read
                .read(&mut buf)
                .await
                .map_err(|e| failed(e.to_string()))?;
            if n == 0 {
                return Ok(());
            }
            buf.truncate(n);
            if sink.send(buf).await.is_err() {
                return Ok(());
            }
        }
    }
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}
