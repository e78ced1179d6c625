//! The `Tool` trait for authors, its object-safe twin `DynTool`, and `ToolHandle`, the
//! shared, validated form every registry and runner works with.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::args::ArgsValidator;
use crate::{
    Calls, DynRunner, InProcess, IntoToolOutput, PreparedCall, Progress, ProgressSink, Runner,
    ToolError, ToolNode, ToolOutput, ToolSpec, Violation,
};
use async_trait::async_trait;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A tool with typed arguments, the trait to implement by hand.
///
/// The input schema defaults to the JSON Schema of `Args`; every call is validated
/// against it before `call` runs, so `call` only sees well-formed arguments.
///
/// ```
/// use jianmu_tool_core::{CallContext, Tool, ToolError, ToolHandle};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// Who to greet.
///     name: String,
/// }
///
/// struct Greet;
///
/// impl Tool for Greet {
///     type Args = Args;
///     type Output = String;
///     type Error = ToolError;
///
///     const NAME: &'static str = "greet";
///     const DESCRIPTION: &'static str = "Greets someone by name.";
///
///     async fn call(&self, args: Args, _cx: &CallContext) -> Result<String, ToolError> {
///         Ok(format!("hello, {}", args.name))
///     }
/// }
///
/// # fn main() -> Result<(), ToolError> {
/// let tool = ToolHandle::new(Greet)?;
/// assert_eq!(tool.spec().input_schema["required"][0], "name");
/// # Ok(())
/// # }
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The arguments, deserialized from the model's JSON.
    type Args: DeserializeOwned + schemars::JsonSchema + Send + 'static;
    /// What a successful call returns.
    type Output: IntoToolOutput + Send;
    /// What a failed call returns.
    type Error: Into<ToolError> + Send;

    /// The unique name a model calls the tool by.
    const NAME: &'static str;

    /// What the tool does, written for the model.
    const DESCRIPTION: &'static str;

    /// Whether calls may run concurrently with other calls; by default true.
    const PARALLEL_SAFE: bool = true;

    /// Side effects, such as `filesystem:write`; by default none.
    const EFFECTS: &'static [&'static str] = &[];

    /// JSON Schema of the arguments; by default derived from `Args`.
    fn input_schema() -> Value
    where
        Self: Sized,
    {
        crate::schema_for::<Self::Args>()
    }

    /// JSON Schema of the output; by default the one `Output` declares
    /// ([`IntoToolOutput::output_schema`]: derived from `T` for [`crate::Structured<T>`]
    /// and [`crate::Json<T>`]), else a string. Override it only for an output typed at
    /// run time.
    fn output_schema() -> Value
    where
        Self: Sized,
    {
        crate::output_schema_of::<Self::Output>()
    }

    /// Runs the tool on validated arguments.
    fn call(
        &self,
        args: Self::Args,
        cx: &CallContext,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

/// The object-safe form of a tool, stored as `Arc<dyn DynTool>` by registries.
/// Every [`Tool`] is a `DynTool`; [`crate::FunctionTool`] implements it directly.
#[async_trait]
pub trait DynTool: Send + Sync + 'static {
    /// The tool's spec; called once when the tool is wrapped in a [`ToolHandle`].
    fn spec(&self) -> ToolSpec;

    /// Runs the tool on arguments that already passed validation.
    ///
    /// # Errors
    /// Whatever the tool reports; see [`ToolError`].
    async fn call_json(&self, args: Value, cx: &CallContext) -> Result<ToolOutput, ToolError>;
}

