//! Shell sessions: calls with the same `session` id run in one shell process that
//! lives across calls, so `cd`, `export`, shell variables and functions carry over,
//! and a call costs a write and a read, not a process start.
//!
//! The shell reads its commands from a pipe. For each call the command goes into a
//! file in the session's state folder and the shell is told to source it (`. cmd`, input
//! from `/dev/null`), then to print, on stdout, a marker with a fresh random nonce, the
//! exit status, its exports (`export -p`) and its directory, and a marker on stderr.
//! Output up to the markers is the call's; the state is kept in memory (bounded). After
//! the markers, every process the call started that still runs is ended, so nothing a
//! call starts outlives it while the shell lives on. Builtins only: a call starts no
//! process and writes no file besides the command.
//!
//! A call that ends the shell (`exit`, `exec`) answers with the shell's status (an
//! `EXIT` trap still reports the state); one that hits its time limit or is cancelled
//! ends the shell and everything in it. The next call starts a new shell from the
//! kept state: the directory and exports (not shell variables) of the last call that
//! finished. Sessions beyond `max_sessions` are refused; sessions unused for
//! `session_idle_secs` are ended (their shells too) by a task that looks every quarter
//! of that time.

use std::collections::HashMap;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_process::{Jail, Spec, Stream, Supervised};
use jianmu_tool_core::ToolError;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::unix::pipe;

use crate::capture::{Captured, Counter};

/// The largest exports a session keeps; a call that exports more keeps the state of
/// the call before it.
const MAX_ENV: usize = 1024 * 1024;

/// The longest working directory a session keeps.
const MAX_CWD: usize = 64 * 1024;

/// What a session call needs from `bash`.
pub(crate) struct Launch<'a> {
    /// Where the shell runs.
    pub jail: &'a Jail,
    /// The shell with its environment and the workspace as working directory.
    pub spec: Spec,
    pub keep_head: usize,
    pub keep_tail: usize,
}

/// How a session call ended.
pub(crate) enum Ended {
    /// The command finished (`Some(code)`), or the shell was killed by a signal.
    Finished {
        code: Option<i32>,
        stdout: Captured,
        stderr: Captured,
    },
    /// The time limit passed; the shell and everything in it were stopped.
    TimedOut { stdout: Captured, stderr: Captured },
}

/// The sessions of one `bash` tool.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
    /// Set once a task ends idle sessions on its own.
    watched: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Arc<Session>>,
    /// Where state folders go when the jail has no private temporary folder.
    own: Option<tempfile::TempDir>,
    next: u64,
}

/// One session: its state folder and, between calls, its live shell.
#[derive(Debug)]
pub(crate) struct Session {
    dir: PathBuf,
    used: Mutex<Instant>,
    /// Held for the whole of a call: one call at a time per session.
    live: tokio::sync::Mutex<Option<Live>>,
    /// The directory and exports the last finished call left.
    state: Mutex<Option<State>>,
    jobs: std::sync::atomic::AtomicU64,
}

/// Where a shell of the session starts again.
#[derive(Debug, Clone)]
struct State {
    cwd: PathBuf,
    /// `export -p` output: shell commands that export the same again.
    exports: Vec<u8>,
}

