//! Supervised, isolated commands: what a tool's process may do, and the guarantee that
//! nothing it starts outlives it.
//!
//! A [`Jail`] is prepared once per tool (its Landlock ruleset, its seccomp filter, its
//! private temporary directory) and starts every command of that tool ([`Spec`]) so
//! that whatever the command starts — in the background, with `setsid`, by double
//! forking, with a cleared environment — cannot outlive it:
//!
//! - where unprivileged user namespaces work, the command is the init of its own user
//!   and PID namespace, started with one `clone` as cheaply as `posix_spawn`; when it
//!   exits or is killed (the call ended, timed out or was cancelled, or the process
//!   that started it died), the kernel kills everything in its namespace;
//! - elsewhere, a *supervisor* process (a child subreaper) sits between the caller and
//!   the command, and kills and reaps everything below it when the command exits or
//!   it is told to stop.
//!
//! On top of that, unless `mode = "off"`, where the kernel offers it (see
//! [`Isolation`]): its own `/proc` (the command sees only its own processes), Landlock
//! (writes only in the workspace, the private temporary directory and the few harmless
//! devices; no access to other processes' `/proc` entries; no signals or abstract
//! sockets outside the call), and without `network`, a private network: the session's
//! commands share a network namespace whose only interface is loopback (see
//! [`Network`]), so local servers and every socket family a namespace confines work and
//! nothing is routed outside. Where such a namespace cannot be made, no TCP by Landlock
//! and no sockets other than Unix ones by a seccomp filter.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use tokio::net::unix::pipe;

use serde::{Deserialize, Serialize};

use crate::mount::View;
use crate::netns::Network;
use crate::plan::Plan;
use crate::spec::{Spec, Stdio};
use crate::sys;
use std::os::fd::AsRawFd;

/// How strictly a tool's commands are isolated (`[tools.NAME.isolation]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IsolationSettings {
    /// `auto` (the default) uses what the kernel offers; `require` refuses to run a
    /// command unless Landlock, the seccomp filter and the namespaces are all available;
    /// `off` keeps only the supervision (nothing outlives its call either way).
    pub mode: IsolationMode,
    /// Whether commands use the host's network, and so reach outside hosts. Off by
    /// default: commands get a private network with loopback only, shared by a
    /// session's commands, where local servers and sockets work and nothing leaves
    /// (where the kernel cannot make one: no sockets but Unix ones).
    pub network: bool,
    /// Paths writable besides the workspace and the private temporary directory.
    pub writable: Vec<PathBuf>,
    /// The most memory each process may allocate (its data: heap and private
    /// mappings), in MiB; past it, allocations fail (Python raises `MemoryError`).
    /// No limit when absent. Address space a program only reserves does not count.
    pub max_memory_mb: Option<u64>,
    /// Paths commands do not see, besides the defaults (credentials and keys in the
    /// homes, histories, host sockets, container engines' state).
    pub read_deny: Vec<PathBuf>,
    /// Strict mode: when set, commands see only the system, the workspace, the
    /// programs the tool itself runs and these paths (no home, no toolchain on
    /// `PATH`).
    pub read_allow: Option<Vec<PathBuf>>,
    /// More paths commands see, read-only, besides what the view shows (for example
    /// skill folders kept outside the workspace); no strict mode.
    pub read_also: Vec<PathBuf>,
    /// Unix sockets let into the view by path (e.g. a local database's), which would
    /// otherwise be absent.
    pub sockets: Vec<PathBuf>,
    /// Host addresses (`127.0.0.1:5432`) reachable from inside the private network at
    /// the same address, through a relay jianmu holds: a local database, a dev
    /// service. The host's network is not opened.
    pub host_services: Vec<String>,
}

impl Default for IsolationSettings {
    fn default() -> Self {
        Self {
            mode: IsolationMode::Auto,
            network: false,
            writable: Vec::new(),
            max_memory_mb: None,
            read_deny: Vec::new(),
            read_allow: None,
            read_also: Vec::new(),
            sockets: Vec::new(),
            host_services: Vec::new(),
        }
    }
}

impl IsolationSettings {
    /// One sentence for the description of `tool` (whose settings these are) saying
    /// what network its commands have on this machine, when the outside is closed:
    /// that local servers and sockets work or do not, that outside hosts do not, and
    /// which setting opens it. `None` with the host's network.
    pub fn network_sentence(&self, tool: &str) -> Option<String> {
        self.network_sentence_on(Isolation::probe(), tool)
    }

