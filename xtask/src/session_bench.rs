//! `cargo xtask bench --session-only [--against REV]`: what opening sessions and
//! listing tools cost, against a release `jianmu` of an older commit in the same run:
//! `jianmu tools --json` (wall time; files and folders it leaves in an empty
//! workspace and `TMPDIR`), MCP `tools/list` on stdio (the first answer after the
//! handshake, the way from starting the server to it, then the median; processes
//! below the server), the RSS an idle HTTP
//! session adds to the server, and a no-op call through `ToolSet` and the full
//! runner stack (the `dispatch` criterion bench of each tree).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::mcp_bench::{Http, INITIALIZE, Lines, start_http, start_stdio};
use crate::{cargo, output, root, run as run_cmd};

/// Idle HTTP sessions opened to measure their memory.
const IDLE_SESSIONS: usize = 50;

/// One tree's figures.
struct Figures {
    tools_ms: f64,
    tools_left: usize,
    first_list_ms: f64,
    start_list_ms: f64,
    list_us: f64,
    children: usize,
    session_kib: f64,
    noop_ns: Option<f64>,
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let against = args
        .iter()
        .position(|a| a == "--against")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let new = build(&root(), "new")?;
    let old = match &against {
        Some(rev) => Some((rev.clone(), old_tree(rev)?)),
        None => None,
    };
    let old_binary = match &old {
        Some((_, tree)) => Some(build(tree, "old")?),
        None => None,
    };
    let mut rows = vec![("this tree".to_owned(), measure(&new, &root())?)];
    if let (Some((rev, tree)), Some(binary)) = (&old, &old_binary) {
        rows.push((format!("at {rev}"), measure(binary, tree)?));
    }
    println!(
        "\nSessions and listing (medians; `jianmu tools` over 20 runs, first lists of {FRESH_SERVERS} fresh servers, tools/list over 200, {IDLE_SESSIONS} idle HTTP sessions)"
    );
    println!(
        "{:<16} {:>12} {:>10} {:>16} {:>18} {:>12} {:>10} {:>16} {:>12}",
        "",
        "tools (ms)",
        "left",
        "1st list (ms)",
        "start→list (ms)",
        "list (us)",
        "children",
        "KiB/session",
        "no-op (ns)"
    );
    for (name, f) in &rows {
        println!(
            "{name:<16} {:>12.1} {:>10} {:>16.2} {:>18.2} {:>12.0} {:>10} {:>16.0} {:>12}",
            f.tools_ms,
            f.tools_left,
            f.first_list_ms,
            f.start_list_ms,
            f.list_us,
            f.children,
            f.session_kib,
            f.noop_ns.map_or("-".to_owned(), |n| format!("{n:.0}")),
        );
    }
    Ok(())
}

/// A worktree of `rev` under `target/bench-old`, made once and moved to `rev`.
fn old_tree(rev: &str) -> anyhow::Result<PathBuf> {
    let tree = root().join("target/bench-old");
    if !tree.join(".git").exists() {
        let mut c = Command::new("git");
        c.current_dir(root())
            .args(["worktree", "add", "--force", "--detach"])
            .arg(&tree)
            .arg(rev);
        run_cmd(c)?;
    } else {
        let mut c = Command::new("git");
        c.current_dir(&tree).args(["checkout", "--detach", rev]);
        run_cmd(c)?;
    }
    Ok(tree)
}

/// Where `tree` builds: this tree in `target`, another in a target folder of its own
/// (workspace crates are named by their path inside the workspace, so two trees in
/// one target folder would overwrite each other's artifacts).
fn target_of(tree: &Path) -> PathBuf {
    if tree == root() {
        root().join("target")
    } else {
        root().join("target/bench-old-target")
    }
}

/// A release `jianmu` of `tree`, copied to `target/bench-NAME-bin/jianmu`.
fn build(tree: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let target = target_of(tree);
    let mut c = cargo();
    c.current_dir(tree).env("CARGO_TARGET_DIR", &target).args([
        "build",
        "--release",
        "--locked",
        "-p",
        "jianmu-cli",
    ]);
    run_cmd(c)?;
    let dir = root().join(format!("target/bench-{name}-bin"));
    std::fs::create_dir_all(&dir)?;
    let binary = dir.join("jianmu");
    std::fs::copy(target.join("release/jianmu"), &binary)?;
    Ok(binary)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, Iterator::count)
}

