//! `glob_search`: paths matching a glob, like `fd --glob`.

use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkState;
use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::Workspace;
use serde::{Deserialize, Serialize};

use crate::walk;
use jianmu_workspace::blocking;

use crate::{Limit, dot};

/// Arguments of `glob_search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// A glob such as `*.rs` (matched against file names) or `src/**/*.rs` (with a `/`:
    /// matched against the path below `path`).
    pub pattern: String,
    /// The folder to search, relative to the workspace root.
    #[serde(default = "dot")]
    #[schemars(default = "dot")]
    pub path: String,
    /// Also search hidden files and folders (names starting with `.`).
    #[serde(default)]
    pub include_hidden: bool,
    /// Most paths to return.
    #[serde(default)]
    pub limit: Limit,
    /// Sort by last modification, newest first, instead of by path.
    #[serde(default)]
    pub newest_first: bool,
}

/// The `glob_search` tool.
#[derive(Debug, Clone)]
pub struct GlobSearch {
    ws: Arc<Workspace>,
}

impl GlobSearch {
    /// A `glob_search` confined to `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path, a path that is not a folder, a malformed glob.
    pub fn search(&self, args: &GlobArgs) -> Result<Structured<GlobOutput>, ToolError> {
        let root = Arc::new(walk::root(&self.ws, &args.path)?);
        let whole_path = args.pattern.contains('/');
        let matcher: GlobMatcher = GlobBuilder::new(args.pattern.trim_start_matches("./"))
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::failed(format!("invalid glob `{}`: {e}", args.pattern)))?
            .compile_matcher();
        let walk = walk::walker(&root, args.include_hidden).build_parallel();
        let limit = args.limit.get();
        let newest = args.newest_first;
        let (found, total) = walk::collect(walk, limit, |mut local| {
            let matcher = matcher.clone();
            let root = root.clone();
            Box::new(move |entry| {
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if entry.depth() == 0 {
                    return WalkState::Continue;
                }
                let path = entry.path();
                let hit = if whole_path {
                    path.strip_prefix(&root.abs)
                        .is_ok_and(|p| matcher.is_match(p))
                } else {
                    matcher.is_match(entry.file_name())
                };
                if hit && let Some(mut shown) = walk::display(&root, path) {
                    if entry.file_type().is_some_and(|t| t.is_dir()) {
                        shown.push('/');
                    }
                    // Newest first: the key sorts later times first, then by path.
                    let age = if newest {
                        // A link's time is its target's (the walk stays in the
                        // workspace; the target is only looked at).
                        let modified = std::fs::metadata(path)
                            .or_else(|_| std::fs::symlink_metadata(path))
                            .ok()
                            .and_then(|m| m.modified().ok())
                            .unwrap_or(std::time::UNIX_EPOCH);
                        std::cmp::Reverse(modified)
                    } else {
                        std::cmp::Reverse(std::time::UNIX_EPOCH)
                    };
                    local.top.push((age, shown));
                }
                WalkState::Continue
            })
        });
        let paths: Vec<String> = found.into_iter().map(|(_, path)| path).collect();
        let none = format!(
            "(no paths match `{}` under `{}`)",
            jianmu_tool_core::echo(&args.pattern),
            jianmu_workspace::show(&root.rel)
        );
        let shown = paths
            .iter()
            .map(|p| jianmu_tool_core::escape_controls(p).into_owned());
        let text = walk::listing(shown, total, "paths", &none);
        Ok(Structured::new(text, GlobOutput { paths, total }))
    }
}

/// The structured result of `glob_search`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct GlobOutput {
    /// The first `limit` matching paths, relative to the workspace, sorted by path
    /// (or newest first, with `newest_first`).
    pub paths: Vec<String>,
    /// How many paths matched in all, shown or not.
    pub total: u64,
}

impl Tool for GlobSearch {
    type Args = GlobArgs;
    type Output = Structured<GlobOutput>;
    type Error = ToolError;

    const NAME: &'static str = "glob_search";

    const DESCRIPTION: &'static str = "Finds files and folders whose names match a glob, like `fd --glob`: one \
     workspace-relative path per line, sorted (or newest first with `newest_first`), \
     folders ending in `/`.\n\
     Respects .gitignore (inside git repositories) and .ignore, skips hidden entries \
     unless `include_hidden`, does not follow symbolic links. A pattern with `/` \
     matches the path below `path` (`src/**/*.rs`); `**` crosses folders, `*` does not.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: GlobArgs,
        _cx: &CallContext,
    ) -> Result<Structured<GlobOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.search(&args)).await
    }
}
