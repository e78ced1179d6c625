//! `grep_search`: lines matching a query, like `rg -n --no-heading`.

use std::path::Path;
use std::sync::Arc;

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::Workspace;
use serde::{Deserialize, Serialize};

use crate::walk;
use jianmu_workspace::blocking;

use crate::{Limit, dot};

/// Lines longer than this many characters are cut, with a marker.
pub const MAX_LINE_CHARS: usize = 500;

fn yes() -> bool {
    true
}

/// Arguments of `grep_search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// The text to find (a regular expression when `regex` is true).
    #[schemars(length(min = 1))]
    pub query: String,
    /// The folder to search, relative to the workspace root.
    #[serde(default = "dot")]
    #[schemars(default = "dot")]
    pub path: String,
    /// Treat `query` as a regular expression (Rust `regex` syntax) instead of plain text.
    #[serde(default)]
    pub regex: bool,
    /// Match case exactly.
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    pub case_sensitive: bool,
    /// Only search files matching this glob, as `rg -g` (e.g. `*.rs`, `!*.lock`).
    pub glob: Option<String>,
    /// Also search hidden files and folders.
    #[serde(default)]
    pub include_hidden: bool,
    /// Most matching lines to return.
    #[serde(default)]
    pub limit: Limit,
}

/// Settings of `grep_search` (`[tools.grep_search]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrepSettings {
    /// Most characters of an answer; a longer listing keeps its start and end, and
    /// every matching line is saved to a file the answer names.
    pub max_output: usize,
}

impl Default for GrepSettings {
    fn default() -> Self {
        Self { max_output: 30_000 }
    }
}

/// The `grep_search` tool.
#[derive(Debug, Clone)]
pub struct GrepSearch {
    ws: Arc<Workspace>,
    settings: GrepSettings,
    saver: Option<jianmu_workspace::Saver>,
}

/// One matching line; hits are ordered as the output is: by path, then line.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct Hit {
    /// The file, relative to the workspace.
    pub path: String,
    /// The line number, from 1.
    pub line: u64,
    /// The line, without its terminator, cut at 500 characters with a marker.
    pub text: String,
}

/// The structured result of `grep_search`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct GrepOutput {
    /// The first `limit` matching lines, sorted by path and line.
    pub matches: Vec<Hit>,
    /// How many lines matched in all, shown or not.
    pub total: u64,
    /// Where every matching line is saved, when not all are shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
}

