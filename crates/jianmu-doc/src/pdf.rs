//! PDFs as text, page by page.
//!
//! PDF parsers meet hostile files: cross-reference tables that point anywhere, page
//! trees that loop, content streams that inflate without end, and parsers that panic
//! or recurse without bound on them (a stack overflow cannot be caught). So the
//! parsing runs in a forked child ([`jianmu_process::run_in_child`]) with a deadline,
//! an address-space limit and a bounded output: a file that crashes the parser on one
//! page costs that page (the reading goes on after it in a new child), and one whose
//! structure cannot be read is an error, never a crash of the caller.
//!
//! Text comes from each page's text layer, in the order the page draws it. A page
//! without one is said to be a scanned image when it draws images, blank otherwise.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use jianmu_process::{ChildEnd, ChildLimits, ChildWriter, run_in_child};
use serde::{Deserialize, Serialize};

/// Bounds of a reading.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The whole reading, across the children it takes.
    pub timeout: Duration,
    /// The memory the parser may take beyond the caller's, in bytes.
    pub memory: u64,
    /// Characters of one page; the rest is counted, not shown.
    pub page_chars: usize,
    /// Characters of the whole reading; the pages after it are left for the next read.
    pub total_chars: usize,
    /// Pages in one reading.
    pub max_pages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory: 1 << 30,
            page_chars: 50_000,
            total_chars: 100_000,
            max_pages: 100,
        }
    }
}

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageKind {
    /// Text from the page's text layer.
    Text,
    /// No text layer, and the page draws images: a scan, or a picture.
    Image,
    /// No text and no image.
    Blank,
    /// The parser failed on this page.
    Unreadable,
}

/// One page read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Its number, from 1.
    pub number: u32,
    /// Its text, at most [`Limits::page_chars`] characters.
    pub text: String,
    /// What it holds.
    pub kind: PageKind,
    /// Characters of its text not shown.
    pub cut: usize,
}

/// A reading of some pages of a PDF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// How many pages the document has.
    pub page_count: u32,
    /// The pages read, in the order asked.
    pub pages: Vec<Page>,
    /// The pages asked for but left for another read (the budget or the time ran
    /// out), in order.
    pub left: Vec<u32>,
    /// Why the pages in `left` were not read.
    pub stopped: Option<String>,
}

/// Why a PDF could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdfError {
    /// The pages asked for are not in the document, or the range is malformed.
    Pages(String),
    /// The document needs a password.
    Encrypted,
    /// The document's structure could not be read.
    Unreadable(String),
}

impl std::fmt::Display for PdfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pages(why) => f.write_str(why),
            Self::Encrypted => {
                f.write_str("the PDF is encrypted with a password; its text cannot be read")
            }
            Self::Unreadable(why) => write!(f, "the PDF could not be read ({why})"),
        }
    }
}

impl std::error::Error for PdfError {}

/// True when `bytes` starts like a PDF (`%PDF-`).
pub fn looks_like_pdf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"%PDF-")
}

/// Parses a page selection such as `"3"`, `"1-5"`, `"10-"` or `"1-3,7,9-10"` into
/// inclusive ranges (an open end runs to the last page).
///
/// # Errors
/// A malformed selection, with how to write one.
pub fn parse_pages(spec: &str) -> Result<Vec<(u32, u32)>, PdfError> {
    let bad = || {
        PdfError::Pages(format!(
            "`pages` {spec:?} is not a page selection: give pages from 1 such as \"3\", \"1-5\", \"10-\" or \"1-3,7\""
        ))
    };
    let number = |s: &str| s.trim().parse::<u32>().ok().filter(|n| *n >= 1);
    let mut out = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let range = match part.split_once('-') {
            Some((a, b)) if b.trim().is_empty() => (number(a).ok_or_else(bad)?, u32::MAX),
            Some((a, b)) => (number(a).ok_or_else(bad)?, number(b).ok_or_else(bad)?),
            None => {
                let n = number(part).ok_or_else(bad)?;
                (n, n)
            }
        };
        if range.0 > range.1 {
            return Err(bad());
        }
        out.push(range);
    }
    if out.is_empty() || out.len() > 100 {
        return Err(bad());
    }
    Ok(out)
}

/// The pages `ranges` selects of a document of `count` pages, in order, without
/// repeats.
fn selected(ranges: &[(u32, u32)], count: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let all = [(1, count)];
    let ranges = if ranges.is_empty() { &all[..] } else { ranges };
    for &(a, b) in ranges {
        for n in a..=b.min(count) {
            if seen.insert(n) {
                out.push(n);
            }
        }
    }
    out
}

