//! Checkpoints through a session: taken before a turn's first changing call (what
//! `bash` changed included), restored exactly (bytes, every permission bit, symbolic
//! links, deletions), a restore undone by restoring its own checkpoint, and the
//! user's git repository untouched.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use jianmu_runtime::{Session, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::{Value, json};

/// Every path under `root` (but `.git`) with its kind, mode and bytes or target.
fn state(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&path).unwrap().display()
                ));
            } else if meta.is_dir() {
                out.push(format!("{rel}/ {mode:o}"));
                stack.push(path);
            } else {
                out.push(format!(
                    "{rel} {mode:o} {:?}",
                    std::fs::read(&path).unwrap()
                ));
            }
        }
    }
    out.sort();
    out
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = jianmu_process::std_command("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn call(session: &Session, tool: &str, args: Value) -> Value {
    let out = session
        .call(tool, args)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    out.structured.unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_checkpointed_and_restored_exactly_and_git_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("src/deep/data.bin"), [0u8, 159, 146, 150]).unwrap();
    std::fs::write(ws.join("secret.txt"), "mine\n").unwrap();
    std::fs::set_permissions(
        ws.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("src/main.rs", ws.join("link")).unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/out"), "built").unwrap();
    git(&ws, &["init", "-q"]);
    git(
        &ws,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "add",
            "src",
            ".gitignore",
        ],
    );
    git(
        &ws,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
    );
    // What git says, and what its index and refs hold (git status itself refreshes
    // the index's stat data, so its bytes are not compared).
    let repo = |ws: &Path| {
        [
            git(ws, &["status", "--porcelain", "--ignored"]),
            git(ws, &["ls-files", "-s"]),
            git(ws, &["rev-parse", "HEAD"]),
            git(ws, &["for-each-ref"]),
        ]
    };
    let git_before = repo(&ws);
    let before = state(&ws);

    let mut settings = SessionSettings::new(ToolConfig::new(&ws));
    settings.checkpoints.dir = Some(dir.path().join("state"));
    let session = Session::open(settings).unwrap();
    // Reading starts the turn; its first change takes the checkpoint.
    call(&session, "read_file", json!({"path": "src/main.rs"})).await;
    call(
        &session,
        "write_file",
        json!({"path": "src/main.rs", "content": "changed\n"}),
    )
    .await;
    call(&session, "bash", json!({"command": "rm -rf src && echo x > new && chmod 644 secret.txt && rm link && ln -s /etc/passwd link2 && echo more > target/out"})).await;
    let patch = "*** Begin Patch\n*** Add File: patched.txt\n+p\n*** End Patch";
    call(&session, "apply_patch", json!({"patch": patch})).await;
    let list = call(&session, "checkpoint_list", json!({})).await;
    let checkpoints = list["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1, "one turn, one checkpoint: {list}");
    assert_eq!(checkpoints[0]["label"], "before write_file");
    let id = checkpoints[0]["id"].as_str().unwrap().to_owned();

    let diff = session
        .call("checkpoint_diff", json!({"id": id}))
        .await
        .unwrap();
    for line in [
        "deleted file mode 100644",
        "--- a/src/main.rs",
        "diff --git a/new b/new",
        "old mode 100600",
        "+++ b/patched.txt",
    ] {
        assert!(diff.text.contains(line), "{line}: {}", diff.text);
    }
    assert!(
        !diff.text.contains("target/out"),
        "ignored files are not in checkpoints"
    );

    let dry = call(
        &session,
        "checkpoint_restore",
        json!({"id": id, "dry_run": true}),
    )
    .await;
    assert_eq!(dry["dry_run"], true);
    assert!(ws.join("new").exists(), "a dry run changes nothing");
    let restored = call(&session, "checkpoint_restore", json!({"id": id})).await;
    let mut expected = before.clone();
    // The ignored file is the bash's: never touched by a restore.
    for line in &mut expected {
        if line.starts_with("target/out ") {
            *line = format!("target/out 644 {:?}", b"more\n");
        }
    }
    assert_eq!(state(&ws), expected);
    assert_eq!(repo(&ws), git_before, "the user's repository is untouched");

    // The restore took its own checkpoint first: restoring it undoes the restore.
    let undo = restored["undo"].as_str().unwrap().to_owned();
    let after_changes = state(&ws);
    call(&session, "checkpoint_restore", json!({"id": undo})).await;
    let undone = state(&ws);
    assert!(undone.iter().any(|l| l.starts_with("new ")), "{undone:?}");
    assert!(
        undone.iter().any(|l| l.starts_with("link2 -> /etc/passwd")),
        "{undone:?}"
    );
    assert!(
        undone.iter().any(|l| l.starts_with("secret.txt 644")),
        "{undone:?}"
    );
    assert!(!undone.iter().any(|l| l.starts_with("src")), "{undone:?}");
    assert_ne!(undone, after_changes);
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_the_tools_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = SessionSettings::new(ToolConfig::new(dir.path()));
    settings.checkpoints.enabled = false;
    let session = Session::open(settings).unwrap();
    let err = session
        .call("checkpoint_list", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "checkpoints are off in this session: `[checkpoints] enabled = false`"
    );
    session.close().await;
}