    /// As [`IsolationSettings::network_sentence`], on a kernel that offers `kernel`.
    pub(crate) fn network_sentence_on(&self, kernel: Isolation, tool: &str) -> Option<String> {
        if self.network || self.mode == IsolationMode::Off {
            return None;
        }
        Some(if kernel.namespaces && kernel.private_network {
            format!(
                "Network: a private one per session, loopback only: local servers and \
                 sockets work, and a server started earlier in this session (e.g. a \
                 `background: true` bash job) stays reachable; outside hosts cannot be \
                 reached (the setting `[tools.{tool}.isolation] network = true` opens \
                 them; in the Docker sandbox, `[execution.docker] network = true`)."
            )
        } else {
            format!(
                "Network: none on this host: only Unix sockets work, so local TCP servers \
                 and outside hosts do not (the setting `[tools.{tool}.isolation] network \
                 = true` gives the host's network)."
            )
        })
    }
}

impl IsolationSettings {
    /// One sentence for a tool's description saying what its commands see of the
    /// file system on this machine: what is read-only and what is hidden. `None`
    /// with `mode = "off"`.
    pub fn files_sentence(&self) -> Option<String> {
        self.files_sentence_on(Isolation::probe())
    }

    /// As [`IsolationSettings::files_sentence`], on a kernel that offers `kernel`.
    pub(crate) fn files_sentence_on(&self, kernel: Isolation) -> Option<String> {
        if self.mode == IsolationMode::Off {
            return None;
        }
        Some(if kernel.namespaces {
            "Files: outside the workspace everything is read-only, and credentials \
             (~/.ssh, ~/.aws, ...), host sockets (/run, /var/run) and folders other than \
             the system, the home and the workspace are hidden: reading them fails as \
             for a missing file. In the workspace, jianmu.toml, .jianmu/, .git/hooks and \
             .git/config are read-only. /tmp is private to this session."
                .to_owned()
        } else if kernel.landlock_abi > 0 {
            "Files: outside the workspace everything is read-only; the contents of \
             credentials (~/.ssh, ~/.aws, ...) and of folders other than the system, the \
             home and the workspace cannot be read (their names can still be listed), \
             and host sockets can still be reached on this host."
                .to_owned()
        } else {
            "Files: this host cannot hide files from commands: whatever the user running \
             them can read is readable."
                .to_owned()
        })
    }
}

/// See [`IsolationSettings::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationMode {
    /// Only the supervision.
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
    /// Whether private networks (a network namespace with loopback up) can be made.
    pub private_network: bool,
}

