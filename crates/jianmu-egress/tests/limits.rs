//! A session's limits on a real private network: bytes past `max_bytes` cut the
//! tunnel and refuse the next, a connection past `max_connections` gets 503, and a
//! silent one is closed after `idle_secs`; each is an audit line saying why. Silent
//! clients cannot make jianmu hold descriptors without bound, a closed port ends its
//! live connections, and requests that would show or leak a credential are refused.

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
    // Exactly the limit: a read never takes more than the budget has room for.
    assert_eq!(got.len(), 200_000);
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

/// The descriptors this process holds.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// Connections that never send a request head wait in the listener's backlog past
/// a bound (256 plus `max_connections`), instead of each holding a descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_hold_a_bounded_number_of_descriptors() {
    let Some(s) = session(jianmu_egress::EgressSettings {
        max_connections: Some(2),
        ..allow_loopback()
    }) else {
        return;
    };
    let before = fds();
    let mut held = Vec::new();
    for _ in 0..600 {
        held.push(s.socket().connect(s.proxy).await.unwrap());
    }
    // Let the doors accept what they will.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = fds() - before - held.len();
    assert!(
        taken <= 300,
        "the proxy holds {taken} descriptors for 600 silent clients"
    );
}

/// Closing an exposed port ends the connections open through it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_exposed_port_ends_its_open_connections() {
    let Some(s) = session(allow_loopback()) else {
        return;
    };
    let socket = s.socket();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let listener = socket.listen(8).unwrap();
    tokio::spawn(async move {
        let (mut c, _) = listener.accept().await.unwrap();
        c.write_all(b"hello").await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let door = s.door.clone();
    let at = door.expose(&s.inside, port).unwrap();
    let mut client = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut hello = [0u8; 5];
    client.read_exact(&mut hello).await.unwrap();
    assert_eq!(door.unexpose(port), Some(at));
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection outlived its closed port");
}

/// A plain request through the proxy, from inside: the whole answer.
async fn plain(s: &support::Session, request: &str) -> String {
    let mut c = s.socket().connect(s.proxy).await.unwrap();
    let auth = format!("Proxy-Authorization: Basic {}\r\n\r\n", s.auth);
    c.write_all(
        request
            .replace("\r\n\r\n", &format!("\r\n{auth}"))
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut answer)).await;
    answer
}

/// A credential whose key has no port goes to the scheme's own port only, never in
/// clear text elsewhere; TRACE, which would echo it back, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_go_to_their_port_only_and_trace_is_refused() {
    let (port, heads) = jianmu_test_support::http_upstream("127.0.0.1", "ok");
    let mut settings = allow_loopback();
    settings.credentials.insert(
        "127.0.0.1".into(),
        jianmu_egress::Credential {
            header: "X-Key".into(),
            value: "s3cret".into(),
            intercept: false,
        },
    );
    let Some(s) = session(settings) else {
        return;
    };
    let answer = plain(
        &s,
        &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = heads.lock().unwrap().join("\n");
    assert!(seen.contains("GET / HTTP/1.1"), "{seen}");
    assert!(
        !seen.contains("s3cret"),
        "the credential went to port {port}: {seen}"
    );
    let answer = plain(
        &s,
        &format!("TRACE http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.contains("TRACE"), "{answer}");
    assert_eq!(heads.lock().unwrap().len(), 1, "TRACE reached the server");
}

/// A client that stops reading while the server sends is cut after `idle_secs`,
/// on the copying path too (a sandbox's tunnel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_when_idle() {
    let Some(s) = session(jianmu_egress::EgressSettings {
        idle_secs: Some(1),
        ..allow_loopback()
    }) else {
        return;
    };
    let port = sender(8 << 20).await;
    let (mut ours, theirs) = tokio::io::duplex(1024);
    tokio::spawn(s.egress.serve(theirs).unwrap());
    ours.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    // Read the answer's start and then nothing: the proxy's writes block.
    let mut first = [0u8; 12];
    ours.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    s.line_with("idle").await;
}