impl GrepSearch {
    /// A `grep_search` confined to `ws`, with the default settings, saving nothing.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self {
            ws,
            settings: GrepSettings::default(),
            saver: None,
        }
    }

    /// The same tool with `settings`.
    #[must_use]
    pub fn with_settings(mut self, settings: GrepSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The same tool, saving every matching line of a search it does not show whole.
    #[must_use]
    pub fn with_saver(mut self, saver: jianmu_workspace::Saver) -> Self {
        self.saver = Some(saver);
        self
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path, a malformed regular expression or glob.
    pub fn search(&self, args: &GrepArgs) -> Result<Structured<GrepOutput>, ToolError> {
        let root = Arc::new(walk::root(&self.ws, &args.path)?);
        let pattern = if args.regex {
            args.query.clone()
        } else {
            regex::escape(&args.query)
        };
        // The regex crate words syntax errors against the query as written.
        regex::RegexBuilder::new(&pattern)
            .size_limit(10 * (1 << 20))
            .build()
            .map_err(|e| ToolError::failed(format!("invalid regular expression: {e}")))?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(!args.case_sensitive)
            .line_terminator(Some(b'\n'))
            .size_limit(10 * (1 << 20))
            .build(&pattern)
            .map_err(|e| ToolError::failed(format!("invalid regular expression: {e}")))?;
        let mut builder = walk::walker(&root, args.include_hidden);
        if let Some(glob) = &args.glob {
            let mut o = OverrideBuilder::new(&root.abs);
            o.add(glob)
                .map_err(|e| ToolError::failed(format!("invalid glob `{glob}`: {e}")))?;
            builder.overrides(
                o.build()
                    .map_err(|e| ToolError::failed(format!("invalid glob `{glob}`: {e}")))?,
            );
        }
        let limit = args.limit.get();
        let ws = self.ws.clone();
        // The files with a match, for saving every matching line when not all are shown.
        let with_hits = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (hits, total) = walk::collect(builder.build_parallel(), limit, |mut local| {
            let matcher = matcher.clone();
            let root = root.clone();
            let ws = ws.clone();
            let with_hits = with_hits.clone();
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(b'\x00'))
                .line_number(true)
                .build();
            Box::new(move |entry| {
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                // Like ripgrep: regular files only; symlinks are not followed.
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let Some(shown) = walk::display(&root, entry.path()) else {
                    return WalkState::Continue;
                };
                // Open beneath the workspace root, never by the walker's path: a
                // folder swapped for a symlink cannot lead the read outside.
                let Ok((file, _)) = ws.open_file(Path::new(&shown)) else {
                    return WalkState::Continue;
                };
                let file = file.into_std();
                let before = local.top.total;
                let _ = searcher.search_file(
                    &matcher,
                    &file,
                    Lossy(|line, text| {
                        local.top.push(Hit {
                            path: shown.clone(),
                            line,
                            text: clip(text),
                        });
                        Ok(true)
                    }),
                );
                if local.top.total > before {
                    with_hits
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(shown);
                }
                WalkState::Continue
            })
        });
        let none = format!(
            "(no matches for `{}` under `{}`)",
            jianmu_tool_core::echo(&args.query),
            jianmu_workspace::show(&root.rel)
        );
        let lines = hits.iter().map(|h| {
            format!(
                "{}:{}:{}",
                jianmu_tool_core::escape_controls(&h.path),
                h.line,
                jianmu_tool_core::escape_controls(&h.text)
            )
        });
        let mut text = walk::listing(lines, total, "matches", &none);
        let mut saved = None;
        let cut = total > hits.len() as u64 || text.chars().count() > self.settings.max_output;
        if cut && let Some(saver) = &self.saver {
            let mut files = std::mem::take(
                &mut *with_hits
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            files.sort_unstable();
            let said = match saver.create() {
                Ok(mut file) => {
                    self.save_all(&files, &matcher, &mut file);
                    saved = Some(file.path.clone());
                    file.describe()
                }
                Err(why) => why.0,
            };
            if total > hits.len() as u64 {
                // The listing's last line says how many are not shown; it says where.
                let note = "; narrow the search or raise `limit`)\n";
                if text.ends_with(note) {
                    text.truncate(text.len() - note.len());
                    text.push_str(&format!(
                        "; {said}; or narrow the search or raise `limit`)\n"
                    ));
                }
            }
            text = jianmu_workspace::head_and_tail_lines(&text, self.settings.max_output, &said);
        } else if cut {
            text = jianmu_workspace::head_and_tail_lines(
                &text,
                self.settings.max_output,
                "narrow the search or lower `limit` to see the rest",
            );
        }
        let out = GrepOutput {
            matches: hits,
            total,
            saved,
        };
        Ok(Structured::new(text, out))
    }

    /// Writes every matching line of `files` (sorted), as the listing shows them, to
    /// `out`, until it is full.
    fn save_all(
        &self,
        files: &[String],
        matcher: &grep_regex::RegexMatcher,
        out: &mut jianmu_workspace::SpillFile,
    ) {
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(true)
            .build();
        for path in files {
            if out.is_full() {
                return;
            }
            let Ok((file, _)) = self.ws.open_file(Path::new(path)) else {
                continue;
            };
            let shown = jianmu_tool_core::escape_controls(path);
            let _ = searcher.search_file(
                matcher,
                &file.into_std(),
                Lossy(|line, text| {
                    let clipped = clip(text);
                    let text = jianmu_tool_core::escape_controls(&clipped);
                    out.write(format!("{shown}:{line}:{text}\n").as_bytes());
                    Ok(!out.is_full())
                }),
            );
        }
    }
}

/// The line without its terminator, cut at [`MAX_LINE_CHARS`] with a marker.
fn clip(line: &str) -> String {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    match jianmu_tool_core::cut_chars(line, MAX_LINE_CHARS) {
        (kept, 0) => kept.to_owned(),
        (kept, rest) => format!("{kept}[... {rest} more characters]"),
    }
}

impl Tool for GrepSearch {
    type Args = GrepArgs;
    type Output = Structured<GrepOutput>;
    type Error = ToolError;

    const NAME: &'static str = "grep_search";

    const DESCRIPTION: &'static str = "Searches file contents for a text or regular expression, like `rg -n`: one \
     `PATH:LINE:TEXT` line per matching line, workspace-relative, sorted.\n\
     Respects .gitignore (inside git repositories) and .ignore, skips hidden and binary \
     files, does not follow symbolic links; `glob` filters files as `rg -g`. Lines \
     over 500 characters are cut with a marker. When more lines match than `limit` \
     (or than fit in one answer), all of them are saved to a file the answer names, \
     to read with read_file.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: GrepArgs,
        _cx: &CallContext,
    ) -> Result<Structured<GrepOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.search(&args)).await
    }
}
