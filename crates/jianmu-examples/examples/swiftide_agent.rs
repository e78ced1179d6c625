//! A swiftide agent whose tools are jianmu's and whose commands run in a jianmu session
//! (its local jail here; its Docker container with `Backend::Docker`). The model is a
//! scripted one, so this runs with no network and no key; put a provider's model
//! (`swiftide::integrations::openai::OpenAI`, ...) in its place for a real agent.
//!
//! `cargo run -p jianmu-examples --example swiftide_agent`

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jianmu_adapters::swiftide::swiftide_core::chat_completion::errors::LanguageModelError;
use jianmu_adapters::swiftide::swiftide_core::chat_completion::{
    ChatCompletion, ChatCompletionRequest, ChatCompletionResponse, ChatMessage, ToolCall,
};
use jianmu_adapters::swiftide::{SessionExecutor, session_tools};
use jianmu_runtime::{Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::json;
use swiftide_agents::{Agent, DefaultContext};

/// What a model would answer, turn by turn.
#[derive(Clone)]
struct Scripted(Arc<Mutex<VecDeque<ChatCompletionResponse>>>);

#[async_trait]
impl ChatCompletion for Scripted {
    async fn complete(
        &self,
        _request: &ChatCompletionRequest,
    ) -> Result<ChatCompletionResponse, LanguageModelError> {
        let next = self.0.lock().map(|mut turns| turns.pop_front());
        next.ok()
            .flatten()
            .ok_or_else(|| LanguageModelError::permanent("the script has no more turns"))
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Result<ChatCompletionResponse, String> {
    let call = ToolCall::builder()
        .id(id)
        .name(name)
        .args(args.to_string())
        .build()
        .map_err(|e| e.to_string())?;
    ChatCompletionResponse::builder()
        .tool_calls(vec![call])
        .build()
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = tempfile::tempdir()?;
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(workspace.path())))?;
    runtime
        .events()
        .subscribe(|e| println!("event: {} {}", e.kind.as_str(), e.tool));
    // Commands of swiftide's own tools run in this session; give its tools to the
    // same agent and they share the workspace and its shells.
    let executor = SessionExecutor::open(&runtime)?;
    let tools = session_tools(executor.session())?;
    println!("{} jianmu tools offered to the agent", tools.len());

    let model = Scripted(Arc::new(Mutex::new(VecDeque::from([
        call("1", "calculator", json!({"input": "(3+4)*5/2"}))?,
        call(
            "2",
            "bash",
            json!({"command": "mkdir -p out && echo 17.5 > out/answer.txt && cat out/answer.txt"}),
        )?,
        ChatCompletionResponse::builder()
            .message("The answer is 17.5; it is saved in out/answer.txt.")
            .build()?,
    ]))));
    let mut agent = Agent::builder()
        .context(DefaultContext::from_executor(executor.clone()))
        .llm(&model)
        .tools(tools)
        .build()?;
    agent.query("What is (3+4)*5/2? Save it.").await?;

    for message in agent.history().await? {
        if let ChatMessage::ToolOutput(call, out) = message {
            println!("{}: {out}", call.name());
        }
    }
    let saved = std::fs::read_to_string(workspace.path().join("out/answer.txt"))?;
    assert_eq!(saved, "17.5\n");
    executor.close().await;
    Ok(())
}