#[derive(Debug)]
struct Live {
    child: Supervised,
    stdin: pipe::Sender,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sessions {
    /// Ends sessions unused for `idle` from now on, without waiting for a call: a task
    /// on the current runtime looks every quarter of `idle` (1 s to 60 s) for as long
    /// as the sessions exist.
    pub(crate) fn watch(self: &Arc<Self>, idle: Duration) {
        use std::sync::atomic::Ordering;
        if self.watched.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.watched.store(false, Ordering::Relaxed);
            return;
        };
        let sessions = Arc::downgrade(self);
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        rt.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                let expired = sessions
                    .inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take_idle(idle);
                // Dropped outside the lock: ending a shell waits for it to go.
                drop(expired);
            }
        });
    }

    /// Opens `id` (afresh with `reset`), creating it if there is room.
    ///
    /// # Errors
    /// The session limit is reached, or the state folder cannot be made.
    pub(crate) fn open(
        &self,
        id: &str,
        reset: bool,
        max: usize,
        idle: Duration,
        tmp: Option<&Path>,
    ) -> Result<Arc<Session>, ToolError> {
        // Idle sessions end here too (exactly at `idle`, where the watcher may be up to
        // a quarter late): dropping one ends its shell and removes its folder, once
        // the lock is released.
        let expired = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take_idle(idle);
        drop(expired);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if reset {
            inner.map.remove(id);
        }
        if let Some(session) = inner.map.get(id) {
            session.touch();
            return Ok(Arc::clone(session));
        }
        if inner.map.len() >= max {
            let mut ids: Vec<&str> = inner.map.keys().map(String::as_str).collect();
            ids.sort_unstable();
            return Err(ToolError::failed(format!(
                "there are already {max} shell sessions, the limit; reuse one of them ({}), or wait until one has been idle for {} s",
                ids.join(", "),
                idle.as_secs()
            )));
        }
        let base = match tmp {
            Some(t) => t.to_owned(),
            None => match &inner.own {
                Some(own) => own.path().to_owned(),
                None => {
                    let own = tempfile::Builder::new()
                        .prefix("jianmu-sessions-")
                        .tempdir()
                        .map_err(|e| {
                            ToolError::failed(format!(
                                "cannot make a folder for shell sessions: {e}"
                            ))
                        })?;
                    let path = own.path().to_owned();
                    inner.own = Some(own);
                    path
                }
            },
        };
        inner.next += 1;
        let dir = base.join(format!(".session-{}", inner.next));
        std::fs::create_dir_all(&dir).map_err(|e| {
            ToolError::failed(format!(
                "cannot make a folder for shell session `{id}`: {e}"
            ))
        })?;
        let session = Arc::new(Session {
            dir,
            used: Mutex::new(now),
            live: tokio::sync::Mutex::new(None),
            state: Mutex::new(None),
            jobs: std::sync::atomic::AtomicU64::new(0),
        });
        inner.map.insert(id.to_owned(), Arc::clone(&session));
        Ok(session)
    }
}

impl Inner {
    /// Removes and returns the sessions unused for `idle`.
    fn take_idle(&mut self, idle: Duration) -> Vec<Arc<Session>> {
        let now = Instant::now();
        let ids: Vec<String> = self
            .map
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_used()) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter_map(|id| self.map.remove(id)).collect()
    }
}

