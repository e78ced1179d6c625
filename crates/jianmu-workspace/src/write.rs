//! Atomic writes: a temporary file beside the target, then `rename`; with `durable`,
//! the file and its folder are also synced, so the write outlives a power loss. A
//! failure at any step removes the temporary file and leaves the old file as it was.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::{Workspace, WorkspaceError, check_regular, show};

/// How [`Workspace::write_atomic`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteOptions {
    /// Keep the old content and add the new after it.
    pub append: bool,
    /// Create missing parent directories.
    pub create_dirs: bool,
    /// Sync the new content and the folder to disk before answering, so the write
    /// survives a power loss or a kernel crash (it is atomic either way: readers and a
    /// killed process never see half a file). Off by default, as `git apply` and
    /// editors write.
    pub durable: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            append: false,
            create_dirs: true,
            durable: false,
        }
    }
}

impl WriteOptions {
    /// Sets `append`.
    #[must_use]
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// Sets `create_dirs`.
    #[must_use]
    pub fn create_dirs(mut self, create_dirs: bool) -> Self {
        self.create_dirs = create_dirs;
        self
    }

    /// Sets `durable`.
    #[must_use]
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }
}

impl Workspace {
    /// Writes `content` to `rel` atomically and returns the file's new size. If `rel`
    /// is a symlink, the file it points to (beneath the root) is written.
    ///
    /// # Errors
    /// A refused path, a missing parent without `create_dirs`, a target that is not a
    /// regular file or is hard-linked, or an I/O failure (the old file is then intact
    /// and no temporary file is left).
    pub fn write_atomic(
        &self,
        rel: &Path,
        content: &[u8],
        options: &WriteOptions,
    ) -> Result<u64, WorkspaceError> {
        self.stage_write(rel, content, options)?.commit()
    }

