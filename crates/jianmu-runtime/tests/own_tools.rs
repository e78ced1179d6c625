//! A session over the caller's own tools: listed, called through the session's runner
//! (policy, events, timeout), stateful per session, and nothing built in besides. It
//! passes built with `--no-default-features`, where no built-in tool is linked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jianmu_runtime::{Policy, Runtime, SessionSettings, Tools};
use jianmu_tool_core::{FunctionTool, ToolConfig, ToolError, ToolHandle, ToolSet, ToolSpec};
use serde_json::json;

/// A counter tool whose count lives in the session's own set.
fn counter() -> ToolSet {
    let count = Arc::new(AtomicUsize::new(0));
    let spec = ToolSpec::new("count", "Counts its calls.")
        .with_input_schema(json!({"type": "object", "properties": {}}));
    let tool = FunctionTool::from_sync(spec, move |_| {
        Ok((count.fetch_add(1, Ordering::Relaxed) + 1)
            .to_string()
            .into())
    });
    ToolSet::from_tools([ToolHandle::new(tool).unwrap()])
}

#[tokio::test]
async fn a_session_runs_the_callers_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    let settings = SessionSettings::new(ToolConfig::new(dir.path()))
        .with_tools(Tools::from_fn(|_config| Ok(counter())));
    let runtime = Runtime::new(settings).unwrap();
    let (a, b) = (runtime.open().unwrap(), runtime.open().unwrap());
    let names: Vec<String> = a.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["count"]);
    assert_eq!(a.call("count", json!({})).await.unwrap().text, "1");
    assert_eq!(a.call("count", json!({})).await.unwrap().text, "2");
    // Each session built its own set: its own state.
    assert_eq!(b.call("count", json!({})).await.unwrap().text, "1");
    // Nothing else is there.
    let unknown = a.call("calculator", json!("1+1")).await.unwrap_err();
    assert!(
        matches!(unknown, ToolError::UnknownTool { .. }),
        "{unknown}"
    );
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn the_policy_holds_over_the_callers_tools() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings =
        SessionSettings::new(ToolConfig::new(dir.path())).with_tools(Tools::set(counter()));
    settings.policy = Policy {
        deny: vec!["count".into()],
        ..Policy::default()
    };
    let session = jianmu_runtime::Session::open(settings).unwrap();
    let denied = session.call("count", json!({})).await.unwrap_err();
    assert!(matches!(denied, ToolError::Denied { .. }), "{denied}");
    session.close().await;
}
