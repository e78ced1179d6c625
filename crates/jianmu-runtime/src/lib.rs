//! Where Jianmu tools run: sandboxes, and the layers around them.
//!
//! Every sandbox implements the one runner contract, [`Runner`] from
//! `jianmu-tool-core`:
//! - [`LocalSandbox`] runs tools in-process;
//! - `DockerSandbox` (feature `docker`) runs any tool in a hardened container.
//!
//! Layers ([`layer`]) wrap any runner with one concern each: policy, events (and so
//! the [`AuditLog`]), timeout, tracing span. [`ToolRunner`] is the stack the command
//! and the MCP server use.
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

mod audit;
pub mod layer;
mod runner;

pub use audit::AuditLog;
pub use jianmu_tool_core::{
    DynRunner, EventBus, EventKind, ExecutionEvent, LocalSandbox, Policy, Runner,
};
pub use layer::RunnerExt;
pub use runner::ToolRunner;

#[cfg(feature = "docker")]
#[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
pub use jianmu_docker::{self as docker, DockerSandbox, DockerSettings, SandboxError, TlsFiles};

#[cfg(test)]
mod tests;
