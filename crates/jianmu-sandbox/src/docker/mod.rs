//! `DockerSandbox`: runs any tool inside a long-lived, hardened container.
//!
//! The container runs `jianmu serve` (see [`crate::serve`]) from an image built
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

mod conn;
pub mod image;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountTmpfsOptions, MountType,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use jianmu_tool_core::{CallContext, Runner, ToolConfig, ToolError, ToolHandle, ToolOutput};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{Mutex, OnceCell};

use conn::{Conn, Outcome};

/// The label on every sandbox container; its value names the owning process.
pub const LABEL: &str = "io.jianmu.sandbox.owner";

/// The image tag used unless [`DockerSettings::image`] says otherwise.
pub const DEFAULT_IMAGE: &str = concat!("jianmu-sandbox:", env!("CARGO_PKG_VERSION"));

/// Settings of [`DockerSandbox`] (`[execution.docker]` in `jianmu.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerSettings {
    /// The image, built by `jianmu sandbox build-image`.
    pub image: String,
    /// The daemon's address (`unix:///...`, `tcp://...`); default `DOCKER_HOST`, else
    /// the local socket.
    pub docker_host: Option<String>,
    /// Give the container a network (bridge). Off by default: network tools fail.
    pub network: bool,
    /// Memory limit in MiB; swap is not added on top.
    pub memory_mib: u64,
    /// CPU quota in CPUs (1.5 = one and a half cores).
    pub cpus: f64,
    /// Most processes and threads alive at once in the container.
    pub pids_limit: i64,
    /// Size of the tmpfs `/tmp`, in MiB.
    pub tmp_size_mib: u64,
    /// `uid:gid` to run as; default: the workspace's owner, or 65534 (nobody) when
    /// that is root. Root (0) is refused.
    pub user: Option<String>,
    /// How long a cancelled call may take to stop before the container is replaced.
    pub cancel_grace_secs: f64,
}

impl Default for DockerSettings {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            docker_host: None,
            network: false,
            memory_mib: 512,
            cpus: 1.0,
            pids_limit: 256,
            tmp_size_mib: 64,
            user: None,
            cancel_grace_secs: 5.0,
        }
    }
}

/// A [`Runner`] that runs tools in a hardened container; see the module docs.
#[derive(Clone)]
pub struct DockerSandbox {
    inner: Arc<Inner>,
}

struct Inner {
    settings: DockerSettings,
    workspace: PathBuf,
    user: String,
    tools: ToolConfig,
    docker: OnceCell<Docker>,
    conn: Mutex<Option<Arc<Conn>>>,
    swept: AtomicBool,
    owner: String,
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

/// Where the image keeps its own files; a workspace may not cover them.
const IMAGE_DIRS: &[&str] = &[
    "/bin",
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/local/bin",
    "/etc",
    "/tmp",
    "/proc",
    "/sys",
    "/dev",
];

impl DockerSandbox {
    /// A sandbox for `workspace` (an existing folder, mounted at the same path). No
    /// container starts until the first call.
    ///
    /// # Errors
    /// [`ToolError::Config`] for a workspace that is not a folder or would hide the
    /// image's own files, and for settings out of range.
    pub fn new(workspace: impl AsRef<Path>, settings: DockerSettings) -> Result<Self, ToolError> {
        let bad = |message: String| ToolError::Config {
            tool: "docker sandbox".into(),
            message,
        };
        let workspace = workspace.as_ref();
        let workspace = workspace.canonicalize().map_err(|e| {
            bad(format!(
                "workspace {} is not usable: {e}",
                workspace.display()
            ))
        })?;
        let meta = std::fs::metadata(&workspace)
            .map_err(|e| bad(format!("workspace {}: {e}", workspace.display())))?;
        if !meta.is_dir() {
            return Err(bad(format!(
                "workspace {} is not a folder",
                workspace.display()
            )));
        }
        for dir in IMAGE_DIRS {
            let dir = Path::new(dir);
            let inside_system = workspace.starts_with(dir) && !dir.starts_with("/tmp");
            if dir.starts_with(&workspace) || inside_system {
                return Err(bad(format!(
                    "workspace {} cannot be mounted in the sandbox: it would cover or sit \
                     inside the image's {}",
                    workspace.display(),
                    dir.display()
                )));
            }
        }
        if !(settings.cpus.is_finite() && settings.cpus > 0.0) {
            return Err(bad("cpus must be a positive number".into()));
        }
        if settings.memory_mib < 16 {
            return Err(bad("memory_mib must be at least 16".into()));
        }
        if settings.pids_limit < 8 {
            return Err(bad("pids_limit must be at least 8".into()));
        }
        if !(settings.cancel_grace_secs.is_finite() && settings.cancel_grace_secs > 0.0) {
            return Err(bad("cancel_grace_secs must be a positive number".into()));
        }
        let user = match &settings.user {
            Some(user) => {
                let uid = user.split(':').next().unwrap_or_default();
                if uid == "0" || uid == "root" || uid.is_empty() {
                    return Err(bad(format!(
                        "user `{user}` is refused: the sandbox never runs as root"
                    )));
                }
                user.clone()
            }
            None => {
                use std::os::unix::fs::MetadataExt as _;
                if meta.uid() == 0 {
                    "65534:65534".to_owned()
                } else {
                    format!("{}:{}", meta.uid(), meta.gid())
                }
            }
        };
        let tools = ToolConfig::new(&workspace);
        Ok(Self::from_parts(settings, workspace, user, tools))
    }

