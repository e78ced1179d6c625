//! Jianmu tools as swiftide tools, and a session as swiftide's command executor.
//!
//! ```rust,ignore
//! let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(dir)))?;
//! let executor = jianmu_adapters::swiftide::SessionExecutor::open(&runtime)?;
//! let mut agent = swiftide_agents::Agent::builder()
//!     .context(swiftide_agents::DefaultContext::from_executor(executor.clone()))
//!     .tools(jianmu_adapters::swiftide::session_tools(executor.session())?)
//!     .llm(&model)
//!     .build()?;
//! ```
//!
//! What the model sees is kept as far as swiftide carries it:
//!
//! - the tool's name, description and argument schema (in the object form
//!   function-calling APIs require: a tool that takes one string takes `{"input": ...}`);
//! - the answer's text. Swiftide's tool results are text only, so an image in an answer
//!   is named (its type and size) rather than shown;
//! - an error as [`ToolOutput::Fail`] with the message jianmu writes for the model,
//!   except invalid arguments, which are swiftide's
//!   [`ToolError::WrongArguments`](SwiftideError::WrongArguments) so that its retry
//!   limit applies to a model that repeats a malformed call.
//!
//! [`SessionExecutor`] runs swiftide's commands (a shell command, reading or writing a
//! file) with the session's own tools, so they run where the session's tools do: in its
//! local jail or in its Docker container, under its policy, time limit and audit log.

/// The swiftide this adapter is built for, so a crate can name its types at the same
/// version.
pub use swiftide_core;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use jianmu_runtime::{Closed, Opening, Runtime, Session, SessionError};
use jianmu_tool_core::{DynRunner, ToolError, ToolOutput as JianmuOutput, ToolSet, ToolSpec};
use serde_json::{Value, json};
use swiftide_core::chat_completion::errors::ToolError as SwiftideError;
use swiftide_core::chat_completion::{Tool, ToolCall, ToolOutput, ToolSpec as SwiftideSpec};
use swiftide_core::indexing::{IndexingStream, Node};
use swiftide_core::{AgentContext, Command, CommandError, CommandOutput, ToolExecutor};

use crate::call::{self, Caller};

/// A jianmu tool as a swiftide [`Tool`].
#[derive(Clone)]
pub struct JianmuTool {
    spec: SwiftideSpec,
    caller: Caller,
}

impl std::fmt::Debug for JianmuTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JianmuTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

/// Every tool of `session`, sorted by name, each calling through the session.
///
/// # Errors
/// A tool whose spec depends on settings it refuses.
pub fn session_tools(session: &Arc<Session>) -> Result<Vec<Box<dyn Tool>>, ToolError> {
    Ok(call::session_callers(session)?
        .into_iter()
        .map(|(spec, caller)| new_tool(&spec, caller).boxed())
        .collect())
}

/// The tool `name` (a name or alias) of `session`, calling through the session.
///
/// # Errors
/// An unknown tool (listing the known names), one not compiled in (naming the feature
/// that adds it).
pub fn session_tool(session: &Arc<Session>, name: &str) -> Result<JianmuTool, ToolError> {
    let (spec, caller) = call::session_named(session, name)?;
    Ok(new_tool(&spec, caller))
}

/// Every tool of `set`, in its order, each called through `runner` (a `ToolRunner`, a
/// sandbox, any layer stack) or, with `None`, in this process with no layers.
pub fn toolset_tools(set: &Arc<ToolSet>, runner: Option<Arc<dyn DynRunner>>) -> Vec<Box<dyn Tool>> {
    call::toolset_callers(set, runner)
        .into_iter()
        .map(|(spec, caller)| new_tool(&spec, caller).boxed())
        .collect()
}

fn new_tool(spec: &ToolSpec, caller: Caller) -> JianmuTool {
    let spec = SwiftideSpec {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters_schema: schemars::Schema::try_from(spec.parameters()).ok(),
    };
    JianmuTool { spec, caller }
}

#[async_trait]
impl Tool for JianmuTool {
    async fn invoke(
        &self,
        _context: &dyn AgentContext,
        tool_call: &ToolCall,
    ) -> Result<ToolOutput, SwiftideError> {
        let args = match tool_call.args().map(str::trim) {
            None | Some("") => json!({}),
            Some(text) => serde_json::from_str(text).map_err(SwiftideError::WrongArguments)?,
        };
        match (self.caller)(args).await {
            Ok(out) => Ok(to_swiftide_output(out)),
            // Swiftide counts these against its retry limit.
            Err(error @ ToolError::InvalidArguments { .. }) => Err(SwiftideError::WrongArguments(
                serde::de::Error::custom(error.to_string()),
            )),
            // The model reads the message and goes on.
            Err(error) => Ok(ToolOutput::fail(error.to_string())),
        }
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.spec.name)
    }

    fn tool_spec(&self) -> SwiftideSpec {
        self.spec.clone()
    }
}

