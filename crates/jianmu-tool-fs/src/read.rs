//! `read_file`: a text file's content, whole or a window of lines.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use jianmu_tool_core::{CallContext, Image, Structured, Tool, ToolError};
use jianmu_workspace::{Workspace, WorkspaceError, show};
use serde::{Deserialize, Serialize};

use jianmu_workspace::blocking;

use crate::{Extensions, MIB};

/// Settings of `read_file`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadSettings {
    /// Largest file read whole, and the most bytes a window returns.
    pub max_file_size: u64,
    /// Extensions that may be read; all when absent.
    pub allowed_extensions: Extensions,
    /// Whether reads that do not give `line_numbers` number their lines; unset (the
    /// default), windows are numbered and whole files are not. `jianmu mcp` sets it
    /// to `true` unless the configuration says otherwise.
    pub line_numbers: Option<bool>,
    /// Largest image (PNG, JPEG, GIF, WebP) returned as an image, in bytes; 3.75 MiB
    /// by default, which is 5 MiB in base64.
    pub max_image_size: u64,
    /// Largest Jupyter notebook (`.ipynb`) read as cells, in bytes.
    pub max_notebook_size: u64,
    /// Characters shown of one notebook output (the rest is counted).
    pub notebook_output_chars: usize,
    /// Characters of a whole notebook reading (later cells are counted).
    pub notebook_chars: usize,
    /// Images from notebook outputs returned per read.
    pub notebook_images: usize,
    /// Largest PDF read as text, in bytes.
    pub max_pdf_size: u64,
    /// Characters of one PDF reading; the pages after are left for the next read.
    pub pdf_chars: usize,
    /// Pages of one PDF reading.
    pub pdf_pages: usize,
    /// Seconds one PDF reading may take.
    pub pdf_timeout_secs: u64,
}

impl Default for ReadSettings {
    fn default() -> Self {
        Self {
            max_file_size: MIB,
            allowed_extensions: Extensions::default(),
            line_numbers: None,
            max_image_size: 3 * MIB + 3 * MIB / 4,
            max_notebook_size: 64 * MIB,
            notebook_output_chars: 5_000,
            notebook_chars: 100_000,
            notebook_images: 10,
            max_pdf_size: 64 * MIB,
            pdf_chars: 100_000,
            pdf_pages: 100,
            pdf_timeout_secs: 30,
        }
    }
}

/// The MIME type of an image format `read_file` returns as an image, judged by the
/// file's first bytes (never by its name).
fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file, relative to the workspace root (or absolute inside it).
    pub path: String,
    /// First line to return, counting from 1. Give `offset` or `limit` to read a
    /// window of a large file.
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Most lines to return.
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// Number each line like `cat -n` (`N<TAB>text`), cut lines over 2,000 characters,
    /// and end with `(lines A-B of N)`. On by default when `offset` or `limit` is given.
    pub line_numbers: Option<bool>,
    /// For a PDF: the pages to read, such as `"3"`, `"1-5"`, `"10-"` or `"1-3,7"`;
    /// from the first page when absent.
    pub pages: Option<String>,
}

/// How many characters of one line a numbered read shows.
pub const MAX_NUMBERED_LINE_CHARS: usize = 2000;

/// `text` with each line numbered from `first` (`N<TAB>text`), lines over
/// [`MAX_NUMBERED_LINE_CHARS`] cut with a marker.
fn numbered(text: &str, first: u64) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8 + 16);
    for (i, line) in text.lines().enumerate() {
        let (kept, rest) = jianmu_tool_core::cut_chars(line, MAX_NUMBERED_LINE_CHARS);
        out.push_str(&format!("{}\t{kept}", first + i as u64));
        if rest > 0 {
            out.push_str(&format!("…[{rest} more characters]"));
        }
        out.push('\n');
    }
    out
}

/// The `read_file` tool.
#[derive(Debug, Clone)]
pub struct ReadFile {
    ws: Arc<Workspace>,
    settings: ReadSettings,
}

impl ReadFile {
    /// A `read_file` confined to `ws`.
    pub fn new(ws: Arc<Workspace>, settings: ReadSettings) -> Self {
        Self { ws, settings }
    }

