//! `write_file`: write or append text, atomically.

use std::sync::Arc;

use jianmu_tool_core::{CallContext, Change, EditDiagnostics, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WorkspaceError, WriteOptions, show};
use serde::{Deserialize, Serialize};

use jianmu_workspace::blocking;

use crate::{Extensions, MIB};

/// Settings of `write_file`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteSettings {
    /// Largest content accepted in one call, in bytes.
    pub max_content_size: u64,
    /// Extensions that may be written; all when absent.
    pub allowed_extensions: Extensions,
    /// Sync each write to disk before answering, so it survives a power loss (writes
    /// are atomic either way).
    pub durable: bool,
    /// After each write, list the errors it introduced (new since before it, in the
    /// written file), from the file's language server (the `lsp` tools' servers).
    pub diagnostics: bool,
}

impl Default for WriteSettings {
    fn default() -> Self {
        Self {
            max_content_size: MIB,
            allowed_extensions: Extensions::default(),
            durable: false,
            diagnostics: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// The text to write.
    pub content: String,
    /// Add to the end of the file instead of replacing it.
    #[serde(default)]
    pub append: bool,
    /// Create missing parent folders.
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    pub create_dirs: bool,
}

/// The `write_file` tool.
#[derive(Debug, Clone)]
pub struct WriteFile {
    ws: Arc<Workspace>,
    settings: WriteSettings,
    checks: EditDiagnostics,
}

impl WriteFile {
    /// A `write_file` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: WriteSettings) -> Self {
        Self {
            ws,
            settings,
            checks: EditDiagnostics::default(),
        }
    }

    /// The same, listing the errors each write introduced (`diagnostics = true`).
    #[must_use]
    pub fn with_diagnostics(mut self, checks: EditDiagnostics) -> Self {
        self.checks = checks;
        self
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A refused path or extension, content over the limit, a failed write (the old
    /// file is then intact).
    pub fn write(&self, args: &WriteArgs) -> Result<Structured<WriteOutput>, ToolError> {
        let rel = self.ws.relative_file(&args.path)?;
        // Not between another tool's read of this file and its write.
        let _lock = self.ws.lock_file(&rel);
        let size = args.content.len() as u64;
        if size > self.settings.max_content_size {
            return Err(ToolError::failed(format!(
                "refused writing `{}`: the content is {size} bytes, over the limit of {} bytes",
                show(&rel),
                self.settings.max_content_size
            )));
        }
        // Where a symlink points must be allowed too; a missing file is checked by name.
        let real = match self.ws.canonical(&rel) {
            Ok(real) => Some(real),
            Err(WorkspaceError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        self.settings
            .allowed_extensions
            .check(&rel, real.as_deref())?;
        let options = WriteOptions::default()
            .append(args.append)
            .create_dirs(args.create_dirs)
            .durable(self.settings.durable);
        let file_size = self
            .ws
            .write_atomic(&rel, args.content.as_bytes(), &options)?;
        Ok(Structured::new(
            format!("Wrote {} ({size} bytes)", show(&rel)),
            WriteOutput {
                path: show(&rel),
                bytes_written: size,
                file_size,
                appended: args.append,
            },
        ))
    }
}

/// The structured result of `write_file`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WriteOutput {
    /// The file, relative to the workspace.
    pub path: String,
    /// How many bytes were written.
    pub bytes_written: u64,
    /// The file's size afterwards.
    pub file_size: u64,
    /// True when the content was appended rather than replacing the file.
    pub appended: bool,
}

impl Tool for WriteFile {
    type Args = WriteArgs;
    type Output = Structured<WriteOutput>;
    type Error = ToolError;

    const NAME: &'static str = "write_file";

    const DESCRIPTION: &'static str = "Writes text to a file in the workspace, replacing it or (with `append`) adding to its end.\n\
     Missing parent folders are created unless `create_dirs` is false. The write is \
     atomic: readers see the old file or the new one, never a mix, and a failure \
     leaves the old file intact. Answers `Wrote PATH (N bytes)`.";

    const EFFECTS: &'static [&'static str] = &["filesystem:write"];

    async fn call(
        &self,
        args: WriteArgs,
        _cx: &CallContext,
    ) -> Result<Structured<WriteOutput>, ToolError> {
        let this = self.clone();
        if !self.checks.is_on() {
            return blocking(Self::NAME, move || this.write(&args)).await;
        }
        let (rel, before, mut out) = blocking(Self::NAME, move || {
            let rel = this.ws.relative_file(&args.path)?;
            // Bounded like a write: a bigger file is not sent to a server.
            let before = this
                .ws
                .read_to_end(&rel, this.settings.max_content_size.max(4 * MIB))
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            Ok((rel, before, this.write(&args)?))
        })
        .await?;
        self.checks
            .append(&mut out.text, vec![Change { path: rel, before }])
            .await;
        Ok(out)
    }
}
