//! `[mcp.http]`: the limits and checks of the Streamable HTTP service, and what each
//! principal gets.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

/// A limit of `[mcp.http]` out of its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadLimits(pub String);

/// `[mcp.http]`: the limits and checks of the Streamable HTTP service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpLimits {
    /// The largest request body, in bytes (larger ones get 413).
    pub max_body_bytes: usize,
    /// How long a request body may take to arrive, whole (slower ones get 408).
    pub body_timeout_secs: u64,
    /// How many connections are served at once; more wait in the listen queue until
    /// one closes (an idle one closes after 10 s without a request).
    pub max_connections: usize,
    /// How many protocol sessions may be open at once (one more gets 503;
    /// `max_sessions` is read as this too).
    #[serde(alias = "max_sessions")]
    pub max_protocol_sessions: usize,
    /// A session no request has used for this long is closed and its state released.
    pub session_idle_secs: u64,
    /// How long calls still running get to finish once SIGTERM arrives.
    pub shutdown_grace_secs: u64,
    /// Browser origins allowed to call (`https://app.example.com`); a request with
    /// any other `Origin` header gets 403. `--allow-origin` adds to it.
    pub allowed_origins: Vec<String>,
    /// `Host` headers accepted (DNS rebinding); empty: loopback names when bound to
    /// loopback, any host otherwise (a token is then required).
    pub allowed_hosts: Vec<String>,
    /// Each principal works in a folder of its own, `DIR/NAME` (made on first use and
    /// kept), instead of the workspace; `--workspace-per-principal` sets it too.
    pub principal_workspaces: Option<PathBuf>,
    /// Stateless scopes idle for `session_idle_secs` are suspended to a file in this
    /// folder (one per principal) instead of closed, and resumed by the principal's
    /// next request (`Session::suspend`, `Runtime::resume`).
    pub suspend_dir: Option<PathBuf>,
    /// `[mcp.http.principal]`: what every principal gets, unless its own table says
    /// otherwise.
    pub principal: PrincipalSettings,
    /// `[mcp.http.principals.NAME]`: one principal's own settings, over
    /// `[mcp.http.principal]`.
    pub principals: std::collections::BTreeMap<String, PrincipalSettings>,
}

/// What one principal gets (`[mcp.http.principal]`, `[mcp.http.principals.NAME]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrincipalSettings {
    /// Most protocol sessions the principal may have open at once (more get 503);
    /// the server's `max_protocol_sessions` bounds all of them together
    /// (`max_sessions` is read as this too).
    #[serde(alias = "max_sessions")]
    pub max_protocol_sessions: Option<usize>,
    /// With `principal_workspaces`: this principal works in the shared workspace.
    pub shared_workspace: Option<bool>,
    /// Tool settings over `[tools.NAME]` for this principal's calls, such as
    /// `[mcp.http.principal.tools.bash] max_jobs = 4`.
    pub tools: std::collections::BTreeMap<String, Map<String, Value>>,
    /// Isolation settings over every isolated tool's `isolation` table for this
    /// principal's calls (`read_deny`, `read_allow`, `sockets`, ...); a key in the
    /// principal's own `tools.NAME.isolation` wins over it.
    pub isolation: Map<String, Value>,
    /// Egress settings over `bash`'s and `python_repl`'s `egress` tables for this
    /// principal's calls (`allow`, `credentials`, limits).
    pub egress: Map<String, Value>,
    /// Deny and ask entries added to `[policy]` for this principal's calls, and
    /// `read_only` (`[mcp.http.principals.NAME.policy] ask = ["command:git push"]`):
    /// stricter only. `[mcp.http.principal.policy]`'s entries and a principal's own add
    /// up.
    pub policy: jianmu_tool_core::Tightening,
}

