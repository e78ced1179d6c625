//! HTML to Markdown: the charset decoded, the nesting bounded, the main content found
//! (a port of readability.js: `dom_smoothie`), and that content written as Markdown
//! (`dom_query`'s serializer, on the same tree).

use std::time::Duration;

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};

mod shape;

pub use shape::{MAX_ATTRIBUTES, limit_nesting};

/// Start tags that would open an element deeper than this, counted as html5ever's
/// tree builder nests elements (see [`limit_nesting`]), lose their tags; their text
/// stays. Browsers stop at a few hundred too.
pub const MAX_NESTING: usize = 256;

/// Pages with more elements than this are converted whole, without looking for the
/// main content (which scores every element).
pub const MAX_ELEMENTS: usize = 200_000;

/// The stack of the thread that parses and converts.
const STACK: usize = 64 * 1024 * 1024;

/// The memory one conversion may take, beyond what the caller has mapped.
const MEMORY: u64 = 2 << 30;

/// A page as Markdown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Page {
    /// The page's title, when it has one.
    pub title: Option<String>,
    /// Its main content (or, when none stands out, its whole body) as Markdown.
    pub markdown: String,
    /// Whether `markdown` is the main content alone.
    pub main_content: bool,
}

/// The charset a `Content-Type` value names, if it names one this crate knows.
#[must_use]
pub fn charset_of(content_type: &str) -> Option<&'static Encoding> {
    let lower = content_type.to_ascii_lowercase();
    let at = lower.find("charset=")?;
    let value = lower[at + "charset=".len()..]
        .split(';')
        .next()?
        .trim()
        .trim_matches(['"', '\'']);
    Encoding::for_label(value.as_bytes())
}

