//! Diagnostics after edits, in a real session: `edit_file`, `apply_patch` and
//! `write_file` with `diagnostics = true` name the errors their write introduced,
//! from a real `pylsp`; the server is gone when the session closes.

use std::time::Duration;

use jianmu_runtime::{Session, SessionSettings};
use jianmu_test_support::{pylsp, running_with};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_name_the_errors_they_introduce_and_the_server_ends_with_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("app.py"),
        "import os\n\n\ndef area(width, height):\n    return width * height\n\n\nprint(area(2, 3), os.sep)\n",
    )
    .unwrap();
    let pylsp = pylsp();
    // A log file in this test's own folder: its path tells this test's server apart.
    let log = d.join("pylsp.log");
    let config = ToolConfig::new(d)
        .with_settings(
            "lsp",
            json!({"servers": {"python": {"command": [pylsp.to_string_lossy(), "--log-file", log.to_string_lossy()], "extensions": ["py"]}}}),
        )
        .with_settings("edit_file", json!({"diagnostics": true}))
        .with_settings("apply_patch", json!({"diagnostics": true}))
        .with_settings("write_file", json!({"diagnostics": true}));
    let session = Session::open(SessionSettings::new(config)).unwrap();

    // An edit that breaks the code: the answer says where, and only what is new.
    let out = session
        .call(
            "edit_file",
            json!({"path": "app.py", "edits": [{"old": "return width * height", "new": "return width * heigth"}]}),
        )
        .await
        .unwrap();
    assert!(
        out.text.contains("+    return width * heigth"),
        "{}",
        out.text
    );
    assert!(
        out.text.ends_with(
            "New errors (pylsp):\napp.py:5:20: error: undefined name 'heigth' [pyflakes]"
        ),
        "{}",
        out.text
    );
    // The edit that fixes it introduces none; the error that was there is not new.
    let out = session
        .call(
            "edit_file",
            json!({"path": "app.py", "edits": [{"old": "heigth", "new": "height"}]}),
        )
        .await
        .unwrap();
    assert!(
        out.text.ends_with("Diagnostics (pylsp): no new errors."),
        "{}",
        out.text
    );
    // A patch that adds a broken file, and a write that breaks another.
    let out = session
        .call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: extra.py\n+def f():\n+    return missing_thing\n*** End Patch"}),
        )
        .await
        .unwrap();
    assert!(
        out.text
            .ends_with("extra.py:2:12: error: undefined name 'missing_thing' [pyflakes]"),
        "{}",
        out.text
    );
    let out = session
        .call(
            "write_file",
            json!({"path": "app.py", "content": "print(nothing_here)\n"}),
        )
        .await
        .unwrap();
    assert!(
        out.text
            .ends_with("app.py:1:7: error: undefined name 'nothing_here' [pyflakes]"),
        "{}",
        out.text
    );
    // A patch that writes more files than are checked says which were.
    let mut patch = String::from("*** Begin Patch\n");
    for i in 0..12 {
        patch.push_str(&format!("*** Add File: many/{i}.txt\n+x\n"));
    }
    patch.push_str("*** End Patch");
    let out = session
        .call("apply_patch", json!({ "patch": patch }))
        .await
        .unwrap();
    assert!(
        out.text.ends_with("\n(diagnostics: the first 10 of the 12 files written were checked; use `diagnostics` for the others)"),
        "{}",
        out.text
    );
    // Files no server checks are written as before, with nothing added.
    let out = session
        .call("write_file", json!({"path": "notes.txt", "content": "x"}))
        .await
        .unwrap();
    assert_eq!(out.text, "Wrote notes.txt (1 bytes)");

    let needle = log.to_string_lossy().into_owned();
    assert!(
        !running_with(&needle).is_empty(),
        "pylsp runs for the session"
    );
    session.close().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !running_with(&needle).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "pylsp outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
