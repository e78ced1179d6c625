//! Where the calls of an HTTP request run: the state scopes of `jianmu mcp --http`.
//!
//! - A protocol session (a 2025-x client's `initialize`, then `Mcp-Session-Id`) gets a
//!   runtime session of its own, as on stdio: its interpreters, shell sessions, jobs
//!   and private network last as long as it does. It is bound to the principal that
//!   opened it: another principal's requests with its id get 404, as an unknown one.
//! - A request that stands alone (revision 2026-07-28 removed protocol sessions) runs
//!   in its principal's stateless scope: one runtime session per principal, opened
//!   on first use and closed after `session_idle_secs` without a request. There, a
//!   tool keeps state only under the handles calls name (`bash` and `python_repl`'s
//!   `session`, a job's id): `python_repl` without `session` runs in a fresh
//!   interpreter, so two conversations of one principal never share unnamed state.
//!   Background jobs are the principal's: `bash_jobs` lists them all.
//!
//! Principals never share a scope, so one cannot read, stop or guess another's
//! handles. Each principal has its own limits (`[mcp.http.principal]`,
//! `[mcp.http.principals.NAME]`: open protocol sessions, and tool settings such as
//! `bash`'s `max_jobs`), and with `principal_workspaces` a folder of its own.
//!
//! The MCP service asks for a server without saying for which request; the request's
//! [`Arrival`] (task-local, set by the HTTP handler around the service) says who sent
//! it and whether it opens a protocol session.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use jianmu_runtime::{Opening, Runtime, Session};
use serde_json::Value;

use super::principals::Principal;
use super::{Catalog, Listing, Server};
use crate::config::PrincipalSettings;

tokio::task_local! {
    /// The request the MCP service is handling on this task.
    pub(crate) static ARRIVAL: Arrival;
}

/// The context of one HTTP request through the MCP service: who sent it, what it
/// opens, and what the server factory did for it. The handler puts it in the
/// request's extensions (the tool call's handler reads the principal there) and on
/// the task ([`ARRIVAL`]) for the factory.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub(crate) principal: Principal,
    /// An `initialize`: it opens a protocol session.
    pub(crate) opens: bool,
    /// What the request opened or was refused, for the handler to finish with.
    pub(crate) outcome: Arc<Mutex<Outcome>>,
}

/// What the service's server factory did for one request.
#[derive(Debug, Default)]
pub(crate) enum Outcome {
    #[default]
    Nothing,
    /// A protocol session opened; the handler binds its id to the principal.
    Opened(Arc<Held>),
    /// A session or scope could not be opened (a limit): the message for the 503.
    Refused(String),
}

/// The state scopes of one HTTP server.
pub(crate) struct Scopes {
    runtime: Runtime,
    catalog: Catalog,
    /// `principal_workspaces`.
    workspaces: Option<PathBuf>,
    /// `[mcp.http.principal]`.
    defaults: PrincipalSettings,
    /// `[mcp.http.principals.NAME]`, each over the defaults.
    each: HashMap<String, PrincipalSettings>,
    /// How long a stateless scope lives without a request.
    idle: Duration,
    /// `suspend_dir`: idle stateless scopes are suspended there, not closed.
    suspend_dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each principal's stateless scope, its `tools/list`, and when a request last
    /// used it.
    stateless: HashMap<Arc<str>, (Arc<Session>, Listing, Instant)>,
    /// Protocol sessions open per principal.
    open: HashMap<Arc<str>, usize>,
    /// Each protocol session's principal, by session id.
    owners: HashMap<String, Arc<str>>,
    /// Principals whose idle scope is being suspended: their requests wait.
    suspending: std::collections::HashSet<Arc<str>>,
}

/// What a protocol session's server holds beyond its session: its place in the
/// counts and its binding, given back when the last server clone is dropped.
#[derive(Debug)]
pub(crate) struct Held {
    scopes: Weak<Scopes>,
    principal: Arc<str>,
    /// Set once the service named the session.
    id: Mutex<Option<String>>,
}

impl Held {
    /// Binds the session's id to its principal.
    pub(crate) fn bind(&self, id: &str) {
        let Some(scopes) = self.scopes.upgrade() else {
            return;
        };
        *self.id.lock().unwrap_or_else(PoisonError::into_inner) = Some(id.to_owned());
        scopes
            .lock()
            .owners
            .insert(id.to_owned(), Arc::clone(&self.principal));
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(scopes) = self.scopes.upgrade() else {
            return;
        };
        let metrics = &scopes.catalog.metrics;
        metrics.sessions_open.dec();
        metrics.principal_sessions(&self.principal).dec();
        let id = self
            .id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut state = scopes.lock();
        if let Some(id) = id {
            state.owners.remove(&id);
        }
        if let Some(n) = state.open.get_mut(&self.principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.open.remove(&self.principal);
            }
        }
    }
}

/// Suspends `session` (a principal's idle scope) to `file`; closes it if that fails.
async fn suspend(session: &Session, file: &std::path::Path, principal: &str) {
    match session.suspend(file).await {
        Ok(done) => tracing::info!(%principal, "{done}"),
        Err(e) => {
            tracing::warn!(%principal, %e, "an idle scope was closed, not suspended");
            session.close().await;
        }
    }
}

