//! Jianmu tools as rig tools.
//!
//! ```rust,ignore
//! let session = Arc::new(Session::open(SessionSettings::new(ToolConfig::new(dir)))?);
//! let mut agent = rig_agent::AgentBuilder::new(model);
//! for tool in jianmu_adapters::rig::session_tools(&session)? {
//!     agent = agent.portable_dynamic_tool(tool);
//! }
//! ```
//!
//! What the model sees is kept as far as rig carries it:
//!
//! - the tool's name, description and argument schema (in the object form
//!   function-calling APIs require: a tool that takes one string takes `{"input": ...}`);
//! - the answer's text as a text block, then its images as image blocks (with their
//!   media type). The structured JSON of an answer is left out: it says what the text
//!   says, and rig would show the model both;
//! - an error as a [`ToolExecutionError`] whose message is the one the model would read
//!   from jianmu (it is written for the model), with rig's kind for it
//!   ([`ToolErrorKind::InvalidArgs`] for invalid arguments, `Timeout`, `Cancelled`,
//!   `NotFound` for an unknown tool or one not compiled in, `PermissionDenied` for a
//!   call the policy denies, `Other` otherwise) and jianmu's own kind as its code
//!   (`invalid_arguments`, `timeout`, `denied`, ...).

/// The rig this adapter is built for, so a crate can name its types at the same
/// version.
pub use rig_core;

use std::sync::Arc;

use jianmu_runtime::Session;
use jianmu_tool_core::{DynRunner, ToolError, ToolOutput, ToolSet, ToolSpec};
use rig_core::message::{ImageMediaType, MimeType, ToolResultContent};
use rig_core::tool::{
    PortableDynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput as RigOutput,
};

use crate::call::{self, Caller};

/// Every tool of `session`, sorted by name, each calling through the session.
///
/// # Errors
/// A tool whose spec depends on settings it refuses.
pub fn session_tools(session: &Arc<Session>) -> Result<Vec<PortableDynamicTool>, ToolError> {
    Ok(call::session_callers(session)?
        .into_iter()
        .map(|(spec, caller)| new_tool(&spec, caller))
        .collect())
}

/// The tool `name` (a name or alias) of `session`, calling through the session.
///
/// # Errors
/// An unknown tool (listing the known names), one not compiled in (naming the feature
/// that adds it).
pub fn session_tool(session: &Arc<Session>, name: &str) -> Result<PortableDynamicTool, ToolError> {
    let (spec, caller) = call::session_named(session, name)?;
    Ok(new_tool(&spec, caller))
}

/// Every tool of `set`, in its order, each called through `runner` (a
/// `ToolRunner`, a sandbox, any layer stack) or, with `None`, in this process with no
/// layers.
pub fn toolset_tools(
    set: &Arc<ToolSet>,
    runner: Option<Arc<dyn DynRunner>>,
) -> Vec<PortableDynamicTool> {
    call::toolset_callers(set, runner)
        .into_iter()
        .map(|(spec, caller)| new_tool(&spec, caller))
        .collect()
}

fn new_tool(spec: &ToolSpec, caller: Caller) -> PortableDynamicTool {
    PortableDynamicTool::new(
        spec.name.clone(),
        spec.description.clone(),
        spec.parameters(),
        move |args| {
            let answer = caller(args);
            Box::pin(async move {
                match answer.await {
                    Ok(out) => Ok(to_rig_output(out)),
                    Err(e) => Err(to_rig_error(&e)),
                }
            })
        },
    )
}

/// A jianmu answer as rig's: its text, then its images.
pub fn to_rig_output(out: ToolOutput) -> RigOutput {
    let mut content = Vec::with_capacity(1 + out.images.len());
    content.push(ToolResultContent::text(out.text));
    for image in out.images {
        content.push(ToolResultContent::image_base64(
            image.base64,
            ImageMediaType::from_mime_type(&image.mime_type),
            None,
        ));
    }
    // Never empty: the text block is always there.
    RigOutput::content(content).unwrap_or_else(|_| RigOutput::text(""))
}

/// A jianmu error as rig's, with the message the model reads and jianmu's kind as its
/// code.
pub fn to_rig_error(error: &ToolError) -> ToolExecutionError {
    let (kind, code) = match error {
        ToolError::InvalidArguments { .. } => (ToolErrorKind::InvalidArgs, "invalid_arguments"),
        ToolError::Timeout { .. } => (ToolErrorKind::Timeout, "timeout"),
        ToolError::Cancelled { .. } => (ToolErrorKind::Cancelled, "cancelled"),
        ToolError::UnknownTool { .. } => (ToolErrorKind::NotFound, "unknown_tool"),
        ToolError::NotCompiled { .. } => (ToolErrorKind::NotFound, "not_compiled"),
        ToolError::Denied { .. } => (ToolErrorKind::PermissionDenied, "denied"),
        ToolError::Config { .. } => (ToolErrorKind::Other, "config"),
        ToolError::Runner { .. } => (ToolErrorKind::Other, "runner"),
        _ => (ToolErrorKind::Other, "failed"),
    };
    ToolExecutionError::new(kind, error.to_string()).with_code(code)
}
