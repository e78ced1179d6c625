//! The doors of a session's private network, all held by jianmu, none inside:
//!
//! - **out, by policy**: an HTTP proxy (CONNECT, and plain HTTP forwarding) listening
//!   on a socket made inside the session's network. Commands get `HTTP_PROXY` and
//!   the like; the proxy resolves names itself, lets through the hosts the tool's
//!   [`EgressSettings`] name, applies the SSRF guard to every address, sets
//!   credentials the code never sees, and answers anything else with a `403` that
//!   names the host and the setting;
//! - **out to the host**: [`Door::expose`] makes a port a command listens on
//!   reachable at `127.0.0.1:N` on the host;
//! - **in from the host**: `host_services` (`127.0.0.1:5432`) listen inside at the
//!   same address and lead to the host's.
//!
//! A session's doors run on one thread of their own; they end when the session's
//! state is dropped. Every connection is one audit line ([`Door::set_audit`]).
#![deny(missing_docs)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

mod policy;
mod proxy;
mod relay;
mod tls;

pub use policy::{
    BadSettings, Credential, DEFAULT_IDLE_SECS, DEFAULT_MAX_CONNECTIONS, EgressSettings,
    MAX_CONNECTIONS, Policy,
};

/// Where audit lines go: one JSON object per connection or opening.
pub type Audit = Arc<dyn Fn(serde_json::Value) + Send + Sync>;

/// The doors of one session's network (a value of the session's shared state).
/// Started by the first command that needs them; stopped when dropped.
#[derive(Default)]
pub struct Door {
    started: Mutex<Option<Started>>,
    /// The audit sink and the labels every line carries.
    audit: Mutex<Option<(Audit, serde_json::Map<String, serde_json::Value>)>>,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("started", &self.lock().is_some())
            .finish_non_exhaustive()
    }
}

/// The running doors: the thread's runtime, and what its tasks share.
struct Started {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    shared: Arc<proxy::Shared>,
    /// The proxy's port inside, once a policy needed it.
    proxy_port: Option<u16>,
    /// Host services listening inside.
    services: Vec<SocketAddr>,
    /// Ports exposed to the host: the inside port → the host address and its task.
    exposed: HashMap<u16, (SocketAddr, tokio::task::AbortHandle)>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for (_, (_, task)) in self.exposed.drain() {
            task.abort();
        }
        // The thread drops its runtime, and with it every connection.
        drop(self.stop.take());
    }
}

impl Door {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Started>> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a line for every connection and opening to `audit`, with `labels`
    /// (`principal`, `session`) in each. Call it before the first command.
    pub fn set_audit(&self, audit: Audit, labels: serde_json::Map<String, serde_json::Value>) {
        *self.audit.lock().unwrap_or_else(PoisonError::into_inner) = Some((audit, labels));
    }

    /// Starts the doors' thread (on `inside`, the session's network, when it has
    /// one) if it is not running.
    fn start<'a>(
        &self,
        started: &'a mut Option<Started>,
        inside: Option<&jianmu_process::Inside>,
    ) -> std::io::Result<&'a mut Started> {
        if started.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            std::thread::Builder::new()
                .name("jianmu-egress".into())
                .spawn(move || {
                    rt.block_on(async move {
                        let _ = stopped.await;
                    });
                })?;
            let audit = self
                .audit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            *started = Some(Started {
                handle,
                stop: Some(stop),
                shared: Arc::new(proxy::Shared::new(inside.cloned(), audit)),
                proxy_port: None,
                services: Vec::new(),
                exposed: HashMap::new(),
            });
        }
        Ok(started.as_mut().expect("started above"))
    }

    /// Makes `port` (a server listening inside the session on loopback) reachable
    /// from the host at the address returned, until the session ends or
    /// [`Door::unexpose`]. Exposing a port again returns the same address.
    ///
    /// # Errors
    /// The host port cannot be opened, or the doors cannot start.
    pub fn expose(
        &self,
        inside: &jianmu_process::Inside,
        port: u16,
    ) -> std::io::Result<SocketAddr> {
        let mut guard = self.lock();
        let started = self.start(&mut guard, Some(inside))?;
        if let Some((addr, _)) = started.exposed.get(&port) {
            return Ok(*addr);
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let task = started
            .handle
            .spawn(relay::expose(started.shared.clone(), listener, port))
            .abort_handle();
        started.exposed.insert(port, (addr, task));
        started.shared.audit_line(serde_json::json!({
            "kind": "expose_port", "port": port, "address": addr.to_string(), "outcome": "opened",
        }));
        Ok(addr)
    }

    /// Closes what [`Door::expose`] opened for `port`; `None` when it was not open.
    pub fn unexpose(&self, port: u16) -> Option<SocketAddr> {
        let mut guard = self.lock();
        let started = guard.as_mut()?;
        let (addr, task) = started.exposed.remove(&port)?;
        task.abort();
        started.shared.audit_line(serde_json::json!({
            "kind": "expose_port", "port": port, "address": addr.to_string(), "outcome": "closed",
        }));
        Some(addr)
    }

    /// The ports exposed now, with their host addresses.
    pub fn exposed(&self) -> Vec<(u16, SocketAddr)> {
        let guard = self.lock();
        let mut all: Vec<_> = guard
            .iter()
            .flat_map(|s| s.exposed.iter().map(|(p, (a, _))| (*p, *a)))
            .collect();
        all.sort_unstable();
        all
    }
}

