//! `jianmu mcp --http ADDR`: the tools as an MCP service over Streamable HTTP.
//!
//! Routes: `/mcp` (the MCP endpoint, rmcp's Streamable HTTP service), `GET /healthz`
//! (no token needed), `GET /metrics` (Prometheus text). Checks before a request
//! reaches the endpoint, in order: a `Host` that is not allowed gets 403 on every
//! route (DNS rebinding: by default, on a loopback address, only loopback names), a
//! browser `Origin` that is neither `--allow-origin`'s nor of an allowed host 403, a missing or wrong bearer token 401, a
//! declared body over `max_body_bytes` 413 at once, a body not sent within
//! `body_timeout_secs` 408, a new session past the limit 503 (with `Retry-After`, also
//! when the limit is reached while it opens), a `DELETE` of an unknown session 404.
//! rmcp then checks the protocol.
//!
//! Every client session (a handshake-era client's `Mcp-Session-Id`; each request of
//! a client on the stateless 2026-07-28 revision) gets tools of its own: its own
//! interpreters, shell sessions, jobs, with the Docker sandbox its own container, and
//! with `--workspace-per-session` its own folder. They are released when the session
//! is closed (`DELETE`), expires, or the server stops.
//!
//! SIGTERM: the listener closes, calls still running get the grace period, then
//! every session is cancelled and released, and the process exits 0.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use jianmu_runtime::Runtime;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::principals::{Known, Principal, Tokens};
use super::scopes::{ARRIVAL, Arrival, Outcome, Scopes};
use super::{Catalog, Server};
use crate::config::HttpLimits;

/// How the service was asked to serve (`jianmu mcp --http`'s flags).
#[derive(Debug)]
pub struct Options {
    addr: SocketAddr,
    /// The principals and their bearer tokens (`None`: no token; loopback only).
    tokens: Option<Tokens>,
    /// `--token-file`, read again on SIGHUP.
    token_file: Option<PathBuf>,
    limits: HttpLimits,
    /// `--workspace-per-session DIR`.
    per_session: Option<PathBuf>,
    /// `--workspace-per-principal DIR` (or `principal_workspaces`).
    per_principal: Option<PathBuf>,
    /// `[mcp] defer`.
    offer: crate::Offer,
}

/// `dir`, made if missing, as an absolute path.
fn folder(dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))
}

impl Options {
    /// The principals of `--token-file` (a line `NAME TOKEN` each), else
    /// `JIANMU_MCP_TOKEN` as `default`; refuses a short token and a non-loopback
    /// address without one.
    ///
    /// # Errors
    /// A token file that cannot be read, a short token, a non-loopback address
    /// without one, an origin that is not a URL, both workspace modes, a folder
    /// that cannot be made.
    pub fn new(
        addr: SocketAddr,
        token_file: Option<&std::path::Path>,
        mut limits: HttpLimits,
        allow_origin: &[String],
        per_session: Option<PathBuf>,
        per_principal: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let tokens = match token_file {
            Some(path) => Some(super::principals::read(path)?),
            None => std::env::var("JIANMU_MCP_TOKEN")
                .ok()
                .map(|t| Tokens::single(t.trim().to_owned()))
                .transpose()?,
        };
        if tokens.is_none() && !addr.ip().is_loopback() {
            bail!(
                "refusing to serve on {addr} without a token: set JIANMU_MCP_TOKEN or --token-file, or bind to 127.0.0.1"
            );
        }
        limits.allowed_origins.extend(allow_origin.iter().cloned());
        for origin in &limits.allowed_origins {
            if !(origin.starts_with("http://") || origin.starts_with("https://")) {
                bail!("allowed origin `{origin}` must start with http:// or https://");
            }
        }
        let per_principal = per_principal.or_else(|| limits.principal_workspaces.clone());
        if per_session.is_some() && per_principal.is_some() {
            bail!(
                "a workspace per session and a workspace per principal exclude each other: choose one"
            );
        }
        let per_session = per_session.as_deref().map(folder).transpose()?;
        let per_principal = per_principal.as_deref().map(folder).transpose()?;
        Ok(Self {
            addr,
            tokens,
            token_file: token_file.map(std::path::Path::to_owned),
            limits,
            per_session,
            per_principal,
            offer: crate::Offer::default(),
        })
    }

