//! `Settings`: the flags over `jianmu.toml`, lowered once into the finished values a
//! command runs with: the tools' configuration and the runner's.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::{AuditLog, LocalSandbox, Policy, ToolRunner};
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
    /// `[execution.docker]`.
    #[cfg(feature = "docker")]
    pub(crate) docker: jianmu_runtime::DockerSettings,
    /// `[mcp.http]`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) mcp_http: crate::config::HttpLimits,
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
        let tools = config
            .tools
            .into_iter()
            .fold(ToolConfig::new(workspace), |tools, (name, settings)| {
                tools.with_settings(name, settings)
            })
            .with_allow_hosts(cli.allow_host.iter().cloned());

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
            #[cfg(feature = "docker")]
            docker: config.execution.docker,
            mcp_http: config.mcp.http,
        })
    }

    /// The built-in tools, built from these settings.
    pub(crate) fn provider(&self) -> BuiltinToolProvider {
        BuiltinToolProvider::new(self.tools.clone())
    }

    /// The runner calls go through: the sandbox, with the time limit, the policy and
    /// the audit log. Call it inside the runtime (the Docker sandbox spawns tasks).
    ///
    /// # Errors
    /// A sandbox that cannot be set up (bad settings, not compiled in), an audit log
    /// that cannot be opened.
    pub(crate) fn runner(&self) -> anyhow::Result<Closing> {
        #[cfg(feature = "docker")]
        let mut docker = None;
        let runner = match self.sandbox {
            SandboxKind::Local => ToolRunner::dynamic(LocalSandbox),
            #[cfg(feature = "docker")]
            SandboxKind::Docker => {
                let sandbox = jianmu_runtime::DockerSandbox::new(
                    self.tools.workspace(),
                    self.docker.clone(),
                )?
                .with_tools(self.tools.clone());
                docker = Some(sandbox.clone());
                ToolRunner::dynamic(sandbox)
            }
            #[cfg(not(feature = "docker"))]
            SandboxKind::Docker => {
                bail!("sandbox `docker` is not compiled into this build of jianmu")
            }
        };
        let runner = self.layers(runner);
        self.audit(&runner)?;
        Ok(Closing {
            runner,
            #[cfg(feature = "docker")]
            docker,
        })
    }

    /// Attaches the audit log, if one is set, to `runner`'s event bus.
    ///
    /// # Errors
    /// An audit log that cannot be opened.
    pub(crate) fn audit(&self, runner: &ToolRunner) -> anyhow::Result<()> {
        if let Some(path) = &self.audit_log {
            AuditLog::open(path)
                .with_context(|| format!("cannot open the audit log {}", path.display()))?
                .attach(runner.events());
        }
        Ok(())
    }

    /// The time limit and policy laid over `runner` (the audit log is attached to
    /// its event bus by [`Settings::runner`]).
    pub(crate) fn layers(&self, runner: ToolRunner) -> ToolRunner {
        runner
            .with_timeout(self.timeout)
            .with_policy(self.policy.clone())
    }

    /// Where calls run.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn sandbox(&self) -> SandboxKind {
        self.sandbox
    }
}

/// The runner of a `jianmu call` or a `jianmu mcp` on stdio, and what its end reports.
pub(crate) struct Closing {
    pub(crate) runner: ToolRunner,
    #[cfg(feature = "docker")]
    docker: Option<jianmu_runtime::DockerSandbox>,
}

impl Closing {
    /// Shuts the runner down. With the Docker sandbox (the runner's innermost part,
    /// so shutting it down is the runner's shutdown), a copied workspace comes back
    /// first: anything that did not (or was not copied in) is written to stderr, and
    /// when a change was dropped the message is returned.
    pub(crate) async fn close(self) -> Result<(), String> {
        #[cfg(feature = "docker")]
        if let Some(docker) = self.docker {
            let pulled = docker.shutdown().await;
            if !pulled.is_complete() {
                eprintln!("jianmu: {pulled}");
            }
            if pulled.dropped() > 0 {
                return Err(format!(
                    "{} of the sandbox's changes did not come back here (listed above)",
                    pulled.dropped()
                ));
            }
            return Ok(());
        }
        self.runner.shutdown().await;
        Ok(())
    }
}