/// A jianmu answer as swiftide's: its text, each image named in a last line (swiftide
/// carries text only).
pub fn to_swiftide_output(out: JianmuOutput) -> ToolOutput {
    let mut text = out.text;
    for image in &out.images {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        // Base64 holds three bytes in four characters.
        let bytes = image.base64.len() / 4 * 3;
        text.push_str(&format!(
            "[an image ({}, about {} KB) is part of this answer; images cannot be shown here]",
            image.mime_type,
            bytes.div_ceil(1024)
        ));
    }
    ToolOutput::text(text)
}

/// A session as swiftide's [`ToolExecutor`]: `Command::Shell` runs with the session's
/// `bash`, `ReadFile` with `read_file`, `WriteFile` with `write_file`, and
/// `stream_files` lists with `glob_search` and reads each file with `read_file`. So
/// every command runs where the session's tools run (its local jail, or its Docker
/// container), confined to its workspace and under its policy, time limit and audit
/// log.
///
/// Clones share the session; it ends with [`SessionExecutor::close`] (or when the last
/// clone and every tool built from [`SessionExecutor::session`] are dropped).
#[derive(Clone, Debug)]
pub struct SessionExecutor {
    session: Arc<Session>,
}

impl SessionExecutor {
    /// Opens a session of `runtime` whose `bash` answers a non-zero exit with its output
    /// and code (so a failed command is swiftide's `NonZeroExit`, with its output).
    ///
    /// # Errors
    /// As [`Runtime::open_with`].
    pub fn open(runtime: &Runtime) -> Result<Self, SessionError> {
        let session = runtime.open_with(Opening::new().with_setting(
            "bash",
            "nonzero_exit",
            "result".into(),
        ))?;
        Ok(Self {
            session: Arc::new(session),
        })
    }

    /// The session commands run in: give its tools to the same agent
    /// ([`session_tools`]) and they share the workspace, shells and container.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Closes the session: every shell, job and process it started ends; with Docker,
    /// its container is removed.
    pub async fn close(&self) -> Closed {
        self.session.close().await
    }

    async fn shell(
        &self,
        command: &str,
        dir: Option<&Path>,
        timeout: Option<&Duration>,
    ) -> Result<CommandOutput, CommandError> {
        let line = match dir {
            Some(dir) => format!("cd -- {} && {command}", quote(&dir.to_string_lossy())),
            None => command.to_owned(),
        };
        let mut args = json!({ "command": line });
        if let Some(limit) = timeout {
            // Within what `bash` takes (a day at most): a longer limit is not refused.
            args["timeout"] = json!(limit.as_secs_f64().clamp(0.001, 86_400.0));
        }
        match self.session.call("bash", args).await {
            Ok(out) => {
                let data = out.structured.unwrap_or(Value::Null);
                let part = |key: &str| data[key].as_str().unwrap_or_default().to_owned();
                let output = merge(&part("stdout"), &part("stderr"));
                match data["exit_code"].as_i64() {
                    Some(0) => Ok(output.into()),
                    _ => Err(CommandError::NonZeroExit(output.into())),
                }
            }
            Err(ToolError::Timeout { after, partial, .. }) => Err(CommandError::TimedOut {
                timeout: after,
                output: partial.unwrap_or_default().into(),
            }),
            Err(error) => Err(executor_error(&error)),
        }
    }

    async fn read(&self, path: &Path) -> Result<CommandOutput, CommandError> {
        match self.read_text(path).await? {
            Ok(text) => Ok(text.into()),
            Err(NotText::Binary(why) | NotText::TooLarge(why)) => {
                Err(CommandError::NonZeroExit(why.into()))
            }
        }
    }

    /// The whole text of `path`, or why it is not read as text.
    async fn read_text(&self, path: &Path) -> Result<Result<String, NotText>, CommandError> {
        let path = path.to_string_lossy();
        // A window from the first line reads the file as it is (no cells, no line
        // numbers); past the size limit it stops, and then the file is refused rather
        // than cut.
        let args = json!({ "path": path, "offset": 1, "limit": u32::MAX, "line_numbers": false });
        let out = self
            .session
            .call("read_file", args)
            .await
            .map_err(|e| executor_error(&e))?;
        let data = out.structured.unwrap_or(Value::Null);
        if data["binary"].as_bool() == Some(true) {
            return Ok(Err(NotText::Binary(format!(
                "{path} is a binary file; only text files can be read"
            ))));
        }
        if data["cut"].as_bool() == Some(true) {
            return Ok(Err(NotText::TooLarge(format!(
                "{path} is larger than the read limit ({} bytes); read it in windows \
                 with the read_file tool",
                data["size"]
            ))));
        }
        Ok(Ok(out.text))
    }

