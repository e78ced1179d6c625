//! A session's limits on a real private network: bytes past `max_bytes` cut the
//! tunnel and refuse the next, a connection past `max_connections` gets 503, and a
//! silent one is closed after `idle_secs`; each is an audit line saying why.

mod support;

use std::time::Duration;

use support::session;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A host server sending `size` bytes on each connection, then holding it open.
async fn sender(size: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let _ = s.write_all(&vec![1u8; size]).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    port
}

fn allow_loopback() -> jianmu_egress::EgressSettings {
    jianmu_egress::EgressSettings {
        allow: vec!["127.0.0.1".into()],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_past_the_limit_cut_the_tunnel_and_refuse_the_next() {
    let Some(s) = session(jianmu_egress::EgressSettings {
        max_bytes: Some(200_000),
        ..allow_loopback()
    }) else {
        return;
    };
    let port = sender(4 << 20).await;
    let (head, mut tunnel) = s.connect(port).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut got = Vec::new();
    tunnel.read_to_end(&mut got).await.unwrap();
    assert!(got.len() < 4 << 20, "{} bytes came through", got.len());
    assert!(got.len() >= 200_000, "only {} bytes", got.len());
    let line = s.line_with("max_bytes").await;
    assert_eq!(line["outcome"], "allowed");
    let (head, _) = s.connect(port).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    s.line_with("byte limit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_get_503_and_silent_ones_close() {
    let Some(s) = session(jianmu_egress::EgressSettings {
        max_connections: Some(2),
        idle_secs: Some(1),
        ..allow_loopback()
    }) else {
        return;
    };
    let port = sender(10).await;
    let (a, mut first) = s.connect(port).await;
    let (b, _second) = s.connect(port).await;
    assert!(
        a.starts_with("HTTP/1.1 200") && b.starts_with("HTTP/1.1 200"),
        "{a}{b}"
    );
    let (c, mut third) = s.connect(port).await;
    assert!(c.starts_with("HTTP/1.1 503"), "{c}");
    let mut body = String::new();
    third.read_to_string(&mut body).await.unwrap();
    assert!(body.contains("max_connections"), "{body}");
    // Silent past idle_secs: closed by the proxy, and a slot is free again.
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), first.read_to_end(&mut got))
        .await
        .expect("the idle tunnel was not closed")
        .unwrap();
    assert_eq!(got, vec![1u8; 10]);
    s.line_with("idle").await;
}
