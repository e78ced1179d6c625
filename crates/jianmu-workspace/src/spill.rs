//! Outputs too long to answer whole, saved where the file tools can read them.
//!
//! Each scope (a session's tools) gets a folder `.jianmu/outputs/<id>` in the
//! workspace on its first saved output; it holds at most [`MAX_FILES`] files and
//! [`MAX_BYTES`] bytes, and is removed when the scope ends. Every step goes through the
//! workspace's confined handles, so a `.jianmu` planted as a symlink leads nowhere.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cap_std::fs::Dir;

use crate::Workspace;

/// Where the folders are, relative to the workspace root.
pub const OUTPUTS: &str = ".jianmu/outputs";

/// Most files one scope saves.
pub const MAX_FILES: u64 = 200;

/// Most bytes one scope saves, all files together.
pub const MAX_BYTES: u64 = 512 * 1024 * 1024;

/// Most bytes of one saved output.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The saved outputs of one scope; get it with [`Spills::of`].
#[derive(Default)]
pub struct Spills {
    folder: Mutex<Option<Arc<Folder>>>,
}

impl std::fmt::Debug for Spills {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spills").finish_non_exhaustive()
    }
}

struct Folder {
    /// `.jianmu/outputs`, holding `name`.
    outputs: Dir,
    name: String,
    dir: Dir,
    files: AtomicU64,
    bytes: Arc<AtomicU64>,
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = self.outputs.remove_dir_all(&self.name);
    }
}

/// A saved output being written: what is written past the limits is dropped, and
/// [`SpillFile::describe`] says how much was kept.
pub struct SpillFile {
    file: std::fs::File,
    /// The path as the file tools take it (relative to the workspace root).
    pub path: String,
    written: u64,
    dropped: u64,
    total: Arc<AtomicU64>,
    _folder: Arc<Folder>,
}

impl std::fmt::Debug for SpillFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SpillFile {
    /// Appends `data`, as far as the limits allow.
    pub fn write(&mut self, data: &[u8]) {
        let room = MAX_FILE_BYTES.saturating_sub(self.written);
        let scope_room = MAX_BYTES.saturating_sub(self.total.load(Ordering::Relaxed));
        let take = (data.len() as u64).min(room).min(scope_room) as usize;
        if take > 0 && self.file.write_all(&data[..take]).is_ok() {
            self.written += take as u64;
            self.total.fetch_add(take as u64, Ordering::Relaxed);
        } else if take > 0 {
            self.dropped += take as u64;
        }
        self.dropped += (data.len() - take) as u64;
    }

    /// Whether the limits let nothing more be written.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.written >= MAX_FILE_BYTES || self.total.load(Ordering::Relaxed) >= MAX_BYTES
    }

    /// How the saved file is described to the model: its path and how to read it, and
    /// whether it is whole.
    #[must_use]
    pub fn describe(&self) -> String {
        let cut = if self.dropped > 0 {
            format!(
                " (its first {} bytes; the {} bytes after are over the limit for saved outputs)",
                self.written, self.dropped
            )
        } else {
            String::new()
        };
        format!(
            "the whole output is saved in {}{cut}: read it with read_file (offset and limit) or search it with grep_search",
            self.path
        )
    }
}

impl Spills {
    /// The spills of the scope `config`'s tools share.
    #[must_use]
    pub fn of(config: &jianmu_tool_core::ToolConfig) -> Arc<Spills> {
        config.scope().get::<Spills>()
    }

    fn folder(&self, ws: &Workspace) -> Result<Arc<Folder>, String> {
        let mut slot = self.folder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(folder) = slot.as_ref() {
            return Ok(Arc::clone(folder));
        }
        let fail = |e: std::io::Error| format!("cannot make {OUTPUTS} in the workspace: {e}");
        ws.dir().create_dir_all(OUTPUTS).map_err(fail)?;
        let outputs = ws.dir().open_dir(OUTPUTS).map_err(fail)?;
        // Saved outputs are not part of the project.
        if !outputs.exists(".gitignore") {
            let _ = outputs.write(".gitignore", "*\n");
        }
        let mut name = String::new();
        let mut dir = None;
        for attempt in 0u32..16 {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(attempt);
            h.write_u32(std::process::id());
            let candidate = format!("{:012x}", h.finish() & 0xffff_ffff_ffff);
            if outputs.create_dir(&candidate).is_ok() {
                dir = Some(outputs.open_dir(&candidate).map_err(fail)?);
                name = candidate;
                break;
            }
        }
        let dir = dir.ok_or_else(|| format!("cannot make a folder in {OUTPUTS}"))?;
        let folder = Arc::new(Folder {
            outputs,
            name,
            dir,
            files: AtomicU64::new(0),
            bytes: Arc::new(AtomicU64::new(0)),
        });
        *slot = Some(Arc::clone(&folder));
        Ok(folder)
    }

