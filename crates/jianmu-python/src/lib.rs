//! The native half of the `jianmu_tools` Python package (`jianmu_tools._native`).
//!
//! The Python half (`python/jianmu_tools`) keeps the documented Python API (`Tool`,
//! `@tool`, `ToolSet`, `BuiltinToolProvider`, the sandboxes and the runner); this
//! module gives it what is native: the specs of the built-in tools, their aliases, and
//! a `NativeSession` that calls them, locally or in a Docker sandbox. Values cross
//! as JSON text, so no Python object is read without the GIL. Calls run on one shared
//! tokio runtime with the GIL released: a blocking `NativeSession::call`, and
//! `NativeSession::start`, which answers through a callback so that `async execute`
//! never holds the event loop; cancelling a started call drops it, which ends what it
//! started.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use jianmu_runtime::{Backend, DockerSettings, Session, SessionSettings};
use jianmu_tool_core::{ToolConfig, ToolError, ToolOutput};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;

/// The runtime every call of every session runs on: two workers, as a tool call
/// mostly waits (on a process, a file, the network).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("jianmu-tools")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the tool runtime: {e}")))
}

/// Set once the interpreter is exiting: answers are no longer handed to Python.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Runtime threads inside (or about to enter) Python with an answer.
static DELIVERING: AtomicUsize = AtomicUsize::new(0);

/// Hands `result` to `done` from a runtime thread. Python ends any thread that takes
/// the GIL while the interpreter finalizes, which a Rust thread does not survive, so
/// once [`stop_callbacks`] has run no answer enters Python.
fn deliver(done: Py<PyAny>, result: Answer) {
    DELIVERING.fetch_add(1, Ordering::SeqCst);
    if !STOPPING.load(Ordering::SeqCst) {
        Python::attach(|py| {
            if let Err(e) = done.call1(py, (result,)) {
                // The callback is the package's own; a failure is a bug to show.
                e.print(py);
            }
            drop(done);
        });
    }
    DELIVERING.fetch_sub(1, Ordering::SeqCst);
}

