//! `python_repl`: a real CPython in a persistent child process.
//!
//! The child (`runner.py`) keeps one namespace across calls and answers one JSON line
//! per request. The host bounds everything it reads, kills the child's whole process
//! group on timeout, and starts a fresh interpreter on the next call after a timeout or
//! a crash, saying that the state was lost.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{CallContext, Tool, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::truncate;

const RUNNER: &str = include_str!("runner.py");

/// Settings of `python_repl`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PythonSettings {
    /// The interpreter: a name on PATH or a path.
    pub python: PathBuf,
    /// Default time limit of one call, in seconds.
    pub timeout_secs: f64,
    /// Most characters of output returned; more is cut with a notice.
    pub max_output: usize,
    /// Top-level modules user code may import; all when absent. A convenience, not a
    /// security boundary: run python_repl in the Docker sandbox for isolation.
    pub allowed_modules: Option<Vec<String>>,
    /// Names defined in the namespace at start.
    pub globals: Map<String, Value>,
    /// Working directory of the interpreter; the workspace root when absent.
    pub cwd: Option<PathBuf>,
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
        }
    }
}

/// Arguments of `python_repl`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PythonArgs {
    /// Python code. An expression's value is returned; statements run and their printed
    /// output is returned. Names persist between calls.
    pub code: String,
    /// Time limit of this call in seconds (default 30). When it passes, the
    /// interpreter is stopped and its state is lost.
    #[schemars(range(min = 0.001, max = 3600.0))]
    pub timeout: Option<f64>,
}

struct Interpreter {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    /// A request was sent and its answer not read: the call that sent it was dropped
    /// (cancelled). The answer must be read, and thrown away, before the next request.
    pending: bool,
}

impl Interpreter {
    /// Kills the interpreter and everything it started.
    fn kill(&mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `python_repl` tool. Calls on one instance run one at a time.
#[derive(Clone)]
pub struct PythonRepl {
    settings: Arc<PythonSettings>,
    cwd: PathBuf,
    interpreter: Arc<Mutex<Option<Interpreter>>>,
}

impl std::fmt::Debug for PythonRepl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonRepl")
            .field("settings", &self.settings)
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
    /// A REPL whose interpreter starts in `cwd`.
    pub fn new(settings: PythonSettings, cwd: PathBuf) -> Self {
        let cwd = settings.cwd.clone().unwrap_or(cwd);
        Self {
            settings: Arc::new(settings),
            cwd,
            interpreter: Arc::new(Mutex::new(None)),
        }
    }

    async fn start(&self) -> Result<Interpreter, ToolError> {
        let python = &self.settings.python;
        let mut cmd = jianmu_process::command(python);
        cmd.args(["-u", "-I", "-c", RUNNER])
            .current_dir(&self.cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::failed(format!(
                "cannot start the Python interpreter `{}`: {e}; install python3 or set `python` in [tools.python_repl]",
                python.display()
            ))
        })?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ToolError::failed("the Python interpreter has no pipes"));
        };
        let mut interp = Interpreter {
            child,
            input,
            output: BufReader::new(output),
            pending: false,
        };
        let config = json!({
            "max_output": self.settings.max_output,
            "allowed_modules": self.settings.allowed_modules,
            "globals": self.settings.globals,
        });
        let start = async {
            send(&mut interp, &config).await?;
            receive(&mut interp, 4096).await
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
        let mut slot = self.interpreter.lock().await;
        if slot.is_none() {
            *slot = Some(self.start().await?);
        }
        let Some(interp) = slot.as_mut() else {
            return Err(ToolError::failed("the Python interpreter is not running"));
        };
        let timeout =
            Duration::try_from_secs_f64(args.timeout.unwrap_or(self.settings.timeout_secs))
                .unwrap_or(Duration::from_secs(30));
        // A bound on one answer: the child caps what it captures, so anything much
        // longer means it is misbehaving.
        let bound = self.settings.max_output * 12 + 64 * 1024;
        let exchange = async {
            if interp.pending {
                receive(interp, bound).await?;
                interp.pending = false;
            }
            send(interp, &json!({"code": args.code})).await?;
            interp.pending = true;
            let answer = receive(interp, bound).await?;
            interp.pending = false;
            Ok(answer)
        };
        let outcome = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(lost)) => Err(lost),
            Err(_) => Err(Lost::Timeout(timeout)),
        };
        match outcome {
            Ok(answer) => Ok(self.render(&answer)?),
            Err(lost) => {
                let mut dead = slot.take();
                let status = match dead.as_mut() {
                    Some(i) => {
                        i.kill();
                        i.child.wait().await.ok()
                    }
                    None => None,
                };
                let why = match lost {
                    Lost::Timeout(t) => {
                        format!("the code ran past the time limit of {} s", t.as_secs_f64())
                    }
                    Lost::Exited => match status.and_then(|s| s.code()) {
                        Some(code) => format!("the Python interpreter exited with code {code}"),
                        None => "the Python interpreter was killed".to_owned(),
                    },
                    Lost::Broken(what) => format!("the Python interpreter misbehaved ({what})"),
                };
                Err(ToolError::failed(format!(
                    "{why}; it was stopped and its state (variables, imports) is lost; the next call starts a fresh interpreter"
                )))
            }
        }
    }

    fn render(&self, answer: &Value) -> Result<ToolOutput, ToolError> {
        let field = |k: &str| answer.get(k).and_then(Value::as_str).unwrap_or("");
        let dropped = answer.get("dropped").and_then(Value::as_u64).unwrap_or(0);
        let mut text = match answer.get("value").and_then(Value::as_str) {
            Some(value) => value.to_owned(),
            None => field("stdout").to_owned(),
        };
        let stderr = field("stderr");
        if !stderr.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("[stderr]\n");
            text.push_str(stderr);
        }
        if let Some(error) = answer.get("error").and_then(Value::as_str) {
            let mut message = String::new();
            if !text.is_empty() {
                message.push_str(&truncate(&text, self.settings.max_output));
                if !message.ends_with('\n') {
                    message.push('\n');
                }
            }
            message.push_str(error);
            return Err(ToolError::failed(message));
        }
        let mut text = truncate(&text, self.settings.max_output);
        if dropped > 0 && !text.contains("(output truncated") {
            text.push_str(&format!(
                "\n... (output truncated: {dropped} more characters)"
            ));
        }
        Ok(ToolOutput::text(text))
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

/// Reads one answer line of at most `bound` bytes.
async fn receive(interp: &mut Interpreter, bound: usize) -> Result<Value, Lost> {
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
            break;
        }
    }
    serde_json::from_slice(&line).map_err(|e| Lost::Broken(format!("an unreadable answer: {e}")))
}

impl Tool for PythonRepl {
    type Args = PythonArgs;
    type Output = ToolOutput;
    type Error = ToolError;

    fn name(&self) -> &str {
        "python_repl"
    }

    fn description(&self) -> &str {
        "Runs Python code in a persistent CPython interpreter and returns the value of an \
         expression, or the printed output of statements (stderr appended).\n\
         Names and imports persist between calls. An exception comes back as the end of its \
         traceback. A call past its time limit (30 s by default) stops the interpreter and \
         loses its state. The code runs with the tool's own permissions: use the Docker \
         sandbox to isolate it."
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn effect_tags(&self) -> &[&str] {
        &["code:exec"]
    }

    async fn call(&self, args: PythonArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        self.run(&args).await
    }
}
