//! Anthropic's client tools: `bash`, the text editor and `memory`, and any other
//! tool of the session by its name.

use std::sync::Arc;

use jianmu_runtime::Session;
use jianmu_tool_core::{Image, ToolOutput};
use serde_json::{Value, json};

use crate::text::{self, human, lines, number_list, numbered, occurrence_lines};
use crate::{ANTHROPIC_SHELL, Native, NotACall, agent};

/// The names the text editor has had.
const EDITOR: [&str; 2] = ["str_replace_based_edit_tool", "str_replace_editor"];
/// The folder every memory path is under.
const MEMORIES: &str = "/memories";
/// Lines shown around an edit.
const SNIPPET: usize = 4;
/// Most entries a folder view lists.
const MAX_LISTED: u32 = 1000;
/// Most entries a folder's delete or rename changes at once (one patch: the memory
/// session's patches take as many files).
pub(crate) const MAX_CHANGED: u32 = 10_000;
/// A folder's entries and theirs: what a folder view shows.
const TWO_LEVELS: &str = "{*,*/*}";

/// What a call answers: text and images, or an error's text.
type Answer = Result<Reply, String>;

struct Reply {
    text: String,
    images: Vec<Image>,
}

impl From<String> for Reply {
    fn from(text: String) -> Self {
        Self {
            text,
            images: Vec::new(),
        }
    }
}

impl From<ToolOutput> for Reply {
    fn from(out: ToolOutput) -> Self {
        Self {
            text: out.text,
            images: out.images,
        }
    }
}

pub(crate) async fn execute(native: &Native, item: &Value) -> Result<Value, NotACall> {
    let Some(obj) = item.as_object() else {
        return Err(NotACall(
            "expected a JSON object (a `tool_use` block)".into(),
        ));
    };
    let kind = obj.get("type").and_then(Value::as_str);
    if !matches!(
        kind,
        Some("tool_use" | "agent.tool_use" | "agent.custom_tool_use")
    ) {
        return Err(NotACall(format!(
            "expected `\"type\": \"tool_use\"` (or an `agent.tool_use` event), not {}",
            obj.get("type").map_or("none".to_owned(), Value::to_string)
        )));
    }
    let (Some(id), Some(name)) = (
        obj.get("id").and_then(Value::as_str),
        obj.get("name").and_then(Value::as_str),
    ) else {
        return Err(NotACall(format!(
            "a `{}` item has a string `id` and `name`",
            kind.unwrap_or_default()
        )));
    };
    let input = obj.get("input").cloned().unwrap_or_else(|| json!({}));
    if !input.is_object() {
        return Err(NotACall("a tool call's `input` is an object".into()));
    }
    if kind == Some("agent.tool_use") {
        let permission = obj.get("evaluated_permission").and_then(Value::as_str);
        let answer = match permission {
            Some("deny") => Err(format!(
                "{name}: not run: the session's permission policy denied this call"
            )),
            Some("ask") => Err(format!(
                "{name}: not run: this call waits for the user's confirmation, which is not given here; allow the tool in the agent's permission policy"
            )),
            _ => {
                let work = async {
                    match agent::run(native, name, &input).await {
                        Some(answer) => answer,
                        None => Err(format!(
                            "{name}: not a tool of agent_toolset_20260401 (bash, read, write, edit, glob, grep)"
                        )),
                    }
                };
                native
                    .within(work)
                    .await
                    .unwrap_or_else(|stopped| Err(format!("{name}: {stopped}")))
            }
        };
        return Ok(agent::event_result(id, answer));
    }
    let work = async {
        if native.agent_toolset
            && let Some(answer) = agent::run(native, name, &input).await
        {
            return answer.map(|r| Reply {
                text: r.text,
                images: r.images,
            });
        }
        match name {
            "bash" => bash(native, &input).await,
            name if EDITOR.contains(&name) => editor(native, &input).await,
            "memory" => memory(native, &input).await,
            other => native
                .call(other, input)
                .await
                .map(Reply::from)
                .map_err(|e| e.to_string()),
        }
    };
    let answer = native
        .within(work)
        .await
        .unwrap_or_else(|stopped| Err(format!("Error: {stopped}")));
    if kind == Some("agent.custom_tool_use") {
        let mut event = agent::event_result(
            id,
            answer.map(|r| agent::Reply {
                text: r.text,
                images: r.images,
            }),
        );
        event["type"] = json!("user.custom_tool_result");
        if let Some(map) = event.as_object_mut() {
            map.remove("tool_use_id");
            map.insert("custom_tool_use_id".into(), json!(id));
        }
        return Ok(event);
    }
    Ok(result(id, answer))
}

