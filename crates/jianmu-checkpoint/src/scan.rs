//! Walking the workspace into a [`Manifest`]: which paths a snapshot includes, their
//! blobs (from the stat cache, or read through the root handle without following
//! links, and hashed while read) and what was skipped and why.

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};

use cap_std::fs::{OpenOptions, OpenOptionsExt};
use ignore::WalkBuilder;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::cache::{self, Cache, Stat};
use crate::manifest::{Manifest, Node};
use crate::object::{self, Hasher, Kind, Oid, StreamError};
use crate::{CheckpointError, Inner, Skipped, Store, size_words};

/// Files up to this size are read whole into one reused buffer, hashed, and written
/// only if new; larger ones are streamed.
const SMALL: u64 = 1 << 20;
/// At most this many skipped paths are kept in a checkpoint's meta.
const MAX_SKIPPED: usize = 10_000;
/// Entries past the file limit that are still listed by name.
const OVER_LISTED: usize = 100;

/// The result of a walk.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) manifest: Manifest,
    /// Entries of the store's stat cache that changed and are worth saving (a racy
    /// entry is hashed again next time anyway), or that it lost.
    pub(crate) cache_changes: usize,
    /// Bytes of objects written.
    pub(crate) added: u64,
}

/// Flags for reading a workspace file: never through a final symbolic link, never
/// blocking on a FIFO swapped in, never taking a terminal.
fn read_flags() -> i32 {
    (OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32
}

/// Nanoseconds since the epoch.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Collects skipped paths, at most [`MAX_SKIPPED`].
struct SkipList {
    list: Vec<Skipped>,
    dropped: usize,
}

impl SkipList {
    fn push(&mut self, path: &str, why: String) {
        if self.list.len() < MAX_SKIPPED {
            self.list.push(Skipped::new(path, why));
        } else {
            self.dropped += 1;
        }
    }
}

/// Files are stat'ed in batches of this many.
const BATCH: usize = 256;

/// Each file's stat data and, when the stat cache knows it unchanged, its blob.
type Stats = Vec<(std::io::Result<Stat>, Option<Oid>)>;

fn lstat(path: &PathBuf) -> std::io::Result<Stat> {
    std::fs::symlink_metadata(path).map(|m| Stat::of(&m))
}

/// `lstat`s a batch of paths, each relative to a handle on its folder (reused while
/// the folder stays the same), which spares the kernel the walk of every full path;
/// and looks each up in the stat cache.
fn lstat_batch(root: &Path, cache: &Cache, paths: &[PathBuf]) -> Stats {
    let mut folder: Option<(&Path, OwnedFd)> = None;
    paths
        .iter()
        .map(|path| {
            // Split at the last `/` by bytes (`Path::parent` parses components).
            let bytes = path.as_os_str().as_bytes();
            let Some(cut) = bytes.iter().rposition(|&b| b == b'/').filter(|&i| i > 0) else {
                return (lstat(path), None);
            };
            let parent = Path::new(std::ffi::OsStr::from_bytes(&bytes[..cut]));
            let name = std::ffi::OsStr::from_bytes(&bytes[cut + 1..]);
            if folder.as_ref().is_none_or(|(p, _)| *p != parent) {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                folder = rustix::fs::openat(rustix::fs::CWD, parent, flags, Mode::empty())
                    .ok()
                    .map(|fd| (parent, fd));
            }
            let stat = match &folder {
                Some((_, fd)) => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| Stat::of_raw(&st))
                    .map_err(Into::into),
                None => lstat(path),
            };
            let hit = stat.as_ref().ok().and_then(|stat| {
                let rel = relative(root, path)?.to_str()?;
                cache.hit(rel, stat)
            });
            (stat, hit)
        })
        .collect()
}

