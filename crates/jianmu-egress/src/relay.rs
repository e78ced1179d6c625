//! Relays: bytes both ways between two streams, and the listeners of ports both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::proxy::{Held, Record, Shared};

/// The buffer each direction reads into.
const CHUNK: usize = 64 * 1024;
/// How long a relay of ports both ways may stay silent.
const PORT_IDLE: Duration = Duration::from_secs(3600);

/// A listening socket made inside the session's network, bound to `at`.
pub(crate) fn listen_inside(
    inside: &jianmu_process::Inside,
    at: SocketAddr,
) -> std::io::Result<std::net::TcpListener> {
    let fd = inside.socket(at.is_ipv6())?;
    let socket = TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
    socket.set_reuseaddr(true)?;
    socket.bind(at)?;
    let listener = socket.listen(1024)?;
    listener.into_std()
}

/// Copies both ways until both ends close, the connection stays silent for the
/// policy's idle time, or the policy's byte limit is used up; counts into
/// `record`. Returns why it was cut, if it was.
pub(crate) async fn pipe<A, B>(a: A, b: B, held: &Held, record: &mut Record) -> Option<&'static str>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let limit = held.policy.max_bytes;
    let count = |n: usize| {
        let total = held.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        limit.is_some_and(|l| total > l)
    };
    copy_both(a, b, held.policy.idle, record, &count).await
}

/// The loop under [`pipe`] and the port relays.
async fn copy_both<A, B>(
    a: A,
    b: B,
    idle: Duration,
    record: &mut Record,
    over: &(dyn Fn(usize) -> bool + Sync),
) -> Option<&'static str>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut up = vec![0u8; CHUNK];
    let mut down = vec![0u8; CHUNK];
    let (mut a_open, mut b_open) = (true, true);
    let mut last = Instant::now();
    while a_open || b_open {
        let deadline = tokio::time::Instant::from_std(last + idle);
        tokio::select! {
            r = ar.read(&mut up), if a_open => match r {
                Ok(0) | Err(_) => { a_open = false; let _ = bw.shutdown().await; }
                Ok(n) => {
                    if bw.write_all(&up[..n]).await.is_err() { return None; }
                    record.sent += n as u64;
                    last = Instant::now();
                    if over(n) { return Some("the egress byte limit ([egress] max_bytes) was reached"); }
                }
            },
            r = br.read(&mut down), if b_open => match r {
                Ok(0) | Err(_) => { b_open = false; let _ = aw.shutdown().await; }
                Ok(n) => {
                    if aw.write_all(&down[..n]).await.is_err() { return None; }
                    record.received += n as u64;
                    last = Instant::now();
                    if over(n) { return Some("the egress byte limit ([egress] max_bytes) was reached"); }
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                return Some("idle past the limit ([egress] idle_secs)");
            }
        }
    }
    None
}

/// Serves a host service inside the session: each connection to `at` inside goes
/// to `at` on the host.
pub(crate) async fn service(shared: Arc<Shared>, socket: std::net::TcpListener, at: SocketAddr) {
    let Ok(listener) = TcpListener::from_std(socket) else {
        return;
    };
    loop {
        let Ok((inner, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut record = Record {
                host: at.ip().to_string(),
                port: at.port(),
                rule: Some("[isolation] host_services".to_owned()),
                sent: 0,
                received: 0,
                started: Instant::now(),
            };
            match TcpStream::connect(at).await {
                Ok(outer) => {
                    let _ = outer.set_nodelay(true);
                    let end = copy_both(inner, outer, PORT_IDLE, &mut record, &|_| false).await;
                    let mut line = record.line("allowed", end);
                    line["kind"] = "host_service".into();
                    shared.audit_line(line);
                }
                Err(e) => {
                    let mut line = record.line("refused", Some(&format!("the host refused: {e}")));
                    line["kind"] = "host_service".into();
                    shared.audit_line(line);
                }
            }
        });
    }
}

/// Serves an exposed port: each connection to `listener` on the host goes to
/// `127.0.0.1:port` inside the session.
pub(crate) async fn expose(shared: Arc<Shared>, listener: std::net::TcpListener, port: u16) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let Ok((outer, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut record = Record {
                host: "127.0.0.1".into(),
                port,
                rule: Some("expose_port".to_owned()),
                sent: 0,
                received: 0,
                started: Instant::now(),
            };
            let inner = async {
                let inside = shared.inside.as_ref().ok_or_else(|| {
                    std::io::Error::other("this session has no network of its own")
                })?;
                let fd = inside.socket(false)?;
                let socket = TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
                socket
                    .connect(SocketAddr::from(([127, 0, 0, 1], port)))
                    .await
            };
            let mut line = match inner.await {
                Ok(inner) => {
                    let _ = inner.set_nodelay(true);
                    let end = copy_both(outer, inner, PORT_IDLE, &mut record, &|_| false).await;
                    record.line("allowed", end)
                }
                Err(e) => record.line("refused", Some(&format!("nothing answers inside: {e}"))),
            };
            line["kind"] = "expose_port".into();
            shared.audit_line(line);
        });
    }
}
