//! A checkpoint's content as a flat, sorted map of paths, and the two ways between it
//! and the store: the git trees and `meta` blob written for it, and reading them back.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::object::{
    self, Kind, MAX_OBJECT, MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, Objects, Oid,
};
use crate::{CheckpointError, Skipped};

/// A `meta` blob larger than this is refused.
pub(crate) const MAX_META: u64 = 64 << 20;
/// A checkpoint with more entries than this is refused as damaged.
const MAX_ENTRIES: usize = 4_000_000;
/// Longer than any real path (`PATH_MAX` is 4096 bytes).
const MAX_PATH: usize = 4096;

/// One path of a checkpoint or of the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    /// A regular file: its blob and permission bits (`0o7777` at most).
    File { id: Oid, mode: u32 },
    /// A symbolic link: the blob of its target.
    Link { id: Oid },
    /// A folder and its permission bits.
    Dir { mode: u32 },
}

impl Node {
    /// The full `st_mode`-style mode, as diffs show it.
    pub(crate) fn full_mode(&self) -> u32 {
        match *self {
            Node::File { mode, .. } => 0o100000 | mode,
            Node::Link { .. } => MODE_LINK,
            Node::Dir { mode } => MODE_TREE | mode,
        }
    }

    pub(crate) fn blob(&self) -> Option<Oid> {
        match *self {
            Node::File { id, .. } | Node::Link { id } => Some(id),
            Node::Dir { .. } => None,
        }
    }

    pub(crate) fn same_kind(&self, other: &Node) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// The default permission bits git's mode stands for.
fn default_mode(git_mode: u32) -> u32 {
    if git_mode == MODE_EXEC { 0o755 } else { 0o644 }
}

fn git_mode(mode: u32) -> u32 {
    if mode & 0o100 != 0 {
        MODE_EXEC
    } else {
        MODE_FILE
    }
}

/// The content of a checkpoint, or of the workspace now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Manifest {
    /// Every included path but the root, sorted by bytes.
    pub(crate) nodes: BTreeMap<String, Node>,
    /// The root folder's permission bits.
    pub(crate) root_mode: u32,
    /// What was left out and why.
    pub(crate) skipped: Vec<Skipped>,
    /// Paths may be missing that were there: the entry limit was reached, or the
    /// skipped list itself was cut.
    pub(crate) partial: bool,
    /// Files and links, and their total size.
    pub(crate) files: usize,
    pub(crate) bytes: u64,
}

/// The `meta` blob: what git's tree cannot say. Modes are octal strings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) format: u32,
    pub(crate) label: String,
    pub(crate) time: u64,
    /// A number no other checkpoint of the store has, so equal states taken in the
    /// same second still make distinct commits.
    pub(crate) seq: u64,
    /// The root folder's mode.
    pub(crate) root: String,
    /// Files whose permission bits are not git's 644 or 755.
    pub(crate) modes: BTreeMap<String, String>,
    /// Every folder but the root, with its mode.
    pub(crate) dirs: BTreeMap<String, String>,
    /// Folders with no file or link below them, which git's tree cannot hold.
    pub(crate) empty: Vec<String>,
    pub(crate) skipped: Vec<Skipped>,
    #[serde(default)]
    pub(crate) partial: bool,
    pub(crate) files: usize,
    pub(crate) bytes: u64,
}

fn octal(mode: u32) -> String {
    format!("{mode:o}")
}

fn parse_octal(s: &str, what: &str) -> Result<u32, CheckpointError> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| meta_corrupt(&format!("the mode of `{what}` is malformed")))
}

fn meta_corrupt(why: &str) -> CheckpointError {
    CheckpointError::Corrupt {
        what: "a checkpoint's meta".to_owned(),
        why: why.to_owned(),
    }
}

impl Meta {
    pub(crate) fn new(m: &Manifest, label: &str, time: u64, seq: u64) -> Meta {
        let mut modes = BTreeMap::new();
        let mut dirs = BTreeMap::new();
        let mut full: BTreeSet<&str> = BTreeSet::new();
        for (path, node) in &m.nodes {
            match *node {
                Node::File { mode, .. } => {
                    if mode != default_mode(git_mode(mode)) {
                        modes.insert(path.clone(), octal(mode));
                    }
                    mark_parents(path, &mut full);
                }
                Node::Link { .. } => mark_parents(path, &mut full),
                Node::Dir { mode } => {
                    dirs.insert(path.clone(), octal(mode));
                }
            }
        }
        let empty = dirs
            .keys()
            .filter(|d| !full.contains(d.as_str()))
            .cloned()
            .collect();
        Meta {
            format: 1,
            label: label.to_owned(),
            time,
            seq,
            root: octal(m.root_mode),
            modes,
            dirs,
            empty,
            skipped: m.skipped.clone(),
            partial: m.partial,
            files: m.files,
            bytes: m.bytes,
        }
    }

