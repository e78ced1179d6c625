//! Repositories inside the workspace's repository: the gitlinks of an index (the
//! entries of mode 160000, which git checks for changes by running itself in that
//! folder, with that repository's configuration), found by reading the index file.

use std::path::{Path, PathBuf};

/// The mode of a gitlink entry.
const GITLINK: u32 = 0o160_000;

/// Larger than the index of any repository the tools are meant for (the index of a
/// 100,000-file repository is about 10 MB).
pub(crate) const MAX_INDEX: u64 = 256 << 20;

/// The most nested repositories followed, across every level.
pub(crate) const MAX_NESTED: usize = 256;

/// Why an index could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// Over [`MAX_INDEX`] or not a regular file.
    Size,
    /// Not an index this reader knows (a version or layout it does not parse).
    Format,
}

/// The paths of the gitlinks in the index at `index` (none when there is no index),
/// relative to the repository's work tree. `hash` is the length of an object id in
/// bytes (20, or 32 for SHA-256 repositories).
pub(crate) fn gitlinks(index: &Path, hash: usize) -> Result<Vec<PathBuf>, Unreadable> {
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;
    let meta = match std::fs::symlink_metadata(index) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(_) => return Err(Unreadable::Size),
    };
    if !meta.is_file() || meta.len() > MAX_INDEX {
        return Err(Unreadable::Size);
    }
    let mut bytes = Vec::new();
    std::fs::File::open(index)
        .and_then(|f| f.take(MAX_INDEX).read_to_end(&mut bytes))
        .map_err(|_| Unreadable::Size)?;
    let be32 = |at: usize| -> Result<u32, Unreadable> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(Unreadable::Format)
    };
    if bytes.get(..4) != Some(b"DIRC") {
        return Err(Unreadable::Format);
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return Err(Unreadable::Format);
    }
    let count = be32(8)? as usize;
    let mut at = 12;
    let mut path: Vec<u8> = Vec::new();
    let mut found = Vec::new();
    for _ in 0..count {
        let start = at;
        let mode = be32(start + 24)?;
        let flags_at = start + 40 + hash;
        let flags = bytes
            .get(flags_at..flags_at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or(Unreadable::Format)?;
        let mut name_at = flags_at + 2;
        if version >= 3 && flags & 0x4000 != 0 {
            name_at += 2;
        }
        if version == 4 {
            // A varint of bytes to strip from the previous path, then the rest of the
            // path up to a NUL; no padding.
            let (strip, used) = varint(bytes.get(name_at..).ok_or(Unreadable::Format)?)?;
            let keep = path.len().checked_sub(strip).ok_or(Unreadable::Format)?;
            path.truncate(keep);
            let rest = bytes.get(name_at + used..).ok_or(Unreadable::Format)?;
            let len = rest
                .iter()
                .position(|&b| b == 0)
                .ok_or(Unreadable::Format)?;
            path.extend_from_slice(&rest[..len]);
            at = name_at + used + len + 1;
        } else {
            let rest = bytes.get(name_at..).ok_or(Unreadable::Format)?;
            let len = rest
                .iter()
                .position(|&b| b == 0)
                .ok_or(Unreadable::Format)?;
            path.clear();
            path.extend_from_slice(&rest[..len]);
            // Padded with 1 to 8 NULs to a multiple of 8 bytes from the entry's start.
            let unpadded = name_at + len - start;
            at = start + (unpadded + 8) / 8 * 8;
        }
        if mode & 0o170_000 == GITLINK {
            found.push(PathBuf::from(std::ffi::OsStr::from_bytes(&path)));
        }
    }
    Ok(found)
}

/// A git varint (each byte's high bit continues it, and adds one per continuation).
fn varint(bytes: &[u8]) -> Result<(usize, usize), Unreadable> {
    let mut used = 0;
    let mut byte = *bytes.first().ok_or(Unreadable::Format)?;
    let mut value = usize::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        used += 1;
        if used > 8 {
            return Err(Unreadable::Format);
        }
        byte = *bytes.get(used).ok_or(Unreadable::Format)?;
        value = ((value + 1) << 7) | usize::from(byte & 0x7f);
    }
    Ok((value, used + 1))
}

/// The length of an object id in the repository whose configuration is `config`: 32
/// for a SHA-256 repository, else 20.
pub(crate) fn hash_len(config: &Path) -> usize {
    let text = std::fs::read(config)
        .map(|b| String::from_utf8_lossy(&b).to_ascii_lowercase())
        .unwrap_or_default();
    let sha256 = text.lines().any(|l| {
        let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
        l.starts_with("objectformat=sha256")
    });
    if sha256 { 32 } else { 20 }
}

/// The git folder of the work tree `dir`: its `.git` folder, or the folder a `.git`
/// file (`gitdir: PATH`) names. `None` when `dir` holds no repository.
pub(crate) fn git_dir_of(dir: &Path) -> Option<PathBuf> {
    let dot = dir.join(".git");
    let meta = std::fs::symlink_metadata(&dot).ok()?;
    if meta.is_dir() {
        return Some(dot);
    }
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let text = std::fs::read_to_string(&dot).ok()?;
    let target = text.strip_prefix("gitdir:")?.trim();
    Some(dir.join(target))
}
