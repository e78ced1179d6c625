//! Anthropic's agent toolset (`agent_toolset_20260401`): `bash`, `read`, `write`,
//! `edit`, `glob` and `grep`, with the limits and texts of the Python SDK's
//! reference executor (`anthropic.lib.tools.agent_toolset`).
//!
//! The calls come as `agent.tool_use` events (answered with `user.tool_result`) or,
//! when the toolset is chosen, as `tool_use` blocks. Paths are relative to the root
//! or absolute under it; every call goes through the agent session's own tools.

use jianmu_tool_core::{Image, ToolError};
use serde_json::{Value, json};

use crate::{AGENT_SHELL, Native};

/// Characters (UTF-16 code units) of a `bash` answer before it is cut.
const BASH_OUTPUT_LIMIT: usize = 30_000;
/// Bytes of each stream the agent session's `bash` keeps; a longer stream is cut
/// there and saved whole in the workspace.
pub(crate) const KEPT_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of a saved output, as the reference keeps.
pub(crate) const SAVED_BYTES: usize = 32 * 1024 * 1024;
/// `bash`'s time limit, and the most a call may ask for, in seconds.
const BASH_DEFAULT_TIMEOUT: f64 = 295.0;
/// Most bytes a whole-file `read` returns.
const MAX_READ_BYTES: u64 = 110_000;
/// Most bytes a file `edit` loads, and its result may have.
const MAX_EDIT_BYTES: u64 = 256 * 1024;
/// Most base64 bytes of an image `read` returns.
const MAX_IMAGE_BASE64_BYTES: u64 = 5 * 1024 * 1024;
/// Most bytes of a PDF `read` takes.
const MAX_PDF_BYTES: u64 = 20 * 1024 * 1024;
/// Most characters of the `grep_search` answers `grep` is made from: all of them,
/// never saved to a file (the answer keeps [`GREP_OUTPUT_LIMIT`]).
pub(crate) const GREP_ANSWER: usize = 8 * 1024 * 1024;
/// Most bytes of a `grep` answer.
const GREP_OUTPUT_LIMIT: usize = 100 * 1024;
/// Most paths `glob` answers.
const GLOB_RESULT_LIMIT: u32 = 200;
/// Most matching lines `grep` asks for.
const GREP_MAX_HITS: u32 = 10_000;

const HOW_TO_RESTART: &str = "Call bash with restart set to true to start a new one. It starts in the original working directory, without the old shell's variables, activated environments and background jobs.";

/// What a call answers: text and images, or an error's text.
pub(crate) struct Reply {
    pub(crate) text: String,
    pub(crate) images: Vec<Image>,
}

pub(crate) type Answer = Result<Reply, String>;

fn text(s: impl Into<String>) -> Answer {
    Ok(Reply {
        text: s.into(),
        images: Vec::new(),
    })
}

/// Runs one call of the toolset; `None` when `name` is not one of its tools.
pub(crate) async fn run(native: &Native, name: &str, input: &Value) -> Option<Answer> {
    let answer = match name {
        "bash" => bash(native, input).await,
        "read" => read(native, input).await,
        "write" => write(native, input).await,
        "edit" => edit(native, input).await,
        "glob" => glob(native, input).await,
        "grep" => grep(native, input).await,
        _ => return None,
    };
    Some(answer)
}

/// A `user.tool_result` event answering `id` with `answer`.
pub(crate) fn event_result(id: &str, answer: Answer) -> Value {
    let (content, is_error) = match answer {
        Ok(reply) => {
            let mut content = Vec::new();
            if !reply.text.is_empty() || reply.images.is_empty() {
                content.push(json!({"type": "text", "text": or_no_output(reply.text)}));
            }
            for image in reply.images {
                content.push(image_block(&image));
            }
            (content, false)
        }
        Err(e) => (vec![json!({"type": "text", "text": or_no_output(e)})], true),
    };
    json!({"type": "user.tool_result", "tool_use_id": id, "is_error": is_error, "content": content})
}

pub(crate) fn image_block(image: &Image) -> Value {
    let kind = if image.mime_type == "application/pdf" {
        "document"
    } else {
        "image"
    };
    json!({"type": kind, "source": {"type": "base64", "media_type": image.mime_type, "data": image.base64}})
}

fn or_no_output(text: String) -> String {
    if text.is_empty() {
        "(no output)".to_owned()
    } else {
        text
    }
}

