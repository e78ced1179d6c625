//! `ToolRunner`: the standard stack of layers around a sandbox, as the command and the
//! MCP server use it.

use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{
    DynRunner, EventBus, InProcess, Policy, PreparedCall, Runner, ToolError, ToolOutput,
};

use crate::layer::{WithEvents, WithPolicy, WithSpan, WithTimeout};

/// The layers every front end wants, around the sandbox `S`, outermost first:
/// events ([`WithEvents`]: a denied, timed-out or cancelled call is still reported),
/// span ([`WithSpan`]), policy ([`WithPolicy`]), timeout ([`WithTimeout`]), then the
/// sandbox. It is only this composition: any other order or set of layers is built
/// with [`crate::RunnerExt`] the same way.
///
/// `S` is a concrete sandbox ([`InProcess`], `DockerSandbox`) or, by default,
/// `Arc<dyn DynRunner>`, for a sandbox chosen at run time.
#[derive(Clone)]
pub struct ToolRunner<S = Arc<dyn DynRunner>> {
    inner: WithEvents<WithSpan<WithPolicy<WithTimeout<S>>>>,
}

impl<S> std::fmt::Debug for ToolRunner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRunner")
            .field("bus", self.events())
            .field("timeout", &self.timeout_layer().limit())
            .field("policy", self.policy())
            .finish_non_exhaustive()
    }
}

impl ToolRunner<InProcess> {
    /// The stack over [`InProcess`].
    pub fn local() -> Self {
        Self::new(InProcess)
    }
}

impl ToolRunner {
    /// The stack over a sandbox chosen at run time.
    pub fn dynamic(sandbox: impl Runner + 'static) -> Self {
        Self::new(Arc::new(sandbox) as Arc<dyn DynRunner>)
    }
}

impl<S> ToolRunner<S> {
    /// The stack over `sandbox`: its own event bus, an open policy, no timeout.
    pub fn new(sandbox: S) -> Self {
        let timeout = WithTimeout::new(sandbox, None);
        let policy = WithPolicy::new(timeout, Arc::new(Policy::default()));
        Self {
            inner: WithEvents::new(WithSpan::new(policy), EventBus::new()),
        }
    }

    /// Emits on `bus` instead of the runner's own bus.
    #[must_use]
    pub fn with_events(mut self, bus: EventBus) -> Self {
        self.inner.set_events(bus);
        self
    }

    /// Stops any call still running after `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_layer_mut().set_limit(Some(timeout));
        self
    }

    /// Refuses calls the policy denies, before they run (they still get
    /// `execution.started` and `execution.failed` events, for audit logs).
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy_layer_mut().set_policy(Arc::new(policy));
        self
    }

    /// The policy calls are checked against.
    pub fn policy(&self) -> &Policy {
        self.inner.inner().inner().policy()
    }

    /// The bus events go to.
    pub fn events(&self) -> &EventBus {
        self.inner.events()
    }

    /// The sandbox calls run in.
    pub fn sandbox(&self) -> &S {
        self.timeout_layer().inner()
    }

    fn timeout_layer(&self) -> &WithTimeout<S> {
        self.inner.inner().inner().inner()
    }

    fn timeout_layer_mut(&mut self) -> &mut WithTimeout<S> {
        self.inner.inner_mut().inner_mut().inner_mut()
    }

    fn policy_layer_mut(&mut self) -> &mut WithPolicy<WithTimeout<S>> {
        self.inner.inner_mut().inner_mut()
    }
}

impl<S: Runner> ToolRunner<S> {
    /// Shuts the sandbox down (removes its containers); see [`Runner::shutdown`].
    pub async fn shutdown(&self) {
        self.inner.shutdown().await;
    }
}

impl<S: Runner> Runner for ToolRunner<S> {
    fn run(
        &self,
        call: PreparedCall<'_>,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        self.inner.run(call)
    }

    crate::layer::delegate!();
}
