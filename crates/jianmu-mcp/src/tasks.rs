//! Background jobs as MCP tasks (the tasks extension, SEP-2663).
//!
//! A client that declared the extension and calls `bash` with `background: true` gets
//! a task instead of the first answer: its id is `job-N-MILLIS` (the job's number in
//! its scope, and when it started). `tasks/get` answers `working` while the job runs,
//! with how long it has run and how much output waits as the status message, and
//! reads nothing: the output stays for the result, so a poll that lands between the
//! job's last line and its end takes nothing from it. Once the job ended it is read as
//! `bash_output` reads it (what it printed and no one read yet, start and end kept
//! when long): `completed`, with that output as the result (`isError` when it exited
//! non-zero or was stopped). `tasks/cancel` stops it as
//! `bash_kill` does. A task is found in the scope that started it only: another
//! session's or principal's id is unknown (-32602). The job stays a job: `bash_jobs`,
//! `bash_output` and `bash_kill` see it too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jianmu_runtime::Session;
use jianmu_tool_core::{ToolOutput, rfc3339};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};

/// How often a client should poll.
const POLL_MS: u64 = 1000;

/// A job's answer as `bash` gives it: its number, whether it runs, its exit code.
fn job_of(out: &ToolOutput) -> Option<(u64, bool, Option<i64>)> {
    let status = out.structured.as_ref()?;
    Some((
        status.get("job")?.as_u64()?,
        status.get("running")?.as_bool()?,
        status.get("exit_code").and_then(Value::as_i64),
    ))
}

fn task(id: &str, created: &str, status: TaskStatus) -> Task {
    Task::new(id, status, created, rfc3339(SystemTime::now())).with_poll_interval_ms(POLL_MS)
}

/// The task for a background job's first answer, or `None` when the answer is not a
/// job's.
pub(crate) fn created(out: &ToolOutput) -> Option<CreateTaskResult> {
    let (job, running, _) = job_of(out)?;
    let now = SystemTime::now();
    let millis = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let id = format!("job-{job}-{millis}");
    let status = if running {
        TaskStatus::Working
    } else {
        TaskStatus::Completed
    };
    let mut task = task(&id, &rfc3339(now), status);
    if !out.text.is_empty() {
        task = task.with_status_message(out.text.clone());
    }
    Some(CreateTaskResult::new(task))
}

/// The error for a task id that names no job of this scope.
fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no task `{}` here", jianmu_tool_core::echo(id)),
        Some(json!({"taskId": id})),
    )
}

/// `(job, created)` from a task id.
fn parse(id: &str) -> Option<(u64, String)> {
    let (job, millis) = id.strip_prefix("job-")?.split_once('-')?;
    let job = job.parse::<u64>().ok()?;
    let millis = millis.parse::<u64>().ok()?;
    Some((job, rfc3339(UNIX_EPOCH + Duration::from_millis(millis))))
}

/// The job behind `id`, read or stopped with `tool`.
async fn job(session: &Session, id: &str, tool: &str) -> Result<(ToolOutput, String), ErrorData> {
    let (job, created) = parse(id).ok_or_else(|| unknown(id))?;
    let out = session
        .call(tool, json!({"job": job}))
        .await
        .map_err(|_| unknown(id))?;
    Ok((out, created))
}

/// `tasks/get`.
pub(crate) async fn get(session: &Session, id: &str) -> Result<GetTaskResult, ErrorData> {
    let (job, created) = parse(id).ok_or_else(|| unknown(id))?;
    // The list says whether it runs without reading (and so emptying) its output.
    let list = session
        .call("bash_jobs", json!({}))
        .await
        .map_err(|_| unknown(id))?;
    let info = list
        .structured
        .as_ref()
        .and_then(|l| l.get("jobs"))
        .and_then(Value::as_array)
        .and_then(|jobs| {
            jobs.iter()
                .find(|j| j.get("job").and_then(Value::as_u64) == Some(job))
        })
        .ok_or_else(|| unknown(id))?;
    if info.get("running").and_then(Value::as_bool) == Some(true) {
        let secs = info
            .get("runtime_secs")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let unread = info
            .get("unread_bytes")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let task = task(id, &created, TaskStatus::Working).with_status_message(format!(
            "running for {secs:.1} s; {unread} bytes of output so far"
        ));
        return Ok(GetTaskResult::new(DetailedTask::new(
            task,
            TaskPayload::Working,
        )));
    }
    let out = session
        .call("bash_output", json!({"job": job}))
        .await
        .map_err(|_| unknown(id))?;
    let Some((_, _, code)) = job_of(&out) else {
        return Err(ErrorData::internal_error(
            "the job's answer has no status",
            None,
        ));
    };
    let (text, structured, _) = out.into_whole();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = structured;
    result.is_error = Some(code != Some(0));
    let result = match serde_json::to_value(&result) {
        Ok(Value::Object(map)) => map,
        _ => {
            return Err(ErrorData::internal_error(
                "the result does not encode",
                None,
            ));
        }
    };
    Ok(GetTaskResult::new(DetailedTask::new(
        task(id, &created, TaskStatus::Completed),
        TaskPayload::Completed { result },
    )))
}

/// `tasks/cancel`.
pub(crate) async fn cancel(session: &Session, id: &str) -> Result<(), ErrorData> {
    job(session, id, "bash_kill").await.map(drop)
}
