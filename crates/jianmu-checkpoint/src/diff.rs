//! Diffs between a checkpoint and the workspace now, or two checkpoints: the changed
//! paths by blob id and mode (no content is read for unchanged files), and a unified
//! diff text with git-style headers, cut to a size at a line or character boundary.

use std::cmp::Ordering;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use crate::manifest::{self, Manifest, Node};
use crate::object::{Kind, Oid};
use crate::{Change, ChangeKind, CheckpointError, Diff, Inner, Store, scan};

/// Files up to this size that are valid UTF-8 get a text diff.
const TEXT_MAX: u64 = 1 << 20;
/// A diff of one file taking longer than this is approximated.
const DIFF_TIME: Duration = Duration::from_secs(2);

pub(crate) fn diff(
    store: &Store,
    inner: &mut Inner,
    id: &str,
    to: Option<&str>,
    filter: Option<&str>,
    max_bytes: usize,
) -> Result<Diff, CheckpointError> {
    let index = store.refresh(inner)?;
    let from = store.resolve(&index, id)?.oid()?;
    let to = to.map(|t| store.resolve(&index, t)?.oid()).transpose()?;
    let (a, _) = manifest::load(&store.objects, &from)?;
    let b = match &to {
        Some(c) => manifest::load(&store.objects, c)?.0,
        None => scan::scan(store, inner, false)?.manifest,
    };
    let filter = filter.filter(|f| !f.is_empty());
    let found = compare(&a, &b, filter);
    let sides = Sides {
        store,
        now: to.is_none(),
    };
    let mut text = String::new();
    let mut cut = 0usize;
    for (change, old, new) in &found {
        let section = sides.section(&change.path, change.kind, *old, *new)?;
        if cut > 0 {
            cut += section.len();
        } else if text.len() + section.len() <= max_bytes {
            text.push_str(&section);
        } else {
            let mut end = max_bytes - text.len();
            while !section.is_char_boundary(end) {
                end -= 1;
            }
            if let Some(nl) = section[..end].rfind('\n') {
                end = nl + 1;
            }
            text.push_str(&section[..end]);
            cut += section.len() - end;
        }
    }
    Ok(Diff {
        changes: found.into_iter().map(|(c, _, _)| c).collect(),
        text,
        cut: (cut > 0).then_some(cut),
    })
}

/// Whether `path` is `filter` or lies below it.
fn wanted(path: &str, filter: Option<&str>) -> bool {
    match filter {
        None => true,
        Some(f) => {
            path == f
                || (path.len() > f.len() && path.starts_with(f) && path.as_bytes()[f.len()] == b'/')
        }
    }
}

/// Whether the folder `path` has nothing below it in `m`.
fn empty_dir(m: &Manifest, path: &str) -> bool {
    let below = format!("{path}/");
    m.nodes
        .range(below.clone()..)
        .next()
        .is_none_or(|(k, _)| !k.starts_with(&below))
}

type Found = (Change, Option<Node>, Option<Node>);

/// The changes from `a` to `b`, sorted by path.
fn compare(a: &Manifest, b: &Manifest, filter: Option<&str>) -> Vec<Found> {
    let mut out = Vec::new();
    if filter.is_none() && a.root_mode != b.root_mode {
        out.push((
            Change {
                path: ".".to_owned(),
                kind: ChangeKind::ModeChanged,
            },
            Some(Node::Dir { mode: a.root_mode }),
            Some(Node::Dir { mode: b.root_mode }),
        ));
    }
    let mut ia = a.nodes.iter().peekable();
    let mut ib = b.nodes.iter().peekable();
    loop {
        let order = match (ia.peek(), ib.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
        };
        let (path, old, new) = match order {
            Ordering::Less => match ia.next() {
                Some((p, x)) => (p, Some(*x), None),
                None => break,
            },
            Ordering::Greater => match ib.next() {
                Some((p, y)) => (p, None, Some(*y)),
                None => break,
            },
            Ordering::Equal => match (ia.next(), ib.next()) {
                (Some((p, x)), Some((_, y))) => (p, Some(*x), Some(*y)),
                _ => break,
            },
        };
        if !wanted(path, filter) {
            continue;
        }
        let kind = match (old, new) {
            (Some(x), Some(y)) => match (x, y) {
                (Node::File { id: i, mode: m }, Node::File { id: j, mode: n }) => {
                    if i != j {
                        Some(ChangeKind::Modified)
                    } else if m != n {
                        Some(ChangeKind::ModeChanged)
                    } else {
                        None
                    }
                }
                (Node::Link { id: i }, Node::Link { id: j }) => {
                    (i != j).then_some(ChangeKind::Modified)
                }
                (Node::Dir { mode: m }, Node::Dir { mode: n }) => {
                    (m != n).then_some(ChangeKind::ModeChanged)
                }
                _ => Some(ChangeKind::TypeChanged),
            },
            (Some(Node::Dir { .. }), None) => empty_dir(a, path).then_some(ChangeKind::Deleted),
            (Some(_), None) => Some(ChangeKind::Deleted),
            (None, Some(Node::Dir { .. })) => empty_dir(b, path).then_some(ChangeKind::Added),
            (None, Some(_)) => Some(ChangeKind::Added),
            (None, None) => None,
        };
        if let Some(kind) = kind {
            out.push((
                Change {
                    path: path.clone(),
                    kind,
                },
                old,
                new,
            ));
        }
    }
    out
}

