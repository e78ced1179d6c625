//! One language server: a supervised child speaking JSON-RPC with `Content-Length`
//! framing on its standard streams. A reader task answers what the server asks (every
//! request gets a reply), routes replies to their callers, and keeps the diagnostics
//! it publishes; every message is bounded before it is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_process::{Jail, Spec, Stream, Supervised};
use jianmu_tool_core::ToolError;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::settings::ServerSettings;

/// Most diagnostics kept for one file.
const MAX_DIAGNOSTICS: usize = 1000;

/// What the server last published for one document.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    /// The document version it is for, when the server says.
    pub(crate) version: Option<i64>,
    /// Its place in the order of all publications, from 1.
    pub(crate) seq: u64,
    pub(crate) diagnostics: Vec<Value>,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<Value, String>>>>,
    /// By the file's path, decoded from the URI the server used (servers spell
    /// percent-escapes differently).
    published: Mutex<HashMap<PathBuf, Published>>,
    seq: AtomicU64,
    changed: Notify,
    alive: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A document as the server has it.
struct Doc {
    version: i64,
    text: String,
    /// The publication count when this version was sent.
    sent_at: u64,
    /// When it was last synced, in syncs: the least recent is closed first.
    used: u64,
}

/// Most documents kept open on one server, and most bytes of their text: past either,
/// the least recently used is closed.
const MAX_OPEN: usize = 100;
const MAX_OPEN_BYTES: usize = 64 << 20;