fn measure(jianmu: &Path, tree: &Path) -> anyhow::Result<Figures> {
    let work = tempfile_dir("ws")?;
    let tmp = tempfile_dir("tmp")?;
    let mut runs = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let out = Command::new(jianmu)
            .env("TMPDIR", &tmp)
            .arg("--workspace")
            .arg(&work)
            .args(["tools", "--json"])
            .output()?;
        runs.push(started.elapsed().as_secs_f64() * 1e3);
        if !out.status.success() {
            bail!("jianmu tools failed: {out:?}");
        }
    }
    let tools_left = entries(&work) + entries(&tmp);
    let (first_list_ms, start_list_ms, list_us, children) = stdio_list(jianmu, &work, &tmp)?;
    let session_kib = idle_sessions(jianmu, &work)?;
    let noop_ns = noop(tree)?;
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(Figures {
        tools_ms: median(runs),
        tools_left,
        first_list_ms,
        start_list_ms,
        list_us,
        children,
        session_kib,
        noop_ns,
    })
}

fn tempfile_dir(what: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "jianmu-session-bench-{what}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Fresh stdio servers asked for their first list.
const FRESH_SERVERS: usize = 10;

/// Over [`FRESH_SERVERS`] fresh servers, the medians of the first `tools/list` after
/// the handshake (ms) and of the whole way from starting the server to that answer
/// (ms, what a client waits); then, on the last server, the median of 200 more lists
/// (µs) and how many processes the server has below it.
fn stdio_list(jianmu: &Path, work: &Path, tmp: &Path) -> anyhow::Result<(f64, f64, f64, usize)> {
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let (mut firsts, mut starts) = (Vec::new(), Vec::new());
    for round in 0..FRESH_SERVERS {
        let spawned = Instant::now();
        let (mut child, input, output) = start_stdio(jianmu, work, Some(tmp))?;
        let mut lines = Lines::new(input, output);
        let mut ask = |line: &str| lines.ask(line);
        ask(INITIALIZE)?;
        let started = Instant::now();
        let first = ask(list)?;
        firsts.push(started.elapsed().as_secs_f64() * 1e3);
        starts.push(spawned.elapsed().as_secs_f64() * 1e3);
        if !first.contains("calculator") {
            bail!("tools/list did not list the tools: {first}");
        }
        if round + 1 < FRESH_SERVERS {
            drop(lines);
            let _ = child.wait();
            continue;
        }
        let mut times = Vec::new();
        for _ in 0..200 {
            let started = Instant::now();
            ask(list)?;
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let children = children_of(child.id());
        drop(lines);
        let _ = child.wait();
        return Ok((median(firsts), median(starts), median(times), children));
    }
    bail!("no server was asked")
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .count()
}

fn rss_kib(pid: u32) -> anyhow::Result<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .context("no VmRSS")
}

/// The RSS one idle HTTP session adds: the server's RSS after [`IDLE_SESSIONS`] more
/// sessions, less its RSS with one, per session.
fn idle_sessions(jianmu: &Path, work: &Path) -> anyhow::Result<f64> {
    let (mut child, addr) = start_http(jianmu, work)?;
    let first = Http::open(&addr)?;
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_kib(child.id())?;
    let open: Vec<Http> = (0..IDLE_SESSIONS)
        .map(|_| Http::open(&addr))
        .collect::<anyhow::Result<_>>()?;
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_kib(child.id())?;
    drop(open);
    drop(first);
    let _ = child.kill();
    let _ = child.wait();
    Ok((after - before) / IDLE_SESSIONS as f64)
}

/// The `dispatch/toolset_runner_events` estimate of `tree`'s dispatch bench (a no-op
/// tool through `ToolSet` and the full stack), in ns.
fn noop(tree: &Path) -> anyhow::Result<Option<f64>> {
    let krate = if tree.join("crates/jianmu-runtime").exists() {
        "jianmu-runtime"
    } else {
        "jianmu-sandbox"
    };
    let mut c = cargo();
    c.current_dir(tree)
        .env("CARGO_TARGET_DIR", root().join("target"))
        .args([
            "bench", "--locked", "-p", krate, "--bench", "dispatch", "--",
        ])
        .args(["--noplot", "--warm-up-time", "1", "--measurement-time", "3"])
        .arg("dispatch/toolset_runner_events");
    let text = output(c)?;
    Ok(text
        .lines()
        .skip_while(|l| !l.contains("toolset_runner_events"))
        .find_map(|l| l.split_once("time:"))
        .and_then(|(_, t)| {
            let t = t.trim().trim_start_matches('[');
            let mut parts = t.split_whitespace().skip(2);
            let value: f64 = parts.next()?.parse().ok()?;
            let scale = match parts.next()? {
                "ps" => 1e-3,
                "ns" => 1.0,
                "µs" | "us" => 1e3,
                "ms" => 1e6,
                _ => return None,
            };
            Some(value * scale)
        }))
}
