//! `LocalSandbox`: runs tools in this process.

use async_trait::async_trait;
use jianmu_tool_core::{CallContext, ToolError, ToolHandle, ToolOutput};
use serde_json::Value;

use crate::Sandbox;

/// Runs every tool in-process, on the calling task.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSandbox;

#[async_trait]
impl Sandbox for LocalSandbox {
    async fn run_tool(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        tool.run_prepared(args, cx).await
    }

    fn name(&self) -> &str {
        "local"
    }
}
