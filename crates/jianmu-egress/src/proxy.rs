//! The egress proxy: one listener inside the session, a policy per token.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::policy::{Policy, normal_host};
use crate::{Audit, relay};

/// The largest request head read (request line and headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request head, and a TLS handshake.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Proxy connections held while their request head is read, beyond those the
/// policies' `max_connections` allow.
const HEAD_SLOTS: usize = 256;
/// Connections held at once by the relays of ports both ways, over all ports.
pub(crate) const PORT_SLOTS: usize = 1024;
/// How long connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One policy and what its connections count against.
pub(crate) struct Held {
    pub(crate) policy: Arc<Policy>,
    slots: Arc<Semaphore>,
    pub(crate) bytes: AtomicU64,
}

/// What the doors' tasks share.
pub(crate) struct Shared {
    /// The session's network, when it has one here (not for a Docker sandbox).
    pub(crate) inside: Option<jianmu_process::Inside>,
    audit: Option<(Audit, serde_json::Map<String, serde_json::Value>)>,
    policies: Mutex<HashMap<String, Arc<Held>>>,
    ca: OnceLock<Result<crate::tls::Ca, String>>,
    /// Connections the proxy's listener holds at once: [`HEAD_SLOTS`] plus each
    /// policy's `max_connections`, so descriptors stay bounded before a request
    /// names its policy.
    pub(crate) proxy_slots: Arc<Semaphore>,
    /// Connections the relays of ports both ways hold at once.
    pub(crate) port_slots: Arc<Semaphore>,
}

impl Shared {
    pub(crate) fn new(
        inside: Option<jianmu_process::Inside>,
        audit: Option<(Audit, serde_json::Map<String, serde_json::Value>)>,
    ) -> Self {
        Self {
            inside,
            audit,
            policies: Mutex::new(HashMap::new()),
            ca: OnceLock::new(),
            proxy_slots: Arc::new(Semaphore::new(HEAD_SLOTS)),
            port_slots: Arc::new(Semaphore::new(PORT_SLOTS)),
        }
    }

    pub(crate) fn register(&self, token: String, policy: Arc<Policy>) {
        let mut all = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        all.entry(token).or_insert_with(|| {
            self.proxy_slots.add_permits(policy.max_connections);
            Arc::new(Held {
                slots: Arc::new(Semaphore::new(policy.max_connections)),
                policy,
                bytes: AtomicU64::new(0),
            })
        });
    }

    pub(crate) fn held(&self, token: &str) -> Option<Arc<Held>> {
        self.policies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }

    pub(crate) fn ca(&self) -> Result<&crate::tls::Ca, String> {
        self.ca
            .get_or_init(crate::tls::Ca::new)
            .as_ref()
            .map_err(Clone::clone)
    }

    pub(crate) fn ca_pem(&self) -> Result<String, String> {
        self.ca().map(|ca| ca.pem.clone())
    }

    /// Writes one audit line, with the time and the labels.
    pub(crate) fn audit_line(&self, line: serde_json::Value) {
        let Some((audit, labels)) = &self.audit else {
            return;
        };
        let mut map = labels.clone();
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        map.insert("time".into(), time.into());
        if let serde_json::Value::Object(fields) = line {
            map.extend(fields);
        }
        audit(serde_json::Value::Object(map));
    }
}

/// Accepts the session's proxy connections until the doors stop.
pub(crate) async fn serve(shared: Arc<Shared>, socket: std::net::TcpListener) {
    let slots = shared.proxy_slots.clone();
    relay::accept_each(socket, slots, move |stream| {
        handle(shared.clone(), stream, None)
    })
    .await;
}

/// A request head, read whole.
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head (a body's start, a TLS hello).
    pub(crate) rest: Vec<u8>,
}

impl Head {
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// Why a head could not be read.
pub(crate) enum HeadError {
    /// The client went away or sent nothing usable in time.
    Gone,
    /// Too big, or not HTTP: answer 400 or 431.
    Bad(u16, &'static str),
}

/// Reads one request head (at most [`MAX_HEAD`] bytes, within [`HEAD_TIMEOUT`]).
pub(crate) async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Head, HeadError> {
    let read = async {
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.map_err(|_| HeadError::Gone)?;
            if n == 0 {
                return Err(HeadError::Gone);
            }
            buf.extend_from_slice(&chunk[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let head = Head {
                        method: req.method.unwrap_or_default().to_owned(),
                        target: req.path.unwrap_or_default().to_owned(),
                        headers: req
                            .headers
                            .iter()
                            .map(|h| (h.name.to_owned(), h.value.to_vec()))
                            .collect(),
                        rest: buf[len..].to_vec(),
                    };
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => {
                    return Err(HeadError::Bad(431, "the request head is over 64 KiB"));
                }
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(HeadError::Bad(431, "the request has over 128 headers"));
                }
                Err(_) => return Err(HeadError::Bad(400, "this is not an HTTP request")),
            }
        }
    };
    tokio::time::timeout(HEAD_TIMEOUT, read)
        .await
        .unwrap_or(Err(HeadError::Gone))
}

/// Writes a short plain-text answer.
pub(crate) async fn answer<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    reason: &str,
    extra: &str,
    body: &str,
) {
    let text = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Why a request's method is refused: TRACE and TRACK echo the request back, the
/// credential set on it too.
pub(crate) fn refused_method(method: &str) -> Option<&'static str> {
    (method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK"))
        .then_some("TRACE and TRACK are refused (the answer would echo the request's headers)")
}

/// The token in a `Proxy-Authorization: Basic …` header.
fn token_of(head: &Head) -> Option<String> {
    let value = std::str::from_utf8(head.header("proxy-authorization")?).ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':').map(|(_, pass)| pass.to_owned())
}