/// The `tool_result` block for `answer`.
fn result(id: &str, answer: Answer) -> Value {
    match answer {
        Ok(reply) if reply.images.is_empty() => {
            json!({"type": "tool_result", "tool_use_id": id, "content": reply.text})
        }
        Ok(reply) => {
            let mut content = Vec::new();
            if !reply.text.is_empty() {
                content.push(json!({"type": "text", "text": reply.text}));
            }
            for image in reply.images {
                content.push(json!({
                    "type": "image",
                    "source": {"type": "base64", "media_type": image.mime_type, "data": image.base64},
                }));
            }
            json!({"type": "tool_result", "tool_use_id": id, "content": content})
        }
        Err(text) => {
            json!({"type": "tool_result", "tool_use_id": id, "content": text, "is_error": true})
        }
    }
}

fn arg<'a>(input: &'a Value, key: &str, command: &str) -> Result<&'a str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("Parameter `{key}` is required for command: {command}"))
}

/// `bash`: one shell for the conversation; `restart` starts it afresh.
async fn bash(native: &Native, input: &Value) -> Answer {
    let restart = input.get("restart").and_then(Value::as_bool) == Some(true);
    let command = input
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty());
    if restart {
        native
            .call(
                "bash",
                json!({"command": "true", "session": ANTHROPIC_SHELL, "reset": true}),
            )
            .await
            .map_err(|e| e.to_string())?;
        if command.is_none() {
            return Ok("tool has been restarted.".to_owned().into());
        }
    }
    let Some(command) = command else {
        return Err("no command provided.".to_owned());
    };
    let args = native.bash_args(command, Some(ANTHROPIC_SHELL), None);
    let out = native.call("bash", args).await.map_err(|e| e.to_string())?;
    let data = out.structured.as_ref();
    if data
        .and_then(|d| d.get("exit_code"))
        .and_then(Value::as_i64)
        != Some(0)
    {
        // `bash` (with `nonzero_exit = "result"`) already says stdout, stderr and
        // `Exit code: N`, or that a signal ended it.
        return Err(out.text);
    }
    let part = |k: &str| {
        data.and_then(|d| d.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let mut text = part("stdout").to_owned();
    let stderr = part("stderr");
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(stderr);
    }
    if text.is_empty() {
        text.push_str("(no output)");
    }
    Ok(text.into())
}

/// The text editor: `view`, `create`, `str_replace`, `insert`.
async fn editor(native: &Native, input: &Value) -> Answer {
    let command = input
        .get("command")
        .and_then(Value::as_str)
        .ok_or("Parameter `command` is required: one of view, create, str_replace, insert")?;
    let path = arg(input, "path", command)?;
    let rel = native.workspace_path(path)?;
    let session = &native.session;
    match command {
        "view" => {
            let (kind, _) = info(session, &rel, path).await?;
            if kind == "directory" {
                if input.get("view_range").is_some() {
                    return Err("The `view_range` parameter is not allowed when `path` points to a directory.".to_owned());
                }
                let listed = listing(session, &rel, native.root()).await?;
                return Ok(format!(
                    "Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n{path}\n{listed}"
                )
                .into());
            }
            let range = input.get("view_range").filter(|r| !r.is_null());
            let out = match read(session, &rel).await {
                // Too large to read whole: a `view_range` reads only its lines.
                Err(e) if e.contains("read it in windows") => match range {
                    Some(range) => {
                        let body = ranged_window(session, &rel, range).await?;
                        let mut text =
                            format!("Here's the result of running `cat -n` on {path}:\n{body}");
                        if let Some(max) = native.max_characters {
                            text = head(&text, max);
                        }
                        return Ok(text.into());
                    }
                    None => {
                        return Err(format!(
                            "{} is too large to view whole; view part of it with `view_range` [start, end] (lines, from 1).",
                            path
                        ));
                    }
                },
                other => other?,
            };
            if !out.images.is_empty() {
                return Ok(out.into());
            }
            let body = ranged(&out.text, range)?;
            let mut text = format!("Here's the result of running `cat -n` on {path}:\n{body}");
            if let Some(max) = native.max_characters {
                text = head(&text, max);
            }
            Ok(text.into())
        }
        "create" => {
            let content = arg(input, "file_text", command)?;
            native
                .call("write_file", json!({"path": rel, "content": content}))
                .await
                .map_err(|e| e.to_string())?;
            Ok(format!("File created successfully at: {path}").into())
        }
        "str_replace" => {
            let (new_text, first) = replace(session, &rel, path, input, Voice::Editor).await?;
            Ok(format!(
                "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n{}Review the changes and make sure they are as expected. Edit the file again if necessary.",
                snippet(&new_text, first, new_len(input, "new_str"))
            )
            .into())
        }
        "insert" => {
            let (new_text, first) = insert(session, &rel, input, Voice::Editor).await?;
            Ok(format!(
                "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{}Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.",
                snippet(&new_text, first, new_len(input, "insert_text").max(new_len(input, "new_str")))
            )
            .into())
        }
        "undo_edit" => Err("The `undo_edit` command is not available in this version of the text editor; make the reverse edit with `str_replace`.".to_owned()),
        other => Err(format!(
            "Unrecognized command {other}. The allowed commands for the str_replace_based_edit_tool tool are: view, create, str_replace, insert"
        )),
    }
}