    /// Leaves the tools `offer.deferral` names out of `tools/list`, for `tool_search`
    /// to find ([`crate::Deferral`]), and serves skills or not.
    #[must_use]
    pub fn offering(mut self, offer: crate::Offer) -> Self {
        self.offer = offer;
        self
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// How long a POST's event stream is gathered before it is sent as it comes.
const GATHER: Duration = Duration::from_millis(20);

/// A POST's event stream that ends within [`GATHER`] (a quick call's answer), sent as
/// one body with its length: one write instead of one per event and one for the
/// end. A stream still open by then (a long call: progress, keep-alive comments) goes
/// on as a stream, after what was gathered.
async fn coalesced(response: Response<Body>) -> Response<Body> {
    let streams = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !streams {
        return response;
    }
    let (mut parts, mut body) = response.into_parts();
    let mut gathered = bytes::BytesMut::new();
    let deadline = tokio::time::sleep(GATHER);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        gathered.extend_from_slice(&data);
                    }
                }
                // The stream ended (an error never happens: the body is infallible).
                _ => {
                    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
                    return Response::from_parts(parts, Full::new(gathered.freeze()).boxed());
                }
            },
            () = &mut deadline => break,
        }
    }
    let rest = Prefixed {
        first: Some(gathered.freeze()).filter(|b| !b.is_empty()),
        rest: body,
    };
    Response::from_parts(parts, rest.boxed())
}

/// A body that sends `first`, then `rest`.
struct Prefixed {
    first: Option<Bytes>,
    rest: Body,
}

impl hyper::body::Body for Prefixed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(first))));
        }
        std::pin::Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// A 404 for a session that is not open (or is another principal's).
fn no_session() -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        "not found: no such session (it was closed or expired)\n",
    )
}

/// A 503 for a new session past the limit, with when to retry.
fn full(limit: usize) -> Response<Body> {
    refused(format!(
        "the server has its limit of {limit} open sessions; retry later"
    ))
}

/// A 503 saying `why`, with when to retry.
fn refused(why: String) -> Response<Body> {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("5"),
    );
    response
}

/// Everything a request is handled with.
struct App {
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    scopes: Arc<Scopes>,
    tokens: Known,
    origins: Vec<String>,
    /// The `Host` values accepted (any when empty).
    hosts: Vec<String>,
    max_body: usize,
    body_deadline: Duration,
    catalog: Catalog,
    runtime: Runtime,
}

/// A `Host` value or an allowed entry as (name, port): `[::1]:8080`, `[::1]`, `::1`,
/// `name:8080`, `name`; names lowercased.
fn authority(text: &str) -> Option<(String, Option<String>)> {
    let text = text.trim().to_ascii_lowercase();
    if let Some(rest) = text.strip_prefix('[') {
        let (name, tail) = rest.split_once(']')?;
        let port = match tail {
            "" => None,
            _ => Some(tail.strip_prefix(':')?.to_owned()),
        };
        return Some((name.to_owned(), port));
    }
    match text.split_once(':') {
        // One colon: a name and a port; more: a bare IPv6 address.
        Some((name, port)) if !port.contains(':') => Some((name.to_owned(), Some(port.to_owned()))),
        _ => Some((text, None)),
    }
}

/// Whether `host` (a `Host` header) is one of `allowed` (names, or `name:port`); any
/// when `allowed` is empty.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Some((name, port)) = authority(host) else {
        return false;
    };
    allowed
        .iter()
        .filter_map(|a| authority(a))
        .any(|(a_name, a_port)| {
            a_name == name && a_port.is_none_or(|p| port.as_deref() == Some(p.as_str()))
        })
}

