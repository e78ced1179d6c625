//! Registration of tool factories through `inventory`, and the configuration they build
//! tools from.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ToolError, ToolHandle};

/// Builds a tool from the configuration.
pub type BuildFn = fn(&ToolConfig) -> Result<ToolHandle, ToolError>;

/// A const-constructible factory, submitted by tool crates with [`crate::register_tool!`]
/// and collected by the provider. Registry order is undefined: sort by name.
#[derive(Debug)]
pub struct ToolRegistration {
    /// The tool's canonical name.
    pub name: &'static str,
    /// The tool's spec, without building it.
    pub spec: SpecFn,
    /// Builds an instance.
    pub build: BuildFn,
}

impl ToolRegistration {
    /// A registration.
    pub const fn new(name: &'static str, spec: SpecFn, build: BuildFn) -> Self {
        Self { name, spec, build }
    }
}

/// The spec of a registered tool, as a configuration sets it up, without building
/// the tool.
pub type SpecFn = fn(&ToolConfig) -> Result<crate::ToolSpec, ToolError>;

/// The [`SpecFn`] of a [`crate::Tool`] type: its spec is the same for any
/// configuration.
///
/// # Errors
/// Never.
pub fn static_spec<T: crate::Tool>(_: &ToolConfig) -> Result<crate::ToolSpec, ToolError> {
    Ok(crate::spec_of::<T>())
}

inventory::collect!(ToolRegistration);

/// Every registration linked into this binary, in no particular order.
pub fn registrations() -> impl Iterator<Item = &'static ToolRegistration> {
    inventory::iter::<ToolRegistration>.into_iter()
}

/// Submits a tool factory to the registry: a [`crate::Tool`] type and its build
/// function (name and spec come from the type), or a name, a [`SpecFn`] and a build
/// function.
///
/// ```
/// use jianmu_tool_core::{ToolConfig, ToolError, ToolHandle, ToolSpec, FunctionTool};
///
/// fn spec(_: &ToolConfig) -> Result<ToolSpec, ToolError> {
///     Ok(ToolSpec::new("echo", "Echoes."))
/// }
/// fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
///     ToolHandle::new(FunctionTool::from_sync(spec(config)?, |v| Ok(v.to_string().into())))
/// }
/// jianmu_tool_core::register_tool!("echo", spec, build);
/// # fn main() {
/// assert!(jianmu_tool_core::registrations().any(|r| r.name == "echo"));
/// # }
/// ```
#[macro_export]
macro_rules! register_tool {
    ($tool:ty, $build:expr) => {
        $crate::__private::inventory::submit! {
            $crate::ToolRegistration::new(
                <$tool as $crate::Tool>::NAME,
                $crate::static_spec::<$tool>,
                $build,
            )
        }
    };
    ($name:expr, $spec:expr, $build:expr) => {
        $crate::__private::inventory::submit! {
            $crate::ToolRegistration::new($name, $spec, $build)
        }
    };
}

/// What factories build tools from: the workspace root every path is confined to,
/// the hosts every network tool may reach despite its guard, and per-tool settings
/// (the `[tools.NAME]` tables of `jianmu.toml`, whose keys each tool owns). It
/// serializes, so a sandbox can build the same tools on the other side of its wire.
///
/// It also carries a [`Scope`]: state that the tools built from it (and from its
/// clones) share, such as the background jobs `bash` starts and `bash_output` reads.
/// [`ToolConfig::with_new_scope`] gives a set of tools state of its own (one per client
/// session of a server). The scope is not part of the settings: it is neither
/// serialized nor compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolConfig {
    workspace: PathBuf,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allow_hosts: Vec<String>,
    #[serde(default, rename = "tools")]
    settings: Map<String, Value>,
    #[serde(default, skip_serializing_if = "SavedOutputs::is_default")]
    outputs: SavedOutputs,
    #[serde(skip)]
    scope: Scope,
}

/// Where tools save outputs too long to answer whole (`[outputs]` of `jianmu.toml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SavedOutputs {
    /// The folder that holds each session's saved outputs, relative to the workspace
    /// root (so the file tools can read them); `.jianmu/outputs` when unset.
    pub folder: Option<String>,
    /// Keep a session's saved outputs when it ends, instead of removing them: for a
    /// one-shot call, whose answer names a file that is read after the call. Kept
    /// folders older than a day are removed when a new one is made.
    pub keep: bool,
}

