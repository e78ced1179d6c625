//! `workspace_mode = "copy"`: the workspace is shipped into the container as a tar
//! through the engine API (for an engine that does not share this machine's files),
//! and what the sandbox changed is brought back by [`pull`].
//!
//! Both directions are bounded by `copy_limit_mib` before anything is allocated past
//! it. Only folders and regular files travel: links, devices and sockets are left
//! out. Bringing files back trusts nothing the container wrote: entries must be plain
//! relative paths, a file is never written through a link (a folder on the way that is
//! a link on this side skips the entry), and each file is written to a new name then
//! renamed over the old one, so no file is ever half written. Files deleted in the
//! sandbox are not deleted here.

use std::io::{Read, Write as _};
use std::path::{Component, Path, PathBuf};

use super::backend::Backend;
use crate::SandboxError;

/// The most entries (files and folders) copied either way.
pub(crate) const MAX_ENTRIES: usize = 200_000;

/// What [`DockerSandbox::pull`](super::DockerSandbox::pull) brought back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pulled {
    /// Files written here (new or changed).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Entries left out: links, special files, unsafe paths, paths through a link.
    pub skipped: usize,
}

fn too_big(limit: u64) -> SandboxError {
    SandboxError::Settings(format!(
        "the workspace is over copy_limit_mib ({} MiB) and cannot be copied; raise \
         [execution.docker] copy_limit_mib, remove large files, or use workspace_mode = \"mount\"",
        limit / (1024 * 1024)
    ))
}

fn io(what: &str, e: std::io::Error) -> SandboxError {
    SandboxError::Io {
        what: what.to_owned(),
        source: e,
    }
}

/// The workspace as a tar of folders and regular files, owned by `uid:gid` in the
/// container.
pub(crate) fn pack(
    workspace: &Path,
    uid: u64,
    gid: u64,
    limit: u64,
) -> Result<Vec<u8>, SandboxError> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut total: u64 = 0;
    let mut entries = 0usize;
    let header = |kind: tar::EntryType, size: u64, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode & 0o777);
        h.set_uid(uid);
        h.set_gid(gid);
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
    let mut stack = vec![top.clone()];
    while let Some(rel) = stack.pop() {
        let dir = workspace.join(rel.strip_prefix(&top).unwrap_or(&rel));
        let list = std::fs::read_dir(&dir)
            .map_err(|e| io(&format!("cannot read {}", dir.display()), e))?;
        for item in list {
            let item = item.map_err(|e| io("cannot read the workspace", e))?;
            let meta = item
                .metadata()
                .map_err(|e| io("cannot read the workspace", e))?;
            let name = rel.join(item.file_name());
            use std::os::unix::fs::PermissionsExt as _;
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                entries += 1;
                let mut h = header(tar::EntryType::Directory, 0, mode | 0o700);
                builder
                    .append_data(&mut h, &name, std::io::empty())
                    .map_err(|e| io("cannot pack the workspace", e))?;
                stack.push(name);
            } else if meta.is_file() {
                entries += 1;
                total = total.saturating_add(meta.len());
                if total > limit {
                    return Err(too_big(limit));
                }
                let file = std::fs::File::open(item.path())
                    .map_err(|e| io(&format!("cannot read {}", item.path().display()), e))?;
                let mut h = header(tar::EntryType::Regular, meta.len(), mode | 0o600);
                // A file that grows meanwhile is cut at the size read first.
                builder
                    .append_data(&mut h, &name, file.take(meta.len()))
                    .map_err(|e| io("cannot pack the workspace", e))?;
            }
            if entries > MAX_ENTRIES {
                return Err(SandboxError::Settings(format!(
                    "the workspace has more than {MAX_ENTRIES} files and folders and cannot be copied; use workspace_mode = \"mount\""
                )));
            }
        }
    }
    builder
        .into_inner()
        .map_err(|e| io("cannot pack the workspace", e))
}

/// Copies the workspace into the container `id`, at the same path.
pub(crate) async fn upload(
    backend: &dyn Backend,
    id: &str,
    workspace: &Path,
    user: &str,
    limit: u64,
) -> Result<(), SandboxError> {
    let (uid, gid) = user
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
        .unwrap_or((65534, 65534));
    let ws = workspace.to_owned();
    let tar = tokio::task::spawn_blocking(move || pack(&ws, uid, gid, limit))
        .await
        .map_err(|e| SandboxError::Lost(format!("packing the workspace failed: {e}")))??;
    // Unpacked into the volume mounted on the workspace's parent (`container.rs`).
    let parent = workspace.parent().unwrap_or(Path::new("/"));
    backend.upload(id, parent, tar).await
}

/// Brings back what the container `id` has in the workspace: new and changed files
/// are written here (see the module docs for what is left out).
pub(crate) async fn pull(
    backend: &dyn Backend,
    id: &str,
    workspace: &Path,
    limit: u64,
) -> Result<Pulled, SandboxError> {
    // Headers and padding on top of the files' bytes.
    let cap = limit.saturating_add(limit / 8).saturating_add(1 << 20);
    let Some(tar) = backend.download(id, workspace, cap).await? else {
        return Err(too_big(limit));
    };
    let ws = workspace.to_owned();
    tokio::task::spawn_blocking(move || unpack(&tar, &ws, limit))
        .await
        .map_err(|e| SandboxError::Lost(format!("unpacking the workspace failed: {e}")))?
}