    /// Writes `content` for `rel` into a temporary file beside it and returns it
    /// staged: [`Staged::commit`] puts it in place (a rename), dropping it removes the
    /// temporary file and leaves `rel` as it was. Several files staged first and
    /// committed after change all or none, unless a rename itself fails.
    ///
    /// With `append` and an existing file, the append happens in place at once (the
    /// old content is not copied) and the commit does nothing more.
    ///
    /// # Errors
    /// As [`Workspace::write_atomic`].
    pub fn stage_write(
        &self,
        rel: &Path,
        content: &[u8],
        options: &WriteOptions,
    ) -> Result<Staged, WorkspaceError> {
        let target = self.write_target(rel, options.create_dirs)?;
        let (parent, name) = split(&target).ok_or_else(|| WorkspaceError::NotAFile {
            path: show(rel),
            kind: "a directory",
        })?;
        // All further work is relative to the parent's handle, so the parent cannot be
        // swapped out from under the write.
        let pdir = self.open_dir(parent).map_err(|e| match e {
            WorkspaceError::NotFound { .. } => WorkspaceError::NotFound {
                path: format!("{} (its folder; set create_dirs to make it)", show(rel)),
            },
            other => other,
        })?;
        let existing = match pdir.symlink_metadata(name) {
            Ok(meta) => {
                check_regular(rel, &meta)?;
                Some(meta)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(WorkspaceError::from_io(rel, e)),
        };
        if options.append && existing.is_some() {
            let size = append_in_place(&pdir, name, content, options.durable)
                .map_err(|e| WorkspaceError::from_io(rel, e))?;
            return Ok(Staged {
                rel: rel.to_owned(),
                pending: None,
                size,
                durable: options.durable,
            });
        }
        let tmp = temp_name(name);
        let parent = parent.to_owned();
        match write_temp(
            &pdir,
            &tmp,
            name,
            existing.as_ref(),
            content,
            options.append,
        ) {
            Ok((file, anonymous, size)) => Ok(Staged {
                rel: rel.to_owned(),
                pending: Some(Pending {
                    pdir,
                    parent,
                    tmp,
                    name: name.to_owned(),
                    file,
                    linked: !anonymous,
                }),
                size,
                durable: options.durable,
            }),
            Err(e) => {
                let _ = pdir.remove_file(&tmp);
                Err(WorkspaceError::from_io(rel, e))
            }
        }
    }

    /// Commits several staged writes: syncs the contents of the durable ones together
    /// (one `syncfs` per file system, whatever the number of files), renames each in
    /// order, then syncs each folder of a durable one once.
    ///
    /// # Errors
    /// The first failure, with how many writes were already in place (a prefix of
    /// `staged`; none if a sync failed). The writes not in place are discarded.
    pub fn commit_all(&self, staged: Vec<Staged>) -> Result<(), CommitError> {
        let mut staged = staged;
        // One `syncfs` per file system flushes every staged file in one journal
        // commit; syncing each file would cost one commit per file.
        let mut devices: Vec<(u64, usize)> = Vec::new();
        for (i, s) in staged.iter().enumerate() {
            let Some(p) = s.pending.as_ref().filter(|_| s.durable) else {
                continue;
            };
            let dev = std::os::unix::fs::MetadataExt::dev(&p.file.metadata().map_err(|e| {
                CommitError {
                    committed: 0,
                    error: WorkspaceError::from_io(&s.rel, e),
                }
            })?);
            if !devices.iter().any(|(d, _)| *d == dev) {
                devices.push((dev, i));
            }
        }
        for &(_, i) in &devices {
            if let Some(p) = &staged[i].pending
                && let Err(e) = rustix::fs::syncfs(&p.file)
            {
                return Err(CommitError {
                    committed: 0,
                    error: WorkspaceError::from_io(&staged[i].rel, e.into()),
                });
            }
        }
        let mut folders: Vec<(PathBuf, Dir)> = Vec::new();
        let total = staged.len();
        for (i, s) in staged.iter_mut().enumerate() {
            let Some(p) = s.pending.take() else { continue };
            if let Err(e) = p.put_in_place() {
                return Err(CommitError {
                    committed: i,
                    error: WorkspaceError::from_io(&s.rel, e),
                });
            }
            if s.durable && !folders.iter().any(|(f, _)| *f == p.parent) {
                folders.push((p.parent, p.pdir));
            }
        }
        for (parent, dir) in &folders {
            sync_dir(dir).map_err(|e| CommitError {
                committed: total,
                error: WorkspaceError::from_io(parent, e),
            })?;
        }
        Ok(())
    }

    /// Removes the file `rel` (a symbolic link itself, not what it points to).
    ///
    /// # Errors
    /// A refused path, [`WorkspaceError::NotFound`], a directory or other non-file
    /// ([`WorkspaceError::NotAFile`]), or an I/O failure.
    pub fn remove_file(&self, rel: &Path) -> Result<(), WorkspaceError> {
        let (parent, name) = split(rel).ok_or_else(|| WorkspaceError::NotAFile {
            path: show(rel),
            kind: "a directory",
        })?;
        self.check_protected(rel)?;
        let pdir = self.open_dir(parent)?;
        let meta = pdir
            .symlink_metadata(name)
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        if !meta.is_file() && !meta.file_type().is_symlink() {
            return Err(WorkspaceError::NotAFile {
                path: show(rel),
                kind: crate::kind_of(&meta),
            });
        }
        pdir.remove_file(name)
            .and_then(|()| sync_dir(&pdir))
            .map_err(|e| WorkspaceError::from_io(rel, e))
    }

    /// Removes the folders above `rel` that are empty, deepest first, up to the first
    /// that is not (or is protected, or the root): what a deletion or a move leaves
    /// behind, as `git rm` and `git apply` remove them. Errors stop it quietly.
    pub fn remove_empty_folders_above(&self, rel: &Path) {
        let mut folder = rel.parent();
        while let Some(dir) = folder.filter(|d| !d.as_os_str().is_empty()) {
            let Some((parent, name)) = split(dir) else {
                return;
            };
            if self.check_protected(dir).is_err() {
                return;
            }
            let Ok(pdir) = self.open_dir(parent) else {
                return;
            };
            // Fails on a folder with anything in it, which ends the walk.
            if pdir
                .remove_dir(name)
                .and_then(|()| sync_dir(&pdir))
                .is_err()
            {
                return;
            }
            folder = dir.parent();
        }
    }

    /// The path to write: `rel` itself, or where the symlink `rel` points (beneath the
    /// root). Creates the parent directories when asked.
    /// Refuses a path [`crate::PROTECTED`] covers, as given or with the links of its
    /// folders resolved (`hooks -> .git/hooks` does not get around it).
    fn check_protected(&self, rel: &Path) -> Result<(), WorkspaceError> {
        let resolved =
            split(rel).and_then(|(parent, name)| self.canonical(parent).ok().map(|p| p.join(name)));
        for path in std::iter::once(rel).chain(resolved.as_deref()) {
            if let Some(why) = crate::protected(path) {
                return Err(WorkspaceError::Protected {
                    path: show(rel),
                    why,
                });
            }
        }
        Ok(())
    }

    fn write_target(&self, rel: &Path, create_dirs: bool) -> Result<PathBuf, WorkspaceError> {
        let (parent, _) = split(rel).ok_or_else(|| WorkspaceError::NotAFile {
            path: show(rel),
            kind: "a directory",
        })?;
        self.check_protected(rel)?;
        if create_dirs
            && !parent.as_os_str().is_empty()
            && let Err(e) = self.dir.create_dir_all(parent)
        {
            // Opening the parent tells why more precisely (a symlink out, a file in
            // the way) than the bare creation error does.
            return Err(match self.open_dir(parent) {
                Err(precise) => precise,
                Ok(_) => WorkspaceError::from_io(rel, e),
            });
        }
        match self.symlink_metadata(rel) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = self.canonical(rel)?;
                self.check_protected(&target)?;
                Ok(target)
            }
            _ => Ok(rel.to_owned()),
        }
    }
}

