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

mod jail;
mod spawn;
mod sys;
mod tree;

pub use jail::{
    Isolation, IsolationMode, IsolationSettings, Jail, JailError, Spec, Stdio as Stream, Supervised,
};

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

/// 128 random bits from the kernel, as 32 hex digits: names and markers a command
/// cannot guess (a shell session's end marker, a session folder). Without
/// `/dev/urandom`, the time and the stack's address stand in.
pub fn random_hex() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ (&bytes as *const _ as u128);
        bytes = t.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Live processes (not zombies) whose command line, its arguments joined by spaces,
/// contains `needle`, by PID: how tests and diagnostics check that nothing a call
/// started is left.
pub fn running_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            });
            live && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|mut c| {
                for b in &mut c {
                    if *b == 0 {
                        *b = b' ';
                    }
                }
                String::from_utf8_lossy(&c).contains(needle)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
