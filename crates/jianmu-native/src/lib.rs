//! The model APIs' own built-in tool contracts, executed through a Jianmu session.
//!
//! Both big model APIs define tool types whose calls the client executes, and their
//! models are trained on those exact contracts:
//! - Anthropic: `bash` (`bash_20250124`), the text editor
//!   `str_replace_based_edit_tool` (`text_editor_20250728`) and `memory`
//!   (`memory_20250818`), called with `tool_use` blocks and answered with
//!   `tool_result` blocks;
//! - OpenAI Responses: `shell` (`shell_call` → `shell_call_output`), `apply_patch`
//!   (`apply_patch_call` → `apply_patch_call_output`, V4A diffs), the freeform
//!   `apply_patch` tool (`custom_tool_call`), and any function tool
//!   (`function_call`).
//!
//! [`Native`] takes the vendor's call item as JSON and returns the vendor's result
//! item as JSON. Every call runs as calls of the session's own tools (`bash`,
//! `read_file`, `write_file`, `edit_file`, `apply_patch`, `glob_search`,
//! `file_info`), so the session's policy, audit log, sandbox, workspace confinement,
//! time limits and output caps hold as for any call. A tool error comes back inside
//! the result item, in the vendor's own form; only an item that is not a call is an
//! error here.
//!
//! ```no_run
//! use jianmu_native::{Native, NativeOptions};
//! use jianmu_runtime::{Runtime, SessionSettings};
//! use jianmu_tool_core::ToolConfig;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::new(SessionSettings::new(ToolConfig::new("/work/repo")))?;
//! let native = Native::open(&runtime, NativeOptions::new().with_root("/repo"))?;
//! let result = native
//!     .anthropic(&serde_json::json!({
//!         "type": "tool_use", "id": "toolu_01", "name": "str_replace_based_edit_tool",
//!         "input": {"command": "view", "path": "/repo/README.md"}
//!     }))
//!     .await?;
//! assert_eq!(result["tool_use_id"], "toolu_01");
//! native.close().await;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod agent;
mod anthropic;
mod declare;
mod openai;
mod text;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jianmu_runtime::{Closed, Opening, Runtime, Session, SessionError};
use jianmu_tool_core::{ToolError, ToolOutput};
use serde_json::{Value, json};

pub use declare::{
    PATCH_GRAMMAR, anthropic_agent_toolset, anthropic_tools, openai_freeform_tools,
    openai_tool_search, openai_tools,
};

/// The shell session Anthropic's `bash` keeps for the conversation.
const ANTHROPIC_SHELL: &str = "anthropic-bash";
/// The shell session the agent toolset's `bash` keeps for the conversation.
const AGENT_SHELL: &str = "anthropic-agent-bash";
/// The shell session OpenAI's `shell` commands run in.
const OPENAI_SHELL: &str = "openai-shell";

/// How a [`Native`] maps the vendors' calls onto the session.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct NativeOptions {
    /// The absolute path the model uses for the workspace root (for example
    /// `/repo`); by default the workspace's own path.
    pub root: Option<String>,
    /// The folder `/memories` is (made if missing, kept); by default
    /// `.jianmu/memories` in the workspace.
    pub memories: Option<PathBuf>,
    /// The text editor's `max_characters`: a `view` longer than this is cut, and the
    /// answer says so.
    pub max_characters: Option<usize>,
    /// `tool_use` blocks named `bash`, `read`, `write`, `edit`, `glob` or `grep` are
    /// calls of Anthropic's agent toolset (`agent_toolset_20260401`); `agent.tool_use`
    /// events always are.
    pub agent_toolset: bool,
    /// The skills of OpenAI's `shell` with a local environment
    /// (`{"type": "shell", "environment": {"type": "local", "skills": [...]}}`): each
    /// folder is shown to the session's commands, read-only, at its own path.
    pub shell_skills: Vec<ShellSkill>,
}

/// One skill of a local `shell` environment, as its declaration gives it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct ShellSkill {
    /// The skill's name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// The folder holding its `SKILL.md` (absolute).
    pub path: PathBuf,
}