    /// A new file for an output of `tool`, to be written as it comes.
    ///
    /// # Errors
    /// The scope's limits are reached, or the folder cannot be made (in words for the
    /// model).
    pub fn create(&self, ws: &Workspace, tool: &str) -> Result<SpillFile, String> {
        let folder = self.folder(ws)?;
        let n = folder.files.fetch_add(1, Ordering::Relaxed) + 1;
        if n > MAX_FILES || folder.bytes.load(Ordering::Relaxed) >= MAX_BYTES {
            return Err(format!(
                "the rest was not saved: this session already saved {MAX_FILES} outputs or {MAX_BYTES} bytes"
            ));
        }
        let file_name = format!("{tool}-{n}.txt");
        let file = folder
            .dir
            .create(&file_name)
            .map_err(|e| format!("cannot save the output: {e}"))?
            .into_std();
        let path = Path::new(OUTPUTS)
            .join(&folder.name)
            .join(&file_name)
            .to_string_lossy()
            .into_owned();
        Ok(SpillFile {
            file,
            path,
            written: 0,
            dropped: 0,
            total: Arc::clone(&folder.bytes),
            _folder: folder,
        })
    }

    /// Saves `content` whole (as far as the limits allow) and describes where.
    ///
    /// # Errors
    /// As [`Spills::create`].
    pub fn save(&self, ws: &Workspace, tool: &str, content: &[u8]) -> Result<String, String> {
        let mut file = self.create(ws, tool)?;
        file.write(content);
        Ok(file.describe())
    }
}

/// Where one tool saves its long outputs: the workspace, the scope's [`Spills`] and the
/// tool's name. Clones share the folder.
#[derive(Debug, Clone)]
pub struct Saver {
    ws: Arc<Workspace>,
    spills: Arc<Spills>,
    tool: &'static str,
}

impl Saver {
    /// Saves `tool`'s outputs in `spills`, in `ws`.
    #[must_use]
    pub fn new(ws: Arc<Workspace>, spills: Arc<Spills>, tool: &'static str) -> Self {
        Self { ws, spills, tool }
    }

    /// The saver of `tool` built from `config`: its workspace, and the spills its scope
    /// shares.
    ///
    /// # Errors
    /// The workspace cannot be opened.
    pub fn for_tool(
        config: &jianmu_tool_core::ToolConfig,
        tool: &'static str,
    ) -> Result<Self, jianmu_tool_core::ToolError> {
        Ok(Self::new(
            crate::for_tool(config, tool)?,
            Spills::of(config),
            tool,
        ))
    }

    /// A new file for an output, to be written as it comes ([`Spills::create`]).
    ///
    /// # Errors
    /// As [`Spills::create`].
    pub fn create(&self) -> Result<SpillFile, String> {
        self.spills.create(&self.ws, self.tool)
    }

    /// Saves `content` and describes where ([`Spills::save`]).
    ///
    /// # Errors
    /// As [`Spills::create`].
    pub fn save(&self, content: &[u8]) -> Result<String, String> {
        self.spills.save(&self.ws, self.tool, content)
    }
}

/// `text` as an answer of about `max` characters: its head (four fifths) and tail
/// (one fifth), with a line between saying how much was cut and `saved` (where the
/// whole is, or why it is not saved). `text` itself when it fits.
#[must_use]
pub fn head_and_tail(text: &str, max: usize, saved: &str) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head_chars = max - max / 5;
    let tail_chars = max / 5;
    let head_end = text
        .char_indices()
        .nth(head_chars)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = if tail_chars == 0 {
        text.len()
    } else {
        text.char_indices()
            .rev()
            .nth(tail_chars - 1)
            .map_or(head_end, |(i, _)| i.max(head_end))
    };
    format!(
        "{}\n... ({} of {total} characters cut from the middle; {saved}) ...\n{}",
        &text[..head_end],
        total - head_chars - tail_chars,
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_in_a_folder_of_the_scope_and_removed_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        let spills = Spills::default();
        let said = spills.save(&ws, "bash", b"all of it").unwrap();
        let path = said
            .strip_prefix("the whole output is saved in ")
            .and_then(|s| s.split(':').next())
            .unwrap()
            .to_owned();
        assert!(
            path.starts_with(".jianmu/outputs/") && path.ends_with("/bash-1.txt"),
            "{said}"
        );
        assert_eq!(std::fs::read(tmp.path().join(&path)).unwrap(), b"all of it");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(".jianmu/outputs/.gitignore")).unwrap(),
            "*\n"
        );
        drop(spills);
        assert!(!tmp.path().join(&path).exists());
        assert!(!tmp.path().join(path).parent().unwrap().exists());
    }

    #[test]
    fn head_and_tail_keep_both_ends() {
        assert_eq!(head_and_tail("short", 10, "x"), "short");
        assert_eq!(
            head_and_tail("abcdefghijklmnopqrstuvwxyz", 10, "saved in F"),
            "abcdefgh\n... (16 of 26 characters cut from the middle; saved in F) ...\nyz"
        );
        assert_eq!(
            head_and_tail("ééééééééééé", 5, "s"),
            "éééé\n... (6 of 11 characters cut from the middle; s) ...\né"
        );
    }

    #[test]
    fn a_planted_symlink_leads_nowhere() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join(".jianmu")).unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        assert!(Spills::default().save(&ws, "bash", b"x").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