/// Two changing calls made at once at the start of a turn: the second waits for the
/// turn's checkpoint, which so holds neither call's change. Without the wait, the
/// second call changes a file last in the walk's order (behind 4,000 others) while the
/// checkpoint is being taken, and the change lands in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_call_waits_for_the_turns_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    for d in 0..40 {
        std::fs::create_dir_all(ws.join(format!("d{d:02}"))).unwrap();
        for f in 0..100 {
            std::fs::write(
                ws.join(format!("d{d:02}/f{f:03}.txt")),
                format!("{d} {f}\n"),
            )
            .unwrap();
        }
    }
    let mut settings = SessionSettings::new(ToolConfig::new(&ws));
    settings.checkpoints.dir = Some(dir.path().join("state"));
    let session = Session::open(settings).unwrap();
    let first = call(
        &session,
        "write_file",
        json!({"path": "a.txt", "content": "first\n"}),
    );
    let second = call(
        &session,
        "write_file",
        json!({"path": "d39/f099.txt", "content": "second\n"}),
    );
    tokio::join!(first, second);
    let listed = call(&session, "checkpoint_list", json!({})).await;
    let checkpoints = listed["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1, "{listed}");
    let id = checkpoints[0]["id"].as_str().unwrap();
    let diff = call(&session, "checkpoint_diff", json!({"id": id})).await;
    let changed: Vec<&str> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["a.txt", "d39/f099.txt"], "{diff}");
    session.close().await;
}

/// A path commands may not read (an isolated tool's `read_deny`, inside the
/// workspace) stays out of checkpoints: not stored, not in a diff, not restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_hidden_from_commands_stay_out_of_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let ws = dir.path().join("ws").canonicalize().unwrap();
    std::fs::write(ws.join("secret.env"), "TOKEN=1\n").unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("rel.key"), "KEY=1\n").unwrap();
    let secret = ws.join("secret.env").display().to_string();
    // An absolute entry, and a relative one (the workspace's).
    let tools = ToolConfig::new(&ws).with_setting(
        "bash",
        "isolation",
        json!({"read_deny": [secret, "rel.key"]}),
    );
    let mut settings = SessionSettings::new(tools);
    settings.checkpoints.dir = Some(dir.path().join("state"));
    let session = Session::open(settings).unwrap();
    call(
        &session,
        "write_file",
        json!({"path": "a.txt", "content": "b\n"}),
    )
    .await;
    std::fs::write(ws.join("secret.env"), "TOKEN=2\n").unwrap();
    std::fs::write(ws.join("rel.key"), "KEY=2\n").unwrap();
    let listed = call(&session, "checkpoint_list", json!({})).await;
    let id = listed["checkpoints"][0]["id"].as_str().unwrap().to_owned();
    let diff = call(&session, "checkpoint_diff", json!({"id": id})).await;
    let changed: Vec<&str> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["a.txt"], "{diff}");
    assert!(!diff.to_string().contains("TOKEN"), "{diff}");
    assert!(!diff.to_string().contains("KEY"), "{diff}");
    call(&session, "checkpoint_restore", json!({"id": id})).await;
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("secret.env")).unwrap(),
        "TOKEN=2\n"
    );
    session.close().await;
}