impl ShellSkill {
    /// The skills of a `shell` tool declaration with a local environment (none for
    /// any other declaration).
    ///
    /// # Errors
    /// [`BadShellTool`] for a skill without `name`, `description` and an absolute
    /// `path`.
    pub fn of_declaration(declaration: &Value) -> Result<Vec<Self>, BadShellTool> {
        let environment = &declaration["environment"];
        if declaration["type"] != "shell" || environment["type"] != "local" {
            return Ok(Vec::new());
        }
        let Some(skills) = environment.get("skills").filter(|s| !s.is_null()) else {
            return Ok(Vec::new());
        };
        let skills: Vec<Self> = serde_json::from_value(skills.clone()).map_err(|e| {
            BadShellTool(format!(
                "the shell's skills are each {{name, description, path}}: {e}"
            ))
        })?;
        if let Some(bad) = skills.iter().find(|s| !s.path.is_absolute()) {
            return Err(BadShellTool(format!(
                "the skill {}'s path {} is not absolute",
                bad.name,
                bad.path.display()
            )));
        }
        Ok(skills)
    }
}

impl NativeOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model sees the workspace root as `root`.
    #[must_use]
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// `/memories` is `dir`.
    #[must_use]
    pub fn with_memories(mut self, dir: impl Into<PathBuf>) -> Self {
        self.memories = Some(dir.into());
        self
    }

    /// `tool_use` blocks of the agent toolset's names are its calls.
    #[must_use]
    pub fn with_agent_toolset(mut self) -> Self {
        self.agent_toolset = true;
        self
    }

    /// The text editor's `max_characters`.
    #[must_use]
    pub fn with_max_characters(mut self, max: usize) -> Self {
        self.max_characters = Some(max);
        self
    }
}

/// `bash`'s own time limit when its settings do not set one.
const BASH_DEFAULT_SECS: f64 = 120.0;
/// The longest time limit `bash` takes, a day.
const BASH_MAX_SECS: f64 = 86_400.0;
/// The same, in the milliseconds the OpenAI items give.
const BASH_MAX_MS: u64 = 86_400_000;

/// A `shell` declaration whose local environment's skills cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadShellTool(pub String);

/// The folder of the agent toolset's saved `bash` output, and its one file.
#[derive(Debug)]
struct Saved {
    dir: tempfile::TempDir,
    latest: Option<PathBuf>,
}

/// `O_NOFOLLOW | O_NONBLOCK`: a link is not followed, a FIFO does not block.
fn libc_flags() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32
}

/// An item that is not a call of the contract it was given to.
#[derive(Debug, thiserror::Error)]
#[error("not a call item: {0}")]
pub struct NotACall(pub String);

/// One conversation's executor of the vendors' tool contracts: a session of its
/// own (the workspace), and one for `/memories`, opened on the first memory call.
#[derive(Debug)]
pub struct Native {
    runtime: Runtime,
    session: Arc<Session>,
    memory: Mutex<Option<Arc<Session>>>,
    agent: Mutex<Option<Arc<Session>>>,
    agent_shell_gone: AtomicBool,
    agent_toolset: bool,
    /// The agent toolset's saved `bash` output, outside the workspace.
    saved: Mutex<Option<Saved>>,
    root: String,
    memories: PathBuf,
    max_characters: Option<usize>,
}

