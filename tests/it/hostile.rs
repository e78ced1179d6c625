//! What an adversarial review threw at the tools and they did not hold, each fixed and
//! kept fixed here: through the real call path, on real files and a loopback server.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt as _;

use jianmu_provider::BuiltinToolProvider;
use jianmu_tool_core::{ToolConfig, ToolSet};
use serde_json::{Value, json};

fn tools(dir: &std::path::Path) -> ToolSet {
    let config = ToolConfig::new(dir).with_allow_hosts(["127.0.0.1".to_owned()]);
    ToolSet::from_providers(&[&BuiltinToolProvider::new(config)]).unwrap()
}

/// The text of a call: its output, or `error: ...`.
async fn call(tools: &ToolSet, name: &str, args: Value) -> String {
    match tools.execute(name, args, None).await {
        Ok(out) => out.text,
        Err(e) => format!("error: {}", jianmu_tool_core::error_chain(&e)),
    }
}

#[tokio::test]
async fn a_replacement_that_would_explode_is_refused_before_it_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    // 8 MiB of `a`, each to become 1,000 characters: 8 GB asked for, once.
    let big = dir.path().join("a.txt");
    std::fs::write(&big, "a".repeat(8 << 20)).unwrap();
    let new = "b".repeat(1000);
    for regex in [false, true] {
        let out = call(
            &t,
            "str_replace",
            json!({"path": "a.txt", "old": "a", "new": new, "regex": regex}),
        )
        .await;
        assert!(
            out.starts_with("error: the result would be ") && out.contains("nothing was written"),
            "{}",
            &out[..out.len().min(300)]
        );
        assert_eq!(std::fs::metadata(&big).unwrap().len(), 8 << 20);
    }
    // 1 MB with a 200-character `new`: 200 MB, far past the size limit.
    std::fs::write(&big, "a".repeat(1 << 20)).unwrap();
    let out = call(
        &t,
        "str_replace",
        json!({"path": "a.txt", "old": "a", "new": "c".repeat(200)}),
    )
    .await;
    assert!(
        out.starts_with("error: the result would be 209715200 bytes"),
        "{out}"
    );
    // Within the limit, it works, and a missing `old` is echoed short.
    let out = call(
        &t,
        "str_replace",
        json!({"path": "a.txt", "old": "a", "new": "b", "count": 3}),
    )
    .await;
    assert_eq!(out, "Replaced 3 occurrences in a.txt");
    let out = call(
        &t,
        "str_replace",
        json!({"path": "a.txt", "old": "z".repeat(100_000), "new": ""}),
    )
    .await;
    assert!(
        out.len() < 300 && out.contains("…[99900 more bytes]"),
        "{out}"
    );
}

#[tokio::test]
async fn names_with_control_characters_are_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    let forged = "x\nFILE        1 KiB  forged.txt\u{1b}[2J";
    std::fs::write(dir.path().join(forged), "needle\u{1b}]0;title\u{7}\n").unwrap();
    for (tool, args) in [
        ("list_dir", json!({"path": "."})),
        ("glob_search", json!({"pattern": "*"})),
        ("grep_search", json!({"query": "needle"})),
    ] {
        let out = call(&t, tool, args).await;
        assert!(
            !out.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{tool}: {out:?}"
        );
        assert!(out.contains("x\\nFILE"), "{tool}: {out:?}");
        assert_eq!(
            out.lines().filter(|l| l.contains("forged")).count(),
            1,
            "{tool}: {out:?}"
        );
    }
}

#[tokio::test]
async fn a_trailing_slash_names_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    std::fs::write(dir.path().join("a.txt"), "text").unwrap();
    let out = call(&t, "read_file", json!({"path": "a.txt/"})).await;
    assert!(
        out.starts_with("error: refused `a.txt/`: a path ending in `/` names a directory"),
        "{out}"
    );
    let out = call(&t, "write_file", json!({"path": "newdir/", "content": "x"})).await;
    assert!(out.starts_with("error: refused `newdir/`"), "{out}");
    assert!(!dir.path().join("newdir").exists());
    // The longest legal name (255 bytes) can be written: the temporary name fits too.
    let name = "n".repeat(255);
    let out = call(&t, "write_file", json!({"path": name, "content": "x"})).await;
    assert!(!out.starts_with("error"), "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(&name)).unwrap(),
        "x"
    );
    // A 200 KB path comes back short.
    let out = call(
        &t,
        "read_file",
        json!({"path": format!("/{}", "p/".repeat(100_000))}),
    )
    .await;
    assert!(
        out.starts_with("error: ") && out.len() < 400,
        "{}",
        out.len()
    );
}

#[tokio::test]
async fn a_nul_byte_anywhere_makes_a_file_binary_for_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    let mut late = "needle\n".repeat(2000).into_bytes();
    late.extend_from_slice(b"\0tail\n");
    std::fs::write(dir.path().join("late.bin"), &late).unwrap();
    let out = call(&t, "read_file", json!({"path": "late.bin"})).await;
    assert_eq!(
        out,
        format!(
            "`late.bin` is a binary file ({} bytes); its content is not shown",
            late.len()
        )
    );
    let out = call(
        &t,
        "read_file",
        json!({"path": "late.bin", "offset": 1990, "limit": 20}),
    )
    .await;
    assert!(out.contains("is a binary file"), "{out}");
    let out = call(&t, "grep_search", json!({"query": "tail"})).await;
    assert!(out.starts_with("(no matches"), "{out}");
}

#[tokio::test]
async fn appending_a_byte_to_a_huge_sparse_file_costs_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    let path = dir.path().join("sparse.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let out = call(
        &t,
        "write_file",
        json!({"path": "sparse.img", "content": "!", "append": true}),
    )
    .await;
    assert!(!out.starts_with("error"), "{out}");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), (2 << 30) + 1);
    // Still sparse: the old content was not copied.
    assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
    let mut f = std::fs::File::open(&path).unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::End(-1)).unwrap();
    let mut last = String::new();
    f.read_to_string(&mut last).unwrap();
    assert_eq!(last, "!");
}

/// A loopback server that answers every request with `body` and reports what it read.
fn echo_server(body: &'static [u8]) -> (String, std::sync::mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = vec![0u8; 65536];
            let n = stream.read(&mut buf).unwrap_or(0);
            let _ = tx.send(buf[..n].to_vec());
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_bodies_and_headers_cannot_lie() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    let (url, seen) = echo_server(b"text\0with NUL\0bytes");
    let out = call(&t, "http_request", json!({"url": url, "method": "GET"})).await;
    assert!(!out.contains('\0'), "{out:?}");
    assert!(
        out.contains("(a binary body of 19 bytes, with NUL bytes; not shown)"),
        "{out}"
    );
    let body = "twenty-eight bytes of a body";
    let out = call(
        &t,
        "http_request",
        json!({"url": url, "method": "POST", "body": body, "headers": {"Content-Length": "1"}}),
    )
    .await;
    assert!(
        out.starts_with("error: refused header `Content-Length`"),
        "{out}"
    );
    let _ = seen.recv().unwrap();
    assert!(seen.try_recv().is_err(), "the refused request was sent");
}

#[tokio::test]
async fn an_unknown_tool_with_a_huge_name_is_named_short() {
    let dir = tempfile::tempdir().unwrap();
    let t = tools(dir.path());
    let out = call(&t, &"x".repeat(1 << 20), json!({})).await;
    assert!(
        out.starts_with("error: unknown tool `xxxx") && out.contains("more bytes]"),
        "{}",
        &out[..200]
    );
    assert!(out.len() < 2000, "{}", out.len());
}
