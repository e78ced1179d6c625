//! `jianmu.toml`: settings for the command, overridden by its flags.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// The workspace root; relative to the file's folder.
    pub(crate) workspace: Option<PathBuf>,
    #[serde(default)]
    pub(crate) execution: Execution,
    /// `[policy]`: which tools may run.
    #[serde(default)]
    pub(crate) policy: jianmu_tool_core::Policy,
    /// Per-tool settings, `[tools.NAME]`.
    #[serde(default)]
    pub(crate) tools: Map<String, Value>,
    /// `[mcp]`: the MCP server's settings.
    #[serde(default)]
    pub(crate) mcp: Mcp,
    /// `[outputs]`: answer budgets and where long outputs are saved.
    #[serde(default)]
    pub(crate) outputs: Outputs,
    /// `[isolation]`: keys of every isolated tool's `isolation` table, under the
    /// tool's own (`read_deny`, `read_allow`, `sockets`, ...).
    #[serde(default)]
    pub(crate) isolation: Map<String, Value>,
    /// `[egress]`: keys of `bash`'s and `python_repl`'s `egress` tables, under the
    /// tool's own (`allow`, `credentials`, limits).
    #[serde(default)]
    pub(crate) egress: Map<String, Value>,
    /// The file these settings were read from (kept out of every command's view).
    #[serde(skip)]
    pub(crate) path: Option<PathBuf>,
}

/// `[outputs]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outputs {
    /// The answer budget, in characters, of every tool whose own settings do not set
    /// one: longer answers keep their start and end and save the whole.
    pub(crate) max_chars: Option<usize>,
    /// Where long outputs are saved, relative to the workspace (`.jianmu/outputs`).
    pub(crate) folder: Option<String>,
}

/// `[mcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mcp {
    /// `[mcp.http]`: `jianmu mcp --http`.
    #[serde(default)]
    pub(crate) http: HttpLimits,
}

/// `[mcp.http]`: the limits and checks of the Streamable HTTP service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct HttpLimits {
    /// The largest request body, in bytes (larger ones get 413).
    pub(crate) max_body_bytes: usize,
    /// How long a request body may take to arrive, whole (slower ones get 408).
    pub(crate) body_timeout_secs: u64,
    /// How many connections are served at once; more wait in the listen queue until
    /// one closes (an idle one closes after 10 s without a request).
    pub(crate) max_connections: usize,
    /// How many client sessions may be open at once (one more gets 503).
    pub(crate) max_sessions: usize,
    /// A session no request has used for this long is closed and its state released.
    pub(crate) session_idle_secs: u64,
    /// How long calls still running get to finish once SIGTERM arrives.
    pub(crate) shutdown_grace_secs: u64,
    /// Browser origins allowed to call (`https://app.example.com`); a request with
    /// any other `Origin` header gets 403. `--allow-origin` adds to it.
    pub(crate) allowed_origins: Vec<String>,
    /// `Host` headers accepted (DNS rebinding); empty: loopback names when bound to
    /// loopback, any host otherwise (a token is then required).
    pub(crate) allowed_hosts: Vec<String>,
    /// Each principal works in a folder of its own, `DIR/NAME` (made on first use and
    /// kept), instead of the workspace; `--workspace-per-principal` sets it too.
    pub(crate) principal_workspaces: Option<PathBuf>,
    /// `[mcp.http.principal]`: what every principal gets, unless its own table says
    /// otherwise.
    pub(crate) principal: PrincipalSettings,
    /// `[mcp.http.principals.NAME]`: one principal's own settings, over
    /// `[mcp.http.principal]`.
    pub(crate) principals: std::collections::BTreeMap<String, PrincipalSettings>,
}

/// What one principal gets (`[mcp.http.principal]`, `[mcp.http.principals.NAME]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct PrincipalSettings {
    /// Most protocol sessions the principal may have open at once (more get 503);
    /// the server's `max_sessions` bounds all of them together.
    pub(crate) max_sessions: Option<usize>,
    /// With `principal_workspaces`: this principal works in the shared workspace.
    pub(crate) shared_workspace: Option<bool>,
    /// Tool settings over `[tools.NAME]` for this principal's calls, such as
    /// `[mcp.http.principal.tools.bash] max_jobs = 4`.
    pub(crate) tools: std::collections::BTreeMap<String, Map<String, Value>>,
    /// Isolation settings over every isolated tool's `isolation` table for this
    /// principal's calls (`read_deny`, `read_allow`, `sockets`, ...); a key in the
    /// principal's own `tools.NAME.isolation` wins over it.
    pub(crate) isolation: Map<String, Value>,
    /// Egress settings over `bash`'s and `python_repl`'s `egress` tables for this
    /// principal's calls (`allow`, `credentials`, limits).
    pub(crate) egress: Map<String, Value>,
}

