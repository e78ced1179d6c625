//! Outputs too long to answer whole, saved where the file tools can read them.
//!
//! Each scope (a session's tools) gets a folder `.jianmu/outputs/<id>` in the
//! workspace (or under the folder [`SavedOutputs`] names) on its first saved output;
//! it holds at most [`MAX_FILES`] files and [`MAX_BYTES`] bytes, and is removed when
//! the scope ends, unless the configuration keeps it (a one-shot call, whose answer
//! names a file read after it: kept folders are named `kept-<id>`, and those older
//! than a day are removed when a new one is made). Every step goes through the
//! workspace's confined handles, so a `.jianmu` planted as a symlink leads nowhere.
//!
//! [`SavedOutputs`]: jianmu_tool_core::SavedOutputs

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cap_std::fs::Dir;

use crate::Workspace;

/// Why a long answer could not be saved to a file: a short sentence for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpillError(pub String);

impl From<String> for SpillError {
    fn from(text: String) -> Self {
        Self(text)
    }
}

/// Where the folders are, relative to the workspace root.
pub const OUTPUTS: &str = ".jianmu/outputs";

/// Most files one scope saves.
pub const MAX_FILES: u64 = 200;

/// Most bytes one scope saves, all files together.
pub const MAX_BYTES: u64 = 512 * 1024 * 1024;

/// Most bytes of one saved output.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How old a kept folder gets before a new one removes it.
pub const KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

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
    /// `.jianmu/outputs` (or the configured folder), holding `name`.
    outputs: Dir,
    /// `outputs` as the file tools take it.
    base: String,
    name: String,
    dir: Dir,
    files: AtomicU64,
    bytes: Arc<AtomicU64>,
    keep: bool,
}

impl Drop for Folder {
    fn drop(&mut self) {
        if !self.keep {
            let _ = self.outputs.remove_dir_all(&self.name);
        }
    }
}

/// Removes the kept folders in `outputs` older than [`KEPT_FOR`].
fn prune_kept(outputs: &Dir) {
    let Ok(entries) = outputs.entries() else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let old = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t.into_std()).ok())
            .is_some_and(|age| age > KEPT_FOR);
        if name.starts_with("kept-") && old {
            let _ = outputs.remove_dir_all(name);
        }
    }
}

