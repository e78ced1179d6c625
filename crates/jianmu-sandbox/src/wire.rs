//! The JSON-lines protocol between a host and `jianmu serve`, the server inside a
//! sandbox container: one JSON object per line in each direction.
//!
//! The host opens with [`Request::Init`] and waits for [`Reply::Ready`]; then it sends
//! [`Request::Call`]s, each answered by one [`Reply::Done`] with the same id, in any
//! order, after any number of [`Reply::Progress`] reports when the call asked for them. [`Request::Cancel`] stops a call's work; its `Done` may still arrive and is
//! ignored. End of input ends the server.

use jianmu_tool_core::{Progress, ToolConfig, ToolError, ToolOutput};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A call the server answers itself, not a tool's (no tool's name has a `:`): removes
/// `{"paths": [...]}`, workspace-relative, files before their folders, never through a
/// link. The host sends it after restoring a checkpoint of a copied workspace.
pub(crate) const REMOVE: &str = "jianmu:remove";

/// A call the server answers itself: what its tools keep for a suspension (shell
/// sessions' folders and exports) and what cannot be kept, as structured output
/// ([`jianmu_tool_core::KeptState`]).
pub(crate) const KEPT: &str = "jianmu:kept";

/// A call the server answers itself: `{"shells": {...}}` handed to the shell sessions
/// of those names (a resumed session's).
pub(crate) const GIVE: &str = "jianmu:give";

/// What the host sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// What to build tools from: the workspace root (the same path as on the host)
    /// and the per-tool settings.
    Init {
        /// The tools' configuration.
        config: ToolConfig,
        /// Build every tool before answering `ready` (a spare waiting in a pool has the
        /// time; a container started for a waiting call builds only what it calls).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        warm: bool,
        /// The session's egress goes through the host: listen on loopback as its
        /// proxy and send each connection as a stream.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        egress: Option<EgressInit>,
    },
    /// Run one tool on arguments the host already merged and validated: the server
    /// trusts its host and does not validate again.
    Call {
        /// Chosen by the host, unique per connection.
        id: u64,
        /// The tool's canonical name.
        tool: String,
        /// The prepared arguments.
        args: Value,
        /// The call's id on the host, so events, audit lines and errors on both sides
        /// name the same call.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        call_id: String,
        /// The caller's event context on the host, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<Value>,
        /// The caller wants progress reports.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        progress: bool,
    },
    /// Stop the work of call `id`.
    Cancel {
        /// The call to stop.
        id: u64,
    },
    /// Bytes for a stream's end inside (base64).
    Data {
        /// The stream.
        stream: u64,
        /// The bytes, base64.
        data: String,
    },
    /// The host wrote out `bytes` of the stream's bytes.
    Ack {
        /// The stream.
        stream: u64,
        /// How many.
        bytes: usize,
    },
    /// The host's end of the stream sends no more.
    Close {
        /// The stream.
        stream: u64,
    },
    /// The host dropped the stream: drop it whole.
    Reset {
        /// The stream.
        stream: u64,
    },
}

/// What the server needs to be the session's proxy inside the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EgressInit {
    /// The session's certificate authority (PEM), when HTTPS to some host is
    /// intercepted to set a credential: trusted by the commands inside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca: Option<String>,
}

/// What the server answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The server took the settings; tools are built on first use.
    Ready {
        /// The server's version.
        version: String,
    },
    /// The settings were refused; the server exits.
    InitFailed {
        /// Why.
        message: String,
    },
    /// Call `id` is still running; what it reported.
    Progress {
        /// The call.
        id: u64,
        /// The report.
        progress: Progress,
    },
    /// Call `id` finished (or was cancelled).
    Done {
        /// The call.
        id: u64,
        /// Its result: the same types as in the host's process.
        result: Result<ToolOutput, ToolError>,
        /// How many processes the kernel killed for exceeding the container's memory
        /// limit while the call ran.
        #[serde(default)]
        oom_kills: u64,
    },
    /// A command connected to the session's proxy inside: a new stream.
    Open {
        /// The stream (chosen by the server).
        stream: u64,
    },
    /// Bytes from a stream's end inside (base64).
    Data {
        /// The stream.
        stream: u64,
        /// The bytes, base64.
        data: String,
    },
    /// The server wrote out `bytes` of the host's bytes for the stream.
    Ack {
        /// The stream.
        stream: u64,
        /// How many.
        bytes: usize,
    },
    /// The end inside sends no more.
    Close {
        /// The stream.
        stream: u64,
    },
    /// The server dropped the stream: drop it whole.
    Reset {
        /// The stream.
        stream: u64,
    },
}

