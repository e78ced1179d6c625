//! Documents for Jianmu's tools, read the way a model wants them: a web page as the
//! Markdown of its main content, decoded from whatever charset it came in (feature
//! `html`); a PDF as the text of its pages, parsed in a child process a hostile file
//! cannot crash the caller from (feature `pdf`); a Jupyter notebook as its cells in order, and edits that keep it valid.
//!
//! Everything here is bounded for hostile input: nesting deeper than a browser would
//! build is flattened and tags are cut to their first attributes before parsing (so
//! no parse is quadratic and no walk of the tree recurses without end), and pages and
//! PDFs are parsed in a forked child with a deadline and a memory limit, so a parser
//! that crashes, loops or runs away ends one call, never the caller.
#![deny(missing_docs)]

/// Why a document could not be read or changed: a short sentence for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocError(pub String);

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DocError {}

impl From<String> for DocError {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for DocError {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

#[cfg(feature = "html")]
pub mod html;
pub mod notebook;
#[cfg(feature = "pdf")]
pub mod pdf;