impl Isolation {
    /// What this kernel offers (probed on first use, then cached).
    pub fn probe() -> Self {
        static PROBED: std::sync::OnceLock<Isolation> = std::sync::OnceLock::new();
        *PROBED.get_or_init(|| {
            let (namespaces, private_network) = crate::userns::probe();
            Isolation {
                landlock_abi: crate::landlock::landlock_abi(),
                seccomp: crate::seccomp::seccomp_available(),
                namespaces,
                private_network,
            }
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
    #[error("cannot prepare the isolation ({what})")]
    Setup {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// A prepared isolation for one tool's commands. Cheap to share; dropping it removes its
/// private temporary directory.
#[derive(Debug, Clone)]
pub struct Jail {
    plan: Arc<Plan>,
    tmp: Option<Arc<tempfile::TempDir>>,
    summary: Arc<str>,
    /// The private network commands run in, when in force.
    network: Option<Arc<Network>>,
    /// What commands see of the file system, when a view is in force.
    view: Option<Arc<View>>,
    /// The Landlock ruleset of commands in the view (scoping only: the view confines
    /// files).
    view_landlock: Option<Arc<OwnedFd>>,
    /// `mode = "require"`: a view that cannot be made fails the command.
    require: bool,
    /// What the private network adds to each command's environment.
    network_env: Option<Arc<dyn crate::NetworkEnv>>,
}

impl Jail {
    /// Prepares the isolation of commands that work in `workspace`.
    ///
    /// # Errors
    /// `mode = "require"` on a kernel that lacks a piece; a ruleset or the temporary
    /// directory that cannot be made.
    pub fn new(settings: &IsolationSettings, workspace: &Path) -> Result<Self, JailError> {
        Self::with_kernel(settings, workspace, Isolation::probe())
    }

    /// As [`Jail::new`], on a kernel that offers `offered` (tests use it to run the
    /// fallbacks where the kernel offers more).
    pub(crate) fn with_kernel(
        settings: &IsolationSettings,
        workspace: &Path,
        offered: Isolation,
    ) -> Result<Self, JailError> {
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
        let namespaces = offered.namespaces;
        let fresh_proc = namespaces && isolate;
        let mut parts: Vec<String> = vec![if namespaces {
            "supervised (own pid namespace)".into()
        } else {
            "supervised (subreaper)".into()
        }];
        if fresh_proc {
            parts.push("own /proc".into());
        }
        let private = isolate && !settings.network && namespaces && offered.private_network;
        let config = if isolate {
            crate::view::ViewConfig::new(settings, workspace, tmp.as_ref().map(|t| t.path()))
        } else {
            None
        };
        let view = config
            .clone()
            .filter(|_| namespaces)
            .map(|config| Arc::new(View::new(config)));
        if view.is_some() {
            parts.push("own view (system and homes read-only; secrets, host sockets and other folders absent)".into());
        } else if config.is_some() && offered.landlock_abi > 0 {
            parts.push("reads narrowed by landlock (hidden folders' names still listed; host sockets reachable)".into());
        }
        let net = crate::landlock::Net {
            // TCP is confined by the namespace, or open.
            tcp: settings.network || private,
            // Abstract Unix sockets belong to the network namespace, so a private one
            // already keeps them within the session.
            abstract_sockets: private,
        };
        let landlock = if isolate && offered.landlock_abi > 0 {
            let mut writable = vec![workspace.to_owned()];
            writable.extend(tmp.iter().map(|t| t.path().to_owned()));
            writable.extend(settings.writable.iter().cloned());
            // Without a view (none here, or one that cannot be made), reads are narrowed
            // to what the view would show.
            let reads = config
                .as_ref()
                .map(|config| crate::view::read_rules(&config.layout()));
            let fd = crate::landlock::landlock_ruleset(
                offered.landlock_abi,
                &writable,
                reads.as_deref(),
                net,
            )
            .map_err(setup("Landlock ruleset"))?;
            parts.push(format!("landlock v{}", offered.landlock_abi));
            Some(fd)
        } else {
            None
        };
        let view_landlock = match &view {
            Some(_) if offered.landlock_abi > 0 => {
                crate::landlock::scope_ruleset(offered.landlock_abi, net)
                    .map_err(setup("Landlock ruleset"))?
            }
            _ => None,
        };
        let families: Option<&[libc::c_int]> = if settings.network {
            None
        } else if private {
            Some(crate::seccomp::PRIVATE_NETWORK)
        } else {
            Some(crate::seccomp::NO_NETWORK)
        };
        let seccomp = if !isolate || !offered.seccomp {
            None
        } else {
            crate::seccomp::filter(families, view.is_some())
        };
        if private {
            parts.push("private network (loopback only)".into());
        } else if isolate && settings.network {
            parts.push("host network".into());
        } else if families.is_some()
            && (seccomp.is_some() || (landlock.is_some() && offered.landlock_abi >= 4))
        {
            parts.push("no network (no private network on this kernel)".into());
        }
        let memory = settings
            .max_memory_mb
            .map(|mb| mb.saturating_mul(1024 * 1024));
        if let Some(mb) = settings.max_memory_mb {
            parts.push(format!("memory {mb} MiB per process"));
        }
        let summary = if isolate && (landlock.is_some() || view.is_some()) {
            format!("{} (writes: workspace, private tmp)", parts.join(", "))
        } else {
            parts.join(", ")
        };
        Ok(Self {
            plan: Arc::new(Plan {
                namespaces,
                maps: crate::userns::Maps::current(),
                fresh_proc,
                namespaces_failed: std::sync::atomic::AtomicBool::new(false),
                landlock,
                seccomp,
                memory,
                paths: crate::userns::Paths::new(),
            }),
            tmp,
            summary: summary.into(),
            network: private.then(|| Arc::new(Network::new())),
            view,
            view_landlock: view_landlock.map(Arc::new),
            require: settings.mode == IsolationMode::Require,
            network_env: None,
        })
    }

    /// The same jail showing its commands the toolchains of `programs` too (each
    /// resolved on `PATH`; for `PREFIX/bin/NAME`, all of `PREFIX`): what a tool does
    /// for the programs it runs itself (a language server, an interpreter), so that
    /// they start in a strict view or from a folder no other rule shows. Call it
    /// before the first command.
    #[must_use]
    pub fn showing_programs<I, P>(mut self, programs: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<std::ffi::OsStr>,
    {
        if let Some(view) = &self.view {
            let mut config = view.config.clone();
            for program in programs {
                config.show_program(program.as_ref());
            }
            self.view = Some(Arc::new(View::new(config)));
        }
        self
    }

    /// What commands see, one line per kind (`read-only: ...`, `writable: ...`,
    /// `hidden: ...`), or `None` without a view.
    pub fn view_lines(&self) -> Option<Vec<(&'static str, Vec<PathBuf>)>> {
        self.view.as_ref().map(|view| view.config.lines())
    }

    /// Makes the view now (it is otherwise made by the first command), to report
    /// whether it can be made here.
    ///
    /// # Errors
    /// The view cannot be made (why, in the message).
    pub fn make_view(&self) -> io::Result<()> {
        let Some(view) = &self.view else {
            return Ok(());
        };
        let net = match &self.network {
            Some(network) => Some(network.get()?),
            None => None,
        };
        view.get(net.as_deref().map(|n| n.user.as_raw_fd()))
            .map(drop)
    }

    /// The same jail with its commands in `network`, the private network of their
    /// session (by default each jail has its own): what tools that run commands do with
    /// the one their session shares. No effect where no private network is in force.
    #[must_use]
    pub fn sharing_network(mut self, network: Arc<Network>) -> Self {
        if self.network.is_some() {
            self.network = Some(network);
        }
        self
    }

    /// The same jail adding `env`'s variables to each command it starts in a private
    /// network (a session's egress proxy). No effect where no private network is in
    /// force.
    #[must_use]
    pub fn with_network_env(mut self, env: Arc<dyn crate::NetworkEnv>) -> Self {
        self.network_env = Some(env);
        self
    }

    /// The private network its commands run in, when one is in force: loopback only,
    /// shared by the session's commands.
    pub fn private_network(&self) -> Option<&Arc<Network>> {
        self.network.as_ref()
    }

    /// A jail whose namespaces cannot be entered although the kernel offers them, as
    /// under a policy that refuses them to this process.
    #[cfg(test)]
    pub(crate) fn with_refused_namespaces(settings: &IsolationSettings, workspace: &Path) -> Self {
        // Joining a private network needs no identity maps: refuse it by not having one.
        let kernel = Isolation {
            private_network: false,
            ..Isolation::probe()
        };
        let mut jail = Self::with_kernel(settings, workspace, kernel).unwrap();
        // Its view, made in a namespace, is refused with them.
        jail.view = None;
        if let Some(plan) = Arc::get_mut(&mut jail.plan) {
            plan.maps = crate::userns::Maps::refused();
        }
        jail
    }

    /// A jail whose commands go through the supervisor although its plan was made for
    /// namespaces (and so for a private network): as after a namespace refused at
    /// spawn time.
    #[cfg(test)]
    pub(crate) fn with_supervisor_after_refusal(
        settings: &IsolationSettings,
        workspace: &Path,
    ) -> Self {
        let jail = Self::new(settings, workspace).unwrap();
        jail.plan
            .namespaces_failed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        jail
    }

    /// One line saying what is in force, e.g. `supervised (own pid namespace), own
    /// /proc, landlock v7, no network (writes: workspace, private tmp)`.
    pub fn describe(&self) -> &str {
        &self.summary
    }

    /// Whether commands run as the init of their own PID namespace (then `kill(-1)`
    /// from the command reaches only its own processes).
    pub fn own_pid_namespace(&self) -> bool {
        self.plan.namespaces
    }

    /// The private temporary directory, when isolated: the only writable place outside
    /// the workspace; give it to the command as `TMPDIR` (after any `env_clear`).
    pub fn tmp(&self) -> Option<&Path> {
        self.tmp.as_deref().map(tempfile::TempDir::path)
    }

    /// Starts `spec` jailed and supervised.
    ///
    /// # Errors
    /// The program cannot be found or started, or the isolation cannot be entered.
    pub fn spawn(&self, spec: &Spec) -> io::Result<Supervised> {
        use std::sync::atomic::Ordering;
        let net = match &self.network {
            Some(network) => Some(network.get().map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot make the private network for this command: {e}"),
                )
            })?),
            None => None,
        };
        let with_env;
        let spec = match (&net, &self.network_env) {
            (Some(made), Some(env)) => {
                let inside = crate::netns::Inside::from(Arc::clone(made));
                let mut own = spec.clone();
                for (k, v) in env.env(&inside, self.tmp())? {
                    own.env(k, v);
                }
                with_env = own;
                &with_env
            }
            _ => spec,
        };
        if self.plan.namespaces && !self.plan.namespaces_failed.load(Ordering::Relaxed) {
            let made = match &self.view {
                Some(view) if !view.failed() || self.require => {
                    match view.get(net.as_deref().map(|n| n.user.as_raw_fd())) {
                        Ok(made) => Some(made),
                        Err(e) if self.require => return Err(e),
                        // What the view's absence leaves: the namespaces, Landlock's
                        // rules (reads narrowed to the same folders); `jianmu sandbox
                        // status` says why.
                        Err(_) => None,
                    }
                }
                _ => None,
            };
            let landlock = match &made {
                Some(_) => self.view_landlock.as_deref(),
                None => self.plan.landlock.as_ref(),
            };
            match crate::spawn::spawn(&self.plan, spec, net.as_deref(), made.as_deref(), landlock) {
                Ok(mut child) => {
                    let (stdin, stdout, stderr) =
                        (child.stdin.take(), child.stdout.take(), child.stderr.take());
                    let terminal = child.terminal.take();
                    return Supervised::new(
                        Inner::Namespace(child),
                        spec.stdin,
                        [stdin, stdout, stderr],
                        terminal,
                    );
                }
                Err(crate::spawn::Failure::Command(e)) => return Err(e),
                // Required, a view that cannot be joined fails the command.
                Err(crate::spawn::Failure::Namespaces) if self.require && self.view.is_some() => {
                    return Err(io::Error::other(
                        "cannot enter this session's view of the files, which isolation mode \"require\" needs",
                    ));
                }
                // A policy refuses the namespaces to this process although the probe
                // passed: from now on, the supervisor.
                Err(crate::spawn::Failure::Namespaces) => {
                    self.plan.namespaces_failed.store(true, Ordering::Relaxed);
                }
            }
        }
        let mut cmd = crate::command(&spec.program);
        // A socket's caller end is kept here; std's piped streams are taken below.
        let mut socket = None;
        let stdin = match spec.stdin {
            Stdio::Socket => {
                let (child_end, our_end) = crate::spawn::socket_pair()?;
                socket = Some(our_end);
                std::process::Stdio::from(child_end)
            }
            other => other.std(),
        };
        cmd.args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdin)
            .stdout(spec.stdout.std())
            .stderr(spec.stderr.std())
            // The supervisor is stopped with a signal it acts on (see `Supervised`),
            // not killed: killing it would orphan what it supervises.
            .kill_on_drop(false);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        let mut near = None;
        if let Some(size) = spec.terminal {
            let pair = crate::pty::open(size)?;
            cmd.stdin(pair.far.try_clone()?)
                .stdout(pair.far.try_clone()?)
                .stderr(pair.far);
            near = Some(pair.near);
        }
        let terminal = near.is_some();
        let plan = Arc::clone(&self.plan);
        let parent = sys::getpid();
        // SAFETY: `supervisor::enter` runs between fork and exec; it only makes system calls
        // on data prepared before the fork (see `Plan`), and never returns in the
        // supervisor (it exits there).
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || crate::supervisor::enter(&plan, parent, net.as_deref(), terminal));
        }
        let mut child = cmd.spawn()?;
        // `cmd` holds the child's end of a socket: gone with it, so that the caller
        // sees the end of the stream when the command ends.
        drop(cmd);
        let stdin = match socket {
            Some(ours) => Some(ours),
            None => child.stdin.take().map(|s| s.into_owned_fd()).transpose()?,
        };
        let stdout = child.stdout.take().map(|s| s.into_owned_fd()).transpose()?;
        let stderr = child.stderr.take().map(|s| s.into_owned_fd()).transpose()?;
        Supervised::new(
            Inner::Supervisor(child),
            spec.stdin,
            [stdin, stdout, stderr],
            near,
        )
    }
}

