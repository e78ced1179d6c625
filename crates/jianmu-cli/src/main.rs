//! The `jianmu` command: list, describe and call the compiled-in tools.
//!
//! Exit codes: 0 success; 1 the tool reported an error (bad arguments, refused input,
//! timeout, runner failure); 2 a usage error (bad flags, unknown tool, bad config).

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::{Parser, Subcommand};
use jianmu_provider::BuiltinToolProvider;
use jianmu_sandbox::ToolRunner;
use jianmu_tool_core::{SchemaFormat, ToolConfig, ToolError, ToolHandle, ToolProvider, ToolSpec};
use serde_json::Value;

mod config;
#[cfg(feature = "mcp")]
mod mcp;

use config::{Config, SandboxKind};

#[derive(Debug, Parser)]
#[command(
    name = "jianmu",
    version,
    about = "Fast, confined built-in tools for LLM agents"
)]
struct Cli {
    /// Settings file (TOML); `./jianmu.toml` is read if present.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Workspace root every path is confined to [default: the current directory].
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Where calls run [default: local, or `[execution] tool_runner`].
    #[arg(long, global = true, value_enum)]
    sandbox: Option<SandboxKind>,
    /// Per-call time limit in seconds [default: 120, or `[execution] timeout_secs`].
    #[arg(long, global = true, value_name = "SECS")]
    timeout: Option<f64>,
    /// Allow only these tools or effect tags (repeatable; adds to `[policy] allow`).
    #[arg(long, global = true, value_name = "TOOL_OR_EFFECT")]
    allow: Vec<String>,
    /// Deny these tools or effect tags (repeatable; adds to `[policy] deny`).
    #[arg(long, global = true, value_name = "TOOL_OR_EFFECT")]
    deny: Vec<String>,
    /// Deny writes, process and code execution, and network access.
    #[arg(long, global = true)]
    read_only: bool,
    /// Let the network tools reach HOST although the SSRF guard would refuse it
    /// (repeatable; adds to `allow_hosts` of `[tools.http_request]` and
    /// `[tools.duckduckgo_search]`).
    #[arg(long, global = true, value_name = "HOST")]
    allow_host: Vec<String>,
    /// Append a JSON line per finished call to FILE [default: `[execution] audit_log`].
    #[arg(long, global = true, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every compiled-in tool: name, effect tags, parallel-safe, description.
    Tools {
        /// Print the full specs as JSON.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// With --json: the shape to print (jianmu, openai, openai-strict, anthropic,
        /// gemini, mcp).
        #[arg(long, requires = "json", default_value = "jianmu")]
        format: SchemaFormat,
        /// Print the reference page `docs/tools.md` is made from.
        #[arg(long)]
        markdown: bool,
    },
    /// Print one tool's spec as JSON.
    Schema {
        /// Tool name or alias.
        name: String,
        /// The shape to print (jianmu, openai, openai-strict, anthropic, gemini, mcp).
        #[arg(long, default_value = "jianmu")]
        format: SchemaFormat,
    },
    /// Serve every compiled-in tool over MCP on stdio.
    #[cfg(feature = "mcp")]
    Mcp,
    /// Run calls sent as JSON lines on stdin (the runner inside a sandbox container).
    #[command(hide = true)]
    Serve,
    /// Manage the Docker sandbox.
    #[cfg(feature = "docker")]
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// Call a tool and print its output.
    Call {
        /// Tool name or alias.
        name: String,
        /// Arguments as JSON (`-` reads them from stdin). A bare-string tool takes a
        /// JSON string: '"2+2"'.
        #[arg(default_value = "{}")]
        args: String,
    },
}

