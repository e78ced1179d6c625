//! The egress proxy against the host's loopback without it, in the same run: a 100 MB
//! download, a new connection (to the first byte), and 1,000 connections held at
//! once (with jianmu's RSS). Clients run inside a real private network, as a
//! session's commands do; the reference clients run on the host. Prints one line per
//! row; `cargo xtask bench` runs it.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/support/mod.rs"]
mod support;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const DOWNLOAD: usize = 100 << 20;
const ROUNDS: usize = 7;
const CONNECTS: usize = 300;
const HELD: usize = 1000;

fn main() {
    let kernel = jianmu_process::Isolation::probe();
    if !(kernel.namespaces && kernel.private_network) {
        println!("egress: no private networks on this host; nothing measured");
        return;
    }
    let _ = jianmu_process::raise_open_files_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Upstreams on the host: one sends 100 MB, one sends a byte, one echoes.
async fn upstreams() -> (u16, u16, u16) {
    let bulk = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let one = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ports = (
        bulk.local_addr().unwrap().port(),
        one.local_addr().unwrap().port(),
        echo.local_addr().unwrap().port(),
    );
    tokio::spawn(async move {
        let chunk = vec![7u8; 1 << 20];
        loop {
            let (mut s, _) = bulk.accept().await.unwrap();
            let chunk = chunk.clone();
            tokio::spawn(async move {
                for _ in 0..DOWNLOAD >> 20 {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    tokio::spawn(async move {
        loop {
            let (mut s, _) = one.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let _ = s.write_all(b"x").await;
            });
        }
    });
    tokio::spawn(async move {
        loop {
            let (mut s, _) = echo.accept().await.unwrap();
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    ports
}

/// An HTTP server on 127.0.0.2 (outside, as the session sees it) answering every
/// request with 100 MB.
async fn http_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let chunk = vec![7u8; 1 << 20];
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {DOWNLOAD}\r\nConnection: close\r\n\r\n"
                );
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..DOWNLOAD >> 20 {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// `curl` fetching `url` in `jail` (to /dev/null); its wall time, checked whole.
async fn curl(jail: &jianmu_process::Jail, url: &str) -> f64 {
    let mut spec = jianmu_process::Spec::new("curl");
    spec.arg("-sS")
        .arg("-o")
        .arg("/dev/null")
        .arg("-w")
        .arg("%{size_download}")
        .arg(url)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(jianmu_process::Stream::Piped);
    let t = Instant::now();
    let mut child = jail.spawn(&spec).unwrap();
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_to_string(&mut out).await.unwrap();
    assert!(child.wait().await.unwrap().success());
    let took = t.elapsed().as_secs_f64();
    assert_eq!(out, DOWNLOAD.to_string(), "{url}");
    took
}

/// A tunnel to `127.0.0.1:port` through the proxy from `socket` (inside).
async fn tunnel(session: &support::Session, socket: TcpSocket, port: u16) -> TcpStream {
    let (head, s) = session.connect_from(socket, port).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

async fn drain(mut s: TcpStream) -> usize {
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

async fn run() {
    let (bulk, one, echo) = upstreams().await;
    let session = support::session(jianmu_egress::EgressSettings {
        allow: vec!["127.0.0.1".into()],
        max_connections: Some(HELD + 16),
        ..Default::default()
    })
    .expect("private networks were probed above");
    let network = Arc::clone(&session.network);

    // 100 MB: direct on the host, then through the proxy from inside.
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let s = TcpStream::connect(("127.0.0.1", bulk)).await.unwrap();
        assert_eq!(drain(s).await, DOWNLOAD);
        direct.push(t.elapsed().as_secs_f64());
        let socket = session.socket();
        let t = Instant::now();
        let s = tunnel(&session, socket, bulk).await;
        assert_eq!(drain(s).await, DOWNLOAD);
        proxied.push(t.elapsed().as_secs_f64());
    }
    let (d, p) = (median(direct), median(proxied));
    println!(
        "egress 100 MB download: proxy {:.1} ms, host loopback {:.1} ms, ratio {:.2}x (goal <= 1.1x)",
        p * 1e3,
        d * 1e3,
        p / d
    );

    // The same with curl as a session's command, through the proxy, against curl
    // with the host's network (the same jail otherwise).
    if jianmu_process::std_command("curl")
        .arg("--version")
        .output()
        .is_ok()
    {
        let ws = tempfile::tempdir().unwrap();
        let http = http_upstream().await;
        let settings = jianmu_egress::EgressSettings {
            allow: vec!["127.0.0.2".into()],
            ..Default::default()
        };
        let door = Arc::new(jianmu_egress::Door::default());
        let env = jianmu_egress::Egress::new(door, &settings, &[])
            .unwrap()
            .unwrap();
        let private =
            jianmu_process::Jail::new(&jianmu_process::IsolationSettings::default(), ws.path())
                .unwrap()
                .sharing_network(Arc::clone(&network))
                .with_network_env(env);
        let host = jianmu_process::Jail::new(
            &jianmu_process::IsolationSettings {
                network: true,
                ..Default::default()
            },
            ws.path(),
        )
        .unwrap();
        let url = format!("http://127.0.0.2:{http}/");
        let (mut direct, mut proxied) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            direct.push(curl(&host, &url).await);
            proxied.push(curl(&private, &url).await);
        }
        let (d, p) = (median(direct), median(proxied));
        println!(
            "egress 100 MB download with curl in the session: proxy {:.1} ms, host network {:.1} ms, ratio {:.2}x (goal <= 1.1x)",
            p * 1e3,
            d * 1e3,
            p / d
        );
    }

    // A new connection to its first byte (the inside sockets are made beforehand:
    // that is the client's cost, not the proxy's).
    let sockets: Vec<TcpSocket> = (0..CONNECTS).map(|_| session.socket()).collect();
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for socket in sockets {
        let t = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", one)).await.unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        direct.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let mut s = tunnel(&session, socket, one).await;
        s.read_exact(&mut b).await.unwrap();
        proxied.push(t.elapsed().as_secs_f64());
    }
    let (d, p) = (median(direct), median(proxied));
    println!(
        "egress new connection to first byte: proxy {:.3} ms, host loopback {:.3} ms, overhead {:.3} ms (goal <= 0.3 ms)",
        p * 1e3,
        d * 1e3,
        (p - d) * 1e3
    );

    // 1,000 at once, each then used.
    let before = rss_kib();
    let sockets: Vec<TcpSocket> = (0..HELD).map(|_| session.socket()).collect();
    let mut held = Vec::with_capacity(HELD);
    for socket in sockets {
        held.push(tunnel(&session, socket, echo).await);
    }
    let mut ok = 0;
    for s in &mut held {
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut b))
            .await
            .unwrap()
            .unwrap();
        ok += usize::from(&b == b"ping");
    }
    let after = rss_kib();
    println!(
        "egress {HELD} connections at once: {ok} answered, RSS {} MiB (+{} KiB while held, clients included)",
        after / 1024,
        after.saturating_sub(before)
    );
    assert_eq!(ok, HELD);
}
