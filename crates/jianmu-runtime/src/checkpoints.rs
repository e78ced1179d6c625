//! A session's checkpoints: its store opened (or why not), and a snapshot before the
//! first changing call of each turn.

use std::path::PathBuf;
use std::sync::Arc;

use jianmu_checkpoint::{Config, Slot, Store};
use jianmu_tool_core::{ToolConfig, ToolSpec};

use crate::{Backend, SessionSettings};

/// The effects of a call that changes the workspace.
const CHANGING: [&str; 3] = ["filesystem:write", "process:exec", "code:exec"];

/// The session's slot, in its tools' scope, holding its store when checkpoints are on
/// and the store opens; else why not.
pub(crate) fn open(
    settings: &SessionSettings,
    tools: &ToolConfig,
    hidden: &[PathBuf],
) -> Arc<Slot> {
    let slot = tools.scope().get::<Slot>();
    let config = &settings.checkpoints;
    if !config.enabled {
        slot.set_off("`[checkpoints] enabled = false`");
        return slot;
    }
    if !matches!(settings.backend, Backend::Local) {
        slot.set_off("they are taken for local sessions only, not in a Docker sandbox yet");
        return slot;
    }
    let workspace = tools.workspace();
    let Some(dir) = config.store_dir(workspace) else {
        slot.set_off("no folder for the store (set `[checkpoints] dir`, or HOME)");
        return slot;
    };
    let exclude: Vec<PathBuf> = hidden
        .iter()
        .filter(|p| p.starts_with(workspace))
        .cloned()
        .collect();
    match Store::open(&dir, workspace, &exclude, config.limits()) {
        Ok(store) => slot.set(Arc::new(store)),
        Err(e) => {
            tracing::warn!(%e, "checkpoints are off for a session");
            slot.set_off(e.to_string());
        }
    }
    slot
}

/// Ends the call's part of the turn when dropped.
pub(crate) struct Turn(Arc<Slot>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.call_ends();
    }
}

/// Before the call of `spec`: a snapshot when it changes files and starts a turn. A
/// snapshot that fails is logged and the call goes on (it never stops work).
pub(crate) async fn before(slot: &Arc<Slot>, spec: &ToolSpec, config: &Config) -> Turn {
    let changes = spec
        .effect_tags
        .iter()
        .any(|t| CHANGING.contains(&t.as_str()));
    if let Some(store) = slot.call_starts(changes, config.turn_gap()) {
        let label = format!("before {}", spec.name);
        let taken = tokio::task::spawn_blocking(move || store.snapshot(&label)).await;
        match taken {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(%e, "a checkpoint could not be taken"),
            Err(e) => tracing::warn!(%e, "a checkpoint could not be taken"),
        }
    }
    Turn(Arc::clone(slot))
}
