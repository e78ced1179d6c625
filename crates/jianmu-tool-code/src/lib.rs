//! Coding tools: `glob_search`, `grep_search`, `file_info` and `str_replace` (the
//! Python tools' `coding.py`; docs/python-compat.md), built on ripgrep's crates (`ignore`, `grep-searcher`,
//! `grep-regex`, `globset`), `edit_file` (several exact edits, all or nothing,
//! answered with a unified diff) and `apply_patch` (a multi-file patch in the
//! `*** Begin Patch` format, every file or none).
//!
//! Searches behave like `rg` and `fd` run from the workspace root: `.gitignore` inside
//! git repositories and `.ignore` are respected, hidden entries are skipped unless
//! asked, binary files are skipped, symlinks are not followed, and output is
//! workspace-relative and sorted (`PATH:LINE:TEXT` for `grep_search`, one path per
//! line for `glob_search`), with a last line in parentheses when `limit` cut the list.
//! Every file is opened beneath the workspace root through
//! [`jianmu_workspace::Workspace`], so nothing outside it is read or written.
#![deny(missing_docs)]

use jianmu_tool_core::Tool as _;
use jianmu_tool_core::{ToolConfig, ToolError, ToolHandle};
use serde::Deserialize;

mod edit;
mod glob;
mod grep;
mod info;
mod patch;
mod replace;
mod text;
mod walk;

pub use edit::{Edit, EditArgs, EditFile, EditOutput, EditSettings};
pub use glob::{GlobArgs, GlobOutput, GlobSearch};
pub use grep::{GrepArgs, GrepOutput, GrepSearch, GrepSettings, Hit, MAX_LINE_CHARS};
pub use info::{FileInfo, InfoArgs, InfoOutput};
pub use patch::{ApplyPatch, PatchArgs, PatchOutput, PatchSettings, PatchedFile};
pub use replace::{ReplaceArgs, ReplaceOutput, ReplaceSettings, StrReplace};

/// The size of `len` bytes of text after `count` occurrences of `old` become `new`:
/// computed before the result is built, so a limit holds before any allocation.
pub(crate) fn replaced_size(len: usize, count: u64, old: &str, new: &str) -> u128 {
    len as u128 - u128::from(count) * old.len() as u128 + u128::from(count) * new.len() as u128
}

/// How many results a search returns: 200 by default, at most 10,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Limit(#[schemars(range(min = 1, max = 10_000))] u32);

impl Default for Limit {
    fn default() -> Self {
        Self(200)
    }
}

impl Limit {
    /// The limit as a count.
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

fn dot() -> String {
    ".".into()
}

fn build_glob(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(GlobSearch::new(jianmu_workspace::for_tool(
        config,
        GlobSearch::NAME,
    )?))
}

fn build_grep(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(
        GrepSearch::new(jianmu_workspace::for_tool(config, GrepSearch::NAME)?)
            .with_settings(config.settings(GrepSearch::NAME)?)
            .with_saver(jianmu_workspace::Saver::for_tool(config, GrepSearch::NAME)?),
    )
}

fn build_info(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(FileInfo::new(jianmu_workspace::for_tool(
        config,
        FileInfo::NAME,
    )?))
}

fn build_edit(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let settings: EditSettings = config.settings(EditFile::NAME)?;
    let checks = jianmu_tool_core::EditDiagnostics::for_tool(config, settings.diagnostics)?;
    ToolHandle::new(
        EditFile::new(
            jianmu_workspace::for_tool(config, EditFile::NAME)?,
            settings,
        )
        .with_diagnostics(checks),
    )
}

fn build_patch(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let settings: PatchSettings = config.settings(ApplyPatch::NAME)?;
    let checks = jianmu_tool_core::EditDiagnostics::for_tool(config, settings.diagnostics)?;
    ToolHandle::new(
        ApplyPatch::new(
            jianmu_workspace::for_tool(config, ApplyPatch::NAME)?,
            settings,
        )
        .with_diagnostics(checks),
    )
}

fn build_replace(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(StrReplace::new(
        jianmu_workspace::for_tool(config, StrReplace::NAME)?,
        config.settings(StrReplace::NAME)?,
    ))
}

jianmu_tool_core::register_tool!(GlobSearch, build_glob);
jianmu_tool_core::register_tool!(GrepSearch, build_grep);
jianmu_tool_core::register_tool!(FileInfo, build_info);
jianmu_tool_core::register_tool!(StrReplace, build_replace);
jianmu_tool_core::register_tool!(EditFile, build_edit);
jianmu_tool_core::register_tool!(ApplyPatch, build_patch);
