//! Checkpoints of a workspace folder, so an agent's changes (what its shell commands
//! changed included) can be listed, diffed and undone.
//!
//! A [`Store`] keeps its checkpoints in a *shadow git object store* outside the
//! workspace: a folder laid out like a bare git repository (`objects/`, `refs/`,
//! `HEAD`, `config`), holding zlib-compressed loose objects with SHA-1 ids in git's
//! exact byte format. Everything is written by this crate, which runs no program; but
//! `git --git-dir=STORE log --all`, `git cat-file -p`, `git diff-tree` and `git fsck`
//! all work on it. The user's own `.git` and index are never read or touched.
//!
//! Each checkpoint is a parentless commit (author `jianmu <jianmu@localhost>`, the
//! label as its message) named by `refs/checkpoints/<12-hex id>`, whose root tree has
//! exactly two entries:
//!
//! - `workspace`: the tree of the workspace: regular files (git mode 100644 or
//!   100755), symbolic links (120000, the target's bytes; never followed) and folders;
//! - `meta`: a compact JSON blob with what git's tree cannot say: every file's exact
//!   permission bits where they differ from 0644/0755, every folder's mode (empty
//!   folders included), what was skipped and why, the label and the time.
//!
//! A checkpoint brings back exact bytes, permission bits (0600, 0444, 0700 folders),
//! symbolic links, empty folders and deletions. Owners, times and extended attributes
//! are not recorded and not restored.
//!
//! # What a checkpoint holds
//! Every file, symbolic link and folder under the workspace, honouring `.gitignore`
//! files (but not `.git/info/exclude`, `.ignore` files or any global git
//! configuration), except: any `.git` entry at any depth, `.jianmu/` and `jianmu.toml`
//! at the root, the paths given to [`Store::open`] as `exclude`, and the store itself
//! if it lies inside. Sockets, FIFOs and devices, files over
//! [`Settings::max_file_bytes`] and entries past [`Settings::max_files`] are skipped
//! and listed in [`Snapshot::skipped`], as are names that are not UTF-8. Files are
//! read through a handle on the
//! workspace root, never by absolute path, and never through a symbolic link: a file
//! swapped for a link while a snapshot runs is skipped, not followed.
//!
//! # Speed
//! A stat cache in the store maps each path's (device, inode, size, mtime, ctime,
//! mode) to its blob, so an unchanged file is neither read nor hashed again, and
//! objects already stored are never rewritten; files are stat'ed on a second thread
//! while the walk goes on. (A file changed within a second of being hashed is hashed
//! again next time: a second change in the same timestamp tick would keep its stat
//! data.) Objects are written atomically (a temporary file, then `rename`) but not
//! synced to disk: a crash of the process never leaves half an object under its final
//! name; after a power loss the newest objects may be lost, which later calls report
//! as [`CheckpointError::Corrupt`] (every object read is checked against its id).
//!
//! # Limits
//! At most [`Settings::max_checkpoints`] are kept, and the store's objects are kept
//! under [`Settings::max_store_bytes`] (the newest checkpoint is never removed): the
//! oldest go first, and a mark-and-sweep deletes the objects no remaining checkpoint
//! reaches. Since marking reads every kept checkpoint's trees, the sweep runs once
//! every `max_checkpoints / 8` removals, and at once when the size limit is passed.
//! Snapshots, restores and pruning are serialized, within a process and across
//! processes (`flock` on the store's `lock` file). Do not run `git gc` on the store:
//! it only reads loose objects.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jianmu_checkpoint::{Settings, Store};
//!
//! let tmp = tempfile::tempdir()?;
//! let (workspace, store_dir) = (tmp.path().join("ws"), tmp.path().join("store"));
//! std::fs::create_dir(&workspace)?;
//! std::fs::write(workspace.join("notes.txt"), "first\n")?;
//!
//! let store = Store::open(&store_dir, &workspace, &[], Settings::default())?;
//! let before = store.snapshot("before bash")?.created.ok_or("nothing stored")?;
//!
//! std::fs::write(workspace.join("notes.txt"), "second\n")?;
//! std::fs::write(workspace.join("new.txt"), "new\n")?;
//! let diff = store.diff(&before.id, None, None, 10_000)?;
//! assert_eq!(diff.changes.len(), 2);
//! assert!(diff.text.contains("-first\n+second\n"));
//!
//! let restored = store.restore(&before.id, false)?;
//! assert!(restored.undo.is_some());
//! assert_eq!(std::fs::read_to_string(workspace.join("notes.txt"))?, "first\n");
//! assert!(!workspace.join("new.txt").exists());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt};
use serde::{Deserialize, Serialize};

