//! `list_dir`: a folder's entries as a table, sorted by name.

use std::sync::Arc;

use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WorkspaceError, show};
use serde::{Deserialize, Serialize};

use jianmu_workspace::blocking;

/// Settings of `list_dir`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListSettings {
    /// Most entries listed; a last line says how many were left out.
    pub max_entries: usize,
}

impl Default for ListSettings {
    fn default() -> Self {
        Self { max_entries: 1000 }
    }
}

fn dot() -> String {
    ".".into()
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The folder, relative to the workspace root (or absolute inside it).
    #[serde(default = "dot")]
    #[schemars(default = "dot")]
    pub path: String,
}

/// The `list_dir` tool.
#[derive(Debug, Clone)]
pub struct ListDir {
    ws: Arc<Workspace>,
    settings: ListSettings,
}

/// Sizes as the Python `list_dir` prints them: B, KB, MB.
pub(crate) fn human_size(bytes: u64) -> String {
    const K: f64 = 1024.0;
    let b = bytes as f64;
    if b < K {
        format!("{bytes} B")
    } else if b < K * K {
        format!("{:.1} KB", b / K)
    } else {
        format!("{:.1} MB", b / (K * K))
    }
}

impl ListDir {
    /// A `list_dir` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: ListSettings) -> Self {
        Self { ws, settings }
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path, a path that is not a folder.
    pub fn list(&self, args: &ListArgs) -> Result<Structured<ListOutput>, ToolError> {
        let rel = self.ws.relative(&args.path)?;
        let dir = self.ws.open_dir(&rel)?;
        let io = |e| WorkspaceError::from_io(&rel, e);
        let mut rows = Vec::new();
        for entry in dir.entries().map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata().map_err(io)?;
            let t = meta.file_type();
            let (kind, size) = if t.is_dir() {
                ("DIR", None)
            } else if t.is_symlink() {
                ("LINK", None)
            } else if t.is_file() {
                ("FILE", Some(meta.len()))
            } else {
                ("OTHER", None)
            };
            rows.push((name, kind, size));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let total = rows.len();
        rows.truncate(self.settings.max_entries);
        let mut text = String::new();
        for (name, kind, size) in &rows {
            let size = size.map_or_else(|| "-".to_owned(), human_size);
            let name = jianmu_tool_core::escape_controls(name);
            text.push_str(&format!("{kind:<5} {size:>10}  {name}\n"));
        }
        if total > rows.len() {
            text.push_str(&format!(
                "({} more entries not shown)\n",
                total - rows.len()
            ));
        }
        if total == 0 {
            text.push_str(&format!("(`{}` is empty)\n", show(&rel)));
        }
        let entries = rows
            .into_iter()
            .map(|(name, kind, size)| Entry {
                name,
                kind: kind.to_owned(),
                size,
            })
            .collect();
        Ok(Structured::new(
            text,
            ListOutput {
                path: show(&rel),
                entries,
                total: total as u64,
            },
        ))
    }
}

/// The structured result of `list_dir`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ListOutput {
    /// The folder, relative to the workspace.
    pub path: String,
    /// The first `max_entries` entries, sorted by name.
    pub entries: Vec<Entry>,
    /// How many entries the folder has, shown or not.
    pub total: u64,
}

/// One entry of a folder.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// `FILE`, `DIR`, `LINK` or `OTHER`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The size in bytes, for files.
    pub size: Option<u64>,
}

impl Tool for ListDir {
    type Args = ListArgs;
    type Output = Structured<ListOutput>;
    type Error = ToolError;

    const NAME: &'static str = "list_dir";

    const DESCRIPTION: &'static str = "Lists a folder of the workspace: one line per entry with its type (FILE, DIR, LINK), \
     size (B, KB, MB) and name, sorted by name.\n\
     Symbolic links are listed, not followed.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: ListArgs,
        _cx: &CallContext,
    ) -> Result<Structured<ListOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.list(&args)).await
    }
}
