//! `ToolError`: one error type for every way a call can end badly.

use std::fmt;
use std::time::Duration;

/// A boxed error for sources from other crates.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a tool call did not produce an output.
///
/// Errors come on two channels (see [`ToolError::is_model_facing`]): what the model
/// should read and act on (bad arguments, a refused input, a timeout, an unknown tool)
/// and what breaks the machinery around the tool (a broken runner, a cancelled call, a
/// bad registry or configuration).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not match the tool's input schema.
    #[error("invalid arguments for `{}`: {}", crate::echo(.tool), Violations(.violations))]
    InvalidArguments {
        /// The tool that was called.
        tool: String,
        /// Every violation found, each with its JSON pointer.
        violations: Vec<Violation>,
    },
    /// The tool ran and reports a failure the model should read, such as a refused
    /// input or a command that exited non-zero.
    #[error("{message}")]
    Failed {
        /// The message for the model.
        message: String,
    },
    /// The call did not finish within its time limit; its work was stopped.
    #[error("`{tool}` timed out after {}{}", HumanDuration(*.after), Partial(.partial.as_deref()))]
    Timeout {
        /// The tool that was called.
        tool: String,
        /// The limit that was hit.
        after: Duration,
        /// What the call produced before it was stopped, when the tool kept it (a
        /// command's output so far, head and tail).
        partial: Option<String>,
    },
    /// No tool of that name is known.
    #[error("unknown tool `{}`; known tools: {}", crate::echo(.name), .known.join(", "))]
    UnknownTool {
        /// The name that was asked for.
        name: String,
        /// Every name that would have worked, sorted.
        known: Vec<String>,
    },
    /// The tool exists but its crate was not compiled into this build.
    #[error(
        "tool `{}` is not compiled in; enable the `{feature}` Cargo feature of jianmu-provider",
        crate::echo(.name)
    )]
    NotCompiled {
        /// The canonical name of the tool.
        name: String,
        /// The Cargo feature that adds it.
        feature: String,
    },
    /// A call was refused by a policy before it ran.
    #[error("call to `{}` denied: {rule}", crate::echo(.tool))]
    Denied {
        /// The tool that was called.
        tool: String,
        /// The rule that refused it.
        rule: String,
    },
    /// A tool or its settings are misconfigured (an invalid schema, a bad setting).
    #[error("invalid configuration for `{tool}`: {message}")]
    Config {
        /// The tool being configured.
        tool: String,
        /// What is wrong.
        message: String,
    },
    /// The runner or sandbox failed; the tool may not have run at all.
    #[error("runner failed for `{tool}`")]
    Runner {
        /// The tool that was called.
        tool: String,
        /// What broke.
        #[source]
        source: BoxError,
    },
    /// The call was cancelled before it finished.
    #[error("call to `{tool}` was cancelled")]
    Cancelled {
        /// The tool that was called.
        tool: String,
    },
}

/// A [`ToolError`] as data: its kind and the fields that rebuild it. Every variant
/// comes back as itself; a runner's source comes back as its message.
#[derive(serde::Serialize, serde::Deserialize)]
struct ErrorData {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partial: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    violations: Vec<Violation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    known: Vec<String>,
}

