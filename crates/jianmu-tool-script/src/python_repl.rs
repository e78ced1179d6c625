//! `python_repl`: a real CPython in a persistent child process.
//!
//! The child (`interpreter.py`) keeps one namespace across calls and answers one JSON line
//! per request, carrying the request's id (a line user code writes to the protocol
//! stream is skipped, never taken for the next answer). The interpreter runs under a
//! [`jianmu_process::Jail`] (isolated where the kernel allows, `[tools.python_repl.isolation]`);
//! after each call it ends every process the call started. The host bounds everything it
//! reads; a time limit or a cancelled call stops the interpreter and everything it
//! started, and the next call starts a fresh one, saying that the state was lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jianmu_process::{IsolationSettings, Jail, Spec, Stream, Supervised};
use jianmu_tool_core::{CallContext, Tool, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::Mutex;

use crate::truncate;

const INTERPRETER: &str = include_str!("interpreter.py");

/// Settings of `python_repl`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PythonSettings {
    /// The interpreter: a name on PATH or a path.
    pub python: PathBuf,
    /// Default time limit of one call, in seconds.
    pub timeout_secs: f64,
    /// Most characters of output returned; longer output keeps its start and end and
    /// is saved whole to a file the answer names.
    pub max_output: usize,
    /// Top-level modules user code may import; all when absent. A convenience, not a
    /// security boundary: run python_repl in the Docker sandbox for isolation.
    pub allowed_modules: Option<Vec<String>>,
    /// Names defined in the namespace at start.
    pub globals: Map<String, Value>,
    /// Working directory of the interpreter; the workspace root when absent.
    pub cwd: Option<PathBuf>,
    /// How the interpreter is isolated (`[tools.python_repl.isolation]`).
    pub isolation: IsolationSettings,
    /// Environment variables set for the interpreter (nothing else of jianmu's own
    /// environment but `PATH` is passed).
    pub env: std::collections::BTreeMap<String, String>,
    /// The outside hosts the code reaches through the session's proxy, and the
    /// credentials it sets (`[tools.python_repl.egress]`, under `[egress]`).
    pub egress: jianmu_egress::EgressSettings,
    /// Most named interpreters (`session`) kept at once (`max_sessions` is read as
    /// this too).
    #[serde(alias = "max_sessions")]
    pub max_interpreters: usize,
    /// Seconds after which an unused named interpreter is stopped and forgotten.
    pub session_idle_secs: u64,
    /// What a call without `session` runs in: `kept`, one interpreter kept across
    /// calls (the client's connection is the scope), or `fresh`, a new interpreter
    /// for each such call (for clients that hold no connection: only named sessions
    /// keep state).
    pub without_session: WithoutSession,
}

/// What a `python_repl` call without `session` runs in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WithoutSession {
    /// One interpreter, kept across calls.
    #[default]
    Kept,
    /// A new interpreter for each call, stopped when it answers.
    Fresh,
}

impl Default for PythonSettings {
    fn default() -> Self {
        Self {
            python: PathBuf::from("python3"),
            timeout_secs: 30.0,
            max_output: 10_000,
            allowed_modules: None,
            globals: Map::new(),
            cwd: None,
            isolation: IsolationSettings::default(),
            env: std::collections::BTreeMap::new(),
            egress: jianmu_egress::EgressSettings::default(),
            max_interpreters: 8,
            session_idle_secs: 3600,
            without_session: WithoutSession::Kept,
        }
    }
}

/// Arguments of `python_repl`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PythonArgs {
    /// Python code. What it prints is returned, then the value of its last line when
    /// that is an expression (as a notebook cell; `None` shows nothing). Names persist
    /// between calls.
    pub code: String,
    /// Time limit of this call in seconds (default 30). When it passes, the answer is
    /// what the code printed until then, and the interpreter is stopped: its state is
    /// lost.
    #[schemars(range(min = 0.001, max = 3600.0))]
    pub timeout: Option<f64>,
    /// A named interpreter: calls with the same name share its names and imports,
    /// apart from other names'. Pass one (any name you choose) to keep state between
    /// calls wherever the client holds no connection; without it, such a call runs
    /// in a fresh interpreter.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub session: Option<String>,
    /// Start a fresh interpreter (the named one with `session`) before running
    /// `code`: every name and import is forgotten.
    #[serde(default)]
    pub reset: bool,
}

struct Interpreter {
    process: Supervised,
    input: pipe::Sender,
    output: BufReader<pipe::Receiver>,
    /// The id of the last request sent.
    last_id: u64,
}

