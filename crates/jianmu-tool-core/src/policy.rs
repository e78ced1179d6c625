//! `Policy`: which tools may run, by name and by effect tag.

use serde::Deserialize;

use crate::{ToolError, ToolSpec};

/// The effects a read-only policy denies.
pub const WRITE_EFFECTS: [&str; 4] = ["filesystem:write", "process:exec", "code:exec", "network"];

/// Allow and deny rules. An entry matches a tool when it equals the tool's name or one
/// of its effect tags, or is a tag's prefix before `:` (`filesystem` matches
/// `filesystem:write`). Deny rules win. With allow rules, a tool runs only if an entry
/// names it or every one of its effect tags is allowed (so an effect allow-list lets
/// effect-free tools through).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Tool names and effect tags that may run; everything when empty.
    pub allow: Vec<String>,
    /// Tool names and effect tags that may not run.
    pub deny: Vec<String>,
    /// Deny every effect in [`WRITE_EFFECTS`].
    pub read_only: bool,
}

fn matches_tag(entry: &str, tag: &str) -> bool {
    entry == tag
        || tag
            .strip_prefix(entry)
            .is_some_and(|rest| rest.starts_with(':'))
}

impl Policy {
    /// True when the policy has no rules at all.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty() && !self.read_only
    }

    /// Whether `spec` may run.
    ///
    /// # Errors
    /// [`ToolError::Denied`] naming the rule that refused the tool.
    pub fn check(&self, spec: &ToolSpec) -> Result<(), ToolError> {
        let denied = |rule: String| ToolError::Denied {
            tool: spec.name.clone(),
            rule,
        };
        if let Some(entry) = self.deny.iter().find(|e| **e == spec.name) {
            return Err(denied(format!("the tool is denied (deny `{entry}`)")));
        }
        for tag in &spec.effect_tags {
            if let Some(entry) = self.deny.iter().find(|e| matches_tag(e, tag)) {
                return Err(denied(format!("effect `{tag}` is denied (deny `{entry}`)")));
            }
            if self.read_only && WRITE_EFFECTS.iter().any(|w| matches_tag(w, tag)) {
                return Err(denied(format!("effect `{tag}` is denied (read-only mode)")));
            }
        }
        if self.allow.is_empty() || self.allow.contains(&spec.name) {
            return Ok(());
        }
        match spec
            .effect_tags
            .iter()
            .find(|tag| !self.allow.iter().any(|e| matches_tag(e, tag)))
        {
            Some(tag) => Err(denied(format!(
                "effect `{tag}` is not allowed (allow: {})",
                self.allow.join(", ")
            ))),
            None => Ok(()),
        }
    }
}
