//! A session's limits on a real private network: bytes past `max_bytes` cut the
//! tunnel and refuse the next, a connection past `max_connections` gets 503, and a
//! silent one is closed after `idle_secs`; each is an audit line saying why.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jianmu_process::NetworkEnv as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

struct Session {
    inside: jianmu_process::Inside,
    proxy: SocketAddr,
    auth: String,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
    _egress: Arc<jianmu_egress::Egress>,
    _network: Arc<jianmu_process::Network>,
}

fn session(settings: jianmu_egress::EgressSettings) -> Option<Session> {
    let kernel = jianmu_process::Isolation::probe();
    if !(kernel.namespaces && kernel.private_network) {
        return None;
    }
    let network = Arc::new(jianmu_process::Network::new());
    let inside = network.inside().unwrap();
    let door = Arc::new(jianmu_egress::Door::default());
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    door.set_audit(
        Arc::new(move |line| sink.lock().unwrap().push(line)),
        serde_json::Map::new(),
    );
    let egress = jianmu_egress::Egress::new(door, &settings, &[])
        .unwrap()
        .unwrap();
    let vars = egress.env(&inside, None).unwrap();
    let url = vars
        .iter()
        .find(|(k, _)| k == "HTTP_PROXY")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap();
    let (cred, at) = url.trim_start_matches("http://").split_once('@').unwrap();
    use base64::Engine as _;
    Some(Session {
        inside,
        proxy: at.parse().unwrap(),
        auth: base64::engine::general_purpose::STANDARD.encode(cred),
        lines,
        _egress: egress,
        _network: network,
    })
}

impl Session {
    /// Opens a tunnel to `127.0.0.1:port` from inside; the proxy's answer head.
    async fn connect(&self, port: u16) -> (String, TcpStream) {
        let socket = TcpSocket::from_std_stream(std::net::TcpStream::from(
            self.inside.socket(false).unwrap(),
        ));
        let mut s = socket.connect(self.proxy).await.unwrap();
        let req = format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            self.auth
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).await.unwrap() == 0 {
                break;
            }
            head.push(b[0]);
        }
        (String::from_utf8_lossy(&head).into_owned(), s)
    }

    async fn line_with(&self, why: &str) -> serde_json::Value {
        for _ in 0..500 {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l["why"].as_str().is_some_and(|w| w.contains(why)))
            {
                return l.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "no audit line says {why:?}: {:?}",
            self.lines.lock().unwrap()
        );
    }
}

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
