//! Who answers the policy's `ask` rules for `jianmu call`: the person at the
//! terminal, asked on stderr, or nobody (the call is refused, the flag that allows it
//! named); `--approve RULE` answers for them.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::sync::Arc;

use jianmu_tool_core::{Answer, Approver, Ask, Decision};

/// The approver of one `jianmu call`: `approved` rules (its `--approve` flags) are
/// allowed at once; others are asked at the terminal, if there is one.
pub(crate) fn terminal(approved: Vec<String>) -> Arc<dyn Approver> {
    Arc::new(Terminal { approved })
}

struct Terminal {
    approved: Vec<String>,
}

#[async_trait::async_trait]
impl Approver for Terminal {
    async fn approve(&self, ask: &Ask) -> Answer {
        if self.approved.iter().any(|r| *r == ask.rule || r == "all") {
            return Answer::decided(Decision::AllowOnce, "--approve");
        }
        let refused = || {
            Answer::Unavailable(format!(
                "there is no terminal to ask on; run with --approve '{}' to allow it",
                ask.rule
            ))
        };
        if !std::io::stderr().is_terminal() {
            return refused();
        }
        let ask = ask.clone();
        tokio::task::spawn_blocking(move || prompt(&ask))
            .await
            .ok()
            .flatten()
            .unwrap_or_else(refused)
    }
}

/// Asks on stderr and reads the answer from the terminal (not stdin, which may hold
/// the arguments). `None` when the terminal cannot be opened.
fn prompt(ask: &Ask) -> Option<Answer> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "jianmu: `{}` needs approval (ask `{}`):\n  {}\nAllow? [y] once, [s] for this session, [N] no: ",
        ask.tool,
        ask.rule,
        jianmu_tool_core::escape_controls(&ask.summary),
    );
    let _ = err.flush();
    let mut line = String::new();
    // An answer is a word; a longer line is read no further than this.
    let _ = std::io::BufReader::new(tty.take(256)).read_line(&mut line);
    let decision = match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Decision::AllowOnce,
        "s" | "session" => Decision::AllowSession,
        _ => Decision::Deny,
    };
    Some(Answer::decided(decision, "terminal"))
}
