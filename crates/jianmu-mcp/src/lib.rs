//! The MCP service of Jianmu tools over a [`jianmu_runtime::Runtime`] (what `jianmu
//! mcp` runs), with the `rmcp` SDK: on stdio (one client, [`Server`]), or as a
//! Streamable HTTP service ([`http::serve`]: many clients and principals, each protocol
//! session with tool state of its own). Each session lists its own tools.
//!
//! The error's class decides how a failed call is answered: what the model should read
//! and act on (bad arguments, a refused path, a tool's error, a policy denial, a
//! timeout) is a result with `isError: true`; a tool that does not exist is the
//! JSON-RPC error -32602, as the specification says; what broke around the tool (the
//! sandbox, an internal error, a cancellation) is a JSON-RPC error too. A
//! cancelled request drops its call, which stops the work.
//! Tools are built once per session (on stdio: once), so stateful tools keep their
//! state for the session. Every line a stdio client sends is answered: `frame`
//! answers what the MCP service cannot (malformed JSON, oversized lines, bad
//! `tools/call` parameters, reused ids).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use jianmu_runtime::Session;
use jianmu_tool_core::{ExecuteOptions, SchemaFormat, ToolError, ToolOutput, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};

/// Waits until `done` holds; `changed` is told whenever it may have come to hold.
pub(crate) async fn until(changed: &tokio::sync::Notify, done: impl Fn() -> bool) {
    loop {
        let mut woken = std::pin::pin!(changed.notified());
        woken.as_mut().enable();
        if done() {
            return;
        }
        woken.await;
    }
}

mod approve;
mod config;
mod defer;
mod frame;
pub mod http;
mod metrics;
mod principals;
mod progress;
mod scopes;
mod skills;
mod tasks;

pub use config::{BadLimits, HttpLimits, PrincipalSettings};
pub use defer::Deferral;

/// What a server offers beyond its tools' list: tools loaded on demand, and skills.
#[derive(Debug, Clone)]
pub struct Offer {
    /// Tools left out of `tools/list` until `tool_search` finds them.
    pub deferral: Deferral,
    /// Whether skills are served (`io.modelcontextprotocol/skills`): jianmu's own and
    /// the workspace's skill folders.
    pub skills: bool,
}

impl Default for Offer {
    fn default() -> Self {
        Self {
            deferral: Deferral::default(),
            skills: true,
        }
    }
}

/// How long a client may keep the tool list before asking again (`ttlMs`).
const LIST_TTL_MS: u64 = 5 * 60 * 1000;

/// How long calls still running may take to answer once the client closed its input.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What every session of one server shares: the tool names, what is deferred, and
/// the metrics (each session's policy is its own: a principal's may be stricter).
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    /// Tools listed only once `tool_search` finds them.
    deferral: Arc<Deferral>,
    /// Whether skills are served.
    skills: bool,
    /// Every compiled-in tool's name (metrics label only these).
    known: Arc<HashSet<String>>,
    metrics: Arc<metrics::Metrics>,
    /// Cancelled when the server stops: calls still running are answered with an
    /// error and their work stopped.
    stopping: tokio_util::sync::CancellationToken,
}

