//! `workspace_mode = "copy"`: the workspace is shipped into the container as a tar
//! through the engine API (for an engine that does not share this machine's files),
//! and what the sandbox changed is brought back by [`pull`].
//!
//! Both directions are bounded by `copy_limit_mib` (content bytes) and
//! `copy_limit_files` (files and folders), counted separately. Only folders and regular
//! files travel: links, devices and sockets are left out.
//!
//! Going in, modes are kept as they are (never widened), and what the sandbox's user
//! could not read with the workspace mounted is left out and named, as is a file with
//! a hard link outside the workspace.
//!
//! Coming back trusts nothing the container wrote, and each entry comes back on its
//! own: one that cannot (an unsafe path, a folder on its way that is a link or not a
//! folder here, a name too long, over a limit, a write that fails) is named in
//! [`Pulled::skipped`] with why, and the others still come back. The archive is read as
//! it streams from the engine, never held whole. Folders are walked one name at a time
//! from open folder handles (`openat`, never following a link), so depth is no limit.
//! Each file is written under a short temporary name beside its target; a batch of
//! them is flushed with one `syncfs`, then renamed over the targets: a file is whole
//! or absent, never half written. Files deleted in the sandbox are not deleted here.
//! Outputs the session's tools saved (`.jianmu/outputs`) stay in the sandbox.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::backend::Backend;

/// Where a session's tools save outputs too long to answer, unless configured (the
/// tools' `.jianmu/outputs`).
pub(crate) const SAVED_OUTPUTS: &str = ".jianmu/outputs";
use crate::SandboxError;

/// The most skipped entries named one by one; the rest are counted.
const MAX_LISTED: usize = 1000;

/// Files written before their batch is flushed and renamed into place. Large: every
/// temporary file is made before any old file is replaced, since on some file systems
/// (ext4 without a journal) making a file right after others were deleted is slow.
const BATCH_FILES: usize = 1 << 18;

/// Folders opened before the batch is flushed (each staged file holds its folder open).
const BATCH_FOLDERS: usize = 256;

/// The two limits of a copy, either way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Content bytes (`copy_limit_mib`).
    pub(crate) bytes: u64,
    /// Files and folders (`copy_limit_files`).
    pub(crate) entries: usize,
}

/// One entry that did not make it across, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its path in the workspace.
    pub path: PathBuf,
    /// Why, in a few words.
    pub why: String,
}

/// What [`DockerSandbox::pull`](super::DockerSandbox::pull) brought back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pulled {
    /// Files written here (new or changed).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Changes that did not come back (links, special files, unsafe paths, paths
    /// through a link, names too long, over a limit, failed writes), the first 1,000
    /// by name.
    pub skipped: Vec<Skipped>,
    /// How many more were skipped past those named.
    pub unlisted: usize,
    /// What was not copied into the sandbox when its container started: what its user
    /// could not read here, hard links to files outside the workspace; the first 1,000
    /// by name.
    pub left_out: Vec<Skipped>,
    /// How many more were left out past those named.
    pub left_out_unlisted: usize,
}

/// Entries named up to [`MAX_LISTED`], then only counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) list: Vec<Skipped>,
    pub(crate) more: usize,
}

impl Named {
    fn push(&mut self, path: PathBuf, why: impl Into<String>) {
        if self.list.len() < MAX_LISTED {
            self.list.push(Skipped {
                path,
                why: why.into(),
            });
        } else {
            self.more += 1;
        }
    }

    /// How many, named or not.
    pub(crate) fn len(&self) -> usize {
        self.list.len() + self.more
    }
}

impl Pulled {
    /// How many changes did not come back.
    #[must_use]
    pub fn dropped(&self) -> usize {
        self.skipped.len() + self.unlisted
    }

