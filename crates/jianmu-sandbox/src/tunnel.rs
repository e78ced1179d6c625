//! Streams carried over the wire, for the sandbox's egress: the server inside the
//! container listens on its loopback as the session's proxy and sends each
//! connection to the host as a stream (`open`, `data`, `ack`, `close`, `reset`
//! lines); the host
//! serves it with the session's egress policy. The container has no route of its own:
//! its network is `none`, so the host's proxy is its only way out.
//!
//! Each direction of a stream has a window: at most [`WINDOW`] bytes sent and not yet
//! acknowledged (written out by the other side). A side that receives more than that
//! closes the stream, so neither side buffers more than the window per stream.
//!
//! `close` ends one direction (a half-close); `reset` ends the whole stream at once.
//! A side answers `reset` to bytes for a stream it does not hold, and resets a stream
//! it gives up on, so the other side never waits for acks that cannot come.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use crate::lock;

/// Bytes a direction of a stream may have in flight.
pub(crate) const WINDOW: usize = 1 << 20;
/// The most bytes one `data` line carries.
const CHUNK: usize = 64 * 1024;
/// The most streams open at once; more are closed as they arrive.
pub(crate) const MAX_STREAMS: usize = 1024;

/// A stream message, either way.
#[derive(Debug)]
pub(crate) enum Msg {
    Data(u64, Vec<u8>),
    Ack(u64, usize),
    Close(u64),
    /// The stream is gone on the sending side: drop it whole.
    Reset(u64),
}

/// Encodes bytes for a line.
pub(crate) fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes a line's bytes (nothing when they are not base64).
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

struct Credit {
    free: Mutex<usize>,
    more: Notify,
}

struct Entry {
    /// Bytes from the other side for the local end; `None` ends it.
    tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
    /// What the other side may still send us before our writes catch up.
    queued: Arc<AtomicUsize>,
    credit: Arc<Credit>,
    tasks: [AbortHandle; 2],
}

/// The streams of one connection, with how to send a message to the other side.
pub(crate) struct Streams {
    send: Box<dyn Fn(Msg) + Send + Sync>,
    open: Mutex<HashMap<u64, Entry>>,
}

impl Drop for Streams {
    fn drop(&mut self) {
        for (_, entry) in lock(&self.open).drain() {
            for task in &entry.tasks {
                task.abort();
            }
        }
    }
}

