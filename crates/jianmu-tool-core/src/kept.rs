//! `Kept`: what a session's tools hold that can outlive its processes, and what
//! cannot, for suspending a session and resuming it elsewhere. It lives in a scope
//! ([`crate::Scope`]); `bash` records each shell session's folder and exported
//! variables there after every call and takes them back when a session of that name
//! opens, and tools that hold processes (background jobs, named interpreters) say
//! which they hold, since those cannot be kept.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// Where a shell session starts again: its folder and exported variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellState {
    /// The working folder.
    pub cwd: String,
    /// The exported variables, in order.
    pub env: Vec<(String, String)>,
}

/// Something a session held that does not survive a suspension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// `job` or `interpreter`.
    pub kind: String,
    /// Its name or id.
    pub name: String,
}

/// What [`Kept::state`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptState {
    /// The shell sessions, by name.
    pub shells: BTreeMap<String, ShellState>,
    /// What cannot be kept.
    pub lost: Vec<Lost>,
}

type Lister = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// A scope's kept state (see the module docs).
#[derive(Default)]
pub struct Kept {
    shells: Mutex<BTreeMap<String, ShellState>>,
    given: Mutex<BTreeMap<String, ShellState>>,
    listers: Mutex<Vec<(&'static str, Lister)>>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("shells", &lock(&self.shells).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Kept {
    /// Records where shell session `name` starts again.
    pub fn save_shell(&self, name: &str, state: ShellState) {
        lock(&self.shells).insert(name.to_owned(), state);
    }

    /// Forgets shell session `name` (it ended).
    pub fn forget_shell(&self, name: &str) {
        lock(&self.shells).remove(name);
    }

    /// Hands `shells` to the sessions of those names that open from now on.
    pub fn give_shells(&self, shells: BTreeMap<String, ShellState>) {
        lock(&self.given).extend(shells);
    }

    /// The state given for shell session `name`, once.
    pub fn take_given(&self, name: &str) -> Option<ShellState> {
        lock(&self.given).remove(name)
    }

    /// Lets a tool say which things of `kind` (`job`, `interpreter`) it holds now;
    /// a second lister of the same kind replaces the first.
    pub fn lists(
        &self,
        kind: &'static str,
        lister: impl Fn() -> Vec<String> + Send + Sync + 'static,
    ) {
        let mut listers = lock(&self.listers);
        listers.retain(|(k, _)| *k != kind);
        listers.push((kind, Box::new(lister)));
    }

    /// The shell sessions (those given and not opened yet included) and what cannot
    /// be kept.
    pub fn state(&self) -> KeptState {
        let mut shells = lock(&self.given).clone();
        shells.extend(lock(&self.shells).clone());
        let lost = lock(&self.listers)
            .iter()
            .flat_map(|(kind, list)| {
                list().into_iter().map(|name| Lost {
                    kind: (*kind).to_owned(),
                    name,
                })
            })
            .collect();
        KeptState { shells, lost }
    }
}

#[cfg(test)]
mod tests {
    use super::{Kept, ShellState};

    #[test]
    fn shells_given_are_taken_once_and_listers_report_what_is_lost() {
        let kept = Kept::default();
        let state = ShellState {
            cwd: "/ws/sub".into(),
            env: vec![("A".into(), "1".into())],
        };
        kept.give_shells([("dev".to_owned(), state.clone())].into());
        assert_eq!(kept.state().shells["dev"], state);
        assert_eq!(kept.take_given("dev"), Some(state.clone()));
        assert_eq!(kept.take_given("dev"), None);
        kept.save_shell("dev", state);
        kept.lists("job", || vec!["1".into()]);
        kept.lists("job", || vec!["2".into()]);
        let now = kept.state();
        assert_eq!(now.shells.len(), 1);
        assert_eq!(now.lost.len(), 1);
        assert_eq!(
            (now.lost[0].kind.as_str(), now.lost[0].name.as_str()),
            ("job", "2")
        );
        kept.forget_shell("dev");
        assert!(kept.state().shells.is_empty());
    }
}
