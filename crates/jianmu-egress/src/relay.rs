//! Relays: bytes both ways between two streams, and the listeners of ports both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Semaphore;

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

/// Why a relay is cut at the byte limit.
const OVER_BYTES: &str = "the egress byte limit ([egress] max_bytes) was reached";
/// Why a relay is cut for silence.
const IDLE: &str = "idle past the limit ([egress] idle_secs)";

/// What a relay may still move: the policy's byte limit less what its connections
/// moved so far (no limit for the port relays).
#[derive(Clone, Copy)]
pub(crate) struct Budget<'a> {
    used: Option<&'a AtomicU64>,
    limit: Option<u64>,
}

impl<'a> Budget<'a> {
    /// No limit.
    const NONE: Budget<'static> = Budget {
        used: None,
        limit: None,
    };

    /// `held`'s limit and count.
    pub(crate) fn of(held: &'a Held) -> Self {
        Self {
            used: Some(&held.bytes),
            limit: held.policy.max_bytes,
        }
    }

    /// How many bytes may still move.
    fn room(&self) -> usize {
        match (self.used, self.limit) {
            (Some(used), Some(limit)) => {
                let left = limit.saturating_sub(used.load(Ordering::Relaxed));
                usize::try_from(left).unwrap_or(usize::MAX)
            }
            _ => usize::MAX,
        }
    }

    /// `n` bytes moved.
    fn take(&self, n: usize) {
        if let Some(used) = self.used {
            used.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// Copies both ways until both ends close, the connection stays silent for the
/// policy's idle time, or the policy's byte limit is used up; counts into
/// `record`. Returns why it was cut, if it was.
pub(crate) async fn pipe<A, B>(a: A, b: B, held: &Held, record: &mut Record) -> Option<&'static str>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    copy_both(a, b, held.policy.idle, record, Budget::of(held)).await
}

/// Writes `bytes` to `to`, within `idle`: `Err(Some(why))` when it took longer,
/// `Err(None)` when `to` failed.
async fn write_within<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    idle: Duration,
) -> Result<(), Option<&'static str>> {
    match tokio::time::timeout(idle, to.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(None),
        Err(_) => Err(Some(IDLE)),
    }
}

/// The loop under [`pipe`] and the port relays. A read takes at most what the
/// budget has room for, so the limit is never passed; a write that makes no
/// progress for the idle time is cut too.
async fn copy_both<A, B>(
    a: A,
    b: B,
    idle: Duration,
    record: &mut Record,
    budget: Budget<'_>,
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
        let room = budget.room().min(CHUNK);
        if room == 0 {
            return Some(OVER_BYTES);
        }
        let deadline = tokio::time::Instant::from_std(last + idle);
        tokio::select! {
            r = ar.read(&mut up[..room]), if a_open => match r {
                Ok(0) | Err(_) => { a_open = false; let _ = bw.shutdown().await; }
                Ok(n) => {
                    budget.take(n);
                    if let Err(why) = write_within(&mut bw, &up[..n], idle).await { return why; }
                    record.sent += n as u64;
                    last = Instant::now();
                }
            },
            r = br.read(&mut down[..room]), if b_open => match r {
                Ok(0) | Err(_) => { b_open = false; let _ = aw.shutdown().await; }
                Ok(n) => {
                    budget.take(n);
                    if let Err(why) = write_within(&mut aw, &down[..n], idle).await { return why; }
                    record.received += n as u64;
                    last = Instant::now();
                }
            },
            () = tokio::time::sleep_until(deadline) => return Some(IDLE),
        }
    }
    None
}

/// Accepts on `listener` until the doors stop, serving each connection on a task of
/// its own with `serve`. At most as many connections are held at once as `slots`
/// has permits; the others wait in the listener's backlog. Aborting this task ends
/// every connection it serves.
pub(crate) async fn accept_each<F, Fut>(
    listener: std::net::TcpListener,
    slots: Arc<Semaphore>,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        while tasks.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let served = serve(stream);
                tasks.spawn(async move {
                    served.await;
                    drop(permit);
                });
            }
            // Out of descriptors or a transient error: wait a little, go on.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A record of a relay of ports both ways, to `host:port` under `rule`.
fn port_record(host: String, port: u16, rule: &str) -> Record {
    Record {
        host,
        port,
        rule: Some(rule.to_owned()),
        sent: 0,
        received: 0,
        started: Instant::now(),
    }
}

