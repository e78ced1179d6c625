//! Suspending a session to a file and resuming it, in this process or another, on
//! any engine or runner. What survives: the workspace (a copied one is brought back
//! first; a session's own folder is kept), and each shell session's folder and
//! exported variables. What cannot: background jobs and named interpreters (their
//! processes end with the session), shell variables and functions; the answers say
//! which.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use jianmu_tool_core::{Lost, ShellState};
use serde::{Deserialize, Serialize};

use super::{Closed, Opening, Runtime, Session, SessionError, close};

/// The format of a suspension file.
const VERSION: u32 = 1;

/// The largest suspension file read.
const MAX_FILE: u64 = 16 << 20;

/// A suspension file.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    version: u32,
    /// The session's workspace.
    workspace: PathBuf,
    /// Whether it was the session's own folder (removed when a resumed session
    /// closes).
    own_folder: bool,
    principal: Option<String>,
    shells: BTreeMap<String, ShellState>,
    lost: Vec<Lost>,
}

/// What [`Session::suspend`] saved, and what could not be.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Suspended {
    /// The shell sessions kept, by name.
    pub shells: Vec<String>,
    /// What ended with the session and will not come back.
    pub ended: Vec<Lost>,
    /// What closing it reported (a copied workspace brought back).
    pub closed: Closed,
}

impl std::fmt::Display for Suspended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "suspended: {} kept", shells(&self.shells))?;
        if !self.ended.is_empty() {
            write!(f, "; ended, not to come back: {}", lost(&self.ended))?;
        }
        if !self.closed.is_complete() {
            write!(f, "; {}", self.closed)?;
        }
        Ok(())
    }
}

/// What [`Runtime::resume`] restored, and what it could not.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Resumed {
    /// The shell sessions restored, by name.
    pub shells: Vec<String>,
    /// What ended at the suspension and was not restored.
    pub ended: Vec<Lost>,
}

impl std::fmt::Display for Resumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "resumed: the workspace, and {} restored (folder and exported variables; shell \
             variables and functions are not kept)",
            shells(&self.shells)
        )?;
        if !self.ended.is_empty() {
            write!(
                f,
                "; not restored, ended at the suspension: {}",
                lost(&self.ended)
            )?;
        }
        Ok(())
    }
}

fn shells(names: &[String]) -> String {
    match names.len() {
        0 => "no shell sessions".to_owned(),
        _ => format!("shell sessions {}", names.join(", ")),
    }
}

