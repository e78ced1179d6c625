//! The framing in front of the MCP service: every line read is answered.
//!
//! Lines from the client are checked before the MCP service sees them; what it could
//! not answer is answered here, per JSON-RPC 2.0: a line that is not JSON (invalid
//! UTF-8, malformed, nested deeper than 128) gets -32700 with `"id": null`; one that is
//! not a request, notification or response, a batch, or a line over [`MAX_LINE`] bytes
//! gets -32600; `tools/call` without a string `name` or with `arguments` that are not an
//! object gets -32602 naming the problem; a request whose id is already in flight gets
//! -32600 (its answer could not be told apart); an id that is neither a string nor an
//! integer (`1.5`) gets -32600 with `"id": null`. A line too long or too deep to read
//! is answered with its request's `id` when that can be read from the line's start
//! ([`leading_id`]), so a client waiting on it is not left waiting. Lines that pass are
//! handed on whole, and every line out is written whole.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest line read, in bytes (without its newline); longer ones are skipped and
/// answered with -32600.
pub(crate) const MAX_LINE: usize = 15 * 1024 * 1024;

/// How many of the framing's own answers may wait to be written.
pub(crate) const QUEUED_ANSWERS: usize = 256;

/// Ids of requests handed on and not yet answered, and who waits for none to be left.
#[derive(Debug, Default, Clone)]
pub(crate) struct InFlight(Arc<(Mutex<HashSet<String>>, tokio::sync::Notify)>);

impl InFlight {
    fn insert(&self, id: String) -> bool {
        self.0.0.lock().map(|mut s| s.insert(id)).unwrap_or(true)
    }

    /// Whether no request is waiting for its answer.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.0.lock().map(|s| s.is_empty()).unwrap_or(true)
    }

    /// Waits until no request is waiting for its answer.
    pub(crate) async fn drained(&self) {
        crate::until(&self.0.1, || self.is_empty()).await;
    }

    fn remove(&self, id: &str) {
        if let Ok(mut s) = self.0.0.lock() {
            s.remove(id);
            if s.is_empty() {
                self.0.1.notify_waiters();
            }
        }
    }
}

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Hand it to the MCP service.
    Forward,
    /// Nothing to do (a blank line).
    Skip,
    /// Answer it with this error response.
    Answer(Value),
}

/// A JSON-RPC error response.
fn error_response(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message.into()},
    })
}

fn error(id: Value, code: i64, message: impl Into<String>) -> Verdict {
    Verdict::Answer(error_response(id, code, message))
}

/// The longest request id kept, in bytes: ids of requests in flight are remembered.
pub(crate) const MAX_ID_LEN: usize = 256;

/// How much of a line too long to read is kept, to find its `id` in.
const HEAD: usize = 4096;