/// The first line of the answer after an interpreter was stopped by a cancelled call.
const LOST_CANCELLED: &str = "[the previous call was cancelled before it finished, so the interpreter was stopped: its variables and imports are lost, and this call ran in a fresh one]";
/// The same after a call's time limit.
const LOST_TIMEOUT: &str = "[the previous call ran past its time limit, so the interpreter was stopped: its variables and imports are lost, and this call ran in a fresh one]";
/// The same after the interpreter died or misbehaved.
const LOST_FAILED: &str = "[the previous interpreter ended (see the previous answer): its variables and imports are lost, and this call ran in a fresh one]";
/// The same when the interpreter ended between calls.
const LOST_BETWEEN: &str = "[the interpreter had ended since the previous call (the code left something that stopped it): its variables and imports are lost, and this call ran in a fresh one]";

/// The interpreter slot, and why the last interpreter was lost, for the next call's
/// answer to say so first.
#[derive(Default)]
struct State {
    interpreter: Option<Interpreter>,
    lost: Option<&'static str>,
}

/// Stops the interpreter if the call using it is dropped before it finished (a runner
/// time limit, an MCP cancel): a half-done exchange never reaches the next call.
struct InFlight<'a> {
    state: &'a mut State,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Dropping the supervised process stops it and all it started.
            self.state.interpreter = None;
            self.state.lost = Some(LOST_CANCELLED);
        }
    }
}

type Slot = Arc<Mutex<State>>;

/// The named interpreters (`session`), each with when it was last used.
#[derive(Default)]
struct Named {
    map: std::sync::Mutex<std::collections::HashMap<String, (Slot, Instant)>>,
    /// Set once a task stops idle interpreters on its own.
    watched: std::sync::atomic::AtomicBool,
}

impl Named {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (Slot, Instant)>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes the interpreters unused for `idle` and not in a call; they stop when
    /// the returned slots are dropped (outside the lock).
    fn take_idle(&self, idle: Duration) -> Vec<Slot> {
        let now = Instant::now();
        self.lock()
            .extract_if(|_, (slot, used)| {
                now.duration_since(*used) >= idle && slot.try_lock().is_ok()
            })
            .map(|(_, (slot, _))| slot)
            .collect()
    }

    /// Stops interpreters unused for `idle` without waiting for a call: a task looks
    /// every quarter of `idle` (1 s to 60 s) for as long as the tool exists.
    fn watch(self: &Arc<Self>, idle: Duration) {
        use std::sync::atomic::Ordering;
        if self.watched.swap(true, Ordering::Relaxed) {
            return;
        }
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let started = jianmu_tool_core::spawn_periodic(Arc::downgrade(self), every, move |named| {
            drop(named.take_idle(idle));
        });
        if !started {
            self.watched.store(false, Ordering::Relaxed);
        }
    }

    /// The interpreter named `name`, made (empty) if there is room.
    fn open(&self, name: &str, max: usize, idle: Duration) -> Result<Slot, ToolError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(ToolError::failed(
                "`session` is 1 to 64 letters, digits, `_`, `.` or `-`",
            ));
        }
        drop(self.take_idle(idle));
        let mut map = self.lock();
        if let Some((slot, used)) = map.get_mut(name) {
            *used = Instant::now();
            return Ok(Arc::clone(slot));
        }
        if map.len() >= max {
            let mut names: Vec<&str> = map.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(ToolError::failed(format!(
                "there are already {max} Python sessions, the limit; reuse one of them ({}), or wait until one has been idle for {} s",
                names.join(", "),
                idle.as_secs()
            )));
        }
        let slot = Slot::default();
        map.insert(name.to_owned(), (Arc::clone(&slot), Instant::now()));
        Ok(slot)
    }
}

/// The `python_repl` tool. Calls on one interpreter run one at a time.
#[derive(Clone)]
pub struct PythonRepl {
    settings: Arc<PythonSettings>,
    cwd: PathBuf,
    jail: Jail,
    state: Slot,
    named: Arc<Named>,
    saver: Option<jianmu_workspace::Saver>,
}

impl std::fmt::Debug for PythonRepl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonRepl")
            .field("settings", &self.settings)
            .field("isolation", &self.jail.describe())
            .finish_non_exhaustive()
    }
}

/// Why the interpreter could not answer.
enum Lost {
    Timeout(Duration),
    Exited,
    Broken(String),
}

