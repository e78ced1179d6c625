//! Docker Swarm as the scheduler (`orchestrator = "swarm"`): the [`Backend`] whose
//! servers are Swarm tasks. A session's sandbox is a service of one replica, the pool
//! a replicated service whose running tasks sessions claim; Swarm's scheduler picks
//! the node, restarts what fails and keeps the pool's count. This process never
//! picks a node.
//!
//! The data path is the node engine's attach (and its archive API for the copied
//! workspace): `hosts` lists the engines of the nodes, and only nodes whose engine
//! is listed carry the placement label, so every task lands where it can be reached.
//! Whoever holds a manager's API can already run anything on every node, so reaching
//! the nodes' engines as well adds no trust, and the tasks need no listener, no port
//! and no network: they join `jianmu-closed`, a swarm-scoped bridge that is internal,
//! has no address on the node and forbids traffic between its containers, so a
//! command reaches its own loopback and nothing else (`network = true` leaves them on
//! the node's default bridge instead).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ConfigReference, Limit, Mount, MountType, NetworkAttachmentConfig, NetworkCreateRequest,
    NodeState, ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec,
    TaskSpecContainerSpec, TaskSpecContainerSpecPrivileges, TaskSpecPlacement, TaskSpecResources,
    TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{ListServicesOptionsBuilder, ListTasksOptionsBuilder};
use futures::StreamExt as _;
use tokio::io::AsyncWrite;

use super::backend::{Backend, DockerBackend, Ended, Input, Output, Spec};
use crate::{DockerSettings, LABEL, SandboxError, TlsFiles, lock};

/// The network sandboxes without `network` join.
const CLOSED: &str = "jianmu-closed";
/// Each node's configuration of [`CLOSED`].
const CLOSED_CONFIG: &str = "jianmu-closed-config";
/// The label on the services' containers saying which service they belong to.
const SERVICE_LABEL: &str = "io.jianmu.sandbox.service";
/// How long Swarm may take to run a task.
const START: Duration = Duration::from_secs(120);
/// How many times Swarm may fail to start a sandbox's task before the session gives up.
const REJECTIONS: usize = 5;
/// How long a question to the manager may take.
const MANAGER: Duration = Duration::from_secs(10);
/// How long a claimed pool task stays claimed whatever the manager lists.
const CLAIM_MEMORY: Duration = Duration::from_secs(60);

/// Each watched node's receiver, flipped when Swarm reports the node gone.
type Watchers = Arc<std::sync::Mutex<HashMap<String, tokio::sync::watch::Receiver<bool>>>>;

/// A task this process attached to.
struct Placed {
    node: String,
    /// Its task.
    task: String,
    /// The session's own service (removed with it); `None` for a pool task.
    service: Option<String>,
    /// The pool service a pool task belongs to.
    pool: Option<String>,
}

/// The swarm, through a manager and the engines of its nodes.
pub(crate) struct SwarmBackend {
    manager: Docker,
    /// The engines this process reaches, by node id.
    nodes: HashMap<String, Arc<DockerBackend>>,
    /// `node.labels.KEY == true` on exactly those nodes.
    placement: String,
    pool_size: usize,
    pool: tokio::sync::Mutex<Option<String>>,
    /// One watcher per node with sessions on it (see [`SwarmBackend::watch`]).
    watchers: Watchers,
    /// Pool services shut down while sessions still used some of their tasks:
    /// removed when the last of those ends.
    retiring: std::sync::Mutex<HashSet<String>>,
    placed: std::sync::Mutex<HashMap<String, Placed>>,
    /// Pool tasks taken by this process, and when. A task stays here while a session
    /// uses it, while Swarm still lists it as wanted running (so a container that
    /// outlived its session, a removal that failed, is never handed to another), and
    /// for a minute at least (so a list older than the claim cannot drop it).
    claimed: std::sync::Mutex<HashMap<String, std::time::Instant>>,
}

