//! Git's loose objects: SHA-1 ids, the `blob`/`tree`/`commit` byte formats, and
//! reading and writing zlib-compressed files under `objects/`, so that `git` itself
//! can read the store.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use rustix::fs::{AtFlags, Mode, OFlags};
use sha1::{Digest, Sha1};

use crate::CheckpointError;

/// The largest tree, commit or meta object read back; far above any real one (a
/// folder of 50,000 files makes a tree of about 2.5 MB).
pub(crate) const MAX_OBJECT: u64 = 64 << 20;

/// A git object id: the SHA-1 of the object's header and content.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Oid(pub(crate) [u8; 20]);

impl Oid {
    /// The 40 lowercase hex digits.
    pub(crate) fn hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(40);
        for b in self.0 {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 15)]));
        }
        out
    }

    /// Parses exactly 40 hex digits.
    pub(crate) fn from_hex(s: &str) -> Option<Oid> {
        let bytes = s.as_bytes();
        if bytes.len() != 40 {
            return None;
        }
        let mut out = [0u8; 20];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0])?;
            let lo = hex_value(pair[1])?;
            out[i] = hi << 4 | lo;
        }
        Some(Oid(out))
    }

    /// Where the loose object lives, relative to `objects/`.
    pub(crate) fn loose_path(&self) -> PathBuf {
        let hex = self.hex();
        let mut path = PathBuf::from(&hex[..2]);
        path.push(&hex[2..]);
        path
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// The three kinds of object the store holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Blob,
    Tree,
    Commit,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Blob => "blob",
            Kind::Tree => "tree",
            Kind::Commit => "commit",
        }
    }
}

/// The header git hashes and stores before an object's content.
pub(crate) fn header(kind: Kind, len: u64) -> String {
    format!("{} {len}\0", kind.name())
}

/// The id of an object with this content.
pub(crate) fn hash(kind: Kind, data: &[u8]) -> Oid {
    let mut h = Sha1::new();
    h.update(header(kind, data.len() as u64).as_bytes());
    h.update(data);
    Oid(h.finalize().into())
}

/// The plain SHA-1 of `data` (no git header).
pub(crate) fn hash_bytes(data: &[u8]) -> Oid {
    Oid(Sha1::digest(data).into())
}

/// A SHA-1 in progress, for content that arrives in pieces.
pub(crate) struct Hasher(Sha1);

impl Hasher {
    pub(crate) fn new(kind: Kind, len: u64) -> Self {
        let mut h = Sha1::new();
        h.update(header(kind, len).as_bytes());
        Hasher(h)
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub(crate) fn finish(self) -> Oid {
        Oid(self.0.finalize().into())
    }
}

/// The `objects/` folder of the store.
pub(crate) struct Objects {
    dir: Dir,
    path: PathBuf,
}

impl fmt::Debug for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Objects").field("path", &self.path).finish()
    }
}

/// A temporary name in `objects/`, unique within the store while its lock is held
/// (only the holder writes objects).
fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("tmp_obj_{}_{n}", std::process::id())
}

/// Names in `objects/` that a crashed write may leave behind.
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with("tmp_obj_")
}

impl Objects {
    pub(crate) fn new(dir: Dir, path: PathBuf) -> Self {
        Objects { dir, path }
    }

    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    fn err(&self, e: io::Error) -> CheckpointError {
        CheckpointError::Store {
            path: self.path.clone(),
            source: e,
        }
    }

