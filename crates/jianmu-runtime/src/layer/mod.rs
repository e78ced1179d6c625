//! Layers: runners that wrap another [`Runner`] and add one concern each, composable
//! in any order, like tower's layers.
//!
//! - [`WithPolicy`] refuses calls a [`Policy`] denies, and asks about those it asks
//!   about, before they run;
//! - [`WithEvents`] emits `execution.started`, `completed` and `failed` (and `failed`
//!   with `cancelled` when the call's future is dropped) on an [`EventBus`],
//!   which feeds the [`AuditLog`](crate::AuditLog) too;
//! - [`WithTimeout`] stops a call after a time limit;
//! - [`WithSpan`] runs the call inside a `tracing` span.
//!
//! [`RunnerExt`] adds them to any runner:
//!
//! ```
//! use std::time::Duration;
//! use jianmu_runtime::{InProcess, RunnerExt};
//! use jianmu_tool_core::{FunctionTool, Policy, ToolHandle, ToolSet, ToolSpec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), jianmu_tool_core::ToolError> {
//! let runner = InProcess
//!     .with_timeout(Duration::from_secs(30))
//!     .with_policy(Policy { deny: vec!["bash".into()], ..Policy::default() })
//!     .with_span();
//! let echo = FunctionTool::from_sync(ToolSpec::new("echo", "Echoes."), |v| Ok(v.to_string().into()));
//! let tools = ToolSet::from_tools([ToolHandle::new(echo)?]);
//! assert_eq!(tools.execute("echo", "hi".into(), Some(&runner)).await?.text, "\"hi\"");
//! # Ok(())
//! # }
//! ```

mod events;
mod policy;
pub(crate) mod rules;
mod span;
mod timeout;

#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{EventBus, Policy, Runner};

pub use events::WithEvents;
pub use policy::WithPolicy;
pub use span::WithSpan;
pub use timeout::WithTimeout;

/// Adds the layers of this module to any [`Runner`].
pub trait RunnerExt: Runner + Sized {
    /// Refuses the calls `policy` denies; see [`WithPolicy`].
    fn with_policy(self, policy: Policy) -> WithPolicy<Self> {
        WithPolicy::new(self, Arc::new(policy))
    }

    /// Emits lifecycle events on `bus`; see [`WithEvents`].
    fn with_events(self, bus: EventBus) -> WithEvents<Self> {
        WithEvents::new(self, bus)
    }

    /// Stops calls after `limit`; see [`WithTimeout`].
    fn with_timeout(self, limit: Duration) -> WithTimeout<Self> {
        WithTimeout::new(self, Some(limit))
    }

    /// Runs calls in a `tracing` span; see [`WithSpan`].
    fn with_span(self) -> WithSpan<Self> {
        WithSpan::new(self)
    }
}

impl<R: Runner> RunnerExt for R {}

/// Implements the delegating parts of [`Runner`] (name, shutdown) for a layer whose
/// wrapped runner is the field `inner`.
macro_rules! delegate {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn shutdown(&self) -> impl std::future::Future<Output = ()> + Send {
            self.inner.shutdown()
        }
    };
}
pub(crate) use delegate;