/// Called at interpreter exit, before finalization: no answer is handed to Python
/// after this returns. Waits (without the GIL, at most 5 s) for those being handed
/// over now.
#[pyfunction]
fn stop_callbacks(py: Python<'_>) {
    STOPPING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while DELIVERING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Every built-in tool compiled in, as a JSON array of specs (`name`, `description`,
/// `input_schema`, `output_schema`, `parallel_safe`, `effect_tags`), sorted by name.
#[pyfunction]
fn specs() -> PyResult<String> {
    let config = ToolConfig::new(std::env::temp_dir());
    let specs = jianmu_runtime::tool_specs(&config).map_err(|e| value_error(&e))?;
    serde_json::to_string(&specs).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The aliases, as `(alias, canonical name)` pairs.
#[pyfunction]
fn aliases() -> Vec<(&'static str, &'static str)> {
    jianmu_provider::ALIASES.to_vec()
}

/// The canonical name of `name` (itself when it is not an alias).
#[pyfunction]
fn canonical_name(name: &str) -> String {
    jianmu_provider::canonical_tool_name(name).to_owned()
}

/// A session: the built-in tools with their state (interpreters, shell sessions,
/// background jobs), confined to one workspace, calling locally or in a Docker
/// container of its own. Closing it (or dropping it) ends everything its calls
/// started.
#[pyclass(module = "jianmu_tools._native", frozen)]
struct NativeSession {
    session: Arc<Session>,
}

impl std::fmt::Debug for NativeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSession")
            .field("workspace", &self.session.workspace())
            .finish_non_exhaustive()
    }
}

#[pymethods]
impl NativeSession {
    /// Opens a session in `workspace`. `settings` is a JSON object of tool settings
    /// (`{"read_file": {"max_file_size": 1024}}`); `docker` a JSON object of Docker
    /// settings (`{"image": "..."}`), or `None` for local calls; `timeout` a per-call
    /// limit in seconds; `allow_hosts` the hosts the network tools may reach although
    /// private; `checkpoints` a JSON object of checkpoint settings (`[checkpoints]`:
    /// `{"enabled": false}`, `{"dir": ...}`), or `None` for the defaults.
    #[new]
    #[pyo3(signature = (workspace, settings = None, docker = None, timeout = None, allow_hosts = Vec::new(), checkpoints = None))]
    fn new(
        py: Python<'_>,
        workspace: std::path::PathBuf,
        settings: Option<&str>,
        docker: Option<&str>,
        timeout: Option<f64>,
        allow_hosts: Vec<String>,
        checkpoints: Option<&str>,
    ) -> PyResult<Self> {
        let mut config = ToolConfig::new(&workspace).with_allow_hosts(allow_hosts);
        if let Some(settings) = settings {
            let settings: serde_json::Map<String, Value> = serde_json::from_str(settings)
                .map_err(|e| PyValueError::new_err(format!("tool settings: {e}")))?;
            for (tool, value) in settings {
                let tool = jianmu_provider::canonical_tool_name(&tool).to_owned();
                config = config.with_settings(tool, value);
            }
        }
        let mut session_settings = SessionSettings::new(config);
        if let Some(docker) = docker {
            let docker: DockerSettings = serde_json::from_str(docker)
                .map_err(|e| PyValueError::new_err(format!("Docker settings: {e}")))?;
            session_settings.backend = Backend::Docker(Box::new(docker));
        }
        if let Some(checkpoints) = checkpoints {
            session_settings.checkpoints = serde_json::from_str(checkpoints)
                .map_err(|e| PyValueError::new_err(format!("checkpoint settings: {e}")))?;
        }
        if let Some(secs) = timeout {
            let limit = Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "timeout must be a positive number of seconds, not {secs}"
                    ))
                })?;
            session_settings.timeout = Some(limit);
        }
        let rt = runtime()?;
        // Opening a Docker session talks to the engine: not under the GIL.
        let session = py.detach(|| {
            let _entered = rt.enter();
            Session::open(session_settings)
        });
        let session = session
            .map_err(|e| PyRuntimeError::new_err(jianmu_tool_core::error_chain(&e).to_string()))?;
        Ok(Self {
            session: Arc::new(session),
        })
    }

    /// Marks the start of a turn (a user's message): the next call that changes files
    /// takes a checkpoint first.
    fn begin_turn(&self) {
        self.session.begin_turn();
    }

    /// The folder the tools work in.
    #[getter]
    fn workspace(&self) -> std::path::PathBuf {
        self.session.workspace().to_owned()
    }

    /// Finds `name` (a name or alias) and builds it, so that settings it refuses are
    /// reported now rather than at its first call.
    fn check(&self, name: &str) -> PyResult<()> {
        let _entered = runtime()?.enter();
        self.session.check(name).map_err(|e| value_error(&e))
    }

    /// The spec of `name` (a name or alias) as this session's settings make it, as
    /// JSON text.
    fn spec(&self, name: &str) -> PyResult<String> {
        let spec = self.session.spec(name).map_err(|e| value_error(&e))?;
        serde_json::to_string(&spec).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Calls `name` with `args` (JSON text) and waits, without the GIL; arguments that
    /// are not JSON are refused like any invalid arguments. Returns
    /// `(ok, text, structured (`NativeJson`) or None, [(mime type, base64)], error kind)`.
    fn call(&self, py: Python<'_>, name: &str, args: &str) -> PyResult<Answer> {
        let args = match parse_args(name, args) {
            Ok(args) => args,
            Err(refused) => return Ok(refused),
        };
        let rt = runtime()?;
        let session = Arc::clone(&self.session);
        Ok(py.detach(|| rt.block_on(async move { answer(session.call(name, args).await) })))
    }

    /// Starts calling `name` with `args` (JSON text). A call that can answer at once
    /// (nothing to wait for: `calculator`) returns `(answer, None)`; any other returns
    /// `(None, call)` at once, and `done` is called (from another thread) with the
    /// answer, as [`NativeSession::call`] returns it. Cancelling the call drops it
    /// (ending what it started), and `done` is then not called.
    fn start(
        &self,
        py: Python<'_>,
        name: &str,
        args: &str,
        done: Py<PyAny>,
    ) -> PyResult<(Option<Answer>, Option<NativeCall>)> {
        let args = match parse_args(name, args) {
            Ok(args) => args,
            Err(refused) => return Ok((Some(refused), None)),
        };
        let session = Arc::clone(&self.session);
        let name = name.to_owned();
        let rt = runtime()?;
        let mut call: Pin<Box<dyn Future<Output = Answer> + Send>> =
            Box::pin(async move { answer(session.call(&name, args).await) });
        // One poll here, without the GIL: work that waits (files, processes, the
        // network) is handed to the runtime's threads and the poll returns at once.
        let first = py.detach(|| {
            let _entered = rt.enter();
            let mut cx = Context::from_waker(Waker::noop());
            match call.as_mut().poll(&mut cx) {
                Poll::Ready(answer) => Some(answer),
                Poll::Pending => None,
            }
        });
        if let Some(answer) = first {
            return Ok((Some(answer), None));
        }
        // The runtime polls the task once it is spawned, with its own waker.
        let task = rt.spawn(async move {
            let result = call.await;
            deliver(done, result);
        });
        Ok((
            None,
            Some(NativeCall {
                abort: task.abort_handle(),
            }),
        ))
    }

    /// Closes the session: ends every process, job and interpreter its calls started
    /// and removes its container (bringing a copied workspace back first). Returns
    /// whether everything came back, and the report: what came back and each change
    /// that did not, with why. Closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<(bool, String)> {
        let rt = runtime()?;
        let session = Arc::clone(&self.session);
        Ok(py.detach(|| {
            rt.block_on(async move {
                let closed = session.close().await;
                (closed.is_complete(), closed.to_string())
            })
        }))
    }

    /// Whether the session is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.session.is_closed()
    }
}

