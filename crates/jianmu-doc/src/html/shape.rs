//! The pre-pass that keeps a page's tree shallow and its tags small before html5ever
//! parses it: tags are read as the HTML tokenizer reads them, and the stack of open
//! elements is followed with html5ever's tree-building rules (implied ends, scopes,
//! tables, foreign content, formatting elements opened again, raw text, the head,
//! framesets), erring towards counting an element as open. A start tag that would
//! open an element deeper than the limit is left out (its text stays), and a tag with
//! more attributes than [`MAX_ATTRIBUTES`] keeps only the first ones (html5ever
//! compares each new attribute with those before it, so a million attributes cost
//! hours). A property test holds the tree html5ever builds from the result to at most
//! twice the limit, plus a few levels.

use std::borrow::Cow;
use std::collections::HashMap;

/// The most attributes one tag keeps.
pub const MAX_ATTRIBUTES: usize = 256;

/// Elements that never have content (the tree builder inserts and pops them at once).
const VOID: &[&str] = &[
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image", "img",
    "input", "keygen", "link", "meta", "param", "source", "track", "wbr",
];

/// Elements whose content is text up to their end tag (not `noscript`: its content is
/// markup when scripting is off, as it is here).
const RAW_TEXT: &[&str] = &[
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
];

/// Elements the tree builder calls special (HTML ones; html5ever's list).
const SPECIAL: &[&str] = &[
    "address",
    "applet",
    "area",
    "article",
    "aside",
    "base",
    "basefont",
    "bgsound",
    "blockquote",
    "body",
    "br",
    "button",
    "caption",
    "center",
    "col",
    "colgroup",
    "dd",
    "details",
    "dir",
    "div",
    "dl",
    "dt",
    "embed",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hgroup",
    "hr",
    "html",
    "iframe",
    "img",
    "input",
    "isindex",
    "li",
    "link",
    "listing",
    "main",
    "marquee",
    "menu",
    "meta",
    "nav",
    "noembed",
    "noframes",
    "noscript",
    "object",
    "ol",
    "p",
    "param",
    "plaintext",
    "pre",
    "script",
    "section",
    "select",
    "source",
    "style",
    "summary",
    "table",
    "tbody",
    "td",
    "template",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "track",
    "ul",
    "wbr",
    "xmp",
];

/// End tags that close their element when it is in scope (whatever is above it); other
/// end tags close only an element with nothing special above it.
#[rustfmt::skip]
const SCOPE_END: &[&str] = &[
    "address", "applet", "article", "aside", "blockquote", "button", "center", "details",
    "dialog", "dir", "div", "dl", "fieldset", "figcaption", "figure", "footer", "header",
    "hgroup", "listing", "main", "marquee", "menu", "nav", "object", "ol", "pre", "search",
    "section", "select", "summary", "ul",
];

/// Start tags that close an open `p` in button scope (`table` left out: in quirks
/// mode it does not).
#[rustfmt::skip]
const CLOSES_P: &[&str] = &[
    "address", "article", "aside", "blockquote", "center", "details", "dialog", "dir", "div",
    "dl", "fieldset", "figcaption", "figure", "footer", "header", "hgroup", "main", "menu",
    "nav", "ol", "p", "section", "summary", "ul", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
    "listing", "li", "dd", "dt", "hr", "xmp",
];

/// Elements that "generate implied end tags" pops.
const IMPLIED_END: &[&str] = &[
    "dd", "dt", "li", "optgroup", "option", "p", "rb", "rp", "rt", "rtc",
];

/// Formatting elements: kept in the list of active formatting elements, which the
/// tree builder opens again after they are closed implicitly.
const FORMATTING: &[&str] = &[
    "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
];

/// Elements whose start puts a marker in the list of active formatting elements.
const MARKERS: &[&str] = &[
    "applet", "caption", "marquee", "object", "td", "th", "template",
];

/// HTML start tags that end foreign content (svg, math).
#[rustfmt::skip]
const BREAKS_OUT: &[&str] = &[
    "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em",
    "embed", "h1", "h2", "h3", "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing",
    "menu", "meta", "nobr", "ol", "p", "pre", "ruby", "s", "small", "span", "strong", "strike",
    "sub", "sup", "table", "tt", "u", "ul", "var",
];

/// Foreign elements whose content is HTML (integration points): of SVG, and of
/// MathML (and MathML's `annotation-xml` with an HTML `encoding`).
const SVG_INTEGRATION: &[&str] = &["foreignobject", "desc", "title"];
const MATH_INTEGRATION: &[&str] = &["mi", "mo", "mn", "ms", "mtext"];

impl Open<'_> {
    fn integration(&self) -> bool {
        let n = self.name.as_ref();
        self.foreign
            && if self.math {
                MATH_INTEGRATION.contains(&n) || self.html_inside
            } else {
                SVG_INTEGRATION.contains(&n)
            }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Open<'a> {
    name: Cow<'a, str>,
    foreign: bool,
    /// A foreign element of MathML (else of SVG).
    math: bool,
    /// An `annotation-xml` whose content is HTML.
    html_inside: bool,
    /// A `template` whose first tag was a `col`: its content is then a column group,
    /// where the tree builder ignores most tags.
    columns: bool,
    /// A `template` that has had a start tag in it (the first decides its content).
    started: bool,
}

