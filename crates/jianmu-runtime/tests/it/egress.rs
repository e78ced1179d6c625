//! A session's doors with real servers on the host's loopback, which is the outside as
//! the session sees it: the upstreams listen on 127.0.0.2 (a dead end inside the
//! session, and not in `NO_PROXY`), the proxy lets through what the policy names,
//! sets credentials the commands never see, `expose_port` opens a session's server
//! to the host, and `host_services` lead in.

use std::io::{Read as _, Write as _};
use std::time::Duration;

use jianmu_runtime::{Opening, Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::{Value, json};

fn upstream(ip: &str, body: &'static str) -> (u16, jianmu_test_support::Heads) {
    jianmu_test_support::http_upstream(ip, body)
}

fn private_network_here() -> bool {
    let kernel = jianmu_process::Isolation::probe();
    kernel.namespaces && kernel.private_network
}

fn runtime(dir: &std::path::Path, egress: Value, audit: Option<&std::path::Path>) -> Runtime {
    let tools = ToolConfig::new(dir)
        .with_setting("bash", "egress", egress.clone())
        .with_setting("python_repl", "egress", egress);
    let mut settings = SessionSettings::new(tools);
    settings.audit_log = audit.map(std::path::Path::to_path_buf);
    Runtime::new(settings).unwrap()
}

async fn sh(session: &jianmu_runtime::Session, command: &str) -> String {
    session
        .call("bash", json!({"command": command}))
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"))
        .text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_names_what_is_reached_and_credentials_stay_outside() {
    if !private_network_here() {
        return; // without a private network, commands have no network at all
    }
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let (allowed, heads) = upstream("127.0.0.2", "hello from upstream");
    let (other, other_heads) = upstream("127.0.0.2", "not for you");
    let secret = format!("s3cret-{}", std::process::id());
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let rt = runtime(
        &ws,
        json!({
            "allow": [format!("127.0.0.2:{allowed}")],
            "credentials": {
                format!("127.0.0.2:{allowed}"): {"header": "Authorization", "value": format!("Bearer {secret}")}
            }
        }),
        Some(&audit),
    );
    let session = rt.open().unwrap();
    // Allowed, with the credential set on the way out: the code sent a placeholder.
    let got = sh(
        &session,
        &format!("curl -sS -H 'Authorization: placeholder' http://127.0.0.2:{allowed}/x"),
    )
    .await;
    assert_eq!(got, "hello from upstream");
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.starts_with("GET /x HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("Authorization: Bearer {secret}\r\n")),
        "{head}"
    );
    assert!(!head.contains("placeholder"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("proxy-authorization"),
        "{head}"
    );
    // The upstream gets the checked host, whatever `Host` the code sends: a server of
    // many sites routes by it.
    sh(
        &session,
        &format!("curl -sS -H 'Host: evil.example' http://127.0.0.2:{allowed}/steer"),
    )
    .await;
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(
        head.contains(&format!("\r\nHost: 127.0.0.2:{allowed}\r\n")),
        "{head}"
    );
    assert!(!head.contains("evil.example"), "{head}");
    // python_repl goes the same way.
    let py = session
        .call(
            "python_repl",
            json!({"code": format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.2:{allowed}/').read().decode()")}),
        )
        .await
        .unwrap();
    assert_eq!(py.text, "hello from upstream");
    // Another port of the same host is not allowed: 403 naming the host and the setting.
    let refused = sh(&session, &format!("curl -sS http://127.0.0.2:{other}/")).await;
    assert_eq!(
        refused,
        format!(
            "jianmu: 127.0.0.2:{other} was refused by this session's egress policy; the setting [egress] allow (or the flag --egress 127.0.0.2:{other}) allows it\n"
        )
    );
    assert!(other_heads.lock().unwrap().is_empty());
    // CONNECT to a host not allowed is refused too, before any byte reaches it.
    let tunnel = sh(
        &session,
        &format!(
            "curl -sS -o /dev/null -w '%{{http_code}}' -p http://127.0.0.2:{other}/ 2>&1; true"
        ),
    )
    .await;
    assert!(tunnel.contains("403"), "{tunnel}");
    assert!(other_heads.lock().unwrap().is_empty());
    // Without the proxy, the outside is a dead end.
    let direct = sh(
        &session,
        &format!("curl -sS --noproxy '*' http://127.0.0.2:{allowed}/ 2>&1; true"),
    )
    .await;
    assert!(
        direct.contains("Couldn't connect") || direct.contains("Failed to connect"),
        "{direct}"
    );
    // The secret is nowhere the code can look.
    let env = sh(&session, "env; cat /proc/self/environ; echo").await;
    assert!(!env.contains(&secret), "{env}");
    assert!(env.contains("HTTPS_PROXY=http://jianmu:"), "{env}");
    assert!(env.contains("NO_PROXY=localhost,127.0.0.1,::1"), "{env}");
    // (Spelled in two parts, so that the audit line of this call does not hold it.)
    let spelled = format!("\"s3cret\"\"-{}\"", std::process::id());
    let files = sh(
        &session,
        &format!("grep -rl {spelled} \"$TMPDIR\" . 2>/dev/null; true"),
    )
    .await;
    assert_eq!(files, "");
    // A request that does not carry the session's proxy credentials is refused.
    let stranger = sh(
        &session,
        "curl -sS -o /dev/null -w '%{http_code}' --proxy \"http://127.0.0.1:${HTTP_PROXY##*:}\" http://127.0.0.2:1/",
    )
    .await;
    assert_eq!(stranger, "407");
    session.close().await;
    // One audit line per connection, allowed or refused, with its rule and bytes.
    let lines = jianmu_test_support::audit_lines(&audit, "egress");
    let ok = lines
        .iter()
        .find(|l| l["outcome"] == "allowed" && l["port"] == allowed)
        .unwrap();
    assert_eq!(ok["rule"], format!("127.0.0.2:{allowed}"));
    assert!(ok["bytes_in"].as_u64().unwrap() > 19, "{ok}");
    assert!(ok["bytes_out"].as_u64().unwrap() > 0, "{ok}");
    assert!(
        ok["session"].is_string() && ok["duration_us"].is_u64(),
        "{ok}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["outcome"] == "refused" && l["port"] == other)
    );
    assert!(!std::fs::read_to_string(&audit).unwrap().contains(&secret));
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sessions_list_opens_nothing_for_another_and_the_doors_end_with_it() {
    if !private_network_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (port, _) = upstream("127.0.0.2", "alice's api");
    let rt = runtime(dir.path(), json!({}), None);
    // What a principal's settings do: egress laid over for one session.
    let alice = rt
        .open_with(Opening::new().with_setting(
            "bash",
            "egress",
            json!({"allow": [format!("127.0.0.2:{port}")]}),
        ))
        .unwrap();
    let bob = rt.open().unwrap();
    let fetch = format!("curl -sS http://127.0.0.2:{port}/ 2>&1; true");
    assert_eq!(sh(&alice, &fetch).await, "alice's api");
    let denied = sh(&bob, &fetch).await;
    assert!(!denied.contains("alice's api"), "{denied}");
    // Bob has no proxy at all: the default is loopback only.
    assert_eq!(sh(&bob, "echo ${HTTP_PROXY:-none}").await.trim(), "none");
    // Alice's proxy port, reached from bob's network, is not there.
    let threads = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).unwrap_or_default().trim() == "jianmu-egress"
            })
            .count()
    };
    assert!(threads() >= 1);
    alice.close().await;
    bob.close().await;
    drop((alice, bob));
    let mut gone = false;
    for _ in 0..250 {
        if threads() == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "a session's doors outlived it");
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_both_ways_expose_port_and_host_services() {
    if !private_network_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (service, _) = upstream("127.0.0.1", "the host's database");
    let tools = ToolConfig::new(dir.path())
        .with_setting(
            "bash",
            "isolation",
            json!({"host_services": [format!("127.0.0.1:{service}")]}),
        )
        .with_setting(
            "python_repl",
            "isolation",
            json!({"host_services": [format!("127.0.0.1:{service}")]}),
        );
    let rt = Runtime::new(SessionSettings::new(tools)).unwrap();
    let session = rt.open().unwrap();
    // In: the host's service at the same address, from bash and python_repl.
    let got = sh(&session, &format!("curl -sS http://127.0.0.1:{service}/")).await;
    assert_eq!(got, "the host's database");
    let py = session
        .call(
            "python_repl",
            json!({"code": format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{service}/').read().decode()")}),
        )
        .await
        .unwrap();
    assert!(py.text.contains("the host's database"), "{}", py.text);
    // Out: a server the session started, reached from the host.
    std::fs::write(dir.path().join("index.html"), "served inside").unwrap();
    session
        .call(
            "bash",
            json!({"command": "exec python3 -m http.server 8765 --bind 127.0.0.1", "background": true, "yield_ms": 300}),
        )
        .await
        .unwrap();
    let mut url = String::new();
    for _ in 0..50 {
        let out = session
            .call("expose_port", json!({"port": 8765}))
            .await
            .unwrap();
        url = out.structured.unwrap()["url"].as_str().unwrap().to_owned();
        if get(&url).is_some_and(|b| b.contains("served inside")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(!url.ends_with(":8765/"), "{url}");
    assert_eq!(
        get(&url).as_deref().map(|b| b.contains("served inside")),
        Some(true)
    );
    // The host's own 8765 is not the session's.
    assert!(get("http://127.0.0.1:8765/").is_none_or(|b| !b.contains("served inside")));
    let closed = session
        .call("expose_port", json!({"port": 8765, "close": true}))
        .await
        .unwrap();
    assert_eq!(closed.structured.unwrap()["open"], false);
    assert!(get(&url).is_none(), "still open after close");
    session.close().await;
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The body of `GET url` from the host, or `None` when nothing answers.
fn get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(authority).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    (!text.is_empty()).then_some(text)
}

#[test]
fn the_descriptions_name_the_hosts_commands_reach() {
    if !private_network_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let egress = json!({"allow": ["pypi.org:443", "*.example.org:443"]});
    let tools = ToolConfig::new(dir.path())
        .with_setting("bash", "egress", egress.clone())
        .with_setting("python_repl", "egress", egress)
        .with_setting(
            "python_repl",
            "isolation",
            json!({"host_services": ["127.0.0.1:5432"]}),
        );
    let specs = jianmu_runtime::tool_specs(&tools).unwrap();
    let description = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.description.clone())
            .unwrap()
    };
    for tool in ["bash", "python_repl"] {
        let text = description(tool);
        assert!(
            text.contains(
                "Outside, only these hosts can be reached, through the session's HTTP proxy"
            ) && text.contains("pypi.org:443, *.example.org:443"),
            "{tool}: {text}"
        );
        assert!(
            !text.contains("outside hosts cannot be reached"),
            "{tool}: {text}"
        );
    }
    assert!(
        description("python_repl")
            .contains("These host services are reachable at the same address: 127.0.0.1:5432."),
        "{}",
        description("python_repl")
    );
    // Without egress, the sentence says the outside is closed.
    let plain = jianmu_runtime::tool_specs(&ToolConfig::new(dir.path())).unwrap();
    let bash = plain.iter().find(|s| s.name == "bash").unwrap();
    assert!(
        bash.description.contains("outside hosts cannot be reached"),
        "{}",
        bash.description
    );
}