/// One line of the child's report.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    /// The document's page count, first.
    Count(u32),
    /// A page read.
    Page(Page),
    /// The budget is spent (why): the pages after are left.
    Stop(String),
    /// The document could not be loaded.
    Failed(String),
    /// It needs a password.
    Encrypted,
}

/// Reads the pages `ranges` selects (all when empty) of the PDF in `bytes`.
///
/// # Errors
/// The selection is outside the document, the document needs a password, or its
/// structure cannot be read (or crashes the parser before any page).
pub fn read(bytes: &[u8], ranges: &[(u32, u32)], limits: &Limits) -> Result<Reading, PdfError> {
    let started = Instant::now();
    let mut count: Option<u32> = None;
    let mut todo: Vec<u32> = Vec::new();
    // Pages of `todo` before this are read (or failed).
    let mut next = 0usize;
    let mut pages: Vec<Page> = Vec::new();
    let mut chars = 0usize;
    let mut stopped = None;
    // A crash costs one page; a file that crashes the parser on page after page is
    // given up on after a few.
    for _attempt in 0..4 {
        let timeout = limits.timeout.saturating_sub(started.elapsed());
        if timeout.is_zero() {
            stopped = Some("the time limit for reading a PDF was reached".to_owned());
            break;
        }
        let budget = Budget {
            chars: limits.total_chars.saturating_sub(chars),
            pages: limits.max_pages.saturating_sub(pages.len()),
            max_pages: limits.max_pages,
            page_chars: limits.page_chars,
        };
        let run = run_in_child(
            ChildLimits {
                timeout,
                // One page (or the load) that takes this long is given up on.
                idle: Some(limits.timeout / 3),
                memory: limits.memory,
                output: limits.total_chars.saturating_mul(8).saturating_add(1 << 20),
                stack: 256 << 20,
            },
            |out| child(bytes, ranges, next, budget, out),
        )
        .map_err(|e| PdfError::Unreadable(format!("cannot start the reader: {e}")))?;
        for line in run.output.split(|b| *b == b'\n') {
            let Ok(line) = serde_json::from_slice::<Line>(line) else {
                continue;
            };
            match line {
                Line::Count(n) => {
                    if count.is_none() {
                        count = Some(n);
                        todo = selected(ranges, n);
                        if todo.is_empty() {
                            return Err(PdfError::Pages(format!(
                                "the PDF has {n} page{}; none of the pages asked for is among them",
                                if n == 1 { "" } else { "s" }
                            )));
                        }
                    }
                }
                Line::Page(p) => {
                    chars += p.text.chars().count();
                    next += 1;
                    pages.push(p);
                }
                Line::Stop(why) => stopped = Some(why),
                Line::Failed(why) => return Err(PdfError::Unreadable(why)),
                Line::Encrypted => return Err(PdfError::Encrypted),
            }
        }
        if stopped.is_some() || next >= todo.len() && count.is_some() {
            break;
        }
        match run.end {
            ChildEnd::Finished => break,
            ChildEnd::TimedOut => {
                stopped = Some("the time limit for reading a PDF was reached".to_owned());
                break;
            }
            ChildEnd::OutputFull => {
                stopped = Some("the size limit of one reading was reached".to_owned());
                break;
            }
            ChildEnd::Crashed | ChildEnd::Stalled => {
                if count.is_none() {
                    return Err(PdfError::Unreadable(
                        if run.end == ChildEnd::Stalled {
                            "the parser got stuck on its structure"
                        } else {
                            "the parser failed on its structure"
                        }
                        .to_owned(),
                    ));
                }
                // The page after the last one reported is the one it failed on.
                pages.push(Page {
                    number: todo[next],
                    text: String::new(),
                    kind: PageKind::Unreadable,
                    cut: 0,
                });
                next += 1;
                if next >= todo.len() {
                    break;
                }
            }
        }
    }
    let page_count = count.ok_or_else(|| {
        PdfError::Unreadable("the reader did not finish in its time limit".to_owned())
    })?;
    let left = todo.get(next..).unwrap_or_default().to_vec();
    if !left.is_empty() && stopped.is_none() {
        stopped = Some("the parser failed on too many pages".to_owned());
    }
    Ok(Reading {
        page_count,
        pages,
        left,
        stopped,
    })
}

