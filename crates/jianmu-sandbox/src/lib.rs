//! The sandboxes of Jianmu tools. `DockerSandbox` runs any tool inside a long-lived,
//! hardened container; sessions of `jianmu-runtime` use it with its feature `docker`.
//! Three parts, each behind a module boundary: the host side (`DockerSandbox`, its
//! engines, placement, pool, copied workspaces and the wire), the server that runs
//! inside the container ([`serve_stdio`], given its tools by the program that runs it),
//! and the image build ([`image`]). It depends on neither the built-in tools nor the
//! command. Calls that run in process (`InProcess`, from `jianmu-tool-core`) are not a
//! sandbox: the isolation of a local command is the tools' own jail.
//!
//! The container runs `jianmu serve` ([`serve_stdio`]) from an image built
//! locally by [`image::build_image`] (`jianmu sandbox build-image`); the host keeps
//! one attach stream open to it and sends calls as JSON lines, so a warm call costs a
//! round trip over a socket instead of a `docker exec`. The workspace is bind-mounted
//! at the same path as on the host, so paths in arguments and outputs mean the same
//! on both sides.
//!
//! Hardening, all on by default: no network (opt in with
//! [`DockerSettings::network`]), a read-only root filesystem, a size-capped tmpfs
//! `/tmp`, every capability dropped, `no-new-privileges`, a pids limit, a memory
//! limit with no swap on top, a CPU quota, a non-root user and an init process.
//!
//! Faults: no daemon gives "sandbox unavailable" (never a silent local fallback); a
//! container that dies mid-call fails that call, says why (exit code, memory limit)
//! and is replaced on the next call; a timed-out or cancelled call has its work
//! stopped inside the container, and a container that does not confirm within
//! [`DockerSettings::cancel_grace_secs`] is killed and replaced. Containers carry the
//! label [`LABEL`]; those whose owning process is gone are removed when a sandbox
//! first starts one.
//!
//! Sessions and the warm pool: [`DockerSandbox::sibling`] gives a sandbox that
//! shares the settings and the engine but has a container (and so interpreter, shell
//! sessions and jobs) of its own. With [`DockerSettings::pool_size`] N, N spare
//! containers are kept started and ready; a session's first call takes one, so it
//! costs a warm call, and a replacement starts in the background.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod certs;
mod conn;
mod container;
mod copy;
mod error;
pub mod image;
mod listen;
mod remote;
mod serve;
mod settings;
mod swarm;
mod tunnel;
mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use jianmu_tool_core::{PreparedCall, Runner, ToolConfig, ToolError, ToolOutput};
use tokio::sync::{Mutex, OnceCell};

use backend::{Backend, DockerBackend, Spec};
pub use certs::{TlsInit, tls_init};
use conn::{Conn, Outcome};
pub use container::owner_label;
pub use copy::{Pulled, Skipped};
pub use error::SandboxError;
pub use listen::{Listen, serve_listen};
pub use serve::serve_stdio;
pub use settings::{
    DEFAULT_IMAGE, DockerSettings, ENGINE_RETRY, EngineAddress, Orchestrator, TlsEngine, TlsFiles,
    WorkspaceMode,
};

/// Locks `m`, taking the data even if a panicking holder poisoned it: every mutex in
/// this crate guards plain bookkeeping that stays consistent across a panic.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The label on every sandbox container; its value names the owning process.
pub const LABEL: &str = "io.jianmu.sandbox.owner";

/// A [`Runner`] that runs tools in a hardened container; see the module docs. Clones
/// share the container; [`DockerSandbox::sibling`] does not.
#[derive(Clone)]
pub struct DockerSandbox {
    inner: Arc<Inner>,
    /// This session's container, once started.
    conn: Arc<Mutex<Option<Arc<Conn>>>>,
    /// What was not copied into this session's container (a copied workspace).
    left_out: Arc<std::sync::Mutex<copy::Named>>,
    /// Shell sessions' states to hand its container when it starts (a resumed
    /// session's).
    gifts: Arc<std::sync::Mutex<std::collections::BTreeMap<String, jianmu_tool_core::ShellState>>>,
}