impl Drop for NativeSession {
    fn drop(&mut self) {
        // A session dropped open is closed on the runtime, in the background.
        if !self.session.is_closed()
            && let Ok(rt) = runtime()
        {
            let session = Arc::clone(&self.session);
            rt.spawn(async move {
                let closed = session.close().await;
                if !closed.is_complete() {
                    // Nobody holds the session to be told: the operator is.
                    eprintln!("jianmu_tools: a session closed when dropped: {closed}");
                }
            });
        }
    }
}

/// A call started by [`NativeSession::start`].
#[pyclass(module = "jianmu_tools._native", frozen)]
#[derive(Debug)]
struct NativeCall {
    abort: tokio::task::AbortHandle,
}

#[pymethods]
impl NativeCall {
    /// Stops the call: its future is dropped, which ends the processes it started.
    fn cancel(&self) {
        self.abort.abort();
    }
}

/// `(ok, text, structured JSON, images, error kind)`.
type Answer = (
    bool,
    String,
    Option<NativeJson>,
    Vec<(String, String)>,
    &'static str,
);

/// The structured form of an answer, made into JSON text only when Python asks for it
/// (most callers read the text alone).
#[pyclass(module = "jianmu_tools._native", frozen)]
#[derive(Debug)]
struct NativeJson {
    value: Value,
}

#[pymethods]
impl NativeJson {
    /// The value as JSON text.
    fn text(&self) -> String {
        self.value.to_string()
    }
}

fn answer(result: Result<ToolOutput, ToolError>) -> Answer {
    match result {
        Ok(out) => (
            true,
            out.text,
            out.structured.map(|value| NativeJson { value }),
            out.images
                .into_iter()
                .map(|i| (i.mime_type, i.base64))
                .collect(),
            "",
        ),
        Err(e) => (
            false,
            jianmu_tool_core::error_chain(&e),
            None,
            Vec::new(),
            kind(&e),
        ),
    }
}

/// The kind of a failure, as the Python `ToolError.kind` names it.
fn kind(error: &ToolError) -> &'static str {
    match error {
        ToolError::InvalidArguments { .. } => "invalid_arguments",
        ToolError::Timeout { .. } => "timeout",
        ToolError::Cancelled { .. } => "cancelled",
        ToolError::UnknownTool { .. } => "unknown_tool",
        ToolError::NotCompiled { .. } => "not_compiled",
        ToolError::Denied { .. } => "denied",
        ToolError::Config { .. } => "config",
        ToolError::Runner { .. } => "runner",
        _ => "failed",
    }
}

/// The arguments, or the answer that refuses them (as a schema violation would be).
fn parse_args(name: &str, args: &str) -> Result<Value, Answer> {
    serde_json::from_str(args).map_err(|e| {
        answer(Err(ToolError::InvalidArguments {
            tool: name.to_owned(),
            violations: vec![jianmu_tool_core::Violation {
                pointer: String::new(),
                message: format!("not JSON: {e}"),
            }],
        }))
    })
}

fn value_error(error: &ToolError) -> PyErr {
    PyValueError::new_err(jianmu_tool_core::error_chain(error))
}

/// `jianmu_tools._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(specs, m)?)?;
    m.add_function(wrap_pyfunction!(aliases, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_name, m)?)?;
    m.add_function(wrap_pyfunction!(stop_callbacks, m)?)?;
    m.add_class::<NativeSession>()?;
    m.add_class::<NativeCall>()?;
    m.add_class::<NativeJson>()?;
    Ok(())
}
