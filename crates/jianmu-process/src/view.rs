//! A session's view of the file system: which host paths its commands see, read-only
//! or writable, and which they do not see at all, decided before anything is mounted.
//!
//! [`ViewConfig`] says what belongs in the view; [`ViewConfig::layout`] turns it into
//! the steps that build it (`Step`: folders, symbolic links, bind mounts, masks, in
//! mount order), which `mount.rs` carries out in a mount namespace made once per jail,
//! and into the Landlock read rules used where no mount namespace can be made. Hidden
//! paths are not masked but left out: a folder that holds one is rebuilt from its
//! other entries (each bound on its own), so a hidden path is missing, as it would be
//! on a machine without it.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// The system folders every view shows read-only (those that exist).
pub(crate) const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/var/lib",
    "/nix", "/snap", "/gnu",
];

/// System paths left out although a system folder holds them: host container engines'
/// state (other sandboxes' files, their sockets) and the password hashes.
pub(crate) const SYSTEM_HIDDEN: &[&str] = &[
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
    "/var/lib/lxd",
    "/var/lib/incus",
    "/var/lib/libvirt",
    "/var/lib/kubelet",
    "/var/lib/rancher",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
];

/// Entries of a home left out by default: credentials, keys, agents' sockets and
/// shell histories.
pub(crate) const HOME_HIDDEN: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".yarnrc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".config/gh",
    ".config/hub",
    ".vault-token",
    ".terraform.d",
    ".local/share/keyrings",
    ".local/share/fish/fish_history",
    ".histfile",
    ".lesshst",
];

/// Whether a home's top-level entry is a history file (`.bash_history`, ...).
fn is_history(name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.starts_with(b".") && name.ends_with(b"_history")
}

/// Paths inside the workspace that commands in a view may read but not change: what a
/// later run reads (jianmu's settings and folder) and what the user's own `git` runs
/// outside any jail. Only those present when the view is made (a symbolic link is not
/// followed: it is left as it is).
pub const PROTECTED_IN_WORKSPACE: &[&str] =
    &["jianmu.toml", ".jianmu", ".git/hooks", ".git/config"];

/// What a view holds, as host paths (made absolute and resolved by [`ViewConfig::new`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ViewConfig {
    /// Read-only: the system, the homes, toolchains, `read_allow`.
    pub(crate) readable: Vec<PathBuf>,
    /// The homes (their default hidden entries are left out).
    pub(crate) homes: Vec<PathBuf>,
    /// Read-write: the workspace, the private temporary directory, `writable`.
    pub(crate) writable: Vec<PathBuf>,
    /// Left out.
    pub(crate) hidden: Vec<PathBuf>,
    /// Sockets let in by path.
    pub(crate) sockets: Vec<PathBuf>,
    /// Read-only inside the writable folders ([`PROTECTED_IN_WORKSPACE`]).
    pub(crate) protected: Vec<PathBuf>,
    /// Every home whose default hidden entries are left out, shown or not (in strict
    /// mode a toolchain inside one may be shown).
    pub(crate) secret_homes: Vec<PathBuf>,
}

/// One step of building a view, on paths as the view shows them (targets) and as the
/// host does (sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A folder (in a folder the view made).
    Dir(PathBuf),
    /// An empty file to mount a file on.
    File(PathBuf),
    /// A symbolic link at the path with the given target.
    Link(PathBuf, OsString),
    /// A bind mount of `source` (with what is mounted below it) at `target`.
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
    },
    /// A private, empty, writable file system in memory.
    Tmpfs(PathBuf),
    /// A file system in memory for a rebuilt folder's entries, made read-only by a
    /// [`Step::Seal`] once they are in place.
    Skeleton(PathBuf),
    /// The end of a rebuilt folder: its file system made read-only.
    Seal(PathBuf),
    /// An empty read-only folder over a hidden folder inside a writable one.
    MaskDir(PathBuf),
    /// `/dev/null` over a hidden file inside a writable folder.
    MaskFile(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Only a folder on the way to something below.
    Through,
    Bind {
        writable: bool,
    },
    Hide,
    Tmpfs,
    /// A writable folder inside a writable bind, bound on itself: a mount point,
    /// which cannot be renamed or removed.
    Pin,
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    children: BTreeMap<OsString, Node>,
}

