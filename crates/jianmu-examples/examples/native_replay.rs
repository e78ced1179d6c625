//! Execute the model APIs' own tool calls: recorded Anthropic `tool_use` blocks and
//! OpenAI Responses call items, shaped as the vendors' documentation shows them, are
//! replayed through one session each, and every answer item is printed. No network.
//!
//! `cargo run -p jianmu-examples --example native_replay`

use jianmu_native::{Native, NativeOptions};
use jianmu_runtime::{Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::Value;

const ANTHROPIC: &str = include_str!("../../jianmu-native/tests/recorded/anthropic.jsonl");
const OPENAI: &str = include_str!("../../jianmu-native/tests/recorded/openai.jsonl");

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for (api, calls) in [("anthropic", ANTHROPIC), ("openai", OPENAI)] {
        let workspace = tempfile::tempdir()?;
        let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(workspace.path())))?;
        // The model sees the workspace as /repo.
        let native = Native::open(&runtime, NativeOptions::new().with_root("/repo"))?;
        println!("# {api}");
        for line in calls.lines() {
            let call: Value = serde_json::from_str(line)?;
            let answer = if api == "anthropic" {
                native.anthropic(&call).await?
            } else {
                native.openai(&call).await?
            };
            println!("{answer}");
        }
        native.close().await;
    }
    Ok(())
}
