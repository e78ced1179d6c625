//! HTML to Markdown: the charset decoded, the nesting bounded, the main content found
//! (a port of readability.js: `dom_smoothie`), and that content written as Markdown
//! (`dom_query`'s serializer, on the same tree).

use std::borrow::Cow;

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};

/// Elements nested deeper than this (counting only elements that nest: not void
/// elements, and not those a following sibling closes, like `p` or `li`) lose their
/// tags; their text stays. Browsers stop at a few hundred too.
pub const MAX_NESTING: usize = 256;

/// Pages with more elements than this are converted whole, without looking for the
/// main content (which scores every element).
pub const MAX_ELEMENTS: usize = 200_000;

/// The stack of the thread that parses and converts.
const STACK: usize = 64 * 1024 * 1024;

/// A page as Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Elements that never have content.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param",
    "source", "track", "wbr",
];

/// Elements whose content is text, not markup, up to their end tag.
const RAW_TEXT: &[&str] = &[
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "plaintext",
];

/// Elements that the next sibling of their kind closes: they do not nest.
const SELF_ENDING: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "rb",
    "rt", "rp", "rtc", "colgroup", "caption",
];

/// `html` with every start tag beyond `max` levels of nesting (and its end tag) left
/// out, so that no tree built from it is deeper than a browser would build. Text is
/// kept. Borrowed when nothing had to go.
#[must_use]
pub fn limit_nesting(html: &str, max: usize) -> Cow<'_, str> {
    let b = html.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut depth = 0usize;
    let mut dropped = 0usize;
    // Inside svg or math, `<x/>` closes itself.
    let mut foreign = 0usize;
    let mut i = 0;
    while let Some(lt) = b[i..].iter().position(|&c| c == b'<') {
        let p = i + lt;
        let rest = &b[p..];
        if rest.starts_with(b"<!--") {
            i = find(&rest[4..], b"-->").map_or(b.len(), |e| p + 4 + e + 3);
            continue;
        }
        if rest.len() > 1 && matches!(rest[1], b'!' | b'?') {
            i = rest
                .iter()
                .position(|&c| c == b'>')
                .map_or(b.len(), |e| p + e + 1);
            continue;
        }
        let closing = rest.get(1) == Some(&b'/');
        let name_at = p + 1 + usize::from(closing);
        let name_len = b[name_at..]
            .iter()
            .position(|c| !(c.is_ascii_alphanumeric() || *c == b'-' || *c == b':'))
            .unwrap_or(b.len() - name_at);
        if name_len == 0 || !b[name_at].is_ascii_alphabetic() {
            i = p + 1;
            continue;
        }
        let name = html[name_at..name_at + name_len].to_ascii_lowercase();
        let end = tag_end(b, name_at + name_len);
        let self_closed = end > 0 && b[end - 1] == b'/' && end - 1 > name_at;
        i = (end + 1).min(b.len());
        let name = name.as_str();
        if VOID.contains(&name) || SELF_ENDING.contains(&name) {
            continue;
        }
        if !closing && RAW_TEXT.contains(&name) {
            // Skip to the end tag; its text is not markup.
            i = end_tag(b, i, name.as_bytes());
            continue;
        }
        if RAW_TEXT.contains(&name) {
            continue;
        }
        let is_foreign = matches!(name, "svg" | "math");
        if !closing {
            if self_closed && foreign > 0 {
                continue;
            }
            if depth >= max {
                let o = out.get_or_insert_with(|| String::with_capacity(html.len()));
                o.push_str(&html[copied..p]);
                copied = i;
                dropped += 1;
                continue;
            }
            depth += 1;
            if is_foreign {
                foreign += 1;
            }
        } else if dropped > 0 {
            let o = out.get_or_insert_with(|| String::with_capacity(html.len()));
            o.push_str(&html[copied..p]);
            copied = i;
            dropped -= 1;
        } else {
            depth = depth.saturating_sub(1);
            if is_foreign {
                foreign = foreign.saturating_sub(1);
            }
        }
    }
    match out {
        Some(mut o) => {
            o.push_str(&html[copied..]);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(html),
    }
}

/// Where the end tag `</name` (in any case) first starts at or after `from`; the end
/// of the text if nowhere.
fn end_tag(b: &[u8], from: usize, name: &[u8]) -> usize {
    let mut at = from;
    while let Some(k) = find(&b[at..], b"</") {
        let start = at + k;
        let tag = &b[start + 2..];
        if tag.len() >= name.len() && tag[..name.len()].eq_ignore_ascii_case(name) {
            return start;
        }
        at = start + 2;
    }
    b.len()
}

/// Where the tag whose attributes start at `from` ends (its `>`), quotes respected;
/// the end of the text if it never ends.
fn tag_end(b: &[u8], from: usize) -> usize {
    let mut quote = None;
    for (k, &c) in b.iter().enumerate().skip(from) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'"' || c == b'\'' => quote = Some(c),
            None if c == b'>' => return k,
            None => {}
        }
    }
    b.len()
}

/// Converts a page to Markdown: its main content when one stands out (as a
/// reader view would show it), else its whole body without scripts, styles,
/// navigation, headers, footers and forms. `url` makes relative links absolute.
///
/// # Errors
/// Only if the converter failed inside (it runs on a thread of its own and a
/// failure there is caught).
pub fn to_markdown(html: &str, url: Option<&str>) -> Result<Page, String> {
    let html = limit_nesting(html, MAX_NESTING).into_owned();
    let url = url.map(str::to_owned);
    let worker = std::thread::Builder::new()
        .name("jianmu-html".into())
        .stack_size(STACK)
        .spawn(move || convert(&html, url.as_deref()))
        .map_err(|e| format!("cannot start the converter: {e}"))?;
    worker
        .join()
        .map_err(|_| "the page could not be converted (the converter failed on it)".to_owned())
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
    fn nesting_is_bounded_and_text_kept() {
        let deep = format!("{}x{}", "<div>".repeat(1000), "</div>".repeat(1000));
        let cut = limit_nesting(&deep, 10);
        assert_eq!(cut.matches("<div>").count(), 10);
        assert_eq!(cut.matches("</div>").count(), 10);
        assert!(cut.contains('x'));
        // Ordinary pages pass untouched, borrowed.
        let page = "<html><body><ul><li>a<li>b</ul><p>one<p>two<br><img src=x>\
                    <script>if (a<b) { '<div>' }</script><svg><path/><path/></svg></body></html>";
        assert!(matches!(limit_nesting(page, 5), Cow::Borrowed(_)));
        // `<div/>` opens a div in HTML, so it counts.
        let slashed = "<div/>".repeat(100);
        assert_eq!(limit_nesting(&slashed, 10).matches("<div/>").count(), 10);
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
        let page = to_markdown(&html, Some("https://example.org/book/")).unwrap();
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
        let page = to_markdown("<p>short</p><script>x()</script>", None).unwrap();
        assert!(page.markdown.contains("short"), "{page:?}");
        assert!(!page.markdown.contains("x()"));
    }

    #[test]
    fn a_hundred_thousand_levels_are_flattened() {
        let n = 100_000;
        let html = format!("{}deep text{}", "<div>".repeat(n), "</div>".repeat(n));
        let page = to_markdown(&html, None).unwrap();
        assert!(page.markdown.contains("deep text"));
        let unclosed = format!("{}end", "<span><b>".repeat(n));
        assert!(
            to_markdown(&unclosed, None)
                .unwrap()
                .markdown
                .contains("end")
        );
    }
}
