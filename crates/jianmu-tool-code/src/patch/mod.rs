//! `apply_patch`: applies a patch in the `*** Begin Patch` format (files added,
//! deleted, updated and moved), every file or none.
//!
//! Every path is confined to the workspace. All files are read and every hunk placed
//! before anything is written; then the new contents are staged beside their targets
//! and put in place, and deletions done last. If a rename fails midway, the files
//! already changed are put back.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jianmu_tool_core::{CallContext, Change, Structured, Tool, ToolError};
use jianmu_workspace::{Staged, Workspace, WorkspaceError, WriteOptions, blocking, show};
use serde::{Deserialize, Serialize};

use crate::text::Decoded;

mod parse;
mod place;

/// Settings of `apply_patch` (`[tools.apply_patch]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PatchSettings {
    /// Largest file read or written, in bytes.
    pub max_file_size: u64,
    /// Most files one patch may touch.
    pub max_files: usize,
    /// Most bytes one patch may hold in memory: the old and new contents of every
    /// file it touches.
    pub max_total_size: u64,
    /// Refuse or place exactly where codex's apply_patch guesses: `*** Add File:` or
    /// `*** Move to:` onto a file that exists is refused (codex replaces it); a hunk
    /// that only adds lines goes after its `@@` line, or is refused without one (codex
    /// appends it to the file); a hunk whose last expected line is empty is not tried
    /// again without it; an updated file keeps its end as it was (codex adds a line
    /// break). Off by default, so a patch codex applies is applied the same way.
    pub strict: bool,
    /// Sync each write to disk before answering, so it survives a power loss (writes
    /// are atomic either way).
    pub durable: bool,
    /// After each write, list the errors it introduced (new since before it, in the
    /// written files), from the files' language servers (the `lsp` tools' servers).
    pub diagnostics: bool,
}

impl Default for PatchSettings {
    fn default() -> Self {
        Self {
            max_file_size: 10 * 1024 * 1024,
            max_files: 1000,
            max_total_size: 100 * 1024 * 1024,
            strict: false,
            durable: false,
            diagnostics: false,
        }
    }
}

/// Arguments of `apply_patch`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchArgs {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    #[schemars(length(min = 1))]
    pub patch: String,
}

/// The structured result of `apply_patch`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PatchOutput {
    /// The files changed, in the patch's order.
    pub files: Vec<PatchedFile>,
    /// Lines added over all files.
    pub added: usize,
    /// Lines removed over all files.
    pub removed: usize,
}

/// One file the patch changed.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PatchedFile {
    /// The file, relative to the workspace (after a move, where it is now).
    pub path: String,
    /// `A` added, `M` modified, `D` deleted, `R` moved (and maybe modified).
    pub status: String,
    /// Where a moved file was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Hunks (1-based) that matched only when whitespace was ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loose_hunks: Vec<usize>,
    /// Hunks (1-based) of only added lines under an `@@` line, appended at the end of
    /// the file (the answer's text says so).
    #[serde(skip)]
    #[schemars(skip)]
    pub appended_hunks: Vec<usize>,
}

/// The `apply_patch` tool.
#[derive(Debug, Clone)]
pub struct ApplyPatch {
    ws: Arc<Workspace>,
    settings: PatchSettings,
    checks: jianmu_tool_core::EditDiagnostics,
}

/// What one file operation will do, worked out before anything is written.
struct Planned {
    report: PatchedFile,
    /// The path written and its new bytes.
    write: Option<(PathBuf, Vec<u8>)>,
    /// The bytes at the written path before the patch, for putting back (none: it
    /// did not exist).
    write_before: Option<Vec<u8>>,
    /// The path removed (a deletion, or the source of a move) and its bytes before.
    remove: Option<(PathBuf, Vec<u8>)>,
}

impl Planned {
    /// The file this plan writes, with its text from before the patch (a moved
    /// file's from its old path); none for a deletion.
    fn change(&self) -> Option<Change> {
        let (path, _) = self.write.as_ref()?;
        let before = if self.report.status == "R" {
            self.remove.as_ref().map(|(_, b)| b)
        } else {
            self.write_before.as_ref()
        };
        Some(Change {
            path: path.clone(),
            before: before.map(|b| String::from_utf8_lossy(b).into_owned()),
        })
    }