impl Session {
    fn last_used(&self) -> Instant {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn touch(&self) {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// Runs `command` in the session's shell, starting one if there is none.
    ///
    /// # Errors
    /// The shell cannot start, or its pipes fail.
    pub(crate) async fn run(
        &self,
        launch: Launch<'_>,
        command: &str,
        limit: Duration,
        counter: Option<&Counter>,
    ) -> Result<Ended, ToolError> {
        let mut slot = self.live.lock().await;
        // Taken out for the call: if the call is cancelled midway, the shell is dropped
        // (and ended with all it runs) rather than kept in an unknown state.
        let mut live = match slot.take() {
            Some(mut live) => {
                if matches!(live.child.try_wait(), Ok(None)) {
                    live
                } else {
                    self.start(&launch).await?
                }
            }
            None => self.start(&launch).await?,
        };
        self.touch();
        let nonce = nonce();
        let mut text = command.to_owned();
        text.push('\n');
        // Made again in case a command removed it (it lies in the command's `TMPDIR`).
        let _ = std::fs::create_dir_all(&self.dir);
        // A new file per call: replacing the contents of one would cost a flush on
        // some file systems (ext4 flushes a file truncated and written again).
        let script = Removed(self.dir.join(&nonce));
        std::fs::write(&script.0, text).map_err(|e| {
            ToolError::failed(format!(
                "cannot hand the command to the session's shell: {e}"
            ))
        })?;
        let go = format!("__jianmu_call {nonce}\n");
        if live.stdin.write_all(go.as_bytes()).await.is_err() {
            // The shell went away between calls: start again once.
            live = self.start(&launch).await?;
            live.stdin
                .write_all(go.as_bytes())
                .await
                .map_err(|e| ToolError::failed(format!("the session's shell is gone: {e}")))?;
        }
        let mut stdout = Captured::new(launch.keep_head, launch.keep_tail);
        let mut stderr = Captured::new(launch.keep_head, launch.keep_tail);
        // Bytes read but not yet taken (held back while they may begin a marker).
        let (mut out_held, mut err_held) = (Vec::new(), Vec::new());
        // Set once stdout's output part is over (what is held is state, not output).
        let mut past_output = false;
        let err_marker = format!("\n{nonce}\n");
        let outcome = async {
            let (report, _) = tokio::join!(
                read_report(
                    &mut live.stdout,
                    &nonce,
                    &mut stdout,
                    &mut out_held,
                    &mut past_output,
                    counter
                ),
                read_until(
                    &mut live.stderr,
                    err_marker.as_bytes(),
                    &mut err_held,
                    |data| stderr.push_counted(data, counter)
                ),
            );
            match report {
                Some(Report {
                    code: Some(code),
                    state,
                }) => (Some(code), true, state),
                // The shell is on its way out (`exit`): its status is the call's.
                Some(Report { code: None, state }) => (
                    live.child.wait().await.ok().and_then(|s| s.code()),
                    false,
                    state,
                ),
                // stdout ended without a report: the shell was replaced (`exec`) or
                // closed its output. One that cannot report any more is ended.
                None => {
                    let waited =
                        tokio::time::timeout(Duration::from_secs(1), live.child.wait()).await;
                    let code = match waited {
                        Ok(status) => status.ok().and_then(|s| s.code()),
                        Err(_) => {
                            live.child.stop_and_wait().await;
                            None
                        }
                    };
                    (code, false, None)
                }
            }
        };
        match tokio::time::timeout(limit, outcome).await {
            Ok((code, alive, state)) => {
                if let Some(state) = state {
                    *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
                }
                if alive {
                    // Whatever the call left running ends with the call.
                    live.child.stop_others().await;
                    *slot = Some(live);
                }
                Ok(Ended::Finished {
                    code,
                    stdout,
                    stderr,
                })
            }
            Err(_) => {
                live.child.stop_and_wait().await;
                // No marker came: what was held back is output too.
                if !past_output {
                    stdout.push(&out_held);
                }
                stderr.push(&err_held);
                Ok(Ended::TimedOut { stdout, stderr })
            }
        }
    }

    /// Starts the session's shell where the last call left it.
    async fn start(&self, launch: &Launch<'_>) -> Result<Live, ToolError> {
        let mut spec = launch.spec.clone();
        spec.arg("-s")
            .stdin(Stream::Piped)
            .stdout(Stream::Piped)
            .stderr(Stream::Piped);
        if let Some(cwd) = self.saved_cwd() {
            spec.current_dir(cwd);
        }
        let mut child = launch
            .jail
            .spawn(&spec)
            .map_err(|e| ToolError::failed(format!("cannot start the session's shell: {e}")))?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ToolError::failed("the session's shell has no pipes"));
        };
        let dir = quote(&self.dir);
        // Builtins only. The report: `\n NONCE STATUS\n`, the exports, `\n NONCE:` the
        // directory `\n NONCE.\n`; the `EXIT` trap reports with the status `exit`.
        let mut prelude = format!(
            "__jianmu_report() {{ printf '\\n%s %s\\n' \"$__jianmu_n\" \"$1\"; export -p; \
             printf '\\n%s:%s\\n%s.\\n' \"$__jianmu_n\" \"$PWD\" \"$__jianmu_n\"; }}\n\
             __jianmu_call() {{ __jianmu_n=$1; . {dir}/\"$1\" < /dev/null; __jianmu_report $?; \
             printf '\\n%s\\n' \"$1\" >&2; }}\n\
             trap '__jianmu_report exit 2>/dev/null' EXIT\n"
        )
        .into_bytes();
        // A new shell of an old session exports what the last one did.
        if let Some(state) = self.saved() {
            prelude.extend_from_slice(&state.exports);
            prelude.push(b'\n');
        }
        stdin
            .write_all(&prelude)
            .await
            .map_err(|e| ToolError::failed(format!("the session's shell did not start: {e}")))?;
        Ok(Live {
            child,
            stdin,
            stdout,
            stderr,
        })
    }

