//! `Slot`: a session's checkpoints, where its tools and its runtime find them (one per
//! tool scope), and the turns that decide when a snapshot is taken.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Store;

/// A session's store, or why it has none; and the time of its last call, which
/// tells a new turn from the rest of the current one.
#[derive(Debug, Default)]
pub struct Slot {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    store: Option<Arc<Store>>,
    off: Option<String>,
    last_call: Option<Instant>,
    turn_marked: bool,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the session's checkpoints in `store`.
    pub fn set(&self, store: Arc<Store>) {
        let mut state = self.lock();
        state.store = Some(store);
        state.off = None;
    }

    /// Says why the session has no checkpoints (turned off, or the store could not
    /// be opened).
    pub fn set_off(&self, why: impl Into<String>) {
        let mut state = self.lock();
        state.store = None;
        state.off = Some(why.into());
    }

    /// The session's store.
    ///
    /// # Errors
    /// [`CheckpointError::Off`](crate::CheckpointError::Off): why there is none.
    pub fn store(&self) -> Result<Arc<Store>, crate::CheckpointError> {
        let state = self.lock();
        match (&state.store, &state.off) {
            (Some(store), _) => Ok(Arc::clone(store)),
            (None, why) => Err(crate::CheckpointError::Off {
                why: why
                    .clone()
                    .unwrap_or_else(|| "no session set them up".to_owned()),
            }),
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
