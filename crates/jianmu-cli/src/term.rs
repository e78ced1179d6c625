//! The command's edges: signals, the async runtime, logs, arguments read from stdin,
//! and what is printed on stdout.

use std::io::{Read as _, Write as _};

use anyhow::Context as _;
use jianmu_tool_core::ToolError;
use serde_json::Value;

use crate::Failure;

/// The first of SIGTERM, SIGINT or SIGHUP, by number (never, if they cannot be
/// watched).
pub(crate) async fn terminated() -> i32 {
    stopped_by(true).await
}

/// The number of the stop signal that came: SIGTERM, SIGINT, and SIGHUP when `hangup`.
async fn stopped_by(hangup: bool) -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    let mut hup = if hangup {
        signal(SignalKind::hangup()).ok()
    } else {
        None
    };
    tokio::select! {
        _ = term.recv() => 15,
        _ = int.recv() => 2,
        Some(_) = async { hup.as_mut()?.recv().await } => 1,
    }
}

/// As [`terminated`], but SIGHUP does not stop: it is left to whoever reloads on it
/// (`jianmu mcp --http --token-file`).
#[cfg(feature = "mcp")]
pub(crate) async fn terminated_but_not_by_hangup() -> i32 {
    stopped_by(false).await
}

pub(crate) fn init_tracing() {
    // Quiet unless asked: stdout belongs to tool output, logs go to stderr.
    if let Ok(filter) = std::env::var("JIANMU_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A runtime on worker threads (a server's).
#[cfg(feature = "mcp")]
pub(crate) fn multi_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) fn read_args(raw: &str) -> Result<Value, Failure> {
    let text = if raw == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .context("cannot read the arguments from stdin")?;
        buf
    } else {
        raw.to_owned()
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::Call(ToolError::failed(format!(
            "the arguments are not valid JSON ({e}); a bare-string tool takes a quoted string, e.g. '\"2+2\"'"
        )))
    })
}

pub(crate) fn pretty(value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

pub(crate) fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed pipe (`jianmu tools | head -1`) is not an error worth a message.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::from(e)
            .context("cannot write to stdout")
            .into()),
        _ => Ok(()),
    }
}