struct Inner {
    settings: DockerSettings,
    workspace: PathBuf,
    user: String,
    tools: ToolConfig,
    /// The session's egress (`[tools.bash.egress]`), served on the host for the proxy
    /// the server opens inside a container without a network; the settings never go
    /// into the container.
    egress: Option<Arc<jianmu_egress::Egress>>,
    /// The engines containers are placed on (one unless `hosts` lists several).
    engines: Vec<Engine>,
    owner: String,
    /// Started, ready containers no session has taken yet.
    spares: std::sync::Mutex<Vec<Arc<Conn>>>,
    /// Spares being started.
    filling: AtomicUsize,
    /// The orchestrator keeps the pool (Swarm's replicated service), asked once.
    orchestrated: AtomicBool,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("settings", &self.inner.settings)
            .field("workspace", &self.inner.workspace)
            .field("user", &self.inner.user)
            .finish_non_exhaustive()
    }
}

impl DockerSandbox {
    /// A sandbox for `workspace` (an existing folder, mounted at the same path). No
    /// container starts until the first call.
    ///
    /// # Errors
    /// [`SandboxError::Settings`] for a workspace that is not a folder or would hide
    /// the image's own files, and for settings out of range.
    pub fn new(
        workspace: impl AsRef<Path>,
        settings: DockerSettings,
    ) -> Result<Self, SandboxError> {
        let (workspace, user) = settings.check(workspace.as_ref())?;
        let tools = ToolConfig::new(&workspace);
        Ok(Self::from_parts(settings, workspace, user, tools))
    }

    fn from_parts(
        settings: DockerSettings,
        workspace: PathBuf,
        user: String,
        tools: ToolConfig,
    ) -> Self {
        let engines = if settings.orchestrator == Orchestrator::Swarm {
            // One scheduler over every node: Swarm places, not this process.
            let mut swarm = Engine::new(None, None, true);
            swarm.swarm = Some(Box::new(settings.clone()));
            vec![swarm]
        } else {
            settings
                .engines()
                .into_iter()
                .enumerate()
                .map(|(i, (address, tls))| {
                    let copy = settings.copies_to(address.as_deref());
                    let mut engine = Engine::new(address, tls, copy);
                    engine.ca_key = settings
                        .hosts
                        .get(i)
                        .and_then(EngineAddress::ca_key)
                        .map(Path::to_owned);
                    engine
                })
                .collect()
        };
        let egress = if settings.network {
            None
        } else {
            egress_of(&tools)
        };
        Self {
            inner: Arc::new(Inner {
                settings,
                workspace,
                user,
                engines,
                tools,
                egress,
                owner: container::owner_label(),
                spares: std::sync::Mutex::new(Vec::new()),
                filling: AtomicUsize::new(0),
                orchestrated: AtomicBool::new(false),
            }),
            conn: Arc::default(),
            left_out: Arc::default(),
            gifts: Arc::default(),
        }
    }

