//! Background jobs: commands `bash` starts with `background: true` and keeps running
//! after the call, read with `bash_output`, stopped with `bash_kill`, listed with
//! `bash_jobs`.
//!
//! A job is a supervised command like any other (nothing it starts escapes it); what
//! is different is who holds it. A monitor task owns the process and waits for it to
//! end, for `bash_kill`, for its time limit, or for the job table to go away (the
//! table holds the sending half of a channel the monitor listens on), whichever comes
//! first: so jobs end when the tools that share the table are dropped, and with the
//! process. Output (stdout and stderr in the order it arrives) collects in a bounded
//! buffer that each read empties: its start and end are kept, the middle counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_process::{Jail, Size, Spec, Stream, Supervised, Terminal};
use jianmu_tool_core::{ToolError, shorten};
use serde::Serialize;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{oneshot, watch};

use crate::capture::{self, Captured};

/// Ended jobs kept for reading, besides the running ones; the oldest go first.
const KEEP_ENDED: usize = 32;

/// How long `bash_kill` waits for a stopped job's processes to be gone.
const KILL_PATIENCE: Duration = Duration::from_secs(60);

/// How long writing a job's input may wait for the job to read it.
const INPUT_PATIENCE: Duration = Duration::from_secs(5);

/// The background jobs of one set of tools (one library `ToolSet`, one MCP session):
/// `bash` starts them, `bash_output`, `bash_kill` and `bash_jobs` find them here.
/// Dropping the table ends every job still running.
#[derive(Debug, Default)]
pub struct Jobs {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    jobs: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    job: Arc<Job>,
    /// Dropping it (or sending) makes the monitor stop the job.
    stop: Option<oneshot::Sender<Ended>>,
}

/// One job, shared by the table and its monitor.
#[derive(Debug)]
struct Job {
    id: u64,
    command: String,
    started: Instant,
    /// stdout and stderr since the last read.
    unread: Mutex<Captured>,
    ended: watch::Sender<Option<(Ended, Instant)>>,
    stdin: tokio::sync::Mutex<Option<Input>>,
    /// What the job's terminal shows, for a job on a terminal.
    screen: Option<Mutex<Screen>>,
}

/// A terminal emulator fed with what a job writes.
struct Screen(vt100::Parser, OscLimit);

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("size", &self.0.screen().size())
            .finish_non_exhaustive()
    }
}

impl Screen {
    fn new(rows: u16, cols: u16) -> Self {
        Self(vt100::Parser::new(rows, cols, 0), OscLimit::default())
    }

    /// Feeds what the job wrote, with operating-system commands cut to their first
    /// [`MAX_OSC`] bytes.
    fn process(&mut self, data: &[u8]) {
        let mut kept = Vec::with_capacity(data.len());
        self.1.filter(data, &mut kept);
        self.0.process(&kept);
    }
}

/// The most bytes of one operating-system command (`ESC ]` … `BEL`, a window title
/// or a hyperlink) given to the terminal emulator, which keeps the whole command in
/// memory until it ends: a job that starts one and never ends it would grow it
/// without bound.
const MAX_OSC: usize = 4096;

/// Where a stream is in the escape sequences that matter to [`MAX_OSC`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum OscLimit {
    #[default]
    Ground,
    /// After `ESC`.
    Escape,
    /// In an operating-system command, this many bytes in.
    Osc(usize),
}

impl OscLimit {
    /// Appends `data` to `out` less the bytes of an operating-system command past
    /// [`MAX_OSC`].
    fn filter(&mut self, data: &[u8], out: &mut Vec<u8>) {
        for &byte in data {
            *self = match (*self, byte) {
                (Self::Osc(_), 0x07 | 0x18 | 0x1a) => Self::Ground,
                (_, 0x1b) => Self::Escape,
                (Self::Escape, b']') => Self::Osc(0),
                (Self::Osc(n), _) => {
                    if n >= MAX_OSC {
                        continue;
                    }
                    Self::Osc(n + 1)
                }
                _ => Self::Ground,
            };
            out.push(byte);
        }
    }
}

/// Where a job's input goes.
#[derive(Debug)]
enum Input {
    Pipe(tokio::net::unix::pipe::Sender),
    Terminal(Arc<Terminal>),
}

/// How `bash_output` shows a job on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum View {
    /// What the terminal shows now.
    #[default]
    Screen,
    /// What the job wrote since the last read, escape sequences and all.
    Raw,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal from outside jianmu ended it.
    Signal,
    /// `bash_kill` stopped it.
    Killed,
    /// Its time limit passed.
    TimedOut(Duration),
    /// The job table went away.
    Dropped,
}

