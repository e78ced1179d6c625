//! The `bash` tool (the Python tools' `BashTool`; docs/python-compat.md): runs a command
//! with `bash -c`.
//!
//! The Python tool's contract: the command comes from `command`, else `input`, else `cmd`;
//! success answers stdout; failure is a tool error `Error ({code}):\n{stderr}`. Beyond
//! it: every command runs under a [`jianmu_process::Jail`] supervisor, so nothing it
//! starts (in the background, with `setsid`, double forked) outlives the call, whether
//! it ends, times out (120 s by default, per call overridable) or is cancelled; where the
//! kernel allows (`[tools.bash.isolation]`), it runs in its own PID namespace with
//! Landlock and seccomp: it cannot read other processes' `/proc` entries, writes only
//! the workspace and a private `TMPDIR`, and has no network. stdin is `/dev/null`; the
//! working directory is the workspace; stdout and stderr keep their first and last
//! bytes and are always drained; and the environment is an allow-list, so the command
//! does not inherit the host's variables. It can still read what the `jianmu` process
//! can read: use the Docker sandbox to hide files.
#![deny(missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{
    CallContext, Progress, Structured, Tool, ToolConfig, ToolError, ToolHandle, ToolSpec,
};
use serde::{Deserialize, Serialize};

mod capture;
mod expose;
mod job_tools;
mod jobs;
mod shells;

pub use expose::{ExposeArgs, ExposePort, Exposed};
pub use job_tools::{
    BashJobs, BashKill, BashOutput, JobArgs, JobListArgs, OutputArgs, OutputSettings,
};
pub use jobs::{JobInfo, JobList, JobStatus, Jobs};

/// How often a running command reports progress, when the caller wants reports.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long `bash` with `background` waits before answering, by default.
const DEFAULT_YIELD_MS: u64 = 1000;

use jianmu_process::{IsolationSettings, Jail, Spec, Stream};

/// Settings of `bash` (`[tools.bash]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BashSettings {
    /// The shell.
    pub shell: PathBuf,
    /// Default time limit of one command, in seconds.
    pub timeout_secs: f64,
    /// Bytes kept from the start of each stream.
    pub keep_head: usize,
    /// Bytes kept from the end of each stream.
    pub keep_tail: usize,
    /// Environment variables passed through from the host, by name.
    pub env_allow: Vec<String>,
    /// Environment variables set for every command.
    pub env: std::collections::BTreeMap<String, String>,
    /// How commands are isolated (`[tools.bash.isolation]`).
    pub isolation: IsolationSettings,
    /// The outside hosts commands reach through the session's proxy, and the
    /// credentials it sets (`[tools.bash.egress]`, under `[egress]`).
    pub egress: jianmu_egress::EgressSettings,
    /// Most shell sessions kept at once (`max_sessions` is read as this too).
    #[serde(alias = "max_sessions")]
    pub max_shell_sessions: usize,
    /// Seconds after which an unused session is forgotten.
    pub session_idle_secs: u64,
    /// Most background jobs running at once.
    pub max_jobs: usize,
    /// What a command that exits non-zero gives: `error` (the default: an error
    /// with `Error (CODE):` and its stderr) or `result` (an answer with its stdout,
    /// its stderr and `Exit code: CODE`, and all three in the structured result).
    pub nonzero_exit: NonzeroExit,
}

/// What `bash` answers for a command that exits non-zero (`nonzero_exit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NonzeroExit {
    /// An error with the exit code and stderr.
    #[default]
    Error,
    /// An answer with stdout, stderr and the exit code.
    Result,
}

impl Default for BashSettings {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("bash"),
            timeout_secs: 120.0,
            keep_head: 16 * 1024,
            keep_tail: 16 * 1024,
            env_allow: [
                "PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME",
            ]
            .map(str::to_owned)
            .to_vec(),
            env: Default::default(),
            isolation: IsolationSettings::default(),
            egress: jianmu_egress::EgressSettings::default(),
            max_shell_sessions: 16,
            session_idle_secs: 3600,
            max_jobs: 16,
            nonzero_exit: NonzeroExit::Error,
        }
    }
}

