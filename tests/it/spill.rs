//! Outputs too long to answer whole are saved where the file tools read them, and the
//! answer says where: bash, background jobs, http_request, python_repl, rhai_repl,
//! run_script and grep_search, through a session; the folder goes with the session.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;

use jianmu_runtime::{Session, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

/// The saved file an answer names, read back through `read_file` of the same session.
async fn saved(session: &Session, answer: &str) -> String {
    let at = answer
        .find(".jianmu/outputs/")
        .unwrap_or_else(|| panic!("no saved file named in: {answer}"));
    let path: String = answer[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ':' && *c != ')')
        .collect();
    let out = session
        .call("read_file", json!({"path": path, "line_numbers": false}))
        .await
        .unwrap();
    out.text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_outputs_are_saved_whole_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (0..20_000).map(|i| format!("row {i}\n")).collect();
    let api = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/big", api.local_addr().unwrap());
    let served = body.clone();
    std::thread::spawn(move || {
        for stream in api.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                served.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(served.as_bytes());
        }
    });
    let config = ToolConfig::new(dir.path())
        .with_allow_hosts(["127.0.0.1".to_owned()])
        .with_settings("read_file", json!({"max_file_size": 16 * 1024 * 1024}));
    let session = Session::open(SessionSettings::new(config)).unwrap();
    let seq: String = (1..=100_000).map(|i| format!("{i}\n")).collect();

    let out = session
        .call("bash", json!({"command": "seq 1 100000"}))
        .await
        .unwrap();
    assert!(out.text.len() < 40_000, "{}", out.text.len());
    assert!(out.text.starts_with("1\n2\n3\n"), "{}", &out.text[..100]);
    assert!(
        out.text.contains("bytes cut from the middle"),
        "{}",
        out.text
    );
    assert!(out.text.contains("read it with read_file"), "{}", out.text);
    assert_eq!(saved(&session, &out.text).await, seq);

    let job = session
        .call(
            "bash",
            json!({"command": "sleep 0.5; seq 1 100000", "background": true, "yield_ms": 0}),
        )
        .await
        .unwrap();
    let id = job.structured.as_ref().unwrap()["job"].as_u64().unwrap();
    assert_eq!(job.structured.as_ref().unwrap()["output"], "");
    let read = session
        .call("bash_output", json!({"job": id, "wait_ms": 20000}))
        .await
        .unwrap();
    assert!(
        read.text.contains("bytes cut from the middle"),
        "{}",
        read.text
    );
    assert_eq!(saved(&session, &read.text).await, seq);

    let http = session
        .call("http_request", json!({"url": url}))
        .await
        .unwrap();
    assert!(
        http.text.contains("characters cut from the middle"),
        "{}",
        http.text
    );
    assert!(
        http.text.trim_end().ends_with("row 19999"),
        "{}",
        &http.text[http.text.len() - 200..]
    );
    assert_eq!(saved(&session, &http.text).await, body);

    // The script tools print 1..100000; run_script's answer ends with a summary line.
    let rhai = "for i in 1..=100000 { print(i) }";
    for (tool, code) in [
        (
            "python_repl",
            "print('\\n'.join(str(i) for i in range(1, 100001)))",
        ),
        ("rhai_repl", rhai),
        ("run_script", rhai),
    ] {
        let out = session.call(tool, json!({"code": code})).await.unwrap();
        assert!(
            out.text.contains("characters cut from the middle"),
            "{tool}: {}",
            out.text
        );
        let whole = saved(&session, &out.text).await;
        assert!(
            whole.starts_with(&seq) && whole.len() < seq.len() + 200,
            "{tool}"
        );
    }

    // grep_search: past `limit`, or past one answer's characters, every matching line
    // is saved, in the listing's own order and form.
    let lines = |name: &str, n: usize| -> String {
        (1..=n)
            .map(|i| format!("src/{name}:{i}:needle {i}\n"))
            .collect()
    };
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    for (name, n) in [("b.txt", 500), ("a.txt", 1500)] {
        let text: String = (1..=n).map(|i| format!("needle {i}\n")).collect();
        std::fs::write(dir.path().join("src").join(name), text).unwrap();
    }
    let all = lines("a.txt", 1500) + lines("b.txt", 500).as_str();
    let few = session
        .call("grep_search", json!({"query": "needle", "limit": 3}))
        .await
        .unwrap();
    assert!(
        few.text.starts_with("src/a.txt:1:needle 1\nsrc/a.txt:2:needle 2\nsrc/a.txt:3:needle 3\n(1997 more matches not shown: 2000 in all; the whole output is saved in .jianmu/outputs/"),
        "{}",
        few.text
    );
    assert_eq!(saved(&session, &few.text).await, all);
    let many = session
        .call("grep_search", json!({"query": "needle", "limit": 10000}))
        .await
        .unwrap();
    assert!(many.text.len() < 32_000, "{}", many.text.len());
    assert!(
        many.text.contains("characters cut from the middle"),
        "{}",
        many.text
    );
    // Cut between lines: every line shown is whole.
    for line in many.text.lines() {
        let whole = line.starts_with("src/") && line.contains(":needle ");
        assert!(
            whole || line.starts_with("... (") || line.starts_with('('),
            "{line:?}"
        );
    }
    assert!(
        many.text.ends_with("src/b.txt:500:needle 500\n"),
        "{}",
        &many.text[many.text.len() - 100..]
    );
    assert_eq!(saved(&session, &many.text).await, all);

    let folder = dir.path().join(".jianmu/outputs");
    let kept: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().unwrap().is_dir())
        .collect();
    assert_eq!(kept.len(), 1, "one folder for the session");
    session.close().await;
    assert!(
        !kept[0].path().exists(),
        "the session's saved outputs go with it"
    );
}
