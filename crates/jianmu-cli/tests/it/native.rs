//! `jianmu native` and `jianmu tools --format *-native`: the real binary, call items
//! on stdin, result items on stdout.

use std::io::Write as _;
use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

fn native(args: &[&str], dir: &Path, input: &str) -> Output {
    let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(args)
        .current_dir(dir)
        .env_remove("JIANMU_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the jianmu binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn items(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn lines(items: &[Value]) -> String {
    items.iter().map(|i| format!("{i}\n")).collect()
}

#[test]
fn openai_items_share_one_session_and_a_bad_line_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let input = lines(&[
        json!({"type": "apply_patch_call", "call_id": "p1", "operation": {"type": "create_file", "path": "/repo/app/main.py", "diff": "+print('hi')\n"}}),
        json!({"type": "shell_call", "call_id": "s1", "action": {"commands": ["cd app", "python3 main.py; pwd"]}}),
        json!({"type": "shell_call", "call_id": "s2", "action": {"commands": ["basename $PWD"]}}),
    ]);
    let input = format!(
        "{input}\n{{\"type\": \"message\", \"role\": \"user\"}}\n{}",
        lines(&[
            json!({"type": "shell_call", "call_id": "never", "action": {"commands": ["touch ran"]}})
        ])
    );
    let out = native(
        &["--workspace", ws, "native", "openai", "--root", "/repo"],
        dir.path(),
        &input,
    );
    let answers = items(&out);
    assert_eq!(out.status.code(), Some(2), "{answers:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "jianmu: line 5: not a call item: `type` is `message`: expected shell_call, local_shell_call, apply_patch_call, custom_tool_call or function_call\n"
    );
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0]["status"], "completed", "{}", answers[0]);
    assert_eq!(
        answers[1]["output"][1]["stdout"],
        format!("hi\n{}/app\n", std::fs::canonicalize(ws).unwrap().display())
    );
    assert_eq!(answers[2]["output"][0]["stdout"], "app\n");
    assert!(!dir.path().join("app/ran").exists() && !dir.path().join("ran").exists());
}

#[test]
fn anthropic_items_honour_the_policy_the_memories_folder_and_max_characters() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let memories = dir.path().join("mem");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("long.txt"), "x".repeat(500)).unwrap();
    let input = lines(&[
        json!({"type": "tool_use", "id": "t1", "name": "str_replace_based_edit_tool", "input": {"command": "view", "path": "/repo/long.txt"}}),
        json!({"type": "tool_use", "id": "t2", "name": "memory", "input": {"command": "create", "path": "/memories/a.md", "file_text": "remember\n"}}),
        json!({"type": "tool_use", "id": "t3", "name": "bash", "input": {"command": "echo hi"}}),
    ]);
    let out = native(
        &[
            "--workspace",
            ws.to_str().unwrap(),
            "--deny",
            "bash",
            "native",
            "anthropic",
            "--root",
            "/repo",
            "--memories",
            memories.to_str().unwrap(),
            "--max-characters",
            "80",
        ],
        dir.path(),
        &input,
    );
    let answers = items(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = answers[0]["content"].as_str().unwrap();
    assert!(view.contains("[Cut at 80 of "), "{view}");
    assert_eq!(
        answers[1]["content"],
        "File created successfully at: /memories/a.md"
    );
    assert_eq!(
        std::fs::read_to_string(memories.join("a.md")).unwrap(),
        "remember\n"
    );
    assert_eq!(answers[2]["is_error"], true);
    assert!(
        answers[2]["content"].as_str().unwrap().contains("denied"),
        "{}",
        answers[2]
    );
}

#[test]
fn tools_prints_the_native_declarations() {
    let dir = tempfile::tempdir().unwrap();
    let declared = |format: &str| -> Value {
        let out = crate::jianmu(&["tools", "--format", format], dir.path());
        assert_eq!(out.status.code(), Some(0));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(
        declared("anthropic-native"),
        json!([
            {"type": "bash_20250124", "name": "bash"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            {"type": "memory_20250818", "name": "memory"},
        ])
    );
    assert_eq!(
        declared("openai-native"),
        json!([{"type": "shell"}, {"type": "apply_patch"}])
    );
    let freeform = declared("openai-freeform");
    assert_eq!(freeform[1]["type"], "custom");
    assert_eq!(freeform[1]["name"], "apply_patch");
    assert_eq!(freeform[1]["format"]["syntax"], "lark");
    assert!(
        freeform[1]["format"]["definition"]
            .as_str()
            .unwrap()
            .starts_with("start: \"*** Begin Patch\" LF")
    );
    // The specs' own shapes no longer need --json.
    let openai = declared("openai");
    assert!(
        openai
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["type"] == "function")
    );
    let out = crate::jianmu(&["tools", "--format", "nope"], dir.path());
    assert_eq!(out.status.code(), Some(2));
}
