//! `jianmu serve --listen ADDR --tls-dir DIR`: the runner reached over the network,
//! what a Swarm task, a Kubernetes pod or any host runs. Each connection is mutual TLS
//! (TLS 1.3; the client's certificate must chain to `DIR/ca.pem`; the runner shows
//! `DIR/cert.pem` with `DIR/key.pem`: Docker's file names), and its first line says
//! what it is for:
//!
//! - the wire's `init` ([`super::wire`]): a session, served as `jianmu serve` serves
//!   stdin and stdout. One at a time: a runner is one sandbox, and a second host is
//!   answered `init_failed`. When the connection ends, everything its calls started
//!   ends; with `--once` the runner exits then.
//! - `{"op": "put_archive", "path": P}`: the rest of the stream is a tar unpacked into
//!   the folder `P` (the copied workspace going in), answered with one JSON line.
//! - `{"op": "get_archive", "path": P}`: the folder `P` comes back as a tar (one top
//!   folder, as an engine's archive API gives it).
//!
//! Host paths are served below `--root`: the host's `/home/a/ws` is `ROOT/home/a/ws`
//! here, in tools' settings and archives alike.

use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jianmu_tool_core::{ToolConfig, ToolError, ToolSet};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{
    AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufReader,
};
use tokio::net::TcpListener;

/// How long a client has to finish its TLS handshake and send its first line.
const OPENING: Duration = Duration::from_secs(10);

/// The longest first line read.
const FIRST_LINE: usize = 64 * 1024;

/// Handshakes and first lines under way at once; more connections wait.
const OPENINGS: usize = 16;

/// What `jianmu serve --listen` is told.
#[derive(Debug, Clone)]
pub struct Listen {
    /// Where to listen (`0.0.0.0:7443`; port 0 picks one, printed on stderr).
    pub addr: SocketAddr,
    /// The folder with `ca.pem`, `cert.pem` and `key.pem`.
    pub tls_dir: PathBuf,
    /// Where host paths are served (`ROOT/<host path>`).
    pub root: PathBuf,
    /// Exit once the first session ends.
    pub once: bool,
}

/// Serves sessions and archives over mutual TLS until stopped (or, with
/// [`Listen::once`], until the first session ends), with the tools `tools` makes from
/// each host's settings. Prints `listening on ADDR` on stderr once it listens.
///
/// # Errors
/// The TLS files cannot be read or do not make a server, or the address cannot be
/// listened on.
pub fn serve_listen(
    listen: Listen,
    tools: impl Fn(ToolConfig) -> Result<ToolSet, ToolError> + Send + Sync + 'static,
) -> std::io::Result<()> {
    super::serve::runtime()?.block_on(run(listen, Arc::new(tools)))
}

type MakeTools = Arc<dyn Fn(ToolConfig) -> Result<ToolSet, ToolError> + Send + Sync>;

async fn run(listen: Listen, tools: MakeTools) -> std::io::Result<()> {
    let config = server_config(&listen.tls_dir)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    std::fs::create_dir_all(&listen.root)?;
    let root = listen.root.canonicalize()?;
    let listener = TcpListener::bind(listen.addr).await?;
    eprintln!(
        "jianmu serve: listening on {} (mutual TLS)",
        listener.local_addr()?
    );
    let tls_dir = listen
        .tls_dir
        .canonicalize()
        .unwrap_or_else(|_| listen.tls_dir.clone());
    let busy = Arc::new(Busy {
        on: AtomicBool::new(false),
        workspace: std::sync::Mutex::new(None),
        client: std::sync::Mutex::new(None),
        tls_dir,
    });
    let openings = Arc::new(tokio::sync::Semaphore::new(OPENINGS));
    let (ended, mut first_ended) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = first_ended.recv() => return Ok(()),
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(%e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(opening) = Arc::clone(&openings).acquire_owned().await else {
            return Ok(());
        };
        let acceptor = acceptor.clone();
        let (busy, tools, root, ended) = (
            Arc::clone(&busy),
            Arc::clone(&tools),
            root.clone(),
            ended.clone(),
        );
        let once = listen.once;
        tokio::spawn(async move {
            let opened = tokio::time::timeout(OPENING, async {
                let tls = acceptor.accept(tcp).await?;
                let client = Client::of(tls.get_ref().1.peer_certificates());
                let (read, write) = tokio::io::split(tls);
                let mut read = BufReader::new(read);
                let line = first_line(&mut read).await?;
                Ok::<_, std::io::Error>((read, write, line, client))
            })
            .await;
            drop(opening);
            let (read, write, line, client) = match opened {
                Ok(Ok(opened)) => opened,
                Ok(Err(e)) => return tracing::warn!(%peer, %e, "a connection was refused"),
                Err(_) => return tracing::warn!(%peer, "a connection took too long to open"),
            };
            let (was_session, done) = handle(line, read, write, &root, &busy, tools, &client).await;
            if let Err(e) = &done {
                tracing::warn!(%peer, %e, "a connection failed");
            }
            if once && was_session {
                let _ = ended.send(()).await;
            }
        });
    }
}