/// `memory`: files under `/memories`, in a folder of their own.
async fn memory(native: &Native, input: &Value) -> Answer {
    let command = input.get("command").and_then(Value::as_str).ok_or(
        "Error: Parameter `command` is required: one of view, create, str_replace, insert, delete, rename",
    )?;
    let session = native.memory()?;
    let session = &session;
    let path = if command == "rename" {
        arg(input, "old_path", command)?
    } else {
        arg(input, "path", command)?
    };
    let rel = memory_path(path)?;
    let missing = || format!("Error: The path {path} does not exist. Please provide a valid path.");
    let found = info(session, &rel, path).await.ok();
    let kind = found.as_ref().map(|(kind, _)| kind.clone());
    match command {
        "view" => match found.as_ref().map(|(kind, size)| (kind.as_str(), size)) {
            Some(("directory", size)) => {
                let found = glob(session, &rel, TWO_LEVELS, false, MAX_LISTED).await?;
                let mut listed = vec![format!("{}\t{path}", human(*size))];
                for entry in found
                    .paths
                    .iter()
                    .filter(|e| !e.split('/').any(|p| p == "node_modules"))
                {
                    let entry = entry.trim_end_matches('/');
                    let size = info(session, entry, entry).await.map_or(0, |(_, s)| s);
                    listed.push(format!("{}\t{MEMORIES}/{entry}", human(size)));
                }
                listed.extend(found.left_out());
                Ok(format!(
                    "Here're the files and directories up to 2 levels deep in {path}, excluding hidden items and node_modules:\n{}",
                    listed.join("\n")
                )
                .into())
            }
            Some(_) => {
                let out = read(session, &rel).await?;
                let body = ranged(&out.text, input.get("view_range"))?;
                Ok(format!("Here's the content of {path} with line numbers:\n{body}").into())
            }
            None => Err(missing()),
        },
        "create" => {
            let content = arg(input, "file_text", command)?;
            if kind.is_some() {
                return Err(format!("Error: File {path} already exists"));
            }
            session
                .call("write_file", json!({"path": rel, "content": content}))
                .await
                .map_err(|e| format!("Error: {e}"))?;
            Ok(format!("File created successfully at: {path}").into())
        }
        "str_replace" => {
            if kind.is_none() {
                return Err(missing());
            }
            let (new_text, first) = replace(session, &rel, path, input, Voice::Memory).await?;
            Ok(format!(
                "The memory file has been edited.\n{}",
                snippet(&new_text, first, new_len(input, "new_str"))
            )
            .into())
        }
        "insert" => {
            if kind.is_none() {
                return Err(missing());
            }
            insert(session, &rel, input, Voice::Memory).await?;
            Ok(format!("The file {path} has been edited.").into())
        }
        "delete" => {
            if rel == "." {
                return Err(format!(
                    "Error: {MEMORIES} itself cannot be deleted; delete what is in it"
                ));
            }
            let Some(kind) = kind else {
                return Err(format!("Error: The path {path} does not exist"));
            };
            let files = files_at(session, &rel, &kind).await?;
            let ops: String = files
                .iter()
                .map(|f| format!("*** Delete File: {f}\n"))
                .collect();
            patch(session, &ops).await?;
            Ok(format!("Successfully deleted {path}").into())
        }
        "rename" => {
            let new_path = arg(input, "new_path", command)?;
            let new_rel = memory_path(new_path)?;
            let Some(kind) = kind else {
                return Err(format!("Error: The path {path} does not exist"));
            };
            if rel == "." || new_rel == "." {
                return Err(format!("Error: {MEMORIES} itself cannot be renamed"));
            }
            if info(session, &new_rel, new_path).await.is_ok() {
                return Err(format!("Error: The destination {new_path} already exists"));
            }
            let files = files_at(session, &rel, &kind).await?;
            let ops: String = files
                .iter()
                .map(|f| {
                    let to = format!("{new_rel}{}", &f[rel.len()..]);
                    format!("*** Update File: {f}\n*** Move to: {to}\n")
                })
                .collect();
            patch(session, &ops).await?;
            Ok(format!("Successfully renamed {path} to {new_path}").into())
        }
        other => Err(format!(
            "Error: Unrecognized command {other}. The allowed commands for the memory tool are: view, create, str_replace, insert, delete, rename"
        )),
    }
}

