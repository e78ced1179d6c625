//! `BuiltinToolProvider`: the built-in tools of Jianmu, found by name.
//!
//! Each tool family is its own crate behind a Cargo feature; a crate that is not enabled
//! is not linked, and its tools are simply absent. Tool crates register const factories
//! through `inventory`; the provider collects them on first use, sorted by name.
//!
//! # Cargo features
//!
//! | Name | Description | Default? |
//! |---|---|---|
//! | `calculator` | `calculator` (crate `jianmu-tool-calc`) | No |
//! | `checkpoint` | `checkpoint_list`, `checkpoint_diff`, `checkpoint_restore`: a session's checkpoints of its workspace (crate `jianmu-tool-checkpoint`) | No |
//! | `code` | `glob_search`, `grep_search`, `file_info`, `str_replace`, `edit_file`, `apply_patch` (crate `jianmu-tool-code`) | No |
//! | `fs` | `read_file`, `write_file`, `list_dir`, `notebook_edit` (crate `jianmu-tool-fs`) | No |
//! | `git` | `git_status`, `git_diff`, `git_log`, `git_show`, `git_blame`, `git_add`, `git_commit`, `git_branch`, `git_checkout` (crate `jianmu-tool-git`) | No |
//! | `http` | `http_request`, `web_fetch` (crate `jianmu-tool-http`) | No |
//! | `lsp` | `diagnostics`, `definition`, `references`, `hover`, `symbols`, and diagnostics after edits (crate `jianmu-tool-lsp`) | No |
//! | `script` | `rhai_repl`, `python_repl`, `run_script` (crate `jianmu-tool-script`) | No |
//! | `search` | `duckduckgo_search` (crate `jianmu-tool-search`) | No |
//! | `shell` | `bash`, `bash_output`, `bash_kill`, `bash_jobs`, `expose_port` (crate `jianmu-tool-shell`) | No |
//! | `full` | every tool above | No |
//!
//! # Example
//!
//! ```
//! use jianmu_provider::BuiltinToolProvider;
//! use jianmu_tool_core::{ToolConfig, ToolSet};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), jianmu_tool_core::ToolError> {
//! let provider = BuiltinToolProvider::new(ToolConfig::new("."));
//! # #[cfg(feature = "calculator")] {
//! let tools = ToolSet::resolve(&provider, &["calculator"])?;
//! let out = tools.execute("calculator", "2**100".into(), None).await?;
//! assert_eq!(out.text, "1267650600228229401496703205376");
//! # }
//! // Tools whose crate is not compiled in are named with the feature that adds them.
//! # #[cfg(not(feature = "fs"))]
//! assert!(provider.resolve_named_tools(&["read_file"]).unwrap_err().to_string().contains("`fs`"));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use jianmu_tool_core::{
    ToolConfig, ToolError, ToolHandle, ToolProvider, ToolRegistration, ToolSpec, registrations,
};

// A crate enabled by a feature but never named is not linked, and its registrations
// vanish with it: name each one here.
#[cfg(feature = "calculator")]
use jianmu_tool_calc as _;
#[cfg(feature = "checkpoint")]
use jianmu_tool_checkpoint as _;
#[cfg(feature = "code")]
use jianmu_tool_code as _;
#[cfg(feature = "fs")]
use jianmu_tool_fs as _;
#[cfg(feature = "git")]
use jianmu_tool_git as _;
#[cfg(feature = "http")]
use jianmu_tool_http as _;
#[cfg(feature = "lsp")]
use jianmu_tool_lsp as _;
#[cfg(feature = "script")]
use jianmu_tool_script as _;
#[cfg(feature = "search")]
use jianmu_tool_search as _;
#[cfg(feature = "shell")]
use jianmu_tool_shell as _;

/// Alias → canonical name, as the Python tool set defines them (docs/python-compat.md).
pub const ALIASES: &[(&str, &str)] = &[
    ("file_read", "read_file"),
    ("file_write", "write_file"),
    ("python_eval", "python_repl"),
    ("web_search", "duckduckgo_search"),
];

/// Every built-in tool and the Cargo feature of this crate that adds it.
pub const BUILTIN_TOOLS: &[(&str, &str)] = &[
    ("apply_patch", "code"),
    ("bash", "shell"),
    ("bash_jobs", "shell"),
    ("bash_kill", "shell"),
    ("bash_output", "shell"),
    ("calculator", "calculator"),
    ("checkpoint_diff", "checkpoint"),
    ("checkpoint_list", "checkpoint"),
    ("checkpoint_restore", "checkpoint"),
    ("definition", "lsp"),
    ("diagnostics", "lsp"),
    ("duckduckgo_search", "search"),
    ("edit_file", "code"),
    ("expose_port", "shell"),
    ("file_info", "code"),
    ("git_add", "git"),
    ("git_blame", "git"),
    ("git_branch", "git"),
    ("git_checkout", "git"),
    ("git_commit", "git"),
    ("git_diff", "git"),
    ("git_log", "git"),
    ("git_show", "git"),
    ("git_status", "git"),
    ("glob_search", "code"),
    ("grep_search", "code"),
    ("hover", "lsp"),
    ("http_request", "http"),
    ("list_dir", "fs"),
    ("notebook_edit", "fs"),
    ("python_repl", "script"),
    ("read_file", "fs"),
    ("references", "lsp"),
    ("rhai_repl", "script"),
    ("run_script", "script"),
    ("str_replace", "code"),
    ("symbols", "lsp"),
    ("web_fetch", "http"),
    ("write_file", "fs"),
];

