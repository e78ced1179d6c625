//! Schema export: a snapshot per format of every built-in tool, and proof that each
//! exported schema still accepts what the tool accepts.

use expect_test::{ExpectFile, expect_file};
use jianmu_provider::BuiltinToolProvider;
use jianmu_tool_core::{SchemaFormat, ToolConfig, ToolProvider, ToolSet};
use serde_json::{Value, json};

fn tools() -> ToolSet {
    let dir = tempfile::tempdir().unwrap();
    let provider = BuiltinToolProvider::new(ToolConfig::new(dir.path()));
    ToolSet::from_providers(&[&provider as &dyn ToolProvider]).unwrap()
}

fn snapshot(format: SchemaFormat, expect: ExpectFile) {
    let text = serde_json::to_string_pretty(&tools().export(format)).unwrap();
    expect.assert_eq(&(text + "\n"));
}

#[test]
fn snapshots() {
    snapshot(SchemaFormat::OpenAi, expect_file!["snapshots/openai.json"]);
    snapshot(
        SchemaFormat::OpenAiStrict,
        expect_file!["snapshots/openai-strict.json"],
    );
    snapshot(
        SchemaFormat::Anthropic,
        expect_file!["snapshots/anthropic.json"],
    );
    snapshot(SchemaFormat::Gemini, expect_file!["snapshots/gemini.json"]);
    snapshot(SchemaFormat::Mcp, expect_file!["snapshots/mcp.json"]);
}

/// Arguments each built-in tool accepts, in object form, with and without the
/// optional parts.
fn samples(tool: &str) -> Vec<Value> {
    match tool {
        "calculator" => vec![json!({"input": "2**10"})],
        "read_file" => vec![
            json!({"path": "a.txt"}),
            json!({"path": "a.txt", "offset": 3, "limit": 10}),
        ],
        "write_file" => vec![
            json!({"path": "a.txt", "content": "x"}),
            json!({"path": "a.txt", "content": "x", "append": true, "create_dirs": false}),
        ],
        "list_dir" => vec![json!({}), json!({"path": "src"})],
        "file_info" => vec![json!({"path": "a.txt"})],
        "glob_search" => vec![
            json!({"pattern": "*.rs"}),
            json!({"pattern": "*.rs", "path": "src", "include_hidden": true, "limit": 5}),
        ],
        "grep_search" => vec![
            json!({"query": "x"}),
            json!({"query": "x", "path": ".", "regex": true, "case_sensitive": false, "glob": "*.rs", "include_hidden": true, "limit": 3}),
        ],
        "edit_file" => vec![
            json!({"path": "a.txt", "edits": [{"old": "a", "new": "b"}]}),
            json!({"path": "a.txt", "edits": [{"old": "a", "new": "b", "replace_all": true, "expected_count": 2}], "dry_run": true}),
        ],
        "apply_patch" => {
            vec![json!({"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"})]
        }
        "str_replace" => vec![
            json!({"path": "a.txt", "old": "a", "new": "b"}),
            json!({"path": "a.txt", "old": "a", "new": "b", "regex": true, "count": 1, "expected_count": 1}),
        ],
        "run_script" => vec![json!({"code": "1 + 1"})],
        "rhai_repl" => vec![
            json!({"code": "1 + 1"}),
            json!({"code": "1", "reset": true}),
        ],
        "python_repl" => vec![
            json!({"code": "1 + 1"}),
            json!({"code": "1", "timeout": 5, "reset": true}),
        ],
        "http_request" => vec![
            json!({"url": "https://example.com/"}),
            json!({"url": "https://example.com/", "method": "POST", "headers": {"a": "b"}, "body": {"k": [1]}, "retries": 1, "retry_non_idempotent": true, "timeout": 5}),
        ],
        "notebook_edit" => vec![
            json!({"path": "a.ipynb", "cell_id": "c1", "new_source": "x = 1"}),
            json!({"path": "a.ipynb", "new_source": "# Notes", "cell_type": "markdown", "edit_mode": "insert"}),
            json!({"path": "a.ipynb", "cell_id": "2", "edit_mode": "delete"}),
        ],
        "web_fetch" => vec![
            json!({"url": "https://example.com/"}),
            json!({"url": "https://example.com/", "max_length": 5000, "start_index": 5000, "raw": true}),
        ],
        "duckduckgo_search" => vec![
            json!({"query": "rust"}),
            json!({"query": "rust", "max_results": 3, "region": "us-en", "safesearch": "off", "timelimit": "w"}),
        ],
        "bash" => vec![
            json!({"command": "ls"}),
            json!({"cmd": "ls", "timeout": 2, "session": "s1", "reset": true}),
            json!({"command": "make watch", "background": true, "yield_ms": 500}),
        ],
        "bash_output" => vec![
            json!({"job": 1}),
            json!({"job": 1, "wait_ms": 1000, "input": "y\n"}),
        ],
        "bash_kill" => vec![json!({"job": 1})],
        "bash_jobs" => vec![json!({})],
        "expose_port" => vec![json!({"port": 8000}), json!({"port": 8000, "close": true})],
        "diagnostics" => vec![json!({"paths": ["a.py"]})],
        "definition" | "hover" => vec![
            json!({"path": "a.py", "line": 3}),
            json!({"path": "a.py", "line": 3, "column": 5, "symbol": "f", "language": "python"}),
            json!({"symbol": "f"}),
        ],
        "references" => vec![
            json!({"path": "a.py", "symbol": "f"}),
            json!({"path": "a.py", "line": 1, "column": 5, "include_declaration": false}),
        ],
        "symbols" => vec![
            json!({"path": "a.py"}),
            json!({"query": "f", "language": "python"}),
        ],
        "git_status" => vec![json!({}), json!({"paths": ["src"]})],
        "git_diff" => vec![
            json!({}),
            json!({"staged": true, "from": "HEAD~1", "paths": ["a.txt"], "context": 5, "stat": true, "offset": 10, "limit": 20}),
            json!({"from": "v1", "to": "v2"}),
        ],
        "git_log" => vec![
            json!({}),
            json!({"max_count": 5, "skip": 5, "revision": "main..HEAD", "paths": ["src"], "stat": true}),
        ],
        "git_show" => vec![
            json!({}),
            json!({"revision": "HEAD~1:a.txt", "paths": ["a.txt"], "stat": true, "offset": 1, "limit": 5}),
        ],
        "git_blame" => vec![
            json!({"path": "a.txt"}),
            json!({"path": "a.txt", "start_line": 1, "end_line": 9, "revision": "HEAD"}),
        ],
        "git_add" => vec![json!({"paths": ["a.txt"]}), json!({"all": true})],
        "git_commit" => vec![
            json!({"message": "m"}),
            json!({"message": "m", "all": true}),
        ],
        "git_branch" => vec![json!({}), json!({"create": "b", "start_point": "HEAD"})],
        "git_checkout" => vec![
            json!({"target": "main"}),
            json!({"target": "HEAD", "paths": ["a.txt"]}),
        ],
        "checkpoint_list" => vec![json!({})],
        "checkpoint_diff" => vec![
            json!({"id": "abcd"}),
            json!({"id": "abcd", "to": "ef01", "path": "src"}),
        ],
        "checkpoint_restore" => vec![
            json!({"id": "abcd"}),
            json!({"id": "abcd", "dry_run": true}),
        ],
        other => panic!("add samples for `{other}`"),
    }
}

