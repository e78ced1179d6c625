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

    /// The group of `text` that applies to `agent` (a product token such as
    /// `jianmu`): the groups naming it, else those for `*`. Read as RFC 9309 and
    /// Google's reference parser read it: a byte-order mark skipped, lines ended by
    /// LF, CRLF or CR alone, keys in any case (and the misspellings the reference
    /// parser takes), a user agent matched by its leading product token, patterns
    /// with non-ASCII bytes percent-encoded.
    pub(crate) fn parse(text: &str, agent: &str) -> Self {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let (mut mine, mut anyone) = (Vec::new(), Vec::new());
        let mut has_mine = false;
        // The current group's user agents: ours, and `*`.
        let (mut for_me, mut for_all) = (false, false);
        let mut in_rules = false;
        for line in text.split(['\n', '\r']) {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = key_value(line) else {
                continue;
            };
            match key {
                Key::UserAgent => {
                    if in_rules {
                        (for_me, for_all, in_rules) = (false, false, false);
                    }
                    if value.starts_with('*')
                        && value[1..].chars().next().is_none_or(char::is_whitespace)
                    {
                        for_all = true;
                    } else {
                        let token: &str = value
                            .split(|c: char| !(c.is_ascii_alphabetic() || c == '_' || c == '-'))
                            .next()
                            .unwrap_or("");
                        if !token.is_empty() && token.eq_ignore_ascii_case(agent) {
                            for_me = true;
                            has_mine = true;
                        }
                    }
                }
                Key::Allow | Key::Disallow => {
                    in_rules = true;
                    // An empty Disallow allows everything: no rule.
                    if value.is_empty() {
                        continue;
                    }
                    let rule = (key == Key::Allow, escape(value));
                    if for_me {
                        mine.push(rule.clone());
                    }
                    if for_all {
                        anyone.push(rule);
                    }
                }
            }
        }
        Self {
            rules: if has_mine { mine } else { anyone },
        }
    }

    /// Whether `path` (with its query) may be fetched.
    pub(crate) fn allows(&self, path: &str) -> bool {
        // RFC 9309: the file itself is always allowed.
        if path == "/robots.txt" {
            return true;
        }
        let path = escape(path);
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if matches(pattern, &path) {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    UserAgent,
    Allow,
    Disallow,
}

/// A line's key and value: split at its colon (or, as the reference parser also
/// takes, at the white space between exactly two words); `None` for other keys.
fn key_value(line: &str) -> Option<(Key, &str)> {
    let (key, value) = match line.split_once(':') {
        Some(pair) => pair,
        None => {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(k), Some(v), None) => (k, v),
                _ => return None,
            }
        }
    };
    let key = match key.trim().to_ascii_lowercase().as_str() {
        "user-agent" | "useragent" | "user agent" => Key::UserAgent,
        "allow" => Key::Allow,
        "disallow" | "dissallow" | "dissalow" | "disalow" | "diasllow" | "disallaw" => {
            Key::Disallow
        }
        _ => return None,
    };
    Some((key, value.trim()))
}

/// A pattern or path as they are compared: non-ASCII bytes percent-encoded, and the
/// hex digits of every escape upper-case.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            out.push('%');
            out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
            out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
            i += 3;
        } else if b >= 0x80 {
            out.push_str(&format!("%{b:02X}"));
            i += 1;
        } else {
            out.push(char::from(b));
            i += 1;
        }
    }
    out
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
        assert!(Robots::allow_all().allows("/x"));
    }

    /// Cases from RFC 9309 and the reference parser's tests (google/robotstxt).
    #[test]
    fn read_as_the_reference_parser_reads_it() {
        let allowed = |txt: &str, agent: &str, path: &str| Robots::parse(txt, agent).allows(path);
        // A byte-order mark, and lines ended by CR alone or mixed.
        assert!(!allowed(
            "\u{feff}User-agent: *\nDisallow: /x/\n",
            "jianmu",
            "/x/y"
        ));
        assert!(!allowed("User-agent: *\rDisallow: /x/\r", "jianmu", "/x/y"));
        assert!(!allowed(
            "User-agent: *\r\nAllow: /a\rDisallow: /x/\n",
            "jianmu",
            "/x/y"
        ));
        // Non-ASCII patterns match the percent-encoded path, in either case of hex.
        let txt = "User-agent: *\nDisallow: /foo/bar/ツ\nDisallow: /a/%e3%83%84\n";
        assert!(!allowed(txt, "jianmu", "/foo/bar/%E3%83%84"));
        assert!(!allowed(txt, "jianmu", "/a/%E3%83%84"));
        assert!(allowed(txt, "jianmu", "/foo/bar/baz"));
        // Keys in any case, misspelt as the reference parser takes them, or without
        // a colon.
        assert!(!allowed("USER-AGENT: *\nDISALLOW: /x\n", "jianmu", "/x"));
        assert!(!allowed("useragent: *\ndissallow: /x\n", "jianmu", "/x"));
        assert!(!allowed("User-agent *\nDisallow /x\n", "jianmu", "/x"));
        // The user agent is matched by its product token.
        assert!(!allowed(
            "User-agent: Jianmu/1.0\nDisallow: /\n",
            "jianmu",
            "/x"
        ));
        assert!(allowed(
            "User-agent: jianmubot\nDisallow: /\n",
            "jianmu",
            "/x"
        ));
        assert!(!allowed(
            "User-agent: * bot\nDisallow: /\nUser-agent: x\n",
            "jianmu",
            "/x"
        ));
        // Consecutive user-agent lines share a group; a rule before any is ignored.
        let txt = "Disallow: /a\nUser-agent: foo\nUser-agent: jianmu\nDisallow: /b\n";
        assert!(allowed(txt, "jianmu", "/a"));
        assert!(!allowed(txt, "jianmu", "/b"));
        // Longest match wins; a tie goes to Allow.
        let txt = "User-agent: *\nAllow: /page\nDisallow: /*.html\n";
        assert!(!allowed(txt, "jianmu", "/page.html"));
        let txt = "User-agent: *\nAllow: /page\nDisallow: /page\n";
        assert!(allowed(txt, "jianmu", "/page"));
        let txt = "User-agent: *\nAllow: /$\nDisallow: /\n";
        assert!(allowed(txt, "jianmu", "/"));
        assert!(allowed(txt, "jianmu", "/robots.txt"));
        assert!(!allowed(txt, "jianmu", "/page.html"));
    }
}
