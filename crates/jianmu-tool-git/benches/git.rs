//! `git_status` and `git_log` (100 commits) through the tools, against `git status`
//! and `git log -n 100` run directly in the same run, on a repository of 10,000
//! commits and 1,000 files that the bench makes (once, under `target/bench-data`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolHandle};
use serde_json::json;

const COMMITS: usize = 10_000;
const FILES: usize = 1_000;

fn git(dir: &Path) -> std::process::Command {
    let mut c = jianmu_process::std_command("git");
    c.current_dir(dir);
    c
}

/// The repository: made with `git fast-import`, then checked out.
fn repo() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data/git-10k");
    if dir.join(".git/jianmu-bench-ready").exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(
        git(&dir)
            .args(["init", "-q", "-b", "main"])
            .status()
            .unwrap()
            .success()
    );
    let mut stream = String::new();
    for i in 0..COMMITS {
        let body = format!("line {i}\n");
        let message = format!("change {i}: file {}\n", i % FILES);
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter Bench <bench@example.com> {} +0000\ndata {}\n{message}",
            1_700_000_000 + i,
            message.len()
        ));
        stream.push_str(&format!(
            "M 644 inline src/f{:04}.txt\ndata {}\n{body}\n",
            i % FILES,
            body.len()
        ));
    }
    let mut child = git(&dir)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        git(&dir)
            .args(["reset", "-q", "--hard", "main"])
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(dir.join(".git/jianmu-bench-ready"), "").unwrap();
    dir
}

fn tool(dir: &Path, name: &str) -> ToolHandle {
    tool_with(dir, name, json!({}))
}

fn tool_with(dir: &Path, name: &str, settings: serde_json::Value) -> ToolHandle {
    let config = ToolConfig::new(dir).with_settings("git", settings);
    let registration = jianmu_tool_core::registrations()
        .find(|r| r.name == name)
        .expect("registered");
    (registration.build)(&config).unwrap()
}

fn bench(c: &mut Criterion) {
    // The crate must be linked for its tools to register.
    let _ = std::any::type_name::<jianmu_tool_git::GitSettings>();
    let dir = repo();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = tool(&dir, "git_status");
    let log = tool(&dir, "git_log");
    let off = json!({"isolation": {"mode": "off"}});
    let status_off = tool_with(&dir, "git_status", off.clone());
    let log_off = tool_with(&dir, "git_log", off);
    let call = |t: &ToolHandle, args: serde_json::Value| {
        let t = t.clone();
        async move { t.execute(args, ExecuteOptions::default()).await.unwrap() }
    };
    let out = rt.block_on(call(&log, json!({"max_count": 100})));
    assert_eq!(out.text.lines().count(), 101, "{}", out.text);
    assert!(
        rt.block_on(call(&status, json!({})))
            .text
            .contains("no changes")
    );
    let run = |args: &[&str]| {
        let out = git(&dir).args(args).stderr(Stdio::null()).output().unwrap();
        assert!(out.status.success());
        out.stdout
    };
    let mut group = c.benchmark_group("git");
    group.bench_function("status_tool", |b| {
        b.to_async(&rt).iter(|| call(&status, json!({})));
    });
    group.bench_function("status_tool_supervised_only", |b| {
        b.to_async(&rt).iter(|| call(&status_off, json!({})));
    });
    group.bench_function("status_git", |b| b.iter(|| run(&["status"])));
    group.bench_function("log_100_tool", |b| {
        b.to_async(&rt)
            .iter(|| call(&log, json!({"max_count": 100})));
    });
    group.bench_function("log_100_tool_supervised_only", |b| {
        b.to_async(&rt)
            .iter(|| call(&log_off, json!({"max_count": 100})));
    });
    group.bench_function("log_100_git", |b| b.iter(|| run(&["log", "-n", "100"])));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
