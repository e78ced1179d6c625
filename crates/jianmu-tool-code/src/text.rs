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
        let breaks = memchr_count(text.as_bytes(), b'\n');
        let crlf = breaks > 0 && text.matches("\r\n").count() == breaks;
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
    pub(crate) fn encode(&self, text: &str) -> Vec<u8> {
        let mut out = String::with_capacity(text.len() + 8);
        if self.bom {
            out.push_str(BOM);
        }
        if self.crlf {
            out.push_str(&text.replace('\n', "\r\n"));
        } else {
            out.push_str(text);
        }
        out.into_bytes()
    }
}

fn memchr_count(bytes: &[u8], b: u8) -> usize {
    bytes.iter().filter(|&&c| c == b).count()
}
