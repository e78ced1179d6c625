//! Confined changes to the workspace for restores: every path is opened one
//! component at a time from the root handle with `O_NOFOLLOW`, so no write goes
//! through a symbolic link or outside the root; files and links are put in place
//! with `rename` from a temporary name beside them, so none is ever half-written.

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Opens the folder `rel` ("" for the root) beneath `root`, following no symbolic
/// link: a link anywhere on the path fails with `ENOTDIR`. The handle is `O_PATH`,
/// good for the `*at` calls below, and needs no read permission.
pub(crate) fn open_dir(root: impl AsFd, rel: &str) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(root, ".", flags, Mode::empty())?;
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        check_name(part)?;
        fd = rustix::fs::openat(&fd, part, flags, Mode::empty())?;
    }
    Ok(fd)
}

/// Splits `rel` into its folder and its last name.
pub(crate) fn split(rel: &str) -> (&str, &str) {
    match rel.rfind('/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => ("", rel),
    }
}

fn check_name(name: &str) -> io::Result<()> {
    if crate::object::valid_name(name) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path part is not a plain name",
        ))
    }
}

/// What is at `name` in `dir`, not following a link; `None` when nothing is.
pub(crate) fn kind_at(dir: &OwnedFd, name: &str) -> io::Result<Option<FileType>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The permission bits of `name` in `dir` (not following a link).
pub(crate) fn mode_at(dir: &OwnedFd, name: &str) -> io::Result<u32> {
    let name = if name.is_empty() { "." } else { name };
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(st.st_mode & 0o7777)
}

/// A temporary name beside `name`: at most 100 bytes of it, so the whole stays
/// within the 255-byte limit of a file name.
fn temp_name(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut end = name.len().min(100);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        ".{}.{}-{n}.jianmu-restore",
        &name[..end],
        std::process::id()
    )
}

/// Writes a file `name` in `dir` with exactly `mode`, its content from `fill`:
/// into a new temporary file beside it, then renamed over whatever file or link is
/// there (a link is replaced, never written through).
pub(crate) fn write_file<E>(
    dir: &OwnedFd,
    name: &str,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), E>,
) -> Result<(), WriteError<E>> {
    check_name(name).map_err(WriteError::Io)?;
    let tmp = temp_name(name);
    let fd = rustix::fs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| WriteError::Io(e.into()))?;
    let mut file = io::BufWriter::new(std::fs::File::from(fd));
    let done = fill(&mut file).map_err(WriteError::Fill).and_then(|()| {
        let file = file
            .into_inner()
            .map_err(|e| WriteError::Io(e.into_error()))?;
        // Set-id bits never survive a change of owner, nor land on a file of root's:
        // a file the model wrote must not become another user's set-id program.
        let chowned = own_like(dir, &file);
        let rooted = rustix::fs::fstat(&file).is_ok_and(|st| st.st_uid == 0);
        let mode = if chowned || rooted {
            mode & 0o1777
        } else {
            mode & 0o7777
        };
        // The umask narrowed the mode at creation; set it exactly.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(|e| WriteError::Io(e.into()))?;
        rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(|e| WriteError::Io(e.into()))
    });
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    done
}

/// Why [`write_file`] failed: the file system, or the content's source.
#[derive(Debug)]
pub(crate) enum WriteError<E> {
    Io(io::Error),
    Fill(E),
}

/// Makes `name` in `dir` a symbolic link to `target` (a temporary link, renamed over
/// what is there).
pub(crate) fn write_link(dir: &OwnedFd, name: &str, target: &[u8]) -> io::Result<()> {
    check_name(name)?;
    let tmp = temp_name(name);
    let target = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(target);
    rustix::fs::symlinkat(target, dir, tmp.as_str())?;
    own_like_at(dir, &tmp);
    let done = rustix::fs::renameat(dir, tmp.as_str(), dir, name);
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    done.map_err(Into::into)
}

/// Removes the file or link `name` in `dir`.
pub(crate) fn remove_file(dir: &OwnedFd, name: &str) -> io::Result<()> {
    check_name(name)?;
    rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(Into::into)
}

/// Removes the empty folder `name` in `dir`.
pub(crate) fn remove_dir(dir: &OwnedFd, name: &str) -> io::Result<()> {
    check_name(name)?;
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(Into::into)
}

/// Makes the folder `name` in `dir`, open to its owner only until its mode is set.
pub(crate) fn make_dir(dir: &OwnedFd, name: &str) -> io::Result<()> {
    check_name(name)?;
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
    own_like_at(dir, name);
    Ok(())
}

/// Gives `file` the owner of the folder `dir` it is made in, when they differ and
/// this process may (as root: a Docker sandbox works as the workspace's owner, who
/// must still be able to change what a restore wrote); whether it did. Otherwise left
/// as made.
fn own_like(dir: &OwnedFd, file: &impl AsFd) -> bool {
    let (Ok(want), Ok(got)) = (rustix::fs::fstat(dir), rustix::fs::fstat(file)) else {
        return false;
    };
    (want.st_uid, want.st_gid) != (got.st_uid, got.st_gid)
        && rustix::fs::fchown(file, Some(owner(want.st_uid)), Some(group(want.st_gid))).is_ok()
}

/// [`own_like`] for the entry `name` of `dir`, never following a link.
fn own_like_at(dir: &OwnedFd, name: &str) {
    let Ok(want) = rustix::fs::fstat(dir) else {
        return;
    };
    let Ok(got) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    if (want.st_uid, want.st_gid) != (got.st_uid, got.st_gid) {
        let _ = rustix::fs::chownat(
            dir,
            name,
            Some(owner(want.st_uid)),
            Some(group(want.st_gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        );
    }
}

fn owner(uid: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(uid)
}

fn group(gid: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(gid)
}

/// Sets the mode of the folder `name` in `dir` (`""`: `dir` itself) without
/// following a link: through a handle on the folder itself.
pub(crate) fn chmod_dir(dir: &OwnedFd, name: &str, mode: u32) -> io::Result<()> {
    let target = if name.is_empty() { "." } else { name };
    if !name.is_empty() {
        check_name(name)?;
    }
    let mode = Mode::from_raw_mode(mode & 0o7777);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, target, flags, Mode::empty()) {
        Ok(fd) => rustix::fs::fchmod(&fd, mode).map_err(Into::into),
        Err(Errno::ACCESS) => {
            // A folder its owner cannot read: `fchmod` needs a real handle, so go
            // through the path handle's entry in /proc, which names this very folder.
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(dir, target, flags, Mode::empty())?;
            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
            rustix::fs::chmod(proc.as_str(), mode).map_err(Into::into)
        }
        Err(e) => Err(e.into()),
    }
}