    fn from_parts(
        settings: DockerSettings,
        workspace: PathBuf,
        user: String,
        tools: ToolConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                workspace,
                user,
                tools,
                docker: OnceCell::new(),
                conn: Mutex::new(None),
                swept: AtomicBool::new(false),
                owner: owner_label(),
            }),
        }
    }

    /// The configuration the tools inside the container are built from (per-tool
    /// settings); its workspace is replaced by this sandbox's, the one mounted.
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
        let slot = self.inner.conn.lock().await;
        slot.as_ref()
            .filter(|c| !c.is_dead())
            .map(|c| c.id().to_owned())
    }

    /// Starts the container now instead of at the first call.
    ///
    /// # Errors
    /// [`ToolError::Runner`] when the daemon is unreachable or the container cannot
    /// start.
    pub async fn warm_up(&self) -> Result<(), ToolError> {
        self.connection()
            .await
            .map(drop)
            .map_err(|m| ToolError::runner("docker sandbox", m))
    }

    /// Stops and removes the container. The sandbox stays usable: the next call
    /// starts a new one.
    pub async fn shutdown(&self) {
        let conn = self.inner.conn.lock().await.take();
        if let Some(conn) = conn {
            conn.close(Duration::from_secs(5)).await;
        }
    }

    async fn docker(&self) -> Result<&Docker, String> {
        self.inner
            .docker
            .get_or_try_init(|| image::connect(self.inner.settings.docker_host.as_deref()))
            .await
    }

    /// The live connection, starting a container when there is none.
    async fn connection(&self) -> Result<Arc<Conn>, String> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.is_dead()
        {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let docker = self.docker().await?.clone();
        let conn = if self.inner.swept.swap(true, Ordering::Relaxed) {
            self.start(docker).await?
        } else {
            // The sweep cannot touch the container being started (its owner is
            // alive), so both go at once.
            let (_, conn) = tokio::join!(sweep(&docker), self.start(docker.clone()));
            conn?
        };
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    async fn start(&self, docker: Docker) -> Result<Arc<Conn>, String> {
        let s = &self.inner.settings;
        let created = docker
            .create_container(None, self.container_body())
            .await
            .map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => format!(
                    "sandbox image `{}` not found; build it with `jianmu sandbox build-image`",
                    s.image
                ),
                e => format!("cannot create the sandbox container: {e}"),
            })?;
        let id = created.id;
        let attached = docker
            .attach_container(
                &id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stdin(true)
                        .stdout(true)
                        .stderr(true)
                        .stream(true)
                        .build(),
                ),
            )
            .await;
        let attached = match attached {
            Ok(a) => a,
            Err(e) => {
                remove(&docker, &id).await;
                return Err(format!("cannot attach to the sandbox container: {e}"));
            }
        };
        let conn = Conn::spawn(
            docker.clone(),
            id.clone(),
            attached,
            s.memory_mib,
            Duration::from_secs_f64(s.cancel_grace_secs),
        );
        // Written before the start: the pipe holds it, so the runner finds its
        // settings as soon as it boots, while the daemon is still answering.
        let ready = conn.send_init(&self.inner.tools);
        if let Err(e) = docker.start_container(&id, None).await {
            conn.remove().await;
            return Err(format!("cannot start the sandbox container: {e}"));
        }
        if let Err(e) = conn.wait_ready(ready).await {
            conn.remove().await;
            return Err(e);
        }
        Ok(conn)
    }

    /// The body this sandbox creates its containers with: image, user, labels, mounts
    /// and every limit (benchmarks compare raw bollard calls with the same settings).
    pub fn container_body(&self) -> ContainerCreateBody {
        let s = &self.inner.settings;
        let ws = self.inner.workspace.to_string_lossy().into_owned();
        let memory = i64::try_from(s.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
        let tmp = i64::try_from(s.tmp_size_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
        let host = HostConfig {
            mounts: Some(vec![
                Mount {
                    typ: Some(MountType::TMPFS),
                    target: Some("/tmp".into()),
                    tmpfs_options: Some(MountTmpfsOptions {
                        size_bytes: Some(tmp),
                        mode: Some(0o1777),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Mount {
                    typ: Some(MountType::BIND),
                    source: Some(ws.clone()),
                    target: Some(ws.clone()),
                    read_only: Some(false),
                    bind_options: Some(MountBindOptions {
                        non_recursive: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            network_mode: Some(if s.network { "bridge" } else { "none" }.into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: Some(s.pids_limit),
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: Some((s.cpus * 1e9) as i64),
            init: Some(true),
            ipc_mode: Some("private".into()),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(s.image.clone()),
            user: Some(self.inner.user.clone()),
            working_dir: Some(ws),
            labels: Some(HashMap::from([(
                LABEL.to_owned(),
                self.inner.owner.clone(),
            )])),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(false),
            network_disabled: Some(!s.network),
            host_config: Some(host),
            ..Default::default()
        }
    }
}

impl Runner for DockerSandbox {
    async fn run(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        let name = tool.name();
        let conn = self
            .connection()
            .await
            .map_err(|m| ToolError::runner(name, m))?;
        match conn.call(name, args, cx).await {
            Outcome::Done { result, oom_kills } => {
                let result = result.into_result(name);
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
                let mut slot = self.inner.conn.lock().await;
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    *slot = None;
                }
                Err(ToolError::runner(name, reason))
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

/// `host:pid:start-time` of this process, so a later sweep can tell whether the
/// owner of a container is still alive.
fn owner_label() -> String {
    let pid = std::process::id();
    format!("{}:{pid}:{}", hostname(), start_time(pid).unwrap_or(0))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True when `owner` names a process of this host that is gone.
fn owner_is_gone(owner: &str) -> bool {
    let mut parts = owner.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    if host != hostname() {
        return false;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    start_time(pid) != Some(start)
}

/// Removes the sandbox containers left by processes of this host that are gone.
async fn sweep(docker: &Docker) {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(list) = docker.list_containers(Some(options)).await else {
        return;
    };
    for c in list {
        let owner = c.labels.as_ref().and_then(|l| l.get(LABEL));
        if let (Some(id), Some(owner)) = (c.id.as_deref(), owner)
            && owner_is_gone(owner)
        {
            tracing::info!(
                container = id,
                owner = owner.as_str(),
                "removing a stale sandbox"
            );
            remove(docker, id).await;
        }
    }
}

async fn remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    if let Err(e) = docker.remove_container(id, Some(options)).await {
        tracing::debug!(container = id, "cannot remove the sandbox container: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_of_this_process_is_alive_and_a_dead_pid_is_gone() {
        let me = owner_label();
        assert!(!owner_is_gone(&me));
        let host = hostname();
        // Same pid, other start time: the pid was reused.
        let reused = format!("{host}:{}:1", std::process::id());
        assert!(owner_is_gone(&reused));
        // Another host's containers are never ours to remove.
        assert!(!owner_is_gone("elsewhere.example:1:1"));
        assert!(!owner_is_gone("garbage"));
    }

    #[test]
    fn workspaces_that_would_cover_the_image_are_refused() {
        for ws in ["/", "/usr", "/etc", "/tmp"] {
            let err = DockerSandbox::new(ws, DockerSettings::default()).unwrap_err();
            assert!(err.to_string().contains("cannot be mounted"), "{ws}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(DockerSandbox::new(dir.path(), DockerSettings::default()).is_ok());
        let root = DockerSettings {
            user: Some("0:0".into()),
            ..DockerSettings::default()
        };
        let err = DockerSandbox::new(dir.path(), root).unwrap_err();
        assert!(err.to_string().contains("never runs as root"), "{err}");
    }
}