fn memory_path(path: &str) -> Result<String, String> {
    text::under(MEMORIES, path).ok_or_else(|| {
        format!("Error: The path {path} is outside {MEMORIES}: every memory path starts with {MEMORIES}/.")
    })
}

/// What `rel` is (`file`, `directory`, …) and its size, or the vendor's text for a
/// missing path.
async fn info(session: &Session, rel: &str, shown: &str) -> Result<(String, u64), String> {
    match session.call("file_info", json!({"path": rel})).await {
        Ok(out) => {
            let data = out.structured.unwrap_or_default();
            let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
            let size = data.get("size").and_then(Value::as_u64).unwrap_or(0);
            Ok((kind.to_owned(), size))
        }
        Err(e) => {
            let text = e.to_string();
            if text.contains("does not exist") {
                Err(format!(
                    "The path {shown} does not exist. Please provide a valid path."
                ))
            } else {
                Err(text)
            }
        }
    }
}

/// What one `glob_search` found: workspace-relative paths (folders end in `/`) and
/// how many matched in all.
struct Found {
    paths: Vec<String>,
    total: u64,
}

impl Found {
    /// A line saying how many entries were left out, if any were.
    fn left_out(&self) -> Option<String> {
        let shown = self.paths.len() as u64;
        (self.total > shown).then(|| {
            format!(
                "(only the first {shown} of {} entries are listed: view a subfolder to see more)",
                self.total
            )
        })
    }
}

/// The paths matching `pattern` under `rel`, at most `limit`.
async fn glob(
    session: &Session,
    rel: &str,
    pattern: &str,
    hidden: bool,
    limit: u32,
) -> Result<Found, String> {
    let out = session
        .call(
            "glob_search",
            json!({"path": rel, "pattern": pattern, "include_hidden": hidden, "limit": limit}),
        )
        .await
        .map_err(|e| e.to_string())?;
    let data = out.structured.unwrap_or_default();
    let paths = data
        .get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let total = data.get("total").and_then(Value::as_u64).unwrap_or(0);
    Ok(Found { paths, total })
}

/// The folder's entries two levels deep, as absolute paths the model sees.
async fn listing(session: &Arc<Session>, rel: &str, root: &str) -> Result<String, String> {
    let found = glob(session, rel, TWO_LEVELS, false, MAX_LISTED).await?;
    let root = root.trim_end_matches('/');
    let mut out = String::new();
    for entry in &found.paths {
        out.push_str(&format!("{root}/{}\n", entry.trim_end_matches('/')));
    }
    if let Some(note) = found.left_out() {
        out.push_str(&note);
        out.push('\n');
    }
    Ok(out)
}