impl Node {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            children: BTreeMap::new(),
        }
    }

    fn insert(&mut self, path: &Path, kind: Kind) {
        let mut node = self;
        for part in parts(path) {
            node = node
                .children
                .entry(part.to_owned())
                .or_insert_with(|| Node::new(Kind::Through));
        }
        node.kind = kind;
    }

    fn holds_hidden(&self) -> bool {
        self.children
            .values()
            .any(|c| c.kind == Kind::Hide || c.holds_hidden())
    }

    fn holds_shown(&self) -> bool {
        self.children.values().any(|c| {
            matches!(c.kind, Kind::Bind { .. } | Kind::Tmpfs | Kind::Pin) || c.holds_shown()
        })
    }
}

/// The normal components of an absolute path.
fn parts(path: &Path) -> impl Iterator<Item = &OsStr> {
    path.components().filter_map(|c| match c {
        Component::Normal(p) => Some(p),
        _ => None,
    })
}

/// `path` against `/` when relative.
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        Path::new("/").join(path)
    }
}

/// The homes a view shows: `$HOME` and the account's own, resolved, without `/`.
fn homes() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let account = account_home();
    for home in [std::env::var_os("HOME").map(PathBuf::from), account]
        .into_iter()
        .flatten()
    {
        if home.is_absolute()
            && let Ok(home) = std::fs::canonicalize(&home)
            && parts(&home).count() >= 1
            && home.is_dir()
        {
            out.push(home);
        }
    }
    out
}

/// The home of the account this process runs as, from the password database.
fn account_home() -> Option<PathBuf> {
    use std::io::BufRead;
    let uid = crate::sys::geteuid();
    let file = std::fs::File::open("/etc/passwd").ok()?;
    for line in std::io::BufReader::new(file).lines().take(100_000) {
        let line = line.ok()?;
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() >= 6 && fields[2].parse() == Ok(uid) {
            return Some(PathBuf::from(fields[5]));
        }
    }
    None
}

/// `path` made absolute (against `/`), its links resolved where it exists, `..`
/// removed lexically where it does not.
pub(crate) fn resolved(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    if let Ok(p) = std::fs::canonicalize(path) {
        return Some(p);
    }
    // A path that does not exist (yet): its parent resolved, its name kept.
    let parent = path.parent()?;
    let name = path.file_name()?;
    let mut p = resolved(parent).unwrap_or_else(|| parent.to_owned());
    p.push(name);
    Some(p)
}

/// The folder a program's toolchain lives in: `PREFIX` for `PREFIX/bin/NAME` (so a
/// virtual environment's or a version manager's libraries come with it), else the
/// program's own folder. `None` for the root and top-level folders, which are too
/// wide to show for one program.
pub(crate) fn toolchain_root(dir: &Path) -> Option<PathBuf> {
    let depth = parts(dir).count();
    let is_bin = matches!(
        dir.file_name().and_then(OsStr::to_str),
        Some("bin" | "sbin")
    );
    let root = match dir.parent() {
        Some(prefix) if is_bin && depth >= 3 => prefix.to_owned(),
        _ => dir.to_owned(),
    };
    (parts(&root).count() >= 2).then_some(root)
}

/// The toolchains on `PATH`: each folder's [`toolchain_root`], resolved.
pub(crate) fn path_toolchains(path_var: Option<&OsStr>) -> Vec<PathBuf> {
    let Some(var) = path_var else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for dir in std::env::split_paths(var) {
        for dir in [Some(dir.clone()), std::fs::canonicalize(&dir).ok()]
            .into_iter()
            .flatten()
        {
            if let Some(root) = toolchain_root(&dir)
                && root.is_dir()
                && !out.contains(&root)
            {
                out.push(root);
            }
        }
    }
    out
}