mod cache;
mod diff;
mod fsops;
mod ignores;
mod index;
mod manifest;
mod object;
mod prune;
mod restore;
mod scan;
mod slot;
mod snapshot;

pub use slot::{Config, Mirror, MirrorFuture, Slot};

use object::{Objects, Oid};

/// Limits of a [`Store`]. As a settings-file table, every key is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Settings {
    /// Files larger than this are not stored (said in [`Snapshot::skipped`]).
    pub max_file_bytes: u64,
    /// At most this many entries (files, symbolic links and folders alike) per
    /// snapshot; the rest are skipped and said.
    pub max_files: usize,
    /// Keep at most this many checkpoints; older ones are pruned.
    pub max_checkpoints: usize,
    /// The most the store's objects may take on disk; past it the oldest checkpoints
    /// are pruned (never the newest).
    pub max_store_bytes: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_file_bytes: 8 << 20,
            max_files: 50_000,
            max_checkpoints: 100,
            max_store_bytes: 1 << 30,
        }
    }
}

/// One checkpoint, as [`Store::list`] and [`Store::snapshot`] give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The first 12 hex digits of the commit id: what the other calls take.
    pub id: String,
    /// The full commit id (40 hex digits).
    pub commit: String,
    /// When it was taken, in seconds since the Unix epoch.
    pub time: u64,
    /// What it was taken for, e.g. "before bash".
    pub label: String,
    /// How many files and symbolic links it holds.
    pub files: usize,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// What [`Store::snapshot`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Snapshot {
    /// The checkpoint made, or `None` when nothing changed since the newest.
    pub created: Option<Checkpoint>,
    /// When nothing changed: the id of the newest checkpoint, which already holds
    /// this state.
    pub unchanged: Option<String>,
    /// What was left out and why (at most 100 entries and a summary).
    pub skipped: Vec<Skipped>,
    /// Ids of the checkpoints removed to stay within the limits.
    pub pruned: Vec<String>,
}

/// A path left out of a snapshot or a restore, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Skipped {
    /// The workspace-relative path (`...` for a summary of several).
    pub path: String,
    /// Why, e.g. "larger than 8 MiB", "over the 50000-file limit", "a socket".
    pub why: String,
}

impl Skipped {
    pub(crate) fn new(path: impl Into<String>, why: impl Into<String>) -> Self {
        Skipped {
            path: path.into(),
            why: why.into(),
        }
    }
}

/// What [`Store::diff`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Diff {
    /// Every change, sorted by path.
    pub changes: Vec<Change>,
    /// A unified diff with git-style headers (`diff --git a/P b/P`), cut to the
    /// requested size at a line or character boundary.
    pub text: String,
    /// How many bytes of the diff text were left out, if any.
    pub cut: Option<usize>,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Change {
    /// The workspace-relative path.
    pub path: String,
    /// What changed.
    pub kind: ChangeKind,
}

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChangeKind {
    /// It is new (a folder only when it is empty).
    Added,
    /// It is gone (a folder only when it was empty).
    Deleted,
    /// A file's bytes or a link's target changed (maybe its mode too).
    Modified,
    /// Only the permission bits changed.
    ModeChanged,
    /// It became another kind of thing: file, symbolic link or folder.
    TypeChanged,
}

/// What [`Store::restore`] did, or with `dry_run` would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Restored {
    /// The checkpoint of the workspace as it was just before the restore: restoring
    /// it undoes this one. `None` for a dry run.
    pub undo: Option<String>,
    /// Paths written: files and links whose bytes, kind or mode changed, folders
    /// made or given their mode back.
    pub written: Vec<String>,
    /// Paths removed.
    pub removed: Vec<String>,
    /// What was not touched and why: ignored or over-limit paths the checkpoint had a
    /// version of, excluded paths, what could not be written (at most 100 entries and
    /// a summary).
    pub left: Vec<Skipped>,
    /// Whether this was a dry run (nothing changed).
    pub dry_run: bool,
}