/// The spec of the tool type `T`, made without an instance: listing tools, exporting
/// schemas and validating arguments build no tool.
///
/// Deriving the schemas is the costly part, so each type's spec is made once per
/// process and cloned after.
pub fn spec_of<T: Tool>() -> ToolSpec {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    // One entry per tool type linked in: bounded by the program.
    static SPECS: OnceLock<Mutex<HashMap<TypeId, ToolSpec>>> = OnceLock::new();
    let specs = SPECS.get_or_init(Mutex::default);
    let key = TypeId::of::<T>();
    if let Some(spec) = specs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return spec.clone();
    }
    let spec = ToolSpec::new(T::NAME, T::DESCRIPTION)
        .with_input_schema(T::input_schema())
        .with_output_schema(T::output_schema())
        .with_parallel_safe(T::PARALLEL_SAFE)
        .with_effect_tags(T::EFFECTS.iter().copied());
    specs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, spec.clone());
    spec
}

#[async_trait]
impl<T: Tool> DynTool for T {
    fn spec(&self) -> ToolSpec {
        spec_of::<T>()
    }

    async fn call_json(&self, args: Value, cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
                tool: T::NAME.to_owned(),
                violations: vec![Violation {
                    pointer: String::new(),
                    message: e.to_string(),
                }],
            })?;
        match self.call(args, cx).await {
            Ok(output) => output.into_tool_output(),
            Err(e) => Err(e.into()),
        }
    }
}

/// Identity and caller context of one call, passed down to runners and events.
#[derive(Clone)]
pub struct CallContext {
    call_id: CallId,
    parent: Option<Arc<str>>,
    event_context: Option<Arc<Value>>,
    progress: Option<ProgressSink>,
    calls: Option<Arc<dyn Calls>>,
    approver: Option<Arc<dyn crate::Approver>>,
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("call_id", &self.call_id())
            .field("parent", &self.parent)
            .field("event_context", &self.event_context)
            .field("progress", &self.progress.is_some())
            .field("calls", &self.calls.is_some())
            .field("approver", &self.approver.is_some())
            .finish()
    }
}

/// A call id: `call-N` kept inline (no allocation on the hot path), or one given.
#[derive(Debug, Clone)]
enum CallId {
    Counted { text: [u8; 25], len: u8 },
    Given(Arc<str>),
}

impl CallId {
    fn counted(n: u64) -> Self {
        use std::io::Write as _;
        let mut text = [0u8; 25];
        text[..5].copy_from_slice(b"call-");
        let mut rest = &mut text[5..];
        // 20 digits hold any u64, so the write cannot run out of room.
        let _ = write!(rest, "{n}");
        let len = 25 - rest.len();
        Self::Counted {
            text,
            len: len as u8,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Only ASCII digits and `call-` are ever written there.
            Self::Counted { text, len } => {
                std::str::from_utf8(&text[..usize::from(*len)]).unwrap_or("call")
            }
            Self::Given(id) => id,
        }
    }
}

