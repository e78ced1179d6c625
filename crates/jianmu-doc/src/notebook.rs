//! Jupyter notebooks (nbformat 4): read as their cells in order, with ids, sources and
//! outputs (images as images), and edited cell by cell so the file stays valid.
//!
//! Files are written as Jupyter writes them: keys sorted, one space of indent, no
//! ASCII escaping, a final newline, sources as lists of lines.

use serde_json::{Map, Value, json};

/// Bounds of a rendering.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Characters shown of one output; the rest is counted, not shown.
    pub output_chars: usize,
    /// Characters of the whole rendering; the cells after are counted, not shown.
    pub total_chars: usize,
    /// Images returned at most.
    pub images: usize,
    /// Largest image returned, in bytes of base64.
    pub image_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            output_chars: 5_000,
            total_chars: 100_000,
            images: 10,
            image_bytes: 5 * 1024 * 1024,
        }
    }
}

/// An image output: its MIME type and base64 data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotebookImage {
    /// `image/png` or `image/jpeg`.
    pub mime_type: String,
    /// The data, base64 as the notebook stores it.
    pub base64: String,
}

/// A notebook as a model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The cells in order, as text.
    pub text: String,
    /// Image outputs, in the order the text names them.
    pub images: Vec<NotebookImage>,
    /// How many cells the notebook has.
    pub cells: usize,
}

