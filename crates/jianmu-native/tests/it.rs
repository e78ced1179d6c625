//! The vendors' contracts end to end: recorded call items, good and bad, against a
//! real session in a temporary workspace.

use std::path::Path;

use jianmu_native::{Native, NativeOptions};
use jianmu_runtime::{Policy, Runtime, SessionSettings};
use jianmu_test_support::Rng;
use jianmu_tool_core::ToolConfig;
use serde_json::{Value, json};

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    memories: std::path::PathBuf,
    native: Native,
}

fn fixture_with(policy: Policy, max_characters: Option<usize>) -> Fixture {
    fixture_of(policy, max_characters, None)
}

fn fixture_of(
    policy: Policy,
    max_characters: Option<usize>,
    timeout: Option<std::time::Duration>,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let memories = dir.path().join("mem");
    std::fs::create_dir(&root).unwrap();
    let mut settings = SessionSettings::new(ToolConfig::new(&root));
    settings.policy = policy;
    settings.timeout = timeout;
    let runtime = Runtime::new(settings).unwrap();
    let mut options = NativeOptions::new()
        .with_root("/repo")
        .with_memories(&memories);
    if let Some(max) = max_characters {
        options = options.with_max_characters(max);
    }
    let native = Native::open(&runtime, options).unwrap();
    Fixture {
        _dir: dir,
        root,
        memories,
        native,
    }
}

fn fixture() -> Fixture {
    fixture_with(Policy::default(), None)
}

impl Fixture {
    /// Sends a `tool_use` of `name`; returns (content, is_error).
    async fn claude(&self, name: &str, input: Value) -> (Value, bool) {
        let out = self
            .native
            .anthropic(&json!({"type": "tool_use", "id": "toolu_1", "name": name, "input": input}))
            .await
            .unwrap();
        assert_eq!(out["type"], "tool_result");
        assert_eq!(out["tool_use_id"], "toolu_1");
        (
            out["content"].clone(),
            out.get("is_error").and_then(Value::as_bool) == Some(true),
        )
    }

    /// The text of a successful `tool_use`.
    async fn ok(&self, name: &str, input: Value) -> String {
        let (content, error) = self.claude(name, input.clone()).await;
        assert!(!error, "{input}: {content}");
        content.as_str().unwrap().to_owned()
    }

    /// The text of a failed `tool_use`.
    async fn err(&self, name: &str, input: Value) -> String {
        let (content, error) = self.claude(name, input.clone()).await;
        assert!(error, "{input}: {content}");
        content.as_str().unwrap().to_owned()
    }

    async fn openai(&self, item: Value) -> Value {
        self.native.openai(&item).await.unwrap()
    }
}

const EDITOR: &str = "str_replace_based_edit_tool";

