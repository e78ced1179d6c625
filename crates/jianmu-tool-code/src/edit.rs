//! `edit_file`: several exact replacements in one file, all or nothing, answered with
//! a unified diff.
//!
//! Each edit applies to the result of the one before. Without `replace_all`, `old` must
//! match exactly once. A file with CRLF line endings is edited with LF `old`/`new` and
//! stays CRLF; a UTF-8 byte-order mark stays; a file that is not UTF-8 is refused, never
//! converted. When `old` is not found, the error shows the closest region of the file
//! with line numbers and the first line that differs, so the next call can be right.

use std::sync::Arc;

use jianmu_tool_core::{CallContext, Change, EditDiagnostics, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WriteOptions, blocking, show};
use serde::{Deserialize, Serialize};

use crate::text::Decoded;

/// Settings of `edit_file` (`[tools.edit_file]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EditSettings {
    /// Largest file edited, and largest result, in bytes.
    pub max_file_size: u64,
    /// Most lines of diff returned; a longer diff is cut with a notice.
    pub max_diff_lines: usize,
    /// Sync each write to disk before answering, so it survives a power loss (writes
    /// are atomic either way).
    pub durable: bool,
    /// After each write, list the errors it introduced (new since before it, in the
    /// written files), from the files' language servers (the `lsp` tools' servers).
    pub diagnostics: bool,
}

impl Default for EditSettings {
    fn default() -> Self {
        Self {
            max_file_size: 10 * 1024 * 1024,
            max_diff_lines: 400,
            durable: false,
            diagnostics: false,
        }
    }
}

/// One replacement.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// The exact text to replace (whitespace and line breaks included; LF line breaks
    /// also match a CRLF file).
    #[schemars(length(min = 1))]
    pub old: String,
    /// The text to put in its place.
    pub new: String,
    /// Replace every occurrence; without it, `old` must occur exactly once.
    #[serde(default)]
    pub replace_all: Option<bool>,
    /// Fail unless `old` occurs exactly this many times.
    pub expected_count: Option<u64>,
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The edits, applied in order, each to the result of the one before.
    #[schemars(length(min = 1, max = 100))]
    pub edits: Vec<Edit>,
    /// Answer the diff and write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// The structured result of `edit_file`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct EditOutput {
    /// The file, relative to the workspace.
    pub path: String,
    /// How many edits were applied.
    pub edits: usize,
    /// How many occurrences were replaced, over all edits.
    pub replacements: u64,
    /// Lines added and removed.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Whether the file was written (false for `dry_run` and for edits that change
    /// nothing).
    pub written: bool,
    /// The unified diff of the change (cut when long).
    pub diff: String,
}

/// The `edit_file` tool.
#[derive(Debug, Clone)]
pub struct EditFile {
    ws: Arc<Workspace>,
    settings: EditSettings,
    checks: EditDiagnostics,
}