impl Native {
    /// Opens the conversation's session in `runtime`. Its `bash` answers a non-zero
    /// exit with the output and the code (`[tools.bash] nonzero_exit = "result"`),
    /// since both contracts report exit codes as results.
    ///
    /// # Errors
    /// As [`Runtime::open_with`].
    pub fn open(runtime: &Runtime, options: NativeOptions) -> Result<Self, SessionError> {
        let mut opening = Opening::new().with_setting("bash", "nonzero_exit", "result".into());
        if !options.shell_skills.is_empty() {
            // Each skill's folder is shown, read-only, beside what the settings show.
            let mut isolation = runtime
                .settings()
                .tools
                .raw_settings("bash")
                .and_then(|b| b.get("isolation"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut shown: Vec<Value> = isolation
                .get("read_also")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            shown.extend(
                options
                    .shell_skills
                    .iter()
                    .map(|s| Value::from(s.path.to_string_lossy().into_owned())),
            );
            isolation.insert("read_also".into(), Value::Array(shown));
            opening = opening.with_setting("bash", "isolation", Value::Object(isolation));
        }
        let session = runtime.open_with(opening)?;
        let workspace = session.workspace().to_path_buf();
        let root = options
            .root
            .unwrap_or_else(|| workspace.to_string_lossy().into_owned());
        let root = format!("/{}", root.trim_matches('/'));
        Ok(Self {
            runtime: runtime.clone(),
            session: Arc::new(session),
            memory: Mutex::new(None),
            agent: Mutex::new(None),
            agent_shell_gone: AtomicBool::new(false),
            agent_toolset: options.agent_toolset,
            saved: Mutex::new(None),
            root,
            memories: options
                .memories
                .unwrap_or_else(|| workspace.join(".jianmu").join("memories")),
            max_characters: options.max_characters,
        })
    }

    /// The workspace root as the model sees it.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The workspace's real path.
    fn workspace_real(&self) -> String {
        self.session.workspace().to_string_lossy().into_owned()
    }

    /// Executes an Anthropic `tool_use` block and returns its `tool_result` block, or
    /// an agent toolset's `agent.tool_use` event and returns its `user.tool_result`.
    ///
    /// # Errors
    /// [`NotACall`] when `item` is neither.
    pub async fn anthropic(&self, item: &Value) -> Result<Value, NotACall> {
        anthropic::execute(self, item).await
    }

    /// Executes an OpenAI Responses call item (`shell_call`, `local_shell_call`,
    /// `apply_patch_call`, `custom_tool_call`, `function_call`, a client
    /// `tool_search_call`) and returns its output item.
    ///
    /// # Errors
    /// [`NotACall`] when `item` is none of those.
    pub async fn openai(&self, item: &Value) -> Result<Value, NotACall> {
        openai::execute(self, item).await
    }

    /// Closes its sessions: every shell, job and process they started ends.
    pub async fn close(&self) -> Closed {
        if let Ok(mut saved) = self.saved.lock() {
            saved.take();
        }
        for slot in [&self.memory, &self.agent] {
            let session = slot.lock().map(|mut m| m.take()).unwrap_or_default();
            if let Some(session) = session {
                session.close().await;
            }
        }
        self.session.close().await
    }

    /// Runs `work`, one whole native call, within the session's time limit (the
    /// runtime's per-call `timeout`): the editor's own work between tool calls is
    /// bounded too. `Err` holds what to tell the model when the limit ended it.
    async fn within<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, String> {
        match self.runtime.settings().timeout {
            Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| {
                format!(
                    "the call did not finish within {:.1} s, the time limit here, and was stopped; \
                     a change it was making may have been written: look before trying again, \
                     and split the work into smaller calls",
                    limit.as_secs_f64()
                )
            }),
            None => Ok(work.await),
        }
    }

    /// The arguments of a `bash` call of `command` (in the shell session `session`,
    /// if any), with a time limit: the `timeout_ms` asked (a millisecond to a day;
    /// else `bash`'s own default), at most a little under the session's limit, so
    /// that `bash` stops the command itself and keeps what it printed (the session's
    /// limit would end the call with nothing). Without either, `bash`'s default stands.
    fn bash_args(&self, command: &str, session: Option<&str>, timeout_ms: Option<u64>) -> Value {
        let mut args = json!({ "command": command });
        if let Some(session) = session {
            args["session"] = json!(session);
        }
        let settings = self.runtime.settings();
        let default = settings
            .tools
            .raw_settings("bash")
            .and_then(|b| b.get("timeout_secs"))
            .and_then(Value::as_f64)
            .unwrap_or(BASH_DEFAULT_SECS);
        let asked = timeout_ms.map(|ms| (ms.clamp(1, BASH_MAX_MS) as f64) / 1000.0);
        let under = settings.timeout.map(|limit| {
            let secs = limit.as_secs_f64();
            (secs - (secs / 10.0).min(1.0)).max(0.001)
        });
        let timeout = match under {
            Some(under) if under < asked.unwrap_or(default) => Some(under.min(BASH_MAX_SECS)),
            _ => asked,
        };
        if let Some(secs) = timeout {
            args["timeout"] = json!(secs);
        }
        args
    }

    /// Calls a tool of the workspace session.
    async fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.session.call(tool, args).await
    }