    /// Bytes this plan holds in memory.
    fn held(&self) -> u64 {
        [
            self.write.as_ref().map(|(_, b)| b),
            self.write_before.as_ref(),
            self.remove.as_ref().map(|(_, b)| b),
        ]
        .into_iter()
        .flatten()
        .map(|b| b.len() as u64)
        .sum()
    }
}

const NOTHING: &str = "no file was changed";

/// Most files of one patch checked for new errors (`diagnostics = true`).
const MAX_CHECKED: usize = 10;

/// The files a patch wrote, for diagnostics after it.
struct Written {
    /// The first [`MAX_CHECKED`] of them, with their text from before.
    checked: Vec<Change>,
    /// How many it wrote.
    written: usize,
}

impl ApplyPatch {
    /// An `apply_patch` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: PatchSettings) -> Self {
        Self {
            ws,
            settings,
            checks: jianmu_tool_core::EditDiagnostics::default(),
        }
    }

    /// The same, listing the errors each patch introduced (`diagnostics = true`).
    #[must_use]
    pub fn with_diagnostics(mut self, checks: jianmu_tool_core::EditDiagnostics) -> Self {
        self.checks = checks;
        self
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A malformed patch, a refused path, a missing or already existing file, a hunk
    /// that does not match, a file over the size limit. No file is changed then.
    pub fn apply(&self, args: &PatchArgs) -> Result<Structured<PatchOutput>, ToolError> {
        self.apply_keeping(args, false).map(|(out, _)| out)
    }

    /// As [`ApplyPatch::apply`]; with `keep`, also the files written (the first
    /// [`MAX_CHECKED`]) with their text from before, for diagnostics after the patch.
    fn apply_keeping(
        &self,
        args: &PatchArgs,
        keep: bool,
    ) -> Result<(Structured<PatchOutput>, Written), ToolError> {
        let patch = parse::parse(&args.patch)
            .map_err(|e| ToolError::failed(format!("the patch is malformed: {e}; {NOTHING}")))?;
        if patch.ops.len() > self.settings.max_files {
            return Err(ToolError::failed(format!(
                "the patch touches {} files, over the limit of {}; split it; {NOTHING}",
                patch.ops.len(),
                self.settings.max_files
            )));
        }
        // Every file the patch names is held from its read to the write.
        let named: Vec<PathBuf> = patch
            .ops
            .iter()
            .flat_map(|op| {
                let to = match &op.kind {
                    parse::OpKind::Update {
                        move_to: Some(to), ..
                    } => Some(to.as_str()),
                    _ => None,
                };
                std::iter::once(op.path.as_str()).chain(to)
            })
            .filter_map(|path| self.ws.relative(path).ok())
            .collect();
        let _locks = self.ws.lock_files(named.iter().map(PathBuf::as_path));
        let mut seen = HashSet::new();
        let mut budget = place::Budget(place::Budget::DEFAULT);
        let mut held = 0u64;
        let mut plans = Vec::with_capacity(patch.ops.len());
        for op in &patch.ops {
            let plan = self
                .plan(op, &mut seen, &mut budget)
                .map_err(|e| ToolError::failed(format!("{e}; {NOTHING}")))?;
            held += plan.held();
            if held > self.settings.max_total_size {
                return Err(ToolError::failed(format!(
                    "the files the patch touches up to `{}` (patch line {}) hold over {} bytes, old and new contents together, the limit for one patch; split it; {NOTHING}",
                    op.path, op.line, self.settings.max_total_size
                )));
            }
            plans.push(plan);
        }
        let changes = Written {
            checked: if keep {
                plans
                    .iter()
                    .filter_map(Planned::change)
                    .take(MAX_CHECKED)
                    .collect()
            } else {
                Vec::new()
            },
            written: plans.iter().filter(|p| p.write.is_some()).count(),
        };
        self.commit(&mut plans)?;
        let files: Vec<PatchedFile> = plans.into_iter().map(|p| p.report).collect();
        let added = files.iter().map(|f| f.added).sum();
        let removed = files.iter().map(|f| f.removed).sum();
        let mut text = format!(
            "Applied the patch: {} file{} changed (+{added} -{removed})\n",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
        for f in &files {
            let stat = match f.status.as_str() {
                "A" => format!("+{}", f.added),
                "D" => format!("-{}", f.removed),
                _ => format!("+{} -{}", f.added, f.removed),
            };
            match &f.from {
                Some(from) => text.push_str(&format!("R {from} -> {} ({stat})\n", f.path)),
                None => text.push_str(&format!("{} {} ({stat})\n", f.status, f.path)),
            }
        }
        for f in files.iter().filter(|f| !f.loose_hunks.is_empty()) {
            let list: Vec<String> = f.loose_hunks.iter().map(ToString::to_string).collect();
            text.push_str(&format!(
                "Note: hunk{} {} of {} matched only when whitespace was ignored; the file's own context lines were kept.\n",
                if list.len() == 1 { "" } else { "s" },
                list.join(", "),
                f.path
            ));
        }
        for f in files.iter().filter(|f| !f.appended_hunks.is_empty()) {
            let list: Vec<String> = f.appended_hunks.iter().map(ToString::to_string).collect();
            let one = list.len() == 1;
            text.push_str(&format!(
                "Note: hunk{} {} of {} only {} lines, so {} appended at the end of the file (as codex places such hunks), not after {} `@@` line; to put lines elsewhere, give the unchanged lines around them as context.\n",
                if one { "" } else { "s" },
                list.join(", "),
                f.path,
                if one { "adds" } else { "add" },
                if one { "it was" } else { "they were" },
                if one { "its" } else { "their" },
            ));
        }
        let out = Structured::new(
            text.trim_end(),
            PatchOutput {
                files,
                added,
                removed,
            },
        );
        Ok((out, changes))
    }

    /// Reads what `op` needs and works out its result; writes nothing.
    fn plan(
        &self,
        op: &parse::FileOp,
        seen: &mut HashSet<PathBuf>,
        budget: &mut place::Budget,
    ) -> Result<Planned, String> {
        let at = format!("`{}` (patch line {})", op.path, op.line);
        let rel = self.rel(&op.path, &at)?;
        let shown = show(&rel);
        if !seen.insert(rel.clone()) {
            return Err(format!(
                "`{shown}` appears twice in the patch (patch line {}); put all its changes in one `*** Update File:`",
                op.line
            ));
        }
        let limit = self.settings.max_file_size;
        match &op.kind {
            parse::OpKind::Add(lines) => {
                let write_before = self.existing(&rel, "Add File")?;
                let mut text = lines.join("\n");
                if !lines.is_empty() {
                    text.push('\n');
                }
                self.fits(&shown, text.len())?;
                Ok(Planned {
                    report: report(shown, "A", lines.len(), 0),
                    write: Some((rel, text.into_bytes())),
                    write_before,
                    remove: None,
                })
            }
            parse::OpKind::Delete => {
                let bytes = self.ws.read_to_end(&rel, limit).map_err(|e| e.message())?;
                let removed = line_count(&bytes);
                Ok(Planned {
                    report: report(shown, "D", 0, removed),
                    write: None,
                    write_before: None,
                    remove: Some((rel, bytes)),
                })
            }
            parse::OpKind::Update { move_to, chunks } => {
                let bytes = self.ws.read_to_end(&rel, limit).map_err(|e| e.message())?;
                if chunks.is_empty() {
                    // Only a move: the file goes as it is, bytes unchanged.
                    let mut planned = Planned {
                        report: report(shown.clone(), "M", 0, 0),
                        write: Some((rel.clone(), bytes.clone())),
                        write_before: Some(bytes),
                        remove: None,
                    };
                    if let Some(dest) = move_to {
                        self.plan_move(&mut planned, &rel, dest, &at, shown, seen)?;
                    }
                    return Ok(planned);
                }
                let decoded = Decoded::new(&shown, bytes.clone())?;
                let text = decoded.text.as_str();
                let ends_in_break = text.is_empty() || text.ends_with('\n');
                let body = text.strip_suffix('\n').unwrap_or(text);
                let lines: Vec<&str> = if text.is_empty() {
                    Vec::new()
                } else {
                    body.split('\n').collect()
                };
                let placing = if self.settings.strict {
                    place::Placing::Strict
                } else {
                    place::Placing::Codex
                };
                let placed = place::place(&lines, chunks, placing, budget)
                    .map_err(|m| format!("`{shown}`: {}", m.0))?;
                let mut new_text = placed.lines.join("\n");
                // Codex ends every file it updates with a line break.
                let ends_in_break = ends_in_break || !self.settings.strict;
                if ends_in_break && !placed.lines.is_empty() {
                    new_text.push('\n');
                }
                let new_bytes = decoded.encode(&new_text).into_owned();
                self.fits(&shown, new_bytes.len())?;
                let (added, removed) =
                    chunks
                        .iter()
                        .flat_map(|c| &c.lines)
                        .fold((0, 0), |(a, r), l| match l {
                            parse::HunkLine::Insert(_) => (a + 1, r),
                            parse::HunkLine::Remove(_) => (a, r + 1),
                            parse::HunkLine::Keep(_) => (a, r),
                        });
                let mut planned = Planned {
                    report: PatchedFile {
                        loose_hunks: placed.loose,
                        appended_hunks: placed.appended,
                        ..report(shown.clone(), "M", added, removed)
                    },
                    write: Some((rel.clone(), new_bytes)),
                    write_before: Some(bytes),
                    remove: None,
                };
                if let Some(dest) = move_to {
                    self.plan_move(&mut planned, &rel, dest, &at, shown, seen)?;
                }
                Ok(planned)
            }
        }
    }

    /// Turns the update of `rel` into a move to `dest`.
    fn plan_move(
        &self,
        planned: &mut Planned,
        rel: &Path,
        dest: &str,
        at: &str,
        shown: String,
        seen: &mut HashSet<PathBuf>,
    ) -> Result<(), String> {
        let dest_rel = self.rel(dest, &format!("`{dest}` (`*** Move to:` of {at})"))?;
        if dest_rel == rel {
            return Ok(());
        }
        if !seen.insert(dest_rel.clone()) {
            return Err(format!("`{}` appears twice in the patch", show(&dest_rel)));
        }
        let dest_before = self.existing(&dest_rel, "Move to")?;
        planned.report.status = "R".to_owned();
        planned.report.from = Some(shown);
        planned.report.path = show(&dest_rel);
        planned.write = planned.write.take().map(|(_, b)| (dest_rel, b));
        let source = std::mem::replace(&mut planned.write_before, dest_before);
        planned.remove = source.map(|b| (rel.to_path_buf(), b));
        Ok(())
    }

    fn rel(&self, path: &str, at: &str) -> Result<PathBuf, String> {
        self.ws
            .relative_file(path)
            .map_err(|e| format!("{at}: {e}"))
    }

    /// What is at a path a file is added or moved onto: nothing, or a file that
    /// the patch replaces (as codex does). With `strict`, an existing path is
    /// refused, since replacing it would lose a file.
    fn existing(&self, rel: &Path, what: &str) -> Result<Option<Vec<u8>>, String> {
        match self.ws.symlink_metadata(rel) {
            Err(WorkspaceError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.message()),
            Ok(_) if self.settings.strict => Err(format!(
                "`{}` already exists (`*** {what}:` creates a file); to change it, use `*** Update File:`",
                show(rel)
            )),
            Ok(meta) if !meta.is_file() => Err(format!(
                "`{}` exists and is not a file, so `*** {what}:` cannot replace it",
                show(rel)
            )),
            Ok(_) => self
                .ws
                .read_to_end(rel, self.settings.max_file_size)
                .map(Some)
                .map_err(|e| e.message()),
        }
    }

    fn fits(&self, shown: &str, size: usize) -> Result<(), String> {
        let max = self.settings.max_file_size;
        if size as u64 > max {
            return Err(format!(
                "`{shown}` would be {size} bytes, over the limit of {max} bytes"
            ));
        }
        Ok(())
    }

    /// Stages every write, then puts them in place and removes what goes; puts the
    /// files back if that fails midway.
    fn commit(&self, plans: &mut [Planned]) -> Result<(), ToolError> {
        let options = WriteOptions::default().durable(self.settings.durable);
        let mut staged: Vec<Staged> = Vec::with_capacity(plans.len());
        // Which plan each staged write belongs to.
        let mut owners: Vec<usize> = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            if let Some((rel, bytes)) = &plan.write {
                staged.push(
                    self.ws
                        .stage_write(rel, bytes, &options)
                        .map_err(|e| ToolError::failed(format!("{}; {NOTHING}", e.message())))?,
                );
                owners.push(i);
            }
        }
        let (done, mut failure) = match self.ws.commit_all(staged) {
            Ok(()) => (owners, None),
            Err(e) => (owners[..e.committed].to_vec(), Some(e.error)),
        };
        let mut removed: Vec<usize> = Vec::new();
        if failure.is_none() {
            for (i, plan) in plans.iter().enumerate() {
                if let Some((rel, _)) = &plan.remove {
                    match self.ws.remove_file(rel) {
                        Ok(()) => removed.push(i),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        let Some(e) = failure else {
            // The folders the deletions and moves emptied go too, as `git apply`
            // removes them.
            for plan in plans {
                if let Some((rel, _)) = &plan.remove {
                    self.ws.remove_empty_folders_above(rel);
                }
            }
            return Ok(());
        };
        if done.is_empty() && removed.is_empty() {
            return Err(ToolError::failed(format!("{}; {NOTHING}", e.message())));
        }
        let restored = self.restore(plans, &done, &removed);
        Err(ToolError::failed(format!(
            "{} while applying the patch; {}",
            e.message(),
            if restored {
                "the files already changed were put back, so no file was changed"
            } else {
                "some files could not be put back: check them with `git status` or read them again"
            }
        )))
    }

    /// Undoes committed writes and removals; true when all of it worked.
    fn restore(&self, plans: &[Planned], done: &[usize], removed: &[usize]) -> bool {
        let mut ok = true;
        for &i in done {
            let plan = &plans[i];
            let Some((rel, _)) = &plan.write else {
                continue;
            };
            ok &= match &plan.write_before {
                None => self.ws.remove_file(rel).is_ok(),
                Some(b) => self
                    .ws
                    .write_atomic(rel, b, &WriteOptions::default())
                    .is_ok(),
            };
        }
        for &i in removed {
            let plan = &plans[i];
            if let Some((rel, before)) = &plan.remove {
                ok &= self
                    .ws
                    .write_atomic(rel, before, &WriteOptions::default())
                    .is_ok();
            }
        }
        ok
    }
}

fn report(path: String, status: &str, added: usize, removed: usize) -> PatchedFile {
    PatchedFile {
        path,
        status: status.to_owned(),
        from: None,
        added,
        removed,
        loose_hunks: Vec::new(),
        appended_hunks: Vec::new(),
    }
}

fn line_count(bytes: &[u8]) -> usize {
    let breaks = bytes.iter().filter(|&&b| b == b'\n').count();
    breaks + usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}

impl Tool for ApplyPatch {
    type Args = PatchArgs;
    type Output = Structured<PatchOutput>;
    type Error = ToolError;

    const NAME: &'static str = "apply_patch";

    const DESCRIPTION: &'static str = "Applies a patch to files of the workspace: adds, deletes, updates and moves files, \
     every file or none. The patch (also accepted as a bare string):\n\
     *** Begin Patch\n\
     *** Add File: path/new.txt\n\
     +each line of the new file, prefixed with +\n\
     *** Delete File: path/old.txt\n\
     *** Update File: path/file.py\n\
     *** Move to: path/renamed.py   (optional)\n\
     @@ def handler():   (optional: a line the hunk comes after, to place it)\n\
     \u{20}unchanged context line (about 3 before and after each change)\n\
     -removed line\n\
     +added line\n\
     *** End of File   (optional: the hunk ends at the end of the file)\n\
     *** End Patch\n\
     No line numbers. Hunks apply in order, each after the previous one; context must \
     match the file exactly (a match ignoring whitespace is the fallback, and is \
     reported). A hunk without context or removed lines is appended at the end of the \
     file: to insert lines elsewhere, give unchanged context lines around them. \
     `*** Add File:` and `*** Move to:` replace a file that exists. Paths are \
     relative to the workspace root. Answers with \
     the files changed (A added, M modified, D deleted, R moved) and lines added and \
     removed.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["filesystem:write"];

    async fn call(
        &self,
        args: PatchArgs,
        _cx: &CallContext,
    ) -> Result<Structured<PatchOutput>, ToolError> {
        let this = self.clone();
        if !self.checks.is_on() {
            return blocking(Self::NAME, move || this.apply(&args)).await;
        }
        let (mut out, changes) =
            blocking(Self::NAME, move || this.apply_keeping(&args, true)).await?;
        let written = changes.written;
        self.checks.append(&mut out.text, changes.checked).await;
        // Files past the first MAX_CHECKED are not checked, and the answer says so.
        if written > MAX_CHECKED {
            out.text.push_str(&format!(
                "\n(diagnostics: the first {MAX_CHECKED} of the {written} files written were checked; use `diagnostics` for the others)"
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