/// The runner's one session: whether one is served, its workspace here, and the
/// TLS folder its commands never see.
struct Busy {
    on: AtomicBool,
    workspace: std::sync::Mutex<Option<PathBuf>>,
    /// The certificate subject of the host whose session is served: archives are for
    /// it alone.
    client: std::sync::Mutex<Option<String>>,
    tls_dir: PathBuf,
}

impl Busy {
    fn workspace(&self) -> Option<PathBuf> {
        crate::lock(&self.workspace).clone()
    }
}

/// Serves one opened connection (of the host showing `client`): whether it was a
/// session, and how it ended.
async fn handle<R, W>(
    line: String,
    read: BufReader<R>,
    mut write: W,
    root: &Path,
    busy: &Busy,
    tools: MakeTools,
    client: &Client,
) -> (bool, std::io::Result<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let first = match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(first) => first,
        Err(e) => return (false, Err(std::io::Error::other(e))),
    };
    // Archives only of the session being served: its workspace, or the folder it is
    // unpacked into.
    let path = |of_parent: bool| {
        let asked = first
            .get("path")
            .and_then(serde_json::Value::as_str)
            .and_then(|p| under(root, Path::new(p)));
        let ws = busy.workspace();
        let allowed = ws.as_deref().map(|w| {
            if of_parent {
                w.parent().unwrap_or(w)
            } else {
                w
            }
        });
        let same_host = crate::lock(&busy.client).as_deref() == Some(client.subject.as_str());
        match (asked, allowed) {
            (Some(asked), Some(allowed)) if asked == allowed && same_host => Ok(asked),
            _ => Err(std::io::Error::other(
                "no session of this client works in that folder",
            )),
        }
    };
    match first.get("op").and_then(serde_json::Value::as_str) {
        Some("init") => {
            if busy.on.swap(true, Ordering::AcqRel) {
                let refused = super::wire::to_line(&super::wire::Reply::InitFailed {
                    message: "this runner serves another session".into(),
                });
                let sent = async {
                    write.write_all(&refused).await?;
                    write.shutdown().await
                };
                return (false, sent.await);
            }
            // Who it serves, for the operator: each session's certificate differs
            // when the host mints one per session.
            eprintln!(
                "jianmu serve: a session for client certificate {} ({})",
                client.digest, client.subject
            );
            *crate::lock(&busy.client) = Some(client.subject.clone());
            let served = session(line, read, write, root, busy, tools).await;
            // What the session left here goes before the next one comes.
            let root = root.to_owned();
            let _ = tokio::task::spawn_blocking(move || wipe(&root)).await;
            *crate::lock(&busy.workspace) = None;
            *crate::lock(&busy.client) = None;
            busy.on.store(false, Ordering::Release);
            (true, served)
        }
        Some("put_archive") => {
            let dir = match path(true) {
                Ok(dir) => dir,
                Err(e) => return (false, Err(e)),
            };
            let done = put_archive(read, &dir).await;
            let reply = match &done {
                Ok(()) => serde_json::json!({"ok": true}),
                Err(e) => serde_json::json!({"ok": false, "message": e.to_string()}),
            };
            let sent = async {
                write.write_all(format!("{reply}\n").as_bytes()).await?;
                write.shutdown().await
            };
            (false, done.and(sent.await))
        }
        Some("get_archive") => match path(false) {
            Ok(dir) => (false, get_archive(&dir, write).await),
            Err(e) => (false, Err(e)),
        },
        _ => (false, Err(std::io::Error::other("unknown first request"))),
    }
}