/// Walks the workspace and `lstat`s its files at the same time: the walk hands
/// batches of paths to a second thread, and joins it on the rest when done (on a
/// warm cache a stat is a system call of a microsecond or two, and a workspace has
/// thousands of files). Returns the walk's files, workspace-relative, and their
/// stat data in the same order.
fn walk_and_stat(w: &mut Walk<'_>, cache: &Cache) -> Result<(Vec<String>, Stats), CheckpointError> {
    let root = w.store.workspace.as_path();
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let (tx, rx) = mpsc::channel::<(usize, Vec<PathBuf>)>();
    let rx = Mutex::new(rx);
    let done: Mutex<Vec<(usize, Stats)>> = Mutex::new(Vec::new());
    let work = || {
        loop {
            let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
            let Ok((i, paths)) = job else { break };
            let stats = lstat_batch(root, cache, &paths);
            done.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((i, stats));
        }
    };
    let mut rels = Vec::new();
    let mut paths_kept: Vec<PathBuf> = Vec::new();
    std::thread::scope(|scope| {
        let mut tx = Some(tx);
        let mut worker = None;
        let mut batch = Vec::with_capacity(BATCH);
        let mut sent = 0usize;
        let mut send = |batch: &mut Vec<PathBuf>, tx: &Option<mpsc::Sender<_>>| {
            if let Some(tx) = tx {
                // The receiver lives until the scope ends.
                let _ = tx.send((sent, std::mem::take(batch)));
            }
            sent += 1;
        };
        let walked = w.run(&mut |rel, path| {
            rels.push(rel);
            batch.push(path);
            if batch.len() >= BATCH {
                if parallel && worker.is_none() {
                    worker = Some(scope.spawn(work));
                }
                send(&mut batch, &tx);
            }
        });
        if !batch.is_empty() {
            send(&mut batch, &tx);
        }
        drop(tx.take());
        work();
        if let Some(worker) = worker {
            let _ = worker.join();
        }
        walked
    })?;
    let mut done = done.into_inner().unwrap_or_else(PoisonError::into_inner);
    done.sort_by_key(|(i, _)| *i);
    let stats: Stats = done.into_iter().flat_map(|(_, s)| s).collect();
    if stats.len() != rels.len() {
        // Only a panicking stat could lose a batch; stat everything again here.
        paths_kept.extend(rels.iter().map(|r| root.join(r)));
        return Ok((rels, lstat_batch(root, cache, &paths_kept)));
    }
    Ok((rels, stats))
}

/// `path` relative to `root`, by bytes (`Path::strip_prefix` compares component by
/// component, which shows on every entry of a large walk).
fn relative<'p>(root: &Path, path: &'p Path) -> Option<&'p std::ffi::OsStr> {
    let root = root.as_os_str().as_bytes();
    let path = path.as_os_str().as_bytes();
    let rest = path.strip_prefix(root)?;
    let rest = if root.ends_with(b"/") {
        rest
    } else {
        rest.strip_prefix(b"/")?
    };
    (!rest.is_empty()).then(|| std::ffi::OsStr::from_bytes(rest))
}

/// The walk of the workspace: what it found besides regular files.
struct Walk<'a> {
    store: &'a Store,
    known: &'a mut HashSet<Oid>,
    write: bool,
    added: u64,
    manifest: Manifest,
    nodes: Vec<(String, Node)>,
    skipped: SkipList,
}