/// The charset a `<meta>` in the first 1024 bytes declares.
fn sniff_meta(bytes: &[u8]) -> Option<&'static Encoding> {
    let head = &bytes[..bytes.len().min(1024)];
    let lower = head.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = find(&lower[from..], b"<meta") {
        let start = from + at;
        let end = lower[start..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(lower.len(), |e| start + e);
        let tag = &lower[start..end];
        if let Some(c) = find(tag, b"charset") {
            let rest = &tag[c + "charset".len()..];
            let rest = rest.trim_ascii_start();
            if let Some(rest) = rest.strip_prefix(b"=") {
                let rest = rest.trim_ascii_start();
                let rest = rest.strip_prefix(b"\"").unwrap_or(rest);
                let rest = rest.strip_prefix(b"'").unwrap_or(rest);
                let len = rest
                    .iter()
                    .position(|b| matches!(b, b'"' | b'\'' | b';' | b' ' | b'/' | b'>'))
                    .unwrap_or(rest.len());
                if let Some(enc) = Encoding::for_label(&rest[..len]) {
                    // A page that says UTF-16 in ASCII is not UTF-16.
                    return Some(if enc.is_single_byte() || enc == UTF_8 {
                        enc
                    } else {
                        enc.output_encoding()
                    });
                }
            }
        }
        from = end.max(start + 1);
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decodes a body as a browser would: a byte-order mark first, then the charset of
/// `Content-Type`, then a `<meta>` declaration, then UTF-8 if it is valid UTF-8, else
/// windows-1252. Answers the text and the charset's name.
#[must_use]
pub fn decode(bytes: &[u8], content_type: Option<&str>) -> (String, &'static str) {
    let declared = content_type
        .and_then(charset_of)
        .or_else(|| sniff_meta(bytes));
    let encoding = match declared {
        Some(enc) => enc,
        None if std::str::from_utf8(bytes).is_ok() => UTF_8,
        None => WINDOWS_1252,
    };
    // `decode` lets a byte-order mark override the declaration.
    let (text, used, _) = encoding.decode(bytes);
    (text.into_owned(), used.name())
}

/// Converts a page to Markdown: its main content when one stands out (as a
/// reader view would show it), else its whole body without scripts, styles,
/// navigation, headers, footers and forms. `url` makes relative links absolute.
///
/// The conversion runs in a forked child ([`jianmu_process::run_in_child`]) that is
/// killed at `timeout`, with a memory limit, so no page can hold a core or the
/// caller's memory past its call.
///
/// # Errors
/// When the converter did not finish within `timeout`, crashed on the page, or
/// could not be started.
pub fn to_markdown(
    html: &str,
    url: Option<&str>,
    timeout: Duration,
) -> Result<Page, crate::DocError> {
    to_markdown_text(html, url, timeout).map_err(crate::DocError)
}

/// [`to_markdown`], its error as text.
fn to_markdown_text(html: &str, url: Option<&str>, timeout: Duration) -> Result<Page, String> {
    use jianmu_process::{ChildEnd, ChildLimits, run_in_child};
    let html = limit_nesting(html, MAX_NESTING);
    let limits = ChildLimits {
        timeout,
        idle: None,
        memory: MEMORY,
        // Markdown is never much longer than its page; links made absolute add some.
        output: html.len().saturating_mul(4).saturating_add(1 << 20),
        stack: STACK,
    };
    let run = run_in_child(limits, |out| {
        let page = convert(&html, url);
        // In 64 KiB writes: unbuffered, each JSON token was a write to the pipe.
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
        let _ = serde_json::to_writer(&mut out, &page);
        let _ = std::io::Write::flush(&mut out);
    })
    .map_err(|e| format!("cannot start the converter: {e}"))?;
    match run.end {
        ChildEnd::Finished => serde_json::from_slice(&run.output)
            .map_err(|_| "the page could not be converted (the converter answered nothing)".to_owned()),
        ChildEnd::TimedOut | ChildEnd::Stalled => Err(format!(
            "converting the page to Markdown took longer than the {} s left of the call, and was stopped; read the page with `raw: true`",
            timeout.as_secs_f64().ceil()
        )),
        ChildEnd::OutputFull | ChildEnd::Crashed => Err(
            "the page could not be converted to Markdown (the converter failed on it); read the page with `raw: true`"
                .to_owned(),
        ),
    }
}

fn convert(html: &str, url: Option<&str>) -> Page {
    let config = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Markdown,
        max_elements_to_parse: MAX_ELEMENTS,
        ..Default::default()
    };
    let doc = dom_query::Document::from(html);
    let title = doc
        .select_single("title")
        .nodes()
        .first()
        .map(|t| collapse(&t.text()))
        .filter(|t| !t.is_empty());
    let url = url.filter(|u| u.starts_with("http://") || u.starts_with("https://"));
    if let Ok(mut reader) = dom_smoothie::Readability::with_document(doc, url, Some(config))
        && let Ok(article) = reader.parse()
        && !article.text_content.trim().is_empty()
    {
        let title = Some(collapse(&article.title))
            .filter(|t| !t.is_empty())
            .or(title);
        return Page {
            title,
            markdown: tidy(&article.text_content),
            main_content: true,
        };
    }
    let doc = dom_query::Document::from(html);
    doc.select(
        "script, style, noscript, template, nav, header, footer, aside, form, svg, iframe, \
         object, embed, canvas",
    )
    .remove();
    let markdown = doc
        .body()
        .map(|body| tidy(&body.md(None)))
        .unwrap_or_default();
    Page {
        title,
        markdown,
        main_content: false,
    }
}

/// Whitespace runs as single spaces, trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Markdown with trailing spaces gone and no more than one blank line in a row.
fn tidy(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut blank = 0;
    for line in md.trim().lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(60);

    #[test]
    fn charsets_come_from_the_header_a_meta_or_the_bytes() {
        let latin1 = b"<p>caf\xe9</p>";
        assert_eq!(
            decode(latin1, Some("text/html; charset=ISO-8859-1")).0,
            "<p>caf\u{e9}</p>"
        );
        assert_eq!(
            decode(latin1, None),
            ("<p>caf\u{e9}</p>".into(), "windows-1252")
        );
        let gbk = b"<meta charset=\"gbk\"><p>\xd6\xd0\xce\xc4</p>";
        assert_eq!(
            decode(gbk, Some("text/html")).0,
            "<meta charset=\"gbk\"><p>中文</p>"
        );
        let equiv =
            b"<meta http-equiv=Content-Type content='text/html; charset=Shift_JIS'>\x93\xfa";
        assert_eq!(decode(equiv, None).1, "Shift_JIS");
        assert_eq!(decode("é".as_bytes(), None), ("é".into(), "UTF-8"));
        // A byte-order mark wins over what the header says.
        let bom = b"\xef\xbb\xbfx";
        assert_eq!(decode(bom, Some("text/html; charset=latin1")).0, "x");
    }

    #[test]
    fn the_main_content_becomes_markdown() {
        let body = "<p>Rust is a language empowering everyone to build reliable and efficient \
                    software. It has ownership, borrowing and lifetimes, and a rich type system \
                    that catches bugs at compile time.</p>"
            .repeat(5);
        let html = format!(
            "<html><head><title>The Book</title><script>var x = 1;</script></head><body>\
             <nav><a href='/a'>Home</a> <a href='/b'>Blog</a></nav>\
             <article><h1>Ownership</h1>{body}<h2>Moves</h2><pre><code>let s = String::new();</code></pre>\
             <p>See <a href='/ch04'>chapter 4</a>.</p></article>\
             <footer>Copyright</footer></body></html>"
        );
        let page = to_markdown(&html, Some("https://example.org/book/"), T).unwrap();
        assert!(page.main_content);
        assert_eq!(page.title.as_deref(), Some("The Book"));
        assert!(page.markdown.contains("## Moves"), "{}", page.markdown);
        assert!(page.markdown.contains("let s = String::new();"));
        assert!(
            page.markdown
                .contains("[chapter 4](https://example.org/ch04)"),
            "{}",
            page.markdown
        );
        assert!(!page.markdown.contains("Copyright") && !page.markdown.contains("var x"));
    }

    #[test]
    fn a_page_without_main_content_is_converted_whole() {
        let page = to_markdown("<p>short</p><script>x()</script>", None, T).unwrap();
        assert!(page.markdown.contains("short"), "{page:?}");
        assert!(!page.markdown.contains("x()"));
    }

    #[test]
    fn a_hundred_thousand_levels_are_flattened() {
        let n = 100_000;
        let html = format!("{}deep text{}", "<div>".repeat(n), "</div>".repeat(n));
        let page = to_markdown(&html, None, T).unwrap();
        assert!(page.markdown.contains("deep text"));
        let unclosed = format!("{}end", "<span><b>".repeat(n));
        assert!(
            to_markdown(&unclosed, None, T)
                .unwrap()
                .markdown
                .contains("end")
        );
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    #[test]
    fn the_conversion_stops_at_its_deadline() {
        let page = "<article><p>word word word <a href='/x'>link</a></p></article>".repeat(40_000);
        let err = to_markdown(&page, None, Duration::from_millis(1)).unwrap_err();
        assert!(
            err.0.contains("took longer than") && err.0.contains("raw: true"),
            "{err}"
        );
        assert!(to_markdown(&page, None, Duration::from_secs(600)).is_ok());
    }

    #[test]
    fn a_million_attributes_convert() {
        let many: String = (0..1_000_000).map(|k| format!(" a{k}")).collect();
        let page = format!("<p{many}>the text</p>");
        let md = to_markdown(&page, None, Duration::from_secs(600)).unwrap();
        assert!(md.markdown.contains("the text"), "{md:?}");
    }
}