impl SwarmBackend {
    /// Connects to the engines of `settings`' `hosts` (those that do not answer are
    /// left out, and named in the log), finds a manager among them, prepares the
    /// closed network on each node and labels the nodes reached.
    pub(crate) async fn connect(settings: &DockerSettings) -> Result<Self, SandboxError> {
        let mut nodes = HashMap::new();
        let mut manager = None;
        let mut failed = None;
        for (address, tls) in settings.engines() {
            let reached = async {
                let (docker, node, control) = engine(address.as_deref(), tls.as_ref()).await?;
                closed_config(&docker).await?;
                Ok::<_, SandboxError>((docker, node, control))
            };
            match tokio::time::timeout(Duration::from_secs(10), reached).await {
                Ok(Ok((docker, node, control))) => {
                    if control && manager.is_none() {
                        manager = Some(docker.clone());
                    }
                    nodes.insert(node, Arc::new(DockerBackend { docker }));
                }
                Ok(Err(e @ SandboxError::Settings(_))) => return Err(e),
                outcome => {
                    let why = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => "no answer within 10 s".into(),
                    };
                    let at = address.as_deref().unwrap_or("the default engine");
                    tracing::warn!("swarm node engine {at} left out: {why}");
                    failed = Some(format!("{at}: {why}"));
                }
            }
        }
        let manager = manager.ok_or_else(|| match &failed {
            Some(why) => SandboxError::Lost(format!(
                "no manager of the swarm answers among `hosts` (last failure: {why})"
            )),
            None => SandboxError::Settings(
                "orchestrator = \"swarm\": none of `hosts` is a manager of its swarm (`docker \
                 swarm init` on one, `docker swarm join` on the others)"
                    .into(),
            ),
        })?;
        let mut ids: Vec<&String> = nodes.keys().collect();
        ids.sort();
        let key = format!(
            "io.jianmu.reach.{:016x}",
            fnv(ids.iter().flat_map(|id| id.bytes()))
        );
        for id in nodes.keys() {
            label_node(&manager, id, &key).await?;
        }
        closed_network(&manager).await?;
        Ok(Self {
            manager,
            nodes,
            placement: format!("node.labels.{key}==true"),
            pool_size: settings.pool_size,
            pool: tokio::sync::Mutex::new(None),
            retiring: std::sync::Mutex::default(),
            watchers: Watchers::default(),
            placed: std::sync::Mutex::default(),
            claimed: std::sync::Mutex::default(),
        })
    }

    /// The service spec of sandboxes (`replicas` of them).
    fn service(&self, spec: &Spec<'_>, name: String, replicas: i64) -> ServiceSpec {
        let s = spec.settings;
        let labels = HashMap::from([(LABEL.to_owned(), spec.owner.to_owned())]);
        let memory = i64::try_from(s.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
        let parent = spec.workspace.parent().unwrap_or(Path::new("/"));
        let container = TaskSpecContainerSpec {
            image: Some(s.image.clone()),
            labels: Some(HashMap::from([
                (LABEL.to_owned(), spec.owner.to_owned()),
                (SERVICE_LABEL.to_owned(), name.clone()),
            ])),
            dir: Some(spec.workspace.to_string_lossy().into_owned()),
            user: Some(spec.user.to_owned()),
            open_stdin: Some(true),
            read_only: Some(true),
            init: Some(true),
            capability_drop: Some(vec!["ALL".into()]),
            // Engines before API 1.46 ignore it; the server sets it on itself too.
            privileges: Some(TaskSpecContainerSpecPrivileges {
                no_new_privileges: Some(true),
                ..Default::default()
            }),
            stop_grace_period: Some(1_000_000_000),
            mounts: Some(vec![
                crate::container::tmp_mount(s),
                // The copied workspace's parent: a volume of the task's own.
                Mount {
                    typ: Some(MountType::VOLUME),
                    target: Some(parent.to_string_lossy().into_owned()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let task = TaskSpec {
            container_spec: Some(container),
            resources: Some(TaskSpecResources {
                limits: Some(Limit {
                    nano_cpus: Some((s.cpus * 1e9) as i64),
                    memory_bytes: Some(memory),
                    pids: Some(s.pids_limit),
                }),
                // Swarm places only where the memory is free; no swap on top
                // (engines before API 1.52 ignore it).
                reservations: Some(bollard::models::ResourceObject {
                    memory_bytes: Some(memory),
                    ..Default::default()
                }),
                swap_bytes: Some(0),
                ..Default::default()
            }),
            // A task whose node is lost runs again elsewhere (a session's own
            // service is removed when its connection breaks, so only placement
            // uses it); a pool task that ends is replaced at once.
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::ANY),
                delay: Some(0),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                constraints: Some(vec![self.placement.clone()]),
                ..Default::default()
            }),
            networks: (!s.network).then(|| {
                vec![NetworkAttachmentConfig {
                    target: Some(CLOSED.into()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        ServiceSpec {
            name: Some(name),
            labels: Some(labels),
            task_template: Some(task),
            mode: Some(ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated {
                    replicas: Some(replicas),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates a service; its id.
    async fn create_service(&self, spec: ServiceSpec) -> Result<String, SandboxError> {
        let image = spec
            .task_template
            .as_ref()
            .and_then(|t| t.container_spec.as_ref())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let made = self
            .manager
            .create_service(spec, None)
            .await
            .map_err(|e| SandboxError::engine("Swarm did not create the sandbox service", e))?;
        made.id.ok_or_else(|| {
            SandboxError::Lost(format!("Swarm created no service for image {image}"))
        })
    }

    /// The pool's service, made at the first need.
    async fn pool(&self, spec: &Spec<'_>) -> Result<Option<String>, SandboxError> {
        if self.pool_size == 0 {
            return Ok(None);
        }
        let mut pool = self.pool.lock().await;
        if pool.is_none() {
            let size = i64::try_from(self.pool_size).unwrap_or(64);
            let service = self.service(spec, service_name("pool"), size);
            *pool = Some(self.create_service(service).await?);
        }
        Ok(pool.clone())
    }

    /// Tasks of `service`; only those Swarm wants running with `wanted`.
    async fn tasks(
        &self,
        service: &str,
        wanted: bool,
    ) -> Result<Vec<bollard::models::Task>, SandboxError> {
        let mut filters = HashMap::from([("service", vec![service])]);
        if wanted {
            filters.insert("desired-state", vec!["running"]);
        }
        let options = ListTasksOptionsBuilder::default().filters(&filters).build();
        let listed = tokio::time::timeout(MANAGER, self.manager.list_tasks(Some(options))).await;
        match listed {
            Ok(Ok(tasks)) => Ok(tasks),
            Ok(Err(e)) => Err(SandboxError::engine(
                "cannot list the sandbox service's tasks",
                e,
            )),
            Err(_) => Err(SandboxError::Lost(
                "the swarm's manager did not answer within 10 s".into(),
            )),
        }
    }

    /// A running task of the pool nobody here claimed, claimed now; `None` when there
    /// is none (or the pool's service is gone: it is made again at the next need).
    async fn claim(&self, pool: &str) -> Option<(String, String, String)> {
        let tasks = match self.tasks(pool, true).await {
            Ok(tasks) => tasks,
            Err(e) => {
                tracing::debug!("the sandbox pool's tasks cannot be listed: {e}");
                if !self.service_exists(pool).await {
                    tracing::warn!("the sandbox pool's service is gone; it is made again");
                    let mut current = self.pool.lock().await;
                    if current.as_deref() == Some(pool) {
                        *current = None;
                    }
                }
                return None;
            }
        };
        let in_use: HashSet<String> = lock(&self.placed)
            .values()
            .map(|p| p.task.clone())
            .collect();
        let mut claimed = lock(&self.claimed);
        // Forget tasks Swarm no longer wants running (their containers are gone),
        // unless in use or claimed within the minute.
        claimed.retain(|id, at| {
            at.elapsed() < CLAIM_MEMORY
                || in_use.contains(id)
                || tasks.iter().any(|t| t.id.as_deref() == Some(id))
        });
        for task in &tasks {
            let Some((id, node, container)) = running(task) else {
                continue;
            };
            if self.nodes.contains_key(&node) && !claimed.contains_key(&id) {
                claimed.insert(id.clone(), std::time::Instant::now());
                return Some((id, node, container));
            }
        }
        None
    }

    /// Whether the manager knows `service` (true when it cannot say).
    async fn service_exists(&self, service: &str) -> bool {
        !matches!(
            tokio::time::timeout(MANAGER, self.manager.inspect_service(service, None)).await,
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            }))
        )
    }

    /// Waits until `service` has a running task; its id, node and container. Gives
    /// up when Swarm rejects it [`REJECTIONS`] times, or after [`START`].
    async fn wait_running(
        &self,
        service: &str,
        image: &str,
    ) -> Result<(String, String, String), SandboxError> {
        let deadline = tokio::time::Instant::now() + START;
        let mut pause = Duration::from_millis(15);
        // Tasks Swarm failed to start, by id, across polls (it keeps a few per slot).
        let mut refused: HashMap<String, (String, String)> = HashMap::new();
        loop {
            let tasks = self.tasks(service, false).await?;
            if let Some(found) = tasks.iter().find_map(running) {
                return Ok(found);
            }
            for t in &tasks {
                let (Some(id), Some(status)) = (&t.id, &t.status) else {
                    continue;
                };
                if let Some(err) = status.err.clone().filter(|e| !e.is_empty()) {
                    refused.insert(id.clone(), (t.node_id.clone().unwrap_or_default(), err));
                }
            }
            let timed_out = tokio::time::Instant::now() >= deadline;
            if let Some((node, err)) = refused.values().next().cloned()
                && (refused.len() >= REJECTIONS || timed_out)
            {
                let node = self.hostname(&node).await;
                if err.contains("No such image") {
                    return Err(SandboxError::Lost(format!(
                        "node {node} has no image {image}: build it on every node of the \
                         swarm (`jianmu sandbox build-image` against each node's engine)"
                    )));
                }
                return Err(SandboxError::Lost(format!(
                    "Swarm could not run the sandbox ({} tries; last on node {node}: {err})",
                    refused.len()
                )));
            }
            if timed_out {
                let state = tasks
                    .iter()
                    .filter_map(|t| t.status.as_ref()?.message.clone())
                    .next_back()
                    .unwrap_or_else(|| "no task yet".into());
                return Err(SandboxError::Lost(format!(
                    "Swarm did not run the sandbox within {} s (its task: {state}); are \
                     the nodes in `hosts` up, with memory free?",
                    START.as_secs()
                )));
            }
            // Swarm starts a task in about 0.4 s here: asked often until then, then
            // less and less.
            tokio::time::sleep(pause).await;
            if tokio::time::Instant::now() + START > deadline + Duration::from_secs(1) {
                pause = (pause * 2).min(Duration::from_millis(250));
            }
        }
    }

    fn node(&self, node: &str) -> Result<&Arc<DockerBackend>, SandboxError> {
        self.nodes.get(node).ok_or_else(|| {
            SandboxError::Lost(format!(
                "Swarm placed the sandbox on node {node}, which is not in `hosts`"
            ))
        })
    }

    /// The node engine of container `id`, and its node.
    fn of(&self, id: &str) -> Option<(Arc<DockerBackend>, String)> {
        let placed = lock(&self.placed);
        let node = &placed.get(id)?.node;
        Some((Arc::clone(self.nodes.get(node)?), node.clone()))
    }

    /// Attaches to `container`, then records it as placed (its node watched).
    async fn attach(
        &self,
        placed: Placed,
        container: String,
    ) -> Result<(String, Input, Output), SandboxError> {
        let engine = Arc::clone(self.node(&placed.node)?);
        let (input, output) = engine.attach(&container).await?;
        let output = Box::pin(output.take_until(self.watch(&placed.node)));
        lock(&self.placed).insert(container.clone(), placed);
        // A task's stdin stays open when the attach closes: the container is stopped
        // instead, as the server would stop at the end of its input.
        let input = Box::pin(StopOnClose {
            inner: input,
            engine: Some((engine, container.clone())),
        });
        Ok((container, input, output))
    }

    /// Resolves when Swarm reports node `id` down or disconnected twice in a row
    /// (checked every 2 s) or no longer knows it: a node cut off by the network ends
    /// its sessions' streams instead of leaving their calls waiting. One watcher per
    /// node serves all its sessions, and ends when none is left.
    fn watch(&self, id: &str) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = {
            let mut watchers = lock(&self.watchers);
            match watchers.get(id) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(false);
                    watchers.insert(id.to_owned(), rx.clone());
                    tokio::spawn(watch_node(
                        self.manager.clone(),
                        id.to_owned(),
                        tx,
                        Arc::clone(&self.watchers),
                    ));
                    rx
                }
            }
        };
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    }

    /// The name of node `id` as Swarm knows it.
    async fn hostname(&self, id: &str) -> String {
        match tokio::time::timeout(MANAGER, self.manager.inspect_node(id)).await {
            Ok(Ok(node)) => node
                .description
                .and_then(|d| d.hostname)
                .unwrap_or_else(|| id.to_owned()),
            _ => id.to_owned(),
        }
    }

    /// Removes container `id` from its node, with its volume; false when the node's
    /// engine did not do it.
    async fn remove_container(&self, node: &str, id: &str) -> bool {
        let Some(engine) = self.nodes.get(node) else {
            return false;
        };
        let removed = crate::container::remove(&engine.docker, id);
        matches!(tokio::time::timeout(MANAGER, removed).await, Ok(true))
    }

    /// Deletes a service (its tasks' containers go with it, on every node that answers).
    async fn delete_service(&self, service: &str) {
        if let Ok(Err(e)) =
            tokio::time::timeout(MANAGER, self.manager.delete_service(service)).await
        {
            tracing::debug!(service, "cannot remove the sandbox service: {e}");
        }
    }

    /// A pool task of this process no session uses any more: removed, and its pool
    /// with it when that pool was shut down and this was its last task in use.
    async fn release(&self, placed: &Placed, container: &str) {
        // Swarm runs the slot again; the task stays claimed until Swarm no longer
        // wants it running, so a container that outlived this removal is never
        // handed to the next session.
        if !self.remove_container(&placed.node, container).await {
            tracing::warn!(
                container,
                "a used pool task's container could not be removed"
            );
        }
        let Some(pool) = &placed.pool else {
            return;
        };
        let last = {
            let placed = lock(&self.placed);
            let in_use = placed.values().any(|p| p.pool.as_deref() == Some(pool));
            !in_use && lock(&self.retiring).remove(pool)
        };
        if last {
            self.delete_service(pool).await;
        }
    }
}

/// What a placement cut short (its caller gone while Swarm was still starting the
/// task, or before a claimed task was attached) would otherwise leave running: undone
/// when dropped armed.
struct Unplaced(Option<Undo>);

enum Undo {
    /// A session's own service, deleted.
    Service(Docker, String),
    /// A claimed pool task's container, removed (Swarm runs the slot again).
    Container(Arc<DockerBackend>, String),
}

impl Unplaced {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Unplaced {
    fn drop(&mut self) {
        let Some(undo) = self.0.take() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("a sandbox placement cut short could not be undone (no runtime)");
            return;
        };
        handle.spawn(async move {
            match undo {
                Undo::Service(manager, service) => {
                    let _ = manager.delete_service(&service).await;
                }
                Undo::Container(engine, id) => {
                    crate::container::remove(&engine.docker, &id).await;
                }
            }
        });
    }
}

/// Watches node `id` for [`SwarmBackend::watch`]: sets `down` when Swarm reports it
/// down twice in a row or forgets it, and ends then or once only `watchers`' own
/// receiver is left, taking its entry out.
async fn watch_node(
    manager: Docker,
    id: String,
    down: tokio::sync::watch::Sender<bool>,
    watchers: Watchers,
) {
    let mut strikes = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if down.receiver_count() > 1 {
            strikes = match node_state(&manager, &id).await {
                Some(Some(NodeState::DOWN | NodeState::DISCONNECTED)) => strikes + 1,
                // Removed from the swarm.
                None => 2,
                Some(_) => 0,
            };
            if strikes < 2 {
                continue;
            }
            let _ = down.send(true);
        }
        let mut watchers = lock(&watchers);
        if watchers
            .get(&id)
            .is_some_and(|rx| rx.same_channel(&down.subscribe()))
        {
            // A session placed meanwhile holds a receiver (the map's is the other):
            // keep watching for it.
            if down.receiver_count() > 1 && !*down.borrow() {
                continue;
            }
            watchers.remove(&id);
        }
        return;
    }
}

/// The state Swarm reports for node `id`: `None` when it does not know the node,
/// `Some(None)` when the manager cannot be asked.
async fn node_state(manager: &Docker, id: &str) -> Option<Option<NodeState>> {
    match tokio::time::timeout(MANAGER, manager.inspect_node(id)).await {
        Ok(Ok(node)) => Some(node.status.and_then(|s| s.state)),
        Ok(Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        })) => None,
        _ => Some(None),
    }
}

#[async_trait::async_trait]
impl Backend for SwarmBackend {
    async fn create(&self, spec: &Spec<'_>) -> Result<(String, Input, Output), SandboxError> {
        if let Some(pool) = self.pool(spec).await? {
            while let Some((task, node, container)) = self.claim(&pool).await {
                // Claimed: from here the task's container is removed unless a
                // session gets it (Swarm runs the slot again; it stays claimed).
                let mut undo = Unplaced(
                    self.nodes
                        .get(&node)
                        .map(|engine| Undo::Container(Arc::clone(engine), container.clone())),
                );
                let placed = Placed {
                    node,
                    task,
                    service: None,
                    pool: Some(pool.clone()),
                };
                match self.attach(placed, container).await {
                    Ok(attached) => {
                        undo.disarm();
                        return Ok(attached);
                    }
                    Err(e) => tracing::debug!("a pool task could not be attached: {e}"),
                }
            }
        }
        let image = &spec.settings.image;
        let name = service_name("session");
        // Armed by name before the service exists: a caller gone meanwhile leaves none.
        let mut undo = Unplaced(Some(Undo::Service(self.manager.clone(), name.clone())));
        let service = self.create_service(self.service(spec, name, 1)).await?;
        let (task, node, container) = self.wait_running(&service, image).await?;
        let placed = Placed {
            node,
            task,
            service: Some(service),
            pool: None,
        };
        let attached = self.attach(placed, container).await?;
        undo.disarm();
        Ok(attached)
    }

    async fn start(&self, _id: &str) -> Result<(), SandboxError> {
        Ok(())
    }

    async fn kill(&self, id: &str) {
        if let Some((engine, _)) = self.of(id) {
            engine.kill(id).await;
        }
    }

    async fn remove(&self, id: &str) {
        let placed = lock(&self.placed).remove(id);
        let Some(placed) = placed else {
            return;
        };
        match &placed.service {
            Some(service) => {
                self.delete_service(service).await;
                self.remove_container(&placed.node, id).await;
            }
            None => self.release(&placed, id).await,
        }
    }

    async fn ended(&self, id: &str) -> Ended {
        let Some((engine, node)) = self.of(id) else {
            return Ended::Unknown("the sandbox's task is not known here".into());
        };
        let gone = "what its commands changed since the workspace last came back is gone";
        if !engine.ping().await {
            let name = self.hostname(&node).await;
            return Ended::Lost(format!("its node {name} does not answer; {gone}"));
        }
        if let Some(Some(NodeState::DOWN | NodeState::DISCONNECTED)) | None =
            node_state(&self.manager, &node).await
        {
            let name = self.hostname(&node).await;
            return Ended::Lost(format!("Swarm reports its node {name} down; {gone}"));
        }
        engine.ended(id).await
    }

    async fn sweep(&self) {
        let filters = HashMap::from([("label", vec![LABEL])]);
        let options = ListServicesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let Ok(list) = self.manager.list_services(Some(options)).await else {
            return;
        };
        for service in list {
            let owner = service
                .spec
                .as_ref()
                .and_then(|s| s.labels.as_ref())
                .and_then(|l| l.get(LABEL));
            if let (Some(id), Some(owner)) = (service.id.as_deref(), owner)
                && crate::container::owner_is_gone(owner)
            {
                tracing::info!(
                    service = id,
                    owner = owner.as_str(),
                    "removing a stale sandbox service"
                );
                let _ = self.manager.delete_service(id).await;
            }
        }
    }

    async fn ping(&self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(2), self.manager.ping()).await,
            Ok(Ok(_))
        )
    }

    async fn fill(&self, spec: &Spec<'_>) -> bool {
        if let Err(e) = self.pool(spec).await {
            tracing::warn!("the sandbox pool's service was not made: {e}");
        }
        true
    }

    async fn shutdown(&self) {
        let pool = self.pool.lock().await.take();
        let Some(pool) = pool else {
            return;
        };
        // Sessions still using its tasks keep them: the pool goes with the last.
        let in_use = {
            let placed = lock(&self.placed);
            let in_use = placed.values().any(|p| p.pool.as_deref() == Some(&pool));
            if in_use {
                lock(&self.retiring).insert(pool.clone());
            }
            in_use
        };
        if !in_use {
            self.delete_service(&pool).await;
        }
    }

    async fn upload(&self, id: &str, dir: &Path, tar: Vec<u8>) -> Result<(), SandboxError> {
        let (engine, _) = self
            .of(id)
            .ok_or_else(|| SandboxError::Lost("the sandbox's task is gone".into()))?;
        engine.upload(id, dir, tar).await
    }

    async fn download(
        &self,
        id: &str,
        path: &Path,
        sink: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<(), SandboxError> {
        let (engine, _) = self
            .of(id)
            .ok_or_else(|| SandboxError::Lost("the sandbox's task is gone".into()))?;
        engine.download(id, path, sink).await
    }
}

/// A running task's id, node and container.
fn running(task: &bollard::models::Task) -> Option<(String, String, String)> {
    let status = task.status.as_ref()?;
    if status.state != Some(TaskState::RUNNING) {
        return None;
    }
    let container = status.container_status.as_ref()?.container_id.clone()?;
    Some((task.id.clone()?, task.node_id.clone()?, container))
}

/// The engine at `address`, its swarm node id and whether it is a manager.
async fn engine(
    address: Option<&str>,
    tls: Option<&TlsFiles>,
) -> Result<(Docker, String, bool), SandboxError> {
    let docker = crate::image::connect_with(address, tls).await?;
    let where_ = address.unwrap_or("the default engine");
    let info = docker
        .info()
        .await
        .map_err(|e| SandboxError::engine(format!("cannot ask {where_} about its swarm"), e))?;
    let swarm = info.swarm.unwrap_or_default();
    let node = swarm.node_id.filter(|n| !n.is_empty()).ok_or_else(|| {
        SandboxError::Settings(format!(
            "orchestrator = \"swarm\": the engine at {where_} is not in a swarm"
        ))
    })?;
    Ok((docker, node, swarm.control_available == Some(true)))
}

/// Makes the node's configuration of the closed network, unless it has one.
async fn closed_config(docker: &Docker) -> Result<(), SandboxError> {
    if docker.inspect_network(CLOSED_CONFIG, None).await.is_ok() {
        return Ok(());
    }
    let options = HashMap::from([
        (
            "com.docker.network.bridge.name".to_owned(),
            "jianmu-closed0".to_owned(),
        ),
        (
            "com.docker.network.bridge.enable_icc".to_owned(),
            "false".to_owned(),
        ),
        (
            "com.docker.network.bridge.inhibit_ipv4".to_owned(),
            "true".to_owned(),
        ),
    ]);
    let request = NetworkCreateRequest {
        name: CLOSED_CONFIG.into(),
        config_only: Some(true),
        options: Some(options),
        ..Default::default()
    };
    match docker.create_network(request).await {
        Ok(_) => Ok(()),
        // Made by another process meanwhile.
        Err(_) if docker.inspect_network(CLOSED_CONFIG, None).await.is_ok() => Ok(()),
        Err(e) => Err(SandboxError::engine(
            "cannot make the sandboxes' closed network",
            e,
        )),
    }
}

/// Makes the swarm's closed network, unless it has one.
async fn closed_network(manager: &Docker) -> Result<(), SandboxError> {
    if manager.inspect_network(CLOSED, None).await.is_ok() {
        return Ok(());
    }
    let request = NetworkCreateRequest {
        name: CLOSED.into(),
        driver: Some("bridge".into()),
        scope: Some("swarm".into()),
        internal: Some(true),
        config_from: Some(ConfigReference {
            network: Some(CLOSED_CONFIG.into()),
        }),
        ..Default::default()
    };
    match manager.create_network(request).await {
        Ok(_) => Ok(()),
        Err(_) if manager.inspect_network(CLOSED, None).await.is_ok() => Ok(()),
        Err(e) => Err(SandboxError::engine(
            "cannot make the sandboxes' closed network",
            e,
        )),
    }
}

/// Puts `key=true` on node `id` unless it is there.
async fn label_node(manager: &Docker, id: &str, key: &str) -> Result<(), SandboxError> {
    // Another process may label the node meanwhile (its version moves on): retried.
    let mut tries = 0;
    loop {
        let failed = |e| SandboxError::engine(format!("cannot label the swarm's node {id}"), e);
        let node = manager.inspect_node(id).await.map_err(failed)?;
        let mut spec = node.spec.unwrap_or_default();
        let labels = spec.labels.get_or_insert_with(HashMap::new);
        if labels.get(key).map(String::as_str) == Some("true") {
            return Ok(());
        }
        labels.insert(key.to_owned(), "true".to_owned());
        let version = node.version.and_then(|v| v.index).unwrap_or(0);
        let options = bollard::query_parameters::UpdateNodeOptionsBuilder::default()
            .version(i64::try_from(version).unwrap_or(i64::MAX))
            .build();
        match manager.update_node(id, spec, options).await {
            Ok(()) => return Ok(()),
            Err(e) if tries >= 4 => return Err(failed(e)),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
        }
    }
}

/// `jianmu-KIND-PID-RANDOM`: unique across hosts and restarts.
fn service_name(kind: &str) -> String {
    let random = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap_or_default();
    let random: String = random
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    format!("jianmu-{kind}-{}-{random}", std::process::id())
}

/// FNV-1a over `bytes`.
fn fnv(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The attach's stdin; closing or dropping it stops the task's container.
struct StopOnClose {
    inner: Input,
    engine: Option<(Arc<DockerBackend>, String)>,
}

impl StopOnClose {
    fn stop(&mut self) {
        if let Some((engine, id)) = self.engine.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(async move { engine.kill(&id).await });
        }
    }
}

impl Drop for StopOnClose {
    fn drop(&mut self) {
        self.stop();
    }
}

impl AsyncWrite for StopOnClose {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.stop();
        self.inner.as_mut().poll_shutdown(cx)
    }
}
