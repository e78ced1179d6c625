//! Shell sessions: calls with the same `session` id run in one shell process that
//! lives across calls, so `cd`, `export`, shell variables and functions carry over,
//! and a call costs a write and a read, not a process start.
//!
//! The shell reads its commands from a Unix socket, its standard input: the control
//! channel. Unlike a pipe, a socket cannot be opened again through `/proc/PID/fd`, and
//! the shell's copy of it while a command runs is close-on-exec, so no process a
//! command starts can send the shell commands or read its reports. For each call the
//! command goes into a file in the session's state folder and the shell is told to
//! source it (`. cmd`, input from `/dev/null`); it answers `d STATUS` on the socket.
//! Then every process the call started that still runs is ended, and only then is the
//! shell sent a fresh random marker, which it prints on stdout and stderr (output up
//! to the markers is the call's), and asked for its state, which comes back on the
//! socket as data: the directory and the exported variables, kept in memory
//! (bounded) and restored as the next shell's directory and environment, never run as
//! code. Nothing the command starts ever sees the marker, so it cannot end a call's
//! output early or forge a report. Builtins only: a call starts no process and writes
//! no file besides the command.
//!
//! A call that ends the shell (`exit`, `exec`) answers with the shell's status (an
//! `EXIT` trap still reports the state); one that hits its time limit or is cancelled
//! ends the shell and everything in it. The next call starts a new shell from the
//! kept state: the directory and exports (not shell variables) of the last call that
//! finished. Shells beyond `max_shell_sessions` are refused; sessions unused for
//! `session_idle_secs` are ended (their shells too) by a task that looks every quarter
//! of that time.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_process::{Jail, Spec, Stream, Supervised};
use jianmu_tool_core::ToolError;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

use crate::capture::{Captured, Counter};

/// The largest exports a session keeps; a call that exports more keeps the state of
/// the call before it.
const MAX_ENV: usize = 1024 * 1024;

/// The longest `NAME=VALUE` a session restores (the kernel's limit for one string of a
/// new program's environment).
const MAX_VAR: usize = 128 * 1024;

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
    pub spiller: Option<jianmu_workspace::Saver>,
}

/// How a session call ended.
pub(crate) enum Ended {
    /// The command finished (`Some(code)`), or the shell was killed by a signal.
    Finished {
        code: Option<i32>,
        stdout: Captured,
        stderr: Captured,
        /// The command ended the session's shell (`exit`, `exec`, closed output).
        shell_ended: bool,
    },
    /// The time limit passed; the shell and everything in it were stopped.
    TimedOut { stdout: Captured, stderr: Captured },
}

/// The sessions of one `bash` tool.
#[derive(Debug, Default)]
pub(crate) struct Shells {
    inner: Mutex<Inner>,
    /// Set once a task ends idle sessions on its own.
    watched: std::sync::atomic::AtomicBool,
    /// Where sessions' states are kept for a suspension, and given back.
    kept: Option<Arc<jianmu_tool_core::Kept>>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Arc<Shell>>,
    /// Where state folders go when the jail has no private temporary folder.
    own: Option<tempfile::TempDir>,
    next: u64,
}

/// One session: its state folder and, between calls, its live shell.
#[derive(Debug)]
pub(crate) struct Shell {
    /// Its name, and where its state is kept.
    id: String,
    kept: Option<Arc<jianmu_tool_core::Kept>>,
    dir: PathBuf,
    used: Mutex<Instant>,
    /// Held for the whole of a call: one call at a time per session.
    live: tokio::sync::Mutex<Option<Live>>,
    /// The directory and exports the last finished call left.
    state: Mutex<Option<State>>,
}

/// Where a shell of the session starts again.
#[derive(Debug, Clone)]
struct State {
    cwd: PathBuf,
    /// The exported variables, restored as the environment of the next shell.
    env: Vec<(OsString, OsString)>,
    /// Kept from another session (a resumed one's): laid over the new shell's own
    /// environment, whose variables (its `TMPDIR`, proxy, certificates) win.
    overlay: bool,
}

impl State {
    /// As kept for a suspension: names and values that are not UTF-8 are left out.
    fn to_kept(&self) -> jianmu_tool_core::ShellState {
        jianmu_tool_core::ShellState {
            cwd: self.cwd.to_string_lossy().into_owned(),
            env: self
                .env
                .iter()
                .filter_map(|(n, v)| Some((n.to_str()?.to_owned(), v.to_str()?.to_owned())))
                .collect(),
        }
    }

