//! The command line: every flag and subcommand of `jianmu`, as clap parses them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use jianmu_tool_core::SchemaFormat;

use crate::config::SandboxKind;

#[derive(Debug, Parser)]
#[command(
    name = "jianmu",
    version,
    about = "Fast, confined built-in tools for LLM agents"
)]
pub(crate) struct Cli {
    /// Settings file (TOML); `./jianmu.toml` is read if present.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Workspace root every path is confined to [default: the current directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// Where calls run [default: local, or `[execution] tool_runner`].
    #[arg(long, global = true, value_enum)]
    pub(crate) sandbox: Option<SandboxKind>,
    /// Per-call time limit in seconds [default: 120, or `[execution] timeout_secs`].
    #[arg(long, global = true, value_name = "SECS")]
    pub(crate) timeout: Option<f64>,
    /// Allow only these tools or effect tags (repeatable; adds to `[policy] allow`).
    #[arg(long, global = true, value_name = "TOOL_OR_EFFECT")]
    pub(crate) allow: Vec<String>,
    /// Deny these tools or effect tags, or calls a rule matches: `command:PREFIX`,
    /// `command-re:REGEX`, `path:GLOB` (repeatable; adds to `[policy] deny`).
    #[arg(long, global = true, value_name = "RULE")]
    pub(crate) deny: Vec<String>,
    /// Ask before running these tools, effect tags or the calls a rule matches
    /// (`command:git push`, `path:deploy/**`; repeatable; adds to `[policy] ask`).
    #[arg(long, global = true, value_name = "RULE")]
    pub(crate) ask: Vec<String>,
    /// Deny writes, process and code execution, and network access.
    #[arg(long, global = true)]
    pub(crate) read_only: bool,
    /// Let every network tool reach HOST although the SSRF guard would refuse it
    /// (repeatable; adds to each network tool's own `allow_hosts`).
    #[arg(long, global = true, value_name = "HOST")]
    pub(crate) allow_host: Vec<String>,
    /// Let `bash` and `python_repl` reach HOST (on PORT only, when given) through the
    /// session's egress proxy (repeatable; adds to `[egress] allow`).
    #[arg(long, global = true, value_name = "HOST[:PORT]")]
    pub(crate) egress: Vec<String>,
    /// Append a JSON line per finished call to FILE [default: `[execution] audit_log`].
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) audit_log: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List every compiled-in tool: name, effect tags, parallel-safe, description.
    Tools {
        /// Print the full specs as JSON.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The JSON shape to print (implies --json): jianmu, openai, openai-strict,
        /// anthropic, gemini, mcp, openai-responses; or the declarations of the model APIs' built-in
        /// tools that `jianmu native` executes: anthropic-native, anthropic-agent (the
        /// agent toolset), openai-native, openai-freeform (apply_patch as a
        /// grammar-constrained tool).
        #[arg(long, conflicts_with = "markdown", default_value = "jianmu")]
        format: ListFormat,
        /// Print the reference page `docs/tools.md` is made from.
        #[arg(long)]
        markdown: bool,
        /// With `--format anthropic` or `openai-responses`: load these tools on demand
        /// (names, globs such as `git_*`, features such as `lsp`, effect tags): they
        /// get `defer_loading` (in OpenAI's, grouped in a namespace per feature), and
        /// the vendor's tool search tool is added to find them.
        #[arg(long, value_name = "PATTERN")]
        defer: Vec<String>,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The workspace's checkpoints, taken before the first changing call of each
    /// turn: list them, show what changed since one, or bring one back.
    #[cfg(feature = "checkpoint")]
    Checkpoint {
        #[command(subcommand)]
        command: CheckpointCommand,
    },
    /// Print one tool's spec as JSON.
    Schema {
        /// Tool name or alias.
        name: String,
        /// The shape to print (jianmu, openai, openai-strict, anthropic, gemini, mcp).
        #[arg(long, default_value = "jianmu")]
        format: SchemaFormat,
    },
    /// Serve every compiled-in tool over MCP: on stdio, or as a Streamable HTTP
    /// service with --http.
    #[cfg(feature = "mcp")]
    Mcp(McpArgs),
    /// Run calls sent as JSON lines: on stdin (the runner inside a sandbox container),
    /// or with --listen over mutual TLS (a runner any host, pod or task runs).
    #[cfg(feature = "docker")]
    #[command(hide = true)]
    Serve(ServeArgs),
    /// How calls are isolated here, and the Docker sandbox.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// Execute a model API's own tool calls: call items as JSON lines on stdin, one
    /// result item per line on stdout, all in one session (one conversation).
    Native(NativeArgs),
    /// Call a tool and print its output.
    Call {
        /// Tool name or alias.
        name: String,
        /// Arguments as JSON (`-` reads them from stdin). A bare-string tool takes a
        /// JSON string: '"2+2"'.
        #[arg(default_value = "{}")]
        args: String,
        /// Allow the calls this `ask` rule asks about without asking (repeatable;
        /// `all` for every rule). Otherwise they are asked at the terminal, and
        /// refused without one.
        #[arg(long, value_name = "RULE")]
        approve: Vec<String>,
    },
}

