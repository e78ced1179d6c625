//! `Session`: everything one conversation owns, opened from one settings value and
//! closed with one call; `Runtime`: what the sessions of one process share.
//!
//! A session holds its tools (built on first use, with a state scope of their own:
//! shell sessions, background jobs, interpreters), the standard runner stack around
//! its sandbox, its workspace, and its sandbox's resources (with the Docker backend, a
//! container of its own, and a copied workspace). Closing it ends every process, job
//! and interpreter its calls started, removes its container, brings a copied
//! workspace back and reports what did not come back ([`Closed`]). A session dropped
//! without [`Session::close`] is closed in the background, and [`Runtime::shutdown`]
//! waits for that.
//!
//! The runtime holds the settings, the event bus (and so the audit log), the session
//! limit and, with the Docker backend, the engine and the warm pool that sessions
//! share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jianmu_tool_core::{
    CallContext, Calls, DynRunner as _, EventBus, ExecuteOptions, InProcess, Policy, Tightening,
    ToolConfig, ToolError, ToolOutput, ToolSet, ToolSpec, calls_tools, runs_with_session,
};
use serde_json::Value;
use tokio_util::task::TaskTracker;

use crate::{AuditLog, ToolRunner};

/// Where a session's calls run.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Backend {
    /// On this machine: each tool runs in this process, and the tools that start
    /// programs isolate them themselves (their `isolation` settings).
    #[default]
    Local,
    /// In a hardened container of the session's own (feature `docker`).
    #[cfg(feature = "docker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
    Docker(Box<crate::DockerSettings>),
}

/// Everything a runtime and its sessions are opened from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionSettings {
    /// What tools are built from: workspace, allowed hosts, `[tools.NAME]`.
    pub tools: ToolConfig,
    /// Which tools each session gets, made from its configuration: the built-in
    /// ones by default (feature `builtin`), or the caller's ([`SessionSettings::with_tools`]).
    pub source: crate::Tools,
    /// Where calls run.
    pub backend: Backend,
    /// The per-call time limit (`None`: none).
    pub timeout: Option<Duration>,
    /// What calls are allowed; denied tools are refused before they run.
    pub policy: Policy,
    /// A JSON-lines audit log every call's events are appended to.
    pub audit_log: Option<PathBuf>,
    /// At most this many sessions are open at once.
    pub max_sessions: usize,
    /// Each session gets a new folder of its own beneath this one as its workspace
    /// (removed when it closes) instead of the tools' workspace.
    pub own_folders: Option<PathBuf>,
    /// Paths no session's commands see (with the audit log and `own_folders`, which
    /// are always hidden): files the program running the sessions keeps private, such
    /// as its tokens and configuration, and other tenants' folders.
    pub hidden: Vec<PathBuf>,
    /// Checkpoints of each session's workspace, taken before the first changing call
    /// of each turn (on by default), which the `checkpoint_*`
    /// tools list, diff and restore.
    #[cfg(feature = "checkpoint")]
    #[cfg_attr(docsrs, doc(cfg(feature = "checkpoint")))]
    pub checkpoints: jianmu_checkpoint::Config,
}

impl SessionSettings {
    /// Local calls in `tools`' workspace, no time limit, an open policy, no audit log,
    /// no session limit.
    pub fn new(tools: ToolConfig) -> Self {
        Self {
            tools,
            source: crate::Tools::default(),
            backend: Backend::Local,
            timeout: None,
            policy: Policy::default(),
            audit_log: None,
            max_sessions: usize::MAX,
            own_folders: None,
            hidden: Vec::new(),
            #[cfg(feature = "checkpoint")]
            checkpoints: jianmu_checkpoint::Config::default(),
        }
    }
}

impl SessionSettings {
    /// Sessions get `source`'s tools instead of the built-in ones. With the Docker
    /// backend, calls run in the container's own (built-in) tools.
    #[must_use]
    pub fn with_tools(mut self, source: crate::Tools) -> Self {
        self.source = source;
        self
    }
}

