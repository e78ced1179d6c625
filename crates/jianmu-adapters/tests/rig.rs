//! Jianmu tools in a real rig agent loop, driven by rig's own scripted model.

use std::sync::Arc;

use jianmu_adapters::rig::{session_tool, session_tools, toolset_tools};
use jianmu_runtime::{Policy, Session, SessionSettings};
use jianmu_tool_core::{ToolConfig, ToolSet};
use rig_agent::AgentBuilder;
use rig_agent::completion::Prompt;
use rig_agent::core::message::ToolResultContent;
use rig_agent::core::tool::ToolErrorKind;
use rig_agent::test_utils::{MockCompletionModel, MockTurn};
use rig_agent::tool::DynamicTool;
use serde_json::json;

fn session(dir: &std::path::Path, policy: Policy) -> Arc<Session> {
    let mut settings = SessionSettings::new(ToolConfig::new(dir));
    settings.policy = policy;
    Arc::new(Session::open(settings).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rig_agent_calls_jianmu_tools_through_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let session = session(dir.path(), Policy::default());
    let tools = session_tools(&session).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert!(
        names.contains(&"calculator") && names.contains(&"write_file"),
        "{names:?}"
    );
    // A tool that takes one string is offered in the object form the APIs require.
    let calc = tools.iter().find(|t| t.name() == "calculator").unwrap();
    assert_eq!(calc.definition().parameters["required"], json!(["input"]));

    let model = MockCompletionModel::new([
        MockTurn::tool_call("c1", "calculator", json!({"input": "2**100"})),
        MockTurn::tool_call(
            "c2",
            "write_file",
            json!({"path": "notes.txt", "content": "remember 2**100\n"}),
        ),
        MockTurn::tool_call("c3", "read_file", json!({"path": "../outside.txt"})),
        MockTurn::text("done"),
    ]);
    let agent = AgentBuilder::new(model.clone())
        .dynamic_tools(tools.into_iter().map(DynamicTool::from).collect())
        .build();
    let answer = agent.prompt("compute and note").max_turns(5).await.unwrap();
    assert_eq!(answer, "done");

    // Every tool ran for real: the file is written in the workspace.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "remember 2**100\n"
    );
    // The model was told each result: the number, then the path error, in its own words.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let history = |i: usize| serde_json::to_string(&requests[i].chat_history).unwrap();
    assert!(
        history(1)
            .contains(r#""content":[{"type":"text","text":"1267650600228229401496703205376"}]"#),
        "{}",
        history(1)
    );
    assert!(
        history(3)
            .contains(r#""text":"refused `../outside.txt`: the path is outside the workspace"}"#),
        "{}",
        history(3)
    );
    // The tools were offered with their descriptions.
    assert!(
        requests[0]
            .tools
            .iter()
            .any(|t| t.name == "read_file" && !t.description.is_empty())
    );
    session.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn images_errors_and_the_session_policy_come_through() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("red.png"), jianmu_test_support::PNG).unwrap();
    let policy = Policy {
        deny: vec!["write_file".into()],
        ..Policy::default()
    };
    let session = session(dir.path(), policy);

    // An image answer: its text, then the image with its media type.
    let read = session_tool(&session, "file_read").unwrap();
    assert_eq!(read.name(), "read_file");
    let out = read.execute(json!({"path": "red.png"})).await.unwrap();
    let content = out.as_content();
    assert!(matches!(content[0], ToolResultContent::Text(_)), "{out:?}");
    let ToolResultContent::Image(image) = &content[1] else {
        panic!("no image: {out:?}");
    };
    assert_eq!(
        image.media_type,
        Some(rig_agent::core::message::ImageMediaType::PNG)
    );

    // Errors keep their kind and the message the model reads.
    let bad = read.execute(json!({"path": 7})).await.unwrap_err();
    assert_eq!(bad.kind(), ToolErrorKind::InvalidArgs);
    assert_eq!(bad.code(), Some("invalid_arguments"));
    assert!(bad.message().contains("path"), "{}", bad.message());
    let write = session_tool(&session, "write_file").unwrap();
    let denied = write
        .execute(json!({"path": "x.txt", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(denied.kind(), ToolErrorKind::PermissionDenied);
    assert!(!dir.path().join("x.txt").exists());
    assert!(session_tool(&session, "no_such_tool").is_err());

    // A ToolSet without a session: calls run in this process.
    let set = Arc::new(
        ToolSet::resolve(
            &jianmu_provider::BuiltinToolProvider::new(ToolConfig::new(dir.path())),
            &["calculator"],
        )
        .unwrap(),
    );
    let tools = toolset_tools(&set, None);
    assert_eq!(tools.len(), 1);
    let out = tools[0].execute(json!({"input": "7 // 2"})).await.unwrap();
    assert_eq!(out.as_text(), Some("3"));
    session.close().await;
}