/// The suspension file of `principal`'s scope in `dir` (its name in hex: any name is a
/// file name).
fn suspension(dir: &std::path::Path, principal: &str) -> PathBuf {
    let hex: String = principal.bytes().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("scope-{hex}.json"))
}

impl Scopes {
    pub(crate) fn new(
        runtime: Runtime,
        catalog: Catalog,
        limits: &crate::config::HttpLimits,
        workspaces: Option<PathBuf>,
    ) -> Arc<Self> {
        let scopes = Arc::new(Self {
            runtime,
            catalog,
            workspaces,
            each: limits
                .principals
                .iter()
                .map(|(name, own)| (name.clone(), own.over(&limits.principal)))
                .collect(),
            defaults: limits.principal.clone(),
            idle: Duration::from_secs(limits.session_idle_secs),
            suspend_dir: limits.suspend_dir.clone().filter(|dir| {
                let made = std::os::unix::fs::DirBuilderExt::mode(
                    std::fs::DirBuilder::new().recursive(true),
                    0o700,
                )
                .create(dir);
                if let Err(e) = &made {
                    tracing::warn!(%e, dir = %dir.display(), "idle scopes will be closed, not suspended");
                }
                made.is_ok()
            }),
            state: Mutex::default(),
        });
        scopes.expire_idle();
        scopes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn settings_of(&self, principal: &str) -> &PrincipalSettings {
        self.each.get(principal).unwrap_or(&self.defaults)
    }

    /// How a session of `principal` is opened: its folder, its tool settings, and
    /// for a stateless scope, state kept only under handles.
    fn opening(&self, principal: &str, stateless: bool) -> Opening {
        let settings = self.settings_of(principal);
        let mut opening = Opening::new();
        if let Some(root) = &self.workspaces
            && settings.shared_workspace != Some(true)
        {
            opening = opening.in_folder(root.join(principal));
        }
        if !settings.isolation.is_empty() {
            for tool in jianmu_runtime::ISOLATED_TOOLS {
                opening = opening.with_setting(
                    tool,
                    "isolation",
                    Value::Object(settings.isolation.clone()),
                );
            }
        }
        if !settings.egress.is_empty() {
            let tools = &self.runtime.settings().tools;
            for tool in jianmu_runtime::EGRESS_TOOLS {
                let mut egress = tools
                    .raw_settings(tool)
                    .and_then(|s| s.get("egress"))
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                egress.extend(settings.egress.clone());
                opening = opening.with_setting(tool, "egress", Value::Object(egress));
            }
        }
        opening = opening
            .for_principal(principal)
            .with_policy(settings.policy.clone());
        for (tool, keys) in &settings.tools {
            for (key, value) in keys {
                opening = opening.with_setting(tool, key, value.clone());
            }
        }
        if stateless {
            opening = opening.with_setting(
                "python_repl",
                "without_session",
                Value::String("fresh".into()),
            );
        }
        opening
    }

    /// The server for the request on this task (see [`ARRIVAL`]).
    pub(crate) fn server(self: &Arc<Self>) -> std::io::Result<Server> {
        // The handler sets it around every use of the service; without it no one is
        // known to be asking.
        let arrival = ARRIVAL
            .try_with(Clone::clone)
            .map_err(|_| std::io::Error::other("a server was asked for outside a request"))?;
        if arrival.opens {
            self.open_protocol(&arrival)
        } else {
            self.stateless(&arrival)
        }
    }

    fn refuse(arrival: &Arrival, why: String) -> std::io::Error {
        *arrival
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Outcome::Refused(why.clone());
        std::io::Error::other(why)
    }

    /// A new protocol session of the arrival's principal, within its limit.
    fn open_protocol(self: &Arc<Self>, arrival: &Arrival) -> std::io::Result<Server> {
        let principal = &arrival.principal.0;
        let max = self.settings_of(principal).max_protocol_sessions;
        {
            let mut state = self.lock();
            let open = state.open.entry(Arc::clone(principal)).or_default();
            if max.is_some_and(|max| *open >= max) {
                let max = max.unwrap_or_default();
                return Err(Self::refuse(
                    arrival,
                    format!(
                        "the principal `{principal}` has its limit of {max} open sessions; close one or retry later"
                    ),
                ));
            }
            *open += 1;
        }
        let held = Arc::new(Held {
            scopes: Arc::downgrade(self),
            principal: Arc::clone(principal),
            id: Mutex::new(None),
        });
        let metrics = &self.catalog.metrics;
        metrics.sessions_open.inc();
        metrics.sessions_total.inc();
        metrics.principal_sessions(principal).inc();
        // From here, dropping `held` gives the counts back.
        let session = match self.runtime.open_with(self.opening(principal, false)) {
            Ok(session) => session,
            Err(e) => {
                let why = jianmu_tool_core::error_chain(&e);
                drop(held);
                return Err(Self::refuse(arrival, why));
            }
        };
        *arrival
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Outcome::Opened(Arc::clone(&held));
        Ok(Server::session(
            self.catalog.clone(),
            Arc::new(session),
            Some(held),
            Listing::default(),
        ))
    }

    /// The principal's stateless scope, opened on first use.
    fn stateless(&self, arrival: &Arrival) -> std::io::Result<Server> {
        let name = &arrival.principal.0;
        let mut state = self.lock();
        if state.suspending.contains(name) {
            return Err(Self::refuse(
                arrival,
                "this principal's idle scope is being suspended; retry in a moment".into(),
            ));
        }
        if let Some((session, listing, used)) = state.stateless.get_mut(name)
            && !session.is_closed()
        {
            *used = Instant::now();
            return Ok(Server::session(
                self.catalog.clone(),
                Arc::clone(session),
                None,
                Arc::clone(listing),
            )
            .stateless());
        }
        let resumed = self
            .resume(name)
            .map_err(|why| Self::refuse(arrival, why))?;
        let session = Arc::new(match resumed {
            Some(session) => session,
            None => self
                .runtime
                .open_with(self.opening(name, true))
                .map_err(|e| Self::refuse(arrival, jianmu_tool_core::error_chain(&e)))?,
        });
        let listing = Listing::default();
        state.stateless.insert(
            Arc::clone(name),
            (Arc::clone(&session), Arc::clone(&listing), Instant::now()),
        );
        Ok(Server::session(self.catalog.clone(), session, None, listing).stateless())
    }

    /// Whether `principal` may use the protocol session `id`: not when another
    /// principal opened it.
    pub(crate) fn may_use(&self, id: &str, principal: &Principal) -> bool {
        self.lock()
            .owners
            .get(id)
            .is_none_or(|owner| **owner == *principal.0)
    }

    /// Closes stateless scopes no request has used for `idle` and no call holds,
    /// every quarter of `idle` (1 s to 60 s), for as long as the scopes exist. A scope
    /// taken out here is its last holder: dropping it closes it in the background,
    /// where the runtime's shutdown waits for it. With `suspend_dir`, it is suspended
    /// there instead (on a task the runtime's shutdown waits for), and its principal's
    /// requests wait until the file is written.
    fn expire_idle(self: &Arc<Self>) {
        let idle = self.idle;
        let every = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let weak = Arc::downgrade(self);
        jianmu_tool_core::spawn_periodic(Arc::downgrade(self), every, move |scopes: &Self| {
            let mut state = scopes.lock();
            let expired: Vec<(Arc<str>, Arc<Session>)> = state
                .stateless
                .extract_if(|_, (session, _, used)| {
                    used.elapsed() >= idle && Arc::strong_count(session) == 1
                })
                .map(|(name, (session, _, _))| (name, session))
                .collect();
            let Some(dir) = &scopes.suspend_dir else {
                drop(state);
                // Dropped outside the lock.
                drop(expired);
                return;
            };
            for (name, session) in expired {
                state.suspending.insert(Arc::clone(&name));
                let file = suspension(dir, &name);
                let weak = weak.clone();
                scopes.runtime.spawn_tracked(async move {
                    suspend(&session, &file, &name).await;
                    if let Some(scopes) = weak.upgrade() {
                        scopes.lock().suspending.remove(&name);
                    }
                });
            }
        });
    }

    /// The principal's scope resumed from its suspension file, which is used up:
    /// `Ok(None)` when there is none, or when it cannot be resumed as written (it is
    /// removed, and the scope opens afresh); `Err` when resuming failed for a reason
    /// that may pass (the file stays for the next request).
    fn resume(&self, principal: &str) -> Result<Option<Session>, String> {
        let Some(dir) = &self.suspend_dir else {
            return Ok(None);
        };
        let file = suspension(dir, principal);
        if !file.exists() {
            return Ok(None);
        }
        let remove = || {
            if let Err(e) = std::fs::remove_file(&file) {
                tracing::warn!(%e, file = %file.display(), "a used suspension file was not removed");
            }
        };
        match self
            .runtime
            .resume_with(&file, self.opening(principal, true))
        {
            Ok((session, report)) => {
                remove();
                tracing::info!(%principal, "{report}");
                Ok(Some(session))
            }
            Err(e @ jianmu_runtime::SessionError::Suspension { .. }) => {
                remove();
                tracing::warn!(%principal, %e, "a suspended scope cannot be resumed; opening a new one");
                Ok(None)
            }
            Err(e) => Err(format!(
                "this principal's suspended scope could not be resumed yet: {}",
                jianmu_tool_core::error_chain(&e)
            )),
        }
    }

    /// Closes every stateless scope, or with `suspend_dir` suspends it, so that a
    /// restarted server resumes it (the server is stopping).
    pub(crate) async fn close_all(&self) {
        let all: Vec<(Arc<str>, Arc<Session>)> = self
            .lock()
            .stateless
            .drain()
            .map(|(name, (session, _, _))| (name, session))
            .collect();
        for (name, session) in all {
            match &self.suspend_dir {
                Some(dir) => suspend(&session, &suspension(dir, &name), &name).await,
                None => {
                    session.close().await;
                }
            }
        }
    }
}