/// Where a request goes: host (normalized), port, and for plain HTTP the path.
struct Target {
    host: String,
    port: u16,
    /// `None` for CONNECT.
    path: Option<String>,
}

fn target_of(head: &Head) -> Result<Target, &'static str> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(&head.target).ok_or("CONNECT needs HOST:PORT")?;
        let port = port.ok_or("CONNECT needs HOST:PORT")?;
        return Ok(Target {
            host,
            port,
            path: None,
        });
    }
    let rest = match head.target.get(..7) {
        Some(s) if s.eq_ignore_ascii_case("http://") => &head.target[7..],
        _ => {
            return Err(
                "this is the session's egress proxy: send CONNECT, or a plain HTTP request with an absolute URL",
            );
        }
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err("a URL with credentials (user@host) is refused; send them as a header");
    }
    let (host, port) = split_authority(authority).ok_or("the URL has no host")?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Ok(Target {
        host,
        port: port.unwrap_or(80),
        path: Some(path),
    })
}

/// `host[:port]` or `[v6][:port]`.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            _ => (authority, None),
        }
    };
    let host = normal_host(host);
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => None,
    };
    Some((host, port))
}

/// One connection's record, written when it ends.
pub(crate) struct Record {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) rule: Option<String>,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) started: Instant,
}

impl Record {
    pub(crate) fn line(&self, outcome: &str, why: Option<&str>) -> serde_json::Value {
        serde_json::json!({
            "kind": "egress",
            "host": self.host,
            "port": self.port,
            "rule": self.rule,
            "bytes_out": self.sent,
            "bytes_in": self.received,
            "duration_us": u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "outcome": outcome,
            "why": why,
        })
    }
}