/// Serves a host service inside the session: each connection to `at` inside goes
/// to `at` on the host.
pub(crate) async fn service(shared: Arc<Shared>, socket: std::net::TcpListener, at: SocketAddr) {
    let slots = shared.port_slots.clone();
    accept_each(socket, slots, move |inner| {
        let shared = shared.clone();
        async move {
            let mut record =
                port_record(at.ip().to_string(), at.port(), "[isolation] host_services");
            let mut line = match TcpStream::connect(at).await {
                Ok(outer) => {
                    let _ = outer.set_nodelay(true);
                    let end = copy_both(inner, outer, PORT_IDLE, &mut record, Budget::NONE).await;
                    record.line("allowed", end)
                }
                Err(e) => record.line("refused", Some(&format!("the host refused: {e}"))),
            };
            line["kind"] = "host_service".into();
            shared.audit_line(line);
        }
    })
    .await;
}

/// Serves an exposed port: each connection to `listener` on the host goes to
/// `127.0.0.1:port` inside the session.
pub(crate) async fn expose(shared: Arc<Shared>, listener: std::net::TcpListener, port: u16) {
    let slots = shared.port_slots.clone();
    accept_each(listener, slots, move |outer| {
        let shared = shared.clone();
        async move {
            let mut record = port_record("127.0.0.1".into(), port, "expose_port");
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
                    let end = copy_both(outer, inner, PORT_IDLE, &mut record, Budget::NONE).await;
                    record.line("allowed", end)
                }
                Err(e) => record.line("refused", Some(&format!("nothing answers inside: {e}"))),
            };
            line["kind"] = "expose_port".into();
            shared.audit_line(line);
        }
    })
    .await;
}

/// What a proxy client's stream may be: a socket (relayed with `splice`, the bytes
/// never copied into jianmu's memory) or anything else (copied).
pub(crate) trait MaybeTcp {
    /// The socket, when it is one.
    fn as_tcp(&self) -> Option<&TcpStream>;
}

impl MaybeTcp for TcpStream {
    fn as_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl MaybeTcp for tokio::io::DuplexStream {
    fn as_tcp(&self) -> Option<&TcpStream> {
        None
    }
}

/// The most bytes one `splice` moves, and the size asked of each pipe.
const PIPE: usize = 1 << 20;

/// Both ways between two sockets through pipes with `splice`, as [`pipe`] does (the
/// same limits and counts). `None` where pipes cannot be made: then copy.
pub(crate) async fn splice_both(
    a: &TcpStream,
    b: &TcpStream,
    held: &Held,
    record: &mut Record,
) -> Option<Option<&'static str>> {
    let up_pipe = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    let down_pipe = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    for p in [&up_pipe.1, &down_pipe.1] {
        let _ = rustix::pipe::fcntl_setpipe_size(p, PIPE);
    }
    let budget = Budget::of(held);
    let last = std::sync::Mutex::new(Instant::now());
    let (sent, received) = (AtomicU64::new(0), AtomicU64::new(0));
    let idle = held.policy.idle;
    let up = one_way(a, b, &up_pipe, &sent, &last, budget);
    let down = one_way(b, a, &down_pipe, &received, &last, budget);
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    // A direction that ends leaves the other running (a half-close); a cut ends both.
    let end = loop {
        if up_done && down_done {
            break None;
        }
        let deadline = *last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            + idle;
        tokio::select! {
            cut = &mut up, if !up_done => {
                up_done = true;
                if cut.is_some() { break cut; }
            }
            cut = &mut down, if !down_done => {
                down_done = true;
                if cut.is_some() { break cut; }
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                let quiet = last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).elapsed();
                if quiet >= idle {
                    break Some(IDLE);
                }
            }
        }
    };
    record.sent += sent.load(Ordering::Relaxed);
    record.received += received.load(Ordering::Relaxed);
    Some(end)
}

/// One direction: `from` into the pipe, the pipe into `to`, until `from` ends (then
/// `to`'s writing half is shut) or either fails. Returns why it was cut, if it was.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &(std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    moved: &AtomicU64,
    last: &std::sync::Mutex<Instant>,
    budget: Budget<'_>,
) -> Option<&'static str> {
    use rustix::pipe::{SpliceFlags, splice};
    use tokio::io::Interest;
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        // At most what the byte limit has room for: it is never passed.
        let room = budget.room().min(PIPE);
        if room == 0 {
            return Some(OVER_BYTES);
        }
        if from.readable().await.is_err() {
            return None;
        }
        let n = match from.try_io(Interest::READABLE, || {
            splice(from, None, &pipe.1, None, room, flags).map_err(std::io::Error::from)
        }) {
            Ok(0) => {
                let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
                return None;
            }
            Ok(n) => {
                budget.take(n);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
                return None;
            }
        };
        let mut left = n;
        while left > 0 {
            if to.writable().await.is_err() {
                return None;
            }
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.0, None, to, None, left, flags).map_err(std::io::Error::from)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
        }
        moved.fetch_add(n as u64, Ordering::Relaxed);
        *last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }
}
