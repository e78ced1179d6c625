//! Run a model's batch of calls: parallel-safe calls run together, the others alone
//! and in order; a read-only policy refuses writes before they run; layers are added
//! one by one to any runner.
//!
//! `cargo run -p jianmu-examples --example batch_with_policy`

use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::{InProcess, Policy, RunnerExt as _};
use jianmu_tool_core::{ToolCall, ToolConfig, ToolError, ToolSet};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ToolError> {
    let workspace = tempfile::tempdir().map_err(|e| ToolError::failed(e.to_string()))?;
    std::fs::write(workspace.path().join("a.txt"), "alpha\n")
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let provider = BuiltinToolProvider::new(ToolConfig::new(workspace.path()));
    let tools = ToolSet::from_providers(&[&provider])?;

    let read_only = Policy {
        read_only: true,
        ..Policy::default()
    };
    let runner = InProcess
        .with_timeout(Duration::from_secs(10))
        .with_policy(read_only)
        .with_span();

    let calls = [
        ToolCall::new("calculator", json!("6*7")).with_call_id("call_1"),
        ToolCall::new("read_file", json!({"path": "a.txt"})).with_call_id("call_2"),
        ToolCall::new("write_file", json!({"path": "b.txt", "content": "no"}))
            .with_call_id("call_3"),
        ToolCall::new("list_dir", json!({"path": "."})).with_call_id("call_4"),
    ];
    for (call, result) in calls
        .iter()
        .zip(tools.execute_batch(&calls, Some(&runner)).await)
    {
        match result {
            Ok(out) => println!("{}: {}", call.name, out.text.trim_end()),
            Err(e) => println!("{}: refused: {e}", call.name),
        }
    }
    Ok(())
}
