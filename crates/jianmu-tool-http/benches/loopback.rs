//! Sequential loopback GETs of a small body through `http_request`, against a local
//! hyper server; then, against the same server, Python aiohttp doing the Python tool's request
//! (when `JIANMU_BENCH_PYTHON` names a python with aiohttp; `cargo xtask bench` sets it).
//!
//! `web_fetch` of a 1.4 MB documentation page (Debian's Python 3.11 `os` page with the
//! main text of its `stdtypes` page added to its body) end to end, against the MCP
//! reference fetch server's way on the same page from the same server: `readabilipy`
//! then `markdownify`.

use std::convert::Infallible;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::Full;
use hyper::Response;
use hyper_util::rt::TokioIo;
use jianmu_net::{NetSettings, build_client, reqwest, system_lookup};
use jianmu_tool_http::{FetchArgs, FetchSettings, HttpArgs, HttpRequest, HttpSettings, WebFetch};

/// The MCP reference fetch server's conversion, timed on `url` (the best of `n` runs).
const READABILIPY: &str = r#"
import sys, time, urllib.request, warnings
import markdownify, readabilipy.simple_json
warnings.simplefilter("ignore")

def fetch(url):
    html = urllib.request.urlopen(url).read().decode("utf-8", "replace")
    ret = readabilipy.simple_json.simple_json_from_html_string(html, use_readability=False)
    return markdownify.markdownify(ret["content"], heading_style=markdownify.ATX)

url, n = sys.argv[1], int(sys.argv[2])
assert "getcwd" in fetch(url)
best = min(
    (lambda s: (fetch(url), time.perf_counter() - s)[1])(time.perf_counter()) for _ in range(n)
)
print(best)
"#;

/// The bench page: the `os` page with the main text of `stdtypes` added to its body.
fn big_page() -> Option<Bytes> {
    let dir = std::path::Path::new("/usr/share/doc/python3.11/html/library");
    let os = std::fs::read_to_string(dir.join("os.html")).ok()?;
    let types = std::fs::read_to_string(dir.join("stdtypes.html")).ok()?;
    let marker = "<div class=\"body\" role=\"main\">";
    let body = |page: &str| page.find(marker).map(|at| at + marker.len());
    let from = body(&types)?;
    let until = types[from..]
        .find("<div class=\"sphinxsidebar\"")
        .map_or(types.len(), |e| from + e);
    let at = body(&os)?;
    Some(Bytes::from(format!(
        "{}{}{}",
        &os[..at],
        &types[from..until],
        &os[at..]
    )))
}

const SEED_CLIENT: &str = r#"
import asyncio, sys, time, aiohttp

