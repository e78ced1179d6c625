//! Script tools: `rhai_repl`, an embedded Rhai engine with hard limits,
//! `python_repl` (alias `python_eval`), a real CPython in a persistent child process,
//! and `run_script`, a Rhai program that calls the session's other tools (through
//! [`jianmu_tool_core::Calls`], so inside a session only).
//!
//! Both keep state between calls of one tool instance (one MCP session, one agent run),
//! run one call at a time (`parallel_safe` is false) and declare `code:exec`.
//! `rhai_repl` cannot touch files, network or processes and its limits always hold
//! (operations, call depth, expression depth, sizes, wall-clock time, output).
//! `python_repl` is full Python under a process supervisor: its time limit or a cancel
//! really stops the code and everything it started, and where the kernel allows it is
//! isolated (writes only in the workspace and its `TMPDIR`, no network, no view of
//! other processes); it can still read what the `jianmu` process can read.
//!
//! Settings (`[tools.rhai_repl]`, `[tools.python_repl]`, `[tools.run_script]` in
//! `jianmu.toml`) are [`RhaiSettings`], [`PythonSettings`] and [`ScriptSettings`].
#![deny(missing_docs)]

use jianmu_tool_core::Tool as _;
use jianmu_tool_core::{ToolConfig, ToolError, ToolHandle};

mod python_repl;
mod rhai_repl;
mod run_script;

pub use python_repl::{PythonArgs, PythonRepl, PythonSettings, WithoutSession};
pub use rhai_repl::{RhaiArgs, RhaiRepl, RhaiSettings};
pub use run_script::{RunScript, ScriptArgs, ScriptSettings};

/// `text` cut to `max` characters, with the Python tools' truncation notice when cut
/// (docs/python-compat.md).
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match jianmu_tool_core::cut_chars(text, max) {
        (kept, 0) => kept.to_owned(),
        (kept, rest) => format!("{kept}\n... (output truncated: {rest} more characters)"),
    }
}

/// Characters of one answer a tool keeps when long outputs are saved: what is over
/// its `max_output` goes to the saved file, up to this.
pub(crate) const KEPT_FOR_SAVING: usize = 4 * 1024 * 1024;

/// `text` as an answer shows it: whole when it fits `max`, else its head and tail and
/// where the whole is saved (`dropped` characters after it were never kept); cut with
/// a count when there is no `saver`.
pub(crate) fn bounded(
    text: &str,
    max: usize,
    saver: Option<&jianmu_workspace::Saver>,
    dropped: u64,
) -> String {
    let Some(saver) = saver else {
        let mut out = truncate(text, max);
        if dropped > 0 && !out.contains("(output truncated") {
            out.push_str(&format!(
                "\n... (output truncated: {dropped} more characters)"
            ));
        }
        return out;
    };
    if text.chars().count() <= max && dropped == 0 {
        return text.to_owned();
    }
    let mut saved = saver.save(text.as_bytes()).unwrap_or_else(|why| why.0);
    if dropped > 0 {
        saved.push_str(&format!(
            " (the {dropped} characters after its first {KEPT_FOR_SAVING} were not kept)"
        ));
    }
    if text.chars().count() <= max {
        return format!("{text}\n... ({saved})");
    }
    jianmu_workspace::head_and_tail(text, max, &saved)
}

/// The stack of the thread a Rhai program runs on. Rhai checks, prints and drops
/// nested values recursively, and a program can nest them as deep as its size limits
/// allow (maps and arrays counted together, 200,000 levels by default): a tokio
/// thread's 2 MiB would overflow, which aborts the process. The stack is reserved, not
/// used: only what a program touches is memory.
const SCRIPT_STACK: usize = 1 << 30;

/// Runs `f` on a script thread (one with [`SCRIPT_STACK`]): an idle one, or a new one.
pub(crate) async fn on_script_thread<T: Send + 'static>(
    tool: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    script_threads::run(Box::new(move || {
        let _ = tx.send(f());
    }))
    .map_err(|e| ToolError::runner(tool, format!("cannot start the script's thread: {e}")))?;
    rx.await
        .map_err(|_| ToolError::runner(tool, "the script's thread ended without an answer"))
}