    /// A sandbox with the same settings, engine and pool, but a container of its own:
    /// nothing one session's calls leave (interpreter state, shell sessions, jobs) is
    /// seen by another's. Its first call takes a spare from the pool when there is one.
    #[must_use]
    pub fn sibling(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            conn: Arc::default(),
            left_out: Arc::default(),
            gifts: Arc::default(),
        }
    }

    /// The ids of the spare containers ready in the pool.
    pub fn pooled(&self) -> Vec<String> {
        lock(&self.inner.spares)
            .iter()
            .filter(|c| !c.is_dead())
            .map(|c| c.id().to_owned())
            .collect()
    }

    /// Stops and removes this session's container only (after [`DockerSandbox::pull`]
    /// with a copied workspace); the pool and other sessions go on. Returns what came
    /// back, and names what did not (a failed pull is named too) and what was left out
    /// when the workspace was copied in.
    /// [`DockerSandbox::shutdown`] ends everything.
    pub async fn close(&self) -> Pulled {
        // A copied workspace comes back first.
        let mut pulled = self.pull().await.unwrap_or_else(|e| {
            tracing::warn!("the sandbox's workspace was not brought back: {e}");
            let mut failed = Pulled::default();
            failed.skip(
                Path::new("."),
                format!("the workspace was not brought back: {e}"),
            );
            failed
        });
        let left_out = std::mem::take(&mut *lock(&self.left_out));
        pulled.left_out = left_out.list;
        pulled.left_out_unlisted = left_out.more;
        let conn = self.conn.lock().await.take();
        if let Some(conn) = conn {
            conn.close(Duration::from_secs(5)).await;
        }
        pulled
    }

    /// The configuration the tools inside the container are built from (per-tool
    /// settings, allowed hosts); its workspace is replaced by this sandbox's, the one
    /// mounted.
    #[must_use]
    pub fn with_tools(self, tools: ToolConfig) -> Self {
        let Inner {
            settings,
            workspace,
            user,
            ..
        } = &*self.inner;
        let tools = tools.with_workspace(workspace);
        Self::from_parts(settings.clone(), workspace.clone(), user.clone(), tools)
    }

    /// The user the container runs as (`uid:gid`).
    pub fn user(&self) -> &str {
        &self.inner.user
    }

    /// The id of the running container, if one is up.
    pub async fn container_id(&self) -> Option<String> {
        let slot = self.conn.lock().await;
        slot.as_ref()
            .filter(|c| !c.is_dead())
            .map(|c| c.id().to_owned())
    }

    /// Starts the container now instead of at the first call (a spare from the pool
    /// when there is one), its tools built, and tops the pool up.
    ///
    /// # Errors
    /// When the daemon is unreachable or the container cannot start.
    pub async fn warm_up(&self) -> Result<(), SandboxError> {
        self.connection_with(true).await?;
        self.refill();
        Ok(())
    }

    /// Starts the pool's spares now, in the background, instead of after the first
    /// call: what a server does when it starts, so that its first sessions are warm.
    pub fn fill_pool(&self) {
        self.refill();
    }

    /// Tops the pool up in the background. Called after a call rather than when a
    /// spare is taken: starting a container keeps the engine busy, and every call's
    /// bytes pass through the engine.
    fn refill(&self) {
        if self.inner.settings.pool_size > 0 {
            self.inner.refill();
        }
    }

    /// Stops and removes this session's container and every spare of the pool. The
    /// sandbox stays usable: the next call starts a new one. Returns what
    /// [`DockerSandbox::close`] does.
    pub async fn shutdown(&self) -> Pulled {
        let spares = std::mem::take(&mut *lock(&self.inner.spares));
        let closing = spares
            .iter()
            .map(|c| c.close(Duration::from_secs(5)))
            .collect::<Vec<_>>();
        let pulled = tokio::join!(self.close(), futures::future::join_all(closing)).0;
        for engine in &self.inner.engines {
            if let Some(backend) = engine.backend.get() {
                backend.shutdown().await;
            }
        }
        self.inner.orchestrated.store(false, Ordering::Release);
        pulled
    }

    /// The body this sandbox creates its containers with: image, user, labels, mounts
    /// and every limit (benchmarks compare raw bollard calls with the same settings).
    pub fn container_body(&self) -> ContainerCreateBody {
        self.inner.body()
    }

    /// The live connection: this session's container, else a spare from the pool,
    /// else a new container on the engine [`Inner::place`] picks.
    async fn connection(&self) -> Result<Arc<Conn>, SandboxError> {
        self.connection_with(false).await
    }

    /// [`DockerSandbox::connection`]; a container started here with `warm` builds
    /// every tool before it is ready (as the pool's spares do).
    async fn connection_with(&self, warm: bool) -> Result<Arc<Conn>, SandboxError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.is_dead()
        {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let spare = {
            let mut spares = lock(&self.inner.spares);
            spares.retain(|c| !c.is_dead());
            spares.pop()
        };
        let conn = match spare {
            Some(conn) => conn,
            None => self.inner.place(warm).await?,
        };
        if self.inner.engines[conn.engine()].copy {
            let copied = self.copy_in(&conn).await;
            match copied {
                Ok(left_out) => {
                    for s in &left_out.list {
                        tracing::warn!(
                            "not copied into the sandbox: {}: {}",
                            s.path.display(),
                            s.why
                        );
                    }
                    *lock(&self.left_out) = left_out;
                }
                Err(e) => {
                    conn.close(Duration::from_secs(5)).await;
                    return Err(e);
                }
            }
        }
        let gifts = std::mem::take(&mut *lock(&self.gifts));
        if !gifts.is_empty()
            && let Err(e) = self
                .internal(&conn, wire::GIVE, serde_json::json!({ "shells": gifts }))
                .await
        {
            tracing::warn!(%e, "shell sessions' states did not reach the sandbox");
        }
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// When the workspace is copied (`workspace_mode = "copy"`, or `auto` with a
    /// network engine): brings what this session's container changed in the workspace
    /// back here (new and changed files; see [`Pulled`]). Nothing to do when it is
    /// mounted, or before the first call.
    ///
    /// # Errors
    /// The engine failing, or a workspace over `copy_limit_mib`.
    pub async fn pull(&self) -> Result<Pulled, SandboxError> {
        let conn = self.conn.lock().await.clone();
        match conn {
            Some(conn) if !conn.is_dead() && self.inner.engines[conn.engine()].copy => {
                copy::pull(
                    conn.backend(),
                    conn.id(),
                    &self.inner.workspace,
                    self.inner.settings.copy_limit(),
                    Path::new(
                        self.inner
                            .tools
                            .saved_outputs()
                            .folder
                            .as_deref()
                            .unwrap_or(copy::SAVED_OUTPUTS),
                    ),
                )
                .await
            }
            _ => Ok(Pulled::default()),
        }
    }

    /// When the workspace is copied: after it was changed here behind the container's
    /// back (a checkpoint restored), sends it to this session's container again and
    /// removes `removed` there (workspace-relative paths, files before their
    /// folders). Nothing to do when it is mounted, or before the first call.
    ///
    /// # Errors
    /// The engine failing, a workspace over `copy_limit_mib`, or paths the container
    /// could not remove (named).
    pub async fn push(&self, removed: &[String]) -> Result<(), SandboxError> {
        let conn = self.conn.lock().await.clone();
        let Some(conn) = conn else {
            return Ok(());
        };
        if !self.inner.engines[conn.engine()].copy {
            return Ok(());
        }
        if conn.is_dead() {
            return Err(SandboxError::Lost(
                "the sandbox container has stopped".into(),
            ));
        }
        // The copy goes in even when a removal failed, so what can be restored is.
        let removals = if removed.is_empty() {
            Ok(())
        } else {
            let args = serde_json::json!({ "paths": removed });
            self.internal(&conn, wire::REMOVE, args).await.map(drop)
        };
        *lock(&self.left_out) = self.copy_in(&conn).await?;
        removals
    }

    /// What the session's tools in the container keep for a suspension, and what
    /// cannot be kept (nothing before the first call).
    ///
    /// # Errors
    /// The container was lost.
    pub async fn kept(&self) -> Result<jianmu_tool_core::KeptState, SandboxError> {
        let conn = self.conn.lock().await.clone();
        match conn {
            Some(conn) if !conn.is_dead() => {
                let out = self
                    .internal(&conn, wire::KEPT, serde_json::json!({}))
                    .await?;
                serde_json::from_value(out.structured.unwrap_or_default())
                    .map_err(|e| SandboxError::Lost(format!("unreadable kept state: {e}")))
            }
            _ => Ok(jianmu_tool_core::KeptState::default()),
        }
    }

    /// Hands `shells` to the shell sessions of those names in this session's
    /// container when it starts (a resumed session's, before its first call).
    pub fn give_at_start(
        &self,
        shells: std::collections::BTreeMap<String, jianmu_tool_core::ShellState>,
    ) {
        lock(&self.gifts).extend(shells);
    }

    /// A call the server in the container answers itself.
    async fn internal(
        &self,
        conn: &Conn,
        op: &str,
        args: serde_json::Value,
    ) -> Result<ToolOutput, SandboxError> {
        match conn
            .call(op, args, &jianmu_tool_core::CallContext::new())
            .await
        {
            Outcome::Done {
                result: Ok(out), ..
            } => Ok(out),
            Outcome::Done { result: Err(e), .. } => {
                Err(SandboxError::Lost(jianmu_tool_core::error_chain(&e)))
            }
            Outcome::Lost(why) => Err(SandboxError::Lost(why)),
        }
    }

    /// Copies the workspace into `conn`'s container; returns what was left out.
    async fn copy_in(&self, conn: &Conn) -> Result<copy::Named, SandboxError> {
        copy::upload(
            conn.backend(),
            conn.id(),
            &self.inner.workspace,
            &self.inner.user,
            self.inner.settings.copy_limit(),
        )
        .await
    }
}