    /// From a kept state, checked as a shell's own report is: valid names, each
    /// variable and the whole within the limits.
    fn from_kept(kept: jianmu_tool_core::ShellState) -> Self {
        let mut size = 0usize;
        let mut env = Vec::new();
        for (name, value) in kept.env {
            if !restorable(name.as_bytes(), value.as_bytes()) {
                continue;
            }
            size += name.len() + value.len() + 2;
            if size > MAX_ENV {
                break;
            }
            env.push((OsString::from(name), OsString::from(value)));
        }
        let mut cwd = kept.cwd;
        if cwd.len() > MAX_CWD || cwd.contains('\0') {
            cwd = String::from("/");
        }
        Self {
            cwd: PathBuf::from(cwd),
            env,
            overlay: true,
        }
    }
}

#[derive(Debug)]
struct Live {
    child: Supervised,
    /// The shell's standard input, a socket: commands go in, its reports come back.
    /// Processes the commands start neither inherit it nor can open it again.
    control: UnixStream,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(kept) = &self.kept {
            kept.forget_shell(&self.id);
        }
    }
}

impl Shells {
    /// Sessions whose states are kept in `kept` (see [`jianmu_tool_core::Kept`]).
    pub(crate) fn keeping(kept: Arc<jianmu_tool_core::Kept>) -> Self {
        Self {
            kept: Some(kept),
            ..Self::default()
        }
    }

    /// Ends sessions unused for `idle` from now on, without waiting for a call: a task
    /// on the current runtime looks every quarter of `idle` (1 s to 60 s) for as long
    /// as the sessions exist.
    pub(crate) fn watch(self: &Arc<Self>, idle: Duration) {
        use std::sync::atomic::Ordering;
        if self.watched.swap(true, Ordering::Relaxed) {
            return;
        }
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let started =
            jianmu_tool_core::spawn_periodic(Arc::downgrade(self), every, move |sessions| {
                let expired = sessions
                    .inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take_idle(idle);
                // Dropped outside the lock: ending a shell waits for it to go.
                drop(expired);
            });
        if !started {
            self.watched.store(false, Ordering::Relaxed);
        }
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
    ) -> Result<Arc<Shell>, ToolError> {
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
        let given = self
            .kept
            .as_ref()
            .and_then(|k| k.take_given(id))
            .map(State::from_kept);
        let session = Arc::new(Shell {
            id: id.to_owned(),
            kept: self.kept.clone(),
            dir,
            used: Mutex::new(now),
            live: tokio::sync::Mutex::new(None),
            state: Mutex::new(given),
        });
        inner.map.insert(id.to_owned(), Arc::clone(&session));
        Ok(session)
    }
}

impl Inner {
    /// Removes and returns the sessions unused for `idle`.
    fn take_idle(&mut self, idle: Duration) -> Vec<Arc<Shell>> {
        let now = Instant::now();
        self.map
            .extract_if(|_, s| now.duration_since(s.last_used()) >= idle)
            .map(|(_, s)| s)
            .collect()
    }
}

