//! bash through the real call path: the Python tool's contract, timeouts that kill the whole
//! tree, bounded output, a clean environment.

use std::time::{Duration, Instant};

use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_shell::{Bash, BashSettings};
use serde_json::{Value, json};

fn bash(dir: &std::path::Path, settings: BashSettings) -> ToolHandle {
    ToolHandle::new(Bash::new(settings, dir.to_owned())).unwrap()
}

async fn call(tool: &ToolHandle, args: Value) -> String {
    match tool.execute(args, ExecuteOptions::default()).await {
        Ok(out) => out.text,
        Err(e) => format!("error: {e}"),
    }
}

#[tokio::test]
async fn the_python_tools_contract() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    assert_eq!(call(&b, json!({"command": "echo hi"})).await, "hi\n");
    assert_eq!(
        call(&b, json!({"input": "echo from-input"})).await,
        "from-input\n"
    );
    assert_eq!(
        call(&b, json!({"cmd": "echo from-cmd"})).await,
        "from-cmd\n"
    );
    assert_eq!(
        call(&b, json!({"command": "  ", "cmd": "echo second"})).await,
        "second\n"
    );
    assert_eq!(
        call(&b, json!({})).await,
        "error: no command given: pass it as `command`"
    );
    assert_eq!(
        call(&b, json!({"command": "echo out; echo bad >&2; exit 3"})).await,
        "error: Error (3):\nbad\n"
    );
    // The workspace is the working directory; stdin is empty.
    let cwd = call(&b, json!({"command": "pwd"})).await;
    assert_eq!(
        cwd.trim(),
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        call(&b, json!({"command": "cat; echo done"})).await,
        "done\n"
    );
    let spec = b.spec();
    assert!(!spec.parallel_safe);
    assert_eq!(spec.effect_tags, ["process:exec"]);
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
}

#[tokio::test]
async fn a_timeout_kills_the_tree_even_past_setsid() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    let pids = dir.path().join("pids");
    let command = format!(
        "sleep 300 & echo $! >> {0}; setsid sleep 300 & echo $! >> {0}; setsid bash -c 'sleep 300 & echo $! >> {0}; wait' & sleep 0.2; wait",
        pids.display()
    );
    let start = Instant::now();
    assert_eq!(
        call(&b, json!({"command": command, "timeout": 1.0})).await,
        "error: `bash` timed out after 1 s"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    let pids: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "the fixture started three sleepers");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::yield_now();
    }
    let survivors: Vec<_> = pids.iter().filter(|p| alive(**p)).collect();
    assert!(survivors.is_empty(), "still running: {survivors:?}");
    // Background processes of a command that succeeded do not hold the call open.
    let start = Instant::now();
    assert_eq!(
        call(&b, json!({"command": "sleep 300 & echo started"})).await,
        "started\n"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn huge_output_is_drained_and_cut_in_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(
        dir.path(),
        BashSettings {
            keep_head: 10,
            keep_tail: 10,
            ..BashSettings::default()
        },
    );
    let out = call(
        &b,
        json!({"command": "yes | head -c 100000000; echo; echo END"}),
    )
    .await;
    assert_eq!(
        out,
        "y\ny\ny\ny\ny\n\n... (99999985 bytes cut from the middle; 100000005 bytes in all) ...\n\ny\ny\n\nEND\n"
    );
    let err = call(
        &b,
        json!({"command": "yes err | head -c 5000000 >&2; exit 1"}),
    )
    .await;
    assert!(
        err.starts_with("error: Error (1):\nerr\nerr\ner\n... (4999980 bytes cut"),
        "{err}"
    );
    // Non-UTF-8 output does not break anything.
    assert_eq!(
        call(&b, json!({"command": "printf 'a\\377b'"})).await,
        "a\u{fffd}b"
    );
}

#[tokio::test]
async fn the_environment_is_an_allow_list() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(
        dir.path(),
        BashSettings {
            env: [("GREETING".to_owned(), "hello".to_owned())].into(),
            ..BashSettings::default()
        },
    );
    let env = call(
        &b,
        json!({"command": "env | cut -d= -f1 | sort | tr '\\n' ' '"}),
    )
    .await;
    for leaked in [
        "CARGO_PKG_NAME",
        "RUST_BACKTRACE",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
    ] {
        assert!(!env.contains(leaked), "{leaked} leaked: {env}");
    }
    assert!(env.contains("PATH "), "{env}");
    assert_eq!(
        call(&b, json!({"command": "echo $GREETING"})).await,
        "hello\n"
    );
    assert_eq!(
        call(&b, json!({"command": "echo ${CARGO_MANIFEST_DIR:-unset}"})).await,
        "unset\n"
    );
}