/// One tag as the tokenizer reads it, borrowing from the page.
struct Tag<'a> {
    /// Lower-case name.
    name: Cow<'a, str>,
    self_closing: bool,
    /// Where the tag's text ends (after its `>`, or the end of the page).
    after: usize,
    /// Where its attributes past [`MAX_ATTRIBUTES`] start, when it has more.
    cut_at: Option<usize>,
    /// The attributes as written, to tell formatting elements apart.
    attributes: &'a [u8],
    /// Whether the page ended inside the tag (the tokenizer drops such a tag).
    unfinished: bool,
    /// Whether it has an attribute `color`, `face` or `size` (a `font` with one ends
    /// foreign content).
    font_like: bool,
    /// Whether its `encoding` is `text/html` or `application/xhtml+xml` (a MathML
    /// `annotation-xml` with one holds HTML).
    html_encoding: bool,
}

fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// Reads the tag whose name starts at `at` (just past `<` or `</`).
fn read_tag(b: &[u8], at: usize) -> Tag<'_> {
    #[derive(Clone, Copy, PartialEq)]
    enum S {
        Name,
        BeforeAttr,
        AttrName,
        AfterAttrName,
        BeforeValue,
        Quoted(u8),
        Unquoted,
        AfterQuoted,
        SelfClosing,
    }
    let mut s = S::Name;
    let mut name_end = at;
    let mut count = 0usize;
    let mut cut_at = None;
    let mut self_closing = false;
    let mut i = at;
    let mut name_from = 0;
    let mut font_like = false;
    // The attribute being read is the first `encoding`; where its value starts.
    let mut encoding = false;
    let mut seen_encoding = false;
    let mut value_from = 0;
    let mut html_encoding = false;
    let mut value_end = |from: usize, to: usize, encoding: &mut bool| {
        if std::mem::take(encoding) {
            let v = &b[from..to];
            html_encoding = v.eq_ignore_ascii_case(b"text/html")
                || v.eq_ignore_ascii_case(b"application/xhtml+xml");
        }
    };
    let mut start_attribute = |i: usize, count: &mut usize| {
        *count += 1;
        if *count == MAX_ATTRIBUTES + 1 {
            cut_at = Some(i);
        }
    };
    while i < b.len() {
        let c = b[i];
        match s {
            S::Name => {
                if is_space(c) {
                    name_end = i;
                    s = S::BeforeAttr;
                } else if c == b'/' {
                    name_end = i;
                    s = S::SelfClosing;
                } else if c == b'>' {
                    name_end = i;
                    break;
                }
            }
            S::BeforeAttr => {
                if is_space(c) {
                } else if c == b'/' || c == b'>' {
                    s = S::AfterAttrName;
                    continue;
                } else {
                    start_attribute(i, &mut count);
                    name_from = i;
                    s = S::AttrName;
                }
            }
            S::AttrName => {
                if is_space(c) || c == b'/' || c == b'>' || c == b'=' {
                    let attr = &b[name_from..i];
                    font_like |= [&b"color"[..], b"face", b"size"]
                        .iter()
                        .any(|n| attr.eq_ignore_ascii_case(n));
                    encoding = attr.eq_ignore_ascii_case(b"encoding") && !seen_encoding;
                    seen_encoding |= encoding;
                    if c == b'=' {
                        s = S::BeforeValue;
                    } else {
                        s = S::AfterAttrName;
                        continue;
                    }
                }
            }
            S::AfterAttrName => {
                if is_space(c) {
                } else if c == b'/' {
                    s = S::SelfClosing;
                } else if c == b'=' {
                    s = S::BeforeValue;
                } else if c == b'>' {
                    break;
                } else {
                    // A new attribute, started where attributes start.
                    s = S::BeforeAttr;
                    continue;
                }
            }
            S::BeforeValue => {
                if is_space(c) {
                } else if c == b'"' || c == b'\'' {
                    s = S::Quoted(c);
                    value_from = i + 1;
                } else if c == b'>' {
                    break;
                } else {
                    s = S::Unquoted;
                    value_from = i;
                }
            }
            S::Quoted(q) => {
                if c == q {
                    value_end(value_from, i, &mut encoding);
                    s = S::AfterQuoted;
                }
            }
            S::Unquoted => {
                if is_space(c) {
                    value_end(value_from, i, &mut encoding);
                    s = S::BeforeAttr;
                } else if c == b'>' {
                    value_end(value_from, i, &mut encoding);
                    break;
                }
            }
            S::AfterQuoted => {
                if is_space(c) {
                    s = S::BeforeAttr;
                } else if c == b'/' {
                    s = S::SelfClosing;
                } else if c == b'>' {
                    break;
                } else {
                    s = S::BeforeAttr;
                    continue;
                }
            }
            S::SelfClosing => {
                if c == b'>' {
                    self_closing = true;
                    break;
                }
                s = S::BeforeAttr;
                continue;
            }
        }
        i += 1;
    }
    let unfinished = i >= b.len();
    if s == S::Name {
        name_end = i.min(b.len());
    }
    // The page is text, and a name ends at an ASCII byte: always UTF-8.
    let name = std::str::from_utf8(&b[at..name_end]).unwrap_or_default();
    let name = if name.bytes().any(|c| c.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    };
    Tag {
        name,
        self_closing,
        after: (i + 1).min(b.len()),
        cut_at,
        attributes: &b[name_end.min(i)..i.min(b.len())],
        unfinished,
        font_like,
        html_encoding,
    }
}