/// A string argument, or the toolset's text for a missing one.
fn required<'a>(input: &'a Value, tool: &str, key: &str) -> Result<&'a str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{tool}: {key} is required"))
}

/// `path` as the model wrote it, relative to the workspace.
fn resolve(native: &Native, tool: &str, path: &str) -> Result<String, String> {
    native
        .workspace_path(path)
        .map_err(|_| format!("{tool}: path \"{path}\" is outside the session's working directory"))
}

/// Most links followed to find what a path names.
const MAX_LINKS: usize = 40;

/// What `rel` names, its links followed (each inside the workspace), as the
/// workspace-relative path of the file or folder itself, its kind and its size; or
/// the toolset's text for a missing path or one that leads outside.
async fn info(
    native: &Native,
    tool: &str,
    rel: &str,
    shown: &str,
) -> Result<(String, String, u64), String> {
    let mut rel = rel.to_owned();
    for _ in 0..=MAX_LINKS {
        let data = match native.agent_call("file_info", json!({"path": &rel})).await {
            Ok(out) => out.structured.unwrap_or_default(),
            Err(e) if e.to_string().contains("does not exist") => {
                return Err(format!("{tool}: {shown}: no such file or directory"));
            }
            Err(e) => return Err(format!("{tool}: {shown}: {e}")),
        };
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "symlink" {
            let size = data.get("size").and_then(Value::as_u64).unwrap_or(0);
            return Ok((rel, kind.to_owned(), size));
        }
        let target = data
            .get("target")
            .and_then(Value::as_str)
            .unwrap_or_default();
        rel = link_target(native, &rel, target).ok_or_else(|| {
            format!("{tool}: path \"{shown}\" is outside the session's working directory")
        })?;
    }
    Err(format!(
        "{tool}: {shown}: too many levels of symbolic links"
    ))
}

/// Where the link at `rel` (workspace-relative) to `target` leads, relative to the
/// workspace; `None` when that is outside it.
fn link_target(native: &Native, rel: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    let rest = if let Some(absolute) = target.strip_prefix('/') {
        // Absolute: under the workspace's real path (or the root the model sees).
        let real = native.workspace_real();
        let under = |base: &str| {
            let base = base.trim_matches('/');
            let rest = absolute.strip_prefix(base)?;
            (rest.is_empty() || rest.starts_with('/')).then_some(rest)
        };
        under(real.trim_start_matches('/')).or_else(|| under(native.root()))?
    } else {
        parts.extend(rel.split('/').filter(|p| !p.is_empty() && *p != "."));
        parts.pop();
        target
    };
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    })
}

