//! Git tools: `git_status`, `git_diff`, `git_log`, `git_show`, `git_blame` (reading),
//! and `git_add`, `git_commit`, `git_branch`, `git_checkout` (writing), on the
//! repository at the workspace root.
//!
//! They run the `git` program, each with a fixed argument list: what a model passes is
//! a value (a revision, a path, a message), never an option. What `git` would
//! otherwise run besides itself is turned off on every command:
//! - hooks (`core.hooksPath=/dev/null`, and `--no-verify` on commits);
//! - programs named by any configuration (`core.fsmonitor`, `core.pager`,
//!   `core.editor`, `core.sshCommand`, `diff.external`, GPG signing, credential
//!   helpers), by `-c` values that override every configuration file;
//! - diff drivers and text conversion (`--no-ext-diff`, `--no-textconv`);
//! - filter drivers (`filter.NAME.clean`, `smudge`, `process`): each one that any
//!   configuration defines is set to nothing, the configurations of nested
//!   repositories included (git checks a gitlink's folder for changes by running
//!   itself there, and passes these `-c` values down); a nested repository that leads
//!   out of the workspace is refused;
//! - the network: no tool fetches or pushes, `protocol.allow=never`, and git runs
//!   under the jail of `jianmu-process` (no network, writes only in the workspace).
//!
//! Revisions and paths that start with `-` are refused; paths are confined to the
//! workspace and may not pass through a symlink; pathspec magic is off
//! (`GIT_LITERAL_PATHSPECS`). Outputs are read with a bound and answered a page at a
//! time.
//!
//! The `git` program rather than `gix`: every tool here (status, blame, diff with
//! renames, commit, checkout) is complete and exact in git, gix would add a large
//! build for part of them, and gix runs filter drivers too. Settings are
//! [`GitSettings`] (`[tools.git]`, shared by every git tool).
#![deny(missing_docs)]

use std::ffi::OsString;

use jianmu_tool_core::{CallContext, Tool, ToolConfig, ToolError, ToolHandle, ToolOutput};
use serde::Deserialize;

mod nested;
mod run;

use run::Git;
pub use run::GitSettings;

/// The settings key every git tool reads.
pub const SETTINGS: &str = "git";

/// Most characters of one line of an answer.
const MAX_LINE: usize = 2000;

/// `text` as one page: lines `offset..offset+limit` (from 1), each cut to
/// [`MAX_LINE`] characters, the page to `max_output` characters, with a last line
/// saying what was left out and how to read it.
/// How an answer cut to a page says to read on, in the tool's own arguments.
#[derive(Clone, Copy)]
enum ReadOn {
    /// With `offset` (given as this, if at all).
    Offset(Option<u32>),
    /// With `start_line`, the page's first line being the file's line this is.
    StartLine(u32),
    /// The tool cannot page: narrow the request with these arguments.
    Narrow(&'static str),
    /// The tool has no argument that pages or narrows.
    Whole,
}

fn page(
    git: &Git,
    text: &str,
    read_on: ReadOn,
    limit: Option<u32>,
    cut: bool,
    empty: &str,
) -> String {
    let offset = match read_on {
        ReadOn::Offset(offset) => offset,
        _ => None,
    };
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 {
        return empty.to_owned();
    }
    let first = offset.map_or(1, |o| o.max(1) as usize);
    let count = limit
        .map_or(git.settings.max_lines, |l| l.max(1) as usize)
        .min(git.settings.max_lines);
    if first > total {
        return format!("(offset {first} is past the end: the output has {total} lines)");
    }
    let mut out = String::new();
    let mut last = first - 1;
    for line in lines.iter().skip(first - 1).take(count) {
        let (kept, rest) = jianmu_tool_core::cut_chars(line, MAX_LINE);
        if out.len() + kept.len() > git.settings.max_output && last >= first {
            break;
        }
        // A file's bytes cannot forge lines or drive a terminal.
        out.push_str(&jianmu_tool_core::escape_controls(kept));
        if rest > 0 {
            out.push_str(&format!(" … ({rest} more characters on this line)"));
        }
        out.push('\n');
        last += 1;
    }
    if first > 1 || last < total {
        out.push_str(&format!("(lines {first}-{last} of {total}"));
        if last < total {
            match read_on {
                ReadOn::Offset(_) => out.push_str(&format!("; read on with offset={}", last + 1)),
                ReadOn::StartLine(start) => out.push_str(&format!(
                    "; read on with start_line={}",
                    start as usize + last
                )),
                ReadOn::Narrow(with) => out.push_str(&format!("; narrow it with {with}")),
                ReadOn::Whole => {}
            }
        }
        out.push_str(")\n");
    }
    if cut {
        out.push_str(&format!(
            "(git's output was over {} bytes and was cut there: narrow it with paths or a revision range)\n",
            git.settings.max_read
        ));
    }
    out
}

fn argv(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// Appends `--` and the checked `paths`.
fn push_paths(git: &Git, out: &mut Vec<OsString>, paths: &[String]) -> Result<(), ToolError> {
    if paths.len() > 100 {
        return Err(ToolError::failed("at most 100 paths"));
    }
    out.push("--".into());
    for p in paths {
        out.push(git.path(p)?);
    }
    Ok(())
}

async fn text(git: &Git, list: Vec<OsString>, filters: bool) -> Result<(String, bool), ToolError> {
    let out = git.run(&list, filters).await?;
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), out.cut))
}

