//! Where a session's tools come from: the caller's choice, built per session from the
//! session's own configuration (its scope, workspace and settings).

use std::sync::Arc;

use jianmu_tool_core::{ToolConfig, ToolError, ToolProvider, ToolSet};

/// Makes a session's tool set from its configuration.
type Make = dyn Fn(ToolConfig) -> Result<ToolSet, ToolError> + Send + Sync;

/// The tools every session of a runtime gets ([`crate::SessionSettings::with_tools`]).
///
/// ```
/// use jianmu_runtime::{Session, SessionSettings, Tools};
/// use jianmu_tool_core::{FunctionTool, ToolConfig, ToolHandle, ToolSet, ToolSpec};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let echo = FunctionTool::from_sync(ToolSpec::new("echo", "Echoes."), |v| Ok(v.to_string().into()));
/// let tools = Tools::set(ToolSet::from_tools([ToolHandle::new(echo)?]));
/// let settings = SessionSettings::new(ToolConfig::new(std::env::temp_dir())).with_tools(tools);
/// let session = Session::open(settings)?;
/// assert_eq!(session.call("echo", "hi".into()).await?.text, "\"hi\"");
/// assert_eq!(session.specs().len(), 1);
/// session.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tools(Arc<Make>);

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tools(..)")
    }
}

impl Tools {
    /// The tools `make` builds for each session from its configuration.
    pub fn from_fn(
        make: impl Fn(ToolConfig) -> Result<ToolSet, ToolError> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(make))
    }

    /// The tools of the provider `make` returns for each session, built lazily (on
    /// first use), with the session's own state scope.
    pub fn provider<P>(make: impl Fn(ToolConfig) -> P + Send + Sync + 'static) -> Self
    where
        P: ToolProvider + Send + Sync + 'static,
    {
        Self::from_fn(move |config| ToolSet::lazy(make(config)))
    }

    /// The same tools for every session: for tools that keep no state of their own
    /// per session (they are shared, not rebuilt).
    pub fn set(set: ToolSet) -> Self {
        Self::from_fn(move |_| Ok(set.clone()))
    }

    /// The built-in tools the enabled features of `jianmu-provider` compile in
    /// (feature `builtin`).
    #[cfg(feature = "builtin")]
    #[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
    pub fn builtin() -> Self {
        Self::provider(jianmu_provider::BuiltinToolProvider::new)
    }

    /// The built-in tools for `config`, built lazily: what a sandbox's server
    /// inside the container serves (feature `builtin`).
    ///
    /// # Errors
    /// As [`ToolSet::lazy`].
    #[cfg(feature = "builtin")]
    #[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
    pub fn builtin_set(config: ToolConfig) -> Result<ToolSet, ToolError> {
        ToolSet::lazy(jianmu_provider::BuiltinToolProvider::new(config))
    }

    /// The set for a session configured by `config`.
    pub(crate) fn make(&self, config: ToolConfig) -> Result<ToolSet, ToolError> {
        (self.0)(config)
    }
}

impl Default for Tools {
    /// The built-in tools with feature `builtin`; none without it.
    fn default() -> Self {
        #[cfg(feature = "builtin")]
        return Self::builtin();
        #[cfg(not(feature = "builtin"))]
        Self::set(ToolSet::new())
    }
}
