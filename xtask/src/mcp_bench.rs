//! The MCP benchmark: `tools/call` round trips of `calculator` to a release `jianmu mcp`
//! over stdio, from a minimal JSON-RPC client in this process; prints p50 and p99.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{cargo, root, run as run_cmd};

pub(crate) fn run() -> anyhow::Result<()> {
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
    run_cmd(c)?;
    let dir = std::env::temp_dir();
    let mut child = Command::new(root().join("target/release/jianmu"))
        .args(["mcp", "--workspace"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start jianmu mcp")?;
    let mut input = child.stdin.take().context("no stdin")?;
    let mut output = BufReader::new(child.stdout.take().context("no stdout")?);
    let mut line = String::new();
    let mut request = |text: String, expect_reply: bool| -> anyhow::Result<String> {
        input.write_all(text.as_bytes())?;
        input.write_all(b"\n")?;
        input.flush()?;
        line.clear();
        if expect_reply {
            output.read_line(&mut line)?;
        }
        Ok(line.clone())
    };
    request(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#.into(),
        true,
    )?;
    request(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
        false,
    )?;
    let mut times: Vec<Duration> = Vec::new();
    for id in 1..=3000u32 {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"calculator","arguments":{{"input":"(12+34)*5-67//8"}}}}}}"#
        );
        let start = Instant::now();
        let reply = request(call, true)?;
        let took = start.elapsed();
        if !reply.contains("\"222\"") {
            bail!("unexpected reply: {reply}");
        }
        if id > 500 {
            times.push(took);
        }
    }
    drop(child.kill());
    times.sort();
    let p = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize];
    println!(
        "\nMCP tools/call round trip (calculator over stdio, {} calls): p50 {:.0} us, p99 {:.0} us (goal: p50 <= 1 ms)",
        times.len(),
        p(0.5).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6
    );
    Ok(())
}