impl ViewConfig {
    /// The view of a jail with `settings` whose commands work in `workspace`, with
    /// `tmp` as their private temporary directory. `None` when the workspace is the
    /// whole file system (nothing would be left out).
    pub(crate) fn new(
        settings: &crate::IsolationSettings,
        workspace: &Path,
        tmp: Option<&Path>,
    ) -> Option<Self> {
        let workspace = resolved(&absolute(workspace))?;
        if workspace == Path::new("/") {
            return None;
        }
        let mut config = Self::default();
        config.readable.extend(SYSTEM.iter().map(PathBuf::from));
        config.secret_homes = homes();
        let system = config.readable.len();
        match &settings.read_allow {
            Some(allowed) => config
                .readable
                .extend(allowed.iter().filter_map(|p| resolved(&absolute(p)))),
            None => {
                config
                    .readable
                    .extend(path_toolchains(std::env::var_os("PATH").as_deref()));
                for home in config.secret_homes.clone() {
                    if !config.homes.contains(&home) {
                        config.homes.push(home);
                    }
                }
            }
        }
        // A toolchain is never a home or what holds one (`~/bin` would show the home).
        let secret_homes = config.secret_homes.clone();
        let mut index = 0;
        config.readable.retain(|root| {
            index += 1;
            index <= system || !secret_homes.iter().any(|h| h.starts_with(root))
        });
        // Shown as asked (a skill folder in a home or in `/tmp`), but never `/` or a
        // top-level folder, nothing under the host's sockets, and nothing inside what
        // is hidden: a credential stays absent whatever is asked.
        let secret: Vec<PathBuf> = SYSTEM_HIDDEN
            .iter()
            .map(PathBuf::from)
            .chain(["/run", "/var/run"].iter().map(PathBuf::from))
            .chain(
                settings
                    .read_deny
                    .iter()
                    .filter_map(|p| resolved(&absolute(p))),
            )
            .chain(
                config
                    .secret_homes
                    .iter()
                    .flat_map(|h| HOME_HIDDEN.iter().map(move |n| h.join(n))),
            )
            .collect();
        config.readable.extend(
            settings
                .read_also
                .iter()
                .filter_map(|p| resolved(&absolute(p)))
                .filter(|p| p.components().count() > 2)
                .filter(|p| !secret.iter().any(|s| p.starts_with(s))),
        );
        // Name resolution where `/etc/resolv.conf` links into `/run` (systemd-resolved).
        if let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
            && !resolv.starts_with("/etc")
        {
            config.readable.push(resolv);
        }
        config.protected.extend(
            PROTECTED_IN_WORKSPACE
                .iter()
                .map(|p| workspace.join(p))
                .filter(|p| {
                    std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink())
                }),
        );
        config.writable.push(workspace);
        config.writable.extend(tmp.and_then(resolved));
        config.writable.extend(
            settings
                .writable
                .iter()
                .filter_map(|p| resolved(&absolute(p))),
        );
        // Hidden where this user could read them: a folder rebuilt for a file nobody
        // here may read would cost mounts for nothing (`/etc/shadow` for a user).
        let root = crate::sys::geteuid() == 0;
        config.hidden.extend(
            SYSTEM_HIDDEN
                .iter()
                .map(PathBuf::from)
                .filter(|p| root || (*p != Path::new("/etc/ssh") && crate::sys::readable(p))),
        );
        config.hidden.extend(
            settings
                .read_deny
                .iter()
                .filter_map(|p| resolved(&absolute(p))),
        );
        config.sockets.extend(
            settings
                .sockets
                .iter()
                .filter_map(|p| resolved(&absolute(p))),
        );
        Some(config)
    }

    /// Shows `program`'s toolchain too (see [`toolchain_root`]), found on `PATH`
    /// when it is a bare name, and the toolchain of what it links to.
    pub(crate) fn show_program(&mut self, program: &OsStr) {
        let path = Path::new(program);
        let found = if path.components().count() > 1 {
            Some(absolute(path))
        } else {
            std::env::var_os("PATH").and_then(|var| {
                std::env::split_paths(&var)
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join(path))
                    .find(|p| p.is_file())
            })
        };
        let Some(found) = found else {
            return;
        };
        let real = std::fs::canonicalize(&found).ok();
        for path in [Some(found), real].into_iter().flatten() {
            if let Some(root) = path.parent().and_then(toolchain_root)
                && let Some(root) = resolved(&root)
                && !self.readable.contains(&root)
                && !self.secret_homes.iter().any(|h| h.starts_with(&root))
            {
                self.readable.push(root);
            }
        }
    }

    /// What the view holds, for `jianmu sandbox status`: read-only, writable, hidden
    /// (the defaults in the homes included, where they exist), sockets let in.
    pub(crate) fn lines(&self) -> Vec<(&'static str, Vec<PathBuf>)> {
        let mut read_only: Vec<PathBuf> = self
            .readable
            .iter()
            .chain(&self.homes)
            .filter(|p| p.exists())
            .cloned()
            .collect();
        read_only.dedup();
        let mut hidden: Vec<PathBuf> = vec![
            PathBuf::from("/run"),
            PathBuf::from("/var/run"),
            PathBuf::from("/tmp (the host's: the session has its own)"),
        ];
        for home in &self.secret_homes {
            hidden.extend(
                HOME_HIDDEN
                    .iter()
                    .map(|name| home.join(name))
                    .filter(|p| std::fs::symlink_metadata(p).is_ok()),
            );
        }
        hidden.extend(self.hidden.iter().cloned());
        hidden.push(PathBuf::from("everything else outside the folders above"));
        read_only.extend(self.protected.iter().cloned());
        vec![
            ("read-only", read_only),
            ("writable", self.writable.clone()),
            ("hidden", hidden),
            ("sockets let in", self.sockets.clone()),
        ]
    }

    /// The steps that build this view under an empty root, in order: folders before
    /// what is mounted in them, outer mounts before inner ones.
    pub(crate) fn layout(&self) -> Vec<Step> {
        let mut root = Node::new(Kind::Through);
        for path in &self.readable {
            root.insert(path, Kind::Bind { writable: false });
        }
        for home in &self.homes {
            root.insert(home, Kind::Bind { writable: false });
        }
        root.insert(Path::new("/tmp"), Kind::Tmpfs);
        // The folder of a protected path inside a writable one (`.git`) is pinned by
        // a bind of itself: a mount point can be neither renamed nor removed, so the
        // folder cannot be put aside for a copy without the read-only entries.
        for path in &self.protected {
            if let Some(folder) = path.parent()
                && self
                    .writable
                    .iter()
                    .any(|w| folder != w && folder.starts_with(w))
            {
                root.insert(folder, Kind::Pin);
            }
        }
        // Before the hidden paths: a path both protected and hidden stays hidden.
        for path in &self.protected {
            root.insert(path, Kind::Bind { writable: false });
        }
        // A hidden path that is a link is hidden with what it leads to
        // (`~/.ssh -> dotfiles/ssh`).
        let hide = |root: &mut Node, path: &Path| {
            root.insert(path, Kind::Hide);
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
                && let Ok(target) = std::fs::canonicalize(path)
            {
                root.insert(&target, Kind::Hide);
            }
        };
        for path in &self.hidden {
            hide(&mut root, path);
        }
        for home in &self.secret_homes {
            for name in HOME_HIDDEN {
                let path = home.join(name);
                if std::fs::symlink_metadata(&path).is_ok() {
                    hide(&mut root, &path);
                }
            }
            if let Ok(entries) = std::fs::read_dir(home) {
                for entry in entries.flatten().take(100_000) {
                    if is_history(&entry.file_name()) {
                        hide(&mut root, &entry.path());
                    }
                }
            }
        }
        for path in &self.writable {
            root.insert(path, Kind::Bind { writable: true });
        }
        for path in &self.sockets {
            root.insert(path, Kind::Bind { writable: false });
        }
        let mut steps = Vec::new();
        let mut here = PathBuf::from("/");
        for (name, child) in &root.children {
            here.push(name);
            emit(&mut steps, &mut here, child, Parent::Made);
            here.pop();
        }
        steps
    }
}

