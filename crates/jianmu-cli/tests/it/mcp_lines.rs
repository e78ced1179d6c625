//! `jianmu mcp` on raw JSON-RPC lines: every line is answered, and a signal mid-call
//! leaves nothing behind.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub(crate) struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Server {
    fn start(ws: &Path) -> Self {
        Self::start_with(ws, ws)
    }

    /// A server whose workspace is `ws` and whose temporary folder is `tmp`.
    fn start_with(ws: &Path, tmp: &Path) -> Self {
        Self::start_in(ws, &[("TMPDIR", tmp)], &[])
    }

    /// A server whose workspace is `ws`, with `env` set and `flags` after `mcp`.
    pub(crate) fn start_in(ws: &Path, env: &[(&str, &Path)], flags: &[&str]) -> Self {
        let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
            .envs(env.iter().copied())
            .args(["--workspace"])
            .arg(ws)
            .arg("mcp")
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_remove("JIANMU_LOG")
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(serde_json::from_str(&line).unwrap_or(Value::String(line)));
            }
        });
        let mut server = Self {
            child,
            stdin,
            lines,
        };
        server.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        assert_eq!(server.next()["id"], 0);
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    pub(crate) fn send(&mut self, message: Value) {
        self.raw(message.to_string().as_bytes());
    }

    fn raw(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Calls `tool` with `args` as request `id`: the text of its answer, or of its
    /// error.
    pub(crate) fn call(&mut self, id: u64, tool: &str, args: Value) -> String {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        loop {
            let answer = self.next();
            if answer["id"] != id {
                continue;
            }
            return match answer["result"]["content"][0]["text"].as_str() {
                Some(text) => text.to_owned(),
                None => answer.to_string(),
            };
        }
    }

    /// Closes its standard input and waits for it to exit.
    pub(crate) fn close(self) {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }

    pub(crate) fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the server did not answer")
    }
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

#[test]
fn listing_tools_starts_nothing_and_makes_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let empty = |dir: &Path| std::fs::read_dir(dir).unwrap().count() == 0;
    for args in [
        &["tools", "--json"][..],
        &["schema", "bash"],
        &["schema", "python_repl"],
    ] {
        let out = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
            .env("TMPDIR", tmp.path())
            .arg("--workspace")
            .arg(ws.path())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let mut server = Server::start_with(ws.path(), tmp.path());
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let listed = server.next();
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "bash"), "{listed}");
    // A call that fails validation builds nothing either.
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "python_repl", "arguments": {"code": 1}}}));
    assert_eq!(server.next()["result"]["isError"], true);
    let pid = server.child.id();
    assert_eq!(children_of(pid), Vec::<u32>::new());
    assert!(empty(ws.path()) && empty(tmp.path()));
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
    assert!(empty(ws.path()) && empty(tmp.path()));
}

#[test]
fn every_line_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    s.raw(b"{not json");
    s.raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"\xff}");
    s.raw(&[b'['; 100_000]);
    s.raw(&vec![b' '; 16 << 20]);
    s.raw(&[&b"{\"a\":\""[..], &vec![b'x'; 16 << 20], b"\"}"].concat());
    for (id, params) in [
        (2, json!({"name": "calculator", "arguments": [1, 2]})),
        (3, json!({"name": "calculator", "arguments": "1+1"})),
        (4, json!({"arguments": {}})),
    ] {
        s.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
    }
    s.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "x".repeat(1 << 20), "arguments": {}}}));
    s.send(json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}));
    let mut by_id = std::collections::BTreeMap::new();
    let mut nulls = Vec::new();
    while by_id.len() < 5 || nulls.len() < 5 {
        let answer = s.next();
        match answer["id"].as_i64() {
            Some(id) => {
                by_id.insert(id, answer);
            }
            None => nulls.push(answer["error"]["code"].as_i64().unwrap()),
        }
    }
    nulls.sort_unstable();
    assert_eq!(
        nulls,
        [-32700, -32700, -32700, -32600, -32600],
        "the null-id answers"
    );
    for id in [2, 3, 4] {
        assert_eq!(by_id[&id]["error"]["code"], -32602, "{}", by_id[&id]);
    }
    let unknown = by_id[&5].to_string();
    assert!(
        unknown.len() < 2000 && unknown.contains("unknown tool"),
        "{}",
        &unknown[..300.min(unknown.len())]
    );
    assert_eq!(by_id[&6]["result"], json!({}));
    drop(s.stdin);
    assert!(s.child.wait().unwrap().success());
}