/// `bash`: one shell for the conversation, ended by a time limit; `restart`
/// starts a new one.
async fn bash(native: &Native, input: &Value) -> Answer {
    let command = input
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty());
    let mut timeout = BASH_DEFAULT_TIMEOUT;
    if let Some(ms) = input.get("timeout_ms").and_then(Value::as_f64)
        && ms > 0.0
    {
        timeout = (ms / 1000.0).min(timeout);
    }
    if input.get("restart").and_then(Value::as_bool) == Some(true) {
        native
            .agent_call(
                "bash",
                json!({"command": "true", "session": AGENT_SHELL, "reset": true}),
            )
            .await
            .map_err(|e| format!("bash: {e}"))?;
        native.set_agent_shell_gone(false);
        native.drop_saved_output();
        if command.is_none() {
            return text("bash session restarted");
        }
    }
    let Some(command) = command else {
        return Err("bash: command is required".to_owned());
    };
    if native.agent_shell_gone() {
        return Err(format!(
            "[This command did not run, because the shell is gone. {HOW_TO_RESTART}]"
        ));
    }
    let ms = (timeout * 1000.0).round().max(1.0) as u64;
    let args = native.bash_args(command, Some(AGENT_SHELL), Some(ms));
    // The limit `bash` was given: the session's own may be shorter than the one asked.
    let given = args
        .get("timeout")
        .and_then(Value::as_f64)
        .unwrap_or(timeout);
    let root = native.root();
    let (stdout, stderr, code) = match native.agent_call("bash", args).await {
        Ok(out) => {
            let data = out.structured.unwrap_or_default();
            let stream = |k: &str| {
                let cut = data.get(format!("{k}_cut").as_str());
                Stream::parse(data.get(k).and_then(Value::as_str).unwrap_or(""), cut, root)
            };
            let code = data.get("exit_code").and_then(Value::as_i64);
            // A command that ends the shell (`exit`) ends it for the conversation.
            if data.get("shell_ended").and_then(Value::as_bool) == Some(true) {
                native.set_agent_shell_gone(true);
            }
            (stream("stdout"), stream("stderr"), code)
        }
        Err(ToolError::Timeout { partial, .. }) => {
            let partial = partial.unwrap_or_default();
            // `bash` gives stdout, then `[stderr]` and stderr on a line of their own.
            let (out, err) = match partial.strip_prefix("[stderr]\n") {
                Some(err) => ("", err),
                None => match partial.rfind("\n[stderr]\n") {
                    Some(at) => (&partial[..=at], &partial[at + 10..]),
                    None => (partial.as_str(), ""),
                },
            };
            let mut err = Stream::parse(err, None, root);
            err.text
                .push_str(&format!("\ncommand timed out after {}s\n", seconds(given)));
            native.set_agent_shell_gone(true);
            let answer = combine(Some(native), &Stream::parse(out, None, root), &err, false);
            return Err(format!("{answer}\n[The shell is gone. {HOW_TO_RESTART}]"));
        }
        Err(e) => return Err(format!("bash: {e}")),
    };
    let code = code.unwrap_or(-1);
    let mut answer = combine(Some(native), &stdout, &stderr, code == 0);
    if native.agent_shell_gone() {
        answer = format!(
            "{}\n[The shell is gone. {HOW_TO_RESTART}]",
            or_no_output(answer)
        );
    }
    if code == 0 {
        text(answer)
    } else {
        Err(or_no_output(answer))
    }
}

/// `timeout` as Python's `{:g}` writes it.
fn seconds(timeout: f64) -> String {
    format!("{timeout}")
}

/// One stream of a `bash` answer: its text, and, when `bash` cut it, where the
/// whole was saved.
struct Stream {
    text: String,
    cut: bool,
    saved: Option<String>,
}

impl Stream {
    /// One stream of `bash`'s answer: its text (the head it kept, then its note when
    /// it cut the stream, as `cut`, its `stdout_cut` or `stderr_cut`, says).
    fn parse(raw: &str, cut: Option<&Value>, root: &str) -> Self {
        let Some(cut) = cut.filter(|c| c.is_object()) else {
            return Self {
                text: raw.to_owned(),
                cut: false,
                saved: None,
            };
        };
        // No tail is kept: the note ends the text.
        let head = raw.rfind("\n... (").map_or(raw, |at| &raw[..at]);
        let saved = cut
            .get("saved")
            .and_then(Value::as_str)
            .map(|p| format!("{}/{p}", root.trim_end_matches('/')));
        Self {
            text: head.to_owned(),
            cut: true,
            saved,
        }
    }
}

/// The answer of a command: stdout then stderr (stderr first when it failed),
/// escapes removed, cut after [`BASH_OUTPUT_LIMIT`] characters.
fn combine(native: Option<&Native>, stdout: &Stream, stderr: &Stream, ok: bool) -> String {
    let (first, second) = if ok {
        (stdout, stderr)
    } else {
        (stderr, stdout)
    };
    let separator = if stderr.text.is_empty() { "" } else { "\n" };
    let all = format!("{}{separator}{}", first.text, second.text);
    let units = all.encode_utf16().count();
    let cut = first.cut || second.cut;
    if units <= BASH_OUTPUT_LIMIT && !cut {
        return strip_ansi(&all).trim_end_matches('\n').to_owned();
    }
    let mut kept = String::new();
    let mut count = 0;
    for c in all.chars() {
        count += c.len_utf16();
        if count > BASH_OUTPUT_LIMIT {
            break;
        }
        kept.push(c);
    }
    let lines = 1 + all.matches('\n').count() - kept.matches('\n').count();
    let lines = if cut {
        format!("more than {lines}")
    } else {
        lines.to_string()
    };
    let saved = if cut {
        // `bash` saved the streams it cut, whole, in the workspace.
        let saved: Vec<String> = [(stdout, "stdout"), (stderr, "stderr")]
            .iter()
            .filter_map(|(s, name)| s.saved.as_ref().map(|p| format!("{name} saved to: {p}")))
            .collect();
        if saved.is_empty() {
            String::new()
        } else {
            format!(
                "Full {} — use read with view_range to read specific portions. ",
                saved.join(", full ")
            )
        }
    } else {
        match native.and_then(|n| n.save_output(&all)) {
            Some(path) => format!(
                "Full output saved to: {} — use read with view_range to read specific portions. ",
                path.display()
            ),
            None => String::new(),
        }
    };
    format!(
        "{}\n\n... [{lines} lines truncated] {saved}...",
        strip_ansi(&kept)
    )
}