/// Where a node's path lies: in a folder the view made (so it can make entries there),
/// or inside a host folder already bound (where what it mounts on must exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parent {
    Made,
    Bound { writable: bool },
}

/// The steps for the node at `path`.
fn emit(steps: &mut Vec<Step>, path: &mut PathBuf, node: &Node, parent: Parent) {
    match node.kind {
        Kind::Hide => {
            if let Parent::Bound { .. } = parent {
                // Inside a folder bound whole (a writable one is never rebuilt, so
                // that new entries can be made in it): covered instead.
                match std::fs::symlink_metadata(&*path) {
                    Ok(m) if m.is_dir() => steps.push(Step::MaskDir(path.clone())),
                    Ok(m) if !m.file_type().is_symlink() => {
                        steps.push(Step::MaskFile(path.clone()));
                    }
                    _ => {}
                }
                return;
            }
            if node.holds_shown() && parent == Parent::Made {
                // Something shown lies below: only the folders on the way to it.
                steps.push(Step::Dir(path.clone()));
                children(steps, path, node, Parent::Made);
            }
        }
        Kind::Through => {
            match parent {
                Parent::Made => {
                    if !node.holds_shown() {
                        return;
                    }
                    steps.push(Step::Dir(path.clone()));
                }
                Parent::Bound { .. } => {
                    if !path.is_dir() {
                        return;
                    }
                }
            }
            children(steps, path, node, parent);
        }
        Kind::Tmpfs => {
            if parent == Parent::Made {
                steps.push(Step::Dir(path.clone()));
            }
            steps.push(Step::Tmpfs(path.clone()));
            children(steps, path, node, Parent::Made);
        }
        Kind::Bind { writable } => bind(steps, path, node, parent, writable, None),
        Kind::Pin => match parent {
            Parent::Bound { writable: true } if path.is_dir() => {
                steps.push(Step::Bind {
                    source: path.clone(),
                    target: path.clone(),
                    writable: true,
                });
                children(steps, path, node, parent);
            }
            _ => bind(steps, path, node, parent, true, None),
        },
    }
}