/// A running language server.
pub(crate) struct Server {
    pub(crate) command: String,
    /// What goes to the server, in order: the session's messages and the answers to
    /// the server's requests.
    outgoing: mpsc::Sender<Outgoing>,
    shared: Arc<Shared>,
    next_id: AtomicI64,
    pub(crate) capabilities: Value,
    docs: tokio::sync::Mutex<HashMap<PathBuf, Doc>>,
    /// Syncs so far, for ordering documents by use.
    syncs: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
    /// Dropping it ends the server and everything it started.
    _process: Supervised,
    used: Mutex<Instant>,
    timeout: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Whether `program` can be run: a path that exists, or a name found on PATH.
pub(crate) fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

pub(crate) fn uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for b in path.as_os_str().as_encoded_bytes() {
        match *b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                out.push(*b as char);
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// The path of a `file://` URI.
pub(crate) fn path_of(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(String::from_utf8(out).ok()?))
}

impl Server {
    /// Starts `settings`' command for the workspace `root` and initializes it.
    pub(crate) async fn start(
        language: &str,
        settings: &ServerSettings,
        root: &Path,
        jail: &Jail,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Server, ToolError> {
        let Some(program) = settings.command.first() else {
            return Err(ToolError::failed(format!(
                "the language server for {language} has an empty `command`"
            )));
        };
        if !on_path(program) {
            return Err(ToolError::failed(format!(
                "no language server for {language} here: `{program}` is not installed (not on PATH); {}, or set `command` in [tools.lsp.servers.{language}]",
                settings.install
            )));
        }
        let mut spec = Spec::new(program);
        for arg in &settings.command[1..] {
            spec.arg(arg);
        }
        spec.current_dir(root)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .stdin(Stream::Piped)
            .stdout(Stream::Piped);
        if let Some(home) = std::env::var_os("HOME") {
            spec.env("HOME", home);
        }
        if let Some(tmp) = jail.tmp() {
            spec.env("TMPDIR", tmp).env("XDG_CACHE_HOME", tmp);
        }
        let mut process = jail.spawn(&spec).map_err(|e| {
            ToolError::failed(format!("cannot start the language server `{program}`: {e}"))
        })?;
        let (Some(input), Some(output)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(ToolError::failed("the language server has no pipes"));
        };
        let (outgoing, queue) = mpsc::channel::<Outgoing>(MAX_QUEUED);
        let shared = Arc::new(Shared::default());
        shared.alive.store(true, Ordering::Relaxed);
        let reader = tokio::spawn(read_loop(
            BufReader::new(output),
            input,
            queue,
            outgoing.clone(),
            Arc::clone(&shared),
            max_message,
        ));
        let mut server = Server {
            // Its name, as messages show it.
            command: Path::new(program)
                .file_name()
                .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned()),
            outgoing,
            shared,
            next_id: AtomicI64::new(1),
            capabilities: Value::Null,
            docs: tokio::sync::Mutex::default(),
            syncs: AtomicU64::new(0),
            reader,
            _process: process,
            used: Mutex::new(Instant::now()),
            timeout,
        };
        let root_uri = uri(root);
        let name = root.file_name().map_or_else(
            || "workspace".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        let init = server
            .request(
                "initialize",
                json!({
                    "processId": null,
                    "clientInfo": {"name": "jianmu"},
                    "rootUri": root_uri,
                    "rootPath": root,
                    "workspaceFolders": [{"uri": root_uri, "name": name}],
                    "capabilities": {
                        "general": {"positionEncodings": ["utf-16"]},
                        "workspace": {"workspaceFolders": true, "configuration": true, "symbol": {}},
                        "textDocument": {
                            "synchronization": {"didSave": false},
                            "publishDiagnostics": {"versionSupport": true},
                            "diagnostic": {},
                            "hover": {"contentFormat": ["markdown", "plaintext"]},
                            "definition": {"linkSupport": true},
                            "references": {},
                            "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                        },
                        "window": {"workDoneProgress": false},
                    },
                    "initializationOptions": settings.initialization_options,
                }),
            )
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "the language server `{program}` for {language} did not start: {e}"
                ))
            })?;
        server.capabilities = init.get("capabilities").cloned().unwrap_or(Value::Null);
        server.notify("initialized", json!({})).await?;
        Ok(server)
    }

    pub(crate) fn alive(&self) -> bool {
        self.shared.alive.load(Ordering::Relaxed)
    }

    pub(crate) fn idle_for(&self) -> Duration {
        lock(&self.used).elapsed()
    }

    fn touch(&self) {
        *lock(&self.used) = Instant::now();
    }

    /// Whether the server offers `capability` (a key of its capabilities, present
    /// and not `false`).
    pub(crate) fn offers(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
    }

    async fn send(&self, message: &Value) -> Result<(), ToolError> {
        let body = message.to_string();
        let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        // Written in turn with the answers queued before it; the wait counts too.
        let (done, written) = oneshot::channel();
        let write = async {
            self.outgoing.send((framed, Some(done))).await.ok()?;
            written.await.ok()
        };
        match tokio::time::timeout(self.timeout, write).await {
            Ok(Some(())) => Ok(()),
            _ => Err(ToolError::failed(format!(
                "the language server `{}` stopped reading its input",
                self.command
            ))),
        }
    }

    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<(), ToolError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// Sends a request and waits for its answer, at most the time limit.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, ToolError> {
        self.touch();
        if !self.alive() {
            return Err(ToolError::failed(format!(
                "the language server `{}` has exited",
                self.command
            )));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(message))) => Err(ToolError::failed(format!(
                "the language server `{}` answered `{method}` with an error: {}",
                self.command,
                jianmu_tool_core::shorten(&message, 500)
            ))),
            Ok(Err(_)) => Err(ToolError::failed(format!(
                "the language server `{}` exited before answering `{method}`",
                self.command
            ))),
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                let _ = self.notify("$/cancelRequest", json!({"id": id})).await;
                Err(ToolError::failed(format!(
                    "the language server `{}` did not answer `{method}` within {} s (the limit is `request_timeout_secs` in [tools.lsp])",
                    self.command,
                    self.timeout.as_secs_f64()
                )))
            }
        }
    }

    /// Makes the server's copy of `path` (absolute) hold `text`: opened, or changed to
    /// it. Answers whether anything was sent.
    pub(crate) async fn sync(
        &self,
        path: &Path,
        text: &str,
        language_id: &str,
    ) -> Result<bool, ToolError> {
        let mut docs = self.docs.lock().await;
        let uri = uri(path);
        let seq = self.shared.seq.load(Ordering::Relaxed);
        let used = self.syncs.fetch_add(1, Ordering::Relaxed);
        match docs.get_mut(path) {
            Some(doc) if doc.text == text => {
                doc.used = used;
                Ok(false)
            }
            Some(doc) => {
                doc.used = used;
                doc.version += 1;
                doc.text = text.to_owned();
                doc.sent_at = seq;
                let version = doc.version;
                self.notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
                )
                .await?;
                Ok(true)
            }
            None => {
                self.close_least_used(&mut docs, text.len()).await?;
                docs.insert(
                    path.to_owned(),
                    Doc {
                        version: 1,
                        text: text.to_owned(),
                        sent_at: seq,
                        used,
                    },
                );
                self.notify(
                    "textDocument/didOpen",
                    json!({"textDocument": {"uri": uri, "languageId": language_id, "version": 1, "text": text}}),
                )
                .await?;
                Ok(true)
            }
        }
    }

    /// Closes the least recently used documents until one of `adding` bytes fits.
    async fn close_least_used(
        &self,
        docs: &mut HashMap<PathBuf, Doc>,
        adding: usize,
    ) -> Result<(), ToolError> {
        loop {
            let bytes: usize = docs.values().map(|d| d.text.len()).sum();
            if docs.is_empty() || (docs.len() < MAX_OPEN && bytes + adding <= MAX_OPEN_BYTES) {
                return Ok(());
            }
            let Some(oldest) = docs
                .iter()
                .min_by_key(|(_, d)| d.used)
                .map(|(p, _)| p.clone())
            else {
                return Ok(());
            };
            docs.remove(&oldest);
            let uri = uri(&oldest);
            // Its publications go too: reopened, it starts again at version 1.
            lock(&self.shared.published).remove(&oldest);
            self.notify(
                "textDocument/didClose",
                json!({"textDocument": {"uri": uri}}),
            )
            .await?;
        }
    }

    /// The diagnostics of `path` (absolute) as the server has it now: pulled where the
    /// server offers that, otherwise the first publication after the document was last
    /// sent, waiting at most `wait`. `None` when none came in time.
    pub(crate) async fn diagnostics(
        &self,
        path: &Path,
        wait: Duration,
    ) -> Result<Option<Vec<Value>>, ToolError> {
        let uri = uri(path);
        if self.offers("diagnosticProvider") {
            let report = self
                .request(
                    "textDocument/diagnostic",
                    json!({"textDocument": {"uri": uri}}),
                )
                .await?;
            let items = report
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            return Ok(Some(items));
        }
        let (version, sent_at) = {
            let docs = self.docs.lock().await;
            match docs.get(path) {
                Some(doc) => (doc.version, doc.sent_at),
                None => return Ok(None),
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.shared.changed.notified();
            if let Some(p) = lock(&self.shared.published).get(path) {
                let current = match p.version {
                    Some(v) => v == version,
                    None => p.seq > sent_at,
                };
                if current {
                    return Ok(Some(p.diagnostics.clone()));
                }
            }
            if !self.alive() {
                return Err(ToolError::failed(format!(
                    "the language server `{}` has exited",
                    self.command
                )));
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(None);
            }
        }
    }

    /// Tells the server to shut down, then ends it (dropping it kills what is left).
    pub(crate) async fn shutdown(self) {
        if self.alive() {
            let quick = Duration::from_millis(500);
            let _ = tokio::time::timeout(quick, async {
                let _ = self.request("shutdown", Value::Null).await;
                let _ = self.notify("exit", Value::Null).await;
            })
            .await;
        }
    }
}

