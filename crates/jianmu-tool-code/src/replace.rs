//! `str_replace`: replace text in one file, literally or by regular expression, and
//! write the result atomically.

use std::borrow::Cow;
use std::sync::Arc;

use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WriteOptions, show};
use serde::{Deserialize, Serialize};

use jianmu_workspace::blocking;

/// Settings of `str_replace`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplaceSettings {
    /// Largest file edited, in bytes.
    pub max_file_size: u64,
    /// Sync each write to disk before answering, so it survives a power loss (writes
    /// are atomic either way).
    pub durable: bool,
}

impl Default for ReplaceSettings {
    fn default() -> Self {
        Self {
            max_file_size: 10 * 1024 * 1024,
            durable: false,
        }
    }
}

/// Arguments of `str_replace`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceArgs {
    /// The file, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The text to replace (a regular expression when `regex` is true).
    #[schemars(length(min = 1))]
    pub old: String,
    /// The replacement. With `regex`, `$1` and `${name}` insert groups; `$$` is a `$`.
    pub new: String,
    /// Treat `old` as a regular expression (Rust `regex` syntax).
    #[serde(default)]
    pub regex: bool,
    /// Replace only the first `count` matches; 0 replaces all.
    #[serde(default)]
    pub count: u64,
    /// Fail, writing nothing, unless the file has exactly this many matches (1 to
    /// require a unique match).
    pub expected_count: Option<u64>,
}

/// The `str_replace` tool.
#[derive(Debug, Clone)]
pub struct StrReplace {
    ws: Arc<Workspace>,
    settings: ReplaceSettings,
}

impl StrReplace {
    /// A `str_replace` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: ReplaceSettings) -> Self {
        Self { ws, settings }
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path, a file that is not UTF-8 text, no match, a match count other
    /// than `expected_count`, a malformed regular expression. Nothing is written then.
    pub fn replace(&self, args: &ReplaceArgs) -> Result<Structured<ReplaceOutput>, ToolError> {
        let rel = self.ws.relative_file(&args.path)?;
        // Held to the write: another change of this file waits for it.
        let _lock = self.ws.lock_file(&rel);
        let bytes = self.ws.read_to_end(&rel, self.settings.max_file_size)?;
        if bytes.contains(&0) {
            return Err(ToolError::failed(format!(
                "`{}` is a binary file (it has NUL bytes); nothing was written",
                show(&rel)
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            ToolError::failed(format!(
                "`{}` is not UTF-8 text (invalid byte at offset {}); nothing was written",
                show(&rel),
                e.utf8_error().valid_up_to()
            ))
        })?;
        let limit = usize::try_from(args.count).unwrap_or(usize::MAX);
        // The result is bounded before it is built: at most the largest file edited.
        let max = usize::try_from(self.settings.max_file_size).unwrap_or(usize::MAX);
        let too_big = |size: u128| {
            ToolError::failed(format!(
                "the result would be {size} bytes, over the limit of {max} bytes for `{}`; nothing was written (replace fewer matches with `count`, or a shorter `new`)",
                show(&rel)
            ))
        };
        let (matches, replaced): (u64, Cow<'_, str>) = if args.regex {
            let re = regex::RegexBuilder::new(&args.old)
                .size_limit(10 * (1 << 20))
                .build()
                .map_err(|e| ToolError::failed(format!("invalid regular expression: {e}")))?;
            let matches = re.find_iter(&text).count() as u64;
            let mut out = String::new();
            let mut last = 0;
            for caps in re
                .captures_iter(&text)
                .take(if limit == 0 { usize::MAX } else { limit })
            {
                let Some(whole) = caps.get(0) else { continue };
                out.push_str(&text[last..whole.start()]);
                caps.expand(&args.new, &mut out);
                last = whole.end();
                if out.len() > max {
                    return Err(too_big(out.len() as u128 + (text.len() - last) as u128));
                }
            }
            out.push_str(&text[last..]);
            if out.len() > max {
                return Err(too_big(out.len() as u128));
            }
            (matches, Cow::Owned(out))
        } else {
            let matches = text.matches(args.old.as_str()).count() as u64;
            let done = if limit == 0 {
                matches
            } else {
                matches.min(limit as u64)
            };
            let size = crate::replaced_size(text.len(), done, &args.old, &args.new);
            if size > max as u128 {
                return Err(too_big(size));
            }
            let out = if limit == 0 {
                text.replace(args.old.as_str(), &args.new)
            } else {
                text.replacen(args.old.as_str(), &args.new, limit)
            };
            (matches, Cow::Owned(out))
        };
        if matches == 0 {
            return Err(ToolError::failed(format!(
                "no match for `{}` in `{}`; nothing was written",
                jianmu_tool_core::echo(&args.old),
                show(&rel)
            )));
        }
        if let Some(expected) = args.expected_count
            && expected != matches
        {
            return Err(ToolError::failed(format!(
                "expected {expected} match{} of `{}` in `{}`, found {matches}; nothing was written",
                if expected == 1 { "" } else { "es" },
                jianmu_tool_core::echo(&args.old),
                show(&rel)
            )));
        }
        let done = if args.count == 0 {
            matches
        } else {
            matches.min(args.count)
        };
        if replaced != text {
            self.ws.write_atomic(
                &rel,
                replaced.as_bytes(),
                &WriteOptions::default()
                    .create_dirs(false)
                    .durable(self.settings.durable),
            )?;
        }
        let plural = if done == 1 { "" } else { "s" };
        Ok(Structured::new(
            format!("Replaced {done} occurrence{plural} in {}", show(&rel)),
            ReplaceOutput {
                path: show(&rel),
                replacements: done,
                matches,
            },
        ))
    }
}

/// The structured result of `str_replace`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReplaceOutput {
    /// The file, relative to the workspace.
    pub path: String,
    /// How many occurrences were replaced.
    pub replacements: u64,
    /// How many occurrences the file had.
    pub matches: u64,
}

impl Tool for StrReplace {
    type Args = ReplaceArgs;
    type Output = Structured<ReplaceOutput>;
    type Error = ToolError;

    const NAME: &'static str = "str_replace";

    const DESCRIPTION: &'static str = "Replaces text in a file of the workspace and says how many replacements it made.\n\
     `old` is plain text unless `regex` is true; `count` limits how many matches are \
     replaced (0: all); `expected_count` makes the call fail unless the file has exactly \
     that many matches. No match is an error, and a failed call writes nothing. The \
     write is atomic and keeps the file's permissions.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["filesystem:write"];

    async fn call(
        &self,
        args: ReplaceArgs,
        _cx: &CallContext,
    ) -> Result<Structured<ReplaceOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.replace(&args)).await
    }
}
