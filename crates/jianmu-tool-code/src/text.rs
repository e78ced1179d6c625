//! A text file as edits see it: UTF-8 without its byte-order mark, LF line breaks;
//! and back to the file's own form when written.

const BOM: &str = "\u{feff}";

/// A file's text as edits see it, and how to give it back its form.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    /// The text, without a BOM, with LF line breaks when the file uses CRLF.
    pub(crate) text: String,
    /// The file starts with a UTF-8 byte-order mark.
    pub(crate) bom: bool,
    /// Every line break of the file is CRLF.
    pub(crate) crlf: bool,
}

impl Decoded {
    /// Decodes a file: UTF-8 only (a BOM noted and removed), CRLF line breaks turned to
    /// LF when every line break is CRLF.
    ///
    /// # Errors
    /// A file with NUL bytes or that is not UTF-8, in words for the model.
    pub(crate) fn new(shown: &str, bytes: Vec<u8>) -> Result<Self, String> {
        if bytes.contains(&0) {
            return Err(format!("`{shown}` is a binary file (it has NUL bytes)"));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "`{shown}` is not UTF-8 text (invalid byte at offset {}); only UTF-8 files are edited, never converted",
                e.utf8_error().valid_up_to()
            )
        })?;
        let (bom, text) = match text.strip_prefix(BOM) {
            Some(rest) => (true, rest.to_owned()),
            None => (false, text),
        };
        let breaks = memchr::memchr_iter(b'\n', text.as_bytes()).count();
        let crlf =
            breaks > 0 && memchr::memmem::find_iter(text.as_bytes(), b"\r\n").count() == breaks;
        let text = if crlf {
            text.replace("\r\n", "\n")
        } else {
            text
        };
        Ok(Self { text, bom, crlf })
    }

    /// `s` (from the model) as edits on this file see it.
    pub(crate) fn normalize(&self, s: &str) -> String {
        if self.crlf {
            s.replace("\r\n", "\n")
        } else {
            s.to_owned()
        }
    }

    /// `text` in the file's form: its BOM and line breaks.
    pub(crate) fn encode<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, [u8]> {
        if !self.bom && !self.crlf {
            return std::borrow::Cow::Borrowed(text.as_bytes());
        }
        let mut out = String::with_capacity(text.len() + 8);
        if self.bom {
            out.push_str(BOM);
        }
        if self.crlf {
            out.push_str(&text.replace('\n', "\r\n"));
        } else {
            out.push_str(text);
        }
        std::borrow::Cow::Owned(out.into_bytes())
    }
}

/// A unified diff of `old` against `new` (3 lines of context, `a/PATH` and `b/PATH`
/// headers) and the numbers of lines added and removed.
///
/// The lines are diffed as slices with Myers' algorithm under a deadline: past it the
/// diff is coarser, never slower. (Diffing through `similar::TextDiff` costs about 50
/// times more on a 100,000-line file, for the same answer.)
pub(crate) fn unified_diff(old: &str, new: &str, shown: &str) -> (String, usize, usize) {
    use similar::DiffTag;
    use std::fmt::Write as _;
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let ops =
        similar::capture_diff_slices_deadline(similar::Algorithm::Myers, &a, &b, Some(deadline));
    let (mut added, mut removed) = (0, 0);
    for op in &ops {
        match op.tag() {
            DiffTag::Insert => added += op.new_range().len(),
            DiffTag::Delete => removed += op.old_range().len(),
            DiffTag::Replace => {
                added += op.new_range().len();
                removed += op.old_range().len();
            }
            DiffTag::Equal => {}
        }
    }
    let mut out = String::new();
    let groups = similar::group_diff_ops(ops, 3);
    if groups.is_empty() {
        return (out, 0, 0);
    }
    let _ = write!(out, "--- a/{shown}\n+++ b/{shown}\n");
    let line = |out: &mut String, sign: char, text: &str| {
        out.push(sign);
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    };
    for group in &groups {
        let _ = writeln!(out, "{}", similar::udiff::UnifiedHunkHeader::new(group));
        for op in group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            if matches!(tag, DiffTag::Equal) {
                a[old_range].iter().for_each(|l| line(&mut out, ' ', l));
                continue;
            }
            a[old_range].iter().for_each(|l| line(&mut out, '-', l));
            b[new_range].iter().for_each(|l| line(&mut out, '+', l));
        }
    }
    (out, added, removed)
}