impl Catalog {
    fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            deferral: Arc::default(),
            skills: true,
            known: Arc::new(names.into_iter().collect()),
            metrics: Arc::new(metrics::Metrics::new()),
            stopping: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// The tools `session` offers as `tools/list` describes them: its own specs
    /// (built from its settings, a principal's included), those the policy allows,
    /// the deferred ones apart.
    fn listing(&self, session: &Session) -> defer::Made {
        let policy = session.policy();
        let specs: Vec<ToolSpec> = session
            .specs()
            .into_iter()
            .filter(|spec| policy.check(spec).is_ok())
            .collect();
        defer::Made::new(&specs, &self.deferral)
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// A session's `tools/list`, made at the first listing and kept with the session,
/// with the deferred tools it has found.
pub(crate) type Listing = Arc<defer::Listed>;

/// The MCP server of one client session: its session (tools and their state, the
/// runner stack).
#[derive(Clone)]
pub struct Server {
    catalog: Catalog,
    session: Arc<Session>,
    listing: Listing,
    /// Whether the listing may be kept by a cache shared between users (stdio: one
    /// client; over HTTP principals may see different tools).
    public: bool,
    /// Whether a deferred tool must be found before it is called: not where no
    /// session remembers what was found (the stateless revision).
    gated: bool,
    /// What an HTTP session holds beyond its session (its place in the metrics);
    /// released when the last clone is dropped.
    _held: Option<Arc<dyn Send + Sync>>,
}

impl Server {
    /// The server of a stdio client, offering its session's tools as the policy
    /// allows.
    pub fn new(session: Arc<Session>) -> Self {
        // Names only: the tools are built at the first listing or call.
        let catalog = Catalog::new(session.runtime().tool_names());
        let mut server = Self::session(catalog, session, None, Listing::default());
        server.public = true;
        server
    }

    /// The server of an HTTP client's `session`; `listing` is kept with the session
    /// (a stateless scope's is shared by its requests).
    fn session(
        catalog: Catalog,
        session: Arc<Session>,
        held: Option<Arc<dyn Send + Sync>>,
        listing: Listing,
    ) -> Self {
        Self {
            catalog,
            session,
            listing,
            public: false,
            gated: true,
            _held: held,
        }
    }

    /// Leaves the tools `offer.deferral` names out of `tools/list`, for `tool_search`
    /// to find ([`Deferral`]), and serves skills or not.
    #[must_use]
    pub fn offering(mut self, offer: Offer) -> Self {
        self.catalog.deferral = Arc::new(offer.deferral);
        self.catalog.skills = offer.skills;
        self
    }

    /// The skills this session serves, when it serves them.
    fn skills(&self) -> Option<skills::Skills> {
        self.catalog.skills.then(|| {
            let tools = self.listed().names();
            skills::Skills::new(self.session.workspace(), tools)
        })
    }

    /// A server of requests that stand alone: deferred tools are left out of the
    /// list, but a call of one is not refused, since nothing remembers a search.
    pub(crate) fn stateless(mut self) -> Self {
        self.gated = false;
        self
    }

    /// Serves on stdin and stdout until the client goes away.
    ///
    /// # Errors
    /// The MCP handshake failed.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        self.serve_on(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Makes the session's listing now, off the async threads, while the client
    /// opens the protocol session: its first `tools/list` then finds it made.
    fn list_early(&self) {
        let server = self.clone();
        drop(tokio::task::spawn_blocking(move || {
            server.listed();
        }));
    }

    /// The session's listing, made at the first call and kept.
    fn listed(&self) -> &defer::Made {
        self.listing.made(|| self.catalog.listing(&self.session))
    }

    /// Serves the client on `input` and `output`, every line through `frame`.
    async fn serve_on<R, W>(self, input: R, output: W) -> anyhow::Result<()>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.list_early();
        let (to_service, service_in) = tokio::io::duplex(1 << 20);
        let (service_out, from_service) = tokio::io::duplex(1 << 20);
        let in_flight = frame::InFlight::default();
        let (answers, answered) = tokio::sync::mpsc::channel(frame::QUEUED_ANSWERS);
        let mut reader = tokio::spawn(frame::read_client(
            input,
            to_service,
            in_flight.clone(),
            answers,
        ));
        let writer = tokio::spawn(frame::write_client(
            from_service,
            output,
            in_flight.clone(),
            answered,
        ));
        let running = self
            .serve((service_in, service_out))
            .await
            .map_err(|e| anyhow::anyhow!("MCP initialisation failed: {e}"))?;
        let stop = running.cancellation_token();
        let waiting = running.waiting();
        tokio::pin!(waiting);
        let served = tokio::select! {
            done = &mut waiting => done.map(drop).map_err(anyhow::Error::from),
            _ = &mut reader => {
                // The client closed its input: it is going away. Calls still running
                // get a moment to answer, then everything is cancelled, which stops
                // their work.
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, in_flight.drained()).await;
                stop.cancel();
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, waiting).await;
                Ok(())
            }
        };
        reader.abort();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, writer).await;
        served
    }
}

