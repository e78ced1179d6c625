//! `ToolNode`: a tool bound to arguments, one step of an explicit workflow.

use serde_json::{Map, Value};

use crate::{DynRunner, ExecuteOptions, ToolError, ToolHandle, ToolOutput};

/// A tool with fixed arguments and injected values. Running it goes through the same
/// call path as a model's call: merge, validate, runner.
#[derive(Debug, Clone)]
pub struct ToolNode {
    tool: ToolHandle,
    args: Value,
    injected: Map<String, Value>,
}

impl ToolNode {
    /// A node with no arguments yet.
    pub fn new(tool: ToolHandle) -> Self {
        Self {
            tool,
            args: Value::Null,
            injected: Map::new(),
        }
    }

    /// Fixes the arguments the node calls the tool with.
    #[must_use]
    pub fn with_args(mut self, args: Value) -> Self {
        self.args = args;
        self
    }

    /// Injects one value; injected values override the fixed arguments.
    #[must_use]
    pub fn inject(mut self, key: impl Into<String>, value: Value) -> Self {
        self.injected.insert(key.into(), value);
        self
    }

    /// The bound tool.
    pub fn tool(&self) -> &ToolHandle {
        &self.tool
    }

    /// Runs the step, through `runner` if given.
    ///
    /// # Errors
    /// As [`ToolHandle::execute`].
    pub async fn run(&self, runner: Option<&dyn DynRunner>) -> Result<ToolOutput, ToolError> {
        self.run_with(&Map::new(), runner).await
    }

    /// Runs the step with extra values from the workflow's state, which override both
    /// the fixed arguments and the node's own injected values.
    ///
    /// # Errors
    /// As [`ToolHandle::execute`].
    pub async fn run_with(
        &self,
        state: &Map<String, Value>,
        runner: Option<&dyn DynRunner>,
    ) -> Result<ToolOutput, ToolError> {
        let mut injected = self.injected.clone();
        injected.extend(state.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut options = ExecuteOptions::default().injected(&injected);
        if let Some(runner) = runner {
            options = options.runner(runner);
        }
        self.tool.execute(self.args.clone(), options).await
    }
}
