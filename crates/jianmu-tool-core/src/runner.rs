//! The one runner contract: [`Runner`] runs a prepared call; [`DynRunner`] is its
//! object-safe twin; [`InProcess`] is the runner every call without one goes
//! through.
//!
//! Where calls run ([`InProcess`], a sandbox container) implements [`Runner`] directly. Policy,
//! events, timeouts and tracing spans are layers: runners that hold another runner
//! and add one concern each (see `jianmu-runtime`). Layers are generic over the
//! runner they wrap, so a stack of them costs no allocation per layer; the one boxed
//! future of a call is where it crosses [`DynRunner`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::{CallContext, ToolError, ToolHandle, ToolOutput};

/// A boxed, sendable future, as [`DynRunner`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A call ready to run: the tool, its arguments already merged and validated by
/// [`ToolHandle::execute`], and the call's context.
#[derive(Debug)]
#[non_exhaustive]
pub struct PreparedCall<'a> {
    /// The tool to run.
    pub tool: &'a ToolHandle,
    /// Its prepared arguments.
    pub args: Value,
    /// The call's id and the caller's context.
    pub cx: &'a CallContext,
}

impl<'a> PreparedCall<'a> {
    /// A prepared call of `tool`.
    pub fn new(tool: &'a ToolHandle, args: Value, cx: &'a CallContext) -> Self {
        Self { tool, args, cx }
    }

    /// Runs the tool body here, on the calling task (what [`InProcess`] does).
    ///
    /// # Errors
    /// As [`ToolHandle::run_prepared`].
    pub fn run_here(self) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send + 'a {
        self.tool.run_prepared(self.args, self.cx)
    }
}

/// Runs prepared calls.
///
/// ```
/// use jianmu_tool_core::{PreparedCall, Runner, ToolError, ToolOutput};
///
/// /// Runs every call in-process and counts them.
/// #[derive(Default)]
/// struct Counting(std::sync::atomic::AtomicU64);
///
/// impl Runner for Counting {
///     async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         call.run_here().await
///     }
/// }
/// ```
pub trait Runner: Send + Sync {
    /// Runs `call`.
    ///
    /// # Errors
    /// The tool's own errors, or the runner's when it cannot run the tool
    /// ([`ToolError::Runner`], [`ToolError::Cancelled`]).
    fn run(
        &self,
        call: PreparedCall<'_>,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;

    /// A short name for logs and spans (`local`, `docker`); layers report the name of
    /// the runner they wrap.
    fn name(&self) -> &str {
        "runner"
    }

    /// Releases what the runner holds (containers); it may start again on the next
    /// call. The default does nothing.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The object-safe form of [`Runner`], for `&dyn DynRunner` and `Arc<dyn DynRunner>`.
/// Every [`Runner`] is a `DynRunner`; implement [`Runner`], not this.
pub trait DynRunner: Send + Sync {
    /// [`Runner::run`], boxed.
    fn run_dyn<'a>(
        &'a self,
        call: PreparedCall<'a>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

    /// [`Runner::name`].
    fn name_dyn(&self) -> &str;

    /// [`Runner::shutdown`], boxed.
    fn shutdown_dyn(&self) -> BoxFuture<'_, ()>;
}

impl<R: Runner> DynRunner for R {
    fn run_dyn<'a>(
        &'a self,
        call: PreparedCall<'a>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(call))
    }

    fn name_dyn(&self) -> &str {
        self.name()
    }

    fn shutdown_dyn(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.shutdown())
    }
}

impl Runner for dyn DynRunner {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        self.run_dyn(call).await
    }

    fn name(&self) -> &str {
        self.name_dyn()
    }

    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        self.shutdown_dyn()
    }
}

impl<R: Runner + ?Sized> Runner for Arc<R> {
    fn run(
        &self,
        call: PreparedCall<'_>,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        (**self).run(call)
    }

    fn name(&self) -> &str {
        (**self).name()
    }

    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        (**self).shutdown()
    }
}

/// Runs every call in this process, on the calling task: the runner of every call
/// that names none. It isolates nothing itself: the tools that start programs
/// (`bash`, `python_repl`) confine them with their own jail.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

impl Runner for InProcess {
    fn run(
        &self,
        call: PreparedCall<'_>,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        call.run_here()
    }

    fn name(&self) -> &str {
        "local"
    }
}
