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

#[cfg(feature = "html")]
pub mod html;
pub mod notebook;
#[cfg(feature = "pdf")]
pub mod pdf;