/// Arguments of `bash`: the command in `command` (or, as the Python tool accepts, `input` or
/// `cmd`).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command line, run with `bash -c` in the workspace.
    pub command: Option<String>,
    /// Same as `command`, for callers that name it `input`.
    pub input: Option<String>,
    /// Same as `command`, for callers that name it `cmd`.
    pub cmd: Option<String>,
    /// Time limit in seconds (default 120; none for a background job); when it passes
    /// the whole process tree is killed.
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout: Option<f64>,
    /// A shell session: calls with the same id keep the working directory and
    /// exported variables the previous call left (`cd`, `export`).
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub session: Option<String>,
    /// With `session`: start the session afresh (the workspace root, the default
    /// environment).
    #[serde(default)]
    pub reset: bool,
    /// Run the command as a background job (servers, watchers, long builds): answer
    /// after `yield_ms` with a job id and the output so far, and keep it running; read
    /// it with `bash_output`, stop it with `bash_kill`, list jobs with `bash_jobs`.
    #[serde(default)]
    pub background: bool,
    /// With `background`: milliseconds to wait (less if the command ends) before
    /// answering with its output so far; default 1000.
    #[schemars(range(max = 600_000))]
    pub yield_ms: Option<u64>,
    /// With `background`: run the job on a terminal, for programs that need one
    /// (REPLs, prompts, pagers, full-screen programs). `bash_output` then shows its
    /// screen and whether it waits for input; its `input` is typed, control keys
    /// included (`\u0003` is Ctrl-C, `\u0004` Ctrl-D, `\u001b` Escape).
    #[serde(default)]
    pub tty: bool,
    /// With `tty`: the terminal's rows (default 24).
    #[schemars(range(min = 2, max = 200))]
    pub rows: Option<u16>,
    /// With `tty`: the terminal's columns (default 80).
    #[schemars(range(min = 10, max = 300))]
    pub cols: Option<u16>,
}

/// The `bash` tool.
#[derive(Debug, Clone)]
pub struct Bash {
    settings: BashSettings,
    cwd: PathBuf,
    jail: Jail,
    sessions: Arc<shells::Shells>,
    jobs: Arc<Jobs>,
    spiller: Option<jianmu_workspace::Saver>,
}

impl Bash {
    /// A `bash` running commands in `cwd`.
    ///
    /// # Errors
    /// The isolation the settings require is not available.
    pub fn new(settings: BashSettings, cwd: PathBuf) -> Result<Self, ToolError> {
        let jail = Jail::new(&settings.isolation, &cwd)
            .map_err(|e| ToolError::failed(format!("bash: {}", jianmu_tool_core::error_chain(&e))))?
            .showing_programs([&settings.shell]);
        Ok(Self {
            settings,
            cwd,
            jail,
            sessions: Arc::default(),
            jobs: Arc::default(),
            spiller: None,
        })
    }

    /// What isolation is in force, in one line.
    pub fn isolation(&self) -> &str {
        self.jail.describe()
    }

    /// Runs commands in `network`, the private network of their session (shared with
    /// its other tools), where one is in force; by default each `bash` has its own.
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

    /// Saves output too long to keep whole with `saver`: the answer keeps its head and
    /// tail and says where the whole is. Without it, the middle is dropped.
    #[must_use]
    pub fn with_saver(mut self, saver: jianmu_workspace::Saver) -> Self {
        self.spiller = Some(saver);
        self
    }

    /// Shares `jobs` with the job tools (`bash_output`, `bash_kill`, `bash_jobs`) built
    /// with the same table; by default each `bash` has a table of its own.
    #[must_use]
    pub fn with_jobs(mut self, jobs: Arc<Jobs>) -> Self {
        self.jobs = jobs;
        self
    }

    /// Keeps each shell session's folder and exports in `kept` after every call, and
    /// starts a session of a name `kept` was given from that state (a resumed
    /// session's).
    #[must_use]
    pub fn with_kept(mut self, kept: Arc<jianmu_tool_core::Kept>) -> Self {
        self.sessions = Arc::new(shells::Shells::keeping(kept));
        self
    }