fn lost(list: &[Lost]) -> String {
    list.iter()
        .map(|l| format!("{} {}", l.kind, l.name))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Session {
    /// Suspends the session to `file`: saves what survives (see the module docs),
    /// then closes the session (bringing a copied workspace back, ending its
    /// processes and container) but keeps its own folder, for [`Runtime::resume`].
    /// The file is written whole or not at all, readable by its owner alone.
    ///
    /// # Errors
    /// The session is closed, its container was lost, or the file cannot be written
    /// (the session is then left open).
    pub async fn suspend(&self, file: &Path) -> Result<Suspended, SessionError> {
        let failed = |why: String| SessionError::Suspension {
            what: "suspend to",
            path: file.to_owned(),
            why,
        };
        let parts = self
            .lock()
            .clone()
            .ok_or_else(|| failed("the session is closed".into()))?;
        #[allow(unused_mut)]
        let mut state = parts.kept.state();
        #[cfg(feature = "docker")]
        if let Some(docker) = &parts.docker {
            state = docker.kept().await?;
            // The copy's changes come here before the file says they are kept; a
            // pull that fails leaves the session open.
            let pulled = docker.pull().await?;
            if !pulled.is_complete() {
                return Err(failed(format!(
                    "part of the sandbox's workspace did not come back: {pulled}"
                )));
            }
        }
        let saved = Saved {
            version: VERSION,
            workspace: self.workspace().to_owned(),
            own_folder: self.folder.as_ref().is_some_and(|f| !f.kept),
            principal: parts.principal.clone(),
            shells: state.shells,
            lost: state.lost,
        };
        let text = serde_json::to_vec_pretty(&saved).map_err(|e| failed(e.to_string()))?;
        write_whole(file, &text).map_err(|e| failed(e.to_string()))?;
        drop(parts);
        let Some(parts) = self.lock().take() else {
            return Err(failed("the session was closed meanwhile".into()));
        };
        // Its own folder stays for the resume: it is not handed to the close.
        let closed = close(parts, None, &self.runtime).await;
        Ok(Suspended {
            shells: saved.shells.keys().cloned().collect(),
            ended: saved.lost,
            closed,
        })
    }
}

impl Runtime {
    /// Opens a session from a file [`Session::suspend`] wrote: the same workspace (a
    /// copied one is copied into the new container, on whatever engine or runner it
    /// lands), principal and shell sessions. Returns the session and what was and was
    /// not restored, which the session's first answer that succeeds also starts with
    /// (for the model).
    ///
    /// # Errors
    /// The file is missing, too large or not a suspension; as [`Runtime::open_with`].
    pub fn resume(&self, file: &Path) -> Result<(Session, Resumed), SessionError> {
        self.resume_with(file, Opening::new())
    }

    /// As [`Runtime::resume`], opened as `opening` says (its settings, policy,
    /// folder and principal, which must be the suspended session's): a front end
    /// resumes a principal's session with that principal's settings.
    ///
    /// # Errors
    /// As [`Runtime::resume`]; a file of another principal or workspace.
    pub fn resume_with(
        &self,
        file: &Path,
        opening: Opening,
    ) -> Result<(Session, Resumed), SessionError> {
        let failed = |why: String| SessionError::Suspension {
            what: "resume from",
            path: file.to_owned(),
            why,
        };
        let text = read_bounded(file).map_err(|e| failed(e.to_string()))?;
        let saved: Saved = serde_json::from_slice(&text)
            .map_err(|e| failed(format!("not a suspension file: {e}")))?;
        if saved.version != VERSION {
            return Err(failed(format!(
                "written by another version (format {})",
                saved.version
            )));
        }
        let mut opening = opening;
        match &opening.principal {
            // A principal's session comes back with that principal's settings only.
            None if saved.principal.is_some() => {
                return Err(failed(
                    "it is a principal's session: resume it with Runtime::resume_with and \
                     that principal's opening"
                        .into(),
                ));
            }
            None => {}
            Some(p) if Some(p) != saved.principal.as_ref() => {
                return Err(failed("it is another principal's session".into()));
            }
            Some(_) => {}
        }
        match &opening.workspace {
            Some(dir) if *dir != saved.workspace => {
                return Err(failed(format!(
                    "it worked in {}, not {}",
                    saved.workspace.display(),
                    dir.display()
                )));
            }
            Some(_) => {}
            None if saved.own_folder || saved.workspace != self.settings().tools.workspace() => {
                opening.workspace = Some(saved.workspace.clone());
                opening.own_folder = saved.own_folder;
            }
            None => {}
        }
        let session = self.open_with(opening)?;
        if let Some(parts) = session.lock().clone() {
            #[cfg(feature = "docker")]
            if let Some(docker) = &parts.docker {
                docker.give_at_start(saved.shells.clone());
            } else {
                parts.kept.give_shells(saved.shells.clone());
            }
            #[cfg(not(feature = "docker"))]
            parts.kept.give_shells(saved.shells.clone());
        }
        let resumed = Resumed {
            shells: saved.shells.keys().cloned().collect(),
            ended: saved.lost,
        };
        *session
            .resumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(resumed.to_string());
        Ok((session, resumed))
    }
}

/// Writes `bytes` to `path` through a temporary file beside it (mode 0600), synced
/// and renamed into place.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", jianmu_tool_core::random_hex()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The bytes of `path`, refused past [`MAX_FILE`].
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE >> 20
        )));
    }
    Ok(bytes)
}