/// What a tool's commands get from their session's doors: the proxy for its
/// policy, and the host services it names. Give it to the tool's jail
/// ([`jianmu_process::Jail::with_network_env`]).
#[derive(Debug)]
pub struct Egress {
    door: Arc<Door>,
    policy: Arc<Policy>,
    token: String,
    services: Vec<SocketAddr>,
}

/// Parses `host_services` entries (`IP:PORT`, loopback addresses).
///
/// # Errors
/// An entry that is not an IP address with a port.
pub fn parse_services(entries: &[String]) -> Result<Vec<SocketAddr>, BadSettings> {
    entries
        .iter()
        .map(|e| {
            let at = e.trim().parse::<SocketAddr>().map_err(|_| {
                BadSettings(format!(
                    "host_services entry `{e}`: expected an IP address and a port, such as 127.0.0.1:5432"
                ))
            })?;
            // The session's network has loopback only: that is where it listens.
            if !at.ip().is_loopback() {
                return Err(BadSettings(format!(
                    "host_services entry `{e}`: only loopback addresses (127.0.0.1, ::1) can be given to a session"
                )));
            }
            Ok(at)
        })
        .collect()
}

impl Egress {
    /// The doors `settings` and `services` open for one tool of the session whose
    /// doors are `door`, or `None` when they open none.
    ///
    /// # Errors
    /// As [`Policy::new`] and [`parse_services`].
    pub fn new(
        door: Arc<Door>,
        settings: &EgressSettings,
        services: &[String],
    ) -> Result<Option<Arc<Self>>, BadSettings> {
        let services = parse_services(services)?;
        if settings.is_empty() && services.is_empty() {
            return Ok(None);
        }
        Ok(Some(Arc::new(Self {
            door,
            policy: Arc::new(Policy::new(settings)?),
            token: jianmu_tool_core::random_hex(),
            services,
        })))
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Serves one proxy connection that reached jianmu some other way than the
    /// session's network (a Docker sandbox's tunnel), under this policy; no proxy
    /// credentials are asked for. Run the future on any runtime.
    ///
    /// # Errors
    /// The doors cannot start.
    pub fn serve(
        &self,
        stream: tokio::io::DuplexStream,
    ) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
        let shared = {
            let mut guard = self.door.lock();
            let started = self.door.start(&mut guard, None)?;
            started
                .shared
                .register(self.token.clone(), Arc::clone(&self.policy));
            started.shared.clone()
        };
        let held = shared.held(&self.token);
        Ok(proxy::handle(shared, stream, held))
    }

    /// The session's certificate authority (PEM), made now if it is not yet, when
    /// this policy intercepts HTTPS; `None` otherwise.
    ///
    /// # Errors
    /// The doors cannot start, or the authority cannot be made.
    pub fn ca_pem(&self) -> std::io::Result<Option<String>> {
        if !self.policy.intercepts() {
            return Ok(None);
        }
        let mut guard = self.door.lock();
        let started = self.door.start(&mut guard, None)?;
        started
            .shared
            .ca_pem()
            .map(Some)
            .map_err(std::io::Error::other)
    }
}

/// `jail` with the doors `egress` and `services` (`isolation.host_services`) open in
/// the session network whose doors are `door`: what a tool that runs commands does.
///
/// # Errors
/// [`jianmu_tool_core::ToolError::Config`] naming `tool` for settings that cannot be
/// used.
pub fn with_doors(
    jail: jianmu_process::Jail,
    door: Arc<Door>,
    egress: &EgressSettings,
    services: &[String],
    tool: &str,
) -> Result<jianmu_process::Jail, jianmu_tool_core::ToolError> {
    let opened =
        Egress::new(door, egress, services).map_err(|e| jianmu_tool_core::ToolError::Config {
            tool: tool.to_owned(),
            message: e.0,
        })?;
    Ok(match opened {
        Some(egress) => jail.with_network_env(egress),
        None => jail,
    })
}

/// The file, in a command's temporary directory, that holds the session's
/// certificate authority when HTTPS is intercepted.
pub const CA_FILE: &str = "jianmu-session-ca.pem";

