//! `DockerSettings` (`[execution.docker]`), and the checks a workspace and the
//! settings pass before any container starts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::SandboxError;

/// The image tag used unless [`DockerSettings::image`] says otherwise.
pub const DEFAULT_IMAGE: &str = concat!("jianmu-sandbox:", env!("CARGO_PKG_VERSION"));

/// Settings of [`DockerSandbox`](super::DockerSandbox) (`[execution.docker]` in `jianmu.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerSettings {
    /// The image, built by `jianmu sandbox build-image`.
    pub image: String,
    /// The daemon's address (`unix:///...`, `tcp://...`); default `DOCKER_HOST`, else
    /// the local socket.
    pub docker_host: Option<String>,
    /// Mutual TLS to a `tcp://` engine (`[execution.docker.tls]`): the CA that signed
    /// the engine's certificate, and this client's certificate and key.
    pub tls: Option<TlsFiles>,
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
    /// The OCI runtime to run the container under, by the name the engine registers
    /// it as (`runsc` for gVisor, which gives the sandbox its own kernel); default the
    /// engine's (runc).
    pub runtime: Option<String>,
    /// Spare containers kept started and ready, so that a new session's first call
    /// costs a warm call (see `DockerSandbox::sibling`); 0 keeps none.
    pub pool_size: usize,
    /// Several engines to place sessions on (instead of `docker_host` and `tls`):
    /// each session's container starts on the healthy engine running the fewest of
    /// this sandbox's containers; an engine that fails is left alone for
    /// [`ENGINE_RETRY`] and new sessions go to the others.
    pub hosts: Vec<EngineAddress>,
    /// How the workspace reaches the container: `auto` (the default: `mount` on an
    /// engine reached through a local socket, `copy` on one reached over the
    /// network), `mount` (a bind mount; the engine must see this machine's files) or
    /// `copy` (shipped in through the engine API when the container starts, brought
    /// back by `DockerSandbox::pull` and when the session ends).
    pub workspace_mode: WorkspaceMode,
    /// The most content copied either way, in MiB (`workspace_mode = "copy"`).
    pub copy_limit_mib: u64,
    /// The most files and folders copied either way (`workspace_mode = "copy"`).
    pub copy_limit_files: usize,
    /// Who places sandboxes: `none` (the default: this process, over `hosts`) or
    /// `swarm` (Docker Swarm's scheduler: each session's sandbox is a one-replica
    /// service and the pool a replicated one; `hosts` lists the engines of the
    /// swarm's nodes, a manager among them; the workspace is copied).
    pub orchestrator: Orchestrator,
}

/// [`DockerSettings::orchestrator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Orchestrator {
    /// This process places each container on the least loaded engine of `hosts`.
    #[default]
    None,
    /// Docker Swarm places them (see docs/scale-out.md).
    Swarm,
}

/// [`DockerSettings::workspace_mode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    /// `Mount` for a `unix://` engine (or the default local socket), `Copy` for a
    /// `tcp://`, `http(s)://` or `ssh://` one.
    #[default]
    Auto,
    /// Bind-mounted at the same path.
    Mount,
    /// Copied in at the start, copied back on request and at the end.
    Copy,
}

/// How long an engine that failed is passed over when placing sessions.
pub const ENGINE_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// One entry of [`DockerSettings::hosts`]: an address (`unix:///run/docker.sock`,
/// `tcp://10.0.0.5:2375`), or a table with the mutual TLS files of a `tcp://` engine
/// or of a runner (`jianmu://HOST:PORT`: `jianmu serve --listen`, already running
/// somewhere, one session at a time, its workspace copied).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum EngineAddress {
    /// `"unix:///..."`, `"tcp://..."`.
    Url(String),
    /// `{ url = "tcp://H:P", ca = "...", cert = "...", key = "..." }`.
    Tls(TlsEngine),
}

