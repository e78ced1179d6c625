//! Calls a tool makes of its session's other tools (`run_script`): [`Calls`], handed
//! to such a tool in its [`CallContext`](crate::CallContext).

use async_trait::async_trait;
use serde_json::Value;

use crate::{CallContext, ToolError, ToolOutput, ToolSpec};

/// The effect tag of a tool that calls other tools of its session. A session runs
/// such a tool where it is (never in a sandbox: the calls it makes go there) and
/// hands it [`Calls`]; a policy may deny the tag.
pub const CALLS_TOOLS: &str = "tools:call";

/// The effect tag of a tool over state its session keeps where the session runs (the
/// workspace's checkpoints). A session runs such a tool where it is, never in a
/// sandbox, as it does a tool tagged [`CALLS_TOOLS`].
pub const SESSION_STATE: &str = "session:state";

/// The session's tools, as a tool that calls other tools reaches them: every call
/// goes through the session's runner stack (policy, events and audit, time limit,
/// sandbox), as a direct call does.
#[async_trait]
pub trait Calls: Send + Sync + 'static {
    /// The specs of the tools that may be called (no tool that calls tools).
    fn specs(&self) -> Vec<ToolSpec>;

    /// Calls `name` with `args` as the nested call `cx` (its id and parent's).
    ///
    /// # Errors
    /// As a direct call; a tool that calls tools is refused.
    async fn call(
        &self,
        name: &str,
        args: Value,
        cx: &CallContext,
    ) -> Result<ToolOutput, ToolError>;
}

/// Whether `spec` is of a tool that calls other tools.
pub fn calls_tools(spec: &ToolSpec) -> bool {
    spec.effect_tags.iter().any(|t| t == CALLS_TOOLS)
}

/// Whether a session runs the tool of `spec` where the session is, never in a sandbox:
/// it calls other tools ([`CALLS_TOOLS`]) or works on the session's own state
/// ([`SESSION_STATE`]).
pub fn runs_with_session(spec: &ToolSpec) -> bool {
    spec.effect_tags
        .iter()
        .any(|t| t == CALLS_TOOLS || t == SESSION_STATE)
}