    /// The `/memories` session, opened on first use.
    fn memory(&self) -> Result<Arc<Session>, String> {
        let mut slot = self
            .memory
            .lock()
            .map_err(|_| "the memory session is unavailable".to_owned())?;
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = self
            .runtime
            // A folder's rename or delete is one patch of up to 10,000 files.
            .open_with(Opening::new().in_folder(&self.memories).with_setting(
                "apply_patch",
                "max_files",
                Value::from(anthropic::MAX_CHANGED),
            ))
            .map_err(|e| format!("the memory folder cannot be opened: {e}"))?;
        let session = Arc::new(session);
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Calls a tool of the agent toolset's session: the workspace, with `bash` keeping
    /// 8 MiB of each stream (the answer keeps 30,000 characters) and answering
    /// non-zero exits. Opened on first use.
    async fn agent_call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        let session = {
            let mut slot = self
                .agent
                .lock()
                .map_err(|_| ToolError::failed("the agent toolset's session is unavailable"))?;
            match slot.as_ref() {
                Some(session) => session.clone(),
                None => {
                    // A shell is gone only when a command or a time limit ends it (a
                    // day idle at most); `grep` answers whole, never saved.
                    let opening = Opening::new()
                        .with_setting("bash", "nonzero_exit", "result".into())
                        .with_setting("bash", "keep_head", Value::from(agent::KEPT_BYTES))
                        .with_setting("bash", "keep_tail", Value::from(0))
                        .with_setting("bash", "session_idle_secs", Value::from(86_400))
                        .with_setting("grep_search", "max_output", Value::from(agent::GREP_ANSWER));
                    let session = Arc::new(self.runtime.open_with(opening).map_err(|e| {
                        ToolError::failed(format!(
                            "the agent toolset's session cannot be opened: {e}"
                        ))
                    })?);
                    *slot = Some(session.clone());
                    session
                }
            }
        };
        session.call(tool, args).await
    }

    /// Saves a long `bash` output whole (its first [`agent::SAVED_BYTES`]) in a folder
    /// of this conversation outside the workspace, in place of the one saved before (as
    /// the reference keeps one per shell); removed when it closes. The file's path, or
    /// `None` when it could not be written.
    fn save_output(&self, text: &str) -> Option<PathBuf> {
        use std::io::Write as _;
        let mut slot = self.saved.lock().ok()?;
        if slot.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("bash-output-")
                .tempdir()
                .ok()?;
            *slot = Some(Saved { dir, latest: None });
        }
        let saved = slot.as_mut()?;
        if let Some(before) = saved.latest.take() {
            let _ = std::fs::remove_file(before);
        }
        let mut file = tempfile::Builder::new()
            .prefix("tmp")
            .suffix(".txt")
            .tempfile_in(saved.dir.path())
            .ok()?;
        let mut end = text.len().min(agent::SAVED_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        file.write_all(&text.as_bytes()[..end]).ok()?;
        let (_, path) = file.keep().ok()?;
        saved.latest = Some(path.clone());
        Some(path)
    }

    /// Removes the saved output (a restarted shell's is gone).
    fn drop_saved_output(&self) {
        if let Ok(mut slot) = self.saved.lock()
            && let Some(saved) = slot.as_mut()
            && let Some(latest) = saved.latest.take()
        {
            let _ = std::fs::remove_file(latest);
        }
    }

    /// The text of the saved `bash` output, when `path` names it: only the file this
    /// conversation wrote last, opened without following a link, a regular file of at
    /// most [`agent::SAVED_BYTES`].
    fn saved_output(&self, path: &str) -> Option<std::io::Result<String>> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let latest = {
            let slot = self.saved.lock().ok()?;
            slot.as_ref()?.latest.clone()?
        };
        if std::path::Path::new(path) != latest {
            return None;
        }
        let read = || -> std::io::Result<String> {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc_flags())
                .open(&latest)?;
            if !file.metadata()?.is_file() {
                return Err(std::io::Error::other("not a regular file"));
            }
            let mut text = String::new();
            file.take(agent::SAVED_BYTES as u64 + 1)
                .read_to_string(&mut text)?;
            Ok(text)
        };
        Some(read())
    }

    fn agent_shell_gone(&self) -> bool {
        self.agent_shell_gone.load(Ordering::Relaxed)
    }

    fn set_agent_shell_gone(&self, gone: bool) {
        self.agent_shell_gone.store(gone, Ordering::Relaxed);
    }

    /// `path` as the model wrote it (absolute under the root, or relative to it),
    /// relative to the workspace, or why not.
    fn workspace_path(&self, path: &str) -> Result<String, String> {
        let absolute = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.root.trim_end_matches('/'))
        };
        text::under(&self.root, &absolute).ok_or_else(|| {
            format!(
                "The path {path} is outside the workspace {root}: only paths under {root} can be used here.",
                root = self.root
            )
        })
    }
}
