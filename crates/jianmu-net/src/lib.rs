//! The network layer of Jianmu's tools: one shared `reqwest` client (hyper underneath,
//! rustls with the ring provider) per distinct setting, with an SSRF guard.
//!
//! The guard, on by default: only `http` and `https`; no credentials in URLs; a host
//! given as an IP address (in any spelling the URL parser accepts: `2130706433`,
//! `0x7f.1`, `127.1`, IPv4-mapped or NAT64 IPv6) is checked before connecting; a name
//! is resolved once by the guarded resolver, every address it resolves to is checked,
//! and the connection goes to those checked addresses; every redirect hop is checked
//! again. Loopback, private, link-local (cloud metadata), CGNAT, multicast, unspecified,
//! documentation and reserved addresses are refused unless the host is allow-listed.
//! Environment proxies are ignored unless a proxy is configured.
#![deny(missing_docs)]

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
#[cfg(feature = "client")]
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Mutex, OnceLock, PoisonError},
};

#[cfg(feature = "client")]
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Deserialize;

mod guard;

pub use guard::{check_url, refused_ip};
#[cfg(feature = "client")]
pub use reqwest;
pub use url::Url;

/// Settings shared by the network tools (`[tools.http_request]` and `[tools.duckduckgo_search]` in `jianmu.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetSettings {
    /// Hosts (names or IP addresses) exempt from the SSRF guard.
    pub allow_hosts: Vec<String>,
    /// A proxy URL for every request; environment proxies are ignored otherwise.
    /// Through a proxy, names are resolved by the proxy, so only allow-listed hosts
    /// and public IP literals can be checked.
    pub proxy: Option<String>,
    /// Most redirects followed.
    pub max_redirects: usize,
    /// The User-Agent header.
    pub user_agent: String,
    /// Redirects are followed on the same host only: a redirect to another host is
    /// answered as it came (a 3xx with its `Location`), for the caller to decide.
    /// Set by tools, not by configuration.
    #[serde(skip)]
    pub same_host_redirects: bool,
}

impl Default for NetSettings {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            proxy: None,
            max_redirects: 5,
            user_agent: concat!("jianmu/", env!("CARGO_PKG_VERSION")).to_owned(),
            same_host_redirects: false,
        }
    }
}

impl NetSettings {
    /// Whether `host` is allow-listed (compared case-insensitively; IPv6 with or
    /// without brackets).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.allow_hosts.iter().any(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .eq_ignore_ascii_case(host)
        })
    }
}

/// A refusal by the guard, naming the rule (and how to allow the host). Inside a
/// request it travels as the source of the client's error, so the tool can find it
/// and show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

#[cfg(feature = "client")]
/// Why a guarded client could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The configured proxy is not a usable URL.
    #[error("invalid proxy `{proxy}`")]
    Proxy {
        /// The proxy as configured.
        proxy: String,
        /// Why it was refused.
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP client could not be set up (TLS, resolver).
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
}

/// The guard's message, if `e` (or one of its sources) is a refusal.
pub fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cur = err.source();
    }
    None
}

/// Looks a name up; the system resolver by default, replaceable in tests.
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> + Send + Sync,
>;

/// The system resolver.
pub fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    })
}

#[cfg(feature = "client")]
struct GuardedResolver {
    lookup: Lookup,
    settings: Arc<NetSettings>,
}

