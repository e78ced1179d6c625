//! `ToolSet`: the tools an agent may call, looked up by name or alias, and
//! `ToolProvider`, where sets come from.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::{DynRunner, ExecuteOptions, ToolError, ToolHandle, ToolOutput, ToolSpec};

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

    /// The canonical names of every tool the provider offers, without building them.
    ///
    /// # Errors
    /// As [`ToolProvider::tools`], which the default calls.
    fn names(&self) -> Result<Vec<String>, ToolError> {
        Ok(self.tools()?.iter().map(|t| t.name().to_owned()).collect())
    }

    /// Builds the tool of canonical name `name`.
    ///
    /// # Errors
    /// An unknown name (the provider may say which feature would add it), or a tool
    /// that cannot be built.
    fn build(&self, name: &str) -> Result<ToolHandle, ToolError> {
        let mut tools = self.resolve(&[name])?;
        tools.pop().ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
            known: Vec::new(),
        })
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

/// An ordered set of tools with unique names, and the one place a call's name or
/// alias is resolved: every front end (library, `jianmu call`, `jianmu mcp`, a
/// sandbox's runner) calls through [`ToolSet::execute`]. Adding a tool whose name is
/// already present replaces the old one in place (last wins), so merges are
/// deterministic. A set made by [`ToolSet::lazy`] builds each tool on first use.
/// Clones share their tools (and so the state of stateful tools).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Slot>,
    index: HashMap<String, usize>,
    aliases: HashMap<String, String>,
    /// The provider asked which feature adds a tool the set lacks (the first lazy
    /// one merged in).
    source: Option<Source>,
}

type Source = Arc<dyn ToolProvider + Send + Sync>;

/// A tool, or the place it is built into on first use by its own provider (so a
/// merge of lazy sets builds each tool where it came from).
#[derive(Clone)]
struct Slot {
    name: String,
    tool: Arc<OnceLock<ToolHandle>>,
    source: Option<Source>,
}

impl Slot {
    fn built(tool: ToolHandle) -> Self {
        Self {
            name: tool.name().to_owned(),
            tool: Arc::new(OnceLock::from(tool)),
            source: None,
        }
    }
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.names())
            .field("aliases", &self.aliases)
            .field("lazy", &self.source.is_some())
            .finish()
    }
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

    /// Every tool of `provider`, each built on its first call (or when its spec is
    /// first asked for), with the provider's aliases. A tool that cannot be built
    /// fails the calls to it, not the set.
    ///
    /// # Errors
    /// As [`ToolProvider::names`].
    pub fn lazy(provider: impl ToolProvider + Send + Sync + 'static) -> Result<Self, ToolError> {
        let names = provider.names()?;
        let source: Source = Arc::new(provider);
        let mut set = Self::new();
        for name in names {
            set.insert_slot(Slot {
                name,
                tool: Arc::default(),
                source: Some(Arc::clone(&source)),
            });
        }
        set.add_aliases(source.aliases());
        set.source = Some(source);
        Ok(set)
    }

    /// Adds `tool`, replacing a tool of the same name in place.
    pub fn insert(&mut self, tool: ToolHandle) {
        self.insert_slot(Slot::built(tool));
    }

    fn insert_slot(&mut self, slot: Slot) {
        match self.index.get(&slot.name) {
            Some(&i) => self.tools[i] = slot,
            None => {
                self.index.insert(slot.name.clone(), self.tools.len());
                self.tools.push(slot);
            }
        }
    }

    /// Both sets together; on a name clash `other`'s tool wins.
    #[must_use]
    pub fn merge(mut self, other: ToolSet) -> Self {
        for slot in other.tools {
            self.insert_slot(slot);
        }
        self.aliases.extend(other.aliases);
        if self.source.is_none() {
            self.source = other.source;
        }
        self
    }

    /// Adds the aliases whose tool is in the set.
    fn add_aliases(&mut self, aliases: &[(&'static str, &'static str)]) {
        for (alias, canonical) in aliases {
            if self.index.contains_key(*canonical) {
                self.aliases
                    .insert((*alias).to_owned(), (*canonical).to_owned());
            }
        }
    }

    /// The canonical name `name` stands for in this set (itself if not an alias).
    pub fn canonical_name<'a>(&'a self, name: &'a str) -> &'a str {
        if self.index.contains_key(name) {
            return name;
        }
        self.aliases.get(name).map_or(name, String::as_str)
    }

    /// The tool called `name` or aliased by it, built now if the set is lazy.
    ///
    /// # Errors
    /// [`ToolError::UnknownTool`] listing the known names, [`ToolError::NotCompiled`]
    /// when the set's provider knows which feature would add the tool, or the tool's
    /// build error ([`ToolError::Config`]).
    pub fn tool(&self, name: &str) -> Result<&ToolHandle, ToolError> {
        if let Some(&i) = self.index.get(name) {
            return self.built(&self.tools[i]);
        }
        let canonical = self.canonical_name(name);
        let Some(&i) = self.index.get(canonical) else {
            return Err(match &self.source {
                Some(source) => match source.build(canonical) {
                    Err(e @ ToolError::NotCompiled { .. }) => e,
                    _ => self.unknown(name),
                },
                None => self.unknown(name),
            });
        };
        self.built(&self.tools[i])
    }

    fn built<'a>(&self, slot: &'a Slot) -> Result<&'a ToolHandle, ToolError> {
        if let Some(tool) = slot.tool.get() {
            return Ok(tool);
        }
        let Some(source) = &slot.source else {
            return Err(self.unknown(&slot.name));
        };
        let tool = source.build(&slot.name)?;
        // Two callers may race to build; the first one stored wins, for both.
        Ok(slot.tool.get_or_init(|| tool))
    }

    /// The tool called `name` or aliased by it; `None` when it is unknown or cannot
    /// be built (see [`ToolSet::tool`] for why).
    pub fn get(&self, name: &str) -> Option<&ToolHandle> {
        self.tool(name).ok()
    }

    /// The tools, in order, building those of a lazy set that are not built yet; a
    /// tool that cannot be built is left out (calling it reports why).
    pub fn iter(&self) -> impl Iterator<Item = &ToolHandle> {
        self.tools.iter().filter_map(|slot| self.built(slot).ok())
    }

    /// Every tool's spec, in order (see [`ToolSet::iter`]).
    pub fn specs(&self) -> Vec<&ToolSpec> {
        self.iter().map(ToolHandle::spec).collect()
    }

    /// The names, in order, without building anything.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|slot| slot.name.as_str()).collect()
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
    pub fn execute<'a>(
        &'a self,
        name: &'a str,
        args: Value,
        runner: Option<&'a dyn DynRunner>,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send + 'a {
        // Not an `async fn`: the call's future is `execute_with`'s, not one more layer
        // around it to move.
        let mut options = ExecuteOptions::default();
        if let Some(runner) = runner {
            options = options.runner(runner);
        }
        self.execute_with(name, args, options)
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
        self.tool(name)?.execute(args, options).await
    }

    /// Runs a batch of calls and returns their results in call order. Consecutive
    /// parallel-safe calls run concurrently; a call to a tool that is not
    /// parallel-safe runs alone, after everything before it and before everything
    /// after it, so the batch's effects keep the model's order.
    pub async fn execute_batch(
        &self,
        calls: &[ToolCall],
        runner: Option<&dyn DynRunner>,
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
        runner: Option<&dyn DynRunner>,
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
