//! `Slot`: a session's checkpoints, where its tools and its runtime find them (one per
//! tool scope), and the turns that decide when a snapshot is taken.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::path::PathBuf;

use crate::{Settings, Store};

/// A future a [`Mirror`] returns.
pub type MirrorFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Where the session's commands really change the workspace when that is not the
/// folder the store reads: a Docker sandbox's copy of it. The store reads and
/// restores the folder here; the mirror brings the copy's changes here first, and
/// sends a restore there after.
pub trait Mirror: Send + Sync + 'static {
    /// Brings what changed in the copy here (new and changed files), before the store
    /// reads the workspace.
    fn pull(&self) -> MirrorFuture<'_>;

    /// Sends the workspace as it is here to the copy after a restore, and removes
    /// `removed` (workspace-relative, files before their folders) there too.
    fn push<'a>(&'a self, removed: &'a [String]) -> MirrorFuture<'a>;
}

/// A session's store, or why it has none; and the time of its last call, which
/// tells a new turn from the rest of the current one.
#[derive(Default)]
pub struct Slot {
    state: Mutex<State>,
    mirror: Mutex<Option<Arc<dyn Mirror>>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("state", &*self.lock())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    store: Option<Arc<Store>>,
    /// How to open the store at its first use.
    later: Option<Later>,
    off: Option<String>,
    last_call: Option<Instant>,
    turn_marked: bool,
}

/// The arguments of [`Store::open`], for a store opened at its first use.
#[derive(Debug)]
struct Later {
    store_dir: PathBuf,
    workspace: PathBuf,
    exclude: Vec<PathBuf>,
    settings: Settings,
}

impl State {
    /// Opens the store if it is still to be opened; a failure turns checkpoints off,
    /// saying why.
    fn open(&mut self) {
        let Some(later) = self.later.take() else {
            return;
        };
        match Store::open(
            &later.store_dir,
            &later.workspace,
            &later.exclude,
            later.settings,
        ) {
            Ok(store) => self.store = Some(Arc::new(store)),
            Err(e) => self.off = Some(e.to_string()),
        }
    }
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the session's checkpoints in `store`.
    pub fn set(&self, store: Arc<Store>) {
        let mut state = self.lock();
        state.store = Some(store);
        state.later = None;
        state.off = None;
    }

    /// Keeps the session's checkpoints in the store [`Store::open`] opens with these
    /// arguments at its first use (a session that changes nothing makes no store).
    pub fn open_later(
        &self,
        store_dir: PathBuf,
        workspace: PathBuf,
        exclude: Vec<PathBuf>,
        settings: Settings,
    ) {
        let mut state = self.lock();
        state.store = None;
        state.off = None;
        state.later = Some(Later {
            store_dir,
            workspace,
            exclude,
            settings,
        });
    }

    /// The store if it has been opened (none is made here).
    pub fn opened(&self) -> Option<Arc<Store>> {
        self.lock().store.clone()
    }

    /// Says why the session has no checkpoints (turned off, or the store could not
    /// be opened).
    pub fn set_off(&self, why: impl Into<String>) {
        let mut state = self.lock();
        state.store = None;
        state.later = None;
        state.off = Some(why.into());
    }

    /// The session's store.
    ///
    /// # Errors
    /// [`CheckpointError::Off`](crate::CheckpointError::Off): why there is none.
    pub fn store(&self) -> Result<Arc<Store>, crate::CheckpointError> {
        let mut state = self.lock();
        state.open();
        match (&state.store, &state.off) {
            (Some(store), _) => Ok(Arc::clone(store)),
            (None, why) => Err(crate::CheckpointError::Off {
                why: why
                    .clone()
                    .unwrap_or_else(|| "no session set them up".to_owned()),
            }),
        }
    }

    /// Keeps the workspace's copy that the session's commands change (see [`Mirror`]).
    pub fn set_mirror(&self, mirror: Arc<dyn Mirror>) {
        *self.mirror.lock().unwrap_or_else(PoisonError::into_inner) = Some(mirror);
    }

