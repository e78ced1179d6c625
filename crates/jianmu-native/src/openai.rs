//! OpenAI Responses' client tools: `shell`, `apply_patch` (V4A operations and the
//! freeform patch), and function tools by name.

use jianmu_tool_core::ToolError;
use serde_json::{Map, Value, json};

use crate::text::{cut, cut_stream};
use crate::{Native, NotACall, OPENAI_SHELL};

/// Most definitions one `tool_search_call` answers.
const MAX_FOUND: u64 = 20;
/// Definitions a `tool_search_call` answers when it does not say.
const DEFAULT_FOUND: u64 = 5;

/// The exit code a command gets when it could not be run at all (refused by the
/// policy, no shell in this build): the error text is its stderr.
const NOT_RUN: i64 = 126;
/// Most commands one `shell_call` may carry.
const MAX_COMMANDS: usize = 64;
/// The lines that begin a patch's sections, as the patch parser knows them (after
/// leading whitespace, with or without a space after the colon): in one operation's
/// diff they would start another.
const HEADERS: [&str; 6] = [
    "*** Begin Patch",
    "*** End Patch",
    "*** Add File:",
    "*** Delete File:",
    "*** Update File:",
    "*** Move to:",
];

pub(crate) async fn execute(native: &Native, item: &Value) -> Result<Value, NotACall> {
    let Some(obj) = item.as_object() else {
        return Err(NotACall("expected a JSON object (a call item)".into()));
    };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let call_id = || {
        obj.get("call_id")
            .and_then(Value::as_str)
            .ok_or_else(|| NotACall(format!("a `{kind}` has a string `call_id`")))
    };
    match kind {
        "shell_call" => {
            let mut item = shell(native, call_id()?, obj).await?;
            // A call a program made (not the model) says so, and so does its answer.
            if let Some(caller) = obj.get("caller") {
                item["caller"] = caller.clone();
            }
            Ok(item)
        }
        "local_shell_call" => local_shell(native, call_id()?, obj).await,
        "tool_search_call" => tool_search(native, obj),
        "apply_patch_call" => {
            let call_id = call_id()?;
            match native.within(apply_patch(native, call_id, obj)).await {
                Ok(output) => output,
                Err(stopped) => Ok(json!({
                    "type": "apply_patch_call_output",
                    "call_id": call_id,
                    "status": "failed",
                    "output": format!("error: {stopped}"),
                })),
            }
        }
        "custom_tool_call" => {
            let call_id = call_id()?;
            let (Some(name), Some(input)) = (
                obj.get("name").and_then(Value::as_str),
                obj.get("input").and_then(Value::as_str),
            ) else {
                return Err(NotACall(
                    "a `custom_tool_call` has a string `name` and `input`".into(),
                ));
            };
            let args = if name == "apply_patch" {
                json!({"patch": input})
            } else {
                Value::String(input.to_owned())
            };
            let output = text_of(native.within(native.call(name, args)).await);
            Ok(json!({"type": "custom_tool_call_output", "call_id": call_id, "output": output}))
        }
        "function_call" => {
            let call_id = call_id()?;
            let (Some(name), Some(arguments)) = (
                obj.get("name").and_then(Value::as_str),
                obj.get("arguments").and_then(Value::as_str),
            ) else {
                return Err(NotACall(
                    "a `function_call` has a string `name` and `arguments`".into(),
                ));
            };
            let output = match serde_json::from_str::<Value>(arguments) {
                Ok(args) => text_of(native.within(native.call(name, args)).await),
                Err(e) => format!("error: the arguments are not JSON: {e}"),
            };
            Ok(json!({"type": "function_call_output", "call_id": call_id, "output": output}))
        }
        _ => Err(NotACall(format!(
            "`type` is {}: expected shell_call, local_shell_call, apply_patch_call, custom_tool_call, function_call or tool_search_call",
            obj.get("type").map_or("missing".to_owned(), |t| format!(
                "`{}`",
                t.as_str().unwrap_or("not a string")
            ))
        ))),
    }
}

fn text_of(result: Result<Result<jianmu_tool_core::ToolOutput, ToolError>, String>) -> String {
    match result {
        Ok(Ok(out)) => out.text,
        Ok(Err(e)) => format!("error: {e}"),
        Err(stopped) => format!("error: {stopped}"),
    }
}