fn describe(spec: &ToolSpec) -> Tool {
    let exported = spec.export(SchemaFormat::Mcp);
    let schema: Map<String, Value> = exported["inputSchema"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let a = spec.annotations();
    let annotations = ToolAnnotations::new()
        .read_only(a.read_only)
        .destructive(a.destructive)
        .idempotent(a.idempotent)
        .open_world(a.open_world);
    let tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
    .annotate(annotations);
    // Tools with structured output say its shape; their `structuredContent` matches it
    // and holds the whole answer (`text`), for clients that read only that.
    match spec.whole_output_schema() {
        Some(Value::Object(output)) => tool.with_raw_output_schema(Arc::new(output)),
        _ => tool,
    }
}

fn result(outcome: Result<ToolOutput, ToolError>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(out) => {
            let (text, structured, images) = out.into_whole();
            let mut content = Vec::with_capacity(1 + images.len());
            content.push(ContentBlock::text(text));
            content.extend(
                images
                    .into_iter()
                    .map(|i| ContentBlock::image(i.base64, i.mime_type)),
            );
            let mut r = CallToolResult::success(content);
            r.structured_content = structured;
            Ok(r)
        }
        // As the specification says: a tool that does not exist is a protocol error
        // (-32602), naming the tools that do.
        Err(e @ (ToolError::UnknownTool { .. } | ToolError::NotCompiled { .. })) => Err(
            ErrorData::invalid_params(jianmu_tool_core::error_chain(&e), None),
        ),
        Err(e) if e.is_model_facing() => Ok(CallToolResult::error(vec![ContentBlock::text(
            jianmu_tool_core::error_chain(&e),
        )])),
        Err(e) => Err(ErrorData::internal_error(
            jianmu_tool_core::error_chain(&e),
            None,
        )),
    }
}