impl CallContext {
    /// A context with a fresh, process-unique call id.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            call_id: CallId::counted(NEXT.fetch_add(1, Ordering::Relaxed)),
            parent: None,
            event_context: None,
            progress: None,
            calls: None,
            approver: None,
        }
    }

    /// Uses `id` (for example the model's tool-call id) as the call id.
    #[must_use]
    pub fn with_call_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.call_id = CallId::Given(id.into());
        self
    }

    /// Marks the call as made by the call `parent` (a tool calling tools).
    #[must_use]
    pub fn with_parent(mut self, parent: impl Into<Arc<str>>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Lets the call's tool call the session's other tools through `calls`.
    #[must_use]
    pub fn with_calls(mut self, calls: Arc<dyn Calls>) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Asks `approver` before the call when an `ask` rule of the policy matches it.
    #[must_use]
    pub fn with_approver(mut self, approver: Arc<dyn crate::Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Who answers the call's `ask` rules (`None`: nobody, so such a call is refused).
    pub fn approver(&self) -> Option<&Arc<dyn crate::Approver>> {
        self.approver.as_ref()
    }

    /// The id of the call that made this one, if a tool made it.
    pub fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// The session's tools, for a tool that calls tools (`None` outside a session).
    pub fn calls(&self) -> Option<&Arc<dyn Calls>> {
        self.calls.as_ref()
    }

    /// Attaches the caller's context, copied into every event of the call.
    #[must_use]
    pub fn with_event_context(mut self, context: Value) -> Self {
        self.event_context = Some(Arc::new(context));
        self
    }

    /// Sends the call's progress reports to `sink`.
    #[must_use]
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// The call id.
    pub fn call_id(&self) -> &str {
        self.call_id.as_str()
    }

    /// True when the caller wants progress reports; tools skip counting otherwise.
    pub fn wants_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Where progress reports go, if anywhere (for runners that forward them).
    pub fn progress_sink(&self) -> Option<&ProgressSink> {
        self.progress.as_ref()
    }

    /// Reports progress to the caller, if it asked for it.
    pub fn report_progress(&self, progress: &Progress) {
        if let Some(sink) = &self.progress {
            sink(progress);
        }
    }

    /// The caller's context, if any.
    pub fn event_context(&self) -> Option<&Value> {
        self.event_context.as_deref()
    }
}

impl Default for CallContext {
    fn default() -> Self {
        Self::new()
    }
}

/// Options of [`ToolHandle::execute`], as the Python tools' `execute()`
/// keywords (docs/python-compat.md). Start from
/// `ExecuteOptions::default()` and chain the setters.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct ExecuteOptions<'a> {
    /// Arguments supplied by the runtime rather than the model.
    pub injected: Option<&'a Map<String, Value>>,
    /// When true (the default), injected values override the model's.
    pub prefer_injected: bool,
    /// Run through this runner (layers around a sandbox); [`InProcess`] when absent.
    pub runner: Option<&'a dyn DynRunner>,
    /// The caller's context for events.
    pub event_context: Option<&'a Value>,
    /// The call id; a fresh one when absent.
    pub call_id: Option<&'a str>,
    /// Where the call's progress reports go.
    pub progress: Option<&'a ProgressSink>,
    /// The session's tools, for a tool that calls tools.
    pub calls: Option<&'a Arc<dyn Calls>>,
    /// Who answers the policy's `ask` rules for this call.
    pub approver: Option<&'a Arc<dyn crate::Approver>>,
}

impl Default for ExecuteOptions<'_> {
    fn default() -> Self {
        Self {
            injected: None,
            prefer_injected: true,
            runner: None,
            event_context: None,
            call_id: None,
            progress: None,
            calls: None,
            approver: None,
        }
    }
}

impl std::fmt::Debug for ExecuteOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecuteOptions")
            .field("injected", &self.injected)
            .field("prefer_injected", &self.prefer_injected)
            .field("runner", &self.runner.map(|_| "dyn Runner"))
            .field("event_context", &self.event_context)
            .field("call_id", &self.call_id)
            .field("progress", &self.progress.is_some())
            .field("calls", &self.calls.is_some())
            .field("approver", &self.approver.is_some())
            .finish()
    }
}

impl<'a> ExecuteOptions<'a> {
    /// Sets the runner.
    #[must_use]
    pub fn runner(mut self, runner: &'a dyn DynRunner) -> Self {
        self.runner = Some(runner);
        self
    }

    /// Sets the injected arguments.
    #[must_use]
    pub fn injected(mut self, injected: &'a Map<String, Value>) -> Self {
        self.injected = Some(injected);
        self
    }

    /// Sets which side wins when both give a key.
    #[must_use]
    pub fn prefer_injected(mut self, prefer: bool) -> Self {
        self.prefer_injected = prefer;
        self
    }

    /// Sets the caller's event context.
    #[must_use]
    pub fn event_context(mut self, context: &'a Value) -> Self {
        self.event_context = Some(context);
        self
    }

    /// Sets the call id.
    #[must_use]
    pub fn call_id(mut self, id: &'a str) -> Self {
        self.call_id = Some(id);
        self
    }

