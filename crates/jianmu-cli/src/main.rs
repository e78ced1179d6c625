//! The `jianmu` command: list, describe and call the compiled-in tools, serve them
//! over MCP. This file parses and dispatches; flags and `jianmu.toml` are lowered in
//! `settings.rs`, and every call goes through a `Session` of `jianmu-runtime`.
//!
//! Exit codes: 0 success; 1 the call failed in a way the model should read (bad
//! arguments, refused input, a tool's error, timeout, denial); 2 a usage error (bad
//! flags or config, unknown tool, a tool not compiled in); 3 the call could not run
//! (sandbox unavailable, internal error); 128 + N when stopped by signal N (SIGTERM,
//! SIGINT, SIGHUP) during `call`. On those signals `call` and `mcp` stop their calls
//! (everything the tools started ends with them) and remove their sandbox containers
//! before exiting; `mcp` then exits 0.

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use jianmu_tool_core::{SchemaFormat, ToolError, ToolSpec};

mod args;
mod ask;
#[cfg(feature = "docker")]
mod build_image;
mod config;
mod native;
mod render;
#[cfg(feature = "docker")]
mod runner;
mod settings;
mod status;
mod term;
mod trust;

use args::{Cli, Command};
use settings::Settings;
use term::{pretty, print, read_args, runtime, terminated};

/// Why the command failed, and so its exit code.
enum Failure {
    /// The call failed; its class decides the exit code.
    Call(ToolError),
    Usage(anyhow::Error),
    /// Stopped by this signal.
    Signal(i32),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Usage(e)
    }
}

fn main() -> ExitCode {
    term::init_tracing();
    // Made once per process; clap keeps `&'static str`s.
    let version: &'static str = Box::leak(args::long_version().into_boxed_str());
    let matches = Cli::command()
        .version(version)
        .long_version(version)
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Call(e)) => {
            eprintln!("Error: {}", jianmu_tool_core::error_chain(&e));
            ExitCode::from(if e.is_model_facing() { 1 } else { 3 })
        }
        Err(Failure::Usage(e)) => {
            eprintln!("jianmu: {e:#}");
            ExitCode::from(2)
        }
        Err(Failure::Signal(n)) => {
            eprintln!("jianmu: stopped by signal {n}; the call was cancelled");
            ExitCode::from(u8::try_from(128 + n).unwrap_or(1))
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    // `serve` takes everything from its host, so settings are read per command.
    let load = || Settings::from_args(&cli);
    match &cli.command {
        #[cfg(feature = "docker")]
        Command::Serve(serve) => Ok(runner::serve(serve)?),
        &Command::Tools {
            json,
            format,
            markdown,
            ref defer,
        } => {
            let deferrable = [
                args::ListFormat::Specs(SchemaFormat::Anthropic),
                args::ListFormat::OpenAiResponses,
            ];
            if !defer.is_empty() && !deferrable.contains(&format) {
                Err(anyhow::anyhow!(
                    "--defer goes with --format anthropic or openai-responses"
                ))?;
            }
            let settings = load()?;
            let specs = jianmu_runtime::tool_specs(&settings.tools).map_err(lookup)?;
            let specs: Vec<&ToolSpec> = specs.iter().collect();
            let format = match format {
                args::ListFormat::Specs(format) => format,
                other => return print(&pretty(&render::declarations(other, &specs, defer))?),
            };
            let text = if json || format != SchemaFormat::Jianmu {
                render::exported(&specs, format, defer)?
            } else if markdown {
                render::markdown(&specs)
            } else {
                render::table(&specs)
            };
            print(&text)
        }
        Command::Completions { shell } => print(&args::completions(*shell)),
        Command::Schema { name, format } => {
            let settings = load()?;
            let spec = jianmu_runtime::tool_spec(&settings.tools, name).map_err(lookup)?;
            print(&pretty(&spec.export(*format))?)
        }
        Command::Native(native_args) => {
            let settings = load()?;
            let rt = runtime()?;
            rt.block_on(native::run(&settings, native_args))
        }
        Command::Call {
            name,
            args,
            approve,
        } => call(load()?, name, args, approve),
        #[cfg(feature = "checkpoint")]
        Command::Checkpoint { command: c } => call(load()?, c.tool(), &c.args(), c.approved()),
        #[cfg(feature = "mcp")]
        Command::Mcp(mcp_args) => {
            let settings = load()?.for_mcp();
            if let Some(addr) = mcp_args.http {
                let options = jianmu_mcp::http::Options::new(
                    addr,
                    mcp_args.token_file.as_deref(),
                    settings.mcp_http.clone(),
                    &mcp_args.allow_origin,
                    mcp_args.workspace_per_session.clone(),
                    mcp_args.workspace_per_principal.clone(),
                )?
                .offering(settings.offer());
                let rt = term::multi_thread_runtime()?;
                // With a token file, SIGHUP reloads it instead of stopping the server.
                let reloads = options.reloads_tokens();
                let session = settings.session()?;
                let served = rt.block_on(jianmu_mcp::http::serve(session, options, async move {
                    if reloads {
                        term::terminated_but_not_by_hangup().await;
                    } else {
                        terminated().await;
                    }
                }));
                rt.shutdown_timeout(std::time::Duration::from_millis(200));
                return Ok(served?);
            }
            let rt = runtime()?;
            let served = rt.block_on(async {
                let session = std::sync::Arc::new(settings.open()?);
                // With a warm pool, the session's container is taken now, not at the
                // first call (which then waits for it if it comes first).
                if settings.warms_up() {
                    let session = std::sync::Arc::clone(&session);
                    tokio::spawn(async move {
                        if let Err(e) = session.warm_up().await {
                            tracing::debug!(
                                "the sandbox did not start ahead of the first call: {e}"
                            );
                        }
                    });
                }
                let server = jianmu_mcp::Server::new(session.clone()).offering(settings.offer());
                // A signal drops the server: its calls are cancelled, which stops them.
                let served = tokio::select! {
                    served = server.serve_stdio() => served,
                    _ = terminated() => Ok(()),
                };
                // What did not come back is on stderr; the server still ends with 0.
                let _ = settings::close(&session).await;
                Ok(served?)
            });
            // The thread blocked reading stdin never returns by itself: do not wait
            // for it. Every task (and so every call) is dropped here.
            rt.shutdown_timeout(std::time::Duration::from_millis(200));
            served
        }
        #[cfg(feature = "docker")]
        Command::Sandbox {
            command: build @ args::SandboxCommand::BuildImage { .. },
        } => print(&build_image::run(&load()?, build)?),
        #[cfg(feature = "docker")]
        Command::Sandbox {
            command: args::SandboxCommand::Tls { command },
        } => print(&runner::tls(command)?),
        Command::Sandbox {
            command: args::SandboxCommand::Status { json },
        } => {
            let settings = load()?;
            print(&status::run(&settings, *json)?)
        }
    }
}