/// A write made but not yet in place: see [`Workspace::stage_write`].
#[derive(Debug)]
#[must_use = "a staged write is discarded unless committed"]
pub struct Staged {
    rel: PathBuf,
    pending: Option<Pending>,
    size: u64,
    durable: bool,
}

/// A staged write's temporary file: written, not yet synced; without a name until it
/// is linked in (where `O_TMPFILE` works).
#[derive(Debug)]
struct Pending {
    pdir: Dir,
    parent: PathBuf,
    tmp: PathBuf,
    name: PathBuf,
    file: std::fs::File,
    /// The file has the name `tmp` (created with it, or linked in).
    linked: bool,
}

impl Pending {
    /// Gives an unnamed file the name `tmp`. Called once it is synced, so a crash
    /// never leaves a named, incomplete file.
    fn link(&self) -> io::Result<()> {
        if self.linked {
            return Ok(());
        }
        let proc_path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        rustix::fs::linkat(
            rustix::fs::CWD,
            proc_path.as_str(),
            &self.pdir,
            &self.tmp,
            AtFlags::SYMLINK_FOLLOW,
        )
        .or_else(|_| {
            rustix::fs::linkat(&self.file, "", &self.pdir, &self.tmp, AtFlags::EMPTY_PATH)
        })?;
        Ok(())
    }

    /// Links the synced file in and renames it over the target; on failure removes
    /// the temporary name (harmless if the link itself failed).
    fn put_in_place(&self) -> io::Result<()> {
        let done = self
            .link()
            .and_then(|()| self.pdir.rename(&self.tmp, &self.pdir, &self.name));
        if done.is_err() {
            let _ = self.pdir.remove_file(&self.tmp);
        }
        done
    }
}

/// Why [`Workspace::commit_all`] stopped.
#[derive(Debug)]
pub struct CommitError {
    /// How many of the writes, from the first, are in place.
    pub committed: usize,
    /// What failed.
    pub error: WorkspaceError,
}

impl Staged {
    /// Puts the written file in place and returns its size.
    ///
    /// # Errors
    /// An I/O failure of the sync or the rename (the old file is then intact and the
    /// temporary file removed).
    pub fn commit(mut self) -> Result<u64, WorkspaceError> {
        if let Some(p) = self.pending.take() {
            let done = if self.durable {
                p.file
                    .sync_all()
                    .and_then(|()| p.put_in_place())
                    .and_then(|()| sync_dir(&p.pdir))
            } else {
                p.put_in_place()
            };
            done.map_err(|e| WorkspaceError::from_io(&self.rel, e))?;
        }
        Ok(self.size)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // An unnamed file vanishes when closed; a named one is removed.
        if let Some(p) = self.pending.take()
            && p.linked
        {
            let _ = p.pdir.remove_file(&p.tmp);
        }
    }
}