/// The files a delete or rename of `rel` touches: itself, or every file in it.
async fn files_at(session: &Session, rel: &str, kind: &str) -> Result<Vec<String>, String> {
    if kind != "directory" {
        return Ok(vec![rel.to_owned()]);
    }
    let found = glob(session, rel, "*", true, MAX_CHANGED)
        .await
        .map_err(|e| format!("Error: {e}"))?;
    if found.total > u64::from(MAX_CHANGED) {
        return Err("Error: the folder holds over 10,000 entries; change it in parts".to_owned());
    }
    let files: Vec<String> = found
        .paths
        .into_iter()
        .filter(|p| !p.ends_with('/'))
        .collect();
    if files.is_empty() {
        return Err("Error: the folder holds no file; nothing to change".to_owned());
    }
    Ok(files)
}

async fn patch(session: &Session, ops: &str) -> Result<(), String> {
    session
        .call(
            "apply_patch",
            json!({"patch": format!("*** Begin Patch\n{ops}*** End Patch")}),
        )
        .await
        .map(drop)
        .map_err(|e| format!("Error: {e}"))
}

async fn read(session: &Session, rel: &str) -> Result<ToolOutput, String> {
    session
        .call("read_file", json!({"path": rel, "line_numbers": false}))
        .await
        .map_err(|e| e.to_string())
}

/// The file's lines numbered, all or `view_range` `[start, end]` (`end` -1: to the end).
fn ranged(content: &str, range: Option<&Value>) -> Result<String, String> {
    let all = lines(content);
    let Some(range) = range.filter(|r| !r.is_null()) else {
        return Ok(numbered(&all, 1));
    };
    let (start, end) = view_range(range)?;
    check_range(start, end, all.len() as i64)?;
    let from = usize::try_from(start - 1).unwrap_or(0).min(all.len());
    let to = if end == -1 {
        all.len()
    } else {
        usize::try_from(end).unwrap_or(0).min(all.len())
    };
    Ok(numbered(&all[from..to], from + 1))
}

/// `view_range`'s two numbers, or the reference's text for a malformed one.
fn view_range(range: &Value) -> Result<(i64, i64), String> {
    let bad = || "Invalid `view_range`. It should be a list of two integers.".to_owned();
    let pair = range.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    match (pair[0].as_i64(), pair[1].as_i64()) {
        (Some(start), Some(end)) => Ok((start, end)),
        _ => Err(bad()),
    }
}

/// Whether `[start, end]` is a range of a file of `n` lines, in the reference's
/// words when it is not.
fn check_range(start: i64, end: i64, n: i64) -> Result<(), String> {
    let shown = format!("[{start}, {end}]");
    if start < 1 || start > n.max(1) {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its first element `{start}` should be within the range of lines of the file: [1, {n}]"
        ));
    }
    if end != -1 && end > n {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its second element `{end}` should be smaller than the number of lines in the file: `{n}`"
        ));
    }
    if end != -1 && end < start {
        return Err(format!(
            "Invalid `view_range`: {shown}. Its second element `{end}` should be larger or equal than its first `{start}`"
        ));
    }
    Ok(())
}

/// The lines `range` asks for of a file too large to read whole, read as a window
/// of `read_file` (which stops at its size limit, and says so), numbered; the same
/// checks and texts as [`ranged`].
async fn ranged_window(session: &Session, rel: &str, range: &Value) -> Result<String, String> {
    let (start, end) = view_range(range)?;
    let first = u64::try_from(start).unwrap_or(0).max(1);
    // The lines asked for, when the range ends (checked: the range is not yet).
    let count = end
        .checked_sub(start)
        .and_then(|d| d.checked_add(1))
        .filter(|&c| end != -1 && c > 0);
    let mut args = json!({"path": rel, "offset": first, "line_numbers": false});
    if let Some(count) = count {
        args["limit"] = json!(count);
    }
    let out = session
        .call("read_file", args)
        .await
        .map_err(|e| e.to_string())?;
    let data = out.structured.unwrap_or_default();
    let number = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (n, got) = (number("total_lines"), number("lines"));
    check_range(start, end, i64::try_from(n).unwrap_or(i64::MAX))?;
    if got == 0 {
        return Err(format!(
            "Line {first} is longer than one read can hold; it cannot be viewed here."
        ));
    }
    let all = lines(&out.text);
    let kept = &all[..usize::try_from(got).unwrap_or(0).min(all.len())];
    let mut body = numbered(kept, usize::try_from(first).unwrap_or(1));
    let wanted = count.map_or(n + 1 - first, |c| u64::try_from(c).unwrap_or(0));
    if got < wanted {
        let next = first + got;
        body.push_str(&format!(
            "[Only lines {first}-{} are shown: the rest is over the size of one read. View from line {next} with `view_range` [{next}, {end}].]\n",
            next - 1,
        ));
    }
    Ok(body)
}

