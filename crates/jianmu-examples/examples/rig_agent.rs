//! A rig agent whose tools are jianmu's: every tool of a session, each call going
//! through the session (its policy, time limit, events and sandbox). The model is
//! rig's own scripted test model, so this runs with no network and no key; put a
//! provider's model in its place for a real agent.
//!
//! `cargo run -p jianmu-examples --example rig_agent`

use std::sync::Arc;

use jianmu_runtime::{Session, SessionSettings};
use jianmu_tool_core::ToolConfig;
use rig_agent::AgentBuilder;
use rig_agent::completion::Prompt;
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_agent::tool::DynamicTool;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = tempfile::tempdir()?;
    let session = Arc::new(Session::open(SessionSettings::new(ToolConfig::new(
        workspace.path(),
    )))?);
    session
        .runtime()
        .events()
        .subscribe(|e| println!("event: {} {}", e.kind.as_str(), e.tool));

    let tools = jianmu_adapters::rig::session_tools(&session)?;
    println!("{} jianmu tools offered to the agent", tools.len());

    // What a model would answer, turn by turn: two tool calls, then its reply.
    let model = MockCompletionModel::new([
        MockTurn::tool_call("1", "calculator", json!({"input": "(3+4)*5/2"})),
        MockTurn::tool_call(
            "2",
            "write_file",
            json!({"path": "answer.txt", "content": "17.5\n"}),
        ),
        MockTurn::text("The answer is 17.5; it is saved in answer.txt."),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .preamble("You are a careful assistant.")
        .dynamic_tools(tools.into_iter().map(DynamicTool::from).collect())
        .build();
    let reply = agent
        .prompt("What is (3+4)*5/2? Save it.")
        .max_turns(4)
        .await?;
    println!("agent: {reply}");

    let saved = std::fs::read_to_string(workspace.path().join("answer.txt"))?;
    assert_eq!(saved, "17.5\n");
    assert_eq!(model.request_count(), 3);
    session.close().await;
    Ok(())
}