/// Why a checkpoint call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The session has no checkpoints, and why.
    #[error("checkpoints are off in this session: {why}")]
    Off {
        /// Why (turned off, no folder for the store, a Docker sandbox).
        why: String,
    },
    /// The workspace folder cannot be opened or read.
    #[error("cannot read the workspace `{}`", .path.display())]
    Workspace {
        /// The workspace path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The store folder cannot be used there.
    #[error("refused the checkpoint store `{}`: {why}", .path.display())]
    InvalidStore {
        /// The store path.
        path: PathBuf,
        /// Why.
        why: &'static str,
    },
    /// Reading or writing the store failed.
    #[error("cannot use the checkpoint store `{}`", .path.display())]
    Store {
        /// The file or folder of the store.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// A restore failed partway: the workspace is part restored.
    #[error(
        "the restore stopped partway ({failure}); checkpoint {undo} is the workspace as it \
         was before it: restore that to undo what was done"
    )]
    Interrupted {
        /// The checkpoint taken just before the restore.
        undo: String,
        /// Why it stopped.
        failure: Box<CheckpointError>,
    },
    /// No checkpoint has that id.
    #[error("no checkpoint `{id}`{}; `checkpoint_list` shows them", newest_hint(.newest))]
    UnknownCheckpoint {
        /// The id as given.
        id: String,
        /// The newest ids that exist (at most 5).
        newest: Vec<String>,
    },
    /// Several checkpoints start with that prefix.
    #[error("checkpoint id `{id}` is ambiguous: {}; give more characters", .matches.join(", "))]
    Ambiguous {
        /// The prefix as given.
        id: String,
        /// Ids it matches (at most 5).
        matches: Vec<String>,
    },
    /// Something in the store is malformed.
    #[error("the checkpoint store is corrupt: {what}: {why}")]
    Corrupt {
        /// What is corrupt, e.g. "object 1a2b..." or "checkpoints.jsonl".
        what: String,
        /// How.
        why: String,
    },
    /// A store file or object is larger than this crate reads.
    #[error("refused {what}: it is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// What, e.g. "checkpoints.jsonl".
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A path argument is not a workspace-relative path.
    #[error("refused the path `{path}`: {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why.
        why: &'static str,
    },
}

fn newest_hint(newest: &[String]) -> String {
    if newest.is_empty() {
        " (there are none yet)".to_owned()
    } else {
        format!(" (the newest: {})", newest.join(", "))
    }
}

/// What snapshots leave out, decided on workspace-relative paths.
#[derive(Debug)]
pub(crate) struct Rules {
    /// The canonical workspace root.
    root: PathBuf,
    /// Excluded paths, relative to the root.
    exclude: Vec<PathBuf>,
}

impl Rules {
    /// [`Rules::excluded`] for an entry of the walk, whose parent is known not to be
    /// excluded (the walk does not enter excluded folders): cheap enough to run on
    /// every entry.
    pub(crate) fn excluded_entry(&self, e: &ignore::DirEntry) -> bool {
        let name = e.file_name();
        if name == ".git" || (e.depth() == 1 && (name == ".jianmu" || name == "jianmu.toml")) {
            return true;
        }
        !self.exclude.is_empty()
            && e.path()
                .strip_prefix(&self.root)
                .is_ok_and(|rel| self.exclude.iter().any(|x| rel == x))
    }

    /// Whether `rel` is never read, stored, diffed or restored.
    pub(crate) fn excluded(&self, rel: &Path) -> bool {
        let mut parts = rel.components();
        if let Some(Component::Normal(first)) = parts.next()
            && (first == ".jianmu" || (first == "jianmu.toml" && parts.next().is_none()))
        {
            return true;
        }
        rel.components()
            .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
            || self.exclude.iter().any(|e| rel.starts_with(e))
    }
}

/// The identity of the list file when the in-memory state was last known good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    ino: u64,
    len: u64,
    mtime: i64,
}

/// What a store keeps in memory between calls, behind its mutex.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    /// The stat cache, as last loaded or saved.
    pub(crate) cache: cache::Cache,
    /// Objects known to be in the store.
    pub(crate) known: HashSet<Oid>,
    /// The list file's identity (`None` when missing) when `cache` and `known` were
    /// last valid; another process that prunes rewrites it, and then both are
    /// reloaded. `None` before the first load.
    pub(crate) stamp: Option<Option<Stamp>>,
    /// Files whose ctime or mtime is this recent (in ns) when stat'ed are hashed
    /// again next time: a change within the file system's timestamp granularity would
    /// leave the stat data unchanged.
    pub(crate) racy_ns: i64,
    /// How many files the last scan read and hashed (for tests).
    pub(crate) hashed: usize,
}