impl PythonRepl {
    /// A REPL whose interpreter starts in `cwd` (the workspace).
    ///
    /// # Errors
    /// The isolation the settings require is not available.
    pub fn new(settings: PythonSettings, cwd: PathBuf) -> Result<Self, ToolError> {
        let cwd = settings.cwd.clone().unwrap_or(cwd);
        let jail = Jail::new(&settings.isolation, &cwd)
            .map_err(|e| {
                ToolError::failed(format!(
                    "python_repl: {}",
                    jianmu_tool_core::error_chain(&e)
                ))
            })?
            .showing_programs([&settings.python]);
        Ok(Self {
            settings: Arc::new(settings),
            cwd,
            jail,
            state: Arc::default(),
            named: Arc::default(),
            saver: None,
        })
    }

    /// What isolation is in force, in one line.
    pub fn isolation(&self) -> &str {
        self.jail.describe()
    }

    /// Says in `kept` which interpreters run: they cannot survive a suspension.
    #[must_use]
    pub fn with_kept(self, kept: &jianmu_tool_core::Kept) -> Self {
        let (state, named) = (Arc::downgrade(&self.state), Arc::downgrade(&self.named));
        kept.lists("interpreter", move || {
            let mut out = Vec::new();
            if let Some(state) = state.upgrade()
                && state.try_lock().map_or(true, |s| s.interpreter.is_some())
            {
                out.push("the default one (no `session`)".to_owned());
            }
            if let Some(named) = named.upgrade() {
                let mut names: Vec<String> = named.lock().keys().cloned().collect();
                names.sort();
                out.extend(names);
            }
            out
        });
        self
    }

    /// Runs the interpreter in `network`, the private network of its session (shared
    /// with its other tools), where one is in force; by default each has its own.
    #[must_use]
    pub fn with_network(mut self, network: Arc<jianmu_process::Network>) -> Self {
        self.jail = self.jail.sharing_network(network);
        self
    }

    /// Opens the doors its settings name (`egress`, `isolation.host_services`) in
    /// its session's network, whose doors are `door`.
    ///
    /// # Errors
    /// Egress settings that cannot be used (why, in the message).
    pub fn with_egress(mut self, door: Arc<jianmu_egress::Door>) -> Result<Self, ToolError> {
        self.jail = jianmu_egress::with_doors(
            self.jail,
            door,
            &self.settings.egress,
            &self.settings.isolation.host_services,
            Self::NAME,
        )?;
        Ok(self)
    }

    /// Saves output longer than `max_output` with `saver`: the answer keeps its head
    /// and tail and says where the whole is.
    #[must_use]
    pub fn with_saver(mut self, saver: jianmu_workspace::Saver) -> Self {
        self.saver = Some(saver);
        self
    }

    /// Characters of an answer the interpreter keeps.
    fn kept(&self) -> usize {
        if self.saver.is_some() {
            crate::KEPT_FOR_SAVING.max(self.settings.max_output)
        } else {
            self.settings.max_output
        }
    }

    /// `text` as the answer shows it ([`crate::bounded`]).
    fn bounded(&self, text: &str, dropped: u64) -> String {
        crate::bounded(text, self.settings.max_output, self.saver.as_ref(), dropped)
    }

    async fn start(&self) -> Result<Interpreter, ToolError> {
        let python = &self.settings.python;
        let mut spec = Spec::new(python);
        spec.arg("-u")
            .arg("-I")
            .arg("-c")
            .arg(INTERPRETER)
            .current_dir(&self.cwd)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .stdin(Stream::Piped)
            .stdout(Stream::Piped);
        if let Some(tmp) = self.jail.tmp() {
            spec.env("TMPDIR", tmp);
        }
        for (k, v) in &self.settings.env {
            spec.env(k, v);
        }
        let mut process = self.jail.spawn(&spec).map_err(|e| {
            ToolError::failed(format!(
                "cannot start the Python interpreter `{}`: {e}; install python3 or set `python` in [tools.python_repl]",
                python.display()
            ))
        })?;
        let (Some(input), Some(output)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(ToolError::failed("the Python interpreter has no pipes"));
        };
        let mut interp = Interpreter {
            process,
            input,
            output: BufReader::new(output),
            last_id: 0,
        };
        let config = json!({
            "max_output": self.settings.max_output,
            "keep": self.kept(),
            "allowed_modules": self.settings.allowed_modules,
            "globals": self.settings.globals,
            "own_pid_namespace": self.jail.own_pid_namespace(),
        });
        let start = async {
            send(&mut interp, &config).await?;
            receive(&mut interp, 4096, None, &mut Printed::default()).await
        };
        match tokio::time::timeout(Duration::from_secs(10), start).await {
            Ok(Ok(ready)) if ready.get("ready").is_some() => Ok(interp),
            _ => Err(ToolError::failed(format!(
                "the Python interpreter `{}` did not start (is it Python 3?)",
                python.display()
            ))),
        }
    }

