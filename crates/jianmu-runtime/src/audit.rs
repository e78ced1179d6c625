//! `AuditLog`: a JSON-lines record of every finished call, fed from the event bus.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use jianmu_tool_core::{EventBus, EventKind, SubscriptionId};
use serde_json::json;

/// Appends one line per finished call: time, tool, call id (and `parent_call_id`, the
/// call that made it, for calls a script made), arguments, outcome, error and
/// duration. Each line is written whole and flushed, so a crash loses at most the call
/// in flight.
#[derive(Debug, Clone)]
pub struct AuditLog {
    file: Arc<Mutex<File>>,
}

impl AuditLog {
    /// Opens (creating or appending to) `path`.
    ///
    /// # Errors
    /// When the file cannot be opened for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends `line` (one JSON object) whole.
    pub fn record(&self, line: &serde_json::Value) {
        let mut text = line.to_string();
        text.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = file.write_all(text.as_bytes());
        let _ = file.flush();
    }

    /// Records every finished call emitted on `bus`.
    pub fn attach(&self, bus: &EventBus) -> SubscriptionId {
        let file = self.file.clone();
        bus.subscribe(move |e| {
            let outcome = match e.kind {
                EventKind::Completed => "ok",
                EventKind::Failed => "error",
                _ => return,
            };
            let time = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let line = json!({
                "time": time,
                "tool": e.tool,
                "call_id": e.call_id,
                "parent_call_id": e.parent_call_id,
                "arguments": e.arguments,
                "context": e.context,
                // Who called, when the caller says (the HTTP service's principals).
                "principal": e.context.and_then(|c| c.get("principal")),
                "outcome": outcome,
                "error": e.error,
                "duration_us": u64::try_from(e.elapsed.as_micros()).unwrap_or(u64::MAX),
            });
            let mut text = line.to_string();
            text.push('\n');
            let mut file = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(err) = file.write_all(text.as_bytes()).and_then(|()| file.flush()) {
                tracing::error!(%err, "cannot write the audit log");
            }
        })
    }
}