    /// The synchronous body, also used by the benchmarks.
    ///
    /// # Errors
    /// A refused path or extension, a file too large to read whole, text that is not
    /// UTF-8.
    pub fn read(&self, args: &ReadArgs) -> Result<Structured<ReadOutput>, ToolError> {
        let rel = self.ws.relative_file(&args.path)?;
        let real = self.ws.canonical(&rel)?;
        self.settings.allowed_extensions.check(&rel, Some(&real))?;
        let (file, meta) = self.ws.open_file(&rel)?;
        let size = meta.len();
        let limit = self.settings.max_file_size;
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let head = reader
            .fill_buf()
            .map_err(|e| WorkspaceError::from_io(&rel, e))?;
        // A NUL byte anywhere read makes the file binary, as `grep_search` judges it.
        let binary = || {
            Ok(Structured::new(
                format!(
                    "`{}` is a binary file ({size} bytes); its content is not shown",
                    show(&rel)
                ),
                ReadOutput {
                    path: show(&rel),
                    size,
                    binary: true,
                    first_line: None,
                    lines: None,
                    total_lines: None,
                    cut: None,
                    image: None,
                    cells: None,
                    pages: None,
                    pages_read: None,
                    end_newline: None,
                },
            ))
        };
        if let Some(mime) = image_type(head) {
            return self.image(&rel, reader, size, mime);
        }
        let windowed = args.offset.is_some() || args.limit.is_some();
        if jianmu_doc::pdf::looks_like_pdf(head) {
            if windowed {
                return Err(ToolError::failed(format!(
                    "`{}` is a PDF: read its pages with `pages` (such as \"1-5\"), not `offset`/`limit`",
                    show(&rel)
                )));
            }
            drop(reader);
            return self.pdf(&rel, size, args.pages.as_deref());
        }
        if args.pages.is_some() {
            return Err(ToolError::failed(format!(
                "`pages` is for PDFs and `{}` is not one; read a window of lines with `offset` and `limit`",
                show(&rel)
            )));
        }
        if !windowed && crate::suffix(&rel) == ".ipynb" {
            drop(reader);
            return self.notebook(&rel, size);
        }
        if memchr::memchr(0, head).is_some() {
            return binary();
        }
        let numbers = args
            .line_numbers
            .or(self.settings.line_numbers)
            .unwrap_or(windowed);
        if !windowed {
            if size > limit {
                return Err(ToolError::failed(format!(
                    "refused `{}`: it is {size} bytes, over the limit of {limit} bytes; read it in windows with `offset` and `limit`",
                    show(&rel)
                )));
            }
            let mut bytes = Vec::with_capacity(size as usize);
            reader
                .take(limit + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| WorkspaceError::from_io(&rel, e))?;
            if bytes.len() as u64 > limit {
                return Err(WorkspaceError::TooLarge {
                    path: show(&rel),
                    size: bytes.len() as u64,
                    limit,
                }
                .into());
            }
            if memchr::memchr(0, &bytes).is_some() {
                return binary();
            }
            let text = utf8(&rel, bytes, 0)?;
            let lines = line_count(text.as_bytes());
            let text = if numbers {
                let mut out = numbered(&text, 1);
                out.push_str(&match lines {
                    0 => "(no lines: the file is empty)".to_owned(),
                    n => format!("(lines 1-{n} of {n})"),
                });
                out
            } else {
                text
            };
            return Ok(Structured::new(
                text,
                ReadOutput {
                    path: show(&rel),
                    size,
                    binary: false,
                    first_line: Some(1),
                    lines: Some(lines),
                    total_lines: Some(lines),
                    cut: Some(false),
                    image: None,
                    cells: None,
                    pages: None,
                    pages_read: None,
                    end_newline: None,
                },
            ));
        }
        let first = args.offset.unwrap_or(1).max(1);
        let count = args.limit.unwrap_or(u64::MAX).max(1);
        let window = window(&mut reader, first, count, limit)
            .map_err(|e| WorkspaceError::from_io(&rel, e))?;
        if memchr::memchr(0, &window.bytes).is_some() {
            return binary();
        }
        let last = first + window.lines.saturating_sub(1);
        let mut text = utf8(&rel, window.bytes, window.start_byte)?;
        let end_newline = (window.lines > 0 && last == window.total).then(|| text.ends_with('\n'));
        if numbers {
            text = numbered(&text, first);
        }
        let whole = first == 1 && window.lines == window.total;
        if !whole || numbers {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            if window.lines == 0 {
                text.push_str(&format!("(no lines: the file has {} lines)", window.total));
            } else {
                let cut = if window.cut {
                    "; cut at the size limit"
                } else {
                    ""
                };
                text.push_str(&format!("(lines {first}-{last} of {}{cut})", window.total));
            }
        }
        Ok(Structured::new(
            text,
            ReadOutput {
                path: show(&rel),
                size,
                binary: false,
                first_line: Some(first),
                lines: Some(window.lines),
                total_lines: Some(window.total),
                cut: Some(window.cut),
                image: None,
                cells: None,
                pages: None,
                pages_read: None,
                end_newline,
            },
        ))
    }

