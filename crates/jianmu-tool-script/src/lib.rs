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

/// The stack of the thread a Rhai program runs on. Rhai checks, prints and drops
/// nested values recursively, and a program can nest them as deep as its size limits
/// allow (maps and arrays counted together, 200,000 levels by default): a tokio
/// thread's 2 MiB would overflow, which aborts the process. The stack is reserved, not
/// used: only what a program touches is memory.
const SCRIPT_STACK: usize = 1 << 30;

/// Runs `f` on a thread of its own with [`SCRIPT_STACK`].
pub(crate) async fn on_script_thread<T: Send + 'static>(
    tool: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("jianmu-script".to_owned())
        .stack_size(SCRIPT_STACK)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| ToolError::runner(tool, format!("cannot start the script's thread: {e}")))?;
    rx.await
        .map_err(|_| ToolError::runner(tool, "the script's thread ended without an answer"))
}

/// Whether `value` holds arrays or maps nested more than `levels` deep (looking no
/// deeper than that).
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
    ToolHandle::new(RhaiRepl::new(config.settings(RhaiRepl::NAME)?))
}

/// The spec of `python_repl`, with what its network is under these settings.
fn spec_python(config: &ToolConfig) -> Result<jianmu_tool_core::ToolSpec, ToolError> {
    let isolation = config
        .settings::<PythonSettings>(PythonRepl::NAME)
        .map(|s| s.isolation)
        .unwrap_or_default();
    Ok(jianmu_tool_core::spec_of::<PythonRepl>()
        .with_sentence(isolation.network_sentence(PythonRepl::NAME)))
}

fn build_python(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let repl = PythonRepl::new(
        config.settings(PythonRepl::NAME)?,
        config.workspace().to_owned(),
    )?
    .with_network(config.scope().get::<jianmu_process::Network>());
    ToolHandle::with_spec(repl, spec_python(config)?)
}

fn build_script(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::with_spec(
        RunScript::new(config.settings(RunScript::NAME)?),
        run_script::spec(config)?,
    )
}

jianmu_tool_core::register_tool!(RhaiRepl, build_rhai);
jianmu_tool_core::register_tool!(RunScript::NAME, run_script::spec, build_script);
jianmu_tool_core::register_tool!(PythonRepl::NAME, spec_python, build_python);