fn split(rel: &Path) -> Option<(&Path, &Path)> {
    let name = rel.file_name()?;
    Some((rel.parent().unwrap_or(Path::new("")), Path::new(name)))
}

/// A hidden name beside `name` for the file being written: at most 100 bytes of
/// `name`, so the temporary name stays within the 255-byte limit of a file name.
fn temp_name(name: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let full = name.to_string_lossy();
    let mut end = full.len().min(100);
    while !full.is_char_boundary(end) {
        end -= 1;
    }
    PathBuf::from(format!(
        ".{}.{}-{n}.jianmu-tmp",
        &full[..end],
        std::process::id()
    ))
}

/// Appends `content` to the existing regular file `name` in place: the old content is
/// not copied (a 1-byte append to a large or sparse file costs one write). If the write
/// fails, the file is cut back to its old length, so it never keeps half an append.
fn append_in_place(pdir: &Dir, name: &Path, content: &[u8], durable: bool) -> io::Result<u64> {
    let mut options = OpenOptions::new();
    options
        .append(true)
        .custom_flags(crate::O_NONBLOCK | rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    let mut file = pdir.open_with(name, &options)?.into_std();
    let meta = file.metadata()?;
    if !meta.is_file() || std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(io::Error::other(
            "the file changed while it was being appended to",
        ));
    }
    let start = meta.len();
    let written = file
        .write_all(content)
        .and_then(|()| if durable { file.sync_data() } else { Ok(()) });
    if let Err(e) = written {
        let _ = file.set_len(start);
        return Err(e);
    }
    Ok(start + content.len() as u64)
}

/// Writes the new content into a temporary file in `pdir`, not yet synced.
///
/// The file is created unnamed (`O_TMPFILE`), so a crash while writing leaves nothing
/// behind; it gets the name `tmp` only once it is complete and synced, just before the
/// rename. Where the file system has no `O_TMPFILE`, it is created as `tmp` directly
/// (then `anonymous` is false).
fn write_temp(
    pdir: &Dir,
    tmp: &Path,
    name: &Path,
    existing: Option<&cap_std::fs::Metadata>,
    content: &[u8],
    append: bool,
) -> io::Result<(std::fs::File, bool, u64)> {
    let mode = existing.map(|m| cap_std::fs::PermissionsExt::mode(&m.permissions()) & 0o7777);
    let (file, anonymous) = create_temp(pdir, tmp, mode)?;
    let mut out = io::BufWriter::new(file);
    if append && existing.is_some() {
        let mut read = OpenOptions::new();
        read.read(true).custom_flags(crate::O_NONBLOCK);
        let mut old = pdir.open_with(name, &read)?;
        io::copy(&mut old, &mut out)?;
    }
    out.write_all(content)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    if let Some(meta) = existing {
        // The umask narrowed the mode at creation; restore the old bits exactly.
        file.set_permissions(std::fs::Permissions::from_mode(
            cap_std::fs::PermissionsExt::mode(&meta.permissions()),
        ))?;
    }
    let size = file.metadata()?.len();
    Ok((file, anonymous, size))
}

pub(crate) fn create_temp(
    pdir: &Dir,
    tmp: &Path,
    mode: Option<u32>,
) -> io::Result<(std::fs::File, bool)> {
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    let raw = Mode::from_raw_mode(mode.unwrap_or(0o666));
    match rustix::fs::openat(pdir, ".", flags, raw) {
        Ok(fd) => Ok((std::fs::File::from(fd), true)),
        Err(e) if [Errno::OPNOTSUPP, Errno::ISDIR, Errno::INVAL, Errno::NOENT].contains(&e) => {
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            if let Some(mode) = mode {
                options.mode(mode);
            }
            Ok((pdir.open_with(tmp, &options)?.into_std(), false))
        }
        Err(e) => Err(e.into()),
    }
}

/// Makes the rename durable. The directory handle itself may be open for path
/// lookups only, so open the directory again for reading to sync it.
fn sync_dir(dir: &Dir) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.read(true);
    dir.open_with(".", &options)?.sync_all()
}
