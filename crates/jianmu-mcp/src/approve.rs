//! Asking an MCP client before a call the policy's `ask` rules match. On a 2025-11-25
//! protocol session the server sends `elicitation/create` and waits for the answer
//! ([`Elicit`]). On 2026-07-28 it answers the `tools/call` with an `input_required`
//! result (SEP-2322) carrying the same form and a sealed `requestState`; the client
//! retries the request with the answer, which [`Retry`] hands the session's policy.
//! A client that declared no elicitation capability cannot be asked: the call is
//! refused, the rule named.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jianmu_tool_core::{Answer, Approver, Ask, Decision};
use rmcp::model::{ElicitRequest, ElicitRequestParams, InputRequest, InputRequests};
use rmcp::service::Peer;
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The key of the approval among a request's `inputRequests` and `inputResponses`.
pub(crate) const KEY: &str = "approval";

/// How long a person may take to answer an elicitation, and a `requestState` lives.
const ANSWER_TIME: Duration = Duration::from_secs(15 * 60);

/// Who answers, in audit lines.
const BY_ELICITATION: &str = "mcp elicitation";
const BY_RETRY: &str = "mcp client (input_required)";

/// The elicitation form of `ask`: the tool, its arguments summarised, the rule, and
/// the three answers.
pub(crate) fn form(ask: &Ask) -> Value {
    json!({
        "mode": "form",
        "message": format!(
            "Allow the tool `{}` to run?\n{}\n(asked by the policy rule `{}`)",
            ask.tool, ask.summary, ask.rule
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "description": "allow_once: run this call; allow_session: run it and \
                                    every later call this rule asks about for this tool in \
                                    this session (for a client without protocol sessions: \
                                    every call of this principal until its session ends); \
                                    deny: refuse it",
                    "enum": Decision::ALL.map(Decision::as_str),
                }
            },
            "required": ["decision"],
        },
    })
}

fn params(ask: &Ask) -> Option<ElicitRequestParams> {
    serde_json::from_value(form(ask)).ok()
}

/// The decision an elicitation result carries: accept with a valid `decision`, or
/// decline and cancel (a deny). `None` for anything else, which is asked again.
pub(crate) fn decision_of(result: &Value) -> Option<Decision> {
    match result.get("action")?.as_str()? {
        "accept" => Decision::parse(result.get("content")?.get("decision")?.as_str()?),
        "decline" | "cancel" => Some(Decision::Deny),
        _ => None,
    }
}

/// Asks through `elicitation/create` on a protocol session (2025-11-25 and earlier).
pub(crate) struct Elicit {
    pub(crate) peer: Peer<RoleServer>,
}

#[async_trait::async_trait]
impl Approver for Elicit {
    async fn approve(&self, ask: &Ask) -> Answer {
        let Some(params) = params(ask) else {
            return Answer::Unavailable("the question could not be put as a form".into());
        };
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(ANSWER_TIME))
            .await
        {
            Ok(result) => {
                let value = serde_json::to_value(&result).unwrap_or_default();
                let decision = decision_of(&value).unwrap_or(Decision::Deny);
                Answer::decided(decision, BY_ELICITATION)
            }
            Err(e) => Answer::Unavailable(format!("the client did not answer the question: {e}")),
        }
    }
}

/// What a `requestState` binds: the call and who made it, until when, the rule.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The tool (canonical name).
    t: String,
    /// The arguments' digest.
    a: String,
    /// The rule that asked.
    r: String,
    /// The principal, if any.
    p: Option<String>,
    /// Unix seconds it expires at.
    e: u64,
    /// Random: the state is good for one retry.
    n: String,
    /// Rules of this call allowed by the retries before (a call several rules ask
    /// about is answered one rule per retry, and every answer holds to the end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    g: Vec<String>,
}

