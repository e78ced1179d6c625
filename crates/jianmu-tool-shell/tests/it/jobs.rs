//! Background jobs through the real call path: tools built from one configuration
//! share a job table; a server job is reachable and `bash_kill` leaves no process;
//! endless output stays bounded; input, time limits, limits, and dropping the tools.

use std::time::Duration;

use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolOutput, ToolSet, registrations};
use serde_json::{Value, json};

/// The four shell tools built from `config`, as a provider builds them.
pub(crate) fn tools(config: &ToolConfig) -> ToolSet {
    ToolSet::from_tools(
        registrations()
            .filter(|r| r.name.starts_with("bash"))
            .map(|r| (r.build)(config).unwrap()),
    )
}

fn config(dir: &std::path::Path, network: bool) -> ToolConfig {
    ToolConfig::new(dir).with_settings(
        "bash",
        json!({"isolation": {"network": network}, "max_jobs": 3}),
    )
}

pub(crate) async fn run(set: &ToolSet, tool: &str, args: Value) -> Result<ToolOutput, String> {
    set.execute_with(tool, args, ExecuteOptions::default())
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn data(out: &ToolOutput) -> &Value {
    out.structured.as_ref().unwrap()
}

/// Polls `bash_output` until the job's output so far contains `needle` (or 30 s).
async fn read_until(set: &ToolSet, job: u64, mut seen: String, needle: &str) -> String {
    for _ in 0..300 {
        if seen.contains(needle) {
            return seen;
        }
        let out = run(set, "bash_output", json!({"job": job, "wait_ms": 100}))
            .await
            .unwrap();
        seen.push_str(data(&out)["output"].as_str().unwrap());
    }
    panic!("never saw {needle:?} in {seen:?}");
}

#[tokio::test]
async fn a_server_job_is_reachable_and_bash_kill_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("served");
    std::fs::create_dir(&marker).unwrap();
    std::fs::write(marker.join("hello.txt"), "hello from the job\n").unwrap();
    let set = tools(&config(dir.path(), true));
    let command = format!(
        "exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory {}",
        marker.display()
    );
    let started = run(
        &set,
        "bash",
        json!({"command": command, "background": true, "yield_ms": 200}),
    )
    .await
    .unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    assert_eq!(data(&started)["running"], true, "{}", started.text);
    assert!(
        started
            .text
            .starts_with(&format!("[job {job} running for ")),
        "{}",
        started.text
    );
    let said = read_until(
        &set,
        job,
        data(&started)["output"].as_str().unwrap().to_owned(),
        "port ",
    )
    .await;
    let port: u16 = said
        .split("port ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {said:?}"));
    let pids = jianmu_test_support::running_with(&marker.display().to_string());
    assert!(!pids.is_empty(), "the server is not running");

    // A later, separate call reaches it.
    let fetch = format!(
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/hello.txt').read().decode(), end='')\""
    );
    let fetched = run(&set, "bash", json!({ "command": fetch }))
        .await
        .unwrap();
    assert_eq!(fetched.text, "hello from the job\n");

    let listed = run(&set, "bash_jobs", json!({})).await.unwrap();
    assert_eq!(data(&listed)["jobs"][0]["job"], job);
    assert_eq!(data(&listed)["jobs"][0]["state"], "running");
    assert!(listed.text.contains("http.server"), "{}", listed.text);

    let killed = run(&set, "bash_kill", json!({ "job": job })).await.unwrap();
    assert_eq!(data(&killed)["running"], false);
    assert_eq!(data(&killed)["exit_code"], Value::Null);
    assert!(
        killed
            .text
            .starts_with(&format!("[job {job} was killed after ")),
        "{}",
        killed.text
    );
    // Every process of the job is gone, by PID.
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))),
            "process {pid} of the job is still there"
        );
    }
    let listed = run(&set, "bash_jobs", json!({})).await.unwrap();
    assert_eq!(data(&listed)["jobs"][0]["state"], "was killed");
    let again = run(&set, "bash_kill", json!({ "job": job })).await.unwrap();
    assert!(
        again
            .text
            .starts_with(&format!("job {job} had already ended")),
        "{}",
        again.text
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_job_that_prints_forever_keeps_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let set = tools(&config(dir.path(), false));
    let before = rss_kib();
    let started = run(
        &set,
        "bash",
        json!({"command": "yes 0123456789abcdef", "background": true, "yield_ms": 0}),
    )
    .await
    .unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    // Let it print at least 300 MB without reading any of it.
    let mut unread = 0;
    for _ in 0..600 {
        let listed = run(&set, "bash_jobs", json!({})).await.unwrap();
        unread = data(&listed)["jobs"][0]["unread_bytes"].as_u64().unwrap();
        if unread > 300 << 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(unread > 300 << 20, "only {unread} bytes printed");
    let grew = rss_kib().saturating_sub(before);
    assert!(grew < 64 * 1024, "memory grew by {grew} KiB");
    let out = run(&set, "bash_output", json!({ "job": job }))
        .await
        .unwrap();
    let output = data(&out)["output"].as_str().unwrap();
    assert!(
        output.starts_with("0123456789abcdef\n"),
        "{}",
        &output[..100]
    );
    assert!(output.contains("bytes cut from the middle"));
    assert!(output.len() < 40 * 1024, "{} bytes", output.len());
    run(&set, "bash_kill", json!({ "job": job })).await.unwrap();
}

#[tokio::test]
async fn input_time_limits_and_the_end_of_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let set = tools(&config(dir.path(), false));
    // A job reading its input.
    let started = run(
        &set,
        "bash",
        json!({"command": "read a; echo \"got $a\"; read b; echo \"then $b\" >&2; exit 4", "background": true, "yield_ms": 0}),
    )
    .await
    .unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    let first = run(
        &set,
        "bash_output",
        json!({"job": job, "input": "one\n", "wait_ms": 200}),
    )
    .await
    .unwrap();
    assert_eq!(data(&first)["running"], true);
    assert_eq!(data(&first)["output"], "got one\n");
    let last = run(
        &set,
        "bash_output",
        json!({"job": job, "input": "two\n", "wait_ms": 10000}),
    )
    .await
    .unwrap();
    assert_eq!(
        data(&last),
        &json!({"job": job, "running": false, "exit_code": 4, "output": "then two\n"})
    );
    assert!(
        last.text
            .starts_with(&format!("[job {job} exited with code 4 after ")),
        "{}",
        last.text
    );
    let closed = run(&set, "bash_output", json!({"job": job, "input": "x"}))
        .await
        .unwrap_err();
    assert_eq!(closed, format!("job {job} no longer reads its input"));

    // A job that ends within `yield_ms` answers like a finished one.
    let quick = run(
        &set,
        "bash",
        json!({"command": "echo quick", "background": true, "yield_ms": 10000}),
    )
    .await
    .unwrap();
    assert_eq!(data(&quick)["running"], false);
    assert_eq!(data(&quick)["exit_code"], 0);
    assert_eq!(data(&quick)["output"], "quick\n");

    // An explicit time limit stops a job and all it started.
    let limited = run(
        &set,
        "bash",
        json!({"command": "setsid sleep 1234.5 & sleep 1234.5", "background": true, "timeout": 0.5, "yield_ms": 0}),
    )
    .await
    .unwrap();
    let job = data(&limited)["job"].as_u64().unwrap();
    let out = run(&set, "bash_output", json!({"job": job, "wait_ms": 10000}))
        .await
        .unwrap();
    assert!(
        out.text
            .starts_with(&format!("[job {job} was stopped by its time limit (0.5 s)")),
        "{}",
        out.text
    );
    assert!(jianmu_test_support::running_with("sleep 1234.5").is_empty());

    let missing = run(&set, "bash_output", json!({"job": 99}))
        .await
        .unwrap_err();
    assert!(
        missing.starts_with("there is no job 99; the jobs are: 1, 2, 3"),
        "{missing}"
    );
}

