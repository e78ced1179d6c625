//! The checkpoint tools: `checkpoint_list`, `checkpoint_diff` and
//! `checkpoint_restore`, over the checkpoints a session takes of its workspace before
//! the first changing call of each turn (what `bash` changed included). They find the
//! session's store in their scope ([`jianmu_checkpoint::Slot`]), where the session
//! put it; without one they say checkpoints are off and why.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;

use jianmu_checkpoint::{Checkpoint, CheckpointError, Diff, Restored, Slot, Store};
use jianmu_tool_core::{
    CallContext, SESSION_STATE, Structured, Tool, ToolConfig, ToolError, ToolHandle,
};
use serde::{Deserialize, Serialize};

/// The most diff text a call returns, in bytes; `path` narrows a longer one.
const DIFF_BYTES: usize = 64 * 1024;

/// Runs `work` on the session's store, on a blocking thread.
async fn with_store<T: Send + 'static>(
    slot: &Slot,
    work: impl FnOnce(&Store) -> Result<T, CheckpointError> + Send + 'static,
) -> Result<T, ToolError> {
    let store = slot.store().map_err(|e| ToolError::failed(e.to_string()))?;
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .map_err(|e| ToolError::failed(format!("the checkpoint store failed: {e}")))?
        .map_err(|e| ToolError::failed(e.to_string()))
}

/// Brings a sandbox's copy of the workspace here first, when it has one.
async fn pull(slot: &Slot) -> Result<(), ToolError> {
    slot.pull().await.map_err(|e| {
        ToolError::failed(format!(
            "the sandbox's copy of the workspace could not be read ({e}); retry"
        ))
    })
}

/// Arguments of `checkpoint_list`: none.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

/// The checkpoints, newest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct CheckpointList {
    /// Newest first.
    pub checkpoints: Vec<Checkpoint>,
}

/// The `checkpoint_list` tool.
#[derive(Debug, Clone)]
pub struct CheckpointListTool {
    slot: Arc<Slot>,
}

impl Tool for CheckpointListTool {
    type Args = ListArgs;
    type Output = Structured<CheckpointList>;
    type Error = ToolError;

    const NAME: &'static str = "checkpoint_list";

    const DESCRIPTION: &'static str = "Lists the checkpoints of the workspace, newest first: id, time, label (the call it \
     was taken before) and size. A checkpoint is taken before the first call of each turn \
     that changes files (writes, edits, patches, bash, python_repl, git), so it holds \
     what shell commands changed too. Files ignored by .gitignore, .git, and files over \
     the size limit are not in checkpoints. See what changed since one with \
     checkpoint_diff; undo with checkpoint_restore.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read", SESSION_STATE];

