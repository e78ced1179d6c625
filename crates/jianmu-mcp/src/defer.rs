//! `[mcp] defer`: tools left out of `tools/list` and found on demand with one
//! `tool_search` tool, so that a client starts from a short list.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

pub use jianmu_tool_core::Deferral;
use jianmu_tool_core::{ToolIndex, ToolSpec};
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

/// The tool that finds deferred tools.
pub(crate) const TOOL_SEARCH: &str = "tool_search";
/// Most definitions one search returns.
const MAX_RESULTS: u64 = 20;
/// Definitions a search returns when it does not say.
const DEFAULT_RESULTS: u64 = 5;
/// The longest query read.
const MAX_QUERY_CHARS: usize = 500;

/// One session's listing: what `tools/list` shows, the deferred tools, and which of
/// them a search has found. A stateless scope shares it between its requests.
#[derive(Default)]
pub(crate) struct Listed {
    made: OnceLock<Made>,
    found: Mutex<BTreeSet<String>>,
}

/// The part of a listing made once.
pub(crate) struct Made {
    /// The tools listed from the start (with `tool_search` when any is deferred).
    pub(crate) shown: Arc<Vec<Tool>>,
    /// The deferred tools, by name, with their definitions.
    deferred: HashMap<String, Tool>,
    index: ToolIndex,
}

impl Made {
    /// A listing of `specs`, the policy's already, with `deferral`'s left out.
    pub(crate) fn new(specs: &[ToolSpec], deferral: &Deferral) -> Self {
        let (hidden, listed): (Vec<&ToolSpec>, Vec<&ToolSpec>) =
            specs.iter().partition(|s| deferral.defers(s));
        let mut shown: Vec<Tool> = listed.iter().map(|s| crate::describe(s)).collect();
        if !hidden.is_empty() {
            shown.push(search_tool(&hidden));
        }
        Self {
            shown: Arc::new(shown),
            deferred: hidden
                .iter()
                .map(|s| (s.name.clone(), crate::describe(s)))
                .collect(),
            index: ToolIndex::new(hidden.iter().copied()),
        }
    }
}

impl Listed {
    /// The part made once, made now by `make` if not yet.
    pub(crate) fn made(&self, make: impl FnOnce() -> Made) -> &Made {
        self.made.get_or_init(make)
    }

    /// Whether the listing has been made.
    #[cfg(test)]
    pub(crate) fn is_made(&self) -> bool {
        self.made.get().is_some()
    }

    fn found(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.found.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `tools/list` answers: the tools shown from the start, then those found.
    pub(crate) fn tools(&self, made: &Made) -> Vec<Tool> {
        let found = self.found();
        let mut tools = Vec::with_capacity(made.shown.len() + found.len());
        tools.extend(made.shown.iter().cloned());
        tools.extend(found.iter().filter_map(|n| made.deferred.get(n).cloned()));
        tools
    }

    /// Why `name` cannot be called yet: it is deferred and no search has found it.
    pub(crate) fn hidden(&self, made: &Made, name: &str) -> Option<String> {
        (made.deferred.contains_key(name) && !self.found().contains(name)).then(|| {
            format!(
                "`{name}` is one of the tools loaded on demand here: call `{TOOL_SEARCH}` with \
                 {{\"query\": \"select:{name}\"}} (or words for what you need) to load its \
                 definition, then call it"
            )
        })
    }

    /// Runs a `tool_search` call: the definitions of the deferred tools that match,
    /// now listed and callable; `Err` for arguments that do not fit. The bool says
    /// whether a tool was found that was not before (the list changed).
    pub(crate) fn search(
        &self,
        made: &Made,
        args: &Value,
    ) -> Result<(Value, String, bool), String> {
        let query = args.get("query").and_then(Value::as_str).ok_or(
            "`query` (a string) is required: words for what the tool does, or `select:NAME,NAME`",
        )?;
        let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
        let max = match args.get("max_results") {
            None | Some(Value::Null) => DEFAULT_RESULTS,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=MAX_RESULTS).contains(n))
                .ok_or(format!(
                    "`max_results` is a whole number from 1 to {MAX_RESULTS}"
                ))?,
        };
        let names = made
            .index
            .search(&query, usize::try_from(max).unwrap_or(usize::MAX));
        let mut found = self.found();
        let mut changed = false;
        let mut tools = Vec::with_capacity(names.len());
        for name in &names {
            changed |= found.insert((*name).to_owned());
            if let Some(tool) = made.deferred.get(*name) {
                tools.push(serde_json::to_value(tool).unwrap_or(Value::Null));
            }
        }
        let text = if tools.is_empty() {
            format!(
                "No tool loaded on demand matches `{query}`. They are: {}.",
                made.index_names().join(", ")
            )
        } else {
            let mut text = format!(
                "{} tool{} found; {} now listed and can be called:\n",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" },
                if tools.len() == 1 {
                    "it is"
                } else {
                    "they are"
                },
            );
            for tool in &tools {
                text.push_str(&tool.to_string());
                text.push('\n');
            }
            text
        };
        Ok((json!({ "tools": tools }), text, changed))
    }
}

impl Made {
    /// Every tool the session offers, listed or deferred (the policy's already).
    pub(crate) fn names(&self) -> Vec<String> {
        self.shown
            .iter()
            .map(|t| t.name.to_string())
            .chain(self.deferred.keys().cloned())
            .collect()
    }

    /// Whether any tool is deferred here.
    pub(crate) fn defers_any(&self) -> bool {
        !self.deferred.is_empty()
    }

    fn index_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.deferred.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// The `tool_search` tool, naming the tools it can load.
fn search_tool(hidden: &[&ToolSpec]) -> Tool {
    let mut names: Vec<&str> = hidden.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    let description = format!(
        "Loads the definitions of tools that are not listed yet, so that they can be called: \
         {}. Search with words for what you need (ranked over names, descriptions and \
         parameter names), or name them with `select:NAME,NAME`. The answer holds each \
         match's definition (name, description, input schema); a tool found is listed and \
         callable from then on.",
        names.join(", ")
    );
    let input: Map<String, Value> = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words for what the tool should do (\"commit history\"), or `select:NAME,NAME`.",
                "maxLength": MAX_QUERY_CHARS,
            },
            "max_results": {
                "type": "integer",
                "description": "Most tools to load (default 5).",
                "minimum": 1,
                "maximum": MAX_RESULTS,
            },
        },
        "required": ["query"],
        "additionalProperties": false,
    }))
    .unwrap_or_default();
    let output: Map<String, Value> = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "tools": {
                "type": "array",
                "description": "The definitions found, as `tools/list` gives them.",
                "items": {"type": "object"},
            },
            "text": {"type": "string", "description": "The same, as the text content gives it."},
        },
        "required": ["tools", "text"],
    }))
    .unwrap_or_default();
    Tool::new(TOOL_SEARCH, description, Arc::new(input))
        .with_raw_output_schema(Arc::new(output))
        .annotate(
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        )
}