impl From<&ToolError> for ErrorData {
    fn from(error: &ToolError) -> Self {
        let mut data = Self {
            kind: String::new(),
            tool: None,
            message: String::new(),
            after_ms: None,
            partial: None,
            violations: Vec::new(),
            known: Vec::new(),
        };
        let (kind, tool) = match error {
            ToolError::InvalidArguments { tool, violations } => {
                data.violations.clone_from(violations);
                ("invalid_arguments", Some(tool))
            }
            ToolError::Failed { message } => {
                data.message.clone_from(message);
                ("failed", None)
            }
            ToolError::Timeout {
                tool,
                after,
                partial,
            } => {
                data.after_ms = Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
                data.partial.clone_from(partial);
                ("timeout", Some(tool))
            }
            ToolError::UnknownTool { name, known } => {
                data.known.clone_from(known);
                ("unknown_tool", Some(name))
            }
            ToolError::NotCompiled { name, feature } => {
                data.message.clone_from(feature);
                ("not_compiled", Some(name))
            }
            ToolError::Denied { tool, rule } => {
                data.message.clone_from(rule);
                ("denied", Some(tool))
            }
            ToolError::Config { tool, message } => {
                data.message.clone_from(message);
                ("config", Some(tool))
            }
            ToolError::Runner { tool, source } => {
                data.message = crate::error_chain(&**source);
                ("runner", Some(tool))
            }
            ToolError::Cancelled { tool } => ("cancelled", Some(tool)),
        };
        data.kind = kind.to_owned();
        data.tool = tool.cloned();
        data
    }
}

impl From<ErrorData> for ToolError {
    fn from(data: ErrorData) -> Self {
        let tool = data.tool.unwrap_or_default();
        match data.kind.as_str() {
            "invalid_arguments" => ToolError::InvalidArguments {
                tool,
                violations: data.violations,
            },
            "timeout" => ToolError::Timeout {
                tool,
                after: Duration::from_millis(data.after_ms.unwrap_or(0)),
                partial: data.partial,
            },
            "unknown_tool" => ToolError::UnknownTool {
                name: tool,
                known: data.known,
            },
            "not_compiled" => ToolError::NotCompiled {
                name: tool,
                feature: data.message,
            },
            "denied" => ToolError::Denied {
                tool,
                rule: data.message,
            },
            "config" => ToolError::Config {
                tool,
                message: data.message,
            },
            "runner" => ToolError::runner(tool, data.message),
            "cancelled" => ToolError::Cancelled { tool },
            _ => ToolError::failed(data.message),
        }
    }
}

/// A tool error serializes as `{"kind": …, "tool": …, "message": …}` plus the fields of
/// its kind, so it crosses a process boundary (a sandbox's wire) and comes back as
/// itself; a runner's source comes back as its message.
impl serde::Serialize for ToolError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ErrorData::from(self).serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for ToolError {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ErrorData::deserialize(deserializer).map(ToolError::from)
    }
}

impl ToolError {
    /// A failure the model should read, with `message` as its whole text.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed {
            message: message.into(),
        }
    }

    /// A runner failure with `source` as its cause.
    pub fn runner(tool: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Runner {
            tool: tool.into(),
            source: source.into(),
        }
    }

    /// True for errors the model should see as the call's result and can react to
    /// (bad arguments, refused input, timeouts, unknown tools, policy denials); false for
    /// errors of the machinery (runner, cancellation, configuration).
    pub fn is_model_facing(&self) -> bool {
        matches!(
            self,
            Self::InvalidArguments { .. }
                | Self::Failed { .. }
                | Self::Timeout { .. }
                | Self::UnknownTool { .. }
                | Self::NotCompiled { .. }
                | Self::Denied { .. }
        )
    }
}

/// `e` with its causes, `a: b: c`: the whole story in one line, for the model or a
/// terminal.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One way the arguments break the input schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Violation {
    /// JSON pointer to the offending value; empty for the whole arguments.
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(f, "at {at}: {}", self.message)
    }
}

struct Violations<'a>(&'a [Violation]);

impl fmt::Display for Violations<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

struct HumanDuration(Duration);

/// A timed-out call's output so far, after the timeout message.
struct Partial<'a>(Option<&'a str>);

impl fmt::Display for Partial<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) if !text.is_empty() => {
                write!(
                    f,
                    "; everything it started was stopped. Its output until then:\n{text}"
                )
            }
            Some(_) => write!(f, "; everything it started was stopped; it printed nothing"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{} s", d.as_secs())
        } else if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else {
            write!(f, "{:.3} s", d.as_secs_f64())
        }
    }
}