/// One engine of the sandbox, with what placing sessions needs to know about it.
struct Engine {
    /// `None`: `DOCKER_HOST`, else the local socket.
    address: Option<String>,
    /// The workspace is copied in, not mounted (see `DockerSettings::copies_to`).
    copy: bool,
    tls: Option<TlsFiles>,
    /// A runner's authority key, to mint each session's certificate with.
    ca_key: Option<PathBuf>,
    /// The settings of a swarm this engine stands for (`orchestrator = "swarm"`).
    swarm: Option<Box<DockerSettings>>,
    backend: OnceCell<Arc<dyn Backend>>,
    swept: AtomicBool,
    /// Containers started on it (live ones count as its load).
    placed: std::sync::Mutex<Vec<std::sync::Weak<Conn>>>,
    /// Passed over until then, after a failure.
    down_until: std::sync::Mutex<Option<Instant>>,
}

impl Engine {
    fn new(address: Option<String>, tls: Option<TlsFiles>, copy: bool) -> Self {
        Self {
            address,
            copy,
            tls,
            ca_key: None,
            swarm: None,
            backend: OnceCell::new(),
            swept: AtomicBool::new(false),
            placed: std::sync::Mutex::default(),
            down_until: std::sync::Mutex::default(),
        }
    }

    async fn backend(&self) -> Result<&Arc<dyn Backend>, SandboxError> {
        self.backend
            .get_or_try_init(|| async {
                if let Some(settings) = &self.swarm {
                    let swarm = swarm::SwarmBackend::connect(settings).await?;
                    return Ok(Arc::new(swarm) as Arc<dyn Backend>);
                }
                if let Some(url) = self
                    .address
                    .as_deref()
                    .filter(|a| a.starts_with(remote::SCHEME))
                {
                    let runner =
                        remote::RemoteBackend::new(url, self.tls.as_ref(), self.ca_key.as_deref())?;
                    return Ok(Arc::new(runner) as Arc<dyn Backend>);
                }
                let docker =
                    image::connect_with(self.address.as_deref(), self.tls.as_ref()).await?;
                Ok(Arc::new(DockerBackend { docker }) as Arc<dyn Backend>)
            })
            .await
    }