    /// Runs the command.
    ///
    /// # Errors
    /// No command, a shell that cannot start, a non-zero exit (`Error (N):\nstderr`), a
    /// timeout.
    pub async fn run(
        &self,
        args: &BashArgs,
        cx: &CallContext,
    ) -> Result<Structured<BashResult>, ToolError> {
        let command = [&args.command, &args.input, &args.cmd]
            .into_iter()
            .flatten()
            .map(|c| c.trim())
            .find(|c| !c.is_empty())
            .ok_or_else(|| ToolError::failed("no command given: pass it as `command`"))?;
        let session = match &args.session {
            Some(id) => {
                let idle = Duration::from_secs(self.settings.session_idle_secs);
                self.sessions.watch(idle);
                Some(self.sessions.open(
                    id,
                    args.reset,
                    self.settings.max_shell_sessions,
                    idle,
                    self.jail.tmp(),
                )?)
            }
            None => None,
        };
        if args.background {
            // A background job starts where the session is but does not change it.
            let mut spec = self.base_spec();
            if args.tty {
                // The shell keeps job control and runs the command in a subshell, a
                // job of its own: the command (even one that `exec`s) is the
                // terminal's foreground group, which Ctrl-C reaches, and never the
                // first process of its namespace, which ignores signals it does not
                // handle.
                spec.arg("-c")
                    .arg("set -m 2>/dev/null; ( eval \"$1\" ); exit $?")
                    .arg(&self.settings.shell)
                    .arg(command);
            } else {
                spec.arg("-c").arg(command);
            }
            if let Some(s) = &session {
                s.job_start(&mut spec).await;
            }
            if args.tty && !spec.has_env("TERM") {
                spec.env("TERM", "xterm-256color");
            }
            return self.start_job(command, spec, args).await;
        }
        if args.tty || args.rows.is_some() || args.cols.is_some() {
            return Err(ToolError::failed(
                "`tty`, `rows` and `cols` go with `background: true`: a terminal job is \
                 driven with bash_output",
            ));
        }
        let limit = Duration::try_from_secs_f64(args.timeout.unwrap_or(self.settings.timeout_secs))
            .unwrap_or(Duration::from_secs(120));
        let counter = cx.wants_progress().then(capture::Counter::default);
        let ended = match &session {
            Some(session) => {
                let launch = shells::Launch {
                    jail: &self.jail,
                    spec: self.base_spec(),
                    keep_head: self.settings.keep_head,
                    keep_tail: self.settings.keep_tail,
                    spiller: self.spiller.clone(),
                };
                reporting(
                    session.run(launch, command, limit, counter.as_ref()),
                    counter.as_ref(),
                    cx,
                )
                .await?
            }
            None => {
                reporting(
                    self.run_once(command, limit, counter.as_ref()),
                    counter.as_ref(),
                    cx,
                )
                .await?
            }
        };
        let (code, stdout, stderr, shell_ended, cuts) = match ended {
            shells::Ended::Finished {
                code,
                stdout,
                stderr,
                shell_ended,
            } => (
                code,
                stdout.text(),
                stderr.text(),
                shell_ended,
                (stdout.cut(), stderr.cut()),
            ),
            shells::Ended::TimedOut { stdout, stderr } => {
                // What it printed until the limit goes back with the error.
                let mut partial = stdout.text();
                let stderr = stderr.text();
                if !stderr.is_empty() {
                    if !partial.is_empty() && !partial.ends_with('\n') {
                        partial.push('\n');
                    }
                    partial.push_str("[stderr]\n");
                    partial.push_str(&stderr);
                }
                return Err(ToolError::Timeout {
                    tool: Self::NAME.into(),
                    after: limit,
                    partial: Some(partial),
                });
            }
        };
        match code {
            Some(0) => Ok(Structured::new(
                stdout.clone(),
                BashResult {
                    exit_code: Some(0),
                    stdout: Some(stdout),
                    stderr: Some(stderr),
                    stdout_cut: cuts.0,
                    stderr_cut: cuts.1,
                    shell_ended,
                    ..BashResult::default()
                },
            )),
            code if self.settings.nonzero_exit == NonzeroExit::Result => {
                let mut text = stdout.clone();
                for part in [stderr.as_str(), ""] {
                    if !text.is_empty() && !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(part);
                }
                match code {
                    Some(code) => text.push_str(&format!("Exit code: {code}")),
                    None => text.push_str("Killed by a signal"),
                }
                Ok(Structured::new(
                    text,
                    BashResult {
                        exit_code: code,
                        stdout: Some(stdout),
                        stderr: Some(stderr),
                        stdout_cut: cuts.0,
                        stderr_cut: cuts.1,
                        shell_ended,
                        ..BashResult::default()
                    },
                ))
            }
            Some(code) => Err(ToolError::failed(format!("Error ({code}):\n{stderr}"))),
            None => Err(ToolError::failed(format!(
                "Error (killed by a signal):\n{stderr}"
            ))),
        }
    }