/// The key of a request id (`None`: not a valid id: a string of at most
/// [`MAX_ID_LEN`] bytes or an integer).
fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::String(s) if s.len() > MAX_ID_LEN => None,
        Value::Number(n) if !(n.is_i64() || n.is_u64()) => None,
        Value::String(_) | Value::Number(_) => Some(id.to_string()),
        _ => None,
    }
}

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while text.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The index after the JSON string starting at `i` (a `"`).
fn string_end(text: &[u8], i: usize) -> Option<usize> {
    if text.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match text.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The JSON string starting at `i` (a `"`), decoded, and the index after it.
fn string_at(text: &[u8], i: usize) -> Option<(String, usize)> {
    let end = string_end(text, i)?;
    Some((serde_json::from_slice(&text[i..end]).ok()?, end))
}

/// The index after the JSON value starting at `i`, read only as far as needed to skip
/// it (strings and brackets); `None` when it does not end within `text`.
fn skip_value(text: &[u8], i: usize) -> Option<usize> {
    match *text.get(i)? {
        b'"' => string_end(text, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *text.get(j)? {
                    b'"' => {
                        j = string_end(text, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        // A number or a literal: up to the next delimiter.
        _ => {
            let n = text[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())?;
            Some(i + n)
        }
    }
}

/// The top-level `id` of the JSON object `text` starts with, read from its start only:
/// what a line too long or too deep to parse is answered with. `None` when the members
/// before it cannot be skipped within `text`, or it is not a valid id.
pub(crate) fn leading_id(text: &[u8]) -> Option<Value> {
    let mut i = skip_ws(text, 0);
    if text.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(text, i);
        let (key, next) = string_at(text, i)?;
        i = skip_ws(text, next);
        if text.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(text, i + 1);
        if key == "id" {
            let end = skip_value(text, i)?;
            let id: Value = serde_json::from_slice(&text[i..end]).ok()?;
            return id_key(&id).map(|_| id);
        }
        i = skip_ws(text, skip_value(text, i)?);
        if text.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// The answer to an id that is not a string or an integer.
const BAD_ID: &str = "Invalid Request: `id` must be a string (at most 256 bytes) or an integer";

/// The deepest nesting read (as `serde_json`'s own limit).
const MAX_DEPTH: usize = 128;

/// Whether the brackets of `text` (outside its strings) nest deeper than `max`: one
/// pass, no allocation.
fn nested_deeper_than(text: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// What a request body sent over HTTP is answered with before the MCP service reads
/// it, as on stdio: an id that is neither a string nor an integer gets -32600 with
/// `"id": null`; a body too deep to read gets -32700 with its id when that can be read
/// from its start. `Ok`: the service reads it (and answers anything else wrong); with
/// the request's method when it has one.
pub(crate) fn precheck(body: &[u8]) -> Result<Option<String>, Value> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<Value>,
        method: Option<Value>,
    }
    if nested_deeper_than(body, MAX_DEPTH) {
        return Err(error_response(
            leading_id(body).unwrap_or(Value::Null),
            -32700,
            format!("Parse error: nested deeper than {MAX_DEPTH}"),
        ));
    }
    match serde_json::from_slice::<Head>(body) {
        Ok(Head { id: Some(id), .. })
            if matches!(&id, Value::Number(_)) && id_key(&id).is_none() =>
        {
            Err(error_response(Value::Null, -32600, BAD_ID))
        }
        Ok(Head {
            method: Some(Value::String(method)),
            ..
        }) => Ok(Some(method)),
        _ => Ok(None),
    }
}

/// Judges one line (without its newline).
pub(crate) fn judge(line: &[u8], in_flight: &InFlight) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    if let Err(e) = std::str::from_utf8(line) {
        return error(
            Value::Null,
            -32700,
            format!(
                "Parse error: the line is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        );
    }
    let message: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        // Too deep to read whole: its id may still be read from its start.
        Err(e) if nested_deeper_than(line, MAX_DEPTH) => {
            return error(
                leading_id(line).unwrap_or(Value::Null),
                -32700,
                format!("Parse error: {e}"),
            );
        }
        Err(e) => return error(Value::Null, -32700, format!("Parse error: {e}")),
    };
    let Value::Object(message) = message else {
        let what = if message.is_array() {
            "batches are not supported: send one JSON-RPC message per line"
        } else {
            "a JSON-RPC message is a JSON object"
        };
        return error(Value::Null, -32600, format!("Invalid Request: {what}"));
    };
    let id = message.get("id");
    let id_value = id
        .filter(|i| id_key(i).is_some())
        .cloned()
        .unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return error(
            id_value,
            -32600,
            "Invalid Request: `jsonrpc` must be \"2.0\"",
        );
    }
    if let Some(id) = id
        && id_key(id).is_none()
    {
        return error(Value::Null, -32600, BAD_ID);
    }
    match message.get("method") {
        None if message.contains_key("result") || message.contains_key("error") => Verdict::Forward,
        None => error(id_value, -32600, "Invalid Request: no `method`"),
        Some(Value::String(method)) => {
            if method == "notifications/cancelled"
                && let Some(key) = message
                    .get("params")
                    .and_then(|p| p.get("requestId"))
                    .and_then(id_key)
            {
                in_flight.remove(&key);
            }
            if method == "tools/call"
                && let Some(problem) = tools_call_problem(message.get("params"))
            {
                return error(id_value, -32602, format!("Invalid params: {problem}"));
            }
            if let Some(key) = id.and_then(id_key)
                && !in_flight.insert(key)
            {
                return error(
                    id_value,
                    -32600,
                    "Invalid Request: this id is already used by a request in flight; use a new id",
                );
            }
            Verdict::Forward
        }
        Some(_) => error(
            id_value,
            -32600,
            "Invalid Request: `method` must be a string",
        ),
    }
}

fn tools_call_problem(params: Option<&Value>) -> Option<&'static str> {
    let Some(Value::Object(params)) = params else {
        return Some("tools/call needs `params`, an object with `name` and `arguments`");
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return Some("tools/call needs `name`, the tool's name as a string");
    }
    match params.get("arguments") {
        None | Some(Value::Object(_)) | Some(Value::Null) => None,
        Some(_) => Some("`arguments` must be a JSON object of the tool's arguments"),
    }
}

/// One line of at most [`MAX_LINE`] bytes; `Err(())` for a longer one (consumed to its
/// end); `Ok(None)` at the end of input.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), ()>>> {
    line.clear();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                None
            } else if too_long {
                Some(Err(()))
            } else {
                Some(Ok(()))
            });
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            let body = if done { &buf[..take - 1] } else { &buf[..take] };
            if line.len() + body.len() > MAX_LINE {
                // Its start is kept, to answer with its id.
                too_long = true;
                let room = HEAD.saturating_sub(line.len()).min(body.len());
                line.extend_from_slice(&body[..room]);
                line.truncate(HEAD);
            } else {
                line.extend_from_slice(body);
            }
        }
        reader.consume(take);
        if done {
            return Ok(Some(if too_long { Err(()) } else { Ok(()) }));
        }
    }
}

