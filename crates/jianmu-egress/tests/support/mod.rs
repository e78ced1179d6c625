//! A session's doors on a real private network, without tools: what the limits tests
//! and the egress bench share.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jianmu_process::NetworkEnv as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

pub(crate) struct Session {
    pub(crate) inside: jianmu_process::Inside,
    pub(crate) proxy: SocketAddr,
    /// The `Proxy-Authorization` credentials (base64).
    pub(crate) auth: String,
    pub(crate) lines: Arc<Mutex<Vec<serde_json::Value>>>,
    pub(crate) network: Arc<jianmu_process::Network>,
    pub(crate) egress: Arc<jianmu_egress::Egress>,
    pub(crate) door: Arc<jianmu_egress::Door>,
}

/// A session with `settings` and its proxy started, or `None` without private
/// networks on this host.
pub(crate) fn session(settings: jianmu_egress::EgressSettings) -> Option<Session> {
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
    let egress = jianmu_egress::Egress::new(door.clone(), &settings, &[])
        .unwrap()
        .unwrap();
    let vars = egress.env(&inside, None).unwrap();
    let url = vars
        .iter()
        .find(|(k, _)| k == "HTTP_PROXY")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap();
    // http://jianmu:TOKEN@127.0.0.1:PORT
    let (cred, at) = url.trim_start_matches("http://").split_once('@').unwrap();
    use base64::Engine as _;
    Some(Session {
        inside,
        proxy: at.parse().unwrap(),
        auth: base64::engine::general_purpose::STANDARD.encode(cred),
        lines,
        network,
        egress,
        door,
    })
}

impl Session {
    /// A fresh socket inside the session's network.
    pub(crate) fn socket(&self) -> TcpSocket {
        TcpSocket::from_std_stream(std::net::TcpStream::from(
            self.inside.socket(false).unwrap(),
        ))
    }

    /// Opens a tunnel to `127.0.0.1:port` from `socket` (inside); the proxy's answer
    /// head and the stream.
    pub(crate) async fn connect_from(&self, socket: TcpSocket, port: u16) -> (String, TcpStream) {
        let mut s = socket.connect(self.proxy).await.unwrap();
        let _ = s.set_nodelay(true);
        let req = format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {}\r\n\r\n",
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

    /// Opens a tunnel to `127.0.0.1:port` from a new socket inside.
    pub(crate) async fn connect(&self, port: u16) -> (String, TcpStream) {
        self.connect_from(self.socket(), port).await
    }

    /// The first audit line whose `why` holds `why` (waiting up to 5 s).
    pub(crate) async fn line_with(&self, why: &str) -> serde_json::Value {
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
