//! `Session` and `Runtime` with real tools: state kept within a session and not
//! across sessions, everything a session started gone when it closes, its own
//! folder, the session limit, and the policy, time limit and audit log applied to
//! every call.

use std::time::Duration;

mod ask;
#[cfg(feature = "checkpoint")]
mod checkpoints;
mod egress;
mod suspend;

use jianmu_runtime::{Opening, Runtime, Session, SessionError, SessionSettings};
use jianmu_test_support::running_with;
use jianmu_tool_core::{Policy, ToolConfig, ToolError};
use serde_json::json;

fn settings(dir: &std::path::Path) -> SessionSettings {
    SessionSettings::new(ToolConfig::new(dir))
}

/// Polls until `done`, for up to 5 s.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..250 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_state_and_closing_ends_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(settings(dir.path())).unwrap();
    let a = runtime.open().unwrap();
    let b = runtime.open().unwrap();
    assert_eq!(runtime.open_sessions(), 2);
    let marker = format!("jm-session-test-{}", std::process::id());
    let started = a
        .call(
            "bash",
            json!({"command": format!("exec -a {marker} sleep 300"), "background": true}),
        )
        .await
        .unwrap();
    assert!(started.text.contains("job"), "{}", started.text);
    a.call("bash", json!({"command": "export WHO=a", "session": "s"}))
        .await
        .unwrap();
    b.call("bash", json!({"command": "export WHO=b", "session": "s"}))
        .await
        .unwrap();
    let who = a
        .call("bash", json!({"command": "echo $WHO", "session": "s"}))
        .await
        .unwrap();
    assert_eq!(who.text.trim(), "a");
    // Another session sees neither the job nor the variable.
    let jobs = b.call("bash_jobs", json!({})).await.unwrap();
    assert!(!jobs.text.contains(&marker), "{}", jobs.text);
    assert_eq!(running_with(&marker).len(), 1);

    let closed = a.close().await;
    assert!(closed.is_complete(), "{closed}");
    assert_eq!(closed.dropped(), 0);
    assert!(a.is_closed());
    assert_eq!(runtime.open_sessions(), 1);
    assert!(
        eventually(|| running_with(&marker).is_empty()).await,
        "the closed session's job is still running"
    );
    let after = a.call("calculator", json!("1+1")).await.unwrap_err();
    assert!(matches!(after, ToolError::Runner { .. }), "{after}");
    let why = jianmu_tool_core::error_chain(&after);
    assert!(why.contains("session is closed"), "{why}");
    // Closing twice does nothing; the other session goes on.
    a.close().await;
    let who = b
        .call("bash", json!({"command": "echo $WHO", "session": "s"}))
        .await
        .unwrap();
    assert_eq!(who.text.trim(), "b");
    drop(b);
    assert!(eventually(|| runtime.open_sessions() == 0).await);
    runtime.shutdown(Duration::from_secs(5)).await;
}

/// A bash command that fetches `/` from a server on `port` (waiting up to 5 s for it
/// to listen) and prints the status line, or `unreachable`.
fn fetch(port: u16) -> String {
    format!(
        "for i in $(seq 100); do \
           if exec 3<>/dev/tcp/127.0.0.1/{port}; then \
             printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; head -1 <&3 | tr -d '\\r'; exit; \
           fi 2>/dev/null; sleep 0.05; \
         done; echo unreachable"
    )
}