/// `jianmu sandbox ...`.
#[cfg(feature = "docker")]
#[derive(Debug, Subcommand)]
enum SandboxCommand {
    /// Build the sandbox image locally (no registry): this `jianmu` binary, the
    /// libraries it links and a static busybox, `FROM scratch`.
    BuildImage {
        /// The tag [default: `[execution.docker] image`, else jianmu-sandbox:VERSION].
        #[arg(long)]
        tag: Option<String>,
        /// The static busybox to copy in.
        #[arg(long, default_value = "/bin/busybox")]
        busybox: PathBuf,
        /// The runner binary [default: this executable].
        #[arg(long)]
        runner: Option<PathBuf>,
        /// The Python to copy in, with its standard library, for `python_repl`
        /// [default: /usr/bin/python3 when it exists].
        #[arg(long, conflicts_with = "no_python")]
        python: Option<PathBuf>,
        /// Leave Python out (`python_repl` then fails inside the sandbox).
        #[arg(long)]
        no_python: bool,
        /// Print the generated Dockerfile too.
        #[arg(long)]
        verbose: bool,
    },
}

/// Why the command failed, and so its exit code.
enum Failure {
    Tool(ToolError),
    Usage(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Usage(e)
    }
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Tool(e)) => {
            eprintln!("Error: {}", chain(&e));
            ExitCode::from(1)
        }
        Err(Failure::Usage(e)) => {
            eprintln!("jianmu: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing() {
    // Quiet unless asked: stdout belongs to tool output, logs go to stderr.
    if let Ok(filter) = std::env::var("JIANMU_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

pub(crate) use jianmu_tool_core::error_chain as chain;

fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Serve = cli.command {
        // Everything comes from the host: no jianmu.toml, no flags.
        return serve();
    }
    let config = Config::load(cli.config.as_deref())?;
    let workspace = match cli.workspace.or(config.workspace.clone()) {
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
        return Err(anyhow!("workspace {} is not a directory", workspace.display()).into());
    }
    let mut tools = config.tools.clone();
    for tool in ["http_request", "duckduckgo_search"] {
        if cli.allow_host.is_empty() {
            break;
        }
        let entry = tools
            .entry(tool.to_owned())
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(table) = entry.as_object_mut() else {
            return Err(anyhow!("[tools.{tool}] must be a table").into());
        };
        let hosts = table
            .entry("allow_hosts")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = hosts.as_array_mut() else {
            return Err(anyhow!("[tools.{tool}] allow_hosts must be a list").into());
        };
        list.extend(cli.allow_host.iter().map(|h| Value::String(h.clone())));
    }
    let provider = BuiltinToolProvider::new(tool_config(workspace.clone(), tools.clone()));
    let tool_config = ToolSettings { workspace, tools };
    let cli_opts = RunOptions {
        sandbox: cli.sandbox,
        timeout: cli.timeout,
        allow: cli.allow,
        deny: cli.deny,
        read_only: cli.read_only,
        audit_log: cli.audit_log,
    };

    match cli.command {
        Command::Tools {
            json,
            format,
            markdown,
        } => {
            let tools = provider.tools().map_err(usage)?;
            let specs: Vec<&ToolSpec> = tools.iter().map(ToolHandle::spec).collect();
            let text = if json {
                let exported: Vec<Value> = specs.iter().map(|s| s.export(format)).collect();
                serde_json::to_string_pretty(&exported).map_err(anyhow::Error::from)? + "\n"
            } else if markdown {
                render_markdown(&specs)
            } else {
                render_table(&specs)
            };
            print(&text)
        }
        Command::Schema { name, format } => {
            let tool = provider.build(&name).map_err(usage)?;
            let exported = tool.spec().export(format);
            print(&(serde_json::to_string_pretty(&exported).map_err(anyhow::Error::from)? + "\n"))
        }
        Command::Call { name, args } => {
            let tool = provider.build(&name).map_err(usage)?;
            let args = read_args(&args)?;
            let rt = runtime()?;
            let runner = runner(&cli_opts, &config, &tool_config)?;
            let output = rt
                .block_on(async {
                    let out = tool
                        .execute(
                            args,
                            jianmu_tool_core::ExecuteOptions::default().runner(&runner),
                        )
                        .await;
                    runner.shutdown().await;
                    out
                })
                .map_err(Failure::Tool)?;
            let mut text = output.text;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            print(&text)
        }
        #[cfg(feature = "mcp")]
        Command::Mcp => {
            let tools = jianmu_tool_core::ToolSet::from_providers(&[&provider]).map_err(usage)?;
            let rt = runtime()?;
            let runner = runner(&cli_opts, &config, &tool_config)?;
            rt.block_on(async {
                let served = mcp::Server::new(tools, runner.clone()).serve_stdio().await;
                runner.shutdown().await;
                served
            })
            .map_err(Failure::Usage)
        }
        Command::Serve => serve(),
        #[cfg(feature = "docker")]
        Command::Sandbox {
            command:
                SandboxCommand::BuildImage {
                    tag,
                    busybox,
                    runner,
                    python,
                    no_python,
                    verbose,
                },
        } => build_image(&config, tag, busybox, runner, python, no_python, verbose),
    }
}

/// The flags that shape how calls run.
struct RunOptions {
    sandbox: Option<SandboxKind>,
    timeout: Option<f64>,
    allow: Vec<String>,
    deny: Vec<String>,
    read_only: bool,
    audit_log: Option<PathBuf>,
}

/// The workspace and per-tool settings, for a sandbox that builds its own tools.
struct ToolSettings {
    #[cfg_attr(not(feature = "docker"), allow(dead_code))]
    workspace: PathBuf,
    #[cfg_attr(not(feature = "docker"), allow(dead_code))]
    tools: serde_json::Map<String, Value>,
}

/// The runner for calls: sandbox, timeout, policy and audit log, from flags over
/// `jianmu.toml`. Call it inside the runtime (the Docker sandbox spawns tasks).
fn runner(opts: &RunOptions, config: &Config, tools: &ToolSettings) -> Result<ToolRunner, Failure> {
    let sandbox = opts
        .sandbox
        .or(config.execution.tool_runner)
        .unwrap_or(SandboxKind::Local);
    let timeout = opts
        .timeout
        .or(config.execution.timeout_secs)
        .unwrap_or(120.0);
    let timeout = Duration::try_from_secs_f64(timeout)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| anyhow!("--timeout must be a positive number of seconds"))?;
    let mut policy = config.policy.clone();
    policy.allow.extend(opts.allow.iter().cloned());
    policy.deny.extend(opts.deny.iter().cloned());
    policy.read_only |= opts.read_only;
    let runner = match sandbox {
        SandboxKind::Local => ToolRunner::local(),
        #[cfg(feature = "docker")]
        SandboxKind::Docker => ToolRunner::new(
            jianmu_sandbox::DockerSandbox::new(&tools.workspace, config.execution.docker.clone())
                .map_err(|e| Failure::Usage(anyhow!(chain(&e))))?
                .with_tool_settings(tools.tools.clone()),
        ),
        #[cfg(not(feature = "docker"))]
        SandboxKind::Docker => {
            let _ = tools;
            return Err(
                anyhow!("sandbox `docker` is not compiled into this build of jianmu").into(),
            );
        }
    };
    let runner = runner.with_timeout(timeout).with_policy(policy);
    if let Some(path) = opts
        .audit_log
        .as_ref()
        .or(config.execution.audit_log.as_ref())
    {
        jianmu_sandbox::AuditLog::open(path)
            .with_context(|| format!("cannot open the audit log {}", path.display()))?
            .attach(runner.events());
    }
    Ok(runner)
}

/// The tools' configuration: the workspace root and `[tools.NAME]` settings by name.
fn tool_config(workspace: PathBuf, tools: serde_json::Map<String, Value>) -> ToolConfig {
    tools
        .into_iter()
        .fold(ToolConfig::new(workspace), |config, (tool, settings)| {
            config.with_settings(tool, settings)
        })
}

/// `jianmu serve`: the runner inside a sandbox container. The host sends the
/// workspace and tool settings first, then calls; see `jianmu_sandbox::wire`.
fn serve() -> Result<(), Failure> {
    // Threads count against the container's pids limit: keep the pools small.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let make_tools = |workspace: PathBuf, tools: serde_json::Map<String, Value>| {
        let provider = BuiltinToolProvider::new(tool_config(workspace, tools));
        let resolve: jianmu_sandbox::serve::Resolver = Box::new(move |name| provider.build(name));
        Ok(resolve)
    };
    rt.block_on(jianmu_sandbox::serve::serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        make_tools,
    ))
    .context("the sandbox runner failed")?;
    Ok(())
}