#[derive(Debug, Clone, Copy)]
struct Budget {
    chars: usize,
    pages: usize,
    max_pages: usize,
    page_chars: usize,
}

/// The child's work: load, then read `plan` (or, on the first run, what `ranges`
/// selects, from its `start`th page), one JSON line a page.
fn child(bytes: &[u8], ranges: &[(u32, u32)], start: usize, budget: Budget, out: &mut ChildWriter) {
    let mut send = |line: &Line| {
        let mut text = serde_json::to_vec(line).unwrap_or_default();
        text.push(b'\n');
        out.write_all(&text).is_ok()
    };
    let mut doc = match pdf_extract::Document::load_mem(bytes) {
        Ok(doc) => doc,
        Err(e) => {
            send(&Line::Failed(short(&e.to_string())));
            return;
        }
    };
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        send(&Line::Encrypted);
        return;
    }
    let ids = doc.get_pages();
    let count = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    if !send(&Line::Count(count)) {
        return;
    }
    let plan = selected(ranges, count);
    let chunk: Vec<u32> = plan
        .iter()
        .skip(start)
        .take(budget.pages)
        .copied()
        .collect();
    // Reading a page walks the page tree; on a tree of a million pages that is slow
    // per page. So the tree is replaced by one holding just the pages of this reading
    // (each keeps its own `Parent`, for what it inherits).
    let kids: Vec<pdf_extract::Object> = chunk
        .iter()
        .filter_map(|n| ids.get(n).map(|id| pdf_extract::Object::Reference(*id)))
        .collect();
    let mut tree = pdf_extract::Dictionary::new();
    tree.set("Type", pdf_extract::Object::Name(b"Pages".to_vec()));
    tree.set("Count", pdf_extract::Object::Integer(kids.len() as i64));
    tree.set("Kids", pdf_extract::Object::Array(kids));
    let tree = doc.add_object(tree);
    let Ok(catalog) = doc.catalog_mut() else {
        send(&Line::Failed("it has no catalog".to_owned()));
        return;
    };
    catalog.set("Pages", pdf_extract::Object::Reference(tree));
    let mut chars = 0usize;
    for (i, &number) in plan.iter().skip(start).enumerate() {
        if i >= budget.pages {
            let max = budget.max_pages;
            send(&Line::Stop(format!(
                "one reading holds at most {max} pages"
            )));
            return;
        }
        if i > 0 && chars >= budget.chars {
            send(&Line::Stop(
                "the size limit of one reading was reached".to_owned(),
            ));
            return;
        }
        // A page is read whole (up to `page_chars`); one that would not fit in what
        // is left of the reading is left for the next one, which starts with it.
        let room = budget.page_chars.max(1);
        let index = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let sound = ids.get(&number).is_some_and(|id| parents_end(&doc, *id));
        let page = if !sound {
            Page {
                number,
                text: String::new(),
                kind: PageKind::Unreadable,
                cut: 0,
            }
        } else {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                page_text(&doc, number, index, ids.get(&number).copied(), room)
            }))
            .unwrap_or(Page {
                number,
                text: String::new(),
                kind: PageKind::Unreadable,
                cut: 0,
            })
        };
        let len = page.text.chars().count();
        if i > 0 && chars + len > budget.chars {
            send(&Line::Stop(
                "the size limit of one reading was reached".to_owned(),
            ));
            return;
        }
        chars += len;
        if !send(&Line::Page(page)) {
            return;
        }
    }
}

/// Page `number` of the document, which is page `index` of the reduced tree.
fn page_text(
    doc: &pdf_extract::Document,
    number: u32,
    index: u32,
    id: Option<pdf_extract::ObjectId>,
    room: usize,
) -> Page {
    let mut raw = String::new();
    let read = {
        let mut output = pdf_extract::PlainTextOutput::new(&mut raw);
        pdf_extract::output_doc_page(doc, &mut output, index)
    };
    let text = tidy(&raw);
    let kind = if !text.is_empty() {
        PageKind::Text
    } else if read.is_err() {
        PageKind::Unreadable
    } else if id.is_some_and(|id| draws_images(doc, id)) {
        PageKind::Image
    } else {
        PageKind::Blank
    };
    let total = text.chars().count();
    let text = if total > room {
        text.chars().take(room).collect()
    } else {
        text
    };
    Page {
        number,
        cut: total - text.chars().count(),
        text,
        kind,
    }
}