/// The network namespace a session's commands run in.
async fn network_of(session: &Session) -> String {
    let out = session
        .call("bash", json!({"command": "readlink /proc/self/ns/net"}))
        .await
        .unwrap();
    out.text.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_servers_are_reached_by_its_later_calls_only() {
    let offered = jianmu_process::Isolation::probe();
    if !(offered.namespaces && offered.private_network) {
        return; // no private network here: the tools' descriptions say so (see process tests)
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(settings(dir.path())).unwrap();
    let a = runtime.open().unwrap();
    let b = runtime.open().unwrap();
    // A dev server as a background job: the port is free, the network being a's own.
    let serve = json!({"command": "exec python3 -m http.server 8000 --bind 127.0.0.1", "background": true, "yield_ms": 200});
    let started = a.call("bash", serve.clone()).await.unwrap();
    assert!(started.text.contains("running"), "{}", started.text);
    let ok = "HTTP/1.0 200 OK";
    assert_eq!(
        a.call("bash", json!({"command": fetch(8000)}))
            .await
            .unwrap()
            .text
            .trim(),
        ok
    );
    let py = a
        .call(
            "python_repl",
            json!({"code": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:8000/').status"}),
        )
        .await
        .unwrap();
    assert_eq!(py.text, "200");
    // Another session does not reach it, and may start its own on the same port.
    let other = b
        .call(
            "bash",
            json!({"command": "exec 3<>/dev/tcp/127.0.0.1/8000 && echo REACHED"}),
        )
        .await
        .unwrap_err();
    assert!(!other.to_string().contains("REACHED"), "{other}");
    b.call("bash", serve).await.unwrap();
    assert_eq!(
        b.call("bash", json!({"command": fetch(8000)}))
            .await
            .unwrap()
            .text
            .trim(),
        ok
    );
    // One namespace per session, shared by its tools, not the host's.
    let (net_a, net_b) = (network_of(&a).await, network_of(&b).await);
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert!(net_a.starts_with("net:["), "{net_a}");
    assert_ne!(net_a, net_b);
    assert_ne!(std::path::Path::new(&net_a), host);
    let py = a
        .call(
            "python_repl",
            json!({"code": "__import__('os').readlink('/proc/self/ns/net')"}),
        )
        .await
        .unwrap();
    assert_eq!(py.text, net_a);
    // Closing a session releases its namespace: nothing is in it and nothing holds it.
    assert!(!jianmu_test_support::holding_network(&net_a).is_empty());
    assert!(a.close().await.is_complete());
    assert!(
        eventually(|| jianmu_test_support::holding_network(&net_a).is_empty()).await,
        "the closed session's network is still held: {:?}",
        jianmu_test_support::holding_network(&net_a)
    );
    assert!(!jianmu_test_support::holding_network(&net_b).is_empty());
    drop(b);
    assert!(
        eventually(|| jianmu_test_support::holding_network(&net_b).is_empty()).await,
        "the dropped session's network is still held"
    );
}

#[tokio::test]
async fn own_folders_are_made_per_session_and_removed_when_it_closes() {
    let root = tempfile::tempdir().unwrap();
    let mut s = settings(root.path());
    s.own_folders = Some(root.path().to_owned());
    let runtime = Runtime::new(s).unwrap();
    let a = runtime.open().unwrap();
    let b = runtime.open().unwrap();
    assert_ne!(a.workspace(), b.workspace());
    assert!(a.workspace().starts_with(root.path()));
    a.call("write_file", json!({"path": "note.txt", "content": "mine"}))
        .await
        .unwrap();
    assert!(a.workspace().join("note.txt").is_file());
    let seen = b
        .call("read_file", json!({"path": "note.txt"}))
        .await
        .unwrap_err();
    assert!(seen.is_model_facing(), "{seen}");
    let folder = a.workspace().to_owned();
    a.close().await;
    assert!(!folder.exists());
    // A session dropped without closing is closed in the background.
    let folder = b.workspace().to_owned();
    drop(b);
    runtime.shutdown(Duration::from_secs(5)).await;
    assert!(!folder.exists());
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_session_opened_in_a_folder_keeps_it_and_takes_its_own_settings() {
    let root = tempfile::tempdir().unwrap();
    let mut s = settings(root.path());
    // Over per-session folders too: the given folder wins.
    s.own_folders = Some(root.path().to_owned());
    let runtime = Runtime::new(s).unwrap();
    let dir = root.path().join("alice");
    let opening = Opening::new().in_folder(&dir).with_setting(
        "python_repl",
        "without_session",
        json!("fresh"),
    );
    let a = runtime.open_with(opening.clone()).unwrap();
    assert_eq!(a.workspace(), dir);
    a.call("write_file", json!({"path": "note.txt", "content": "kept"}))
        .await
        .unwrap();
    a.call("python_repl", json!({"code": "x = 41"}))
        .await
        .unwrap();
    let lost = a
        .call("python_repl", json!({"code": "x + 1"}))
        .await
        .unwrap_err();
    assert!(lost.to_string().contains("NameError"), "{lost}");
    a.call("python_repl", json!({"code": "x = 41", "session": "s"}))
        .await
        .unwrap();
    let kept = a
        .call("python_repl", json!({"code": "x + 1", "session": "s"}))
        .await
        .unwrap();
    assert_eq!(kept.text, "42");
    a.close().await;
    assert_eq!(
        std::fs::read_to_string(dir.join("note.txt")).unwrap(),
        "kept"
    );
    // A later session in the same folder finds it; another session's settings are
    // the runtime's.
    let b = runtime.open_with(Opening::new().in_folder(&dir)).unwrap();
    let seen = b
        .call("read_file", json!({"path": "note.txt"}))
        .await
        .unwrap();
    assert!(seen.text.contains("kept"), "{}", seen.text);
    b.call("python_repl", json!({"code": "x = 41"}))
        .await
        .unwrap();
    let kept = b
        .call("python_repl", json!({"code": "x + 1"}))
        .await
        .unwrap();
    assert_eq!(kept.text, "42");
    b.close().await;
    assert!(dir.is_dir());
}

#[tokio::test]
async fn the_session_limit_counts_open_sessions_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    s.max_sessions = 1;
    let runtime = Runtime::new(s).unwrap();
    let first = runtime.open().unwrap();
    assert!(runtime.is_full());
    let refused = runtime.open().unwrap_err();
    assert!(matches!(refused, SessionError::Full(1)), "{refused}");
    assert!(refused.to_string().contains("limit of 1"), "{refused}");
    first.close().await;
    assert!(!runtime.is_full());
    let second = runtime.open().unwrap();
    assert_eq!(
        second.call("calculator", json!("6*7")).await.unwrap().text,
        "42"
    );
}

#[tokio::test]
async fn every_call_goes_through_the_policy_the_time_limit_and_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut s = settings(dir.path());
    s.policy = Policy {
        deny: vec!["write_file".into()],
        ..Policy::default()
    };
    s.timeout = Some(Duration::from_millis(300));
    s.audit_log = Some(log.clone());
    let session = Session::open(s).unwrap();
    let denied = session
        .call("write_file", json!({"path": "x", "content": "y"}))
        .await
        .unwrap_err();
    assert!(matches!(denied, ToolError::Denied { .. }), "{denied}");
    assert!(!dir.path().join("x").exists());
    let slow = session
        .call("bash", json!({"command": "sleep 5"}))
        .await
        .unwrap_err();
    assert!(matches!(slow, ToolError::Timeout { .. }), "{slow}");
    session.call("calculator", json!("2**10")).await.unwrap();
    session.close().await;
    let audit = std::fs::read_to_string(&log).unwrap();
    for tool in ["write_file", "bash", "calculator"] {
        assert!(
            audit.contains(&format!("\"{tool}\"")),
            "{tool} not in {audit}"
        );
    }
}

#[test]
fn a_bad_audit_log_is_refused_when_the_runtime_opens() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    s.audit_log = Some(dir.path().join("no/such/folder/audit.jsonl"));
    let e = Runtime::new(s).unwrap_err();
    assert!(matches!(e, SessionError::AuditLog { .. }), "{e}");
}

#[tokio::test]
async fn listing_exporting_and_validating_build_no_tool() {
    let dir = tempfile::tempdir().unwrap();
    let config = ToolConfig::new(dir.path());
    let specs = jianmu_runtime::tool_specs(&config).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for name in ["bash", "calculator", "read_file"] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    let schema = jianmu_runtime::tool_spec(&config, "file_read").unwrap();
    assert_eq!(schema.name, "read_file");

    // A session's tools are known by their specs until a call runs them here.
    let session = Session::open(settings(dir.path())).unwrap();
    let bad = session
        .call("bash", json!({"command": 42}))
        .await
        .unwrap_err();
    assert!(matches!(bad, ToolError::InvalidArguments { .. }), "{bad}");
    let set =
        jianmu_tool_core::ToolSet::lazy(jianmu_provider::BuiltinToolProvider::new(config.clone()))
            .unwrap();
    let listed = set.specs().len();
    assert_eq!(listed, specs.len());
    let bash = set.tool("bash").unwrap();
    bash.prepare_args(json!({"command": "true"}), None, false)
        .unwrap();
    assert!(
        bash.prepare_args(json!({"command": 42}), None, false)
            .is_err()
    );
    assert!(set.iter().all(|t| !t.is_built()), "a tool was built");
    // The first call builds the one tool it runs, and only that one.
    set.execute("calculator", json!("1+2"), None).await.unwrap();
    let built: Vec<&str> = set
        .iter()
        .filter(|t| t.is_built())
        .map(|t| t.name())
        .collect();
    assert_eq!(built, ["calculator"]);
    session.close().await;
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
