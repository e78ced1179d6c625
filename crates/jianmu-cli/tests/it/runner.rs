//! Runners reached over mutual TLS (`jianmu serve --listen`, `jianmu://` hosts): real
//! runner processes on 127.0.0.1, each keeping workspaces below a root of its own, and
//! a runtime placing sessions on them.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use jianmu_runtime::docker::{EngineAddress, TlsEngine};
use jianmu_runtime::{Backend, DockerSettings, Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

/// A `jianmu serve --listen 127.0.0.1:0` process, its address, and what it printed
/// after.
struct Runner {
    child: Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Runner {
    fn start(tls_dir: &Path, root: &Path, once: bool) -> Self {
        let mut command = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-dir"])
            .arg(tls_dir)
            .arg("--root")
            .arg(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if once {
            command.arg("--once");
        }
        let mut child = command.spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let addr = line
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self { child, addr, log }
    }

    /// The client certificates the runner said it served sessions for.
    fn clients(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.split("client certificate ").nth(1))
            .map(|c| c.split_whitespace().next().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits (at most 20 s) for the process to exit.
    fn exited(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_init(dir: &Path) -> std::process::Output {
    jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["sandbox", "tls", "init"])
        .arg(dir)
        .output()
        .unwrap()
}

fn host_entry(addr: &str, host: &Path) -> EngineAddress {
    EngineAddress::Tls(TlsEngine {
        url: format!("jianmu://{addr}"),
        ca: host.join("ca.pem"),
        cert: host.join("cert.pem"),
        key: host.join("key.pem"),
        ca_key: None,
    })
}

fn runtime(ws: &Path, hosts: Vec<EngineAddress>) -> Runtime {
    let mut settings = SessionSettings::new(ToolConfig::new(ws));
    settings.backend = Backend::Docker(Box::new(DockerSettings {
        hosts,
        ..DockerSettings::default()
    }));
    Runtime::new(settings).unwrap()
}

/// A folder holding two authorities' TLS folders (`tls init`) and a workspace.
fn two_authorities() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (tls, other) = (dir.path().join("tls"), dir.path().join("other"));
    assert!(tls_init(&tls).status.success());
    assert!(tls_init(&other).status.success());
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    (dir, tls, other, ws)
}

/// Where a runner keeps a host path.
fn kept(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap())
}

/// `tls init` makes the three folders (keys for the owner alone) and never writes over
/// a folder in use; sessions go to free runners over mutual TLS, run there in a copy
/// of the workspace below the runner's root, and bring their changes back when they
/// close; a runner serves one session at a time; `--once` ends the runner with its
/// session, and what the session started ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_on_runners_over_mutual_tls() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    let out = tls_init(&tls);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in ["ca-key.pem", "host/key.pem", "runner/key.pem"] {
        let mode = std::fs::metadata(tls.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let again = tls_init(&tls);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("holds files already"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("in.txt"), "from the host\n").unwrap();
    let ws = ws.canonicalize().unwrap();
    let (root1, root2) = (dir.path().join("r1"), dir.path().join("r2"));
    let mut one = Runner::start(&tls.join("runner"), &root1, true);
    let two = Runner::start(&tls.join("runner"), &root2, false);
    let host = tls.join("host");
    let runtime = runtime(
        &ws,
        vec![host_entry(&one.addr, &host), host_entry(&two.addr, &host)],
    );
    let first = runtime.open().unwrap();
    let second = runtime.open().unwrap();
    let sh = async |session: &jianmu_runtime::Session, command: &str| match session
        .call("bash", json!({ "command": command }))
        .await
    {
        Ok(out) => out.text,
        Err(e) => panic!("{command}: {}", jianmu_tool_core::error_chain(&e)),
    };
    let pwd1 = sh(&first, "cat in.txt; echo one > made.txt; sleep 3217 & pwd").await;
    let pwd2 = sh(&second, "echo two > other.txt; pwd").await;
    let places = [pwd1.lines().last().unwrap(), pwd2.lines().last().unwrap()];
    assert!(pwd1.starts_with("from the host\n"), "{pwd1}");
    let (k1, k2) = (
        kept(&root1.canonicalize().unwrap(), &ws),
        kept(&root2.canonicalize().unwrap(), &ws),
    );
    let (k1, k2) = (k1.display().to_string(), k2.display().to_string());
    assert!(
        places == [k1.as_str(), k2.as_str()] || places == [k2.as_str(), k1.as_str()],
        "{places:?} {k1} {k2}"
    );
    // Nothing came back yet; a third session finds no free runner.
    assert!(!ws.join("made.txt").exists());
    let third = runtime.open().unwrap();
    let refused = third.call("calculator", json!("1+1")).await.unwrap_err();
    assert!(
        jianmu_tool_core::error_chain(&refused).contains("no engine or runner is free"),
        "{}",
        jianmu_tool_core::error_chain(&refused)
    );
    third.close().await;
    // Closing brings the changes back; the runner with --once exits with its session,
    // and the job its session started is gone with it.
    let closed = first.close().await;
    assert!(closed.is_complete(), "{closed}");
    second.close().await;
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap_or_default()
            + std::fs::read_to_string(ws.join("other.txt"))
                .unwrap_or_default()
                .as_str(),
        "one\ntwo\n"
    );
    let once_pid = one.child.id();
    let sleepers = || jianmu_test_support::running_with("sleep 3217").len();
    if places[0] == k1.as_str() {
        assert!(one.exited(), "the --once runner {once_pid} did not exit");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while sleepers() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sleepers(), 0, "a job outlived its session");
    // A runner serving on keeps nothing of a session that ended.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(&root2).unwrap().next().is_some() {
        assert!(
            Instant::now() < deadline,
            "the runner kept the last session's files"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    runtime.shutdown(Duration::from_secs(10)).await;
    drop(two);
}

/// A checkpoint restored in a session on a runner reaches the runner's copy (below
/// its root, not the host's path there): what the turn made is removed there and the
/// changed file comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_reaches_the_runners_copy() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    assert!(tls_init(&tls).status.success());
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("keep.txt"), "v1\n").unwrap();
    let ws = ws.canonicalize().unwrap();
    let root = dir.path().join("root");
    let runner = Runner::start(&tls.join("runner"), &root, false);
    let mut settings = SessionSettings::new(ToolConfig::new(&ws));
    settings.backend = Backend::Docker(Box::new(DockerSettings {
        hosts: vec![host_entry(&runner.addr, &tls.join("host"))],
        ..DockerSettings::default()
    }));
    settings.checkpoints.dir = Some(dir.path().join("store"));
    let runtime = Runtime::new(settings).unwrap();
    let session = runtime.open().unwrap();
    let call = async |tool: &str, args: serde_json::Value| match session.call(tool, args).await {
        Ok(out) => out,
        Err(e) => panic!("{tool}: {}", jianmu_tool_core::error_chain(&e)),
    };
    call(
        "bash",
        json!({"command": "echo v2 > keep.txt; echo new > new.txt"}),
    )
    .await;
    let listed = call("checkpoint_list", json!({})).await;
    let id = listed.structured.unwrap()["checkpoints"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    call("checkpoint_restore", json!({"id": id})).await;
    let seen = call("bash", json!({"command": "cat keep.txt; ls"}))
        .await
        .text;
    assert_eq!(seen, "v1\nkeep.txt\n");
    session.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "v1\n"
    );
    assert!(!ws.join("new.txt").exists());
    drop(runner);
}

/// A host whose certificate another authority signed is refused by the runner, and
/// a host that does not trust the runner's authority refuses it: either way the call
/// fails saying the TLS handshake failed, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_and_a_host_of_different_authorities_refuse_each_other() {
    let (dir, tls, other, ws) = two_authorities();
    let root = dir.path().join("root");
    let runner = Runner::start(&tls.join("runner"), &root, false);
    let runtime = runtime(&ws, vec![host_entry(&runner.addr, &other.join("host"))]);
    let session = runtime.open().unwrap();
    let err = session
        .call("bash", json!({"command": "echo ran > ran.txt"}))
        .await
        .unwrap_err();
    let text = jianmu_tool_core::error_chain(&err);
    assert!(text.contains("TLS handshake failed"), "{text}");
    session.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    // A host that trusts the runner but shows a certificate of another authority.
    let mixed = EngineAddress::Tls(TlsEngine {
        url: format!("jianmu://{}", runner.addr),
        ca: tls.join("host/ca.pem"),
        cert: other.join("host/cert.pem"),
        key: other.join("host/key.pem"),
        ca_key: None,
    });
    let runtime = self::runtime(&ws, vec![mixed]);
    let session = runtime.open().unwrap();
    let err = session
        .call("bash", json!({"command": "echo ran > ran.txt"}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, jianmu_tool_core::ToolError::Runner { .. }),
        "{}",
        jianmu_tool_core::error_chain(&err)
    );
    session.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    let kept_ws = kept(&root.canonicalize().unwrap(), &ws.canonicalize().unwrap());
    assert!(!kept_ws.join("ran.txt").exists());
}

