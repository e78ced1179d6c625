//! `serve`: the server loop inside a sandbox container (`jianmu serve`). It reads
//! [`Request`]s as JSON lines, runs each call on its own task through a [`ToolSet`]
//! (the one place names resolve), and writes [`Reply`]s as they finish; see
//! [`super::wire`]. The set is lazy, so a fresh container answers its first call
//! without building every tool; arguments come prepared by the host and are not
//! validated again, and each call keeps the host's call id.

use std::collections::HashMap;
use std::sync::Arc;

use jianmu_tool_core::{
    CallContext, Progress, ProgressSink, ToolConfig, ToolError, ToolOutput, ToolSet,
};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::wire::{GIVE, KEPT, REMOVE, Reply, Request, to_line, write_lines};
use crate::lock;

/// Serves calls on this process's stdin and stdout until stdin ends, with the tools
/// `tools` makes from the host's settings (as the container sees them): what
/// `jianmu serve` runs inside a sandbox container, with the built-in tools.
///
/// # Errors
/// Reading or writing failed, or the host's settings were refused.
pub fn serve_stdio(
    tools: impl Fn(ToolConfig) -> Result<ToolSet, jianmu_tool_core::ToolError> + Send + Sync + 'static,
) -> std::io::Result<()> {
    // Nothing started from here gains privileges (set-id programs), whatever the
    // engine was told: Swarm services before API 1.46 cannot ask for it.
    rustix::thread::set_no_new_privs(true)?;
    runtime()?.block_on(serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        move |config| tools(in_container(config)),
    ))
}

/// A runner's async runtime. Threads count against the container's pids limit: the
/// pools are small.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .enable_all()
        .build()
}

/// Inside the container, the container decides the network (its own switch) and owns
/// `/tmp` (a private tmpfs): the tools' local isolation keeps its supervisor and
/// Landlock but lets both through.
pub(crate) fn in_container(config: ToolConfig) -> ToolConfig {
    let config = with_isolation(config, &["bash", "python_repl"], |isolation| {
        isolation.insert("network".into(), true.into());
        push(isolation, "writable", "/tmp");
    });
    // Its commands' servers live on the container's loopback, which the host does not
    // reach.
    config.with_settings("expose_port", serde_json::json!({"in_container": true}))
}

/// `config` with `edit` applied to the `isolation` table of each of `tools`.
pub(crate) fn with_isolation(
    mut config: ToolConfig,
    tools: &[&str],
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
) -> ToolConfig {
    for &tool in tools {
        let mut settings = config
            .raw_settings(tool)
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        if let Some(isolation) = settings
            .as_object_mut()
            .map(|s| {
                s.entry("isolation")
                    .or_insert_with(|| serde_json::json!({}))
            })
            .and_then(serde_json::Value::as_object_mut)
        {
            edit(isolation);
        }
        config = config.with_settings(tool, settings);
    }
    config
}

/// Appends `value` to the list `key` of `table` (made if missing).
pub(crate) fn push(table: &mut serde_json::Map<String, serde_json::Value>, key: &str, value: &str) {
    if let Some(list) = table
        .entry(key)
        .or_insert_with(|| serde_json::json!([]))
        .as_array_mut()
    {
        list.push(value.into());
    }
}