    /// Whether everything came back and everything was copied in: nothing to report.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.dropped() == 0 && self.left_out.is_empty() && self.left_out_unlisted == 0
    }

    pub(crate) fn skip(&mut self, path: &Path, why: impl Into<String>) {
        if self.skipped.len() < MAX_LISTED {
            self.skipped.push(Skipped {
                path: path.to_owned(),
                why: why.into(),
            });
        } else {
            self.unlisted += 1;
        }
    }
}

impl std::fmt::Display for Pulled {
    /// `N files (B bytes) brought back from the sandbox`, then one line per change
    /// that was not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} files ({} bytes) brought back from the sandbox",
            self.files, self.bytes
        )?;
        if self.dropped() > 0 {
            write!(f, "; {} changes were not:", self.dropped())?;
            for s in &self.skipped {
                write!(f, "\n  {}: {}", s.path.display(), s.why)?;
            }
            if self.unlisted > 0 {
                write!(f, "\n  ... and {} more", self.unlisted)?;
            }
        }
        if !self.left_out.is_empty() {
            write!(f, "\nnot copied into the sandbox:")?;
            for s in &self.left_out {
                write!(f, "\n  {}: {}", s.path.display(), s.why)?;
            }
            if self.left_out_unlisted > 0 {
                write!(f, "\n  ... and {} more", self.left_out_unlisted)?;
            }
        }
        Ok(())
    }
}

fn io(what: &str, e: std::io::Error) -> SandboxError {
    SandboxError::Io {
        what: what.to_owned(),
        source: e,
    }
}

fn too_big(limits: Limits, bytes: u64, entries: usize) -> SandboxError {
    SandboxError::Settings(format!(
        "the workspace ({} MiB in {entries} files and folders) is over copy_limit_mib ({} MiB) \
         or copy_limit_files ({}) and cannot be copied; raise them in [execution.docker], \
         remove large files, or use workspace_mode = \"mount\"",
        bytes.div_ceil(1024 * 1024),
        limits.bytes / (1024 * 1024),
        limits.entries
    ))
}

/// Who the sandbox runs as, and so what it may read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Reader {
    /// Parses `uid:gid` (`nobody` when it is not numeric).
    pub(crate) fn parse(user: &str) -> Self {
        let (uid, gid) = user
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
            .unwrap_or((65534, 65534));
        Self { uid, gid }
    }

    /// Whether this user could read (and, for a folder, enter) what `meta` describes,
    /// by its permission bits.
    fn may_read(self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        if self.uid == 0 {
            return true;
        }
        let mode = meta.mode();
        let bits = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid {
            mode >> 3
        } else {
            mode
        } & 0o7;
        let needed = if meta.is_dir() { 0o5 } else { 0o4 };
        bits & needed == needed
    }
}

