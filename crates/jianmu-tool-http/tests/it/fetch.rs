//! web_fetch against a local server: real pages to Markdown, paging, the cache,
//! redirects, robots.txt and hostile bodies.

use jianmu_net::{NetSettings, build_client, system_lookup};
use jianmu_test_support::call;
use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_http::{FetchSettings, WebFetch};
use serde_json::{Value, json};

use crate::server;

fn fetcher(tweak: impl FnOnce(&mut FetchSettings)) -> ToolHandle {
    let mut settings = FetchSettings {
        net: NetSettings {
            allow_hosts: vec!["127.0.0.1".into(), "localhost".into()],
            same_host_redirects: true,
            ..NetSettings::default()
        },
        max_body_bytes: 1024 * 1024,
        ..FetchSettings::default()
    };
    tweak(&mut settings);
    let client = build_client(&settings.net, system_lookup()).unwrap();
    ToolHandle::new(WebFetch::new(client, settings)).unwrap()
}

async fn structured(tool: &ToolHandle, args: Value) -> (String, Value) {
    let out = tool.execute(args, ExecuteOptions::default()).await.unwrap();
    (out.text, out.structured.unwrap_or_default())
}

#[tokio::test]
async fn an_article_becomes_markdown_and_is_read_in_parts_from_one_fetch() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let whole = call(&t, json!({"url": srv.url("/article")})).await;
    assert!(whole.starts_with("# Understanding Ownership\n"), "{whole}");
    assert!(whole.contains("## The stack and the heap"), "{whole}");
    assert!(whole.contains("let s = String::from(\"hello\");"));
    let link = format!("[references and borrowing]({})", srv.url("/ch04-02"));
    assert!(whole.contains(&link), "{whole}");
    assert!(whole.contains("Paragraph number 199"));
    for left_out in ["track()", "Site footer text", "Blog"] {
        assert!(!whole.contains(left_out), "{left_out}: {whole}");
    }

    // Part by part, the parts put together are the whole, from one fetch.
    let (first, data) =
        structured(&t, json!({"url": srv.url("/article"), "max_length": 3000})).await;
    let total = data["total_length"].as_u64().unwrap() as usize;
    assert_eq!(total, whole.chars().count());
    assert!(
        first.ends_with("call web_fetch with start_index=3000 to read on]"),
        "{first}"
    );
    let mut joined = String::new();
    let mut start = 0;
    loop {
        let (_, data) = structured(
            &t,
            json!({"url": srv.url("/article"), "max_length": 3000, "start_index": start}),
        )
        .await;
        let text = call(
            &t,
            json!({"url": srv.url("/article"), "max_length": 3000, "start_index": start}),
        )
        .await;
        let body = text.split_once("]\n\n").map_or(text.as_str(), |(_, b)| b);
        let body = body.split("\n\n[").next().unwrap_or(body);
        joined.push_str(body);
        match data["next_index"].as_u64() {
            Some(n) => start = n as usize,
            None => break,
        }
    }
    assert_eq!(joined.trim_end(), whole.trim_end());
    assert_eq!(
        srv.hits("/article"),
        1,
        "every part came from the page kept"
    );
    assert_eq!(srv.hits("/robots.txt"), 1);

    // Raw is the body as it came.
    let raw = call(
        &t,
        json!({"url": srv.url("/article"), "raw": true, "max_length": 200000}),
    )
    .await;
    assert_eq!(raw, server::article());
}

#[tokio::test]
async fn a_real_documentation_page_reads_as_its_text() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let (text, data) = structured(
        &t,
        json!({"url": srv.url("/python-os"), "max_length": 200000}),
    )
    .await;
    assert_eq!(
        data["title"],
        "os — Miscellaneous operating system interfaces"
    );
    assert!(
        text.contains("os.getcwd()") || text.contains("getcwd"),
        "{}",
        &text[..2000]
    );
    assert!(text.contains("Return a string representing the current working directory."));
    // The 750 KB page is a fraction of its size as Markdown, without its sidebar.
    let source = std::fs::read(server::PYTHON_OS_PAGE).unwrap();
    let total = data["total_length"].as_u64().unwrap() as usize;
    assert!(total < source.len() / 2, "{total} of {}", source.len());
    assert!(
        !text.contains("Navigation") || !text.contains("Quick search"),
        "{}",
        &text[..3000]
    );
}

