//! Recorded call sequences, shaped as the vendors' documentation shows them, replayed
//! through a real session; each answer must be the recorded one.
//! `UPDATE_EXPECT=1` records the answers anew.

use jianmu_native::{Native, NativeOptions};
use jianmu_runtime::{Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::Value;

async fn replay(api: &str) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(dir.path()))).unwrap();
    let native = Native::open(&runtime, NativeOptions::new().with_root("/repo")).unwrap();
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/recorded");
    let calls = std::fs::read_to_string(here.join(format!("{api}.jsonl"))).unwrap();
    let mut answers = String::new();
    for line in calls.lines() {
        let item: Value = serde_json::from_str(line).unwrap();
        let answer = match api {
            "anthropic" => native.anthropic(&item).await,
            _ => native.openai(&item).await,
        }
        .unwrap();
        answers.push_str(&serde_json::to_string(&answer).unwrap());
        answers.push('\n');
    }
    native.close().await;
    let expected = here.join(format!("{api}.answers.jsonl"));
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expected, &answers).unwrap();
    }
    let recorded = std::fs::read_to_string(&expected).unwrap();
    for (i, (got, want)) in answers.lines().zip(recorded.lines()).enumerate() {
        assert_eq!(got, want, "{api} call {}", i + 1);
    }
    assert_eq!(answers.lines().count(), recorded.lines().count());
}

#[tokio::test]
async fn anthropic_calls_get_their_recorded_answers() {
    replay("anthropic").await;
}

#[tokio::test]
async fn openai_calls_get_their_recorded_answers() {
    replay("openai").await;
}