/// What `jianmu tools --format` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListFormat {
    /// The compiled-in tools' specs in this shape.
    Specs(SchemaFormat),
    /// Anthropic's built-in tool declarations.
    AnthropicNative,
    /// Anthropic's agent toolset, `agent_toolset_20260401`.
    AnthropicAgent,
    /// OpenAI's built-in `shell` and `apply_patch`.
    OpenAiNative,
    /// OpenAI's `shell`, and `apply_patch` as a freeform tool with its grammar.
    OpenAiFreeform,
    /// The compiled-in tools as OpenAI Responses function tools (flat), deferred
    /// ones in namespaces with `defer_loading`.
    OpenAiResponses,
}

impl std::str::FromStr for ListFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "anthropic-native" => Ok(Self::AnthropicNative),
            "anthropic-agent" => Ok(Self::AnthropicAgent),
            "openai-native" => Ok(Self::OpenAiNative),
            "openai-freeform" => Ok(Self::OpenAiFreeform),
            "openai-responses" => Ok(Self::OpenAiResponses),
            other => other.parse().map(Self::Specs).map_err(|_| {
                format!(
                    "unknown format `{other}`: one of jianmu, openai, openai-strict, anthropic, gemini, mcp, openai-responses, anthropic-native, anthropic-agent, openai-native, openai-freeform"
                )
            }),
        }
    }
}

/// Which model API's contract `jianmu native` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NativeApi {
    /// `tool_use` blocks in, `tool_result` blocks out: `bash`,
    /// `str_replace_based_edit_tool`, `memory`, and any tool by name; and the agent
    /// toolset's `agent.tool_use` events, answered with `user.tool_result`.
    Anthropic,
    /// Responses API call items in, their output items out: `shell_call`,
    /// `apply_patch_call`, `custom_tool_call`, `function_call`.
    Openai,
}

/// `jianmu native`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct NativeArgs {
    /// The contract: anthropic or openai.
    #[arg(value_enum)]
    pub(crate) api: NativeApi,
    /// The absolute path the model uses for the workspace root, e.g. /repo
    /// [default: the workspace's own path].
    #[arg(long, value_name = "PATH")]
    pub(crate) root: Option<String>,
    /// The folder Anthropic's memory tool sees as /memories [default:
    /// .jianmu/memories in the workspace].
    #[arg(long, value_name = "DIR")]
    pub(crate) memories: Option<PathBuf>,
    /// The text editor's max_characters: a longer view is cut, saying so.
    #[arg(long, value_name = "N")]
    pub(crate) max_characters: Option<usize>,
    /// Anthropic: `tool_use` blocks named bash, read, write, edit, glob or grep are
    /// calls of the agent toolset (agent_toolset_20260401), as its events always are.
    #[arg(long)]
    pub(crate) agent_toolset: bool,
    /// OpenAI: the `shell` tool's declaration as sent to the API, e.g.
    /// '{"type":"shell","environment":{"type":"local","skills":[{"name":"n","description":"d","path":"/abs/dir"}]}}':
    /// each skill's folder is shown to commands, read-only, at its path.
    #[arg(long, value_name = "JSON")]
    pub(crate) shell_tool: Option<String>,
}

/// `jianmu mcp`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    /// Serve Streamable HTTP on ADDR (e.g. 127.0.0.1:8765) at `/mcp`, with `/healthz`
    /// and `/metrics`, instead of stdio. A non-loopback ADDR needs a token.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// With --http: who may call, one `NAME TOKEN` per line of FILE (a token alone is
    /// the principal `default`; `#` comments); SIGHUP reads it again [default: the
    /// JIANMU_MCP_TOKEN environment variable, as `default`].
    #[arg(long, value_name = "FILE", requires = "http")]
    pub(crate) token_file: Option<PathBuf>,
    /// With --http: a browser origin allowed to call, e.g. `https://app.example.com`
    /// (repeatable; adds to `[mcp.http] allowed_origins`). Others get 403.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub(crate) allow_origin: Vec<String>,
    /// With --http: give each client session a folder of its own under DIR as its
    /// workspace, removed when the session ends.
    #[arg(long, value_name = "DIR", requires = "http")]
    pub(crate) workspace_per_session: Option<PathBuf>,
    /// With --http: give each principal (each token of --token-file) a folder of its
    /// own, DIR/NAME, as its workspace, kept across its sessions (adds to
    /// `[mcp.http] principal_workspaces`).
    #[arg(long, value_name = "DIR", requires = "http")]
    pub(crate) workspace_per_principal: Option<PathBuf>,
}

