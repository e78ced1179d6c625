//! `FunctionTool`: a tool made from a plain function, what `#[tool]` expands to.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::{CallContext, DynTool, ToolError, ToolOutput, ToolSpec};

type Body = dyn Fn(Value) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A tool whose body is a closure over the (validated) JSON arguments.
#[derive(Clone)]
pub struct FunctionTool {
    spec: ToolSpec,
    body: Arc<Body>,
}

impl std::fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl FunctionTool {
    /// A tool from an async body.
    pub fn new<F, Fut>(spec: ToolSpec, body: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Self {
            spec,
            body: Arc::new(move |args| Box::pin(body(args))),
        }
    }

    /// A tool from a sync body, run inline on the calling task.
    pub fn from_sync<F>(spec: ToolSpec, body: F) -> Self
    where
        F: Fn(Value) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    {
        Self {
            spec,
            body: Arc::new(move |args| {
                let result = body(args);
                Box::pin(std::future::ready(result))
            }),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Changes the spec, for example to set effect tags.
    #[must_use]
    pub fn map_spec(mut self, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Self {
        self.spec = f(self.spec);
        self
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::text(text)
    }
}

#[async_trait]
impl DynTool for FunctionTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call_json(&self, args: Value, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        (self.body)(args).await
    }
}
