//! The `Runner` trait: where a validated call actually runs (in-process, in a container).

use async_trait::async_trait;
use serde_json::Value;

use crate::{CallContext, ToolError, ToolHandle, ToolOutput};

/// Runs validated calls. Sandboxes, timeouts, events and policies are runners that
/// wrap other runners, like layers.
#[async_trait]
pub trait Runner: Send + Sync {
    /// Runs `tool` on `args`, which already went through [`ToolHandle::prepare_args`].
    ///
    /// # Errors
    /// The tool's own errors, or the runner's when it cannot run the tool.
    async fn run(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError>;
}

#[async_trait]
impl<R: Runner + ?Sized> Runner for std::sync::Arc<R> {
    async fn run(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        (**self).run(tool, args, cx).await
    }
}

#[async_trait]
impl<R: Runner + ?Sized> Runner for Box<R> {
    async fn run(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        (**self).run(tool, args, cx).await
    }
}