/// `shell_call`: each command in order, in one shell session for the conversation.
async fn shell(
    native: &Native,
    call_id: &str,
    obj: &Map<String, Value>,
) -> Result<Value, NotACall> {
    let action = obj.get("action").and_then(Value::as_object);
    let Some(commands) = action
        .and_then(|a| a.get("commands"))
        .and_then(Value::as_array)
    else {
        return Err(NotACall(
            "a `shell_call` has `action.commands`, an array of strings".into(),
        ));
    };
    let action = action.unwrap_or(obj);
    let timeout_ms = action.get("timeout_ms").and_then(Value::as_u64);
    let max = action.get("max_output_length").and_then(Value::as_u64);
    let mut output = Vec::with_capacity(commands.len());
    let mut cuts = Vec::with_capacity(commands.len());
    if commands.len() > MAX_COMMANDS {
        output.push(not_run(&format!(
            "{} commands in one call is over the limit of {MAX_COMMANDS}; send fewer",
            commands.len()
        )));
        cuts.push([None, None]);
    } else {
        for command in commands {
            let Some(command) = command.as_str() else {
                output.push(not_run("the command is not a string"));
                cuts.push([None, None]);
                continue;
            };
            let (entry, cut) = run(native, command, timeout_ms).await;
            output.push(entry);
            cuts.push(cut);
        }
    }
    if let Some(max) = max {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        for (entry, cut_by_bash) in output.iter_mut().zip(&cuts) {
            for (key, stream) in ["stdout", "stderr"].into_iter().zip(cut_by_bash) {
                if let Some(Value::String(s)) = entry.get_mut(key) {
                    // A stream `bash` already cut: the note counts the whole stream's
                    // bytes, not those of the text it kept.
                    *s = match stream {
                        Some((total, saved)) => cut_stream(s, max, *total, saved.as_deref()),
                        None => cut(s, max),
                    };
                }
            }
        }
    }
    let mut item = json!({"type": "shell_call_output", "call_id": call_id, "output": output});
    if let Some(max) = max {
        item["max_output_length"] = max.into();
    }
    Ok(item)
}

fn not_run(message: &str) -> Value {
    json!({"stdout": "", "stderr": message, "outcome": {"type": "exit", "exit_code": NOT_RUN}})
}

/// How `bash` cut a stream: its bytes in all, and where it was saved whole (as the
/// model sees the path).
type Cut = Option<(u64, Option<String>)>;

async fn run(native: &Native, command: &str, timeout_ms: Option<u64>) -> (Value, [Cut; 2]) {
    let args = native.bash_args(command, Some(OPENAI_SHELL), timeout_ms);
    match native.call("bash", args).await {
        Ok(out) => {
            let data = out.structured.unwrap_or_default();
            let part = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let cut = |k: &str| -> Cut {
                let cut = data.get(k)?;
                let total = cut.get("total_bytes").and_then(Value::as_u64)?;
                let saved = cut
                    .get("saved")
                    .and_then(Value::as_str)
                    .map(|p| format!("{}/{p}", native.root().trim_end_matches('/')));
                Some((total, saved))
            };
            // A command killed by a signal has no exit code; shells say 128 + signal,
            // and the signal is not known here.
            let code = data.get("exit_code").and_then(Value::as_i64).unwrap_or(137);
            let entry = json!({
                "stdout": part("stdout"),
                "stderr": part("stderr"),
                "outcome": {"type": "exit", "exit_code": code},
            });
            (entry, [cut("stdout_cut"), cut("stderr_cut")])
        }
        Err(ToolError::Timeout { partial, .. }) => {
            let (stdout, stderr) = split_partial(partial.as_deref().unwrap_or(""));
            let entry = json!({"stdout": stdout, "stderr": stderr, "outcome": {"type": "timeout"}});
            (entry, [None, None])
        }
        Err(e) => (not_run(&e.to_string()), [None, None]),
    }
}

