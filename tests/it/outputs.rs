//! Specs tell the truth: every built-in tool, called for real, returns structured JSON
//! that validates against its output schema, and a tool without structured output
//! says so with a text schema.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;

use jianmu_provider::BuiltinToolProvider;
use jianmu_tool_core::{ToolConfig, ToolSet};
use serde_json::{Value, json};

/// Answers every connection on `listener` with `body` as `content_type`, until the
/// test process ends (a test-only loopback server; it never reaches out).
fn serve(listener: TcpListener, content_type: &'static str, body: &'static str) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
}

const RESULTS_PAGE: &str = "<html><body><div class=\"result\"><a class=\"result__a\" \
     href=\"https://example.com/\">Example</a><a class=\"result__snippet\">An example \
     page.</a></div></body></html>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_returns_structured_output_that_matches_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\nworld\n").unwrap();
    std::fs::write(dir.path().join("bin.dat"), b"\0\x01\x02").unwrap();
    std::fs::write(
        dir.path().join("nb.ipynb"),
        r#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("code.py"),
        "def twice(x):\n    return 2 * x\n\n\nprint(twice(21))\n",
    )
    .unwrap();
    let git = jianmu_process::std_command("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(git.success());
    let api = TcpListener::bind("127.0.0.1:0").unwrap();
    let api_url = format!("http://{}/v1", api.local_addr().unwrap());
    serve(api, "application/json", r#"{"ok": true}"#);
    let search = TcpListener::bind("127.0.0.1:0").unwrap();
    let search_url = format!("http://{}/html/", search.local_addr().unwrap());
    serve(search, "text/html", RESULTS_PAGE);

    let config = ToolConfig::new(dir.path())
        .with_allow_hosts(["127.0.0.1".to_owned()])
        .with_settings("duckduckgo_search", json!({"endpoint": search_url}))
        .with_settings(
            "lsp",
            json!({"servers": {"python": {"command": [jianmu_test_support::pylsp().to_string_lossy()], "extensions": ["py"]}}}),
        )
        .with_settings(
            "git",
            json!({"author_name": "Test", "author_email": "test@example.com"}),
        );
    // Specs from a set; calls through a session, which `run_script` needs.
    let tools = ToolSet::from_providers(&[&BuiltinToolProvider::new(config.clone())]).unwrap();
    let session =
        jianmu_runtime::Session::open(jianmu_runtime::SessionSettings::new(config)).unwrap();

    let calls: Vec<(&str, Value)> = vec![
        ("calculator", json!("6*7")),
        ("read_file", json!({"path": "notes.txt"})),
        (
            "read_file",
            json!({"path": "notes.txt", "offset": 2, "limit": 1}),
        ),
        ("read_file", json!({"path": "bin.dat"})),
        ("read_file", json!({"path": "nb.ipynb"})),
        ("write_file", json!({"path": "out.txt", "content": "hi"})),
        ("list_dir", json!({"path": "."})),
        (
            "notebook_edit",
            json!({"path": "nb.ipynb", "new_source": "print(1)", "edit_mode": "insert"}),
        ),
        ("diagnostics", json!({"paths": ["code.py"]})),
        (
            "definition",
            json!({"path": "code.py", "symbol": "twice", "line": 5}),
        ),
        ("references", json!({"path": "code.py", "symbol": "twice"})),
        ("hover", json!({"path": "code.py", "line": 5, "column": 7})),
        ("symbols", json!({"path": "code.py"})),
        ("git_status", json!({})),
        ("git_add", json!({"paths": ["notes.txt"]})),
        ("git_diff", json!({"staged": true})),
        ("git_commit", json!({"message": "notes"})),
        ("git_log", json!({})),
        ("git_show", json!({})),
        ("git_blame", json!({"path": "notes.txt"})),
        ("git_branch", json!({"create": "topic"})),
        ("git_branch", json!({})),
        ("git_checkout", json!({"target": "topic"})),
        ("glob_search", json!({"pattern": "*.txt"})),
        ("grep_search", json!({"query": "world"})),
        ("file_info", json!({"path": "notes.txt"})),
        (
            "str_replace",
            json!({"path": "out.txt", "old": "hi", "new": "ho"}),
        ),
        (
            "edit_file",
            json!({"path": "out.txt", "edits": [{"old": "ho", "new": "hey"}]}),
        ),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: out.txt\n-hey\n+hi\n*** End Patch"}),
        ),
        ("bash", json!({"command": "echo out; echo err >&2"})),
        (
            "bash",
            json!({"command": "echo started; exec sleep 60", "background": true, "yield_ms": 0}),
        ),
        ("bash_output", json!({"job": 1, "wait_ms": 50})),
        ("bash_jobs", json!({})),
        ("bash_kill", json!({"job": 1})),
        ("expose_port", json!({"port": 8000})),
        ("expose_port", json!({"port": 8000, "close": true})),
        ("rhai_repl", json!({"code": "40 + 2"})),
        ("run_script", json!({"code": "calculator(\"6*7\")"})),
        ("python_repl", json!({"code": "print(42)"})),
        ("http_request", json!({"url": api_url})),
        ("http_request", json!({"url": api_url, "method": "HEAD"})),
        ("web_fetch", json!({"url": search_url})),
        ("duckduckgo_search", json!({"query": "example"})),
        ("checkpoint_list", json!({})),
    ];
    let mut structured_tools = Vec::new();
    for (name, args) in &calls {
        let out = session
            .call(name, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} {args}: {e}"));
        let spec = tools.tool(name).unwrap().spec();
        match (&out.structured, spec.structured_output_schema()) {
            (Some(data), Some(schema)) => {
                let validator = jsonschema::validator_for(schema)
                    .unwrap_or_else(|e| panic!("{name}: the output schema is invalid: {e}"));
                let errors: Vec<String> = validator
                    .iter_errors(data)
                    .map(|e| format!("{}: {e}", e.instance_path()))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{name} {args}: {data} breaks its schema: {errors:?}"
                );
                structured_tools.push(*name);
            }
            (None, None) => {
                assert_eq!(spec.output_schema["type"], "string", "{name}");
            }
            (data, schema) => panic!("{name}: structured {data:?} but output schema {schema:?}"),
        }
    }
    // The checkpoint taken before the first write: what changed since, and a dry run
    // of bringing it back.
    let list = session.call("checkpoint_list", json!({})).await.unwrap();
    let id = list.structured.unwrap()["checkpoints"][0]["id"].clone();
    let mut called_too = Vec::new();
    for (name, args) in [
        ("checkpoint_diff", json!({"id": id})),
        ("checkpoint_restore", json!({"id": id, "dry_run": true})),
    ] {
        let out = session
            .call(name, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} {args}: {e}"));
        let spec = tools.tool(name).unwrap().spec();
        let schema = spec.structured_output_schema().unwrap();
        let data = out.structured.unwrap();
        let validator = jsonschema::validator_for(schema).unwrap();
        assert!(
            validator.is_valid(&data),
            "{name}: {data} breaks its schema"
        );
        structured_tools.push(name);
        called_too.push(name);
    }
    structured_tools.dedup();
    assert_eq!(
        structured_tools,
        [
            "read_file",
            "write_file",
            "list_dir",
            "notebook_edit",
            "glob_search",
            "grep_search",
            "file_info",
            "str_replace",
            "edit_file",
            "apply_patch",
            "bash",
            "bash_output",
            "bash_jobs",
            "bash_kill",
            "expose_port",
            "http_request",
            "web_fetch",
            "duckduckgo_search",
            "checkpoint_list",
            "checkpoint_diff",
            "checkpoint_restore",
        ]
    );
    // Every tool of the provider was called.
    let mut called: Vec<&str> = calls.iter().map(|(n, _)| *n).collect();
    called.extend(called_too);
    called.sort_unstable();
    called.dedup();
    let mut all = tools.names();
    all.sort_unstable();
    assert_eq!(called, all);
}