/// Whether what the page inherits (its resources and size) is found up its chain of
/// `Parent`s before the chain ends: a loop in the chain would be walked for ever.
fn parents_end(doc: &pdf_extract::Document, id: pdf_extract::ObjectId) -> bool {
    [&b"Resources"[..], b"MediaBox"].iter().all(|key| {
        let mut seen = std::collections::HashSet::new();
        let mut at = id;
        while seen.insert(at) && seen.len() < 1000 {
            let Ok(dict) = doc.get_dictionary(at) else {
                return true;
            };
            if dict.has(key) {
                return true;
            }
            match dict
                .get(b"Parent")
                .and_then(pdf_extract::Object::as_reference)
            {
                Ok(parent) => at = parent,
                Err(_) => return true,
            }
        }
        false
    })
}

/// Whether the page draws an image: an inline one, or one of its image objects.
fn draws_images(doc: &pdf_extract::Document, id: pdf_extract::ObjectId) -> bool {
    let Ok(content) = doc.get_page_content(id) else {
        return false;
    };
    let Ok(ops) = pdf_extract::content::Content::decode(&content) else {
        return false;
    };
    let images = doc.get_page_images(id).unwrap_or_default();
    ops.operations.iter().any(|op| match op.operator.as_str() {
        "BI" => true,
        "Do" => !images.is_empty(),
        _ => false,
    })
}

/// Lines without trailing blanks, runs of blank lines as one, no blank start or end.
fn tidy(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank = false;
    for line in raw.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push('\n');
            blank = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

fn short(why: &str) -> String {
    let mut s: String = why.chars().take(200).collect();
    if s.len() < why.len() {
        s.push('…');
    }
    s
}

/// Writes a reading as the text a model reads: a header line, each page under
/// `--- page N ---` (with what it holds when it has no text), and a last line saying
/// which pages are left and, through `how_on` (given them as `1-3,7`), how to read them.
pub fn render(reading: &Reading, name: &str, how_on: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let shown = page_list(&reading.pages.iter().map(|p| p.number).collect::<Vec<_>>());
    let _ = writeln!(
        out,
        "{name} is a PDF of {} page{}; page{} {shown} follow{}.",
        reading.page_count,
        if reading.page_count == 1 { "" } else { "s" },
        if reading.pages.len() == 1 { "" } else { "s" },
        if reading.pages.len() == 1 { "s" } else { "" },
    );
    for page in &reading.pages {
        let note = match page.kind {
            PageKind::Text => "",
            PageKind::Image => " (no text layer: the page is an image, such as a scan)",
            PageKind::Blank => " (no text)",
            PageKind::Unreadable => " (could not be read: the PDF is damaged here)",
        };
        let _ = writeln!(out, "\n--- page {}{note} ---", page.number);
        if !page.text.is_empty() {
            out.push_str(&page.text);
            out.push('\n');
        }
        if page.cut > 0 {
            let _ = writeln!(out, "…[{} more characters on this page]", page.cut);
        }
    }
    if !reading.left.is_empty() {
        let why = reading.stopped.as_deref().unwrap_or("the reading stopped");
        let next = page_list(&reading.left);
        let _ = write!(
            out,
            "\n(pages {next} were not read: {why}; {})",
            how_on(&next)
        );
    }
    out
}

/// Page numbers as ranges: `1-3,7`.
pub fn page_list(pages: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < pages.len() {
        let mut j = i;
        while j + 1 < pages.len() && pages[j + 1] == pages[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j == i {
            let _ = write!(out, "{}", pages[i]);
        } else {
            let _ = write!(out, "{}-{}", pages[i], pages[j]);
        }
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        assert_eq!(parse_pages("3").unwrap(), vec![(3, 3)]);
        assert_eq!(
            parse_pages(" 1-5, 8 ,10-").unwrap(),
            vec![(1, 5), (8, 8), (10, u32::MAX)]
        );
        for bad in ["", "0", "5-2", "a", "1-b", "-3", "1,,2"] {
            assert!(parse_pages(bad).is_err(), "{bad:?}");
        }
        assert_eq!(selected(&[(2, 4), (3, 6)], 5), vec![2, 3, 4, 5]);
        assert_eq!(selected(&[], 3), vec![1, 2, 3]);
        assert_eq!(selected(&[(7, u32::MAX)], 9), vec![7, 8, 9]);
        assert_eq!(page_list(&[1, 2, 3, 7, 9, 10]), "1-3,7,9-10");
        assert_eq!(tidy("  \na  \n\n\n b\n\n"), "a\n\n b");
    }
}