macro_rules! git_tool {
    ($ty:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone)]
        pub struct $ty {
            git: Git,
        }
    };
}

git_tool!(GitStatus, "`git_status`: the branch and the changed files.");
git_tool!(
    GitDiff,
    "`git_diff`: changes, unstaged, staged or between revisions."
);
git_tool!(GitLog, "`git_log`: commits, newest first.");
git_tool!(
    GitShow,
    "`git_show`: one commit with its diff, or a file at a revision."
);
git_tool!(
    GitBlame,
    "`git_blame`: who last changed each line of a file."
);
git_tool!(GitAdd, "`git_add`: stages files.");
git_tool!(GitCommit, "`git_commit`: commits what is staged.");
git_tool!(GitBranch, "`git_branch`: lists branches, or creates one.");
git_tool!(
    GitCheckout,
    "`git_checkout`: switches branch, or restores files."
);

/// Arguments of `git_status`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Only these paths (files or folders, relative to the workspace).
    #[serde(default)]
    pub paths: Vec<String>,
}

/// Arguments of `git_diff`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// Compare the staged changes (the index) instead of the unstaged ones.
    #[serde(default)]
    pub staged: bool,
    /// Compare from this revision (to the work tree, or to the index with `staged`).
    pub from: Option<String>,
    /// With `from`: compare the two revisions.
    pub to: Option<String>,
    /// Only these paths.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Lines of context around each change (default 3).
    #[schemars(range(max = 1000))]
    pub context: Option<u32>,
    /// Only the files changed and lines added and removed, not the diff.
    #[serde(default)]
    pub stat: bool,
    /// First line of the diff to answer, from 1.
    #[schemars(range(min = 1))]
    pub offset: Option<u32>,
    /// Most lines to answer.
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
}

/// Arguments of `git_log`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogArgs {
    /// Most commits to list (default 20).
    #[schemars(range(min = 1, max = 1000))]
    pub max_count: Option<u32>,
    /// Commits to skip first, to page on.
    pub skip: Option<u32>,
    /// A revision or range: `main`, `v1.0..HEAD`, `A...B` (default HEAD).
    pub revision: Option<String>,
    /// Only commits that touch these paths.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Also list the files each commit changed, with lines added and removed.
    #[serde(default)]
    pub stat: bool,
}

/// Arguments of `git_show`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowArgs {
    /// A commit (default HEAD), or `REVISION:PATH` for a file as it was then.
    pub revision: Option<String>,
    /// Only the diff of these paths.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Only the files changed, not the diff.
    #[serde(default)]
    pub stat: bool,
    /// First line to answer, from 1.
    #[schemars(range(min = 1))]
    pub offset: Option<u32>,
    /// Most lines to answer.
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
}

/// Arguments of `git_blame`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlameArgs {
    /// The file, relative to the workspace.
    pub path: String,
    /// First line, from 1.
    #[schemars(range(min = 1))]
    pub start_line: Option<u32>,
    /// Last line.
    #[schemars(range(min = 1))]
    pub end_line: Option<u32>,
    /// Blame the file as it was at this revision (default: the work tree).
    pub revision: Option<String>,
}

/// Arguments of `git_add`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddArgs {
    /// Files or folders to stage (deletions included).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Stage every change in the work tree, new files included.
    #[serde(default)]
    pub all: bool,
}

/// Arguments of `git_commit`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitArgs {
    /// The commit message.
    #[schemars(length(min = 1, max = 100_000))]
    pub message: String,
    /// Stage every change to tracked files first (as `git commit -a`).
    #[serde(default)]
    pub all: bool,
}