/// What a job has done since it was last read: the answer of `bash` with
/// `background`, of `bash_output` and of `bash_kill`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobStatus {
    /// The job's id.
    pub job: u64,
    /// True while it runs.
    pub running: bool,
    /// Its exit code once it has exited; null while it runs or when it was killed.
    pub exit_code: Option<i32>,
    /// stdout and stderr since the last read, in the order they came; start and end
    /// kept when long. For a job on a terminal, what its screen shows (or, asked for
    /// raw, what it wrote since the last read).
    pub output: String,
    /// For a job on a terminal: whether the program in the foreground seems to wait
    /// for typing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for_input: Option<bool>,
}

/// The answer of `bash_jobs`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobList {
    /// Every job kept, oldest first.
    pub jobs: Vec<JobInfo>,
}

/// One job in [`JobList`].
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobInfo {
    /// The job's id.
    pub job: u64,
    /// Its command line, shortened.
    pub command: String,
    /// `running`, `exited N`, `killed`, `timed out` or `ended by a signal`.
    pub state: String,
    /// True while it runs.
    pub running: bool,
    /// Its exit code once it has exited.
    pub exit_code: Option<i32>,
    /// Seconds it has run (until it ended).
    pub runtime_secs: f64,
    /// Bytes of output not read yet.
    pub unread_bytes: u64,
}

/// What starting a job needs besides the command.
pub(crate) struct Launch<'a> {
    pub jail: &'a Jail,
    pub spec: Spec,
    pub command: &'a str,
    pub limit: Option<Duration>,
    pub keep_head: usize,
    pub keep_tail: usize,
    pub spiller: Option<jianmu_workspace::Saver>,
    pub max_running: usize,
    /// Runs the job on a terminal of this size.
    pub terminal: Option<Size>,
}