/// Where the two sides' content comes from: the old side is always a checkpoint;
/// the new side is a checkpoint or, with `now`, the workspace.
struct Sides<'a> {
    store: &'a Store,
    now: bool,
}

fn short(id: Option<Oid>) -> String {
    id.map_or_else(|| "0000000".to_owned(), |id| id.hex()[..7].to_owned())
}

impl Sides<'_> {
    /// The text of one side, or `None` when it is binary, large or unreadable.
    fn text(&self, new: bool, path: &str, node: &Node) -> Result<Option<String>, CheckpointError> {
        let bytes = if new && self.now {
            match node {
                Node::File { .. } => scan::read_small(self.store, path, TEXT_MAX),
                Node::Link { .. } => self
                    .store
                    .root
                    .read_link_contents(path)
                    .ok()
                    .map(|t| t.as_os_str().as_bytes().to_vec()),
                Node::Dir { .. } => None,
            }
        } else {
            match node.blob() {
                Some(id) if self.store.objects.blob_len(&id)? <= TEXT_MAX => {
                    Some(self.store.objects.read(&id, Kind::Blob, TEXT_MAX)?)
                }
                _ => None,
            }
        };
        Ok(bytes
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|s| !s.contains('\0')))
    }

    /// The diff text of one change.
    fn section(
        &self,
        path: &str,
        kind: ChangeKind,
        old: Option<Node>,
        new: Option<Node>,
    ) -> Result<String, CheckpointError> {
        let mut s = format!("diff --git a/{path} b/{path}\n");
        match (kind, old, new) {
            (ChangeKind::TypeChanged, Some(x), Some(y)) => {
                let mut both = self.section(path, ChangeKind::Deleted, Some(x), None)?;
                both.push_str(&self.section(path, ChangeKind::Added, None, Some(y))?);
                return Ok(both);
            }
            (ChangeKind::Added, None, Some(Node::Dir { mode })) => {
                s.push_str(&format!(
                    "new directory mode {:06o}\n",
                    Node::Dir { mode }.full_mode()
                ));
            }
            (ChangeKind::Deleted, Some(Node::Dir { mode }), None) => {
                s.push_str(&format!(
                    "deleted directory mode {:06o}\n",
                    Node::Dir { mode }.full_mode()
                ));
            }
            (ChangeKind::Added, None, Some(y)) => {
                s.push_str(&format!("new file mode {:06o}\n", y.full_mode()));
                s.push_str(&format!("index 0000000..{}\n", short(y.blob())));
                self.body(&mut s, path, None, Some(&y))?;
            }
            (ChangeKind::Deleted, Some(x), None) => {
                s.push_str(&format!("deleted file mode {:06o}\n", x.full_mode()));
                s.push_str(&format!("index {}..0000000\n", short(x.blob())));
                self.body(&mut s, path, Some(&x), None)?;
            }
            (ChangeKind::ModeChanged, Some(x), Some(y)) => {
                s.push_str(&format!(
                    "old mode {:06o}\nnew mode {:06o}\n",
                    x.full_mode(),
                    y.full_mode()
                ));
            }
            (ChangeKind::Modified, Some(x), Some(y)) => {
                if x.full_mode() != y.full_mode() {
                    s.push_str(&format!(
                        "old mode {:06o}\nnew mode {:06o}\nindex {}..{}\n",
                        x.full_mode(),
                        y.full_mode(),
                        short(x.blob()),
                        short(y.blob())
                    ));
                } else {
                    s.push_str(&format!(
                        "index {}..{} {:06o}\n",
                        short(x.blob()),
                        short(y.blob()),
                        x.full_mode()
                    ));
                }
                self.body(&mut s, path, Some(&x), Some(&y))?;
            }
            _ => {}
        }
        Ok(s)
    }

    /// The unified diff of the content, or the line that says binary files differ.
    fn body(
        &self,
        s: &mut String,
        path: &str,
        old: Option<&Node>,
        new: Option<&Node>,
    ) -> Result<(), CheckpointError> {
        let from = if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".to_owned()
        };
        let to = if new.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".to_owned()
        };
        let a = match old {
            Some(n) => self.text(false, path, n)?,
            None => Some(String::new()),
        };
        let b = match new {
            Some(n) => self.text(true, path, n)?,
            None => Some(String::new()),
        };
        match (a, b) {
            (Some(a), Some(b)) => {
                let diff = similar::TextDiff::configure()
                    .algorithm(similar::Algorithm::Myers)
                    .timeout(DIFF_TIME)
                    .diff_lines(a.as_str(), b.as_str());
                let mut unified = diff.unified_diff();
                unified
                    .context_radius(3)
                    .missing_newline_hint(true)
                    .header(&from, &to);
                s.push_str(&unified.to_string());
            }
            _ => s.push_str(&format!("Binary files {from} and {to} differ\n")),
        }
        Ok(())
    }
}