impl Shell {
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
        let mut text = command.to_owned();
        text.push('\n');
        // Made again in case a command removed it (it lies in the command's `TMPDIR`).
        let _ = std::fs::create_dir_all(&self.dir);
        // A new file per call: replacing the contents of one would cost a flush on
        // some file systems (ext4 flushes a file truncated and written again). Its
        // name is random but no secret: the end marker is never written anywhere a
        // process of the call can read.
        let script = Removed(
            self.dir
                .join(format!("cmd-{}", jianmu_tool_core::random_hex())),
        );
        std::fs::write(&script.0, text).map_err(|e| {
            ToolError::failed(format!(
                "cannot hand the command to the session's shell: {e}"
            ))
        })?;
        let go = format!("__jianmu_call {}\n", quote(&script.0));
        if live.control.write_all(go.as_bytes()).await.is_err() {
            // The shell went away between calls: start again once.
            live = self.start(&launch).await?;
            live.control
                .write_all(go.as_bytes())
                .await
                .map_err(|e| ToolError::failed(format!("the session's shell is gone: {e}")))?;
        }
        let mut stdout =
            Captured::new(launch.keep_head, launch.keep_tail).spilling(launch.spiller.clone());
        let mut stderr =
            Captured::new(launch.keep_head, launch.keep_tail).spilling(launch.spiller.clone());
        // Bytes read but not yet taken (held back while they may begin a marker).
        let (mut out_held, mut err_held) = (Vec::new(), Vec::new());
        // Set once stdout's marker came (what is held after it is not output).
        let mut out_done = false;
        // Sent to the shell only after every other process of the call has ended, and
        // only over the control socket: nothing the command started can print it.
        let marker = format!("\n{}\n", nonce());
        let Live {
            child,
            control,
            stdout: out_pipe,
            stderr: err_pipe,
        } = &mut live;
        let outcome = async {
            let (control, out, err) = tokio::join!(
                converse(child, control, &marker),
                read_until(out_pipe, marker.as_bytes(), &mut out_held, |data| {
                    stdout.push_counted(data, counter);
                }),
                read_until(err_pipe, marker.as_bytes(), &mut err_held, |data| {
                    stderr.push_counted(data, counter);
                }),
            );
            out_done = out;
            // A shell whose stdout or stderr is closed (`exec >&-`) cannot mark the end
            // of a call's output any more: it is ended, and the next call starts anew.
            let (code, alive, state) = control;
            (code, alive && out && err, state)
        };
        match tokio::time::timeout(limit, outcome).await {
            Ok((code, alive, state)) => {
                if let Some(state) = state {
                    if let Some(kept) = &self.kept {
                        kept.save_shell(&self.id, state.to_kept());
                    }
                    *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
                }
                if alive {
                    *slot = Some(live);
                }
                Ok(Ended::Finished {
                    code,
                    stdout,
                    stderr,
                    shell_ended: !alive,
                })
            }
            Err(_) => {
                live.child.stop_and_wait().await;
                // No marker came: what was held back is output too.
                if !out_done {
                    stdout.push(&out_held);
                }
                stderr.push(&err_held);
                Ok(Ended::TimedOut { stdout, stderr })
            }
        }
    }

    /// Starts the session's shell where the last call left it: its directory, and its
    /// exports as the environment (data, never run as code).
    async fn start(&self, launch: &Launch<'_>) -> Result<Live, ToolError> {
        let mut spec = launch.spec.clone();
        spec.arg("-s")
            .stdin(Stream::Socket)
            .stdout(Stream::Piped)
            .stderr(Stream::Piped);
        self.restore(&mut spec);
        let mut child = launch
            .jail
            .spawn(&spec)
            .map_err(|e| ToolError::failed(format!("cannot start the session's shell: {e}")))?;
        let (Some(mut control), Some(stdout), Some(stderr)) = (
            child.socket.take(),
            child.stdout.take(),
            child.stderr.take(),
        ) else {
            return Err(ToolError::failed("the session's shell has no pipes"));
        };
        control
            .write_all(prelude().as_bytes())
            .await
            .map_err(|e| ToolError::failed(format!("the session's shell did not start: {e}")))?;
        Ok(Live {
            child,
            control,
            stdout,
            stderr,
        })
    }

    /// Gives `spec` the state the last finished call left, if any: its directory (when
    /// it still exists) and its exports as the whole environment.
    fn restore(&self, spec: &mut Spec) {
        let saved = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(State { cwd, env, overlay }) = saved {
            if overlay {
                for (name, value) in env {
                    if !spec.has_env(&name) {
                        spec.env(name, value);
                    }
                }
            } else {
                spec.env_exactly(env);
            }
            if cwd.is_dir() {
                spec.current_dir(cwd);
            }
        }
    }

    /// Starts a background job of this session where the session is (see
    /// [`Session::restore`]), once no call is running in it.
    pub(crate) async fn job_start(&self, spec: &mut Spec) {
        let _calls = self.live.lock().await;
        self.touch();
        self.restore(spec);
    }
}