/// One session: its `init` read, its workspace moved below the root (in the settings
/// the server sees, so every path it uses is the moved one), the TLS folder hidden
/// from its commands, then served as the stdio server serves.
async fn session<R, W>(
    line: String,
    read: BufReader<R>,
    write: W,
    root: &Path,
    busy: &Busy,
    tools: MakeTools,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let request: super::wire::Request =
        serde_json::from_str(&line).map_err(std::io::Error::other)?;
    let super::wire::Request::Init {
        config,
        warm,
        egress,
    } = request
    else {
        return Err(std::io::Error::other("the first request must be `init`"));
    };
    let workspace = under(root, config.workspace())
        .ok_or_else(|| std::io::Error::other("the workspace must be an absolute path"))?;
    std::fs::create_dir_all(&workspace)?;
    *crate::lock(&busy.workspace) = Some(workspace.clone());
    let config = hide(config.with_workspace(workspace), &busy.tls_dir);
    let init = super::wire::to_line(&super::wire::Request::Init {
        config,
        warm,
        egress,
    });
    // The moved `init`, then the rest, as the stdio server reads them.
    let input = std::io::Cursor::new(init).chain(read);
    super::serve::serve(input, write, move |config| {
        tools(super::serve::in_container(config))
    })
    .await
}

/// `config` with `path` in every isolated tool's `read_deny`.
fn hide(config: ToolConfig, path: &Path) -> ToolConfig {
    let path = path.to_string_lossy();
    super::serve::with_isolation(
        config,
        &["bash", "python_repl", "git", "lsp"],
        |isolation| {
            super::serve::push(isolation, "read_deny", &path);
        },
    )
}

/// Removes everything below `root` (the copies the last session kept there).
fn wipe(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let gone = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        if let Err(e) = gone {
            tracing::warn!(%e, path = %path.display(), "a session's file was not removed");
        }
    }
}

/// The first line of a connection, at most [`FIRST_LINE`] bytes.
async fn first_line<R: AsyncRead + Unpin>(read: &mut BufReader<R>) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut limited = (&mut *read).take(FIRST_LINE as u64 + 1);
    limited.read_until(b'\n', &mut line).await?;
    if line.len() > FIRST_LINE {
        return Err(std::io::Error::other("the first line is too long"));
    }
    if line.pop() != Some(b'\n') {
        return Err(std::io::Error::other(
            "the connection ended before its first line",
        ));
    }
    String::from_utf8(line).map_err(std::io::Error::other)
}

/// The host path `path` served below `root`: `None` unless it is absolute and plain.
fn under(root: &Path, path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut out = root.to_owned();
    for part in path.components() {
        match part {
            Component::RootDir => {}
            Component::Normal(name) => out.push(name),
            _ => return None,
        }
    }
    Some(out)
}

/// Unpacks the tar arriving on `read` into `dir` (made if missing).
async fn put_archive<R: AsyncRead + Unpin + Send + 'static>(
    read: R,
    dir: &Path,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    let dir = dir.to_owned();
    let unpacking = tokio::task::spawn_blocking(move || {
        let mut archive = tar::Archive::new(Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        });
        archive.set_preserve_permissions(true);
        archive.set_overwrite(true);
        archive.unpack(&dir)
    });
    let mut read = read;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut read, &mut buf).await?;
        if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
            break;
        }
    }
    drop(tx);
    unpacking.await.map_err(std::io::Error::other)?
}

/// Writes the folder `dir` as a tar with one top folder to `write`.
async fn get_archive<W: AsyncWrite + Unpin + Send + 'static>(
    dir: &Path,
    mut write: W,
) -> std::io::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let dir = dir.to_owned();
    let packing = tokio::task::spawn_blocking(move || {
        let name = dir
            .file_name()
            .map_or_else(|| "workspace".into(), |n| n.to_owned());
        pack(&dir, Path::new(&name), Sender { tx })
    });
    while let Some(chunk) = rx.recv().await {
        write.write_all(&chunk).await?;
    }
    // A tar cut short by a failure must not end cleanly: the host would take it for
    // the whole workspace. The connection is dropped without TLS's close instead.
    packing.await.map_err(std::io::Error::other)??;
    write.shutdown().await
}

/// Deepest folder packed: each level below the top holds one open handle meanwhile.
const PACK_DEPTH: usize = 256;