#[tokio::test]
async fn charsets_pdfs_and_binaries() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let latin = call(&t, json!({"url": srv.url("/latin1")})).await;
    assert!(latin.contains("crème brûlée"), "{latin}");
    let pdf = call(&t, json!({"url": srv.url("/pdf")})).await;
    assert!(
        pdf.starts_with("(a PDF document of 13 bytes: the PDF could not be read ("),
        "{pdf}"
    );
    // A real PDF comes back as the text of its pages, paged like any long content.
    let (manual, data) = structured(&t, json!({"url": srv.url("/manual")})).await;
    let url = srv.url("/manual");
    assert!(
        manual.contains(&format!(
            "{url} is a PDF of 36 pages; pages 1-36 follow.\n\n--- page 1 ---\nLibtasn1\n"
        )),
        "{manual}"
    );
    assert_eq!(data["content_type"], "");
    let next = data["next_index"].as_u64().unwrap();
    let (more, _) = structured(
        &t,
        json!({"url": url, "start_index": next, "max_length": 200_000}),
    )
    .await;
    assert!(
        more.contains("--- page 36 ---"),
        "{}",
        &more[more.len().saturating_sub(500)..]
    );
    // A page the parser crashes on is named; the pages around it are read.
    let looped = call(&t, json!({"url": srv.url("/form-loop.pdf")})).await;
    assert!(
        looped.contains("--- page 2 (could not be read: the PDF is damaged here) ---"),
        "{looped}"
    );
    assert!(looped.contains("--- page 3 ---\nthird page"), "{looped}");
    let png = call(&t, json!({"url": srv.url("/png")})).await;
    assert_eq!(png, "(binary content, image/png, 10 bytes: not shown)");
    // UTF-16 is text: by its byte-order mark, its label, or its bytes.
    for (path, text) in [
        ("/utf16", "héllo, 世界"),
        ("/utf16-labelled", "plain text"),
        ("/utf16-bare", "no mark, no label"),
    ] {
        let got = call(&t, json!({"url": srv.url(path)})).await;
        assert!(
            got.contains(text) && !got.contains('\u{fffd}'),
            "{path}: {got}"
        );
    }
    let missing = call(&t, json!({"url": srv.url("/nothing-here")})).await;
    assert!(
        missing.starts_with("error: ") && missing.ends_with("answered HTTP 404 Not Found"),
        "{missing}"
    );
}

#[tokio::test]
async fn redirects_to_another_host_are_handed_back() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let (same, data) = structured(&t, json!({"url": srv.url("/moved"), "max_length": 100})).await;
    assert_eq!(data["url"], srv.url("/article"), "{same}");
    let (other, data) = structured(&t, json!({"url": srv.url("/elsewhere")})).await;
    let to = format!("http://localhost:{}/article", srv.port);
    assert_eq!(data["redirect"], to);
    assert_eq!(
        other,
        format!(
            "{} redirected to another host: {to}\nCall web_fetch with that URL to read it.\n",
            srv.url("/elsewhere")
        )
    );
    assert_eq!(srv.hits("/article"), 1, "the other host was not fetched");
    let looped = call(&t, json!({"url": srv.url("/loop")})).await;
    assert!(looped.contains("stopped after 5 redirects"), "{looped}");
}

#[tokio::test]
async fn robots_txt_is_honoured_unless_turned_off() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let refused = call(&t, json!({"url": srv.url("/private/article")})).await;
    assert!(
        refused.contains("robots.txt") && refused.contains("does not allow"),
        "{refused}"
    );
    assert_eq!(srv.hits("/private/article"), 0);
    let off = fetcher(|s| s.respect_robots = false);
    let read = call(&off, json!({"url": srv.url("/private/article")})).await;
    assert!(read.starts_with("# Understanding Ownership"), "{read}");
}

#[tokio::test]
async fn hostile_bodies_are_bounded() {
    let srv = server::start().await;
    let t = fetcher(|_| {});
    let deep = call(&t, json!({"url": srv.url("/deep")})).await;
    assert!(
        deep.contains("deep text"),
        "{}",
        &deep[..deep.len().min(300)]
    );
    let bomb = call(&t, json!({"url": srv.url("/html-bomb")})).await;
    assert!(
        bomb.starts_with("(the page is over 1048576 bytes; only that much was read)\n"),
        "{}",
        bomb.chars().take(300).collect::<String>()
    );
    let refused = call(
        &fetcher(|s| s.net.allow_hosts.clear()),
        json!({"url": srv.url("/article")}),
    )
    .await;
    assert!(refused.contains("loopback address"), "{refused}");
}

/// A server on its own thread answering each path with `(status, headers, body)`.
fn tiny_server(answer: fn(&str, u16) -> (u16, String, String)) -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 2048];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request);
            let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let (status, headers, body) = answer(&path, port);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test]
async fn robots_txt_found_through_a_redirect_to_another_host_applies() {
    let rules = tiny_server(|path, _| match path {
        "/robots.txt" => (
            200,
            String::new(),
            "User-agent: *\nDisallow: /private\n".into(),
        ),
        _ => (404, String::new(), String::new()),
    });
    static RULES: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    RULES.set(rules).unwrap();
    let site = tiny_server(|path, _| match path {
        "/robots.txt" => (
            301,
            format!(
                "Location: http://localhost:{}/robots.txt\r\n",
                RULES.get().unwrap()
            ),
            String::new(),
        ),
        _ => (
            200,
            "Content-Type: text/plain\r\n".into(),
            "the page".into(),
        ),
    });
    let t = fetcher(|_| {});
    let refused = call(
        &t,
        json!({"url": format!("http://127.0.0.1:{site}/private")}),
    )
    .await;
    assert!(refused.contains("does not allow"), "{refused}");
    let open = call(
        &t,
        json!({"url": format!("http://127.0.0.1:{site}/public")}),
    )
    .await;
    assert!(open.contains("the page"), "{open}");
}