/// The shell's side of the protocol, sent once at its start on the control socket (its
/// standard input, which it reads its commands from). Builtins only, and POSIX sh but
/// for bash's way to list exports (busybox `ash` runs it in the Docker sandbox).
///
/// - `__jianmu_call FILE` sources the command with standard input from `/dev/null`,
///   then writes `d STATUS` on the control socket.
/// - `__jianmu_end MARKER`, sent once every other process is gone, prints the marker
///   on stdout and stderr; when the call started a background job (`$!` changed),
///   it first lists the jobs on stderr (`[1]+  Killed  sleep 100`), which reports
///   them as the call's output: the shell would report a killed one during the next
///   call and writes the state on the control socket: NUL-terminated
///   fields, the directory, then `n` and `NAME=VALUE` per exported variable (bash), or
///   `p` and the output of `export -p` (other shells), then an empty field.
/// - When the shell exits (`exit` in a command) its `EXIT` trap writes `x` and the
///   state on the control socket, found among its descriptors (standard input is
///   `/dev/null` while a command runs; the socket's saved copy is above 9).
fn prelude() -> String {
    // Bash reports its exports with one builtin (`declare -px`, read as data below),
    // other shells with `export -p`.
    "if [ -n \"${BASH_VERSION-}\" ]; then eval '__jianmu_exports() { command printf \"p\\000\"; \
     builtin declare -px; command printf \"#\\000\"; }'; \
     else __jianmu_exports() { command printf 'p\\000'; export -p; command printf '#\\000'; }; fi\n\
     __jianmu_state() { command printf '%s\\000' \"$PWD\"; __jianmu_exports; command printf '\\000'; }\n\
     __jianmu_call() { . \"$1\" < /dev/null; command printf 'd %s\\n' \"$?\" >&0; }\n\
     __jianmu_end() { if command [ \"${!-}\" != \"${__jianmu_bg-}\" ]; then __jianmu_bg=$!; command jobs >&2; fi; command printf '\\n%s\\n' \"$1\"; command printf '\\n%s\\n' \"$1\" >&2; \
     __jianmu_state >&0; }\n\
     __jianmu_exit() { for __jianmu_f in /proc/$$/fd/*; do __jianmu_f=${__jianmu_f##*/}; \
     case $__jianmu_f in 0|1[0-9]*|[2-9][0-9]*) if [ -S \"/proc/$$/fd/$__jianmu_f\" ]; then \
     { command printf 'x\\n'; __jianmu_state; } >&\"$__jianmu_f\"; return; fi;; esac; done; }\n\
     trap '__jianmu_exit 2>/dev/null' EXIT\n"
        .to_owned()
}

/// After the command was handed over: waits for the shell's word on the control
/// socket. When the command finished, ends every other process of the call, then asks
/// the shell for the end markers and its state. Returns the status (`None`: the
/// shell is gone and its own status was not known), whether the shell lives on, and
/// the state it reported.
async fn converse(
    child: &mut Supervised,
    control: &mut UnixStream,
    marker: &str,
) -> (Option<i32>, bool, Option<State>) {
    let mut held = Vec::new();
    let mut line = Vec::new();
    let got = read_until(control, b"\n", &mut held, |d| keep(&mut line, 32, d)).await;
    let line = if got { line } else { Vec::new() };
    match line.as_slice() {
        [b'd', b' ', code @ ..] => {
            let code = std::str::from_utf8(code).ok().and_then(|c| c.parse().ok());
            // Whatever the call left running ends with the call, before the marker
            // exists anywhere but here.
            child.stop_others().await;
            let end = format!("__jianmu_end {}\n", marker.trim());
            if control.write_all(end.as_bytes()).await.is_err() {
                return (code, false, None);
            }
            let state = read_state(control, &mut held).await;
            (code, true, state)
        }
        // The shell is on its way out (`exit`): its status is the call's.
        b"x" => {
            let state = read_state(control, &mut held).await;
            (child.wait().await.ok().and_then(|s| s.code()), false, state)
        }
        // The socket closed without a word: the shell was replaced (`exec`) or killed.
        // One that cannot report any more is ended.
        _ => {
            let waited = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            let code = match waited {
                Ok(status) => status.ok().and_then(|s| s.code()),
                Err(_) => {
                    child.stop_and_wait().await;
                    None
                }
            };
            (code, false, None)
        }
    }
}

/// Reads the state the shell writes on the control socket (see [`prelude`]); `None`
/// when it is cut short, too big to keep, or malformed.
async fn read_state(control: &mut UnixStream, held: &mut Vec<u8>) -> Option<State> {
    let max = MAX_ENV + MAX_CWD;
    let mut raw = Vec::new();
    let complete = read_until(control, b"\0\0", held, |d| keep(&mut raw, max, d)).await;
    if !complete || raw.len() > max {
        return None;
    }
    parse_state(&raw)
}