/// With the authority's key (`ca_key`), each session shows a certificate of its own,
/// minted for it: the runner serves both sessions and names two certificates, where
/// the host's one certificate is named twice; a key of another authority mints
/// certificates the runner refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_shows_a_certificate_minted_for_it() {
    let (dir, tls, other, ws) = two_authorities();
    let runner = Runner::start(&tls.join("runner"), &dir.path().join("root"), false);
    let minting = |ca_dir: &Path| {
        EngineAddress::Tls(TlsEngine {
            url: format!("jianmu://{}", runner.addr),
            ca: tls.join("ca.pem"),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            ca_key: Some(ca_dir.join("ca-key.pem")),
        })
    };
    let run_two = async |entry: EngineAddress, minted: bool| {
        let runtime = runtime(&ws, vec![entry]);
        for i in 0..2 {
            let session = runtime.open().unwrap();
            let out = session
                .call("bash", json!({"command": format!("echo {i} > back.txt")}))
                .await
                .map(|o| o.text)
                .map_err(|e| jianmu_tool_core::error_chain(&e));
            // Another certificate of the same authority cannot take the session's
            // workspace meanwhile.
            if out.is_ok() && minted {
                let stolen = steal(&runner.addr, &tls, &ws);
                assert_eq!(stolen, "0 bytes", "another client got the workspace");
            }
            session.close().await;
            if out.is_ok() {
                // Its own archives (a fresh certificate each, named for it) came back.
                let back = std::fs::read_to_string(ws.join("back.txt")).unwrap();
                assert_eq!(back, format!("{i}\n"));
            }
            if let Err(e) = out {
                runtime.shutdown(Duration::from_secs(10)).await;
                return Err(e);
            }
        }
        runtime.shutdown(Duration::from_secs(10)).await;
        Ok(())
    };
    run_two(minting(&tls), true).await.unwrap();
    let minted = runner.clients();
    assert_eq!(minted.len(), 2, "{minted:?}");
    assert_ne!(minted[0], minted[1]);
    run_two(host_entry(&runner.addr, &tls.join("host")), false)
        .await
        .unwrap();
    let all = runner.clients();
    assert_eq!(all.len(), 4, "{all:?}");
    assert_eq!(all[2], all[3], "the host's own certificate, twice");
    // The authority's certificate, another authority's key: refused.
    let err = run_two(minting(&other), true).await.unwrap_err();
    assert!(err.contains("the certificate authority's key"), "{err}");
}

/// What a client showing the host's own certificate (the runner's authority, not the
/// session's name) gets when it asks for the workspace `ws` as an archive.
fn steal(addr: &str, tls: &Path, ws: &Path) -> String {
    let script = r#"
import json, socket, ssl, sys
addr, tls, ws = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = addr.rsplit(":", 1)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.load_verify_locations(tls + "/host/ca.pem")
ctx.load_cert_chain(tls + "/host/cert.pem", tls + "/host/key.pem")
with socket.create_connection((host, int(port)), timeout=10) as raw:
    with ctx.wrap_socket(raw) as s:
        s.sendall((json.dumps({"op": "get_archive", "path": ws}) + "\n").encode())
        got = 0
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
        except (ssl.SSLError, OSError):
            pass
print(f"{got} bytes")
"#;
    let out = jianmu_process::std_command("python3")
        .arg("-c")
        .arg(script)
        .arg(addr)
        .arg(tls)
        .arg(ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
