//! One attach stream to a sandbox container: a writer task sends request lines, a
//! reader task routes reply lines to the calls waiting for them and, when the stream
//! ends, fails every waiting call with the reason and removes the container.
//!
//! Dropping the last [`Conn`] closes the container's stdin, so `jianmu serve` exits and
//! the reader removes the container: no async drop needed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use jianmu_tool_core::{CallContext, ProgressSink, ToolConfig, ToolError, ToolOutput};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::backend::{Backend, Chunk, Ended, Input, Output};
use super::wire::{Reply, Request, to_line, write_lines};
use crate::lock;

/// How a call ended, as far as the connection knows.
pub(crate) enum Outcome {
    /// The server answered.
    Done {
        result: Result<ToolOutput, ToolError>,
        oom_kills: u64,
    },
    /// The container or the stream went away first.
    Lost(String),
}

pub(crate) struct Conn {
    engine: usize,
    id: String,
    backend: Arc<dyn Backend>,
    tx: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    shared: Arc<Shared>,
    grace: Duration,
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A call waiting for its answer, and where its progress reports go.
struct Waiting {
    answer: oneshot::Sender<Outcome>,
    progress: Option<ProgressSink>,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<HashMap<u64, Waiting>>,
    cancelling: Mutex<HashSet<u64>>,
    ready: Mutex<Option<oneshot::Sender<Result<(), String>>>>,
    next: AtomicU64,
    dead: AtomicBool,
    /// Set by [`Conn::close`]: the end of the stream is expected, not a fault.
    closing: AtomicBool,
    /// The session's egress, served here for the proxy inside the container.
    egress: Option<Arc<jianmu_egress::Egress>>,
    /// The proxy's connections inside, carried as streams.
    streams: Option<Arc<crate::tunnel::Streams>>,
}

impl Conn {
    pub(crate) fn spawn(
        engine: usize,
        backend: Arc<dyn Backend>,
        id: String,
        (input, output): (Input, Output),
        memory_mib: u64,
        grace: Duration,
        egress: Option<Arc<jianmu_egress::Egress>>,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        // A weak sender: the streams must not keep the container's stdin open.
        let weak = tx.downgrade();
        let streams = egress.as_ref().map(|_| {
            crate::tunnel::Streams::new(move |msg| {
                use crate::tunnel::Msg;
                let request = match msg {
                    Msg::Data(stream, bytes) => Request::Data {
                        stream,
                        data: crate::tunnel::encode(&bytes),
                    },
                    Msg::Ack(stream, bytes) => Request::Ack { stream, bytes },
                    Msg::Close(stream) => Request::Close { stream },
                    Msg::Reset(stream) => Request::Reset { stream },
                };
                if let Some(tx) = weak.upgrade() {
                    let _ = tx.send(to_line(&request));
                }
            })
        });
        let shared = Arc::new(Shared {
            egress,
            streams,
            ..Shared::default()
        });
        tokio::spawn(write_lines(input, rx));
        let reader = tokio::spawn(read_loop(
            Arc::clone(&backend),
            id.clone(),
            output,
            Arc::clone(&shared),
            memory_mib,
        ));
        Arc::new(Self {
            engine,
            id,
            backend,
            tx: Mutex::new(Some(tx)),
            shared,
            grace,
            reader: Mutex::new(Some(reader)),
        })
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Where the server runs.
    pub(crate) fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The index of the engine the container runs on.
    pub(crate) fn engine(&self) -> usize {
        self.engine
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::Acquire)
    }

    fn send(&self, request: &Request) {
        if let Some(tx) = lock(&self.tx).as_ref() {
            let _ = tx.send(to_line(request));
        }
    }

    /// Sends `init`; [`Conn::wait_ready`] waits for the answer.
    pub(crate) fn send_init(
        &self,
        config: &ToolConfig,
        warm: bool,
        egress: Option<super::wire::EgressInit>,
    ) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        *lock(&self.shared.ready) = Some(tx);
        self.send(&Request::Init {
            config: config.clone(),
            warm,
            egress,
        });
        rx
    }