/// The workspace as a tar of folders and regular files, owned by the sandbox's user in
/// the container, with their own modes; and what was left out, named (what was left
/// out counts against the entries limit too).
pub(crate) fn pack(
    workspace: &Path,
    reader: Reader,
    limits: Limits,
) -> Result<(Vec<u8>, Named), SandboxError> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt as _;
    // First the list, bounded, so nothing is packed past a limit.
    let mut found: Vec<(PathBuf, std::fs::Metadata)> = Vec::new();
    let mut left_out = Named::default();
    let mut links: HashMap<(u64, u64), u64> = HashMap::new();
    let (mut total, mut stack) = (0u64, vec![PathBuf::new()]);
    while let Some(rel) = stack.pop() {
        let dir = workspace.join(&rel);
        let list = std::fs::read_dir(&dir)
            .map_err(|e| io(&format!("cannot read {}", dir.display()), e))?;
        for item in list {
            let item = item.map_err(|e| io("cannot read the workspace", e))?;
            let Ok(meta) = item.metadata() else { continue };
            let name = rel.join(item.file_name());
            if !(meta.is_dir() || meta.is_file()) {
                continue;
            }
            if !reader.may_read(&meta) {
                left_out.push(name, "the sandbox's user cannot read it here");
                if found.len() + left_out.len() > limits.entries {
                    return Err(too_big(limits, total, found.len() + left_out.len()));
                }
                continue;
            }
            if meta.is_dir() {
                stack.push(name.clone());
            } else {
                total = total.saturating_add(meta.len());
                if meta.nlink() > 1 {
                    *links.entry((meta.dev(), meta.ino())).or_default() += 1;
                }
            }
            found.push((name, meta));
            if total > limits.bytes || found.len() + left_out.len() > limits.entries {
                return Err(too_big(limits, total, found.len() + left_out.len()));
            }
        }
    }
    let mut builder = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, size: u64, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode & 0o777);
        h.set_uid(u64::from(reader.uid));
        h.set_gid(u64::from(reader.gid));
        h.set_mtime(0);
        h
    };
    // The workspace folder itself, by name, so the sandbox's user owns it (the
    // engine leaves the folder it unpacks into as it is).
    let top = PathBuf::from(workspace.file_name().unwrap_or_default());
    let mut root = header(tar::EntryType::Directory, 0, 0o755);
    builder
        .append_data(&mut root, &top, std::io::empty())
        .map_err(|e| io("cannot pack the workspace", e))?;
    for (rel, meta) in found {
        let name = top.join(&rel);
        if meta.is_dir() {
            let mut h = header(tar::EntryType::Directory, 0, meta.mode());
            builder
                .append_data(&mut h, &name, std::io::empty())
                .map_err(|e| io("cannot pack the workspace", e))?;
            continue;
        }
        if meta.nlink() > 1 && links.get(&(meta.dev(), meta.ino())) < Some(&meta.nlink()) {
            left_out.push(rel, "a hard link to a file outside the workspace");
            continue;
        }
        let path = workspace.join(&rel);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                left_out.push(rel, format!("cannot be read: {e}"));
                continue;
            }
        };
        let mut h = header(tar::EntryType::Regular, meta.len(), meta.mode());
        // A file that grows meanwhile is cut at the size read first.
        builder
            .append_data(&mut h, &name, file.take(meta.len()))
            .map_err(|e| io("cannot pack the workspace", e))?;
    }
    let tar = builder
        .into_inner()
        .map_err(|e| io("cannot pack the workspace", e))?;
    Ok((tar, left_out))
}

/// Copies the workspace into the container `id`, at the same path; returns what was
/// left out.
pub(crate) async fn upload(
    backend: &dyn Backend,
    id: &str,
    workspace: &Path,
    user: &str,
    limits: Limits,
) -> Result<Named, SandboxError> {
    let reader = Reader::parse(user);
    let ws = workspace.to_owned();
    let (tar, left_out) = tokio::task::spawn_blocking(move || pack(&ws, reader, limits))
        .await
        .map_err(|e| SandboxError::Lost(format!("packing the workspace failed: {e}")))??;
    // Unpacked into the volume mounted on the workspace's parent (`container.rs`).
    let parent = workspace.parent().unwrap_or(Path::new("/"));
    backend.upload(id, parent, tar).await?;
    Ok(left_out)
}

/// Brings back what the container `id` has in the workspace: new and changed files
/// are written here (see the module docs for what is left out).
pub(crate) async fn pull(
    backend: &dyn Backend,
    id: &str,
    workspace: &Path,
    limits: Limits,
    saved: &Path,
) -> Result<Pulled, SandboxError> {
    // Read at most this much of the archive: the content allowed, skipped files' bytes
    // up to as much again, and each entry's headers and padding.
    let cap = limits
        .bytes
        .saturating_mul(2)
        .saturating_add((limits.entries as u64).saturating_mul(4096))
        .saturating_add(64 << 20);
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let ws = workspace.to_owned();
    let saved = saved.to_owned();
    let unpacking = tokio::task::spawn_blocking(move || {
        let stream = Stream {
            rx,
            chunk: Vec::new(),
            at: 0,
            read: 0,
            cap,
        };
        unpack_except(stream, &ws, limits, &saved)
    });
    let downloaded = backend.download(id, workspace, tx).await;
    let pulled = unpacking
        .await
        .map_err(|e| SandboxError::Lost(format!("unpacking the workspace failed: {e}")))??;
    downloaded?;
    Ok(pulled)
}