impl Walk<'_> {
    /// Walks, calling `on_file` with each regular file's relative and full path.
    fn run(&mut self, on_file: &mut dyn FnMut(String, PathBuf)) -> Result<(), CheckpointError> {
        let store = self.store;
        let settings = &store.settings;
        let rules = Arc::clone(&store.rules);
        // `.gitignore` files are read here, not by the walker, which would follow a
        // link (to `/dev/zero`) or wait on a FIFO forever.
        let ignores = Arc::new(crate::ignores::Ignores::default());
        let root = store.workspace.clone();
        let mut builder = WalkBuilder::new(&store.workspace);
        builder
            .standard_filters(false)
            .hidden(false)
            .ignore(false)
            .git_ignore(false)
            .git_global(false)
            .git_exclude(false)
            .require_git(false)
            .parents(false)
            .follow_links(false)
            .filter_entry(move |e| {
                e.depth() == 0
                    || !(rules.excluded_entry(e)
                        || ignores.ignored(
                            &root,
                            e.path(),
                            e.file_type().is_some_and(|t| t.is_dir()),
                        ))
            });
        let m = &mut self.manifest;
        let skipped = &mut self.skipped;
        let mut count = 0usize;
        let mut over = 0usize;
        let mut root_seen = false;
        for result in builder.build() {
            let entry = match result {
                Ok(entry) => entry,
                Err(err) => {
                    let why = match err.io_error() {
                        Some(e) => format!("unreadable: {e}"),
                        None => format!("unreadable: {err}"),
                    };
                    match error_path(&err).and_then(|p| p.strip_prefix(&store.workspace).ok()) {
                        Some(rel) if rel.as_os_str().is_empty() => {
                            return Err(CheckpointError::Workspace {
                                path: store.workspace.clone(),
                                source: std::io::Error::other(why),
                            });
                        }
                        Some(rel) => skipped.push(&rel.to_string_lossy(), why),
                        None => skipped.push(".", why),
                    }
                    continue;
                }
            };
            if entry.depth() == 0 {
                let meta = entry.metadata().map_err(|e| CheckpointError::Workspace {
                    path: store.workspace.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                m.root_mode = meta.mode() & 0o7777;
                root_seen = true;
                continue;
            }
            let Some(rel) = relative(&store.workspace, entry.path()) else {
                continue;
            };
            let Some(rel) = rel.to_str() else {
                skipped.push(
                    &rel.to_string_lossy(),
                    "unreadable: its name is not valid UTF-8".to_owned(),
                );
                continue;
            };
            let Some(file_type) = entry.file_type() else {
                continue;
            };
            count += 1;
            if count > settings.max_files {
                m.partial = true;
                if over == OVER_LISTED {
                    skipped.push(
                        "...",
                        format!(
                            "more entries over the {}-file limit were not counted",
                            settings.max_files
                        ),
                    );
                    break;
                }
                over += 1;
                skipped.push(rel, format!("over the {}-file limit", settings.max_files));
                continue;
            }
            if file_type.is_file() {
                let rel = rel.to_owned();
                on_file(rel, entry.into_path());
            } else if file_type.is_dir() {
                match entry.metadata() {
                    Ok(meta) => self.nodes.push((
                        rel.to_owned(),
                        Node::Dir {
                            mode: meta.mode() & 0o7777,
                        },
                    )),
                    Err(e) => skipped.push(rel, format!("unreadable: {e}")),
                }
            } else if file_type.is_symlink() {
                match store.root.read_link_contents(rel) {
                    Ok(target) => {
                        let bytes = target.as_os_str().as_bytes();
                        let id = object::hash(Kind::Blob, bytes);
                        if self.write {
                            store.objects.put_hashed(
                                id,
                                Kind::Blob,
                                bytes,
                                self.known,
                                &mut self.added,
                            )?;
                        }
                        m.files += 1;
                        m.bytes += bytes.len() as u64;
                        self.nodes.push((rel.to_owned(), Node::Link { id }));
                    }
                    Err(e) => skipped.push(rel, format!("unreadable: {e}")),
                }
            } else {
                let what = if file_type.is_socket() {
                    "a socket"
                } else if file_type.is_fifo() {
                    "a fifo"
                } else if file_type.is_block_device() || file_type.is_char_device() {
                    "a device"
                } else {
                    "a special file"
                };
                skipped.push(rel, what.to_owned());
            }
        }
        if !root_seen {
            return Err(CheckpointError::Workspace {
                path: store.workspace.clone(),
                source: std::io::Error::other("the folder could not be walked"),
            });
        }
        Ok(())
    }
}

/// Walks the workspace. With `write`, new blobs go into the store; without, files
/// are only hashed (for diffs and dry runs).
pub(crate) fn scan(store: &Store, inner: &mut Inner, write: bool) -> Result<Scan, CheckpointError> {
    let settings = &store.settings;
    let racy_after = now_ns().saturating_sub(inner.racy_ns);
    let cache = &mut inner.cache;
    let mut w = Walk {
        store,
        known: &mut inner.known,
        write,
        added: 0,
        manifest: Manifest::default(),
        nodes: Vec::new(),
        skipped: SkipList {
            list: Vec::new(),
            dropped: 0,
        },
    };
    let (files, stats) = walk_and_stat(&mut w, cache)?;
    let Walk {
        mut added,
        manifest: mut m,
        mut nodes,
        mut skipped,
        ..
    } = w;
    nodes.reserve(files.len());
    let before = cache.entries.len();
    let mut cache_changes = 0usize;
    // Files the cache had an entry for; fewer than its entries means some files are
    // gone since.
    let mut had = 0usize;
    let mut buf = Vec::new();
    let mut hashed = 0usize;
    for (rel, (lstat, hit)) in files.into_iter().zip(stats) {
        let lstat = match lstat {
            Ok(stat) if stat.mode & 0o170000 == 0o100000 => stat,
            Ok(_) => {
                skipped.push(
                    &rel,
                    "unreadable: it changed while the snapshot ran".to_owned(),
                );
                continue;
            }
            Err(e) => {
                skipped.push(&rel, format!("unreadable: {e}"));
                continue;
            }
        };
        if lstat.size > settings.max_file_bytes {
            skipped.push(&rel, too_large(settings.max_file_bytes));
            continue;
        }
        let (id, stat) = match hit {
            Some(id) => {
                had += 1;
                (id, lstat)
            }
            None => {
                hashed += 1;
                match read_file(store, &mut inner.known, &rel, write, &mut buf, &mut added)? {
                    Ok((id, stat)) => {
                        // Only blobs now in the store may enter the cache.
                        if write {
                            let racy = stat.mtime.max(stat.ctime) >= racy_after;
                            cache_changes += usize::from(!racy);
                            let entry = cache::Entry { stat, id, racy };
                            had += usize::from(cache.entries.insert(rel.clone(), entry).is_some());
                        }
                        (id, stat)
                    }
                    Err(why) => {
                        skipped.push(&rel, why);
                        continue;
                    }
                }
            }
        };
        m.files += 1;
        m.bytes += stat.size;
        nodes.push((
            rel,
            Node::File {
                id,
                mode: stat.mode & 0o7777,
            },
        ));
    }
    inner.hashed = hashed;
    if write && had < before {
        // Entries of files gone since (or skipped now): dropped, and worth saving.
        let seen: HashSet<&str> = nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::File { .. }))
            .map(|(p, _)| p.as_str())
            .collect();
        let count = cache.entries.len();
        cache.entries.retain(|k, _| seen.contains(k.as_str()));
        cache_changes += count - cache.entries.len();
    }
    // Sorted here so that building the map is a single pass.
    nodes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    m.nodes = nodes.into_iter().collect();
    // In path order, so that equal states give equal metas; summaries last.
    skipped
        .list
        .sort_by(|a, b| (a.path == "...", &a.path).cmp(&(b.path == "...", &b.path)));
    if skipped.dropped > 0 {
        m.partial = true;
        skipped.list.push(Skipped::new(
            "...",
            format!("and {} more skipped paths not listed", skipped.dropped),
        ));
    }
    m.skipped = skipped.list;
    Ok(Scan {
        manifest: m,
        cache_changes,
        added,
    })
}