#[cfg(feature = "mcp")]
impl PrincipalSettings {
    /// `self` over `base`: each setting `self` has wins.
    pub(crate) fn over(&self, base: &Self) -> Self {
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
            max_sessions: self.max_sessions.or(base.max_sessions),
            shared_workspace: self.shared_workspace.or(base.shared_workspace),
            tools,
            isolation,
            egress,
        }
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            body_timeout_secs: 30,
            max_connections: 4096,
            max_sessions: 64,
            session_idle_secs: 15 * 60,
            shutdown_grace_secs: 10,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            principal_workspaces: None,
            principal: PrincipalSettings::default(),
            principals: std::collections::BTreeMap::new(),
        }
    }
}

impl HttpLimits {
    fn check(&self) -> anyhow::Result<()> {
        if !(1024..=256 * 1024 * 1024).contains(&self.max_body_bytes) {
            bail!("mcp.http.max_body_bytes must be between 1024 and 268435456");
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            bail!("mcp.http.max_connections must be between 1 and 1000000");
        }
        if !(1..=3600).contains(&self.body_timeout_secs) {
            bail!("mcp.http.body_timeout_secs must be between 1 and 3600");
        }
        if !(1..=100_000).contains(&self.max_sessions) {
            bail!("mcp.http.max_sessions must be between 1 and 100000");
        }
        if !(1..=7 * 24 * 3600).contains(&self.session_idle_secs) {
            bail!("mcp.http.session_idle_secs must be between 1 and 604800");
        }
        if self.shutdown_grace_secs > 3600 {
            bail!("mcp.http.shutdown_grace_secs must be at most 3600");
        }
        let named = self
            .principals
            .iter()
            .map(|(n, p)| (format!("principals.{n}"), p));
        for (name, principal) in
            std::iter::once(("principal".to_owned(), &self.principal)).chain(named)
        {
            if principal.max_sessions == Some(0) {
                bail!("mcp.http.{name}.max_sessions must be at least 1");
            }
        }
        Ok(())
    }
}

/// `[execution]`, the Python tools' `execution.*` keys (docs/python-compat.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Execution {
    /// `local` or `docker`.
    pub(crate) tool_runner: Option<SandboxKind>,
    /// Per-call time limit in seconds.
    pub(crate) timeout_secs: Option<f64>,
    /// A JSON-lines log of every finished call.
    pub(crate) audit_log: Option<PathBuf>,
    /// `[execution.docker]`: the Docker sandbox's settings.
    #[cfg(feature = "docker")]
    #[serde(default)]
    pub(crate) docker: jianmu_runtime::DockerSettings,
    /// Without the `docker` feature the table is accepted and ignored.
    #[cfg(not(feature = "docker"))]
    #[serde(default, rename = "docker")]
    _docker: Option<toml::Table>,
}

/// Where calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SandboxKind {
    /// In this process.
    Local,
    /// In a hardened container.
    Docker,
}

impl Config {
    /// Reads `path` if given, else `./jianmu.toml` if it exists, else the defaults.
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let (path, required) = match path {
            Some(p) => (p.to_owned(), true),
            None => (PathBuf::from("jianmu.toml"), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", path.display()));
            }
        };
        if !required {
            // Found here rather than named: it may only tighten (see `trust.rs`).
            let doc: toml::Value =
                toml::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
            let found = crate::trust::loosening(&doc);
            if !found.is_empty() {
                bail!(
                    "jianmu.toml in the current folder sets {}, which a settings file found \
                     here may not do (a cloned repository or an earlier command could have \
                     written it); it may only tighten what runs. To trust it, name it: \
                     --config jianmu.toml",
                    found.join(", ")
                );
            }
        }
        let mut config: Config =
            toml::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
        config.path = Some(std::path::absolute(&path).unwrap_or_else(|_| path.clone()));
        // Checked here, so that a wrong key is named before any tool is built.
        serde_json::from_value::<jianmu_process::IsolationSettings>(Value::Object(
            config.isolation.clone(),
        ))
        .with_context(|| format!("invalid [isolation] in {}", path.display()))?;
        let egress: jianmu_egress::EgressSettings =
            serde_json::from_value(Value::Object(config.egress.clone()))
                .with_context(|| format!("invalid [egress] in {}", path.display()))?;
        jianmu_egress::Policy::new(&egress)
            .map_err(|e| anyhow::anyhow!("{e} (in {})", path.display()))?;
        if let Some(ws) = &config.workspace
            && ws.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new("."));
            config.workspace = Some(base.join(ws));
        }
        if let Some(dir) = &config.mcp.http.principal_workspaces
            && dir.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new("."));
            config.mcp.http.principal_workspaces = Some(base.join(dir));
        }
        if let Some(t) = config.execution.timeout_secs
            && !(t.is_finite() && t > 0.0)
        {
            bail!(
                "invalid {}: execution.timeout_secs must be a positive number of seconds",
                path.display()
            );
        }
        config
            .mcp
            .http
            .check()
            .with_context(|| format!("invalid {}", path.display()))?;
        Ok(config)
    }
}