/// Reads one message: headers, then a body of at most `max` bytes.
async fn read_message(
    input: &mut BufReader<pipe::Receiver>,
    max: usize,
) -> Result<Vec<u8>, String> {
    let mut length = None;
    let mut headers = 0;
    loop {
        let mut line = Vec::new();
        let read = (&mut *input)
            .take(8192)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the server closed its output".into());
        }
        if !line.ends_with(b"\n") {
            return Err("a header line over 8 KiB".into());
        }
        headers += 1;
        if headers > 32 {
            return Err("too many header lines".into());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            break;
        }
        if let Some((key, value)) = text.split_once(':')
            && key.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let length = length.ok_or("a message without Content-Length")?;
    if length > max {
        return Err(format!(
            "a message of {length} bytes, over the limit of {max}"
        ));
    }
    let mut body = vec![0; length];
    input
        .read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    Ok(body)
}

/// A framed message for the server, and who waits for it to be written.
type Outgoing = (String, Option<oneshot::Sender<()>>);

/// Messages waiting for the server to read them; past this many, a server that sends
/// requests without reading is not answered.
const MAX_QUEUED: usize = 4096;

/// Reads what the server sends, as it comes, and writes what goes to it, in order:
/// replies go to the requests waiting for them, and the server's own requests are
/// answered through the outgoing queue, so that a server that does not read its input
/// never stops the reading (nor the session's requests past their time limit).
async fn read_loop(
    input: BufReader<pipe::Receiver>,
    mut pipe: pipe::Sender,
    mut queue: mpsc::Receiver<Outgoing>,
    answers: mpsc::Sender<Outgoing>,
    shared: Arc<Shared>,
    max: usize,
) {
    let writing = async move {
        while let Some((framed, done)) = queue.recv().await {
            if pipe.write_all(framed.as_bytes()).await.is_err() || pipe.flush().await.is_err() {
                break;
            }
            if let Some(done) = done {
                let _ = done.send(());
            }
        }
    };
    tokio::join!(read_messages(input, answers, shared, max), writing);
}