/// `local_shell_call`, the older shell form: one command as an argument vector, run
/// in the workspace (or `working_directory` under it) with `env` added, answered with
/// its output as text (and the exit code when it is not 0).
async fn local_shell(
    native: &Native,
    call_id: &str,
    obj: &Map<String, Value>,
) -> Result<Value, NotACall> {
    let bad = || {
        NotACall("a `local_shell_call` has an `action` with `\"type\": \"exec\"` and a `command` array of strings".into())
    };
    let action = obj
        .get("action")
        .and_then(Value::as_object)
        .ok_or_else(bad)?;
    if action.get("type").and_then(Value::as_str) != Some("exec") {
        return Err(bad());
    }
    let argv: Vec<&str> = action
        .get("command")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
        .filter(|a| !a.is_empty())
        .ok_or_else(bad)?;
    let output = match local_script(native, action, &argv) {
        Ok(script) => {
            let timeout_ms = action.get("timeout_ms").and_then(Value::as_u64);
            let args = native.bash_args(&script, None, timeout_ms);
            match native.call("bash", args).await {
                Ok(out) => out.text,
                Err(ToolError::Timeout { partial, after, .. }) => format!(
                    "{}\n(the command was stopped after {:.1} s, its time limit)",
                    partial.unwrap_or_default(),
                    after.as_secs_f64()
                ),
                Err(e) => format!("error: {e}"),
            }
        }
        Err(why) => format!("error: {why}"),
    };
    Ok(json!({"type": "local_shell_call_output", "call_id": call_id, "output": output}))
}

/// The shell line of a `local_shell_call`: `cd` to its folder, its `env`, and the
/// argument vector quoted word by word.
fn local_script(
    native: &Native,
    action: &Map<String, Value>,
    argv: &[&str],
) -> Result<String, String> {
    let mut script = String::new();
    if let Some(dir) = action.get("working_directory").and_then(Value::as_str) {
        let rel = native.workspace_path(dir)?;
        // `./` so that neither `-` nor `CDPATH` sends it anywhere else.
        script.push_str(&format!("cd ./{} && ", quote(&rel)));
    }
    if let Some(env) = action.get("env").and_then(Value::as_object) {
        for (key, value) in env {
            let named = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            let Some(value) = value.as_str().filter(|_| named) else {
                return Err(format!(
                    "`env` entry `{key}` is not a variable name with a string value"
                ));
            };
            script.push_str(&format!("export {key}={} && ", quote(value)));
        }
    }
    let words: Vec<String> = argv.iter().map(|w| quote(w)).collect();
    script.push_str(&words.join(" "));
    Ok(script)
}

/// `word` as one shell word.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Splits `bash`'s output so far (stdout, then `[stderr]` and stderr) in two.
fn split_partial(partial: &str) -> (String, String) {
    if let Some(rest) = partial.strip_prefix("[stderr]\n") {
        return (String::new(), rest.to_owned());
    }
    match partial.rfind("\n[stderr]\n") {
        Some(at) => (
            partial[..=at].to_owned(),
            partial[at + "\n[stderr]\n".len()..].to_owned(),
        ),
        None => (partial.to_owned(), String::new()),
    }
}

/// `apply_patch_call`: one file operation with a V4A diff, through `apply_patch`.
async fn apply_patch(
    native: &Native,
    call_id: &str,
    obj: &Map<String, Value>,
) -> Result<Value, NotACall> {
    let Some(op) = obj.get("operation").and_then(Value::as_object) else {
        return Err(NotACall(
            "an `apply_patch_call` has an `operation` object".into(),
        ));
    };
    let (Some(kind), Some(path)) = (
        op.get("type").and_then(Value::as_str),
        op.get("path").and_then(Value::as_str),
    ) else {
        return Err(NotACall(
            "an `apply_patch_call` operation has a string `type` and `path`".into(),
        ));
    };
    let diff = op.get("diff").and_then(Value::as_str);
    let outcome = match operation(native, kind, path, diff) {
        Ok(patch) => native
            .call("apply_patch", json!({"patch": patch}))
            .await
            .map(|out| out.text)
            .map_err(|e| e.to_string()),
        Err(message) => Err(message),
    };
    let (status, output) = match outcome {
        Ok(text) => ("completed", text),
        Err(text) => ("failed", text),
    };
    Ok(
        json!({"type": "apply_patch_call_output", "call_id": call_id, "status": status, "output": output}),
    )
}

