//! `jianmu mcp --http` driven by a real MCP client (the Python `mcp` package) over
//! Streamable HTTP on 127.0.0.1: tokens, origins, protocol revisions, one state per
//! session, everything a session held gone when it closes, graceful SIGTERM.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TOKEN: &str = "test-token-0123456789abcdef";

/// A temporary folder holding an empty workspace, `ws`.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    (dir, ws)
}

/// The tokens of the two principals the tests use.
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// A token file in `dir` naming `alice` and `bob` (with a comment and a blank line).
fn two_principals(dir: &Path) -> PathBuf {
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("# who may call\n\nalice {ALICE}\nbob {BOB}\n"),
    )
    .unwrap();
    tokens
}

/// A `jianmu mcp --http 127.0.0.1:0` server and the URL it serves.
pub(crate) struct Served {
    child: Child,
    pub(crate) url: String,
}

impl Served {
    pub(crate) fn start(ws: &Path, flags: &[&str]) -> Self {
        Self::start_in(ws, flags, &[])
    }

    /// With `env` set for the server.
    pub(crate) fn start_in(ws: &Path, flags: &[&str], env: &[(&str, &Path)]) -> Self {
        let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
            .args(["mcp", "--http", "127.0.0.1:0", "--workspace"])
            .arg(ws)
            .args(flags)
            .envs(env.iter().copied())
            .env("JIANMU_MCP_TOKEN", TOKEN)
            .env_remove("JIANMU_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        // Keep reading stderr so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Self { child, url }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (at most 30 s) for the exit code.
    pub(crate) fn terminate(mut self) -> Option<i32> {
        let status = jianmu_process::std_command("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python client running one scenario, read step by step.
pub(crate) struct Client {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Client {
    pub(crate) fn start(url: &str, scenario: &str) -> Self {
        Self::start_with(url, TOKEN, scenario)
    }

    /// With `token` (for `handles`, two: `ALICE,BOB`).
    pub(crate) fn start_with(url: &str, token: &str, scenario: &str) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_http_client.py");
        let mut child = jianmu_process::std_command(crate::mcp::python())
            .arg(&script)
            .args([url, token, scenario])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            input,
            output,
        }
    }

    /// The next step the client reports.
    pub(crate) fn step(&mut self) -> Value {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a step: {line:?}"))
    }

    pub(crate) fn go_on(&mut self) {
        self.input.write_all(b"\n").unwrap();
        self.input.flush().unwrap();
    }

    pub(crate) fn finish(mut self) {
        assert!(self.child.wait().unwrap().success());
    }
}

/// A server with the settings file `config` and the token file `tokens`.
fn served_with(ws: &Path, config: &Path, tokens: &Path) -> Served {
    Served::start(
        ws,
        &[
            "--config",
            config.to_str().unwrap(),
            "--token-file",
            tokens.to_str().unwrap(),
        ],
    )
}

/// Processes below `pid`, as (pid, command name).
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let comm = stat[stat.find('(').unwrap() + 1..close].to_owned();
        let ppid: u32 = stat[close + 2..]
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        parent_of.push((p, ppid, comm));
    }
    let mut found = vec![pid];
    let mut out = Vec::new();
    let mut grew = true;
    while grew {
        grew = false;
        for (p, ppid, comm) in &parent_of {
            if found.contains(ppid) && !found.contains(p) {
                found.push(*p);
                out.push((*p, comm.clone()));
                grew = true;
            }
        }
    }
    out
}

/// Waits (at most 10 s) until `pid` has no processes below it.
#[track_caller]
fn until_no_descendants(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = descendants(pid);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_real_client_over_http_gets_tokens_origins_revisions_and_a_state_per_session() {
    let (_dir, ws) = scratch();
    let server = Served::start(&ws, &["--allow-origin", "http://allowed.example"]);
    let mut client = Client::start(&server.url, "main");

    let no_token = client.step();
    assert_eq!(
        (&no_token["status"], &no_token["www_authenticate"]),
        (&json!(401), &json!("Bearer"))
    );
    assert_eq!(client.step()["status"], 401, "a wrong token");
    let origin = client.step();
    assert_eq!(origin["status"], 403, "{origin}");
    assert!(
        origin["body"].as_str().unwrap().contains("--allow-origin"),
        "{origin}"
    );
    assert_eq!(client.step()["status"], 200, "an allowed origin");
    // Truncated JSON, a batch, a NUL, a message that is neither request nor
    // notification: each gets a 4xx with words in the body.
    let malformed = client.step();
    for answer in malformed["answers"].as_array().unwrap() {
        let status = answer[0].as_u64().unwrap();
        assert!((400..500).contains(&status), "{malformed}");
        assert_eq!(answer[1], true, "{malformed}");
    }
    // Three revisions: 2025-03-26 by a raw handshake, 2025-11-25 by the client's
    // handshake, 2026-07-28 stateless.
    let old = client.step();
    assert_eq!(
        old,
        json!({"step": "old_revision", "status": 200, "version": "2025-03-26", "session": true})
    );
    let legacy = client.step();
    assert_eq!(legacy["version"], "2025-11-25");
    assert_eq!(legacy["tools"].as_array().unwrap().len(), 39, "{legacy}");
    assert_eq!(
        legacy["ok"],
        json!([false, "1267650600228229401496703205376", null])
    );
    assert_eq!(
        legacy["written"],
        json!({"appended": false, "bytes_written": 2, "file_size": 2, "path": "a.txt",
               "text": "Wrote a.txt (2 bytes)"})
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "hi");
    let modern = client.step();
    assert_eq!(
        modern,
        json!({"step": "modern", "version": "2026-07-28", "tools": 39, "ok": [false, "42"]})
    );
    let observed = client.step();
    assert_eq!(observed["health"], json!([200, "ok\n"]));
    assert_eq!(observed["anonymous"], 401);
    let metrics = observed["metrics"][2].as_str().unwrap();
    assert!(
        metrics.lines().any(|l| l == "jianmu_mcp_sessions_total 3"),
        "two raw handshakes and the legacy client (stateless requests open no session): {metrics}"
    );
    assert_eq!(observed["metrics"][0], 200);
    assert!(
        observed["metrics"][1]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{observed}"
    );
    for line in [
        "jianmu_tool_calls_total{tool=\"calculator\"} 2",
        "jianmu_tool_calls_total{tool=\"write_file\"} 1",
        "jianmu_tool_call_duration_seconds_count{tool=\"calculator\"} 2",
        "jianmu_http_refused_total{reason=\"unauthorized\"} 3",
        "jianmu_http_refused_total{reason=\"origin\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    // Two sessions: each its own interpreter and shell.
    let isolated = client.step();
    assert_eq!(
        isolated,
        json!({"step": "isolated", "a": "1", "b": "2", "shell_a": "a\n", "shell_b": "b\n"})
    );
    assert_eq!(client.step()["step"], "held");
    let running = descendants(server.pid());
    let interpreters = running
        .iter()
        .filter(|(_, c)| c.starts_with("python"))
        .count();
    assert!(interpreters >= 2, "{running:?}");
    assert!(running.iter().any(|(_, c)| c == "bash"), "{running:?}");
    // Closing the sessions ends their interpreters and shells; the server goes on.
    client.go_on();
    assert_eq!(client.step()["step"], "closed");
    client.finish();
    until_no_descendants(server.pid());
    assert_eq!(server.terminate(), Some(0));
}

#[test]
fn each_session_gets_a_folder_of_its_own_removed_when_the_server_stops() {
    let (dir, ws) = scratch();
    let sessions = dir.path().join("sessions");
    let server = Served::start(
        &ws,
        &["--workspace-per-session", sessions.to_str().unwrap()],
    );
    let mut client = Client::start(&server.url, "workspaces");
    let seen = client.step();
    assert!(seen["a"].as_str().unwrap().contains("mine.txt"), "{seen}");
    assert!(!seen["b"].as_str().unwrap().contains("mine.txt"), "{seen}");
    let folders: Vec<PathBuf> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 2, "{folders:?}");
    let pwd = PathBuf::from(seen["pwd"].as_str().unwrap());
    assert!(folders.contains(&pwd), "{pwd:?} {folders:?}");
    assert_eq!(
        std::fs::read_to_string(pwd.join("mine.txt")).unwrap(),
        "a's"
    );
    assert!(std::fs::read_dir(&ws).unwrap().next().is_none());
    assert_eq!(client.step()["step"], "held");
    // The server stops with both sessions open: their folders go with them.
    assert_eq!(server.terminate(), Some(0));
    let left: Vec<PathBuf> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    client.go_on();
    assert_eq!(client.step()["step"], "closed");
    client.finish();
}

/// SIGTERM with a call running: the server waits the grace period, then cancels the
/// call, ends what it started, and exits 0.
#[test]
fn sigterm_cancels_a_running_call_after_the_grace_period_and_exits_cleanly() {
    let (dir, ws) = scratch();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(&config, "[mcp.http]\nshutdown_grace_secs = 1\n").unwrap();
    let server = Served::start(&ws, &["--config", config.to_str().unwrap()]);
    let pid = server.pid();
    let mut client = Client::start(&server.url, "slow");
    assert_eq!(client.step()["step"], "calling");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !descendants(pid).iter().any(|(_, c)| c == "sleep") {
        assert!(Instant::now() < deadline, "the call did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    assert_eq!(server.terminate(), Some(0));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "stopped before the grace period: {took:?}"
    );
    let ended = client.step();
    assert_eq!(
        ended,
        json!({"step": "failed", "error": "the server is shutting down: the call was cancelled"})
    );
    let _ = client.child.wait();
    // Nothing the call started is left anywhere.
    let left = jianmu_test_support::running_with("jianmu-slow-marker");
    assert!(left.is_empty(), "left running: {left:?}");
}

/// `max_sessions`, `max_body_bytes` and `session_idle_secs`: one session too many
/// gets 503, a body too big 413; an idle session expires and its interpreter ends.
#[test]
fn past_the_session_limit_is_503_and_idle_sessions_expire() {
    let (dir, ws) = scratch();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        "[mcp.http]\nmax_sessions = 1\nsession_idle_secs = 1\nmax_body_bytes = 2048\n",
    )
    .unwrap();
    let server = Served::start(&ws, &["--config", config.to_str().unwrap()]);
    let mut client = Client::start(&server.url, "limits");
    let full = client.step();
    assert_eq!(
        (&full["status"], &full["retry_after"]),
        (&json!(503), &json!("5")),
        "{full}"
    );
    assert_eq!(
        full["body"],
        "the server has its limit of 1 open sessions; retry later\n"
    );
    assert_eq!(client.step()["status"], 413, "a body over max_body_bytes");
    assert_eq!(client.step()["step"], "held");
    assert!(
        descendants(server.pid())
            .iter()
            .any(|(_, c)| c.starts_with("python")),
        "no interpreter"
    );
    // Idle past the limit: the session and its interpreter are gone.
    until_no_descendants(server.pid());
    client.go_on();
    let expired = client.step();
    assert_eq!(expired["gone"], true, "{expired}");
    assert_eq!(client.step()["status"], 200, "room for a new session");
    client.finish();
    assert_eq!(server.terminate(), Some(0));
}

#[test]
fn serving_beyond_loopback_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["mcp", "--http", "0.0.0.0:0"])
        .current_dir(dir.path())
        .env_remove("JIANMU_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "jianmu: refusing to serve on 0.0.0.0:0 without a token: set JIANMU_MCP_TOKEN or --token-file, or bind to 127.0.0.1\n"
    );
    let out = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["mcp", "--http", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env("JIANMU_MCP_TOKEN", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 16 characters"),
        "{out:?}"
    );
}

/// Container ids the engine runs now.
#[cfg(feature = "docker")]
fn running_containers() -> String {
    let out = jianmu_process::std_command("docker")
        .args(["ps", "--no-trunc", "--format", "{{.ID}}"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// With the Docker sandbox each session gets a container of its own (one from the
/// warm pool), removed when the session closes.
#[cfg(feature = "docker")]
#[test]
fn each_http_session_gets_its_own_container_removed_when_it_closes() {
    let (dir, ws) = scratch();
    crate::docker::give_to_sandbox_user(&ws);
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[execution.docker]\nimage = \"{}\"\npool_size = 1\n",
            crate::docker::test_image()
        ),
    )
    .unwrap();
    let server = Served::start(
        &ws,
        &["--sandbox", "docker", "--config", config.to_str().unwrap()],
    );
    let mut client = Client::start(&server.url, "containers");
    let seen = client.step();
    let (a, b) = (
        seen["a"][0].as_str().unwrap().to_owned(),
        seen["b"][0].as_str().unwrap().to_owned(),
    );
    assert_eq!((&seen["a"][1], &seen["b"][1]), (&json!("a"), &json!("b")));
    assert_ne!(a, b, "one container per session");
    assert_eq!(client.step()["step"], "held");
    let running = running_containers();
    for host in [&a, &b] {
        assert!(
            running.lines().any(|id| id.starts_with(host.as_str())),
            "{host} in {running}"
        );
    }
    client.go_on();
    assert_eq!(client.step()["step"], "closed");
    client.finish();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let running = running_containers();
        if !running
            .lines()
            .any(|id| id.starts_with(a.as_str()) || id.starts_with(b.as_str()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {running}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.terminate(), Some(0));
}

/// One raw HTTP/1.1 exchange with the server at `url` (whose path is ignored):
/// `head` is the request line and headers (without the blank line), `body` follows.
/// Returns the status code.
fn raw(url: &str, head: &str, body: &[u8]) -> u16 {
    raw_answer(url, head, body).0
}

/// Sends `request` (whole, with `Connection: close`) to the server at `url` and reads
/// the answer: its status (0 when none came) and its text. A refusal may come before
/// the body is read: the server then resets the connection after its answer, which
/// is kept.
fn exchange(url: &str, request: &[u8]) -> (u16, String) {
    use std::io::Read as _;
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    let all = String::from_utf8_lossy(&all).into_owned();
    (
        all.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0),
        all,
    )
}

/// As [`raw`]: the status and the body as JSON.
fn raw_answer(url: &str, head: &str, body: &[u8]) -> (u16, Value) {
    let mut request = format!("{head}\r\nConnection: close\r\n\r\n").into_bytes();
    request.extend_from_slice(body);
    let (status, text) = exchange(url, &request);
    let payload = text.split_once("\r\n\r\n").map_or("", |(_, p)| p);
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}

/// The review's HTTP findings: `Host` checked on every route, a declared body over the
/// limit refused before it is sent, a body that does not arrive in time refused, a
/// `DELETE` of an unknown session 404, and the open-files limit raised.
#[test]
fn every_route_checks_host_and_bodies_are_bounded_in_size_and_time() {
    let (dir, ws) = scratch();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(&config, "[mcp.http]\nbody_timeout_secs = 1\n").unwrap();
    let server = Served::start(&ws, &["--config", config.to_str().unwrap()]);
    let url = server.url.clone();
    let here = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let auth = format!("Authorization: Bearer {TOKEN}");
    for path in ["/healthz", "/metrics", "/mcp"] {
        assert_eq!(
            raw(
                &url,
                &format!("GET {path} HTTP/1.1\r\nHost: rebound.example:80\r\n{auth}"),
                b""
            ),
            403,
            "{path} with a foreign Host"
        );
    }
    assert_eq!(
        raw(&url, &format!("GET /healthz HTTP/1.1\r\nHost: {here}"), b""),
        200
    );
    assert_eq!(
        raw(
            &url,
            &format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{auth}"),
            b""
        ),
        200
    );
    // Declared over max_body_bytes (4 MiB by default): refused with no byte sent.
    let post = format!(
        "POST /mcp HTTP/1.1\r\nHost: {here}\r\n{auth}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream"
    );
    assert_eq!(
        raw(&url, &format!("{post}\r\nContent-Length: 100000000"), b""),
        413
    );
    // A body that does not come: 408 after body_timeout_secs.
    assert_eq!(
        raw(
            &url,
            &format!("{post}\r\nContent-Length: 100"),
            b"{\"jsonrpc\""
        ),
        408
    );
    assert_eq!(
        raw(
            &url,
            &format!("{post}\r\nTransfer-Encoding: chunked"),
            b"5\r\n{\"jso\r\n"
        ),
        408
    );
    // An id that is not an integer, and a body too deep to read, as on stdio.
    let fractional = br#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#;
    let (status, body) = raw_answer(
        &url,
        &format!("{post}\r\nContent-Length: {}", fractional.len()),
        fractional,
    );
    assert_eq!(status, 400);
    assert_eq!(
        (&body["id"], &body["error"]["code"]),
        (&Value::Null, &json!(-32600)),
        "{body}"
    );
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":52,"method":"tools/call","params":{}{}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    let (status, body) = raw_answer(
        &url,
        &format!("{post}\r\nContent-Length: {}", deep.len()),
        deep.as_bytes(),
    );
    assert_eq!(status, 400);
    assert_eq!(
        (&body["id"], &body["error"]["code"]),
        (&json!(52), &json!(-32700)),
        "{body}"
    );
    // Closing a session that is not open.
    assert_eq!(
        raw(
            &url,
            &format!(
                "DELETE /mcp HTTP/1.1\r\nHost: {here}\r\n{auth}\r\nMcp-Session-Id: no-such-session"
            ),
            b""
        ),
        404
    );
    // The open-files limit: soft raised to hard.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>();
    assert_eq!(files[0], files[1], "{limits}");
    assert_eq!(server.terminate(), Some(0));
}

/// With `max_connections`, one connection more waits (in the listen queue) until a
/// served one closes, instead of growing the server.
#[test]
fn connections_past_the_cap_wait_for_a_free_place() {
    use std::io::Read as _;
    let (dir, ws) = scratch();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(&config, "[mcp.http]\nmax_connections = 2\n").unwrap();
    let server = Served::start(&ws, &["--config", config.to_str().unwrap()]);
    let here = server
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let idle: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(&here).unwrap())
        .collect();
    // Both places are taken by idle connections: a third one is not served yet.
    std::thread::sleep(Duration::from_millis(200));
    let mut third = std::net::TcpStream::connect(&here).unwrap();
    third
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {here}\r\n\r\n").as_bytes())
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 12];
    assert!(third.read_exact(&mut buf).is_err(), "served past the cap");
    // One place frees: it is served.
    drop(idle);
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    third.read_exact(&mut buf).unwrap();
    assert_eq!(&buf[9..12], b"200");
    assert_eq!(server.terminate(), Some(0));
}