pub(crate) fn too_large(limit: u64) -> String {
    format!("larger than {}", size_words(limit))
}

/// The path an error of the walk is about.
fn error_path(err: &ignore::Error) -> Option<&Path> {
    match err {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        ignore::Error::Loop { child, .. } => Some(child),
        _ => None,
    }
}

/// Reads and hashes the workspace file `rel` (and stores it with `write`): the
/// blob and the stat data of what was read, or why it was skipped.
pub(crate) fn read_file(
    store: &Store,
    known: &mut HashSet<Oid>,
    rel: &str,
    write: bool,
    buf: &mut Vec<u8>,
    added: &mut u64,
) -> Result<Result<(Oid, Stat), String>, CheckpointError> {
    let changed = || Ok(Err("unreadable: it changed while it was read".to_owned()));
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(read_flags());
    let mut file = match store.root.open_with(rel, &options) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(Err(
                "unreadable: it became a symbolic link while the snapshot ran".to_owned(),
            ));
        }
        Err(e) => return Ok(Err(format!("unreadable: {e}"))),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Ok(Err(format!("unreadable: {e}"))),
    };
    if !meta.is_file() {
        return Ok(Err(
            "unreadable: it stopped being a regular file while the snapshot ran".to_owned(),
        ));
    }
    let stat = Stat::of_cap(&meta);
    if stat.size > store.settings.max_file_bytes {
        return Ok(Err(too_large(store.settings.max_file_bytes)));
    }
    if stat.size <= SMALL {
        buf.clear();
        if let Err(e) = (&mut file).take(stat.size + 1).read_to_end(buf) {
            return Ok(Err(format!("unreadable: {e}")));
        }
        if buf.len() as u64 != stat.size {
            return changed();
        }
        let id = object::hash(Kind::Blob, buf);
        if write {
            store
                .objects
                .put_hashed(id, Kind::Blob, buf, known, added)?;
        }
        return Ok(Ok((id, stat)));
    }
    let result = if write {
        store
            .objects
            .write_blob_stream(stat.size, &mut file)
            .map(|done| {
                done.map(|(id, n)| {
                    *added += n;
                    known.insert(id);
                    id
                })
            })
    } else {
        let mut hasher = Hasher::new(Kind::Blob, stat.size);
        object::copy_exact(&mut file, stat.size, &mut |chunk| {
            hasher.update(chunk);
            Ok(())
        })
        .map(|exact| exact.then(|| hasher.finish()))
    };
    match result {
        Ok(Some(id)) => Ok(Ok((id, stat))),
        Ok(None) => changed(),
        Err(StreamError::Read(e)) => Ok(Err(format!("unreadable: {e}"))),
        Err(StreamError::Write(e)) => Err(CheckpointError::Store {
            path: store.store_dir.join("objects"),
            source: e,
        }),
        Err(StreamError::Store(e)) => Err(e),
    }
}

/// Reads at most `limit` bytes of the workspace file `rel` (no link followed), for
/// diffs; `None` when it cannot be read or is larger.
pub(crate) fn read_small(store: &Store, rel: &str, limit: u64) -> Option<Vec<u8>> {
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(read_flags());
    let file = store.root.open_with(rel, &options).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > limit {
        return None;
    }
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    file.take(limit + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= limit).then_some(out)
}