/// The canonical name for `name`: the alias target, or `name` itself.
pub fn canonical_tool_name(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, canonical)| canonical)
}

/// The Cargo feature that adds the built-in tool `name` (aliases accepted).
pub fn feature_for(name: &str) -> Option<&'static str> {
    let name = canonical_tool_name(name);
    BUILTIN_TOOLS
        .iter()
        .find(|(tool, _)| *tool == name)
        .map(|(_, feature)| *feature)
}

fn registry() -> &'static BTreeMap<&'static str, Vec<&'static ToolRegistration>> {
    static REGISTRY: OnceLock<BTreeMap<&'static str, Vec<&'static ToolRegistration>>> =
        OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for registration in registrations() {
            map.entry(registration.name).or_default().push(registration);
        }
        map
    })
}

/// The names of every tool linked into this binary, sorted. Besides the built-in tools
/// of the enabled features, this includes tools other crates register.
pub fn available_tools() -> Vec<&'static str> {
    registry().keys().copied().collect()
}

/// Builds built-in (and other registered) tools from one configuration.
#[derive(Debug, Clone, Default)]
pub struct BuiltinToolProvider {
    config: ToolConfig,
}

impl BuiltinToolProvider {
    /// A provider whose tools are built from `config`.
    pub fn new(config: ToolConfig) -> Self {
        Self { config }
    }

    /// The configuration tools are built from.
    pub fn config(&self) -> &ToolConfig {
        &self.config
    }

    /// Builds one tool by name or alias.
    ///
    /// # Errors
    /// [`ToolError::NotCompiled`] naming the feature to enable for a built-in tool that
    /// is not linked, [`ToolError::UnknownTool`] listing the available names for any
    /// other name, [`ToolError::Config`] when the tool rejects its settings.
    pub fn build(&self, name: &str) -> Result<ToolHandle, ToolError> {
        (self.registration(name)?.build)(&self.config)
    }

    /// The spec of one tool by name or alias, without building it.
    ///
    /// # Errors
    /// As [`BuiltinToolProvider::build`], but settings are only checked when the tool
    /// is built.
    pub fn spec(&self, name: &str) -> Result<ToolSpec, ToolError> {
        (self.registration(name)?.spec)(&self.config)
    }

    /// One tool by name or alias, known by its spec until its first call builds it
    /// ([`ToolHandle::deferred`]).
    ///
    /// # Errors
    /// As [`BuiltinToolProvider::spec`].
    pub fn deferred(&self, name: &str) -> Result<ToolHandle, ToolError> {
        let registration = self.registration(name)?;
        let config = self.config.clone();
        Ok(ToolHandle::deferred(
            (registration.spec)(&config)?,
            move || (registration.build)(&config),
        ))
    }

    fn registration(&self, name: &str) -> Result<&'static ToolRegistration, ToolError> {
        let canonical = canonical_tool_name(name);
        match registry().get(canonical).map(Vec::as_slice) {
            Some([registration]) => Ok(registration),
            Some(_) => Err(ToolError::Config {
                tool: canonical.to_owned(),
                message: "more than one linked crate registers a tool of this name".into(),
            }),
            None => Err(match feature_for(canonical) {
                Some(feature) => ToolError::NotCompiled {
                    name: canonical.to_owned(),
                    feature: feature.to_owned(),
                },
                None => ToolError::UnknownTool {
                    name: name.to_owned(),
                    known: available_tools().into_iter().map(str::to_owned).collect(),
                },
            }),
        }
    }

    /// Builds the named tools, in the order given.
    ///
    /// # Errors
    /// As [`BuiltinToolProvider::build`], for the first name that fails.
    pub fn resolve_named_tools(&self, names: &[&str]) -> Result<Vec<ToolHandle>, ToolError> {
        names.iter().map(|name| self.build(name)).collect()
    }
}

/// As a provider, tools are deferred: a [`ToolSet::lazy`](jianmu_tool_core::ToolSet::lazy)
/// set of them lists specs and validates arguments without building any tool, and
/// builds each on its first call. [`ToolProvider::resolve`] and
/// [`ToolProvider::tools`] build at once.
impl ToolProvider for BuiltinToolProvider {
    fn tools(&self) -> Result<Vec<ToolHandle>, ToolError> {
        self.resolve_named_tools(&available_tools())
    }

    fn resolve(&self, names: &[&str]) -> Result<Vec<ToolHandle>, ToolError> {
        self.resolve_named_tools(names)
    }

    fn aliases(&self) -> &[(&'static str, &'static str)] {
        ALIASES
    }

    fn names(&self) -> Result<Vec<String>, ToolError> {
        Ok(available_tools().into_iter().map(str::to_owned).collect())
    }

    fn build(&self, name: &str) -> Result<ToolHandle, ToolError> {
        self.deferred(name)
    }
}

#[cfg(test)]
mod tests;