impl EditFile {
    /// An `edit_file` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: EditSettings) -> Self {
        Self {
            ws,
            settings,
            checks: EditDiagnostics::default(),
        }
    }

    /// The same, listing the errors each edit introduced (`diagnostics = true`).
    #[must_use]
    pub fn with_diagnostics(mut self, checks: EditDiagnostics) -> Self {
        self.checks = checks;
        self
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path; a file that is binary or not UTF-8; an edit whose `old` is
    /// missing, not unique, or found a number of times other than `expected_count`; a
    /// result over the size limit. Nothing is written then.
    pub fn edit(&self, args: &EditArgs) -> Result<Structured<EditOutput>, ToolError> {
        self.edit_keeping(args, false).map(|(out, _)| out)
    }

    /// As [`EditFile::edit`]; with `keep`, also the file with its text from before,
    /// when it was written, for diagnostics after the edit.
    fn edit_keeping(
        &self,
        args: &EditArgs,
        keep: bool,
    ) -> Result<(Structured<EditOutput>, Option<Change>), ToolError> {
        let rel = self.ws.relative_file(&args.path)?;
        let shown = show(&rel);
        // Held to the write: another change of this file waits for it.
        let _lock = self.ws.lock_file(&rel);
        let bytes = self.ws.read_to_end(&rel, self.settings.max_file_size)?;
        let decoded = Decoded::new(&shown, bytes)
            .map_err(|e| ToolError::failed(format!("{e}; nothing was written")))?;
        let max = usize::try_from(self.settings.max_file_size).unwrap_or(usize::MAX);
        let mut text = decoded.text.clone();
        let mut replacements = 0u64;
        let total = args.edits.len();
        for (i, edit) in args.edits.iter().enumerate() {
            let which = if total == 1 {
                String::new()
            } else {
                format!("edit {} of {total}: ", i + 1)
            };
            let old = decoded.normalize(&edit.old);
            let new = decoded.normalize(&edit.new);
            // SIMD substring search; a unique match needs only the first two found.
            let finder = memchr::memmem::Finder::new(old.as_bytes());
            let replace_all = edit.replace_all.unwrap_or(false);
            let first = finder.find(text.as_bytes());
            let count = match first {
                None => 0,
                Some(_) if replace_all || edit.expected_count.is_some() => {
                    finder.find_iter(text.as_bytes()).count() as u64
                }
                Some(at) => {
                    1 + u64::from(finder.find(&text.as_bytes()[at + old.len()..]).is_some())
                }
            };
            if count == 0 {
                return Err(ToolError::failed(format!(
                    "{which}`old` was not found in `{shown}`; nothing was written.\n{}",
                    nearest(&text, &old)
                )));
            }
            if let Some(expected) = edit.expected_count
                && expected != count
            {
                return Err(ToolError::failed(format!(
                    "{which}expected {expected} occurrence{} of `old` in `{shown}`, found {count}; nothing was written",
                    if expected == 1 { "" } else { "s" }
                )));
            }
            if !replace_all && count > 1 {
                return Err(ToolError::failed(format!(
                    "{which}`old` occurs {} times in `{shown}` (at lines {}); add surrounding lines to make it unique, or set `replace_all`; nothing was written",
                    finder.find_iter(text.as_bytes()).count(),
                    match_lines(&text, &old)
                )));
            }
            let done = if replace_all { count } else { 1 };
            let size = crate::replaced_size(text.len(), done, &old, &new);
            if size > max as u128 {
                return Err(ToolError::failed(format!(
                    "{which}the result would be {size} bytes, over the limit of {max} bytes for `{shown}`; nothing was written"
                )));
            }
            match first {
                Some(at) if !replace_all => text.replace_range(at..at + old.len(), &new),
                _ => {
                    let mut out = String::with_capacity(usize::try_from(size).unwrap_or(0));
                    let mut last = 0;
                    for at in finder.find_iter(text.as_bytes()) {
                        out.push_str(&text[last..at]);
                        out.push_str(&new);
                        last = at + old.len();
                    }
                    out.push_str(&text[last..]);
                    text = out;
                }
            }
            replacements += done;
        }
        let changed = text != decoded.text;
        let written = changed && !args.dry_run;
        let diff = || crate::text::unified_diff(&decoded.text, &text, &shown);
        let (unified, added, removed) = if written {
            let staged = self.ws.stage_write(
                &rel,
                &decoded.encode(&text),
                &WriteOptions::default()
                    .create_dirs(false)
                    .durable(self.settings.durable),
            )?;
            // The diff is worked out while the new file goes in place (the rename
            // starts its write-out, and `durable` waits for it).
            let (diff, committed) = std::thread::scope(|scope| {
                let commit = scope.spawn(move || staged.commit());
                (diff(), commit.join())
            });
            committed.map_err(|_| ToolError::failed(format!("writing `{shown}` failed")))??;
            diff
        } else {
            diff()
        };
        let unified = cut_lines(&unified, self.settings.max_diff_lines);
        let head = match (changed, args.dry_run) {
            (false, _) => format!("`{shown}` is unchanged: the edits change nothing"),
            (true, true) => format!(
                "Dry run: {total} edit{} would change `{shown}` (+{added} -{removed}); nothing was written",
                if total == 1 { "" } else { "s" }
            ),
            (true, false) => format!(
                "Edited `{shown}`: {total} edit{}, {replacements} replacement{} (+{added} -{removed})",
                if total == 1 { "" } else { "s" },
                if replacements == 1 { "" } else { "s" }
            ),
        };
        let text_out = if changed {
            format!("{head}\n{unified}")
        } else {
            head
        };
        let change = (keep && written).then(|| Change {
            path: rel,
            before: Some(String::from_utf8_lossy(&decoded.encode(&decoded.text)).into_owned()),
        });
        let out = Structured::new(
            text_out,
            EditOutput {
                path: shown,
                edits: total,
                replacements,
                added,
                removed,
                written,
                diff: unified,
            },
        );
        Ok((out, change))
    }
}

