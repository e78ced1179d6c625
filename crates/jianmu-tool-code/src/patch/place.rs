//! Where each hunk of an update goes, and the file's new lines.
//!
//! A hunk's expected lines (context and removed) are searched from the end of the
//! previous hunk onwards: exactly first, then ignoring trailing whitespace, then
//! ignoring leading and trailing whitespace, then also reading typographic dashes,
//! quotes and spaces as their ASCII forms. The search runs over line hashes with
//! Knuth–Morris–Pratt, so it is linear in the file and the hunk whatever they hold,
//! and it also yields the longest partial match for the error message.

use std::borrow::Cow;
use std::hash::BuildHasher as _;

use foldhash::fast::RandomState;

use super::parse::{Chunk, HunkLine};

/// Where hunks go when the patch leaves room for a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placing {
    /// As codex places them: a hunk that only adds lines goes at the end of the
    /// file, and a hunk whose last expected line is empty is tried again without it.
    Codex,
    /// A hunk that only adds lines goes after its `@@` line, or at the end with
    /// `*** End of File`, and is refused otherwise.
    Strict,
}

/// How strictly lines are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    Exact,
    TrailingSpace,
    Whitespace,
    Punctuation,
}

const FITS: [Fit; 4] = [
    Fit::Exact,
    Fit::TrailingSpace,
    Fit::Whitespace,
    Fit::Punctuation,
];

impl Fit {
    fn key(self, line: &str) -> Cow<'_, str> {
        match self {
            Fit::Exact => Cow::Borrowed(line),
            Fit::TrailingSpace => Cow::Borrowed(line.trim_end()),
            Fit::Whitespace => Cow::Borrowed(line.trim()),
            Fit::Punctuation => {
                let line = line.trim();
                if line.is_ascii() {
                    Cow::Borrowed(line)
                } else {
                    Cow::Owned(line.chars().map(plain).collect())
                }
            }
        }
    }
}

/// The ASCII form of a typographic dash, quote or space.
fn plain(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        c => c,
    }
}

/// Why a hunk could not be placed, in words for the model.
#[derive(Debug)]
pub(crate) struct Miss(pub String);

/// How many lines all searches of one patch may look at: far more than any real
/// patch needs (about a hundred loosely matched hunks in a million-line file), and a
/// bound on what a hostile one can cost (a fraction of a second).
#[derive(Debug)]
pub(crate) struct Budget(pub u64);

impl Budget {
    pub(crate) const DEFAULT: u64 = 100_000_000;

    fn spend(&mut self, lines: usize, number: usize, chunk: &Chunk) -> Result<(), Miss> {
        self.0 = self.0.saturating_sub(lines as u64);
        if self.0 == 0 {
            return Err(Miss(format!(
                "hunk {number} (patch line {}): placing the patch's hunks looked at more lines than a patch should need; give the hunks more distinctive context, or split the patch",
                chunk.line
            )));
        }
        Ok(())
    }
}

/// The placed hunks of one file: the new lines and the hunks that needed a looser fit.
#[derive(Debug)]
pub(crate) struct Placed<'a> {
    pub lines: Vec<&'a str>,
    /// 1-based numbers of hunks matched ignoring whitespace.
    pub loose: Vec<usize>,
    /// 1-based numbers of hunks of only added lines, with an `@@` line, that went at
    /// the end of the file as codex places them (not after their `@@` line).
    pub appended: Vec<usize>,
}

/// Line hashes of the file under one fit, computed when first needed, with a seed
/// of this process's own (so no input can be made to collide on purpose).
struct Keys<'a> {
    lines: &'a [&'a str],
    cache: [Option<Vec<u64>>; 4],
    seed: RandomState,
}

impl<'a> Keys<'a> {
    fn get(&mut self, fit: Fit) -> &[u64] {
        let (lines, seed) = (self.lines, &self.seed);
        self.cache[fit as usize]
            .get_or_insert_with(|| lines.iter().map(|l| seed.hash_one(&*fit.key(l))).collect())
    }

    fn hash(&self, s: &str) -> u64 {
        self.seed.hash_one(s)
    }
}

