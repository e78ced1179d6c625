//! `Policy`: which tools may run, by name and by effect tag, and which calls are asked
//! about first.

use serde::Deserialize;

use crate::{ToolError, ToolSpec};

/// The effects a read-only policy denies.
pub const WRITE_EFFECTS: [&str; 4] = ["filesystem:write", "process:exec", "code:exec", "network"];

/// The prefixes of entries that match a call's arguments rather than a tool: a `bash`
/// command's prefix (`command:git push`), a regular expression over it
/// (`command-re:^rm\s`), and a glob over the paths a writing tool writes
/// (`path:deploy/**`). The runtime's policy layer matches them.
pub const CALL_RULES: [&str; 3] = ["command:", "command-re:", "path:"];

/// Whether `entry` matches a call's arguments (see [`CALL_RULES`]) rather than a tool.
pub fn is_call_rule(entry: &str) -> bool {
    CALL_RULES.iter().any(|p| entry.starts_with(p))
}

/// Allow, deny and ask rules. An entry matches a tool when it equals the tool's name or
/// one of its effect tags, or is a tag's prefix before `:` (`filesystem` matches
/// `filesystem:write`); entries of [`CALL_RULES`] match calls by their arguments. Deny
/// rules win, then ask rules. With allow rules naming tools or effects, a tool runs only
/// if an entry names it or every one of its effect tags is allowed (so an effect
/// allow-list lets effect-free tools through); an allow entry of [`CALL_RULES`] restricts
/// nothing, it answers the ask rules for the calls it matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Tool names and effect tags that may run; everything when empty.
    pub allow: Vec<String>,
    /// Tool names, effect tags and [`CALL_RULES`] entries that may not run.
    pub deny: Vec<String>,
    /// Tool names, effect tags and [`CALL_RULES`] entries whose calls run only once
    /// somebody approves them (the session's approver).
    pub ask: Vec<String>,
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
        self.allow.is_empty() && self.deny.is_empty() && self.ask.is_empty() && !self.read_only
    }

    /// The first `ask` entry naming `spec`'s tool or one of its effect tags.
    pub fn asks_tool(&self, spec: &ToolSpec) -> Option<&str> {
        self.ask
            .iter()
            .find(|e| **e == spec.name || spec.effect_tags.iter().any(|tag| matches_tag(e, tag)))
            .map(String::as_str)
    }

    /// Every `ask` entry naming `spec`'s tool or one of its effect tags.
    pub fn asking<'a>(&'a self, spec: &'a ToolSpec) -> impl Iterator<Item = &'a str> {
        self.ask
            .iter()
            .filter(|e| **e == spec.name || spec.effect_tags.iter().any(|tag| matches_tag(e, tag)))
            .map(String::as_str)
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
        let mut allowed = self.allow.iter().filter(|e| !is_call_rule(e)).peekable();
        if allowed.peek().is_none() || self.allow.contains(&spec.name) {
            return Ok(());
        }
        let allowed: Vec<&str> = allowed.map(String::as_str).collect();
        match spec
            .effect_tags
            .iter()
            .find(|tag| !allowed.iter().any(|e| matches_tag(e, tag)))
        {
            Some(tag) => Err(denied(format!(
                "effect `{tag}` is not allowed (allow: {})",
                allowed.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

/// Rules laid over a [`Policy`] that can only make it stricter: more deny and ask
/// entries (tool names, effect tags, [`CALL_RULES`]), and read-only mode. What one
/// session or principal gets beyond the runtime's policy
/// (`[mcp.http.principals.NAME.policy]`); it has no allow entries, since an allow
/// entry would widen what the base allows or pre-approve what it asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tightening {
    /// Entries added to the policy's `deny`.
    pub deny: Vec<String>,
    /// Entries added to the policy's `ask`.
    pub ask: Vec<String>,
    /// Read-only mode, whatever the policy says.
    pub read_only: bool,
}

impl Tightening {
    /// Whether it adds nothing.
    pub fn is_empty(&self) -> bool {
        self.deny.is_empty() && self.ask.is_empty() && !self.read_only
    }

    /// `self` over `base`: the entries of both, read-only if either is.
    #[must_use]
    pub fn over(&self, base: &Self) -> Self {
        let join = |a: &[String], b: &[String]| {
            let mut all = a.to_vec();
            all.extend(b.iter().filter(|e| !a.contains(e)).cloned());
            all
        };
        Self {
            deny: join(&base.deny, &self.deny),
            ask: join(&base.ask, &self.ask),
            read_only: base.read_only || self.read_only,
        }
    }
}

impl Policy {
    /// This policy made stricter by `extra`: its deny and ask entries added, read-only
    /// if either says so. With ask entries of its own, this policy's `allow` call
    /// rules are dropped: they pre-approve what they cover, which would answer the
    /// extra questions too.
    #[must_use]
    pub fn tightened(&self, extra: &Tightening) -> Policy {
        let mut policy = self.clone();
        if !extra.ask.is_empty() {
            policy.allow.retain(|e| !is_call_rule(e));
        }
        policy.deny.extend(
            extra
                .deny
                .iter()
                .filter(|e| !self.deny.contains(e))
                .cloned(),
        );
        policy
            .ask
            .extend(extra.ask.iter().filter(|e| !self.ask.contains(e)).cloned());
        policy.read_only |= extra.read_only;
        policy
    }
}

#[cfg(test)]
mod tests {
    use super::{Policy, Tightening};

    /// A tightening adds entries and never pre-approves its own questions through the
    /// base's `allow` call rules.
    #[test]
    fn a_tightening_adds_rules_and_drops_pre_approvals_for_its_asks() {
        let base = Policy {
            allow: vec!["command:git".into(), "bash".into()],
            deny: vec!["x".into()],
            ..Policy::default()
        };
        let extra = Tightening {
            ask: vec!["command:git push".into()],
            deny: vec!["y".into(), "x".into()],
            read_only: true,
        };
        let policy = base.tightened(&extra);
        assert_eq!(policy.allow, ["bash"]);
        assert_eq!(policy.deny, ["x", "y"]);
        assert_eq!(policy.ask, ["command:git push"]);
        assert!(policy.read_only);
        let denying = base.tightened(&Tightening {
            deny: vec!["z".into()],
            ..Tightening::default()
        });
        assert_eq!(denying.allow, base.allow);
    }
}
