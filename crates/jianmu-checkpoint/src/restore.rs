//! Restoring a checkpoint: compare it with the workspace as a snapshot sees it, then
//! remove what the checkpoint lacks (deepest first), write what differs (parents
//! first) and give folders their modes (deepest first, so a read-only folder is
//! filled before it is closed). Paths snapshots leave out are never touched.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::FileType;
use rustix::io::Errno;

use crate::fsops::{self, WriteError, split};
use crate::manifest::{self, Manifest, Node};
use crate::object::{Kind, StreamError};
use crate::{CheckpointError, Inner, Restored, Skipped, Store, bounded, scan};

/// Entries of [`Restored::left`] listed by name.
const LISTED: usize = 100;
/// Longer than any symbolic link target the kernel accepts.
const MAX_LINK: u64 = 64 << 10;

pub(crate) fn restore(
    store: &Store,
    inner: &mut Inner,
    id: &str,
    dry_run: bool,
) -> Result<Restored, CheckpointError> {
    let index = store.refresh(inner)?;
    let record = store.resolve(&index, id)?;
    let commit = record.oid()?;
    let label = format!("before restoring {}", record.id);
    let (target, _) = manifest::load(&store.objects, &commit)?;
    let (current, undo) = if dry_run {
        (scan::scan(store, inner, false)?.manifest, None)
    } else {
        let (_, current, undo) = store.snapshot_locked(inner, &label, &[commit])?;
        (current, Some(undo))
    };
    let root = fsops::open_dir(&store.root, "").map_err(|e| CheckpointError::Workspace {
        path: store.workspace.clone(),
        source: e,
    })?;
    let mut run = Run {
        store,
        root,
        dry_run,
        target: &target,
        current: &current,
        protected: target
            .skipped
            .iter()
            .filter(|s| s.path != "..." && s.path != ".")
            .map(|s| s.path.as_str())
            .collect(),
        skipped_now: current
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.why.as_str()))
            .collect(),
        written: Vec::new(),
        removed: Vec::new(),
        left: Vec::new(),
        blocked: BTreeSet::new(),
        gone: HashSet::new(),
        made: HashSet::new(),
        modes: BTreeMap::new(),
        parent: None,
    };
    // Past the undo checkpoint, an error names it: what was done can be undone.
    let interrupted = |e: CheckpointError| match &undo {
        Some(undo) => CheckpointError::Interrupted {
            undo: undo.clone(),
            failure: Box::new(e),
        },
        None => e,
    };
    run.remove().map_err(interrupted)?;
    run.write().map_err(interrupted)?;
    run.set_modes();
    for s in &target.skipped {
        run.left.push(Skipped::new(
            s.path.clone(),
            format!("the checkpoint could not store it: {}", s.why),
        ));
    }
    if target.partial {
        run.left.push(Skipped::new(
            "...",
            "the checkpoint is partial (over its limits), so paths it lacks were kept",
        ));
    }
    Ok(Restored {
        undo,
        written: run.written,
        removed: run.removed,
        left: bounded(&run.left, LISTED),
        dry_run,
    })
}

struct Run<'a> {
    store: &'a Store,
    root: OwnedFd,
    dry_run: bool,
    target: &'a Manifest,
    current: &'a Manifest,
    /// Paths the checkpoint skipped: it may have had them, so they and what lies
    /// below them are never removed.
    protected: BTreeSet<&'a str>,
    /// Paths the workspace has that snapshots skip now, and why.
    skipped_now: HashMap<&'a str, &'a str>,
    written: Vec<String>,
    removed: Vec<String>,
    left: Vec<Skipped>,
    /// Paths that could not be removed or made; nothing is written through them.
    blocked: BTreeSet<String>,
    /// Paths removed (or, in a dry run, that would be).
    gone: HashSet<String>,
    /// In a dry run: folders that would be made.
    made: HashSet<String>,
    /// Folders whose mode to set at the end, deepest last in order.
    modes: BTreeMap<String, u32>,
    /// The last parent folder opened, reused for its next entries.
    parent: Option<(String, std::rc::Rc<OwnedFd>)>,
}

fn is_access(e: &io::Error) -> bool {
    e.raw_os_error() == Some(Errno::ACCESS.raw_os_error())
}