#[test]
fn a_signal_mid_call_leaves_no_process_behind() {
    stopped_mid_call("7", |s| {
        let status = jianmu_process::std_command("kill")
            .args(["-TERM", &s.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        s.child.wait().unwrap()
    });
}

#[test]
fn closing_stdin_mid_call_leaves_no_process_behind() {
    stopped_mid_call("9", |s| {
        let Server { child, stdin, .. } = s;
        drop(std::mem::replace(
            stdin,
            jianmu_process::std_command("true")
                .stdin(Stdio::piped())
                .spawn()
                .unwrap()
                .stdin
                .take()
                .unwrap(),
        ));
        child.wait().unwrap()
    });
}

/// Starts a `bash` and a `python_repl` call that each leave a `setsid` sleeper, stops
/// the server with `stop` while they run, and checks that the server exits 0 and no
/// sleeper is left.
fn stopped_mid_call(tag: &str, stop: impl FnOnce(&mut Server) -> std::process::ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    let (a, b) = (
        format!("300.{}{tag}1", std::process::id()),
        format!("300.{}{tag}2", std::process::id()),
    );
    s.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": format!("setsid sleep {a} & sleep {a}")}}}));
    s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "python_repl", "arguments": {"code": format!(
            "import subprocess, time\nsubprocess.Popen(['sleep', '{b}'], start_new_session=True)\ntime.sleep(300)")}}}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while (jianmu_test_support::running_with(&format!("sleep {a}")).len() < 3
        || jianmu_test_support::running_with(&format!("sleep {b}")).is_empty())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The shell and its two sleeps.
    assert_eq!(
        jianmu_test_support::running_with(&format!("sleep {a}")).len(),
        3
    );
    assert_eq!(
        jianmu_test_support::running_with(&format!("sleep {b}")).len(),
        1
    );
    let exited = stop(&mut s);
    assert_eq!(exited.code(), Some(0), "a stopped MCP server exits cleanly");
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = || {
        jianmu_test_support::running_with(&format!("sleep {a}")).len()
            + jianmu_test_support::running_with(&format!("sleep {b}")).len()
    };
    while left() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
    }
    let report = || {
        let mut found = jianmu_test_support::running_with(&format!("sleep {a}"));
        found.extend(jianmu_test_support::running_with(&format!("sleep {b}")));
        found
            .iter()
            .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(left(), 0, "processes outlived the server: {:?}", report());
}

/// SIGTERM of the server ends the session's background server and releases its
/// private network: no process is left in it and nothing holds it.
#[test]
fn a_signal_releases_the_sessions_private_network() {
    let offered = jianmu_process::Isolation::probe();
    if !(offered.namespaces && offered.private_network) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    s.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "bash", "arguments": {
            "command": "exec python3 -m http.server 8000 --bind 127.0.0.1", "background": true}}}));
    assert_eq!(s.next()["id"], 1);
    s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": "readlink /proc/self/ns/net"}}}));
    let answer = s.next();
    let net = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(net.starts_with("net:["), "{answer}");
    assert!(!jianmu_test_support::holding_network(&net).is_empty());
    let status = jianmu_process::std_command("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(s.child.wait().unwrap().code(), Some(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !jianmu_test_support::holding_network(&net).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(
        jianmu_test_support::holding_network(&net),
        Vec::<String>::new(),
        "the network outlived the server"
    );
}

/// The SHA-256 digest of `bytes` as the skills extension writes it.
fn sha256(bytes: &[u8]) -> String {
    let mut child = jianmu_process::std_command("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", hex.split_whitespace().next().unwrap())
}

impl Server {
    /// Sends request `id` and waits for its answer.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let answer = self.next();
            if answer["id"] == id {
                return answer;
            }
        }
    }
}

