//! Who calls `jianmu mcp --http`: principals, each known by its bearer token.
//!
//! `--token-file FILE` holds one `NAME TOKEN` pair per line (blank lines and `#`
//! comments are ignored); a line with a token alone is the principal `default`, so a
//! file of one token keeps working. `JIANMU_MCP_TOKEN` is the principal `default`.
//! Tokens are compared in constant time, each against every known one. SIGHUP reads
//! the file again: a good file replaces the tokens (sessions stay open; a removed
//! principal's next request gets 401), a bad one is reported and the old tokens kept.

use std::sync::{Arc, RwLock};

use anyhow::{Context as _, bail};
use subtle::ConstantTimeEq as _;

/// The shortest token accepted.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// The principal a request was authorized as, in its [`Arrival`](crate::scopes::Arrival):
/// named in every audit line of its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal(pub(crate) Arc<str>);

/// The known principals and their tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tokens(Vec<(Arc<str>, String)>);

impl Tokens {
    /// One token, for the principal `default`.
    pub(crate) fn single(token: String) -> anyhow::Result<Self> {
        check_token("default", &token)?;
        Ok(Self(vec![("default".into(), token)]))
    }

    /// The pairs of a token file.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let mut pairs: Vec<(Arc<str>, String)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (name, token) = match words.as_slice() {
                [token] => ("default", *token),
                [name, token] => (*name, *token),
                _ => bail!("line {}: expected `NAME TOKEN` (or a token alone)", n + 1),
            };
            // A name is also a folder's name (`principal_workspaces`).
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
                || name.len() > 64
            {
                bail!(
                    "line {}: a principal's name is 1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit",
                    n + 1
                );
            }
            check_token(name, token).with_context(|| format!("line {}", n + 1))?;
            if pairs.iter().any(|(p, _)| &**p == name) {
                bail!("line {}: the principal `{name}` is named twice", n + 1);
            }
            if pairs.iter().any(|(_, t)| t == token) {
                bail!("line {}: this token is already another principal's", n + 1);
            }
            pairs.push((name.into(), token.to_owned()));
        }
        if pairs.is_empty() {
            bail!("no token in it");
        }
        Ok(Self(pairs))
    }

    /// The principal whose token `given` is: compared in constant time with every
    /// token, whichever matches.
    pub(crate) fn find(&self, given: &[u8]) -> Option<Principal> {
        let mut found = None;
        for (name, token) in &self.0 {
            if bool::from(given.ct_eq(token.as_bytes())) {
                found = Some(Principal(Arc::clone(name)));
            }
        }
        found
    }

    /// How many principals there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

fn check_token(name: &str, token: &str) -> anyhow::Result<()> {
    if token.len() < MIN_TOKEN_LEN {
        bail!(
            "the MCP token of `{name}` must be at least {MIN_TOKEN_LEN} characters (e.g. `openssl rand -hex 32`)"
        );
    }
    Ok(())
}

/// Reads a token file.
pub(crate) fn read(path: &std::path::Path) -> anyhow::Result<Tokens> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    Tokens::parse(&text).with_context(|| format!("the token file {}", path.display()))
}

/// The tokens in force, replaced on reload.
#[derive(Debug, Default)]
pub(crate) struct Known(RwLock<Option<Arc<Tokens>>>);

impl Known {
    pub(crate) fn new(tokens: Option<Tokens>) -> Self {
        Self(RwLock::new(tokens.map(Arc::new)))
    }

    /// The tokens in force (`None`: no token is needed).
    pub(crate) fn get(&self) -> Option<Arc<Tokens>> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the tokens.
    pub(crate) fn set(&self, tokens: Tokens) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(tokens));
    }
}

#[cfg(test)]
mod tests {
    use super::Tokens;

    #[test]
    fn token_files_name_principals() {
        let tokens = Tokens::parse(
            "# operators\n\nalice 0123456789abcdef-alice\n  bob   0123456789abcdef-bob  \n",
        )
        .unwrap();
        assert_eq!(tokens.len(), 2);
        let who = |t: &str| tokens.find(t.as_bytes()).map(|p| p.0.to_string());
        assert_eq!(who("0123456789abcdef-alice").as_deref(), Some("alice"));
        assert_eq!(who("0123456789abcdef-bob").as_deref(), Some("bob"));
        assert_eq!(who("0123456789abcdef-bo"), None);
        assert_eq!(who(""), None);
        // A file of one token keeps working, as `default`.
        let one = Tokens::parse("0123456789abcdef\n").unwrap();
        assert_eq!(
            one.find(b"0123456789abcdef")
                .map(|p| p.0.to_string())
                .as_deref(),
            Some("default")
        );
        for bad in [
            "",
            "# nothing\n",
            "alice short\n",
            "alice 0123456789abcdef x\n",
            "al/ce 0123456789abcdef\n",
            ".. 0123456789abcdef\n",
            "-a 0123456789abcdef\n",
            "a 0123456789abcdef\na 0123456789abcdeX\n",
            "a 0123456789abcdef\nb 0123456789abcdef\n",
        ] {
            assert!(Tokens::parse(bad).is_err(), "{bad:?}");
        }
    }
}