/// The directory and exports from the shell's report (see [`prelude`]): NUL-separated
/// fields, the directory first, then `p` and the text of `export -p` (or bash's
/// `declare -px`). Names that are not variable names are left out.
/// Whether `NAME=VALUE` can be a variable of the next shell: a shell variable's name,
/// no NUL, and within the kernel's limit for one string of a program's environment (a
/// longer one, kept, would stop the next shell; every program the shell ran had
/// failed already).
fn restorable(name: &[u8], value: &[u8]) -> bool {
    matches!(name.first(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && !value.contains(&0)
        && name.len() + value.len() + 2 <= MAX_VAR
}

fn parse_state(raw: &[u8]) -> Option<State> {
    let mut fields = raw.splitn(3, |b| *b == 0);
    let cwd = fields
        .next()
        .filter(|c| !c.is_empty() && c.len() <= MAX_CWD)?;
    let kind = fields.next()?;
    let rest = fields.next().unwrap_or_default();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = match kind {
        b"p" => exports_p(rest.strip_suffix(b"#")?),
        _ => return None,
    };
    let mut env = Vec::new();
    let mut size = 0;
    for (name, value) in pairs {
        if !restorable(&name, &value) {
            continue;
        }
        size += name.len() + value.len() + 2;
        env.push((OsString::from_vec(name), OsString::from_vec(value)));
    }
    if size > MAX_ENV {
        return None;
    }
    Some(State {
        cwd: PathBuf::from(OsString::from_vec(cwd.to_vec())),
        env,
        overlay: false,
    })
}

/// `NAME=VALUE` split at its first `=`.
fn name_value(field: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let eq = memchr::memchr(b'=', field)?;
    Some((field[..eq].to_vec(), field[eq + 1..].to_vec()))
}

/// Appends `data` to `into` while `into` holds at most `max` bytes, so that one byte
/// past `max` says it was cut.
fn keep(into: &mut Vec<u8>, max: usize, data: &[u8]) {
    if into.len() <= max {
        into.extend_from_slice(&data[..data.len().min(max + 1 - into.len())]);
    }
}

/// The `NAME=VALUE` words of `export -p` output (or bash's `declare -px`), read as the
/// shell quotes them (single quotes, double quotes with backslash escapes, `$'...'`,
/// backslashes); never run. Arrays (`declare -ax`, `-Ax`) are left out: no program
/// can receive them.
fn exports_p(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut words: Vec<Vec<u8>> = Vec::new();
    let mut word: Option<Vec<u8>> = None;
    let mut i = 0;
    let end_command = |words: &mut Vec<Vec<u8>>, out: &mut Vec<(Vec<u8>, Vec<u8>)>| {
        match words.first().map(Vec::as_slice) {
            Some(b"export") => out.extend(words.iter().skip(1).filter_map(|w| name_value(w))),
            Some(b"declare")
                if words.get(1).is_some_and(|f| {
                    f.starts_with(b"-") && !f.contains(&b'a') && !f.contains(&b'A')
                }) =>
            {
                out.extend(words.iter().skip(2).filter_map(|w| name_value(w)));
            }
            _ => {}
        }
        words.clear();
    };
    while i < text.len() {
        let c = text[i];
        match c {
            b'$' if text.get(i + 1) == Some(&b'\'') => {
                let w = word.get_or_insert_with(Vec::new);
                i = ansi_c(text, i + 2, w);
            }
            b' ' | b'\t' | b'\n' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
                if c == b'\n' {
                    end_command(&mut words, &mut out);
                }
                i += 1;
            }
            b'\'' => {
                let w = word.get_or_insert_with(Vec::new);
                let close = memchr::memchr(b'\'', &text[i + 1..]).map_or(text.len(), |n| i + 1 + n);
                w.extend_from_slice(&text[i + 1..close]);
                i = close + 1;
            }
            b'"' => {
                let w = word.get_or_insert_with(Vec::new);
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\'
                        && i + 1 < text.len()
                        && matches!(text[i + 1], b'$' | b'`' | b'"' | b'\\' | b'\n')
                    {
                        i += 1;
                    }
                    w.push(text[i]);
                    i += 1;
                }
                i += 1;
            }
            b'\\' if i + 1 < text.len() => {
                word.get_or_insert_with(Vec::new).push(text[i + 1]);
                i += 2;
            }
            _ => {
                word.get_or_insert_with(Vec::new).push(c);
                i += 1;
            }
        }
    }
    if let Some(w) = word.take() {
        words.push(w);
    }
    end_command(&mut words, &mut out);
    out
}

