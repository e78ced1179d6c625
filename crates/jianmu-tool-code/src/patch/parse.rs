//! The patch format `apply_patch` reads: a simplified, file-oriented diff without line
//! numbers.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +first line
//! *** Delete File: old.txt
//! *** Update File: src/lib.rs
//! *** Move to: src/main.rs
//! @@ fn main() {
//!  context line
//! -removed line
//! +added line
//! *** End of File
//! *** End Patch
//! ```

/// A parsed patch: its file operations in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Patch {
    pub ops: Vec<FileOp>,
}

/// One file operation, with the patch line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileOp {
    pub path: String,
    pub line: usize,
    pub kind: OpKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A new file with these lines.
    Add(Vec<String>),
    Delete,
    Update {
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One hunk of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Chunk {
    /// The patch line the hunk starts on.
    pub line: usize,
    /// The text after `@@ `: a line of the file the hunk comes after.
    pub anchor: Option<String>,
    /// The hunk's lines in order.
    pub lines: Vec<HunkLine>,
    /// `*** End of File`: the hunk ends at the end of the file.
    pub eof: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HunkLine {
    Keep(String),
    Remove(String),
    Insert(String),
}

impl Chunk {
    /// The lines the hunk expects in the file (kept and removed), in order.
    pub(crate) fn old(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().filter_map(|l| match l {
            HunkLine::Keep(s) | HunkLine::Remove(s) => Some(s.as_str()),
            HunkLine::Insert(_) => None,
        })
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const EOF_MARK: &str = "*** End of File";

/// Parses `text`. Leading and trailing blank lines are ignored, and so is a shell
/// here-document around the patch (`<<'EOF'` … `EOF`), which models sometimes copy.
///
/// # Errors
/// A message naming the patch line and what was expected there.
pub(crate) fn parse(text: &str) -> Result<Patch, String> {
    let all: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    // (line number, text) of the lines between the first and last non-blank ones.
    let mut lines: Vec<(usize, &str)> = all
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, *l))
        .skip_while(|(_, l)| l.trim().is_empty())
        .collect();
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    if let (Some((_, first)), Some((_, last))) = (lines.first(), lines.last())
        && let Some(tag) = heredoc_tag(first)
        && last.trim() == tag
        && lines.len() >= 2
    {
        lines.pop();
        lines.remove(0);
    }
    let Some(&(_, first)) = lines.first() else {
        return Err("the patch is empty; it starts with `*** Begin Patch`".to_owned());
    };
    if first.trim() != BEGIN {
        return Err(format!(
            "line {}: a patch starts with `{BEGIN}`, not `{}`",
            lines[0].0,
            jianmu_tool_core::echo(first)
        ));
    }
    let Some(&(end_line, last)) = lines.last().filter(|_| lines.len() > 1) else {
        return Err(missing_end());
    };
    if last.trim() != END {
        return Err(missing_end());
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let (n, raw) = body[at];
        at += 1;
        // A file operation's header may have whitespace around it.
        let line = raw.trim();
        if let Some(path) = line.strip_prefix(ADD) {
            let mut added = Vec::new();
            while let Some((_, l)) = body
                .get(at)
                .filter(|(_, l)| !l.trim_start().starts_with("*** "))
            {
                let Some(text) = l.strip_prefix('+') else {
                    return Err(format!(
                        "line {}: every line of an added file starts with `+`, not `{}`",
                        body[at].0,
                        jianmu_tool_core::echo(l)
                    ));
                };
                added.push(text.to_owned());
                at += 1;
            }
            ops.push(op(path, n, OpKind::Add(added))?);
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(op(path, n, OpKind::Delete)?);
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let mut move_to = None;
            if let Some(dest) = body.get(at).and_then(|(_, l)| l.trim().strip_prefix(MOVE)) {
                move_to = Some(checked_path(dest, body[at].0)?);
                at += 1;
            }
            let chunks = chunks(body, &mut at)?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(format!(
                    "line {n}: `{}` has no hunk; an update needs `@@` and changed lines (or `{MOVE}`)",
                    line.trim()
                ));
            }
            ops.push(op(path, n, OpKind::Update { move_to, chunks })?);
        } else if line == END {
            return Err(format!(
                "line {n}: `{END}` before the end; send one patch per call"
            ));
        } else {
            return Err(format!(
                "line {n}: expected `{ADD}`, `{DELETE}`, `{UPDATE}` or `{END}`, not `{}`",
                jianmu_tool_core::echo(line)
            ));
        }
    }
    if ops.is_empty() {
        return Err(format!("line {end_line}: the patch changes no file"));
    }
    Ok(Patch { ops })
}

fn missing_end() -> String {
    format!("the patch does not end with `{END}`: it may have been cut off; send the whole patch")
}

/// The terminator of a here-document opener such as `<<'EOF'`, `<<"EOF"`, `<<EOF` or
/// `apply_patch <<'EOF'`.
fn heredoc_tag(line: &str) -> Option<&str> {
    let (_, tag) = line.trim().split_once("<<")?;
    let tag = tag.trim().trim_start_matches('-');
    let tag = tag.trim_matches(|c| c == '\'' || c == '"');
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(tag)
}

fn checked_path(path: &str, line: usize) -> Result<String, String> {
    let path = path.trim();
    if path.is_empty() {
        return Err(format!("line {line}: the file path is missing"));
    }
    Ok(path.to_owned())
}

fn op(path: &str, line: usize, kind: OpKind) -> Result<FileOp, String> {
    Ok(FileOp {
        path: checked_path(path, line)?,
        line,
        kind,
    })
}

/// The hunks of one update, up to the next file operation.
fn chunks(body: &[(usize, &str)], at: &mut usize) -> Result<Vec<Chunk>, String> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut current: Option<Chunk> = None;
    while let Some(&(n, line)) = body.get(*at) {
        if line.starts_with("*** ") && line.trim() != EOF_MARK {
            break;
        }
        *at += 1;
        if line.trim() == EOF_MARK {
            let Some(mut chunk) = current.take().filter(|c| !c.lines.is_empty()) else {
                return Err(format!(
                    "line {n}: `{EOF_MARK}` ends a hunk, and no hunk is open here"
                ));
            };
            chunk.eof = true;
            out.push(chunk);
            continue;
        }
        let header = line.trim_end();
        if header == "@@" || header.starts_with("@@ ") {
            if let Some(c) = current.take() {
                if c.lines.is_empty() && c.anchor.is_some() {
                    return Err(format!(
                        "line {}: the hunk has an `@@` line but no changed lines",
                        c.line
                    ));
                }
                out.push(c);
            }
            let anchor = header[2..].trim();
            current = Some(Chunk {
                line: n,
                anchor: (!anchor.is_empty()).then(|| anchor.to_owned()),
                ..Chunk::default()
            });
            continue;
        }
        let parsed = match line.chars().next() {
            Some(' ') => HunkLine::Keep(line[1..].to_owned()),
            Some('-') => HunkLine::Remove(line[1..].to_owned()),
            Some('+') => HunkLine::Insert(line[1..].to_owned()),
            // An empty line in a hunk is an empty context line whose space was lost.
            None => HunkLine::Keep(String::new()),
            Some(_) => {
                return Err(format!(
                    "line {n}: each line of a hunk starts with ` ` (context), `-` (remove) or `+` (add), not `{}`; a new hunk starts with `@@`",
                    jianmu_tool_core::echo(line)
                ));
            }
        };
        // The first hunk of a file may leave out its `@@` line.
        current
            .get_or_insert_with(|| Chunk {
                line: n,
                ..Chunk::default()
            })
            .lines
            .push(parsed);
    }
    if let Some(c) = current {
        if c.lines.is_empty() {
            return Err(format!(
                "line {}: the hunk has an `@@` line but no changed lines",
                c.line
            ));
        }
        out.push(c);
    }
    Ok(out)
}
