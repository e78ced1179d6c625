//! The language-server tools against a real `pylsp` (python-lsp-server from PyPI, in
//! a venv the tests make), and against scripted servers that hang, ask questions, or
//! send what no server should.

use std::path::Path;
use std::time::Duration;

use jianmu_test_support::{call, pylsp, running_with};
use jianmu_tool_core::{ToolConfig, ToolHandle};
use serde_json::{Value, json};

use super::*;

fn python_settings() -> Value {
    json!({"servers": {"python": {"command": [pylsp().to_string_lossy()], "extensions": ["py"]}}})
}

fn tools(dir: &Path, settings: Value) -> (ToolConfig, impl Fn(&str) -> ToolHandle) {
    let config = ToolConfig::new(dir).with_settings(SETTINGS, settings);
    let c = config.clone();
    (config, move |name: &str| {
        let registration = jianmu_tool_core::registrations()
            .find(|r| r.name == name)
            .expect("registered");
        (registration.build)(&c).expect("builds")
    })
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("greeting.py"),
        "def greet(name: str) -> str:\n    \"\"\"Says hello to `name`.\"\"\"\n    return 'hello ' + name\n\n\nclass Greeter:\n    def wave(self):\n        return greet('you')\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("main.py"),
        "from greeting import greet\n\nprint(greet('world'))\nprint(greet('again'))\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("broken.py"),
        "import os\n\nprint(undefined_name)\n",
    )
    .unwrap();
    // A name that URIs escape: servers may spell the escapes differently.
    std::fs::write(dir.path().join("a b é%.py"), "print(missing)\n").unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pylsp_answers_diagnostics_navigation_hover_and_outline() {
    let dir = project();
    let (_config, tool) = tools(dir.path(), python_settings());
    let diagnostics = tool("diagnostics");
    let out = call(&diagnostics, json!({"paths": ["broken.py", "main.py"]})).await;
    assert!(
        out.contains("broken.py:3:7: error: undefined name 'undefined_name' [pyflakes]"),
        "{out}"
    );
    assert!(
        out.contains("broken.py:1:1: warning: 'os' imported but unused [pyflakes]"),
        "{out}"
    );
    assert!(out.contains("main.py: no problems"), "{out}");
    let odd = call(&diagnostics, json!({"paths": ["a b é%.py"]})).await;
    assert_eq!(
        odd,
        "a b é%.py:1:7: error: undefined name 'missing' [pyflakes]"
    );
    // Warm: the file is unchanged, the server's diagnostics are already here.
    assert_eq!(
        call(&diagnostics, json!({"paths": ["broken.py", "main.py"]})).await,
        out
    );
    // Changed on disk: read again.
    std::fs::write(dir.path().join("main.py"), "print(greet)\n").unwrap();
    let again = call(&diagnostics, json!({"paths": ["main.py"]})).await;
    assert!(
        again.contains("main.py:1:7: error: undefined name 'greet'"),
        "{again}"
    );
    std::fs::write(
        dir.path().join("main.py"),
        "from greeting import greet\n\nprint(greet('world'))\nprint(greet('again'))\n",
    )
    .unwrap();

    // Across two files, by symbol and by position.
    let def = call(
        &tool("definition"),
        json!({"path": "main.py", "symbol": "greet", "line": 3}),
    )
    .await;
    assert_eq!(def, "greeting.py:1:5: def greet(name: str) -> str:\n");
    let by_position = call(
        &tool("definition"),
        json!({"path": "main.py", "line": 4, "column": 8}),
    )
    .await;
    assert_eq!(by_position, def);
    let refs = call(
        &tool("references"),
        json!({"path": "greeting.py", "symbol": "greet"}),
    )
    .await;
    for place in [
        "greeting.py:1:5:",
        "greeting.py:8:16:",
        "main.py:1:22:",
        "main.py:3:7:",
        "main.py:4:7:",
    ] {
        assert!(refs.contains(place), "{place} in {refs}");
    }
    let hover = call(
        &tool("hover"),
        json!({"path": "main.py", "symbol": "greet", "line": 3}),
    )
    .await;
    assert!(
        hover.contains("greet(name: str) -> str") && hover.contains("Says hello"),
        "{hover}"
    );
    let outline = call(&tool("symbols"), json!({"path": "greeting.py"})).await;
    assert!(outline.contains("function greet  (line 1)"), "{outline}");
    assert!(outline.contains("class Greeter  (line 6)"), "{outline}");
    assert!(outline.contains("wave  (line 7)"), "{outline}");

    // What the model gets wrong is said plainly.
    let past = call(&tool("definition"), json!({"path": "main.py", "line": 99})).await;
    assert!(
        past.starts_with("error: ") && past.contains("past its end"),
        "{past}"
    );
    let missing = call(
        &tool("definition"),
        json!({"path": "main.py", "symbol": "nowhere"}),
    )
    .await;
    assert!(
        missing.contains("does not occur as a whole word"),
        "{missing}"
    );
    let outside = call(&diagnostics, json!({"paths": ["../x.py"]})).await;
    assert!(outside.contains("outside"), "{outside}");
    let unknown = call(&diagnostics, json!({"paths": ["notes.txt"]})).await;
    assert!(
        unknown.contains("no language server is configured for `notes.txt`"),
        "{unknown}"
    );
}

