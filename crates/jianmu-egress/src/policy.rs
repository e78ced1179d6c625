//! `[egress]`: which hosts a session's commands reach through its proxy, and the
//! credentials set on their way out.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The most connections one policy holds at once, unless `max_connections` says.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The most `max_connections` can raise it to.
pub const MAX_CONNECTIONS: usize = 65_536;
/// How long a connection may stay silent both ways, unless `idle_secs` says.
pub const DEFAULT_IDLE_SECS: u64 = 300;

/// A tool's egress settings (`[egress]`, `[tools.NAME.egress]`,
/// `[mcp.http.principals.NAME.egress]`). Empty: commands reach no outside host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSettings {
    /// Hosts reached through the proxy: `HOST`, `HOST:PORT`, `*.example.org:443`
    /// (its subdomains), `[::1]:8080`, or `*` (any public host). A private, loopback
    /// or link-local address is reached only through an entry that names its host
    /// exactly (not a wildcard).
    pub allow: Vec<String>,
    /// Headers set on requests to a host (the key is matched as an `allow` entry):
    /// the code sends a placeholder, the proxy sets the real value.
    pub credentials: BTreeMap<String, Credential>,
    /// Most connections at once (more are refused with 503); at most 65,536.
    pub max_connections: Option<usize>,
    /// Most bytes both ways over all connections; past it, connections are closed
    /// and new ones refused.
    pub max_bytes: Option<u64>,
    /// A connection silent both ways for this long is closed.
    pub idle_secs: Option<u64>,
}

/// One credential: `header = "Authorization", value = "Bearer ${TOKEN}"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The header's name.
    pub header: String,
    /// Its value; `${NAME}` is replaced by jianmu's own environment variable `NAME`,
    /// which commands never see.
    pub value: String,
    /// For HTTPS: end TLS at the proxy with the session's own certificate authority
    /// (trusted inside the session through `SSL_CERT_FILE` and the like) so the
    /// header can be set. Without it, HTTPS to this host passes untouched.
    #[serde(default)]
    pub intercept: bool,
}

impl EgressSettings {
    /// Whether nothing is allowed (no proxy is started).
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.credentials.is_empty()
    }
}

/// Why egress settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSettings(pub String);

/// An `allow` entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The entry as written.
    pub(crate) text: String,
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Any,
    /// `*.suffix`: subdomains of `suffix`.
    Below(String),
    Exact(String),
}

/// `host` lower-cased, without brackets or a trailing dot.
pub(crate) fn normal_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

impl Rule {
    pub(crate) fn parse(text: &str) -> Result<Self, BadSettings> {
        let bad = |why: &str| BadSettings(format!("egress entry `{text}`: {why}"));
        let t = text.trim();
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("no closing `]`"))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(bad("expected `[IPV6]:PORT`")),
            }
        } else if t.matches(':').count() > 1 {
            (t, None)
        } else {
            match t.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (t, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
            ),
        };
        if host.trim_end_matches('.').ends_with('*') && host.ends_with('.') {
            return Err(bad("a wildcard is `*.DOMAIN`"));
        }
        let host = normal_host(host);
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let host = if host == "*" {
            Host::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(bad("a wildcard is `*.DOMAIN`"));
            }
            Host::Below(suffix.to_owned())
        } else if host.contains('*') {
            return Err(bad("a wildcard is `*.DOMAIN`, or `*` alone"));
        } else {
            Host::Exact(host)
        };
        Ok(Self {
            text: t.to_owned(),
            host,
            port,
        })
    }

    /// Whether it covers `host` (normalized) on `port`.
    pub(crate) fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match &self.host {
            Host::Any => true,
            Host::Below(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            Host::Exact(h) => h == host,
        }
    }

    /// Whether it names `host` exactly: then its private addresses may be reached.
    pub(crate) fn names(&self, host: &str) -> bool {
        matches!(&self.host, Host::Exact(h) if h == host)
    }
}

/// A credential ready to set: its value read from jianmu's environment.
#[derive(Clone)]
pub(crate) struct Ready {
    pub(crate) rule: Rule,
    pub(crate) header: String,
    pub(crate) value: String,
    pub(crate) intercept: bool,
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("rule", &self.rule.text)
            .field("header", &self.header)
            .field("intercept", &self.intercept)
            .finish_non_exhaustive()
    }
}

/// A tool's egress settings, checked and ready.
#[derive(Debug)]
pub struct Policy {
    pub(crate) allow: Vec<Rule>,
    pub(crate) credentials: Vec<Ready>,
    pub(crate) max_connections: usize,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) idle: std::time::Duration,
    /// The setting a refusal names (`[egress] allow`).
    pub(crate) setting: String,
}