/// How one session is opened beyond the runtime's settings ([`Runtime::open_with`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Opening {
    /// The session works in this folder (made if missing, kept when it closes)
    /// instead of the runtime's workspace or a new folder of its own.
    pub workspace: Option<PathBuf>,
    /// Tool settings laid over the runtime's for this session: (tool, key, value).
    pub settings: Vec<(String, String, Value)>,
    /// Who the session serves, named in its audit lines (an HTTP principal).
    pub principal: Option<String>,
    /// Rules laid over the runtime's policy for this session's calls (a principal's
    /// own deny and ask entries): they can only make it stricter.
    pub policy: Tightening,
    /// `workspace` is the session's own folder (a resumed one's): removed when the
    /// session closes.
    pub(crate) own_folder: bool,
}

impl Opening {
    /// As the runtime's settings say.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `principal`, whom its audit lines name.
    #[must_use]
    pub fn for_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Lays `extra` over the runtime's policy for this session's calls.
    #[must_use]
    pub fn with_policy(mut self, extra: Tightening) -> Self {
        self.policy = extra;
        self
    }

    /// Works in `dir` (made if missing, kept when the session closes).
    #[must_use]
    pub fn in_folder(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// Sets `key` of `[tools.TOOL]` to `value` for this session, over the runtime's.
    #[must_use]
    pub fn with_setting(mut self, tool: &str, key: &str, value: Value) -> Self {
        self.settings.push((tool.to_owned(), key.to_owned(), value));
        self
    }
}

/// Why a runtime or a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The audit log cannot be opened.
    #[error("cannot open the audit log {}", path.display())]
    AuditLog {
        /// The log's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox cannot be set up.
    #[cfg(feature = "docker")]
    #[error(transparent)]
    Sandbox(#[from] crate::SandboxError),
    /// The session limit is reached.
    #[error("the limit of {0} open sessions is reached; close one or retry later")]
    Full(usize),
    /// The session's own folder cannot be made.
    #[error("cannot make the session's folder in {}", root.display())]
    Folder {
        /// Where it was to be made.
        root: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The tools cannot be set up.
    #[error(transparent)]
    Tools(#[from] ToolError),
    /// An entry of the policy cannot be used.
    #[error(transparent)]
    Policy(#[from] crate::BadRule),
    /// A session cannot be suspended to, or resumed from, this file.
    #[error("cannot {what} {}: {why}", path.display())]
    Suspension {
        /// `suspend to` or `resume from`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// What the sessions of one process share; see the module docs. Clones share it.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

struct Shared {
    settings: SessionSettings,
    events: EventBus,
    /// The audit log, when one is kept (the doors of sessions' networks write to it too).
    audit: Option<AuditLog>,
    /// Sessions open now.
    open: AtomicUsize,
    /// Told when the last open session is released.
    released: tokio::sync::Notify,
    /// Closes still under way.
    closing: TaskTracker,
    /// The stack local sessions share (it holds no state of a session's own).
    local: ToolRunner,
    /// The engine and pool every session's sandbox shares.
    #[cfg(feature = "docker")]
    docker: Option<crate::DockerSandbox>,
}

impl Shared {
    /// Gives one session's count back.
    fn release(&self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.released.notify_waiters();
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("settings", &self.shared.settings)
            .field("open", &self.open_sessions())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime for `settings`: opens the audit log and checks the sandbox's
    /// settings; no tool is built and no container starts until a session's first
    /// call. Call it inside a Tokio runtime (the Docker backend starts tasks).
    ///
    /// # Errors
    /// An audit log that cannot be opened, sandbox settings that cannot be used.
    pub fn new(settings: SessionSettings) -> Result<Self, SessionError> {
        crate::check_policy(&settings.policy)?;
        let events = EventBus::new();
        let mut audit = None;
        if let Some(path) = &settings.audit_log {
            let log = AuditLog::open(path).map_err(|source| SessionError::AuditLog {
                path: path.clone(),
                source,
            })?;
            log.attach(&events);
            audit = Some(log);
        }
        #[cfg(feature = "docker")]
        let docker = match &settings.backend {
            Backend::Local => None,
            Backend::Docker(docker) => Some(
                crate::DockerSandbox::new(settings.tools.workspace(), (**docker).clone())?
                    .with_tools(settings.tools.clone()),
            ),
        };
        let local = stack(ToolRunner::dynamic(InProcess), &settings, &events);
        Ok(Self {
            shared: Arc::new(Shared {
                settings,
                events,
                audit,
                open: AtomicUsize::new(0),
                released: tokio::sync::Notify::new(),
                closing: TaskTracker::new(),
                local,
                #[cfg(feature = "docker")]
                docker,
            }),
        })
    }

    /// Starts the Docker sandbox's spare containers now, in the background
    /// ([`crate::DockerSettings::pool_size`]), so that the first sessions' first calls
    /// are warm. Nothing to do with the local backend or an empty pool.
    pub fn fill_pool(&self) {
        #[cfg(feature = "docker")]
        if let Some(docker) = &self.shared.docker {
            docker.fill_pool();
        }
    }

    /// The settings sessions are opened from.
    pub fn settings(&self) -> &SessionSettings {
        &self.shared.settings
    }

    /// The names of the tools its sessions get (as its settings make them; nothing
    /// is built). Empty when the tool source refuses the settings.
    pub fn tool_names(&self) -> Vec<String> {
        let settings = &self.shared.settings;
        settings
            .source
            .make(settings.tools.clone())
            .map(|set| set.names().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The policy every session's calls are checked against.
    pub fn policy(&self) -> &Policy {
        &self.shared.settings.policy
    }

    /// The bus every session's calls report on (the audit log listens here).
    pub fn events(&self) -> &EventBus {
        &self.shared.events
    }

    /// How many sessions are open.
    pub fn open_sessions(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }

    /// Waits until no session is open: each one closed or dropped (their closes may
    /// still be under way; [`Runtime::shutdown`] waits for those).
    pub async fn sessions_released(&self) {
        loop {
            let mut released = std::pin::pin!(self.shared.released.notified());
            released.as_mut().enable();
            if self.open_sessions() == 0 {
                return;
            }
            released.await;
        }
    }

    /// Whether the session limit is reached.
    pub fn is_full(&self) -> bool {
        self.open_sessions() >= self.shared.settings.max_sessions
    }

    /// Opens a session: tools with a state scope of their own, the runner stack over
    /// a sandbox of its own, and with [`SessionSettings::own_folders`] a new folder.
    ///
    /// # Errors
    /// [`SessionError::Full`] at the session limit; a folder or sandbox that cannot
    /// be made.
    pub fn open(&self) -> Result<Session, SessionError> {
        self.open_with(Opening::default())
    }

    /// Opens a session as [`Runtime::open`] does, with `opening`'s folder and
    /// settings.
    ///
    /// # Errors
    /// As [`Runtime::open`].
    pub fn open_with(&self, opening: Opening) -> Result<Session, SessionError> {
        let shared = &self.shared;
        let max = shared.settings.max_sessions;
        shared
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| SessionError::Full(max))?;
        let folder = match (&opening.workspace, &shared.settings.own_folders) {
            (Some(dir), _) => kept_folder(dir)
                .map(|()| {
                    Some(Folder {
                        path: dir.clone(),
                        kept: !opening.own_folder,
                    })
                })
                .map_err(|source| (dir, source)),
            (None, Some(root)) => own_folder(root)
                .map(|path| Some(Folder { path, kept: false }))
                .map_err(|source| (root, source)),
            (None, None) => Ok(None),
        };
        let folder = match folder {
            Ok(folder) => folder,
            Err((root, source)) => {
                shared.release();
                return Err(SessionError::Folder {
                    root: root.clone(),
                    source,
                });
            }
        };
        Session::start(self, folder, &opening)
    }

    /// Runs `task` on the runtime's tracker of closes: [`Runtime::shutdown`] waits
    /// for it as for a session being closed (a front end suspending a session in the
    /// background).
    pub fn spawn_tracked(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        drop(self.shared.closing.spawn(task));
    }

    /// Waits (up to `limit`) for sessions being closed in the background, then stops
    /// what sessions share (the warm pool's containers).
    pub async fn shutdown(&self, limit: Duration) {
        self.shared.closing.close();
        let _ = tokio::time::timeout(limit, self.shared.closing.wait()).await;
        #[cfg(feature = "docker")]
        if let Some(docker) = &self.shared.docker {
            docker.shutdown().await;
        }
    }
}

mod suspend;
pub use suspend::{Resumed, Suspended};

/// The policy, the time limit and the runtime's event bus laid over `runner`.
fn stack(runner: ToolRunner, settings: &SessionSettings, events: &EventBus) -> ToolRunner {
    let runner = runner
        .with_policy(settings.policy.clone())
        .with_events(events.clone());
    match settings.timeout {
        Some(limit) => runner.with_timeout(limit),
        None => runner,
    }
}

/// A new folder beneath `root`, owned by `root`'s owner (a Docker sandbox runs as
/// the workspace's owner).
fn own_folder(root: &Path) -> std::io::Result<PathBuf> {
    let dir = root.join(jianmu_tool_core::random_hex());
    std::fs::create_dir(&dir)?;
    if let Err(e) = owned_as_parent(&dir) {
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// `dir`, made if missing: a folder made here gets its parent's owner, as
/// [`own_folder`]'s do.
fn kept_folder(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    owned_as_parent(dir)
}

/// Gives `dir` its parent's owner when they differ.
fn owned_as_parent(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    let owner = std::fs::metadata(parent)?;
    if std::fs::metadata(dir)?.uid() != owner.uid() {
        std::os::unix::fs::chown(dir, Some(owner.uid()), Some(owner.gid()))?;
    }
    Ok(())
}

/// A session's folder of its own: removed when it closes unless `kept`.
#[derive(Debug, Clone)]
struct Folder {
    path: PathBuf,
    kept: bool,
}

impl Folder {
    /// Removes the folder unless it is kept.
    async fn remove(self) {
        if !self.kept {
            let _ = tokio::fs::remove_dir_all(&self.path).await;
        }
    }

    fn remove_now(self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// One conversation's tools, runner stack, workspace and sandbox; see the module
/// docs. Share it behind an `Arc`: calls and [`Session::close`] take `&self`.
pub struct Session {
    /// `None` once closed. Calls hold the parts while they run, so a call still
    /// running when the session closes keeps its tools until it ends (a container's
    /// removal ends it at once).
    parts: std::sync::Mutex<Option<Arc<Parts>>>,
    /// The session's own folder, if it has one.
    folder: Option<Folder>,
    runtime: Runtime,
    /// Opened by [`Session::open`]: closing the session shuts the runtime down too.
    owns_runtime: bool,
    /// What a resume restored and did not, said before the first answer that
    /// succeeds.
    resumed: std::sync::Mutex<Option<String>>,
}

struct Parts {
    tools: ToolSet,
    /// What the tools keep for a suspension (a local session's; a sandbox's are in
    /// its container).
    kept: Arc<jianmu_tool_core::Kept>,
    /// Who the session serves.
    principal: Option<String>,
    /// The policy its calls are checked against.
    policy: Arc<Policy>,
    /// Answers to the policy's `ask` rules: remembered ones, who answers.
    approvals: Arc<crate::approval::Approvals>,
    /// The session's checkpoints (in its tools' scope too).
    #[cfg(feature = "checkpoint")]
    checkpoints: crate::checkpoints::Checkpoints,
    runner: ToolRunner,
    /// Where a tool that calls tools runs (this process: the calls it makes go
    /// through `runner`), and what it calls them through.
    host: ToolRunner,
    calls: Arc<dyn Calls>,
    /// The session's own container (and copied workspace).
    #[cfg(feature = "docker")]
    docker: Option<crate::DockerSandbox>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("workspace", &self.workspace())
            .field("closed", &self.lock().is_none())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A runtime with this one session: what `jianmu call` and a stdio MCP server
    /// use. Closing the session shuts the runtime down too.
    ///
    /// # Errors
    /// As [`Runtime::new`] and [`Runtime::open`].
    pub fn open(settings: SessionSettings) -> Result<Self, SessionError> {
        let mut session = Runtime::new(settings)?.open()?;
        session.owns_runtime = true;
        Ok(session)
    }

    /// Opens a session of `runtime` whose count is already taken, in `folder` when
    /// it has one of its own.
    fn start(
        runtime: &Runtime,
        folder: Option<Folder>,
        opening: &Opening,
    ) -> Result<Self, SessionError> {
        let mut session = Self {
            parts: std::sync::Mutex::new(None),
            folder,
            runtime: runtime.clone(),
            owns_runtime: false,
            resumed: std::sync::Mutex::new(None),
        };
        let parts = match session.build(opening) {
            Ok(parts) => parts,
            Err(e) => {
                // Nothing was built: give the count back and remove the folder here
                // (dropping a session without parts releases nothing).
                if let Some(folder) = session.folder.take() {
                    folder.remove_now();
                }
                runtime.shared.release();
                return Err(e);
            }
        };
        *session
            .parts
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(parts));
        Ok(session)
    }

    /// The tool set (the session's own scope and workspace) and the runner.
    fn build(&self, opening: &Opening) -> Result<Parts, SessionError> {
        let overrides = &opening.settings;
        let principal = opening.principal.as_deref();
        let shared = &self.runtime.shared;
        let settings = &shared.settings;
        // The runtime's policy, or a stricter one of the session's own.
        let policy = if opening.policy.is_empty() {
            Arc::new(settings.policy.clone())
        } else {
            let policy = settings.policy.tightened(&opening.policy);
            crate::check_policy(&policy)?;
            Arc::new(policy)
        };
        let own_policy = |runner: ToolRunner| {
            if opening.policy.is_empty() {
                runner
            } else {
                runner.with_policy((*policy).clone())
            }
        };
        let mut tools = settings.tools.clone().with_new_scope();
        if let Some(folder) = &self.folder {
            tools = tools.with_workspace(&folder.path);
        }
        for (tool, key, value) in overrides {
            tools = tools.with_setting(tool, key, value.clone());
        }
        // Whatever the overrides say, these stay out of every command's view.
        #[cfg(feature = "checkpoint")]
        let checkpoint_root = settings.checkpoints.root();
        #[cfg(not(feature = "checkpoint"))]
        let checkpoint_root: Option<PathBuf> = None;
        let hidden: Vec<PathBuf> = settings
            .hidden
            .iter()
            .chain(&settings.audit_log)
            .chain(&settings.own_folders)
            .chain(&checkpoint_root)
            // A relative path names one in this process's folder, not below `/`.
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect();
        tools = crate::with_hidden_paths(tools, &hidden);
        if let Some(audit) = &shared.audit {
            let mut labels = serde_json::Map::new();
            labels.insert("principal".into(), principal.into());
            labels.insert("session".into(), jianmu_tool_core::random_hex().into());
            let audit = audit.clone();
            tools
                .scope()
                .get::<jianmu_egress::Door>()
                .set_audit(Arc::new(move |line| audit.record(&line)), labels);
        }
        #[cfg(feature = "docker")]
        let mut docker = None;
        let runner = match &settings.backend {
            Backend::Local => shared.local.clone(),
            #[cfg(feature = "docker")]
            Backend::Docker(docker_settings) => {
                let own = match self.folder.as_ref().map(|f| &f.path) {
                    Some(dir) => Some(dir.as_path()),
                    // Settings of its own are the container's to build tools from:
                    // the pool's containers have the runtime's.
                    None if !overrides.is_empty() => Some(settings.tools.workspace()),
                    None => None,
                };
                let sandbox = match own {
                    // A folder of its own is a mount of its own: a sandbox of its
                    // own, outside the shared pool.
                    Some(dir) => {
                        let settings = crate::DockerSettings {
                            pool_size: 0,
                            ..(**docker_settings).clone()
                        };
                        crate::DockerSandbox::new(dir, settings)?.with_tools(tools.clone())
                    }
                    None => shared
                        .docker
                        .as_ref()
                        .expect("a Docker runtime has its shared sandbox")
                        .sibling(),
                };
                docker = Some(sandbox.clone());
                stack(ToolRunner::dynamic(sandbox), settings, &shared.events)
            }
        };
        let runner = own_policy(runner);
        #[cfg(feature = "checkpoint")]
        let checkpoints = crate::checkpoints::open(
            settings,
            &tools,
            &hidden,
            #[cfg(feature = "docker")]
            docker.as_ref(),
        );
        let kept = tools.scope().get::<jianmu_tool_core::Kept>();
        let tools = settings.source.make(tools)?;
        let host = own_policy(shared.local.clone());
        let calls: Arc<dyn Calls> = Arc::new(SessionCalls {
            tools: tools.clone(),
            runner: runner.clone(),
            host: host.clone(),
        });
        let approvals = Arc::new(crate::approval::Approvals::new(
            shared.audit.clone(),
            principal.map(str::to_owned),
        ));
        Ok(Parts {
            tools,
            kept,
            principal: principal.map(str::to_owned),
            policy,
            approvals,
            #[cfg(feature = "checkpoint")]
            checkpoints,
            runner,
            host,
            calls,
            #[cfg(feature = "docker")]
            docker,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Parts>>> {
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The runtime this session belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The folder the session's tools work in.
    pub fn workspace(&self) -> &Path {
        self.folder.as_ref().map_or_else(
            || self.runtime.shared.settings.tools.workspace(),
            |f| &f.path,
        )
    }

    /// Readies the session before its first call: with the Docker backend, takes its
    /// container (a spare from the pool when there is one, else a new one) and tops
    /// the pool up, so that the first call is as fast as any. Nothing to do locally or
    /// once closed.
    ///
    /// # Errors
    /// The container could not start (the first call would fail the same way).
    pub async fn warm_up(&self) -> Result<(), SessionError> {
        #[cfg(feature = "docker")]
        {
            let parts = self.lock().clone();
            if let Some(docker) = parts.as_ref().and_then(|p| p.docker.as_ref()) {
                docker.warm_up().await?;
            }
        }
        Ok(())
    }

    /// The session's tools, described as its own settings make them (a principal's
    /// isolation, network or egress change what `bash` says): what a front end lists
    /// for this session. Builds the tools not built yet; empty once closed.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let Some(parts) = self.lock().clone() else {
            return Vec::new();
        };
        parts.tools.specs().into_iter().cloned().collect()
    }

    /// The spec of the tool `name` (a name or alias) as this session has it, without
    /// building the tool.
    ///
    /// # Errors
    /// As [`ToolSet::tool`](jianmu_tool_core::ToolSet::tool) (an unknown name, or one
    /// not compiled in); [`ToolError::Runner`] once the session is closed.
    pub fn spec(&self, name: &str) -> Result<ToolSpec, ToolError> {
        Ok(self.tool(name)?.spec().clone())
    }

    /// The session's tool `name` (a name or alias), not built.
    fn tool(&self, name: &str) -> Result<jianmu_tool_core::ToolHandle, ToolError> {
        let Some(parts) = self.lock().clone() else {
            return Err(ToolError::runner(name, "this session is closed"));
        };
        parts.tools.tool(name).cloned()
    }

    /// The canonical name of the tool `name` calls (an alias resolved); `name`
    /// itself when it is none.
    pub fn canonical_name(&self, name: &str) -> String {
        match self.lock().clone() {
            Some(parts) => parts.tools.canonical_name(name).to_owned(),
            None => name.to_owned(),
        }
    }

    /// The policy the session's calls are checked against: the runtime's, with the
    /// session's own rules laid over it ([`Opening::with_policy`]).
    pub fn policy(&self) -> Arc<Policy> {
        match self.lock().clone() {
            Some(parts) => Arc::clone(&parts.policy),
            None => Arc::new(self.runtime.policy().clone()),
        }
    }

    /// Whether the session has been closed.
    pub fn is_closed(&self) -> bool {
        self.lock().is_none()
    }

    /// Calls `name` (a name or alias) with `args` through the session's runner.
    ///
    /// # Errors
    /// Whatever the call fails with; [`ToolError::Runner`] once the session is
    /// closed.
    pub async fn call(&self, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.execute(name, args, ExecuteOptions::default()).await
    }

    /// Calls `name` with `options` (call id, progress, injected arguments); the
    /// session's runner replaces any runner in `options`.
    ///
    /// # Errors
    /// As [`Session::call`].
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        options: ExecuteOptions<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let parts = self
            .lock()
            .clone()
            .ok_or_else(|| ToolError::runner(name, "this session is closed; open a new one"))?;
        let tool = parts.tools.tool(name)?;
        // With ask rules, the call's approver is the session's: remembered answers
        // first, then the caller's approver or the session's own.
        let asking: Option<Arc<dyn jianmu_tool_core::Approver>> = (!parts.policy.ask.is_empty())
            .then(|| {
                Arc::new(crate::approval::Asking {
                    approvals: Arc::clone(&parts.approvals),
                    answerer: options.approver.cloned(),
                }) as Arc<dyn jianmu_tool_core::Approver>
            });
        let mut options = options;
        if let Some(asking) = &asking {
            options = options.approver(asking);
        }
        #[cfg(feature = "checkpoint")]
        let _turn = parts
            .checkpoints
            .before(tool.spec(), &self.runtime.shared.settings.checkpoints)
            .await;
        let result = if calls_tools(tool.spec()) {
            // A script runs here; each call it makes goes through the session's runner.
            tool.execute(args, options.runner(&parts.host).calls(&parts.calls))
                .await
        } else if runs_with_session(tool.spec()) {
            // Over the session's own state (its checkpoints), kept here.
            tool.execute(args, options.runner(&parts.host)).await
        } else {
            tool.execute(args, options.runner(&parts.runner)).await
        };
        let mut result = result;
        if let Ok(out) = &mut result {
            let note = self
                .resumed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(note) = note {
                out.text = format!("[{note}]\n{}", out.text);
            }
        }
        result
    }

    /// Marks the start of a new turn (a user's message): the next call that changes
    /// files takes a checkpoint first, however short the gap since the last call.
    #[cfg(feature = "checkpoint")]
    #[cfg_attr(docsrs, doc(cfg(feature = "checkpoint")))]
    pub fn begin_turn(&self) {
        if let Some(parts) = self.lock().clone() {
            parts.checkpoints.slot.mark_turn();
        }
    }

    /// Lets `approver` answer the questions of the policy's `ask` rules for this
    /// session's calls (a call's own, [`ExecuteOptions::approver`], comes first);
    /// `None` leaves nobody to ask, so such calls are refused with the rule named.
    /// Answers of `allow_session` are remembered for the rest of the session, and
    /// each decision is a line of the audit log.
    pub fn set_approver(&self, approver: Option<Arc<dyn jianmu_tool_core::Approver>>) {
        if let Some(parts) = self.lock().clone() {
            parts.approvals.set_approver(approver);
        }
    }

    /// Finds `name` and, when calls run here, builds it now (it is built on its
    /// first call otherwise), so that a tool that refuses its settings is found
    /// before a call. In a sandbox, the tool is built there.
    ///
    /// # Errors
    /// An unknown tool, one not compiled in, or one that refuses its settings.
    pub fn check(&self, name: &str) -> Result<(), ToolError> {
        let tool = self.tool(name)?;
        match self.runtime.shared.settings.backend {
            Backend::Local => tool.build_now(),
            #[cfg(feature = "docker")]
            Backend::Docker(_) => Ok(()),
        }
    }

    /// Closes the session: ends every process, job and interpreter its calls started
    /// (those of calls still running end with them), removes its container (after
    /// bringing a copied workspace back) and its own folder; with [`Session::open`],
    /// shuts the runtime down too. Returns what did not come back. Closing again
    /// does nothing.
    pub async fn close(&self) -> Closed {
        let Some(parts) = self.lock().take() else {
            return Closed::default();
        };
        let closed = close(parts, self.folder.clone(), &self.runtime).await;
        if self.owns_runtime {
            self.runtime.shutdown(Duration::from_secs(15)).await;
        }
        closed
    }
}

/// The session's tools as a tool that calls tools reaches them: through the session's
/// runner, as the nested call its context names.
struct SessionCalls {
    tools: ToolSet,
    runner: ToolRunner,
    /// Where tools over the session's own state run.
    host: ToolRunner,
}

#[async_trait::async_trait]
impl Calls for SessionCalls {
    fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .specs()
            .into_iter()
            .filter(|spec| !calls_tools(spec))
            .cloned()
            .collect()
    }

    async fn call(
        &self,
        name: &str,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        let tool = self.tools.tool(name)?;
        if calls_tools(tool.spec()) {
            return Err(ToolError::failed(format!(
                "{} cannot be called from a script: call it directly",
                tool.name()
            )));
        }
        let args = tool.prepare_args(args, None, true)?;
        let runner = if runs_with_session(tool.spec()) {
            &self.host
        } else {
            &self.runner
        };
        runner
            .run_dyn(jianmu_tool_core::PreparedCall::new(tool, args, cx))
            .await
    }
}

/// Gives the session's count back, then ends what `parts` hold, in order: tools
/// (their processes), container, folder.
async fn close(parts: Arc<Parts>, folder: Option<Folder>, runtime: &Runtime) -> Closed {
    // A closing session no longer counts against the limit: what it releases from
    // here is not the client's to wait for.
    runtime.shared.release();
    #[cfg(feature = "docker")]
    let docker = parts.docker.clone();
    // A folder of the session's own takes its checkpoints with it.
    #[cfg(feature = "checkpoint")]
    if folder.as_ref().is_some_and(|f| !f.kept) {
        parts.checkpoints.remove_store();
    }
    // The tools' scope ends with the last tool: their processes, jobs and
    // interpreters end with it (or with the last call still holding it).
    drop(parts);
    #[allow(unused_mut)]
    let mut closed = Closed::default();
    #[cfg(feature = "docker")]
    if let Some(docker) = docker {
        closed.pulled = docker.close().await;
    }
    if let Some(folder) = folder {
        folder.remove().await;
    }
    closed
}

impl Drop for Session {
    fn drop(&mut self) {
        let parts = self
            .parts
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let folder = self.folder.take();
        let Some(parts) = parts else {
            return;
        };
        let runtime = self.runtime.clone();
        if tokio::runtime::Handle::try_current().is_ok() {
            let owns = self.owns_runtime;
            drop(runtime.shared.closing.clone().spawn(async move {
                let closed = close(parts, folder, &runtime).await;
                if !closed.is_complete() {
                    tracing::warn!("a session closed: {closed}");
                }
                if owns {
                    runtime.shutdown(Duration::from_secs(15)).await;
                }
            }));
        } else {
            // No runtime to remove a container on: the tools end here, the folder
            // goes, and the container is removed by the next sandbox's sweep of
            // containers whose owner is gone.
            #[cfg(feature = "checkpoint")]
            if folder.as_ref().is_some_and(|f| !f.kept) {
                parts.checkpoints.remove_store();
            }
            drop(parts);
            if let Some(folder) = folder {
                folder.remove_now();
            }
            runtime.shared.release();
        }
    }
}

/// What a closed session reports: with a copied workspace, the changes that came
/// back and those that did not.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Closed {
    /// What came back from a copied workspace (empty when it was mounted).
    #[cfg(feature = "docker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
    pub pulled: crate::docker::Pulled,
}

impl Closed {
    /// Whether everything came back and nothing was left out.
    pub fn is_complete(&self) -> bool {
        #[cfg(feature = "docker")]
        return self.pulled.is_complete();
        #[cfg(not(feature = "docker"))]
        true
    }

    /// How many changes made in the sandbox did not come back.
    pub fn dropped(&self) -> usize {
        #[cfg(feature = "docker")]
        return self.pulled.dropped();
        #[cfg(not(feature = "docker"))]
        0
    }
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[cfg(feature = "docker")]
        return self.pulled.fmt(f);
        #[cfg(not(feature = "docker"))]
        f.write_str("the session closed")
    }
}