/// Reads the client's lines: forwards the good ones to `service`, sends answers for the
/// others to `answers`. Ends at the end of input (then `service` is closed too).
pub(crate) async fn read_client<R, W>(
    input: R,
    mut service: W,
    in_flight: InFlight,
    answers: mpsc::Sender<Vec<u8>>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    while let Some(read) = read_line(&mut reader, &mut line).await? {
        let verdict = match read {
            Ok(()) => judge(&line, &in_flight),
            Err(()) => error(
                leading_id(&line).unwrap_or(Value::Null),
                -32600,
                format!(
                    "Invalid Request: the line is over the limit of {MAX_LINE} bytes and was skipped"
                ),
            ),
        };
        match verdict {
            Verdict::Forward => {
                line.push(b'\n');
                service.write_all(&line).await?;
                service.flush().await?;
            }
            Verdict::Skip => {}
            Verdict::Answer(answer) => {
                let mut out = answer.to_string().into_bytes();
                out.push(b'\n');
                // Bounded: a client that floods bad lines and never reads its answers
                // is read no further until it does.
                if answers.send(out).await.is_err() {
                    break;
                }
            }
        }
    }
    service.shutdown().await
}

/// Writes whole lines to `output`: the service's (noting answered ids) and the
/// framing's own answers.
pub(crate) async fn write_client<R, W>(
    service: R,
    mut output: W,
    in_flight: InFlight,
    mut answers: mpsc::Receiver<Vec<u8>>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(service);
    let mut line = Vec::new();
    let mut service_open = true;
    loop {
        tokio::select! {
            read = lines.read_until(b'\n', &mut line), if service_open => {
                if read? == 0 {
                    service_open = false;
                    continue;
                }
                if let Some(key) = answered_id(&line) {
                    in_flight.remove(&key);
                }
                output.write_all(&line).await?;
                output.flush().await?;
                line.clear();
            }
            answer = answers.recv() => match answer {
                Some(answer) => {
                    output.write_all(&answer).await?;
                    output.flush().await?;
                }
                None if !service_open => return Ok(()),
                None => {
                    // The reader is done; drain the service, then stop.
                    let mut rest = Vec::new();
                    tokio::io::AsyncReadExt::read_to_end(&mut lines, &mut rest).await?;
                    output.write_all(&rest).await?;
                    output.flush().await?;
                    return Ok(());
                }
            },
        }
    }
}

/// The id of a response line (one with `result` or `error`).
fn answered_id(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<Value>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    let head: Head = serde_json::from_slice(line).ok()?;
    if head.result.is_none() && head.error.is_none() {
        return None;
    }
    id_key(&head.id?)
}

#[cfg(test)]
mod tests;