/// Reads the body of a `$'...'` word starting at `i` into `w`, decoding the escapes
/// bash writes there; returns the index after the closing quote.
fn ansi_c(text: &[u8], mut i: usize, w: &mut Vec<u8>) -> usize {
    let digits = |from: usize, max: usize, radix: u32| -> (u32, usize) {
        let mut value = 0;
        let mut n = 0;
        while n < max
            && let Some(d) = text
                .get(from + n)
                .and_then(|b| char::from(*b).to_digit(radix))
        {
            value = value * radix + d;
            n += 1;
        }
        (value, n)
    };
    while i < text.len() && text[i] != b'\'' {
        if text[i] != b'\\' || i + 1 >= text.len() {
            w.push(text[i]);
            i += 1;
            continue;
        }
        let e = text[i + 1];
        i += 2;
        let simple = match e {
            b'a' => Some(7),
            b'b' => Some(8),
            b'e' | b'E' => Some(27),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' | b'\'' | b'"' | b'?' => Some(e),
            _ => None,
        };
        if let Some(b) = simple {
            w.push(b);
        } else if e.is_ascii_digit() && e < b'8' {
            let (value, n) = digits(i - 1, 3, 8);
            w.push(u8::try_from(value & 0xff).unwrap_or(0));
            i += n - 1;
        } else if e == b'x' && digits(i, 2, 16).1 > 0 {
            let (value, n) = digits(i, 2, 16);
            w.push(u8::try_from(value).unwrap_or(0));
            i += n;
        } else {
            w.extend_from_slice(&[b'\\', e]);
        }
    }
    i + 1
}

/// A file removed when the call is over, however it ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `path` single-quoted for the shell.
fn quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}

/// A random marker no command can guess.
fn nonce() -> String {
    format!("__jianmu_end_{}", jianmu_tool_core::random_hex())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The exports of `state` as text pairs.
    fn env_of(state: &State) -> Vec<(String, String)> {
        state
            .env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect()
    }

    /// `declare -px` as bash prints it is read as data: double quotes, `$'...'`
    /// escapes, flags, arrays and unset names left out.
    #[test]
    fn bash_declarations_are_parsed_not_run() {
        let text = b"declare -x A=$'x\\ny\"z$`\\\\\\'q\\001\\x7f\\t\\e'\ndeclare -x B=\"pl\\\"ain \\$(x)\"\ndeclare -x OLDPWD\ndeclare -rx R=\"ro\"\ndeclare -ax arr=([0]=\"1\" [1]=\"2\")\ndeclare -Ax map=([k]=\"v\" )\ndeclare -x OLD=\"multi\nline\"\n#";
        let mut raw = b"/w\0p\0".to_vec();
        raw.extend_from_slice(text);
        let state = parse_state(&raw).unwrap();
        let env = env_of(&state);
        let want = [
            ("A", "x\ny\"z$`\\'q\u{1}\u{7f}\t\u{1b}"),
            ("B", "pl\"ain $(x)"),
            ("R", "ro"),
            ("OLD", "multi\nline"),
        ];
        assert_eq!(
            env,
            want.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec()
        );
    }

    /// `export -p` as dash and busybox `ash` print it is read as data.
    #[test]
    fn posix_exports_are_parsed_not_run() {
        let text = b"export A='1'\nexport B='it'\"'\"'s $(x)\nline'\nexport C\nexport D=\"q\\\"\\$v\"\nexport E=plain\\ x\n";
        let mut raw = b"/w\0p\0".to_vec();
        raw.extend_from_slice(text);
        // One variable too long to hand to a new program is left out.
        raw.extend_from_slice(format!("export HUGE='{}'\n#", "h".repeat(MAX_VAR)).as_bytes());
        let state = parse_state(&raw).unwrap();
        let env = env_of(&state);
        let want = [
            ("A", "1"),
            ("B", "it's $(x)\nline"),
            ("D", "q\"$v"),
            ("E", "plain x"),
        ];
        assert_eq!(
            env,
            want.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec()
        );
        assert_eq!(state.cwd, PathBuf::from("/w"));
    }
}