impl App {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let path = path.as_str();
        let metrics = &self.catalog.metrics;
        // Against DNS rebinding, on every route: a page of another name that resolves
        // to this address must not reach the endpoint, the metrics or the health check.
        let host = request
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.to_string()));
        if !self.hosts.is_empty()
            && !host
                .as_deref()
                .is_some_and(|h| host_allowed(h, &self.hosts))
        {
            metrics.refused("host");
            return text(
                StatusCode::FORBIDDEN,
                "forbidden: this Host is not allowed (the server's allowed_hosts)\n",
            );
        }
        match (request.method(), path) {
            (&Method::GET, "/healthz") => return text(StatusCode::OK, "ok\n"),
            (_, "/healthz") => return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n"),
            (_, "/mcp" | "/metrics") => {}
            _ => {
                return text(
                    StatusCode::NOT_FOUND,
                    "not found: the MCP endpoint is /mcp\n",
                );
            }
        }
        if let Some(origin) = request.headers().get(hyper::header::ORIGIN)
            && !self.origin_allowed(origin.as_bytes())
        {
            metrics.refused("origin");
            return text(
                StatusCode::FORBIDDEN,
                "forbidden: this Origin is not allowed (the server's --allow-origin)\n",
            );
        }
        let Some(principal) = self.authorized(&request) else {
            metrics.refused("unauthorized");
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "unauthorized: send `Authorization: Bearer TOKEN` with the server's token\n",
            );
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return response;
        };
        if path == "/metrics" {
            if request.method() != Method::GET {
                return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
            }
            let mut response = text(StatusCode::OK, metrics.render());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            return response;
        }
        let session_id = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A protocol session is its principal's: to any other, it does not exist.
        if let Some(id) = &session_id
            && !self.scopes.may_use(id, &principal)
        {
            metrics.refused("principal");
            return no_session();
        }
        let delete = request.method() == Method::DELETE;
        if delete && let Some(id) = &session_id {
            use rmcp::transport::streamable_http_server::session::SessionManager as _;
            let id: rmcp::transport::streamable_http_server::session::SessionId =
                id.as_str().into();
            if !self.sessions.has_session(&id).await.unwrap_or(false) {
                return no_session();
            }
        }
        let is_post = request.method() == Method::POST;
        let (mut request, method) = if is_post {
            match self.body(request).await {
                Ok(read) => read,
                Err(response) => return response,
            }
        } else {
            (request.map(http_body_util::BodyExt::boxed), None)
        };
        // An `initialize` without a session id opens a protocol session; any other
        // request without one stands alone and runs in its principal's scope.
        let opens = session_id.is_none() && method.as_deref() == Some("initialize");
        if opens && self.runtime.is_full() {
            metrics.refused("sessions");
            return full(self.runtime.settings().max_sessions);
        }
        let arrival = Arrival {
            principal,
            opens,
            outcome: Arc::default(),
        };
        let outcome = Arc::clone(&arrival.outcome);
        // The one context of the request: in its extensions for the tool call's
        // handler, and on the task for the service's server factory, which rmcp calls
        // without the request.
        request.extensions_mut().insert(arrival.clone());
        let mut response = ARRIVAL.scope(arrival, self.mcp.handle(request)).await;
        match std::mem::take(
            &mut *outcome
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ) {
            Outcome::Opened(held) => {
                if let Some(id) = response
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                {
                    held.bind(id);
                }
            }
            Outcome::Refused(why) => {
                metrics.refused("sessions");
                return refused(why);
            }
            Outcome::Nothing => {}
        }
        // A closed session: say so with the status clients look for.
        if delete && response.status() == StatusCode::ACCEPTED {
            response = Response::new(Full::new(Bytes::new()).boxed());
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        if is_post {
            return coalesced(response).await;
        }
        response
    }

    /// The request with its body read whole: refused at once when it declares more
    /// than `max_body_bytes` (413), cut at that size, and given `body_timeout_secs` to
    /// arrive (408).
    /// With the request, its method when it has one.
    async fn body(
        &self,
        request: Request<Incoming>,
    ) -> Result<(Request<BoxBody<Bytes, hyper::Error>>, Option<String>), Response<Body>> {
        let too_big = || {
            text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "payload too large: at most {} bytes (max_body_bytes)\n",
                    self.max_body
                ),
            )
        };
        let declared = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body as u64) {
            self.catalog.metrics.refused("body");
            return Err(too_big());
        }
        let (parts, body) = request.into_parts();
        let limited = http_body_util::Limited::new(body, self.max_body);
        match tokio::time::timeout(self.body_deadline, limited.collect()).await {
            Ok(Ok(collected)) => {
                let bytes = collected.to_bytes();
                let method = match super::frame::precheck(&bytes) {
                    Ok(method) => method,
                    Err(answer) => {
                        let mut response =
                            Response::new(Full::new(Bytes::from(answer.to_string())).boxed());
                        *response.status_mut() = StatusCode::BAD_REQUEST;
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        return Err(response);
                    }
                };
                Ok((
                    Request::from_parts(
                        parts,
                        Full::new(bytes).map_err(|never| match never {}).boxed(),
                    ),
                    method,
                ))
            }
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                self.catalog.metrics.refused("body");
                Err(too_big())
            }
            Ok(Err(_)) => Err(text(
                StatusCode::BAD_REQUEST,
                "bad request: the body could not be read\n",
            )),
            Err(_) => {
                self.catalog.metrics.refused("body");
                Err(text(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "request timeout: the body did not arrive within {} s\n",
                        self.body_deadline.as_secs()
                    ),
                ))
            }
        }
    }

    /// The principal whose bearer token the request carries (`default` when no token
    /// is needed); `None`: unauthorized.
    fn authorized(&self, request: &Request<Incoming>) -> Option<Principal> {
        let Some(tokens) = self.tokens.get() else {
            return Some(Principal("default".into()));
        };
        let given = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(hyper::header::HeaderValue::as_bytes)?;
        let scheme = given.get(..7)?;
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return None;
        }
        tokens.find(given[7..].trim_ascii())
    }

    /// An origin given with `--allow-origin`, or a page of the server's own
    /// allowed hosts (on a loopback address: `http://localhost:PORT` and the like).
    fn origin_allowed(&self, origin: &[u8]) -> bool {
        let origin = String::from_utf8_lossy(origin);
        let origin = origin.trim().trim_end_matches('/');
        let own_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|host| {
                !self.hosts.is_empty() && !host.contains('/') && host_allowed(host, &self.hosts)
            });
        own_host
            || self
                .origins
                .iter()
                .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }
}