#[tokio::test]
async fn the_text_editor_speaks_its_contract_under_the_mapped_root() {
    let f = fixture();
    let out = f
        .ok(
            EDITOR,
            json!({"command": "create", "path": "/repo/src/a.py", "file_text": "one\ntwo\nthree\n"}),
        )
        .await;
    assert_eq!(out, "File created successfully at: /repo/src/a.py");
    assert_eq!(
        std::fs::read_to_string(f.root.join("src/a.py")).unwrap(),
        "one\ntwo\nthree\n"
    );
    let out = f
        .ok(EDITOR, json!({"command": "view", "path": "/repo/src/a.py"}))
        .await;
    assert_eq!(
        out,
        "Here's the result of running `cat -n` on /repo/src/a.py:\n     1\tone\n     2\ttwo\n     3\tthree\n"
    );
    let out = f
        .ok(
            EDITOR,
            json!({"command": "view", "path": "/repo/src/a.py", "view_range": [2, -1]}),
        )
        .await;
    assert!(out.ends_with("     2\ttwo\n     3\tthree\n"), "{out}");
    for (range, expect) in [
        (
            json!([0, 2]),
            "Its first element `0` should be within the range of lines of the file: [1, 3]",
        ),
        (
            json!([2, 9]),
            "Its second element `9` should be smaller than the number of lines in the file: `3`",
        ),
        (
            json!([3, 2]),
            "Its second element `2` should be larger or equal than its first `3`",
        ),
        (
            json!([1]),
            "Invalid `view_range`. It should be a list of two integers.",
        ),
    ] {
        let out = f
            .err(
                EDITOR,
                json!({"command": "view", "path": "/repo/src/a.py", "view_range": range}),
            )
            .await;
        assert!(out.contains(expect), "{out}");
    }
    // A folder: two levels, hidden entries left out.
    std::fs::create_dir_all(f.root.join("src/deep/deeper")).unwrap();
    std::fs::write(f.root.join(".secret"), "x").unwrap();
    let out = f
        .ok(EDITOR, json!({"command": "view", "path": "/repo"}))
        .await;
    assert_eq!(
        out,
        "Here's the files and directories up to 2 levels deep in /repo, excluding hidden items:\n/repo\n/repo/src\n/repo/src/a.py\n/repo/src/deep\n"
    );
    // An image is shown as an image.
    std::fs::write(f.root.join("pixel.png"), jianmu_test_support::PNG).unwrap();
    let (content, error) = f
        .claude(
            EDITOR,
            json!({"command": "view", "path": "/repo/pixel.png"}),
        )
        .await;
    assert!(!error, "{content}");
    let image = content
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "image"))
        .unwrap_or_else(|| panic!("no image block: {content}"));
    assert_eq!(image["source"]["type"], "base64");
    assert_eq!(image["source"]["media_type"], "image/png");
    assert!(
        image["source"]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo")
    );
    std::fs::remove_file(f.root.join("pixel.png")).unwrap();
    // A folder longer than a view says how much it left out.
    std::fs::create_dir(f.root.join("many")).unwrap();
    for i in 0..1005 {
        std::fs::write(f.root.join(format!("many/{i:04}")), "").unwrap();
    }
    let out = f
        .ok(EDITOR, json!({"command": "view", "path": "/repo/many"}))
        .await;
    assert_eq!(out.lines().count(), 1 + 1 + 1000 + 1, "{}", &out[..200]);
    assert!(
        out.ends_with(
            "(only the first 1000 of 1005 entries are listed: view a subfolder to see more)\n"
        ),
        "{}",
        &out[out.len() - 200..]
    );
    std::fs::remove_dir_all(f.root.join("many")).unwrap();
    // str_replace: unique, missing, repeated.
    let out = f
        .ok(
            EDITOR,
            json!({"command": "str_replace", "path": "/repo/src/a.py", "old_str": "two", "new_str": "2"}),
        )
        .await;
    assert!(
        out.starts_with("The file /repo/src/a.py has been edited. Here's the result of running `cat -n` on a snippet of /repo/src/a.py:\n     1\tone\n     2\t2\n     3\tthree\n"),
        "{out}"
    );
    let out = f
        .err(
            EDITOR,
            json!({"command": "str_replace", "path": "/repo/src/a.py", "old_str": "zzz", "new_str": ""}),
        )
        .await;
    assert_eq!(
        out,
        "No replacement was performed, old_str `zzz` did not appear verbatim in /repo/src/a.py."
    );
    let out = f
        .err(
            EDITOR,
            json!({"command": "str_replace", "path": "/repo/src/a.py", "old_str": "e", "new_str": "E"}),
        )
        .await;
    assert_eq!(
        out,
        "No replacement was performed. Multiple occurrences of old_str `e` in lines [1, 3]. Please ensure it is unique"
    );
    // insert after a line, and out of range.
    let out = f
        .ok(
            EDITOR,
            json!({"command": "insert", "path": "/repo/src/a.py", "insert_line": 1, "insert_text": "1.5"}),
        )
        .await;
    assert!(out.contains("     2\t1.5\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(f.root.join("src/a.py")).unwrap(),
        "one\n1.5\n2\nthree\n"
    );
    let out = f
        .err(
            EDITOR,
            json!({"command": "insert", "path": "/repo/src/a.py", "insert_line": 9, "insert_text": "x"}),
        )
        .await;
    assert_eq!(
        out,
        "Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: [0, 4]"
    );
    // Missing files, bad commands and missing parameters.
    let out = f
        .err(EDITOR, json!({"command": "view", "path": "/repo/nope.txt"}))
        .await;
    assert_eq!(
        out,
        "The path /repo/nope.txt does not exist. Please provide a valid path."
    );
    let out = f
        .err(EDITOR, json!({"command": "frob", "path": "/repo/src/a.py"}))
        .await;
    assert!(out.starts_with("Unrecognized command frob."), "{out}");
    let out = f
        .err(EDITOR, json!({"command": "create", "path": "/repo/b.txt"}))
        .await;
    assert_eq!(out, "Parameter `file_text` is required for command: create");
}

#[tokio::test]
async fn the_text_editor_refuses_every_path_outside_the_workspace() {
    let f = fixture();
    std::fs::write(f.root.join("in.txt"), "inside\n").unwrap();
    for path in [
        "/repo/../etc/passwd",
        "/etc/passwd",
        "/repository/x",
        "/repo/a/../../x",
    ] {
        for command in [
            json!({"command": "view", "path": path}),
            json!({"command": "create", "path": path, "file_text": "x"}),
        ] {
            let out = f.err(EDITOR, command).await;
            assert_eq!(
                out,
                format!(
                    "The path {path} is outside the workspace /repo: only paths under /repo can be used here."
                )
            );
        }
    }
    // A relative path is taken from the root, and confined the same way.
    let out = f
        .ok(EDITOR, json!({"command": "view", "path": "in.txt"}))
        .await;
    assert!(out.ends_with("     1\tinside\n"), "{out}");
    let out = f
        .err(EDITOR, json!({"command": "view", "path": "../ws/in.txt"}))
        .await;
    assert!(
        out.starts_with("The path ../ws/in.txt is outside the workspace /repo"),
        "{out}"
    );
    // A symbolic link out of the workspace is refused by the workspace itself.
    std::os::unix::fs::symlink("/etc", f.root.join("etc")).unwrap();
    let out = f
        .err(
            EDITOR,
            json!({"command": "view", "path": "/repo/etc/hostname"}),
        )
        .await;
    assert!(!out.contains("localhost") && !out.is_empty(), "{out}");
    assert!(!f.root.parent().unwrap().join("x").exists());
}

