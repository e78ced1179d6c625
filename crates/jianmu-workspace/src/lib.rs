//! Confined file access for Jianmu tools.
//!
//! A [`Workspace`] holds an open handle on its root directory. Every path a tool
//! touches is first mapped lexically to a path relative to the root (absolute paths
//! must lie inside it, `..` may not climb above it, NUL bytes are refused), then opened
//! *relative to the root handle* with `cap-std`, which resolves every component
//! beneath the root, symlinks included (`openat2` with `RESOLVE_BENEATH` where the
//! kernel has it). A symlink that points outside, or a component swapped for one while
//! a call runs, fails the open instead of escaping.
//!
//! Files are opened non-blocking and checked after opening (so a FIFO or device cannot
//! hang a call), hard-linked files are refused (the same file may exist outside), and
//! writes are atomic: a temporary file in the same directory, then `rename`, with the
//! old file's permission bits kept (and, with `durable`, `fsync` before the rename).
//!
//! ```
//! # fn main() -> Result<(), jianmu_workspace::WorkspaceError> {
//! let tmp = tempfile::tempdir().unwrap();
//! let ws = jianmu_workspace::Workspace::open(tmp.path())?;
//! let rel = ws.relative("notes/today.txt")?;
//! ws.write_atomic(&rel, b"hello", &jianmu_workspace::WriteOptions::default())?;
//! assert_eq!(ws.read_to_end(&rel, 1024)?, b"hello");
//! assert!(ws.relative("../etc/passwd").is_err());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};

mod lock;
mod spill;
mod write;

/// Opening with `O_NONBLOCK` makes opening a FIFO return at once instead of waiting
/// for a writer; regular files read the same either way.
pub(crate) const O_NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;

pub use lock::FileLock;
pub use spill::{
    KEPT_FOR, MAX_BYTES, MAX_FILE_BYTES, MAX_FILES, OUTPUTS, Place, Saver, SpillError, SpillFile,
    Spills, check_folder, head_and_tail, head_and_tail_lines,
};
pub use write::{CommitError, Staged, WriteOptions};

/// Why a path was refused or an operation failed. Every message names the path and
/// the rule, so a model can correct its call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The path, taken literally, lies outside the workspace.
    #[error("refused `{path}`: the path is outside the workspace")]
    Outside {
        /// The path as given.
        path: String,
    },
    /// Resolving the path followed a symbolic link out of the workspace.
    #[error("refused `{path}`: the path leads outside the workspace through a symbolic link")]
    Escape {
        /// The path as given.
        path: String,
    },
    /// The path has a NUL byte.
    #[error("refused the path: it contains a NUL byte")]
    NulByte,
    /// Symbolic links loop.
    #[error("refused `{path}`: symbolic links loop")]
    SymlinkLoop {
        /// The path as given.
        path: String,
    },
    /// Nothing at that path.
    #[error("`{path}` does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// Something other than a regular file where one is needed.
    #[error("refused `{path}`: it is {kind}, not a regular file")]
    NotAFile {
        /// The path as given.
        path: String,
        /// What it is: "a directory", "a FIFO", ...
        kind: &'static str,
    },
    /// A path ending in `/` where a file is needed.
    #[error("refused `{path}/`: a path ending in `/` names a directory, and a file is needed here")]
    TrailingSlash {
        /// The path as given, without the slash.
        path: String,
    },
    /// Something other than a directory where one is needed.
    #[error("`{path}` is not a directory")]
    NotADirectory {
        /// The path as given.
        path: String,
    },
    /// The file has other hard links, which may lie outside the workspace.
    #[error(
        "refused `{path}`: the file has {links} hard links, and another may be outside the workspace"
    )]
    HardLink {
        /// The path as given.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// The file is larger than the caller allows.
    #[error("refused `{path}`: it is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The path as given.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A path no tool writes (see [`PROTECTED`]).
    #[error("refused `{path}`: {why}; tools cannot change it")]
    Protected {
        /// The path as given.
        path: String,
        /// What the path is and why it is kept as it is.
        why: &'static str,
    },
    /// Any other I/O failure.
    #[error("cannot access `{path}`")]
    Io {
        /// The path as given.
        path: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// Paths of a workspace that no tool writes, with why: what a later run reads (jianmu's
/// settings, its own folder) or what the user's own `git` runs outside any jail. Inside
/// a session's view they are read-only to commands too.
pub const PROTECTED: &[(&str, &str)] = &[
    (
        "jianmu.toml",
        "it is jianmu's settings file, which a later run in this folder would read",
    ),
    (".jianmu", "it is jianmu's own folder (saved outputs)"),
    (
        ".git/hooks",
        "git's hooks run outside any sandbox when the user next uses git here",
    ),
    (
        ".git/config",
        "git's configuration can make the user's own git run programs outside any sandbox",
    ),
];

/// The rule that protects `rel` (a path relative to the root, symbolic links
/// resolved), if any.
pub fn protected(rel: &Path) -> Option<&'static str> {
    PROTECTED
        .iter()
        .find(|(path, _)| rel.starts_with(path))
        .map(|&(_, why)| why)
}

impl WorkspaceError {
    /// Classifies an I/O error from opening `path` beneath the root.
    pub fn from_io(path: &Path, e: io::Error) -> Self {
        let path = show(path);
        // cap-std reports an escape as PermissionDenied with this message.
        if e.kind() == io::ErrorKind::PermissionDenied
            && e.to_string().contains("outside of the filesystem")
        {
            return Self::Escape { path };
        }
        match e.raw_os_error() {
            Some(40) => return Self::SymlinkLoop { path }, // ELOOP
            Some(20) => return Self::NotADirectory { path }, // ENOTDIR
            Some(6) => {
                return Self::NotAFile {
                    path,
                    kind: "a device without a reader",
                };
            } // ENXIO
            _ => {}
        }
        match e.kind() {
            io::ErrorKind::NotFound => Self::NotFound { path },
            _ => Self::Io { path, source: e },
        }
    }
}

impl WorkspaceError {
    /// The message for the model: the path and the rule, with the OS reason for plain
    /// I/O failures.
    pub fn message(&self) -> String {
        match self {
            WorkspaceError::Io { source, .. } => format!("{self}: {source}"),
            _ => self.to_string(),
        }
    }
}

impl From<WorkspaceError> for jianmu_tool_core::ToolError {
    /// A workspace error is something the model should read.
    fn from(e: WorkspaceError) -> Self {
        jianmu_tool_core::ToolError::failed(e.message())
    }
}

/// Opens the workspace of a tool's configuration, or says why the tool cannot use it.
///
/// # Errors
/// [`jianmu_tool_core::ToolError::Config`] naming `tool`.
pub fn for_tool(
    config: &jianmu_tool_core::ToolConfig,
    tool: &str,
) -> Result<Arc<Workspace>, jianmu_tool_core::ToolError> {
    Workspace::open(config.workspace())
        .map(Arc::new)
        .map_err(|e| jianmu_tool_core::ToolError::Config {
            tool: tool.to_owned(),
            message: format!("workspace {}: {e}", config.workspace().display()),
        })
}

/// Runs blocking file work off the async threads (as the Python tools' `run_in_executor`).
///
/// # Errors
/// What `f` returns, or [`jianmu_tool_core::ToolError::Runner`] if it panicked.
pub async fn blocking<T, F>(tool: &str, f: F) -> Result<T, jianmu_tool_core::ToolError>
where
    F: FnOnce() -> Result<T, jianmu_tool_core::ToolError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| jianmu_tool_core::ToolError::runner(tool, e))?
}