/// Writes the folder `dir` to `out` as a tar of its folders and regular files under
/// one top folder `top`. It is walked one name at a time from open folder handles
/// that never follow a link, and each file is read from the handle it was opened by,
/// so a command swapping a folder for a link meanwhile gets nothing outside packed.
/// Links go as links (the host takes only folders and files, and names the rest);
/// devices, sockets and anything deeper than [`PACK_DEPTH`] are left out.
fn pack(dir: &Path, top: &Path, out: impl std::io::Write) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let header = |kind: tar::EntryType, st: &rustix::fs::Stat, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(st.st_mode & 0o777);
        h.set_uid(u64::from(st.st_uid));
        h.set_gid(u64::from(st.st_gid));
        h.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        h
    };
    let mut builder = tar::Builder::new(out);
    let root = Arc::new(rustix::fs::open(dir, folder, Mode::empty())?);
    // Folders to pack: the open folder holding one (or itself, with no name), its path
    // in the archive, its depth. Each is opened when its turn comes, so the handles
    // open at once are its folder's ancestors, not its siblings.
    let mut stack = vec![(root, None, top.to_owned(), 0usize)];
    while let Some((parent, child, name, depth)) = stack.pop() {
        let fd = match child {
            None => parent,
            Some(child) => match rustix::fs::openat(&*parent, &child, folder, Mode::empty()) {
                Ok(fd) => Arc::new(fd),
                Err(_) => continue,
            },
        };
        // A folder removed meanwhile is left out, not the whole copy.
        let (Ok(st), Ok(entries)) = (rustix::fs::fstat(&*fd), rustix::fs::Dir::read_from(&*fd))
        else {
            continue;
        };
        let mut h = header(tar::EntryType::Directory, &st, 0);
        builder.append_data(&mut h, &name, std::io::empty())?;
        for entry in entries {
            let Ok(entry) = entry else {
                break;
            };
            let child = entry.file_name();
            if matches!(child.to_bytes(), b"." | b"..") {
                continue;
            }
            let path = name.join(std::ffi::OsStr::from_bytes(child.to_bytes()));
            let Ok(st) = rustix::fs::statat(&*fd, child, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory if depth < PACK_DEPTH => {
                    stack.push((Arc::clone(&fd), Some(child.to_owned()), path, depth + 1));
                }
                FileType::RegularFile => {
                    let Ok(f) = rustix::fs::openat(&*fd, child, file, Mode::empty()) else {
                        continue;
                    };
                    let st = rustix::fs::fstat(&f)?;
                    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                        continue;
                    }
                    let size = u64::try_from(st.st_size).unwrap_or(0);
                    let mut h = header(tar::EntryType::Regular, &st, size);
                    // A file that shrinks meanwhile is padded, one that grows is cut.
                    let data = std::io::Read::chain(
                        std::io::Read::take(std::fs::File::from(f), size),
                        std::io::repeat(0),
                    );
                    builder.append_data(&mut h, &path, std::io::Read::take(data, size))?;
                }
                // A link as a link (the host names it as left out), never followed.
                FileType::Symlink => {
                    let Ok(target) = rustix::fs::readlinkat(&*fd, child, Vec::new()) else {
                        continue;
                    };
                    let mut h = header(tar::EntryType::Symlink, &st, 0);
                    let target = std::ffi::OsStr::from_bytes(target.as_bytes());
                    builder.append_link(&mut h, &path, target)?;
                }
                _ => {}
            }
        }
    }
    builder.into_inner().map(drop)
}

