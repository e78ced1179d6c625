//! Running `git` so that nothing but git's own code runs: the fixed options and
//! environment of every invocation, the repository check, argument checks, and reading
//! what git prints with a bound and a time limit.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jianmu_process::{IsolationSettings, Jail, Spec, Stream};
use jianmu_tool_core::ToolError;
use jianmu_workspace::Workspace;

use crate::nested;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

/// Settings of the git tools, shared by all of them (`[tools.git]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GitSettings {
    /// The `git` program: a name on PATH or a path.
    pub git: PathBuf,
    /// Time limit of one git command, in seconds.
    pub timeout_secs: f64,
    /// Most bytes read from git's output; past it git is stopped and the answer says
    /// the output was cut.
    pub max_read: usize,
    /// Most lines of one answer (a `limit` argument asks for fewer); the answer says
    /// how to read on.
    pub max_lines: usize,
    /// Most characters of one answer.
    pub max_output: usize,
    /// The author and committer name of `git_commit`, over git's own configuration.
    pub author_name: Option<String>,
    /// The author and committer email of `git_commit`, over git's own configuration.
    pub author_email: Option<String>,
    /// How git is isolated (`[tools.git.isolation]`): by default it has no network and
    /// writes only in the workspace and its temporary folder.
    pub isolation: IsolationSettings,
}

impl Default for GitSettings {
    fn default() -> Self {
        Self {
            git: PathBuf::from("git"),
            timeout_secs: 30.0,
            max_read: 16 * 1024 * 1024,
            max_lines: 2000,
            max_output: 60_000,
            author_name: None,
            author_email: None,
            isolation: IsolationSettings::default(),
        }
    }
}

/// Configuration that would make git run a program, or reach the network, set to
/// nothing on every command (these `-c` values override every configuration file).
/// Diff drivers (`diff.*.command`, `diff.*.textconv`) are turned off by the commands'
/// `--no-ext-diff` and `--no-textconv`; filter drivers by [`Git::filter_overrides`].
const FIXED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=true",
    "core.sshCommand=false",
    "core.askPass=",
    "core.gitProxy=",
    "credential.helper=",
    "diff.external=",
    "sequence.editor=true",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "log.showSignature=false",
    "gpg.program=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "color.ui=false",
    "core.quotePath=false",
    "advice.detachedHead=false",
    // Nested repositories are listed as such, never entered.
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
];

/// The system-wide configuration file: given to git by name, so that it is the one
/// [`Git::filter_overrides`] looks at whatever git was built with.
const SYSTEM_CONFIG: &str = "/etc/gitconfig";

/// Files in a `.git` folder that make git read outside it: another repository's
/// folder (`commondir`), other object stores (`objects/info/alternates`,
/// `objects/info/http-alternates`), and, when a link, the list of shallow commits.
const LEADS_OUT: &[(&str, &str)] = &[
    ("commondir", "names another folder as the repository's"),
    (
        "objects/info/alternates",
        "borrows objects from other folders",
    ),
    (
        "objects/info/http-alternates",
        "borrows objects from elsewhere",
    ),
];

/// Whether the configuration file `path` may define a filter driver: it mentions
/// filters or includes another file, or cannot be read as a small regular file (a
/// link to a device, a FIFO, something huge) and so is not ruled out. A missing file
/// defines nothing.
fn config_mentions_filters(path: &Path) -> bool {
    use std::io::Read as _;
    /// Larger than any real configuration file.
    const MAX: u64 = 1 << 20;
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    if !meta.is_file() || meta.len() > MAX {
        return true;
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(MAX).read_to_end(&mut bytes));
    if read.is_err() {
        return true;
    }
    let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    text.contains("filter") || text.contains("include")
}

/// What a git command printed.
pub(crate) struct Output {
    pub(crate) stdout: Vec<u8>,
    /// Stdout was longer than `max_read` and was cut there.
    pub(crate) cut: bool,
}

/// Runs git for the workspace's repository.
#[derive(Clone)]
pub(crate) struct Git {
    pub(crate) settings: Arc<GitSettings>,
    pub(crate) ws: Arc<Workspace>,
    jail: Jail,
}

impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("root", &self.ws.root())
            .field("isolation", &self.jail.describe())
            .finish_non_exhaustive()
    }
}

impl Git {
    pub(crate) fn new(settings: GitSettings, ws: Arc<Workspace>) -> Result<Self, ToolError> {
        let jail = Jail::new(&settings.isolation, ws.root())
            .map_err(|e| ToolError::Config {
                tool: "git".into(),
                message: jianmu_tool_core::error_chain(&e),
            })?
            .showing_programs([&settings.git]);
        Ok(Self {
            settings: Arc::new(settings),
            ws,
            jail,
        })
    }

    /// Runs the private network of the session where one is in force.
    #[must_use]
    pub(crate) fn with_network(mut self, network: Arc<jianmu_process::Network>) -> Self {
        self.jail = self.jail.sharing_network(network);
        self
    }

    /// The repository's git folder: `.git` at the workspace root, a real folder (not a
    /// link, not a `gitdir:` file that could point anywhere).
    fn git_dir(&self) -> Result<PathBuf, ToolError> {
        let dir = self.ws.root().join(".git");
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {
                for (file, what) in LEADS_OUT {
                    if std::fs::symlink_metadata(dir.join(file)).is_ok() {
                        return Err(ToolError::failed(format!(
                            "refused: the repository's `.git/{file}` {what}, outside the workspace; the git tools work only on a repository whose files are all in its `.git` folder"
                        )));
                    }
                }
                // Every file git reads from its folder must be in it: a link could
                // show another file's lines in git's errors.
                for file in [
                    "shallow",
                    "HEAD",
                    "config",
                    "index",
                    "packed-refs",
                    "info/grafts",
                ] {
                    if std::fs::symlink_metadata(dir.join(file))
                        .is_ok_and(|m| m.file_type().is_symlink())
                    {
                        return Err(ToolError::failed(format!(
                            "refused: the repository's `.git/{file}` is a symbolic link, which could lead outside the workspace; replace it with the file itself"
                        )));
                    }
                }
                Ok(dir)
            }
            Ok(_) => Err(ToolError::failed(
                "the workspace's `.git` is not a folder (a link, or a worktree's `gitdir:` file): the git tools work only on a repository whose `.git` folder is at the workspace root",
            )),
            Err(_) => Err(ToolError::failed(
                "the workspace is not a git repository: there is no `.git` folder at its root (the git tools work on the repository at the workspace root and cannot create one)",
            )),
        }
    }

    /// `-c` overrides that turn off every filter driver (`filter.NAME.clean`, `smudge`,
    /// `process`) that any configuration git reads defines: the repository's, and that
    /// of every repository nested in it (git checks a nested repository for changes by
    /// running itself there, and passes these overrides down). A configuration is
    /// listed only when one of its files mentions filters or includes others, which is
    /// read first, so the usual case costs no extra command.
    async fn filter_overrides(&self, git_dir: &Path) -> Result<Vec<String>, ToolError> {
        let mut files = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        if let Some(home) = std::env::var_os("HOME") {
            let home = PathBuf::from(home);
            files.push(home.join(".gitconfig"));
            files.push(home.join(".config/git/config"));
        }
        if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME") {
            files.push(PathBuf::from(xdg).join("git/config"));
        }
        files.push(PathBuf::from(SYSTEM_CONFIG));
        let mut names = std::collections::BTreeSet::new();
        if files.iter().any(|f| config_mentions_filters(f)) {
            names.extend(self.filter_names(None).await?);
        }
        for (tree, nested) in self.nested(git_dir)? {
            let own = [nested.join("config"), nested.join("config.worktree")];
            if own.iter().any(|f| config_mentions_filters(f)) {
                names.extend(self.filter_names(Some((&nested, &tree))).await?);
            }
        }
        let mut out = Vec::new();
        for name in names {
            for part in ["clean", "smudge", "process"] {
                out.push(format!("filter.{name}.{part}="));
            }
            out.push(format!("filter.{name}.required=false"));
        }
        Ok(out)
    }

    /// The names of the filter drivers the configuration of a repository defines
    /// (every file git reads for it, includes followed where git would follow them):
    /// the workspace's, or `repo` (its git folder and work tree).
    async fn filter_names(&self, repo: Option<(&Path, &Path)>) -> Result<Vec<String>, ToolError> {
        let args = ["config", "-z", "--get-regexp", r"^filter\."].map(OsString::from);
        let listed = match self.command_in(&args, &[], repo).await {
            Ok(listed) => listed,
            // `git config` exits 1, saying nothing, when nothing matches.
            Err(ToolError::Failed { message }) if message.starts_with("git config failed (") => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in listed.stdout.split(|b| *b == 0) {
            let key = String::from_utf8_lossy(entry.split(|b| *b == b'\n').next().unwrap_or(b""));
            if let Some((name, _)) = key.strip_prefix("filter.").and_then(|k| k.rsplit_once('.')) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    /// Every repository nested in the workspace's (a gitlink of its index whose folder
    /// holds a repository), and those nested in them: each one's work tree and git
    /// folder. Refused when one leads out of the workspace or cannot be read.
    fn nested(&self, git_dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, ToolError> {
        let root = self.ws.root();
        let inside = |path: &Path| {
            std::fs::canonicalize(path)
                .ok()
                .filter(|p| p.starts_with(root))
        };
        let shown = |path: &Path| {
            jianmu_workspace::show(path.strip_prefix(root).unwrap_or(path)).to_string()
        };
        let mut found = Vec::new();
        let mut queue = vec![(root.to_path_buf(), git_dir.to_path_buf())];
        while let Some((tree, dir)) = queue.pop() {
            let hash = nested::hash_len(&dir.join("config"));
            let mut indexes = vec![dir.join("index")];
            // A split index keeps most entries in a shared file.
            if let Ok(entries) = std::fs::read_dir(&dir) {
                indexes.extend(
                    entries
                        .flatten()
                        .filter(|e| {
                            e.file_name()
                                .as_encoded_bytes()
                                .starts_with(b"sharedindex.")
                        })
                        .map(|e| e.path()),
                );
            }
            for index in indexes {
                let links = nested::gitlinks(&index, hash).map_err(|why| {
                    ToolError::failed(format!(
                        "refused: the index `{}` cannot be read to find the repositories nested in it ({}); git would run itself in each with its own configuration",
                        shown(&index),
                        match why {
                            nested::Unreadable::Size => "not a file, or over 256 MiB",
                            nested::Unreadable::Format => "a format these tools do not read",
                        }
                    ))
                })?;
                for link in links {
                    let sub = tree.join(&link);
                    let Some(sub_git) = nested::git_dir_of(&sub) else {
                        continue;
                    };
                    let refuse = |what: &str| {
                        ToolError::failed(format!(
                            "refused: the nested repository `{}` {what}; git would read it when it checks that repository for changes",
                            shown(&sub)
                        ))
                    };
                    let (Some(sub), Some(sub_git)) = (inside(&sub), inside(&sub_git)) else {
                        return Err(refuse(
                            "leads out of the workspace (a link, or a `.git` file naming a folder outside)",
                        ));
                    };
                    for (file, what) in LEADS_OUT {
                        if std::fs::symlink_metadata(sub_git.join(file)).is_ok() {
                            return Err(refuse(&format!("has a `{file}` that {what}")));
                        }
                    }
                    if found.len() >= nested::MAX_NESTED {
                        return Err(refuse(&format!(
                            "is one of more than {} nested repositories",
                            nested::MAX_NESTED
                        )));
                    }
                    if found.iter().any(|(_, g)| *g == sub_git) {
                        continue;
                    }
                    found.push((sub.clone(), sub_git.clone()));
                    queue.push((sub, sub_git));
                }
            }
        }
        Ok(found)
    }

    /// Refuses a `blame.ignoreRevsFile` (any configuration may set it) that names a
    /// file outside the workspace: git would read it, and show its lines in errors.
    pub(crate) async fn check_ignore_revs_files(&self) -> Result<(), ToolError> {
        self.git_dir()?;
        let listed = self
            .command(
                &["config", "-z", "--get-all", "blame.ignoreRevsFile"].map(OsString::from),
                &[],
            )
            .await;
        let Ok(listed) = listed else {
            return Ok(()); // none set: `git config` exits 1
        };
        for entry in listed.stdout.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let name = String::from_utf8_lossy(entry).into_owned();
            let inside = self
                .ws
                .relative(&name)
                .ok()
                .and_then(|rel| self.ws.canonical(&rel).ok())
                .is_some();
            if !inside {
                return Err(ToolError::failed(format!(
                    "refused: the configuration's blame.ignoreRevsFile names `{name}`, which is not a file of the workspace; git would read it"
                )));
            }
        }
        Ok(())
    }

    /// Runs `git ARGS` in the workspace's repository and answers what it printed, or
    /// its error. `filters`: the command may read work-tree files through filter
    /// drivers (status, diff, blame, add, checkout, commit), which are turned off.
    pub(crate) async fn run(&self, args: &[OsString], filters: bool) -> Result<Output, ToolError> {
        let git_dir = self.git_dir()?;
        let extra = if filters {
            self.filter_overrides(&git_dir).await?
        } else {
            Vec::new()
        };
        self.command(args, &extra).await
    }

    async fn command(&self, args: &[OsString], extra: &[String]) -> Result<Output, ToolError> {
        self.command_in(args, extra, None).await
    }

    /// [`Self::command`] in `repo` (a nested repository's git folder and work tree)
    /// rather than the workspace's repository.
    async fn command_in(
        &self,
        args: &[OsString],
        extra: &[String],
        repo: Option<(&Path, &Path)>,
    ) -> Result<Output, ToolError> {
        let root = self.ws.root();
        let (git_dir, tree) = match repo {
            Some((dir, tree)) => (dir.to_path_buf(), tree),
            None => (root.join(".git"), root),
        };
        let mut spec = Spec::new(&self.settings.git);
        spec.arg("--no-pager");
        for value in FIXED_CONFIG
            .iter()
            .copied()
            .map(str::to_owned)
            .chain(extra.iter().cloned())
        {
            spec.arg("-c").arg(value);
        }
        if let Some(name) = &self.settings.author_name {
            spec.arg("-c").arg(format!("user.name={name}"));
        }
        if let Some(email) = &self.settings.author_email {
            spec.arg("-c").arg(format!("user.email={email}"));
        }
        for arg in args {
            spec.arg(arg.clone());
        }
        spec.current_dir(tree)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("GIT_DIR", git_dir)
            .env("GIT_WORK_TREE", tree)
            // Named, so that the files read above for filters are all git reads.
            .env("GIT_CONFIG_SYSTEM", SYSTEM_CONFIG)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat")
            .env("PAGER", "cat")
            .env("GIT_EDITOR", "true")
            .env("GIT_SEQUENCE_EDITOR", "true")
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .stdout(Stream::Piped)
            .stderr(Stream::Piped);
        for key in ["HOME", "XDG_CONFIG_HOME"] {
            if let Some(value) = std::env::var_os(key) {
                spec.env(key, value);
            }
        }
        if let Some(tmp) = self.jail.tmp() {
            spec.env("TMPDIR", tmp);
        }
        let git = &self.settings.git;
        let mut process = self.jail.spawn(&spec).map_err(|e| {
            ToolError::failed(format!(
                "cannot run `{}`: {e}; install git, or set `git` in [tools.git]",
                git.display()
            ))
        })?;
        let (Some(mut stdout), Some(mut stderr)) = (process.stdout.take(), process.stderr.take())
        else {
            return Err(ToolError::failed("git has no pipes"));
        };
        let max = self.settings.max_read;
        let timeout = Duration::try_from_secs_f64(self.settings.timeout_secs)
            .unwrap_or(Duration::from_secs(30));
        let work = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let read_out = async {
                let mut limited = (&mut stdout).take(max as u64 + 1);
                limited.read_to_end(&mut out).await
            };
            let read_err = async {
                let mut limited = (&mut stderr).take(64 * 1024);
                limited.read_to_end(&mut err).await?;
                // The rest is drained, so git never waits on a full pipe.
                tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await
            };
            let (a, b) = tokio::join!(read_out, read_err);
            (a.and(b), out, err)
        };
        let lock = root.join(".git/index.lock");
        let lock_before = lock.exists();
        let started = std::time::SystemTime::now();
        // Asked first to end by itself, so that git removes its own lock files; a lock
        // this call made is removed if git could not.
        let stop = |mut process: jianmu_process::Supervised| async move {
            process.terminate();
            if tokio::time::timeout(Duration::from_secs(2), process.wait())
                .await
                .is_err()
            {
                process.stop_and_wait().await;
            }
            if !lock_before
                && std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .is_ok_and(|made| made >= started - Duration::from_secs(1))
            {
                let _ = std::fs::remove_file(&lock);
            }
        };
        let (read, mut out, err) = match tokio::time::timeout(timeout, work).await {
            Ok(done) => done,
            Err(_) => {
                stop(process).await;
                return Err(ToolError::failed(format!(
                    "git did not finish within {} s and was stopped; narrow the request (paths, a revision range, fewer commits)",
                    timeout.as_secs_f64()
                )));
            }
        };
        read.map_err(|e| ToolError::failed(format!("reading git's output: {e}")))?;
        let cut = out.len() > max;
        if cut {
            out.truncate(max);
            stop(process).await;
            return Ok(Output { stdout: out, cut });
        }
        let status = match tokio::time::timeout(timeout, process.wait()).await {
            Ok(Ok(status)) => status,
            _ => {
                stop(process).await;
                return Err(ToolError::failed("git did not exit"));
            }
        };
        if !status.success() {
            // Some failures (`nothing to commit`) are told on stdout.
            let said = if err.iter().all(u8::is_ascii_whitespace) {
                &out
            } else {
                &err
            };
            let text = String::from_utf8_lossy(said);
            let text = jianmu_tool_core::shorten(text.trim(), 2000);
            let what = args
                .first()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Err(ToolError::failed(if text.is_empty() {
                format!("git {what} failed ({status})")
            } else {
                format!("git {what} failed: {text}")
            }));
        }
        Ok(Output { stdout: out, cut })
    }

    /// A revision (or range) from the model: refused when it could be read as an
    /// option, or holds what no revision holds.
    pub(crate) fn revision(&self, what: &str, rev: &str) -> Result<OsString, ToolError> {
        if rev.is_empty() {
            return Err(ToolError::failed(format!("`{what}` is empty")));
        }
        if rev.starts_with('-') {
            return Err(ToolError::failed(format!(
                "`{what}` may not start with `-` (`{}` would be read as an option): give a revision such as HEAD, main, a commit id or A..B",
                jianmu_tool_core::echo(rev)
            )));
        }
        if rev.len() > 512 || rev.chars().any(char::is_control) {
            return Err(ToolError::failed(format!(
                "`{what}` is not a revision: at most 512 characters, no control characters"
            )));
        }
        Ok(OsString::from(rev))
    }

    /// A path from the model, as git should see it: relative to the workspace root,
    /// inside it, and not through a symlink.
    pub(crate) fn path(&self, path: &str) -> Result<OsString, ToolError> {
        if path.starts_with('-') {
            return Err(ToolError::failed(format!(
                "the path `{}` may not start with `-`; write `./{}` instead",
                jianmu_tool_core::echo(path),
                jianmu_tool_core::echo(path)
            )));
        }
        let rel = self.ws.relative(path)?;
        // Every folder on the way must be a real folder: git would follow a link out
        // of the workspace for some commands, and refuse it for others.
        let mut walked = PathBuf::new();
        let mut parts = rel.components().peekable();
        while let Some(part) = parts.next() {
            walked.push(part);
            if parts.peek().is_none() {
                break;
            }
            if let Ok(meta) = std::fs::symlink_metadata(self.ws.root().join(&walked))
                && meta.file_type().is_symlink()
            {
                return Err(ToolError::failed(format!(
                    "the path `{}` goes through the symlink `{}`: give the path it points to inside the workspace",
                    jianmu_tool_core::echo(path),
                    jianmu_workspace::show(&walked)
                )));
            }
        }
        if rel.as_os_str().is_empty() {
            return Ok(OsString::from("."));
        }
        Ok(rel.into_os_string())
    }
}