    /// Sends the call's progress reports to `sink`.
    #[must_use]
    pub fn progress(mut self, sink: &'a ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// Lets the tool call the session's other tools through `calls`.
    #[must_use]
    pub fn calls(mut self, calls: &'a Arc<dyn Calls>) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Asks `approver` when an `ask` rule of the policy matches the call.
    #[must_use]
    pub fn approver(mut self, approver: &'a Arc<dyn crate::Approver>) -> Self {
        self.approver = Some(approver);
        self
    }
}

/// A tool ready to call: its spec and compiled input schema, shared and cheap to clone.
#[derive(Clone)]
pub struct ToolHandle {
    inner: Arc<Inner>,
}

struct Inner {
    spec: ToolSpec,
    /// The compiled input schema: at once for a tool wrapped whole, at the first
    /// validation for a deferred one (listing compiles nothing).
    validator: std::sync::OnceLock<Arc<ArgsValidator>>,
    tool: Body,
}

/// What runs the calls.
enum Body {
    Ready(Box<dyn DynTool>),
    /// Built on the first call (once; a failed build is tried again next call).
    Deferred {
        build: Box<dyn Fn() -> Result<ToolHandle, ToolError> + Send + Sync>,
        built: std::sync::OnceLock<ToolHandle>,
    },
}

impl std::fmt::Debug for ToolHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHandle")
            .field("name", &self.inner.spec.name)
            .finish_non_exhaustive()
    }
}

impl ToolHandle {
    /// Wraps a tool, with its input schema compiled (once per process for each
    /// schema).
    ///
    /// # Errors
    /// [`ToolError::Config`] when the input schema is not a valid JSON Schema.
    pub fn new(tool: impl DynTool) -> Result<Self, ToolError> {
        let spec = tool.spec();
        Self::with_spec(tool, spec)
    }

    /// Wraps a tool under `spec` instead of the one it reports: for tools whose
    /// description depends on their settings (what their commands may reach here).
    ///
    /// # Errors
    /// [`ToolError::Config`] when the input schema is not a valid JSON Schema.
    pub fn with_spec(tool: impl DynTool, spec: ToolSpec) -> Result<Self, ToolError> {
        let validator = ArgsValidator::shared(&spec)?;
        Ok(Self {
            inner: Arc::new(Inner {
                spec,
                validator: std::sync::OnceLock::from(validator),
                tool: Body::Ready(Box::new(tool)),
            }),
        })
    }