/// `${NAME}` in `value` replaced from `env`.
fn expand(
    value: &str,
    key: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, BadSettings> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find('}').ok_or_else(|| {
            BadSettings(format!(
                "egress credential for `{key}`: `${{` without a closing `}}`"
            ))
        })?;
        let name = &after[..end];
        let v = env(name).ok_or_else(|| {
            BadSettings(format!(
                "egress credential for `{key}` reads ${{{name}}}, which jianmu's environment does not set"
            ))
        })?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Policy {
    /// Checks `settings`, reading credentials' `${NAME}` from jianmu's environment.
    ///
    /// # Errors
    /// An entry that is not `HOST[:PORT]`, a header that is not a header name, a
    /// variable jianmu's environment does not set.
    pub fn new(settings: &EgressSettings) -> Result<Self, BadSettings> {
        Self::with_env(settings, &|name| std::env::var(name).ok())
    }

    pub(crate) fn with_env(
        settings: &EgressSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, BadSettings> {
        let allow = settings
            .allow
            .iter()
            .map(|t| Rule::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut credentials = Vec::new();
        for (key, c) in &settings.credentials {
            let header = c.header.trim();
            if header.is_empty()
                || !header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(BadSettings(format!(
                    "egress credential for `{key}`: `{}` is not a header name",
                    c.header
                )));
            }
            let value = expand(&c.value, key, env)?;
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(BadSettings(format!(
                    "egress credential for `{key}`: its value holds a line break"
                )));
            }
            let rule = Rule::parse(key)?;
            if rule.host == Host::Any {
                return Err(BadSettings(format!(
                    "egress credential for `{key}`: a credential goes to named hosts only, not `*`"
                )));
            }
            credentials.push(Ready {
                rule,
                header: header.to_owned(),
                value,
                intercept: c.intercept,
            });
        }
        Ok(Self {
            allow,
            credentials,
            max_connections: settings
                .max_connections
                .unwrap_or(DEFAULT_MAX_CONNECTIONS)
                .clamp(1, MAX_CONNECTIONS),
            max_bytes: settings.max_bytes,
            idle: std::time::Duration::from_secs(
                settings.idle_secs.unwrap_or(DEFAULT_IDLE_SECS).max(1),
            ),
            setting: "[egress] allow".to_owned(),
        })
    }

    /// The rule that lets `host:port` through, if any: one that names the host
    /// exactly before a wildcard (only such a rule reaches a private address). A
    /// credential's host counts as allowed.
    pub(crate) fn rule_for(&self, host: &str, port: u16) -> Option<&Rule> {
        let mut all = self
            .allow
            .iter()
            .chain(self.credentials.iter().map(|c| &c.rule))
            .filter(|r| r.matches(host, port));
        let first = all.next()?;
        if first.names(host) {
            return Some(first);
        }
        Some(all.find(|r| r.names(host)).unwrap_or(first))
    }

    /// The credential for a request to `host:port`, over TLS (`tls`) or plain HTTP,
    /// if any: one whose key names the host exactly before a wildcard. A key without
    /// a port is set on the scheme's own port only (443, or 80), so a credential
    /// never goes in clear text to a port that expects TLS.
    pub(crate) fn credential_for(&self, host: &str, port: u16, tls: bool) -> Option<&Ready> {
        let default = if tls { 443 } else { 80 };
        let mut all = self
            .credentials
            .iter()
            .filter(|c| c.rule.matches(host, port) && (c.rule.port.is_some() || port == default));
        let first = all.next()?;
        if first.rule.names(host) {
            return Some(first);
        }
        Some(all.find(|c| c.rule.names(host)).unwrap_or(first))
    }

    /// Whether any HTTPS is intercepted (a certificate authority is needed).
    pub(crate) fn intercepts(&self) -> bool {
        self.credentials.iter().any(|c| c.intercept)
    }

    /// The allowed entries, for a tool's description.
    pub fn hosts(&self) -> Vec<String> {
        self.allow
            .iter()
            .chain(self.credentials.iter().map(|c| &c.rule))
            .map(|r| r.text.clone())
            .collect()
    }

    /// Why `ip` (an address `host` resolves to) may not be reached through `rule`.
    pub(crate) fn refused_address(rule: &Rule, host: &str, ip: IpAddr) -> Option<String> {
        let why = jianmu_net::refused_ip(ip)?;
        if rule.names(host) {
            return None;
        }
        Some(format!(
            "{host} resolves to {ip}, {why}, which the entry `{}` does not name; name the host exactly to reach it",
            rule.text
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_as_written() {
        let r = |t: &str| Rule::parse(t).unwrap();
        assert!(r("pypi.org").matches("pypi.org", 443));
        assert!(r("pypi.org:443").matches("pypi.org", 443));
        assert!(!r("pypi.org:443").matches("pypi.org", 80));
        assert!(!r("pypi.org").matches("evilpypi.org", 443));
        assert!(r("*.example.org:443").matches("a.b.example.org", 443));
        assert!(!r("*.example.org:443").matches("example.org", 443));
        assert!(!r("*.example.org:443").matches("badexample.org", 443));
        assert!(r("[::1]:8080").matches("::1", 8080));
        assert!(r("::1").matches("::1", 1));
        assert!(r("PyPI.Org.").matches("pypi.org", 1));
        assert!(r("*").matches("anything", 9));
        assert!(r("127.0.0.2:9").names("127.0.0.2"));
        assert!(!r("*").names("127.0.0.2"));
        for bad in ["", ":80", "a:0", "a:x", "a*.b", "*.", "[::1", "*.*.b"] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_read_jianmus_environment_only() {
        let mut settings = EgressSettings::default();
        settings.credentials.insert(
            "api.test".into(),
            Credential {
                header: "Authorization".into(),
                value: "Bearer ${TOKEN}".into(),
                intercept: false,
            },
        );
        let env = |n: &str| (n == "TOKEN").then(|| "s3cret".to_owned());
        let p = Policy::with_env(&settings, &env).unwrap();
        assert_eq!(
            p.credential_for("api.test", 80, false).unwrap().value,
            "Bearer s3cret"
        );
        // Without a port in the key, only the scheme's own port gets it: never in
        // clear text to 443, nor to any other port.
        assert!(p.credential_for("api.test", 443, false).is_none());
        assert!(p.credential_for("api.test", 8080, false).is_none());
        assert!(p.credential_for("api.test", 443, true).is_some());
        assert_eq!(p.rule_for("api.test", 443).unwrap().text, "api.test");
        assert!(!format!("{p:?}").contains("s3cret"));
        settings.credentials.get_mut("api.test").unwrap().value = "${NOPE}".into();
        assert_eq!(
            Policy::with_env(&settings, &env).unwrap_err().0,
            "egress credential for `api.test` reads ${NOPE}, which jianmu's environment does not set"
        );
        let any = Credential {
            header: "Authorization".into(),
            value: "x".into(),
            intercept: false,
        };
        let settings = EgressSettings {
            credentials: [("*:443".to_owned(), any)].into(),
            ..Default::default()
        };
        assert_eq!(
            Policy::with_env(&settings, &env).unwrap_err().0,
            "egress credential for `*:443`: a credential goes to named hosts only, not `*`"
        );
    }
}

#[cfg(test)]
mod specific {
    use super::*;

    /// An entry naming the host wins over a wildcard listed first, so a host named
    /// exactly reaches its private address, and gets its own credential.
    #[test]
    fn the_entry_naming_the_host_wins_over_a_wildcard() {
        let c = |v: &str| Credential {
            header: "X-Key".into(),
            value: v.into(),
            intercept: false,
        };
        let settings = EgressSettings {
            allow: vec!["*.corp.test".into(), "db.corp.test".into()],
            credentials: [
                ("*.api.test:8080".to_owned(), c("wild")),
                ("one.api.test:8080".to_owned(), c("named")),
            ]
            .into(),
            ..Default::default()
        };
        let p = Policy::with_env(&settings, &|_| None).unwrap();
        let rule = p.rule_for("db.corp.test", 5432).unwrap();
        assert_eq!(rule.text, "db.corp.test");
        let private = "10.0.0.5".parse().unwrap();
        assert!(Policy::refused_address(rule, "db.corp.test", private).is_none());
        assert_eq!(p.rule_for("x.corp.test", 1).unwrap().text, "*.corp.test");
        assert_eq!(
            p.credential_for("one.api.test", 8080, false).unwrap().value,
            "named"
        );
        assert_eq!(
            p.credential_for("two.api.test", 8080, false).unwrap().value,
            "wild"
        );
    }
}

#[cfg(test)]
mod services {
    #[test]
    fn host_services_are_loopback_addresses() {
        let parse = |e: &str| crate::parse_services(&[e.to_owned()]);
        assert!(parse("127.0.0.1:5432").is_ok());
        assert!(parse("[::1]:5432").is_ok());
        assert_eq!(
            parse("10.0.0.5:5432").unwrap_err().0,
            "host_services entry `10.0.0.5:5432`: only loopback addresses (127.0.0.1, ::1) can be given to a session"
        );
        assert!(parse("db:5432").is_err());
    }
}