/// One line of a placed hunk: the file's line kept or removed, or a line added.
#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    Keep,
    Remove,
    Insert(&'a str),
}

fn steps(hunk: &[HunkLine]) -> Vec<Step<'_>> {
    hunk.iter()
        .map(|l| match l {
            HunkLine::Keep(_) => Step::Keep,
            HunkLine::Remove(_) => Step::Remove,
            HunkLine::Insert(s) => Step::Insert(s),
        })
        .collect()
}

/// Applies `chunks` to `lines` (the file without its final line break).
///
/// # Errors
/// The first hunk that cannot be placed, with the closest part of the file.
pub(crate) fn place<'a>(
    lines: &'a [&'a str],
    chunks: &'a [Chunk],
    placing: Placing,
    budget: &mut Budget,
) -> Result<Placed<'a>, Miss> {
    let mut keys = Keys {
        lines,
        cache: [None, None, None, None],
        seed: RandomState::default(),
    };
    // (start, old length, hunk index, the hunk's steps) of every placed hunk.
    let mut spots: Vec<(usize, usize, usize, Vec<Step<'a>>)> = Vec::with_capacity(chunks.len());
    let mut loose = Vec::new();
    let mut appended = Vec::new();
    let mut cursor = 0usize;
    for (k, chunk) in chunks.iter().enumerate() {
        let number = k + 1;
        if let Some(anchor) = &chunk.anchor {
            cursor = find_anchor(&mut keys, anchor, cursor, chunk, number, budget)? + 1;
        }
        let old: Vec<&str> = chunk.old().collect();
        if old.is_empty() {
            let at = match placing {
                // Codex puts lines that are only added at the end of the file (before
                // a last empty line), wherever the `@@` line is.
                Placing::Codex => lines.len() - usize::from(lines.last() == Some(&"")),
                // Only added lines: they go right after the `@@` line, or at the end
                // with `*** End of File`, or into an empty file. Anything else would
                // be a guess.
                Placing::Strict if chunk.eof => lines.len(),
                Placing::Strict if chunk.anchor.is_some() => cursor,
                Placing::Strict
                    if lines.is_empty() || (lines.len() == 1 && lines[0].is_empty()) =>
                {
                    0
                }
                Placing::Strict => {
                    return Err(Miss(format!(
                        "hunk {number} (patch line {}) only adds lines and does not say where: give the line they follow as `@@ LINE`, or unchanged ` ` context lines around them, or end the hunk with `*** End of File` to append",
                        chunk.line
                    )));
                }
            };
            spots.push((at, 0, k, steps(&chunk.lines)));
            if placing == Placing::Strict {
                cursor = at;
            } else if chunk
                .anchor
                .as_deref()
                .is_some_and(|a| !a.trim().is_empty())
                && !chunk.eof
                && at != cursor
            {
                // Not where its `@@` line put it: the answer says so.
                appended.push(number);
            }
            continue;
        }
        let mut found = seek(&mut keys, &old, cursor, chunk, number, budget)?;
        let mut hunk = None;
        let mut old_len = old.len();
        if found.is_none() && placing == Placing::Codex && old.len() > 1 && old.last() == Some(&"")
        {
            // The empty last line may stand for the file's final line break.
            let shorter = &old[..old.len() - 1];
            found = seek(&mut keys, shorter, cursor, chunk, number, budget)?;
            if found.is_some() {
                hunk = Some(without_final_blank(&chunk.lines));
                old_len = shorter.len();
            }
        }
        let Some((at, fit)) = found else {
            return Err(Miss(miss(lines, &mut keys, chunk, number, &old, cursor)));
        };
        if fit != Fit::Exact {
            loose.push(number);
        }
        spots.push((at, old_len, k, hunk.unwrap_or_else(|| steps(&chunk.lines))));
        cursor = at + old_len;
    }
    // Hunks apply in file order; codex's added lines may sit after later hunks.
    spots.sort_by_key(|s| s.0);
    // Build the new file: unchanged stretches, and each hunk with the file's own
    // context lines (a loose match keeps the file's whitespace there).
    let mut out: Vec<&'a str> = Vec::with_capacity(lines.len() + 16);
    let mut from = 0;
    for (at, len, k, hunk) in spots {
        if at < from {
            return Err(Miss(format!(
                "hunk {} (patch line {}) overlaps the lines another hunk changes; merge the two hunks",
                k + 1,
                chunks[k].line
            )));
        }
        out.extend_from_slice(&lines[from..at]);
        let mut file_line = at;
        for step in hunk {
            match step {
                Step::Keep => {
                    out.push(lines[file_line]);
                    file_line += 1;
                }
                Step::Remove => file_line += 1,
                Step::Insert(s) => out.push(s),
            }
        }
        from = at + len;
    }
    out.extend_from_slice(&lines[from..]);
    Ok(Placed {
        lines: out,
        loose,
        appended,
    })
}