#[tokio::test]
async fn max_characters_cuts_a_view_and_says_so() {
    let f = fixture_with(Policy::default(), Some(100));
    let body: String = (0..100).map(|i| format!("line {i}\n")).collect();
    std::fs::write(f.root.join("long.txt"), body).unwrap();
    let out = f
        .ok(EDITOR, json!({"command": "view", "path": "/repo/long.txt"}))
        .await;
    let (shown, note) = out.split_once("\n[Cut at 100 of ").unwrap();
    assert_eq!(shown.chars().count(), 100);
    assert!(
        note.ends_with("characters (max_characters): view the rest with `view_range`.]"),
        "{note}"
    );
}

#[tokio::test]
async fn bash_keeps_one_shell_per_conversation_and_restart_resets_it() {
    let f = fixture();
    std::fs::create_dir(f.root.join("sub")).unwrap();
    let out = f
        .ok(
            "bash",
            json!({"command": "cd sub && export GREETING=hi && echo ready"}),
        )
        .await;
    assert_eq!(out, "ready\n");
    let out = f
        .ok(
            "bash",
            json!({"command": "echo $GREETING; basename $PWD; echo oops >&2"}),
        )
        .await;
    assert_eq!(out, "hi\nsub\noops\n");
    let out = f
        .err("bash", json!({"command": "echo partial; exit 3"}))
        .await;
    assert_eq!(out, "partial\nExit code: 3");
    let out = f.ok("bash", json!({"restart": true})).await;
    assert_eq!(out, "tool has been restarted.");
    let out = f
        .ok(
            "bash",
            json!({"command": "echo \"[$GREETING]\"; basename $PWD"}),
        )
        .await;
    assert_eq!(out, "[]\nws\n");
    let out = f.err("bash", json!({})).await;
    assert_eq!(out, "no command provided.");
}

#[tokio::test]
async fn memory_lives_in_its_own_folder_and_speaks_its_contract() {
    let f = fixture();
    const M: &str = "memory";
    let out = f
        .ok(M, json!({"command": "view", "path": "/memories"}))
        .await;
    assert!(
        out.starts_with("Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n"),
        "{out}"
    );
    let out = f
        .ok(
            M,
            json!({"command": "create", "path": "/memories/notes/todo.md", "file_text": "- ship\n- test\n"}),
        )
        .await;
    assert_eq!(out, "File created successfully at: /memories/notes/todo.md");
    assert_eq!(
        std::fs::read_to_string(f.memories.join("notes/todo.md")).unwrap(),
        "- ship\n- test\n"
    );
    assert!(!f.root.join("notes").exists());
    let out = f
        .err(
            M,
            json!({"command": "create", "path": "/memories/notes/todo.md", "file_text": "x"}),
        )
        .await;
    assert_eq!(out, "Error: File /memories/notes/todo.md already exists");
    let out = f
        .ok(
            M,
            json!({"command": "view", "path": "/memories/notes/todo.md"}),
        )
        .await;
    assert_eq!(
        out,
        "Here's the content of /memories/notes/todo.md with line numbers:\n     1\t- ship\n     2\t- test\n"
    );
    let out = f
        .ok(M, json!({"command": "view", "path": "/memories"}))
        .await;
    assert!(
        out.contains("\t/memories/notes\n") && out.ends_with("\t/memories/notes/todo.md"),
        "{out}"
    );
    let out = f
        .ok(
            M,
            json!({"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": "- test", "new_str": "- tested"}),
        )
        .await;
    assert!(
        out.starts_with("The memory file has been edited.\n"),
        "{out}"
    );
    let out = f
        .err(
            M,
            json!({"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": "- ", "new_str": "* "}),
        )
        .await;
    assert_eq!(
        out,
        "Error: No replacement was performed. Multiple occurrences of old_str `- ` in lines: [1, 2]. Please ensure it is unique"
    );
    let out = f
        .ok(
            M,
            json!({"command": "insert", "path": "/memories/notes/todo.md", "insert_line": 0, "insert_text": "# Todo"}),
        )
        .await;
    assert_eq!(out, "The file /memories/notes/todo.md has been edited.");
    let out = f
        .err(
            M,
            json!({"command": "insert", "path": "/memories/notes/todo.md", "insert_line": -1, "insert_text": "x"}),
        )
        .await;
    assert_eq!(
        out,
        "Error: Invalid `insert_line` parameter: -1. It should be within the range of lines of the file: [0, 3]"
    );
    // Rename a file, then a folder; the destination must be free.
    f.ok(
        M,
        json!({"command": "create", "path": "/memories/other.md", "file_text": "o\n"}),
    )
    .await;
    let out = f
        .err(
            M,
            json!({"command": "rename", "old_path": "/memories/other.md", "new_path": "/memories/notes/todo.md"}),
        )
        .await;
    assert_eq!(
        out,
        "Error: The destination /memories/notes/todo.md already exists"
    );
    let out = f
        .ok(
            M,
            json!({"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/done"}),
        )
        .await;
    assert_eq!(
        out,
        "Successfully renamed /memories/notes to /memories/done"
    );
    assert_eq!(
        std::fs::read_to_string(f.memories.join("done/todo.md")).unwrap(),
        "# Todo\n- ship\n- tested\n"
    );
    let out = f
        .ok(
            M,
            json!({"command": "delete", "path": "/memories/other.md"}),
        )
        .await;
    assert_eq!(out, "Successfully deleted /memories/other.md");
    assert!(!f.memories.join("other.md").exists());
    let out = f
        .err(
            M,
            json!({"command": "delete", "path": "/memories/other.md"}),
        )
        .await;
    assert_eq!(out, "Error: The path /memories/other.md does not exist");
    // Nothing outside /memories, however it is spelled.
    for path in [
        "/memories/../ws/x",
        "/etc/passwd",
        "/memoriesx/a",
        "memories/a",
    ] {
        let out = f
            .err(
                M,
                json!({"command": "create", "path": path, "file_text": "x"}),
            )
            .await;
        assert_eq!(
            out,
            format!(
                "Error: The path {path} is outside /memories: every memory path starts with /memories/."
            )
        );
    }
    assert!(!f.root.join("x").exists());
    let out = f
        .err(M, json!({"command": "delete", "path": "/memories"}))
        .await;
    assert!(out.contains("cannot be deleted"), "{out}");
}