async def seed_request(url):
    # The Python tools' HTTPTool: a session per call, JSON parsed when the type says so.
    async with aiohttp.ClientSession() as session:
        async with session.request("GET", url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            if "application/json" in resp.headers.get("Content-Type", ""):
                return await resp.json()
            return await resp.text()

async def shared_session(url, n):
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        for _ in range(n):
            async with session.get(url) as resp:
                await resp.json()
        return (time.perf_counter() - start) / n

async def main(url, n):
    for _ in range(200):
        await seed_request(url)
    start = time.perf_counter()
    for _ in range(n):
        await seed_request(url)
    per_call = (time.perf_counter() - start) / n
    print(per_call, await shared_session(url, n))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"#;

fn serve(rt: &tokio::runtime::Runtime, page: Bytes) -> u16 {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let page = page.clone();
                        async move {
                            Ok::<_, Infallible>(if req.uri().path() == "/page" {
                                Response::builder()
                                    .header("content-type", "text/html; charset=utf-8")
                                    .body(Full::new(page))
                                    .unwrap()
                            } else {
                                Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from_static(
                                        br#"{"ok": true, "n": 42}"#,
                                    )))
                                    .unwrap()
                            })
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

fn bench(c: &mut Criterion) {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let page = big_page();
    let port = serve(&server_rt, page.clone().unwrap_or_default());
    let url = format!("http://127.0.0.1:{port}/small");
    let settings = HttpSettings {
        net: NetSettings {
            allow_hosts: vec!["127.0.0.1".into()],
            ..NetSettings::default()
        },
        ..HttpSettings::default()
    };
    let tool = HttpRequest::new(
        build_client(&settings.net, system_lookup()).unwrap(),
        settings,
    );
    let args: HttpArgs = serde_json::from_value(serde_json::json!({"url": url})).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(
        rt.block_on(tool.request(&args))
            .unwrap()
            .text
            .starts_with("HTTP 200 OK")
    );
    let mut group = c.benchmark_group("http");
    group.bench_function("loopback_get_small", |b| {
        b.to_async(&rt)
            .iter(|| async { tool.request(&args).await.unwrap() })
    });
    // The client alone, for scale: what the tool adds is guard checks and rendering.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    group.bench_function("reqwest_alone", |b| {
        b.to_async(&rt).iter(|| async {
            let resp = plain.get(&url).send().await.unwrap();
            resp.bytes().await.unwrap()
        })
    });
    group.finish();

    if page.is_some() {
        let page_url = format!("http://127.0.0.1:{port}/page");
        let settings = FetchSettings {
            net: NetSettings {
                allow_hosts: vec!["127.0.0.1".into()],
                same_host_redirects: true,
                ..NetSettings::default()
            },
            // Every iteration fetches and converts: nothing kept, no robots.txt.
            cache_secs: 0,
            respect_robots: false,
            ..FetchSettings::default()
        };
        let fetcher = WebFetch::new(
            build_client(&settings.net, system_lookup()).unwrap(),
            settings,
        );
        let args: FetchArgs = serde_json::from_value(serde_json::json!({"url": page_url})).unwrap();
        let first = rt.block_on(fetcher.fetch(&args)).unwrap().text;
        assert!(
            first.contains("## Built-in Types"),
            "{}",
            &first[..first.len().min(500)]
        );
        let mut group = c.benchmark_group("web_fetch");
        group.sample_size(10);
        group.bench_function("docs_page_1_4mb", |b| {
            b.to_async(&rt)
                .iter(|| async { fetcher.fetch(&args).await.unwrap() })
        });
        group.finish();
        if let Some(python) = std::env::var_os("JIANMU_BENCH_PYTHON") {
            let out = jianmu_process::std_command(python)
                .args(["-c", READABILIPY, &page_url, "3"])
                .output()
                .unwrap();
            match String::from_utf8_lossy(&out.stdout).trim().parse::<f64>() {
                Ok(secs) => {
                    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../../target/criterion/web_fetch");
                    std::fs::create_dir_all(&dir).unwrap();
                    std::fs::write(
                        dir.join("readabilipy.json"),
                        format!(r#"{{"ns": {}}}"#, secs * 1e9),
                    )
                    .unwrap();
                }
                Err(_) => eprintln!(
                    "readabilipy reference failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
    } else {
        eprintln!(
            "web_fetch bench skipped: python3.11-doc is not installed (cargo xtask test-all installs it)"
        );
    }

    if let Some(python) = std::env::var_os("JIANMU_BENCH_PYTHON") {
        let out = jianmu_process::std_command(python)
            .args(["-c", SEED_CLIENT, &url, "2000"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut nums = text
            .split_whitespace()
            .filter_map(|n| n.parse::<f64>().ok());
        if let (Some(seed), Some(shared)) = (nums.next(), nums.next()) {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/criterion/http");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("aiohttp.json"),
                format!(
                    r#"{{"seed_ns": {}, "shared_session_ns": {}}}"#,
                    seed * 1e9,
                    shared * 1e9
                ),
            )
            .unwrap();
        } else {
            eprintln!(
                "aiohttp reference failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