/// An engine reached over mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsEngine {
    /// `tcp://HOST:PORT`, or `jianmu://HOST:PORT` for a runner.
    pub url: String,
    /// The CA that signed the engine's (or runner's) certificate.
    pub ca: PathBuf,
    /// This client's certificate (empty with `ca_key`).
    #[serde(default)]
    pub cert: PathBuf,
    /// This client's private key (empty with `ca_key`).
    #[serde(default)]
    pub key: PathBuf,
    /// For a runner: the key of the authority `ca` names (`ca-key.pem` of `jianmu
    /// sandbox tls init`). Each connection of a session then shows a client
    /// certificate minted from it, named for the session (valid until the start of
    /// the day after tomorrow, UTC), instead of `cert` and `key`.
    #[serde(default)]
    pub ca_key: Option<PathBuf>,
}

impl EngineAddress {
    /// The key of the authority certificates are minted from, per session (a
    /// runner's [`TlsEngine::ca_key`]).
    pub fn ca_key(&self) -> Option<&Path> {
        match self {
            EngineAddress::Tls(t) => t.ca_key.as_deref(),
            EngineAddress::Url(_) => None,
        }
    }

    /// The address and TLS files.
    pub fn parts(&self) -> (String, Option<TlsFiles>) {
        match self {
            EngineAddress::Url(url) => (url.clone(), None),
            EngineAddress::Tls(t) => (
                t.url.clone(),
                Some(TlsFiles {
                    ca: t.ca.clone(),
                    cert: t.cert.clone(),
                    key: t.key.clone(),
                }),
            ),
        }
    }
}

impl Default for DockerSettings {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            docker_host: None,
            tls: None,
            network: false,
            memory_mib: 512,
            cpus: 1.0,
            pids_limit: 256,
            tmp_size_mib: 64,
            user: None,
            cancel_grace_secs: 5.0,
            runtime: None,
            pool_size: 0,
            hosts: Vec::new(),
            workspace_mode: WorkspaceMode::Auto,
            copy_limit_mib: 256,
            copy_limit_files: 200_000,
            orchestrator: Orchestrator::None,
        }
    }
}

/// The PEM files of mutual TLS with an engine.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate authority the engine's certificate must chain to.
    pub ca: PathBuf,
    /// This client's certificate, which the engine checks (`--tlsverify`).
    pub cert: PathBuf,
    /// This client's private key.
    pub key: PathBuf,
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

impl DockerSettings {
    /// [`DockerSettings::copy_limit_mib`] in bytes, and
    /// [`DockerSettings::copy_limit_files`].
    pub(crate) fn copy_limit(&self) -> super::copy::Limits {
        super::copy::Limits {
            bytes: self.copy_limit_mib.saturating_mul(1024 * 1024),
            entries: self.copy_limit_files,
        }
    }

    /// Whether the workspace is copied (not mounted) for the engine at `address`
    /// (`None`: `DOCKER_HOST`, else the local socket).
    pub fn copies_to(&self, address: Option<&str>) -> bool {
        if self.orchestrator == Orchestrator::Swarm {
            return true;
        }
        match self.workspace_mode {
            WorkspaceMode::Mount => false,
            WorkspaceMode::Copy => true,
            WorkspaceMode::Auto => address
                .map(str::to_owned)
                .or_else(|| std::env::var("DOCKER_HOST").ok())
                .is_some_and(|a| !a.starts_with("unix://")),
        }
    }

    /// The engines to use: `hosts`, else the one of `docker_host` and `tls` (`None`:
    /// `DOCKER_HOST`, else the local socket).
    pub fn engines(&self) -> Vec<(Option<String>, Option<TlsFiles>)> {
        if self.hosts.is_empty() {
            return vec![(self.docker_host.clone(), self.tls.clone())];
        }
        self.hosts
            .iter()
            .map(|h| {
                let (url, tls) = h.parts();
                (Some(url), tls)
            })
            .collect()
    }