/// Arguments of `git_branch`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchArgs {
    /// Create a branch of this name (without it, branches are listed).
    pub create: Option<String>,
    /// Where the new branch starts (default HEAD).
    pub start_point: Option<String>,
}

/// Arguments of `git_checkout`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutArgs {
    /// A branch to switch to, or a revision to take `paths` from.
    pub target: String,
    /// Restore these files from `target`, discarding their changes, instead of
    /// switching.
    #[serde(default)]
    pub paths: Vec<String>,
}

impl Tool for GitStatus {
    type Args = StatusArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_status";
    const DESCRIPTION: &'static str = "Shows the current branch (with how far it is ahead of or behind its upstream) and \
     the changed files of the repository at the workspace root, one per line: two status \
     letters (staged, unstaged: M modified, A added, D deleted, R renamed, ?? untracked), \
     then the path. Hooks and configured programs never run.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: StatusArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let (out, mut answer) = short_status(&self.git, &args.paths, None).await?;
        if out.lines().count() <= 1 {
            answer.push_str("(no changes: the work tree matches the last commit)\n");
        }
        Ok(ToolOutput::text(answer))
    }
}

impl Tool for GitDiff {
    type Args = DiffArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_diff";
    const DESCRIPTION: &'static str = "Shows changes as a unified diff: by default the unstaged ones (work tree against the \
     index); `staged` for what the next commit holds; `from` to compare a revision with \
     the work tree (or the index with `staged`); `from` and `to` to compare two \
     revisions. `paths` narrows it; `stat` gives only files and line counts. A long diff \
     is answered a page at a time (`offset`, `limit` in lines; the answer says how to \
     read on).";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: DiffArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let mut list = argv(&["diff", "--no-ext-diff", "--no-textconv", "--no-color", "-M"]);
        if let Some(n) = args.context {
            list.push(format!("-U{}", n.min(1000)).into());
        }
        if args.stat {
            list.push("--stat=200".into());
        }
        if args.staged {
            list.push("--cached".into());
        }
        if args.to.is_some() && args.from.is_none() {
            return Err(ToolError::failed("`to` needs `from`"));
        }
        if args.to.is_some() && args.staged {
            return Err(ToolError::failed(
                "`staged` compares with the index: leave it out to compare two revisions",
            ));
        }
        list.push("--end-of-options".into());
        if let Some(from) = &args.from {
            list.push(git.revision("from", from)?);
        }
        if let Some(to) = &args.to {
            list.push(git.revision("to", to)?);
        }
        push_paths(git, &mut list, &args.paths)?;
        let (out, cut) = text(git, list, true).await?;
        Ok(ToolOutput::text(page(
            git,
            &out,
            ReadOn::Offset(args.offset),
            args.limit,
            cut,
            "(no differences)",
        )))
    }
}

impl Tool for GitLog {
    type Args = LogArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_log";
    const DESCRIPTION: &'static str = "Lists commits, newest first, one line each: short id, date, author, subject, and the \
     branches and tags on it. `revision` takes a branch or a range (`main..HEAD`), \
     `paths` keeps the commits that touched them, `stat` adds the files each changed. \
     `max_count` (default 20) and `skip` page through history.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: LogArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let count = args.max_count.unwrap_or(20).clamp(1, 1000);
        let mut list = argv(&[
            "log",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--date=short",
            "--decorate=short",
            "--format=%h %ad %an: %s%d",
        ]);
        list.push(format!("--max-count={count}").into());
        let skip = args.skip.unwrap_or(0);
        if skip > 0 {
            list.push(format!("--skip={skip}").into());
        }
        if args.stat {
            list.push("--stat=200".into());
        }
        list.push("--end-of-options".into());
        if let Some(rev) = &args.revision {
            list.push(git.revision("revision", rev)?);
        }
        push_paths(git, &mut list, &args.paths)?;
        let (out, cut) = text(git, list, false).await?;
        let mut answer = page(
            git,
            &out,
            ReadOn::Narrow("max_count, skip or paths"),
            None,
            cut,
            "(no commits)",
        );
        let commits = if args.stat {
            out.lines()
                .filter(|l| !l.starts_with(' ') && !l.is_empty())
                .count()
        } else {
            out.lines().count()
        };
        if commits as u32 == count {
            answer.push_str(&format!(
                "(the first {count} commits from {skip} on; more with skip={})\n",
                skip + count
            ));
        }
        Ok(ToolOutput::text(answer))
    }
}

