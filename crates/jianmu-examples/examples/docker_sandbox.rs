//! Run any tool inside a hardened, long-lived Docker container instead of this
//! process. Needs a Docker engine and the sandbox image (`jianmu sandbox build-image`).
//!
//! `cargo run -p jianmu-examples --example docker_sandbox -- /path/to/workspace`

use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::{DockerSandbox, DockerSettings, ToolRunner};
use jianmu_tool_core::{ToolConfig, ToolSet};
use serde_json::json;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Sandbox errors carry their cause as a source: print the whole chain.
            eprintln!("error: {}", jianmu_tool_core::error_chain(&*e));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = std::env::args().nth(1).unwrap_or_else(|| ".".to_owned());
    let config = ToolConfig::new(&workspace);
    // The host builds and validates; the container runs the call with the same id.
    let tools = ToolSet::lazy(BuiltinToolProvider::new(config.clone()))?;
    let sandbox = DockerSandbox::new(&workspace, DockerSettings::default())?.with_tools(config);
    let runner = ToolRunner::new(sandbox).with_timeout(Duration::from_secs(60));

    let out = tools
        .execute("bash", json!({"command": "id; ls"}), Some(&runner))
        .await;
    // The container is removed whatever the call did.
    runner.shutdown().await;
    println!("{}", out?.text);
    Ok(())
}
