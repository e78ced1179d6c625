//! One change at a time per file: a tool that reads a file, changes it and writes it
//! back holds the file's lock from the read to the write, so that two calls at once
//! (two MCP requests, a script's `parallel()`) never lose one of the changes. The
//! locks are per process and keyed by the file's real path, so every workspace and
//! tool in the process shares them. They block the calling thread: take them in
//! blocking work ([`crate::blocking`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError, Weak};

#[derive(Default)]
struct Slot {
    busy: Mutex<bool>,
    free: Condvar,
}

/// Locks in use, by real path; an entry lives as long as a holder or waiter does.
static SLOTS: LazyLock<Mutex<HashMap<PathBuf, Weak<Slot>>>> = LazyLock::new(Mutex::default);

/// A file's lock, released when dropped.
#[must_use = "the lock is released when dropped"]
pub struct FileLock {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileLock")
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        *self
            .slot
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        self.slot.free.notify_one();
    }
}

/// The slot of the file at `path` (its real path when it exists).
fn slot(path: &Path) -> Arc<Slot> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(slot) = slots.get(&key).and_then(Weak::upgrade) {
        return slot;
    }
    if slots.len() >= 1024 {
        slots.retain(|_, s| s.strong_count() > 0);
    }
    let slot = Arc::new(Slot::default());
    slots.insert(key, Arc::downgrade(&slot));
    slot
}

fn acquire(slot: Arc<Slot>) -> FileLock {
    let mut busy = slot.busy.lock().unwrap_or_else(PoisonError::into_inner);
    while *busy {
        busy = slot.free.wait(busy).unwrap_or_else(PoisonError::into_inner);
    }
    *busy = true;
    drop(busy);
    FileLock { slot }
}

impl crate::Workspace {
    /// Waits for and takes the lock of the workspace file `rel`.
    pub fn lock_file(&self, rel: &Path) -> FileLock {
        acquire(slot(&self.root().join(rel)))
    }

    /// Takes the locks of several files, always in the same order (so that two
    /// callers never wait on each other), each file once.
    pub fn lock_files<'a>(&self, rels: impl IntoIterator<Item = &'a Path>) -> Vec<FileLock> {
        let mut slots: Vec<(usize, Arc<Slot>)> = rels
            .into_iter()
            .map(|rel| slot(&self.root().join(rel)))
            .map(|s| (Arc::as_ptr(&s) as usize, s))
            .collect();
        slots.sort_by_key(|(at, _)| *at);
        slots.dedup_by_key(|(at, _)| *at);
        slots.into_iter().map(|(_, s)| acquire(s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_same_file_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "0").unwrap();
        std::os::unix::fs::symlink("f.txt", dir.path().join("link.txt")).unwrap();
        let ws = Arc::new(crate::Workspace::open(dir.path()).unwrap());
        let threads: Vec<_> = (0..16)
            .map(|k| {
                let ws = Arc::clone(&ws);
                std::thread::spawn(move || {
                    let name = if k % 2 == 0 { "f.txt" } else { "link.txt" };
                    let _lock = ws.lock_file(Path::new(name));
                    let path = ws.root().join("f.txt");
                    let n: u32 = std::fs::read_to_string(&path).unwrap().parse().unwrap();
                    std::thread::yield_now();
                    std::fs::write(&path, (n + 1).to_string()).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total = std::fs::read_to_string(dir.path().join("f.txt")).unwrap();
        assert_eq!(total, "16");
        let both = ws.lock_files([Path::new("f.txt"), Path::new("link.txt"), Path::new("g")]);
        assert_eq!(both.len(), 2);
    }
}
