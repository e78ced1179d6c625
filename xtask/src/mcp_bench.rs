//! The MCP benchmarks, against a release `jianmu mcp`: `tools/call` round trips of
//! `calculator` over stdio (p50, p99), twenty of them against one `run_script` making
//! the same twenty calls, and a load test of the Streamable HTTP service
//! on 127.0.0.1 (50 sessions at once, 200 calls each: throughput, p50, p99, the
//! server's peak RSS), from minimal clients in this process.

use std::io::{BufRead, BufReader, Read as _, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{cargo, root, run as run_cmd};

/// The `jianmu` measured: `JIANMU_BENCH_BINARY` (e.g. a `--profile profiling` build
/// under a profiler), else a release build made here.
fn binary() -> anyhow::Result<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("JIANMU_BENCH_BINARY") {
        return Ok(path.into());
    }
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
    run_cmd(c)?;
    Ok(root().join("target/release/jianmu"))
}

/// `jianmu mcp` on stdio in `dir` (with `TMPDIR` set to `tmp`, when given): the
/// process, its stdin and its stdout.
pub(crate) fn start_stdio(
    jianmu: &std::path::Path,
    dir: &std::path::Path,
    tmp: Option<&std::path::Path>,
) -> anyhow::Result<(
    std::process::Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
)> {
    let mut command = Command::new(jianmu);
    if let Some(tmp) = tmp {
        command.env("TMPDIR", tmp);
    }
    let mut child = command
        .args(["mcp", "--workspace"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start jianmu mcp")?;
    let input = child.stdin.take().context("no stdin")?;
    let output = BufReader::new(child.stdout.take().context("no stdout")?);
    Ok((child, input, output))
}

/// The `initialize` request a benchmark client opens with.
pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#;

/// A stdio MCP server's pipes, one JSON-RPC line each way.
pub(crate) struct Lines {
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
}

impl Lines {
    pub(crate) fn new(
        input: std::process::ChildStdin,
        output: BufReader<std::process::ChildStdout>,
    ) -> Self {
        Self { input, output }
    }

    /// Sends one line (a notification: no answer is read).
    pub(crate) fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.input.write_all(line.as_bytes())?;
        self.input.write_all(b"\n")?;
        self.input.flush()?;
        Ok(())
    }

    /// Sends one line and reads the next line back.
    pub(crate) fn ask(&mut self, line: &str) -> anyhow::Result<String> {
        self.send(line)?;
        let mut answer = String::new();
        self.output.read_line(&mut answer)?;
        Ok(answer)
    }

    /// `initialize`, then `notifications/initialized`.
    pub(crate) fn handshake(&mut self) -> anyhow::Result<()> {
        self.ask(INITIALIZE)?;
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
    }
}

pub(crate) fn run() -> anyhow::Result<()> {
    let jianmu = binary()?;
    let dir = std::env::temp_dir();
    let (mut child, input, output) = start_stdio(&jianmu, &dir, None)?;
    let mut lines = Lines::new(input, output);
    lines.handshake()?;
    let mut times: Vec<Duration> = Vec::new();
    for id in 1..=3000u32 {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"calculator","arguments":{{"input":"(12+34)*5-67//8"}}}}}}"#
        );
        let start = Instant::now();
        let reply = lines.ask(&call)?;
        let took = start.elapsed();
        if !reply.contains("\"222\"") {
            bail!("unexpected reply: {reply}");
        }
        if id > 500 {
            times.push(took);
        }
    }
    let (turns, script) = code_mode(&mut lines)?;
    drop(child.kill());
    let _ = child.wait();
    println!(
        "\nCode mode over stdio: 20 calculator calls as 20 tools/call round trips {:.0} us, as one run_script {:.0} us: {:.1}x (medians of 200)",
        turns.as_secs_f64() * 1e6,
        script.as_secs_f64() * 1e6,
        turns.as_secs_f64() / script.as_secs_f64()
    );
    times.sort();
    let p = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize];
    println!(
        "\nMCP tools/call round trip (calculator over stdio, {} calls): p50 {:.0} us, p99 {:.0} us (goal: p50 <= 1 ms)",
        times.len(),
        p(0.5).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6
    );
    http_load(&jianmu, &dir, p(0.5))?;
    handles_mix(&jianmu)?;
    idle_handles(&jianmu)
}