fn valid(schema: &Value, args: &Value) -> bool {
    jsonschema::validator_for(schema).unwrap().is_valid(args)
}

#[test]
fn every_exported_schema_accepts_what_the_tool_accepts() {
    let set = tools();
    assert!(set.len() >= 8, "the full build has every tool");
    for tool in set.iter() {
        let spec = tool.spec();
        for args in samples(&spec.name) {
            // The tool itself accepts the sample.
            tool.prepare_args(args.clone(), None, true)
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let openai = &spec.export(SchemaFormat::OpenAi)["function"]["parameters"];
            let anthropic = &spec.export(SchemaFormat::Anthropic)["input_schema"];
            let gemini = &spec.export(SchemaFormat::Gemini)["parameters"];
            let mcp = &spec.export(SchemaFormat::Mcp)["inputSchema"];
            for (format, schema) in [
                ("openai", openai),
                ("anthropic", anthropic),
                ("gemini", gemini),
                ("mcp", mcp),
            ] {
                assert!(
                    valid(schema, &args),
                    "{format} schema of {} refuses {args}",
                    spec.name
                );
            }
            // Strict mode: the model sends every key, null for what it leaves out; the
            // strict schema takes that, and so does the tool.
            let strict = spec.export(SchemaFormat::OpenAiStrict);
            if strict["function"]["strict"] == json!(true) {
                let schema = &strict["function"]["parameters"];
                let mut full = args.clone();
                fill_nulls(schema, &mut full);
                assert!(
                    valid(schema, &full),
                    "strict schema of {} refuses {full}",
                    spec.name
                );
                tool.prepare_args(full.clone(), None, true)
                    .unwrap_or_else(|e| panic!("{} refuses strict-mode {full}: {e}", spec.name));
            }
        }
    }
}

#[test]
fn formats_parse_by_name() {
    for (name, format) in SchemaFormat::ALL {
        assert_eq!(name.parse::<SchemaFormat>().unwrap(), format);
        assert_eq!(format.to_string(), name);
    }
    assert!(
        "yaml"
            .parse::<SchemaFormat>()
            .unwrap_err()
            .contains("openai-strict")
    );
}

/// What a model in strict mode sends: every property of every object the schema
/// describes, `null` for those it leaves out, nested objects included.
fn fill_nulls(schema: &Value, value: &mut Value) {
    let variants: Vec<&Value> = match schema.get("anyOf").and_then(Value::as_array) {
        Some(any) => any.iter().collect(),
        None => vec![schema],
    };
    for schema in variants {
        match value {
            Value::Object(map) => {
                if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                    for (key, sub) in props {
                        let entry = map.entry(key.clone()).or_insert(Value::Null);
                        fill_nulls(sub, entry);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(sub) = schema.get("items") {
                    for item in items {
                        fill_nulls(sub, item);
                    }
                }
            }
            _ => {}
        }
    }
}