/// Where a comment that starts at `p` (`<!--`) ends, as the tokenizer ends it: at
/// `-->` or `--!>`, or at once for `<!-->` and `<!--->`.
fn comment_end(b: &[u8], p: usize) -> usize {
    let body = p + 4;
    if b[body..].starts_with(b">") {
        return body + 1;
    }
    if b[body..].starts_with(b"->") {
        return body + 2;
    }
    let mut k = body;
    while let Some(d) = b[k..].windows(2).position(|w| w == b"--") {
        let at = k + d + 2;
        if b[at..].starts_with(b">") {
            return at + 1;
        }
        if b[at..].starts_with(b"!>") {
            return at + 2;
        }
        k = k + d + 1;
    }
    b.len()
}

/// Where the text of a raw-text element ends: the start of its end tag (`</name`
/// followed by a space, `/` or `>`), or the end of the page.
fn raw_text_end(b: &[u8], from: usize, name: &[u8]) -> usize {
    let mut at = from;
    while let Some(k) = b[at..].windows(2).position(|w| w == b"</") {
        let start = at + k;
        let tag = &b[start + 2..];
        if tag.len() > name.len()
            && tag[..name.len()].eq_ignore_ascii_case(name)
            && (is_space(tag[name.len()]) || matches!(tag[name.len()], b'/' | b'>'))
        {
            return start;
        }
        at = start + 2;
    }
    b.len()
}

/// The tree builder's stack of open elements, followed as far as it decides depth.
#[derive(Default)]
struct Tree<'a> {
    stack: Vec<Open<'a>>,
    /// The list of active formatting elements: a name and its attributes' text, or a
    /// marker (`None`).
    formatting: Vec<Option<(Cow<'a, str>, &'a [u8])>>,
    /// Whether the body has begun (before it, a `noscript` holds no elements).
    body: bool,
    /// Whether a `frameset` would still replace the body.
    frameset_ok: bool,
}

impl<'a> Tree<'a> {
    /// How deep the next element would be, at most: the open elements, and the
    /// formatting elements the tree builder may open again.
    fn depth(&self) -> usize {
        self.stack.len() + self.formatting.iter().flatten().count()
    }