/// Skills over MCP (`io.modelcontextprotocol/skills`): jianmu's own and the
/// workspace's `.agents/skills` are listed with verbatim frontmatter and every file's
/// digest and size, got by URI, and read as resources; a link, a skill not named as
/// its folder and one over 512 files are not served, and `[mcp] skills = false`
/// turns it all off.
#[test]
fn skills_are_listed_got_and_read_with_their_digests() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("secret.txt");
    std::fs::write(&outside, "not for the client").unwrap();
    let demo = ws.join(".agents/skills/demo");
    std::fs::create_dir_all(demo.join("refs")).unwrap();
    let skill_md = "---\nname: demo\ndescription: Shows a demo\nlicense: MIT\nmetadata:\n  version: \"1.0\"\n---\n# Demo\nRead refs/more.md.\n";
    std::fs::write(demo.join("SKILL.md"), skill_md).unwrap();
    std::fs::write(demo.join("refs/more.md"), "more\n").unwrap();
    std::fs::write(demo.join("bin.dat"), [0u8, 159, 146, 150]).unwrap();
    std::os::unix::fs::symlink(&outside, demo.join("refs/link.txt")).unwrap();
    let mismatch = ws.join(".claude/skills/mismatch");
    std::fs::create_dir_all(&mismatch).unwrap();
    std::fs::write(
        mismatch.join("SKILL.md"),
        "---\nname: other\ndescription: x\n---\n",
    )
    .unwrap();
    let big = ws.join(".codex/skills/big");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(
        big.join("SKILL.md"),
        "---\nname: big\ndescription: too many files\n---\n",
    )
    .unwrap();
    for i in 0..512 {
        std::fs::write(big.join(format!("f{i}.txt")), "x").unwrap();
    }

    let mut server = Server::start(&ws);
    let listed = server.request(1, "skills/list", json!({}));
    let skills = listed["result"]["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"));
    let uris: Vec<&str> = skills.iter().map(|s| s["uri"].as_str().unwrap()).collect();
    for builtin in ["shell-sessions-and-jobs", "saved-outputs", "run-script"] {
        assert!(
            uris.contains(&format!("skill://jianmu/{builtin}/SKILL.md").as_str()),
            "{uris:?}"
        );
    }
    assert!(uris.contains(&"skill://agents/demo/SKILL.md"), "{uris:?}");
    assert!(
        !uris
            .iter()
            .any(|u| u.contains("mismatch") || u.contains("other") || u.contains("/big/")),
        "{uris:?}"
    );
    assert_eq!(listed["result"]["cacheScope"], "private");
    assert!(listed["result"]["ttlMs"].as_u64().is_some());

    let entry = skills
        .iter()
        .find(|s| s["uri"] == "skill://agents/demo/SKILL.md")
        .unwrap();
    assert_eq!(
        entry["frontmatter"],
        json!({"name": "demo", "description": "Shows a demo", "license": "MIT", "metadata": {"version": "1.0"}})
    );
    assert_eq!(
        entry["resources"],
        json!([
            {"uri": "skill://agents/demo/SKILL.md", "digest": sha256(skill_md.as_bytes()), "size": skill_md.len()},
            {"uri": "skill://agents/demo/bin.dat", "digest": sha256(&[0, 159, 146, 150]), "size": 4},
            {"uri": "skill://agents/demo/refs/more.md", "digest": sha256(b"more\n"), "size": 5},
        ])
    );
    let got = server.request(
        2,
        "skills/get",
        json!({"uri": "skill://agents/demo/SKILL.md"}),
    );
    assert_eq!(&got["result"]["skill"], entry);
    let unknown = server.request(
        3,
        "skills/get",
        json!({"uri": "skill://agents/nope/SKILL.md"}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // Every listed file reads back as the bytes its digest describes.
    let read = server.request(
        4,
        "resources/read",
        json!({"uri": "skill://agents/demo/refs/more.md"}),
    );
    assert_eq!(read["result"]["contents"][0]["text"], "more\n", "{read}");
    let blob = server.request(
        5,
        "resources/read",
        json!({"uri": "skill://agents/demo/bin.dat"}),
    );
    assert_eq!(blob["result"]["contents"][0]["blob"], "AJ+Slg==", "{blob}");
    for (i, skill) in skills.iter().enumerate() {
        if !skill["uri"]
            .as_str()
            .unwrap()
            .starts_with("skill://jianmu/")
        {
            continue;
        }
        let file = &skill["resources"][0];
        let read = server.request(10 + i as u64, "resources/read", json!({"uri": file["uri"]}));
        let text = read["result"]["contents"][0]["text"].as_str().unwrap();
        assert_eq!(sha256(text.as_bytes()), file["digest"].as_str().unwrap());
        assert_eq!(text.len() as u64, file["size"].as_u64().unwrap());
    }
    // A link inside a skill is neither listed nor read.
    let link = server.request(
        6,
        "resources/read",
        json!({"uri": "skill://agents/demo/refs/link.txt"}),
    );
    assert_eq!(link["error"]["code"], -32602, "{link}");
    assert!(!link.to_string().contains("not for the client"));
    // The entry is made afresh: a changed file has a new digest.
    std::fs::write(demo.join("refs/more.md"), "changed\n").unwrap();
    let got = server.request(
        7,
        "skills/get",
        json!({"uri": "skill://agents/demo/SKILL.md"}),
    );
    assert_eq!(
        got["result"]["skill"]["resources"][2]["digest"],
        sha256(b"changed\n")
    );
    let resources = server.request(8, "resources/list", json!({}));
    let listed_files = resources["result"]["resources"].as_array().unwrap();
    assert!(
        listed_files
            .iter()
            .any(|r| r["uri"] == "skill://agents/demo/bin.dat")
    );
    assert!(
        !listed_files
            .iter()
            .any(|r| r["uri"].as_str().unwrap().contains("link"))
    );
    server.close();

    // Turned off: no skills, no resources.
    let config = dir.path().join("jianmu.toml");
    std::fs::write(&config, "[mcp]\nskills = false\n").unwrap();
    let mut server = Server::start_in(&ws, &[], &["--config", config.to_str().unwrap()]);
    let off = server.request(1, "skills/list", json!({}));
    assert_eq!(off["error"]["code"], -32601, "{off}");
    server.close();
}