    /// How many of this sandbox's containers run there now.
    fn load(&self) -> usize {
        let mut placed = lock(&self.placed);
        placed.retain(|c| c.upgrade().is_some_and(|c| !c.is_dead()));
        placed.len()
    }

    /// Whether it is a runner (`jianmu://`), not an engine.
    fn is_runner(&self) -> bool {
        self.address
            .as_deref()
            .is_some_and(|a| a.starts_with(remote::SCHEME))
    }

    fn is_up(&self) -> bool {
        lock(&self.down_until).is_none_or(|until| Instant::now() >= until)
    }

    /// Marks the engine down unless it answers a ping within 2 seconds.
    async fn check(&self) {
        let Some(backend) = self.backend.get() else {
            return;
        };
        if !backend.ping().await {
            self.mark_down(&SandboxError::Lost("the engine does not answer".into()));
        }
    }

    fn mark_down(&self, why: &SandboxError) {
        tracing::warn!(engine = ?self.address, "sandbox engine marked down: {why}");
        *lock(&self.down_until) = Some(Instant::now() + ENGINE_RETRY);
    }
}

impl Inner {
    /// What every container of this sandbox is created with.
    fn body(&self) -> ContainerCreateBody {
        let copy = self.engines.first().is_some_and(|e| e.copy);
        container::body(
            &self.settings,
            &self.workspace,
            &self.user,
            &self.owner,
            copy,
        )
    }