/// A cell's (or an output's) multi-line string: a string or a list of strings.
fn joined(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// Text without terminal colour codes (tracebacks are full of them).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` cut to `max` characters with a count of the rest.
fn bounded(text: &str, max: usize) -> String {
    let mut it = text.char_indices();
    match it.nth(max) {
        None => text.to_owned(),
        Some((at, _)) => {
            let rest = text[at..].chars().count();
            format!(
                "{}\n… ({rest} more characters of this output not shown)",
                &text[..at]
            )
        }
    }
}

/// The notebook's checks: an object with a `cells` list and nbformat 4.
///
/// # Errors
/// What is wrong, in words.
pub fn check(nb: &Value) -> Result<(), crate::DocError> {
    check_text(nb).map_err(crate::DocError)
}

/// [`check`], its error as text.
fn check_text(nb: &Value) -> Result<(), String> {
    let major = nb.get("nbformat").and_then(Value::as_u64);
    if major != Some(4) {
        return Err(match major {
            Some(v) => format!(
                "this is an nbformat {v} notebook; only nbformat 4 is read and edited (open and save it in Jupyter to upgrade it)"
            ),
            None => "this is not a Jupyter notebook: there is no `nbformat` number".to_owned(),
        });
    }
    if !nb.get("cells").is_some_and(Value::is_array) {
        return Err("this is not a Jupyter notebook: there is no `cells` list".to_owned());
    }
    Ok(())
}

fn language(nb: &Value) -> String {
    let meta = nb.get("metadata");
    meta.and_then(|m| m.pointer("/language_info/name"))
        .or_else(|| meta.and_then(|m| m.pointer("/kernelspec/language")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The notebook `nb` as text: each cell with its number, id, type and (for code) its
/// execution count, its source, and its outputs (streams, results, errors with their
/// tracebacks); PNG and JPEG outputs as images, up to the limits.
///
/// # Errors
/// Not an nbformat 4 notebook.
pub fn render(nb: &Value, limits: Limits) -> Result<Rendered, crate::DocError> {
    render_text(nb, limits).map_err(crate::DocError)
}

/// [`render`], its error as text.
fn render_text(nb: &Value, limits: Limits) -> Result<Rendered, String> {
    check_text(nb)?;
    let cells = nb["cells"].as_array().map_or(&[][..], Vec::as_slice);
    let lang = language(nb);
    let mut text = format!(
        "Jupyter notebook: {} cells{}, nbformat 4.{}\n",
        cells.len(),
        if lang.is_empty() {
            String::new()
        } else {
            format!(" ({lang})")
        },
        nb.get("nbformat_minor")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    );
    let mut images = Vec::new();
    let mut measured = Measured::default();
    for (k, cell) in cells.iter().enumerate() {
        if measured.count(&text) > limits.total_chars {
            text.push_str(&format!(
                "\n… cells {}-{} not shown (the rendering is over {} characters); read the raw JSON with `offset` and `limit`\n",
                k + 1,
                cells.len(),
                limits.total_chars
            ));
            break;
        }
        let kind = cell.get("cell_type").and_then(Value::as_str).unwrap_or("?");
        let mut head = format!("\n--- cell {}", k + 1);
        if let Some(id) = cell.get("id").and_then(Value::as_str) {
            head.push_str(&format!(" · id {id}"));
        }
        head.push_str(&format!(" · {kind}"));
        if kind == "code" {
            match cell.get("execution_count").and_then(Value::as_u64) {
                Some(n) => head.push_str(&format!(" · [{n}]")),
                None => head.push_str(" · not run"),
            }
        }
        head.push_str(" ---\n");
        text.push_str(&head);
        let source = bounded(&joined(cell.get("source")), limits.total_chars);
        if kind == "code" {
            text.push_str(&format!("```{lang}\n{source}"));
            if !source.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("```\n");
        } else {
            text.push_str(&source);
            if !source.ends_with('\n') {
                text.push('\n');
            }
        }
        let outputs = cell
            .get("outputs")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for (n, output) in outputs.iter().enumerate() {
            if measured.count(&text) > limits.total_chars {
                text.push_str(&format!(
                    "\n… outputs {}-{} of cell {} and the cells after it not shown (the rendering is over {} characters)\n",
                    n + 1,
                    outputs.len(),
                    k + 1,
                    limits.total_chars
                ));
                return Ok(Rendered {
                    text,
                    images,
                    cells: cells.len(),
                });
            }
            render_output(output, limits, &mut text, &mut images);
        }
    }
    Ok(Rendered {
        text,
        images,
        cells: cells.len(),
    })
}

fn render_output(
    output: &Value,
    limits: Limits,
    text: &mut String,
    images: &mut Vec<NotebookImage>,
) {
    let kind = output
        .get("output_type")
        .and_then(Value::as_str)
        .unwrap_or("?");
    match kind {
        "stream" => {
            let name = output
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("stdout");
            let body = bounded(&plain(&joined(output.get("text"))), limits.output_chars);
            text.push_str(&format!("[{name}]\n{body}"));
        }
        "error" => {
            let ename = output.get("ename").and_then(Value::as_str).unwrap_or("");
            let evalue = output.get("evalue").and_then(Value::as_str).unwrap_or("");
            let trace: Vec<String> = output
                .get("traceback")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(plain)
                .collect();
            let body = bounded(&trace.join("\n"), limits.output_chars);
            text.push_str(&format!("[error] {ename}: {evalue}\n{body}"));
        }
        "execute_result" | "display_data" => {
            let data = output.get("data").and_then(Value::as_object);
            let label = if kind == "execute_result" {
                "[result]"
            } else {
                "[display]"
            };
            let mut shown = false;
            for mime in ["image/png", "image/jpeg"] {
                let Some(b64) = data.and_then(|d| d.get(mime)) else {
                    continue;
                };
                let b64: String = joined(Some(b64)).split_whitespace().collect();
                shown = true;
                if images.len() >= limits.images {
                    text.push_str(&format!(
                        "{label} ({mime} image not returned: only {} images are returned per read)\n",
                        limits.images
                    ));
                } else if b64.len() > limits.image_bytes {
                    text.push_str(&format!(
                        "{label} ({mime} image of {} base64 bytes not returned: over the limit of {})\n",
                        b64.len(),
                        limits.image_bytes
                    ));
                } else if let Some(why) = not_an_image(mime, &b64) {
                    text.push_str(&format!("{label} ({mime} output left out: {why})\n"));
                } else {
                    images.push(NotebookImage {
                        mime_type: mime.to_owned(),
                        base64: b64,
                    });
                    text.push_str(&format!(
                        "{label} ({mime}: image {} of this answer)\n",
                        images.len()
                    ));
                }
                break;
            }
            let textual = ["text/markdown", "text/plain"]
                .iter()
                .find_map(|m| data.and_then(|d| d.get(*m)).map(|v| (*m, v)));
            match textual {
                Some((_, v)) if !shown => {
                    let body = bounded(&plain(&joined(Some(v))), limits.output_chars);
                    text.push_str(&format!("{label}\n{body}"));
                }
                Some(_) => {}
                None if !shown => {
                    let kinds: Vec<&str> = data
                        .map(|d| d.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    text.push_str(&format!(
                        "{label} (no text form; data as {})\n",
                        kinds.join(", ")
                    ));
                }
                None => {}
            }
        }
        other => text.push_str(&format!("[{other} output]\n")),
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
}

/// The characters of a text that only grows, counted once each.
#[derive(Default)]
struct Measured {
    bytes: usize,
    chars: usize,
}

impl Measured {
    fn count(&mut self, text: &str) -> usize {
        self.chars += text[self.bytes..].chars().count();
        self.bytes = text.len();
        self.chars
    }
}

/// Why `b64` is not an image of type `mime` a model's API would take: not base64, or
/// not starting with the format's signature. `None` when it is one.
fn not_an_image(mime: &str, b64: &str) -> Option<&'static str> {
    let body = b64.trim_end_matches('=');
    let valid = b64.len().is_multiple_of(4)
        && b64.len() - body.len() <= 2
        && body
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/');
    if !valid || b64.len() < 12 {
        return Some("not valid base64");
    }
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let mut head = Vec::with_capacity(9);
    for quad in b64.as_bytes()[..12].chunks(4) {
        let n = quad
            .iter()
            .fold(0u32, |n, &c| (n << 6) | u32::from(value(c)));
        head.extend_from_slice(&n.to_be_bytes()[1..]);
    }
    let signature: &[u8] = if mime == "image/png" {
        b"\x89PNG\r\n\x1a\n"
    } else {
        b"\xff\xd8\xff"
    };
    (!head.starts_with(signature)).then_some(if mime == "image/png" {
        "the data is not a PNG image"
    } else {
        "the data is not a JPEG image"
    })
}

/// What an edit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditMode {
    /// The cell's source becomes the new source (and its type, if given).
    Replace,
    /// A new cell goes after the given one, or first when none is given.
    Insert,
    /// The cell goes.
    Delete,
}

/// The index of the cell `id` names: a cell id, or else its number as `render`
/// shows it (from 1).
fn find_cell(cells: &[Value], id: &str) -> Result<usize, String> {
    if let Some(k) = cells
        .iter()
        .position(|c| c.get("id").and_then(Value::as_str) == Some(id))
    {
        return Ok(k);
    }
    match id.trim().parse::<usize>() {
        Ok(n) if (1..=cells.len()).contains(&n) => Ok(n - 1),
        _ => {
            let ids: Vec<&str> = cells
                .iter()
                .take(20)
                .filter_map(|c| c.get("id").and_then(Value::as_str))
                .collect();
            Err(if ids.is_empty() {
                format!(
                    "no cell `{id}`: this notebook's cells have no ids; give the cell's number, 1 to {}",
                    cells.len()
                )
            } else {
                format!(
                    "no cell `{id}`; the cells' ids are {}{} (or give a cell's number, 1 to {})",
                    ids.join(", "),
                    if cells.len() > 20 { ", …" } else { "" },
                    cells.len()
                )
            })
        }
    }
}

/// A source as nbformat stores it: a list of lines, each with its newline but the
/// last.
fn lines(source: &str) -> Value {
    Value::Array(
        source
            .split_inclusive('\n')
            .map(|l| Value::String(l.to_owned()))
            .collect(),
    )
}

/// A new cell id: 8 hex digits, unique in the notebook.
fn new_id(cells: &[Value]) -> String {
    use std::hash::{BuildHasher, Hasher};
    for attempt in 0u32.. {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(attempt);
        let id = format!("{:08x}", h.finish() & 0xffff_ffff);
        if !cells
            .iter()
            .any(|c| c.get("id").and_then(Value::as_str) == Some(&id))
        {
            return id;
        }
    }
    unreachable!("an id is found")
}

/// A cell of `kind` with `source`, shaped as nbformat 4 wants it.
fn new_cell(kind: &str, source: &str, id: Option<String>) -> Value {
    let mut cell = Map::new();
    cell.insert("cell_type".into(), json!(kind));
    cell.insert("metadata".into(), json!({}));
    cell.insert("source".into(), lines(source));
    if kind == "code" {
        cell.insert("execution_count".into(), Value::Null);
        cell.insert("outputs".into(), json!([]));
    }
    if let Some(id) = id {
        cell.insert("id".into(), json!(id));
    }
    Value::Object(cell)
}

/// Edits `nb` in place and says what was done.
///
/// # Errors
/// Not an nbformat 4 notebook, an unknown cell, a cell type other than `code`,
/// `markdown` or `raw`, replace or delete without a cell.
pub fn edit(
    nb: &mut Value,
    cell: Option<&str>,
    new_source: &str,
    cell_type: Option<&str>,
    mode: EditMode,
) -> Result<String, String> {
    check_text(nb)?;
    if let Some(t) = cell_type
        && !matches!(t, "code" | "markdown" | "raw")
    {
        return Err(format!("cell_type `{t}` is not one of code, markdown, raw"));
    }
    // Cells have ids from nbformat 4.5 on; earlier notebooks must not get one.
    let with_ids = nb
        .get("nbformat_minor")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        >= 5;
    let Some(cells) = nb.get_mut("cells").and_then(Value::as_array_mut) else {
        return Err("this is not a Jupyter notebook: there is no `cells` list".into());
    };
    let at = cell.map(|c| find_cell(cells, c)).transpose()?;
    let name = |cells: &[Value], k: usize| match cells[k].get("id").and_then(Value::as_str) {
        Some(id) => format!("cell {} (id {id})", k + 1),
        None => format!("cell {}", k + 1),
    };
    match mode {
        EditMode::Insert => {
            let k = at.map_or(0, |k| k + 1);
            let id = with_ids.then(|| new_id(cells));
            let kind = cell_type.unwrap_or("code");
            cells.insert(k, new_cell(kind, new_source, id));
            Ok(format!("Inserted {} as a {kind} cell", name(cells, k)))
        }
        EditMode::Delete => {
            let k = at.ok_or("delete needs `cell_id`: the id (or number) of the cell to delete")?;
            let what = name(cells, k);
            cells.remove(k);
            Ok(format!("Deleted {what}; {} cells are left", cells.len()))
        }
        EditMode::Replace => {
            let k =
                at.ok_or("replace needs `cell_id`: the id (or number) of the cell to replace")?;
            let old_kind = cells[k]
                .get("cell_type")
                .and_then(Value::as_str)
                .unwrap_or("code")
                .to_owned();
            let kind = cell_type.unwrap_or(&old_kind).to_owned();
            let Some(obj) = cells[k].as_object_mut() else {
                return Err(format!("{} is not an object", name(cells, k)));
            };
            obj.insert("source".into(), lines(new_source));
            obj.insert("cell_type".into(), json!(kind));
            let mut note = String::new();
            if kind == "code" {
                if obj
                    .get("outputs")
                    .is_some_and(|o| o.as_array().is_some_and(|a| !a.is_empty()))
                {
                    note = "; its outputs were cleared".into();
                }
                obj.insert("outputs".into(), json!([]));
                obj.insert("execution_count".into(), Value::Null);
            } else {
                obj.remove("outputs");
                obj.remove("execution_count");
                // Attachments are allowed on markdown and raw cells only.
            }
            if kind == "code" {
                obj.remove("attachments");
            }
            Ok(format!(
                "Replaced {} ({kind}{}){note}",
                name(cells, k),
                if kind == old_kind {
                    String::new()
                } else {
                    format!(", was {old_kind}")
                }
            ))
        }
    }
}

/// Numbers of a notebook that a JSON value cannot hold as written (integers beyond 64
/// bits, and numbers too large for a float), kept as strings that start with this
/// marker while the notebook is edited; empty when there were none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept(String);

/// Reads a notebook's JSON so that [`to_bytes`] writes every number back as it was
/// written: the numbers a JSON value cannot hold become marked strings.
///
/// # Errors
/// When the bytes are not JSON.
pub fn parse(bytes: &[u8]) -> Result<(Value, Kept), serde_json::Error> {
    let spans = unkept_numbers(bytes);
    if spans.is_empty() {
        return Ok((serde_json::from_slice(bytes)?, Kept::default()));
    }
    // A marker that appears nowhere in the file.
    let mut marker = String::from("\u{f8ff}number");
    let mut n = 0u32;
    while find_bytes(bytes, marker.as_bytes()) {
        n += 1;
        marker = format!("\u{f8ff}number{n}:");
    }
    let mut text = Vec::with_capacity(bytes.len() + spans.len() * (marker.len() + 2));
    let mut at = 0;
    for (start, end) in spans {
        text.extend_from_slice(&bytes[at..start]);
        text.push(b'"');
        text.extend_from_slice(marker.as_bytes());
        text.extend_from_slice(&bytes[start..end]);
        text.push(b'"');
        at = end;
    }
    text.extend_from_slice(&bytes[at..]);
    Ok((serde_json::from_slice(&text)?, Kept(marker)))
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Where the numbers outside strings are that `serde_json` would change: integers
/// beyond 64 bits and numbers beyond a float's range.
fn unkept_numbers(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            {
                i += 1;
            }
            let token = std::str::from_utf8(&bytes[start..i]).unwrap_or("");
            let integer = !token.contains(['.', 'e', 'E']);
            let kept = if integer {
                token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok()
            } else {
                token.parse::<f64>().is_ok_and(f64::is_finite)
            };
            if !kept && !token.is_empty() {
                spans.push((start, i));
            }
            continue;
        }
        i += 1;
    }
    spans
}

/// The notebook as Jupyter writes it: sorted keys, one space of indent, a final
/// newline; numbers [`parse`] kept are written as they were.
#[must_use]
pub fn to_bytes(nb: &Value, kept: &Kept) -> Vec<u8> {
    use serde::Serialize as _;
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    // A Value always serializes.
    let _ = nb.serialize(&mut ser);
    out.push(b'\n');
    if kept.0.is_empty() {
        return out;
    }
    let mut quoted = Vec::from(&b"\""[..]);
    quoted.extend_from_slice(kept.0.as_bytes());
    let mut restored = Vec::with_capacity(out.len());
    let mut at = 0;
    while let Some(k) = out[at..].windows(quoted.len()).position(|w| w == quoted) {
        let start = at + k;
        let digits = start + quoted.len();
        let len = out[digits..]
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(0);
        if out.get(digits + len) == Some(&b'"') && len > 0 {
            restored.extend_from_slice(&out[at..start]);
            restored.extend_from_slice(&out[digits..digits + len]);
            at = digits + len + 1;
        } else {
            restored.extend_from_slice(&out[at..digits]);
            at = digits;
        }
    }
    restored.extend_from_slice(&out[at..]);
    restored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_checked_and_readings_held_to_their_budget() {
        let output =
            |data: Value| json!({"output_type": "display_data", "metadata": {}, "data": data});
        let nb = json!({
            "nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "a", "execution_count": 1, "metadata": {}, "source": "plot()",
                "outputs": [
                    output(json!({"image/png": "not base64 at all!"})),
                    output(json!({"image/png": "aGVsbG8gd29ybGQh"})),
                    output(json!({"image/jpeg": "iVBORw0KGgo="})),
                    output(json!({"image/png": "iVBORw0KGgo="})),
                ]}]
        });
        let r = render(&nb, Limits::default()).unwrap();
        assert_eq!(r.images.len(), 1, "{}", r.text);
        assert!(
            r.text
                .contains("(image/png output left out: not valid base64)"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("(image/png output left out: the data is not a PNG image)")
        );
        assert!(
            r.text
                .contains("(image/jpeg output left out: the data is not a JPEG image)")
        );
        // One cell with 2,000 outputs of 5,000 characters is cut at the budget.
        let stream = json!({"output_type": "stream", "name": "stdout", "text": "x".repeat(5_000)});
        let nb = json!({
            "nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "b", "execution_count": 1, "metadata": {}, "source": "",
                "outputs": vec![stream; 2_000]}]
        });
        let r = render(&nb, Limits::default()).unwrap();
        assert!(r.text.chars().count() < 120_000, "{}", r.text.len());
        assert!(
            r.text
                .contains("not shown (the rendering is over 100000 characters)")
        );
    }

    #[test]
    fn numbers_are_written_back_as_they_were() {
        let text = br#"{"cells": [], "metadata": {"big": 123456789012345678901234567890, "neg": -98765432109876543210, "huge": 1e400, "ok": 1.5, "id": 42, "s": "12345678901234567890123 \" 1e400"}, "nbformat": 4, "nbformat_minor": 5}"#;
        let (mut nb, kept) = parse(text).unwrap();
        edit(&mut nb, None, "x = 1", None, EditMode::Insert).unwrap();
        let out = String::from_utf8(to_bytes(&nb, &kept)).unwrap();
        for token in [
            "\"big\": 123456789012345678901234567890",
            "\"neg\": -98765432109876543210",
            "\"huge\": 1e400",
            "\"ok\": 1.5",
            "\"id\": 42",
            r#""s": "12345678901234567890123 \" 1e400""#,
        ] {
            assert!(out.contains(token), "{token} in {out}");
        }
        // A string that looks like the marker stays a string.
        let tricky = "{\"cells\": [], \"metadata\": {\"a\": \"\u{f8ff}number7\", \"b\": 1e999}, \"nbformat\": 4, \"nbformat_minor\": 5}";
        let (nb, kept) = parse(tricky.as_bytes()).unwrap();
        let out = String::from_utf8(to_bytes(&nb, &kept)).unwrap();
        assert!(
            out.contains("\"a\": \"\u{f8ff}number7\"") && out.contains("\"b\": 1e999"),
            "{out}"
        );
    }

    fn sample() -> Value {
        json!({
            "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
            "cells": [
                {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Title\n", "text"]},
                {"cell_type": "code", "id": "run", "metadata": {}, "execution_count": 2, "source": "print(1)",
                 "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": ["1\n"]},
                    {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": ["\u{1b}[0;31mValueError\u{1b}[0m: bad"]},
                    {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo=\n", "text/plain": ["<Figure>"]}},
                    {"output_type": "execute_result", "execution_count": 2, "metadata": {}, "data": {"text/plain": "x".repeat(50)}}
                 ]}
            ]
        })
    }

    #[test]
    fn cells_outputs_and_images_in_order() {
        let limits = Limits {
            output_chars: 10,
            ..Limits::default()
        };
        let r = render(&sample(), limits).unwrap();
        assert_eq!(
            r.text,
            "Jupyter notebook: 2 cells (python), nbformat 4.5\n\
             \n--- cell 1 · id intro · markdown ---\n# Title\ntext\n\
             \n--- cell 2 · id run · code · [2] ---\n```python\nprint(1)\n```\n\
             [stdout]\n1\n\
             [error] ValueError: bad\nValueError\n… (5 more characters of this output not shown)\n\
             [display] (image/png: image 1 of this answer)\n\
             [result]\nxxxxxxxxxx\n… (40 more characters of this output not shown)\n"
        );
        assert_eq!(
            r.images,
            [NotebookImage {
                mime_type: "image/png".into(),
                base64: "iVBORw0KGgo=".into()
            }]
        );
    }

    #[test]
    fn edits_keep_the_shape() {
        let mut nb = sample();
        assert_eq!(
            edit(
                &mut nb,
                Some("run"),
                "x = 1\ny = 2",
                None,
                EditMode::Replace
            )
            .unwrap(),
            "Replaced cell 2 (id run) (code); its outputs were cleared"
        );
        assert_eq!(nb["cells"][1]["source"], json!(["x = 1\n", "y = 2"]));
        assert_eq!(nb["cells"][1]["outputs"], json!([]));
        assert_eq!(nb["cells"][1]["execution_count"], Value::Null);
        edit(
            &mut nb,
            Some("2"),
            "now text",
            Some("markdown"),
            EditMode::Replace,
        )
        .unwrap();
        assert!(nb["cells"][1].get("outputs").is_none());
        let said = edit(&mut nb, None, "first", None, EditMode::Insert).unwrap();
        assert!(said.starts_with("Inserted cell 1 (id "), "{said}");
        assert_eq!(nb["cells"][0]["cell_type"], "code");
        assert_eq!(nb["cells"].as_array().unwrap().len(), 3);
        edit(&mut nb, Some("intro"), "", None, EditMode::Delete).unwrap();
        assert_eq!(nb["cells"].as_array().unwrap().len(), 2);
        let err = edit(&mut nb, Some("nope"), "", None, EditMode::Delete).unwrap_err();
        assert!(
            err.starts_with("no cell `nope`; the cells' ids are "),
            "{err}"
        );
        assert!(edit(&mut nb, None, "", None, EditMode::Replace).is_err());
        assert!(edit(&mut nb, None, "", Some("python"), EditMode::Insert).is_err());
        let mut old = json!({"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": []});
        edit(&mut old, None, "a", Some("raw"), EditMode::Insert).unwrap();
        assert!(old["cells"][0].get("id").is_none(), "4.4 cells have no ids");
        assert!(
            check(&json!({"nbformat": 3, "worksheets": []}))
                .unwrap_err()
                .0
                .contains("nbformat 3")
        );
        let bytes = String::from_utf8(to_bytes(&old, &Kept::default())).unwrap();
        assert!(
            bytes.starts_with("{\n \"cells\": [\n  {\n   \"cell_type\": \"raw\""),
            "{bytes}"
        );
        assert!(bytes.ends_with("}\n"));
    }
}