/// A running jailed command. Dropping it ends the command and everything it started.
#[derive(Debug)]
pub struct Supervised {
    /// Its standard input, when piped.
    pub stdin: Option<pipe::Sender>,
    /// The caller's end of its standard input, when that is [`Stdio::Socket`].
    pub socket: Option<tokio::net::UnixStream>,
    /// Its standard output, when piped.
    pub stdout: Option<pipe::Receiver>,
    /// Its standard error, when piped.
    pub stderr: Option<pipe::Receiver>,
    /// Its terminal, when it runs on one ([`Spec::terminal`]).
    pub terminal: Option<crate::Terminal>,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// The command is the init of its own PID namespace.
    Namespace(crate::spawn::NsChild),
    /// A supervisor process runs the command; its exit status is the command's.
    Supervisor(tokio::process::Child),
}

impl Supervised {
    /// The running command with the caller's ends of its pipes made async.
    fn new(
        inner: Inner,
        stdin_kind: Stdio,
        [stdin, stdout, stderr]: [Option<OwnedFd>; 3],
        terminal: Option<OwnedFd>,
    ) -> io::Result<Self> {
        let (stdin, socket) = match stdin_kind {
            Stdio::Socket => (None, stdin),
            _ => (stdin, None),
        };
        let socket = socket
            .map(|fd| {
                let stream = std::os::unix::net::UnixStream::from(fd);
                stream.set_nonblocking(true)?;
                tokio::net::UnixStream::from_std(stream)
            })
            .transpose()?;
        Ok(Self {
            socket,
            stdin: stdin.map(pipe::Sender::from_owned_fd).transpose()?,
            stdout: stdout.map(pipe::Receiver::from_owned_fd).transpose()?,
            stderr: stderr.map(pipe::Receiver::from_owned_fd).transpose()?,
            terminal: terminal.map(crate::Terminal::new).transpose()?,
            inner,
        })
    }