#[tokio::test]
async fn jobs_are_capped_and_end_with_their_tools() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let set = tools(&config(&root, false));
    // A job starts where its session is, and does not change it.
    run(&set, "bash", json!({"command": "cd sub", "session": "s"}))
        .await
        .unwrap();
    for n in 0..3 {
        let out = run(
            &set,
            "bash",
            json!({"command": format!("pwd; cd /; exec sleep 777.{n}"), "background": true, "session": "s", "yield_ms": 100}),
        )
        .await
        .unwrap();
        // The job may not have printed within `yield_ms` on a loaded machine.
        let job = data(&out)["job"].as_u64().unwrap();
        let seen = data(&out)["output"].as_str().unwrap_or_default().to_owned();
        read_until(
            &set,
            job,
            seen,
            &format!("{}\n", root.join("sub").display()),
        )
        .await;
    }
    assert_eq!(
        run(&set, "bash", json!({"command": "pwd", "session": "s"}))
            .await
            .unwrap()
            .text,
        format!("{}\n", root.join("sub").display())
    );
    let refused = run(&set, "bash", json!({"command": "true", "background": true}))
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        "3 background jobs are running, the limit; stop one with bash_kill (running: 1, 2, 3)"
    );
    // Another configuration's tools have jobs of their own.
    let other = tools(&config(&root, false).with_new_scope());
    let listed = run(&other, "bash_jobs", json!({})).await.unwrap();
    assert_eq!(data(&listed)["jobs"], json!([]));
    assert_eq!(
        listed.text,
        "no background jobs (bash with `background: true` starts one)"
    );
    // Dropping the tools ends their jobs.
    assert_eq!(jianmu_test_support::running_with("sleep 777.").len(), 3);
    drop(set);
    for _ in 0..200 {
        if jianmu_test_support::running_with("sleep 777.").is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the jobs outlived their tools");
}