/// What a call came to on the host: the container's answer, with a tool the image
/// does not have said so.
pub(crate) fn on_host(result: Result<ToolOutput, ToolError>) -> Result<ToolOutput, ToolError> {
    match result {
        Err(ToolError::UnknownTool { name, .. } | ToolError::NotCompiled { name, .. }) => {
            Err(ToolError::failed(format!(
                "tool `{name}` is not available inside the sandbox image (its server was \
                 built without it); rebuild the image with `jianmu sandbox build-image`"
            )))
        }
        other => other,
    }
}

/// Replies are equal when they are the same on the wire.
impl PartialEq for Reply {
    fn eq(&self, other: &Self) -> bool {
        to_line(self) == to_line(other)
    }
}

/// Writes each line from `rx` to `output`, flushing after each, until every sender
/// is gone (then shuts `output` down, which closes a pipe's far end) or a write fails.
pub(crate) async fn write_lines<W: tokio::io::AsyncWrite + Unpin>(
    mut output: W,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt as _;
    while let Some(line) = rx.recv().await {
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
    let _ = output.shutdown().await;
}

/// Serializes `value` as one line, newline included.
pub(crate) fn to_line<T: Serialize>(value: &T) -> Vec<u8> {
    // Our wire types hold only strings, numbers and JSON values: this cannot fail.
    let mut line = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

#[cfg(test)]
mod round_trip {
    use proptest::prelude::*;
    use serde_json::Value;

    use jianmu_tool_core::{ToolError, ToolOutput};

    use super::{Reply, Request, to_line};

    fn text() -> impl Strategy<Value = String> {
        "\\PC{0,40}|[\\n\\r\\t\\x00\\x1b\\u{2028}\\u{2029}\"\\\\]{0,8}"
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            text().prop_map(Value::String),
            prop::collection::btree_map(text(), text(), 0..4).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k, Value::String(v))).collect()
            )),
        ]
    }

    /// One line per message, and the same message back. (A `null` context is no
    /// context: the wire cannot tell them apart, and need not.)
    fn round_trips<
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    >(
        message: &T,
    ) -> Result<(), TestCaseError> {
        let line = to_line(message);
        prop_assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        prop_assert_eq!(line.last(), Some(&b'\n'));
        let back: T = serde_json::from_slice(&line).unwrap();
        prop_assert_eq!(&back, message);
        Ok(())
    }

    proptest! {
        #[test]
        fn requests_and_replies_survive_the_wire(
            id in any::<u64>(), tool in text(), args in value(), call_id in text(),
            message in text(), after_ms in proptest::option::of(any::<u64>()), ok in any::<bool>(),
        ) {
            round_trips(&Request::Call { id, tool: tool.clone(), args: args.clone(), call_id, context: (!args.is_null()).then(|| args.clone()), progress: ok })?;
            round_trips(&Reply::Progress { id, progress: jianmu_tool_core::Progress::new(std::time::Duration::from_millis(id % 100_000), id, id / 3) })?;
            round_trips(&Request::Cancel { id })?;
            let result = if ok {
                let mut out = ToolOutput::text(message.clone());
                out.structured = (!args.is_null()).then_some(args);
                Ok(out)
            } else {
                Err(ToolError::Timeout { tool, after: std::time::Duration::from_millis(after_ms.unwrap_or(0)), partial: Some(message.clone()) })
            };
            round_trips(&Reply::Done { id, result, oom_kills: id % 7 })?;
            round_trips(&Reply::InitFailed { message })?;
        }
    }
}
