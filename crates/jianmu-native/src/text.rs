//! Paths and text shaped as the vendors' reference tools shape them.

/// `path` (absolute, as the model wrote it) relative to `root`, with `.` and `..`
/// resolved by their names; `None` when it is not under `root`.
pub(crate) fn under(root: &str, path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    let root: Vec<&str> = root.split('/').filter(|p| !p.is_empty()).collect();
    if parts.len() < root.len() || parts[..root.len()] != root[..] {
        return None;
    }
    let rest = parts[root.len()..].join("/");
    Some(if rest.is_empty() {
        ".".to_owned()
    } else {
        rest
    })
}

/// The lines of `text`, without the empty one after a final line break.
pub(crate) fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    text.strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .collect()
}

/// `lines` numbered from `first` as `cat -n` numbers them.
pub(crate) fn numbered(lines: &[&str], first: usize) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:6}\t{line}\n", first + i));
    }
    out
}

/// 1-based numbers of the lines where `needle` starts in `text`, each once. One
/// pass: line breaks are counted from the previous match, not from the start, so a
/// needle found everywhere costs no more than one search.
pub(crate) fn occurrence_lines(text: &str, needle: &str) -> Vec<usize> {
    let mut lines: Vec<usize> = Vec::new();
    if needle.is_empty() {
        return lines;
    }
    let bytes = text.as_bytes();
    let (mut line, mut counted) = (1, 0);
    // Non-overlapping, as `str::match_indices`; line breaks counted once, up to each.
    for at in memchr::memmem::find_iter(bytes, needle.as_bytes()) {
        line += line_breaks(&bytes[counted..at]);
        counted = at;
        if lines.last() != Some(&line) {
            lines.push(line);
        }
    }
    lines
}

/// How many line breaks `bytes` holds: byte by byte when short (most gaps between
/// matches), with memchr when long.
fn line_breaks(bytes: &[u8]) -> usize {
    if bytes.len() < 256 {
        bytes.iter().filter(|&&b| b == b'\n').count()
    } else {
        memchr::memchr_iter(b'\n', bytes).count()
    }
}

/// `[1, 2, 3]`: the numbers as `{:?}` writes them, without its formatting machinery
/// (a list of 20,000 line numbers is a common answer).
pub(crate) fn number_list(numbers: &[usize]) -> String {
    let mut out = String::with_capacity(2 + numbers.len() * 8);
    out.push('[');
    for (i, &n) in numbers.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let mut digits = [0u8; 20];
        let (mut at, mut rest) = (digits.len(), n);
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        out.extend(digits[at..].iter().map(|&d| char::from(d)));
    }
    out.push(']');
    out
}

/// `text` cut to `max` characters, keeping its start and end, with the cut said: the
/// note states exactly how many characters were left out. When `max` is too small to
/// hold the note and a character of each end, the answer is the note alone (every
/// character cut), which may be longer than `max`: a cut is never silent.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let total = text.chars().count();
    cut_around(text, max, |room| {
        format!("\n[... {} characters cut ...]\n", total - room)
    })
}

/// [`cut`] for a stream `bash` had already cut (its middle left out, `total_bytes` in
/// all, the whole saved at `saved` when it could be): the note states the stream's
/// size and where it all is. The count of what is missing is not stated: `text` holds
/// `bash`'s own note and, past invalid UTF-8, not the stream's bytes.
pub(crate) fn cut_stream(text: &str, max: usize, total_bytes: u64, saved: Option<&str>) -> String {
    let place = saved.map_or(String::new(), |p| format!("; all of it is saved in {p}"));
    let note =
        format!("\n[... the middle is cut: the output was {total_bytes} bytes{place} ...]\n");
    cut_around(text, max, |_| note.clone())
}

/// The first `room / 2` and last `room - room / 2` characters of `text` (`chars` long).
fn ends(text: &str, chars: usize, room: usize) -> (String, String) {
    let head: String = text.chars().take(room / 2).collect();
    let tail: String = text.chars().skip(chars - (room - room / 2)).collect();
    (head, tail)
}