/// Finds the `@@` line at or after `cursor`, with the loosest fit needed.
fn find_anchor(
    keys: &mut Keys<'_>,
    anchor: &str,
    cursor: usize,
    chunk: &Chunk,
    number: usize,
    budget: &mut Budget,
) -> Result<usize, Miss> {
    let lines = keys.lines;
    for fit in FITS {
        let want = fit.key(anchor);
        let target = keys.hash(&want);
        let hay = keys.get(fit);
        let at = (cursor..hay.len()).find(|&i| hay[i] == target && fit.key(lines[i]) == want);
        let looked = at.map_or(hay.len(), |i| i + 1).saturating_sub(cursor);
        budget.spend(looked, number, chunk)?;
        if let Some(at) = at {
            return Ok(at);
        }
    }
    Err(Miss(format!(
        "hunk {number} (patch line {}): its `@@ {}` line was not found{}",
        chunk.line,
        jianmu_tool_core::echo(anchor),
        after(cursor)
    )))
}

/// Where the hunk's expected lines `old` are, at or after `cursor`, and the fit
/// that found them.
fn seek(
    keys: &mut Keys<'_>,
    old: &[&str],
    cursor: usize,
    chunk: &Chunk,
    number: usize,
    budget: &mut Budget,
) -> Result<Option<(usize, Fit)>, Miss> {
    let lines = keys.lines;
    for fit in FITS {
        let pattern: Vec<u64> = old.iter().map(|l| keys.hash(&fit.key(l))).collect();
        let hay = keys.get(fit);
        let at = if chunk.eof {
            budget.spend(pattern.len(), number, chunk)?;
            let start = hay.len().checked_sub(pattern.len());
            start.filter(|&s| s >= cursor && hay[s..] == pattern[..] && same(lines, s, old, fit))
        } else {
            let (at, looked) = search(hay, &pattern, cursor, |s| same(lines, s, old, fit));
            budget.spend(looked + pattern.len(), number, chunk)?;
            at
        };
        if let Some(at) = at {
            return Ok(Some((at, fit)));
        }
    }
    Ok(None)
}

/// The hunk's steps without its last expected line, which is empty, and without its
/// last new line when that is empty too.
fn without_final_blank(hunk: &[HunkLine]) -> Vec<Step<'_>> {
    let last_old = hunk.iter().rposition(|l| !matches!(l, HunkLine::Insert(_)));
    let last_new = hunk
        .iter()
        .rposition(|l| !matches!(l, HunkLine::Remove(_)))
        .filter(|&i| match &hunk[i] {
            HunkLine::Keep(s) | HunkLine::Insert(s) => s.is_empty(),
            HunkLine::Remove(_) => false,
        });
    hunk.iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let (HunkLine::Keep(s) | HunkLine::Remove(s) | HunkLine::Insert(s)) = l;
            let old = !matches!(l, HunkLine::Insert(_)) && Some(i) != last_old;
            let new = !matches!(l, HunkLine::Remove(_)) && Some(i) != last_new;
            match (old, new) {
                (true, true) => Some(Step::Keep),
                (true, false) => Some(Step::Remove),
                (false, true) => Some(Step::Insert(s)),
                (false, false) => None,
            }
        })
        .collect()
}

