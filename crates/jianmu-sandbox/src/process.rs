//! The one place in the workspace that starts processes. `clippy.toml` bans
//! `Command::new` everywhere else, so every spawn gets the same safe defaults.

use std::ffi::OsStr;
use std::process::Stdio;

/// A `tokio` command for `program` with stdin closed (`/dev/null`) and the child killed
/// when its handle is dropped, so a cancelled call leaves no process behind.
pub fn command(program: impl AsRef<OsStr>) -> tokio::process::Command {
    #[allow(clippy::disallowed_methods)]
    let mut cmd = tokio::process::Command::new(program);
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// A blocking command for `program` with stdin closed, for synchronous callers such as
/// tests and build tooling.
pub fn std_command(program: impl AsRef<OsStr>) -> std::process::Command {
    #[allow(clippy::disallowed_methods)]
    let mut cmd = std::process::Command::new(program);
    cmd.stdin(Stdio::null());
    cmd
}