    /// A Jupyter notebook as its cells, with image outputs as images.
    fn notebook(&self, rel: &Path, size: u64) -> Result<Structured<ReadOutput>, ToolError> {
        let bytes = self.ws.read_to_end(rel, self.settings.max_notebook_size)?;
        let as_text = "; read it as text with `offset` and `limit`";
        let nb: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            ToolError::failed(format!("`{}` is not valid JSON ({e}){as_text}", show(rel)))
        })?;
        drop(bytes);
        let limits = jianmu_doc::notebook::Limits {
            output_chars: self.settings.notebook_output_chars,
            total_chars: self.settings.notebook_chars,
            images: self.settings.notebook_images,
            image_bytes: usize::try_from(self.settings.max_image_size / 3 * 4)
                .unwrap_or(usize::MAX),
        };
        let rendered = jianmu_doc::notebook::render(&nb, limits)
            .map_err(|e| ToolError::failed(format!("`{}`: {e}{as_text}", show(rel))))?;
        let mut out = Structured::new(
            rendered.text,
            ReadOutput {
                path: show(rel),
                size,
                binary: false,
                first_line: None,
                lines: None,
                total_lines: None,
                cut: None,
                image: None,
                cells: Some(rendered.cells as u64),
                pages: None,
                pages_read: None,
                end_newline: None,
            },
        );
        for image in rendered.images {
            out = out.with_image(Image {
                mime_type: image.mime_type,
                base64: image.base64,
            });
        }
        Ok(out)
    }

    /// A PDF as the text of its pages.
    fn pdf(
        &self,
        rel: &Path,
        size: u64,
        pages: Option<&str>,
    ) -> Result<Structured<ReadOutput>, ToolError> {
        use jianmu_doc::pdf;
        let ranges = pages
            .map(pdf::parse_pages)
            .transpose()
            .map_err(|e| ToolError::failed(e.to_string()))?
            .unwrap_or_default();
        let limit = self.settings.max_pdf_size;
        if size > limit {
            return Err(ToolError::failed(format!(
                "`{}` is a PDF of {size} bytes, over the limit of {limit} bytes for PDFs; it was not read",
                show(rel)
            )));
        }
        let bytes = self.ws.read_to_end(rel, limit)?;
        let limits = pdf::Limits {
            timeout: std::time::Duration::from_secs(self.settings.pdf_timeout_secs.max(1)),
            page_chars: self.settings.pdf_chars,
            total_chars: self.settings.pdf_chars,
            max_pages: self.settings.pdf_pages.max(1),
            ..pdf::Limits::default()
        };
        let reading = pdf::read(&bytes, &ranges, &limits)
            .map_err(|e| ToolError::failed(format!("`{}`: {e}", show(rel))))?;
        let text = pdf::render(&reading, &format!("`{}`", show(rel)), |next| {
            format!("read them with `pages: \"{next}\"`, or fewer at a time")
        });
        Ok(Structured::new(
            text,
            ReadOutput {
                path: show(rel),
                size,
                binary: true,
                first_line: None,
                lines: None,
                total_lines: None,
                cut: Some(!reading.left.is_empty() || reading.pages.iter().any(|p| p.cut > 0)),
                image: None,
                cells: None,
                pages: Some(u64::from(reading.page_count)),
                end_newline: None,
                pages_read: Some(pdf::page_list(
                    &reading.pages.iter().map(|p| p.number).collect::<Vec<_>>(),
                )),
            },
        ))
    }

    /// An image file as an image for the model, with its type and size as text.
    fn image(
        &self,
        rel: &Path,
        reader: impl Read,
        size: u64,
        mime: &'static str,
    ) -> Result<Structured<ReadOutput>, ToolError> {
        use base64::Engine as _;
        let limit = self.settings.max_image_size;
        let kind = mime.trim_start_matches("image/").to_uppercase();
        let too_big = |size: u64| {
            ToolError::failed(format!(
                "`{}` is a {kind} image of {size} bytes, over the limit of {limit} bytes for images; it was not read",
                show(rel)
            ))
        };
        if size > limit {
            return Err(too_big(size));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        reader
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| WorkspaceError::from_io(rel, e))?;
        if bytes.len() as u64 > limit {
            return Err(too_big(bytes.len() as u64));
        }
        // Dimensions are a courtesy: a damaged header still returns the image.
        let dims = imagesize::blob_size(&bytes).ok();
        let base64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let shape = dims.map_or_else(String::new, |d| {
            format!(", {}x{} pixels", d.width, d.height)
        });
        let text = format!(
            "`{}` is a {kind} image ({} bytes{shape}); it follows as an image.",
            show(rel),
            bytes.len()
        );
        Ok(Structured::new(
            text,
            ReadOutput {
                path: show(rel),
                size: bytes.len() as u64,
                binary: true,
                first_line: None,
                lines: None,
                total_lines: None,
                cut: None,
                image: Some(ImageData {
                    mime_type: mime.to_owned(),
                    width: dims.map(|d| d.width as u64),
                    height: dims.map(|d| d.height as u64),
                    base64: base64.clone(),
                }),
                cells: None,
                pages: None,
                pages_read: None,
                end_newline: None,
            },
        )
        .with_image(Image {
            mime_type: mime.to_owned(),
            base64,
        }))
    }
}

