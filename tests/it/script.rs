//! `run_script` in a real session: nested calls through the policy, the audit log and
//! the sandbox's rules, each of its limits, and `parallel` calls that really overlap.

use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use jianmu_runtime::{Session, SessionSettings};
use jianmu_tool_core::{Policy, ToolConfig, ToolError};
use serde_json::{Value, json};

fn session(dir: &std::path::Path, config: impl FnOnce(ToolConfig) -> ToolConfig) -> Session {
    Session::open(SessionSettings::new(config(ToolConfig::new(dir)))).unwrap()
}

async fn script(session: &Session, code: &str) -> Result<String, ToolError> {
    session
        .call("run_script", json!({ "code": code }))
        .await
        .map(|o| o.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_nested_calls_a_denied_tool_caught_and_audit_lines_with_their_parent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let mut settings = SessionSettings::new(ToolConfig::new(dir.path()));
    settings.policy = Policy {
        deny: vec!["bash".into()],
        ..Policy::default()
    };
    settings.audit_log = Some(log.clone());
    let session = Session::open(settings).unwrap();
    let code = r#"
        let sum = 0;
        for i in 0..49 { sum += parse_int(calculator(`${i} + 1`)); }
        let file = read_file("a.txt");
        let text = file.text;
        text.trim();
        print(text);
        let refused = "";
        try { bash(#{command: "touch planted"}); } catch (e) { refused = e; }
        print("refused: " + refused);
        sum
    "#;
    let answer = session
        .execute(
            "run_script",
            json!({ "code": code }),
            jianmu_tool_core::ExecuteOptions::default().call_id("turn-1"),
        )
        .await
        .unwrap()
        .text;
    assert!(answer.starts_with("alpha\nrefused: "), "{answer}");
    assert!(answer.contains("denied"), "{answer}");
    assert!(answer.contains("value: 1225"), "{answer}");
    assert!(answer.contains("calls: 51 (50 ok, 1 failed"), "{answer}");
    assert!(answer.contains("calculator ok ×49"), "{answer}");
    assert!(!dir.path().join("planted").exists());
    session.close().await;

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 52, "{lines:?}");
    let nested: Vec<&Value> = lines
        .iter()
        .filter(|l| l["parent_call_id"] == "turn-1")
        .collect();
    assert_eq!(nested.len(), 51);
    assert_eq!(nested[0]["call_id"], "turn-1.1");
    assert_eq!(nested[0]["tool"], "calculator");
    let bash = nested.iter().find(|l| l["tool"] == "bash").unwrap();
    assert_eq!(bash["outcome"], "error");
    let top = lines.last().unwrap();
    assert_eq!(top["tool"], "run_script");
    assert_eq!(top["call_id"], "turn-1");
    assert_eq!(top["parent_call_id"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_stops_the_script_and_says_which_keeping_what_was_done() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "x".repeat(3000)).unwrap();
    let s = session(dir.path(), |c| {
        c.with_setting("run_script", "max_calls", json!(5))
            .with_setting("run_script", "max_call_output", json!(10_000))
            .with_setting("run_script", "timeout_secs", json!(1.0))
            .with_setting("run_script", "max_operations", json!(100_000))
    });

    // Calls: five were made, the sixth stopped it; a catch cannot hide it.
    let e = script(
        &s,
        r#"for i in 0..10 { try { write_file(#{path: `f${i}`, content: "1"}); } catch {} }"#,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("limit of 5 tool calls"), "{e}");
    assert!(e.contains("calls: 5 (5 ok"), "{e}");
    assert!(dir.path().join("f4").exists() && !dir.path().join("f5").exists());

    // Output: 3000 characters a call, 10,000 in all.
    let e = script(&s, r#"for i in 0..5 { read_file(#{path: "big.txt"}); }"#)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 10000 characters"), "{e}");
    assert!(e.contains("calls: 4 (4 ok"), "{e}");

    // Values nested far past what a thread's stack survives: no crash, and a tool is
    // never handed one.
    let s2 = session(dir.path(), |c| {
        c.with_setting("run_script", "timeout_secs", json!(600.0))
    });
    let answer = script(
        &s2,
        r#"let m = #{}; for i in 0..2500 { m = #{a: m}; }
           let e = ""; try { calculator(m) } catch (err) { e = err } print(e); m"#,
    )
    .await
    .unwrap();
    assert!(
        answer.starts_with(
            "calculator: the arguments are not JSON: they nest more than 64 levels deep
value: (a value nested more than 64 levels deep)
calls: none"
        ),
        "{answer}"
    );
    s2.close().await;

    // Operations: an endless loop.
    let e = script(&s, "let n = 0; loop { n += 1; }")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("too many operations"), "{e}");

    // Time, inside a tool call: the call is stopped with the script.
    let marker = format!("jm-script-sleep-{}", std::process::id());
    let e = script(
        &s,
        &format!(r#"print("before"); bash(#{{command: "exec -a {marker} sleep 30"}})"#),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("before\n"), "{e}");
    assert!(e.contains("time limit of 1 s"), "{e}");
    for _ in 0..100 {
        if jianmu_test_support::running_with(&marker).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(jianmu_test_support::running_with(&marker).is_empty());
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_cannot_run_a_script_and_outside_a_session_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path(), |c| c);
    // Not even a function of the script.
    let e = script(&s, r#"run_script(#{code: "1"})"#)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("Function not found: run_script"), "{e}");
    let answer = script(
        &s,
        r#"let r = ""; try { call_tool("run_script", #{code: "1"}) } catch (e) { r = e } r"#,
    )
    .await
    .unwrap();
    assert!(
        answer.contains("cannot be called from a script"),
        "{answer}"
    );
    s.close().await;

    let provider = jianmu_provider::BuiltinToolProvider::new(ToolConfig::new(dir.path()));
    let set = jianmu_tool_core::ToolSet::lazy(provider).unwrap();
    let e = set
        .execute("run_script", json!({"code": "1"}), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("only run inside a session"), "{e}");
}

/// A server whose answer says whether another request was in flight at the same
/// time: each waits (up to 5 s) for a second one before it answers.
fn meeting_point() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let met = Arc::new((Mutex::new(0usize), Condvar::new()));
    let count = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let met = Arc::clone(&met);
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let (lock, cvar) = &*met;
                let mut here = lock.lock().unwrap();
                *here += 1;
                cvar.notify_all();
                let (here, _) = cvar
                    .wait_timeout_while(here, Duration::from_secs(5), |n| *n < 2)
                    .unwrap();
                let body = if *here >= 2 { "together" } else { "alone" };
                drop(here);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_overlap_and_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let (port, seen) = meeting_point();
    let s = session(dir.path(), |c| c.with_allow_hosts(["127.0.0.1".to_owned()]));
    let code = format!(
        r#"let r = parallel([
            ["http_request", #{{url: "http://127.0.0.1:{port}/a"}}],
            ["http_request", #{{url: "http://127.0.0.1:{port}/b"}}],
            ["read_file", #{{path: "missing.txt"}}],
        ]);
        [r[0].text.contains("together"), r[1].text.contains("together"), r[2].error]"#
    );
    let answer = script(&s, &code).await.unwrap();
    assert!(
        answer.contains(r#"value: [true,true,"`missing.txt` does not exist"]"#),
        "{answer}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    // The log keeps the script's order.
    let log = answer.split("calls: 3").nth(1).unwrap();
    assert!(
        log.find("http_request").unwrap() < log.find("read_file").unwrap(),
        "{answer}"
    );
    s.close().await;
}

#[test]
fn the_description_lists_the_tools_and_its_example_uses_real_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let provider = jianmu_provider::BuiltinToolProvider::new(ToolConfig::new(dir.path()));
    let spec = provider.spec("run_script").unwrap();
    let example = spec
        .description
        .lines()
        .find(|l| l.starts_with("Example:"))
        .unwrap();
    let mut checked = 0;
    for (at, _) in example.match_indices("(#{") {
        let name_start = example[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let tool = provider.spec(&example[name_start..at]).unwrap();
        let fields = &example[at + 3..at + example[at..].find('}').unwrap()];
        for field in fields.split(',') {
            let key = field.split(':').next().unwrap().trim();
            assert!(
                tool.input_schema["properties"].get(key).is_some(),
                "{} has no argument {key}",
                tool.name
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "{example}");
    let functions = spec
        .description
        .lines()
        .find(|l| l.starts_with("Functions:"))
        .unwrap();
    // Its effects are its own and those of every tool it can call.
    for tag in [
        "code:exec",
        "tools:call",
        "filesystem:write",
        "process:exec",
        "network",
    ] {
        assert!(spec.effect_tags.iter().any(|t| t == tag), "{tag}");
    }
    for name in jianmu_provider::available_tools() {
        let listed = functions.contains(&format!(" {name}("));
        assert_eq!(listed, name != "run_script", "{name} in {functions}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_sharing_one_string_is_counted_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path(), |c| c);
    // 400 entries sharing one 1 MiB string: 1 MiB held, 400 MiB written out.
    let build =
        r#"let s = "x"; s.pad(1048576, "x"); let m = #{}; for k in 0..400 { m["k" + k] = s; }"#;
    let answer = script(&s, &format!("{build} m")).await.unwrap();
    assert!(
        answer.contains("a value over 16 MiB written out"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    let e = script(&s, &format!(r#"{build} call_tool("read_file", m)"#))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("over 16 MiB written out"),
        "{}",
        &e[..e.len().min(300)]
    );
    s.close().await;
}