impl SavedOutputs {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// State shared by the tools built from one [`ToolConfig`]: one value per type, made
/// on first use. Clones share it. Dropping the last tool (and config) holding it drops
/// the state, which is how a scope's background processes end.
#[derive(Clone, Default)]
pub struct Scope {
    values: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

impl Scope {
    /// A scope with nothing in it yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The scope's value of type `T`, made with `T::default()` on first use.
    pub fn get<T: Any + Default + Send + Sync>(&self) -> Arc<T> {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        let value = values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        // The entry for `TypeId::of::<T>()` only ever holds a `T`.
        Arc::clone(value)
            .downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
    }
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Scope").field("values", &n).finish()
    }
}

/// Scopes are state, not settings: configurations compare by their settings alone.
impl PartialEq for Scope {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ToolConfig {
    /// A configuration rooted at `workspace`, with no settings.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            allow_hosts: Vec::new(),
            settings: Map::new(),
            outputs: SavedOutputs::default(),
            scope: Scope::new(),
        }
    }

    /// The same settings with a scope of their own: tools built from the result share
    /// no state with tools built from `self`.
    #[must_use]
    pub fn with_new_scope(mut self) -> Self {
        self.scope = Scope::new();
        self
    }

    /// The state the tools built from this configuration share.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The same settings, rooted at `workspace`.
    #[must_use]
    pub fn with_workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }

    /// Sets one setting of `tool` unless its settings already have `key`: a default
    /// chosen by the program that runs the tools, which the configuration overrides.
    /// Settings that are not a table are left alone (building the tool reports them).
    #[must_use]
    pub fn with_default_setting(mut self, tool: &str, key: &str, value: Value) -> Self {
        let entry = self
            .settings
            .entry(tool.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(map) = entry {
            map.entry(key.to_owned()).or_insert(value);
        }
        self
    }

    /// Sets one setting of `tool`, over what its settings say: a table is laid over
    /// the table there key by key (so `isolation = {max_memory_mb = 512}` keeps the
    /// other isolation keys), anything else replaces it. Settings that are not a table
    /// become one.
    #[must_use]
    pub fn with_setting(mut self, tool: &str, key: &str, value: Value) -> Self {
        let entry = self
            .settings
            .entry(tool.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(map) = entry {
            match map.get_mut(key) {
                Some(existing) => lay_over(existing, value),
                None => {
                    map.insert(key.to_owned(), value);
                }
            }
        }
        self
    }

    /// Sets the settings of one tool.
    #[must_use]
    pub fn with_settings(mut self, tool: impl Into<String>, settings: Value) -> Self {
        self.settings.insert(tool.into(), settings);
        self
    }

    /// Adds hosts that every network tool may reach although its guard (against
    /// requests to loopback, private and metadata addresses) would refuse them.
    #[must_use]
    pub fn with_allow_hosts(mut self, hosts: impl IntoIterator<Item = String>) -> Self {
        self.allow_hosts.extend(hosts);
        self
    }

    /// The same settings, saving long outputs as `outputs` says.
    #[must_use]
    pub fn with_saved_outputs(mut self, outputs: SavedOutputs) -> Self {
        self.outputs = outputs;
        self
    }

    /// Where and how long outputs are saved.
    pub fn saved_outputs(&self) -> &SavedOutputs {
        &self.outputs
    }

    /// The workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Hosts every network tool may reach despite its guard; each network tool adds
    /// them to its own `allow_hosts`.
    pub fn allow_hosts(&self) -> &[String] {
        &self.allow_hosts
    }

    /// The raw settings of `tool`, if any.
    pub fn raw_settings(&self, tool: &str) -> Option<&Value> {
        self.settings.get(tool)
    }

    /// The settings of `tool`, decoded; the defaults when there are none.
    ///
    /// # Errors
    /// [`ToolError::Config`] naming the setting that does not decode.
    pub fn settings<T: DeserializeOwned + Default>(&self, tool: &str) -> Result<T, ToolError> {
        match self.settings.get(tool) {
            None => Ok(T::default()),
            Some(value) => T::deserialize(value).map_err(|e| ToolError::Config {
                tool: tool.to_owned(),
                message: e.to_string(),
            }),
        }
    }
}

/// `value` over `base`: tables key by key, anything else replaced.
fn lay_over(base: &mut Value, value: Value) {
    match (base, value) {
        (Value::Object(base), Value::Object(value)) => {
            for (key, value) in value {
                match base.get_mut(&key) {
                    Some(existing) => lay_over(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, value) => *base = value,
    }
}

impl Default for ToolConfig {
    fn default() -> Self {
        Self::new(".")
    }
}