    /// Whether the object is in the store.
    pub(crate) fn exists(&self, id: &Oid) -> bool {
        rustix::fs::statat(&self.dir, id.loose_path(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Stores an object unless it is known or already there; returns its id and adds
    /// the bytes written to `added`.
    pub(crate) fn put(
        &self,
        kind: Kind,
        data: &[u8],
        known: &mut HashSet<Oid>,
        added: &mut u64,
    ) -> Result<Oid, CheckpointError> {
        let id = hash(kind, data);
        self.put_hashed(id, kind, data, known, added)?;
        Ok(id)
    }

    /// As [`Objects::put`], for content whose id is already computed.
    pub(crate) fn put_hashed(
        &self,
        id: Oid,
        kind: Kind,
        data: &[u8],
        known: &mut HashSet<Oid>,
        added: &mut u64,
    ) -> Result<(), CheckpointError> {
        if known.contains(&id) {
            return Ok(());
        }
        if !self.exists(&id) {
            *added += self.write(id, kind, data)?;
        }
        known.insert(id);
        Ok(())
    }

    /// Writes the object `id` with this content; returns its size on disk.
    fn write(&self, id: Oid, kind: Kind, data: &[u8]) -> Result<u64, CheckpointError> {
        let (tmp, mut file) = self.create_temp()?;
        let written = (|| {
            let mut enc = ZlibEncoder::new(io::BufWriter::new(&mut file), Compression::fast());
            enc.write_all(header(kind, data.len() as u64).as_bytes())?;
            enc.write_all(data)?;
            enc.finish()?.flush()?;
            Ok(())
        })();
        self.put_in_place(&tmp, written, &id)
    }

    /// Writes a blob of `len` bytes read from `src` while hashing it, in one pass,
    /// for content too large to hold in memory. Returns the id and the bytes added
    /// to the store (0 when the object was already there), or `None` when `src` did
    /// not give exactly `len` bytes (the file changed while it was read).
    pub(crate) fn write_blob_stream(
        &self,
        len: u64,
        src: &mut dyn Read,
    ) -> Result<Option<(Oid, u64)>, StreamError> {
        let (tmp, mut file) = self.create_temp().map_err(StreamError::Store)?;
        let result = (|| {
            let mut enc = ZlibEncoder::new(io::BufWriter::new(&mut file), Compression::fast());
            enc.write_all(header(Kind::Blob, len).as_bytes())
                .map_err(|e| StreamError::Store(self.err(e)))?;
            let mut hasher = Hasher::new(Kind::Blob, len);
            let exact = copy_exact(src, len, &mut |chunk| {
                hasher.update(chunk);
                enc.write_all(chunk)
            })
            .map_err(|e| match e {
                StreamError::Write(e) => StreamError::Store(self.err(e)),
                other => other,
            })?;
            enc.finish()
                .and_then(|mut w| w.flush())
                .map_err(|e| StreamError::Store(self.err(e)))?;
            Ok::<_, StreamError>(exact.then(|| hasher.finish()))
        })();
        match result {
            Ok(Some(id)) => {
                if self.exists(&id) {
                    self.remove_temp(&tmp);
                    return Ok(Some((id, 0)));
                }
                let size = self
                    .put_in_place(&tmp, Ok(()), &id)
                    .map_err(StreamError::Store)?;
                Ok(Some((id, size)))
            }
            Ok(None) => {
                self.remove_temp(&tmp);
                Ok(None)
            }
            Err(e) => {
                self.remove_temp(&tmp);
                Err(e)
            }
        }
    }

    // The store is this crate's own folder, outside the workspace: its objects are
    // reached with plain `*at` calls on the `objects/` handle, one system call each.

    fn create_temp(&self) -> Result<(String, std::fs::File), CheckpointError> {
        let tmp = temp_name();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, tmp.as_str(), flags, Mode::from_raw_mode(0o444))
            .map_err(|e| self.err(e.into()))?;
        Ok((tmp, std::fs::File::from(fd)))
    }

    fn remove_temp(&self, tmp: &str) {
        let _ = rustix::fs::unlinkat(&self.dir, tmp, AtFlags::empty());
    }

    /// Renames a finished temporary file to the object's name, so that no reader (and
    /// no crash) ever sees half an object under its final name. Returns its size.
    fn put_in_place(
        &self,
        tmp: &str,
        written: io::Result<()>,
        id: &Oid,
    ) -> Result<u64, CheckpointError> {
        let path = id.loose_path();
        let done = written.and_then(|()| {
            let size = rustix::fs::statat(&self.dir, tmp, AtFlags::SYMLINK_NOFOLLOW)?.st_size;
            let rename = || rustix::fs::renameat(&self.dir, tmp, &self.dir, &path);
            match rename() {
                Err(rustix::io::Errno::NOENT) => {
                    // The first object of its `xx/` folder.
                    if let Some(parent) = path.parent() {
                        match rustix::fs::mkdirat(&self.dir, parent, Mode::from_raw_mode(0o755)) {
                            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    rename()?;
                }
                other => other?,
            }
            Ok(u64::try_from(size).unwrap_or(0))
        });
        if done.is_err() {
            self.remove_temp(tmp);
        }
        done.map_err(|e| self.err(e))
    }

    /// Opens an object and reads its header: the kind and the content length.
    fn open(&self, id: &Oid) -> Result<(Kind, u64, ZlibDecoder<std::fs::File>), CheckpointError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = match rustix::fs::openat(&self.dir, id.loose_path(), flags, Mode::empty()) {
            Ok(fd) => std::fs::File::from(fd),
            Err(rustix::io::Errno::NOENT) => return Err(corrupt(id, "it is missing")),
            Err(e) => return Err(self.err(e.into())),
        };
        let mut dec = ZlibDecoder::new(file);
        // "commit 18446744073709551615\0" is the longest header.
        let mut head = Vec::with_capacity(32);
        let mut byte = [0u8; 1];
        loop {
            match dec.read(&mut byte) {
                Ok(0) => return Err(corrupt(id, "its header is cut short")),
                Ok(_) => {}
                Err(_) => return Err(corrupt(id, "it does not inflate")),
            }
            if byte[0] == 0 {
                break;
            }
            head.push(byte[0]);
            if head.len() > 32 {
                return Err(corrupt(id, "its header is malformed"));
            }
        }
        let head =
            std::str::from_utf8(&head).map_err(|_| corrupt(id, "its header is malformed"))?;
        let (kind, len) = head
            .split_once(' ')
            .ok_or_else(|| corrupt(id, "its header is malformed"))?;
        let kind = match kind {
            "blob" => Kind::Blob,
            "tree" => Kind::Tree,
            "commit" => Kind::Commit,
            _ => return Err(corrupt(id, "it is of an unknown kind")),
        };
        let len: u64 = len
            .parse()
            .map_err(|_| corrupt(id, "its header is malformed"))?;
        Ok((kind, len, dec))
    }

    /// Reads a whole object of kind `want`, refusing one over `limit` bytes and
    /// checking that its content hashes to its id.
    pub(crate) fn read(
        &self,
        id: &Oid,
        want: Kind,
        limit: u64,
    ) -> Result<Vec<u8>, CheckpointError> {
        let (kind, len, dec) = self.open(id)?;
        if kind != want {
            return Err(corrupt(
                id,
                &format!("it is a {}, not a {}", kind.name(), want.name()),
            ));
        }
        if len > limit {
            return Err(CheckpointError::TooLarge {
                what: format!("object {id}"),
                size: len,
                limit,
            });
        }
        let mut data = Vec::with_capacity(len as usize);
        dec.take(len + 1)
            .read_to_end(&mut data)
            .map_err(|_| corrupt(id, "it does not inflate"))?;
        if data.len() as u64 != len {
            return Err(corrupt(id, "its length does not match its header"));
        }
        if hash(kind, &data) != *id {
            return Err(corrupt(id, "its content does not match its id"));
        }
        Ok(data)
    }

    /// The length of a blob, from its header.
    pub(crate) fn blob_len(&self, id: &Oid) -> Result<u64, CheckpointError> {
        let (kind, len, _) = self.open(id)?;
        if kind != Kind::Blob {
            return Err(corrupt(id, "it is not a blob"));
        }
        Ok(len)
    }

    /// Streams a blob's content into `out`, checking its length and id; returns the
    /// length.
    pub(crate) fn copy_blob(&self, id: &Oid, out: &mut dyn Write) -> Result<u64, StreamError> {
        let (kind, len, mut dec) = self.open(id).map_err(StreamError::Store)?;
        if kind != Kind::Blob {
            return Err(StreamError::Store(corrupt(id, "it is not a blob")));
        }
        let mut hasher = Hasher::new(Kind::Blob, len);
        let exact = copy_exact(&mut dec, len, &mut |chunk| {
            hasher.update(chunk);
            out.write_all(chunk)
        })
        .map_err(|e| match e {
            StreamError::Read(_) => StreamError::Store(corrupt(id, "it does not inflate")),
            other => other,
        })?;
        if !exact {
            return Err(StreamError::Store(corrupt(
                id,
                "its length does not match its header",
            )));
        }
        if hasher.finish() != *id {
            return Err(StreamError::Store(corrupt(
                id,
                "its content does not match its id",
            )));
        }
        Ok(len)
    }
}

pub(crate) fn corrupt(id: &Oid, why: &str) -> CheckpointError {
    CheckpointError::Corrupt {
        what: format!("object {id}"),
        why: why.to_owned(),
    }
}

/// Why streaming content failed: reading the source, writing the destination, or
/// the store.
#[derive(Debug)]
pub(crate) enum StreamError {
    Read(io::Error),
    Write(io::Error),
    Store(CheckpointError),
}

/// Reads exactly `len` bytes from `src` into `sink` in chunks; true when `src` had
/// exactly `len` bytes (no fewer, no more).
pub(crate) fn copy_exact(
    src: &mut dyn Read,
    len: u64,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<bool, StreamError> {
    let mut buf = vec![0u8; 64 << 10];
    let mut left = len;
    loop {
        let want = if left == 0 {
            1
        } else {
            buf.len().min(usize::try_from(left).unwrap_or(usize::MAX))
        };
        let n = match src.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StreamError::Read(e)),
        };
        if n == 0 {
            return Ok(left == 0);
        }
        if left == 0 {
            // More than the size said: the file grew while it was read.
            return Ok(false);
        }
        sink(&buf[..n]).map_err(StreamError::Write)?;
        left -= n as u64;
    }
}

/// One entry of a tree object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    /// Git's mode: 0o100644, 0o100755, 0o120000 or 0o040000.
    pub(crate) mode: u32,
    pub(crate) name: String,
    pub(crate) id: Oid,
}

pub(crate) const MODE_FILE: u32 = 0o100644;
pub(crate) const MODE_EXEC: u32 = 0o100755;
pub(crate) const MODE_LINK: u32 = 0o120000;
pub(crate) const MODE_TREE: u32 = 0o040000;

/// Git's order of tree entries: by name, a tree's name compared as if it ended in
/// `/` (`git fsck` checks it).
fn tree_order(a: &TreeEntry, b: &TreeEntry) -> std::cmp::Ordering {
    let slash = |e: &TreeEntry| -> &'static [u8] { if e.mode == MODE_TREE { b"/" } else { b"" } };
    let ka = a.name.as_bytes().iter().chain(slash(a));
    let kb = b.name.as_bytes().iter().chain(slash(b));
    ka.cmp(kb)
}

/// The bytes of a tree object with these entries (sorted here).
pub(crate) fn encode_tree(entries: &mut [TreeEntry]) -> Vec<u8> {
    entries.sort_by(tree_order);
    let mut out = Vec::with_capacity(entries.len() * 48);
    for e in entries.iter() {
        let _ = write!(out, "{:o} {}\0", e.mode, e.name);
        out.extend_from_slice(&e.id.0);
    }
    out
}

/// Parses a tree object, checking each entry's mode and name.
pub(crate) fn parse_tree(id: &Oid, data: &[u8]) -> Result<Vec<TreeEntry>, CheckpointError> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| corrupt(id, "a tree entry has no mode"))?;
        let mode = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(|| corrupt(id, "a tree entry's mode is malformed"))?;
        if ![MODE_FILE, MODE_EXEC, MODE_LINK, MODE_TREE].contains(&mode) {
            return Err(corrupt(
                id,
                "a tree entry has a mode checkpoints never write",
            ));
        }
        rest = &rest[space + 1..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| corrupt(id, "a tree entry's name is not ended"))?;
        let name = std::str::from_utf8(&rest[..nul])
            .map_err(|_| corrupt(id, "a tree entry's name is not UTF-8"))?;
        if !valid_name(name) {
            return Err(corrupt(
                id,
                "a tree entry has a name a checkpoint cannot hold",
            ));
        }
        rest = &rest[nul + 1..];
        if rest.len() < 20 {
            return Err(corrupt(id, "a tree entry's id is cut short"));
        }
        let mut oid = [0u8; 20];
        oid.copy_from_slice(&rest[..20]);
        rest = &rest[20..];
        out.push(TreeEntry {
            mode,
            name: name.to_owned(),
            id: Oid(oid),
        });
    }
    Ok(out)
}

/// A name one path component may have in a checkpoint.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name != ".git"
        && !name.contains('/')
        && !name.contains('\0')
}

/// The name and e-mail of every checkpoint commit.
const WHO: &str = "jianmu <jianmu@localhost>";

/// The bytes of a parentless commit of `tree` with `message`.
pub(crate) fn encode_commit(tree: &Oid, time: u64, message: &str) -> Vec<u8> {
    format!("tree {tree}\nauthor {WHO} {time} +0000\ncommitter {WHO} {time} +0000\n\n{message}\n")
        .into_bytes()
}

/// The root tree of a commit object.
pub(crate) fn commit_tree(id: &Oid, data: &[u8]) -> Result<Oid, CheckpointError> {
    let line = data
        .strip_prefix(b"tree ")
        .and_then(|rest| rest.get(..40))
        .and_then(|hex| std::str::from_utf8(hex).ok())
        .and_then(Oid::from_hex)
        .ok_or_else(|| corrupt(id, "the commit names no tree"))?;
    Ok(line)
}