/// The blocking end of an archive going in.
struct Chunks {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => (self.chunk, self.at) = (chunk, 0),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The blocking end of an archive going out.
struct Sender {
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
}

impl std::io::Write for Sender {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tx
            .blocking_send(buf.to_vec())
            .map_err(|_| std::io::Error::other("the host went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A client's certificate as the runner knows it.
struct Client {
    /// Its subject (`CN=jianmu session …`): a session's archives come from it.
    subject: String,
    /// `sha256:` and the first 16 bytes of its digest, in hex.
    digest: String,
}

impl Client {
    fn of(certs: Option<&[CertificateDer<'_>]>) -> Self {
        let Some(cert) = certs.and_then(<[_]>::first) else {
            return Self {
                subject: String::new(),
                digest: "(none)".into(),
            };
        };
        let subject = x509_parser::parse_x509_certificate(cert.as_ref())
            .map(|(_, parsed)| parsed.subject().to_string())
            .unwrap_or_default();
        let digest = ring::digest::digest(&ring::digest::SHA256, cert.as_ref());
        let hex: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Self {
            subject,
            digest: format!("sha256:{hex}"),
        }
    }
}

/// The runner's TLS: TLS 1.3, its certificate, and client certificates required to
/// chain to `dir/ca.pem`.
fn server_config(dir: &Path) -> std::io::Result<rustls::ServerConfig> {
    let (roots, certs, key) = tls_files(dir)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .map_err(std::io::Error::other)?;
    rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(std::io::Error::other)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(std::io::Error::other)
}

/// The host's TLS towards a runner: TLS 1.3, the runner's certificate checked against
/// `ca`, and this host's certificate shown.
pub(crate) fn client_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> std::io::Result<rustls::ClientConfig> {
    let (certs, key) = cert_and_key(cert, key)?;
    client_config_with(roots(ca)?, certs, key)
}

/// [`client_config`] trusting `roots` and showing the certificate `certs` with its
/// `key`.
pub(crate) fn client_config_with(
    roots: rustls::RootCertStore,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> std::io::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(std::io::Error::other)
}

type TlsFiles = (
    rustls::RootCertStore,
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
);

fn tls_files(dir: &Path) -> std::io::Result<TlsFiles> {
    let roots = roots(&dir.join("ca.pem"))?;
    let (certs, key) = cert_and_key(&dir.join("cert.pem"), &dir.join("key.pem"))?;
    Ok((roots, certs, key))
}

pub(crate) fn roots(ca: &Path) -> std::io::Result<rustls::RootCertStore> {
    let named = |e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("cannot read {}: {e}", ca.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| named(&e))? {
        roots
            .add(cert.map_err(|e| named(&e))?)
            .map_err(|e| named(&e))?;
    }
    if roots.is_empty() {
        return Err(named(&"no certificate in it"));
    }
    Ok(roots)
}

fn cert_and_key(
    cert: &Path,
    key: &Path,
) -> std::io::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let named = |path: &Path, e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("cannot read {}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| named(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| named(cert, &e))?;
    if certs.is_empty() {
        return Err(named(cert, &"no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| named(key, &e))?;
    Ok((certs, key))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{pack, under};

    /// The folders and files of a tar, by path, with their contents.
    fn listed(tar: &[u8]) -> Vec<(String, String)> {
        let mut archive = tar::Archive::new(tar);
        let mut out = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            out.push((path, text));
        }
        out.sort();
        out
    }

    #[test]
    fn a_pack_holds_folders_files_and_links_as_links() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::write(ws.join("a/b/f.txt"), "deep").unwrap();
        std::fs::write(ws.join("top.txt"), "top").unwrap();
        std::fs::write(dir.path().join("secret"), "SECRET").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("dirlink")).unwrap();
        let mut tar = Vec::new();
        pack(&ws, Path::new("ws"), &mut tar).unwrap();
        let names: Vec<String> = listed(&tar)
            .into_iter()
            .map(|(p, t)| format!("{p}={t}"))
            .collect();
        assert_eq!(
            names,
            [
                "ws=",
                "ws/a=",
                "ws/a/b=",
                "ws/a/b/f.txt=deep",
                "ws/dirlink=",
                "ws/link=",
                "ws/top.txt=top"
            ],
        );
    }

    /// A folder swapped for a link to a secret folder, over and over while the
    /// workspace is packed: the secret never goes into an archive.
    #[test]
    fn a_folder_swapped_for_a_link_mid_pack_packs_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let secret = dir.path().join("secret");
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(ws.join("d/f"), "plain").unwrap();
        std::fs::write(secret.join("f"), "SECRET").unwrap();
        for i in 0..50 {
            std::fs::write(ws.join(format!("d/pad{i}")), "x").unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (ws, secret, stop) = (ws.clone(), secret.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let link = ws.join("link.tmp");
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&secret, &link).unwrap();
                // `d` is always there: a folder, or a link to the secret folder.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        ws.join("d"),
                        rustix::fs::CWD,
                        &link,
                        rustix::fs::RenameFlags::EXCHANGE,
                    );
                }
            })
        };
        let mut packed = 0;
        for _ in 0..300 {
            let mut tar = Vec::new();
            if pack(&ws, Path::new("ws"), &mut tar).is_err() {
                continue;
            }
            packed += 1;
            for (path, text) in listed(&tar) {
                assert!(!text.contains("SECRET"), "{path} came from outside");
            }
        }
        assert!(packed > 100, "only {packed} packs finished");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
    }

    #[test]
    fn host_paths_are_served_below_the_root_and_only_plain_ones() {
        let root = Path::new("/srv/r");
        assert_eq!(
            under(root, Path::new("/home/a/ws")).unwrap(),
            Path::new("/srv/r/home/a/ws")
        );
        assert_eq!(under(root, Path::new("/")).unwrap(), root);
        for bad in ["relative/ws", "/home/../etc", "/home/./a/../../x"] {
            assert!(under(root, Path::new(bad)).is_none(), "{bad}");
        }
    }
}