    /// Waits for the server's `ready`.
    pub(crate) async fn wait_ready(
        &self,
        ready: oneshot::Receiver<Result<(), String>>,
    ) -> Result<(), String> {
        match tokio::time::timeout(Duration::from_secs(60), ready).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("the sandbox container stopped before it was ready".into()),
            Err(_) => Err("the sandbox server did not start within 60 s".into()),
        }
    }

    /// Runs one call; dropping the future cancels it inside the container.
    pub(crate) async fn call(&self, tool: &str, args: Value, cx: &CallContext) -> Outcome {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            // Checked under the lock the reader drains with, so no call waits forever.
            if self.is_dead() {
                return Outcome::Lost("the sandbox container has stopped".into());
            }
            pending.insert(
                id,
                Waiting {
                    answer: tx,
                    progress: cx.progress_sink().cloned(),
                },
            );
        }
        let mut guard = CancelOnDrop {
            conn: self,
            id,
            armed: true,
        };
        self.send(&Request::Call {
            id,
            tool: tool.to_owned(),
            args,
            call_id: cx.call_id().to_owned(),
            context: cx.event_context().cloned(),
            progress: cx.wants_progress(),
        });
        let outcome = rx
            .await
            .unwrap_or_else(|_| Outcome::Lost("the sandbox connection closed".into()));
        guard.armed = false;
        outcome
    }

    /// Stops call `id` inside the container; if the container does not confirm within
    /// the grace period, kills it (the next call gets a fresh one).
    fn cancel(&self, id: u64) {
        if lock(&self.shared.pending).remove(&id).is_none() {
            return;
        }
        lock(&self.shared.cancelling).insert(id);
        self.send(&Request::Cancel { id });
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        let backend = Arc::clone(&self.backend);
        let container = self.id.clone();
        let grace = self.grace;
        rt.spawn(async move {
            tokio::time::sleep(grace).await;
            if lock(&shared.cancelling).contains(&id) && !shared.dead.load(Ordering::Acquire) {
                tracing::warn!(
                    container = container.as_str(),
                    "a cancelled call did not stop; killing the sandbox container"
                );
                backend.kill(&container).await;
            }
        });
    }

    /// Kills and removes the container now.
    pub(crate) async fn remove(&self) {
        self.backend.remove(&self.id).await;
    }

    /// Closes the server's stdin so it exits, and waits until the reader has removed
    /// the stopped container; kills it if that takes longer than `patience`.
    pub(crate) async fn close(&self, patience: Duration) {
        self.shared.closing.store(true, Ordering::Release);
        drop(lock(&self.tx).take());
        let reader = lock(&self.reader).take();
        if let Some(reader) = reader
            && tokio::time::timeout(patience, reader).await.is_err()
        {
            self.remove().await;
        }
    }
}

struct CancelOnDrop<'a> {
    conn: &'a Conn,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.id);
        }
    }
}

async fn read_loop(
    backend: Arc<dyn Backend>,
    id: String,
    mut output: Output,
    shared: Arc<Shared>,
    memory_mib: u64,
) {
    let mut buf = Vec::new();
    let mut stderr_tail: Vec<u8> = Vec::new();
    let mut broke = None;
    while let Some(item) = output.next().await {
        match item {
            Ok(Chunk::Stdout(message)) => {
                // Only the new bytes can hold a newline: a long reply arriving in
                // many chunks is scanned once, not once per chunk.
                let mut from = buf.len();
                buf.extend_from_slice(&message);
                while let Some(at) = buf[from..].iter().position(|&b| b == b'\n') {
                    let end = from + at;
                    dispatch(&shared, &buf[..end]);
                    buf.drain(..=end);
                    from = 0;
                }
            }
            Ok(Chunk::Stderr(message)) => {
                stderr_tail.extend_from_slice(&message);
                if stderr_tail.len() > 4096 {
                    stderr_tail.drain(..stderr_tail.len() - 4096);
                }
            }
            Err(e) => {
                broke = Some(e);
                break;
            }
        }
    }
    drop(output);
    let reason = if shared.closing.load(Ordering::Acquire) {
        "the sandbox was shut down".to_owned()
    } else {
        death_reason(backend.as_ref(), &id, broke, &stderr_tail, memory_mib).await
    };
    {
        let mut pending = lock(&shared.pending);
        shared.dead.store(true, Ordering::Release);
        for (_, waiting) in pending.drain() {
            let _ = waiting.answer.send(Outcome::Lost(reason.clone()));
        }
    }
    if let Some(tx) = lock(&shared.ready).take() {
        let _ = tx.send(Err(reason));
    }
    backend.remove(&id).await;
}