/// How many lines `str::lines` would give, counted with a vectorized search (a tenth
/// of the time on a long file).
fn line_count(bytes: &[u8]) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', bytes).count();
    let unterminated = bytes.last().is_some_and(|&b| b != b'\n');
    (newlines + usize::from(unterminated)) as u64
}

fn utf8(rel: &Path, bytes: Vec<u8>, base: u64) -> Result<String, ToolError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = base + e.utf8_error().valid_up_to() as u64;
        ToolError::failed(format!(
            "`{}` is not UTF-8 text: invalid byte at offset {at}",
            show(rel)
        ))
    })
}

struct Window {
    bytes: Vec<u8>,
    start_byte: u64,
    lines: u64,
    total: u64,
    cut: bool,
}

/// Lines `first ..` (at most `count`, at most `max_bytes`), and the total line count.
/// Streams the file: only the window is kept in memory.
fn window<R: BufRead>(
    r: &mut R,
    first: u64,
    count: u64,
    max_bytes: u64,
) -> std::io::Result<Window> {
    let mut line = 1u64; // the line the next byte belongs to
    let mut pos = 0u64;
    let mut out = Window {
        bytes: Vec::new(),
        start_byte: 0,
        lines: 0,
        total: 0,
        cut: false,
    };
    let mut in_line = false; // bytes seen since the last newline
    let mut line_start = 0usize; // where the current line begins in `out.bytes`
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let len = buf.len();
        let mut i = 0;
        while i < len {
            let nl = memchr::memchr(b'\n', &buf[i..]).map(|k| i + k);
            let end = nl.map_or(len, |k| k + 1);
            let taking = line >= first && out.lines < count && !out.cut;
            if taking {
                if !in_line {
                    if out.bytes.is_empty() {
                        out.start_byte = pos + i as u64;
                    }
                    line_start = out.bytes.len();
                }
                let piece = &buf[i..end];
                if out.bytes.len() as u64 + piece.len() as u64 > max_bytes {
                    // Whole lines only: drop the part of this line already kept.
                    out.bytes.truncate(line_start);
                    out.cut = true;
                } else {
                    out.bytes.extend_from_slice(piece);
                }
            }
            match nl {
                Some(_) => {
                    if taking && !out.cut {
                        out.lines += 1;
                    }
                    line += 1;
                    in_line = false;
                }
                None => in_line = true,
            }
            i = end;
            // Past the window: count the remaining lines without keeping them.
            if line > first && (out.lines >= count || out.cut) {
                let rest = &buf[i..];
                line += memchr::memchr_iter(b'\n', rest).count() as u64;
                in_line = rest.last().map_or(in_line, |b| *b != b'\n');
                i = len;
            }
        }
        pos += len as u64;
        r.consume(len);
    }
    // A last line without a newline still counts.
    if in_line {
        if line >= first && out.lines < count && !out.cut {
            out.lines += 1;
        }
        line += 1;
    }
    out.total = line - 1;
    Ok(out)
}

