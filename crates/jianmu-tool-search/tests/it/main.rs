//! duckduckgo_search against a local hyper server serving pages shaped like the real
//! endpoint's; never the outside network.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use jianmu_net::{NetSettings, build_client, system_lookup};
use jianmu_tool_core::ToolHandle;
use jianmu_tool_search::{DuckDuckGoSearch, Hit, Page, SearchSettings, parse};
use serde_json::json;

const RESULTS: &str = include_str!("fixtures/results.html");
const NO_RESULTS: &str = include_str!("fixtures/noresults.html");
const RATE_LIMIT: &str = include_str!("fixtures/ratelimit.html");
const CHANGED: &str = include_str!("fixtures/changed.html");

type Seen = Arc<Mutex<Vec<String>>>;

/// Serves a fixture per path; records each request's path and query.
async fn serve() -> (u16, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let counts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            let counts = counts.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let path = req.uri().path().to_owned();
                    log.lock().unwrap().push(format!(
                        "{}?{}",
                        path,
                        req.uri().query().unwrap_or("")
                    ));
                    let n = {
                        let mut c = counts.lock().unwrap();
                        let e = c.entry(path.clone()).or_insert(0);
                        *e += 1;
                        *e
                    };
                    let (status, body): (u16, String) = match path.as_str() {
                        "/results/" => (200, RESULTS.into()),
                        "/none/" => (200, NO_RESULTS.into()),
                        "/limited/" => (202, RATE_LIMIT.into()),
                        "/limited-once/" if n == 1 => (202, RATE_LIMIT.into()),
                        "/limited-once/" => (200, RESULTS.into()),
                        "/changed/" => (200, CHANGED.into()),
                        "/huge/" => (200, RESULTS.repeat(20_000)),
                        _ => (404, "nope".into()),
                    };
                    async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header("content-type", "text/html")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, seen)
}

fn tool(port: u16, path: &str) -> ToolHandle {
    let settings = SearchSettings {
        net: NetSettings {
            allow_hosts: vec!["127.0.0.1".into()],
            ..NetSettings::default()
        },
        endpoint: format!("http://127.0.0.1:{port}{path}"),
        retries: 1,
        ..SearchSettings::default()
    };
    let client = build_client(&settings.net, system_lookup()).unwrap();
    ToolHandle::new(DuckDuckGoSearch::new(client, settings)).unwrap()
}

use jianmu_test_support::call;

#[tokio::test]
async fn results_are_parsed_decoded_and_formatted_like_the_python_tool() {
    let (port, seen) = serve().await;
    let t = tool(port, "/results/");
    let out = call(&t, json!({"query": "rust async", "max_results": 5, "region": "us-en", "safesearch": "off", "timelimit": "w"})).await;
    assert_eq!(
        out,
        "[1] Asynchronous Programming in Rust\nURL: https://rust-lang.github.io/async-book/\nSnippet: Getting started with async/.await in Rust & more. Futures, tasks and executors.\n\n\
         [2] Tutorial | Tokio\nURL: https://tokio.rs/tokio/tutorial\nSnippet: Tokio is an asynchronous runtime.\n\n\
         [3] Third\nURL: https://example.com/q?a=1&b=2\nSnippet: \n"
    );
    assert_eq!(
        seen.lock().unwrap()[0],
        "/results/?q=rust+async&kl=us-en&kp=-2&df=w"
    );
    let two = call(&t, json!({"query": "rust", "max_results": 2})).await;
    assert_eq!(two.matches("URL: ").count(), 2);
}

#[tokio::test]
async fn no_results_rate_limits_and_layout_changes_are_told_apart() {
    let (port, seen) = serve().await;
    assert_eq!(
        call(&tool(port, "/none/"), json!({"query": "zzzq"})).await,
        "No results for `zzzq`."
    );
    assert_eq!(
        call(&tool(port, "/limited/"), json!({"query": "x"})).await,
        "error: search failed after 2 attempts: DuckDuckGo is rate-limiting these searches (HTTP 202, a challenge page); wait a minute before searching again"
    );
    // A rate limit that passes is retried through.
    let out = call(
        &tool(port, "/limited-once/"),
        json!({"query": "x", "max_results": 1}),
    )
    .await;
    assert!(
        out.starts_with("[1] Asynchronous Programming in Rust"),
        "{out}"
    );
    assert_eq!(
        call(&tool(port, "/changed/"), json!({"query": "x"})).await,
        "error: the results page has an unknown layout (DuckDuckGo may have changed it); no results could be read"
    );
    let huge = call(
        &tool(port, "/huge/"),
        json!({"query": "x", "max_results": 30}),
    )
    .await;
    assert_eq!(huge.matches("URL: ").count(), 30);
    assert_eq!(
        seen.lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with("/limited/"))
            .count(),
        2
    );
    // The endpoint is guarded like any other URL.
    let settings = SearchSettings {
        endpoint: format!("http://127.0.0.1:{port}/results/"),
        ..SearchSettings::default()
    };
    let client = build_client(&settings.net, system_lookup()).unwrap();
    let unguarded = ToolHandle::new(DuckDuckGoSearch::new(client, settings)).unwrap();
    let err = call(&unguarded, json!({"query": "x"})).await;
    assert!(
        err.starts_with("error: refused `http://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn the_parser_never_panics_on_broken_pages() {
    let page = RESULTS;
    for end in (0..page.len()).filter(|i| page.is_char_boundary(*i)) {
        let _ = parse(&page[..end], 10);
        let _ = parse(&page[end..], 10);
    }
    for junk in [
        "",
        "<",
        "<div class=\"result\">",
        "<a class=result__a href=//duckduckgo.com/l/?uddg=%ZZ>",
        "\u{0}\u{fffd}<<>>",
    ] {
        let _ = parse(junk, 10);
    }
    assert_eq!(parse(CHANGED, 10), Page::Unrecognised);
    assert_eq!(parse(NO_RESULTS, 10), Page::NoResults);
    assert_eq!(parse(RATE_LIMIT, 10), Page::RateLimited);
    let Page::Results(hits) = parse(RESULTS, 1) else {
        panic!("results expected")
    };
    assert_eq!(
        hits,
        [Hit {
            title: "Asynchronous Programming in Rust".into(),
            url: "https://rust-lang.github.io/async-book/".into(),
            snippet:
                "Getting started with async/.await in Rust & more. Futures, tasks and executors."
                    .into(),
        }]
    );
}