/// Checkpoints of one workspace folder in one store. `Send + Sync`; share it behind
/// an `Arc`.
pub struct Store {
    store_dir: PathBuf,
    workspace: PathBuf,
    settings: Settings,
    rules: std::sync::Arc<Rules>,
    root: Dir,
    store: Dir,
    objects: Objects,
    lock_file: std::fs::File,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("store_dir", &self.store_dir)
            .field("workspace", &self.workspace)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The lock of a store: the in-process mutex, then `flock` on the `lock` file.
pub(crate) struct Locked<'a> {
    pub(crate) inner: MutexGuard<'a, Inner>,
    file: &'a std::fs::File,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.file, rustix::fs::FlockOperation::Unlock);
    }
}

/// What the store's `config` says: a bare repository that git never garbage-collects
/// on its own (it would pack the loose objects this crate reads).
const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n\tlogallrefupdates = false\n[gc]\n\tauto = 0\n";

impl Store {
    /// Opens (creating if missing) the store at `store_dir` for the workspace folder
    /// `workspace`. `exclude`: absolute paths inside the workspace (or paths relative
    /// to it) that are never read, stored, diffed or restored; paths outside it are
    /// ignored.
    ///
    /// # Errors
    /// [`CheckpointError::Workspace`] when `workspace` is not a readable folder,
    /// [`CheckpointError::InvalidStore`] for a store that is the workspace, holds it,
    /// or lies inside a `.git` folder of it, [`CheckpointError::Store`] when the
    /// store cannot be made.
    pub fn open(
        store_dir: &Path,
        workspace: &Path,
        exclude: &[PathBuf],
        settings: Settings,
    ) -> Result<Store, CheckpointError> {
        let ws_err = |e| CheckpointError::Workspace {
            path: workspace.to_owned(),
            source: e,
        };
        let ws = workspace.canonicalize().map_err(ws_err)?;
        let root = Dir::open_ambient_dir(&ws, ambient_authority()).map_err(ws_err)?;
        let store_err = |e| CheckpointError::Store {
            path: store_dir.to_owned(),
            source: e,
        };
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(builder.recursive(true), 0o700);
        builder.create(store_dir).map_err(store_err)?;
        let sd = store_dir.canonicalize().map_err(store_err)?;
        let invalid = |why| CheckpointError::InvalidStore {
            path: store_dir.to_owned(),
            why,
        };
        if sd == ws {
            return Err(invalid("it is the workspace itself"));
        }
        if ws.starts_with(&sd) {
            return Err(invalid("the workspace lies inside it"));
        }
        let mut excluded: Vec<PathBuf> = Vec::new();
        if let Ok(rel) = sd.strip_prefix(&ws) {
            if rel
                .components()
                .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
            {
                return Err(invalid("it lies inside a `.git` folder of the workspace"));
            }
            excluded.push(rel.to_owned());
        }
        for path in exclude {
            let rel = if path.is_absolute() {
                let canonical = path.canonicalize().ok();
                match path
                    .strip_prefix(&ws)
                    .or_else(|_| path.strip_prefix(workspace))
                    .ok()
                    .or_else(|| canonical.as_deref().and_then(|c| c.strip_prefix(&ws).ok()))
                {
                    Some(rel) => rel.to_owned(),
                    None => continue,
                }
            } else {
                path.clone()
            };
            let normal: PathBuf = rel
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n),
                    _ => None,
                })
                .collect();
            if rel.components().any(|c| c == Component::ParentDir) {
                continue;
            }
            if normal.as_os_str().is_empty() {
                continue;
            }
            excluded.push(normal);
        }
        let store = Dir::open_ambient_dir(&sd, ambient_authority()).map_err(store_err)?;
        let in_store = |e, name: &str| CheckpointError::Store {
            path: sd.join(name),
            source: e,
        };
        let mut dirs = DirBuilder::new();
        dirs.mode(0o700);
        for d in [
            "objects",
            "objects/info",
            "objects/pack",
            "refs",
            "refs/heads",
            "refs/tags",
            "refs/checkpoints",
        ] {
            match store.create_dir_with(d, &dirs) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(in_store(e, d)),
            }
        }
        // Which workspace the store is of, for whoever finds it (the folder's name is
        // a hash of that path).
        let mut named = ws.as_os_str().as_encoded_bytes().to_vec();
        named.push(b'\n');
        for (name, content) in [
            ("HEAD", &b"ref: refs/heads/main\n"[..]),
            ("config", CONFIG.as_bytes()),
            ("workspace", &named[..]),
        ] {
            if store.symlink_metadata(name).is_err() {
                index::write_atomic(&store, Path::new(name), content)
                    .map_err(|e| in_store(e, name))?;
            }
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.read(true).write(true).create(true);
        let lock_file = store
            .open_with("lock", &options)
            .map_err(|e| in_store(e, "lock"))?
            .into_std();
        let objects_dir = store
            .open_dir("objects")
            .map_err(|e| in_store(e, "objects"))?;
        Ok(Store {
            objects: Objects::new(objects_dir, sd.join("objects")),
            store_dir: sd,
            rules: std::sync::Arc::new(Rules {
                root: ws.clone(),
                exclude: excluded,
            }),
            workspace: ws,
            settings,
            root,
            store,
            lock_file,
            inner: Mutex::new(Inner {
                racy_ns: 1_000_000_000,
                ..Inner::default()
            }),
        })
    }

    /// The default store folder for `workspace`:
    /// `$XDG_STATE_HOME/jianmu/checkpoints/<16 hex digits of the SHA-1 of the absolute
    /// workspace path>`, or under `$HOME/.local/state` when `XDG_STATE_HOME` is unset.
    /// `None` when neither variable gives an absolute path.
    pub fn default_dir(workspace: &Path) -> Option<PathBuf> {
        let from_env = |name| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let state = from_env("XDG_STATE_HOME")
            .or_else(|| from_env("HOME").map(|home| home.join(".local/state")))?;
        let absolute = workspace
            .canonicalize()
            .or_else(|_| std::path::absolute(workspace))
            .ok()?;
        let digest = object::hash_bytes(absolute.as_os_str().as_encoded_bytes());
        Some(state.join("jianmu/checkpoints").join(&digest.hex()[..16]))
    }

    /// The store folder (canonical).
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The workspace folder (canonical).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// A checkpoint of the workspace as it is now, labelled `label` (e.g. "before
    /// bash"), unless nothing changed since the newest checkpoint: then
    /// [`Snapshot::created`] is `None` and [`Snapshot::unchanged`] names the newest.
    /// Prunes old checkpoints past the limits.
    ///
    /// # Errors
    /// [`CheckpointError::Workspace`] when the workspace root cannot be read,
    /// [`CheckpointError::Store`] when the store cannot be written,
    /// [`CheckpointError::Corrupt`] or [`CheckpointError::TooLarge`] for a damaged
    /// store. Unreadable files are skipped, not errors.
    pub fn snapshot(&self, label: &str) -> Result<Snapshot, CheckpointError> {
        let mut locked = self.lock()?;
        let (snap, _, _) = self.snapshot_locked(&mut locked.inner, label, &[])?;
        Ok(snap)
    }

    /// All checkpoints, newest first.
    ///
    /// # Errors
    /// [`CheckpointError::Store`], [`CheckpointError::Corrupt`] or
    /// [`CheckpointError::TooLarge`] when the list file cannot be read.
    pub fn list(&self) -> Result<Vec<Checkpoint>, CheckpointError> {
        let index = index::Index::load(self)?;
        Ok(index
            .records
            .iter()
            .rev()
            .map(index::Record::checkpoint)
            .collect())
    }

    /// What changed from checkpoint `id` (a full id or a unique prefix of at least 4
    /// hex digits) to the workspace now, or to checkpoint `to`. With `path`, only
    /// changes at or under that workspace-relative path. The text is cut to
    /// `max_bytes` ([`Diff::cut`] says how much was left out).
    ///
    /// # Errors
    /// [`CheckpointError::UnknownCheckpoint`], [`CheckpointError::Ambiguous`],
    /// [`CheckpointError::InvalidPath`], or as [`Store::snapshot`].
    pub fn diff(
        &self,
        id: &str,
        to: Option<&str>,
        path: Option<&str>,
        max_bytes: usize,
    ) -> Result<Diff, CheckpointError> {
        let filter = path.map(|p| self.relative(p)).transpose()?;
        let mut locked = self.lock()?;
        diff::diff(
            self,
            &mut locked.inner,
            id,
            to,
            filter.as_deref(),
            max_bytes,
        )
    }

    /// Makes the workspace match checkpoint `id`. First takes a snapshot labelled
    /// `"before restoring <id>"`, so the restore can be undone (its id is in
    /// [`Restored::undo`]), unless `dry_run`, which changes nothing and reports what
    /// would change.
    ///
    /// Files are written atomically (a temporary file beside them, then `rename`),
    /// never through a symbolic link and never outside the workspace. Paths that
    /// snapshots leave out (ignored, excluded, over the limits) are never touched.
    /// Owners and times are not restored.
    ///
    /// # Errors
    /// [`CheckpointError::UnknownCheckpoint`], [`CheckpointError::Ambiguous`], or as
    /// [`Store::snapshot`]. Paths that cannot be written are reported in
    /// [`Restored::left`], not errors.
    pub fn restore(&self, id: &str, dry_run: bool) -> Result<Restored, CheckpointError> {
        let mut locked = self.lock()?;
        restore::restore(self, &mut locked.inner, id, dry_run)
    }

    /// Takes the store's lock: the mutex, then `flock`.
    fn lock(&self) -> Result<Locked<'_>, CheckpointError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match rustix::fs::flock(&self.lock_file, rustix::fs::FlockOperation::LockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(CheckpointError::Store {
                        path: self.store_dir.join("lock"),
                        source: e.into(),
                    });
                }
            }
        }
        Ok(Locked {
            inner,
            file: &self.lock_file,
        })
    }

    /// Maps a path argument to a normal workspace-relative path (`""` for the root).
    fn relative(&self, path: &str) -> Result<String, CheckpointError> {
        let invalid = |why| CheckpointError::InvalidPath {
            path: path.to_owned(),
            why,
        };
        if path.contains('\0') {
            return Err(invalid("it contains a NUL byte"));
        }
        let given = Path::new(path);
        let rest = if given.is_absolute() {
            given
                .strip_prefix(&self.workspace)
                .map_err(|_| invalid("it is outside the workspace"))?
        } else {
            given
        };
        let mut out: Vec<&str> = Vec::new();
        for c in rest.components() {
            match c {
                Component::Normal(n) => {
                    out.push(n.to_str().ok_or_else(|| invalid("it is not UTF-8"))?);
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if out.pop().is_none() {
                        return Err(invalid("it is outside the workspace"));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(invalid("it is outside the workspace"));
                }
            }
        }
        Ok(out.join("/"))
    }

    /// Finds the checkpoint `id` names.
    pub(crate) fn resolve<'a>(
        &self,
        index: &'a index::Index,
        id: &str,
    ) -> Result<&'a index::Record, CheckpointError> {
        let newest = || {
            index
                .records
                .iter()
                .rev()
                .take(5)
                .map(|r| r.id.clone())
                .collect()
        };
        let want = id.trim().to_ascii_lowercase();
        if want.len() < 4 || want.len() > 40 || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::UnknownCheckpoint {
                id: shorten(id),
                newest: newest(),
            });
        }
        let found: Vec<&index::Record> = index
            .records
            .iter()
            .filter(|r| r.commit.starts_with(&want))
            .collect();
        match found.as_slice() {
            [one] => Ok(one),
            [] => Err(CheckpointError::UnknownCheckpoint {
                id: shorten(id),
                newest: newest(),
            }),
            many => Err(CheckpointError::Ambiguous {
                id: shorten(id),
                matches: many.iter().rev().take(5).map(|r| r.id.clone()).collect(),
            }),
        }
    }

    /// An error reading the store's file or folder `name`.
    pub(crate) fn store_err(&self, name: &str, e: io::Error) -> CheckpointError {
        CheckpointError::Store {
            path: self.store_dir.join(name),
            source: e,
        }
    }
}

/// A model's argument echoed in a message: at most 64 characters, control characters
/// replaced.
fn shorten(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// A size in words: "8 MiB", "512 KiB", "1000 bytes".
pub(crate) fn size_words(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// `list` cut to `max` entries and one summary entry.
pub(crate) fn bounded(list: &[Skipped], max: usize) -> Vec<Skipped> {
    if list.len() <= max + 1 {
        return list.to_vec();
    }
    let mut out = list[..max].to_vec();
    out.push(Skipped::new(
        "...",
        format!("and {} more not listed", list.len() - max),
    ));
    out
}

#[cfg(test)]
mod tests;
