//! Running Jianmu tool calls: sessions, the layers around every call, and the
//! sandboxes calls run in.
//!
//! A [`Session`] is what one conversation owns: its tools and their state, the
//! runner stack, its workspace and its sandbox's resources. It is opened from one
//! [`SessionSettings`] and closed with one call; a [`Runtime`] holds what the
//! sessions of one process share (the event bus and audit log, the session limit,
//! the Docker engine and warm pool). Every front end (the `jianmu` command, the MCP
//! servers, library users) runs calls through a session:
//!
//! ```
//! use jianmu_runtime::{Session, SessionSettings};
//! use jianmu_tool_core::ToolConfig;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir();
//! let session = Session::open(SessionSettings::new(ToolConfig::new(&dir)))?;
//! // With the provider's tool features: session.call("calculator", "6*7".into()).await?
//! let closed = session.close().await;
//! assert!(closed.is_complete());
//! # Ok(())
//! # }
//! ```
//!
//! The tools are the caller's choice ([`Tools`]): the built-in ones by default
//! (feature `builtin`, on by default), or any [`ToolSet`] or provider, built per
//! session from its configuration ([`SessionSettings::with_tools`]). Built without
//! `builtin`, the runtime links no built-in tool.
//!
//! [`ToolSet`]: jianmu_tool_core::ToolSet
//!
//! Where a call runs implements the one runner contract, [`Runner`] from
//! `jianmu-tool-core`:
//! - [`InProcess`] runs tools in this process (it isolates nothing itself: tools that
//!   start programs confine them with their own jail);
//! - `DockerSandbox` (feature `docker`, from `jianmu-sandbox`) runs any tool in a
//!   hardened container.
//!
//! Layers ([`layer`]) wrap any runner with one concern each: policy, events (and so
//! the [`AuditLog`]), timeout, tracing span. [`ToolRunner`] is the stack every
//! session's calls go through.
//!
//! ```
//! use std::time::Duration;
//! use jianmu_runtime::ToolRunner;
//! use jianmu_tool_core::{FunctionTool, ToolHandle, ToolSet, ToolSpec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), jianmu_tool_core::ToolError> {
//! let runner = ToolRunner::local().with_timeout(Duration::from_secs(30));
//! runner.events().subscribe(|e| eprintln!("{} {}", e.kind.as_str(), e.tool));
//! let echo = FunctionTool::from_sync(ToolSpec::new("echo", "Echoes."), |v| Ok(v.to_string().into()));
//! let tools = ToolSet::from_tools([ToolHandle::new(echo)?]);
//! let out = tools.execute("echo", "hi".into(), Some(&runner)).await?;
//! assert_eq!(out.text, "\"hi\"");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod approval;
mod audit;
#[cfg(feature = "checkpoint")]
mod checkpoints;
pub mod layer;
mod runner;
mod session;
mod source;

pub use audit::AuditLog;
pub use jianmu_tool_core::{
    DynRunner, EventBus, EventKind, ExecutionEvent, InProcess, Policy, Runner,
};
pub use layer::RunnerExt;
pub use layer::rules::BadRule;
pub use runner::ToolRunner;
pub use session::{
    Backend, Closed, Opening, Resumed, Runtime, Session, SessionError, SessionSettings, Suspended,
};
pub use source::Tools;

/// Checkpoints of a session's workspace (feature `checkpoint`): the store and its
/// settings.
#[cfg(feature = "checkpoint")]
#[cfg_attr(docsrs, doc(cfg(feature = "checkpoint")))]
pub use jianmu_checkpoint as checkpoint;

#[cfg(feature = "docker")]
#[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
pub use jianmu_sandbox::{self as docker, DockerSandbox, DockerSettings, SandboxError, TlsFiles};

/// Whether every entry of `policy` can be used: its call rules (`command:` prefixes,
/// `command-re:` expressions, `path:` globs) compile. [`Runtime::new`] checks it too.
///
/// # Errors
/// The first entry that cannot, and why.
pub fn check_policy(policy: &Policy) -> Result<(), BadRule> {
    layer::rules::CallRules::check(policy)
}

/// The spec of every tool linked into this binary, sorted by name, as `config` sets
/// them up. No tool is built: nothing is opened, made or started.
///
/// # Errors
/// A tool whose spec depends on settings it refuses.
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub fn tool_specs(
    config: &jianmu_tool_core::ToolConfig,
) -> Result<Vec<jianmu_tool_core::ToolSpec>, jianmu_tool_core::ToolError> {
    let set =
        jianmu_tool_core::ToolSet::lazy(jianmu_provider::BuiltinToolProvider::new(config.clone()))?;
    Ok(set.specs().into_iter().cloned().collect())
}

/// The spec of the tool `name` (a name or alias), as `config` sets it up, without
/// building the tool.
///
/// # Errors
/// An unknown tool (listing the known names and aliases), one not compiled in
/// (naming the feature that adds it).
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub fn tool_spec(
    config: &jianmu_tool_core::ToolConfig,
    name: &str,
) -> Result<jianmu_tool_core::ToolSpec, jianmu_tool_core::ToolError> {
    let set =
        jianmu_tool_core::ToolSet::lazy(jianmu_provider::BuiltinToolProvider::new(config.clone()))?;
    Ok(set.tool(name)?.spec().clone())
}