impl ServerHandler for Server {
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        tasks::get(&self.session, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks::cancel(&self.session, &request.task_id).await
    }

    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
        if !self.catalog.deferral.is_empty() {
            // A tool found by `tool_search` joins the list.
            capabilities = ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build();
        }
        if self.catalog.skills {
            // Skill files are resources; the extension adds `skills/list` and `skills/get`.
            let declared = ServerCapabilities::builder()
                .enable_resources()
                .enable_skills()
                .build();
            capabilities.resources = declared.resources;
            // Beside the extensions already declared (tasks).
            let extensions = capabilities.extensions.get_or_insert_with(Default::default);
            extensions.extend(declared.extensions.unwrap_or_default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("jianmu", env!("CARGO_PKG_VERSION")))
            .with_instructions("Built-in tools: files and search confined to one workspace, a calculator, and more. Tool errors come back as results to read and act on.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The session's own list, the same while it lives: a client may keep it for
        // a while; over HTTP, not in a cache shared with other principals.
        let listed = self.listing.tools(self.listed());
        let scope = if self.public {
            rmcp::model::CacheScope::Public
        } else {
            rmcp::model::CacheScope::Private
        };
        Ok(ListToolsResult::with_all_items(listed)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(scope))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let skills = self.skills();
        let resources =
            tokio::task::spawn_blocking(move || skills.map(|s| s.resources()).unwrap_or_default())
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(rmcp::model::CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let skills = self.skills();
        let task =
            tokio::task::spawn_blocking(move || skills.and_then(|s| s.read(&uri)).ok_or(uri));
        match task.await {
            Ok(Ok(read)) => read.map(Into::into),
            Ok(Err(uri)) => Err(skills::not_found(&uri)),
            Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
        }
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, ErrorData> {
        let skills = self
            .skills()
            .ok_or_else(ErrorData::method_not_found::<rmcp::model::ListSkillsRequestMethod>)?;
        let cursor = request.and_then(|r| r.cursor);
        tokio::task::spawn_blocking(move || skills.list(cursor.as_deref()))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
    }

    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, ErrorData> {
        let skills = self
            .skills()
            .ok_or_else(ErrorData::method_not_found::<rmcp::model::GetSkillRequestMethod>)?;
        tokio::task::spawn_blocking(move || skills.get(&request.uri))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request
            .arguments
            .map_or(Value::Object(Map::new()), Value::Object);
        let deferring = (!self.catalog.deferral.is_empty())
            .then(|| self.listed())
            .filter(|made| made.defers_any());
        if let Some(made) = deferring {
            if request.name == defer::TOOL_SEARCH {
                return match self.listing.search(made, &args) {
                    Ok((found, text, changed)) => {
                        if changed {
                            // Best effort: a client that missed it lists again later.
                            let _ = context.peer.notify_tool_list_changed().await;
                        }
                        result(Ok(ToolOutput::text(text).with_structured(found))).map(Into::into)
                    }
                    Err(why) => Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into()),
                };
            }
            let canonical = self.session.canonical_name(&request.name);
            if let Some(why) = self.listing.hidden(made, &canonical).filter(|_| self.gated) {
                return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
            }
        }
        // A background job asked for by a client that speaks the tasks extension is
        // answered as a task: `tasks/get` polls it, `tasks/cancel` stops it.
        let canonical = self.session.canonical_name(&request.name);
        let as_task = canonical == "bash"
            && args.get("background") == Some(&Value::Bool(true))
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks());
        let call_id = format!("mcp-{}", context.id);
        // Over HTTP, the principal the request was authorized as: in the call's
        // events, and so in its audit line.
        let principal = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<scopes::Arrival>())
            .map(|arrival| arrival.principal.clone());
        let event_context = principal
            .as_ref()
            .map(|p| serde_json::json!({"principal": &*p.0}));
        let mut options = ExecuteOptions::default().call_id(&call_id);
        if let Some(event_context) = &event_context {
            options = options.event_context(event_context);
        }
        // A client that sent a progress token gets the tool's reports as progress
        // notifications, no more often than `PROGRESS_THROTTLE`, and none after the
        // answer.
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| progress::forward(context.peer.clone(), token));
        if let Some((sink, _)) = &progress {
            options = options.progress(sink);
        }
        // With ask rules, who answers: the client, by elicitation now or by retrying
        // the request with its answer (2026-07-28).
        let who = principal.as_ref().map(|p| &*p.0);
        let (approver, retry) = self.approver(
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
            &canonical,
            &args,
            who,
            &context,
        )?;
        if let Some(approver) = &approver {
            options = options.approver(approver);
        }
        let asked_args = retry.as_ref().map(|_| args.clone());
        let metrics = &self.catalog.metrics;
        let counted = metrics.start();
        let started = Instant::now();
        let tool = self
            .catalog
            .known
            .contains(&canonical)
            .then_some(canonical.as_str());
        let call = self.session.execute(&request.name, args, options);
        let answer = tokio::select! {
            outcome = call => {
                metrics.record(tool, started.elapsed(), outcome.as_ref().map(drop));
                if let Some(principal) = &principal {
                    metrics.principal_call(&principal.0, outcome.is_ok());
                }
                match outcome {
                    Ok(out) if as_task => tasks::created(&out)
                        .map_or_else(|| result(Ok(out)).map(Into::into), |task| Ok(CallToolResponse::Task(task))),
                    outcome => result(outcome).map(Into::into),
                }
            }
            why = async {
                tokio::select! {
                    () = context.ct.cancelled() => "the call was cancelled",
                    () = self.catalog.stopping.cancelled() => {
                        "the server is shutting down: the call was cancelled"
                    }
                }
            } => {
                let cancelled = ToolError::Cancelled { tool: request.name.to_string() };
                metrics.record(tool, started.elapsed(), Err(&cancelled));
                Err(ErrorData::internal_error(why, None))
            }
        };
        drop(counted);
        if let Some((_, forwarder)) = progress {
            forwarder.abort();
        }
        if let (Some(retry), Some(args)) = (&retry, &asked_args)
            && let Some(ask) = retry.asked()
        {
            if !retry.elicits {
                return Err(approve::missing_elicitation(&ask));
            }
            let state = approve::seal(&canonical, args, &ask.rule, retry.allowed(), who)?;
            return Ok(CallToolResponse::InputRequired(
                rmcp::model::InputRequiredResult::new(approve::input_requests(&ask), Some(state)),
            ));
        }
        answer
    }
}