    /// The SHA-1 of everything but label, time and sequence number.
    pub(crate) fn state(&self) -> Oid {
        let bare = Meta {
            label: String::new(),
            time: 0,
            seq: 0,
            ..self.clone()
        };
        object::hash_bytes(&serde_json::to_vec(&bare).unwrap_or_default())
    }
}

/// Adds every folder above `path` to `set`.
fn mark_parents<'a>(path: &'a str, set: &mut BTreeSet<&'a str>) {
    let mut at = path;
    while let Some(i) = at.rfind('/') {
        at = &at[..i];
        if !set.insert(at) {
            break;
        }
    }
}

/// One entry of a tree being built, borrowing its name from the manifest.
struct Ent<'a> {
    mode: u32,
    name: &'a str,
    id: Oid,
}

/// Git's order of tree entries: by name, a tree's name compared as if it ended in
/// `/` (`git fsck` checks it). Walking paths in byte order nearly always gives it.
fn git_order(a: &Ent<'_>, b: &Ent<'_>) -> std::cmp::Ordering {
    let slash = |e: &Ent<'_>| -> &'static [u8] { if e.mode == MODE_TREE { b"/" } else { b"" } };
    let ka = a.name.as_bytes().iter().chain(slash(a));
    let kb = b.name.as_bytes().iter().chain(slash(b));
    ka.cmp(kb)
}

