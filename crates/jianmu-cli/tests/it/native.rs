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
        "jianmu: line 5: not a call item: `type` is `message`: expected shell_call, local_shell_call, apply_patch_call, custom_tool_call, function_call or tool_search_call\n"
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
    assert_eq!(
        declared("anthropic-agent"),
        json!([{"type": "agent_toolset_20260401"}])
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

/// The Python SDK's reference executor of the agent toolset, in a venv the test
/// makes (once) under `target/`.
fn anthropic_python() -> std::path::PathBuf {
    const VERSION: &str = "2.17.0";
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/anthropic-venv");
    let python = venv.join("bin/python");
    let ready = |p: &Path| {
        jianmu_process::std_command(p)
            .args([
                "-c",
                &format!(
                    "import importlib.metadata as m; assert m.version('anthropic') == '{VERSION}'"
                ),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready(&python) {
        let status = jianmu_process::std_command("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is needed for the agent toolset's differential test");
        assert!(status.success(), "cannot create {}", venv.display());
        let status = jianmu_process::std_command(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .arg(format!("anthropic=={VERSION}"))
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cannot install anthropic=={VERSION} from PyPI"
        );
    }
    python
}

/// The same calls of `agent_toolset_20260401`, run by the SDK's reference executor
/// in one folder and by `jianmu native anthropic` in a copy: every answer (with
/// each folder's path written as ROOT) and every file afterwards are the same.
#[test]
fn the_agent_toolset_answers_as_the_sdks_reference_executor_does() {
    // The reference searches with `rg` when there is one, as jianmu's `grep` answers.
    let rg = jianmu_process::std_command("rg").arg("--version").output();
    assert!(
        rg.is_ok_and(|o| o.status.success()),
        "rg must be installed (.ci/run installs it)"
    );
    let python = anthropic_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/agent_toolset.py");
    let (reference, ours) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (reference_dir, ours_dir) = (
        reference.path().canonicalize().unwrap(),
        ours.path().canonicalize().unwrap(),
    );
    for dir in [&reference_dir, &ours_dir] {
        let status = jianmu_process::std_command(&python)
            .arg(&script)
            .arg("fixture")
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let calls = json!([
        {"name": "bash", "input": {"command": "echo hi; echo err >&2"}},
        {"name": "bash", "input": {"command": "cd src && export X=7"}},
        {"name": "bash", "input": {"command": "pwd; echo $X"}},
        {"name": "bash", "input": {"command": "echo out; echo bad >&2; false"}},
        {"name": "bash", "input": {"command": "false"}},
        {"name": "bash", "input": {"command": "printf '\\033[1;31mred\\033[0m\\n\\n\\n'"}},
        {"name": "bash", "input": {"command": "seq 1 10000; echo done >&2"}},
        {"name": "read", "input": {"file_path": "$SAVED", "view_range": [9999, 10002]}},
        {"name": "read", "input": {"file_path": "$SAVED"}},
        {"name": "bash", "input": {"command": "seq 1 10000 >&2; exit 4"}},
        {"name": "bash", "input": {"command": "echo not run"}},
        {"name": "bash", "input": {}},
        {"name": "bash", "input": {"restart": true}},
        {"name": "bash", "input": {"command": "pwd; echo \"[$X]\""}},
        {"name": "bash", "input": {"command": "echo partial; sleep 5", "timeout_ms": 400}},
        {"name": "bash", "input": {"command": "echo after"}},
        {"name": "bash", "input": {"restart": true, "command": "echo fresh"}},
        {"name": "read", "input": {"file_path": "README.md"}},
        {"name": "read", "input": {"file_path": "src/util.py", "view_range": [2, 5]}},
        {"name": "read", "input": {"file_path": "src/util.py", "view_range": [4, 0]}},
        {"name": "read", "input": {"file_path": "src/util.py", "view_range": [3]}},
        {"name": "read", "input": {"file_path": "crlf.txt"}},
        {"name": "read", "input": {"file_path": "unicode.txt"}},
        {"name": "read", "input": {"file_path": "big.txt"}},
        {"name": "read", "input": {"file_path": "big.txt", "view_range": [1999, 2001]}},
        {"name": "read", "input": {"file_path": "big.txt", "view_range": [1, 2000]}},
        {"name": "read", "input": {"file_path": "nope.txt"}},
        {"name": "read", "input": {"file_path": "src"}},
        {"name": "read", "input": {"file_path": "../outside.txt"}},
        {"name": "read", "input": {"file_path": "/etc/hostname"}},
        {"name": "write", "input": {"file_path": "new/deep/file.txt", "content": "héllo\n"}},
        {"name": "write", "input": {"file_path": "README.md", "content": "replaced\n"}},
        {"name": "write", "input": {"file_path": "../escape.txt", "content": "x"}},
        {"name": "edit", "input": {"file_path": "src/app.py", "old_string": "hello", "new_string": "bye"}},
        {"name": "edit", "input": {"file_path": "src/data/notes.txt", "old_string": "beta", "new_string": "BETA"}},
        {"name": "edit", "input": {"file_path": "src/data/notes.txt", "old_string": "beta", "new_string": "BETA", "replace_all": true}},
        {"name": "edit", "input": {"file_path": "src/app.py", "old_string": "absent", "new_string": "x"}},
        {"name": "edit", "input": {"file_path": "missing.py", "old_string": "a", "new_string": "b"}},
        {"name": "glob", "input": {"pattern": "**/*.py"}},
        {"name": "glob", "input": {"pattern": "*.txt"}},
        {"name": "glob", "input": {"pattern": "*.md", "path": "docs"}},
        {"name": "glob", "input": {"pattern": "*.rs"}},
        {"name": "glob", "input": {"pattern": "/etc/*"}},
        {"name": "glob", "input": {"pattern": "../*"}},
        {"name": "grep", "input": {"pattern": "helper", "path": "src/util.py"}},
        {"name": "grep", "input": {"pattern": "def (main|other)", "path": "src/app.py"}},
        {"name": "grep", "input": {"pattern": "zzz_absent"}},
        {"name": "read", "input": {"file_path": "link.py"}},
        {"name": "edit", "input": {"file_path": "link.py", "old_string": "return 0", "new_string": "return 1"}},
        {"name": "read", "input": {"file_path": "nb.ipynb"}},
        {"name": "edit", "input": {"file_path": "nb.ipynb", "old_string": "x = 1", "new_string": "x = 2"}},
        {"name": "edit", "input": {"file_path": "crlf.txt", "old_string": "one", "new_string": "uno\nline"}},
        {"name": "grep", "input": {"pattern": "bang", "path": "odd!name #1.txt"}},
        {"name": "grep", "input": {"pattern": "return", "path": "link.py"}},
        {"name": "glob", "input": {"pattern": "*", "path": "README.md"}},
        {"name": "glob", "input": {"pattern": "*", "path": "no_such_folder"}},
        {"name": "glob", "input": {"pattern": ""}},
        {"name": "read", "input": {"file_path": "big.txt", "view_range": [5, 3]}},
        {"name": "read", "input": {"file_path": "big.txt", "view_range": [0, 1]}},
    ]);
    let calls_file = reference_dir
        .join("..")
        .join(format!("agent-calls-{}.json", std::process::id()));
    std::fs::write(&calls_file, calls.to_string()).unwrap();
    let out = jianmu_process::std_command(&python)
        .arg(&script)
        .arg("reference")
        .arg(&reference_dir)
        .arg(&calls_file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&calls_file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<(String, bool)> = serde_json::from_slice(&out.stdout).unwrap();

    // One call at a time: a `$SAVED` path is taken from an answer before it.
    let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args([
            "--workspace",
            ours_dir.to_str().unwrap(),
            "native",
            "anthropic",
        ])
        .current_dir(&ours_dir)
        .env_remove("JIANMU_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answers: Vec<Value> = Vec::new();
    for (i, call) in calls.as_array().unwrap().iter().enumerate() {
        let mut input = call["input"].clone();
        if input["file_path"] == "$SAVED" {
            let before = answers
                .iter()
                .rev()
                .filter_map(|a| a["content"][0]["text"].as_str())
                .find(|t| t.contains("saved to: "))
                .unwrap();
            let path = before
                .split("saved to: ")
                .nth(1)
                .unwrap()
                .split(" — ")
                .next()
                .unwrap();
            input["file_path"] = json!(path);
        }
        let event = json!({"type": "agent.tool_use", "id": format!("sevt_{i}"), "name": call["name"],
                           "input": input, "evaluated_permission": "allow"});
        writeln!(stdin, "{event}").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        answers.push(serde_json::from_str(&line).unwrap());
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(answers.len(), expected.len());
    // Each side's folder is ROOT, and each saved output's file is FILE.
    let strip = |text: &str, dir: &Path| {
        let text = text.replace(dir.to_str().unwrap(), "ROOT");
        match text.split_once("saved to: ") {
            Some((before, after)) => match after.split_once(" — ") {
                Some((_, rest)) => format!("{before}saved to: FILE — {rest}"),
                None => text,
            },
            None => text,
        }
    };
    for (i, (answer, (text, is_error))) in answers.iter().zip(&expected).enumerate() {
        assert_eq!(answer["type"], "user.tool_result");
        assert_eq!(answer["tool_use_id"], format!("sevt_{i}"));
        let ours_text = answer["content"][0]["text"].as_str().unwrap();
        let (ours_text, text) = (strip(ours_text, &ours_dir), strip(text, &reference_dir));
        assert_eq!(
            (&ours_text, answer["is_error"].as_bool().unwrap()),
            (&text, *is_error),
            "call {i}: {}",
            calls[i]
        );
    }
    // The files are the same afterwards (jianmu's own folder aside).
    let tree = |root: &Path| -> Vec<(String, Vec<u8>)> {
        let mut files = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if rel == ".jianmu" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push((rel, std::fs::read(&path).unwrap()));
                }
            }
        }
        files.sort();
        files
    };
    assert_eq!(tree(&ours_dir), tree(&reference_dir));
}

/// A client-executed `tool_search_call` is answered with the definitions of the
/// session's matching tools; a server-executed one is not a call for the client.
#[test]
fn a_client_tool_search_call_is_answered_with_matching_definitions() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let input = lines(&[
        json!({"type": "tool_search_call", "id": "ts_0", "call_id": "call_ts1", "execution": "client",
               "status": "completed", "arguments": {"query": "select:grep_search,glob_search,no_such"}}),
        json!({"type": "tool_search_call", "call_id": "call_ts2", "execution": "client",
               "arguments": "{\"query\": \"apply a patch\", \"max_results\": 2}"}),
        json!({"type": "tool_search_call", "call_id": "call_ts3", "execution": "server", "arguments": {}}),
    ]);
    let out = native(&["--workspace", ws, "native", "openai"], dir.path(), &input);
    let answers = items(&out);
    assert_eq!(answers.len(), 2, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
    let first = &answers[0];
    assert_eq!(first["type"], "tool_search_output");
    assert_eq!(first["call_id"], "call_ts1");
    assert_eq!(first["execution"], "client");
    assert_eq!(first["status"], "completed");
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["grep_search", "glob_search"]);
    for tool in first["tools"].as_array().unwrap() {
        assert_eq!(tool["type"], "function");
        assert_eq!(tool["parameters"]["type"], "object");
        assert!(tool["description"].as_str().unwrap().len() > 20);
    }
    let second = &answers[1];
    assert_eq!(second["call_id"], "call_ts2");
    let tools = second["tools"].as_array().unwrap();
    assert!(!tools.is_empty() && tools.len() <= 2);
    assert_eq!(tools[0]["name"], "apply_patch");
}

/// OpenAI's `shell` with a local environment's skills (`--shell-tool`): a skill's
/// folder outside the workspace, which commands do not see by default, is shown at
/// its own path, read-only.
#[test]
fn a_local_shell_environments_skills_are_shown_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let skills = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let skill = skills.path().join("demo");
    std::fs::create_dir(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: demo\ndescription: A demo\n---\nRun the demo.\n",
    )
    .unwrap();
    let path = skill.to_str().unwrap();
    let input = lines(&[
        json!({"type": "shell_call", "call_id": "c1", "action": {"commands": [format!("cat {path}/SKILL.md")]}}),
        json!({"type": "shell_call", "call_id": "c2", "action": {"commands": [format!("touch {path}/planted")]}}),
    ]);
    let declaration = json!({"type": "shell", "environment": {"type": "local", "skills": [
        {"name": "demo", "description": "A demo", "path": path}]}});
    let exit = |item: &Value| item["output"][0]["outcome"]["exit_code"].as_i64();

    let hidden = items(&native(
        &["--workspace", ws, "native", "openai"],
        dir.path(),
        &input,
    ));
    assert_ne!(exit(&hidden[0]), Some(0), "{}", hidden[0]);

    let out = native(
        &[
            "--workspace",
            ws,
            "native",
            "openai",
            "--shell-tool",
            &declaration.to_string(),
        ],
        dir.path(),
        &input,
    );
    let shown = items(&out);
    assert_eq!(exit(&shown[0]), Some(0), "{}", shown[0]);
    assert!(
        shown[0]["output"][0]["stdout"]
            .as_str()
            .unwrap()
            .contains("Run the demo.")
    );
    assert_ne!(exit(&shown[1]), Some(0), "{}", shown[1]);
    assert!(!skill.join("planted").exists());

    let relative = json!({"type": "shell", "environment": {"type": "local", "skills": [
        {"name": "demo", "description": "A demo", "path": "demo"}]}});
    let out = native(
        &[
            "--workspace",
            ws,
            "native",
            "openai",
            "--shell-tool",
            &relative.to_string(),
        ],
        dir.path(),
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not absolute"));
}