/// The archive as it arrives from the engine, read by the unpacking thread.
struct Stream {
    rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    read: u64,
    cap: u64,
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(chunk) => (self.chunk, self.at) = (chunk, 0),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        self.read += n as u64;
        if self.read > self.cap {
            return Err(std::io::Error::other(format!(
                "the sandbox's workspace archive is over {} MiB; the rest was not read",
                self.cap >> 20
            )));
        }
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Writes the folders and regular files of the archive under `workspace`; the archive
/// holds one top folder (the workspace, by whatever name), whose contents are written.
#[cfg(test)]
pub(crate) fn unpack(
    tar: impl Read,
    workspace: &Path,
    limits: Limits,
) -> Result<Pulled, SandboxError> {
    unpack_except(tar, workspace, limits, Path::new(SAVED_OUTPUTS))
}

/// [`unpack`], leaving out the folder of saved outputs `saved` (workspace-relative).
pub(crate) fn unpack_except(
    tar: impl Read,
    workspace: &Path,
    limits: Limits,
    saved: &Path,
) -> Result<Pulled, SandboxError> {
    let root = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(&format!("cannot open {}", workspace.display()), e.into()))?;
    let mut w = Writer {
        root: Arc::new(root),
        open: Vec::new(),
        staged: Vec::new(),
        folders_opened: 0,
        prefix: jianmu_tool_core::random_hex()[..8].to_owned(),
        serial: 0,
        taken: 0,
        pulled: Pulled::default(),
    };
    let mut archive = tar::Archive::new(tar);
    let entries = archive
        .entries()
        .map_err(|e| io("the sandbox's workspace archive is unreadable", e))?;
    let mut count = 0usize;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                w.pulled.skip(
                    Path::new("."),
                    format!("the rest of the archive was not read: {e}"),
                );
                break;
            }
        };
        let raw = entry.path_bytes().into_owned();
        let Some(parts) = plain(&raw) else {
            w.pulled.skip(
                Path::new(OsStr::from_bytes(&raw)),
                "not a plain relative path",
            );
            continue;
        };
        // The top folder is the workspace itself.
        let parts = &parts[1.min(parts.len())..];
        let Some((name, folders)) = parts.split_last() else {
            continue;
        };
        let rel: PathBuf = parts.iter().collect();
        // Outputs the session saved are its scratch, gone with it: never brought back.
        if rel.starts_with(saved) {
            continue;
        }
        count += 1;
        if count > limits.entries {
            w.pulled
                .skip(&rel, format!("over copy_limit_files ({})", limits.entries));
            continue;
        }
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                if let Err(why) = w.folder(folders, name) {
                    w.pulled.skip(&rel, why);
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().unwrap_or(u64::MAX);
                if w.taken.saturating_add(size) > limits.bytes {
                    w.pulled.skip(
                        &rel,
                        format!(
                            "{size} bytes would pass copy_limit_mib ({} MiB)",
                            limits.bytes >> 20
                        ),
                    );
                    continue;
                }
                let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
                let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                if let Err(e) = entry.read_to_end(&mut data) {
                    w.pulled.skip(&rel, format!("the archive broke off: {e}"));
                    break;
                }
                if let Err(why) = w.file(folders, name, &data, mode, &rel) {
                    w.pulled.skip(&rel, why);
                }
            }
            _ => w.pulled.skip(
                &rel,
                "not a file or folder (links and special files stay in the sandbox)",
            ),
        }
    }
    w.flush();
    let _ = rustix::fs::syncfs(&*w.root);
    Ok(w.pulled)
}

