//! Shell sessions: calls with the same `session` id run in one shell process that
//! lives across calls, so `cd`, `export`, shell variables and functions carry over,
//! and a call costs a write and a read, not a process start.
//!
//! The shell reads its commands from a pipe. For each call the command goes into the
//! session's state folder (`cmd`) and the shell is told to source it (`. cmd`, input
//! from `/dev/null`), then to save where it is and what it exports (`cwd`, `env`,
//! written with builtins only) and to print a marker with a fresh random nonce and the
//! exit status on stdout and stderr. Output up to the markers is the call's; after
//! them, every process the call started that still runs is ended, so nothing a call
//! starts outlives it while the shell lives on.
//!
//! A call that ends the shell (`exit`, `exec`) answers with the shell's status; one
//! that hits its time limit or is cancelled ends the shell and everything in it. The
//! next call starts a new shell from the saved state (the last call that finished, or
//! the `exit` itself: the `EXIT` trap saves too). Sessions beyond `max_sessions` are
//! refused; sessions unused for `session_idle_secs` are ended when the next session
//! call comes.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_process::{Jail, Spec, Stream, Supervised};
use jianmu_tool_core::ToolError;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::unix::pipe;

use crate::capture::{Captured, Counter};

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
    jobs: std::sync::atomic::AtomicU64,
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
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        // Idle sessions end here: dropping one ends its shell and removes its folder.
        inner
            .map
            .retain(|_, s| now.duration_since(s.last_used()) < idle);
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
            jobs: std::sync::atomic::AtomicU64::new(0),
        });
        inner.map.insert(id.to_owned(), Arc::clone(&session));
        Ok(session)
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
        std::fs::write(self.dir.join("cmd"), text).map_err(|e| {
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
        let out_marker = format!("\n{nonce} ");
        let err_marker = format!("\n{nonce}\n");
        // `Some(Ok(code))`: the call finished and the shell lives on; `Some(Err(..))`:
        // the shell ended, with this status; within the time limit either way.
        // Bytes read but held back while they may be the start of a marker.
        let (mut out_held, mut err_held) = (Vec::new(), Vec::new());
        let outcome = async {
            let (code, _) = tokio::join!(
                read_status(
                    &mut live.stdout,
                    out_marker.as_bytes(),
                    &mut stdout,
                    &mut out_held,
                    counter
                ),
                read_to_marker(
                    &mut live.stderr,
                    err_marker.as_bytes(),
                    &mut stderr,
                    &mut err_held,
                    counter
                ),
            );
            match code {
                Some(code) => Ok(code),
                None => Err(live.child.wait().await.ok().and_then(|s| s.code())),
            }
        };
        let outcome = tokio::time::timeout(limit, outcome).await;
        match outcome {
            Ok(Ok(code)) => {
                // Whatever the call left running ends with the call.
                live.child.stop_others().await;
                *slot = Some(live);
                Ok(Ended::Finished {
                    code: Some(code),
                    stdout,
                    stderr,
                })
            }
            // The shell ended (`exit`, `exec`, a signal): its status is the call's.
            Ok(Err(code)) => Ok(Ended::Finished {
                code,
                stdout,
                stderr,
            }),
            Err(_) => {
                live.child.stop_and_wait().await;
                // No marker came: what was held back is output too.
                stdout.push(&out_held);
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
        // Builtins only: saving costs no process. The saved exports are sourced back
        // when a shell starts again.
        let prelude = format!(
            "__jianmu_save() {{ printf '%s\\n' \"$PWD\" > {dir}/cwd; export -p > {dir}/env; }}\n\
             __jianmu_call() {{ . {dir}/cmd < /dev/null; __jianmu_rc=$?; __jianmu_save 2>/dev/null; \
             printf '\\n%s %s\\n' \"$1\" \"$__jianmu_rc\"; printf '\\n%s\\n' \"$1\" >&2; }}\n\
             trap '__jianmu_save 2>/dev/null' EXIT\n\
             if [ -f {dir}/env ]; then . {dir}/env 2>/dev/null; fi\n"
        );
        stdin
            .write_all(prelude.as_bytes())
            .await
            .map_err(|e| ToolError::failed(format!("the session's shell did not start: {e}")))?;
        Ok(Live {
            child,
            stdin,
            stdout,
            stderr,
        })
    }

    fn saved_cwd(&self) -> Option<PathBuf> {
        let raw = read_bounded(&self.dir.join("cwd"), 64 * 1024)?;
        let text = String::from_utf8(raw).ok()?;
        let dir = PathBuf::from(text.trim_end_matches('\n'));
        dir.is_dir().then_some(dir)
    }

    /// Where a background job started from this session begins: the session's
    /// working directory, and a copy of its exports for the job to source (the copy
    /// is the job's: later calls cannot change it under the job).
    pub(crate) async fn job_start(&self) -> (Option<PathBuf>, Option<PathBuf>) {
        let _calls = self.live.lock().await;
        self.touch();
        let n = self.jobs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = self.dir.join(format!("job-{n}.env"));
        let env = std::fs::copy(self.dir.join("env"), &copy)
            .is_ok()
            .then_some(copy);
        (self.saved_cwd(), env)
    }
}

/// `path` single-quoted for the shell.
pub(crate) fn quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}

/// A random marker no command can guess.
fn nonce() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        // Without the kernel's randomness, the time and the address space's layout.
        let t = Instant::now().elapsed().as_nanos() ^ (&bytes as *const _ as u128);
        bytes = t.to_le_bytes();
    }
    let mut out = String::from("__jianmu_end_");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Reads `stream` into `out` until `marker`; `Some(rest)` with what followed the
/// marker in the same read, `None` at the end of the stream.
/// Bytes that may begin the marker wait in `pending` (the caller's, so they are not
/// lost when the read is abandoned).
async fn read_to_marker<R: AsyncRead + Unpin>(
    stream: &mut R,
    marker: &[u8],
    out: &mut Captured,
    pending: &mut Vec<u8>,
    counter: Option<&Counter>,
) -> std::io::Result<Option<Vec<u8>>> {
    let push = |data: &[u8], out: &mut Captured| {
        if let Some(counter) = counter {
            counter.add(data);
        }
        out.push(data);
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            push(pending, out);
            pending.clear();
            return Ok(None);
        }
        pending.extend_from_slice(&buf[..n]);
        if let Some(at) = memchr::memmem::find(pending, marker) {
            push(&pending[..at], out);
            let rest = pending[at + marker.len()..].to_vec();
            pending.clear();
            return Ok(Some(rest));
        }
        // The last bytes may be the start of the marker: keep them back.
        let hold = marker.len() - 1;
        if pending.len() > hold {
            let cut = pending.len() - hold;
            push(&pending[..cut], out);
            pending.drain(..cut);
        }
    }
}

/// Reads stdout up to the marker and the exit status after it; `None` when the
/// stream ended first (the shell is gone).
async fn read_status<R: AsyncRead + Unpin>(
    stream: &mut R,
    marker: &[u8],
    out: &mut Captured,
    pending: &mut Vec<u8>,
    counter: Option<&Counter>,
) -> Option<i32> {
    let mut rest = read_to_marker(stream, marker, out, pending, counter)
        .await
        .ok()??;
    let mut buf = [0u8; 32];
    while !rest.contains(&b'\n') && rest.len() < 32 {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        rest.extend_from_slice(&buf[..n]);
    }
    let line = rest.split(|&b| b == b'\n').next()?;
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

fn read_bounded(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut out = Vec::new();
    file.take(limit + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= limit).then_some(out)
}