#[tokio::test]
async fn openai_shell_reports_each_command_and_timeouts_with_their_output() {
    let f = fixture();
    let out = f
        .openai(json!({
            "type": "shell_call", "call_id": "call_1", "status": "in_progress",
            "action": {"commands": ["mkdir -p d && cd d && echo in", "basename $PWD; echo bad >&2; exit 4"]},
        }))
        .await;
    assert_eq!(
        out,
        json!({"type": "shell_call_output", "call_id": "call_1", "output": [
            {"stdout": "in\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "d\n", "stderr": "bad\n", "outcome": {"type": "exit", "exit_code": 4}},
        ]})
    );
    let out = f
        .openai(json!({
            "type": "shell_call", "call_id": "call_2",
            "action": {"commands": ["echo started; sleep 20"], "timeout_ms": 700},
        }))
        .await;
    assert_eq!(out["output"][0]["outcome"], json!({"type": "timeout"}));
    assert_eq!(out["output"][0]["stdout"], "started\n");
    // A limit past what a command may have is held to a day, not refused.
    let out = f
        .openai(json!({
            "type": "shell_call", "call_id": "call_4",
            "action": {"commands": ["echo ok"], "timeout_ms": u64::MAX},
        }))
        .await;
    assert_eq!(out["output"][0]["stdout"], "ok\n", "{out}");
    let out = f
        .openai(json!({
            "type": "shell_call", "call_id": "call_3",
            "action": {"commands": ["seq 1 2000"], "max_output_length": 200},
        }))
        .await;
    assert_eq!(out["max_output_length"], 200);
    let stdout = out["output"][0]["stdout"].as_str().unwrap();
    assert!(stdout.chars().count() <= 200, "{stdout}");
    assert!(
        stdout.starts_with("1\n2\n") && stdout.ends_with("1999\n2000\n"),
        "{stdout}"
    );
    assert!(stdout.contains("characters cut ...]"), "{stdout}");
}

#[tokio::test]
async fn openai_apply_patch_applies_v4a_operations_and_fails_inside_the_item() {
    let f = fixture();
    let done = |out: &Value| {
        assert_eq!(out["type"], "apply_patch_call_output");
        (
            out["status"].as_str().unwrap().to_owned(),
            out["output"].as_str().unwrap().to_owned(),
        )
    };
    let out = f
        .openai(json!({
            "type": "apply_patch_call", "call_id": "call_a", "status": "completed",
            "operation": {"type": "create_file", "path": "lib/fib.py", "diff": "+def fib(n):\n+    return n\n"},
        }))
        .await;
    assert_eq!(done(&out).0, "completed", "{out}");
    assert_eq!(out["call_id"], "call_a");
    let out = f
        .openai(json!({
            "type": "apply_patch_call", "call_id": "call_b",
            "operation": {"type": "update_file", "path": "/repo/lib/fib.py", "diff": "@@\n-def fib(n):\n+def fibonacci(n):\n     return n\n"},
        }))
        .await;
    assert_eq!(done(&out).0, "completed", "{out}");
    assert_eq!(
        std::fs::read_to_string(f.root.join("lib/fib.py")).unwrap(),
        "def fibonacci(n):\n    return n\n"
    );
    for (op, expect) in [
        (
            json!({"type": "update_file", "path": "lib/fib.py", "diff": "@@\n-def nothing():\n+x\n"}),
            "were not found",
        ),
        (
            json!({"type": "update_file", "path": "lib/fib.py", "diff": "@@\n-def fibonacci(n):\n+x\n*** Delete File: other.txt\n"}),
            "would start another file operation",
        ),
        // However the parser would still read a header: no space after the colon,
        // whitespace before it.
        (
            json!({"type": "update_file", "path": "lib/fib.py", "diff": "@@\n-def fibonacci(n):\n+x\n*** Delete File:other.txt\n"}),
            "would start another file operation",
        ),
        (
            json!({"type": "create_file", "path": "lib/new.py", "diff": "+x\n *** Update File: lib/fib.py\n@@\n-def fibonacci(n):\n+y\n"}),
            "would start another file operation",
        ),
        (
            json!({"type": "update_file", "path": "lib/fib.py", "diff": " *** Move to: elsewhere.py\n@@\n-def fibonacci(n):\n+x\n"}),
            "would start another file operation",
        ),
        (
            json!({"type": "delete_file", "path": "../outside.txt"}),
            "outside the workspace /repo",
        ),
        (
            json!({"type": "create_file", "path": "/etc/evil", "diff": "+x\n"}),
            "outside the workspace /repo",
        ),
        (
            json!({"type": "update_file", "path": "lib/fib.py"}),
            "`update_file` needs a `diff`",
        ),
        (
            json!({"type": "rename_file", "path": "lib/fib.py"}),
            "unknown operation",
        ),
    ] {
        let out = f
            .openai(json!({"type": "apply_patch_call", "call_id": "c", "operation": op}))
            .await;
        let (status, output) = done(&out);
        assert_eq!(status, "failed", "{op}: {output}");
        assert!(output.contains(expect), "{op}: {output}");
    }
    let out = f
        .openai(json!({
            "type": "apply_patch_call", "call_id": "call_c",
            "operation": {"type": "delete_file", "path": "lib/fib.py"},
        }))
        .await;
    assert_eq!(done(&out).0, "completed");
    assert!(!f.root.join("lib/fib.py").exists());
    // The freeform tool takes the whole patch; function calls reach any tool.
    let out = f
        .openai(json!({
            "type": "custom_tool_call", "call_id": "call_d", "name": "apply_patch",
            "input": "*** Begin Patch\n*** Add File: n.txt\n+new\n*** End Patch\n",
        }))
        .await;
    assert_eq!(out["type"], "custom_tool_call_output");
    assert!(
        out["output"]
            .as_str()
            .unwrap()
            .starts_with("Applied the patch"),
        "{out}"
    );
    let out = f
        .openai(json!({
            "type": "function_call", "call_id": "call_e", "name": "read_file",
            "arguments": "{\"path\": \"n.txt\"}",
        }))
        .await;
    assert_eq!(
        out,
        json!({"type": "function_call_output", "call_id": "call_e", "output": "new\n"})
    );
}

#[tokio::test]
async fn a_denied_tool_is_an_error_inside_the_vendor_item() {
    let policy = Policy {
        deny: vec!["process:exec".into(), "apply_patch".into()],
        ..Policy::default()
    };
    let f = fixture_with(policy, None);
    let out = f.err("bash", json!({"command": "echo hi"})).await;
    assert!(out.contains("denied"), "{out}");
    let out = f
        .openai(json!({"type": "shell_call", "call_id": "c", "action": {"commands": ["echo hi"]}}))
        .await;
    assert_eq!(out["output"][0]["outcome"]["exit_code"], 126);
    assert!(
        out["output"][0]["stderr"]
            .as_str()
            .unwrap()
            .contains("denied"),
        "{out}"
    );
    let out = f
        .openai(json!({"type": "apply_patch_call", "call_id": "c", "operation": {"type": "delete_file", "path": "x"}}))
        .await;
    assert_eq!(out["status"], "failed");
}

#[tokio::test]
async fn items_that_are_not_calls_are_refused() {
    let f = fixture();
    for item in [
        json!("text"),
        json!({"type": "text", "text": "hi"}),
        json!({"type": "tool_use", "name": "bash"}),
        json!({"type": "tool_use", "id": "t", "name": "bash", "input": "ls"}),
    ] {
        assert!(f.native.anthropic(&item).await.is_err(), "{item}");
    }
    for item in [
        json!([]),
        json!({"type": "message"}),
        json!({"type": "shell_call", "call_id": "c"}),
        json!({"type": "apply_patch_call", "call_id": "c"}),
        json!({"type": "reasoning", "call_id": "c"}),
    ] {
        assert!(f.native.openai(&item).await.is_err(), "{item}");
    }
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    jianmu_process::std_command("git")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("git must be installed")
}

/// The V4A body of one file's unified diff: its hunks with `@@` lines bare.
fn v4a(unified: &str) -> String {
    let mut out = String::new();
    let mut in_hunk = false;
    for line in unified.lines() {
        if line.starts_with("@@") {
            in_hunk = true;
            out.push_str("@@\n");
        } else if in_hunk {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[tokio::test]
async fn v4a_updates_apply_as_git_applies_the_same_change() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..40 {
        let n = 20 + rng.below(60);
        let old: Vec<String> = (0..n)
            .map(|i| {
                if i % 5 == 0 {
                    String::new()
                } else {
                    format!("line {i}")
                }
            })
            .collect();
        let mut new = old.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(new.len());
            match rng.below(3) {
                0 => new[at] = format!("changed {}", rng.next_u64() % 1000),
                1 => new.insert(at, format!("added {}", rng.next_u64() % 1000)),
                _ => {
                    new.remove(at);
                }
            }
        }
        let text = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        let (a, b) = (scratch.path().join("a"), scratch.path().join("b"));
        std::fs::write(&a, text(&old)).unwrap();
        std::fs::write(&b, text(&new)).unwrap();
        let diff = git(
            scratch.path(),
            &["diff", "--no-index", "--no-color", "-U3", "a", "b"],
        );
        let unified = String::from_utf8(diff.stdout).unwrap();
        if unified.is_empty() {
            continue;
        }
        // git applies the unified diff to a copy of the old file.
        let repo = scratch.path().join(format!("git{case}"));
        std::fs::create_dir(&repo).unwrap();
        std::fs::write(repo.join("f.txt"), text(&old)).unwrap();
        let patch = unified.replace("a/a", "a/f.txt").replace("b/b", "b/f.txt");
        std::fs::write(repo.join("p.diff"), &patch).unwrap();
        let applied = git(&repo, &["apply", "p.diff"]);
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
        // The same change as a V4A update_file operation.
        let name = format!("f{case}.txt");
        std::fs::write(f.root.join(&name), text(&old)).unwrap();
        let out = f
            .openai(json!({
                "type": "apply_patch_call", "call_id": "c",
                "operation": {"type": "update_file", "path": name, "diff": v4a(&unified)},
            }))
            .await;
        assert_eq!(out["status"], "completed", "case {case}: {out}\n{unified}");
        assert_eq!(
            std::fs::read_to_string(f.root.join(&name)).unwrap(),
            std::fs::read_to_string(repo.join("f.txt")).unwrap(),
            "case {case}\n{unified}"
        );
    }
}

/// An `old_str` found on every line is answered as fast as one search of the file
/// (the line of each match was counted from the start of the file, so 200,000
/// matches took minutes), and within the session's time limit.
#[tokio::test]
async fn a_str_replace_found_everywhere_answers_within_the_time_limit() {
    let limit = std::time::Duration::from_secs(20);
    let f = fixture_of(Policy::default(), None, Some(limit));
    std::fs::write(f.root.join("many.txt"), "ab\n".repeat(200_000)).unwrap();
    let started = std::time::Instant::now();
    let text = f
        .err(
            EDITOR,
            json!({"command": "str_replace", "path": "/repo/many.txt", "old_str": "ab", "new_str": "x"}),
        )
        .await;
    let took = started.elapsed();
    assert!(
        text.starts_with(
            "No replacement was performed. Multiple occurrences of old_str `ab` in lines [1, 2, 3,"
        ),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(text.ends_with("199999, 200000]. Please ensure it is unique"));
    assert!(
        took < limit,
        "the answer took {took:?}, over the limit of {limit:?}"
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("many.txt"))
            .unwrap()
            .len(),
        600_000
    );
}

/// A file over the size of one read is viewed in parts with `view_range` (it was
/// refused, and the refusal named `offset` and `limit`, which the editor has not).
#[tokio::test]
async fn view_range_reads_part_of_a_file_too_large_to_view_whole() {
    let f = fixture();
    let big: String = (1..=150_000).map(|i| format!("line {i:06}\n")).collect();
    assert!(big.len() > 1 << 20);
    std::fs::write(f.root.join("big.log"), &big).unwrap();
    let text = f
        .ok(
            EDITOR,
            json!({"command": "view", "path": "/repo/big.log", "view_range": [3, 5]}),
        )
        .await;
    assert_eq!(
        text,
        "Here's the result of running `cat -n` on /repo/big.log:\n     3\tline 000003\n     4\tline 000004\n     5\tline 000005\n"
    );
    let tail = f
        .ok(
            EDITOR,
            json!({"command": "view", "path": "/repo/big.log", "view_range": [149_999, -1]}),
        )
        .await;
    assert!(
        tail.ends_with("149999\tline 149999\n150000\tline 150000\n"),
        "{tail}"
    );
    let whole = f
        .err(EDITOR, json!({"command": "view", "path": "/repo/big.log"}))
        .await;
    assert!(whole.contains("view_range"), "{whole}");
    assert!(!whole.contains("offset"), "{whole}");
    let past = f
        .err(
            EDITOR,
            json!({"command": "view", "path": "/repo/big.log", "view_range": [150_001, -1]}),
        )
        .await;
    assert!(past.contains("[1, 150000]"), "{past}");
    // More than one read holds: the lines that fit, and where to go on.
    let wide = f
        .ok(
            EDITOR,
            json!({"command": "view", "path": "/repo/big.log", "view_range": [1, 150_000]}),
        )
        .await;
    assert!(
        wide.contains("View from line"),
        "{}",
        &wide[wide.len() - 300..]
    );
}

/// A V4A diff's context line whose text begins with `*** ` (an org-mode heading) is
/// text, not another file operation: it applies, as the Agents SDK applies it.
#[tokio::test]
async fn a_v4a_context_line_that_begins_with_stars_applies() {
    let f = fixture();
    std::fs::write(
        f.root.join("notes.org"),
        "*** Settings\nold value\n*** Other\n",
    )
    .unwrap();
    let out = f
        .openai(
            json!({"type": "apply_patch_call", "call_id": "c", "operation": {
                "type": "update_file",
                "path": "notes.org",
                "diff": "@@\n *** Settings\n-old value\n+new value\n *** Other\n",
            }}),
        )
        .await;
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(
        std::fs::read_to_string(f.root.join("notes.org")).unwrap(),
        "*** Settings\nnew value\n*** Other\n"
    );
}

/// A command stopped by the session's time limit answers with what it printed so
/// far, as the docs promise (the session's limit ended the call first, with nothing).
#[tokio::test]
async fn a_bash_command_stopped_by_the_time_limit_keeps_its_output() {
    let limit = std::time::Duration::from_secs(3);
    let f = fixture_of(Policy::default(), None, Some(limit));
    let text = f
        .err("bash", json!({"command": "echo started; sleep 30"}))
        .await;
    assert!(text.contains("started"), "{text}");
    assert!(text.contains("timed out"), "{text}");
    let out = f
        .openai(json!({"type": "shell_call", "call_id": "c", "action": {"commands": ["echo begun; sleep 30"]}}))
        .await;
    assert_eq!(
        out["output"][0]["outcome"],
        json!({"type": "timeout"}),
        "{out}"
    );
    assert_eq!(out["output"][0]["stdout"], "begun\n", "{out}");
}

/// The older `local_shell_call` is run (it ended `jianmu native` with exit 2): an
/// argument vector, quoted word by word, in its folder with its environment; a
/// `shell_call` made by a program carries its `caller` into the answer.
#[tokio::test]
async fn openai_local_shell_calls_run_and_callers_are_carried() {
    let f = fixture();
    std::fs::create_dir(f.root.join("sub")).unwrap();
    let out = f
        .openai(json!({"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "status": "completed", "action": {
            "type": "exec",
            "command": ["sh", "-c", "echo \"$GREETING from $(basename \"$PWD\")\"; echo 'it'\"'\"'s'"],
            "working_directory": "/repo/sub",
            "env": {"GREETING": "hi; rm -rf /"},
            "timeout_ms": 10_000,
        }}))
        .await;
    assert_eq!(out["type"], "local_shell_call_output", "{out}");
    assert_eq!(out["call_id"], "call_1");
    assert_eq!(out["output"], "hi; rm -rf / from sub\nit's\n", "{out}");
    let failed = f
        .openai(json!({"type": "local_shell_call", "call_id": "call_2", "action": {"type": "exec", "command": ["false"]}}))
        .await;
    assert!(
        failed["output"].as_str().unwrap().contains("Exit code: 1"),
        "{failed}"
    );
    let outside = f
        .openai(json!({"type": "local_shell_call", "call_id": "call_3", "action": {"type": "exec", "command": ["ls"], "working_directory": "/etc"}}))
        .await;
    assert!(
        outside["output"].as_str().unwrap().starts_with("error: "),
        "{outside}"
    );
    let bad_env = f
        .openai(json!({"type": "local_shell_call", "call_id": "call_4", "action": {"type": "exec", "command": ["true"], "env": {"A=B": "x"}}}))
        .await;
    assert!(
        bad_env["output"].as_str().unwrap().contains("`env` entry"),
        "{bad_env}"
    );
    let caller = json!({"type": "program", "caller_id": "prog_7"});
    let out = f
        .openai(json!({"type": "shell_call", "call_id": "c", "caller": caller, "action": {"commands": ["echo ok"]}}))
        .await;
    assert_eq!(out["caller"], caller, "{out}");
    assert_eq!(out["output"][0]["stdout"], "ok\n");
    assert!(f
        .native
        .openai(&json!({"type": "local_shell_call", "call_id": "x", "action": {"type": "exec", "command": "ls"}}))
        .await
        .is_err());
}

/// A memory folder of more than 1,000 files is renamed and deleted whole (up to the
/// 10,000 entries the tool takes), and the folders a rename or delete empties are
/// gone, so the path can be used again.
#[tokio::test]
async fn memory_folders_of_many_files_move_and_leave_nothing_behind() {
    let f = fixture();
    const M: &str = "memory";
    f.ok(
        M,
        json!({"command": "create", "path": "/memories/seed.md", "file_text": "x\n"}),
    )
    .await;
    let big = f.memories.join("big");
    for i in 0..1500 {
        let dir = big.join(format!("d{}", i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.md")), "m\n").unwrap();
    }
    let out = f
        .ok(M, json!({"command": "rename", "old_path": "/memories/big", "new_path": "/memories/moved"}))
        .await;
    assert_eq!(out, "Successfully renamed /memories/big to /memories/moved");
    assert!(!big.exists(), "the emptied folder stayed");
    assert_eq!(
        std::fs::read_dir(f.memories.join("moved/d0"))
            .unwrap()
            .count(),
        500
    );
    let out = f
        .ok(M, json!({"command": "delete", "path": "/memories/moved"}))
        .await;
    assert_eq!(out, "Successfully deleted /memories/moved");
    assert!(
        !f.memories.join("moved").exists(),
        "the emptied folder stayed"
    );
    f.ok(
        M,
        json!({"command": "create", "path": "/memories/big", "file_text": "reused\n"}),
    )
    .await;
    assert_eq!(std::fs::read_to_string(&big).unwrap(), "reused\n");
}

/// One `agent.tool_use` event's answer: its text and whether it is an error.
async fn agent(native: &Native, name: &str, input: Value) -> (String, bool) {
    let answer = native
        .anthropic(&json!({"type": "agent.tool_use", "id": "sevt_1", "name": name, "input": input}))
        .await
        .unwrap();
    assert_eq!(answer["type"], "user.tool_result");
    (
        answer["content"][0]["text"].as_str().unwrap().to_owned(),
        answer["is_error"].as_bool().unwrap(),
    )
}

/// The agent toolset's saved `bash` output is read only as the file it wrote last:
/// a link or another file planted beside it, or the file after a restart, is a path
/// outside the working directory; and output that merely quotes `bash`'s own cut
/// note is not taken for a cut one.
#[tokio::test]
async fn the_agent_toolsets_saved_output_is_the_only_file_read_outside() {
    let f = fixture();
    let (long, is_error) = agent(&f.native, "bash", json!({"command": "seq 1 10000"})).await;
    assert!(!is_error);
    let saved = long
        .split("saved to: ")
        .nth(1)
        .and_then(|rest| rest.split(" — ").next())
        .unwrap_or_else(|| panic!("{long}"))
        .to_owned();
    let (tail, is_error) = agent(
        &f.native,
        "read",
        json!({"file_path": &saved, "view_range": [9999, 10000]}),
    )
    .await;
    assert_eq!((tail.as_str(), is_error), ("9999\n10000", false));

    let secret = f._dir.path().join("secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    let folder = Path::new(&saved).parent().unwrap();
    let planted = folder.join("planted.txt");
    std::os::unix::fs::symlink(&secret, &planted).unwrap();
    let copy = folder.join("copy.txt");
    std::fs::write(&copy, "secret").unwrap();
    for path in [&planted, &copy] {
        let (text, is_error) = agent(&f.native, "read", json!({"file_path": path})).await;
        assert!(
            is_error && text.contains("outside the session's working directory"),
            "{text}"
        );
    }
    // The saved file itself replaced by a link: not followed.
    std::fs::remove_file(&saved).unwrap();
    std::os::unix::fs::symlink(&secret, &saved).unwrap();
    let (text, is_error) = agent(&f.native, "read", json!({"file_path": &saved})).await;
    assert!(is_error && !text.contains("secret"), "{text}");

    // After a restart the saved output is gone.
    agent(&f.native, "bash", json!({"restart": true})).await;
    let (text, is_error) = agent(&f.native, "read", json!({"file_path": &saved})).await;
    assert!(
        is_error && text.contains("outside the session's working directory"),
        "{text}"
    );

    let quoted = "x\n... (5 bytes cut from the middle; 9 bytes in all; the whole output is saved in /etc/passwd: read it) ...";
    std::fs::write(f.root.join("quote.txt"), format!("{quoted}\n")).unwrap();
    let (text, is_error) = agent(&f.native, "bash", json!({"command": "cat quote.txt"})).await;
    assert_eq!((text.as_str(), is_error), (quoted, false));
    f.native.close().await;
}

/// A `max_output_length` cut of output `bash` had already cut (its middle left out
/// and saved) states the whole stream's size, and names the file holding it; it
/// counted only the characters `bash` had kept.
#[tokio::test]
async fn a_cut_of_output_bash_already_cut_counts_the_whole_stream() {
    let f = fixture();
    let item = f
        .openai(json!({"type": "shell_call", "call_id": "c", "action": {
            "commands": ["head -c 5000000 /dev/zero | tr '\\0' z"], "max_output_length": 1000}}))
        .await;
    let stdout = item["output"][0]["stdout"].as_str().unwrap();
    assert!(stdout.chars().count() <= 1000, "{stdout}");
    assert!(stdout.starts_with('z') && stdout.ends_with('z'), "{stdout}");
    let note = stdout
        .split("[... ")
        .nth(1)
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        note.starts_with(
            "the middle is cut: the output was 5000000 bytes; all of it is saved in /repo/"
        ),
        "{note}"
    );
    assert!(!note.contains("characters cut"), "{note}");
    let saved = note
        .split("saved in /repo/")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert_eq!(
        std::fs::metadata(f.root.join(saved)).unwrap().len(),
        5_000_000
    );
    f.native.close().await;
}

/// A background job a command leaves ends with its call, and the shell's notice of
/// it (`Killed  sleep 100`) is that call's output, not the next command's.
#[tokio::test]
async fn a_killed_jobs_notice_stays_with_its_own_call() {
    let f = fixture();
    let item = f
        .openai(json!({"type": "shell_call", "call_id": "c", "action": {
            "commands": ["sleep 100 &", "echo next", "echo third"]}}))
        .await;
    let output = item["output"].as_array().unwrap();
    assert!(
        output[0]["stderr"].as_str().unwrap().contains("Killed"),
        "{item}"
    );
    for later in &output[1..] {
        assert_eq!(later["stderr"], "", "{item}");
    }
    assert_eq!(output[1]["stdout"], "next\n");
    f.native.close().await;
}
