//! One call through every layer: provider → ToolSet → ToolRunner → InProcess → tool.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::ToolRunner;
use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolError, ToolSet};
use serde_json::json;

#[tokio::test]
async fn calculator_through_every_layer_with_events() {
    let dir = tempfile::tempdir().unwrap();
    let provider = BuiltinToolProvider::new(ToolConfig::new(dir.path()));
    let tools = ToolSet::resolve(&provider, &["calculator"]).unwrap();
    let runner = ToolRunner::local().with_timeout(Duration::from_secs(5));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    runner.events().subscribe(move |e| {
        sink.lock().unwrap().push((
            e.kind.as_str(),
            e.call_id.to_owned(),
            e.error.map(str::to_owned),
        ));
    });

    let ctx = json!({"agent": "planner"});
    let out = tools
        .execute_with(
            "calculator",
            json!({"input": "2**100 // 3"}),
            ExecuteOptions::default()
                .runner(&runner)
                .call_id("t1")
                .event_context(&ctx),
        )
        .await
        .unwrap();
    assert_eq!(out.text, (2u128.pow(100) / 3).to_string());

    let err = tools
        .execute_with(
            "calculator",
            json!("1 % 0"),
            ExecuteOptions::default().runner(&runner).call_id("t2"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Failed { .. }));

    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("execution.started", "t1".to_owned(), None),
            ("execution.completed", "t1".to_owned(), None),
            ("execution.started", "t2".to_owned(), None),
            (
                "execution.failed",
                "t2".to_owned(),
                Some("ZeroDivisionError: integer modulo by zero".to_owned())
            ),
        ]
    );
}

#[tokio::test]
async fn calculator_as_a_workflow_node() {
    let provider = BuiltinToolProvider::default();
    let calc = provider.build("calculator").unwrap();
    let node = calc.as_node().with_args(json!("6*7"));
    let runner = ToolRunner::local();
    assert_eq!(node.run(Some(&runner)).await.unwrap().text, "42");
    // A value injected from the workflow's state wins over the fixed argument.
    let node = node.inject("input", json!("6*8"));
    assert_eq!(node.run(None).await.unwrap().text, "48");
}