    fn saved(&self) -> Option<State> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn saved_cwd(&self) -> Option<PathBuf> {
        self.saved().map(|s| s.cwd).filter(|d| d.is_dir())
    }

    /// Where a background job started from this session begins: the session's
    /// working directory, and a copy of its exports for the job to source (the copy
    /// is the job's: later calls cannot change it under the job).
    pub(crate) async fn job_start(&self) -> (Option<PathBuf>, Option<PathBuf>) {
        let _calls = self.live.lock().await;
        self.touch();
        let n = self.jobs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = self.dir.join(format!("job-{n}.env"));
        let _ = std::fs::create_dir_all(&self.dir);
        let env = self
            .saved()
            .filter(|s| std::fs::write(&copy, &s.exports).is_ok())
            .map(|_| copy);
        (self.saved_cwd(), env)
    }
}

/// A file removed when the call is over, however it ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `path` single-quoted for the shell.
pub(crate) fn quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}

/// A random marker no command can guess.
fn nonce() -> String {
    format!("__jianmu_end_{}", jianmu_process::random_hex())
}

/// Reads `stream` until `marker`, handing what comes before it to `sink`: true when
/// the marker came, false at the end of the stream. `held` is the caller's: bytes read
/// but not yet handed on (past the marker, or possibly its start) stay there, so they
/// are not lost when the read is abandoned and the next read starts with them.
async fn read_until<R: AsyncRead + Unpin>(
    stream: &mut R,
    marker: &[u8],
    held: &mut Vec<u8>,
    mut sink: impl FnMut(&[u8]),
) -> bool {
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(at) = memchr::memmem::find(held, marker) {
            sink(&held[..at]);
            held.drain(..at + marker.len());
            return true;
        }
        // The last bytes may be the start of the marker: keep them back.
        let keep = marker.len() - 1;
        if held.len() > keep {
            let cut = held.len() - keep;
            sink(&held[..cut]);
            held.drain(..cut);
        }
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => held.extend_from_slice(&buf[..n]),
            _ => {
                sink(held);
                held.clear();
                return false;
            }
        }
    }
}

/// What the shell reported after a call.
struct Report {
    /// The command's status; `None` when the shell is exiting.
    code: Option<i32>,
    /// The state, unless it was too big to keep.
    state: Option<State>,
}

/// Reads stdout: the command's output up to the marker, then the report. `None` when
/// the stream ended first (the shell is gone).
async fn read_report<R: AsyncRead + Unpin>(
    stream: &mut R,
    nonce: &str,
    out: &mut Captured,
    held: &mut Vec<u8>,
    past_output: &mut bool,
    counter: Option<&Counter>,
) -> Option<Report> {
    let marker = format!("\n{nonce} ");
    let output = read_until(stream, marker.as_bytes(), held, |data| {
        out.push_counted(data, counter);
    })
    .await;
    if !output {
        return None;
    }
    *past_output = true;
    let (exports_end, cwd_end) = (format!("\n{nonce}:"), format!("\n{nonce}.\n"));
    let mut status = Vec::new();
    let mut exports = Vec::new();
    let mut cwd = Vec::new();
    let bounded = |into: &mut Vec<u8>, max: usize, data: &[u8]| {
        if into.len() <= max {
            into.extend_from_slice(&data[..data.len().min(max + 1 - into.len())]);
        }
    };
    let complete = read_until(stream, b"\n", held, |d| bounded(&mut status, 32, d)).await
        && read_until(stream, exports_end.as_bytes(), held, |d| {
            bounded(&mut exports, MAX_ENV, d);
        })
        .await
        && read_until(stream, cwd_end.as_bytes(), held, |d| {
            bounded(&mut cwd, MAX_CWD, d);
        })
        .await;
    let code = match std::str::from_utf8(&status).map(str::trim) {
        Ok("exit") => None,
        Ok(n) => Some(n.parse().ok()?),
        Err(_) => return None,
    };
    let state = (complete && exports.len() <= MAX_ENV && cwd.len() <= MAX_CWD).then(|| State {
        cwd: PathBuf::from(std::ffi::OsString::from_vec(cwd)),
        exports,
    });
    Some(Report { code, state })
}