async fn read_messages(
    mut input: BufReader<pipe::Receiver>,
    answers: mpsc::Sender<Outgoing>,
    shared: Arc<Shared>,
    max: usize,
) {
    while let Ok(body) = read_message(&mut input, max).await {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            // A reply to one of ours.
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { continue };
                if let Some(tx) = lock(&shared.pending).remove(&id) {
                    let outcome = match message.get("error") {
                        Some(e) => Err(e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("unknown error")
                            .to_owned()),
                        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = tx.send(outcome);
                }
            }
            // A request from the server: every one is answered.
            (Some(method), Some(id)) => {
                let reply = match method {
                    "workspace/configuration" => {
                        let n = message
                            .pointer("/params/items")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len)
                            .min(1000);
                        json!({"jsonrpc": "2.0", "id": id, "result": vec![Value::Null; n]})
                    }
                    "client/registerCapability"
                    | "client/unregisterCapability"
                    | "window/workDoneProgress/create"
                    | "window/showMessageRequest"
                    | "workspace/diagnostic/refresh"
                    | "workspace/semanticTokens/refresh"
                    | "workspace/inlayHint/refresh"
                    | "workspace/codeLens/refresh" => {
                        json!({"jsonrpc": "2.0", "id": id, "result": null})
                    }
                    "workspace/workspaceFolders" => {
                        json!({"jsonrpc": "2.0", "id": id, "result": null})
                    }
                    "workspace/applyEdit" => {
                        json!({"jsonrpc": "2.0", "id": id, "result": {"applied": false, "failureReason": "edits are made with the file tools"}})
                    }
                    _ => {
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not supported by this client"}})
                    }
                };
                let body = reply.to_string();
                let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
                // A full queue: the server has not read thousands of answers.
                let _ = answers.try_send((framed, None));
            }
            (Some("textDocument/publishDiagnostics"), None) => {
                let Some(path) = message
                    .pointer("/params/uri")
                    .and_then(Value::as_str)
                    .and_then(path_of)
                else {
                    continue;
                };
                let mut diagnostics = message
                    .pointer("/params/diagnostics")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                diagnostics.truncate(MAX_DIAGNOSTICS);
                let seq = shared.seq.fetch_add(1, Ordering::Relaxed) + 1;
                let version = message.pointer("/params/version").and_then(Value::as_i64);
                let mut published = lock(&shared.published);
                // A server publishing for endless files is not followed past a bound.
                if published.len() >= 10_000 && !published.contains_key(&path) {
                    continue;
                }
                published.insert(
                    path,
                    Published {
                        version,
                        seq,
                        diagnostics,
                    },
                );
                drop(published);
                shared.changed.notify_waiters();
            }
            _ => {}
        }
    }
    shared.alive.store(false, Ordering::Relaxed);
    // Callers waiting for a reply learn that none will come.
    lock(&shared.pending).clear();
    shared.changed.notify_waiters();
}