/// Twenty `calculator` calls made as twenty `tools/call` round trips, and as one
/// `run_script` that makes them: the median time of each, over 200 rounds.
fn code_mode(lines: &mut Lines) -> anyhow::Result<(Duration, Duration)> {
    let mut id = 100_000u32;
    let mut turns = Vec::new();
    let mut scripts = Vec::new();
    let script = r#"{"code":"let s = 0; for i in 0..20 { s += parse_int(calculator(\"(12+34)*5-67//8\")); } s"}"#;
    for _ in 0..200 {
        let start = Instant::now();
        for _ in 0..20 {
            id += 1;
            let reply = lines.ask(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"calculator","arguments":{{"input":"(12+34)*5-67//8"}}}}}}"#
            ))?;
            if !reply.contains("\"222\"") {
                bail!("unexpected reply: {reply}");
            }
        }
        turns.push(start.elapsed());
        id += 1;
        let start = Instant::now();
        let reply = lines.ask(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"run_script","arguments":{script}}}}}"#
        ))?;
        scripts.push(start.elapsed());
        if !reply.contains("value: 4440") {
            bail!("unexpected reply: {reply}");
        }
    }
    turns.sort();
    scripts.sort();
    Ok((turns[turns.len() / 2], scripts[scripts.len() / 2]))
}

/// Sessions opened at once by the HTTP load test, and calls per session.
const SESSIONS: usize = 50;
const CALLS: usize = 200;
const TOKEN: &str = "bench-token-0123456789abcdef";

/// `jianmu mcp --http` on 127.0.0.1 under [`SESSIONS`] clients at once, each on its own
/// keep-alive connection, each making [`CALLS`] calls in a row.
/// `jianmu mcp --http 127.0.0.1:0` on `dir` with [`TOKEN`], and the address it
/// serves on.
pub(crate) fn start_http(
    jianmu: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<(std::process::Child, String)> {
    start_http_with(jianmu, dir, &[])
}

/// [`start_http`] with more flags.
fn start_http_with(
    jianmu: &std::path::Path,
    dir: &std::path::Path,
    flags: &[&std::ffi::OsStr],
) -> anyhow::Result<(std::process::Child, String)> {
    let mut child = Command::new(jianmu)
        .args(["mcp", "--http", "127.0.0.1:0", "--workspace"])
        .arg(dir)
        .args(flags)
        .env("JIANMU_MCP_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start jianmu mcp --http")?;
    let mut stderr = BufReader::new(child.stderr.take().context("no stderr")?);
    let mut line = String::new();
    stderr.read_line(&mut line)?;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|w| w.strip_suffix("/mcp"))
        .with_context(|| format!("no address in {line:?}"))?
        .to_owned();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Ok((child, addr))
}

fn http_load(
    jianmu: &std::path::Path,
    dir: &std::path::Path,
    stdio_p50: Duration,
) -> anyhow::Result<()> {
    let (mut child, addr) = start_http(jianmu, dir)?;
    let pid = child.id();
    let start = Instant::now();
    let mut times = joined(clients(&addr, session))?;
    let wall = start.elapsed();
    let peak = memory_kb(pid, "VmHWM:")?;
    let cpu_ticks = cpu_ticks(pid)?;
    drop(child.kill());
    let _ = child.wait();
    let (p50, p99) = percentiles(&mut times);
    println!(
        "MCP over Streamable HTTP ({SESSIONS} sessions at once x {CALLS} calculator calls): {:.0} calls/s, p50 {:.0} us, p99 {:.0} us, server peak RSS {:.1} MB, server CPU {:.0} us per call; stdio p50 {:.0} us in the same run (goals: >= 5000 calls/s, p99 <= 5 ms, RSS <= 100 MB)",
        times.len() as f64 / wall.as_secs_f64(),
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        peak as f64 / 1024.0,
        cpu_ticks as f64 * 1e4 / times.len() as f64,
        stdio_p50.as_secs_f64() * 1e6,
    );
    Ok(())
}

/// A process's memory figure `field` (`VmHWM:` peak, `VmRSS:` now), in kB.
fn memory_kb(pid: u32, field: &str) -> anyhow::Result<u64> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0))
}

/// A process's CPU time so far (utime + stime), in clock ticks (100 per second).
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/stat"))?
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|t| t.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0))
}

