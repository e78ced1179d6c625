//! `Settings`: the flags over `jianmu.toml`, lowered once into the finished values a
//! command runs with, and into the settings its sessions are opened from.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use jianmu_runtime::{Backend, Policy, Session, SessionSettings};
use jianmu_tool_core::ToolConfig;

use crate::args::Cli;
use crate::config::{Config, SandboxKind};

/// The default per-call time limit.
const DEFAULT_TIMEOUT_SECS: f64 = 120.0;

/// Everything a command needs, settled: flags win over the file, the file over the
/// defaults.
#[derive(Debug)]
pub(crate) struct Settings {
    /// What tools are built from: workspace, allowed hosts, `[tools.NAME]`.
    pub(crate) tools: ToolConfig,
    sandbox: SandboxKind,
    timeout: Duration,
    policy: Policy,
    audit_log: Option<PathBuf>,
    /// Files no command may see: the settings file.
    hidden: Vec<PathBuf>,
    #[cfg(feature = "checkpoint")]
    checkpoints: jianmu_runtime::checkpoint::Config,
    /// `[execution.docker]`.
    #[cfg(feature = "docker")]
    pub(crate) docker: jianmu_runtime::DockerSettings,
    /// `[mcp.http]`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) mcp_http: crate::config::HttpLimits,
    /// `[mcp] defer`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    mcp_defer: Vec<String>,
    /// `[mcp] skills`: whether skills are served.
    #[cfg(feature = "mcp")]
    mcp_skills: bool,
}

