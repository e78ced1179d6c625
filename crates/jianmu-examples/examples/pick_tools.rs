//! Pick built-in tools by name (the Cargo features of `jianmu-provider` decide which
//! exist), call them through the usual runner stack, and watch the events.
//!
//! `cargo run -p jianmu-examples --example pick_tools`

use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::ToolRunner;
use jianmu_tool_core::{ToolConfig, ToolError, ToolSet};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ToolError> {
    let workspace = tempfile::tempdir().map_err(|e| ToolError::failed(e.to_string()))?;
    let provider = BuiltinToolProvider::new(ToolConfig::new(workspace.path()));
    // Aliases work too: `file_write` is `write_file`.
    let tools = ToolSet::resolve(&provider, &["calculator", "file_write", "read_file"])?;

    let runner = ToolRunner::local().with_timeout(Duration::from_secs(30));
    runner.events().subscribe(|e| {
        eprintln!(
            "{:<20} {:<12} {} {:?}",
            e.kind.as_str(),
            e.tool,
            e.call_id,
            e.elapsed
        );
    });

    let out = tools
        .execute("calculator", json!("2**100"), Some(&runner))
        .await?;
    println!("calculator: {}", out.text);

    let args = json!({"path": "notes/hello.txt", "content": "hello\n"});
    let out = tools.execute("file_write", args, Some(&runner)).await?;
    println!(
        "write_file: {} / {}",
        out.text,
        out.structured.unwrap_or_default()
    );

    // A refused path is an error the model reads, not a crash.
    let err = tools
        .execute("read_file", json!({"path": "../etc/passwd"}), Some(&runner))
        .await
        .unwrap_err();
    println!("read_file: {err} (model-facing: {})", err.is_model_facing());
    Ok(())
}