    /// Runs `command` in a shell of its own, which ends with the call.
    async fn run_once(
        &self,
        command: &str,
        limit: Duration,
        counter: Option<&capture::Counter>,
    ) -> Result<shells::Ended, ToolError> {
        let mut spec = self.base_spec();
        spec.arg("-c")
            .arg(command)
            .stdout(Stream::Piped)
            .stderr(Stream::Piped);
        // Whatever ends this call (exit, time limit, cancellation), everything the
        // command started ends with it.
        let mut child = self.jail.spawn(&spec).map_err(|e| {
            ToolError::failed(format!(
                "cannot start `{}`: {e}",
                self.settings.shell.display()
            ))
        })?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::failed("the shell has no pipes"));
        };
        let (head, tail) = (self.settings.keep_head, self.settings.keep_tail);
        let drained = async {
            tokio::join!(
                capture::drain(out, head, tail, counter, self.spiller.clone()),
                capture::drain(err, head, tail, counter, self.spiller.clone())
            )
        };
        let waited = async {
            match tokio::time::timeout(limit, child.wait()).await {
                Ok(status) => Some(status),
                Err(_) => {
                    child.stop_and_wait().await;
                    None
                }
            }
        };
        // The command is reaped only once nothing it started is left (or it was
        // stopped with all of it), so every writer of the pipes is gone and the
        // readers reach their end.
        let (status, (stdout, stderr)) = tokio::join!(waited, drained);
        match status {
            Some(status) => {
                let status = status
                    .map_err(|e| ToolError::failed(format!("waiting for the shell failed: {e}")))?;
                Ok(shells::Ended::Finished {
                    code: status.code(),
                    stdout,
                    stderr,
                    shell_ended: false,
                })
            }
            None => Ok(shells::Ended::TimedOut { stdout, stderr }),
        }
    }

    /// The shell with the environment every command gets, in the workspace.
    fn base_spec(&self) -> Spec {
        let mut spec = Spec::new(&self.settings.shell);
        spec.current_dir(&self.cwd);
        for name in &self.settings.env_allow {
            if let Some(v) = std::env::var_os(name) {
                spec.env(name, v);
            }
        }
        for (k, v) in &self.settings.env {
            spec.env(k, v);
        }
        if let Some(tmp) = self.jail.tmp() {
            spec.env("TMPDIR", tmp);
        }
        spec
    }

    /// Starts `command` as a background job and answers after `yield_ms` or when it
    /// ends, whichever is first.
    async fn start_job(
        &self,
        command: &str,
        spec: Spec,
        args: &BashArgs,
    ) -> Result<Structured<BashResult>, ToolError> {
        // A job runs until it ends or is killed unless a time limit is given.
        let limit = args
            .timeout
            .and_then(|t| Duration::try_from_secs_f64(t).ok());
        let id = self.jobs.start(jobs::Launch {
            jail: &self.jail,
            spec,
            command,
            limit,
            keep_head: self.settings.keep_head,
            keep_tail: self.settings.keep_tail,
            spiller: self.spiller.clone(),
            max_running: self.settings.max_jobs,
            terminal: args.tty.then(|| jianmu_process::Size {
                rows: args.rows.unwrap_or(24).clamp(2, 200),
                cols: args.cols.unwrap_or(80).clamp(10, 300),
            }),
        })?;
        let wait = Duration::from_millis(args.yield_ms.unwrap_or(DEFAULT_YIELD_MS));
        let (status, text) = self
            .jobs
            .poll(id, None, wait, jobs::View::default())
            .await?;
        Ok(Structured::new(
            text,
            BashResult {
                exit_code: status.exit_code,
                job: Some(status.job),
                running: Some(status.running),
                output: Some(status.output),
                ..BashResult::default()
            },
        ))
    }
}

/// Awaits `work`, reporting progress to `cx` every [`PROGRESS_EVERY`] while it runs
/// when the caller asked (`counter` is then the output count).
async fn reporting<F: std::future::Future>(
    work: F,
    counter: Option<&capture::Counter>,
    cx: &CallContext,
) -> F::Output {
    let Some(counter) = counter else {
        return work.await;
    };
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = ticks.tick() => {
                let (bytes, lines) = counter.get();
                cx.report_progress(&Progress::new(started.elapsed(), bytes, lines));
            }
        }
    }
}