/// Checks a configured folder: relative, inside the workspace, plain names only.
///
/// # Errors
/// The folder is absolute, empty, or has `..` or `.` in it.
pub fn check_folder(folder: &str) -> Result<(), SpillError> {
    let path = Path::new(folder);
    let plain = path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if folder.is_empty() || !plain {
        return Err(SpillError(format!(
            "outputs folder `{folder}` must be a relative path inside the workspace, without `.` or `..`"
        )));
    }
    Ok(())
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
    /// Whether the file holds everything written to it (nothing was over the limits).
    #[must_use]
    pub fn is_whole(&self) -> bool {
        self.dropped == 0
    }

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

    fn folder(&self, ws: &Workspace, place: &Place) -> Result<Arc<Folder>, String> {
        let mut slot = self.folder.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(folder) = slot.as_ref() {
            return Ok(Arc::clone(folder));
        }
        let base = place.base.as_str();
        let fail = |e: std::io::Error| format!("cannot make {base} in the workspace: {e}");
        ws.dir().create_dir_all(base).map_err(fail)?;
        let outputs = ws.dir().open_dir(base).map_err(fail)?;
        // Saved outputs are not part of the project.
        if !outputs.exists(".gitignore") {
            let _ = outputs.write(".gitignore", "*\n");
        }
        if place.keep {
            prune_kept(&outputs);
        }
        let mut name = String::new();
        let mut dir = None;
        for attempt in 0u32..16 {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(attempt);
            h.write_u32(std::process::id());
            let prefix = if place.keep { "kept-" } else { "" };
            let candidate = format!("{prefix}{:012x}", h.finish() & 0xffff_ffff_ffff);
            if outputs.create_dir(&candidate).is_ok() {
                dir = Some(outputs.open_dir(&candidate).map_err(fail)?);
                name = candidate;
                break;
            }
        }
        let dir = dir.ok_or_else(|| format!("cannot make a folder in {base}"))?;
        let folder = Arc::new(Folder {
            outputs,
            base: base.to_owned(),
            name,
            dir,
            files: AtomicU64::new(0),
            bytes: Arc::new(AtomicU64::new(0)),
            keep: place.keep,
        });
        *slot = Some(Arc::clone(&folder));
        Ok(folder)
    }

    /// A new file for an output of `tool`, to be written as it comes.
    ///
    /// # Errors
    /// The scope's limits are reached, or the folder cannot be made (in words for the
    /// model).
    pub fn create(
        &self,
        ws: &Workspace,
        place: &Place,
        tool: &str,
    ) -> Result<SpillFile, SpillError> {
        let folder = self.folder(ws, place)?;
        let n = folder.files.fetch_add(1, Ordering::Relaxed) + 1;
        if n > MAX_FILES || folder.bytes.load(Ordering::Relaxed) >= MAX_BYTES {
            return Err(SpillError(format!(
                "the rest was not saved: this session already saved {MAX_FILES} outputs or {MAX_BYTES} bytes"
            )));
        }
        let file_name = format!("{tool}-{n}.txt");
        let file = folder
            .dir
            .create(&file_name)
            .map_err(|e| format!("cannot save the output: {e}"))?
            .into_std();
        let path = Path::new(&folder.base)
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
    pub fn save(
        &self,
        ws: &Workspace,
        place: &Place,
        tool: &str,
        content: &[u8],
    ) -> Result<String, SpillError> {
        let mut file = self.create(ws, place, tool)?;
        file.write(content);
        Ok(file.describe())
    }
}

/// Where a scope's folder is made: the folder that holds such folders (relative to the
/// workspace root) and whether it outlives the scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// `.jianmu/outputs`, or the configured folder.
    pub base: String,
    /// Kept when the scope ends.
    pub keep: bool,
}

impl Default for Place {
    fn default() -> Self {
        Self {
            base: OUTPUTS.to_owned(),
            keep: false,
        }
    }
}

impl Place {
    /// The place `config` sets.
    ///
    /// # Errors
    /// A configured folder that is not a plain relative path.
    pub fn of(config: &jianmu_tool_core::ToolConfig) -> Result<Self, SpillError> {
        let outputs = config.saved_outputs();
        let base = match &outputs.folder {
            Some(folder) => {
                check_folder(folder)?;
                folder.trim_end_matches('/').to_owned()
            }
            None => OUTPUTS.to_owned(),
        };
        Ok(Self {
            base,
            keep: outputs.keep,
        })
    }
}

/// Where one tool saves its long outputs: the workspace, the scope's [`Spills`], where
/// its folder goes and the tool's name. Clones share the folder.
#[derive(Debug, Clone)]
pub struct Saver {
    ws: Arc<Workspace>,
    spills: Arc<Spills>,
    place: Arc<Place>,
    tool: &'static str,
}

impl Saver {
    /// Saves `tool`'s outputs in `spills`, in `ws`, in a folder under
    /// `.jianmu/outputs` removed with the scope.
    #[must_use]
    pub fn new(ws: Arc<Workspace>, spills: Arc<Spills>, tool: &'static str) -> Self {
        Self {
            ws,
            spills,
            place: Arc::new(Place::default()),
            tool,
        }
    }

    /// The same saver, making its folder at `place`.
    #[must_use]
    pub fn at(mut self, place: Place) -> Self {
        self.place = Arc::new(place);
        self
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
        let place = Place::of(config).map_err(|e| jianmu_tool_core::ToolError::Config {
            tool: tool.to_owned(),
            message: e.0,
        })?;
        Ok(Self::new(crate::for_tool(config, tool)?, Spills::of(config), tool).at(place))
    }

    /// A new file for an output, to be written as it comes ([`Spills::create`]).
    ///
    /// # Errors
    /// As [`Spills::create`].
    pub fn create(&self) -> Result<SpillFile, SpillError> {
        self.spills.create(&self.ws, &self.place, self.tool)
    }

