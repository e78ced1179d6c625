//! robots.txt as RFC 9309 reads it: the group for our product token (else `*`), and
//! within it the longest matching rule, `Allow` winning a tie; `*` matches any run of
//! characters and a final `$` anchors the end.

/// The rules of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Robots {
    /// `(allow, pattern)` pairs.
    rules: Vec<(bool, String)>,
}

/// Most bytes of a robots.txt read (RFC 9309 asks for at least 500 KiB).
pub(crate) const MAX_ROBOTS: usize = 512 * 1024;

impl Robots {
    /// Allows everything (no robots.txt, or one that does not apply).
    pub(crate) fn allow_all() -> Self {
        Self::default()
    }

    /// Disallows everything.
    pub(crate) fn deny_all() -> Self {
        Self {
            rules: vec![(false, "/".into())],
        }
    }

    /// The group of `text` that applies to `agent` (a product token such as
    /// `jianmu`): the groups naming it, else those for `*`.
    pub(crate) fn parse(text: &str, agent: &str) -> Self {
        let mut mine = Vec::new();
        let mut anyone = Vec::new();
        let mut agents: Vec<String> = Vec::new();
        let mut in_rules = false;
        let mut current: Vec<(bool, String)> = Vec::new();
        let mut flush = |agents: &[String], rules: &mut Vec<(bool, String)>| {
            if agents.iter().any(|a| a.eq_ignore_ascii_case(agent)) {
                mine.append(&mut rules.clone());
            }
            if agents.iter().any(|a| a == "*") {
                anyone.append(&mut rules.clone());
            }
            rules.clear();
        };
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim().to_ascii_lowercase();
            let value = value.trim();
            match key.as_str() {
                "user-agent" => {
                    if in_rules {
                        flush(&agents, &mut current);
                        agents.clear();
                        in_rules = false;
                    }
                    agents.push(value.to_ascii_lowercase());
                }
                "allow" | "disallow" => {
                    in_rules = true;
                    // An empty Disallow allows everything: no rule.
                    if !value.is_empty() {
                        current.push((key == "allow", value.to_owned()));
                    }
                }
                _ => {}
            }
        }
        flush(&agents, &mut current);
        let has_mine = text.lines().any(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split_once(':')
                .is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("user-agent")
                        && v.trim().eq_ignore_ascii_case(agent)
                })
        });
        Self {
            rules: if has_mine { mine } else { anyone },
        }
    }

    /// Whether `path` (with its query) may be fetched.
    pub(crate) fn allows(&self, path: &str) -> bool {
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if matches(pattern, path) {
                let len = pattern.len();
                best = match best {
                    Some((l, a)) if l > len || (l == len && a) => Some((l, a)),
                    _ => Some((len, *allow)),
                };
            }
        }
        best.is_none_or(|(_, allow)| allow)
    }
}

/// Whether robots pattern `pattern` matches the start of `path`.
fn matches(pattern: &str, path: &str) -> bool {
    let (pattern, anchored) = match pattern.strip_suffix('$') {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = path.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (k, part) in parts.iter().enumerate() {
        let last = k + 1 == parts.len();
        if last && anchored {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    !anchored || rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_longest_match_and_wildcards() {
        let txt = "User-agent: *\nDisallow: /private\nAllow: /private/ok\n\n\
                   User-agent: other\nDisallow: /\n";
        let r = Robots::parse(txt, "jianmu");
        assert!(r.allows("/"));
        assert!(!r.allows("/private/x"));
        assert!(r.allows("/private/ok/y"));
        let mine = Robots::parse(
            "User-agent: Jianmu\nDisallow: /\n\nUser-agent: *\nAllow: /\n",
            "jianmu",
        );
        assert!(!mine.allows("/page"));
        let wild = Robots::parse(
            "User-agent: *\nDisallow: /*.pdf$\nDisallow: /a*b\n",
            "jianmu",
        );
        assert!(!wild.allows("/docs/x.pdf"));
        assert!(wild.allows("/docs/x.pdf?y"));
        assert!(!wild.allows("/a-to-b/c"));
        assert!(wild.allows("/a-only"));
        assert!(Robots::parse("User-agent: *\nDisallow:\n", "jianmu").allows("/x"));
        assert!(!Robots::deny_all().allows("/x"));
        assert!(Robots::allow_all().allows("/x"));
    }
}