    /// Waits until the command has exited and nothing it started is left.
    ///
    /// # Errors
    /// Waiting failed.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.inner {
            Inner::Namespace(child) => child.wait().await,
            Inner::Supervisor(child) => child.wait().await,
        }
    }

    /// The exit status, if the command has ended.
    ///
    /// # Errors
    /// Checking failed.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.inner {
            Inner::Namespace(child) => child.try_wait(),
            Inner::Supervisor(child) => child.try_wait(),
        }
    }

    /// Asks the command itself to end (SIGTERM), so that it can clean up (git removes
    /// its lock files); what it started is ended with it once it exits. Follow with
    /// [`Supervised::stop_and_wait`] after a grace period.
    pub fn terminate(&self) {
        match &self.inner {
            Inner::Namespace(child) => child.signal(libc::SIGTERM),
            Inner::Supervisor(child) => {
                if let Some(worker) = child.id().and_then(crate::tree::oldest_child) {
                    sys::terminate(worker);
                }
            }
        }
    }

    /// Ends the command and everything it started.
    pub fn stop(&self) {
        match &self.inner {
            Inner::Namespace(child) => child.kill(),
            Inner::Supervisor(child) => {
                if let Some(pid) = child.id() {
                    sys::terminate(pid);
                }
            }
        }
    }

    /// Ends every process the command started that is still running, but not the
    /// command itself: what a shell kept across calls does after each call, so that
    /// nothing a call started outlives it. Returns how many processes were ended.
    pub async fn stop_others(&self) -> usize {
        let (root, keep) = match &self.inner {
            // Everything in the namespace is below its init, the command.
            Inner::Namespace(child) => (child.pid, child.pid),
            // The supervisor's oldest child is the command; orphans it adopted are
            // its later children.
            Inner::Supervisor(child) => {
                let Some(supervisor) = child.id() else {
                    return 0;
                };
                let Some(worker) = crate::tree::oldest_child(supervisor) else {
                    return 0;
                };
                (supervisor, worker)
            }
        };
        let mut ended = 0;
        // Killed processes' children are adopted by the command (or the supervisor)
        // and found by the next pass; a killed process may take a moment to go.
        for pass in 0..1000 {
            let live = crate::tree::live_below(root, keep);
            if live.is_empty() {
                break;
            }
            for pid in &live {
                sys::kill(*pid);
            }
            ended += live.len();
            tokio::time::sleep(std::time::Duration::from_micros(if pass < 10 {
                200
            } else {
                5000
            }))
            .await;
        }
        ended
    }

    /// Ends the command and waits until everything it started is gone.
    pub async fn stop_and_wait(&mut self) {
        self.stop();
        let _ = self.wait().await;
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // A namespace's child kills and reaps itself when dropped.
        if let Inner::Supervisor(_) = self.inner {
            self.stop();
        }
    }
}