/// How paths display in messages: workspace-relative, `.` for the root, control
/// characters escaped (a name cannot forge a line), and cut past 1024 characters.
pub fn show(path: &Path) -> String {
    /// Longer than any real path (`PATH_MAX` is 4096 bytes): only hostile input is cut.
    const MAX: usize = 1024;
    if path.as_os_str().is_empty() {
        return ".".to_owned();
    }
    jianmu_tool_core::shorten(&path.to_string_lossy(), MAX).into_owned()
}

/// A workspace root and an open handle on it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    dir: Arc<Dir>,
}

impl Workspace {
    /// Opens the workspace at `root` (made canonical).
    ///
    /// # Errors
    /// When `root` is not an existing directory.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let root = given
            .canonicalize()
            .map_err(|e| WorkspaceError::from_io(given, e))?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority())
            .map_err(|e| WorkspaceError::from_io(given, e))?;
        Ok(Self {
            root,
            dir: Arc::new(dir),
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root handle, for opening paths beneath it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Maps a path from a model to a path relative to the root, lexically: absolute
    /// paths must lie inside the root, `..` may not climb above it, `.` parts vanish.
    /// The empty path and `.` are the root itself (an empty relative path).
    ///
    /// # Errors
    /// [`WorkspaceError::NulByte`], [`WorkspaceError::Outside`].
    pub fn relative(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        if path.contains('\0') {
            return Err(WorkspaceError::NulByte);
        }
        let given = Path::new(path);
        let outside = || WorkspaceError::Outside {
            path: jianmu_tool_core::echo(path).into_owned(),
        };
        let rest = if given.is_absolute() {
            given.strip_prefix(&self.root).map_err(|_| outside())?
        } else {
            given
        };
        let mut out = PathBuf::new();
        for part in rest.components() {
            match part {
                Component::Normal(p) => out.push(p),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(outside());
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(out)
    }

    /// As [`Workspace::relative`], for a path that must name a file: one ending in `/`
    /// (or `/.`) names a directory and is refused, as POSIX does.
    ///
    /// # Errors
    /// As [`Workspace::relative`], and [`WorkspaceError::TrailingSlash`].
    pub fn relative_file(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        let rel = self.relative(path)?;
        if path.ends_with('/') || path.ends_with("/.") {
            return Err(WorkspaceError::TrailingSlash { path: show(&rel) });
        }
        Ok(rel)
    }

    /// The path `rel` names with every symlink resolved, relative to the root.
    ///
    /// # Errors
    /// As [`WorkspaceError::from_io`].
    pub fn canonical(&self, rel: &Path) -> Result<PathBuf, WorkspaceError> {
        if rel.as_os_str().is_empty() {
            return Ok(PathBuf::new());
        }
        let canonical = self
            .dir
            .canonicalize(rel)
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        // cap-std answers "." for the root itself.
        Ok(if canonical == Path::new(".") {
            PathBuf::new()
        } else {
            canonical
        })
    }

    /// Metadata of what `rel` names, following symlinks beneath the root.
    ///
    /// # Errors
    /// As [`WorkspaceError::from_io`].
    pub fn metadata(&self, rel: &Path) -> Result<Metadata, WorkspaceError> {
        self.dir
            .metadata(here(rel))
            .map_err(|e| WorkspaceError::from_io(rel, e))
    }

    /// Metadata of `rel` itself (a symlink is not followed).
    ///
    /// # Errors
    /// As [`WorkspaceError::from_io`].
    pub fn symlink_metadata(&self, rel: &Path) -> Result<Metadata, WorkspaceError> {
        self.dir
            .symlink_metadata(here(rel))
            .map_err(|e| WorkspaceError::from_io(rel, e))
    }

    /// Opens the directory `rel` beneath the root.
    ///
    /// # Errors
    /// As [`WorkspaceError::from_io`].
    pub fn open_dir(&self, rel: &Path) -> Result<Dir, WorkspaceError> {
        self.dir
            .open_dir(here(rel))
            .map_err(|e| WorkspaceError::from_io(rel, e))
    }

    /// Opens the regular file `rel` for reading. The open never blocks (a FIFO
    /// cannot hang it), and what was opened is checked: a regular file with one link.
    ///
    /// # Errors
    /// [`WorkspaceError::NotAFile`], [`WorkspaceError::HardLink`], or as
    /// [`WorkspaceError::from_io`].
    pub fn open_file(&self, rel: &Path) -> Result<(File, Metadata), WorkspaceError> {
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(crate::O_NONBLOCK);
        let file = self
            .dir
            .open_with(here(rel), &options)
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        let meta = file
            .metadata()
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        check_regular(rel, &meta)?;
        Ok((file, meta))
    }

    /// Reads the regular file `rel` (a link in its last part is not followed, nor a
    /// file with other hard links read), refusing one over `limit` bytes.
    ///
    /// # Errors
    /// [`WorkspaceError::TooLarge`], or the open's error (a link: "too many levels of
    /// symbolic links"), or a file that is not regular.
    pub fn read_no_link(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, WorkspaceError> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(crate::O_NONBLOCK | rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        let file = self
            .dir
            .open_with(here(rel), &options)
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        let meta = file
            .metadata()
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        check_regular(rel, &meta)?;
        if meta.nlink() > 1 {
            return Err(WorkspaceError::from_io(
                rel,
                io::Error::other("the file has other hard links"),
            ));
        }
        read_at_most(rel, file, &meta, limit)
    }

    /// Reads the whole regular file `rel`, refusing files over `limit` bytes.
    ///
    /// # Errors
    /// [`WorkspaceError::TooLarge`], or as [`Workspace::open_file`].
    pub fn read_to_end(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, WorkspaceError> {
        let (file, meta) = self.open_file(rel)?;
        read_at_most(rel, file, &meta, limit)
    }
}

/// The whole of the open file `rel`, refused when over `limit` bytes.
fn read_at_most(
    rel: &Path,
    file: File,
    meta: &Metadata,
    limit: u64,
) -> Result<Vec<u8>, WorkspaceError> {
    let too_large = |size| WorkspaceError::TooLarge {
        path: show(rel),
        size,
        limit,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    // The file may grow after the check; never read past the limit.
    file.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| WorkspaceError::from_io(rel, e))?;
    if buf.len() as u64 > limit {
        return Err(too_large(buf.len() as u64));
    }
    Ok(buf)
}

/// The root is the empty relative path; the file-system calls want `.` for it.
fn here(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// What a file type is, in words, for messages.
pub fn kind_of(meta: &Metadata) -> &'static str {
    use cap_std::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

pub(crate) fn check_regular(rel: &Path, meta: &Metadata) -> Result<(), WorkspaceError> {
    if !meta.is_file() {
        return Err(WorkspaceError::NotAFile {
            path: show(rel),
            kind: kind_of(meta),
        });
    }
    if meta.nlink() > 1 {
        return Err(WorkspaceError::HardLink {
            path: show(rel),
            links: meta.nlink(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
