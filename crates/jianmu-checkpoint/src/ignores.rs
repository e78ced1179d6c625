//! `.gitignore` files, read as a workspace's own data: never through a symbolic link,
//! never from a FIFO or device (which would block or never end), at most
//! [`MAX_BYTES`] each. A folder's rules apply beneath it, deeper files first, as git
//! reads them.

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The most of a `.gitignore` read; the rest is not read.
pub(crate) const MAX_BYTES: u64 = 1 << 20;

/// The rules of each folder met so far in one walk.
#[derive(Debug, Default)]
pub(crate) struct Ignores {
    folders: Mutex<HashMap<PathBuf, Option<Arc<Gitignore>>>>,
}

impl Ignores {
    /// Whether `path` (an entry beneath `root`) is ignored by the `.gitignore` files
    /// of its folders.
    pub(crate) fn ignored(&self, root: &Path, path: &Path, is_dir: bool) -> bool {
        let Some(parent) = path.parent() else {
            return false;
        };
        let mut folder = Some(parent);
        while let Some(dir) = folder {
            if let Some(rules) = self.rules(dir) {
                match rules.matched(path, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            if dir == root {
                break;
            }
            folder = dir.parent();
        }
        false
    }

    /// The rules of `dir`'s own `.gitignore`, read once.
    fn rules(&self, dir: &Path) -> Option<Arc<Gitignore>> {
        let mut folders = self.folders.lock().unwrap_or_else(PoisonError::into_inner);
        folders
            .entry(dir.to_path_buf())
            .or_insert_with(|| read(dir).map(Arc::new))
            .clone()
    }
}

/// `dir/.gitignore` when it is a regular file (opened without following a link or
/// waiting on a FIFO), its first [`MAX_BYTES`] as rules.
fn read(dir: &Path) -> Option<Gitignore> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(dir.join(".gitignore"))
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_BYTES).read_to_end(&mut text).ok()?;
    let mut builder = GitignoreBuilder::new(dir);
    for line in String::from_utf8_lossy(&text).lines() {
        // A line git would not read is skipped, as git skips it.
        let _ = builder.add_line(None, line);
    }
    builder.build().ok()
}
