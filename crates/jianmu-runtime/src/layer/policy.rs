//! `WithPolicy`: refuses the calls a policy denies and asks about those it asks
//! about, before they run.

use std::sync::Arc;

use jianmu_tool_core::{Answer, Ask, Policy, PreparedCall, Runner, ToolError, ToolOutput};

use super::delegate;
use super::rules::{CallRules, Subject};

/// Checks each call against a [`Policy`]: its tool by name and effect tags, its
/// arguments by the call rules (`command:`, `command-re:`, `path:`). A denied call is
/// answered [`ToolError::Denied`] without running. A call an `ask` entry matches runs
/// only once the [`Approver`](jianmu_tool_core::Approver) in its context allows it
/// (unless an allow call rule covers it); without one it is denied, the rule named.
/// The wait for an answer is not part of the call's time limit (this layer is outside
/// [`WithTimeout`](super::WithTimeout) in the standard stack).
#[derive(Debug, Clone)]
pub struct WithPolicy<R> {
    inner: R,
    policy: Arc<Policy>,
    rules: Arc<CallRules>,
}

impl<R> WithPolicy<R> {
    /// `inner` behind `policy`. A call rule that does not compile matches every call
    /// it could apply to (check the policy first: [`crate::check_policy`]).
    pub fn new(inner: R, policy: Arc<Policy>) -> Self {
        let rules = Arc::new(CallRules::new(&policy));
        Self {
            inner,
            policy,
            rules,
        }
    }

    /// The policy calls are checked against.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Replaces the policy.
    pub fn set_policy(&mut self, policy: Arc<Policy>) {
        self.rules = Arc::new(CallRules::new(&policy));
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
            let spec = call.tool.spec();
            self.policy.check(spec)?;
            if self.policy.asks_tool(spec).is_some() || !self.rules.is_empty() {
                self.decide(&call).await?;
            }
        }
        self.inner.run(call).await
    }

    delegate!();
}

impl<R> WithPolicy<R> {
    /// The call rules' part of the decision: refused by a deny rule, or asked about.
    async fn decide(&self, call: &PreparedCall<'_>) -> Result<(), ToolError> {
        let spec = call.tool.spec();
        let subject = Subject::of(spec, &call.args);
        let denied = |rule: String| ToolError::Denied {
            tool: spec.name.clone(),
            rule,
        };
        if let Some((entry, what)) = self.rules.denied(&subject) {
            return Err(denied(format!("{what} is denied (deny `{entry}`)")));
        }
        // Every rule that asks is asked (or remembered): an answer to one rule is
        // not an answer to another the same call matches.
        let mut rules: Vec<&str> = self.policy.asking(spec).collect();
        rules.extend(self.rules.asked_all(&subject));
        rules.dedup();
        if rules.is_empty() {
            return Ok(());
        }
        if self.rules.approved(&subject) {
            if let Some(approver) = call.cx.approver() {
                for rule in rules {
                    let summary = subject.summary(&call.args);
                    let ask = Ask::new(&spec.name, rule, &summary, call.cx.call_id());
                    approver.noted(&ask, "the policy's allow entries");
                }
            }
            return Ok(());
        }
        for rule in rules {
            let Some(approver) = call.cx.approver() else {
                return Err(denied(format!(
                    "it needs approval (ask `{rule}`) and this caller cannot be asked"
                )));
            };
            let ask = Ask::new(
                &spec.name,
                rule,
                &subject.summary(&call.args),
                call.cx.call_id(),
            );
            match approver.approve(&ask).await {
                Answer::Decided { decision, .. } if decision.allows() => {}
                Answer::Decided { .. } => {
                    return Err(denied(format!(
                        "the call was refused when asked (ask `{rule}`); do not retry it unchanged"
                    )));
                }
                Answer::Unavailable(why) | Answer::Pending(why) => {
                    return Err(denied(format!(
                        "it needs approval (ask `{rule}`) and {why}"
                    )));
                }
                _ => return Err(denied(format!("it needs approval (ask `{rule}`)"))),
            }
        }
        Ok(())
    }
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
