//! A session's checkpoints: its store (opened at the first snapshot), and a snapshot
//! before the first changing call of each turn. With a Docker sandbox whose workspace
//! is copied, the copy's changes are brought here before each snapshot and a restore
//! is sent back (a mounted workspace is the folder itself).

use std::path::PathBuf;
use std::sync::Arc;

use jianmu_checkpoint::{Config, Slot};
use jianmu_tool_core::{ToolConfig, ToolSpec};

use crate::SessionSettings;

/// The effects of a call that changes the workspace.
const CHANGING: [&str; 3] = ["filesystem:write", "process:exec", "code:exec"];

/// A session's checkpoints: the slot its tools find the store in, and the gate
/// changing calls pass while a turn's snapshot is taken.
pub(crate) struct Checkpoints {
    pub(crate) slot: Arc<Slot>,
    /// Held while a snapshot is taken: a changing call that starts meanwhile (in
    /// parallel with the turn's first) waits for it, so nothing writes during it.
    gate: tokio::sync::Mutex<()>,
}

/// The session's checkpoints, in its tools' scope: the store to be opened at the
/// first snapshot when checkpoints are on, else why not. `hidden` paths and the
/// isolated tools' `read_deny` paths inside the workspace are left out of every
/// checkpoint.
pub(crate) fn open(
    settings: &SessionSettings,
    tools: &ToolConfig,
    hidden: &[PathBuf],
    #[cfg(feature = "docker")] sandbox: Option<&crate::DockerSandbox>,
) -> Checkpoints {
    let slot = tools.scope().get::<Slot>();
    let checkpoints = Checkpoints {
        slot: Arc::clone(&slot),
        gate: tokio::sync::Mutex::new(()),
    };
    let config = &settings.checkpoints;
    if !config.enabled {
        slot.set_off("`[checkpoints] enabled = false`");
        return checkpoints;
    }
    let workspace = tools.workspace();
    let Some(dir) = config.store_dir(workspace) else {
        slot.set_off("no folder for the store (set `[checkpoints] dir`, or HOME)");
        return checkpoints;
    };
    // What commands may not read stays out of checkpoints too (their diffs would
    // show it): the session's hidden paths and every isolated tool's `read_deny`.
    let denied = crate::ISOLATED_TOOLS.iter().flat_map(|tool| {
        tools
            .raw_settings(tool)
            .and_then(|s| s.get("isolation"))
            .and_then(|i| i.get("read_deny"))
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .map(PathBuf::from)
    });
    // Read as the tools read them: `~/` is the home folder, a relative path is the
    // workspace's, and links are resolved on both sides.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let real = |path: PathBuf| path.canonicalize().unwrap_or(path);
    let ws = real(workspace.to_owned());
    let mut exclude: Vec<PathBuf> = Vec::new();
    for path in hidden.iter().cloned().chain(denied) {
        let path = match (path.strip_prefix("~"), &home) {
            (Ok(rest), Some(home)) => home.join(rest),
            (Ok(_), None) => continue,
            (Err(_), _) if path.is_relative() => workspace.join(&path),
            (Err(_), _) => path,
        };
        let path = real(path);
        if path.starts_with(&ws) && !exclude.contains(&path) {
            exclude.push(path);
        }
    }
    slot.open_later(dir, workspace.to_owned(), exclude, config.limits());
    #[cfg(feature = "docker")]
    if let Some(sandbox) = sandbox {
        slot.set_mirror(Arc::new(Copied(sandbox.clone())));
    }
    checkpoints
}

impl Checkpoints {
    /// Before the call of `spec`: a snapshot when it changes files and starts a turn.
    /// A snapshot that fails is logged and the call goes on (it never stops work).
    pub(crate) async fn before(&self, spec: &ToolSpec, config: &Config) -> Turn {
        let changes = spec
            .effect_tags
            .iter()
            .any(|t| CHANGING.contains(&t.as_str()));
        let turn = Turn(Arc::clone(&self.slot));
        if !changes {
            self.slot.call_starts(false, config.turn_gap());
            return turn;
        }
        let _gate = self.gate.lock().await;
        if let Some(store) = self.slot.call_starts(true, config.turn_gap()) {
            if let Err(e) = self.slot.pull().await {
                tracing::warn!(%e, "the sandbox's workspace could not be brought back before a checkpoint");
            }
            let label = format!("before {}", spec.name);
            let taken = tokio::task::spawn_blocking(move || store.snapshot(&label)).await;
            match taken {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(%e, "a checkpoint could not be taken"),
                Err(e) => tracing::warn!(%e, "a checkpoint could not be taken"),
            }
        }
        turn
    }

    /// When the session's own folder goes: its store goes too.
    pub(crate) fn remove_store(&self) {
        if let Some(store) = self.slot.opened() {
            let dir = store.store_dir().to_owned();
            drop(store);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(%e, dir = %dir.display(), "a session's checkpoints were not removed");
            }
        }
    }
}

/// Ends the call's part of the turn when dropped.
pub(crate) struct Turn(Arc<Slot>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.call_ends();
    }
}

/// A Docker sandbox's copy of the workspace (nothing to do when it is mounted).
#[cfg(feature = "docker")]
struct Copied(crate::DockerSandbox);

#[cfg(feature = "docker")]
impl jianmu_checkpoint::Mirror for Copied {
    fn pull(&self) -> jianmu_checkpoint::MirrorFuture<'_> {
        Box::pin(async move {
            let pulled = self.0.pull().await.map_err(|e| e.to_string())?;
            if !pulled.is_complete() {
                tracing::warn!(%pulled, "part of the sandbox's workspace did not come back");
            }
            Ok(())
        })
    }

    fn push<'a>(&'a self, removed: &'a [String]) -> jianmu_checkpoint::MirrorFuture<'a> {
        Box::pin(async move { self.0.push(removed).await.map_err(|e| e.to_string()) })
    }
}
