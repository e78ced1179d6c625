//! http_request against real local hyper servers on 127.0.0.1:0; never the outside
//! network.

mod fetch;
mod server;

use std::sync::Arc;

use jianmu_net::{Lookup, NetSettings, build_client, system_lookup};
use jianmu_tool_core::ToolHandle;
use jianmu_tool_http::{HttpRequest, HttpSettings};
use serde_json::json;

fn tool(allow: &[&str], lookup: Lookup) -> ToolHandle {
    let settings = HttpSettings {
        net: NetSettings {
            allow_hosts: allow.iter().map(|s| (*s).to_owned()).collect(),
            ..NetSettings::default()
        },
        max_body_bytes: 1024 * 1024,
        max_response_length: 2000,
        ..HttpSettings::default()
    };
    let client = build_client(&settings.net, lookup).unwrap();
    ToolHandle::new(HttpRequest::new(client, settings)).unwrap()
}

use jianmu_test_support::call;

#[tokio::test]
async fn methods_bodies_and_formatting() {
    let srv = server::start().await;
    let t = tool(&["127.0.0.1"], system_lookup());
    assert_eq!(
        call(&t, json!({"url": srv.url("/json")})).await,
        "HTTP 200 OK\ncontent-type: application/json\ncontent-length: 18\n\n{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}"
    );
    assert_eq!(
        call(&t, json!({"url": srv.url("/echo"), "method": "PATCH", "headers": {"x-test": "yes"}, "body": {"k": "v"}})).await,
        "HTTP 200 OK\ncontent-type: text/plain\ncontent-length: 43\n\nPATCH x-test=yes application/json {\"k\":\"v\"}"
    );
    assert_eq!(
        call(&t, json!({"url": srv.url("/json"), "method": "HEAD"})).await,
        "HTTP 200 OK\ncontent-type: application/json\ncontent-length: 18\n"
    );
    let long = call(&t, json!({"url": srv.url("/long")})).await;
    assert!(
        long.ends_with("\n... (response truncated: 8000 more characters)"),
        "{}",
        &long[long.len() - 80..]
    );
    assert_eq!(
        call(&t, json!({"url": srv.url("/missing")})).await,
        "HTTP 404 Not Found\ncontent-length: 9\n\nnot found"
    );
}

#[tokio::test]
async fn retries_only_where_safe() {
    let srv = server::start().await;
    let t = tool(&["127.0.0.1"], system_lookup());
    // Two 503s, then 200: GET retries through them.
    assert_eq!(
        call(&t, json!({"url": srv.url("/flaky")})).await,
        "HTTP 200 OK\ncontent-length: 2\n\nok"
    );
    assert_eq!(srv.hits("/flaky"), 3);
    // 429 with Retry-After: 1 is honoured once, then 200.
    let start = std::time::Instant::now();
    assert_eq!(
        call(&t, json!({"url": srv.url("/limited")})).await,
        "HTTP 200 OK\ncontent-length: 2\n\nok"
    );
    assert!(start.elapsed() >= std::time::Duration::from_millis(900));
    // POST is not retried unless asked.
    assert_eq!(
        call(
            &t,
            json!({"url": srv.url("/down"), "method": "POST", "body": {}})
        )
        .await,
        "HTTP 503 Service Unavailable\ncontent-length: 4\n\ndown"
    );
    assert_eq!(srv.hits("/down"), 1);
    call(&t, json!({"url": srv.url("/down"), "method": "POST", "retries": 2, "retry_non_idempotent": true})).await;
    assert_eq!(srv.hits("/down"), 4);
    // Connection refused: retried, then a clear error.
    let closed = server::closed_port();
    let err = call(
        &t,
        json!({"url": format!("http://127.0.0.1:{closed}/"), "retries": 1}),
    )
    .await;
    assert!(
        err.starts_with("error: request failed after 2 attempts within 30 s: "),
        "{err}"
    );
}