impl Jobs {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a job; its monitor runs on the current runtime.
    ///
    /// # Errors
    /// Too many jobs running, or the command cannot start.
    pub(crate) fn start(&self, launch: Launch<'_>) -> Result<u64, ToolError> {
        let mut table = self.table();
        let running: Vec<u64> = table
            .jobs
            .values()
            .filter(|e| e.job.running())
            .map(|e| e.job.id)
            .collect();
        if running.len() >= launch.max_running {
            return Err(ToolError::failed(format!(
                "{} background jobs are running, the limit; stop one with bash_kill (running: {})",
                running.len(),
                running
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut spec = launch.spec;
        match launch.terminal {
            Some(size) => spec.terminal(size),
            None => spec
                .stdin(Stream::Piped)
                .stdout(Stream::Piped)
                .stderr(Stream::Piped),
        };
        let mut child = launch
            .jail
            .spawn(&spec)
            .map_err(|e| ToolError::failed(format!("cannot start the job: {e}")))?;
        table.next += 1;
        let id = table.next;
        let new_job = |input, screen| {
            Arc::new(Job {
                id,
                command: shorten(launch.command, 200).into_owned(),
                started: Instant::now(),
                unread: Mutex::new(
                    Captured::new(launch.keep_head, launch.keep_tail)
                        .spilling(launch.spiller.clone()),
                ),
                ended: watch::Sender::new(None),
                stdin: tokio::sync::Mutex::new(input),
                screen,
            })
        };
        let (job, readers) = match (child.terminal.take(), launch.terminal) {
            (Some(terminal), Some(size)) => {
                let terminal = Arc::new(terminal);
                let screen = Screen::new(size.rows, size.cols);
                let job = new_job(
                    Some(Input::Terminal(Arc::clone(&terminal))),
                    Some(Mutex::new(screen)),
                );
                let fed = Arc::clone(&job);
                let reader = tokio::spawn(async move { collect(&*terminal, fed).await });
                (job, vec![reader])
            }
            _ => {
                let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
                    return Err(ToolError::failed("the job has no pipes"));
                };
                let job = new_job(child.stdin.take().map(Input::Pipe), None);
                let readers = vec![
                    tokio::spawn(collect(out, Arc::clone(&job))),
                    tokio::spawn(collect(err, Arc::clone(&job))),
                ];
                (job, readers)
            }
        };
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(monitor(
            child,
            Arc::clone(&job),
            stopped,
            launch.limit,
            readers,
        ));
        table.jobs.insert(
            id,
            Entry {
                job,
                stop: Some(stop),
            },
        );
        // Ended jobs beyond the few kept for reading are forgotten, oldest first.
        let ended: Vec<u64> = table
            .jobs
            .values()
            .filter(|e| !e.job.running())
            .map(|e| e.job.id)
            .collect();
        for old in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            table.jobs.remove(old);
        }
        Ok(id)
    }

    fn get(&self, id: u64) -> Result<Arc<Job>, ToolError> {
        let table = self.table();
        match table.jobs.get(&id) {
            Some(entry) => Ok(Arc::clone(&entry.job)),
            None => Err(ToolError::failed(match table.jobs.keys().next() {
                None => format!(
                    "there is no job {id}: no background jobs were started (bash with `background: true` starts one)"
                ),
                Some(_) => format!(
                    "there is no job {id}; the jobs are: {}",
                    table
                        .jobs
                        .keys()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })),
        }
    }

    /// Writes `input` to job `id`, waits up to `wait` for it to end, and answers what
    /// it printed since the last read: the structured status and the text for the
    /// model.
    ///
    /// # Errors
    /// No such job; the input could not be written.
    pub(crate) async fn poll(
        &self,
        id: u64,
        input: Option<&str>,
        wait: Duration,
        view: View,
    ) -> Result<(JobStatus, String), ToolError> {
        let job = self.get(id)?;
        if let Some(input) = input {
            job.write(input).await?;
        }
        job.wait(wait).await;
        Ok(job.answer(view))
    }

    /// Stops job `id` and everything it started, and answers its last output (as
    /// [`Jobs::poll`]) and whether it was still running.
    ///
    /// # Errors
    /// No such job.
    pub(crate) async fn kill(&self, id: u64) -> Result<(JobStatus, String, bool), ToolError> {
        let job = self.get(id)?;
        let stop = self.table().jobs.get_mut(&id).and_then(|e| e.stop.take());
        let was_running = job.running();
        if let Some(stop) = stop {
            let _ = stop.send(Ended::Killed);
        }
        // The monitor reports the end once the process tree is gone.
        job.wait(KILL_PATIENCE).await;
        let (status, text) = job.answer(View::default());
        Ok((status, text, was_running))
    }

    /// Every job kept, oldest first.
    pub(crate) fn list(&self) -> JobList {
        let table = self.table();
        JobList {
            jobs: table.jobs.values().map(|e| e.job.info()).collect(),
        }
    }
}

impl Job {
    fn running(&self) -> bool {
        self.ended.borrow().is_none()
    }

    async fn wait(&self, wait: Duration) {
        let mut ended = self.ended.subscribe();
        let _ = tokio::time::timeout(wait, ended.wait_for(Option::is_some)).await;
    }

    async fn write(&self, input: &str) -> Result<(), ToolError> {
        let mut stdin = self.stdin.lock().await;
        let Some(into) = stdin.as_mut() else {
            return Err(ToolError::failed(format!(
                "job {} no longer reads its input",
                self.id
            )));
        };
        let written = async {
            match into {
                Input::Pipe(pipe) => pipe.write_all(input.as_bytes()).await,
                Input::Terminal(terminal) => terminal.write_all(input.as_bytes()).await,
            }
        };
        match tokio::time::timeout(INPUT_PATIENCE, written).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                *stdin = None;
                Err(ToolError::failed(format!(
                    "job {} has closed its input (it has ended, or does not read stdin)",
                    self.id
                )))
            }
            Err(_) => Err(ToolError::failed(format!(
                "job {} did not read its input within {} s; some of it may have been written",
                self.id,
                INPUT_PATIENCE.as_secs()
            ))),
        }
    }

    /// How it ended and how long it ran (so far, while it runs).
    fn state(&self) -> (Option<Ended>, Duration) {
        let ended = *self.ended.borrow();
        let until = ended.map_or_else(Instant::now, |(_, at)| at);
        (
            ended.map(|(how, _)| how),
            until.duration_since(self.started),
        )
    }

    /// The job's state with the output since the last read (which this empties), and
    /// the same in words for the model.
    fn answer(&self, view: View) -> (JobStatus, String) {
        let (ended, runtime) = self.state();
        let raw = self
            .unread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .text();
        let (output, waiting) = match (&self.screen, view) {
            (Some(screen), View::Screen) => {
                let screen = screen.lock().unwrap_or_else(PoisonError::into_inner);
                (show_screen(screen.0.screen()), Some(self.waiting()))
            }
            (Some(_), View::Raw) => (raw, Some(self.waiting())),
            (None, _) => (raw, None),
        };
        let mut text = match ended {
            None => format!(
                "[job {} running for {:.1} s: {}]",
                self.id,
                runtime.as_secs_f64(),
                self.command
            ),
            Some(how) => format!(
                "[job {} {} after {:.1} s{}]",
                self.id,
                how.describe(),
                runtime.as_secs_f64(),
                if output.is_empty() {
                    "; no more output"
                } else {
                    ""
                }
            ),
        };
        text.push('\n');
        text.push_str(&output);
        if !output.is_empty() && !output.ends_with('\n') {
            text.push('\n');
        }
        if ended.is_none() {
            if waiting == Some(true) {
                text.push_str("[it waits for input: bash_output with `input` types it]\n");
            }
            text.push_str(&format!(
                "[bash_output {{\"job\": {0}}} reads what follows; bash_kill {{\"job\": {0}}} stops it]",
                self.id
            ));
        }
        let status = JobStatus {
            job: self.id,
            running: ended.is_none(),
            exit_code: ended.and_then(Ended::exit_code),
            output,
            waiting_for_input: waiting.map(|w| w && ended.is_none()),
        };
        (status, text)
    }

    fn info(&self) -> JobInfo {
        let (ended, runtime) = self.state();
        JobInfo {
            job: self.id,
            command: self.command.clone(),
            state: ended.map_or_else(|| "running".to_owned(), Ended::describe),
            running: ended.is_none(),
            exit_code: ended.and_then(Ended::exit_code),
            runtime_secs: round(runtime),
            unread_bytes: self
                .unread
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .total(),
        }
    }
}

impl Ended {
    fn exit_code(self) -> Option<i32> {
        match self {
            Ended::Exited(code) => Some(code),
            _ => None,
        }
    }