impl Tool for GitShow {
    type Args = ShowArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_show";
    const DESCRIPTION: &'static str = "Shows a commit (default HEAD): its id, author, date, message and diff; or, for \
     `REVISION:PATH` (e.g. `HEAD~3:src/main.rs`), that file as it was then. `paths` \
     narrows the diff, `stat` gives only files and line counts. Long answers come a page \
     at a time (`offset`, `limit` in lines).";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: ShowArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let mut list = argv(&[
            "show",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--decorate=short",
        ]);
        if args.stat {
            list.push("--stat=200".into());
        }
        list.push("--end-of-options".into());
        let rev = args.revision.as_deref().unwrap_or("HEAD");
        list.push(git.revision("revision", rev)?);
        push_paths(git, &mut list, &args.paths)?;
        let out = git.run(&list, false).await?;
        if rev.contains(':') && out.stdout.iter().take(8000).any(|b| *b == 0) {
            return Ok(ToolOutput::text(format!(
                "(`{}` is a binary file of {} bytes{}; not shown)",
                jianmu_tool_core::echo(rev),
                out.stdout.len(),
                if out.cut { " or more" } else { "" }
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(ToolOutput::text(page(
            git,
            &text,
            ReadOn::Offset(args.offset),
            args.limit,
            out.cut,
            "(empty)",
        )))
    }
}

impl Tool for GitBlame {
    type Args = BlameArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_blame";
    const DESCRIPTION: &'static str = "Shows, for each line of a file (or of `start_line`..`end_line`), the commit that last \
     changed it, its author and date, then the line. Lines not yet committed show \
     `00000000 (Not Committed Yet`. `revision` blames the file as it was then.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: BlameArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        git.check_ignore_revs_files().await?;
        let mut list = argv(&["blame", "--no-textconv", "--date=short"]);
        match (args.start_line, args.end_line) {
            (Some(a), Some(b)) if b < a => {
                return Err(ToolError::failed("`end_line` comes before `start_line`"));
            }
            (Some(a), Some(b)) => list.push(format!("-L{a},{b}").into()),
            (Some(a), None) => list.push(format!("-L{a},").into()),
            (None, Some(b)) => list.push(format!("-L1,{b}").into()),
            (None, None) => {}
        }
        if let Some(rev) = &args.revision {
            list.push(git.revision("revision", rev)?);
        }
        push_paths(git, &mut list, std::slice::from_ref(&args.path))?;
        let (out, cut) = text(git, list, true).await?;
        Ok(ToolOutput::text(page(
            git,
            &out,
            ReadOn::StartLine(args.start_line.unwrap_or(1)),
            None,
            cut,
            "(empty file)",
        )))
    }
}

impl Tool for GitAdd {
    type Args = AddArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_add";
    const DESCRIPTION: &'static str = "Stages files for the next commit: `paths` (files or folders; a deleted file's path \
     stages its deletion), or `all` for every change in the work tree. Answers with the \
     status after.";
    const EFFECTS: &'static [&'static str] = &["filesystem:write"];
    const PARALLEL_SAFE: bool = false;

    async fn call(&self, args: AddArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let mut list = argv(&["add"]);
        match (args.all, args.paths.is_empty()) {
            (true, true) => list.push("--all".into()),
            (false, false) => {
                push_paths(git, &mut list, &args.paths)?;
            }
            (true, false) => {
                list.push("--all".into());
                push_paths(git, &mut list, &args.paths)?;
            }
            (false, true) => return Err(ToolError::failed("give `paths`, or `all: true`")),
        }
        text(git, list, true).await?;
        status_after(git).await
    }
}

/// The short status of `paths` (all with none): git's output, and it as a page of at
/// most `limit` lines.
async fn short_status(
    git: &Git,
    paths: &[String],
    limit: Option<u32>,
) -> Result<(String, String), ToolError> {
    let mut list = argv(&[
        "status",
        "--short",
        "--branch",
        "--renames",
        "--ignore-submodules=all",
    ]);
    push_paths(git, &mut list, paths)?;
    let (out, cut) = text(git, list, true).await?;
    let answer = page(git, &out, ReadOn::Narrow("paths"), limit, cut, "");
    Ok((out, answer))
}

/// The short status, after a change.
async fn status_after(git: &Git) -> Result<ToolOutput, ToolError> {
    let (_, answer) = short_status(git, &[], Some(200)).await?;
    Ok(ToolOutput::text(answer))
}

