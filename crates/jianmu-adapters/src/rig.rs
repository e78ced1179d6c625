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

use std::sync::Arc;

use jianmu_runtime::Session;
use jianmu_tool_core::{DynRunner, ToolError, ToolOutput, ToolSet, ToolSpec};
use rig_core::message::{ImageMediaType, MimeType, ToolResultContent};
use rig_core::tool::{
    PortableDynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput as RigOutput,
};

/// Every tool of `session`, sorted by name, each calling through the session.
///
/// # Errors
/// A tool whose spec depends on settings it refuses.
pub fn session_tools(session: &Arc<Session>) -> Result<Vec<PortableDynamicTool>, ToolError> {
    let specs = jianmu_runtime::tool_specs(&session.runtime().settings().tools)?;
    Ok(specs
        .iter()
        .map(|spec| from_session(Arc::clone(session), spec))
        .collect())
}

/// The tool `name` (a name or alias) of `session`, calling through the session.
///
/// # Errors
/// An unknown tool (listing the known names), one not compiled in (naming the feature
/// that adds it).
pub fn session_tool(session: &Arc<Session>, name: &str) -> Result<PortableDynamicTool, ToolError> {
    let spec = jianmu_runtime::tool_spec(&session.runtime().settings().tools, name)?;
    Ok(from_session(Arc::clone(session), &spec))
}

/// Every tool of `set`, in its order, each called through `runner` (a
/// `ToolRunner`, a sandbox, any layer stack) or, with `None`, in this process with no
/// layers.
pub fn toolset_tools(
    set: &Arc<ToolSet>,
    runner: Option<Arc<dyn DynRunner>>,
) -> Vec<PortableDynamicTool> {
    set.specs()
        .into_iter()
        .map(|spec| {
            let set = Arc::clone(set);
            let runner = runner.clone();
            let name = spec.name.clone();
            new_tool(spec, move |args| {
                let set = Arc::clone(&set);
                let runner = runner.clone();
                let name = name.clone();
                Box::pin(async move {
                    let out = set.execute(&name, args, runner.as_deref()).await;
                    answer(out)
                })
            })
        })
        .collect()
}

fn from_session(session: Arc<Session>, spec: &ToolSpec) -> PortableDynamicTool {
    let name = spec.name.clone();
    new_tool(spec, move |args| {
        let session = Arc::clone(&session);
        let name = name.clone();
        Box::pin(async move { answer(session.call(&name, args).await) })
    })
}

type Call = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<RigOutput, ToolExecutionError>> + Send>,
>;

fn new_tool(
    spec: &ToolSpec,
    call: impl Fn(serde_json::Value) -> Call + Send + Sync + 'static,
) -> PortableDynamicTool {
    PortableDynamicTool::new(
        spec.name.clone(),
        spec.description.clone(),
        spec.parameters(),
        call,
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

fn answer(out: Result<ToolOutput, ToolError>) -> Result<RigOutput, ToolExecutionError> {
    match out {
        Ok(out) => Ok(to_rig_output(out)),
        Err(e) => Err(to_rig_error(&e)),
    }
}
