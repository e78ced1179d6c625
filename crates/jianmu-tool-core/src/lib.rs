//! The contract crate of Jianmu tools: everything a tool, a registry and a runner agree
//! on, and nothing else (no process, HTTP or container code).
//!
//! - [`Tool`] is the typed trait for authors; [`DynTool`] its object-safe twin;
//!   [`FunctionTool`] a tool made from a closure (what `#[tool]` produces).
//! - [`ToolSpec`] describes a tool: name, description, input and output JSON Schema,
//!   `parallel_safe`, `effect_tags`.
//! - [`ToolHandle::execute`] is the call path: merge injected arguments, validate against
//!   the input schema (every violation, with its JSON pointer), then run through a
//!   [`Runner`] ([`InProcess`] when none is given).
//! - [`EventBus`] carries `execution.started` / `completed` / `failed` events.
//! - [`ToolSet`] holds the tools an agent may call; [`ToolRegistration`] is what tool
//!   crates submit to the `inventory` registry.
//!
//! # Example
//!
//! ```
//! use jianmu_tool_core::{FunctionTool, ToolError, ToolHandle, ToolSet, ToolSpec};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let shout = FunctionTool::from_sync(ToolSpec::new("shout", "Upper-cases text."), |v| {
//!     Ok(v.as_str().unwrap_or_default().to_uppercase().into())
//! });
//! let tools = ToolSet::from_tools([ToolHandle::new(shout)?]);
//! // A bare-string tool takes a JSON string or {"input": ...}.
//! let out = tools.execute("shout", json!({"input": "hi"}), None).await?;
//! assert_eq!(out.text, "HI");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod approval;
mod args;
mod diagnose;
mod error;
mod events;
mod export;
mod function;
mod kept;
mod nested;
mod node;
mod output;
mod periodic;
mod policy;
mod progress;
mod registry;
mod runner;
mod search;
mod set;
mod spec;
mod text;
mod tool;

pub use approval::{Answer, Approver, Ask, Decision};
pub use args::INPUT_KEY;
pub use diagnose::{Change, Diagnose, DiagnoseRegistration, EditDiagnostics, diagnose};
pub use error::{BoxError, ToolError, Violation, error_chain};
pub use events::{Emitter, EventBus, EventKind, ExecutionEvent, SubscriptionId};
pub use export::{Annotations, SchemaFormat};
pub use function::FunctionTool;
pub use kept::{Kept, KeptState, Lost, ShellState};
pub use nested::{CALLS_TOOLS, Calls, SESSION_STATE, calls_tools, runs_with_session};
pub use node::ToolNode;
pub use output::{Image, IntoToolOutput, Json, Structured, ToolOutput, cut_chars};
pub use periodic::spawn_periodic;
pub use policy::{CALL_RULES, Policy, Tightening, WRITE_EFFECTS, is_call_rule};
pub use progress::{Progress, ProgressSink};
pub use registry::{
    BuildFn, SavedOutputs, Scope, SpecFn, ToolConfig, ToolRegistration, registrations, static_spec,
};
pub use runner::{BoxFuture, DynRunner, InProcess, PreparedCall, Runner};
pub use search::{Deferral, ToolIndex};
pub use set::{ToolCall, ToolProvider, ToolSet};
pub use spec::{ToolSpec, WHOLE_TEXT, output_schema_of, schema_for};
pub use text::{ECHO_CHARS, echo, escape_controls, random_hex, rfc3339, shorten};
pub use tool::{CallContext, DynTool, ExecuteOptions, Tool, ToolHandle, spec_of};

#[doc(hidden)]
pub mod __private {
    pub use futures;
    pub use inventory;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

#[cfg(test)]
mod tests;
