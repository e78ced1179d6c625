//! `jianmu mcp --http ADDR`: the tools as an MCP service over Streamable HTTP.
//!
//! Routes: `/mcp` (the MCP endpoint, rmcp's Streamable HTTP service), `GET /healthz`
//! (no token needed), `GET /metrics` (Prometheus text). Checks before a request
//! reaches the endpoint, in order: a browser `Origin` that is not allowed gets 403,
//! a missing or wrong bearer token 401, a new session past the limit 503. rmcp then
//! checks `Host` (DNS rebinding), the body size (413) and the protocol.
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
use subtle::ConstantTimeEq as _;
use tokio_util::sync::CancellationToken;

use super::{Catalog, Server};
use crate::config::HttpLimits;
use crate::settings::Settings;

/// The shortest token accepted.
const MIN_TOKEN_LEN: usize = 16;

/// How `jianmu mcp --http` was asked to serve.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) addr: SocketAddr,
    /// The bearer token (`None`: no token; loopback only).
    pub(crate) token: Option<String>,
    pub(crate) limits: HttpLimits,
    /// `--workspace-per-session DIR`.
    pub(crate) per_session: Option<PathBuf>,
}

impl Options {
    /// The token from `--token-file`, else `JIANMU_MCP_TOKEN`; refuses a short one
    /// and a non-loopback address without one.
    pub(crate) fn new(
        addr: SocketAddr,
        token_file: Option<&std::path::Path>,
        mut limits: HttpLimits,
        allow_origin: &[String],
        per_session: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let token = match token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the token file {}", path.display()))?;
                Some(text.lines().next().unwrap_or("").trim().to_owned())
            }
            None => std::env::var("JIANMU_MCP_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned()),
        };
        if let Some(t) = &token
            && t.len() < MIN_TOKEN_LEN
        {
            bail!(
                "the MCP token must be at least {MIN_TOKEN_LEN} characters (e.g. `openssl rand -hex 32`)"
            );
        }
        if token.is_none() && !addr.ip().is_loopback() {
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
        let per_session = match per_session {
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                Some(
                    dir.canonicalize()
                        .with_context(|| format!("cannot resolve {}", dir.display()))?,
                )
            }
            None => None,
        };
        Ok(Self {
            addr,
            token,
            limits,
            per_session,
        })
    }
}

/// Opens each new client session.
struct Opener {
    catalog: Catalog,
    runtime: Runtime,
}

impl Opener {
    /// A new session's server, or an error at the session limit.
    fn open(&self) -> std::io::Result<Server> {
        let session = self.runtime.open().map_err(std::io::Error::other)?;
        let metrics = &self.catalog.metrics;
        metrics.sessions_open.inc();
        metrics.sessions_total.inc();
        let counted = Counted(Arc::clone(metrics));
        Ok(Server::session(
            self.catalog.clone(),
            Arc::new(session),
            Some(Arc::new(counted)),
        ))
    }
}

/// A session's place in the open-sessions gauge, given back when its last server is
/// dropped (its session then closes in the background).
struct Counted(Arc<super::metrics::Metrics>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.sessions_open.dec();
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

/// Everything a request is handled with.
struct App {
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    token: Option<String>,
    origins: Vec<String>,
    catalog: Catalog,
    runtime: Runtime,
}

impl App {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        let metrics = &self.catalog.metrics;
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
        if !self.authorized(&request) {
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
        }
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
        // A POST without a session id opens one (or is a stateless request, which
        // holds tools while it runs).
        if request.method() == Method::POST
            && !request.headers().contains_key("mcp-session-id")
            && self.runtime.is_full()
        {
            metrics.refused("sessions");
            let mut response = text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server has its limit of {} open sessions; retry later\n",
                    self.runtime.settings().max_sessions
                ),
            );
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("5"),
            );
            return response;
        }
        let delete = request.method() == Method::DELETE;
        let mut response = self.mcp.handle(request).await;
        // A closed session: say so with the status clients look for.
        if delete && response.status() == StatusCode::ACCEPTED {
            response = Response::new(Full::new(Bytes::new()).boxed());
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        response
    }

    fn authorized(&self, request: &Request<Incoming>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(hyper::header::HeaderValue::as_bytes)
        else {
            return false;
        };
        let Some(scheme) = given.get(..7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ")
            && bool::from(given[7..].trim_ascii().ct_eq(token.as_bytes()))
    }

    fn origin_allowed(&self, origin: &[u8]) -> bool {
        let origin = String::from_utf8_lossy(origin);
        let origin = origin.trim().trim_end_matches('/');
        self.origins
            .iter()
            .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }
}

/// Serves until `stop` resolves, then shuts down gracefully (see the module docs).
pub(crate) async fn serve(
    settings: Settings,
    options: Options,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let limits = options.limits.clone();
    let specs = jianmu_runtime::tool_specs(&settings.tools)
        .map_err(|e| anyhow::anyhow!(jianmu_tool_core::error_chain(&e)))?;
    let mut session = settings.session()?;
    session.max_sessions = limits.max_sessions;
    session.own_folders = options.per_session.clone();
    let runtime = Runtime::new(session)?;
    // The first clients' sessions take warm containers.
    runtime.fill_pool();
    let catalog = Catalog::new(&specs, runtime.policy());
    let sessions = Arc::new(Opener {
        catalog: catalog.clone(),
        runtime: runtime.clone(),
    });
    let stop_sessions = CancellationToken::new();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(Duration::from_secs(limits.session_idle_secs));
    // Answers are not replayed to a client that lost its stream (no priming event, no
    // cache of finished streams): a tool call is not resumed but answered once, and
    // the cache would be scanned on every message.
    manager.session_config.sse_retry = None;
    manager.session_config.completed_cache_ttl = Duration::ZERO;
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(limits.max_body_bytes)
        .with_sse_retry(None)
        .with_cancellation_token(stop_sessions.clone())
        .with_allowed_origins(limits.allowed_origins.clone())
        .enforce_origin_validation();
    config = if !limits.allowed_hosts.is_empty() {
        config.with_allowed_hosts(limits.allowed_hosts.clone())
    } else if options.addr.ip().is_loopback() {
        config.with_allowed_hosts(["localhost", "127.0.0.1", "::1", "[::1]"])
    } else {
        config.disable_allowed_hosts()
    };
    let opener = Arc::clone(&sessions);
    let mcp = StreamableHttpService::new(move || opener.open(), Arc::new(manager), config);
    let app = Arc::new(App {
        mcp,
        token: options.token.clone(),
        origins: limits.allowed_origins.clone(),
        catalog: catalog.clone(),
        runtime: runtime.clone(),
    });

    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("cannot listen on {}", options.addr))?;
    let local = listener.local_addr()?;
    eprintln!("jianmu mcp: serving MCP over Streamable HTTP at http://{local}/mcp");
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
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
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    // Calls still running get the grace period to answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(limits.shutdown_grace_secs);
    while catalog.metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Then the calls left are cancelled and answered so, and every session ends,
    // its state released.
    catalog.stopping.cancel();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while catalog.metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A moment for the answers to be written.
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop_sessions.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    drop(app);
    drop(sessions);
    // Opener end as their workers notice the cancellation; each one closes (its
    // processes, container and folder released) when its last server is dropped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while runtime.open_sessions() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.shutdown(Duration::from_secs(15)).await;
    Ok(())
}
