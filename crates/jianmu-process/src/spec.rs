//! A command to start in a [`Jail`](crate::Jail), and where its standard streams go.

use std::ffi::OsString;
use std::path::PathBuf;

/// Where a standard stream of a jailed command goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Stdio {
    /// `/dev/null`.
    #[default]
    Null,
    /// A pipe to the caller.
    Piped,
    /// Standard input only: one end of a Unix socket pair, the other end the caller's
    /// ([`Supervised::socket`](crate::Supervised::socket), which reads and writes).
    /// Unlike a pipe, it cannot be opened again through `/proc/PID/fd`, so a process the
    /// command starts cannot reach it unless it inherits it.
    Socket,
}

impl Stdio {
    pub(crate) fn std(self) -> std::process::Stdio {
        match self {
            Stdio::Null => std::process::Stdio::null(),
            Stdio::Piped | Stdio::Socket => std::process::Stdio::piped(),
        }
    }
}

/// A command to start in a [`Jail`](crate::Jail): its environment is exactly what is set
/// here.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdin: Stdio,
    pub(crate) stdout: Stdio,
    pub(crate) stderr: Stdio,
    pub(crate) terminal: Option<crate::Size>,
}

impl Spec {
    /// Runs `program` (a path, or a name looked up on the command's `PATH`).
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            ..Self::default()
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    /// Sets an environment variable (nothing is inherited).
    pub fn env(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> &mut Self {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    /// Whether the environment sets `key`.
    pub fn has_env(&self, key: impl AsRef<std::ffi::OsStr>) -> bool {
        self.env.iter().any(|(k, _)| k == key.as_ref())
    }

    /// Replaces the whole environment with `vars` (a name given twice keeps its last
    /// value).
    pub fn env_exactly(
        &mut self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> &mut Self {
        self.env.clear();
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// The working directory.
    pub fn current_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Where standard input comes from.
    pub fn stdin(&mut self, how: Stdio) -> &mut Self {
        self.stdin = how;
        self
    }

    /// Where standard output goes.
    pub fn stdout(&mut self, how: Stdio) -> &mut Self {
        self.stdout = how;
        self
    }

    /// Where standard error goes.
    pub fn stderr(&mut self, how: Stdio) -> &mut Self {
        self.stderr = how;
        self
    }

    /// Runs the command on a new pseudo-terminal of `size`: its standard streams and
    /// controlling terminal, in a session of its own; the caller gets the other end
    /// ([`Supervised::terminal`](crate::Supervised::terminal)). The three `Stdio`
    /// settings are then ignored.
    pub fn terminal(&mut self, size: crate::Size) -> &mut Self {
        self.terminal = Some(size);
        self
    }
}