impl Streams {
    pub(crate) fn new(send: impl Fn(Msg) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            send: Box::new(send),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// How many are open.
    pub(crate) fn len(&self) -> usize {
        lock(&self.open).len()
    }

    /// Carries stream `id` between `io` (the local end) and the other side, until
    /// both directions have ended. Call it inside a runtime. An id already open is
    /// refused (closed, `io` dropped): `false`.
    pub(crate) fn attach<S>(self: &Arc<Self>, id: u64, io: S) -> bool
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        // Held until the entry is in: the tasks spawned below may send before this
        // returns, and the other side's answer (or the tasks' own end) must find the
        // stream here, not be answered with a reset or leave a stale entry.
        let mut open = lock(&self.open);
        if open.contains_key(&id) {
            drop(open);
            (self.send)(Msg::Reset(id));
            return false;
        }
        let (mut reader, mut writer) = tokio::io::split(io);
        let (tx, mut rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let credit = Arc::new(Credit {
            free: Mutex::new(WINDOW),
            more: Notify::new(),
        });
        let ended = Arc::new(AtomicUsize::new(0));
        let weak = Arc::downgrade(self);
        let finish = {
            let weak = weak.clone();
            let ended = ended.clone();
            move || {
                if ended.fetch_add(1, Ordering::AcqRel) == 1
                    && let Some(streams) = weak.upgrade()
                {
                    lock(&streams.open).remove(&id);
                }
            }
        };
        let read_task = {
            let weak = weak.clone();
            let credit = credit.clone();
            let finish = finish.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let n = match reader.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    // Wait for the other side to make room.
                    loop {
                        let notified = credit.more.notified();
                        {
                            let mut free = lock(&credit.free);
                            if *free >= n {
                                *free -= n;
                                break;
                            }
                        }
                        notified.await;
                    }
                    let Some(streams) = weak.upgrade() else {
                        return;
                    };
                    (streams.send)(Msg::Data(id, buf[..n].to_vec()));
                }
                if let Some(streams) = weak.upgrade() {
                    (streams.send)(Msg::Close(id));
                }
                finish();
            })
            .abort_handle()
        };
        let write_task = {
            let weak = weak.clone();
            let queued = queued.clone();
            tokio::spawn(async move {
                while let Some(Some(bytes)) = rx.recv().await {
                    if writer.write_all(&bytes).await.is_err() {
                        // The local end takes no more: the other side must stop
                        // sending (it would wait for acks that never come).
                        if let Some(streams) = weak.upgrade() {
                            streams.cut(id);
                        }
                        return;
                    }
                    queued.fetch_sub(bytes.len(), Ordering::AcqRel);
                    let Some(streams) = weak.upgrade() else {
                        return;
                    };
                    (streams.send)(Msg::Ack(id, bytes.len()));
                }
                let _ = writer.shutdown().await;
                finish();
            })
            .abort_handle()
        };
        open.insert(
            id,
            Entry {
                tx,
                queued,
                credit,
                tasks: [read_task, write_task],
            },
        );
        true
    }

    /// Drops stream `id` (its tasks stopped, its local end closed) and tells the
    /// other side to drop it too.
    fn cut(&self, id: u64) {
        self.drop_stream(id);
        (self.send)(Msg::Reset(id));
    }

    /// Drops stream `id` here: its tasks stop, and its local end is closed.
    fn drop_stream(&self, id: u64) {
        let entry = lock(&self.open).remove(&id);
        if let Some(entry) = entry {
            for task in &entry.tasks {
                task.abort();
            }
        }
    }

    /// The other side dropped stream `id`.
    pub(crate) fn reset(&self, id: u64) {
        self.drop_stream(id);
    }

    /// What the other side sent: bytes for stream `id`'s local end. More than the
    /// window closes the stream; bytes for a stream not held are answered with a
    /// reset.
    pub(crate) fn data(&self, id: u64, bytes: Vec<u8>) {
        let open = lock(&self.open);
        let Some(entry) = open.get(&id) else {
            drop(open);
            (self.send)(Msg::Reset(id));
            return;
        };
        let after = entry.queued.fetch_add(bytes.len(), Ordering::AcqRel) + bytes.len();
        if after > WINDOW || entry.tx.send(Some(bytes)).is_err() {
            drop(open);
            self.cut(id);
        }
    }

    /// The other side wrote `n` of our bytes out.
    /// An ack for more than is in flight closes the stream (the other side would
    /// otherwise make us send without bound).
    pub(crate) fn ack(&self, id: u64, n: usize) {
        let open = lock(&self.open);
        // A late ack for a stream that ended: nothing waits on it.
        let Some(entry) = open.get(&id) else { return };
        let mut free = lock(&entry.credit.free);
        if n > WINDOW - *free {
            drop(free);
            drop(open);
            self.cut(id);
            return;
        }
        *free += n;
        entry.credit.more.notify_waiters();
    }

    /// Drops stream `id` before it is carried (too many are open).
    pub(crate) fn refuse(&self, id: u64) {
        (self.send)(Msg::Reset(id));
    }

    /// The other side will send no more on stream `id`.
    pub(crate) fn close(&self, id: u64) {
        if let Some(entry) = lock(&self.open).get(&id) {
            let _ = entry.tx.send(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn deliver(
        mut from: mpsc::UnboundedReceiver<Msg>,
        into: Arc<Streams>,
        peak: Arc<AtomicUsize>,
    ) {
        while let Some(m) = from.recv().await {
            match m {
                Msg::Data(id, bytes) => {
                    into.data(id, bytes);
                    let q = lock(&into.open)
                        .get(&id)
                        .map_or(0, |e| e.queued.load(Ordering::Acquire));
                    peak.fetch_max(q, Ordering::AcqRel);
                }
                Msg::Ack(id, n) => into.ack(id, n),
                Msg::Close(id) => into.close(id),
                Msg::Reset(id) => into.reset(id),
            }
        }
    }

    /// Two tables wired back to back: bytes written on one local end come out of the
    /// other, both ways, and a 5 MB transfer never has more than the window queued.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_carry_bytes_both_ways_within_the_window() {
        let (to_b, b_in) = mpsc::unbounded_channel::<Msg>();
        let (to_a, a_in) = mpsc::unbounded_channel::<Msg>();
        let a = Streams::new(move |m| {
            let _ = to_b.send(m);
        });
        let b = Streams::new(move |m| {
            let _ = to_a.send(m);
        });
        let peak = Arc::new(AtomicUsize::new(0));
        tokio::spawn(deliver(b_in, b.clone(), peak.clone()));
        tokio::spawn(deliver(a_in, a.clone(), peak.clone()));
        let (mut near, far_a) = tokio::io::duplex(4096);
        let (far_b, mut echo) = tokio::io::duplex(4096);
        a.attach(1, far_a);
        b.attach(1, far_b);
        let payload: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            near.write_all(&sent).await.unwrap();
            near.shutdown().await.unwrap();
            let mut back = Vec::new();
            near.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        echo.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, payload);
        echo.write_all(b"and back").await.unwrap();
        echo.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"and back");
        assert!(peak.load(Ordering::Acquire) <= WINDOW);
        for _ in 0..100 {
            if a.len() == 0 && b.len() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!((a.len(), b.len()), (0, 0));
    }

    /// An ack for bytes never sent, and a second stream with an id already open, are
    /// refused: the stream is closed, and the first stays as it was.
    #[tokio::test]
    async fn false_acks_and_reused_ids_are_refused() {
        let (sent_tx, mut sent) = mpsc::unbounded_channel::<Msg>();
        let s = Streams::new(move |m| {
            let _ = sent_tx.send(m);
        });
        let (_keep, far) = tokio::io::duplex(16);
        assert!(s.attach(3, far));
        let (_other, again) = tokio::io::duplex(16);
        assert!(!s.attach(3, again));
        assert_eq!(s.len(), 1);
        assert!(matches!(sent.try_recv(), Ok(Msg::Reset(3))));
        s.ack(3, 1);
        assert_eq!(s.len(), 0, "an ack for nothing sent kept the stream");
        assert!(matches!(sent.try_recv(), Ok(Msg::Reset(3))));
    }

    /// Bytes for a stream this side no longer holds are answered with a reset, and a
    /// reset closes the local end: a sender never waits for acks that cannot come.
    #[tokio::test]
    async fn a_stream_gone_on_one_side_is_reset_on_the_other() {
        let (sent_tx, mut sent) = mpsc::unbounded_channel::<Msg>();
        let s = Streams::new(move |m| {
            let _ = sent_tx.send(m);
        });
        s.data(9, b"late".to_vec());
        assert!(matches!(sent.try_recv(), Ok(Msg::Reset(9))));
        let (mut local, far) = tokio::io::duplex(16);
        assert!(s.attach(4, far));
        s.reset(4);
        assert_eq!(s.len(), 0);
        let mut buf = [0u8; 4];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), local.read(&mut buf))
            .await
            .expect("the local end was left open")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }

    /// A local end that stops taking bytes resets the stream, so the other side
    /// stops sending instead of waiting for acks.
    #[tokio::test]
    async fn a_local_end_that_fails_resets_the_stream() {
        let (sent_tx, mut sent) = mpsc::unbounded_channel::<Msg>();
        let s = Streams::new(move |m| {
            let _ = sent_tx.send(m);
        });
        let (local, far) = tokio::io::duplex(16);
        drop(local);
        assert!(s.attach(5, far));
        s.data(5, b"for nobody".to_vec());
        let mut reset = false;
        for _ in 0..500 {
            while let Ok(m) = sent.try_recv() {
                reset |= matches!(m, Msg::Reset(5));
            }
            if reset {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(reset, "the other side was not told");
        assert_eq!(s.len(), 0);
    }

    /// The other side may answer a stream's first bytes at once, before `attach` has
    /// returned: the answer reaches the local end (it is not taken for bytes of an
    /// unknown stream and reset, which left the local end waiting for ever).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_that_comes_before_attach_returns_is_delivered() {
        let (sent_tx, mut sent) = mpsc::unbounded_channel::<Msg>();
        let me: Arc<std::sync::OnceLock<std::sync::Weak<Streams>>> = Arc::default();
        let s = {
            let me = me.clone();
            Streams::new(move |m| {
                // The other side, answering each request as it comes.
                if let Msg::Data(id, _) = &m
                    && let Some(s) = me.get().and_then(std::sync::Weak::upgrade)
                {
                    s.data(*id, b"answer".to_vec());
                }
                let _ = sent_tx.send(m);
            })
        };
        me.set(Arc::downgrade(&s)).unwrap();
        let mut resets = 0;
        for id in 0..2000 {
            let (mut local, far) = tokio::io::duplex(64);
            local.write_all(b"request").await.unwrap();
            assert!(s.attach(id, far));
            let mut buf = [0u8; 6];
            let read = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                local.read_exact(&mut buf),
            )
            .await;
            while let Ok(m) = sent.try_recv() {
                resets += usize::from(matches!(m, Msg::Reset(_)));
            }
            assert!(
                matches!(read, Ok(Ok(_))) && &buf == b"answer",
                "stream {id}: no answer ({resets} resets)"
            );
            s.reset(id);
        }
        assert_eq!(resets, 0);
    }

    /// A side that ignores the window gets the stream closed, not its bytes queued.
    #[tokio::test]
    async fn a_flood_past_the_window_closes_the_stream() {
        let (sent_tx, mut sent) = mpsc::unbounded_channel::<Msg>();
        let s = Streams::new(move |m| {
            let _ = sent_tx.send(m);
        });
        let (_keep, far) = tokio::io::duplex(16);
        s.attach(7, far);
        for _ in 0..=WINDOW / CHUNK {
            s.data(7, vec![0; CHUNK]);
        }
        assert_eq!(s.len(), 0);
        let mut closed = false;
        while let Ok(m) = sent.try_recv() {
            closed |= matches!(m, Msg::Reset(7));
        }
        assert!(closed);
    }
}