/// `text` without ANSI escape sequences (`ESC [ params intermediates final`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let params = tail
            .find(|c: char| !(c.is_ascii_digit() || c == ';' || c == '?'))
            .unwrap_or(tail.len());
        let after = &tail[params..];
        let inter = after
            .find(|c: char| !(' '..='/').contains(&c))
            .unwrap_or(after.len());
        match after[inter..].chars().next() {
            Some(c) if ('@'..='~').contains(&c) => {
                rest = &after[inter + 1..];
            }
            _ => {
                out.push('\x1b');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The media type of a file `read` returns as a block, by its extension.
fn media_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// `read`: a file's text, or lines `view_range` of it; images as image blocks.
async fn read(native: &Native, input: &Value) -> Answer {
    let file_path = required(input, "read", "file_path")?;
    let range = match input.get("view_range").filter(|r| !r.is_null()) {
        None => None,
        Some(r) => {
            let pair: Vec<i64> = r
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            if pair.len() != 2 || r.as_array().is_some_and(|a| a.len() != 2) {
                if pair.is_empty() && r.as_array().is_some_and(Vec::is_empty) {
                    None
                } else {
                    return Err("read: view_range must be [start_line, end_line]".to_owned());
                }
            } else {
                Some((pair[0], pair[1]))
            }
        }
    };
    if let Some(saved) = native.saved_output(file_path) {
        let whole =
            saved.map_err(|e| format!("read: {file_path}: {}", e.to_string().to_lowercase()))?;
        if whole.len() as u64 > MAX_READ_BYTES && range.is_none() {
            return Err(format!(
                "read: {file_path} is {} bytes, exceeds {MAX_READ_BYTES}-byte limit. Use the view_range parameter to read specific line ranges, e.g. view_range: [1, 500].",
                whole.len()
            ));
        }
        let body = select(&whole, range);
        if body.len() as u64 > MAX_READ_BYTES {
            return Err(over_limit(file_path, range.unwrap_or((1, 0))));
        }
        return text(body);
    }
    let rel = resolve(native, "read", file_path)?;
    let (rel, kind, size) = info(native, "read", &rel, file_path).await?;
    if kind != "file" {
        return Err(format!("read: {file_path}: not a regular file"));
    }
    if let Some(media) = media_type(file_path) {
        if range.is_some() {
            return Err("read: view_range is not supported for image/PDF files".to_owned());
        }
        let limit = if media == "application/pdf" {
            MAX_PDF_BYTES
        } else {
            MAX_IMAGE_BASE64_BYTES / 4 * 3
        };
        if size > limit {
            return Err(format!(
                "read: {file_path} is {size} bytes, exceeds {limit}-byte limit for image/PDF files."
            ));
        }
        let out = native
            .agent_call("read_file", json!({"path": rel}))
            .await
            .map_err(|e| format!("read: {file_path}: {e}"))?;
        return Ok(Reply {
            text: if out.images.is_empty() {
                out.text
            } else {
                String::new()
            },
            images: out.images,
        });
    }
    if size > MAX_READ_BYTES {
        let Some((start, end)) = range else {
            return Err(format!(
                "read: {file_path} is {size} bytes, exceeds {MAX_READ_BYTES}-byte limit. Use the view_range parameter to read specific line ranges, e.g. view_range: [1, 500]."
            ));
        };
        return lines_of_large(native, &rel, file_path, start, end).await;
    }
    match raw_text(native, &rel).await {
        Ok(whole) => text(select(&whole, range)),
        Err(Raw::NotText) => Err(format!(
            "read: {file_path}: not valid UTF-8 text (binary files are only supported for image/PDF extensions)"
        )),
        Err(Raw::Failed(e)) => Err(format!("read: {file_path}: {e}")),
    }
}

/// Lines `[start, end]` of `whole` (`end` 0 or less: to the end), as Python's
/// `"\n".join(text.split("\n")[start - 1:end])`; all of it without a range.
fn select(whole: &str, range: Option<(i64, i64)>) -> String {
    let Some((start, end)) = range else {
        return whole.to_owned();
    };
    let all: Vec<&str> = whole.split('\n').collect();
    let from = usize::try_from(start.saturating_sub(1).max(0)).unwrap_or(0);
    let to = if end > 0 {
        usize::try_from(end).unwrap_or(usize::MAX)
    } else {
        all.len()
    }
    .min(all.len());
    if from < to {
        all[from..to].join("\n")
    } else {
        String::new()
    }
}

/// The toolset's text for a range over the read limit.
fn over_limit(file_path: &str, (start, end): (i64, i64)) -> String {
    if end > 0 && end == start.max(1) {
        return format!(
            "read: line {} of {file_path} alone exceeds {MAX_READ_BYTES}-byte limit. The read tool cannot return part of a line, so view_range cannot narrow this further.",
            start.max(1)
        );
    }
    format!(
        "read: view_range [{start}, {end}] of {file_path} exceeds {MAX_READ_BYTES}-byte limit. Narrow the view_range to read a smaller portion."
    )
}

/// Lines `[start, end]` of a file over the whole-read limit, at most
/// [`MAX_READ_BYTES`] of them.
async fn lines_of_large(
    native: &Native,
    rel: &str,
    file_path: &str,
    start: i64,
    end: i64,
) -> Answer {
    let first = start.max(1);
    let last = if end > 0 { Some(end) } else { None };
    if last.is_some_and(|last| last < first) {
        return text("");
    }
    let mut args = json!({"path": rel, "offset": first, "line_numbers": false});
    if let Some(last) = last {
        args["limit"] = json!(last - first + 1);
    }
    let not_text = || {
        format!(
            "read: {file_path}: not valid UTF-8 text (binary files are only supported for image/PDF extensions)"
        )
    };
    let out = native.agent_call("read_file", args).await.map_err(|e| {
        let e = e.to_string();
        if e.contains("UTF-8") {
            not_text()
        } else {
            format!("read: {file_path}: {e}")
        }
    })?;
    let data = out.structured.unwrap_or_default();
    if data.get("binary").and_then(Value::as_bool) == Some(true) {
        return Err(not_text());
    }
    let got = usize::try_from(data.get("lines").and_then(Value::as_u64).unwrap_or(0)).unwrap_or(0);
    let window_cut = data.get("cut").and_then(Value::as_bool) == Some(true);
    let all: Vec<&str> = out.text.split('\n').collect();
    let mut body = all[..got.min(all.len())].join("\n");
    // Past the last line break is one more, empty line, as `split` counts lines.
    let total = data.get("total_lines").and_then(Value::as_u64).unwrap_or(0);
    let past_end = last.is_none_or(|last| u64::try_from(last).unwrap_or(0) > total);
    if past_end && data.get("end_newline").and_then(Value::as_bool) == Some(true) {
        body.push('\n');
    }
    if window_cut || body.len() as u64 > MAX_READ_BYTES {
        return Err(over_limit(file_path, (start, end)));
    }
    text(body)
}

/// Why a file's text could not be read.
enum Raw {
    /// Binary, or not UTF-8.
    NotText,
    Failed(String),
}

/// The file's whole text, byte for byte (a notebook's JSON, not its cells).
async fn raw_text(native: &Native, rel: &str) -> Result<String, Raw> {
    let out = native
        .agent_call(
            "read_file",
            json!({"path": rel, "offset": 1, "line_numbers": false}),
        )
        .await
        .map_err(|e| {
            let e = e.to_string();
            if e.contains("UTF-8") {
                Raw::NotText
            } else {
                Raw::Failed(e)
            }
        })?;
    let data = out.structured.unwrap_or_default();
    if data.get("binary").and_then(Value::as_bool) == Some(true) {
        return Err(Raw::NotText);
    }
    Ok(out.text)
}

/// `write`: the whole file, folders made as needed.
async fn write(native: &Native, input: &Value) -> Answer {
    let file_path = required(input, "write", "file_path")?;
    let content = required(input, "write", "content")?;
    let rel = resolve(native, "write", file_path)?;
    native
        .agent_call("write_file", json!({"path": rel, "content": content}))
        .await
        .map_err(|e| format!("write: {file_path}: {e}"))?;
    text(format!(
        "wrote {} bytes to {file_path}",
        content.chars().count()
    ))
}

/// `edit`: replaces `old_string` once (it must be unique) or everywhere.
async fn edit(native: &Native, input: &Value) -> Answer {
    let file_path = required(input, "edit", "file_path")?;
    let old = required(input, "edit", "old_string")?;
    let new = required(input, "edit", "new_string")?;
    let all = input.get("replace_all").and_then(Value::as_bool) == Some(true);
    let rel = resolve(native, "edit", file_path)?;
    let (rel, kind, size) = info(native, "edit", &rel, file_path).await?;
    if kind != "file" {
        return Err(format!("edit: {file_path}: not a regular file"));
    }
    if size > MAX_EDIT_BYTES {
        return Err(format!(
            "edit: {file_path} is {size} bytes, exceeds {MAX_EDIT_BYTES}-byte limit. The edit tool loads the whole file and cannot modify a file this large."
        ));
    }
    let content = match raw_text(native, &rel).await {
        Ok(content) => content,
        Err(Raw::NotText) => {
            return Err(format!(
                "edit: {file_path}: not valid UTF-8 text (cannot edit binary files)"
            ));
        }
        Err(Raw::Failed(e)) => return Err(format!("edit: {file_path}: {e}")),
    };
    // As Python's `str.count`: an empty string occurs before every character and at the end.
    let count = if old.is_empty() {
        content.chars().count() + 1
    } else {
        content.matches(old).count()
    };
    if count == 0 {
        return Err(format!("edit: old_string not found in {file_path}"));
    }
    if !all && count > 1 {
        return Err(format!(
            "edit: old_string appears {count} times in {file_path} (must be unique)"
        ));
    }
    if count > 1 {
        let grown = size as i128 + count as i128 * (new.len() as i128 - old.len() as i128);
        if grown > i128::from(MAX_EDIT_BYTES) {
            return Err(format!(
                "edit: {count} replacements would make {file_path} {grown} bytes, exceeds {MAX_EDIT_BYTES}-byte limit."
            ));
        }
    }
    // Replaced here, as Python's `str.replace` does, and written back byte for byte.
    let updated = if old.is_empty() {
        if all {
            let mut s = String::with_capacity(content.len() + count * new.len());
            for c in content.chars() {
                s.push_str(new);
                s.push(c);
            }
            s.push_str(new);
            s
        } else {
            format!("{new}{content}")
        }
    } else if all {
        content.replace(old, new)
    } else {
        content.replacen(old, new, 1)
    };
    native
        .agent_call("write_file", json!({"path": &rel, "content": updated}))
        .await
        .map_err(|e| format!("edit: {file_path}: {e}"))?;
    text(format!(
        "edited {file_path} ({} replacement(s))",
        if all { count } else { 1 }
    ))
}

/// `glob`: paths matching a relative glob under `path`, newest first.
async fn glob(native: &Native, input: &Value) -> Answer {
    let pattern = required(input, "glob", "pattern")?;
    if pattern.is_empty() {
        return Err("glob: Unacceptable pattern: ''".to_owned());
    }
    if pattern.starts_with('/') {
        return Err(
            "glob: absolute pattern not permitted; pass a relative pattern (and optionally path)"
                .to_owned(),
        );
    }
    if pattern.split('/').any(|part| part == "..") {
        return Err("glob: '..' is not permitted in the pattern".to_owned());
    }
    let path = input
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let rel = match path {
        Some(p) => resolve(native, "glob", p)?,
        None => ".".to_owned(),
    };
    // Matched against the path below `path`, as `Path.glob` does: `*.py` only there.
    let anchored = format!("./{}", pattern.trim_start_matches("./"));
    let out = match native
        .agent_call(
            "glob_search",
            json!({"path": rel, "pattern": anchored, "include_hidden": true,
                   "newest_first": true, "limit": GLOB_RESULT_LIMIT}),
        )
        .await
    {
        Ok(out) => out,
        // Under a file or a missing folder, `Path.glob` finds nothing.
        Err(e)
            if e.to_string().contains("not a directory")
                || e.to_string().contains("does not exist") =>
        {
            return text("no matches");
        }
        Err(e) => return Err(format!("glob: {e}")),
    };
    let data = out.structured.unwrap_or_default();
    let root = native.root().trim_end_matches('/');
    let paths: Vec<String> = data
        .get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|p| format!("{root}/{}", p.trim_end_matches('/')))
                .collect()
        })
        .unwrap_or_default();
    if paths.is_empty() {
        return text("no matches");
    }
    text(paths.join("\n"))
}

