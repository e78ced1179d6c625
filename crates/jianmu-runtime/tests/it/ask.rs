//! The policy's `ask` rules through a session: the library approver answers, an
//! `allow_session` answer is remembered, a script's calls are asked about too, and
//! every decision is a line of the audit log.

use std::sync::{Arc, Mutex};

use jianmu_runtime::{Session, SessionSettings};
use jianmu_tool_core::{Answer, Approver, Ask, Decision, Policy, ToolConfig, ToolError};
use serde_json::{Value, json};

/// An approver that answers from a queue and keeps what it was asked.
fn scripted(answers: &[Decision]) -> (Arc<dyn Approver>, Arc<Mutex<Vec<Ask>>>) {
    let queue = Arc::new(Mutex::new(answers.to_vec()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    let approver = move |ask: &Ask| {
        seen.lock().unwrap().push(ask.clone());
        let decision = queue.lock().unwrap().remove(0);
        Answer::decided(decision, "the test")
    };
    (Arc::new(approver), asked)
}

fn open(dir: &std::path::Path, ask: &[&str], audit: &std::path::Path) -> Session {
    let mut settings = SessionSettings::new(ToolConfig::new(dir));
    settings.policy = Policy {
        ask: ask.iter().map(|s| (*s).to_owned()).collect(),
        ..Policy::default()
    };
    settings.audit_log = Some(audit.to_owned());
    Session::open(settings).unwrap()
}

/// The `approval` lines of the audit log `audit`, each parsed (a line that is not JSON
/// fails the test).
fn approvals(audit: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["event"] == "approval")
        .collect()
}

fn write(path: &str) -> Value {
    json!({"path": path, "content": "x", "create_dirs": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_go_to_the_approver_and_allow_session_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let session = open(&ws, &["path:deploy/**"], &audit);

    // Nobody to ask: refused, the rule named.
    let err = session
        .call("write_file", write("deploy/a"))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Denied { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "call to `write_file` denied: it needs approval (ask `path:deploy/**`) and nobody is \
         there to answer: this session has no approver"
    );
    assert!(!ws.join("deploy/a").exists());

    let (approver, asked) = scripted(&[
        Decision::Deny,
        Decision::AllowOnce,
        Decision::AllowOnce,
        Decision::AllowSession,
    ]);
    session.set_approver(Some(approver));
    let err = session
        .call("write_file", write("deploy/a"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("refused when asked (ask `path:deploy/**`)"),
        "{err}"
    );
    assert!(!ws.join("deploy/a").exists());
    session.call("write_file", write("deploy/a")).await.unwrap();
    assert!(ws.join("deploy/a").exists());
    // A write elsewhere is not asked about.
    session.call("write_file", write("src/b")).await.unwrap();
    // Once is once.
    session.call("write_file", write("deploy/b")).await.unwrap();
    session.call("write_file", write("deploy/c")).await.unwrap();
    // Remembered: no more questions (the queue is empty; asking would panic).
    session.call("write_file", write("deploy/d")).await.unwrap();
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 4);
    assert_eq!(
        (
            asked[0].tool.as_str(),
            asked[0].rule.as_str(),
            asked[0].summary.as_str()
        ),
        ("write_file", "path:deploy/**", "writes deploy/a")
    );

    // A script's calls are asked about as direct calls are: here, remembered.
    let out = session
        .call(
            "run_script",
            json!({"code": r#"write_file(#{path: "deploy/e", content: "y"}); "ok""#}),
        )
        .await
        .unwrap();
    assert!(out.text.contains("ok"), "{}", out.text);
    assert!(ws.join("deploy/e").exists());
    session.close().await;

    let lines = approvals(&audit);
    let answers: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["answer"].as_str().unwrap(), l["by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        answers,
        [
            ("unavailable", "nobody"),
            ("deny", "the test"),
            ("allow_once", "the test"),
            ("allow_once", "the test"),
            ("allow_session", "the test"),
            ("allow_session", "remembered"),
            ("allow_session", "remembered"),
        ]
    );
    assert_eq!(lines[1]["rule"], "path:deploy/**");
    assert_eq!(lines[1]["asked"], "writes deploy/a");
    assert!(lines[1]["time"].as_f64().unwrap() > 1.7e9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_a_call_matches_is_asked_and_one_answer_covers_one_rule() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let session = open(dir.path(), &["command:echo", "command:printf"], &audit);
    let (approver, asked) = scripted(&[Decision::AllowSession, Decision::Deny]);
    session.set_approver(Some(approver));
    let out = session
        .call("bash", json!({"command": "echo a"}))
        .await
        .unwrap();
    assert_eq!(out.text, "a\n");
    // `echo` is remembered; `printf` is a rule of its own, asked and refused.
    let err = session
        .call("bash", json!({"command": "echo b && printf c"}))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("refused when asked (ask `command:printf`)"),
        "{err}"
    );
    let rules: Vec<String> = asked
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.rule.clone())
        .collect();
    assert_eq!(rules, ["command:echo", "command:printf"]);
    session.close().await;
}

/// A call an `allow` call rule pre-approves is an audit line too (nobody asked), and
/// so is a question whose call is dropped before the answer comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_approved_and_cancelled_asks_are_audit_lines() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut settings = SessionSettings::new(ToolConfig::new(dir.path()));
    settings.policy = Policy {
        ask: vec!["command:echo".into()],
        allow: vec!["command:echo hi".into()],
        ..Policy::default()
    };
    settings.audit_log = Some(audit.clone());
    let session = Session::open(settings).unwrap();
    // An approver that never answers.
    struct Never;
    #[async_trait::async_trait]
    impl Approver for Never {
        async fn approve(&self, _: &Ask) -> Answer {
            std::future::pending().await
        }
    }
    session.set_approver(Some(Arc::new(Never)));
    let out = session
        .call("bash", json!({"command": "echo hi"}))
        .await
        .unwrap();
    assert_eq!(out.text, "hi\n");
    let waiting = session.call("bash", json!({"command": "echo other"}));
    let timed_out = tokio::time::timeout(std::time::Duration::from_millis(300), waiting).await;
    assert!(timed_out.is_err());
    session.close().await;
    let lines = approvals(&audit);
    let answers: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["answer"].as_str().unwrap(),
                l["by"].as_str().unwrap(),
                l["asked"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("allow_once", "the policy's allow entries", "echo hi"),
            ("cancelled", "nobody: the call ended first", "echo other"),
        ]
    );
}
