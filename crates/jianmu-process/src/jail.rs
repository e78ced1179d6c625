//! Supervised, isolated commands: what a tool's process may do, and the guarantee that
//! nothing it starts outlives it.
//!
//! A [`Jail`] is prepared once per tool (its Landlock ruleset, its seccomp filter, its
//! private temporary directory) and starts every command of that tool through a
//! *supervisor*: a small process between the caller and the command that is a child
//! subreaper, so whatever the command starts — in the background, with `setsid`, by
//! double forking, with a cleared environment — stays below it. When the command exits,
//! or the supervisor is told to stop (the call ended, timed out or was cancelled), or the
//! process that started it dies, the supervisor kills and reaps everything below it
//! before it exits itself.
//!
//! On top of that, where the kernel offers it (see [`Isolation`]): a user and PID
//! namespace with its own `/proc` (the command sees only its own processes), Landlock
//! (writes only in the workspace, the private temporary directory and the few harmless
//! devices; no access to other processes' `/proc` entries; no signals or abstract
//! sockets outside the call), and without `network`, no TCP by Landlock and no sockets
//! other than Unix ones by a seccomp filter.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::sys;

/// How strictly a tool's commands are isolated (`[tools.NAME.isolation]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IsolationSettings {
    /// `auto` (the default) uses what the kernel offers; `require` refuses to run a
    /// command unless Landlock, the seccomp filter and the namespaces are all available;
    /// `off` keeps only the supervisor (nothing outlives its call either way).
    pub mode: IsolationMode,
    /// Whether commands may open network sockets (TCP, UDP, raw). Off by default; Unix
    /// sockets always work.
    pub network: bool,
    /// Paths writable besides the workspace and the private temporary directory.
    pub writable: Vec<PathBuf>,
}

impl Default for IsolationSettings {
    fn default() -> Self {
        Self {
            mode: IsolationMode::Auto,
            network: false,
            writable: Vec::new(),
        }
    }
}

/// See [`IsolationSettings::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationMode {
    /// Only the supervisor.
    Off,
    /// Whatever the kernel offers.
    Auto,
    /// All of it, or no command runs.
    Require,
}

/// What the kernel offers, probed once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolation {
    /// The Landlock ABI version (0: none).
    pub landlock_abi: u32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether an unprivileged user + PID + mount namespace with a fresh `/proc` works.
    pub namespaces: bool,
}

impl Isolation {
    /// What this kernel offers (probed on first use, then cached).
    pub fn probe() -> Self {
        static PROBED: std::sync::OnceLock<Isolation> = std::sync::OnceLock::new();
        *PROBED.get_or_init(|| Isolation {
            landlock_abi: sys::landlock_abi(),
            seccomp: sys::seccomp_available(),
            namespaces: sys::namespaces_work(),
        })
    }
}