    fn top(&self) -> Option<&Open<'a>> {
        self.stack.last()
    }

    /// Whether the tree builder surely inserts the raw-text element `name` (and so
    /// reads what follows as text): not in a column group of a template, and in a
    /// frameset only `noframes`. Where unsure, its text is read as markup, which can
    /// only count more.
    fn inserts_raw(&self, name: &str) -> bool {
        let in_columns = self.stack.iter().any(|o| o.columns);
        let in_frameset = self
            .stack
            .iter()
            .any(|o| !o.foreign && o.name == "frameset");
        !in_columns && (!in_frameset || name == "noframes")
    }

    fn foreign_context(&self) -> bool {
        self.top().is_some_and(|t| t.foreign && !t.integration())
    }

    /// Whether an HTML `name` is open with no scope boundary above it; `extra` are
    /// boundaries of the scope asked besides the default ones.
    fn in_scope(&self, names: &[&str], extra: &[&str]) -> bool {
        for open in self.stack.iter().rev() {
            if !open.foreign && names.contains(&open.name.as_ref()) {
                return true;
            }
            let n = open.name.as_ref();
            let boundary = open.foreign && open.integration()
                || !open.foreign
                    && (matches!(
                        n,
                        "applet"
                            | "caption"
                            | "html"
                            | "table"
                            | "td"
                            | "th"
                            | "marquee"
                            | "object"
                            | "select"
                            | "template"
                    ) || extra.contains(&n));
            if boundary {
                return false;
            }
        }
        false
    }

    /// Whether an HTML `name` is open in table scope, in a table: the table rules
    /// that close cells, rows and sections apply only in a table's insertion modes.
    fn in_table(&self, names: &[&str]) -> bool {
        for (k, open) in self.stack.iter().enumerate().rev() {
            if open.foreign {
                continue;
            }
            if names.contains(&open.name.as_ref()) {
                return self.stack[..k]
                    .iter()
                    .any(|o| !o.foreign && o.name == "table");
            }
            if matches!(open.name.as_ref(), "html" | "table" | "template") {
                return false;
            }
        }
        false
    }

    /// Whether an HTML `table` is open in table scope.
    fn table_in_scope(&self) -> bool {
        for open in self.stack.iter().rev() {
            if open.foreign {
                continue;
            }
            match open.name.as_ref() {
                "table" => return true,
                "html" | "template" => return false,
                _ => {}
            }
        }
        false
    }

    /// Whether an HTML element named one of `names` is open above the topmost `name`.
    fn above(&self, name: &str, names: &[&str]) -> bool {
        let Some(at) = self
            .stack
            .iter()
            .rposition(|o| !o.foreign && o.name == name)
        else {
            return false;
        };
        self.stack[at + 1..]
            .iter()
            .any(|o| !o.foreign && names.contains(&o.name.as_ref()))
    }

    /// Pops until the current element is an HTML element named one of `names`.
    fn clear_to(&mut self, names: &[&str]) {
        while let Some(top) = self.top() {
            if !top.foreign && names.contains(&top.name.as_ref()) {
                break;
            }
            self.pop_one();
        }
    }

    /// Pops the current element; a marker element clears the formatting list to its
    /// marker.
    fn pop_one(&mut self) {
        if let Some(open) = self.stack.pop()
            && !open.foreign
            && MARKERS.contains(&open.name.as_ref())
        {
            while let Some(entry) = self.formatting.pop() {
                if entry.is_none() {
                    break;
                }
            }
        }
    }

    /// Pops through the topmost HTML element named one of `names`.
    fn pop_through(&mut self, names: &[&str]) {
        if let Some(at) = self
            .stack
            .iter()
            .rposition(|o| !o.foreign && names.contains(&o.name.as_ref()))
        {
            while self.stack.len() > at {
                self.pop_one();
            }
        }
    }

    fn implied_end(&mut self, except: &[&str]) {
        while let Some(top) = self.top() {
            let n = top.name.as_ref();
            if top.foreign || !IMPLIED_END.contains(&n) || except.contains(&n) {
                break;
            }
            self.stack.pop();
        }
    }

    fn close_p(&mut self) {
        if self.in_scope(&["p"], &["button"]) {
            self.implied_end(&["p"]);
            self.pop_through(&["p"]);
        }
    }

    /// Whether an element above the topmost `name` is special (the adoption agency
    /// would then move elements rather than close them).
    fn special_above(&self, name: &str) -> Option<bool> {
        let at = self
            .stack
            .iter()
            .rposition(|o| !o.foreign && o.name == name)?;
        Some(
            self.stack[at + 1..]
                .iter()
                .any(|o| o.foreign || SPECIAL.contains(&o.name.as_ref())),
        )
    }

    /// The adoption agency, as far as depth goes: closes `name` when nothing special
    /// is above it; otherwise leaves the stack as it is (the agency keeps its depth).
    fn adopt(&mut self, name: &str) -> bool {
        let listed = self
            .formatting
            .iter()
            .rposition(|e| e.as_ref().is_some_and(|(n, _)| n == name));
        let Some(listed) = listed else {
            return false;
        };
        let after_marker = !self.formatting[listed..].iter().any(Option::is_none);
        if !after_marker {
            return false;
        }
        match self.special_above(name) {
            None => {
                self.formatting.remove(listed);
            }
            Some(false) => {
                self.formatting.remove(listed);
                self.pop_through(&[name]);
            }
            Some(true) => {}
        }
        true
    }

    /// Notes a start tag of any kind (raw-text and void ones included) before it is
    /// processed: the first in a template decides the template's content, and most
    /// end the chance of a frameset.
    fn note_start(&mut self, name: &str) {
        if let Some(top) = self.stack.last_mut()
            && !top.foreign
            && top.name == "template"
            && !top.started
            // Head elements leave the template's content undecided.
            && !matches!(
                name,
                "base" | "basefont" | "bgsound" | "link" | "meta" | "noframes" | "script"
                    | "style" | "template" | "title"
            )
        {
            top.started = true;
            top.columns = name == "col";
        }
        if matches!(
            name,
            "pre"
                | "listing"
                | "li"
                | "dd"
                | "dt"
                | "button"
                | "applet"
                | "marquee"
                | "object"
                | "table"
                | "area"
                | "br"
                | "embed"
                | "img"
                | "keygen"
                | "wbr"
                | "input"
                | "hr"
                | "textarea"
                | "xmp"
                | "iframe"
                | "select"
        ) {
            self.frameset_ok = false;
        }
    }

    /// Processes a start tag; answers whether it opens an element.
    fn start(&mut self, tag: &Tag<'a>) -> bool {
        let name = tag.name.as_ref();
        if !self.body {
            match name {
                // In the head, a `noscript` closes at the first tag that does not
                // belong there.
                "noscript" => return false,
                "html" | "head" | "base" | "basefont" | "bgsound" | "link" | "meta"
                | "template" => {}
                _ => self.body = true,
            }
        }
        if self.foreign_context() {
            if BREAKS_OUT.contains(&name) || name == "font" && tag.font_like {
                while self.foreign_context() {
                    self.stack.pop();
                }
            } else {
                if tag.self_closing {
                    return false;
                }
                // `svg` in an `annotation-xml` is SVG; the rest take their parent's kind.
                let math = self.top().is_some_and(|t| t.math)
                    && !(name == "svg" && self.top().is_some_and(|t| t.name == "annotation-xml"));
                self.stack.push(Open {
                    name: tag.name.clone(),
                    foreign: true,
                    math,
                    html_inside: math && name == "annotation-xml" && tag.html_encoding,
                    columns: false,
                    started: false,
                });
                return true;
            }
        }
        // A `select` (parsed as the customizable select is) ends at another select
        // or an input.
        if matches!(name, "select" | "input") && self.in_scope(&["select"], &[]) {
            self.pop_through(&["select"]);
            if name == "select" {
                return false;
            }
        }
        self.note_start(name);
        if name == "frameset"
            && !self
                .stack
                .iter()
                .any(|o| !o.foreign && o.name == "template")
        {
            let nested = self
                .top()
                .is_some_and(|t| !t.foreign && t.name == "frameset");
            if !nested && self.body {
                if !self.frameset_ok {
                    return false;
                }
                // It takes the body's place: everything open goes.
                self.stack.clear();
                self.formatting.clear();
            }
            self.body = true;
            self.frameset_ok = false;
            self.stack.push(Open {
                name: tag.name.clone(),
                foreign: false,
                math: false,
                html_inside: false,
                columns: false,
                started: false,
            });
            return true;
        }
        if matches!(name, "svg" | "math") {
            if tag.self_closing {
                return false;
            }
            self.stack.push(Open {
                name: tag.name.clone(),
                foreign: true,
                math: name == "math",
                html_inside: false,
                columns: false,
                started: false,
            });
            return true;
        }
        // Table parts outside a table (and a template) are ignored.
        if matches!(
            name,
            "caption" | "col" | "colgroup" | "tbody" | "td" | "tfoot" | "th" | "thead" | "tr"
        ) && !self.table_in_scope()
            && !self
                .stack
                .iter()
                .any(|o| !o.foreign && o.name == "template")
        {
            return false;
        }
        if name == "col" && self.table_in_scope() {
            self.clear_to(&["table", "colgroup"]);
        }
        if VOID.contains(&name) || matches!(name, "html" | "body" | "head") {
            return false;
        }
        if CLOSES_P.contains(&name) {
            if matches!(name, "li" | "dd" | "dt") {
                let same: &[&str] = if name == "li" { &["li"] } else { &["dd", "dt"] };
                for open in self.stack.iter().rev() {
                    let n = open.name.as_ref();
                    if !open.foreign && same.contains(&n) {
                        let n = n.to_owned();
                        self.implied_end(&[n.as_str()]);
                        self.pop_through(&[n.as_str()]);
                        break;
                    }
                    if open.foreign || SPECIAL.contains(&n) && !matches!(n, "address" | "div" | "p")
                    {
                        break;
                    }
                }
            }
            self.close_p();
            if name.len() == 2
                && name.starts_with('h')
                && self.top().is_some_and(|t| {
                    !t.foreign && matches!(t.name.as_ref(), "h1" | "h2" | "h3" | "h4" | "h5" | "h6")
                })
            {
                self.stack.pop();
            }
        }
        match name {
            "button" if self.in_scope(&["button"], &[]) => {
                self.implied_end(&[]);
                self.pop_through(&["button"]);
            }
            "option" if self.in_scope(&["select"], &[]) => self.implied_end(&["optgroup"]),
            "optgroup" if self.in_scope(&["select"], &[]) => self.implied_end(&[]),
            "option" | "optgroup" if self.top().is_some_and(|t| t.name == "option") => {
                self.stack.pop();
            }
            "rb" | "rtc" if self.in_scope(&["ruby"], &[]) => self.implied_end(&[]),
            "rp" | "rt" if self.in_scope(&["ruby"], &[]) => self.implied_end(&["rtc"]),
            // Sections, rows and cells go where the table's insertion modes put them:
            // what is open above is closed first.
            "caption" | "colgroup" | "tbody" | "thead" | "tfoot" if self.table_in_scope() => {
                self.clear_to(&["table"]);
            }
            "tr" if self.table_in_scope() => self.clear_to(&["tbody", "thead", "tfoot", "table"]),
            // A table straight in a table (not in a cell or caption) ends the first.
            "table" if self.table_in_scope() && !self.above("table", &["td", "th", "caption"]) => {
                self.pop_through(&["table"]);
            }
            "td" | "th" if self.table_in_scope() => {
                self.clear_to(&["tr", "tbody", "thead", "tfoot", "table"]);
            }
            "a" | "nobr" => {
                self.adopt(name);
            }
            _ => {}
        }
        // Rows and cells straight in a table get the sections the tree builder adds.
        let top = self.top().map(|t| t.name.clone()).unwrap_or_default();
        let implied: &[&str] = match (name, top.as_ref()) {
            ("tr", "table") => &["tbody"],
            ("td" | "th", "table") => &["tbody", "tr"],
            ("td" | "th", "tbody" | "thead" | "tfoot") => &["tr"],
            ("col", "table") => &["colgroup"],
            _ => &[],
        };
        for extra in implied {
            self.stack.push(Open {
                name: Cow::Borrowed(*extra),
                foreign: false,
                math: false,
                html_inside: false,
                columns: false,
                started: false,
            });
        }
        if MARKERS.contains(&name) {
            self.formatting.push(None);
        }
        if FORMATTING.contains(&name) {
            // At most three alike after the last marker (the "Noah's Ark" clause).
            let key = (tag.name.clone(), tag.attributes);
            let alike = self
                .formatting
                .iter()
                .rev()
                .take_while(|e| e.is_some())
                .filter(|e| e.as_ref() == Some(&key))
                .count();
            if alike >= 3
                && let Some(first) = self
                    .formatting
                    .iter()
                    .position(|e| e.as_ref() == Some(&key))
            {
                self.formatting.remove(first);
            }
            self.formatting.push(Some(key));
        }
        self.stack.push(Open {
            name: tag.name.clone(),
            foreign: false,
            math: false,
            html_inside: false,
            columns: false,
            started: false,
        });
        true
    }

    /// Processes an end tag.
    fn end(&mut self, name: &str) {
        if name == "head" {
            self.body = true;
        }
        // `</p>` and `</br>` end foreign content, then count as HTML.
        if matches!(name, "p" | "br") {
            while self.foreign_context() {
                self.stack.pop();
            }
        }
        // Foreign elements close by name until an HTML element is reached.
        for open in self.stack.iter().rev() {
            if !open.foreign {
                break;
            }
            if open.name == name {
                let at = self
                    .stack
                    .iter()
                    .rposition(|o| o.foreign && o.name == name)
                    .unwrap_or(self.stack.len());
                self.stack.truncate(at);
                return;
            }
        }
        if FORMATTING.contains(&name) && self.adopt(name) {
            return;
        }
        match name {
            "p" | "br" | "html" | "body" | "head" => {
                if name == "p" {
                    self.close_p();
                }
            }
            // A form's end tag takes the form out of the stack, and nothing above it;
            // what is above stays inside the form, so the form still counts (under a
            // name no tag has).
            "form"
                if !self
                    .stack
                    .iter()
                    .any(|o| !o.foreign && o.name == "template") =>
            {
                if self.in_scope(&["form"], &[]) {
                    self.implied_end(&[]);
                    if let Some(at) = self
                        .stack
                        .iter()
                        .rposition(|o| !o.foreign && o.name == "form")
                    {
                        self.stack[at].name = Cow::Borrowed("#form");
                    }
                }
            }
            "li" => {
                if self.in_scope(&["li"], &["ol", "ul"]) {
                    self.implied_end(&["li"]);
                    self.pop_through(&["li"]);
                }
            }
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                let all = ["h1", "h2", "h3", "h4", "h5", "h6"];
                if self.in_scope(&all, &[]) {
                    self.implied_end(&[]);
                    self.pop_through(&all);
                }
            }
            // In a caption, the ends of sections, rows and cells are ignored.
            "td" | "th" | "tr" | "tbody" | "thead" | "tfoot" => {
                if self.in_table(&[name]) && !self.above(name, &["caption"]) {
                    self.implied_end(&[]);
                    self.pop_through(&[name]);
                }
            }
            "caption" => {
                if self.in_table(&["caption"]) && !self.above("caption", &["td", "th", "tr"]) {
                    self.implied_end(&[]);
                    self.pop_through(&["caption"]);
                }
            }
            "table" => {
                if self.table_in_scope() {
                    self.pop_through(&["table"]);
                }
            }
            "colgroup" => {
                if self
                    .top()
                    .is_some_and(|t| !t.foreign && t.name == "colgroup")
                {
                    self.stack.pop();
                }
            }
            "dd" | "dt" => {
                if self.in_scope(&[name], &[]) {
                    self.implied_end(&[name]);
                    self.pop_through(&[name]);
                }
            }
            "template" => {
                if self
                    .stack
                    .iter()
                    .any(|o| !o.foreign && o.name == "template")
                {
                    self.implied_end(&[]);
                    self.pop_through(&["template"]);
                }
            }
            _ if SCOPE_END.contains(&name) => {
                if self.in_scope(&[name], &[]) {
                    self.implied_end(&[]);
                    self.pop_through(&[name]);
                }
            }
            _ => {
                // Any other end tag: the nearest element of that name, unless a special
                // element comes first.
                for k in (0..self.stack.len()).rev() {
                    let open = &self.stack[k];
                    if open.foreign {
                        continue;
                    }
                    if open.name == name {
                        self.implied_end(&[name]);
                        self.stack.truncate(k);
                        return;
                    }
                    if SPECIAL.contains(&open.name.as_ref()) {
                        return;
                    }
                }
            }
        }
    }
}