#[cfg(feature = "docker")]
fn build_image(
    config: &Config,
    tag: Option<String>,
    busybox: PathBuf,
    runner: Option<PathBuf>,
    python: Option<PathBuf>,
    no_python: bool,
    verbose: bool,
) -> Result<(), Failure> {
    use jianmu_sandbox::docker::image;
    let tag = tag.unwrap_or_else(|| config.execution.docker.image.clone());
    let runner = match runner {
        Some(path) => path,
        None => std::env::current_exe().context("cannot find this executable")?,
    };
    let mut sources = image::ImageSources::debian(runner);
    sources.busybox = busybox;
    if no_python {
        sources.python = None;
    } else if python.is_some() {
        sources.python = python;
    }
    let context = image::image_context(&sources).map_err(anyhow::Error::from)?;
    if verbose {
        eprint!("{}", context.dockerfile);
    }
    runtime()?
        .block_on(async {
            let docker = image::connect(config.execution.docker.docker_host.as_deref()).await?;
            image::build_image(&docker, &tag, &context).await
        })
        .map_err(|e| Failure::Usage(anyhow!(e)))?;
    print(&format!(
        "built {tag} ({} MB of files, digest {})\n",
        context.tar.len() / 1_000_000,
        context.digest
    ))
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?)
}

