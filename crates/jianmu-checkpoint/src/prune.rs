//! Pruning: dropping the oldest checkpoints past the count and size limits (never the
//! newest), then a mark-and-sweep of the loose objects no remaining checkpoint
//! reaches. The sweep runs once every few drops (and whenever the size limit is
//! passed), since marking reads every kept checkpoint's trees.

use std::collections::{HashMap, HashSet};
use std::io;

use crate::index::{self, Index};
use crate::object::{self, Kind, MAX_OBJECT, MODE_TREE, Objects, Oid};
use crate::{CheckpointError, Inner, Store};

/// Drops checkpoints past the limits, except the newest and `keep`. Returns the ids
/// dropped and whether objects were swept (then `inner`'s cache was trimmed and
/// must be saved).
pub(crate) fn prune(
    store: &Store,
    inner: &mut Inner,
    index: &mut Index,
    keep: &[Oid],
) -> Result<(Vec<String>, bool), CheckpointError> {
    let settings = &store.settings;
    let max_count = settings.max_checkpoints.max(1);
    let over_bytes = index.header.store_bytes > settings.max_store_bytes;
    let n = index.records.len();
    if n <= max_count && !over_bytes {
        return Ok((Vec::new(), false));
    }
    let commits = index
        .records
        .iter()
        .map(index::Record::oid)
        .collect::<Result<Vec<_>, _>>()?;
    let must: Vec<bool> = (0..n)
        .map(|i| i + 1 == n || keep.contains(&commits[i]))
        .collect();
    let mut drop = vec![false; n];
    let mut room = max_count.saturating_sub(must.iter().filter(|m| **m).count());
    for i in (0..n).rev() {
        if must[i] {
            continue;
        }
        if room > 0 {
            room -= 1;
        } else {
            drop[i] = true;
        }
    }
    if over_bytes {
        // Keep the newest checkpoints whose objects together fit; drop the rest.
        let mut sizes: HashMap<Oid, u64> = HashMap::new();
        let mut total = 0u64;
        for i in (0..n).filter(|&i| must[i]) {
            for (id, size) in reach_sized(&store.objects, &commits[i], &sizes)? {
                total += size;
                sizes.insert(id, size);
            }
        }
        let mut full = false;
        for i in (0..n).rev() {
            if must[i] || drop[i] {
                continue;
            }
            if full {
                drop[i] = true;
                continue;
            }
            let new = reach_sized(&store.objects, &commits[i], &sizes)?;
            let more: u64 = new.iter().map(|(_, s)| s).sum();
            if total + more > settings.max_store_bytes {
                drop[i] = true;
                full = true;
            } else {
                total += more;
                sizes.extend(new);
            }
        }
    }
    let mut dropped = Vec::new();
    let mut kept = Vec::new();
    for (i, record) in std::mem::take(&mut index.records).into_iter().enumerate() {
        if drop[i] {
            dropped.push(record);
        } else {
            kept.push(record);
        }
    }
    index.records = kept;
    if dropped.is_empty() {
        return Ok((Vec::new(), false));
    }
    // The list no longer names them before any object goes, so a crash in between
    // leaves unreachable objects, never a checkpoint with missing ones.
    index.header.unswept += dropped.len();
    inner.stamp = Some(index.save(store)?);
    for record in &dropped {
        match store.store.remove_file(index::ref_path(&record.id)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(store.store_err("refs/checkpoints", e)),
        }
    }
    let swept = over_bytes || index.header.unswept >= (max_count / 8).max(1);
    if swept {
        sweep(store, inner, index)?;
        index.header.unswept = 0;
        inner.stamp = Some(index.save(store)?);
    }
    Ok((dropped.into_iter().map(|r| r.id).collect(), swept))
}

/// Every object the commit reaches that is not in `seen`, once each.
fn reach(
    objects: &Objects,
    commit: &Oid,
    seen: &dyn Fn(&Oid) -> bool,
) -> Result<Vec<Oid>, CheckpointError> {
    let mut out = vec![*commit];
    let mut local: HashSet<Oid> = HashSet::new();
    let data = objects.read(commit, Kind::Commit, MAX_OBJECT)?;
    let mut trees = vec![object::commit_tree(commit, &data)?];
    while let Some(tree) = trees.pop() {
        if seen(&tree) || !local.insert(tree) {
            continue;
        }
        out.push(tree);
        let data = objects.read(&tree, Kind::Tree, MAX_OBJECT)?;
        for e in object::parse_tree(&tree, &data)? {
            if e.mode == MODE_TREE {
                trees.push(e.id);
            } else if !seen(&e.id) && local.insert(e.id) {
                out.push(e.id);
            }
        }
    }
    Ok(out)
}

/// [`reach`] with each object's size on disk.
fn reach_sized(
    objects: &Objects,
    commit: &Oid,
    sizes: &HashMap<Oid, u64>,
) -> Result<Vec<(Oid, u64)>, CheckpointError> {
    let ids = reach(objects, commit, &|id| sizes.contains_key(id))?;
    Ok(ids
        .into_iter()
        .map(|id| {
            let size = objects
                .dir()
                .symlink_metadata(id.loose_path())
                .map(|m| m.len())
                .unwrap_or(0);
            (id, size)
        })
        .collect())
}

/// Deletes every loose object (and leftover temporary file) no checkpoint in
/// `index` reaches, and refs of checkpoints it does not list; recounts the store's
/// bytes.
fn sweep(store: &Store, inner: &mut Inner, index: &mut Index) -> Result<(), CheckpointError> {
    let mut marked: HashSet<Oid> = HashSet::new();
    for record in &index.records {
        let ids = reach(&store.objects, &record.oid()?, &|id| marked.contains(id))?;
        marked.extend(ids);
    }
    let objects = store.objects.dir();
    let err = |e| store.store_err("objects", e);
    let mut total = 0u64;
    for entry in objects.entries().map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if object::is_temp_name(name) {
            let _ = objects.remove_file(name);
            continue;
        }
        if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let sub = objects.open_dir(name).map_err(err)?;
        let mut left = 0usize;
        for file in sub.entries().map_err(err)? {
            let file = file.map_err(err)?;
            let rest = file.file_name();
            let id = rest
                .to_str()
                .and_then(|r| object::Oid::from_hex(&format!("{name}{r}")));
            match id {
                Some(id) if marked.contains(&id) => {
                    total += file.metadata().map(|m| m.len()).unwrap_or(0);
                    left += 1;
                }
                _ => match sub.remove_file(&rest) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(err(e)),
                },
            }
        }
        if left == 0 {
            let _ = objects.remove_dir(name);
        }
    }
    // Temporary files of list, cache and ref writes a crash left behind.
    for dir in [".", "refs/checkpoints"] {
        if let Ok(entries) = store.store.read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_str().is_some_and(index::is_temp_name) {
                    let _ = store
                        .store
                        .remove_file(std::path::Path::new(dir).join(&name));
                }
            }
        }
    }
    let ids: HashSet<&str> = index.records.iter().map(|r| r.id.as_str()).collect();
    if let Ok(refs) = store.store.read_dir("refs/checkpoints") {
        for entry in refs.flatten() {
            let name = entry.file_name();
            if name
                .to_str()
                .is_none_or(|n| !ids.contains(n) && !index::is_temp_name(n))
            {
                let _ = store
                    .store
                    .remove_file(index::ref_path(&name.to_string_lossy()));
            }
        }
    }
    inner.known.retain(|id| marked.contains(id));
    inner.cache.entries.retain(|_, e| marked.contains(&e.id));
    index.header.store_bytes = total;
    Ok(())
}