    /// What Swarm cannot do: choose an OCI runtime per service, mount this machine's
    /// folder on another node, or use a runner.
    fn check_swarm(&self) -> Result<(), SandboxError> {
        let bad = |why: &str| {
            Err(SandboxError::Settings(format!(
                "orchestrator = \"swarm\": {why}"
            )))
        };
        if self.runtime.is_some() {
            return bad(
                "Swarm services cannot choose an OCI runtime; leave `runtime` out and set \
                 `default-runtime` in each node's daemon.json",
            );
        }
        if self.workspace_mode == WorkspaceMode::Mount {
            return bad(
                "the workspace is copied to the node Swarm picks; use workspace_mode = \"copy\" or \"auto\"",
            );
        }
        if self.engines().iter().any(|(url, _)| {
            url.as_deref()
                .is_some_and(|u| u.starts_with(crate::remote::SCHEME))
        }) {
            return bad("`hosts` lists the engines of the swarm's nodes, not runners");
        }
        Ok(())
    }

    /// The canonical workspace and the `uid:gid` to run as, once both are checked.
    ///
    /// # Errors
    /// [`SandboxError::Settings`] for a workspace that is not a folder or would hide
    /// the image's own files, settings out of range, and a root user.
    pub(crate) fn check(&self, workspace: &Path) -> Result<(PathBuf, String), SandboxError> {
        let settings = self;
        let bad = SandboxError::Settings;
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
        let copies = settings
            .engines()
            .iter()
            .any(|(address, _)| settings.copies_to(address.as_deref()));
        if copies {
            // The copy lives in a volume on the workspace's parent.
            let parent = workspace.parent().unwrap_or(Path::new("/"));
            let covers = |dir: &str| Path::new(dir).starts_with(parent);
            if parent == Path::new("/") || IMAGE_DIRS.iter().any(|d| covers(d)) {
                return Err(bad(format!(
                    "workspace_mode = \"copy\" needs the workspace inside a folder of its own \
                     (its parent, {}, would cover the image's files); move it one level down",
                    parent.display()
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
        if settings.pool_size > 64 {
            return Err(bad("pool_size must be at most 64".into()));
        }
        if !settings.hosts.is_empty() && (settings.docker_host.is_some() || settings.tls.is_some())
        {
            return Err(bad(
                "set either hosts or docker_host (with tls), not both".into()
            ));
        }
        if !(1..=16 * 1024).contains(&settings.copy_limit_mib) {
            return Err(bad("copy_limit_mib must be between 1 and 16384".into()));
        }
        if !(1..=10_000_000).contains(&settings.copy_limit_files) {
            return Err(bad("copy_limit_files must be between 1 and 10000000".into()));
        }
        if settings.hosts.len() > 64 {
            return Err(bad("hosts may list at most 64 engines".into()));
        }
        for host in &settings.hosts {
            let (url, tls) = host.parts();
            let runner = url.starts_with(crate::remote::SCHEME);
            if let Some(t) = &tls {
                match (host.ca_key().is_some(), runner) {
                    (true, false) => {
                        return Err(bad(format!(
                            "{url}: `ca_key` is for runners (jianmu://) only; an engine \
                             takes `cert` and `key`"
                        )));
                    }
                    (false, _) if t.cert.as_os_str().is_empty() || t.key.as_os_str().is_empty() => {
                        return Err(bad(format!(
                            "{url}: give `cert` and `key`{}",
                            if runner {
                                ", or `ca_key` to mint a certificate per session"
                            } else {
                                ""
                            }
                        )));
                    }
                    _ => {}
                }
            }
            if runner {
                if settings.workspace_mode == WorkspaceMode::Mount {
                    return Err(bad(format!(
                        "{url} is a runner, which cannot mount the workspace: use \
                         workspace_mode = \"copy\" (or \"auto\")"
                    )));
                }
                if tls.is_none() {
                    return Err(bad(format!(
                        "{url} is a runner, reached over mutual TLS only: give its table \
                         `ca`, `cert` and `key`"
                    )));
                }
            }
        }
        if settings.orchestrator == Orchestrator::Swarm {
            settings.check_swarm()?;
        }
        if let Some(runtime) = &settings.runtime
            && (runtime.is_empty()
                || runtime.len() > 64
                || !runtime
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)))
        {
            return Err(bad(format!(
                "runtime `{}` is not a runtime name (letters, digits, `.`, `_`, `-`)",
                jianmu_tool_core::shorten(runtime, 80)
            )));
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
                use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
                if meta.uid() == 0 {
                    // The sandbox never runs as root, so a root-owned workspace is
                    // entered as `nobody`, through the permission bits for others.
                    let mode = meta.permissions().mode();
                    if mode & 0o005 != 0o005 {
                        return Err(bad(format!(
                            "workspace {ws} belongs to root (mode {mode:o}) and the sandbox \
                             never runs as root: its default user, 65534 (nobody), cannot \
                             read it. Give the workspace to that user \
                             (`chown -R 65534:65534 {ws}`), or set `user = \"UID:GID\"` in \
                             [execution.docker] to a non-root owner of it",
                            ws = workspace.display(),
                            mode = mode & 0o7777,
                        )));
                    }
                    "65534:65534".to_owned()
                } else {
                    format!("{}:{}", meta.uid(), meta.gid())
                }
            }
        };
        Ok((workspace, user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_copies_only_to_engines_reached_over_the_network() {
        let auto = DockerSettings::default();
        assert!(!auto.copies_to(Some("unix:///var/run/docker.sock")));
        assert!(auto.copies_to(Some("tcp://10.0.0.5:2376")));
        assert!(auto.copies_to(Some("ssh://builder@10.0.0.5")));
        let mount = DockerSettings {
            workspace_mode: WorkspaceMode::Mount,
            ..DockerSettings::default()
        };
        assert!(!mount.copies_to(Some("tcp://10.0.0.5:2376")));
        let copy = DockerSettings {
            workspace_mode: WorkspaceMode::Copy,
            ..DockerSettings::default()
        };
        assert!(copy.copies_to(Some("unix:///var/run/docker.sock")));
    }

    #[test]
    fn swarm_refuses_what_its_services_cannot_do_and_always_copies() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("ws");
        std::fs::create_dir(&dir).unwrap();
        let swarm = DockerSettings {
            orchestrator: Orchestrator::Swarm,
            user: Some("1000:1000".into()),
            ..DockerSettings::default()
        };
        assert!(swarm.copies_to(Some("unix:///var/run/docker.sock")));
        swarm.check(&dir).unwrap();
        let refused = |settings: DockerSettings, says: &str| {
            let err = settings.check(&dir).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        };
        refused(
            DockerSettings {
                runtime: Some("runsc".into()),
                ..swarm.clone()
            },
            "default-runtime",
        );
        refused(
            DockerSettings {
                workspace_mode: WorkspaceMode::Mount,
                ..swarm.clone()
            },
            "copied to the node",
        );
        refused(
            DockerSettings {
                hosts: vec![EngineAddress::Tls(TlsEngine {
                    url: "jianmu://10.0.0.5:7000".into(),
                    ca: "ca.pem".into(),
                    cert: "cert.pem".into(),
                    key: "key.pem".into(),
                    ca_key: None,
                })],
                ..swarm
            },
            "not runners",
        );
    }

    #[test]
    fn a_runner_takes_cert_and_key_or_the_authority_key_and_an_engine_never_the_key() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("ws");
        std::fs::create_dir(&dir).unwrap();
        let entry = |url: &str, cert: &str, ca_key: Option<&str>| DockerSettings {
            user: Some("1000:1000".into()),
            hosts: vec![EngineAddress::Tls(TlsEngine {
                url: url.into(),
                ca: "ca.pem".into(),
                cert: cert.into(),
                key: cert.replace("cert", "key").into(),
                ca_key: ca_key.map(Into::into),
            })],
            ..DockerSettings::default()
        };
        entry("jianmu://10.0.0.5:7000", "", Some("ca-key.pem"))
            .check(&dir)
            .unwrap();
        entry("jianmu://10.0.0.5:7000", "cert.pem", None)
            .check(&dir)
            .unwrap();
        let err = entry("jianmu://10.0.0.5:7000", "", None)
            .check(&dir)
            .unwrap_err();
        assert!(err.to_string().contains("or `ca_key`"), "{err}");
        let err = entry("tcp://10.0.0.5:2376", "cert.pem", Some("ca-key.pem"))
            .check(&dir)
            .unwrap_err();
        assert!(err.to_string().contains("for runners"), "{err}");
    }
}