#[tokio::test]
async fn bounded_in_time_and_size() {
    let srv = server::start().await;
    let t = tool(&["127.0.0.1"], system_lookup());
    let start = std::time::Instant::now();
    let err = call(
        &t,
        json!({"url": srv.url("/slow"), "timeout": 0.5, "retries": 0}),
    )
    .await;
    assert!(
        err.starts_with("error: request failed after 1 attempt within 0.5 s: "),
        "{err}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let big = call(&t, json!({"url": srv.url("/endless")})).await;
    assert!(
        big.ends_with("\n... (body cut: only the first 1048576 bytes were read)"),
        "{}",
        &big[big.len() - 100..]
    );
    let bomb = call(&t, json!({"url": srv.url("/bomb")})).await;
    assert!(
        bomb.ends_with("\n... (body cut: only the first 1048576 bytes were read)"),
        "{}",
        &bomb[bomb.len() - 100..]
    );
    assert_eq!(
        call(&t, json!({"url": srv.url("/loop")})).await,
        "error: request failed: stopped after 5 redirects"
    );
    assert_eq!(
        call(
            &t,
            json!({"url": srv.url("/json"), "headers": {"x-evil": "a\r\nInjected: 1"}})
        )
        .await,
        "error: refused header `x-evil`: CR and LF are not allowed in header names or values"
    );
}

#[tokio::test]
async fn the_ssrf_guard_refuses_and_names_the_rule() {
    let srv = server::start().await;
    let open = tool(&[], system_lookup());
    let port = srv.port;
    for (url, expect) in [
        (format!("http://127.0.0.1:{port}/json"), format!("error: refused `http://127.0.0.1:{port}/json`: 127.0.0.1 is a loopback address; allow it with --allow-host 127.0.0.1")),
        (format!("http://2130706433:{port}/"), format!("error: refused `http://127.0.0.1:{port}/`: 127.0.0.1 is a loopback address; allow it with --allow-host 127.0.0.1")),
        ("http://169.254.169.254/latest/meta-data/".to_owned(), "error: refused `http://169.254.169.254/latest/meta-data/`: 169.254.169.254 is a link-local address (cloud metadata lives at 169.254.169.254); allow it with --allow-host 169.254.169.254".to_owned()),
        ("http://[::ffff:10.0.0.1]/".to_owned(), "error: refused `http://[::ffff:a00:1]/`: ::ffff:10.0.0.1 is an IPv4-mapped form of a refused IPv4 address; allow it with --allow-host ::ffff:10.0.0.1".to_owned()),
        ("gopher://example.com/".to_owned(), "error: refused `gopher://example.com/`: only http and https URLs are allowed".to_owned()),
        ("http://u:p@example.com/".to_owned(), "error: refused the URL: it carries credentials (user:password@); send them as a header instead".to_owned()),
        ("not a url".to_owned(), "error: invalid URL `not a url`: relative URL without a base".to_owned()),
    ] {
        assert_eq!(call(&open, json!({"url": url})).await, expect);
    }
    assert_eq!(srv.total_hits(), 0, "a refused request reached the server");

    // Names are resolved by the guard; every address is checked, and a name that
    // resolves to a private address is refused before any connection.
    let fake: Lookup = Arc::new(|host: String| {
        Box::pin(async move {
            Ok(match host.as_str() {
                "mixed.test" => vec!["8.8.8.8".parse().unwrap(), "10.0.0.7".parse().unwrap()],
                _ => vec!["127.0.0.1".parse().unwrap()],
            })
        })
    });
    let guarded = tool(&[], fake.clone());
    assert_eq!(
        call(&guarded, json!({"url": "http://mixed.test/"})).await,
        "error: request failed: refused host `mixed.test`: it resolves to 10.0.0.7, a private (10.0.0.0/8) address; allow it with --allow-host mixed.test"
    );
    assert_eq!(
        call(
            &guarded,
            json!({"url": format!("http://rebind.test:{port}/json")})
        )
        .await,
        "error: request failed: refused host `rebind.test`: it resolves to 127.0.0.1, a loopback address; allow it with --allow-host rebind.test"
    );
    // Allow-listed, the client connects to the address the guard resolved.
    let allowed = tool(&["rebind.test"], fake);
    let out = call(
        &allowed,
        json!({"url": format!("http://rebind.test:{port}/json")}),
    )
    .await;
    assert!(out.starts_with("HTTP 200 OK"), "{out}");
    // A redirect to a private address is checked again, and refused.
    let t = tool(&["127.0.0.1"], system_lookup());
    assert_eq!(
        call(&t, json!({"url": srv.url("/to-private")})).await,
        "error: request failed: redirect refused `http://10.0.0.1/`: 10.0.0.1 is a private (10.0.0.0/8) address; allow it with --allow-host 10.0.0.1"
    );
}
