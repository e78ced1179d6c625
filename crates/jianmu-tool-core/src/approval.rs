//! Asking before acting: the question a policy's `ask` rule puts before a call runs
//! ([`Ask`]), and who answers it ([`Approver`]).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The question an `ask` rule puts before a call runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Ask {
    /// The tool called.
    pub tool: String,
    /// The policy entry that asked (`bash`, `command:git push`, `path:deploy/**`).
    pub rule: String,
    /// The call's arguments, summarised for a person: the command, the paths written,
    /// or the arguments as compact JSON (at most [`Ask::SUMMARY_CHARS`] characters).
    pub summary: String,
    /// The call's id.
    pub call_id: String,
}

impl Ask {
    /// The longest summary, in characters.
    pub const SUMMARY_CHARS: usize = 400;

    /// A question about the call `call_id` of `tool`, asked by `rule`.
    pub fn new(
        tool: impl Into<String>,
        rule: impl Into<String>,
        summary: &str,
        call_id: impl Into<String>,
    ) -> Self {
        Self {
            tool: tool.into(),
            rule: rule.into(),
            summary: crate::shorten(summary, Self::SUMMARY_CHARS).into_owned(),
            call_id: call_id.into(),
        }
    }
}

/// An answer to an [`Ask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this call.
    AllowOnce,
    /// Run this call, and every later one this rule asks about for this tool in the
    /// same session, without asking again.
    AllowSession,
    /// Refuse this call.
    Deny,
}

impl Decision {
    /// The three answers, as front ends offer them.
    pub const ALL: [Decision; 3] = [Self::AllowOnce, Self::AllowSession, Self::Deny];

    /// The answer's name (`allow_once`, `allow_session`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowOnce => "allow_once",
            Self::AllowSession => "allow_session",
            Self::Deny => "deny",
        }
    }

    /// The answer named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// Whether the call may run.
    pub fn allows(self) -> bool {
        !matches!(self, Self::Deny)
    }
}

/// What an [`Approver`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// Somebody decided.
    Decided {
        /// The decision.
        decision: Decision,
        /// Who decided, for the audit line (`terminal`, `mcp elicitation`, a user's
        /// name).
        by: String,
    },
    /// Nobody can be asked here; the call is refused, and this says why (`there is
    /// no terminal to ask on; run with --approve 'bash'`).
    Unavailable(String),
    /// The question went to somebody who answers later (an MCP client asked to retry
    /// the request with the answer); the call is refused for now, and this says why.
    Pending(String),
}

impl Answer {
    /// `decision`, made by `by`.
    pub fn decided(decision: Decision, by: impl Into<String>) -> Self {
        Self::Decided {
            decision,
            by: by.into(),
        }
    }
}

/// Who answers the questions of `ask` rules: a person at a terminal, an MCP client
/// through elicitation, or the program that embeds the session. A session hands its
/// approver to each call in its [`CallContext`](crate::CallContext); the policy layer
/// asks it before a call an `ask` rule matches, and runs the call only on an allow.
#[async_trait]
pub trait Approver: Send + Sync + 'static {
    /// Answers `ask`. It may take as long as a person takes: the call's time limit
    /// starts after the answer.
    async fn approve(&self, ask: &Ask) -> Answer;

    /// Told of a call the policy's `allow` entries pre-approved, without asking
    /// (`by` names them), for the record. Nothing by default.
    fn noted(&self, ask: &Ask, by: &str) {
        let _ = (ask, by);
    }
}

#[async_trait]
impl<F> Approver for F
where
    F: Fn(&Ask) -> Answer + Send + Sync + 'static,
{
    async fn approve(&self, ask: &Ask) -> Answer {
        self(ask)
    }
}
