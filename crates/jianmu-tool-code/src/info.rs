//! `file_info`: what a path is, how big, when it changed.

use std::sync::Arc;

use jianmu_tool_core::{CallContext, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WorkspaceError, show};
use serde::{Deserialize, Serialize};

use jianmu_workspace::blocking;

/// Arguments of `file_info`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InfoArgs {
    /// The file or folder, relative to the workspace root (or absolute inside it).
    pub path: String,
}

/// The `file_info` tool.
#[derive(Debug, Clone)]
pub struct FileInfo {
    ws: Arc<Workspace>,
}

impl FileInfo {
    /// A `file_info` confined to `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused or missing path.
    pub fn info(&self, args: &InfoArgs) -> Result<Structured<InfoOutput>, ToolError> {
        let rel = self.ws.relative(&args.path)?;
        let meta = self.ws.symlink_metadata(&rel)?;
        let t = meta.file_type();
        let kind = if t.is_symlink() {
            "symlink"
        } else if t.is_dir() {
            "directory"
        } else if t.is_file() {
            "file"
        } else {
            jianmu_workspace::kind_of(&meta).trim_start_matches("a ")
        };
        let modified = meta
            .modified()
            .ok()
            .map(|m| jianmu_tool_core::rfc3339(m.into_std()));
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let extension = match name.rfind('.') {
            Some(i) if i > 0 && t.is_file() => name[i..].to_owned(),
            _ => String::new(),
        };
        let target = if t.is_symlink() {
            Some(
                self.ws
                    .dir()
                    .read_link_contents(&rel)
                    .map_err(|e| WorkspaceError::from_io(&rel, e))?
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            None
        };
        let mut text = format!("path: {}\ntype: {kind}\n", show(&rel));
        if let Some(target) = &target {
            text.push_str(&format!("target: {target}\n"));
        }
        text.push_str(&format!("size: {} bytes\n", meta.len()));
        if let Some(m) = &modified {
            text.push_str(&format!("modified: {m}\n"));
        }
        text.push_str(&format!(
            "extension: {}\n",
            if extension.is_empty() {
                "none"
            } else {
                &extension
            }
        ));
        let out = InfoOutput {
            path: show(&rel),
            kind: kind.to_owned(),
            size: meta.len(),
            modified,
            extension,
            target,
        };
        Ok(Structured::new(text, out))
    }
}

/// The structured result of `file_info`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct InfoOutput {
    /// The path, relative to the workspace.
    pub path: String,
    /// `file`, `directory`, `symlink`, or another kind of special file.
    #[serde(rename = "type")]
    pub kind: String,
    /// The size in bytes.
    pub size: u64,
    /// When it was last modified (RFC 3339, UTC), if known.
    pub modified: Option<String>,
    /// The file's extension with its dot (`.rs`); empty when it has none.
    pub extension: String,
    /// Where a symbolic link points; absent for anything else.
    pub target: Option<String>,
}

impl Tool for FileInfo {
    type Args = InfoArgs;
    type Output = Structured<InfoOutput>;
    type Error = ToolError;

    const NAME: &'static str = "file_info";

    const DESCRIPTION: &'static str = "Describes a file or folder of the workspace: type (file, directory, symlink), size in \
     bytes, last modification time (UTC, RFC 3339) and extension.\n\
     A symbolic link is described itself, with its target.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: InfoArgs,
        _cx: &CallContext,
    ) -> Result<Structured<InfoOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.info(&args)).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn rfc3339_dates() {
        let at = |s| jianmu_tool_core::rfc3339(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_031_912), "2026-11-30T09:45:12Z");
    }
}