/// A process-wide key seals the states this server hands out; `None` without the
/// system's randomness (then no state is handed out: a known key would let a client
/// forge answers).
fn key() -> Option<&'static ring::hmac::Key> {
    static KEY: std::sync::OnceLock<Option<ring::hmac::Key>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut bytes = [0u8; 32];
        getrandom_fill(&mut bytes).ok()?;
        Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes))
    })
    .as_ref()
}

/// The states already used, with when they expire (forgotten after).
fn used() -> &'static Mutex<std::collections::HashMap<String, u64>> {
    static USED: std::sync::OnceLock<Mutex<std::collections::HashMap<String, u64>>> =
        std::sync::OnceLock::new();
    USED.get_or_init(Mutex::default)
}

fn getrandom_fill(bytes: &mut [u8]) -> Result<(), ring::error::Unspecified> {
    use ring::rand::SecureRandom as _;
    ring::rand::SystemRandom::new().fill(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The digest of a call's arguments.
pub(crate) fn digest(args: &Value) -> String {
    let text = args.to_string();
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d.as_ref())
}

/// The sealed `requestState` of a call of `tool` with `args` by `principal`, asked
/// by `rule` after the earlier retries allowed `granted`, good for one retry.
///
/// # Errors
/// Without the system's randomness, no state can be sealed (-32603).
pub(crate) fn seal(
    tool: &str,
    args: &Value,
    rule: &str,
    granted: Vec<String>,
    principal: Option<&str>,
) -> Result<String, ErrorData> {
    let no_key = || {
        ErrorData::internal_error(
            format!(
                "`{tool}` needs approval (ask `{rule}`) and this server cannot seal a \
                 requestState (no system randomness)"
            ),
            None,
        )
    };
    let key = key().ok_or_else(no_key)?;
    let mut nonce = [0u8; 16];
    getrandom_fill(&mut nonce).map_err(|_| no_key())?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let claim = Claim {
        t: tool.to_owned(),
        a: digest(args),
        r: rule.to_owned(),
        p: principal.map(str::to_owned),
        e: now() + ANSWER_TIME.as_secs(),
        n: b64.encode(nonce),
        g: granted,
    };
    let payload = b64.encode(serde_json::to_vec(&claim).unwrap_or_default());
    let tag = ring::hmac::sign(key, payload.as_bytes());
    Ok(format!("v1.{payload}.{}", b64.encode(tag.as_ref())))
}

/// Why a `requestState` is refused: a JSON-RPC error (-32602).
fn refused(why: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("requestState {why}; call the tool again without it"),
        None,
    )
}

/// The rule `state` was sealed for and the rules the retries before it allowed, if it
/// is this server's, unexpired, not used before, and for this very call (tool,
/// arguments, principal). It is used up.
///
/// # Errors
/// A JSON-RPC error (-32602) for a state that fails any of these.
pub(crate) fn open(
    state: &str,
    tool: &str,
    args: &Value,
    principal: Option<&str>,
) -> Result<(String, Vec<String>), ErrorData> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = state.split('.');
    let (Some("v1"), Some(payload), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refused("integrity check failed"));
    };
    let tag = b64
        .decode(tag)
        .map_err(|_| refused("integrity check failed"))?;
    let key = key().ok_or_else(|| refused("integrity check failed"))?;
    ring::hmac::verify(key, payload.as_bytes(), &tag)
        .map_err(|_| refused("integrity check failed"))?;
    let claim: Claim = b64
        .decode(payload)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| refused("integrity check failed"))?;
    if claim.e < now() {
        return Err(refused("has expired"));
    }
    if claim.t != tool || claim.a != digest(args) || claim.p.as_deref() != principal {
        return Err(refused("belongs to another call"));
    }
    let mut used = used()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = now();
    if used.len() >= 1024 {
        used.retain(|_, expires| *expires >= now);
    }
    // Each entry lives 15 minutes at most; past this many, answers wait.
    if used.len() >= 100_000 {
        return Err(refused(
            "cannot be checked now (too many answers in flight); retry",
        ));
    }
    if used.insert(claim.n, claim.e).is_some() {
        return Err(refused("was used already"));
    }
    Ok((claim.r, claim.g))
}