/// A server whose principal may keep `n` shell sessions and `n` jobs, in a folder of
/// its own.
fn roomy_server(
    jianmu: &std::path::Path,
    n: usize,
) -> anyhow::Result<(Scratch, std::process::Child, String)> {
    let dir = Scratch::new(&format!("jm-bench-handles-{n}"))?;
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.http]\nmax_protocol_sessions = 1000\n[mcp.http.principal.tools.bash]\nmax_shell_sessions = {n}\nmax_jobs = {n}\n"
        ),
    )?;
    let (child, addr) = start_http_with(
        jianmu,
        dir.path(),
        &["--config".as_ref(), config.as_os_str()],
    )?;
    Ok((dir, child, addr))
}

/// A folder of the bench's own, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Client = std::thread::JoinHandle<anyhow::Result<Vec<Duration>>>;

/// [`SESSIONS`] threads, each running `client` against `addr`.
fn clients(addr: &str, client: fn(&str) -> anyhow::Result<Vec<Duration>>) -> Vec<Client> {
    (0..SESSIONS)
        .map(|_| {
            let addr = addr.to_owned();
            std::thread::spawn(move || client(&addr))
        })
        .collect()
}

/// The call times of every client, once all have ended.
fn joined(clients: Vec<Client>) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(SESSIONS * CALLS);
    for c in clients {
        times.extend(
            c.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??,
        );
    }
    Ok(times)
}

/// The p50 and p99 of `times` (sorted here).
fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let p = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize];
    (p(0.5), p(0.99))
}

/// 50 handshake-era sessions and 50 stateless (2026-07-28) clients at once, each
/// making [`CALLS`] calls: the sessions call `calculator`; each stateless client
/// starts a background job (its handle) and then reads it with `bash_output`, a call
/// that finds the job through the principal's scope.
fn handles_mix(jianmu: &std::path::Path) -> anyhow::Result<()> {
    let (_dir, mut child, addr) = roomy_server(jianmu, 2 * SESSIONS)?;
    let pid = child.id();
    let cpu_before = cpu_ticks(pid)?;
    let start = Instant::now();
    let legacy = clients(&addr, session);
    let stateless = clients(&addr, handle_client);
    let mut legacy = joined(legacy)?;
    let mut stateless = joined(stateless)?;
    let wall = start.elapsed();
    let cpu = cpu_ticks(pid)? - cpu_before;
    let peak = memory_kb(pid, "VmHWM:")?;
    drop(child.kill());
    let _ = child.wait();
    let calls = legacy.len() + stateless.len();
    let (lp50, lp99) = percentiles(&mut legacy);
    let (sp50, sp99) = percentiles(&mut stateless);
    println!(
        "MCP over Streamable HTTP, {SESSIONS} handshake sessions (calculator) and {SESSIONS} stateless clients with handles (bash_output of their job) at once, {CALLS} calls each: {:.0} calls/s; sessions p50 {:.0} us, p99 {:.0} us; stateless p50 {:.0} us, p99 {:.0} us; server peak RSS {:.1} MB, server CPU {:.0} us per call (goals: >= 15000 calls/s, p99 <= 5 ms each)",
        calls as f64 / wall.as_secs_f64(),
        lp50.as_secs_f64() * 1e6,
        lp99.as_secs_f64() * 1e6,
        sp50.as_secs_f64() * 1e6,
        sp99.as_secs_f64() * 1e6,
        peak as f64 / 1024.0,
        cpu as f64 * 1e4 / calls as f64,
    );
    Ok(())
}

/// A stateless request's body: `method` with `params` and the per-request `_meta`.
fn stateless_body(id: usize, method: &str, params: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    )
}