#[tokio::test]
async fn a_missing_server_names_the_command_to_install() {
    let dir = project();
    let (_config, tool) = tools(
        dir.path(),
        json!({"servers": {"python": {"command": ["no-such-pylsp-here"], "extensions": ["py"], "install": "install it with `pip install python-lsp-server`"}}}),
    );
    let out = call(&tool("diagnostics"), json!({"paths": ["main.py"]})).await;
    assert!(
        out.contains("no language server for python here: `no-such-pylsp-here` is not installed (not on PATH); install it with `pip install python-lsp-server`"),
        "{out}"
    );
}

/// A server written in Python for the test: `behaviour` runs after the helpers
/// `send` and `read` are defined. Its command line ends with `marker`, which tells its
/// process apart.
fn scripted(dir: &Path, behaviour: &str, marker: &str) -> Value {
    let script = format!(
        r#"
import json, sys, time
out = sys.stdout.buffer
def send(msg):
    body = json.dumps(msg).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    out.flush()
def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        line = line.strip()
        if not line:
            break
        k, v = line.split(b":", 1)
        if k.lower() == b"content-length":
            length = int(v)
    return json.loads(sys.stdin.buffer.read(length))
{behaviour}
"#
    );
    let path = dir.join("server.py");
    std::fs::write(&path, script).unwrap();
    json!({"request_timeout_secs": 1.5, "diagnostics_wait_secs": 3, "servers": {"fake": {"command": ["python3", path.to_string_lossy(), marker], "extensions": ["fake"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_hits_the_time_limit_and_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.fake"), "x\n").unwrap();
    let settings = scripted(dir.path(), "read()\ntime.sleep(3600)\n", "hang-marker-1");
    let (_config, tool) = tools(dir.path(), settings);
    let diagnostics = tool("diagnostics");
    let call_now = call(&diagnostics, json!({"paths": ["a.fake"]}));
    let watch = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while running_with("hang-marker-1").is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the server never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (out, ()) = tokio::join!(call_now, watch);
    assert!(
        out.contains("did not answer `initialize` within 1.5 s"),
        "{out}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !running_with("hang-marker-1").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hung server is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_request_is_answered_and_oversized_messages_end_the_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.fake"), "x\n").unwrap();
    let log = dir.path().join("replies.json");
    let behaviour = format!(
        r#"
init = read()
send({{"jsonrpc": "2.0", "id": 900, "method": "workspace/configuration", "params": {{"items": [{{}}, {{}}]}}}})
send({{"jsonrpc": "2.0", "id": 901, "method": "client/registerCapability", "params": {{}}}})
send({{"jsonrpc": "2.0", "id": 902, "method": "made/up", "params": {{}}}})
send({{"jsonrpc": "2.0", "id": 903, "method": "workspace/applyEdit", "params": {{}}}})
send({{"jsonrpc": "2.0", "id": init["id"], "result": {{"capabilities": {{}}}}}})
replies = {{}}
while True:
    msg = read()
    if "id" in msg and "method" not in msg:
        replies[msg["id"]] = msg
        if len(replies) == 4:
            open({log:?}, "w").write(json.dumps(replies))
    if msg.get("method") == "textDocument/didOpen":
        uri = msg["params"]["textDocument"]["uri"]
        send({{"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {{"uri": uri, "version": 1, "diagnostics": [{{"range": {{"start": {{"line": 0, "character": 0}}, "end": {{"line": 0, "character": 1}}}}, "severity": 1, "message": "scripted\nproblem", "source": "fake"}}]}}}})
    if msg.get("method") == "textDocument/hover":
        out.write(b"Content-Length: 999999999999\r\n\r\n")
        out.flush()
        time.sleep(3600)
"#,
        log = log.to_string_lossy()
    );
    let settings = scripted(dir.path(), &behaviour, "hostile-marker-2");
    let (_config, tool) = tools(dir.path(), settings);
    let out = call(&tool("diagnostics"), json!({"paths": ["a.fake"]})).await;
    assert_eq!(out, "a.fake:1:1: error: scripted problem [fake]");
    let replies: Value = serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(replies["900"]["result"], json!([null, null]));
    assert_eq!(replies["901"]["result"], Value::Null);
    assert_eq!(replies["902"]["error"]["code"], -32601);
    assert_eq!(replies["903"]["result"]["applied"], false);
    // A message too big to read ends the server, and the caller hears so at once.
    let hover = call(&tool("hover"), json!({"path": "a.fake", "line": 1})).await;
    assert!(
        hover.contains("exited before answering `textDocument/hover`"),
        "{hover}"
    );
    // The next call replaces it.
    assert_eq!(running_with("hostile-marker-2").len(), 1);
    let again = call(&tool("diagnostics"), json!({"paths": ["a.fake"]})).await;
    assert_eq!(again, "a.fake:1:1: error: scripted problem [fake]");
    assert_eq!(running_with("hostile-marker-2").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_is_stopped_and_the_next_call_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.fake"), "x\n").unwrap();
    let behaviour = r#"
init = read()
send({"jsonrpc": "2.0", "id": init["id"], "result": {"capabilities": {}}})
while True:
    msg = read()
    if msg.get("method") == "textDocument/didOpen":
        uri = msg["params"]["textDocument"]["uri"]
        send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"uri": uri, "diagnostics": []}})
    if msg.get("method") == "shutdown":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
    if msg.get("method") == "exit":
        sys.exit(0)
"#;
    let mut settings = scripted(dir.path(), behaviour, "idle-marker-3");
    settings["idle_secs"] = json!(2);
    let (_config, tool) = tools(dir.path(), settings);
    let diagnostics = tool("diagnostics");
    assert_eq!(
        call(&diagnostics, json!({"paths": ["a.fake"]})).await,
        "a.fake: no problems"
    );
    assert_eq!(running_with("idle-marker-3").len(), 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !running_with("idle-marker-3").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle server is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        call(&diagnostics, json!({"paths": ["a.fake"]})).await,
        "a.fake: no problems"
    );
    assert_eq!(running_with("idle-marker-3").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_a_hundred_documents_stay_open_on_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.log");
    for i in 0..120 {
        std::fs::write(dir.path().join(format!("f{i:03}.fake")), format!("{i}\n")).unwrap();
    }
    let behaviour = format!(
        r#"
init = read()
send({{"jsonrpc": "2.0", "id": init["id"], "result": {{"capabilities": {{}}}}}})
events = open({log:?}, "a")
while True:
    msg = read()
    method = msg.get("method", "")
    if method in ("textDocument/didOpen", "textDocument/didClose"):
        uri = msg["params"]["textDocument"]["uri"]
        events.write(method.split("/")[1] + " " + uri.rsplit("/", 1)[1] + "\n")
        events.flush()
        if method == "textDocument/didOpen":
            send({{"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {{"uri": uri, "version": 1, "diagnostics": []}}}})
"#,
        log = log.to_string_lossy()
    );
    let settings = scripted(dir.path(), &behaviour, "docs-marker-4");
    let (_config, tool) = tools(dir.path(), settings);
    let diagnostics = tool("diagnostics");
    for batch in 0..6 {
        let paths: Vec<String> = (batch * 20..batch * 20 + 20)
            .map(|i| format!("f{i:03}.fake"))
            .collect();
        let out = call(&diagnostics, json!({ "paths": paths })).await;
        assert_eq!(
            out.lines().filter(|l| l.ends_with(": no problems")).count(),
            20,
            "{out}"
        );
    }
    // The first 20 were closed to make room for the last 20, oldest first.
    let events = std::fs::read_to_string(&log).unwrap();
    let closed: Vec<&str> = events
        .lines()
        .filter(|l| l.starts_with("didClose"))
        .collect();
    let expected: Vec<String> = (0..20).map(|i| format!("didClose f{i:03}.fake")).collect();
    assert_eq!(closed, expected);
    assert_eq!(
        events.lines().filter(|l| l.starts_with("didOpen")).count(),
        120
    );
    // A closed file opens again when it is asked for.
    let again = call(&diagnostics, json!({"paths": ["f000.fake"]})).await;
    assert_eq!(again, "f000.fake: no problems");
    let events = std::fs::read_to_string(&log).unwrap();
    assert_eq!(events.lines().last(), Some("didOpen f000.fake"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_server_requests_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.fake"), "x\n").unwrap();
    // 3,000 requests before the server reads anything: its input fills with our
    // answers while its output fills with its requests, unless both are read as
    // they come.
    let behaviour = r#"
init = read()
send({"jsonrpc": "2.0", "id": init["id"], "result": {"capabilities": {"hoverProvider": True}}})
for k in range(3000):
    send({"jsonrpc": "2.0", "id": 10000 + k, "method": "workspace/configuration", "params": {"items": [{}]}})
answered = 0
while True:
    msg = read()
    if "id" in msg and "method" not in msg:
        answered += 1
    if msg.get("method") == "textDocument/hover":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"contents": "answered %d" % answered}})
"#;
    let settings = scripted(dir.path(), behaviour, "flood-marker-5");
    let (_config, tool) = tools(dir.path(), settings);
    let hover = tool("hover");
    let mut last = String::new();
    for _ in 0..50 {
        last = tokio::time::timeout(
            Duration::from_secs(60),
            call(&hover, json!({"path": "a.fake", "line": 1})),
        )
        .await
        .expect("a hover is answered, not stuck behind the server's requests");
        if last.contains("answered 3000") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.contains("answered 3000"), "{last}");
}