impl Server {
    /// The approver of a call when the policy asks: on 2026-07-28, or for a client
    /// that cannot be asked, the answer the request carries (its sealed
    /// `requestState` checked first); else `elicitation/create` on the protocol
    /// session. The second value is set when the call may end `input_required`.
    ///
    /// # Errors
    /// A `requestState` that is not this server's, has expired, or is another call's.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn approver(
        &self,
        state: Option<&str>,
        responses: Option<&rmcp::model::InputResponses>,
        canonical: &str,
        args: &Value,
        who: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<
        (
            Option<Arc<dyn jianmu_tool_core::Approver>>,
            Option<Arc<approve::Retry>>,
        ),
        ErrorData,
    > {
        if self.session.policy().ask.is_empty() {
            return Ok((None, None));
        }
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str());
        let elicits = context
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        if !modern && elicits {
            let elicit = approve::Elicit {
                peer: context.peer.clone(),
            };
            return Ok((Some(Arc::new(elicit)), None));
        }
        let (answer, granted) = match state {
            Some(state) if modern => {
                let (rule, granted) = approve::open(state, canonical, args, who)?;
                let answer = responses
                    .and_then(|responses| responses.get(approve::KEY))
                    .and_then(approve::decision_of)
                    .map(|decision| (rule, decision));
                (answer, granted)
            }
            _ => (None, Vec::new()),
        };
        let retry = Arc::new(approve::Retry {
            answer,
            granted,
            elicits,
            asked: std::sync::Mutex::new(None),
        });
        let approver: Arc<dyn jianmu_tool_core::Approver> = retry.clone();
        Ok((Some(approver), modern.then_some(retry)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio server makes its listing while the client opens the protocol session,
    /// before any `tools/list` asks for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stdio_server_lists_before_it_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let session = Arc::new(
            Session::open(
                jianmu_runtime::SessionSettings::new(jianmu_tool_core::ToolConfig::new(dir.path()))
                    .with_tools(jianmu_runtime::Tools::set(
                        jianmu_tool_core::ToolSet::from_tools([jianmu_tool_core::ToolHandle::new(
                            jianmu_tool_core::FunctionTool::from_sync(
                                jianmu_tool_core::ToolSpec::new("echo", "Echoes."),
                                |v| Ok(v.to_string().into()),
                            ),
                        )
                        .unwrap()]),
                    )),
            )
            .unwrap(),
        );
        let server = Server::new(session);
        let listing = Arc::clone(&server.listing);
        let (client, ours) = tokio::io::duplex(1 << 16);
        let (ours_in, ours_out) = tokio::io::split(ours);
        let serving = tokio::spawn(server.serve_on(ours_in, ours_out));
        // Nothing is sent: the client has not even begun its handshake.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !listing.is_made() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            listing.is_made(),
            "no listing was made before the first tools/list"
        );
        assert!(
            listing
                .tools(listing.made(|| panic!("made already")))
                .iter()
                .any(|t| t.name == "echo")
        );
        drop(client);
        let _ = serving.await;
    }
}