/// Writes what comes back: folder handles along the current path, and files written
/// but not yet renamed into place.
struct Writer {
    root: Arc<OwnedFd>,
    /// The folders of the last path, from the top, each with its handle.
    open: Vec<(OsString, Arc<OwnedFd>)>,
    /// Written under a temporary name: (folder, temporary name, name, path, bytes).
    staged: Vec<(Arc<OwnedFd>, OsString, OsString, PathBuf, u64)>,
    folders_opened: usize,
    prefix: String,
    serial: u64,
    /// Content bytes taken so far, staged or in place: what `copy_limit_mib` counts.
    taken: u64,
    pulled: Pulled,
}

impl Writer {
    /// The handle of the folder `folders` below the workspace (each a real folder
    /// here, never a link).
    fn folder_at(&mut self, folders: &[&OsStr]) -> Result<Arc<OwnedFd>, String> {
        let same = self
            .open
            .iter()
            .zip(folders)
            .take_while(|((a, _), b)| a.as_os_str() == **b)
            .count();
        self.open.truncate(same);
        for name in &folders[same..] {
            let parent = Arc::clone(self.open.last().map_or(&self.root, |(_, fd)| fd));
            let fd = rustix::fs::openat(
                &*parent,
                *name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                Errno::NOTDIR | Errno::LOOP => {
                    "a folder on its way is a link or not a folder here".to_owned()
                }
                Errno::NOENT => "its folder was not brought back".to_owned(),
                e => format!("cannot open its folder: {e}"),
            })?;
            self.folders_opened += 1;
            self.open.push(((*name).to_owned(), Arc::new(fd)));
        }
        Ok(self
            .open
            .last()
            .map_or_else(|| Arc::clone(&self.root), |(_, fd)| Arc::clone(fd)))
    }

    fn folder(&mut self, folders: &[&OsStr], name: &OsStr) -> Result<(), String> {
        let parent = self.folder_at(folders)?;
        match rustix::fs::mkdirat(&*parent, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => {
                let st = rustix::fs::statat(&*parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| format!("cannot check it: {e}"))?;
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Directory
                {
                    Ok(())
                } else {
                    Err("a link or a file of that name is here".into())
                }
            }
            Err(e) => Err(format!("cannot make the folder: {e}")),
        }
    }

    fn file(
        &mut self,
        folders: &[&OsStr],
        name: &OsStr,
        data: &[u8],
        mode: u32,
        rel: &Path,
    ) -> Result<(), String> {
        let dir = self.folder_at(folders)?;
        // Unchanged files are not written again; a folder here is left alone.
        if let Ok(st) = rustix::fs::statat(&*dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
            if kind == rustix::fs::FileType::Directory {
                return Err("a folder of that name is here".into());
            }
            if kind == rustix::fs::FileType::RegularFile
                && u64::try_from(st.st_size) == Ok(data.len() as u64)
                && same_contents(&dir, name, data)
            {
                return Ok(());
            }
        }
        let tmp = loop {
            self.serial += 1;
            let tmp = OsString::from(format!(".jm{}{:x}", self.prefix, self.serial));
            match rustix::fs::openat(
                &*dir,
                tmp.as_os_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode | 0o600),
            ) {
                Ok(fd) => {
                    let mut file = std::fs::File::from(fd);
                    if let Err(e) = file.write_all(data) {
                        let _ = rustix::fs::unlinkat(
                            &*dir,
                            tmp.as_os_str(),
                            rustix::fs::AtFlags::empty(),
                        );
                        return Err(format!("cannot write it: {e}"));
                    }
                    break tmp;
                }
                Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("cannot write it: {e}")),
            }
        };
        self.taken += data.len() as u64;
        self.staged
            .push((dir, tmp, name.to_owned(), rel.to_owned(), data.len() as u64));
        if self.staged.len() >= BATCH_FILES || self.folders_opened >= BATCH_FOLDERS {
            self.flush();
        }
        Ok(())
    }

    /// Makes the staged files durable with one `syncfs`, then renames each over its
    /// target.
    fn flush(&mut self) {
        self.folders_opened = self.open.len();
        if self.staged.is_empty() {
            return;
        }
        let _ = rustix::fs::syncfs(&*self.root);
        for (dir, tmp, name, rel, bytes) in std::mem::take(&mut self.staged) {
            match rustix::fs::renameat(&*dir, tmp.as_os_str(), &*dir, name.as_os_str()) {
                Ok(()) => {
                    self.pulled.files += 1;
                    self.pulled.bytes += bytes;
                }
                Err(e) => {
                    let _ =
                        rustix::fs::unlinkat(&*dir, tmp.as_os_str(), rustix::fs::AtFlags::empty());
                    self.pulled
                        .skip(&rel, format!("cannot put it in place: {e}"));
                }
            }
        }
    }
}