/// The structured result of `read_file`. The line fields are absent for a binary file.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReadOutput {
    /// The file, relative to the workspace.
    pub path: String,
    /// The file's size in bytes.
    pub size: u64,
    /// True when the file is binary (it has NUL bytes, or is an image): its content is
    /// not shown as text.
    pub binary: bool,
    /// The first line shown, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_line: Option<u64>,
    /// How many lines were shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
    /// How many lines the file has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_lines: Option<u64>,
    /// True when the window stopped at the size limit before `limit` lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<bool>,
    /// The image, when the file is one (PNG, JPEG, GIF or WebP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageData>,
    /// For a Jupyter notebook read as cells: how many cells it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells: Option<u64>,
    /// For a PDF: how many pages it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<u64>,
    /// For a PDF: the pages shown, such as `1-5,7`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages_read: Option<String>,
    /// For a window that reaches the end of the file: whether its last line ends with
    /// a line break (a numbered or partial window's text ends with one either way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_newline: Option<bool>,
}

/// An image file's content.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ImageData {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// Width in pixels, when the header says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u64>,
    /// Height in pixels, when the header says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u64>,
    /// The file's bytes, base64-encoded.
    pub base64: String,
}

impl Tool for ReadFile {
    type Args = ReadArgs;
    type Output = Structured<ReadOutput>;
    type Error = ToolError;

    const NAME: &'static str = "read_file";

    const DESCRIPTION: &'static str = "Reads a text file in the workspace and returns its content; an image (PNG, JPEG, \
     GIF, WebP) is returned as an image to look at.\n\
     Files over the size limit (1 MiB by default) are read in windows of lines with \
     `offset` (first line, from 1) and `limit` (number of lines); a window numbers its \
     lines (`N<TAB>text`, as `cat -n`; `line_numbers` turns that on or off for any read) \
     and ends with a line such as `(lines 10-20 of 500)`. A Jupyter notebook (`.ipynb`) \
     is shown as its cells in order (number, id, type, source, outputs; image outputs as \
     images, long outputs cut with a count); `offset`/`limit` read its raw JSON instead. \
     A PDF is read as the text of its pages, under `--- page N ---` lines; `pages` picks \
     them (\"1-5\", \"3\", \"10-\"; 100 pages or 100000 characters at most per read, \
     the answer says which pages are left). A page without a text layer (a scan) is said \
     to be an image; its text cannot be read here. \
     Binary files are reported with their size, not shown.";

    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: ReadArgs,
        _cx: &CallContext,
    ) -> Result<Structured<ReadOutput>, ToolError> {
        let this = self.clone();
        blocking(Self::NAME, move || this.read(&args)).await
    }
}

#[cfg(test)]
mod tests {
    use super::{line_count, window};

    #[test]
    fn line_count_is_what_str_lines_counts() {
        for text in [
            "",
            "\n",
            "a",
            "a\n",
            "a\nb",
            "a\r\nb\r\n",
            "\n\n",
            "x\n\ny",
            "\r",
        ] {
            assert_eq!(
                line_count(text.as_bytes()),
                text.lines().count() as u64,
                "{text:?}"
            );
        }
    }

    #[track_caller]
    fn check(text: &str, first: u64, count: u64, max: u64, expect: (&str, u64, u64, bool)) {
        // A tiny buffer exercises lines that straddle reads.
        let mut r = std::io::BufReader::with_capacity(3, text.as_bytes());
        let w = window(&mut r, first, count, max).unwrap();
        let got = (
            std::str::from_utf8(&w.bytes).unwrap(),
            w.lines,
            w.total,
            w.cut,
        );
        assert_eq!(got, expect, "{text:?} first {first} count {count}");
    }

    #[test]
    fn windows() {
        check("a\nb\nc\n", 1, 2, 100, ("a\nb\n", 2, 3, false));
        check("a\nb\nc\n", 2, 5, 100, ("b\nc\n", 2, 3, false));
        check("a\nb\nc", 3, 1, 100, ("c", 1, 3, false));
        check("a\nb\nc", 4, 1, 100, ("", 0, 3, false));
        check("", 1, 1, 100, ("", 0, 0, false));
        check("\n\n", 2, 1, 100, ("\n", 1, 2, false));
        check("long line\nx\n", 1, 2, 5, ("", 0, 2, true));
        check("ab\ncd\nef\n", 1, 3, 6, ("ab\ncd\n", 2, 3, true));
        check("ab\r\ncd", 1, 9, 100, ("ab\r\ncd", 2, 2, false));
    }
}