/// `jianmu sandbox ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum SandboxCommand {
    /// Say what isolation `bash` and `python_repl` get on this machine, what the
    /// kernel offers, and whether the Docker sandbox is ready (one line each).
    Status {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Build the sandbox image locally (no registry): this `jianmu` binary, the
    /// libraries it links and a static busybox, `FROM scratch`.
    #[cfg(feature = "docker")]
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
    /// The files of mutual TLS between a host and its runners (`jianmu serve
    /// --listen`).
    #[cfg(feature = "docker")]
    Tls {
        #[command(subcommand)]
        command: TlsCommand,
    },
}

/// `jianmu sandbox tls ...`.
#[cfg(feature = "docker")]
#[derive(Debug, Subcommand)]
pub(crate) enum TlsCommand {
    /// Make DIR (new or empty) with a new certificate authority (`ca.pem`,
    /// `ca-key.pem`), the host's client certificate (`DIR/host`) and a runner's server
    /// certificate (`DIR/runner`, for `serve --tls-dir`); keys readable by the owner
    /// alone.
    Init {
        /// The folder to make.
        dir: PathBuf,
        /// A host name or IP address the runner is reached by (repeatable)
        /// [default: localhost and 127.0.0.1].
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
    },
}

/// `jianmu serve`: on stdin and stdout, or listening.
#[cfg(feature = "docker")]
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Listen on ADDR (e.g. 0.0.0.0:7443) for hosts over mutual TLS instead.
    #[arg(long, value_name = "ADDR", requires = "tls_dir")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// With --listen: the folder with `ca.pem` (hosts' certificates must chain to
    /// it), `cert.pem` and `key.pem` (the runner's own).
    #[arg(long, value_name = "DIR", requires = "listen")]
    pub(crate) tls_dir: Option<PathBuf>,
    /// With --listen: where hosts' workspaces are kept (a host's `/a/ws` is
    /// `ROOT/a/ws`) [default: the current folder].
    #[arg(long, value_name = "ROOT", requires = "listen")]
    pub(crate) root: Option<PathBuf>,
    /// With --listen: exit once the first session ends.
    #[arg(long, requires = "listen")]
    pub(crate) once: bool,
}

/// `--version`'s long form: the version and the Cargo features this build has (named
/// by the build script from Cargo's own list).
pub(crate) fn long_version() -> String {
    let features = env!("JIANMU_FEATURES");
    format!(
        "{} (features: {})",
        env!("CARGO_PKG_VERSION"),
        if features.is_empty() {
            "none"
        } else {
            features
        }
    )
}

/// `jianmu checkpoint ...`: the checkpoint tools, for the operator.
#[cfg(feature = "checkpoint")]
#[derive(Debug, Subcommand)]
pub(crate) enum CheckpointCommand {
    /// List the checkpoints, newest first.
    List,
    /// Show what changed since checkpoint ID (to the workspace now, or to --to).
    Diff {
        /// The checkpoint (an id from `list`, or a unique prefix).
        id: String,
        /// Compare with this checkpoint instead of the workspace now.
        #[arg(long)]
        to: Option<String>,
        /// Only changes at or under this path.
        #[arg(long)]
        path: Option<String>,
    },
    /// Bring the workspace back to checkpoint ID (taking a checkpoint first).
    Restore {
        /// The checkpoint.
        id: String,
        /// Only say what would change.
        #[arg(long)]
        dry_run: bool,
        /// Allow the restore when this `ask` rule asks about it (as `call --approve`).
        #[arg(long, value_name = "RULE")]
        approve: Vec<String>,
    },
}

#[cfg(feature = "checkpoint")]
impl CheckpointCommand {
    /// The tool this runs.
    pub(crate) fn tool(&self) -> &'static str {
        match self {
            Self::List => "checkpoint_list",
            Self::Diff { .. } => "checkpoint_diff",
            Self::Restore { .. } => "checkpoint_restore",
        }
    }

    /// Its arguments, as JSON.
    pub(crate) fn args(&self) -> String {
        let args = match self {
            Self::List => serde_json::json!({}),
            Self::Diff { id, to, path } => serde_json::json!({"id": id, "to": to, "path": path}),
            Self::Restore { id, dry_run, .. } => {
                serde_json::json!({"id": id, "dry_run": dry_run})
            }
        };
        args.to_string()
    }

    /// The `ask` rules it may pass without asking.
    pub(crate) fn approved(&self) -> &[String] {
        match self {
            Self::Restore { approve, .. } => approve,
            _ => &[],
        }
    }
}

/// The completion script of `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "jianmu",
        &mut script,
    );
    String::from_utf8_lossy(&script).into_owned()
}