/// Serves one proxy connection: under `fixed`'s policy when given (a connection that
/// came through a sandbox's own tunnel), else under the policy its token names.
pub(crate) async fn handle<S>(shared: Arc<Shared>, mut client: S, fixed: Option<Arc<Held>>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + relay::MaybeTcp,
{
    let head = match read_head(&mut client).await {
        Ok(head) => head,
        Err(HeadError::Gone) => return,
        Err(HeadError::Bad(status, why)) => {
            answer(
                &mut client,
                status,
                reason(status),
                "",
                &format!("jianmu proxy: {why}\n"),
            )
            .await;
            return;
        }
    };
    let Some(held) = fixed.or_else(|| token_of(&head).and_then(|t| shared.held(&t))) else {
        answer(
            &mut client,
            407,
            reason(407),
            "Proxy-Authenticate: Basic realm=\"jianmu\"\r\n",
            "jianmu proxy: use the proxy address in HTTP_PROXY as given (it carries this session's credentials)\n",
        )
        .await;
        return;
    };
    let target = match target_of(&head) {
        Ok(t) => t,
        Err(why) => {
            answer(
                &mut client,
                400,
                reason(400),
                "",
                &format!("jianmu proxy: {why}\n"),
            )
            .await;
            return;
        }
    };
    if let Some(why) = refused_method(&head.method) {
        answer(
            &mut client,
            405,
            reason(405),
            "",
            &format!("jianmu proxy: {why}\n"),
        )
        .await;
        return;
    }
    let mut record = Record {
        host: target.host.clone(),
        port: target.port,
        rule: None,
        sent: 0,
        received: 0,
        started: Instant::now(),
    };
    let refuse = |status: u16, why: String| (status, why);
    let outcome = async {
        let policy = &held.policy;
        let Some(rule) = policy.rule_for(&target.host, target.port) else {
            return Err(refuse(
                403,
                format!(
                    "jianmu: {}:{} was refused by this session's egress policy; the setting {} (or the flag --egress {}:{}) allows it\n",
                    target.host, target.port, policy.setting, target.host, target.port
                ),
            ));
        };
        record.rule = Some(rule.text.clone());
        if let Some(limit) = policy.max_bytes
            && held.bytes.load(Ordering::Relaxed) >= limit
        {
            return Err(refuse(
                403,
                format!("jianmu: this session's egress byte limit ({limit} bytes, [egress] max_bytes) is used up\n"),
            ));
        }
        let Ok(permit) = held.slots.clone().try_acquire_owned() else {
            return Err(refuse(
                503,
                format!(
                    "jianmu: this session already holds {} connections through its proxy, the limit ([egress] max_connections)\n",
                    policy.max_connections
                ),
            ));
        };
        let addrs = resolve(&target.host).await.map_err(|why| refuse(502, format!("jianmu: {why}\n")))?;
        for ip in &addrs {
            if let Some(why) = Policy::refused_address(rule, &target.host, *ip) {
                return Err(refuse(403, format!("jianmu: refused by this session's egress policy: {why}\n")));
            }
        }
        let upstream = connect(&addrs, target.port)
            .await
            .map_err(|why| refuse(502, format!("jianmu: cannot reach {}:{}: {why}\n", target.host, target.port)))?;
        Ok((permit, upstream))
    }
    .await;
    let (_permit, upstream) = match outcome {
        Ok(pair) => pair,
        Err((status, why)) => {
            shared.audit_line(record.line("refused", Some(why.trim_end())));
            answer(&mut client, status, reason(status), "", &why).await;
            return;
        }
    };
    let credential = held
        .policy
        .credential_for(&target.host, target.port, target.path.is_none())
        .cloned();
    let end = match (&target.path, credential) {
        (None, Some(c)) if c.intercept => {
            crate::tls::intercept(
                &shared,
                &held,
                client,
                upstream,
                (&target.host, target.port),
                &c,
                head.rest,
                &mut record,
            )
            .await
        }
        (None, _) => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            let mut upstream = upstream;
            if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
                return;
            }
            record.sent += head.rest.len() as u64;
            relay_any(client, upstream, &held, &mut record).await
        }
        (Some(path), credential) => {
            let mut upstream = upstream;
            let authority = authority(&target.host, target.port, 80);
            let rewritten = rewrite(&head, path, &authority, credential.as_ref());
            if upstream.write_all(&rewritten).await.is_err() {
                return;
            }
            record.sent += rewritten.len() as u64;
            relay_any(client, upstream, &held, &mut record).await
        }
    };
    shared.audit_line(record.line("allowed", end));
}

/// Relays both ways: with `splice` between two sockets, else by copying.
async fn relay_any<S>(
    client: S,
    upstream: TcpStream,
    held: &Held,
    record: &mut Record,
) -> Option<&'static str>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + relay::MaybeTcp,
{
    let spliced = match client.as_tcp() {
        Some(tcp) => relay::splice_both(tcp, &upstream, held, record).await,
        None => None,
    };
    match spliced {
        Some(end) => end,
        None => relay::pipe(client, upstream, held, record).await,
    }
}

/// `host` as a `Host` header names it: brackets for IPv6, the port unless it is
/// the scheme's `default`.
pub(crate) fn authority(host: &str, port: u16, default: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    if port == default {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// A plain HTTP request for the upstream: the path alone on its first line, the
/// checked host as `Host`, no proxy headers, the credential set, and `Connection: close` (one request per
/// connection, so that each one is checked).
pub(crate) fn rewrite(
    head: &Head,
    path: &str,
    authority: &str,
    credential: Option<&crate::policy::Ready>,
) -> Vec<u8> {
    // The checked host, not the client's `Host`: a server holding many sites (a CDN)
    // routes by it, and would take the request (and its credential) elsewhere.
    let mut out = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", head.method).into_bytes();
    for (name, value) in &head.headers {
        let drop = [
            "host",
            "proxy-authorization",
            "proxy-connection",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
            || credential.is_some_and(|c| name.eq_ignore_ascii_case(&c.header));
        if drop {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(c) = credential {
        out.extend_from_slice(format!("{}: {}\r\n", c.header, c.value).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&head.rest);
    out
}

/// The addresses of `host` (itself, when it is one).
async fn resolve(host: &str) -> Result<Vec<IpAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let lookup = jianmu_net::system_lookup();
    match tokio::time::timeout(CONNECT_TIMEOUT, lookup(host.to_owned())).await {
        Ok(Ok(ips)) if !ips.is_empty() => Ok(ips),
        Ok(Ok(_)) => Err(format!("`{host}` has no addresses")),
        Ok(Err(e)) => Err(format!("cannot resolve `{host}`: {e}")),
        Err(_) => Err(format!("resolving `{host}` took over 10 s")),
    }
}

/// Connects to the first address that answers.
async fn connect(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for ip in addrs {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(*ip, port)),
        )
        .await
        {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "connecting took over 10 s".to_owned(),
        }
    }
    Err(last)
}
