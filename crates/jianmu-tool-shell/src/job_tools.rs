//! The tools around `bash`'s background jobs: `bash_output` reads (and feeds) a job,
//! `bash_kill` stops one, `bash_jobs` lists them. They find jobs in the [`Jobs`] table
//! of their scope, the one `bash` starts them in.

use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{CallContext, Structured, Tool, ToolConfig, ToolError, ToolHandle};
use serde::Deserialize;

use crate::jobs::{JobList, JobStatus, Jobs};

/// The longest `bash_output` waits, in milliseconds.
const MAX_WAIT_MS: u64 = 600_000;

/// Arguments of `bash_output`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputArgs {
    /// The job id `bash` answered with.
    pub job: u64,
    /// Milliseconds to wait for the job to end before answering (it answers at once
    /// when the job has ended); default 0, or 500 when `input` is given.
    #[schemars(range(max = 600_000))]
    pub wait_ms: Option<u64>,
    /// Text written to the job's stdin first (add `\n` to end a line); for a job on
    /// a terminal, typed, control keys included (`\u0003` is Ctrl-C).
    pub input: Option<String>,
    /// For a job on a terminal: true for what it wrote since the last read, escape
    /// sequences and all; false for what its screen shows (the default unless this
    /// tool's settings say `raw = true`).
    pub raw: Option<bool>,
}

/// Settings of `bash_output` (`[tools.bash_output]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputSettings {
    /// A job on a terminal is shown as the stream it wrote rather than its screen,
    /// unless a call says otherwise.
    pub raw: bool,
}

/// Arguments of `bash_kill`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    /// The job id `bash` answered with.
    pub job: u64,
}

/// Arguments of `bash_jobs`: none.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListArgs {}

/// The `bash_output` tool.
#[derive(Debug, Clone)]
pub struct BashOutput {
    jobs: Arc<Jobs>,
    settings: OutputSettings,
}

/// The `bash_kill` tool.
#[derive(Debug, Clone)]
pub struct BashKill {
    jobs: Arc<Jobs>,
}

/// The `bash_jobs` tool.
#[derive(Debug, Clone)]
pub struct BashJobs {
    jobs: Arc<Jobs>,
}

impl BashOutput {
    /// Reads the jobs of `jobs` (the table `bash` was given with `Bash::with_jobs`).
    pub fn new(jobs: Arc<Jobs>) -> Self {
        Self {
            jobs,
            settings: OutputSettings::default(),
        }
    }

    /// With these settings.
    #[must_use]
    pub fn with_settings(mut self, settings: OutputSettings) -> Self {
        self.settings = settings;
        self
    }
}

impl BashKill {
    /// Stops the jobs of `jobs`.
    pub fn new(jobs: Arc<Jobs>) -> Self {
        Self { jobs }
    }
}

impl BashJobs {
    /// Lists the jobs of `jobs`.
    pub fn new(jobs: Arc<Jobs>) -> Self {
        Self { jobs }
    }
}

impl Tool for BashOutput {
    type Args = OutputArgs;
    type Output = Structured<JobStatus>;
    type Error = ToolError;

    const NAME: &'static str = "bash_output";

    const DESCRIPTION: &'static str = "Reads a background job started by bash with `background: true`: what it printed \
     since the last read (stdout and stderr in order; start and end kept when long), \
     and its exit code once it has ended. `input` is written to the job's stdin \
     first; `wait_ms` waits for the job to end before answering. For a job started \
     with `tty: true`: what its screen shows now and whether it waits for input \
     (`raw: true` gives the stream as written instead), and `input` is typed.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["process:exec"];

    async fn call(
        &self,
        args: OutputArgs,
        _cx: &CallContext,
    ) -> Result<Structured<JobStatus>, ToolError> {
        let default = if args.input.is_some() { 500 } else { 0 };
        let wait = Duration::from_millis(args.wait_ms.unwrap_or(default).min(MAX_WAIT_MS));
        let (status, text) = self
            .jobs
            .poll(
                args.job,
                args.input.as_deref(),
                wait,
                if args.raw.unwrap_or(self.settings.raw) {
                    crate::jobs::View::Raw
                } else {
                    crate::jobs::View::Screen
                },
            )
            .await?;
        Ok(Structured::new(text, status))
    }
}

impl Tool for BashKill {
    type Args = JobArgs;
    type Output = Structured<JobStatus>;
    type Error = ToolError;

    const NAME: &'static str = "bash_kill";

    const DESCRIPTION: &'static str = "Stops a background job started by bash with `background: true`, and everything \
     it started, and returns what it printed since the last read.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["process:exec"];

    async fn call(
        &self,
        args: JobArgs,
        _cx: &CallContext,
    ) -> Result<Structured<JobStatus>, ToolError> {
        let (status, text, was_running) = self.jobs.kill(args.job).await?;
        let text = if was_running {
            text
        } else {
            format!("job {} had already ended\n{text}", args.job)
        };
        Ok(Structured::new(text, status))
    }
}

impl Tool for BashJobs {
    type Args = JobListArgs;
    type Output = Structured<JobList>;
    type Error = ToolError;

    const NAME: &'static str = "bash_jobs";

    const DESCRIPTION: &'static str = "Lists the background jobs started by bash with `background: true`: id, state, \
     runtime, unread output and command.";

    const EFFECTS: &'static [&'static str] = &["process:read"];

    async fn call(
        &self,
        _args: JobListArgs,
        _cx: &CallContext,
    ) -> Result<Structured<JobList>, ToolError> {
        let list = self.jobs.list();
        let text = if list.jobs.is_empty() {
            "no background jobs (bash with `background: true` starts one)".to_owned()
        } else {
            list.jobs
                .iter()
                .map(|j| {
                    format!(
                        "{}\t{}\t{:.1} s\t{} bytes unread\t{}",
                        j.job, j.state, j.runtime_secs, j.unread_bytes, j.command
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok(Structured::new(text, list))
    }
}

fn build_output(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(
        BashOutput::new(config.scope().get::<Jobs>())
            .with_settings(config.settings(BashOutput::NAME)?),
    )
}

fn build_kill(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(BashKill::new(config.scope().get::<Jobs>()))
}

fn build_jobs(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(BashJobs::new(config.scope().get::<Jobs>()))
}

jianmu_tool_core::register_tool!(BashOutput, build_output);
jianmu_tool_core::register_tool!(BashKill, build_kill);
jianmu_tool_core::register_tool!(BashJobs, build_jobs);