/// `text` cut to `max` characters, with the cut said.
fn head(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push_str(&format!(
        "\n[Cut at {max} of {total} characters (max_characters): view the rest with `view_range`.]"
    ));
    out
}

/// Which tool's wording an edit's errors take: the two word them slightly apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Voice {
    Editor,
    Memory,
}

impl Voice {
    /// What starts an error.
    fn prefix(self) -> &'static str {
        match self {
            Voice::Editor => "",
            Voice::Memory => "Error: ",
        }
    }

    /// What comes before a list of line numbers.
    fn lines(self) -> &'static str {
        match self {
            Voice::Editor => "lines",
            Voice::Memory => "lines:",
        }
    }
}

/// Replaces the one `old_str` of the file; returns the new text and the (0-based)
/// line the change starts on.
async fn replace(
    session: &Session,
    rel: &str,
    path: &str,
    input: &Value,
    voice: Voice,
) -> Result<(String, usize), String> {
    let old = arg(input, "old_str", "str_replace")?;
    let new = input.get("new_str").and_then(Value::as_str).unwrap_or("");
    let (prefix, lines_word) = (voice.prefix(), voice.lines());
    if old.is_empty() {
        return Err(format!(
            "{prefix}No replacement was performed: `old_str` is empty; give the exact text to replace"
        ));
    }
    let content = read(session, rel).await?.text;
    let hits = occurrence_lines(&content, old);
    match hits.len() {
        0 => {
            return Err(format!(
                "{prefix}No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
            ));
        }
        1 => {}
        _ => {
            return Err(format!(
                "{prefix}No replacement was performed. Multiple occurrences of old_str `{old}` in {lines_word} {}. Please ensure it is unique",
                number_list(&hits)
            ));
        }
    }
    session
        .call(
            "edit_file",
            json!({"path": rel, "edits": [{"old": old, "new": new, "expected_count": 1}]}),
        )
        .await
        .map_err(|e| format!("{prefix}{e}"))?;
    Ok((content.replacen(old, new, 1), hits[0] - 1))
}

/// Inserts `insert_text` (or `new_str`) after line `insert_line` (0: at the top).
async fn insert(
    session: &Session,
    rel: &str,
    input: &Value,
    voice: Voice,
) -> Result<(String, usize), String> {
    let prefix = voice.prefix();
    let line = input
        .get("insert_line")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            format!("{prefix}Parameter `insert_line` is required for command: insert")
        })?;
    let added = input
        .get("insert_text")
        .or_else(|| input.get("new_str"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("{prefix}Parameter `insert_text` is required for command: insert")
        })?;
    let content = read(session, rel).await?.text;
    let all = lines(&content);
    let n = all.len();
    let Some(at) = usize::try_from(line).ok().filter(|&at| at <= n) else {
        return Err(format!(
            "{prefix}Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {n}]"
        ));
    };
    let mut new_lines: Vec<&str> = all[..at].to_vec();
    new_lines.extend(lines(added));
    if added.is_empty() {
        new_lines.push("");
    }
    new_lines.extend(&all[at..]);
    let mut new_text = new_lines.join("\n");
    if content.ends_with('\n') || content.is_empty() {
        new_text.push('\n');
    }
    session
        .call("write_file", json!({"path": rel, "content": new_text}))
        .await
        .map_err(|e| format!("{prefix}{e}"))?;
    Ok((new_text, at))
}

fn new_len(input: &Value, key: &str) -> usize {
    input
        .get(key)
        .and_then(Value::as_str)
        .map_or(0, |s| s.matches('\n').count() + 1)
}

/// The lines around an edit at `first` that spans `len` lines, numbered.
fn snippet(text: &str, first: usize, len: usize) -> String {
    let all = lines(text);
    let from = first.saturating_sub(SNIPPET);
    let to = (first + len + SNIPPET).min(all.len());
    numbered(&all[from.min(to)..to], from + 1)
}