    /// What a backend creates this sandbox's servers from (`copy`: the workspace is
    /// copied in).
    fn spec(&self, copy: bool) -> Spec<'_> {
        Spec {
            settings: &self.settings,
            workspace: &self.workspace,
            user: &self.user,
            owner: &self.owner,
            copy,
        }
    }

    /// Starts a container on the best engine: those up before those marked down,
    /// then the least loaded. An engine that cannot be reached or fails to start the
    /// container is marked down and the next is tried; the last error is returned
    /// when none succeeds.
    async fn place(&self, warm: bool) -> Result<Arc<Conn>, SandboxError> {
        let mut ranked: Vec<(bool, usize, usize)> = self
            .engines
            .iter()
            .enumerate()
            .map(|(i, e)| (!e.is_up(), e.load(), i))
            // A runner serves one session at a time.
            .filter(|&(_, load, i)| load == 0 || !self.engines[i].is_runner())
            .collect();
        ranked.sort_unstable();
        let mut failure = None;
        for (_, _, i) in ranked {
            let engine = &self.engines[i];
            let backend = match engine.backend().await {
                Ok(backend) => Arc::clone(backend),
                Err(e) => {
                    engine.mark_down(&e);
                    failure = Some(e);
                    continue;
                }
            };
            let started = if engine.swept.swap(true, Ordering::Relaxed) {
                start(self, i, backend, warm).await
            } else {
                // The sweep cannot touch the container being started (its owner is
                // alive), so both go at once.
                let (_, started) =
                    tokio::join!(backend.sweep(), start(self, i, Arc::clone(&backend), warm));
                started
            };
            match started {
                Ok(conn) => {
                    lock(&engine.placed).push(Arc::downgrade(&conn));
                    return Ok(conn);
                }
                Err(e @ (SandboxError::Settings(_) | SandboxError::Io { .. })) => return Err(e),
                Err(e) => {
                    if self.engines.len() == 1 {
                        return Err(e);
                    }
                    engine.mark_down(&e);
                    failure = Some(e);
                }
            }
        }
        Err(failure.unwrap_or_else(|| {
            SandboxError::Lost("no engine or runner is free to place the sandbox on".into())
        }))
    }

    /// Starts spares in the background until the pool (with those already starting)
    /// holds `pool_size`.
    fn refill(self: &Arc<Self>) {
        if self.settings.orchestrator == Orchestrator::Swarm {
            if !self.orchestrated.swap(true, Ordering::AcqRel) {
                let inner = Arc::clone(self);
                tokio::spawn(async move {
                    let Ok(backend) = inner.engines[0].backend().await else {
                        inner.orchestrated.store(false, Ordering::Release);
                        return;
                    };
                    backend.fill(&inner.spec(true)).await;
                });
            }
            return;
        }
        let want = self.settings.pool_size;
        loop {
            let have = lock(&self.spares).len() + self.filling.load(Ordering::Acquire);
            if have >= want {
                return;
            }
            self.filling.fetch_add(1, Ordering::AcqRel);
            let inner = Arc::clone(self);
            tokio::spawn(async move {
                match inner.place(true).await {
                    Ok(conn) => lock(&inner.spares).push(conn),
                    Err(e) => tracing::warn!("a spare sandbox container did not start: {e}"),
                }
                inner.filling.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }
}

/// The egress `bash`'s settings name (`[tools.bash.egress]`), if any: what the
/// session's container reaches through the host. A setting that cannot be used is
/// reported, and the container gets no egress.
fn egress_of(tools: &ToolConfig) -> Option<Arc<jianmu_egress::Egress>> {
    let settings = tools
        .raw_settings("bash")
        .and_then(|s| s.get("egress"))
        .cloned()?;
    let settings: jianmu_egress::EgressSettings = match serde_json::from_value(settings) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("[tools.bash.egress] is not usable in the Docker sandbox: {e}");
            return None;
        }
    };
    let door = tools.scope().get::<jianmu_egress::Door>();
    match jianmu_egress::Egress::new(door, &settings, &[]) {
        Ok(egress) => egress,
        Err(e) => {
            tracing::warn!("[tools.bash.egress] is not usable in the Docker sandbox: {e}");
            None
        }
    }
}

/// `tools` without the egress settings (credentials stay on the host).
fn without_egress(tools: &ToolConfig) -> ToolConfig {
    let mut tools = tools.clone();
    for tool in ["bash", "python_repl"] {
        if let Some(mut settings) = tools.raw_settings(tool).cloned()
            && let Some(map) = settings.as_object_mut()
            && map.remove("egress").is_some()
        {
            tools = tools.with_settings(tool, settings);
        }
    }
    tools
}