/// The tool settings an answer budget of `max_chars` characters sets, for each
/// built-in tool whose long answers keep their start and end and save the whole
/// (`bash`: `keep_head` four fifths and `keep_tail` one fifth, in bytes;
/// `http_request`: `max_response_length`; `python_repl`, `rhai_repl`, `run_script`
/// and `grep_search`: `max_output`), and for the paged readers (`web_fetch`: `max_length`; `read_file`:
/// `pdf_chars`). A tool's own setting wins over it.
pub const OUTPUT_BUDGET_KEYS: &[(&str, &str)] = &[
    ("bash", "keep_head"),
    ("bash", "keep_tail"),
    ("http_request", "max_response_length"),
    ("python_repl", "max_output"),
    ("rhai_repl", "max_output"),
    ("run_script", "max_output"),
    ("grep_search", "max_output"),
    ("web_fetch", "max_length"),
    ("read_file", "pdf_chars"),
];

/// `config` with an answer budget of `max_chars` characters for every built-in tool
/// whose settings do not set their own ([`OUTPUT_BUDGET_KEYS`]): `[outputs] max_chars`
/// of `jianmu.toml`.
#[must_use]
pub fn with_output_budget(
    config: jianmu_tool_core::ToolConfig,
    max_chars: usize,
) -> jianmu_tool_core::ToolConfig {
    let max_chars = max_chars.max(100);
    OUTPUT_BUDGET_KEYS
        .iter()
        .fold(config, |config, &(tool, key)| {
            let value = match key {
                "keep_head" => max_chars - max_chars / 5,
                "keep_tail" => max_chars / 5,
                // web_fetch takes at most 200,000 characters a part.
                "max_length" => max_chars.min(200_000),
                _ => max_chars,
            };
            config.with_default_setting(tool, key, serde_json::Value::from(value))
        })
}

/// The built-in tools whose programs run in a jail, each with an `isolation` table
/// (`[tools.NAME.isolation]`; the git tools share `git`, the language servers `lsp`).
pub const ISOLATED_TOOLS: &[&str] = &["bash", "python_repl", "git", "lsp"];

/// `config` with `defaults` (`[isolation]` of `jianmu.toml`: any key of an
/// `isolation` table) under every isolated tool's own `isolation` table
/// ([`ISOLATED_TOOLS`]): a key the tool's table sets wins.
#[must_use]
pub fn with_isolation_defaults(
    config: jianmu_tool_core::ToolConfig,
    defaults: &serde_json::Map<String, serde_json::Value>,
) -> jianmu_tool_core::ToolConfig {
    ISOLATED_TOOLS.iter().fold(config, |config, &tool| {
        let mut merged = defaults.clone();
        if let Some(own) = config
            .raw_settings(tool)
            .and_then(|s| s.get("isolation"))
            .and_then(serde_json::Value::as_object)
        {
            merged.extend(own.clone());
        }
        config.with_setting(tool, "isolation", serde_json::Value::Object(merged))
    })
}

/// The built-in tools whose commands reach outside hosts through the session's
/// egress proxy, each with an `egress` table (`[tools.NAME.egress]`).
pub const EGRESS_TOOLS: &[&str] = &["bash", "python_repl"];

/// `config` with `defaults` (`[egress]` of `jianmu.toml`) under every egress tool's
/// own `egress` table ([`EGRESS_TOOLS`]): a key the tool's table sets wins. `extra`
/// (`--egress HOST[:PORT]`) is added to every one's `allow` list, whatever set it.
#[must_use]
pub fn with_egress_defaults(
    config: jianmu_tool_core::ToolConfig,
    defaults: &serde_json::Map<String, serde_json::Value>,
    extra: &[String],
) -> jianmu_tool_core::ToolConfig {
    if defaults.is_empty() && extra.is_empty() {
        return config;
    }
    EGRESS_TOOLS.iter().fold(config, |config, &tool| {
        let mut merged = defaults.clone();
        if let Some(own) = config
            .raw_settings(tool)
            .and_then(|s| s.get("egress"))
            .and_then(serde_json::Value::as_object)
        {
            merged.extend(own.clone());
        }
        if !extra.is_empty() {
            let mut allow = merged
                .get("allow")
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default();
            allow.extend(extra.iter().map(|e| serde_json::Value::from(e.as_str())));
            merged.insert("allow".into(), serde_json::Value::Array(allow));
        }
        config.with_setting(tool, "egress", serde_json::Value::Object(merged))
    })
}

/// `config` with `paths` added to every isolated tool's `read_deny` ([`ISOLATED_TOOLS`]),
/// whatever its settings say: what no session's commands may see (the command's token
/// file, configuration and audit log, the folders of other sessions and principals).
#[must_use]
pub fn with_hidden_paths(
    config: jianmu_tool_core::ToolConfig,
    paths: &[std::path::PathBuf],
) -> jianmu_tool_core::ToolConfig {
    if paths.is_empty() {
        return config;
    }
    ISOLATED_TOOLS.iter().fold(config, |config, &tool| {
        let mut deny: Vec<serde_json::Value> = config
            .raw_settings(tool)
            .and_then(|s| s.get("isolation"))
            .and_then(|i| i.get("read_deny"))
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        deny.extend(
            paths
                .iter()
                .map(|p| serde_json::Value::from(p.to_string_lossy().into_owned())),
        );
        config.with_setting(tool, "isolation", serde_json::json!({ "read_deny": deny }))
    })
}

#[cfg(test)]
mod tests;