/// Listens on the container's loopback as the session's proxy, sends each connection
/// to the host as a stream, and gives `bash` and `python_repl` the proxy's variables
/// (and the session's certificate authority, written to `/tmp`).
fn egress_inside(
    mut config: ToolConfig,
    egress: &super::wire::EgressInit,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    streams: &mut Option<Arc<crate::tunnel::Streams>>,
) -> std::io::Result<ToolConfig> {
    use crate::tunnel::{Msg, Streams, encode};
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let ca_file = match &egress.ca {
        Some(pem) => {
            let file = std::env::temp_dir().join(jianmu_egress::CA_FILE);
            jianmu_egress::write_ca(&file, pem)?;
            Some(file)
        }
        None => None,
    };
    let vars = jianmu_egress::proxy_env(&format!("http://127.0.0.1:{port}"), ca_file.as_deref());
    for tool in ["bash", "python_repl"] {
        let mut settings = config
            .raw_settings(tool)
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        if let Some(env) = settings.as_object_mut().and_then(|s| {
            s.entry("env")
                .or_insert_with(|| serde_json::json!({}))
                .as_object_mut()
        }) {
            for (k, v) in &vars {
                env.insert(k.clone(), v.clone().into());
            }
        }
        config = config.with_settings(tool, settings);
    }
    let open_tx = tx.clone();
    let tx = tx.clone();
    let table = Streams::new(move |msg| {
        let reply = match msg {
            Msg::Data(stream, bytes) => Reply::Data {
                stream,
                data: encode(&bytes),
            },
            Msg::Ack(stream, bytes) => Reply::Ack { stream, bytes },
            Msg::Close(stream) => Reply::Close { stream },
            Msg::Reset(stream) => Reply::Reset { stream },
        };
        let _ = tx.send(to_line(&reply));
    });
    *streams = Some(Arc::clone(&table));
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let weak = Arc::downgrade(&table);
    tokio::spawn(async move {
        let mut next = 0u64;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let Some(table) = weak.upgrade() else { return };
            if table.len() >= crate::tunnel::MAX_STREAMS {
                continue;
            }
            let _ = stream.set_nodelay(true);
            next += 1;
            let _ = open_tx.send(to_line(&Reply::Open { stream: next }));
            table.attach(next, stream);
        }
    });
    Ok(config)
}

