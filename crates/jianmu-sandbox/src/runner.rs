//! `Sandbox`, the seed's execution environment, and `ToolRunner`, the layer that adds
//! events, spans and timeouts around one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jianmu_tool_core::{
    CallContext, EventBus, EventKind, ExecutionEvent, Policy, Runner, ToolError, ToolHandle,
    ToolOutput,
};
use serde_json::Value;
use tracing::Instrument;

use crate::LocalSandbox;

/// An environment that can run a tool: in-process, or in a container.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// Runs `tool` on validated `args`.
    ///
    /// # Errors
    /// The tool's errors, or [`ToolError::Runner`] when the sandbox itself fails.
    async fn run_tool(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError>;

    /// A short name for logs (`local`, `docker`).
    fn name(&self) -> &str;

    /// Releases what the sandbox holds (containers); it may start again on the next
    /// call. The default does nothing.
    async fn shutdown(&self) {}
}

/// A [`Runner`] over a [`Sandbox`] that emits lifecycle events and enforces a timeout.
#[derive(Clone)]
pub struct ToolRunner {
    sandbox: Arc<dyn Sandbox>,
    bus: EventBus,
    timeout: Option<Duration>,
    policy: Arc<Policy>,
}

impl std::fmt::Debug for ToolRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRunner")
            .field("sandbox", &self.sandbox.name())
            .field("bus", &self.bus)
            .field("timeout", &self.timeout)
            .field("policy", &self.policy)
            .finish()
    }
}

impl ToolRunner {
    /// A runner over `sandbox`, with its own event bus and no timeout.
    pub fn new(sandbox: impl Sandbox + 'static) -> Self {
        Self {
            sandbox: Arc::new(sandbox),
            bus: EventBus::new(),
            timeout: None,
            policy: Arc::new(Policy::default()),
        }
    }

    /// A runner over [`LocalSandbox`].
    pub fn local() -> Self {
        Self::new(LocalSandbox)
    }

    /// Emits on `bus` instead of the runner's own bus.
    #[must_use]
    pub fn with_events(mut self, bus: EventBus) -> Self {
        self.bus = bus;
        self
    }

    /// Stops any call still running after `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Refuses calls the policy denies, before they run (they still get
    /// `execution.started` and `execution.failed` events, for audit logs).
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// The policy calls are checked against.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The bus events go to.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// The sandbox calls run in.
    pub fn sandbox(&self) -> &dyn Sandbox {
        &*self.sandbox
    }

    /// Shuts the sandbox down (removes its containers); see [`Sandbox::shutdown`].
    pub async fn shutdown(&self) {
        self.sandbox.shutdown().await;
    }
}

/// Emits `execution.failed` with `cancelled` if the call's future is dropped before it
/// finishes.
struct Pending<'a> {
    bus: &'a EventBus,
    tool: &'a str,
    cx: &'a CallContext,
    args: Option<&'a Value>,
    started: Instant,
    done: bool,
}

impl Pending<'_> {
    fn emit(&self, kind: EventKind, error: Option<&str>) {
        let mut event = ExecutionEvent::new(kind, self.tool, self.cx.call_id());
        event.context = self.cx.event_context();
        event.arguments = self.args;
        event.elapsed = self.started.elapsed();
        event.error = error;
        self.bus.emit(&event);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.emit(EventKind::Failed, Some("cancelled"));
        }
    }
}

#[async_trait]
impl Runner for ToolRunner {
    async fn run(
        &self,
        tool: &ToolHandle,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        let span = tracing::debug_span!(
            "tool",
            name = tool.name(),
            call_id = cx.call_id(),
            sandbox = self.sandbox.name()
        );
        // Events carry the arguments; copy them only when someone listens.
        let logged = self.bus.has_subscribers().then(|| args.clone());
        let mut pending = Pending {
            bus: &self.bus,
            tool: tool.name(),
            cx,
            args: logged.as_ref(),
            started: Instant::now(),
            done: false,
        };
        pending.emit(EventKind::Started, None);
        let result = match self.policy.check(tool.spec()) {
            Err(denied) => Err(denied),
            Ok(()) => {
                let work = self.sandbox.run_tool(tool, args, cx).instrument(span);
                match self.timeout {
                    None => work.await,
                    Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                        Err(ToolError::Timeout {
                            tool: tool.name().to_owned(),
                            after: limit,
                        })
                    }),
                }
            }
        };
        pending.done = true;
        match &result {
            Ok(_) => pending.emit(EventKind::Completed, None),
            Err(e) => pending.emit(EventKind::Failed, Some(&e.to_string())),
        }
        result
    }
}
