//! Diagnostics after edits: how a tool that writes files (`edit_file`, `apply_patch`,
//! `write_file`) asks a language-server crate, without depending on it, which errors
//! its write introduced.
//!
//! A crate that can diagnose submits a [`DiagnoseRegistration`]; [`diagnose`] builds
//! it for a tool's configuration (the registering crate shares its servers per
//! configuration scope), or answers `None` when no such crate is linked.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{ToolConfig, ToolError};

/// One file a tool just wrote.
#[derive(Debug, Clone)]
pub struct Change {
    /// The file, relative to the workspace root.
    pub path: PathBuf,
    /// Its text before the write; `None` for a new file.
    pub before: Option<String>,
}

/// What diagnoses files after an edit.
#[async_trait]
pub trait Diagnose: Send + Sync {
    /// A few lines naming the errors that are in the written files now and were not
    /// before (`None` when no changed file has a language it can check).
    async fn introduced(&self, changes: Vec<Change>) -> Option<String>;
}

/// A crate's way to make its [`Diagnose`] for a configuration.
#[derive(Debug)]
pub struct DiagnoseRegistration {
    /// Builds it (sharing state within the configuration's scope).
    pub make: fn(&ToolConfig) -> Result<Arc<dyn Diagnose>, ToolError>,
}

inventory::collect!(DiagnoseRegistration);

/// The [`Diagnose`] of the first linked crate that registers one, for `config`.
///
/// # Errors
/// The registering crate refused the configuration.
pub fn diagnose(config: &ToolConfig) -> Result<Option<Arc<dyn Diagnose>>, ToolError> {
    inventory::iter::<DiagnoseRegistration>
        .into_iter()
        .next()
        .map(|r| (r.make)(config))
        .transpose()
}

/// What a file-writing tool holds for `diagnostics = true` in its settings: the
/// linked [`Diagnose`], if any, and whether it is on.
#[derive(Clone, Default)]
pub struct EditDiagnostics {
    on: bool,
    diagnose: Option<Arc<dyn Diagnose>>,
}

impl std::fmt::Debug for EditDiagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EditDiagnostics")
            .field("on", &self.on)
            .field("linked", &self.diagnose.is_some())
            .finish()
    }
}

impl EditDiagnostics {
    /// For a tool whose settings turn diagnostics after edits on (`on`) or off.
    ///
    /// # Errors
    /// As [`diagnose`].
    pub fn for_tool(config: &ToolConfig, on: bool) -> Result<Self, ToolError> {
        Ok(Self {
            on,
            diagnose: if on { diagnose(config)? } else { None },
        })
    }

    /// Whether edits are checked (the tool then keeps each file's text from before
    /// its write).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Appends to `text`, a tool's answer, the errors that the write of `changes`
    /// introduced.
    pub async fn append(&self, text: &mut String, changes: Vec<Change>) {
        if !self.on || changes.is_empty() {
            return;
        }
        let note = match &self.diagnose {
            Some(d) => d.introduced(changes).await,
            None => Some(
                "(no diagnostics: no language-server tools are linked into this program)"
                    .to_owned(),
            ),
        };
        if let Some(note) = note {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&note);
        }
    }
}