/// Writes the folders and regular files of `tar` under `workspace`; the archive holds
/// one top folder (the workspace, by whatever name), whose contents are written.
pub(crate) fn unpack(tar: &[u8], workspace: &Path, limit: u64) -> Result<Pulled, SandboxError> {
    let mut pulled = Pulled::default();
    let mut archive = tar::Archive::new(tar);
    let entries = archive
        .entries()
        .map_err(|e| io("the sandbox's workspace archive is unreadable", e))?;
    for (n, entry) in entries.enumerate() {
        if n > MAX_ENTRIES {
            return Err(SandboxError::Settings(format!(
                "the sandbox's workspace has more than {MAX_ENTRIES} entries; not brought back further"
            )));
        }
        let mut entry =
            entry.map_err(|e| io("the sandbox's workspace archive is unreadable", e))?;
        let kind = entry.header().entry_type();
        let Some(rel) = entry.path().ok().and_then(|p| plain(&p)) else {
            pulled.skipped += 1;
            continue;
        };
        let rel: PathBuf = rel.components().skip(1).collect();
        if rel.as_os_str().is_empty() {
            continue;
        }
        let Some(dest) = through_folders(workspace, &rel) else {
            pulled.skipped += 1;
            continue;
        };
        match kind {
            tar::EntryType::Directory => match std::fs::symlink_metadata(&dest) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => pulled.skipped += 1,
                Err(_) => {
                    if std::fs::create_dir(&dest).is_err() {
                        pulled.skipped += 1;
                    }
                }
            },
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().unwrap_or(u64::MAX);
                if pulled.bytes.saturating_add(size) > limit {
                    return Err(too_big(limit));
                }
                if std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()) {
                    pulled.skipped += 1;
                    continue;
                }
                let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                entry
                    .read_to_end(&mut data)
                    .map_err(|e| io("the sandbox's workspace archive is unreadable", e))?;
                let unchanged = std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file())
                    && std::fs::read(&dest).is_ok_and(|old| old == data);
                if unchanged {
                    continue;
                }
                let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
                write_new(&dest, &data, mode)
                    .map_err(|e| io(&format!("cannot write {}", dest.display()), e))?;
                pulled.files += 1;
                pulled.bytes += data.len() as u64;
            }
            _ => pulled.skipped += 1,
        }
    }
    Ok(pulled)
}

/// `path` made of plain names only (a leading `./` dropped), else `None`.
fn plain(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(name) => out.push(name),
            _ => return None,
        }
    }
    Some(out)
}

/// `workspace/rel` when every folder on the way exists here as a real folder (not a
/// link); `None` otherwise.
fn through_folders(workspace: &Path, rel: &Path) -> Option<PathBuf> {
    let mut at = workspace.to_owned();
    let parts: Vec<_> = rel.components().collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        if i + 1 < parts.len() {
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                _ => return None,
            }
        }
    }
    Some(at)
}

/// Writes `data` to a new file beside `dest`, then renames it over `dest` (which
/// replaces a link at `dest` rather than following it).
fn write_new(dest: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = dest.parent().unwrap_or(Path::new("."));
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    for attempt in 0..16u32 {
        let tmp = dir.join(format!(
            ".{name}.jianmu-pull-{}-{attempt}",
            std::process::id()
        ));
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode | 0o600)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = file.write_all(data).and_then(|()| file.sync_all());
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, dest)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        return Ok(());
    }
    Err(std::io::Error::other("no free temporary name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_keeps_files_and_folders() {
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir(from.path().join("sub")).unwrap();
        std::fs::write(from.path().join("sub/a.txt"), "alpha").unwrap();
        std::fs::write(from.path().join("b.txt"), "beta").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.path().join("link")).unwrap();
        let tar = pack(from.path(), 1000, 1000, 1 << 20).unwrap();
        let to = tempfile::tempdir().unwrap();
        let pulled = unpack(&tar, to.path(), 1 << 20).unwrap();
        assert_eq!((pulled.files, pulled.bytes), (2, 9));
        let to_ws = to.path();
        assert_eq!(
            std::fs::read_to_string(to_ws.join("sub/a.txt")).unwrap(),
            "alpha"
        );
        assert!(!to_ws.join("link").exists());
        // Unchanged files are not written again.
        assert_eq!(unpack(&tar, to.path(), 1 << 20).unwrap().files, 0);
    }

    #[test]
    fn a_workspace_over_the_limit_is_refused_before_it_is_packed() {
        let from = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("big"), vec![0u8; 4096]).unwrap();
        let err = pack(from.path(), 0, 0, 1024).unwrap_err().to_string();
        assert!(err.contains("copy_limit_mib"), "{err}");
    }

    /// A hostile archive: an escape by `..`, an absolute path, a link, and a file
    /// under a folder that is a link on this side. None is written outside.
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
        let pulled = unpack(&tar, ws.path(), 1 << 20).unwrap();
        assert_eq!((pulled.files, pulled.skipped), (1, 4));
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert_eq!(
            std::fs::read_to_string(ws.path().join("fine.txt")).unwrap(),
            "ok"
        );
        assert!(!ws.path().parent().unwrap().join("escape.txt").exists());
    }
}