/// Serves calls from `input` to `output` until `input` ends. `make_tools` gets the
/// tools' configuration from the host's [`Request::Init`] and returns the set calls
/// go through.
///
/// # Errors
/// Reading `input` or writing `output` failed, or the first line was not `init`.
pub(crate) async fn serve<R, W, F>(input: R, output: W, make_tools: F) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
    F: FnOnce(ToolConfig) -> Result<ToolSet, ToolError>,
{
    let mut lines = BufReader::new(input).lines();
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_lines(output, rx));

    let mut warm = false;
    let mut root = std::path::PathBuf::new();
    let mut kept: Option<Arc<jianmu_tool_core::Kept>> = None;
    let mut streams: Option<Arc<crate::tunnel::Streams>> = None;
    let tools = match lines.next_line().await? {
        None => return Ok(()),
        Some(line) => match serde_json::from_str::<Request>(&line) {
            Ok(Request::Init {
                config,
                warm: w,
                egress,
            }) => {
                warm = w;
                config.workspace().clone_into(&mut root);
                kept = Some(config.scope().get::<jianmu_tool_core::Kept>());
                match egress {
                    None => make_tools(config),
                    Some(egress) => match egress_inside(config, &egress, &tx, &mut streams) {
                        Ok(config) => make_tools(config),
                        Err(e) => Err(ToolError::failed(format!(
                            "cannot open the session's proxy inside the container: {e}"
                        ))),
                    },
                }
            }
            Ok(_) => Err(ToolError::failed("the first request must be `init`")),
            Err(e) => Err(ToolError::failed(format!("unreadable request: {e}"))),
        },
    };
    let tools = match tools {
        Ok(set) => Arc::new(set),
        Err(e) => {
            let _ = tx.send(to_line(&Reply::InitFailed {
                message: jianmu_tool_core::error_chain(&e),
            }));
            drop(tx);
            let _ = writer.await;
            return Err(std::io::Error::other(format!("init failed: {e}")));
        }
    };
    if warm {
        // Before `ready`, so a spare is handed out only once it is warm. A tool that
        // cannot be built fails its calls later, as it would lazily.
        for name in tools
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
        {
            // Handles are deferred: build each tool now (its isolation probed, its
            // jail prepared), not at its first call.
            if let Ok(handle) = tools.tool(&name) {
                let _ = handle.build_now();
            }
        }
    }
    let _ = tx.send(to_line(&Reply::Ready {
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }));

    let running: Arc<std::sync::Mutex<HashMap<u64, (AbortHandle, String)>>> = Arc::default();
    // Every way out stops what the calls still run (a broken connection too).
    let _stop = StopAll(Arc::clone(&running));
    loop {
        // A broken input is the end of input: the host is gone.
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(%e, "the host's input broke");
                break;
            }
        };
        let request = match serde_json::from_str::<Request>(&line) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("unreadable request: {e}");
                continue;
            }
        };
        match request {
            Request::Init { .. } => tracing::warn!("ignoring a second `init`"),
            Request::Data { stream, data } => {
                if let (Some(streams), Some(bytes)) = (&streams, crate::tunnel::decode(&data)) {
                    streams.data(stream, bytes);
                }
            }
            Request::Ack { stream, bytes } => {
                if let Some(streams) = &streams {
                    streams.ack(stream, bytes);
                }
            }
            Request::Close { stream } => {
                if let Some(streams) = &streams {
                    streams.close(stream);
                }
            }
            Request::Reset { stream } => {
                if let Some(streams) = &streams {
                    streams.reset(stream);
                }
            }
            Request::Cancel { id } => {
                // Dropping the tool's future kills what it started; the task's guard
                // confirms once that has happened (a task stuck in a blocking loop
                // never confirms, and the host then replaces the container).
                let handle = lock(&running).remove(&id);
                if let Some((handle, _)) = handle {
                    handle.abort();
                }
            }
            Request::Call {
                id,
                tool,
                args,
                call_id,
                context,
                progress,
            } => {
                let name = tool.clone();
                let tools = Arc::clone(&tools);
                let root = root.clone();
                let kept = kept.clone();
                let tx = tx.clone();
                let done = Arc::clone(&running);
                // Held across the spawn, so the task cannot finish before it is listed.
                let mut map = lock(&running);
                let task = tokio::spawn(async move {
                    let mut confirm = ConfirmCancel {
                        tx: tx.clone(),
                        id,
                        tool: tool.clone(),
                        armed: true,
                    };
                    let before = oom_kills();
                    // Calls come only from the host side of stdin, which validated
                    // the arguments against the same spec: the tool runs them as they
                    // are, under the host's call id.
                    let mut cx = CallContext::new();
                    if !call_id.is_empty() {
                        cx = cx.with_call_id(call_id);
                    }
                    if let Some(context) = context {
                        cx = cx.with_event_context(context);
                    }
                    // Reports go to the host as lines of their own, before the answer.
                    let sink: Option<ProgressSink> = progress.then(|| {
                        let tx = tx.clone();
                        Arc::new(move |progress: &Progress| {
                            let _ = tx.send(to_line(&Reply::Progress {
                                id,
                                progress: *progress,
                            }));
                        }) as ProgressSink
                    });
                    if let Some(sink) = sink {
                        cx = cx.with_progress(sink);
                    }
                    let result = if tool == KEPT || tool == GIVE {
                        kept_call(kept.as_deref(), &tool, args)
                    } else if tool == REMOVE {
                        tokio::task::spawn_blocking(move || remove_paths(&root, &args))
                            .await
                            .unwrap_or_else(|e| Err(ToolError::failed(e.to_string())))
                    } else {
                        match tools.tool(&tool) {
                            Ok(handle) => handle.run_prepared(args, &cx).await,
                            Err(e) => Err(e),
                        }
                    };
                    let oom = oom_kills().saturating_sub(before);
                    // A call cancelled while it was finishing is confirmed as cancelled.
                    if lock(&done).remove(&id).is_some() {
                        confirm.armed = false;
                        let _ = tx.send(to_line(&Reply::Done {
                            id,
                            result,
                            oom_kills: oom,
                        }));
                    }
                });
                map.insert(id, (task.abort_handle(), name));
            }
        }
    }
    for (_, (handle, _)) in lock(&running).drain() {
        handle.abort();
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}

/// Stops every call still running when dropped.
struct StopAll(Arc<std::sync::Mutex<HashMap<u64, (AbortHandle, String)>>>);