/// A stateless (2026-07-28) `tools/call` of `calculator` as `token`: the status and
/// the whole response text.
fn stateless_call(url: &str, token: &str, input: &str) -> (u16, String) {
    stateless_tool(url, token, "calculator", &json!({"input": input}))
}

/// A stateless (2026-07-28) `tools/call` of `tool` with `token`.
fn stateless_tool(url: &str, token: &str, tool: &str, args: &Value) -> (u16, String) {
    stateless(
        url,
        token,
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": args}),
    )
}

/// A stateless (2026-07-28) request `method` with `token` and `params` (`name`: the
/// `Mcp-Name` header).
fn stateless(
    url: &str,
    token: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> (u16, String) {
    let addr = url.trim_start_matches("http://").split('/').next().unwrap();
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let name = name.map_or(String::new(), |n| format!("Mcp-Name: {n}\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n{name}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(url, request.as_bytes())
}

/// One stateless `tools/list` as `token`: bash's description.
fn bash_description_for(url: &str, token: &str) -> String {
    let (status, text) = stateless(url, token, "tools/list", None, json!({}));
    assert_eq!(status, 200, "{text}");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let listed: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{text}"));
    let tools = listed["result"]["tools"].as_array().unwrap();
    let bash = tools.iter().find(|t| t["name"] == "bash").unwrap();
    bash["description"].as_str().unwrap().to_owned()
}

/// With a token file and a folder per principal both inside a home the commands see
/// otherwise, neither principal's `bash` nor `python_repl` reads the token file or
/// the other's folder (which lists only its own), and each writes in its own.
#[test]
fn principals_see_neither_the_tokens_nor_each_others_folders() {
    if !jianmu_process::Isolation::probe().namespaces {
        return; // no view on this kernel (see docs/isolation.md)
    }
    let (dir, ws) = scratch();
    let home = dir.path().join("home");
    let principals = home.join("principals");
    std::fs::create_dir_all(principals.join("bob")).unwrap();
    std::fs::write(principals.join("bob/diary.txt"), "SECRET-bob").unwrap();
    std::fs::write(home.join("notes.txt"), "visible-note").unwrap();
    let tokens = home.join("tokens");
    std::fs::write(&tokens, format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    // Bob's own isolation hides the note from him only.
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.http.principals.bob.isolation]\nread_deny = [{:?}]\n",
            home.join("notes.txt").display().to_string()
        ),
    )
    .unwrap();
    let server = Served::start_in(
        &ws,
        &[
            "--config",
            config.to_str().unwrap(),
            "--token-file",
            tokens.to_str().unwrap(),
            "--workspace-per-principal",
            principals.to_str().unwrap(),
        ],
        &[("HOME", &home)],
    );
    let command = format!(
        "cat {tokens} 2>&1; ls {principals}; cat {principals}/bob/diary.txt 2>&1; \
         echo mine > made-by-alice && pwd; cat {home}/notes.txt; true",
        tokens = tokens.display(),
        principals = principals.display(),
        home = home.display(),
    );
    let (status, text) = stateless_tool(&server.url, ALICE, "bash", &json!({"command": command}));
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains(ALICE) && !text.contains(BOB),
        "alice read the tokens: {text}"
    );
    assert!(!text.contains("SECRET"), "alice read bob's: {text}");
    assert!(
        text.contains("bob/diary.txt: No such file or directory")
            && text.contains("tokens: No such file or directory"),
        "{text}"
    );
    // Alice's listing of the principals' folder holds only her own.
    assert!(text.contains(r"\nalice\n"), "{text}");
    assert!(text.contains("visible-note"), "{text}");
    assert!(principals.join("alice/made-by-alice").exists(), "{text}");
    let code = format!(
        "import os\n\
         for p in [{tokens:?}, {mine:?}, {note:?}]:\n\
         \x20   try:\n\
         \x20       print('LEAK', open(p).read())\n\
         \x20   except OSError as e:\n\
         \x20       print('missing', e.errno)\n\
         print('folders', sorted(os.listdir({principals:?})))\n",
        tokens = tokens.display().to_string(),
        mine = principals.join("alice/made-by-alice").display().to_string(),
        note = home.join("notes.txt").display().to_string(),
        principals = principals.display().to_string(),
    );
    let (status, text) = stateless_tool(&server.url, BOB, "python_repl", &json!({"code": code}));
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("LEAK"), "bob read what is not his: {text}");
    assert_eq!(text.matches("missing 2").count(), 3, "{text}");
    assert!(text.contains(r#"folders ['bob']"#), "{text}");
    assert_eq!(server.terminate(), Some(0));
}

/// `--token-file` names principals: each authorized by its own token (compared in
/// constant time), named in the audit line of each of its calls; SIGHUP reloads the
/// file (a bad file keeps the tokens in force).
#[test]
fn principals_are_named_in_the_audit_log_and_reloaded_on_sighup() {
    let (dir, ws) = scratch();
    let tokens = two_principals(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let (alice, bob, bob2) = (ALICE, BOB, "bob-token-renewed-0123");
    let server = Served::start(
        &ws,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    let url = server.url.clone();
    let (status, text) = stateless_call(&url, alice, "6*7");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"42\""), "{text}");
    assert_eq!(stateless_call(&url, bob, "1+1").0, 200);
    assert_eq!(
        stateless_call(&url, "nobody-0123456789abcdef", "1+1").0,
        401
    );
    // The old single-token variable is not a principal any more here.
    assert_eq!(stateless_call(&url, TOKEN, "1+1").0, 401);
    let lines: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let who: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["principal"].as_str().unwrap(),
                l["arguments"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(who, [("alice", "6*7"), ("bob", "1+1")]);
    // Alice keeps a named interpreter across the reload.
    let keep = json!({"code": "kept = 'yes'", "session": "k"});
    assert_eq!(stateless_tool(&url, alice, "python_repl", &keep).0, 200);
    // Reload: bob's token renewed.
    std::fs::write(&tokens, format!("alice {alice}\nbob {bob2}\n")).unwrap();
    let hup = |pid: u32| {
        assert!(
            jianmu_process::std_command("kill")
                .args(["-HUP", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    hup(server.pid());
    let deadline = Instant::now() + Duration::from_secs(10);
    while stateless_call(&url, bob, "1").0 != 401 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        stateless_call(&url, bob, "1").0,
        401,
        "the old token still works"
    );
    assert_eq!(stateless_call(&url, bob2, "1").0, 200);
    assert_eq!(stateless_call(&url, alice, "1").0, 200);
    let (status, kept) = stateless_tool(
        &url,
        alice,
        "python_repl",
        &json!({"code": "kept", "session": "k"}),
    );
    assert!(
        status == 200 && kept.contains(r#""text":"yes""#),
        "a reload drops no state: {kept}"
    );
    // A bad file is refused: the tokens in force stay.
    std::fs::write(&tokens, "alice short\n").unwrap();
    hup(server.pid());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stateless_call(&url, alice, "2").0, 200);
    assert_eq!(stateless_call(&url, bob2, "2").0, 200);
    assert_eq!(server.terminate(), Some(0));
}

#[test]
fn stateless_clients_keep_state_through_handles_and_principals_never_meet() {
    let (dir, ws) = scratch();
    let homes = dir.path().join("principals");
    let tokens = two_principals(dir.path());
    let (alice, bob) = (ALICE, BOB);
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        "[mcp.http]\nsession_idle_secs = 4\n\
         [mcp.http.principals.bob]\nmax_sessions = 1\n\
         [mcp.http.principals.bob.tools.bash]\nmax_jobs = 1\n\
         [mcp.http.principals.bob.tools.python_repl.isolation]\nmax_memory_mb = 100\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let server = Served::start(
        &ws,
        &[
            "--config",
            config.to_str().unwrap(),
            "--token-file",
            tokens.to_str().unwrap(),
            "--workspace-per-principal",
            homes.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    let mut client = Client::start_with(&server.url, &format!("{alice},{bob}"), "handles");
    let a = client.step();
    assert_eq!(a["version"], "2026-07-28", "{a}");
    assert_eq!(a["named"], "42", "a named interpreter keeps its names: {a}");
    assert!(
        a["unnamed"].as_str().unwrap().contains("NameError"),
        "without a handle, each call is fresh: {a}"
    );
    assert_eq!(a["shell"], "alice\nsub\n", "{a}");
    assert!(a["jobs"].as_str().unwrap().contains("sleep 300"), "{a}");
    assert_eq!(a["memory"], "314572800", "{a}");
    let b = client.step();
    assert!(
        b["named"].as_str().unwrap().contains("NameError"),
        "bob's `s` is not alice's: {b}"
    );
    assert_eq!(
        b["shell"], "[]\nbob\n",
        "bob's shell starts in his folder: {b}"
    );
    assert!(
        !b["jobs"].as_str().unwrap().contains("sleep"),
        "bob sees no job of alice's: {b}"
    );
    for key in ["output", "kill", "note"] {
        assert!(
            b[key].as_str().unwrap().starts_with("error: "),
            "{key}: {b}"
        );
    }
    assert!(
        b["second_job"].as_str().unwrap().starts_with("error: "),
        "bob's limit of one job: {b}"
    );
    assert!(
        b["memory"].as_str().unwrap().contains("MemoryError"),
        "bob's memory limit: {b}"
    );
    let again = client.step();
    assert_eq!(again["named"], "41", "{again}");
    assert_eq!(again["shell"], "alice\n", "{again}");
    assert!(
        again["output"].as_str().unwrap().contains("up"),
        "alice's job answers her next client: {again}"
    );
    let legacy = client.step();
    assert_eq!(legacy["version"], "2025-11-25", "{legacy}");
    assert_eq!(
        legacy["unnamed"], "1",
        "a protocol session keeps its default state"
    );
    assert!(
        legacy["note"].as_str().unwrap().contains("alice's"),
        "one folder per principal, across revisions: {legacy}"
    );
    let bound = client.step();
    assert_eq!(bound["opened"], 200, "{bound}");
    assert_eq!(bound["as_bob"], 404, "another principal's session: {bound}");
    assert_ne!(bound["as_alice"], 404, "{bound}");
    assert_eq!(bound["bob_first"], 200, "{bound}");
    assert_eq!(bound["bob_second"][0], 503, "{bound}");
    assert!(
        bound["bob_second"][1]
            .as_str()
            .unwrap()
            .contains("`bob` has its limit of 1"),
        "{bound}"
    );
    let metrics = client.step();
    let metrics = metrics["text"].as_str().unwrap();
    for line in [
        "jianmu_principal_tool_calls_total{principal=\"bob\",outcome=\"ok\"} 3",
        "jianmu_principal_sessions_open{principal=\"bob\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    client.finish();
    // Each principal has its own folder; the shared workspace was not touched.
    assert_eq!(
        std::fs::read_to_string(homes.join("alice/note.txt")).unwrap(),
        "alice's"
    );
    assert!(homes.join("bob").is_dir());
    assert!(std::fs::read_dir(&ws).unwrap().next().is_none());
    // Every audit line names its principal.
    let principals: std::collections::BTreeSet<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["principal"].to_string())
        .collect();
    assert_eq!(
        principals.into_iter().collect::<Vec<_>>(),
        ["\"alice\"", "\"bob\""]
    );
    // Unused past session_idle_secs, the scopes close: their interpreters, shells and
    // jobs end while the server goes on.
    assert!(!descendants(server.pid()).is_empty());
    until_no_descendants(server.pid());
    assert_eq!(server.terminate(), Some(0));
}

/// Runs the ported suite `script` (in `tests/it`) with `args`; its checks, each
/// asserted "ok".
fn ported_checks(script: &str, args: &[&str]) -> std::collections::BTreeMap<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it")
        .join(script);
    let out = jianmu_process::std_command(crate::mcp::python())
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(&out.stdout).unwrap();
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, outcome)| *outcome != "ok")
        .map(|(check, why)| format!("{check}: {why}"))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    results
}

/// The server scenarios of the MCP conformance suite that apply to a tool server,
/// ported to `conformance.py` (see its docs), on both revisions.
#[test]
fn the_conformance_scenarios_pass_on_both_revisions() {
    let (_dir, ws) = scratch();
    let server = Served::start(&ws, &[]);
    let results = ported_checks(
        "conformance.py",
        &[&server.url, TOKEN, ws.to_str().unwrap()],
    );
    let mut expected = vec![
        "caching".to_owned(),
        "dns-rebinding-protection".to_owned(),
        "http-standard-headers Mcp-Method".to_owned(),
        "http-standard-headers Mcp-Name".to_owned(),
        "server/discover".to_owned(),
        "tasks-cancel".to_owned(),
        "tasks-lifecycle".to_owned(),
    ];
    for check in [
        "server-identifies-in-result-meta",
        "request-meta-invalid",
        "request-meta-client-info-optional",
        "server-unsupported-version-error",
        "http-server-header-mismatch-400",
        "http-server-method-not-found-404",
        "server-no-independent-requests-and-no-log",
    ] {
        expected.push(format!("server-stateless sep-2575-{check}"));
    }
    for revision in ["2026-07-28", "2025-11-25"] {
        for scenario in [
            "tools-list",
            "tools-call-simple-text",
            "tools-call-error",
            "tools-call-image",
            "tools-call-with-progress",
            "tools-call-unknown-tool",
            "resources-read-unknown",
        ] {
            expected.push(format!("{revision} {scenario}"));
        }
    }
    expected.sort();
    assert_eq!(results.keys().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(server.terminate(), Some(0));
}

/// The text a stateless `tools/call` answered with (an error's text too).
fn stateless_text(url: &str, token: &str, tool: &str, args: &Value) -> String {
    let (status, response) = stateless_tool(url, token, tool, args);
    assert_eq!(status, 200, "{response}");
    // A single answer comes back as JSON with its length.
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let answer: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{response}"));
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

#[test]
fn each_principal_gets_a_container_and_a_folder_of_its_own_in_the_docker_sandbox() {
    let (dir, ws) = scratch();
    let homes = dir.path().join("principals");
    std::fs::create_dir(&homes).unwrap();
    for folder in [&ws, &homes] {
        crate::docker::give_to_sandbox_user(folder);
    }
    let tokens = two_principals(dir.path());
    let (alice, bob) = (ALICE, BOB);
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.http]\nsession_idle_secs = 3\n[execution.docker]\nimage = \"{}\"\n",
            crate::docker::test_image()
        ),
    )
    .unwrap();
    let server = Served::start(
        &ws,
        &[
            "--sandbox",
            "docker",
            "--config",
            config.to_str().unwrap(),
            "--token-file",
            tokens.to_str().unwrap(),
            "--workspace-per-principal",
            homes.to_str().unwrap(),
        ],
    );
    let url = server.url.clone();
    let host = |token| stateless_text(&url, token, "bash", &json!({"command": "hostname"}));
    let a = host(alice).trim().to_owned();
    stateless_text(
        &url,
        alice,
        "python_repl",
        &json!({"code": "x = 'alice'", "session": "s"}),
    );
    stateless_text(
        &url,
        alice,
        "write_file",
        &json!({"path": "note.txt", "content": "alice's"}),
    );
    let b = host(bob).trim().to_owned();
    assert_ne!(a, b, "one container per principal");
    assert_eq!(host(alice).trim(), a, "the same container across requests");
    assert_eq!(
        stateless_text(
            &url,
            alice,
            "python_repl",
            &json!({"code": "x", "session": "s"})
        ),
        "alice"
    );
    assert!(
        stateless_text(
            &url,
            bob,
            "python_repl",
            &json!({"code": "x", "session": "s"})
        )
        .contains("NameError")
    );
    assert_eq!(
        std::fs::read_to_string(homes.join("alice/note.txt")).unwrap(),
        "alice's"
    );
    let running = running_containers();
    for id in [&a, &b] {
        assert!(
            running.lines().any(|c| c.starts_with(id.as_str())),
            "{id} in {running}"
        );
    }
    // Idle past session_idle_secs, each scope's container goes while the server runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running = running_containers();
        if !running
            .lines()
            .any(|c| c.starts_with(a.as_str()) || c.starts_with(b.as_str()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {running}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(homes.join("alice/note.txt").is_file(), "the folder is kept");
    assert_eq!(server.terminate(), Some(0));
}

/// `[mcp.http.principals.NAME.egress]`: alice's allow list opens a host for her
/// commands and not for bob's, and each connection's audit line names its principal.
#[test]
fn one_principals_egress_opens_nothing_for_another() {
    let kernel = jianmu_process::Isolation::probe();
    if !(kernel.namespaces && kernel.private_network) {
        return;
    }
    let (dir, ws) = scratch();
    let tokens = two_principals(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let (port, _) = jianmu_test_support::http_upstream("127.0.0.2", "alice's api");
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!("[mcp.http.principals.alice.egress]\nallow = [\"127.0.0.2:{port}\"]\n"),
    )
    .unwrap();
    let server = Served::start(
        &ws,
        &[
            "--config",
            config.to_str().unwrap(),
            "--token-file",
            tokens.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    // Each principal is told what its own bash reaches.
    let host = format!("127.0.0.2:{port}");
    let alices = bash_description_for(&server.url, ALICE);
    assert!(alices.contains(&host), "{alices}");
    let bobs = bash_description_for(&server.url, BOB);
    assert!(!bobs.contains(&host), "{bobs}");
    let fetch = json!({"command": format!("curl -sS http://127.0.0.2:{port}/ 2>&1; echo; echo ${{HTTP_PROXY:-no-proxy}} | cut -c1-12")});
    let (status, text) = stateless_tool(&server.url, ALICE, "bash", &fetch);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("alice's api"), "{text}");
    let (status, text) = stateless_tool(&server.url, BOB, "bash", &fetch);
    assert_eq!(status, 200, "{text}");
    assert!(
        !text.contains("alice's api"),
        "bob reached alice's host: {text}"
    );
    assert!(text.contains("no-proxy"), "{text}");
    assert_eq!(server.terminate(), Some(0));
    let lines = jianmu_test_support::audit_lines(&audit, "egress");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["principal"], "alice");
    assert_eq!(lines[0]["outcome"], "allowed");
    assert_eq!(lines[0]["port"], port);
}

/// The `input-required-result-*` server scenarios of the MCP conformance suite
/// (SEP-2322), ported to `mrtr.py` (see its docs): the suite's fixtures stood in for by
/// tools the server asks approval for, two principals; the scenarios a server asking
/// only for approval cannot meet checked for what the specification requires instead.
#[test]
fn the_input_required_scenarios_pass() {
    let (dir, ws) = scratch();
    let tokens = two_principals(dir.path());
    let server = Served::start(
        &ws,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--ask",
            "list_dir",
            "--ask",
            "file_info",
            "--ask",
            "command:echo",
            "--ask",
            "command:printf",
        ],
    );
    let principals = format!("{ALICE},{BOB}");
    let results = ported_checks("mrtr.py", &[&server.url, &principals]);
    let ported: [(&str, &[&str]); 8] = [
        (
            "basic-elicitation",
            &[
                "sep-2322-elicitation-incomplete",
                "sep-2322-elicitation-complete",
            ],
        ),
        (
            "request-state",
            &[
                "sep-2322-request-state-incomplete",
                "sep-2322-request-state-complete",
            ],
        ),
        (
            "missing-input-response",
            &["sep-2322-missing-response-rerequests"],
        ),
        ("result-type", &["sep-2322-result-type-included"]),
        (
            "unsupported-methods",
            &["sep-2322-not-on-unsupported-requests"],
        ),
        ("tampered-state", &["sep-2322-reject-tampered-state"]),
        (
            "ignore-extra-params",
            &["sep-2322-ignore-unexpected-params"],
        ),
        (
            "validate-input",
            &[
                "sep-2322-validate-input-responses",
                "sep-2322-error-on-protocol-error",
            ],
        ),
    ];
    let mut expected = Vec::new();
    for (scenario, checks) in ported {
        for check in checks.iter().chain(&["wire-schema-valid"]) {
            expected.push(format!("input-required-result-{scenario} {check}"));
        }
    }
    for scenario in [
        "basic-sampling",
        "basic-list-roots",
        "multiple-input-requests",
        "multi-round",
        "non-tool-request",
        "capability-check",
    ] {
        expected.push(format!("input-required-result-{scenario} not-applicable"));
    }
    for check in [
        "deny-decline-cancel-refuse-naming-the-rule",
        "request-state-of-another-call-refused",
        "request-state-of-another-principal-refused",
        "allow-session-remembered",
    ] {
        expected.push(format!("jianmu-approval {check}"));
    }
    expected.sort();
    assert_eq!(results.keys().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(server.terminate(), Some(0));
}

/// `[mcp.http.principals.NAME.policy]` adds deny and ask rules for one principal's
/// calls only: bob's list leaves out what he is denied and his call is refused, his
/// write under `deploy/` is asked about (refused here: the client cannot be asked,
/// -32021 naming the rule), while alice's same calls run. A bad rule of a principal's
/// stops the server before it serves, naming the table.
#[test]
fn a_principals_own_policy_is_laid_over_the_servers() {
    let (dir, ws) = scratch();
    let tokens = two_principals(dir.path());
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        "[mcp.http.principals.bob.policy]\ndeny = [\"calculator\"]\nask = [\"path:deploy/**\"]\n",
    )
    .unwrap();
    let server = served_with(&ws, &config, &tokens);
    let listed = |token: &str| {
        let (status, text) = stateless(&server.url, token, "tools/list", None, json!({}));
        assert_eq!(status, 200, "{text}");
        text.contains("\"name\":\"calculator\"")
    };
    assert!(listed(ALICE));
    assert!(!listed(BOB));
    let (status, text) = stateless_call(&server.url, ALICE, "6*7");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("42"), "{text}");
    let (_, text) = stateless_call(&server.url, BOB, "6*7");
    assert!(
        text.contains("denied") && text.contains("deny `calculator`"),
        "{text}"
    );
    let write = |token: &str, path: &str| {
        stateless_tool(
            &server.url,
            token,
            "write_file",
            &json!({"path": path, "content": "x"}),
        )
    };
    let (status, text) = write(BOB, "deploy/prod.yaml");
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("-32021") && text.contains("path:deploy/**"),
        "{text}"
    );
    assert!(!ws.join("deploy/prod.yaml").exists());
    let (status, text) = write(BOB, "notes/bob.txt");
    assert_eq!(status, 200, "{text}");
    assert!(ws.join("notes/bob.txt").exists(), "{text}");
    let (status, text) = write(ALICE, "deploy/prod.yaml");
    assert_eq!(status, 200, "{text}");
    assert!(ws.join("deploy/prod.yaml").exists(), "{text}");
    assert_eq!(server.terminate(), Some(0));

    std::fs::write(
        &config,
        "[mcp.http.principals.bob.policy]\nask = [\"command-re:(\"]\n",
    )
    .unwrap();
    let out = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["mcp", "--http", "127.0.0.1:0", "--workspace"])
        .arg(&ws)
        .args(["--config", config.to_str().unwrap()])
        .args(["--token-file", tokens.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("mcp.http.principals.bob.policy") && stderr.contains("command-re:("),
        "{stderr}"
    );
}

/// With `[mcp.http] suspend_dir`, a principal's idle stateless scope is suspended to
/// a file instead of closed, and its next request resumes it: the shell session's
/// folder and exports are back, and the first answer says so. Another principal's
/// scope is its own.
#[test]
fn an_idle_scope_is_suspended_and_the_next_request_resumes_it() {
    let (dir, ws) = scratch();
    std::fs::create_dir(ws.join("sub")).unwrap();
    let tokens = two_principals(dir.path());
    let suspended = dir.path().join("suspended");
    std::fs::create_dir(&suspended).unwrap();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.http]\nsession_idle_secs = 1\nsuspend_dir = {:?}\n",
            suspended.display().to_string()
        ),
    )
    .unwrap();
    let server = served_with(&ws, &config, &tokens);
    let sh = |token: &str, command: &str| {
        let (status, text) = stateless_tool(
            &server.url,
            token,
            "bash",
            &json!({"command": command, "session": "s"}),
        );
        assert_eq!(status, 200, "{text}");
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let answer: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{text}"));
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    sh(ALICE, "cd sub && export K=kept");
    let file = suspended.join("scope-616c696365.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(
            Instant::now() < deadline,
            "the idle scope was not suspended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let back = sh(ALICE, "pwd; echo $K");
    assert!(
        back.starts_with("[resumed: the workspace, and shell sessions s restored"),
        "{back}"
    );
    assert!(
        back.ends_with(&format!(
            "{}\nkept\n",
            ws.join("sub").canonicalize().unwrap().display()
        )),
        "{back}"
    );
    assert!(!file.exists());
    assert_eq!(sh(BOB, "echo ${K:-unset}"), "unset\n");
    assert_eq!(server.terminate(), Some(0));
}