fn dispatch(shared: &Shared, line: &[u8]) {
    let reply = match serde_json::from_slice::<Reply>(line) {
        Ok(reply) => reply,
        Err(e) => {
            tracing::warn!("unreadable line from the sandbox server: {e}");
            return;
        }
    };
    match reply {
        Reply::Ready { version } => {
            if version != env!("CARGO_PKG_VERSION") {
                tracing::warn!(
                    image = version.as_str(),
                    host = env!("CARGO_PKG_VERSION"),
                    "the sandbox image runs another version of jianmu; rebuild it with \
                     `jianmu sandbox build-image`"
                );
            }
            if let Some(tx) = lock(&shared.ready).take() {
                let _ = tx.send(Ok(()));
            }
        }
        Reply::InitFailed { message } => {
            if let Some(tx) = lock(&shared.ready).take() {
                let _ = tx.send(Err(format!(
                    "the sandbox server could not start its tools: {message}"
                )));
            }
        }
        Reply::Progress { id, progress } => {
            // Called outside the lock: a sink may take its time.
            let sink = lock(&shared.pending)
                .get(&id)
                .and_then(|w| w.progress.clone());
            if let Some(sink) = sink {
                sink(&progress);
            }
        }
        Reply::Open { stream } => {
            if let (Some(streams), Some(egress)) = (&shared.streams, &shared.egress) {
                if streams.len() >= crate::tunnel::MAX_STREAMS {
                    streams.refuse(stream);
                    return;
                }
                let (ours, theirs) = tokio::io::duplex(64 * 1024);
                if !streams.attach(stream, theirs) {
                    return;
                }
                match egress.serve(ours) {
                    Ok(served) => {
                        tokio::spawn(served);
                    }
                    Err(e) => tracing::warn!("cannot serve the sandbox's egress: {e}"),
                }
            }
        }
        Reply::Data { stream, data } => {
            if let (Some(streams), Some(bytes)) = (&shared.streams, crate::tunnel::decode(&data)) {
                streams.data(stream, bytes);
            }
        }
        Reply::Ack { stream, bytes } => {
            if let Some(streams) = &shared.streams {
                streams.ack(stream, bytes);
            }
        }
        Reply::Close { stream } => {
            if let Some(streams) = &shared.streams {
                streams.close(stream);
            }
        }
        Reply::Reset { stream } => {
            if let Some(streams) = &shared.streams {
                streams.reset(stream);
            }
        }
        Reply::Done {
            id,
            result,
            oom_kills,
        } => {
            let waiting = lock(&shared.pending).remove(&id);
            match waiting {
                Some(waiting) => {
                    let _ = waiting.answer.send(Outcome::Done { result, oom_kills });
                }
                None => {
                    lock(&shared.cancelling).remove(&id);
                }
            }
        }
    }
}

/// Why the stream ended, in words for the model and the operator.
async fn death_reason(
    backend: &dyn Backend,
    id: &str,
    broke: Option<String>,
    stderr_tail: &[u8],
    memory_mib: u64,
) -> String {
    let short = &id[..id.len().min(12)];
    let stderr = String::from_utf8_lossy(stderr_tail);
    let stderr = stderr.trim();
    let said = if stderr.is_empty() {
        String::new()
    } else {
        format!("; it printed: {stderr}")
    };
    let code = match backend.ended(id).await {
        Ended::Unknown(e) => {
            return format!(
                "lost the sandbox container {short} (was the Docker daemon restarted?): {e}"
            );
        }
        Ended::Lost(why) => {
            return format!("the sandbox was lost: {why}; the next call starts a fresh one");
        }
        Ended::OutOfMemory => {
            return format!(
                "the sandbox container {short} was killed for exceeding its memory limit of \
                 {memory_mib} MiB; the next call starts a fresh one"
            );
        }
        Ended::Running => {
            let why = broke.unwrap_or_else(|| "the stream closed".into());
            return format!("the connection to the sandbox container {short} broke: {why}");
        }
        Ended::Exited(code) => code,
    };
    let how = match code {
        137 => "was killed (SIGKILL)".to_owned(),
        143 => "was stopped (SIGTERM)".to_owned(),
        c => format!("exited with code {c}"),
    };
    format!("the sandbox container {short} {how}{said}; the next call starts a fresh one")
}
