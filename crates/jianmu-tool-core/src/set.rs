//! `ToolSet`: the tools an agent may call, looked up by name or alias, and
//! `ToolProvider`, where sets come from.

use std::collections::HashMap;

use serde_json::Value;

use crate::{ExecuteOptions, Runner, ToolError, ToolHandle, ToolOutput, ToolSpec};

/// A source of tools, such as the built-in provider.
pub trait ToolProvider {
    /// Every tool the provider offers, sorted by name.
    ///
    /// # Errors
    /// When a tool cannot be built from its configuration.
    fn tools(&self) -> Result<Vec<ToolHandle>, ToolError>;

    /// The named tools, in the order asked for; aliases are accepted.
    ///
    /// # Errors
    /// An unknown name, or a tool that cannot be built.
    fn resolve(&self, names: &[&str]) -> Result<Vec<ToolHandle>, ToolError>;

    /// Alias → canonical name pairs the provider understands.
    fn aliases(&self) -> &[(&'static str, &'static str)] {
        &[]
    }
}

/// One call of a batch, as a model asks for it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolCall {
    /// The tool's name or alias.
    pub name: String,
    /// The arguments.
    pub args: Value,
    /// The model's id for the call, if it gave one.
    pub call_id: Option<String>,
}

impl ToolCall {
    /// A call of `name` with `args`.
    pub fn new(name: impl Into<String>, args: Value) -> Self {
        Self {
            name: name.into(),
            args,
            call_id: None,
        }
    }

    /// Sets the call id.
    #[must_use]
    pub fn with_call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }
}

/// An ordered set of tools with unique names. Adding a tool whose name is already
/// present replaces the old one in place (last wins), so merges are deterministic.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Vec<ToolHandle>,
    index: HashMap<String, usize>,
    aliases: HashMap<String, String>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set from tool instances; later duplicates win.
    pub fn from_tools(tools: impl IntoIterator<Item = ToolHandle>) -> Self {
        let mut set = Self::new();
        for tool in tools {
            set.insert(tool);
        }
        set
    }

    /// The named tools from `provider`, in the order asked for, with its aliases.
    ///
    /// # Errors
    /// As [`ToolProvider::resolve`].
    pub fn resolve(provider: &dyn ToolProvider, names: &[&str]) -> Result<Self, ToolError> {
        let mut set = Self::from_tools(provider.resolve(names)?);
        set.add_aliases(provider.aliases());
        Ok(set)
    }

    /// Every tool of every provider; a later provider's tool replaces an earlier one of
    /// the same name.
    ///
    /// # Errors
    /// As [`ToolProvider::tools`].
    pub fn from_providers(providers: &[&dyn ToolProvider]) -> Result<Self, ToolError> {
        let mut set = Self::new();
        for provider in providers {
            for tool in provider.tools()? {
                set.insert(tool);
            }
            set.add_aliases(provider.aliases());
        }
        Ok(set)
    }

    /// Adds `tool`, replacing a tool of the same name in place.
    pub fn insert(&mut self, tool: ToolHandle) {
        match self.index.get(tool.name()) {
            Some(&i) => self.tools[i] = tool,
            None => {
                self.index.insert(tool.name().to_owned(), self.tools.len());
                self.tools.push(tool);
            }
        }
    }

    /// Both sets together; on a name clash `other`'s tool wins.
    #[must_use]
    pub fn merge(mut self, other: ToolSet) -> Self {
        for tool in other.tools {
            self.insert(tool);
        }
        self.aliases.extend(other.aliases);
        self
    }

    fn add_aliases(&mut self, aliases: &[(&'static str, &'static str)]) {
        for (alias, canonical) in aliases {
            self.aliases
                .insert((*alias).to_owned(), (*canonical).to_owned());
        }
    }

    /// The canonical name `name` stands for in this set (itself if not an alias).
    pub fn canonical_name<'a>(&'a self, name: &'a str) -> &'a str {
        if self.index.contains_key(name) {
            return name;
        }
        self.aliases.get(name).map_or(name, String::as_str)
    }

    /// The tool called `name` or aliased by it.
    pub fn get(&self, name: &str) -> Option<&ToolHandle> {
        self.index
            .get(self.canonical_name(name))
            .map(|&i| &self.tools[i])
    }

    /// The tools, in order.
    pub fn iter(&self) -> impl Iterator<Item = &ToolHandle> {
        self.tools.iter()
    }

    /// Every tool's spec, in order.
    pub fn specs(&self) -> Vec<&ToolSpec> {
        self.tools.iter().map(ToolHandle::spec).collect()
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(ToolHandle::name).collect()
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Calls the tool `name` (or aliased by it) with `args`, through `runner` if given.
    ///
    /// # Errors
    /// [`ToolError::UnknownTool`] listing the known names, else as
    /// [`ToolHandle::execute`].
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        runner: Option<&dyn Runner>,
    ) -> Result<ToolOutput, ToolError> {
        let mut options = ExecuteOptions::default();
        if let Some(runner) = runner {
            options = options.runner(runner);
        }
        self.execute_with(name, args, options).await
    }

    /// As [`ToolSet::execute`], with every option of the call path.
    ///
    /// # Errors
    /// As [`ToolSet::execute`].
    pub async fn execute_with(
        &self,
        name: &str,
        args: Value,
        options: ExecuteOptions<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let tool = self.get(name).ok_or_else(|| self.unknown(name))?;
        tool.execute(args, options).await
    }

    /// Runs a batch of calls and returns their results in call order. Consecutive
    /// parallel-safe calls run concurrently; a call to a tool that is not
    /// parallel-safe runs alone, after everything before it and before everything
    /// after it, so the batch's effects keep the model's order.
    pub async fn execute_batch(
        &self,
        calls: &[ToolCall],
        runner: Option<&dyn Runner>,
    ) -> Vec<Result<ToolOutput, ToolError>> {
        let exclusive = |call: &ToolCall| {
            self.get(&call.name)
                .is_some_and(|t| !t.spec().parallel_safe)
        };
        let mut results = Vec::with_capacity(calls.len());
        let mut rest = calls;
        while let Some(first) = rest.first() {
            if exclusive(first) {
                results.push(self.run_call(first, runner).await);
                rest = &rest[1..];
                continue;
            }
            let group = rest.iter().take_while(|c| !exclusive(c)).count();
            let outputs =
                futures::future::join_all(rest[..group].iter().map(|c| self.run_call(c, runner)))
                    .await;
            results.extend(outputs);
            rest = &rest[group..];
        }
        results
    }

    async fn run_call(
        &self,
        call: &ToolCall,
        runner: Option<&dyn Runner>,
    ) -> Result<ToolOutput, ToolError> {
        let mut options = ExecuteOptions::default();
        if let Some(runner) = runner {
            options = options.runner(runner);
        }
        if let Some(id) = &call.call_id {
            options = options.call_id(id);
        }
        self.execute_with(&call.name, call.args.clone(), options)
            .await
    }

    fn unknown(&self, name: &str) -> ToolError {
        let mut known: Vec<String> = self.index.keys().cloned().collect();
        known.extend(self.aliases.keys().cloned());
        known.sort();
        ToolError::UnknownTool {
            name: name.to_owned(),
            known,
        }
    }
}