fn children(steps: &mut Vec<Step>, path: &mut PathBuf, node: &Node, parent: Parent) {
    for (name, child) in &node.children {
        path.push(name);
        emit(steps, path, child, parent);
        path.pop();
    }
}

/// The steps that show `path` (whose type is `known` when a listing said it).
fn bind(
    steps: &mut Vec<Step>,
    path: &mut PathBuf,
    node: &Node,
    parent: Parent,
    writable: bool,
    known: Option<std::fs::FileType>,
) {
    let Some(meta) = known.or_else(|| {
        std::fs::symlink_metadata(&*path)
            .ok()
            .map(|m| m.file_type())
    }) else {
        return;
    };
    if meta.is_symlink() {
        // A link the view makes again (`/bin -> usr/bin`), in a folder it made.
        if parent == Parent::Made
            && let Ok(target) = std::fs::read_link(&*path)
        {
            steps.push(Step::Link(path.clone(), target.into_os_string()));
        }
        return;
    }
    // A read-only folder that holds something hidden is rebuilt from its other entries.
    if meta.is_dir() && !writable && parent == Parent::Made && node.holds_hidden() {
        let Ok(entries) = std::fs::read_dir(&*path) else {
            return;
        };
        steps.push(Step::Dir(path.clone()));
        // Its own file system, so that it is read-only wherever it lies (in the
        // session's `/tmp` too).
        steps.push(Step::Skeleton(path.clone()));
        let mut names: Vec<(OsString, Option<std::fs::FileType>)> = entries
            .flatten()
            .take(100_000)
            .map(|e| (e.file_name(), e.file_type().ok()))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let implicit = Node::new(Kind::Bind { writable });
        for (name, known) in names {
            path.push(&name);
            match node.children.get(&name) {
                // Sockets in a rebuilt folder stay out unless named.
                None if known.is_some_and(|t| {
                    use std::os::unix::fs::FileTypeExt;
                    t.is_socket()
                }) => {}
                None => bind(steps, path, &implicit, Parent::Made, writable, known),
                Some(child) if child.kind == Kind::Through => {
                    bind(steps, path, child, Parent::Made, writable, None);
                }
                Some(child) => emit(steps, path, child, Parent::Made),
            }
            path.pop();
        }
        // Shown paths below hidden names that do not exist on the host are skipped.
        steps.push(Step::Seal(path.clone()));
        return;
    }
    match parent {
        Parent::Made => steps.push(if meta.is_dir() {
            Step::Dir(path.clone())
        } else {
            Step::File(path.clone())
        }),
        // Already shown as it would be (a toolchain inside a home): nothing to mount.
        Parent::Bound { writable: w } if w == writable => {
            if meta.is_dir() {
                children(steps, path, node, parent);
            }
            return;
        }
        // A bind inside a bind mounts on what is there.
        Parent::Bound { .. } => {}
    }
    steps.push(Step::Bind {
        source: path.clone(),
        target: path.clone(),
        writable,
    });
    if meta.is_dir() {
        children(steps, path, node, Parent::Bound { writable });
    }
}

/// Landlock read rules for the same view, where no mount namespace can be made:
/// `(path, whole)` where `whole` grants reading beneath and `!whole` only listing (a
/// rebuilt folder: the names beneath it can be listed, hidden contents not read).
pub(crate) fn read_rules(steps: &[Step]) -> Vec<(PathBuf, bool)> {
    let mut rules = Vec::new();
    for step in steps {
        match step {
            Step::Bind { source, .. } => rules.push((source.clone(), true)),
            Step::Dir(path) if path.is_dir() => rules.push((path.clone(), false)),
            _ => {}
        }
    }
    rules
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