/// One stateless client: starts a job, then reads it [`CALLS`] times.
fn handle_client(addr: &str) -> anyhow::Result<Vec<Duration>> {
    let mut http = Http::stateless(addr)?;
    let start = stateless_body(
        0,
        "tools/call",
        r#""name":"bash","arguments":{"command":"exec sleep 600","background":true,"yield_ms":0}"#,
    );
    let (status, _, body) = http.call("bash", &start)?;
    let job = body
        .split("\"job\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .with_context(|| format!("no job in {status}: {body}"))?;
    let mut times = Vec::with_capacity(CALLS);
    for id in 1..=CALLS {
        let read = stateless_body(
            id,
            "tools/call",
            &format!(r#""name":"bash_output","arguments":{{"job":{job}}}"#),
        );
        let started = Instant::now();
        let (status, _, body) = http.call("bash_output", &read)?;
        times.push(started.elapsed());
        if status != 200 || !body.contains("\"running\":true") {
            bail!("unexpected answer {status}: {body}");
        }
    }
    let stop = stateless_body(
        0,
        "tools/call",
        &format!(r#""name":"bash_kill","arguments":{{"job":{job}}}"#),
    );
    http.call("bash_kill", &stop)?;
    Ok(times)
}

/// 1,000 idle handles (named shell sessions, each with its shell) held by one
/// principal's scope: the server's resident memory with them.
fn idle_handles(jianmu: &std::path::Path) -> anyhow::Result<()> {
    const HANDLES: usize = 1000;
    let (_dir, mut child, addr) = roomy_server(jianmu, HANDLES)?;
    let pid = child.id();
    let before = memory_kb(pid, "VmRSS:")?;
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let addr = addr.clone();
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut http = Http::stateless(&addr)?;
                for i in (w..HANDLES).step_by(4) {
                    let body = stateless_body(
                        i,
                        "tools/call",
                        &format!(
                            r#""name":"bash","arguments":{{"command":"export N={i}","session":"h{i}"}}"#
                        ),
                    );
                    let (status, _, answer) = http.call("bash", &body)?;
                    if status != 200 || answer.contains("\"isError\":true") {
                        bail!("handle h{i}: {status}: {answer}");
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    let opened = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss = memory_kb(pid, "VmRSS:")?;
    drop(child.kill());
    let _ = child.wait();
    println!(
        "{HANDLES} idle handles (named shell sessions, each with its bash) in one principal's scope: server RSS {:.1} MB (it was {:.1} MB before them), opened in {:.1} s (goal: RSS <= 100 MB)",
        rss as f64 / 1024.0,
        before as f64 / 1024.0,
        opened.as_secs_f64(),
    );
    Ok(())
}

/// One client: opens a session, makes [`CALLS`] calls, closes it; the calls' times.
fn session(addr: &str) -> anyhow::Result<Vec<Duration>> {
    let mut http = Http::open(addr)?;
    let mut times = Vec::with_capacity(CALLS);
    for id in 1..=CALLS {
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"calculator","arguments":{{"input":"(12+34)*5-67//8"}}}}}}"#
        );
        let started = Instant::now();
        let (status, _, body) = http.post(&call)?;
        times.push(started.elapsed());
        if status != 200 || !body.contains("\"222\"") {
            bail!("unexpected answer {status}: {body}");
        }
    }
    http.request("DELETE", "")?;
    Ok(times)
}

/// A minimal HTTP/1.1 client on one keep-alive connection.
pub(crate) struct Http {
    addr: String,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    session: Option<String>,
    /// A stateless client's tool being called.
    modern: Option<String>,
}

impl Http {
    /// Connects to `addr` and opens an MCP session (handshake revision 2025-06-18).
    pub(crate) fn open(addr: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut http = Http {
            addr: addr.to_owned(),
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            session: None,
            modern: None,
        };
        let (_, headers, _) = http.post(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#,
        )?;
        http.session = headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        });
        if http.session.is_none() {
            bail!("no session id in {headers}");
        }
        http.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(http)
    }

    /// Connects to `addr` as a stateless (2026-07-28) client: no handshake.
    pub(crate) fn stateless(addr: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Http {
            addr: addr.to_owned(),
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            session: None,
            modern: None,
        })
    }

    /// A stateless `tools/call` of `tool` (its standard headers say so).
    pub(crate) fn call(&mut self, tool: &str, body: &str) -> anyhow::Result<(u16, String, String)> {
        self.modern = Some(tool.to_owned());
        self.request("POST", body)
    }

    pub(crate) fn post(&mut self, body: &str) -> anyhow::Result<(u16, String, String)> {
        self.request("POST", body)
    }

    /// Sends one request; the status, the header lines and the body.
    pub(crate) fn request(
        &mut self,
        method: &str,
        body: &str,
    ) -> anyhow::Result<(u16, String, String)> {
        let mut head = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(id) = &self.session {
            head.push_str(&format!(
                "Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
            ));
        }
        if let Some(tool) = &self.modern {
            head.push_str(&format!(
                "Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
            ));
        }
        head.push_str("\r\n");
        head.push_str(body);
        self.writer.write_all(head.as_bytes())?;
        let mut status = String::new();
        self.reader.read_line(&mut status)?;
        let code: u16 = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("bad status line {status:?}"))?;
        let mut headers = String::new();
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.parse()?;
                } else if k.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = v.eq_ignore_ascii_case("chunked");
                }
            }
            headers.push_str(&line);
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16)?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length, 0);
            self.reader.read_exact(&mut body)?;
        }
        Ok((code, headers, String::from_utf8_lossy(&body).into_owned()))
    }
}