/// Unknown and not-compiled tools are the caller's mistake, not the tool's.
fn usage(e: ToolError) -> Failure {
    match e {
        ToolError::UnknownTool { .. }
        | ToolError::NotCompiled { .. }
        | ToolError::Config { .. } => Failure::Usage(anyhow!(chain(&e))),
        other => Failure::Tool(other),
    }
}

fn read_args(raw: &str) -> Result<Value, Failure> {
    let text = if raw == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .context("cannot read the arguments from stdin")?;
        buf
    } else {
        raw.to_owned()
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::Tool(ToolError::failed(format!(
            "the arguments are not valid JSON ({e}); a bare-string tool takes a quoted string, e.g. '\"2+2\"'"
        )))
    })
}

fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed pipe (`jianmu tools | head -1`) is not an error worth a message.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::from(e)
            .context("cannot write to stdout")
            .into()),
        _ => Ok(()),
    }
}

fn effects(spec: &ToolSpec) -> String {
    if spec.effect_tags.is_empty() {
        "-".into()
    } else {
        spec.effect_tags.join(",")
    }
}

fn render_table(specs: &[&ToolSpec]) -> String {
    let name_w = specs.iter().map(|s| s.name.len()).max().unwrap_or(0).max(4);
    let eff_w = specs
        .iter()
        .map(|s| effects(s).len())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut out = format!(
        "{:name_w$}  {:eff_w$}  PARALLEL  DESCRIPTION\n",
        "NAME", "EFFECTS"
    );
    for s in specs {
        let parallel = if s.parallel_safe { "yes" } else { "no" };
        out.push_str(&format!(
            "{:name_w$}  {:eff_w$}  {parallel:8}  {}\n",
            s.name,
            effects(s),
            s.summary()
        ));
    }
    out
}

fn render_markdown(specs: &[&ToolSpec]) -> String {
    let mut out = String::from(
        "# Tools\n\nGenerated by `cargo xtask docs` from the live specs of every built-in tool; \
         a test fails when this page is stale.\n\n| Tool | Effects | Parallel-safe | Feature |\n|---|---|---|---|\n",
    );
    for s in specs {
        let feature = jianmu_provider::feature_for(&s.name).unwrap_or("-");
        out.push_str(&format!(
            "| [`{0}`](#{0}) | {1} | {2} | `{feature}` |\n",
            s.name,
            effects(s),
            if s.parallel_safe { "yes" } else { "no" }
        ));
    }
    for s in specs {
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
        out.push_str(&format!(
            "\n## {}\n\n{}\n\nInput schema:\n\n```json\n{}\n```\n\nOutput schema:\n\n```json\n{}\n```\n",
            s.name,
            s.description,
            pretty(&s.input_schema),
            pretty(&s.output_schema),
        ));
    }
    out
}