/// Creates, attaches and starts a container, and waits until its server is ready.
async fn start(
    inner: &Inner,
    engine: usize,
    backend: Arc<dyn Backend>,
    warm: bool,
) -> Result<Arc<Conn>, SandboxError> {
    let s = &inner.settings;
    let (id, input, output) = backend
        .create(&inner.spec(inner.engines[engine].copy))
        .await?;
    let conn = Conn::spawn(
        engine,
        Arc::clone(&backend),
        id.clone(),
        (input, output),
        s.memory_mib,
        Duration::from_secs_f64(s.cancel_grace_secs),
        inner.egress.clone(),
    );
    let egress = match &inner.egress {
        Some(egress) => Some(wire::EgressInit {
            ca: egress.ca_pem().map_err(|e| {
                SandboxError::Lost(format!(
                    "cannot make the session's certificate authority: {e}"
                ))
            })?,
        }),
        None => None,
    };
    // Written before the start: the pipe holds it, so the server finds its
    // settings as soon as it boots, while the engine is still answering.
    let ready = conn.send_init(&without_egress(&inner.tools), warm, egress);
    if let Err(e) = backend.start(&id).await {
        conn.remove().await;
        return Err(e);
    }
    if let Err(e) = conn.wait_ready(ready).await {
        conn.remove().await;
        return Err(SandboxError::Lost(e));
    }
    Ok(conn)
}

impl Runner for DockerSandbox {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        let name = call.tool.name();
        let conn = self
            .connection()
            .await
            .map_err(|e| ToolError::runner(name, e))?;
        let outcome = conn.call(name, call.args, call.cx).await;
        self.refill();
        match outcome {
            Outcome::Done { result, oom_kills } => {
                let result = wire::on_host(result);
                if oom_kills == 0 {
                    return result;
                }
                let note = format!(
                    "[the sandbox's memory limit of {} MiB was hit: the kernel killed {} \
                     process(es) for using too much memory]",
                    self.inner.settings.memory_mib, oom_kills
                );
                match result {
                    Ok(mut out) => {
                        out.text = format!("{}\n{note}", out.text);
                        Ok(out)
                    }
                    Err(e) => Err(ToolError::failed(format!(
                        "{}\n{note}",
                        jianmu_tool_core::error_chain(&e)
                    ))),
                }
            }
            Outcome::Lost(reason) => {
                // An engine that stops answering loses its containers: new
                // sessions go elsewhere for a while.
                if self.inner.engines.len() > 1 {
                    self.inner.engines[conn.engine()].check().await;
                }
                let mut slot = self.conn.lock().await;
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    *slot = None;
                }
                Err(ToolError::runner(name, SandboxError::Lost(reason)))
            }
        }
    }

    fn name(&self) -> &str {
        "docker"
    }

    async fn shutdown(&self) {
        DockerSandbox::shutdown(self).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspaces_that_would_cover_the_image_are_refused() {
        for ws in ["/", "/usr", "/etc", "/tmp"] {
            let err = DockerSandbox::new(ws, DockerSettings::default()).unwrap_err();
            assert!(err.to_string().contains("cannot be mounted"), "{ws}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        open_to_others(dir.path());
        assert!(DockerSandbox::new(dir.path(), DockerSettings::default()).is_ok());
        let root = DockerSettings {
            user: Some("0:0".into()),
            ..DockerSettings::default()
        };
        let err = DockerSandbox::new(dir.path(), root).unwrap_err();
        assert!(err.to_string().contains("never runs as root"), "{err}");
    }

    /// Lets the sandbox's default user (`nobody`) read `dir`, as a root-owned
    /// workspace must allow.
    fn open_to_others(dir: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_root_owned_workspace_nobody_can_read_is_refused_before_any_container() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let owner = std::fs::metadata(dir.path()).unwrap().uid();
        // No daemon is asked: the check happens before anything starts.
        let settings = DockerSettings {
            docker_host: Some("unix:///nonexistent/docker.sock".into()),
            ..DockerSettings::default()
        };
        let made = DockerSandbox::new(dir.path(), settings.clone());
        if owner == 0 {
            let err = made.unwrap_err().to_string();
            assert!(err.contains("belongs to root (mode 700)"), "{err}");
            assert!(err.contains("chown -R 65534:65534"), "{err}");
            // Readable by others: nobody enters it.
            open_to_others(dir.path());
            let sandbox = DockerSandbox::new(dir.path(), settings).unwrap();
            assert_eq!(sandbox.user(), "65534:65534");
        } else {
            // Anyone else's workspace is entered as its owner.
            assert_eq!(
                made.unwrap().user(),
                format!("{owner}:{}", gid_of(dir.path()))
            );
        }
    }

    fn gid_of(dir: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(dir).unwrap().gid()
    }
}