/// Why a jail could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// `mode = "require"` and the kernel lacks a piece.
    #[error(
        "isolation is required but this kernel lacks {0}; set [tools.NAME.isolation] mode = \"auto\" to run with less, or use the docker sandbox"
    )]
    Unavailable(&'static str),
    /// A system call failed while preparing it.
    #[error("cannot prepare the isolation ({what}): {source}")]
    Setup {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// What a jailed command's setup needs after `fork`, prepared before it: nothing here
/// allocates or locks in the child.
#[derive(Debug)]
pub(crate) struct Plan {
    /// `unshare` flags and the identity maps to write, when namespaces are used.
    pub(crate) namespaces: Option<sys::Maps>,
    /// The Landlock ruleset to enforce.
    pub(crate) landlock: Option<OwnedFd>,
    /// The seccomp program to install.
    pub(crate) seccomp: Option<Vec<libc::sock_filter>>,
    /// `/proc/thread-self/children`, `/proc`, `proc`, `/`.
    pub(crate) paths: sys::Paths,
}

/// A prepared isolation for one tool's commands. Cheap to share; dropping it removes its
/// private temporary directory.
#[derive(Debug, Clone)]
pub struct Jail {
    plan: Arc<Plan>,
    tmp: Option<Arc<tempfile::TempDir>>,
    summary: Arc<str>,
}

impl Jail {
    /// Prepares the isolation of commands that work in `workspace`.
    ///
    /// # Errors
    /// `mode = "require"` on a kernel that lacks a piece; a ruleset or the temporary
    /// directory that cannot be made.
    pub fn new(settings: &IsolationSettings, workspace: &Path) -> Result<Self, JailError> {
        let offered = Isolation::probe();
        let isolate = settings.mode != IsolationMode::Off;
        if settings.mode == IsolationMode::Require {
            if offered.landlock_abi == 0 {
                return Err(JailError::Unavailable("Landlock"));
            }
            if !offered.seccomp && !settings.network {
                return Err(JailError::Unavailable("seccomp"));
            }
            if !offered.namespaces {
                return Err(JailError::Unavailable("unprivileged user namespaces"));
            }
        }
        let setup = |what: &str| {
            let what = what.to_owned();
            move |source| JailError::Setup { what, source }
        };
        let tmp = if isolate {
            Some(Arc::new(
                tempfile::Builder::new()
                    .prefix("jianmu-tmp-")
                    .tempdir()
                    .map_err(setup("private temporary directory"))?,
            ))
        } else {
            None
        };
        let mut parts: Vec<String> = vec!["supervised".into()];
        let namespaces = (isolate && offered.namespaces).then(sys::Maps::current);
        if namespaces.is_some() {
            parts.push("pid+user namespace".into());
        }
        let landlock = if isolate && offered.landlock_abi > 0 {
            let mut writable = vec![workspace.to_owned()];
            writable.extend(tmp.iter().map(|t| t.path().to_owned()));
            writable.extend(settings.writable.iter().cloned());
            let fd = sys::landlock_ruleset(offered.landlock_abi, &writable, settings.network)
                .map_err(setup("Landlock ruleset"))?;
            parts.push(format!("landlock v{}", offered.landlock_abi));
            Some(fd)
        } else {
            None
        };
        let seccomp = (isolate && offered.seccomp && !settings.network)
            .then(sys::no_network_filter)
            .flatten();
        if seccomp.is_some() || (landlock.is_some() && offered.landlock_abi >= 4) {
            parts.push("no network".into());
        }
        let summary = if isolate && landlock.is_some() {
            format!("{} (writes: workspace, private tmp)", parts.join(", "))
        } else {
            parts.join(", ")
        };
        Ok(Self {
            plan: Arc::new(Plan {
                namespaces,
                landlock,
                seccomp,
                paths: sys::Paths::new(),
            }),
            tmp,
            summary: summary.into(),
        })
    }

    /// A jail with only the supervisor (`mode = "off"`).
    pub fn supervisor_only() -> Self {
        Self {
            plan: Arc::new(Plan {
                namespaces: None,
                landlock: None,
                seccomp: None,
                paths: sys::Paths::new(),
            }),
            tmp: None,
            summary: "supervised".into(),
        }
    }

    /// One line saying what is in force, e.g. `supervised, pid+user namespace, landlock
    /// v7, no network (writes: workspace, private tmp)`.
    pub fn describe(&self) -> &str {
        &self.summary
    }

    /// Whether commands run as the init of their own PID namespace (then `kill(-1)`
    /// from the command reaches only its own processes).
    pub fn own_pid_namespace(&self) -> bool {
        self.plan.namespaces.is_some()
    }

    /// The private temporary directory, when isolated: the only writable place outside
    /// the workspace; give it to the command as `TMPDIR` (after any `env_clear`).
    pub fn tmp(&self) -> Option<&Path> {
        self.tmp.as_deref().map(tempfile::TempDir::path)
    }

    /// A command for `program` that runs jailed under a supervisor: stdin closed; spawn
    /// it with [`Jail::spawn`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> tokio::process::Command {
        let mut cmd = crate::command(program);
        // The supervisor is stopped with a signal it can act on (see `Supervised`), not
        // killed: killing it would orphan what it supervises.
        cmd.kill_on_drop(false);
        let plan = Arc::clone(&self.plan);
        let parent = sys::getpid();
        // SAFETY: `sys::enter` runs between fork and exec; it only makes system calls
        // on data prepared before the fork (see `Plan`), and never returns in the
        // supervisor (it exits there).
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || sys::enter(&plan, parent));
        }
        cmd
    }

    /// Spawns a command made by [`Jail::command`].
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn spawn(cmd: &mut tokio::process::Command) -> io::Result<Supervised> {
        Ok(Supervised {
            child: cmd.spawn()?,
        })
    }
}

/// A running supervised command. Dropping it stops the supervisor, which kills and
/// reaps everything the command started before it exits.
#[derive(Debug)]
pub struct Supervised {
    child: tokio::process::Child,
}

impl Supervised {
    /// The child (the supervisor; its exit status is the command's).
    pub fn child(&mut self) -> &mut tokio::process::Child {
        &mut self.child
    }

    /// Tells the supervisor to end the command and everything it started.
    pub fn stop(&self) {
        if let Some(pid) = self.child.id() {
            sys::terminate(pid);
        }
    }

    /// Stops the command and waits until everything it started is gone.
    pub async fn stop_and_wait(&mut self) {
        self.stop();
        let _ = self.child.wait().await;
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private path to a C string, for `Plan`.
pub(crate) fn c(path: &str) -> CString {
    CString::new(path).unwrap_or_default()
}