    /// Runs `args` on a live interpreter (starting one if needed).
    ///
    /// # Errors
    /// The code's exception (its traceback's last lines), a timeout, or an interpreter
    /// that died; the last two lose the interpreter's state, and say so.
    pub async fn run(&self, args: &PythonArgs) -> Result<ToolOutput, ToolError> {
        let slot = match &args.session {
            Some(name) => {
                let idle = Duration::from_secs(self.settings.session_idle_secs);
                self.named.watch(idle);
                self.named
                    .open(name, self.settings.max_interpreters, idle)?
            }
            None if self.settings.without_session == WithoutSession::Fresh => {
                // Its own interpreter, stopped when the slot is dropped after the call.
                Slot::default()
            }
            None => Arc::clone(&self.state),
        };
        let mut state = slot.lock().await;
        if args.reset {
            // Dropping the interpreter stops it and everything it started.
            state.interpreter = None;
            state.lost = None;
        }
        // An interpreter that ended between calls is replaced, and the answer says so.
        if let Some(interp) = state.interpreter.as_mut()
            && interp.process.try_wait().ok().flatten().is_some()
        {
            state.interpreter = None;
            state.lost = Some(LOST_BETWEEN);
        }
        let notice = state.lost.take();
        let outcome = self.exchange(&mut state, args).await;
        match notice {
            None => outcome,
            Some(notice) => {
                let prefix = format!("{notice}\n");
                match outcome {
                    Ok(mut out) => {
                        out.text.insert_str(0, &prefix);
                        Ok(out)
                    }
                    Err(ToolError::Failed { message }) => {
                        Err(ToolError::failed(format!("{prefix}{message}")))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    async fn exchange(
        &self,
        state: &mut State,
        args: &PythonArgs,
    ) -> Result<ToolOutput, ToolError> {
        if state.interpreter.is_none() {
            state.interpreter = Some(self.start().await?);
        }
        let timeout =
            Duration::try_from_secs_f64(args.timeout.unwrap_or(self.settings.timeout_secs))
                .unwrap_or(Duration::from_secs(30));
        // A bound on one answer: the child caps what it captures, so anything much
        // longer means it is misbehaving.
        let bound = self.kept() * 12 + 64 * 1024;
        let mut flight = InFlight { state, armed: true };
        let Some(interp) = flight.state.interpreter.as_mut() else {
            return Err(ToolError::failed("the Python interpreter is not running"));
        };
        let mut printed = Printed::default();
        let exchange = async {
            interp.last_id += 1;
            let id = interp.last_id;
            send(interp, &json!({"id": id, "code": args.code})).await?;
            receive(interp, bound, Some(id), &mut printed).await
        };
        let outcome = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(lost)) => Err(lost),
            Err(_) => Err(Lost::Timeout(timeout)),
        };
        flight.armed = false;
        match outcome {
            Ok(answer) => Ok(self.render(&answer)?),
            Err(lost) => {
                let status = match flight.state.interpreter.take() {
                    Some(mut i) => {
                        i.process.stop_and_wait().await;
                        i.process.try_wait().ok().flatten()
                    }
                    None => None,
                };
                let why = match lost {
                    Lost::Timeout(after) => {
                        // As `bash` does: what it printed until then, and why it ended.
                        flight.state.lost = Some(LOST_TIMEOUT);
                        // The next call's answer says first that the state is lost.
                        let partial = printed.text(self.settings.max_output);
                        return Err(ToolError::Timeout {
                            tool: Self::NAME.to_owned(),
                            after,
                            partial: Some(partial),
                        });
                    }
                    Lost::Exited => match status.and_then(|s| s.code()) {
                        Some(code) => format!("the Python interpreter exited with code {code}"),
                        None => "the Python interpreter was killed".to_owned(),
                    },
                    Lost::Broken(what) => format!("the Python interpreter misbehaved ({what})"),
                };
                flight.state.lost = Some(LOST_FAILED);
                Err(ToolError::failed(format!(
                    "{why}; it was stopped with everything it started, and its state (variables, imports) is lost; the next call starts a fresh interpreter"
                )))
            }
        }
    }

    fn render(&self, answer: &Value) -> Result<ToolOutput, ToolError> {
        let field = |k: &str| answer.get(k).and_then(Value::as_str).unwrap_or("");
        let dropped = answer.get("dropped").and_then(Value::as_u64).unwrap_or(0);
        // What the code printed, then the value of its last expression (as a
        // notebook shows a cell).
        let mut text = field("stdout").to_owned();
        if let Some(value) = answer.get("value").and_then(Value::as_str) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(value);
        }
        append_stderr(&mut text, field("stderr"));
        if let Some(error) = answer.get("error").and_then(Value::as_str) {
            let mut message = String::new();
            if !text.is_empty() {
                message.push_str(&self.bounded(&text, dropped));
                if !message.ends_with('\n') {
                    message.push('\n');
                }
            }
            message.push_str(error);
            return Err(ToolError::failed(message));
        }
        Ok(ToolOutput::text(self.bounded(&text, dropped)))
    }
}

async fn send(interp: &mut Interpreter, message: &Value) -> Result<(), Lost> {
    let mut line = message.to_string();
    line.push('\n');
    interp
        .input
        .write_all(line.as_bytes())
        .await
        .map_err(|_| Lost::Exited)?;
    interp.input.flush().await.map_err(|_| Lost::Exited)
}

/// Appends what the code wrote to stderr, if anything, under a `[stderr]` line.
fn append_stderr(text: &mut String, stderr: &str) {
    if stderr.is_empty() {
        return;
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("[stderr]\n");
    text.push_str(stderr);
}

/// What a request printed so far, from its `partial` lines: kept up to a bound.
#[derive(Default)]
struct Printed {
    stdout: String,
    stderr: String,
}

impl Printed {
    /// Adds a `partial` line's text, each stream kept to `bound` bytes.
    fn add(&mut self, partial: &Value, bound: usize) {
        for (stream, kept) in [("stdout", &mut self.stdout), ("stderr", &mut self.stderr)] {
            if let Some(text) = partial.get(stream).and_then(Value::as_str) {
                let room = bound.saturating_sub(kept.len());
                let mut end = text.len().min(room);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                kept.push_str(&text[..end]);
            }
        }
    }

    /// The text as an answer shows it (stderr after stdout), at most `limit`
    /// characters with start and end kept.
    fn text(&self, limit: usize) -> String {
        let mut text = self.stdout.clone();
        append_stderr(&mut text, &self.stderr);
        truncate(&text, limit)
    }
}

/// Reads the answer to request `id` (any answer for `None`), each line at most `bound`
/// bytes; its `partial` lines (what it printed, as it printed it) go to `printed`.
/// Other lines (user code can write to the protocol stream) are skipped, a bounded
/// number of them.
async fn receive(
    interp: &mut Interpreter,
    bound: usize,
    id: Option<u64>,
    printed: &mut Printed,
) -> Result<Value, Lost> {
    let mut stray = 0;
    while stray < 1000 {
        let line = read_line(interp, bound).await?;
        let Ok(answer) = serde_json::from_slice::<Value>(&line) else {
            stray += 1;
            continue;
        };
        let ours = id.is_none_or(|id| answer.get("id").and_then(Value::as_u64) == Some(id));
        match answer.get("partial") {
            // Partial output is bounded by `printed`, and its lines by the call's time
            // limit: they are not counted as stray.
            Some(partial) if ours => printed.add(partial, bound),
            _ if ours => return Ok(answer),
            _ => stray += 1,
        }
    }
    Err(Lost::Broken(
        "too many stray lines on the protocol stream".into(),
    ))
}

/// One line of at most `bound` bytes.
async fn read_line(interp: &mut Interpreter, bound: usize) -> Result<Vec<u8>, Lost> {
    let mut line = Vec::new();
    loop {
        let buf = interp.output.fill_buf().await.map_err(|_| Lost::Exited)?;
        if buf.is_empty() {
            return Err(Lost::Exited);
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        interp.output.consume(take);
        if line.len() > bound {
            return Err(Lost::Broken(format!("an answer over {bound} bytes")));
        }
        if done {
            return Ok(line);
        }
    }
}

impl Tool for PythonRepl {
    type Args = PythonArgs;
    type Output = ToolOutput;
    type Error = ToolError;

    const NAME: &'static str = "python_repl";

    const DESCRIPTION: &'static str = "Runs Python code in a persistent CPython interpreter and returns what it printed, \
     then the value of its last line when that is an expression, as a notebook cell \
     shows it (stderr appended; long output keeps its start and end, and the whole is \
     saved to a file the answer names).\n\
     Names and imports persist between calls. Pass `session` (a name you choose) to keep \
     them in that named interpreter: where the client keeps no connection between requests, \
     a call without `session` runs in a fresh interpreter. `reset` starts afresh. An exception comes back as the end of its \
     traceback. A call past its time limit (30 s by default) answers with what it printed \
     until then and stops the interpreter: its state is lost, and the next call's answer \
     starts by saying so. Processes the code starts end with its call. Where the host allows, \
     the code can write only in the workspace and $TMPDIR.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["code:exec"];

    async fn call(&self, args: PythonArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        self.run(&args).await
    }
}