/// The patch for one V4A operation.
fn operation(
    native: &Native,
    kind: &str,
    path: &str,
    diff: Option<&str>,
) -> Result<String, String> {
    let rel = native.workspace_path(path)?;
    let body = |diff: Option<&str>| -> Result<String, String> {
        let diff = diff.ok_or_else(|| format!("`{kind}` needs a `diff`"))?;
        // The diff is one file's: a header line in it would reach other files,
        // wherever the parser would take it for one. Any other line holding `*** `
        // (an org-mode heading, a Robot Framework section) is text.
        if let Some(line) = diff.lines().find(|l| {
            let l = l.trim();
            HEADERS.iter().any(|h| l.starts_with(h))
        }) {
            return Err(format!(
                "the diff holds the line `{}`, which would start another file operation; send one file's changes per call",
                line.trim()
            ));
        }
        Ok(diff.trim_end_matches('\n').to_owned())
    };
    let ops = match kind {
        "create_file" => {
            let diff = body(diff)?;
            if diff.is_empty() {
                format!("*** Add File: {rel}")
            } else {
                format!("*** Add File: {rel}\n{diff}")
            }
        }
        "update_file" => format!("*** Update File: {rel}\n{}", body(diff)?),
        "delete_file" => format!("*** Delete File: {rel}"),
        other => {
            return Err(format!(
                "unknown operation `{other}`: expected create_file, update_file or delete_file"
            ));
        }
    };
    Ok(format!("*** Begin Patch\n{ops}\n*** End Patch"))
}

/// The client-executed `tool_search` tool as a Responses request declares it: the
/// session's deferred function tools are found with it.
pub(crate) fn tool_search_declaration() -> Value {
    json!({
        "type": "tool_search",
        "execution": "client",
        "description": "Finds tools that are not loaded yet and loads their definitions: give words for what the tool should do (\"commit history\"), or `select:NAME,NAME` for tools you know by name.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words for what the tool should do, or `select:NAME,NAME`."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_FOUND, "description": "Most tools to load (default 5)."}
            },
            "required": ["query"],
            "additionalProperties": false
        }
    })
}

/// A client-executed `tool_search_call`: the session's tools that match its `query`
/// (BM25 over names, descriptions and parameter names, or `select:NAME,...`), as
/// function definitions in a `tool_search_output`.
fn tool_search(native: &Native, obj: &Map<String, Value>) -> Result<Value, NotACall> {
    if obj.get("execution").and_then(Value::as_str) == Some("server") {
        return Err(NotACall(
            "this `tool_search_call` was executed by the server (`execution: \"server\"`): there is nothing to answer"
                .into(),
        ));
    }
    let call_id = obj
        .get("call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| NotACall("a client `tool_search_call` has a string `call_id`".into()))?;
    // `arguments` is an object, or the JSON text of one.
    let arguments = match obj.get("arguments") {
        Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => Value::Null,
    };
    let query = arguments.get("query").and_then(Value::as_str).unwrap_or("");
    let max = arguments
        .get("max_results")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_FOUND)
        .clamp(1, MAX_FOUND);
    let specs = native.session.specs();
    let index = jianmu_tool_core::ToolIndex::new(&specs);
    let found = index.search(query, usize::try_from(max).unwrap_or(5));
    let tools: Vec<Value> = found
        .iter()
        .filter_map(|name| specs.iter().find(|s| s.name == *name))
        .map(|spec| {
            json!({
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters(),
            })
        })
        .collect();
    Ok(json!({
        "type": "tool_search_output",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "tools": tools,
    }))
}

#[cfg(test)]
mod tests {
    use super::{quote, split_partial};

    #[test]
    fn a_quoted_word_stays_one_word() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn partial_output_splits_at_its_stderr_mark() {
        assert_eq!(
            split_partial("out\n[stderr]\nerr"),
            ("out\n".to_owned(), "err".to_owned())
        );
        assert_eq!(
            split_partial("[stderr]\nerr"),
            (String::new(), "err".to_owned())
        );
        assert_eq!(split_partial("out"), ("out".to_owned(), String::new()));
    }
}