/// The structured result of `bash`: `exit_code`, `stdout` and `stderr` for a command
/// that ran to its end (one that exits non-zero is an error, unless the setting
/// `nonzero_exit` is `result`); `job`, `running`, `exit_code` and `output` for a
/// background job, as `bash_output` answers.
#[derive(Debug, Default, Serialize, schemars::JsonSchema)]
pub struct BashResult {
    /// The exit code of a command that ran to its end (0, or any code where non-zero
    /// exits are answered; null when a signal ended it); for a background job, its
    /// code once it has exited, else null.
    pub exit_code: Option<i32>,
    /// What the command printed, head and tail kept when it was long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// What the command printed on stderr, likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// The background job's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// True while the background job runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// The background job's stdout and stderr so far, in the order they came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// When stdout was too long to keep whole (its middle left out): how long it was
    /// and where it was saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_cut: Option<StreamCut>,
    /// The same for stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_cut: Option<StreamCut>,
    /// True when the command ended its `session`'s shell (`exit`, `exec`): the next
    /// call starts a new one, in the last directory and with the last exports kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shell_ended: bool,
}

/// How a stream too long to keep was cut.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StreamCut {
    /// The bytes the command printed on it, in all.
    pub total_bytes: u64,
    /// The file (relative to the workspace) holding all of it, when it could be saved
    /// whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
}

impl Tool for Bash {
    type Args = BashArgs;
    type Output = Structured<BashResult>;
    type Error = ToolError;

    const NAME: &'static str = "bash";

    const DESCRIPTION: &'static str = "Runs a shell command with bash in the workspace and returns its stdout; a non-zero \
     exit returns `Error (CODE):` and stderr.\n\
     stdin is empty; long output keeps its start and end, and the whole is saved to a \
     file the answer names (read it with read_file); nothing the command starts \
     outlives the call, and a time limit (120 s by default, `timeout` to change) ends it \
     all, answering with what it printed until then. With `session`, calls share a \
     shell's working directory and exported variables. For servers, watchers and long \
     builds, `background: true` answers after `yield_ms` with a job id and keeps the \
     command running (no time limit unless `timeout` is given): read it with \
     bash_output, stop it with bash_kill. Where the host allows, commands can write only \
     in the workspace and $TMPDIR.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["process:exec"];

    async fn call(
        &self,
        args: BashArgs,
        cx: &CallContext,
    ) -> Result<Structured<BashResult>, ToolError> {
        self.run(&args, cx).await
    }
}

/// The spec, with what the commands' network is under these settings.
fn spec(config: &ToolConfig) -> Result<ToolSpec, ToolError> {
    let settings = config
        .settings::<BashSettings>(Bash::NAME)
        .unwrap_or_default();
    let isolation = &settings.isolation;
    Ok(jianmu_tool_core::spec_of::<Bash>()
        .with_sentence(isolation.files_sentence())
        .with_sentence(jianmu_egress::network_sentence(
            isolation,
            &settings.egress,
            Bash::NAME,
        )))
}

fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let kept = config.scope().get::<jianmu_tool_core::Kept>();
    let jobs = config.scope().get::<Jobs>();
    // Running jobs cannot survive a suspension: say which there are.
    let listed = Arc::downgrade(&jobs);
    kept.lists("job", move || {
        listed.upgrade().map_or_else(Vec::new, |jobs| {
            jobs.list()
                .jobs
                .into_iter()
                .filter(|j| j.running)
                .map(|j| format!("{} ({})", j.job, j.command))
                .collect()
        })
    });
    let bash = Bash::new(config.settings(Bash::NAME)?, config.workspace().to_owned())?
        .with_jobs(jobs)
        .with_kept(kept)
        .with_network(config.scope().get::<jianmu_process::Network>())
        .with_egress(config.scope().get::<jianmu_egress::Door>())?
        .with_saver(jianmu_workspace::Saver::for_tool(config, Bash::NAME)?);
    ToolHandle::with_spec(bash, spec(config)?)
}

jianmu_tool_core::register_tool!(Bash::NAME, spec, build);

#[cfg(test)]
mod settings_names {
    /// `max_shell_sessions` says what it bounds; the old `max_sessions` is still read.
    #[test]
    fn the_shell_session_limit_reads_its_name_and_the_old_one() {
        let new: super::BashSettings =
            serde_json::from_value(serde_json::json!({"max_shell_sessions": 3})).unwrap();
        assert_eq!(new.max_shell_sessions, 3);
        let old: super::BashSettings =
            serde_json::from_value(serde_json::json!({"max_sessions": 4})).unwrap();
        assert_eq!(old.max_shell_sessions, 4);
    }
}