/// Asks on 2026-07-28: the answer a retried request carries for its rule, or the
/// question kept for the `input_required` result.
pub(crate) struct Retry {
    /// The rule the request's state was sealed for, and the client's answer to it.
    pub(crate) answer: Option<(String, Decision)>,
    /// Rules of this call earlier retries allowed.
    pub(crate) granted: Vec<String>,
    /// Whether the client declared elicitation (else it cannot be asked).
    pub(crate) elicits: bool,
    /// The question to put in the `input_required` result.
    pub(crate) asked: Mutex<Option<Ask>>,
}

#[async_trait::async_trait]
impl Approver for Retry {
    async fn approve(&self, ask: &Ask) -> Answer {
        if let Some((rule, decision)) = &self.answer
            && *rule == ask.rule
        {
            return Answer::decided(*decision, BY_RETRY);
        }
        if self.granted.contains(&ask.rule) {
            return Answer::decided(Decision::AllowOnce, BY_RETRY);
        }
        let mut asked = self
            .asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if asked.is_none() {
            *asked = Some(ask.clone());
        }
        if self.elicits {
            Answer::Pending("the client was asked; the request is answered input_required".into())
        } else {
            Answer::Unavailable("the client declared no elicitation capability to ask with".into())
        }
    }
}

impl Retry {
    /// The rules of this call allowed so far: the earlier retries' and this one's.
    pub(crate) fn allowed(&self) -> Vec<String> {
        let mut allowed = self.granted.clone();
        if let Some((rule, decision)) = &self.answer
            && *decision != Decision::Deny
            && !allowed.contains(rule)
        {
            allowed.push(rule.clone());
        }
        allowed
    }