fn after(cursor: usize) -> String {
    if cursor == 0 {
        String::new()
    } else {
        format!(" after line {cursor} (where the previous hunk ended)")
    }
}

/// Confirms a hash match line by line.
fn same(lines: &[&str], start: usize, old: &[&str], fit: Fit) -> bool {
    old.iter()
        .zip(&lines[start..])
        .all(|(a, b)| fit.key(a) == fit.key(b))
}

/// The prefix function of `pattern` (Knuth–Morris–Pratt).
fn failure(pattern: &[u64]) -> Vec<usize> {
    let mut f = vec![0; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = f[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        f[i] = k;
    }
    f
}

/// Scans `hay[from..]` for `pattern`, calling `each(matched, end)` after every line
/// with how many leading lines of `pattern` end there. Stops when `each` says so;
/// returns how many lines it looked at.
fn scan(
    hay: &[u64],
    pattern: &[u64],
    from: usize,
    mut each: impl FnMut(usize, usize) -> bool,
) -> usize {
    let f = failure(pattern);
    let mut q = 0;
    for (i, h) in hay.iter().enumerate().skip(from) {
        while q > 0 && (q == pattern.len() || *h != pattern[q]) {
            q = f[q - 1];
        }
        if *h == pattern[q] {
            q += 1;
        }
        if each(q, i + 1) {
            return i + 1 - from;
        }
    }
    hay.len().saturating_sub(from)
}

/// The first start at or after `from` where `pattern` occurs and `confirm` agrees.
fn search(
    hay: &[u64],
    pattern: &[u64],
    from: usize,
    confirm: impl Fn(usize) -> bool,
) -> (Option<usize>, usize) {
    let mut found = None;
    let looked = scan(hay, pattern, from, |q, end| {
        if q == pattern.len() && confirm(end - q) {
            found = Some(end - q);
            return true;
        }
        false
    });
    (found, looked)
}

/// The message for a hunk that was not found: where the longest run of its first
/// lines is in the file, and the first line that differs there.
fn miss(
    lines: &[&str],
    keys: &mut Keys<'_>,
    chunk: &Chunk,
    number: usize,
    old: &[&str],
    cursor: usize,
) -> String {
    let pattern: Vec<u64> = old
        .iter()
        .map(|l| keys.hash(&Fit::Whitespace.key(l)))
        .collect();
    let mut best = (0, 0);
    scan(keys.get(Fit::Whitespace), &pattern, cursor, |q, end| {
        if q > best.0 {
            best = (q, end);
        }
        false
    });
    let mut msg = format!(
        "hunk {number} (patch line {}): its {} context and removed line{} were not found{}",
        chunk.line,
        old.len(),
        if old.len() == 1 { "" } else { "s" },
        after(cursor)
    );
    if chunk.eof {
        msg.push_str(" at the end of the file (the hunk ends with `*** End of File`)");
    }
    let (matched, end) = best;
    if matched == 0 {
        msg.push_str(&format!(
            ".\nNo line of the file from there on is `{}` (the hunk's first line): read the file again before patching",
            jianmu_tool_core::echo(old[0])
        ));
        return msg;
    }
    let start = end - matched;
    if matched == old.len() {
        msg.push_str(&format!(
            ".\nThe hunk's lines are at file lines {}-{end}, which is not the end of the file: drop `*** End of File`, or include the lines after them",
            start + 1
        ));
        return msg;
    }
    let have = match lines.get(end) {
        Some(line) => format!("`{}`", jianmu_tool_core::echo(line)),
        None => "past the end".to_owned(),
    };
    let span = if matched == 1 {
        format!("file line {end} matches the hunk's first line")
    } else {
        format!(
            "file lines {}-{end} match the hunk's first {matched} lines",
            start + 1
        )
    };
    msg.push_str(&format!(
        ".\nClosest: {span}; then the hunk has\n  `{}`\nwhere line {} of the file is {have}",
        jianmu_tool_core::echo(old[matched]),
        end + 1,
    ));
    msg
}