/// `text` cut to `max` characters around `note(room)`, the note for `room` characters
/// kept: both ends kept, the note between.
fn cut_around(text: &str, max: usize, note: impl Fn(usize) -> String) -> String {
    let chars = text.chars().count();
    if chars <= max {
        return text.to_owned();
    }
    // The note's length depends on the count it states, and the count on the room
    // the note leaves: start from the longest note and let the room grow until both
    // agree (the room only grows, and is bounded by `max`).
    let mut room = max.saturating_sub(note(0).chars().count());
    let kept_note = loop {
        let candidate = note(room);
        let fits = max.saturating_sub(candidate.chars().count());
        if fits <= room {
            break candidate;
        }
        room = fits;
    };
    if room < 2 {
        return note(0).trim().to_owned();
    }
    let (head, tail) = ends(text, chars, room);
    format!("{head}{kept_note}{tail}")
}

/// A size as `du -h` writes it: `4.0K`, `1.5M`.
pub(crate) fn human(size: u64) -> String {
    let mut value = size as f64;
    for unit in ["", "K", "M", "G"] {
        if value < 1024.0 || unit == "G" {
            return if unit.is_empty() {
                format!("{size}")
            } else {
                format!("{value:.1}{unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{size}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_by_name_and_stay_under_the_root() {
        assert_eq!(under("/repo", "/repo/a/b.py").as_deref(), Some("a/b.py"));
        assert_eq!(under("/repo", "/repo").as_deref(), Some("."));
        assert_eq!(under("/repo", "/repo/a/../b").as_deref(), Some("b"));
        assert_eq!(under("/repo", "/repo/../etc/passwd"), None);
        assert_eq!(under("/repo", "/repository/x"), None);
        assert_eq!(under("/repo", "/../../repo/x").as_deref(), None);
        assert_eq!(under("/", "/x").as_deref(), Some("x"));
        assert_eq!(under("/repo", "repo/x"), None);
    }

    #[test]
    fn cutting_keeps_both_ends_and_says_how_much_went() {
        let text = format!("{}{}", "a".repeat(50), "b".repeat(50));
        let out = cut(&text, 60);
        assert!(out.chars().count() <= 60, "{out}");
        assert!(out.starts_with('a') && out.ends_with('b'), "{out}");
        // 31 characters kept around a 29-character note: 69 cut.
        assert!(out.contains("[... 69 characters cut ...]"), "{out}");
        assert_eq!(cut("short", 60), "short");
        assert_eq!(cut("abcdef", 3), "[... 6 characters cut ...]");
    }

    /// At every size the note says exactly how many characters are missing, and the
    /// answer stays within `max` whenever the note fits at all.
    #[test]
    fn cut_notes_are_exact_at_every_size() {
        for total in [1usize, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 12_345] {
            let text: String = (0..total)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            for max in 0..total.min(300) {
                let out = cut(&text, max);
                let start = out
                    .find("[... ")
                    .unwrap_or_else(|| panic!("no note: {total} {max} {out:?}"));
                let rest = &out[start + 5..];
                let end = rest.find(" characters cut ...]").unwrap();
                let said: usize = rest[..end].parse().unwrap();
                let note_chars = format!("[... {said} characters cut ...]").len();
                let kept =
                    out.chars().count() - note_chars - 2 * usize::from(out.len() > note_chars);
                assert_eq!(said + kept, total, "{total} {max} {out:?}");
                if max >= note_chars + 4 {
                    assert!(out.chars().count() <= max, "{total} {max} {out:?}");
                }
            }
        }
    }

    #[test]
    fn text_helpers() {
        assert_eq!(lines("a\nb\n"), ["a", "b"]);
        assert_eq!(lines("a\nb"), ["a", "b"]);
        assert!(lines("").is_empty());
        assert_eq!(numbered(&["x", "y"], 9), "     9\tx\n    10\ty\n");
        assert_eq!(occurrence_lines("x\nab\nabab", "ab"), [2, 3]);
        assert_eq!(occurrence_lines("a\n\naa\n", "a"), [1, 3]);
        assert!(occurrence_lines("abc", "x").is_empty());
        assert!(occurrence_lines("abc", "").is_empty());
        let long = format!("{}ab", "\n".repeat(300));
        assert_eq!(occurrence_lines(&long, "ab"), [301]);
        assert_eq!(
            number_list(&[1, 20, 300, 0, usize::MAX]),
            format!("{:?}", [1, 20, 300, 0, usize::MAX])
        );
        assert_eq!(number_list(&[]), "[]");
        assert_eq!(human(100), "100");
        assert_eq!(human(4096), "4.0K");
        assert_eq!(human(1536 * 1024), "1.5M");
    }
}
