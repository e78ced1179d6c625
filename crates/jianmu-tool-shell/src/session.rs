//! Shell sessions: calls with the same `session` id share a working directory and
//! exported environment.
//!
//! Each call is still its own supervised process; the state is replayed. The command
//! runs with an `EXIT` trap that writes its final directory and environment to the
//! session's state folder; the next call of the session starts there with that
//! environment. A command that replaces the shell (`exec`), sets its own `EXIT` trap or
//! is stopped by its time limit leaves the state as it was before it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_tool_core::ToolError;

/// The variable naming the state folder, for the trap.
pub(crate) const STATE_VAR: &str = "__JIANMU_SESSION_STATE";

/// The line run before the command: on exit, save where the shell is and what it
/// exports (with the default `PATH`, so a changed `PATH` cannot hide `env`).
/// Plain POSIX shell, so it works with bash and with busybox's shell alike.
pub(crate) const TRAP: &str = "trap 'printf \"%s\\n\" \"$PWD\" > \"$__JIANMU_SESSION_STATE/cwd\" 2>/dev/null; \
     command -p env -0 > \"$__JIANMU_SESSION_STATE/env\" 2>/dev/null' EXIT\n";

/// Variables the shell sets itself, and ours: not carried between calls.
const SHELL_OWN: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_", STATE_VAR];

/// The largest saved environment read back, in bytes.
const MAX_ENV: u64 = 1024 * 1024;

/// What a session call starts from.
#[derive(Debug)]
pub(crate) struct Start {
    /// The state folder the trap writes to.
    pub dir: PathBuf,
    /// The working directory, when an earlier call left one.
    pub cwd: Option<PathBuf>,
    /// The environment, when an earlier call left one.
    pub env: Option<Vec<(OsString, OsString)>>,
}

#[derive(Debug)]
struct Session {
    dir: PathBuf,
    cwd: Option<PathBuf>,
    env: Option<Vec<(OsString, OsString)>>,
    used: Instant,
}

/// The sessions of one `bash` tool.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Session>,
    /// Where state folders go when the jail has no private temporary folder.
    own: Option<tempfile::TempDir>,
    next: u64,
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
    ) -> Result<Start, ToolError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        inner.map.retain(|_, s| now.duration_since(s.used) < idle);
        if reset && let Some(old) = inner.map.remove(id) {
            let _ = std::fs::remove_dir_all(old.dir);
        }
        if !inner.map.contains_key(id) {
            if inner.map.len() >= max {
                return Err(ToolError::failed(format!(
                    "there are already {max} shell sessions, the limit; reuse one of them ({}), or wait until one has been idle for {} s",
                    {
                        let mut ids: Vec<&str> = inner.map.keys().map(String::as_str).collect();
                        ids.sort_unstable();
                        ids.join(", ")
                    },
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
            inner.map.insert(
                id.to_owned(),
                Session {
                    dir,
                    cwd: None,
                    env: None,
                    used: now,
                },
            );
        }
        let session = inner
            .map
            .get_mut(id)
            .ok_or_else(|| ToolError::failed("the session vanished"))?;
        session.used = now;
        // What the last call left is consumed: a call that does not save (stopped, or
        // `exec`) must not leave stale files for the next. The folder is made again in
        // case a command removed it (it lies in the command's `TMPDIR`).
        let _ = std::fs::remove_file(session.dir.join("cwd"));
        let _ = std::fs::remove_file(session.dir.join("env"));
        let _ = std::fs::create_dir_all(&session.dir);
        Ok(Start {
            dir: session.dir.clone(),
            cwd: session.cwd.clone(),
            env: session.env.clone(),
        })
    }

    /// Takes what the call's trap saved into session `id`.
    pub(crate) fn save(&self, id: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(session) = inner.map.get_mut(id) else {
            return;
        };
        let cwd = read_bounded(&session.dir.join("cwd"), 64 * 1024);
        let env = read_bounded(&session.dir.join("env"), MAX_ENV);
        if let (Some(cwd), Some(env)) = (cwd, env) {
            let cwd = String::from_utf8_lossy(&cwd)
                .trim_end_matches('\n')
                .to_owned();
            session.cwd = Some(PathBuf::from(cwd));
            session.env = Some(parse_env(env));
        }
        session.used = Instant::now();
    }
}

fn read_bounded(path: &Path, limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut out = Vec::new();
    file.take(limit + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= limit).then_some(out)
}

/// `env -0` output as pairs, without the shell's own variables.
fn parse_env(raw: Vec<u8>) -> Vec<(OsString, OsString)> {
    raw.split(|&b| b == 0)
        .filter_map(|entry| {
            let at = entry.iter().position(|&b| b == b'=')?;
            let key = OsString::from_vec(entry[..at].to_vec());
            let value = OsString::from_vec(entry[at + 1..].to_vec());
            (!key.is_empty() && !SHELL_OWN.iter().any(|own| key == *own)).then_some((key, value))
        })
        .collect()
}
