//! `WithPolicy`: refuses the calls a policy denies, before they run.

use std::sync::Arc;

use jianmu_tool_core::{Policy, PreparedCall, Runner, ToolError, ToolOutput};

use super::delegate;

/// Checks each call's tool against a [`Policy`] (by name and effect tags) and answers
/// [`ToolError::Denied`] without running it.
#[derive(Debug, Clone)]
pub struct WithPolicy<R> {
    inner: R,
    policy: Arc<Policy>,
}

impl<R> WithPolicy<R> {
    /// `inner` behind `policy`.
    pub fn new(inner: R, policy: Arc<Policy>) -> Self {
        Self { inner, policy }
    }

    /// The policy calls are checked against.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Replaces the policy.
    pub fn set_policy(&mut self, policy: Arc<Policy>) {
        self.policy = policy;
    }

    /// The wrapped runner.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// The wrapped runner, to change its settings.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

impl<R: Runner> Runner for WithPolicy<R> {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        if !self.policy.is_open() {
            self.policy.check(call.tool.spec())?;
        }
        self.inner.run(call).await
    }

    delegate!();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jianmu_tool_core::{InProcess, Policy, ToolError};
    use serde_json::json;

    use super::WithPolicy;
    use crate::layer::tests::probes;

    #[tokio::test]
    async fn denied_tools_never_run_and_the_rule_is_named() {
        let set = probes();
        let policy = Policy {
            deny: vec!["echo".into()],
            ..Policy::default()
        };
        let runner = WithPolicy::new(InProcess, Arc::new(policy));
        let err = set
            .execute("echo", json!("hi"), Some(&runner))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Denied { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "call to `echo` denied: the tool is denied (deny `echo`)"
        );
        assert!(err.is_model_facing());
        // Other tools still run.
        let err = set
            .execute("fail", json!("x"), Some(&runner))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "no luck");
    }

    #[tokio::test]
    async fn an_open_policy_lets_everything_through() {
        let runner = WithPolicy::new(InProcess, Arc::new(Policy::default()));
        let out = probes()
            .execute("echo", json!("hi"), Some(&runner))
            .await
            .unwrap();
        assert_eq!(out.text, "hi");
    }
}