impl PrincipalSettings {
    /// `self` over `base`: each setting `self` has wins.
    pub fn over(&self, base: &Self) -> Self {
        let mut tools = base.tools.clone();
        for (tool, keys) in &self.tools {
            let entry = tools.entry(tool.clone()).or_default();
            for (key, value) in keys {
                entry.insert(key.clone(), value.clone());
            }
        }
        let mut isolation = base.isolation.clone();
        isolation.extend(self.isolation.clone());
        let mut egress = base.egress.clone();
        egress.extend(self.egress.clone());
        Self {
            max_protocol_sessions: self.max_protocol_sessions.or(base.max_protocol_sessions),
            shared_workspace: self.shared_workspace.or(base.shared_workspace),
            tools,
            isolation,
            egress,
            policy: self.policy.over(&base.policy),
        }
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            body_timeout_secs: 30,
            max_connections: 4096,
            max_protocol_sessions: 64,
            session_idle_secs: 15 * 60,
            shutdown_grace_secs: 10,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            principal_workspaces: None,
            suspend_dir: None,
            principal: PrincipalSettings::default(),
            principals: std::collections::BTreeMap::new(),
        }
    }
}

impl HttpLimits {
    /// Checks every limit is in its range.
    ///
    /// # Errors
    /// The first limit out of range, named as in `jianmu.toml`.
    pub fn check(&self) -> Result<(), BadLimits> {
        if !(1024..=256 * 1024 * 1024).contains(&self.max_body_bytes) {
            return Err(BadLimits(
                "mcp.http.max_body_bytes must be between 1024 and 268435456".to_owned(),
            ));
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(BadLimits(
                "mcp.http.max_connections must be between 1 and 1000000".to_owned(),
            ));
        }
        if !(1..=3600).contains(&self.body_timeout_secs) {
            return Err(BadLimits(
                "mcp.http.body_timeout_secs must be between 1 and 3600".to_owned(),
            ));
        }
        if !(1..=100_000).contains(&self.max_protocol_sessions) {
            return Err(BadLimits(
                "mcp.http.max_protocol_sessions must be between 1 and 100000".to_owned(),
            ));
        }
        if !(1..=7 * 24 * 3600).contains(&self.session_idle_secs) {
            return Err(BadLimits(
                "mcp.http.session_idle_secs must be between 1 and 604800".to_owned(),
            ));
        }
        if self.shutdown_grace_secs > 3600 {
            return Err(BadLimits(
                "mcp.http.shutdown_grace_secs must be at most 3600".to_owned(),
            ));
        }
        let named = self
            .principals
            .iter()
            .map(|(n, p)| (format!("principals.{n}"), p));
        for (name, principal) in
            std::iter::once(("principal".to_owned(), &self.principal)).chain(named)
        {
            if principal.max_protocol_sessions == Some(0) {
                return Err(BadLimits(format!(
                    "mcp.http.{name}.max_protocol_sessions must be at least 1"
                )));
            }
            let policy = jianmu_tool_core::Policy {
                deny: principal.policy.deny.clone(),
                ask: principal.policy.ask.clone(),
                ..jianmu_tool_core::Policy::default()
            };
            if let Err(e) = jianmu_runtime::check_policy(&policy) {
                return Err(BadLimits(format!("mcp.http.{name}.policy: {e}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each limit is named for what it bounds; the old name is still read.
    #[test]
    fn protocol_session_limits_read_their_name_and_the_old_one() {
        let limits: HttpLimits = serde_json::from_value(serde_json::json!({
            "max_protocol_sessions": 3,
            "principal": {"max_sessions": 2},
            "principals": {"bob": {"max_protocol_sessions": 1}},
        }))
        .unwrap();
        assert_eq!(limits.max_protocol_sessions, 3);
        assert_eq!(limits.principal.max_protocol_sessions, Some(2));
        assert_eq!(limits.principals["bob"].max_protocol_sessions, Some(1));
        let old: HttpLimits =
            serde_json::from_value(serde_json::json!({"max_sessions": 5})).unwrap();
        assert_eq!(old.max_protocol_sessions, 5);
        assert!(old.check().is_ok());
        let bad = HttpLimits {
            max_protocol_sessions: 0,
            ..HttpLimits::default()
        };
        assert_eq!(
            bad.check().unwrap_err().0,
            "mcp.http.max_protocol_sessions must be between 1 and 100000"
        );
    }
}