/// Whether the regular file `name` in `dir` holds exactly `data`.
fn same_contents(dir: &impl AsFd, name: &OsStr, data: &[u8]) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut old = Vec::with_capacity(data.len());
    std::fs::File::from(fd)
        .take(data.len() as u64 + 1)
        .read_to_end(&mut old)
        .is_ok_and(|_| old == data)
}

/// The names of `path` when it is made of plain names only (`.` and empty names
/// dropped); `None` for an absolute path or one with `..`.
fn plain(path: &[u8]) -> Option<Vec<&OsStr>> {
    if path.first() == Some(&b'/') {
        return None;
    }
    let mut out = Vec::new();
    for part in path.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return None,
            name => out.push(OsStr::from_bytes(name)),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOM: Limits = Limits {
        bytes: 1 << 20,
        entries: 1000,
    };

    fn me() -> Reader {
        Reader { uid: 0, gid: 0 }
    }

    #[test]
    fn what_is_left_out_is_named_up_to_a_thousand_counted_and_limited() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_LISTED + 5 {
            let path = dir.path().join(format!("secret-{i}"));
            std::fs::write(&path, "x").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let stranger = Reader {
            uid: 4242,
            gid: 4242,
        };
        let room = Limits {
            bytes: 1 << 20,
            entries: 2 * MAX_LISTED,
        };
        let (_, left_out) = pack(dir.path(), stranger, room).unwrap();
        assert_eq!((left_out.list.len(), left_out.more), (MAX_LISTED, 5));
        let pulled = Pulled {
            left_out: left_out.list,
            left_out_unlisted: left_out.more,
            ..Pulled::default()
        };
        assert!(!pulled.is_complete());
        assert!(pulled.to_string().ends_with("... and 5 more"), "{pulled}");
        // Files left out count against copy_limit_files like those copied.
        let e = pack(dir.path(), stranger, ROOM).unwrap_err();
        assert!(e.to_string().contains("copy_limit_files (1000)"), "{e}");
    }

    #[test]
    fn a_round_trip_keeps_files_and_folders() {
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir(from.path().join("sub")).unwrap();
        std::fs::write(from.path().join("sub/a.txt"), "alpha").unwrap();
        std::fs::write(from.path().join("b.txt"), "beta").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.path().join("link")).unwrap();
        let (tar, left_out) = pack(from.path(), me(), ROOM).unwrap();
        assert_eq!(left_out.len(), 0, "{left_out:?}");
        let to = tempfile::tempdir().unwrap();
        let pulled = unpack(tar.as_slice(), to.path(), ROOM).unwrap();
        assert_eq!((pulled.files, pulled.bytes), (2, 9));
        let to_ws = to.path();
        assert_eq!(
            std::fs::read_to_string(to_ws.join("sub/a.txt")).unwrap(),
            "alpha"
        );
        assert!(!to_ws.join("link").exists());
        // Unchanged files are not written again.
        assert_eq!(unpack(tar.as_slice(), to.path(), ROOM).unwrap().files, 0);
    }

    #[test]
    fn a_workspace_over_a_limit_is_refused_before_it_is_packed() {
        let from = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("big"), vec![0u8; 4096]).unwrap();
        let small = Limits {
            bytes: 1024,
            entries: 10,
        };
        let err = pack(from.path(), me(), small).unwrap_err().to_string();
        assert!(err.contains("copy_limit_mib"), "{err}");
        for n in 0..11 {
            std::fs::write(from.path().join(format!("f{n}")), "x").unwrap();
        }
        let few = Limits {
            bytes: 1 << 20,
            entries: 10,
        };
        let err = pack(from.path(), me(), few).unwrap_err().to_string();
        assert!(err.contains("copy_limit_files (10)"), "{err}");
    }

    /// Modes are kept, never widened; what the sandbox's user could not read here, and
    /// a hard link to a file outside the workspace, are left out and named.
    #[test]
    fn copying_in_keeps_modes_and_leaves_out_what_the_user_could_not_read() {
        use std::os::unix::fs::PermissionsExt as _;
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let w = ws.path();
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        // The files belong to this test's user; the sandbox's user is another one.
        std::fs::write(w.join("private"), "secret").unwrap();
        set(&w.join("private"), 0o600);
        std::fs::write(w.join("shared"), "open").unwrap();
        set(&w.join("shared"), 0o644);
        std::fs::write(outside.path().join("target"), "outside").unwrap();
        set(&outside.path().join("target"), 0o644);
        std::fs::hard_link(outside.path().join("target"), w.join("hard")).unwrap();
        std::fs::write(w.join("inner"), "inner").unwrap();
        set(&w.join("inner"), 0o644);
        std::fs::hard_link(w.join("inner"), w.join("inner2")).unwrap();
        let stranger = Reader {
            uid: 4242,
            gid: 4242,
        };
        let (tar, left_out) = pack(w, stranger, ROOM).unwrap();
        assert_eq!(left_out.more, 0);
        let mut named: Vec<_> = left_out
            .list
            .iter()
            .map(|s| format!("{}: {}", s.path.display(), s.why))
            .collect();
        named.sort();
        assert_eq!(
            named,
            [
                "hard: a hard link to a file outside the workspace",
                "private: the sandbox's user cannot read it here"
            ]
        );
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut modes: Vec<(String, u32)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e
                    .path()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                (name, e.header().mode().unwrap())
            })
            .filter(|(n, _)| ["shared", "inner", "inner2"].contains(&n.as_str()))
            .collect();
        modes.sort();
        assert_eq!(
            modes,
            [
                ("inner".to_owned(), 0o644),
                ("inner2".to_owned(), 0o644),
                ("shared".to_owned(), 0o644)
            ]
        );
    }

    /// A hostile archive: an escape by `..`, an absolute path, a link, and a file
    /// under a folder that is a link on this side. None is written outside; each is
    /// named with why.
    #[test]
    fn nothing_is_written_outside_the_workspace_or_through_a_link() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |path: &str, kind: tar::EntryType, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // `set_path` refuses `..`; write the name bytes directly.
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, data).unwrap();
        };
        add("ws/../escape.txt", tar::EntryType::Regular, b"x");
        add("/abs.txt", tar::EntryType::Regular, b"x");
        add("ws/out/through-link.txt", tar::EntryType::Regular, b"x");
        add("ws/evil-link", tar::EntryType::Symlink, b"");
        add("ws/fine.txt", tar::EntryType::Regular, b"ok");
        let tar = b.into_inner().unwrap();
        let pulled = unpack(tar.as_slice(), ws.path(), ROOM).unwrap();
        assert_eq!((pulled.files, pulled.dropped()), (1, 4), "{pulled}");
        assert!(
            pulled.to_string().contains(
                "out/through-link.txt: a folder on its way is a link or not a folder here"
            ),
            "{pulled}"
        );
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert_eq!(
            std::fs::read_to_string(ws.path().join("fine.txt")).unwrap(),
            "ok"
        );
        assert!(!ws.path().parent().unwrap().join("escape.txt").exists());
    }

    /// The content limit counts every file taken, also those not yet renamed into
    /// place: two files that fit alone but not together bring back only the first.
    #[test]
    fn the_content_limit_counts_files_still_staged() {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in [
            ("ws", tar::EntryType::Directory, &b""[..]),
            ("ws/a.bin", tar::EntryType::Regular, &[1u8; 1500][..]),
            ("ws/b.bin", tar::EntryType::Regular, &[2u8; 1500][..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, data).unwrap();
        }
        let tar = b.into_inner().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let limits = Limits {
            bytes: 2048,
            entries: 10,
        };
        let pulled = unpack(tar.as_slice(), ws.path(), limits).unwrap();
        assert_eq!(
            (pulled.files, pulled.bytes, pulled.dropped()),
            (1, 1500, 1),
            "{pulled}"
        );
        assert!(
            pulled
                .to_string()
                .contains("b.bin: 1500 bytes would pass copy_limit_mib"),
            "{pulled}"
        );
        assert!(!ws.path().join("b.bin").exists());
    }

    /// One bad entry never stops the others: a name too long for a temporary name
    /// beside it, a file deeper than PATH_MAX, a file over the content limit, entries
    /// past the file limit. Each is named; everything else comes back.
    #[test]
    fn each_file_comes_back_on_its_own() {
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |path: &str, kind: tar::EntryType, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(if kind == tar::EntryType::Directory {
                0o755
            } else {
                0o644
            });
            b.append_data(&mut h, path, data).unwrap();
        };
        add("ws", tar::EntryType::Directory, b"");
        add(
            &format!("ws/{}", "n".repeat(240)),
            tar::EntryType::Regular,
            b"long name",
        );
        let mut deep = String::from("ws");
        for i in 0..230 {
            deep.push_str(&format!("/folder-{i:03}-xxxxxxxxx"));
            add(&deep, tar::EntryType::Directory, b"");
        }
        add(
            &format!("{deep}/bottom.txt"),
            tar::EntryType::Regular,
            b"deep",
        );
        add("ws/big.bin", tar::EntryType::Regular, &vec![1u8; 3000]);
        for n in 0..40 {
            add(&format!("ws/f{n:02}.txt"), tar::EntryType::Regular, b"x");
        }
        let tar = b.into_inner().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let limits = Limits {
            bytes: 2048,
            entries: 230 + 2 + 30,
        };
        let pulled = unpack(tar.as_slice(), ws.path(), limits).unwrap();
        let text = pulled.to_string();
        assert_eq!(pulled.files, 2 + 29, "{text}");
        assert_eq!(
            std::fs::read_to_string(ws.path().join("n".repeat(240))).unwrap(),
            "long name"
        );
        assert!(
            text.contains("big.bin: 3000 bytes would pass copy_limit_mib"),
            "{text}"
        );
        assert_eq!(pulled.dropped(), 1 + 11, "{text}");
        assert!(
            text.contains("f39.txt: over copy_limit_files (262)"),
            "{text}"
        );
        // The deep file is there, read back through folder handles.
        let mut dir = std::fs::File::open(ws.path()).unwrap();
        for i in 0..230 {
            let name = format!("folder-{i:03}-xxxxxxxxx");
            let fd = rustix::fs::openat(
                &dir,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
            dir = std::fs::File::from(fd);
        }
        let fd = rustix::fs::openat(&dir, "bottom.txt", OFlags::RDONLY, Mode::empty()).unwrap();
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "deep");
        // No temporary file is left anywhere at the top.
        let left: Vec<_> = std::fs::read_dir(ws.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".jm"))
            .collect();
        assert!(left.is_empty());
    }
}