impl Run<'_> {
    /// Whether `path` or a folder above it was skipped by the checkpoint.
    fn protected(&self, path: &str) -> bool {
        let mut at = path;
        loop {
            if self.protected.contains(at) {
                return true;
            }
            match at.rfind('/') {
                Some(i) => at = &at[..i],
                None => return false,
            }
        }
    }

    /// Whether something already left lies at or below `path`.
    fn blocked_within(&self, path: &str) -> bool {
        let below = format!("{path}/");
        self.blocked.contains(path)
            || self
                .blocked
                .range(below.clone()..)
                .next()
                .is_some_and(|p| p.starts_with(&below))
    }

    /// Whether a folder above `path` could not be removed or made.
    fn blocked_above(&self, path: &str) -> bool {
        let mut at = path;
        while let Some(i) = at.rfind('/') {
            at = &at[..i];
            if self.blocked.contains(at) {
                return true;
            }
        }
        false
    }

    fn leave(&mut self, path: &str, why: String) {
        self.blocked.insert(path.to_owned());
        self.left.push(Skipped::new(path, why));
    }

    /// The folder `rel`, opened without following links (the last one reused).
    fn open_parent(&mut self, rel: &str) -> io::Result<std::rc::Rc<OwnedFd>> {
        if let Some((path, fd)) = &self.parent
            && path == rel
        {
            return Ok(std::rc::Rc::clone(fd));
        }
        let fd = std::rc::Rc::new(fsops::open_dir(&self.root, rel)?);
        self.parent = Some((rel.to_owned(), std::rc::Rc::clone(&fd)));
        Ok(fd)
    }

    /// Runs `op` in the folder `parent`; if the folder's own permissions refuse it
    /// (a read-only folder), opens the folder to its owner, runs `op` again, and
    /// notes the folder's mode to put back at the end.
    fn in_folder<T>(
        &mut self,
        parent: &str,
        mut op: impl FnMut(&OwnedFd) -> io::Result<T>,
    ) -> io::Result<T> {
        let dir = self.open_parent(parent)?;
        match op(&dir) {
            Err(e) if is_access(&e) && !self.modes.contains_key(parent) => {
                let (up, name) = if parent.is_empty() {
                    ("", "")
                } else {
                    split(parent)
                };
                let up_dir = fsops::open_dir(&self.root, up)?;
                let old = fsops::mode_at(&up_dir, name)?;
                fsops::chmod_dir(&up_dir, name, old | 0o700)?;
                let back = match self.target.nodes.get(parent) {
                    Some(Node::Dir { mode }) => *mode,
                    _ if parent.is_empty() => self.target.root_mode,
                    _ => old,
                };
                self.modes.insert(parent.to_owned(), back);
                op(&dir)
            }
            other => other,
        }
    }

    /// Removes what the workspace has and the checkpoint lacks, or has as another
    /// kind of thing, deepest first.
    fn remove(&mut self) -> Result<(), CheckpointError> {
        let current = self.current;
        for (path, cur) in current.nodes.iter().rev() {
            let want = self.target.nodes.get(path);
            match want {
                Some(t) if t.same_kind(cur) => continue,
                Some(_) => {}
                None if self.protected(path) || self.target.partial => continue,
                None => {}
            }
            let (parent, name) = split(path);
            if let Node::Dir { .. } = cur {
                if self.blocked_within(path) {
                    self.blocked.insert(path.clone());
                    continue;
                }
                let done = if self.dry_run {
                    if self.would_empty(path) {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(Errno::NOTEMPTY.raw_os_error()))
                    }
                } else {
                    self.in_folder(parent, |dir| fsops::remove_dir(dir, name))
                };
                match done {
                    Ok(()) => {
                        self.gone.insert(path.clone());
                        self.removed.push(path.clone());
                    }
                    Err(e) if e.raw_os_error() == Some(Errno::NOTEMPTY.raw_os_error()) => self
                        .leave(
                            path,
                            "not removed: it holds files that snapshots leave out".to_owned(),
                        ),
                    Err(e) => self.leave(path, format!("not removed: {e}")),
                }
            } else {
                let done = if self.dry_run {
                    Ok(())
                } else {
                    self.in_folder(parent, |dir| fsops::remove_file(dir, name))
                };
                match done {
                    Ok(()) => {
                        self.gone.insert(path.clone());
                        self.removed.push(path.clone());
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        self.gone.insert(path.clone());
                    }
                    Err(e) => self.leave(path, format!("not removed: {e}")),
                }
            }
        }
        self.parent = None;
        Ok(())
    }

    /// In a dry run: whether the folder would be empty once the planned removals
    /// are done.
    fn would_empty(&self, path: &str) -> bool {
        let Ok(entries) = self.store.root.read_dir(path) else {
            return true;
        };
        entries.flatten().all(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| self.gone.contains(&format!("{path}/{n}")))
        })
    }

    /// Writes what the checkpoint has and the workspace lacks or has otherwise,
    /// parents first.
    fn write(&mut self) -> Result<(), CheckpointError> {
        let target = self.target;
        for (path, want) in &target.nodes {
            if self.store.rules.excluded(std::path::Path::new(path)) {
                self.leave(
                    path,
                    "left as it is: it is excluded from checkpoints".to_owned(),
                );
                continue;
            }
            let cur = self
                .current
                .nodes
                .get(path)
                .filter(|_| !self.gone.contains(path));
            match (want, cur) {
                (Node::Dir { mode }, Some(Node::Dir { mode: now })) => {
                    if mode != now {
                        self.modes.insert(path.clone(), *mode);
                        self.written.push(path.clone());
                    }
                    continue;
                }
                (Node::File { id, mode }, Some(Node::File { id: i, mode: m }))
                    if id == i && mode == m =>
                {
                    continue;
                }
                (Node::Link { id }, Some(Node::Link { id: i })) if id == i => continue,
                _ => {}
            }
            if self.blocked_above(path) {
                self.leave(
                    path,
                    "not written: a folder on its path could not be made".to_owned(),
                );
                continue;
            }
            if self.blocked.contains(path) {
                self.leave(
                    path,
                    "not written: what is there now could not be removed".to_owned(),
                );
                continue;
            }
            let (parent, name) = split(path);
            if self.dry_run && self.made.contains(parent) {
                // Its folder would be made new: nothing can be in the way.
                if let Node::Dir { .. } = want {
                    self.made.insert(path.clone());
                }
                self.written.push(path.clone());
                continue;
            }
            if cur.is_none() && !self.gone.contains(path) {
                // Nothing a snapshot includes is there; something it leaves out may be.
                let there = match self.open_parent(parent) {
                    Ok(dir) => fsops::kind_at(&dir, name).ok().flatten(),
                    Err(e) if self.dry_run && e.kind() == io::ErrorKind::NotFound => None,
                    Err(e) => {
                        self.leave(
                            path,
                            format!(
                                "not written: a folder on its path is not a plain folder ({e})"
                            ),
                        );
                        continue;
                    }
                };
                match (there, want) {
                    (None, _) => {}
                    (Some(FileType::Directory), Node::Dir { .. }) => continue,
                    (Some(_), _) => {
                        let why = match self.skipped_now.get(path.as_str()) {
                            Some(why) => format!("left as it is: {why}"),
                            None => {
                                "left as it is: snapshots leave it out now (ignored)".to_owned()
                            }
                        };
                        self.leave(path, why);
                        continue;
                    }
                }
            }
            if self.dry_run {
                if let Node::Dir { .. } = want {
                    self.made.insert(path.clone());
                }
                self.written.push(path.clone());
                continue;
            }
            match self.put(path, parent, name, want) {
                Ok(()) => {
                    // Made anew where something else was removed: no longer gone.
                    self.gone.remove(path);
                    self.written.push(path.clone());
                }
                Err(Failed::Store(e)) => return Err(e),
                Err(Failed::Io(e)) => self.leave(path, format!("not written: {e}")),
            }
        }
        self.parent = None;
        Ok(())
    }

    /// Writes one path.
    fn put(&mut self, path: &str, parent: &str, name: &str, want: &Node) -> Result<(), Failed> {
        let store = self.store;
        let objects = &store.objects;
        match *want {
            Node::Dir { mode } => {
                self.in_folder(parent, |dir| fsops::make_dir(dir, name))?;
                self.modes.insert(path.to_owned(), mode);
                Ok(())
            }
            Node::Link { id } => {
                let target = objects
                    .read(&id, Kind::Blob, MAX_LINK)
                    .map_err(Failed::Store)?;
                self.in_folder(parent, |dir| fsops::write_link(dir, name, &target))?;
                Ok(())
            }
            Node::File { id, mode } => {
                let mut store_error = None;
                let done = self.in_folder(parent, |dir| {
                    match fsops::write_file(dir, name, mode, |out| {
                        objects.copy_blob(&id, out).map(drop)
                    }) {
                        Ok(()) => Ok(()),
                        Err(WriteError::Io(e)) => Err(e),
                        Err(WriteError::Fill(StreamError::Store(e))) => {
                            store_error = Some(e);
                            Err(io::Error::other("the store failed"))
                        }
                        Err(WriteError::Fill(StreamError::Write(e) | StreamError::Read(e))) => {
                            Err(e)
                        }
                    }
                });
                if let Some(e) = store_error {
                    return Err(Failed::Store(e));
                }
                done.map_err(Failed::Io)
            }
        }
    }

    /// Gives folders their modes, deepest first, the root last.
    fn set_modes(&mut self) {
        if self.current.root_mode != self.target.root_mode {
            self.modes.insert(String::new(), self.target.root_mode);
            self.written.push(".".to_owned());
        }
        if self.dry_run {
            return;
        }
        let modes = std::mem::take(&mut self.modes);
        for (path, mode) in modes.iter().rev() {
            if self.gone.contains(path) {
                continue;
            }
            let (parent, name) = if path.is_empty() {
                ("", "")
            } else {
                split(path)
            };
            let done = fsops::open_dir(&self.root, parent)
                .and_then(|dir| fsops::chmod_dir(&dir, name, *mode));
            if let Err(e) = done {
                let shown = if path.is_empty() { "." } else { path.as_str() };
                self.left
                    .push(Skipped::new(shown, format!("its mode was not set: {e}")));
            }
        }
    }
}

/// Why one path could not be written: the workspace (said in `left`), or the store
/// (an error).
enum Failed {
    Io(io::Error),
    Store(CheckpointError),
}

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Self {
        Failed::Io(e)
    }
}
