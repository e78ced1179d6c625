//! Taking a snapshot: walk, write the trees, the `meta` blob and the commit, name it
//! with a ref and a line in the list, unless the newest checkpoint holds the same
//! state; then prune past the limits.

use crate::index::{self, Index, Record};
use crate::manifest::{self, Manifest, Meta};
use crate::object::{self, Kind, MODE_FILE, MODE_TREE, Oid, TreeEntry};
use crate::{CheckpointError, Inner, Snapshot, Store, bounded, cache::Cache, prune, scan};

/// Entries of [`Snapshot::skipped`] listed by name.
const LISTED: usize = 100;
/// Longer labels are cut.
const MAX_LABEL: usize = 500;

/// A label fit for a commit message and the list: one line, no control characters,
/// at most [`MAX_LABEL`] characters, never empty.
pub(crate) fn clean_label(label: &str) -> String {
    let one: String = label
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_LABEL)
        .collect();
    let trimmed = one.trim();
    if trimmed.is_empty() {
        "checkpoint".to_owned()
    } else {
        trimmed.to_owned()
    }
}

impl Store {
    /// Reads the list and makes sure the in-memory stat cache and known objects are
    /// still true of the store (another process may have pruned it).
    pub(crate) fn refresh(&self, inner: &mut Inner) -> Result<Index, CheckpointError> {
        let now = index::stamp(&self.store);
        if inner.stamp != Some(now) {
            inner.cache = Cache::load(&self.store);
            inner.known.clear();
            inner.stamp = Some(now);
        }
        Index::load(self)
    }

    /// [`Store::snapshot`] with the lock held; also returns the workspace's manifest.
    /// `keep`: commits pruning must not remove.
    pub(crate) fn snapshot_locked(
        &self,
        inner: &mut Inner,
        label: &str,
        keep: &[Oid],
    ) -> Result<(Snapshot, Manifest, String), CheckpointError> {
        let mut index = self.refresh(inner)?;
        let scanned = scan::scan(self, inner, true)?;
        let mut added = scanned.added;
        let m = scanned.manifest;
        let cache_changed = scanned.cache_changes > 0;
        let tree = manifest::write_trees(&m, &self.objects, &mut inner.known, &mut added)?;
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let label = clean_label(label);
        let seq = index.header.seq + 1;
        let meta = Meta::new(&m, &label, time, seq);
        let state = meta.state().hex();
        let skipped = bounded(&m.skipped, LISTED);
        if let Some(newest) = index.records.last()
            && newest.tree == tree.hex()
            && newest.state == state
        {
            let id = newest.id.clone();
            if cache_changed {
                self.save_cache(inner)?;
            }
            return Ok((
                Snapshot {
                    created: None,
                    unchanged: Some(id.clone()),
                    skipped,
                    pruned: Vec::new(),
                },
                m,
                id,
            ));
        }
        let meta_bytes = serde_json::to_vec(&meta)
            .map_err(|e| self.store_err("objects", std::io::Error::other(e)))?;
        let meta_id = self
            .objects
            .put(Kind::Blob, &meta_bytes, &mut inner.known, &mut added)?;
        let mut root = [
            TreeEntry {
                mode: MODE_FILE,
                name: "meta".to_owned(),
                id: meta_id,
            },
            TreeEntry {
                mode: MODE_TREE,
                name: "workspace".to_owned(),
                id: tree,
            },
        ];
        let root_data = object::encode_tree(&mut root);
        let root_id = self
            .objects
            .put(Kind::Tree, &root_data, &mut inner.known, &mut added)?;
        let commit_data = object::encode_commit(&root_id, time, &label);
        let commit = self
            .objects
            .put(Kind::Commit, &commit_data, &mut inner.known, &mut added)?;
        let hex = commit.hex();
        let id = hex[..12].to_owned();
        let line = format!("{hex}\n");
        index::write_atomic(&self.store, &index::ref_path(&id), line.as_bytes())
            .map_err(|e| self.store_err("refs/checkpoints", e))?;
        index::write_atomic(&self.store, std::path::Path::new("HEAD"), line.as_bytes())
            .map_err(|e| self.store_err("HEAD", e))?;
        let record = Record {
            id: id.clone(),
            commit: hex,
            time,
            label,
            files: m.files,
            bytes: m.bytes,
            tree: tree.hex(),
            state,
            seq,
        };
        let created = record.checkpoint();
        index.records.push(record);
        index.header.seq = seq;
        index.header.store_bytes += added;
        inner.stamp = Some(index.save(self)?);
        let mut keep = keep.to_vec();
        keep.push(commit);
        let (pruned, swept) = prune::prune(self, inner, &mut index, &keep)?;
        if cache_changed || swept {
            self.save_cache(inner)?;
        }
        Ok((
            Snapshot {
                created: Some(created),
                unchanged: None,
                skipped,
                pruned,
            },
            m,
            id,
        ))
    }

    fn save_cache(&self, inner: &Inner) -> Result<(), CheckpointError> {
        inner
            .cache
            .save(&self.store)
            .map_err(|e| self.store_err(crate::cache::FILE, e))
    }
}