impl Options {
    /// Whether a token file names the principals (SIGHUP then reloads it).
    pub fn reloads_tokens(&self) -> bool {
        self.token_file.is_some()
    }
}

/// Serves sessions opened from `session` until `stop` resolves, then shuts down
/// gracefully (see the module docs).
///
/// # Errors
/// The address cannot be bound, or the runtime cannot be made.
pub async fn serve(
    mut session: jianmu_runtime::SessionSettings,
    options: Options,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let limits = options.limits.clone();
    session.max_sessions = limits.max_protocol_sessions;
    session.own_folders = options.per_session.clone();
    // No principal's commands see the tokens or the other principals' folders.
    session.hidden.extend(options.token_file.iter().cloned());
    session.hidden.extend(options.per_principal.iter().cloned());
    let runtime = Runtime::new(session)?;
    // The first clients' sessions take warm containers.
    runtime.fill_pool();
    let mut catalog = Catalog::new(runtime.tool_names());
    catalog.deferral = Arc::new(options.offer.deferral.clone());
    catalog.skills = options.offer.skills;
    let scopes = Scopes::new(
        runtime.clone(),
        catalog.clone(),
        &limits,
        options.per_principal.clone(),
    );
    let stop_sessions = CancellationToken::new();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(Duration::from_secs(limits.session_idle_secs));
    // Answers are not replayed to a client that lost its stream (no priming event, no
    // cache of finished streams): a tool call is not resumed but answered once, and
    // the cache would be scanned on every message.
    manager.session_config.sse_retry = None;
    manager.session_config.completed_cache_ttl = Duration::ZERO;
    let mut config = StreamableHttpServerConfig::default()
        // A stateless request's single answer goes back as JSON, not as a stream (a
        // call that reports progress still gets a stream).
        .with_json_response(true)
        .with_max_request_body_bytes(limits.max_body_bytes)
        .with_sse_retry(None)
        // Origins are checked before the endpoint (see `App::origin_allowed`).
        .with_cancellation_token(stop_sessions.clone());
    // Checked on every route before the endpoint (see `App::handle`), and by rmcp.
    let hosts: Vec<String> = if !limits.allowed_hosts.is_empty() {
        limits.allowed_hosts.clone()
    } else if options.addr.ip().is_loopback() {
        ["localhost", "127.0.0.1", "::1", "[::1]"]
            .map(str::to_owned)
            .to_vec()
    } else {
        Vec::new()
    };
    config = if hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(hosts.clone())
    };
    let opener = Arc::clone(&scopes);
    let manager = Arc::new(manager);
    let mcp = StreamableHttpService::new(move || opener.server(), Arc::clone(&manager), config);
    let app = Arc::new(App {
        mcp,
        sessions: manager,
        scopes: Arc::clone(&scopes),
        tokens: Known::new(options.tokens.clone()),
        origins: limits.allowed_origins.clone(),
        hosts,
        max_body: limits.max_body_bytes,
        body_deadline: Duration::from_secs(limits.body_timeout_secs),
        catalog: catalog.clone(),
        runtime: runtime.clone(),
    });
    // SIGHUP reads the token file again; sessions stay open.
    if let Some(path) = options.token_file.clone() {
        let app = Arc::downgrade(&app);
        tokio::spawn(async move {
            let Ok(mut hangups) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            else {
                return;
            };
            while hangups.recv().await.is_some() {
                let Some(app) = app.upgrade() else { return };
                match super::principals::read(&path) {
                    Ok(tokens) => {
                        eprintln!(
                            "jianmu mcp: reloaded {} principal(s) from {}",
                            tokens.len(),
                            path.display()
                        );
                        app.tokens.set(tokens);
                    }
                    Err(e) => eprintln!("jianmu mcp: kept the tokens in force: {e:#}"),
                }
            }
        });
    }
    // Idle connections hold descriptors: allow as many as the system lets this user.
    if let Err(e) = jianmu_process::raise_open_files_limit() {
        tracing::warn!("cannot raise the open-files limit: {e}");
    }

    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("cannot listen on {}", options.addr))?;
    let local = listener.local_addr()?;
    eprintln!("jianmu mcp: serving MCP over Streamable HTTP at http://{local}/mcp");
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // At most `max_connections` served at once: more wait in the kernel's queue, so a
    // flood of idle sockets neither grows memory nor exhausts descriptors (each one
    // closes after 10 s without a complete request head).
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit,
            () = &mut stop => break,
        };
        let Ok(permit) = permit else { break };
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, do not spin.
                        tracing::warn!(%e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let app = Arc::clone(&app);
                let service = hyper::service::service_fn(move |request| {
                    let app = Arc::clone(&app);
                    async move { Ok::<_, Infallible>(app.handle(request).await) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                    drop(permit);
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    // Calls still running get the grace period to answer.
    let grace = Duration::from_secs(limits.shutdown_grace_secs);
    let _ = tokio::time::timeout(grace, catalog.metrics.calls_done()).await;
    // Then the calls left are cancelled and answered so, and every session ends,
    // its state released.
    catalog.stopping.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), catalog.metrics.calls_done()).await;
    // A moment for the answers to be written.
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop_sessions.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    drop(app);
    scopes.close_all().await;
    drop(scopes);
    // Sessions end as their workers notice the cancellation; each one closes (its
    // processes, container and folder released) when its last server is dropped.
    let _ = tokio::time::timeout(Duration::from_secs(5), runtime.sessions_released()).await;
    runtime.shutdown(Duration::from_secs(15)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts_are_matched_by_name_and_port() {
        let loopback = ["localhost", "127.0.0.1", "::1", "[::1]"].map(str::to_owned);
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:9",
            "[::1]",
        ] {
            assert!(host_allowed(ok, &loopback), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.2",
            "[::2]:9",
            "localhost.evil",
            "",
            "[::1",
        ] {
            assert!(!host_allowed(bad, &loopback), "{bad}");
        }
        let pinned = ["api.example:443".to_owned()];
        assert!(host_allowed("api.example:443", &pinned));
        assert!(!host_allowed("api.example:444", &pinned));
        assert!(!host_allowed("api.example", &pinned));
        assert!(host_allowed("anything", &[]));
    }
}