    async fn write(&self, path: &Path, content: &str) -> Result<CommandOutput, CommandError> {
        let args = json!({ "path": path.to_string_lossy(), "content": content });
        self.session
            .call("write_file", args)
            .await
            .map_err(|e| executor_error(&e))?;
        Ok(CommandOutput::empty())
    }
}

impl From<SessionExecutor> for Arc<dyn ToolExecutor> {
    fn from(executor: SessionExecutor) -> Self {
        Arc::new(executor)
    }
}

#[async_trait]
impl ToolExecutor for SessionExecutor {
    async fn exec_cmd(&self, cmd: &Command) -> Result<CommandOutput, CommandError> {
        let dir = cmd.current_dir_path();
        let timeout = cmd.timeout_duration();
        let work = async {
            match cmd {
                Command::Shell { command, .. } => self.shell(command, dir, timeout).await,
                Command::ReadFile { path, .. } => self.read(&within(dir, path)).await,
                Command::WriteFile { path, content, .. } => {
                    self.write(&within(dir, path), content).await
                }
                other => Err(CommandError::ExecutorError(anyhow::anyhow!(
                    "this executor does not run {other:?}"
                ))),
            }
        };
        match (cmd, timeout) {
            // `bash` has its own limit, which kills what the command started.
            (Command::Shell { .. }, _) | (_, None) => work.await,
            (_, Some(limit)) => match tokio::time::timeout(*limit, work).await {
                Ok(done) => done,
                Err(_) => Err(CommandError::TimedOut {
                    timeout: *limit,
                    output: CommandOutput::empty(),
                }),
            },
        }
    }

    async fn stream_files(
        &self,
        path: &Path,
        extensions: Option<Vec<String>>,
    ) -> anyhow::Result<IndexingStream<String>> {
        let pattern = match extensions.as_deref() {
            None | Some([]) => "*".to_owned(),
            Some([one]) => format!("*.{one}"),
            Some(many) => format!("*.{{{}}}", many.join(",")),
        };
        let listed = self
            .session
            .call(
                "glob_search",
                json!({ "pattern": pattern, "path": path.to_string_lossy(), "limit": STREAM_LIMIT }),
            )
            .await
            .map_err(|e| anyhow::Error::msg(e.to_string()))?;
        let data = listed.structured.unwrap_or(Value::Null);
        let files: Vec<PathBuf> = data["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|p| !p.ends_with('/'))
            .map(PathBuf::from)
            .collect();
        let total = data["total"].as_u64().unwrap_or(0);
        let this = self.clone();
        let nodes = futures::stream::iter(files).filter_map(move |file| {
            let this = this.clone();
            async move {
                match this.read_text(&file).await {
                    Ok(Ok(text)) => {
                        let mut node = Node::<String>::new(text);
                        node.path = file;
                        Some(Ok(node))
                    }
                    // A binary file is not text to index, as a loader skips it.
                    Ok(Err(NotText::Binary(_))) => None,
                    // A text file too large to read whole is named, not dropped.
                    Ok(Err(NotText::TooLarge(why))) => Some(Err(anyhow::Error::msg(why))),
                    Err(e) => Some(Err(anyhow::Error::msg(format!("{}: {e}", file.display())))),
                }
            }
        });
        let over = (total > STREAM_LIMIT).then(|| {
            Err(anyhow::anyhow!(
                "{total} files match; only the first {STREAM_LIMIT} were streamed"
            ))
        });
        let stream = nodes.chain(futures::stream::iter(over)).boxed();
        Ok(stream.into())
    }
}

/// Why a file is not read as text.
enum NotText {
    Binary(String),
    TooLarge(String),
}

/// Most files one `stream_files` reads (the most `glob_search` lists).
const STREAM_LIMIT: u64 = 10_000;

fn within(dir: Option<&Path>, path: &Path) -> PathBuf {
    match dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

/// Stdout then stderr, as a terminal shows them.
fn merge(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.trim_end_matches('\n').to_owned();
    let stderr = stderr.trim_end_matches('\n');
    if !stderr.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stderr);
    }
    text
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn executor_error(error: &ToolError) -> CommandError {
    CommandError::ExecutorError(anyhow::Error::msg(error.to_string()))
}