    /// Saves `content` and describes where ([`Spills::save`]).
    ///
    /// # Errors
    /// As [`Spills::create`].
    pub fn save(&self, content: &[u8]) -> Result<String, SpillError> {
        self.spills.save(&self.ws, &self.place, self.tool, content)
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

/// As [`head_and_tail`], for a listing: the cut falls between lines, so that no line
/// is shown in part (a line longer than the part kept is cut as characters).
#[must_use]
pub fn head_and_tail_lines(text: &str, max: usize, saved: &str) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head_chars = max - max / 5;
    let tail_chars = max / 5;
    let at_char = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    // The head ends after the last whole line within its share, the tail starts at
    // the first whole line within its own.
    let head_limit = at_char(head_chars);
    let head_end = text[..head_limit].rfind('\n').map_or(head_limit, |i| i + 1);
    let tail_limit = if tail_chars == 0 {
        text.len()
    } else {
        text.char_indices()
            .rev()
            .nth(tail_chars - 1)
            .map_or(head_end, |(i, _)| i.max(head_end))
    };
    let tail_start = if tail_limit == 0 || text[..tail_limit].ends_with('\n') {
        tail_limit
    } else {
        text[tail_limit..]
            .find('\n')
            .map_or(text.len(), |i| tail_limit + i + 1)
    };
    let tail_start = tail_start.max(head_end);
    let middle = &text[head_end..tail_start];
    format!(
        "{}... ({} lines of {} characters cut from the middle; {saved}) ...\n{}",
        &text[..head_end],
        middle.matches('\n').count(),
        middle.chars().count(),
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_cut_between_lines() {
        let text: String = (0..1000)
            .map(|k| format!("src/file{k}.rs:{k}:match\n"))
            .collect();
        let cut = head_and_tail_lines(&text, 2000, "saved nowhere");
        for line in cut.lines() {
            assert!(
                line.starts_with("src/file") && line.ends_with(":match")
                    || line.starts_with("... ("),
                "a line shown in part: {line:?}"
            );
        }
        assert!(cut.starts_with("src/file0.rs:0:match\n"));
        assert!(cut.ends_with("src/file999.rs:999:match\n"));
        assert!(cut.chars().count() <= 2000 + 100, "{}", cut.len());
        let cut_lines: usize = cut
            .lines()
            .find_map(|l| l.strip_prefix("... (")?.split(' ').next()?.parse().ok())
            .unwrap();
        assert_eq!(cut.lines().count() - 1 + cut_lines, 1000);
    }

    #[test]
    fn saved_in_a_folder_of_the_scope_and_removed_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        let spills = Spills::default();
        let said = spills
            .save(&ws, &Place::default(), "bash", b"all of it")
            .unwrap();
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
    fn a_configured_folder_and_kept_outputs() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        let place = Place {
            base: "scratch/saved".to_owned(),
            keep: true,
        };
        // A kept folder from two days ago goes when a new one is made; a recent one stays.
        for (name, age) in [("kept-old", 2 * 24 * 3600), ("kept-recent", 60)] {
            let dir = tmp.path().join("scratch/saved").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::open(&dir)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        let spills = Spills::default();
        let said = spills.save(&ws, &place, "bash", b"kept").unwrap();
        assert!(said.contains("saved in scratch/saved/kept-"), "{said}");
        drop(spills);
        let left: Vec<String> = std::fs::read_dir(tmp.path().join("scratch/saved"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!left.contains(&"kept-old".to_owned()), "{left:?}");
        assert!(left.contains(&"kept-recent".to_owned()), "{left:?}");
        assert_eq!(
            left.iter().filter(|n| n.starts_with("kept-")).count(),
            2,
            "{left:?}"
        );

        for bad in ["", "/tmp/x", "../x", "a/../b", "./a"] {
            assert!(check_folder(bad).is_err(), "{bad:?}");
        }
        assert!(check_folder("a/b").is_ok());
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
        assert!(
            Spills::default()
                .save(&ws, &Place::default(), "bash", b"x")
                .is_err()
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