/// `grep`: lines matching a regular expression, as `rg -n --no-heading` prints them
/// (the reference executor uses `rg` when it finds one).
async fn grep(native: &Native, input: &Value) -> Answer {
    let pattern = required(input, "grep", "pattern")?;
    let path = input
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let rel = match path {
        Some(p) => resolve(native, "grep", p)?,
        None => ".".to_owned(),
    };
    let (rel, kind, _) = info(native, "grep", &rel, path.unwrap_or(".")).await?;
    // A file is searched as its folder, narrowed to its name there.
    let (folder, only) = if kind == "file" {
        match rel.rsplit_once('/') {
            Some((dir, name)) => (dir.to_owned(), Some(name.to_owned())),
            None => (".".to_owned(), Some(rel.clone())),
        }
    } else {
        (rel.clone(), None)
    };
    let mut args = json!({"query": pattern, "path": folder, "regex": true, "limit": GREP_MAX_HITS});
    if let Some(name) = &only {
        args["glob"] = json!(glob_for(name));
    }
    let out = native.agent_call("grep_search", args).await.map_err(|e| {
        let e = e.to_string();
        if e.contains("regex") || e.contains("regular expression") {
            format!("grep: invalid regex: {e}")
        } else {
            format!("grep: {e}")
        }
    })?;
    let data = out.structured.unwrap_or_default();
    let root = native.root().trim_end_matches('/');
    let mut lines = Vec::new();
    for hit in data
        .get("matches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let file = hit.get("path").and_then(Value::as_str).unwrap_or("");
        let line = hit.get("line").and_then(Value::as_u64).unwrap_or(0);
        let body = hit.get("text").and_then(Value::as_str).unwrap_or("");
        // As `rg` prints them: a file searched alone without its name.
        if only.is_some() {
            lines.push(format!("{line}:{body}"));
        } else {
            lines.push(format!("{root}/{file}:{line}:{body}"));
        }
    }
    if lines.is_empty() {
        return text("no matches");
    }
    let mut out = lines.join("\n");
    out.push('\n');
    let total = data.get("total").and_then(Value::as_u64).unwrap_or(0);
    if total > lines.len() as u64 && out.len() <= GREP_OUTPUT_LIMIT {
        out.push_str(&format!(
            "[output truncated: the first {} of {total} matching lines are shown]",
            lines.len()
        ));
    }
    if out.len() > GREP_OUTPUT_LIMIT {
        let mut end = GREP_OUTPUT_LIMIT;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str(&format!(
            "\n[output truncated at {GREP_OUTPUT_LIMIT} bytes]"
        ));
    }
    text(out)
}