/// Script threads: made on demand, kept idle a while for the next script (making one
/// costs more than a short script takes), at most [`MAX_IDLE`] of them.
mod script_threads {
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Mutex, PoisonError};
    use std::time::Duration;

    type Job = Box<dyn FnOnce() + Send>;

    /// Idle threads kept at most, and how long one stays idle.
    const MAX_IDLE: usize = 4;
    const IDLE: Duration = Duration::from_secs(60);

    /// Idle threads: their id and where to send them a job.
    static IDLE_THREADS: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn idle() -> std::sync::MutexGuard<'static, Vec<(u64, Sender<Job>)>> {
        IDLE_THREADS.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `job` on an idle script thread, or a new one.
    pub(super) fn run(mut job: Job) -> std::io::Result<()> {
        loop {
            let Some((_, worker)) = idle().pop() else {
                break;
            };
            match worker.send(job) {
                Ok(()) => return Ok(()),
                // It ended meanwhile: the job comes back.
                Err(std::sync::mpsc::SendError(back)) => job = back,
            }
        }
        std::thread::Builder::new()
            .name("jianmu-script".to_owned())
            .stack_size(super::SCRIPT_STACK)
            .spawn(move || serve(job))
            .map(drop)
    }

    /// A script thread: runs its job, then waits idle for the next.
    fn serve(first: Job) {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut job = first;
        loop {
            // A job that panics answers nothing (its caller says so); the thread goes on.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            let (tx, rx): (Sender<Job>, Receiver<Job>) = channel();
            {
                let mut idle = idle();
                if idle.len() >= MAX_IDLE {
                    return;
                }
                idle.push((id, tx));
            }
            job = match rx.recv_timeout(IDLE) {
                Ok(next) => next,
                Err(_) => {
                    let mut idle = idle();
                    match idle.iter().position(|(i, _)| *i == id) {
                        Some(at) => {
                            idle.remove(at);
                            return;
                        }
                        // Taken just now: its job is on the way.
                        None => {
                            drop(idle);
                            match rx.recv() {
                                Ok(next) => next,
                                Err(_) => return,
                            }
                        }
                    }
                }
            };
        }
    }
}

/// Whether `value` holds arrays or maps nested more than `levels` deep (looking no
/// deeper than that).
/// The most bytes a script value may take written out (as an answer, printed, or as
/// a tool's arguments). A value can share one string many times over, so its
/// written size can be far larger than the memory it holds.
pub(crate) const MAX_VALUE_BYTES: usize = 16 << 20;

/// Whether `value` written out takes more than `max` bytes, each shared string
/// counted every time it appears; the walk stops once it is over (and a value nested
/// over a thousand levels deep counts as over).
pub(crate) fn larger_than(value: &rhai::Dynamic, max: usize) -> bool {
    fn add(v: &rhai::Dynamic, total: &mut usize, max: usize, depth: usize) -> bool {
        if depth > 1000 {
            return true;
        }
        let own = if let Ok(s) = v.as_immutable_string_ref() {
            s.len() + 2
        } else if let Ok(array) = v.as_array_ref() {
            *total = total.saturating_add(2 + array.len());
            return *total > max || array.iter().any(|x| add(x, total, max, depth + 1));
        } else if let Ok(map) = v.as_map_ref() {
            *total = total.saturating_add(2 + map.keys().map(|k| k.len() + 4).sum::<usize>());
            return *total > max || map.values().any(|x| add(x, total, max, depth + 1));
        } else if let Ok(blob) = v.as_blob_ref() {
            4 * blob.len() + 2
        } else {
            24
        };
        *total = total.saturating_add(own);
        *total > max
    }
    add(value, &mut 0, max, 0)
}

pub(crate) fn nested_deeper_than(value: &rhai::Dynamic, levels: usize) -> bool {
    if let Ok(array) = value.as_array_ref() {
        return levels == 0 || array.iter().any(|v| nested_deeper_than(v, levels - 1));
    }
    if let Ok(map) = value.as_map_ref() {
        return levels == 0 || map.values().any(|v| nested_deeper_than(v, levels - 1));
    }
    false
}

fn build_rhai(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(
        RhaiRepl::new(config.settings(RhaiRepl::NAME)?)
            .with_saver(jianmu_workspace::Saver::for_tool(config, RhaiRepl::NAME)?),
    )
}

/// The spec of `python_repl`, with what its network is under these settings.
fn spec_python(config: &ToolConfig) -> Result<jianmu_tool_core::ToolSpec, ToolError> {
    let settings = config
        .settings::<PythonSettings>(PythonRepl::NAME)
        .unwrap_or_default();
    let isolation = &settings.isolation;
    Ok(jianmu_tool_core::spec_of::<PythonRepl>()
        .with_sentence(isolation.files_sentence())
        .with_sentence(jianmu_egress::network_sentence(
            isolation,
            &settings.egress,
            PythonRepl::NAME,
        )))
}

fn build_python(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let repl = PythonRepl::new(
        config.settings(PythonRepl::NAME)?,
        config.workspace().to_owned(),
    )?
    .with_network(config.scope().get::<jianmu_process::Network>())
    .with_egress(config.scope().get::<jianmu_egress::Door>())?
    .with_saver(jianmu_workspace::Saver::for_tool(config, PythonRepl::NAME)?)
    .with_kept(&config.scope().get::<jianmu_tool_core::Kept>());
    ToolHandle::with_spec(repl, spec_python(config)?)
}

fn build_script(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::with_spec(
        RunScript::new(config.settings(RunScript::NAME)?)
            .with_saver(jianmu_workspace::Saver::for_tool(config, RunScript::NAME)?),
        run_script::spec(config)?,
    )
}

jianmu_tool_core::register_tool!(RhaiRepl, build_rhai);
jianmu_tool_core::register_tool!(RunScript::NAME, run_script::spec, build_script);
jianmu_tool_core::register_tool!(PythonRepl::NAME, spec_python, build_python);
