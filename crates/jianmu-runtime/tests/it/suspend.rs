//! A session suspended to a file and resumed: shell sessions come back with their
//! folder and exported variables; jobs and interpreters are named as ended; a
//! session's own folder survives the suspension and goes when the resumed session
//! closes.

use std::os::unix::fs::PermissionsExt as _;

use jianmu_runtime::{Runtime, SessionError, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_session_resumes_with_its_shells_and_names_what_ended() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(&ws))).unwrap();
    let session = runtime.open().unwrap();
    let sh = async |session: &jianmu_runtime::Session, name: &str, command: &str| {
        session
            .call("bash", json!({"command": command, "session": name}))
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"))
            .text
    };
    sh(
        &session,
        "dev",
        "cd sub && export A=1 B='x y' && LOCAL=gone",
    )
    .await;
    sh(&session, "other", "export C=3").await;
    session
        .call(
            "bash",
            json!({"command": "exec sleep 3301", "background": true}),
        )
        .await
        .unwrap();
    session
        .call("python_repl", json!({"code": "x = 1", "session": "py"}))
        .await
        .unwrap();
    let file = dir.path().join("session.json");
    let suspended = session.suspend(&file).await.unwrap();
    assert_eq!(suspended.shells, ["dev", "other"]);
    let ended: Vec<(&str, &str)> = suspended
        .ended
        .iter()
        .map(|l| (l.kind.as_str(), l.name.as_str()))
        .collect();
    assert!(ended.contains(&("interpreter", "py")), "{ended:?}");
    assert!(
        ended
            .iter()
            .any(|(k, n)| *k == "job" && n.contains("sleep 3301")),
        "{ended:?}"
    );
    let text = suspended.to_string();
    assert!(text.contains("shell sessions dev, other kept"), "{text}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Suspended is closed: its processes are gone.
    assert!(session.is_closed());
    assert!(
        crate::eventually(|| jianmu_test_support::running_with("sleep 3301").is_empty()).await,
        "the job outlived the suspension"
    );

    let (resumed, report) = runtime.resume(&file).unwrap();
    assert_eq!(report.shells, ["dev", "other"]);
    let text = report.to_string();
    assert!(
        text.contains("shell sessions dev, other restored") && text.contains("interpreter py"),
        "{text}"
    );
    let back = sh(&resumed, "dev", "pwd; echo \"$A|$B|${LOCAL:-unset}\"").await;
    let sub = ws.join("sub").canonicalize().unwrap();
    // The first answer says what came back, once.
    assert_eq!(
        back,
        format!("[{report}]\n{}\n1|x y|unset\n", sub.display())
    );
    assert_eq!(sh(&resumed, "other", "echo $C").await, "3\n");
    let fresh = match resumed
        .call("python_repl", json!({"code": "print(x)", "session": "py"}))
        .await
    {
        Ok(out) => out.text,
        Err(e) => e.to_string(),
    };
    assert!(fresh.contains("NameError"), "{fresh}");
    resumed.close().await;

    // Not a suspension file: said, nothing opened.
    std::fs::write(&file, "{\"version\": 1}").unwrap();
    let err = runtime.resume(&file).unwrap_err();
    assert!(matches!(err, SessionError::Suspension { .. }), "{err}");
    assert!(err.to_string().contains("not a suspension file"), "{err}");
    assert_eq!(runtime.open_sessions(), 0);
}

/// A session's own folder survives its suspension and goes when the resumed session
/// closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_folder_outlives_the_suspension_not_the_resumed_session() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("own");
    std::fs::create_dir(&root).unwrap();
    let mut settings = SessionSettings::new(ToolConfig::new(dir.path()));
    settings.own_folders = Some(root.clone());
    let runtime = Runtime::new(settings).unwrap();
    let session = runtime.open().unwrap();
    let folder = session.workspace().to_owned();
    session
        .call("write_file", json!({"path": "kept.txt", "content": "k"}))
        .await
        .unwrap();
    let file = dir.path().join("s.json");
    session.suspend(&file).await.unwrap();
    assert!(folder.join("kept.txt").exists());
    let (resumed, _) = runtime.resume(&file).unwrap();
    assert_eq!(resumed.workspace(), folder);
    let out = resumed
        .call("read_file", json!({"path": "kept.txt"}))
        .await
        .unwrap();
    assert!(out.text.contains('k'), "{}", out.text);
    resumed.close().await;
    assert!(!folder.exists());
}
