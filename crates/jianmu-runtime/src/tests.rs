//! ToolRunner: events around every call, timeouts, cancellation, panics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jianmu_tool_core::{ExecuteOptions, ToolError};
use serde_json::json;

use crate::ToolRunner;

use crate::layer::tests::probes as tools;

/// Every event of `runner`, one line each.
fn recorder<S>(runner: &ToolRunner<S>) -> Arc<Mutex<Vec<String>>> {
    crate::layer::tests::recorder(runner.events())
}

#[tokio::test]
async fn events_surround_success_and_failure() {
    let runner = ToolRunner::local();
    let log = recorder(&runner);
    let set = tools();
    let ctx = json!({"turn": 3});
    let out = set
        .execute_with(
            "echo",
            json!("hi"),
            ExecuteOptions::default()
                .runner(&runner)
                .call_id("c1")
                .event_context(&ctx),
        )
        .await
        .unwrap();
    assert_eq!(out.text, "hi");
    let err = set
        .execute_with(
            "fail",
            json!("x"),
            ExecuteOptions::default().runner(&runner).call_id("c2"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no luck");
    assert_eq!(
        *log.lock().unwrap(),
        [
            r#"execution.started echo c1 ctx={"turn":3} err=-"#,
            r#"execution.completed echo c1 ctx={"turn":3} err=-"#,
            "execution.started fail c2 ctx=- err=-",
            "execution.failed fail c2 ctx=- err=no luck",
        ]
    );
}

#[tokio::test]
async fn invalid_arguments_never_reach_the_runner() {
    let runner = ToolRunner::local();
    let log = recorder(&runner);
    let err = tools()
        .execute("echo", json!(42), Some(&runner))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(log.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn timeout_stops_the_call_and_says_so() {
    let runner = ToolRunner::local().with_timeout(Duration::from_millis(1500));
    let log = recorder(&runner);
    let err = tools()
        .execute_with(
            "slow",
            json!("x"),
            ExecuteOptions::default().runner(&runner).call_id("c3"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "`slow` timed out after 1.500 s");
    assert!(err.is_model_facing());
    assert_eq!(
        log.lock().unwrap().last().unwrap(),
        "execution.failed slow c3 ctx=- err=`slow` timed out after 1.500 s"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_cancels_it_with_an_event() {
    let runner = ToolRunner::local();
    let log = recorder(&runner);
    let set = tools();
    let call = set.execute_with(
        "slow",
        json!("x"),
        ExecuteOptions::default().runner(&runner).call_id("c4"),
    );
    let raced = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert!(raced.is_err());
    assert_eq!(
        *log.lock().unwrap(),
        [
            "execution.started slow c4 ctx=- err=-",
            "execution.failed slow c4 ctx=- err=cancelled",
        ]
    );
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_not_a_crash() {
    let runner = ToolRunner::local();
    let err = tools()
        .execute("boom", json!("x"), Some(&runner))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Runner { .. }));
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert_eq!(source, "the tool panicked: kaboom");
    // The same without a runner.
    let err = tools().execute("boom", json!("x"), None).await.unwrap_err();
    assert!(matches!(err, ToolError::Runner { .. }));
}

#[tokio::test]
async fn policy_denials_are_tool_errors_with_events_and_the_audit_log_records_all() {
    use jianmu_tool_core::Policy;

    let dir = std::env::temp_dir().join(format!("jianmu-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&log_path);
    let runner = ToolRunner::local().with_policy(Policy {
        deny: vec!["fail".into()],
        ..Policy::default()
    });
    crate::AuditLog::open(&log_path)
        .unwrap()
        .attach(runner.events());
    let set = tools();
    let ok = set
        .execute_with(
            "echo",
            json!({"input": "hi"}),
            ExecuteOptions::default().runner(&runner).call_id("a1"),
        )
        .await
        .unwrap();
    assert_eq!(ok.text, "hi");
    let err = set
        .execute_with(
            "fail",
            json!("x"),
            ExecuteOptions::default().runner(&runner).call_id("a2"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "call to `fail` denied: the tool is denied (deny `fail`)"
    );
    assert!(err.is_model_facing());

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (
            &lines[0]["tool"],
            &lines[0]["call_id"],
            &lines[0]["outcome"],
            &lines[0]["arguments"]
        ),
        (&json!("echo"), &json!("a1"), &json!("ok"), &json!("hi"))
    );
    assert_eq!(
        (&lines[1]["tool"], &lines[1]["outcome"], &lines[1]["error"]),
        (
            &json!("fail"),
            &json!("error"),
            &json!("call to `fail` denied: the tool is denied (deny `fail`)")
        )
    );
    assert!(lines[0]["time"].as_f64().unwrap() > 1.7e9);
    std::fs::remove_dir_all(&dir).unwrap();
}