/// `html` with every start tag that would open an element more than `max` levels
/// deep left out (with the end tag that would close it), and every tag cut to its
/// first [`MAX_ATTRIBUTES`] attributes. Text is kept. Borrowed when nothing changed.
/// html5ever builds no tree deeper than `2 × max + 6` from the result.
#[must_use]
pub fn limit_nesting(html: &str, max: usize) -> Cow<'_, str> {
    let b = html.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut tree = Tree {
        frameset_ok: true,
        ..Tree::default()
    };
    let mut dropped: HashMap<String, usize> = HashMap::new();
    let mut i = 0;
    while let Some(lt) = memchr::memchr(b'<', &b[i..]) {
        let p = i + lt;
        // Text begins the body, and ends the chance of a frameset.
        if (!tree.body || tree.frameset_ok) && b[i..p].iter().any(|c| !is_space(*c)) {
            tree.body = true;
            tree.frameset_ok = false;
        }
        let rest = &b[p..];
        if rest.starts_with(b"<!--") {
            i = comment_end(b, p);
            continue;
        }
        if rest.starts_with(b"<![CDATA[") && tree.foreign_context() {
            i = rest
                .windows(3)
                .position(|w| w == b"]]>")
                .map_or(b.len(), |e| p + e + 3);
            continue;
        }
        let end = rest.get(1) == Some(&b'/');
        let name_at = p + 1 + usize::from(end);
        let bogus = || {
            rest.iter()
                .position(|&c| c == b'>')
                .map_or(b.len(), |e| p + e + 1)
        };
        match b.get(name_at) {
            Some(c) if c.is_ascii_alphabetic() => {}
            // `<!…` and `<?…` are bogus comments up to the next `>`, and so is `</`
            // followed by anything but a letter (`</>` is nothing); any other `<` is
            // text.
            Some(b'!' | b'?') if !end => {
                i = bogus();
                continue;
            }
            Some(_) if end => {
                i = bogus();
                continue;
            }
            _ => {
                tree.body = true;
                tree.frameset_ok = false;
                i = p + 1;
                continue;
            }
        }
        let tag = read_tag(b, name_at);
        i = tag.after;
        if tag.unfinished {
            break;
        }
        let name = tag.name.as_ref();
        let foreign = tree.foreign_context();
        // What becomes of the tag's text: kept, left out, or cut after its first
        // attributes.
        let mut drop = false;
        if end {
            if let Some(n) = dropped.get_mut(name)
                && *n > 0
            {
                *n -= 1;
                drop = true;
            } else {
                tree.end(name);
            }
        } else if !foreign && name == "plaintext" {
            // Everything after it is text.
            i = b.len();
        } else if !foreign && RAW_TEXT.contains(&name) && tree.inserts_raw(name) {
            if !matches!(name, "title" | "style" | "script" | "noframes") {
                tree.body = true;
            }
            tree.note_start(name);
            // Its text is not markup; the element closes at its end tag, a leaf. With
            // no end tag, what follows is read as markup, which can only count more.
            // Its end tag closes it, whatever else was left out.
            let text_end = raw_text_end(b, i, name.as_bytes());
            if text_end < b.len() {
                i = read_tag(b, text_end + 2).after;
            }
        } else if tree.depth() >= max && !VOID.contains(&name) && !(foreign && tag.self_closing) {
            drop = true;
            *dropped.entry(tag.name.to_string()).or_default() += 1;
        } else {
            tree.start(&tag);
        }
        let cut = if drop {
            Some((p, ""))
        } else {
            tag.cut_at
                .map(|at| (at, if tag.self_closing { "/>" } else { ">" }))
        };
        if let Some((from, with)) = cut {
            let o = out.get_or_insert_with(|| String::with_capacity(html.len()));
            o.push_str(&html[copied..from]);
            o.push_str(with);
            copied = tag.after;
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The depth of the tree html5ever builds from `html` (the document node is 0).
    fn depth(html: &str) -> usize {
        let doc = dom_query::Document::from(html);
        let mut deepest = 0;
        let mut todo = vec![(doc.root(), 0usize)];
        while let Some((node, d)) = todo.pop() {
            deepest = deepest.max(d);
            let mut child = node.first_child();
            while let Some(c) = child {
                child = c.next_sibling();
                todo.push((c, d + 1));
            }
        }
        deepest
    }

    /// What the html5ever tree may add to the elements counted: the document's
    /// `html` and `body`, a text node, the sections and rows a table part implies, and
    /// the raw-text element's or void element's own level.
    const SLACK: usize = 6;

    #[test]
    fn tags_that_nest_in_html5ever_are_counted() {
        let n = 20_000;
        for soup in [
            // A name that starts like `p` is its own element.
            format!("{}{}", "<p_x>".repeat(n), "</q>".repeat(n)),
            // Ruby parts close each other only inside `ruby`; options only an option.
            "<rb>".repeat(n),
            "<rt>".repeat(n),
            "<optgroup>".repeat(n),
            // An end tag the tree builder ignores closes nothing.
            "<div></q>".repeat(n),
            "<span><div></span>".repeat(n),
            // Out of svg, `<x/>` opens an element.
            format!("<svg><p>{}", "<x/>".repeat(n)),
            // Formatting elements closed by a block are opened again by text.
            format!("{}t", "<div><b id=1></div>".repeat(n)),
            "<table><td><table><td>".repeat(n),
            "<a href=x><div>".repeat(n),
        ] {
            let limited = limit_nesting(&soup, 32);
            let d = depth(&limited);
            assert!(d <= 32 + SLACK, "{}…: {d}", &soup[..40]);
        }
    }

    #[test]
    fn ordinary_pages_pass_untouched() {
        let mut page = String::from("<!doctype html><html><head><title>t</title></head><body>");
        page.push_str(&"<ul>".repeat(3));
        for k in 0..2000 {
            page.push_str(&format!("<li>item {k}<p>para<p>two<b>bold</b><br>"));
        }
        page.push_str("<table>");
        for _ in 0..2000 {
            page.push_str("<tr><td>a<td>b<th>c");
        }
        page.push_str("</table><select>");
        for _ in 0..500 {
            page.push_str("<option>o");
        }
        page.push_str("</select><dl>");
        for _ in 0..500 {
            page.push_str("<dt>t<dd>d");
        }
        page.push_str(
            "</dl><script>if (a<b) { '<div>' }</script><svg><path/><path/></svg>\
             <!-- <div> --><ruby>a<rb>b<rt>c<rb>d<rt>e</ruby></body></html>",
        );
        assert!(matches!(limit_nesting(&page, 16), Cow::Borrowed(_)));
    }

    #[test]
    fn a_tag_keeps_its_first_attributes() {
        let many: String = (0..100_000).map(|k| format!(" a{k}=\"v\"")).collect();
        let page = format!("<div{many}>text</div><img{many}/>");
        let cut = limit_nesting(&page, 16);
        assert_eq!(cut.matches("=\"v\"").count(), 2 * MAX_ATTRIBUTES);
        assert!(cut.contains(" a255=\"v\" >text</div>"));
        assert!(cut.ends_with(" a255=\"v\" />"));
        // A quote inside a name starts no value: the tag still ends at its `>`.
        let odd = format!("<div a\"b{}>x", " c".repeat(300));
        assert_eq!(
            limit_nesting(&odd, 16).matches(" c").count(),
            MAX_ATTRIBUTES - 1
        );
    }

    #[test]
    fn dropped_tags_take_their_end_tags_along() {
        let deep = format!("{}x{}", "<div>".repeat(1000), "</div>".repeat(1000));
        let cut = limit_nesting(&deep, 10);
        assert_eq!(cut.matches("<div>").count(), 10);
        assert_eq!(cut.matches("</div>").count(), 10);
        assert!(cut.contains('x'));
        // `<div/>` opens a div in HTML, so it counts.
        let slashed = "<div/>".repeat(100);
        assert_eq!(limit_nesting(&slashed, 10).matches("<div/>").count(), 10);
    }

    fn token() -> impl Strategy<Value = String> {
        const NAMES: &[&str] = &[
            "div",
            "p",
            "p_x",
            "li",
            "ul",
            "dd",
            "dt",
            "rb",
            "rt",
            "rtc",
            "rp",
            "ruby",
            "optgroup",
            "option",
            "select",
            "table",
            "tbody",
            "tr",
            "td",
            "th",
            "caption",
            "colgroup",
            "col",
            "a",
            "b",
            "i",
            "font",
            "nobr",
            "button",
            "span",
            "svg",
            "math",
            "foreignObject",
            "mi",
            "x",
            "h1",
            "h2",
            "template",
            "form",
            "object",
            "marquee",
            "pre",
            "br",
            "img",
            "body",
            "html",
            "frameset",
            "head",
            "address",
            "search",
            "q",
            "textarea",
            "title",
            "noscript",
            "desc",
            "annotation-xml",
            "image",
            "listing",
        ];
        prop_oneof![
            6 => (0..NAMES.len(), any::<bool>(), 0..3u8).prop_map(|(k, slash, attr)| {
                let attrs = ["", " id=a", " class=\"x y\""][usize::from(attr)];
                format!("<{}{attrs}{}>", NAMES[k], if slash { "/" } else { "" })
            }),
            4 => (0..NAMES.len()).prop_map(|k| format!("</{}>", NAMES[k])),
            2 => Just("t".to_owned()),
            1 => Just("<!-- c -->".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn no_soup_is_deeper_than_counted(tokens in prop::collection::vec(token(), 1..800)) {
            let soup: String = tokens.concat();
            let max = 4;
            let d = depth(&limit_nesting(&soup, max));
            prop_assert!(d <= 2 * max + SLACK, "{d}: {soup}");
        }
    }
}