    async fn call(
        &self,
        _args: ListArgs,
        _cx: &CallContext,
    ) -> Result<Structured<CheckpointList>, ToolError> {
        let checkpoints = with_store(&self.slot, Store::list).await?;
        let text = if checkpoints.is_empty() {
            "no checkpoints yet: one is taken before the first changing call of a turn".to_owned()
        } else {
            checkpoints
                .iter()
                .map(|c| {
                    format!(
                        "{}\t{}\t{}\t{} files, {} bytes",
                        c.id,
                        jianmu_tool_core::rfc3339(
                            std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.time)
                        ),
                        c.label,
                        c.files,
                        c.bytes
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok(Structured::new(text, CheckpointList { checkpoints }))
    }
}

/// Arguments of `checkpoint_diff`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// The checkpoint (its id from checkpoint_list, or a unique prefix of 4 or more).
    pub id: String,
    /// Compare with this checkpoint instead of the workspace as it is now.
    pub to: Option<String>,
    /// Only changes at or under this workspace path.
    pub path: Option<String>,
}

/// The `checkpoint_diff` tool.
#[derive(Debug, Clone)]
pub struct CheckpointDiffTool {
    slot: Arc<Slot>,
}

impl Tool for CheckpointDiffTool {
    type Args = DiffArgs;
    type Output = Structured<Diff>;
    type Error = ToolError;

    const NAME: &'static str = "checkpoint_diff";

    const DESCRIPTION: &'static str = "Shows what changed in the workspace since a checkpoint (or between two, with `to`): \
     the changed paths (added, deleted, modified, mode or type changed) and a unified \
     diff, binary files named only. `path` narrows it to one file or folder. A long diff \
     is cut at 64 KiB, and the answer says how much was left out.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read", SESSION_STATE];

    async fn call(&self, args: DiffArgs, _cx: &CallContext) -> Result<Structured<Diff>, ToolError> {
        if args.to.is_none() {
            pull(&self.slot).await?;
        }
        let diff = with_store(&self.slot, move |store| {
            store.diff(
                &args.id,
                args.to.as_deref(),
                args.path.as_deref(),
                DIFF_BYTES,
            )
        })
        .await?;
        let mut text = if diff.changes.is_empty() {
            "no changes".to_owned()
        } else {
            diff.text.clone()
        };
        if let Some(cut) = diff.cut {
            text.push_str(&format!(
                "\n(cut: {cut} more bytes of diff; narrow it with `path`)"
            ));
        }
        Ok(Structured::new(text, diff))
    }
}

/// Arguments of `checkpoint_restore`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreArgs {
    /// The checkpoint to bring the workspace back to.
    pub id: String,
    /// Only say what would change; change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// The `checkpoint_restore` tool.
#[derive(Debug, Clone)]
pub struct CheckpointRestoreTool {
    slot: Arc<Slot>,
}

impl Tool for CheckpointRestoreTool {
    type Args = RestoreArgs;
    type Output = Structured<Restored>;
    type Error = ToolError;

    const NAME: &'static str = "checkpoint_restore";

    const DESCRIPTION: &'static str = "Brings the workspace back to a checkpoint: exact bytes, permissions, symbolic links, \
     and files created since are removed. It takes a checkpoint first, so a restore can \
     itself be undone (the answer names it). Ignored files, .git and files over the \
     size limit are never touched; the answer lists what it left. `dry_run: true` only \
     says what would change.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["filesystem:write", SESSION_STATE];

    async fn call(
        &self,
        args: RestoreArgs,
        _cx: &CallContext,
    ) -> Result<Structured<Restored>, ToolError> {
        let id = args.id.clone();
        pull(&self.slot).await?;
        let restored = with_store(&self.slot, move |store| {
            store.restore(&args.id, args.dry_run)
        })
        .await?;
        if !restored.dry_run
            && let Err(e) = self.slot.push(&restored.removed).await
        {
            let undo = restored.undo.as_deref().unwrap_or("none");
            return Err(ToolError::failed(format!(
                "the workspace was restored to {id}, but the sandbox's copy of it could not be \
                 updated ({e}); commands still see the files as they were. Retry \
                 checkpoint_restore {{\"id\": \"{id}\"}}; checkpoint {undo} is the workspace as \
                 it was before"
            )));
        }
        Ok(Structured::new(summary(&id, &restored), restored))
    }
}

/// What a restore did, for the model.
fn summary(id: &str, r: &Restored) -> String {
    let list = |paths: &[String]| {
        let mut shown: Vec<&str> = paths.iter().take(20).map(String::as_str).collect();
        let more = paths.len().saturating_sub(shown.len());
        let more = format!("… and {more} more");
        if paths.len() > 20 {
            shown.push(&more);
            return shown.join(", ");
        }
        shown.join(", ")
    };
    let mut text = if r.dry_run {
        format!(
            "dry run: restoring {id} would write {} and remove {} paths",
            r.written.len(),
            r.removed.len()
        )
    } else {
        format!(
            "restored {id}: wrote {} and removed {} paths",
            r.written.len(),
            r.removed.len()
        )
    };
    if !r.written.is_empty() {
        text.push_str(&format!("\nwritten: {}", list(&r.written)));
    }
    if !r.removed.is_empty() {
        text.push_str(&format!("\nremoved: {}", list(&r.removed)));
    }
    for left in r.left.iter().take(20) {
        text.push_str(&format!("\nleft {}: {}", left.path, left.why));
    }
    if let Some(undo) = &r.undo {
        text.push_str(&format!(
            "\nthe workspace as it was before is checkpoint {undo}: checkpoint_restore {{\"id\": \"{undo}\"}} undoes this"
        ));
    }
    text
}

fn slot(config: &ToolConfig) -> Arc<Slot> {
    config.scope().get::<Slot>()
}

jianmu_tool_core::register_tool!(CheckpointListTool, |c: &ToolConfig| {
    ToolHandle::new(CheckpointListTool { slot: slot(c) })
});
jianmu_tool_core::register_tool!(CheckpointDiffTool, |c: &ToolConfig| {
    ToolHandle::new(CheckpointDiffTool { slot: slot(c) })
});
jianmu_tool_core::register_tool!(CheckpointRestoreTool, |c: &ToolConfig| {
    ToolHandle::new(CheckpointRestoreTool { slot: slot(c) })
});