/// `jianmu call NAME ARGS`: its text printed; `approve`d rules are not asked about.
fn call(mut settings: Settings, name: &str, args: &str, approve: &[String]) -> Result<(), Failure> {
    // The answer may name a saved output, read after this process ends: keep it.
    let outputs = jianmu_tool_core::SavedOutputs {
        keep: true,
        ..settings.tools.saved_outputs().clone()
    };
    settings.tools = settings.tools.clone().with_saved_outputs(outputs);
    // The session's own set checks the name (opening starts no container) first.
    let rt = runtime()?;
    let (output, closed) = rt.block_on(async {
        let session = settings.open()?;
        session.set_approver(Some(ask::terminal(approve.to_vec())));
        let checked = session.check(name).map_err(lookup);
        let out = match checked.and_then(|()| read_args(args)) {
            Err(e) => Err(e),
            Ok(args) => tokio::select! {
                out = session.call(name, args) => out.map_err(Failure::Call),
                n = terminated() => Err(Failure::Signal(n)),
            },
        };
        Ok::<_, Failure>((out, settings::close(&session).await))
    })?;
    // Work a stopped call left on a blocking thread (a conversion or a parse in a
    // child, which ends with that thread) is not waited for.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    let mut text = output?.text;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    print(&text)?;
    closed.map_err(|e| Failure::Call(ToolError::runner(name, e)))
}

/// A tool that cannot be found or built is the caller's mistake: a usage error.
fn lookup(e: ToolError) -> Failure {
    Failure::Usage(anyhow::anyhow!(jianmu_tool_core::error_chain(&e)))
}
