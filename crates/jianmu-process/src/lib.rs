//! The one place in the workspace that starts processes.
//!
//! Tools start their commands through a [`Jail`]: a supervisor that leaves nothing
//! behind when the call ends, and the isolation the kernel offers (see the `jail`
//! module's documentation and [`Isolation::probe`]).
//!
//! `clippy.toml` bans `Command::new` everywhere else (a tidy test checks the source
//! too), so every spawn gets the same safe defaults: standard input closed, and for
//! async commands the child killed when its handle is dropped, so a cancelled call
//! leaves no process behind. Tool crates (`jianmu-tool-shell`, `jianmu-tool-script`)
//! and the sandbox's image build all start processes through here.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let out = jianmu_process::command("echo").arg("hi").output().await?;
//! assert_eq!(out.stdout, b"hi\n");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use std::ffi::OsStr;
use std::process::Stdio;

mod child;
mod clone;
mod isolate;
mod jail;
mod landlock;
mod mount;
mod netns;
mod plan;
mod pty;
mod seccomp;
mod spawn;
mod spec;
mod supervisor;
mod sys;
mod tree;
mod userns;
mod view;

pub use child::{CHILDREN_MEMORY, ChildEnd, ChildLimits, ChildRun, ChildWriter, run_in_child};
pub use jail::{Isolation, IsolationMode, IsolationSettings, Jail, JailError, Supervised};
pub use netns::{Inside, Network, NetworkEnv};
pub use pty::{Size, Terminal};
pub use spec::{Spec, Stdio as Stream};
pub use view::PROTECTED_IN_WORKSPACE;

/// Raises this process's soft limit on open files to its hard limit (a server's idle
/// connections each hold one), and returns the new limit.
///
/// # Errors
/// The limits cannot be read or set.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    sys::raise_open_files_limit()
}

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

#[cfg(test)]
mod tests;
