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
    pub(crate) docker: jianmu_sandbox::DockerSettings,
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
        let mut config: Config =
            toml::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
        if let Some(ws) = &config.workspace
            && ws.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new("."));
            config.workspace = Some(base.join(ws));
        }
        if let Some(t) = config.execution.timeout_secs
            && !(t.is_finite() && t > 0.0)
        {
            bail!(
                "invalid {}: execution.timeout_secs must be a positive number of seconds",
                path.display()
            );
        }
        Ok(config)
    }
}