    fn describe(self) -> String {
        match self {
            Ended::Exited(code) => format!("exited with code {code}"),
            Ended::Signal => "was ended by a signal".into(),
            Ended::Killed => "was killed".into(),
            Ended::TimedOut(after) => format!("was stopped by its time limit ({} s)", round(after)),
            Ended::Dropped => "was stopped when its session ended".into(),
        }
    }
}

fn round(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

impl Job {
    /// Whether the job's foreground program seems to wait for typing.
    fn waiting(&self) -> bool {
        match self.stdin.try_lock().as_deref() {
            Ok(Some(Input::Terminal(terminal))) => terminal.waiting_for_input(),
            _ => false,
        }
    }
}

/// A screen as text: its rows with trailing blanks and blank last rows left out,
/// then where the cursor is.
fn show_screen(screen: &vt100::Screen) -> String {
    let mut text = screen.contents();
    let kept = text.trim_end().len();
    text.truncate(kept);
    let (row, col) = screen.cursor_position();
    let (rows, cols) = screen.size();
    text.push_str(&format!(
        "\n[screen {rows}x{cols}; cursor at row {}, column {}]",
        row + 1,
        col + 1
    ));
    text
}

/// Copies a stream of the job (a pipe, or its terminal) into its buffer, and its
/// screen when it has one, until the stream ends.
async fn collect<R: tokio::io::AsyncRead + Unpin>(stream: R, job: Arc<Job>) {
    capture::feed(stream, |data| {
        job.unread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(data);
        if let Some(screen) = &job.screen {
            screen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .process(data);
        }
    })
    .await;
}

/// Owns the job's process until it ends, is stopped, times out or is dropped.
async fn monitor(
    mut child: Supervised,
    job: Arc<Job>,
    stop: oneshot::Receiver<Ended>,
    limit: Option<Duration>,
    readers: Vec<tokio::task::JoinHandle<()>>,
) {
    let deadline = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let how = tokio::select! {
        status = child.wait() => match status.ok().and_then(|s| s.code()) {
            Some(code) => Ended::Exited(code),
            None => Ended::Signal,
        },
        why = stop => {
            child.stop_and_wait().await;
            why.unwrap_or(Ended::Dropped)
        }
        () = deadline => {
            child.stop_and_wait().await;
            Ended::TimedOut(limit.unwrap_or_default())
        }
    };
    // Nothing the job started is left, so the pipes are at their end: the buffer has
    // everything once the readers are done.
    for reader in readers {
        let _ = reader.await;
    }
    *job.stdin.lock().await = None;
    job.ended.send_replace(Some((how, Instant::now())));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_osc_reaches_the_emulator_cut() {
        let mut screen = Screen::new(24, 80);
        let mut limit = OscLimit::default();
        let mut passed = 0;
        // A title that never ends, in chunks, the escape split across two.
        let chunks: Vec<Vec<u8>> = std::iter::once(b"hi\x1b".to_vec())
            .chain(std::iter::once(b"]0;".to_vec()))
            .chain(std::iter::repeat_n(vec![b'a'; 65536], 160))
            .collect();
        for chunk in &chunks {
            let mut kept = Vec::new();
            limit.filter(chunk, &mut kept);
            passed += kept.len();
            screen.process(chunk);
        }
        assert!(passed < MAX_OSC + 16, "{passed} bytes reached the emulator");
        // The command ends, and what follows is shown as before.
        screen.process(b"\x07 there");
        assert_eq!(screen.0.screen().contents(), "hi there");
        let mut out = Vec::new();
        OscLimit::default().filter(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x07", &mut out);
        assert_eq!(out, b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x07");
    }
}
