//! The list of checkpoints, `checkpoints.jsonl`: a header line, then one line per
//! checkpoint, oldest first, rewritten atomically, so listing never walks objects;
//! and the refs and `HEAD` that let git see the same checkpoints.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::{Checkpoint, CheckpointError, Stamp, Store};

/// The list file's name in the store.
pub(crate) const FILE: &str = "checkpoints.jsonl";
/// A list file larger than this is refused (100 checkpoints take about 30 KB).
pub(crate) const MAX_BYTES: u64 = 16 << 20;

/// The first line.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    /// The format of this file: 1.
    pub(crate) format: u32,
    /// The bytes the store's objects take on disk, kept up to date as objects are
    /// written and recounted by each sweep.
    pub(crate) store_bytes: u64,
    /// The last sequence number given to a checkpoint.
    pub(crate) seq: u64,
    /// Checkpoints dropped since the last sweep of unreachable objects.
    #[serde(default)]
    pub(crate) unswept: usize,
}

/// One checkpoint's line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) commit: String,
    pub(crate) time: u64,
    pub(crate) label: String,
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    /// The `workspace` tree.
    pub(crate) tree: String,
    /// The SHA-1 of the meta with label, time and sequence left out: with `tree`,
    /// what makes two checkpoints hold the same state.
    pub(crate) state: String,
    pub(crate) seq: u64,
}

impl Record {
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            id: self.id.clone(),
            commit: self.commit.clone(),
            time: self.time,
            label: self.label.clone(),
            files: self.files,
            bytes: self.bytes,
        }
    }

    pub(crate) fn oid(&self) -> Result<crate::Oid, CheckpointError> {
        crate::Oid::from_hex(&self.commit).ok_or_else(|| corrupt("a commit id is malformed"))
    }
}

/// The whole list.
#[derive(Debug, Default, Clone)]
pub(crate) struct Index {
    pub(crate) header: Header,
    /// Oldest first.
    pub(crate) records: Vec<Record>,
}

fn corrupt(why: &str) -> CheckpointError {
    CheckpointError::Corrupt {
        what: FILE.to_owned(),
        why: why.to_owned(),
    }
}

impl Index {
    /// Reads the list; an empty one when the file is missing.
    pub(crate) fn load(store: &Store) -> Result<Index, CheckpointError> {
        let err = |e| store.store_err(FILE, e);
        let mut file = match store.store.open(FILE) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Index {
                    header: Header {
                        format: 1,
                        ..Header::default()
                    },
                    records: Vec::new(),
                });
            }
            Err(e) => return Err(err(e)),
        };
        let len = file.metadata().map_err(err)?.len();
        if len > MAX_BYTES {
            return Err(CheckpointError::TooLarge {
                what: FILE.to_owned(),
                size: len,
                limit: MAX_BYTES,
            });
        }
        let mut text = String::new();
        io::Read::read_to_string(&mut io::Read::take(&mut file, MAX_BYTES), &mut text)
            .map_err(|_| corrupt("it is not UTF-8 text"))?;
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Header = match lines.next() {
            Some(line) => {
                serde_json::from_str(line).map_err(|_| corrupt("its header is malformed"))?
            }
            None => Header {
                format: 1,
                ..Header::default()
            },
        };
        if header.format != 1 {
            return Err(corrupt("it has an unknown format"));
        }
        let records = lines
            .map(|line| {
                let r: Record =
                    serde_json::from_str(line).map_err(|_| corrupt("a line is malformed"))?;
                if crate::Oid::from_hex(&r.commit).is_none()
                    || r.id.len() != 12
                    || !r.commit.starts_with(&r.id)
                {
                    return Err(corrupt("a commit id is malformed"));
                }
                Ok(r)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Index { header, records })
    }

    /// Writes the list atomically and returns the new file's stamp.
    pub(crate) fn save(&self, store: &Store) -> Result<Option<Stamp>, CheckpointError> {
        let mut out = Vec::with_capacity(256 * (self.records.len() + 1));
        let line = |out: &mut Vec<u8>, v: &dyn erased::Json| -> Result<(), CheckpointError> {
            v.write_json(out)
                .map_err(|e| store.store_err(FILE, io::Error::other(e)))?;
            out.push(b'\n');
            Ok(())
        };
        line(&mut out, &self.header)?;
        for r in &self.records {
            line(&mut out, r)?;
        }
        write_atomic(&store.store, Path::new(FILE), &out).map_err(|e| store.store_err(FILE, e))?;
        Ok(stamp(&store.store))
    }
}

/// Serializing either line type through one closure.
mod erased {
    pub(crate) trait Json {
        fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()>;
    }

    impl<T: serde::Serialize> Json for T {
        fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
            serde_json::to_writer(out, self)
        }
    }
}

/// The list file's identity now, `None` when it is missing.
pub(crate) fn stamp(store: &Dir) -> Option<Stamp> {
    use cap_std::fs::MetadataExt;
    let m = store.metadata(FILE).ok()?;
    Some(Stamp {
        ino: m.ino(),
        len: m.len(),
        mtime: m
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(m.mtime_nsec()),
    })
}

/// Writes `data` to `name` in `dir` atomically: a temporary file beside it, then
/// `rename`.
pub(crate) fn write_atomic(dir: &Dir, name: &Path, data: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let file_name = name
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = name.with_file_name(format!(".{file_name}.tmp-{}-{n}", std::process::id()));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let done = rustix::fs::openat(dir, &tmp, flags, Mode::from_raw_mode(0o600))
        .map_err(io::Error::from)
        .and_then(|fd| {
            let mut file = std::fs::File::from(fd);
            file.write_all(data)?;
            rustix::fs::renameat(dir, &tmp, dir, name)?;
            Ok(())
        });
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
    }
    done
}

/// Whether `name` is one [`write_atomic`] gives its temporary files.
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// The ref naming a checkpoint.
pub(crate) fn ref_path(id: &str) -> PathBuf {
    Path::new("refs/checkpoints").join(id)
}