#[cfg(feature = "client")]
impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let lookup = self.lookup.clone();
        let settings = self.settings.clone();
        Box::pin(async move {
            let ips = lookup(host.clone()).await?;
            if ips.is_empty() {
                return Err(Box::new(Refused(format!("`{host}` has no addresses"))) as _);
            }
            if !settings.allows(&host) {
                for ip in &ips {
                    if let Some(why) = refused_ip(*ip) {
                        return Err(Box::new(Refused(format!(
                            "refused host `{host}`: it resolves to {ip}, {why}; allow it with --allow-host {host}"
                        ))) as _);
                    }
                }
            }
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(feature = "client")]
/// Builds a guarded client. Use [`shared_client`] unless you need your own resolver.
///
/// # Errors
/// A bad proxy URL, or a client that cannot be built.
pub fn build_client(settings: &NetSettings, lookup: Lookup) -> Result<reqwest::Client, NetError> {
    static PROVIDER: OnceLock<()> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        // Another part of the process may have installed one already; either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let settings = Arc::new(settings.clone());
    let redirect_settings = settings.clone();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let s = &redirect_settings;
        if attempt.previous().len() > s.max_redirects {
            let limit = s.max_redirects;
            return attempt.error(Refused(format!("stopped after {limit} redirects")));
        }
        if s.same_host_redirects
            && let Some(from) = attempt.previous().last()
            && !from
                .host_str()
                .unwrap_or_default()
                .eq_ignore_ascii_case(attempt.url().host_str().unwrap_or_default())
        {
            return attempt.stop();
        }
        match check_url(attempt.url(), &|h| s.allows(h)) {
            Ok(()) => attempt.follow(),
            Err(why) => attempt.error(Refused(format!("redirect {why}"))),
        }
    });
    let mut builder = reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver {
            lookup,
            settings: settings.clone(),
        }))
        .redirect(policy)
        .user_agent(settings.user_agent.clone())
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(60));
    builder = match &settings.proxy {
        Some(p) => builder.proxy(reqwest::Proxy::all(p).map_err(|source| NetError::Proxy {
            proxy: p.clone(),
            source,
        })?),
        None => builder.no_proxy(),
    };
    builder.build().map_err(NetError::Client)
}

#[cfg(feature = "client")]
/// One client per distinct settings for the whole process, so connections are reused
/// across calls and across tools.
///
/// # Errors
/// As [`build_client`].
pub fn shared_client(settings: &NetSettings) -> Result<reqwest::Client, NetError> {
    static CLIENTS: OnceLock<Mutex<HashMap<NetSettings, reqwest::Client>>> = OnceLock::new();
    let mut clients = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = clients.get(settings) {
        return Ok(c.clone());
    }
    let client = build_client(settings, system_lookup())?;
    clients.insert(settings.clone(), client.clone());
    Ok(client)
}

#[cfg(feature = "client")]
/// Reads at most `cap` bytes of the (decoded) body; the flag says whether more came.
///
/// # Errors
/// The connection failing mid-body.
pub async fn read_capped(
    resp: &mut reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = cap.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

#[cfg(feature = "client")]
/// The text of a failed request: the guard's refusal if that is why, else the error
/// with its causes.
pub fn describe(e: &reqwest::Error) -> String {
    refusal(e).unwrap_or_else(|| jianmu_tool_core::error_chain(e))
}

/// How long to wait before retry number `attempt` (from 0): exponential from `base`,
/// at most `cap`, with "equal jitter" (a random point in the upper half), so many
/// clients backing off together do not retry in step.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = base.saturating_mul(1 << attempt.min(16)).min(cap);
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    Duration::from_millis(ms / 2 + h.finish() % (ms / 2 + 1))
}

#[cfg(feature = "client")]
/// Builds a client for a tool, or says why the tool cannot run.
///
/// # Errors
/// [`jianmu_tool_core::ToolError::Config`] naming `tool`.
pub fn client_for(
    tool: &str,
    settings: &NetSettings,
) -> Result<reqwest::Client, jianmu_tool_core::ToolError> {
    shared_client(settings).map_err(|e| jianmu_tool_core::ToolError::Config {
        tool: tool.to_owned(),
        message: jianmu_tool_core::error_chain(&e),
    })
}

#[cfg(all(test, feature = "client"))]
mod tests {
    use std::str::FromStr;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A resolver that answers a public address first and a private one after: every
    /// answer is checked, so the second lookup cannot slip a private address through.
    #[tokio::test]
    async fn every_resolution_is_checked_again() {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let lookup: Lookup = Arc::new(move |_host: String| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok(vec![
                    if n == 0 { "93.184.216.34" } else { "10.0.0.5" }
                        .parse()
                        .unwrap(),
                ])
            })
        });
        let resolver = GuardedResolver {
            lookup,
            settings: Arc::new(NetSettings::default()),
        };
        let name = || Name::from_str("flip.test").unwrap();
        let first: Vec<SocketAddr> = resolver.resolve(name()).await.unwrap().collect();
        assert_eq!(first, ["93.184.216.34:0".parse().unwrap()]);
        let second = resolver.resolve(name()).await.err().unwrap();
        assert_eq!(
            second.to_string(),
            "refused host `flip.test`: it resolves to 10.0.0.5, a private (10.0.0.0/8) address; allow it with --allow-host flip.test"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