    /// A tool known by its `spec` alone until its first call, which runs `build` (the
    /// handle's spec stays `spec`). Listing it and exporting its schema build and
    /// compile nothing: the input schema is compiled at the first validation (an
    /// invalid one fails that call with [`ToolError::Config`]), and a runner that sends
    /// the call elsewhere (a sandbox container) never builds the tool here.
    pub fn deferred(
        spec: ToolSpec,
        build: impl Fn() -> Result<ToolHandle, ToolError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                spec,
                validator: std::sync::OnceLock::new(),
                tool: Body::Deferred {
                    build: Box::new(build),
                    built: std::sync::OnceLock::new(),
                },
            }),
        }
    }

    /// Whether the tool itself exists yet (a deferred tool is built on its first
    /// call).
    pub fn is_built(&self) -> bool {
        match &self.inner.tool {
            Body::Ready(_) => true,
            Body::Deferred { built, .. } => built.get().is_some_and(ToolHandle::is_built),
        }
    }

    /// Builds a deferred tool now, so that one that refuses its settings is found
    /// before a call.
    ///
    /// # Errors
    /// The build's error.
    pub fn build_now(&self) -> Result<(), ToolError> {
        self.body().map(drop)
    }

    /// The tool that runs the calls, built first if it is deferred.
    fn body(&self) -> Result<&dyn DynTool, ToolError> {
        match &self.inner.tool {
            Body::Ready(tool) => Ok(tool.as_ref()),
            Body::Deferred { build, built } => {
                let handle = match built.get() {
                    Some(handle) => handle,
                    None => {
                        let handle = build()?;
                        // Two callers may race to build; the first one stored wins.
                        built.get_or_init(|| handle)
                    }
                };
                handle.body()
            }
        }
    }

    /// The compiled input schema, compiled now if it is not yet (a deferred tool's
    /// first validation).
    fn validator(&self) -> Result<&Arc<ArgsValidator>, ToolError> {
        if let Some(validator) = self.inner.validator.get() {
            return Ok(validator);
        }
        let validator = ArgsValidator::shared(&self.inner.spec)?;
        Ok(self.inner.validator.get_or_init(|| validator))
    }

    /// Whether both handles validate with one compiled schema.
    #[cfg(test)]
    pub(crate) fn shares_validator(&self, other: &ToolHandle) -> bool {
        match (self.validator(), other.validator()) {
            (Ok(one), Ok(two)) => Arc::ptr_eq(one, two),
            _ => false,
        }
    }

    /// Whether the input schema has been compiled for this handle.
    #[cfg(test)]
    pub(crate) fn is_compiled(&self) -> bool {
        self.inner.validator.get().is_some()
    }

    /// The tool's spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.inner.spec
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// Merges injected arguments and validates the result against the input schema;
    /// the first half of [`ToolHandle::execute`], for runners that need it alone.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] listing every violation with its JSON pointer.
    pub fn prepare_args(
        &self,
        args: Value,
        injected: Option<&Map<String, Value>>,
        prefer_injected: bool,
    ) -> Result<Value, ToolError> {
        self.validator()?
            .prepare(self.name(), args, injected, prefer_injected)
    }

    /// The call path: merge injected arguments, validate them, then run through
    /// `options.runner`, else [`InProcess`].
    ///
    /// # Errors
    /// Invalid arguments, the tool's own failures, and runner failures; see
    /// [`ToolError::is_model_facing`] for which the model should see.
    pub async fn execute(
        &self,
        args: Value,
        options: ExecuteOptions<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let args = self.prepare_args(args, options.injected, options.prefer_injected)?;
        let mut cx = CallContext::new();
        if let Some(id) = options.call_id {
            cx = cx.with_call_id(id);
        }
        if let Some(context) = options.event_context {
            cx = cx.with_event_context(context.clone());
        }
        if let Some(sink) = options.progress {
            cx = cx.with_progress(Arc::clone(sink));
        }
        if let Some(calls) = options.calls {
            cx = cx.with_calls(Arc::clone(calls));
        }
        if let Some(approver) = options.approver {
            cx = cx.with_approver(Arc::clone(approver));
        }
        match options.runner {
            Some(runner) => runner.run_dyn(PreparedCall::new(self, args, &cx)).await,
            None => InProcess.run(PreparedCall::new(self, args, &cx)).await,
        }
    }

    /// Runs the tool body on arguments that went through [`ToolHandle::prepare_args`].
    /// Sandboxes call this; everyone else calls [`ToolHandle::execute`]. A panic in the
    /// body is caught and becomes [`ToolError::Runner`]: a bug in one tool never takes
    /// the process down.
    ///
    /// # Errors
    /// Whatever the tool reports.
    pub async fn run_prepared(
        &self,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        // A deferred tool is built first; a build that panics is caught as a call would be.
        let tool = match &self.inner.tool {
            Body::Ready(tool) => tool.as_ref(),
            Body::Deferred { .. } => {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.body())) {
                    Ok(built) => built?,
                    Err(panic) => return Err(self.panicked(&*panic)),
                }
            }
        };
        let body = std::panic::AssertUnwindSafe(tool.call_json(args, cx));
        match body.catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(self.panicked(&*panic)),
        }
    }

    /// What a panic in the tool becomes: a runner error naming the tool.
    fn panicked(&self, panic: &(dyn std::any::Any + Send)) -> ToolError {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        ToolError::runner(self.name(), format!("the tool panicked: {what}"))
    }

    /// Binds this tool to fixed arguments, as one step of an explicit workflow.
    pub fn as_node(&self) -> ToolNode {
        ToolNode::new(self.clone())
    }
}