impl Settings {
    /// Reads `--config` (else `./jianmu.toml`) and lays the flags over it.
    ///
    /// # Errors
    /// An unreadable or invalid file, a workspace that is not a folder, a time limit
    /// that is not a positive number of seconds.
    pub(crate) fn from_args(cli: &Cli) -> anyhow::Result<Self> {
        let config = Config::load(cli.config.as_deref())?;
        let workspace = match cli.workspace.clone().or(config.workspace) {
            Some(dir) => dir,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workspace = workspace.canonicalize().with_context(|| {
            format!(
                "workspace {} is not an existing directory",
                workspace.display()
            )
        })?;
        if !workspace.is_dir() {
            bail!("workspace {} is not a directory", workspace.display());
        }
        let mut tools = config
            .tools
            .into_iter()
            .fold(ToolConfig::new(workspace), |tools, (name, settings)| {
                tools.with_settings(name, settings)
            })
            .with_allow_hosts(cli.allow_host.iter().cloned());
        if let Some(max_chars) = config.outputs.max_chars {
            tools = jianmu_runtime::with_output_budget(tools, max_chars);
        }
        if !config.isolation.is_empty() {
            tools = jianmu_runtime::with_isolation_defaults(tools, &config.isolation);
        }
        jianmu_egress::Policy::new(&jianmu_egress::EgressSettings {
            allow: cli.egress.clone(),
            ..Default::default()
        })
        .map_err(|e| anyhow!("--egress: {e}"))?;
        tools = jianmu_runtime::with_egress_defaults(tools, &config.egress, &cli.egress);
        if let Some(folder) = config.outputs.folder {
            let plain = std::path::Path::new(&folder)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if folder.is_empty() || !plain {
                bail!("[outputs] folder `{folder}` must be a relative path inside the workspace");
            }
            tools = tools.with_saved_outputs(jianmu_tool_core::SavedOutputs {
                folder: Some(folder),
                keep: false,
            });
        }

        let timeout = cli
            .timeout
            .or(config.execution.timeout_secs)
            .unwrap_or(DEFAULT_TIMEOUT_SECS);
        let timeout = Duration::try_from_secs_f64(timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| anyhow!("--timeout must be a positive number of seconds"))?;
        let mut policy = config.policy;
        policy.allow.extend(cli.allow.iter().cloned());
        policy.deny.extend(cli.deny.iter().cloned());
        policy.ask.extend(cli.ask.iter().cloned());
        policy.read_only |= cli.read_only;
        Ok(Self {
            tools,
            sandbox: cli
                .sandbox
                .or(config.execution.tool_runner)
                .unwrap_or(SandboxKind::Local),
            timeout,
            policy,
            audit_log: cli.audit_log.clone().or(config.execution.audit_log),
            hidden: config.path.into_iter().collect(),
            #[cfg(feature = "checkpoint")]
            checkpoints: match config.checkpoints {
                Some(table) => serde_json::from_value(table).context("in [checkpoints]")?,
                None => Default::default(),
            },
            #[cfg(feature = "docker")]
            docker: config.execution.docker,
            mcp_http: config.mcp.http,
            mcp_defer: config.mcp.defer,
            #[cfg(feature = "mcp")]
            mcp_skills: config.mcp.skills,
        })
    }

    /// What sessions are opened from: the tools' configuration, the sandbox, the
    /// time limit, the policy and the audit log.
    ///
    /// # Errors
    /// A sandbox that is not compiled into this build.
    pub(crate) fn session(&self) -> anyhow::Result<SessionSettings> {
        let mut session = SessionSettings::new(self.tools.clone());
        session.backend = match self.sandbox {
            SandboxKind::Local => Backend::Local,
            #[cfg(feature = "docker")]
            SandboxKind::Docker => Backend::Docker(Box::new(self.docker.clone())),
            #[cfg(not(feature = "docker"))]
            SandboxKind::Docker => {
                bail!("sandbox `docker` is not compiled into this build of jianmu")
            }
        };
        session.timeout = Some(self.timeout);
        session.policy = self.policy.clone();
        session.audit_log = self.audit_log.clone();
        session.hidden.clone_from(&self.hidden);
        #[cfg(feature = "checkpoint")]
        session.checkpoints.clone_from(&self.checkpoints);
        Ok(session)
    }

    /// The settings of `jianmu mcp`: every read numbered unless the configuration says
    /// otherwise, since clients edit by the line numbers they read.
    #[cfg(feature = "mcp")]
    #[must_use]
    pub(crate) fn for_mcp(mut self) -> Self {
        self.tools = self.tools.with_default_setting(
            "read_file",
            "line_numbers",
            serde_json::Value::Bool(true),
        );
        self
    }

    /// `[mcp] defer`, with each built-in tool's feature as its group, so that `lsp`
    /// defers the language-server tools; and `[mcp] skills`.
    #[cfg(feature = "mcp")]
    pub(crate) fn offer(&self) -> jianmu_mcp::Offer {
        jianmu_mcp::Offer {
            deferral: crate::render::deferral(&self.mcp_defer),
            skills: self.mcp_skills,
        }
    }

    /// What no command may see: the settings file and the audit log.
    pub(crate) fn hidden_paths(&self) -> Vec<PathBuf> {
        self.hidden
            .iter()
            .chain(&self.audit_log)
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect()
    }

    /// Whether a server readies its sandbox before the first call: the Docker sandbox
    /// with a warm pool (`pool_size` ≥ 1).
    #[cfg(feature = "mcp")]
    pub(crate) fn warms_up(&self) -> bool {
        #[cfg(feature = "docker")]
        {
            self.sandbox == SandboxKind::Docker && self.docker.pool_size > 0
        }
        #[cfg(not(feature = "docker"))]
        {
            false
        }
    }

    /// The one session of a `jianmu call` or a `jianmu mcp` on stdio. Call it inside
    /// the async runtime (the Docker sandbox starts tasks).
    ///
    /// # Errors
    /// A sandbox that cannot be set up (bad settings, not compiled in), an audit log
    /// that cannot be opened.
    pub(crate) fn open(&self) -> anyhow::Result<Session> {
        Ok(Session::open(self.session()?)?)
    }
}

/// Closes `session`. What did not come back from a copied workspace (or was not
/// copied in) is written to stderr; when a change was dropped, the message is
/// returned.
pub(crate) async fn close(session: &Session) -> Result<(), String> {
    let closed = session.close().await;
    if !closed.is_complete() {
        eprintln!("jianmu: {closed}");
    }
    match closed.dropped() {
        0 => Ok(()),
        n => Err(format!(
            "{n} of the sandbox's changes did not come back here (listed above)"
        )),
    }
}