impl Drop for StopAll {
    fn drop(&mut self) {
        for (_, (handle, _)) in lock(&self.0).drain() {
            handle.abort();
        }
    }
}

/// The [`KEPT`] and [`GIVE`] calls.
fn kept_call(
    kept: Option<&jianmu_tool_core::Kept>,
    tool: &str,
    args: serde_json::Value,
) -> Result<ToolOutput, ToolError> {
    let kept = kept.ok_or_else(|| ToolError::failed("no session here yet"))?;
    if tool == KEPT {
        let state =
            serde_json::to_value(kept.state()).map_err(|e| ToolError::failed(e.to_string()))?;
        return Ok(ToolOutput::text("kept").with_structured(state));
    }
    let shells = serde_json::from_value(args.get("shells").cloned().unwrap_or_default())
        .map_err(|e| ToolError::failed(format!("`shells`: {e}")))?;
    kept.give_shells(shells);
    Ok(ToolOutput::text("given"))
}

/// The [`REMOVE`] call: each path of `args.paths` removed under `root` (a file, a link
/// or an empty folder; one already gone is no error), folders on the way opened
/// without following links. Fails naming those that could not be removed.
fn remove_paths(root: &std::path::Path, args: &serde_json::Value) -> Result<ToolOutput, ToolError> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use rustix::io::Errno;
    let paths = args
        .get("paths")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| ToolError::failed("`paths` must be a list"))?;
    let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = rustix::fs::open(root, folder, Mode::empty())
        .map_err(|e| ToolError::failed(format!("cannot open {}: {e}", root.display())))?;
    let remove = |rel: &str| -> Result<(), Errno> {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts
            .iter()
            .any(|c| c.is_empty() || *c == "." || *c == "..")
        {
            return Err(Errno::INVAL);
        }
        let (name, above) = parts.split_last().ok_or(Errno::INVAL)?;
        let mut here: Option<std::os::fd::OwnedFd> = None;
        for part in above {
            let at = here.as_ref().unwrap_or(&top);
            here = Some(rustix::fs::openat(at, *part, folder, Mode::empty())?);
        }
        let at = here.as_ref().unwrap_or(&top);
        match rustix::fs::unlinkat(at, *name, AtFlags::empty()) {
            Err(Errno::ISDIR | Errno::PERM) => rustix::fs::unlinkat(at, *name, AtFlags::REMOVEDIR),
            other => other,
        }
    };
    let mut failed = Vec::new();
    let mut removed = 0usize;
    for path in paths {
        let Some(path) = path.as_str() else {
            continue;
        };
        match remove(path) {
            Ok(()) => removed += 1,
            Err(Errno::NOENT) => {}
            Err(e) => failed.push(format!("{path}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(ToolOutput::text(format!("removed {removed} paths")))
    } else {
        failed.truncate(20);
        Err(ToolError::failed(format!(
            "not removed in the sandbox: {}",
            failed.join("; ")
        )))
    }
}

/// Answers a cancelled call once its future is gone: dropped by the abort, or finished
/// after the cancel came in.
struct ConfirmCancel {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    id: u64,
    tool: String,
    armed: bool,
}

impl Drop for ConfirmCancel {
    fn drop(&mut self) {
        if self.armed {
            let cancelled = ToolError::Cancelled {
                tool: std::mem::take(&mut self.tool),
            };
            let _ = self.tx.send(to_line(&Reply::Done {
                id: self.id,
                result: Err(cancelled),
                oom_kills: 0,
            }));
        }
    }
}

/// How many processes the kernel has OOM-killed in this cgroup (v2 `memory.events`,
/// else v1 `memory.oom_control`); 0 when neither is readable.
pub(crate) fn oom_kills() -> u64 {
    for path in [
        "/sys/fs/cgroup/memory.events",
        "/sys/fs/cgroup/memory/memory.oom_control",
    ] {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let count = text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == "oom_kill").then(|| v.trim().parse::<u64>().ok())?
        });
        if let Some(n) = count {
            return n;
        }
    }
    0
}

#[cfg(test)]
mod tests;
