//! What every adapter wraps: a tool's spec and a function that calls it through a
//! session, or through a `ToolSet` and a runner.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jianmu_runtime::Session;
use jianmu_tool_core::{DynRunner, ToolError, ToolOutput, ToolSet, ToolSpec};
use serde_json::Value;

/// The answer of one call, owned so a framework may hold it past the caller.
pub(crate) type Answer = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// Calls one tool with its arguments.
pub(crate) type Caller = Arc<dyn Fn(Value) -> Answer + Send + Sync>;

/// Every tool of `session` (specs only: no tool is built before its first call).
pub(crate) fn session_callers(
    session: &Arc<Session>,
) -> Result<Vec<(ToolSpec, Caller)>, ToolError> {
    Ok(session
        .specs()
        .into_iter()
        .map(|spec| {
            let caller = session_caller(session, &spec.name);
            (spec, caller)
        })
        .collect())
}

/// The tool `name` (a name or alias) of `session`.
pub(crate) fn session_named(
    session: &Arc<Session>,
    name: &str,
) -> Result<(ToolSpec, Caller), ToolError> {
    let spec = session.spec(name)?;
    let caller = session_caller(session, &spec.name);
    Ok((spec, caller))
}

fn session_caller(session: &Arc<Session>, name: &str) -> Caller {
    let session = Arc::clone(session);
    let name: Arc<str> = name.into();
    Arc::new(move |args| {
        let session = Arc::clone(&session);
        let name = Arc::clone(&name);
        Box::pin(async move { session.call(&name, args).await })
    })
}

/// Every tool of `set`, in its order, each called through `runner` (or in this process
/// with no layers).
pub(crate) fn toolset_callers(
    set: &Arc<ToolSet>,
    runner: Option<Arc<dyn DynRunner>>,
) -> Vec<(ToolSpec, Caller)> {
    set.specs()
        .into_iter()
        .cloned()
        .map(|spec| {
            let set = Arc::clone(set);
            let runner = runner.clone();
            let name: Arc<str> = spec.name.as_str().into();
            let caller: Caller = Arc::new(move |args| {
                let set = Arc::clone(&set);
                let runner = runner.clone();
                let name = Arc::clone(&name);
                Box::pin(async move { set.execute(&name, args, runner.as_deref()).await })
            });
            (spec, caller)
        })
        .collect()
}
