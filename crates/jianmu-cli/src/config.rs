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
    /// `[checkpoints]`: checkpoints of the workspace before each turn's first change
    /// (accepted and unused in a build without them).
    #[serde(default)]
    #[cfg_attr(not(feature = "checkpoint"), allow(dead_code))]
    pub(crate) checkpoints: Option<Value>,
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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mcp {
    /// `[mcp.http]`: `jianmu mcp --http`.
    #[serde(default)]
    pub(crate) http: HttpLimits,
    /// Tools left out of `tools/list` until `tool_search` finds them: names, globs
    /// (`git_*`), effect tags (`network`) or feature names (`lsp`).
    #[serde(default)]
    pub(crate) defer: Vec<String>,
    /// Serve skills (`io.modelcontextprotocol/skills`): jianmu's own and the
    /// workspace's `.agents/skills` (and `.claude`, `.codex`, `.github`) folders.
    #[serde(default = "yes")]
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) skills: bool,
}

fn yes() -> bool {
    true
}

impl Default for Mcp {
    fn default() -> Self {
        Self {
            http: HttpLimits::default(),
            defer: Vec::new(),
            skills: true,
        }
    }
}

/// `[mcp.http]`: the MCP service's own settings (`jianmu-mcp`).
#[cfg(feature = "mcp")]
pub(crate) use jianmu_mcp::HttpLimits;
/// `[mcp.http]`, kept as written when the command has no MCP service.
#[cfg(not(feature = "mcp"))]
pub(crate) type HttpLimits = toml::Table;

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
        #[cfg(feature = "mcp")]
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
        #[cfg(feature = "mcp")]
        config
            .mcp
            .http
            .check()
            .with_context(|| format!("invalid {}", path.display()))?;
        Ok(config)
    }
}