/// The 1-based line numbers where `needle` starts, at most ten.
fn match_lines(text: &str, needle: &str) -> String {
    let mut lines = Vec::new();
    let mut line = 1;
    let mut last = 0;
    for (at, _) in text.match_indices(needle).take(10) {
        line += text[last..at].matches('\n').count();
        last = at;
        lines.push(line.to_string());
    }
    lines.join(", ")
}

/// The region of `text` closest to `old`, numbered like `cat -n`, and the first line
/// that differs.
fn nearest(text: &str, old: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let wanted: Vec<&str> = old.lines().collect();
    let Some(first) = wanted.iter().position(|l| !l.trim().is_empty()) else {
        return "(`old` is only whitespace)".to_owned();
    };
    let probe = wanted[first].trim();
    // The line most like the first non-blank line of `old`. Bounded work: at most
    // 50,000 lines, 200 characters of each, and one second in all.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let short = |s: &str| jianmu_tool_core::cut_chars(s, 200).0.to_owned();
    let probe_short = short(probe);
    let best = lines
        .iter()
        .take(50_000)
        .enumerate()
        .take_while(|_| std::time::Instant::now() < deadline)
        .filter(|(_, l)| {
            let l = l.trim();
            l.len() <= probe.len() * 3 + 8 && probe.len() <= l.len() * 3 + 8
        })
        .map(|(i, l)| {
            let score = similar::TextDiff::configure()
                .deadline(deadline)
                .diff_chars(short(l.trim()).as_str(), probe_short.as_str())
                .ratio();
            (i, score)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((at, _)) = best.filter(|(_, s)| *s >= 0.5) else {
        return format!(
            "No line of the file resembles `{}`: read the file again before editing.",
            jianmu_tool_core::echo(probe)
        );
    };
    let start = at.saturating_sub(first);
    let mut out = String::new();
    // The first line of `old` that differs from the file at that place (one does, or
    // `old` would have been found).
    for (k, want) in wanted.iter().enumerate() {
        let have = lines.get(start + k).copied().unwrap_or("");
        if *want != have {
            let hint = if want.trim() == have.trim() {
                " (they differ only in indentation or trailing spaces)"
            } else {
                ""
            };
            out.push_str(&format!(
                "The closest region starts at line {}; line {} differs{hint}:\n  old:  {}\n  file: {}\n",
                start + 1,
                start + k + 1,
                jianmu_tool_core::echo(want),
                jianmu_tool_core::echo(have)
            ));
            break;
        }
    }
    let from = start.saturating_sub(2);
    let to = (start + wanted.len() + 2).min(lines.len());
    out.push_str(&format!("Lines {}-{} of the file:\n", from + 1, to));
    for (n, line) in lines.iter().enumerate().take(to).skip(from) {
        let (kept, rest) = jianmu_tool_core::cut_chars(line, 300);
        let kept = jianmu_tool_core::escape_controls(kept);
        let more = if rest > 0 { "…" } else { "" };
        out.push_str(&format!("{}\t{kept}{more}\n", n + 1));
    }
    out
}

/// `text` cut to `max` lines, with a notice.
fn cut_lines(text: &str, max: usize) -> String {
    let total = text.lines().count();
    if total <= max {
        return text.to_owned();
    }
    let mut out: String = text.lines().take(max).flat_map(|l| [l, "\n"]).collect();
    out.push_str(&format!(
        "... ({} more diff lines not shown)\n",
        total - max
    ));
    out
}

impl Tool for EditFile {
    type Args = EditArgs;
    type Output = Structured<EditOutput>;
    type Error = ToolError;

    const NAME: &'static str = "edit_file";

    const DESCRIPTION: &'static str = "Edits one file of the workspace with exact replacements and answers with a unified \
     diff of the change.\n\
     `edits` apply in order, each to the result of the one before; all succeed or nothing \
     is written. Without `replace_all`, `old` must occur exactly once (include surrounding \
     lines to make it unique). When `old` is not found, the error shows the closest lines \
     of the file with their numbers. LF in `old`/`new` matches a CRLF file, which stays \
     CRLF. `dry_run` shows the diff without writing. The write is atomic and keeps the \
     file's permissions.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["filesystem:write"];

    async fn call(
        &self,
        args: EditArgs,
        _cx: &CallContext,
    ) -> Result<Structured<EditOutput>, ToolError> {
        let this = self.clone();
        if !self.checks.is_on() || args.dry_run {
            return blocking(Self::NAME, move || this.edit(&args)).await;
        }
        let (mut out, change) =
            blocking(Self::NAME, move || this.edit_keeping(&args, true)).await?;
        self.checks
            .append(&mut out.text, change.into_iter().collect())
            .await;
        Ok(out)
    }
}
