//! Progress of a long call: what a tool reports while it runs (time so far, output so
//! far), and where the caller wants it ([`ProgressSink`], set with
//! [`crate::ExecuteOptions::progress`]). `jianmu mcp` turns reports into MCP progress
//! notifications; a sandbox runner carries them across its wire.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One progress report: how long the call has run and, when the tool counts it, how
/// much output it has produced so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Progress {
    /// Time since the call started, in milliseconds.
    pub elapsed_ms: u64,
    /// Bytes of output so far.
    #[serde(default)]
    pub bytes: u64,
    /// Lines of output so far.
    #[serde(default)]
    pub lines: u64,
}

impl Progress {
    /// A report at `elapsed`, with `bytes` and `lines` of output so far.
    pub fn new(elapsed: Duration, bytes: u64, lines: u64) -> Self {
        Self {
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            bytes,
            lines,
        }
    }

    /// The report in words: `running for 3.0 s; 12 lines (340 bytes) of output so far`.
    pub fn message(&self) -> String {
        let secs = self.elapsed_ms as f64 / 1000.0;
        if self.bytes == 0 {
            format!("running for {secs:.1} s; no output yet")
        } else {
            format!(
                "running for {secs:.1} s; {} line{} ({} bytes) of output so far",
                self.lines,
                if self.lines == 1 { "" } else { "s" },
                self.bytes
            )
        }
    }
}

/// Where a call's progress reports go. It is called on the tool's task and must
/// return quickly (store or forward; throttling is the receiver's business).
pub type ProgressSink = Arc<dyn Fn(&Progress) + Send + Sync>;
