//! Sequential loopback GETs of a small body through `http_request`, against a local
//! hyper server; then, against the same server, Python aiohttp doing the Python tool's request
//! (when `JIANMU_BENCH_PYTHON` names a python with aiohttp; `cargo xtask bench` sets it).

use std::convert::Infallible;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::Full;
use hyper::Response;
use hyper_util::rt::TokioIo;
use jianmu_net::{NetSettings, build_client, reqwest, system_lookup};
use jianmu_tool_http::{HttpArgs, HttpRequest, HttpSettings};

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

fn serve(rt: &tokio::runtime::Runtime) -> u16 {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(br#"{"ok": true, "n": 42}"#)))
                            .unwrap(),
                    )
                });
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
    let port = serve(&server_rt);
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