    fn mirror(&self) -> Option<Arc<dyn Mirror>> {
        self.mirror
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Brings the copy's changes here when the workspace has a copy (nothing to do
    /// otherwise).
    ///
    /// # Errors
    /// The copy could not be read: what the store reads may be behind it.
    pub async fn pull(&self) -> Result<(), String> {
        match self.mirror() {
            Some(mirror) => mirror.pull().await,
            None => Ok(()),
        }
    }

    /// After a restore, sends the workspace to its copy when it has one, removing
    /// `removed` there.
    ///
    /// # Errors
    /// The copy could not be updated: it still holds what it held.
    pub async fn push(&self, removed: &[String]) -> Result<(), String> {
        match self.mirror() {
            Some(mirror) => mirror.push(removed).await,
            None => Ok(()),
        }
    }

    /// Marks the start of a new turn: the next changing call takes a snapshot first.
    pub fn mark_turn(&self) {
        self.lock().turn_marked = true;
    }

    /// Records a call starting now. For a call that changes files, returns the store
    /// when a snapshot is due first: at the first changing call of a turn (after a
    /// quiet gap longer than `gap` since the last call, or a marked turn).
    pub fn call_starts(&self, changes: bool, gap: Duration) -> Option<Arc<Store>> {
        let now = Instant::now();
        let mut state = self.lock();
        let quiet = state
            .last_call
            .is_none_or(|last| now.saturating_duration_since(last) > gap);
        let new_turn = quiet || state.turn_marked;
        state.last_call = Some(now);
        if !changes || !new_turn {
            // A reading call in a new turn leaves the turn's snapshot to its first
            // changing call.
            if quiet && !changes {
                state.turn_marked = true;
            }
            return None;
        }
        state.turn_marked = false;
        state.open();
        state.store.clone()
    }

    /// Records a call ending now (a long call is not a quiet gap).
    pub fn call_ends(&self) {
        self.lock().last_call = Some(Instant::now());
    }
}

/// Checkpoint settings of a runtime (`[checkpoints]`): on by default.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Take checkpoints at all.
    pub enabled: bool,
    /// Where the stores live (one folder per workspace beneath it); by default
    /// `$XDG_STATE_HOME/jianmu/checkpoints`, else `~/.local/state/jianmu/checkpoints`.
    pub dir: Option<std::path::PathBuf>,
    /// A call after this many quiet seconds starts a new turn, whose first changing
    /// call takes a snapshot first.
    pub turn_gap_secs: f64,
    /// [`Settings::max_file_bytes`](crate::Settings::max_file_bytes).
    pub max_file_bytes: u64,
    /// [`Settings::max_files`](crate::Settings::max_files).
    pub max_files: usize,
    /// [`Settings::max_checkpoints`](crate::Settings::max_checkpoints).
    pub max_checkpoints: usize,
    /// [`Settings::max_store_bytes`](crate::Settings::max_store_bytes).
    pub max_store_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        let limits = crate::Settings::default();
        Self {
            enabled: true,
            dir: None,
            turn_gap_secs: 30.0,
            max_file_bytes: limits.max_file_bytes,
            max_files: limits.max_files,
            max_checkpoints: limits.max_checkpoints,
            max_store_bytes: limits.max_store_bytes,
        }
    }
}

impl Config {
    /// The store's limits.
    pub fn limits(&self) -> crate::Settings {
        crate::Settings {
            max_file_bytes: self.max_file_bytes,
            max_files: self.max_files,
            max_checkpoints: self.max_checkpoints,
            max_store_bytes: self.max_store_bytes,
        }
    }

    /// The quiet gap that starts a turn.
    pub fn turn_gap(&self) -> Duration {
        Duration::try_from_secs_f64(self.turn_gap_secs).unwrap_or(Duration::ZERO)
    }

    /// The folder of `workspace`'s store: beneath [`Config::dir`] when set, else
    /// [`Store::default_dir`].
    pub fn store_dir(&self, workspace: &std::path::Path) -> Option<std::path::PathBuf> {
        let default = Store::default_dir(workspace)?;
        match &self.dir {
            Some(dir) => Some(dir.join(default.file_name()?)),
            None => Some(default),
        }
    }

    /// The folder all stores live beneath.
    pub fn root(&self) -> Option<std::path::PathBuf> {
        let probe = Store::default_dir(std::path::Path::new("/"))?;
        match &self.dir {
            Some(dir) => Some(dir.clone()),
            None => probe.parent().map(std::path::Path::to_path_buf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Config;

    #[test]
    fn settings_read_with_every_key_optional_and_unknown_ones_refused() {
        let c: Config = toml_like(r#"{"turn_gap_secs": 5, "max_checkpoints": 3}"#).unwrap();
        assert_eq!(
            (c.turn_gap_secs, c.limits().max_checkpoints, c.enabled),
            (5.0, 3, true)
        );
        let e = toml_like(r#"{"max_checkpoint": 3}"#).unwrap_err();
        assert!(e.to_string().contains("max_checkpoint"), "{e}");
    }

    fn toml_like(json: &str) -> Result<Config, serde_json::Error> {
        serde_json::from_str(json)
    }
}
