//! A session's answers to its policy's `ask` rules: who answers ([`Session::set_approver`]
//! or a call's own), what is remembered for the rest of the session, and the audit
//! line of each decision.
//!
//! [`Session::set_approver`]: crate::Session::set_approver

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use jianmu_tool_core::{Answer, Approver, Ask, Decision};
use serde_json::json;

use crate::AuditLog;

/// What one session keeps of its approvals.
pub(crate) struct Approvals {
    /// (rule, tool) pairs allowed for the rest of the session.
    remembered: Mutex<HashSet<(String, String)>>,
    /// The session's own approver, when the front end or embedding program set one.
    approver: Mutex<Option<Arc<dyn Approver>>>,
    audit: Option<AuditLog>,
    principal: Option<String>,
}

/// The most (rule, tool) pairs a session remembers; past it, answers are asked again.
const REMEMBERED: usize = 1024;

impl Approvals {
    pub(crate) fn new(audit: Option<AuditLog>, principal: Option<String>) -> Self {
        Self {
            remembered: Mutex::new(HashSet::new()),
            approver: Mutex::new(None),
            audit,
            principal,
        }
    }

    pub(crate) fn set_approver(&self, approver: Option<Arc<dyn Approver>>) {
        *self
            .approver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = approver;
    }

    fn own_approver(&self) -> Option<Arc<dyn Approver>> {
        self.approver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn is_remembered(&self, ask: &Ask) -> bool {
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&(ask.rule.clone(), ask.tool.clone()))
    }

    fn remember(&self, ask: &Ask) {
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if remembered.len() < REMEMBERED {
            remembered.insert((ask.rule.clone(), ask.tool.clone()));
        }
    }

    /// The audit line of one decision: what was asked, the answer, who answered, when.
    fn record(&self, ask: &Ask, answer: &str, by: &str) {
        let Some(audit) = &self.audit else {
            return;
        };
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        audit.record(&json!({
            "time": time,
            "event": "approval",
            "tool": ask.tool,
            "call_id": ask.call_id,
            "rule": ask.rule,
            "asked": ask.summary,
            "answer": answer,
            "by": by,
            "principal": self.principal,
        }));
    }
}

/// The approver a session hands each call: the remembered answers first, then the
/// call's own approver (an MCP request's), else the session's.
pub(crate) struct Asking {
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) answerer: Option<Arc<dyn Approver>>,
}

#[async_trait]
impl Approver for Asking {
    async fn approve(&self, ask: &Ask) -> Answer {
        let approvals = &self.approvals;
        if approvals.is_remembered(ask) {
            approvals.record(ask, Decision::AllowSession.as_str(), "remembered");
            return Answer::decided(Decision::AllowSession, "remembered");
        }
        let Some(answerer) = self.answerer.clone().or_else(|| approvals.own_approver()) else {
            let why = "nobody is there to answer: this session has no approver".to_owned();
            approvals.record(ask, "unavailable", "nobody");
            return Answer::Unavailable(why);
        };
        // A call dropped while asking (cancelled, or its client gone) is a line too.
        let mut pending = Cancelled {
            approvals,
            ask,
            armed: true,
        };
        let answer = answerer.approve(ask).await;
        pending.armed = false;
        match &answer {
            Answer::Decided { decision, by } => {
                if *decision == Decision::AllowSession {
                    approvals.remember(ask);
                }
                approvals.record(ask, decision.as_str(), by);
            }
            Answer::Unavailable(_) => approvals.record(ask, "unavailable", "nobody"),
            Answer::Pending(_) => approvals.record(ask, "pending", "the client, on retry"),
            _ => approvals.record(ask, "unavailable", "nobody"),
        }
        answer
    }

    fn noted(&self, ask: &Ask, by: &str) {
        self.approvals.record(ask, Decision::AllowOnce.as_str(), by);
    }
}

/// Records a question whose call went away before it was answered.
struct Cancelled<'a> {
    approvals: &'a Approvals,
    ask: &'a Ask,
    armed: bool,
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.approvals
                .record(self.ask, "cancelled", "nobody: the call ended first");
        }
    }
}