/// Variables that name the certificate authority file for common clients.
const CA_VARS: [&str; 7] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "GIT_SSL_CAINFO",
];

impl jianmu_process::NetworkEnv for Egress {
    fn env(
        &self,
        inside: &jianmu_process::Inside,
        tmp: Option<&Path>,
    ) -> std::io::Result<Vec<(OsString, OsString)>> {
        let mut guard = self.door.lock();
        let started = self.door.start(&mut guard, Some(inside))?;
        for service in &self.services {
            if !started.services.contains(service) {
                let socket = relay::listen_inside(inside, *service)?;
                started
                    .handle
                    .spawn(relay::service(started.shared.clone(), socket, *service));
                started.services.push(*service);
            }
        }
        if self.policy.allow.is_empty() && self.policy.credentials.is_empty() {
            return Ok(Vec::new());
        }
        let port = match started.proxy_port {
            Some(port) => port,
            None => {
                let at = SocketAddr::from(([127, 0, 0, 1], 0));
                let socket = relay::listen_inside(inside, at)?;
                let port = socket.local_addr()?.port();
                started
                    .handle
                    .spawn(proxy::serve(started.shared.clone(), socket));
                started.proxy_port = Some(port);
                port
            }
        };
        started
            .shared
            .register(self.token.clone(), Arc::clone(&self.policy));
        let url = format!("http://jianmu:{}@127.0.0.1:{port}", self.token);
        let mut ca_file = None;
        if self.policy.intercepts() {
            let pem = started.shared.ca_pem().map_err(std::io::Error::other)?;
            if let Some(tmp) = tmp {
                let file = tmp.join(CA_FILE);
                write_ca(&file, &pem)?;
                ca_file = Some(file);
            }
        }
        let vars = proxy_env(&url, ca_file.as_deref())
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Ok(vars)
    }
}

/// Writes the session's certificate authority to `file`, after the system's trusted
/// certificates (the file replaces them for most clients), unless it holds it already.
///
/// # Errors
/// The file cannot be written.
pub fn write_ca(file: &Path, pem: &str) -> std::io::Result<()> {
    let mut all = system_roots_pem();
    all.push_str(pem);
    if std::fs::read(file).ok().as_deref() != Some(all.as_bytes()) {
        std::fs::write(file, all)?;
    }
    Ok(())
}

/// The variables that send a command's HTTP through the proxy at `url`, and, with
/// `ca_file`, make common clients trust the certificate authority in it.
pub fn proxy_env(url: &str, ca_file: Option<&Path>) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        vars.push((name.to_owned(), url.to_owned()));
        vars.push((name.to_ascii_lowercase(), url.to_owned()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        vars.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    if let Some(file) = ca_file {
        for name in CA_VARS {
            vars.push((name.to_owned(), file.display().to_string()));
        }
    }
    vars
}

/// The system's trusted certificates, as PEM (empty where none are found).
fn system_roots_pem() -> String {
    for path in [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            let mut text = text;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            return text;
        }
    }
    String::new()
}

/// The network sentence of a tool's description ([`IsolationSettings::network_sentence`]),
/// with the hosts its commands reach through the session's proxy where a private
/// network is in force.
///
/// [`IsolationSettings::network_sentence`]: jianmu_process::IsolationSettings::network_sentence
pub fn network_sentence(
    isolation: &jianmu_process::IsolationSettings,
    egress: &EgressSettings,
    tool: &str,
) -> Option<String> {
    let base = isolation.network_sentence(tool)?;
    let kernel = jianmu_process::Isolation::probe();
    if !(kernel.namespaces && kernel.private_network) {
        return Some(base);
    }
    let mut text = match hosts_sentence(egress) {
        Some(hosts) => format!(
            "Network: a private one per session: local servers and sockets work, and a \
             server started earlier in this session (e.g. a `background: true` bash job) \
             stays reachable. {hosts}"
        ),
        None => base,
    };
    if !isolation.host_services.is_empty() {
        text.push_str(&format!(
            " These host services are reachable at the same address: {}.",
            isolation.host_services.join(", ")
        ));
    }
    Some(text)
}

/// The sentence a tool's description adds about the hosts its commands reach, or
/// `None` when they reach none.
fn hosts_sentence(settings: &EgressSettings) -> Option<String> {
    if settings.is_empty() {
        return None;
    }
    let mut hosts: Vec<&str> = settings.allow.iter().map(String::as_str).collect();
    hosts.extend(settings.credentials.keys().map(String::as_str));
    Some(format!(
        "Outside, only these hosts can be reached, through the session's HTTP proxy \
         (HTTP_PROXY and HTTPS_PROXY are set; programs that ignore them cannot reach \
         out): {}. Others get 403 from the proxy (the setting `[egress] allow` adds \
         hosts).",
        hosts.join(", ")
    ))
}
