//! `notebook_edit`: replace, insert or delete one cell of a Jupyter notebook, atomically,
//! keeping the file valid nbformat 4.

use std::sync::Arc;

use jianmu_doc::notebook::{self, EditMode};
use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WriteOptions, blocking, show};
use serde::{Deserialize, Serialize};

use crate::MIB;

/// Settings of `notebook_edit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotebookSettings {
    /// Largest notebook edited, in bytes.
    pub max_notebook_size: u64,
    /// Largest `new_source`, in bytes.
    pub max_source_size: u64,
}

impl Default for NotebookSettings {
    fn default() -> Self {
        Self {
            max_notebook_size: 64 * MIB,
            max_source_size: MIB,
        }
    }
}

/// What `notebook_edit` does to the cell.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The cell's source becomes `new_source` (a code cell's outputs are cleared).
    #[default]
    Replace,
    /// A new cell with `new_source` goes after `cell_id`, or first without it.
    Insert,
    /// The cell is removed (`new_source` is ignored).
    Delete,
}

/// Cell types.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CellType {
    /// Code, run by the kernel.
    Code,
    /// Markdown text.
    Markdown,
    /// Raw text, passed through unrendered.
    Raw,
}

/// Arguments of `notebook_edit`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookArgs {
    /// The `.ipynb` file, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The cell's id as read_file shows it (`id …`), or its number from 1. Needed to
    /// replace or delete; to insert, the new cell goes after it (first without it).
    pub cell_id: Option<String>,
    /// The cell's new source (for delete, give an empty string).
    #[serde(default)]
    pub new_source: String,
    /// The cell's type: code, markdown or raw. Inserting defaults to code; replacing
    /// keeps the cell's type unless given.
    pub cell_type: Option<CellType>,
    /// replace (the default), insert or delete.
    #[serde(default)]
    pub edit_mode: Mode,
}

/// The structured result of `notebook_edit`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct NotebookOutput {
    /// The notebook, relative to the workspace.
    pub path: String,
    /// How many cells it has now.
    pub cells: u64,
    /// The file's size afterwards.
    pub file_size: u64,
}

/// The `notebook_edit` tool.
#[derive(Debug, Clone)]
pub struct NotebookEdit {
    ws: Arc<Workspace>,
    settings: NotebookSettings,
}

impl NotebookEdit {
    /// A `notebook_edit` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: NotebookSettings) -> Self {
        Self { ws, settings }
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path, a file that is not an nbformat 4 notebook, an unknown cell, a
    /// failed write (the old file is then intact).
    pub fn edit(&self, args: &NotebookArgs) -> Result<Structured<NotebookOutput>, ToolError> {
        let rel = self.ws.relative_file(&args.path)?;
        if crate::suffix(&rel) != ".ipynb" {
            return Err(ToolError::failed(format!(
                "`{}` is not a Jupyter notebook (.ipynb); edit other files with edit_file or write_file",
                show(&rel)
            )));
        }
        if args.new_source.len() as u64 > self.settings.max_source_size {
            return Err(ToolError::failed(format!(
                "refused: new_source is {} bytes, over the limit of {} bytes",
                args.new_source.len(),
                self.settings.max_source_size
            )));
        }
        // Held to the write: another edit of this notebook waits for it.
        let _lock = self.ws.lock_file(&rel);
        let bytes = self.ws.read_to_end(&rel, self.settings.max_notebook_size)?;
        let (mut nb, kept) = notebook::parse(&bytes).map_err(|e| {
            ToolError::failed(format!(
                "`{}` is not valid JSON ({e}); it was not changed",
                show(&rel)
            ))
        })?;
        drop(bytes);
        let mode = match args.edit_mode {
            Mode::Replace => EditMode::Replace,
            Mode::Insert => EditMode::Insert,
            Mode::Delete => EditMode::Delete,
        };
        let kind = args.cell_type.map(|t| match t {
            CellType::Code => "code",
            CellType::Markdown => "markdown",
            CellType::Raw => "raw",
        });
        let said = notebook::edit(
            &mut nb,
            args.cell_id.as_deref(),
            &args.new_source,
            kind,
            mode,
        )
        .map_err(|e| ToolError::failed(format!("`{}`: {e}; it was not changed", show(&rel))))?;
        let cells = nb["cells"].as_array().map_or(0, Vec::len) as u64;
        let file_size = self.ws.write_atomic(
            &rel,
            &notebook::to_bytes(&nb, &kept),
            &WriteOptions::default(),
        )?;
        Ok(Structured::new(
            format!("{said} in {}", show(&rel)),
            NotebookOutput {
                path: show(&rel),
                cells,
                file_size,
            },
        ))
    }
}

impl Tool for NotebookEdit {
    type Args = NotebookArgs;
    type Output = Structured<NotebookOutput>;
    type Error = ToolError;

    const NAME: &'static str = "notebook_edit";

    const DESCRIPTION: &'static str = "Edits one cell of a Jupyter notebook (.ipynb): `replace` its source (a code cell's \
     outputs and execution count are cleared), `insert` a new cell after `cell_id` (first \
     when no cell_id is given), or `delete` it. `cell_id` is the id read_file shows for \
     the cell, or the cell's number from 1. The notebook stays valid nbformat 4 and is \
     written atomically, as Jupyter writes it. Does not run cells.";

    const EFFECTS: &'static [&'static str] = &["filesystem:write"];

    async fn call(
        &self,
        args: NotebookArgs,
        _cx: &CallContext,
    ) -> Result<Structured<NotebookOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.edit(&args)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_edits_at_once_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("n.ipynb"),
            r#"{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"#,
        )
        .unwrap();
        let ws = Arc::new(Workspace::open(dir.path()).unwrap());
        let tool = NotebookEdit::new(ws, NotebookSettings::default());
        let threads: Vec<_> = (0..20)
            .map(|k| {
                let tool = tool.clone();
                std::thread::spawn(move || {
                    tool.edit(&NotebookArgs {
                        path: "n.ipynb".into(),
                        cell_id: None,
                        new_source: format!("cell_{k} = {k}"),
                        cell_type: None,
                        edit_mode: Mode::Insert,
                    })
                    .map(|_| ())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let text = std::fs::read_to_string(dir.path().join("n.ipynb")).unwrap();
        let nb: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(nb["cells"].as_array().unwrap().len(), 20);
        for k in 0..20 {
            assert!(text.contains(&format!("cell_{k} = {k}")), "cell {k} lost");
        }
    }
}