/// The bytes of a tree object with these entries, sorted here if need be.
fn encode(entries: &mut [Ent<'_>], out: &mut Vec<u8>) {
    if !entries.is_sorted_by(|a, b| git_order(a, b).is_le()) {
        entries.sort_by(git_order);
    }
    out.clear();
    for e in entries.iter() {
        let mode: &[u8] = match e.mode {
            MODE_EXEC => b"100755",
            MODE_LINK => b"120000",
            MODE_TREE => b"40000",
            _ => b"100644",
        };
        out.extend_from_slice(mode);
        out.push(b' ');
        out.extend_from_slice(e.name.as_bytes());
        out.push(0);
        out.extend_from_slice(&e.id.0);
    }
}

/// Writes the trees of `m` (those not known or stored already) and returns the id
/// of its root tree: the `workspace` tree. Folders with nothing below them are left
/// out, as git leaves them out; `meta` names them.
pub(crate) fn write_trees(
    m: &Manifest,
    objects: &Objects,
    known: &mut HashSet<Oid>,
    added: &mut u64,
) -> Result<Oid, CheckpointError> {
    let mut stack: Vec<(&str, Vec<Ent<'_>>)> = vec![("", Vec::new())];
    let mut buf = Vec::new();
    /// Closes the innermost open folder: writes its tree and adds it to its parent.
    fn finish<'a>(
        stack: &mut Vec<(&'a str, Vec<Ent<'a>>)>,
        buf: &mut Vec<u8>,
        objects: &Objects,
        known: &mut HashSet<Oid>,
        added: &mut u64,
    ) -> Result<Option<Oid>, CheckpointError> {
        let Some((path, mut entries)) = stack.pop() else {
            return Ok(None);
        };
        encode(&mut entries, buf);
        let id = objects.put(Kind::Tree, buf, known, added)?;
        if let Some((_, parent)) = stack.last_mut() {
            let name = path.rsplit('/').next().unwrap_or(path);
            parent.push(Ent {
                mode: MODE_TREE,
                name,
                id,
            });
        }
        Ok(Some(id))
    }
    for (path, node) in &m.nodes {
        let (mode, id) = match *node {
            Node::File { id, mode } => (git_mode(mode), id),
            Node::Link { id } => (MODE_LINK, id),
            Node::Dir { .. } => continue,
        };
        let (parent, name) = match path.rfind('/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => ("", path.as_str()),
        };
        while stack.len() > 1 && !within(parent, stack[stack.len() - 1].0) {
            finish(&mut stack, &mut buf, objects, known, added)?;
        }
        let top = stack[stack.len() - 1].0;
        if parent != top {
            // Open every folder between the open one and this file's.
            let start = if top.is_empty() { 0 } else { top.len() + 1 };
            let mut at = start;
            while at <= parent.len() {
                let end = parent[at..].find('/').map_or(parent.len(), |i| at + i);
                stack.push((&parent[..end], Vec::new()));
                at = end + 1;
            }
        }
        if let Some((_, entries)) = stack.last_mut() {
            entries.push(Ent { mode, name, id });
        }
    }
    let mut root = None;
    while !stack.is_empty() {
        root = finish(&mut stack, &mut buf, objects, known, added)?;
    }
    root.ok_or_else(|| meta_corrupt("no root tree"))
}

/// Whether the folder `path` is `dir` or lies below it.
fn within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// Reads the checkpoint `commit` back: its commit, root tree, `meta` and the whole
/// `workspace` tree. The entry count, path lengths and object sizes are bounded.
pub(crate) fn load(objects: &Objects, commit: &Oid) -> Result<(Manifest, Meta), CheckpointError> {
    let data = objects.read(commit, Kind::Commit, MAX_OBJECT)?;
    let root = object::commit_tree(commit, &data)?;
    let entries = object::parse_tree(&root, &objects.read(&root, Kind::Tree, MAX_OBJECT)?)?;
    let find = |name: &str, mode: u32| {
        entries
            .iter()
            .find(|e| e.name == name && e.mode == mode)
            .map(|e| e.id)
            .ok_or_else(|| object::corrupt(&root, &format!("the root tree has no `{name}`")))
    };
    let meta_id = find("meta", MODE_FILE)?;
    let tree = find("workspace", MODE_TREE)?;
    let meta_bytes = objects.read(&meta_id, Kind::Blob, MAX_META)?;
    let meta: Meta = serde_json::from_slice(&meta_bytes)
        .map_err(|_| meta_corrupt("it is not the expected JSON"))?;
    let mut m = Manifest {
        root_mode: parse_octal(&meta.root, ".")?,
        skipped: meta.skipped.clone(),
        partial: meta.partial,
        files: meta.files,
        bytes: meta.bytes,
        ..Manifest::default()
    };
    let mut todo = vec![(String::new(), tree)];
    while let Some((prefix, id)) = todo.pop() {
        let data = objects.read(&id, Kind::Tree, MAX_OBJECT)?;
        for e in object::parse_tree(&id, &data)? {
            let path = if prefix.is_empty() {
                e.name
            } else {
                format!("{prefix}/{}", e.name)
            };
            if path.len() > MAX_PATH || m.nodes.len() >= MAX_ENTRIES {
                return Err(object::corrupt(&id, "it holds too many or too long paths"));
            }
            let node = match e.mode {
                MODE_TREE => {
                    let mode = match meta.dirs.get(&path) {
                        Some(s) => parse_octal(s, &path)?,
                        None => 0o755,
                    };
                    todo.push((path.clone(), e.id));
                    Node::Dir { mode }
                }
                MODE_LINK => Node::Link { id: e.id },
                git => {
                    let mode = match meta.modes.get(&path) {
                        Some(s) => parse_octal(s, &path)?,
                        None => default_mode(git),
                    };
                    Node::File { id: e.id, mode }
                }
            };
            m.nodes.insert(path, node);
        }
    }
    for (path, mode) in &meta.dirs {
        if path.len() > MAX_PATH || !path.split('/').all(object::valid_name) {
            return Err(meta_corrupt("a folder's path is malformed"));
        }
        if m.nodes.len() >= MAX_ENTRIES {
            return Err(meta_corrupt("it lists too many folders"));
        }
        let mode = parse_octal(mode, path)?;
        m.nodes.entry(path.clone()).or_insert(Node::Dir { mode });
    }
    // A folder meta names below a file would make the checkpoint impossible to
    // write back; every folder's parents must be folders.
    for path in m.nodes.keys() {
        let mut at = path.as_str();
        while let Some(i) = at.rfind('/') {
            at = &at[..i];
            match m.nodes.get(at) {
                Some(Node::Dir { .. }) => {}
                _ => {
                    return Err(meta_corrupt(
                        "a path lies below something that is not a folder",
                    ));
                }
            }
        }
    }
    Ok((m, meta))
}