/// A glob (as `rg -g` takes it) that matches only the file `name` directly in the
/// folder searched: anchored, every special character escaped.
fn glob_for(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    out.push('/');
    for c in name.chars() {
        if matches!(
            c,
            '*' | '?' | '[' | ']' | '{' | '}' | '\\' | ' ' | '!' | '#'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_removed() {
        assert_eq!(
            strip_ansi("\x1b[31mred\x1b[0m plain \x1b"),
            "red plain \x1b"
        );
        assert_eq!(strip_ansi("a\x1b[?25lb"), "ab");
    }

    #[test]
    fn long_output_is_cut_at_the_limit_with_a_line_count() {
        let line = "x".repeat(99);
        let all: Vec<String> = (0..1000).map(|_| line.clone()).collect();
        let stdout = Stream {
            text: all.join("\n"),
            cut: false,
            saved: None,
        };
        let stderr = Stream {
            text: String::new(),
            cut: false,
            saved: None,
        };
        let out = combine(None, &stdout, &stderr, true);
        // 300 whole lines of 100 characters; lines 301-1000 are cut.
        assert!(
            out.ends_with("\n\n... [700 lines truncated] ..."),
            "{}",
            &out[out.len() - 60..]
        );
        assert_eq!(
            out.encode_utf16().count(),
            30_000 + "\n\n... [700 lines truncated] ...".len()
        );
    }
}
