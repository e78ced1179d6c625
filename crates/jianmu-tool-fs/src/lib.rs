//! File tools: `read_file`, `write_file`, `list_dir` (the Python tools' `file.py`; docs/python-compat.md) and `notebook_edit`.
//!
//! Every path is confined to the workspace by [`jianmu_workspace::Workspace`]: relative
//! paths resolve against the workspace root, absolute ones must lie inside it, and no
//! symlink leads out. On top of that each tool applies the Python tools' checks: an optional
//! extension allow-list (`read_file`, `write_file`; the final suffix, compared
//! case-insensitively), existence and type checks, and size limits (`max_file_size`,
//! `max_content_size`, 1 MiB by default).
//!
//! Settings come from [`jianmu_tool_core::ToolConfig`] (`[tools.read_file]` in
//! `jianmu.toml`):
//!
//! ```toml
//! [tools.read_file]
//! max_file_size = 1048576
//! allowed_extensions = [".rs", ".md"]
//!
//! [tools.write_file]
//! max_content_size = 1048576
//! allowed_extensions = [".md"]
//! ```
#![deny(missing_docs)]

use jianmu_tool_core::Tool as _;
use jianmu_tool_core::{ToolConfig, ToolError, ToolHandle};
use jianmu_workspace::show;
use serde::Deserialize;
use std::path::Path;

mod list;
mod notebook;
mod read;
mod write;

pub use list::{Entry, ListArgs, ListDir, ListOutput, ListSettings};
pub use notebook::{CellType, Mode, NotebookArgs, NotebookEdit, NotebookOutput, NotebookSettings};
pub use read::{ImageData, MAX_NUMBERED_LINE_CHARS, ReadArgs, ReadFile, ReadOutput, ReadSettings};
pub use write::{WriteArgs, WriteFile, WriteOutput, WriteSettings};

/// One mebibyte, the default size limit of the Python tools.
pub const MIB: u64 = 1024 * 1024;

/// An allow-list of extensions such as `[".rs", "md"]`: normalised to a leading dot
/// and lower case; `None` allows everything.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Extensions(Option<Vec<String>>);

impl Extensions {
    /// An allow-list of these extensions.
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(exts: I) -> Self {
        Self(Some(exts.into_iter().map(Into::into).collect()))
    }

    fn normalised(&self) -> Option<Vec<String>> {
        self.0.as_ref().map(|list| {
            list.iter()
                .map(|e| format!(".{}", e.trim_start_matches('.').to_lowercase()))
                .collect()
        })
    }

    /// Checks the final suffix of `rel` (and of `real`, where a symlink points).
    fn check(&self, rel: &Path, real: Option<&Path>) -> Result<(), ToolError> {
        let Some(allowed) = self.normalised() else {
            return Ok(());
        };
        for path in std::iter::once(rel).chain(real) {
            let suffix = suffix(path);
            if !allowed.contains(&suffix) {
                let shown = if suffix.is_empty() {
                    "none".to_owned()
                } else {
                    format!("`{suffix}`")
                };
                return Err(ToolError::failed(format!(
                    "refused `{}`: extension {shown} is not allowed (allowed: {})",
                    show(path),
                    allowed.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// The final suffix, lower-cased, with its dot: `a.TXT` → `.txt`, `a.txt.` → `.`,
/// `Makefile` → empty.
fn suffix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(i) if i > 0 => name[i..].to_lowercase(),
        _ => String::new(),
    }
}

fn build_read(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(ReadFile::new(
        jianmu_workspace::for_tool(config, ReadFile::NAME)?,
        config.settings(ReadFile::NAME)?,
    ))
}

fn build_write(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let settings: WriteSettings = config.settings(WriteFile::NAME)?;
    let checks = jianmu_tool_core::EditDiagnostics::for_tool(config, settings.diagnostics)?;
    ToolHandle::new(
        WriteFile::new(
            jianmu_workspace::for_tool(config, WriteFile::NAME)?,
            settings,
        )
        .with_diagnostics(checks),
    )
}

fn build_list(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(ListDir::new(
        jianmu_workspace::for_tool(config, ListDir::NAME)?,
        config.settings(ListDir::NAME)?,
    ))
}

jianmu_tool_core::register_tool!(ReadFile, build_read);
jianmu_tool_core::register_tool!(WriteFile, build_write);
jianmu_tool_core::register_tool!(ListDir, build_list);

fn build_notebook(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    ToolHandle::new(NotebookEdit::new(
        jianmu_workspace::for_tool(config, NotebookEdit::NAME)?,
        config.settings(NotebookEdit::NAME)?,
    ))
}

jianmu_tool_core::register_tool!(NotebookEdit, build_notebook);