impl Tool for GitCommit {
    type Args = CommitArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_commit";
    const DESCRIPTION: &'static str = "Commits what is staged (see git_add), with `message`; `all` stages every change to \
     tracked files first. No hook runs and nothing is signed. Answers with the new \
     commit's id and summary.";
    const EFFECTS: &'static [&'static str] = &["filesystem:write"];
    const PARALLEL_SAFE: bool = false;

    async fn call(&self, args: CommitArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        if args.message.trim().is_empty() || args.message.contains('\0') {
            return Err(ToolError::failed("`message` is empty"));
        }
        let mut list = argv(&["commit", "--no-verify", "--no-gpg-sign", "--no-edit"]);
        if args.all {
            list.push("--all".into());
        }
        list.push(format!("--message={}", args.message).into());
        match text(git, list, true).await {
            Ok((out, _)) => Ok(ToolOutput::text(
                jianmu_tool_core::shorten(out.trim_end(), 4000).into_owned(),
            )),
            Err(ToolError::Failed { message })
                if message.contains("Please tell me who you are")
                    || message.contains("empty ident") =>
            {
                Err(ToolError::failed(
                    "git has no author identity here: set `author_name` and `author_email` in [tools.git], or user.name and user.email in git's configuration",
                ))
            }
            Err(e) => Err(e),
        }
    }
}

impl Tool for GitBranch {
    type Args = BranchArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_branch";
    const DESCRIPTION: &'static str = "Lists the local branches (the current one marked `*`, each with its last commit), or \
     with `create` makes a new branch at `start_point` (default HEAD) without switching \
     to it (git_checkout switches).";
    const EFFECTS: &'static [&'static str] = &["filesystem:write"];
    const PARALLEL_SAFE: bool = false;

    async fn call(&self, args: BranchArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let Some(name) = &args.create else {
            if args.start_point.is_some() {
                return Err(ToolError::failed("`start_point` goes with `create`"));
            }
            let (out, cut) =
                text(git, argv(&["branch", "--list", "-v", "--no-color"]), false).await?;
            return Ok(ToolOutput::text(page(
                git,
                &out,
                ReadOn::Whole,
                None,
                cut,
                "(no branches yet: nothing is committed)",
            )));
        };
        let mut list = argv(&["branch", "--no-track", "--end-of-options"]);
        list.push(git.revision("create", name)?);
        if let Some(start) = &args.start_point {
            list.push(git.revision("start_point", start)?);
        }
        text(git, list, false).await?;
        Ok(ToolOutput::text(format!(
            "created branch `{}`",
            jianmu_tool_core::echo(name)
        )))
    }
}

impl Tool for GitCheckout {
    type Args = CheckoutArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "git_checkout";
    const DESCRIPTION: &'static str = "Switches the work tree to the branch or revision `target` (git refuses when that \
     would lose uncommitted changes); or, with `paths`, restores those files as they are \
     in `target` (e.g. HEAD), discarding their changes. Answers with the status after.";
    const EFFECTS: &'static [&'static str] = &["filesystem:write"];
    const PARALLEL_SAFE: bool = false;

    async fn call(&self, args: CheckoutArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let git = &self.git;
        let mut list = argv(&[
            "checkout",
            "--no-recurse-submodules",
            "--quiet",
            "--end-of-options",
        ]);
        list.push(git.revision("target", &args.target)?);
        push_paths(git, &mut list, &args.paths)?;
        text(git, list, true).await?;
        status_after(git).await
    }
}

fn git(config: &ToolConfig) -> Result<Git, ToolError> {
    Ok(Git::new(
        config.settings(SETTINGS)?,
        jianmu_workspace::for_tool(config, SETTINGS)?,
    )?
    .with_network(config.scope().get::<jianmu_process::Network>()))
}

macro_rules! register {
    ($($ty:ident => $build:ident),* $(,)?) => {
        $(
            fn $build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
                ToolHandle::new($ty { git: git(config)? })
            }
            jianmu_tool_core::register_tool!($ty, $build);
        )*
    };
}

register!(
    GitStatus => build_status,
    GitDiff => build_diff,
    GitLog => build_log,
    GitShow => build_show,
    GitBlame => build_blame,
    GitAdd => build_add,
    GitCommit => build_commit,
    GitBranch => build_branch,
    GitCheckout => build_checkout,
);

#[cfg(test)]
mod tests;