    /// The question this request left open, if any.
    pub(crate) fn asked(&self) -> Option<Ask> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// The `inputRequests` of an `input_required` result asking `ask`.
pub(crate) fn input_requests(ask: &Ask) -> Option<InputRequests> {
    let request: ElicitRequest =
        serde_json::from_value(json!({"method": "elicitation/create", "params": form(ask)}))
            .ok()?;
    Some(InputRequests::from([(
        KEY.to_owned(),
        InputRequest::Elicitation(request),
    )]))
}

/// The error of a call that needs approval from a 2026-07-28 client that declared
/// no elicitation capability (-32021, as the specification says).
pub(crate) fn missing_elicitation(ask: &Ask) -> ErrorData {
    let mut error = ErrorData::missing_required_client_capability(
        serde_json::from_value(json!({"elicitation": {}})).unwrap_or_default(),
    );
    error.message = format!(
        "call to `{}` needs approval (ask `{}`), asked by elicitation, which this client \
         did not declare",
        ask.tool, ask.rule
    )
    .into();
    error
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{decision_of, open, seal};
    use jianmu_tool_core::Decision;

    #[test]
    fn states_open_only_for_their_own_call() {
        let args = json!({"command": "git push"});
        let state = seal("bash", &args, "command:git push", Vec::new(), Some("alice")).unwrap();
        assert_eq!(
            open(&state, "bash", &args, Some("alice")).unwrap(),
            ("command:git push".to_owned(), Vec::new())
        );
        // Good for one retry only.
        let again = open(&state, "bash", &args, Some("alice")).unwrap_err();
        assert!(
            again.message.contains("was used already"),
            "{}",
            again.message
        );
        let state = seal("bash", &args, "command:git push", Vec::new(), Some("alice")).unwrap();
        let other = json!({"command": "git push --force"});
        for (state, tool, args, who, why) in [
            (
                format!("{state}-TAMPERED"),
                "bash",
                &args,
                Some("alice"),
                "integrity check failed",
            ),
            (
                state.replacen("v1.", "v1.x", 1),
                "bash",
                &args,
                Some("alice"),
                "integrity check failed",
            ),
            (
                state.clone(),
                "bash",
                &other,
                Some("alice"),
                "belongs to another call",
            ),
            (
                state.clone(),
                "write_file",
                &args,
                Some("alice"),
                "belongs to another call",
            ),
            (
                state.clone(),
                "bash",
                &args,
                Some("bob"),
                "belongs to another call",
            ),
            (
                "v1..".to_owned(),
                "bash",
                &args,
                None,
                "integrity check failed",
            ),
            (String::new(), "bash", &args, None, "integrity check failed"),
        ] {
            let err = open(&state, tool, args, who).unwrap_err();
            assert_eq!(err.code.0, -32602);
            assert!(err.message.contains(why), "{state}: {}", err.message);
        }
    }

    /// A call two rules ask about: the first retry answers one rule, the second the
    /// other, and the first answer still holds then (it used to be asked again, and
    /// the client went round for ever).
    #[tokio::test]
    async fn every_rule_answered_in_a_chain_of_retries_holds_to_its_end() {
        use jianmu_tool_core::{Answer, Approver as _, Ask};
        let args = json!({"command": "git push && rm -r deploy"});
        let ask = |rule: &str| Ask::new("bash", rule, "", "c1");
        // First retry: the answer to `command:git push`, asked next about `command:rm`.
        let state = seal("bash", &args, "command:git push", Vec::new(), None).unwrap();
        let (rule, granted) = open(&state, "bash", &args, None).unwrap();
        let first = super::Retry {
            answer: Some((rule, Decision::AllowOnce)),
            granted,
            elicits: true,
            asked: std::sync::Mutex::default(),
        };
        assert!(matches!(
            first.approve(&ask("command:git push")).await,
            Answer::Decided {
                decision: Decision::AllowOnce,
                ..
            }
        ));
        assert!(matches!(
            first.approve(&ask("command:rm")).await,
            Answer::Pending(_)
        ));
        // Second retry: the answer to `command:rm`; `command:git push` still allowed.
        let state = seal("bash", &args, "command:rm", first.allowed(), None).unwrap();
        let (rule, granted) = open(&state, "bash", &args, None).unwrap();
        let second = super::Retry {
            answer: Some((rule, Decision::AllowOnce)),
            granted,
            elicits: true,
            asked: std::sync::Mutex::default(),
        };
        for rule in ["command:git push", "command:rm"] {
            assert!(
                matches!(
                    second.approve(&ask(rule)).await,
                    Answer::Decided {
                        decision: Decision::AllowOnce,
                        ..
                    }
                ),
                "{rule}"
            );
        }
        assert!(second.asked().is_none());
        // A denied rule is never carried on.
        let denied = super::Retry {
            answer: Some(("command:rm".into(), Decision::Deny)),
            granted: vec!["command:git push".into()],
            elicits: true,
            asked: std::sync::Mutex::default(),
        };
        assert_eq!(denied.allowed(), ["command:git push"]);
    }

    #[test]
    fn answers_are_read_strictly() {
        let accept = |d: serde_json::Value| json!({"action": "accept", "content": {"decision": d}});
        assert_eq!(
            decision_of(&accept(json!("allow_session"))),
            Some(Decision::AllowSession)
        );
        assert_eq!(
            decision_of(&json!({"action": "decline"})),
            Some(Decision::Deny)
        );
        assert_eq!(
            decision_of(&json!({"action": "cancel"})),
            Some(Decision::Deny)
        );
        for odd in [
            accept(json!("yes")),
            accept(json!(1)),
            json!({"action": "accept", "content": {"name": "Alice"}}),
            json!({"action": "accept"}),
            json!(12345),
            json!(null),
        ] {
            assert_eq!(decision_of(&odd), None, "{odd}");
        }
    }
}
