//! `DockerSandbox` against the real Docker engine, with the image built from the
//! `jianmu` binary under test: escape probes, faults, and the same answers as local.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::docker::image::{self, ImageSources};
use jianmu_runtime::docker::{EngineAddress, TlsEngine, WorkspaceMode};
use jianmu_runtime::{DockerSandbox, DockerSettings, ToolRunner};
use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolError, ToolOutput};
use serde_json::{Value, json};

/// The tag the tests build; not the default, so tests never replace a user's image.
pub(crate) fn test_image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    // On its own thread: callers may be inside a runtime already.
    BUILT.get_or_init(|| {
        std::thread::spawn(build)
            .join()
            .expect("the image build ran")
    });
    TAG
}

fn build() {
    {
        // One build for all test processes: the lock file serializes them, and
        // `ensure_image` skips the build when the image's files are unchanged.
        let lock = std::fs::File::create(std::env::temp_dir().join("jianmu-test-image.lock"))
            .expect("lock file");
        lock.lock().expect("lock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let docker = image::connect(None).await.expect("the Docker engine runs");
            let sources = ImageSources::debian(env!("CARGO_BIN_EXE_jianmu").into());
            image::ensure_image(&docker, TAG, &sources)
                .await
                .expect("the sandbox image builds");
        });
    }
}

const TAG: &str = "jianmu-sandbox:test";

/// Makes `ws` the sandbox user's own when the tests run as root, as a user would
/// `chown` a workspace for it; otherwise the container runs as the owner already.
pub(crate) fn give_to_sandbox_user(ws: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::metadata(ws).unwrap().uid() == 0 {
        std::os::unix::fs::chown(ws, Some(65534), Some(65534)).unwrap();
    }
}

fn settings() -> DockerSettings {
    DockerSettings {
        image: test_image().to_owned(),
        ..DockerSettings::default()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    provider: BuiltinToolProvider,
    sandbox: DockerSandbox,
    runner: ToolRunner<DockerSandbox>,
}

fn fixture(settings: DockerSettings) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    give_to_sandbox_user(&ws);
    let ws = ws.canonicalize().unwrap();
    let provider = BuiltinToolProvider::new(ToolConfig::new(&ws));
    let sandbox = DockerSandbox::new(&ws, settings).unwrap();
    let runner = ToolRunner::new(sandbox.clone()).with_timeout(Duration::from_secs(60));
    Fixture {
        _dir: dir,
        ws,
        provider,
        sandbox,
        runner,
    }
}

impl Fixture {
    /// A runtime over the fixture's workspace whose sessions each get a container.
    fn docker_runtime(&self) -> jianmu_runtime::Runtime {
        let mut session_settings = jianmu_runtime::SessionSettings::new(ToolConfig::new(&self.ws));
        session_settings.backend = jianmu_runtime::Backend::Docker(Box::new(settings()));
        jianmu_runtime::Runtime::new(session_settings).unwrap()
    }

    async fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.call_with(&self.runner, tool, args).await
    }

    async fn call_with(
        &self,
        runner: &ToolRunner<DockerSandbox>,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        let tool = self.provider.build(tool).unwrap();
        tool.execute(args, ExecuteOptions::default().runner(runner))
            .await
    }

    async fn local(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        let tool = self.provider.build(tool).unwrap();
        tool.execute(args, ExecuteOptions::default()).await
    }

    async fn sh(&self, command: &str) -> String {
        match self.call("bash", json!({ "command": command })).await {
            Ok(out) => out.text,
            Err(e) => panic!(
                "`{command}` failed in the sandbox: {}",
                jianmu_tool_core::error_chain(&e)
            ),
        }
    }
}

fn message(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(out) => panic!("expected an error, got {:?}", out.text),
        Err(e) => jianmu_tool_core::error_chain(&e),
    }
}

async fn docker() -> bollard::Docker {
    image::connect(None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_probes_find_a_locked_down_container() {
    let f = fixture(settings());
    escape_probes(&f, false).await;
    f.sandbox.shutdown().await;
}

/// An engine reached over mutual TLS (one the test starts, with gVisor registered):
/// the sandbox runs there under gVisor (`runtime = "runsc"`) with a kernel of its own,
/// every escape probe holds, and a client without a certificate from the engine's CA
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_over_mutual_tls_runs_the_sandbox_under_gvisor() {
    let (engine, _) = remote_engine(TAG).await;
    let remote = DockerSettings {
        image: TAG.to_owned(),
        docker_host: Some(engine.tcp.clone()),
        tls: Some(engine.tls.clone()),
        runtime: Some("runsc".into()),
        ..DockerSettings::default()
    };
    let f = fixture(remote.clone());
    // gVisor's kernel answers, not the host's.
    let version = f.sh("cat /proc/version").await;
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert_ne!(version, host);
    assert!(version.starts_with("Linux version 4.4.0 "), "{version}");
    escape_probes(&f, true).await;
    // The tools work there as they do under runc.
    f.call(
        "write_file",
        json!({"path": "g.txt", "content": "under gVisor"}),
    )
    .await
    .unwrap();
    assert_eq!(f.sh("cat g.txt").await, "under gVisor");
    let py = f
        .call("python_repl", json!({"code": "6 * 7"}))
        .await
        .unwrap();
    assert_eq!(py.text.trim(), "42");
    f.sandbox.shutdown().await;
    // A certificate from another CA, and no certificate at all, are refused.
    let stranger = fixture(DockerSettings {
        tls: Some(engine.stranger.clone()),
        ..remote
    });
    let refused = message(stranger.call("calculator", json!("1+1")).await);
    assert!(
        refused.contains(&format!(
            "sandbox unavailable: cannot reach the Docker daemon at {}",
            engine.tcp
        )),
        "{refused}"
    );
    assert!(image::connect(Some(&engine.tcp)).await.is_err());
    drop(engine);
}

/// `hosts`: two engines (this machine's, and one of the tests' own over mutual TLS).
/// Sessions go to the least loaded; when an engine stops, the session on it fails
/// clearly and the next one goes to the engine still up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_two_engines_and_avoid_one_that_stopped() {
    let (engine, tls) = remote_engine(test_image()).await;
    let local = docker().await;
    let settings = DockerSettings {
        hosts: vec![
            EngineAddress::Url("unix:///var/run/docker.sock".into()),
            EngineAddress::Tls(TlsEngine {
                url: engine.tcp.clone(),
                ca: engine.tls.ca.clone(),
                cert: engine.tls.cert.clone(),
                key: engine.tls.key.clone(),
                ca_key: None,
            }),
        ],
        ..settings()
    };
    let f = fixture(settings);
    let hostname = async |sandbox: &DockerSandbox| -> Result<String, String> {
        let runner = ToolRunner::new(sandbox.clone()).with_timeout(Duration::from_secs(60));
        f.call_with(&runner, "bash", json!({"command": "hostname"}))
            .await
            .map(|o| o.text.trim().to_owned())
            .map_err(|e| jianmu_tool_core::error_chain(&e))
    };
    let (a, b) = (f.sandbox.sibling(), f.sandbox.sibling());
    let on_a = hostname(&a).await.unwrap();
    let on_b = hostname(&b).await.unwrap();
    let local_has = |id: String| {
        let local = local.clone();
        async move { local.inspect_container(&id, None).await.is_ok() }
    };
    let tls_has = |id: String| {
        let tls = tls.clone();
        async move { tls.inspect_container(&id, None).await.is_ok() }
    };
    // One on each engine.
    let (a_local, b_local) = (local_has(on_a.clone()).await, local_has(on_b.clone()).await);
    assert_ne!(a_local, b_local, "{on_a} {on_b}");
    assert!(tls_has(if a_local { on_b.clone() } else { on_a.clone() }).await);
    let (on_remote, on_here) = if a_local { (&b, &a) } else { (&a, &b) };
    // The remote engine stops mid-call: the call fails and says so.
    let remote_runner = ToolRunner::new(on_remote.clone()).with_timeout(Duration::from_secs(60));
    let call = f.call_with(&remote_runner, "bash", json!({"command": "sleep 30"}));
    let stop = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::task::spawn_blocking(move || drop(engine))
            .await
            .unwrap();
    };
    let (lost, ()) = tokio::join!(call, stop);
    let lost = message(lost);
    assert!(lost.contains("sandbox"), "{lost}");
    // The session here goes on; a new session goes to the engine still up.
    assert_eq!(
        hostname(on_here).await.unwrap(),
        if a_local { on_a.clone() } else { on_b.clone() }
    );
    let c = f.sandbox.sibling();
    let on_c = hostname(&c).await.unwrap();
    assert!(local_has(on_c).await);
    for s in [&a, &b, &c] {
        s.close().await;
    }
    f.sandbox.shutdown().await;
}

/// `workspace_mode = "copy"` with an engine that does not share this machine's files
/// (reached over mutual TLS): the workspace goes in when the container starts, changes
/// come back with `pull` and when the session closes, and a workspace over
/// `copy_limit_mib` is refused with a message that says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_workspace_goes_to_a_remote_engine_and_comes_back() {
    let (engine, _) = remote_engine(test_image()).await;
    let settings = DockerSettings {
        docker_host: Some(engine.tcp.clone()),
        tls: Some(engine.tls.clone()),
        workspace_mode: WorkspaceMode::Copy,
        copy_limit_mib: 1,
        ..settings()
    };
    let f = fixture(settings);
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    std::fs::write(f.ws.join("sub/in.txt"), "from here").unwrap();
    assert_eq!(f.sh("cat sub/in.txt").await, "from here");
    // The container has a copy: what it writes is not here until pulled.
    f.call(
        "write_file",
        json!({"path": "out.txt", "content": "from the sandbox"}),
    )
    .await
    .unwrap();
    f.sh("echo changed > sub/in.txt").await;
    assert!(!f.ws.join("out.txt").exists());
    let pulled = f.sandbox.pull().await.unwrap();
    assert_eq!((pulled.files, pulled.dropped()), (2, 0), "{pulled:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("out.txt")).unwrap(),
        "from the sandbox"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("sub/in.txt")).unwrap(),
        "changed\n"
    );
    // Closing the session brings back the last changes, each on its own: a file with
    // a 240-byte name comes back, one over copy_limit_mib does not and is named.
    let long = "n".repeat(240);
    f.sh(&format!(
        "echo last > last.txt; echo long > {long}; head -c 1100000 /dev/zero > over.bin"
    ))
    .await;
    let closed = f.sandbox.close().await;
    assert_eq!((closed.files, closed.dropped()), (2, 1), "{closed}");
    assert!(
        closed
            .to_string()
            .contains("over.bin: 1100000 bytes would pass copy_limit_mib (1 MiB)"),
        "{closed}"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("last.txt")).unwrap(),
        "last\n"
    );
    assert_eq!(std::fs::read_to_string(f.ws.join(&long)).unwrap(), "long\n");
    assert!(!f.ws.join("over.bin").exists());
    // Over the limit: refused, saying what to do.
    std::fs::write(f.ws.join("big.bin"), vec![7u8; 2 * 1024 * 1024]).unwrap();
    let refused = message(f.call("calculator", json!("1+1")).await);
    assert!(
        refused.contains("over copy_limit_mib (1 MiB)")
            && refused.contains("workspace_mode = \"mount\""),
        "{refused}"
    );
    f.sandbox.shutdown().await;
    drop(engine);
}

/// A Docker engine of the test's own over mutual TLS (see `engine.rs`), a client of
/// it, and the image `tag` built there.
async fn remote_engine(tag: &str) -> (crate::engine::Engine, bollard::Docker) {
    let engine = tokio::task::spawn_blocking(crate::engine::Engine::start)
        .await
        .unwrap();
    let docker = image::connect_with(Some(&engine.tcp), Some(&engine.tls))
        .await
        .unwrap();
    let sources = ImageSources::debian(env!("CARGO_BIN_EXE_jianmu").into());
    image::ensure_image(&docker, tag, &sources).await.unwrap();
    (engine, docker)
}

/// Polls `ready` for up to 60 s.
pub(crate) async fn eventually(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    for _ in 0..600 {
        if ready().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 60 s");
}

async fn gone(id: &str) -> bool {
    docker().await.inspect_container(id, None).await.is_err()
}

/// With `pool_size`, spare containers wait ready; a new session's first call takes
/// one (its state its own), a replacement starts, and shutdown removes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_hands_each_new_session_a_ready_container() {
    let f = fixture(DockerSettings {
        pool_size: 2,
        ..settings()
    });
    f.sandbox.warm_up().await.unwrap();
    eventually("the pool filling", async || f.sandbox.pooled().len() == 2).await;
    let spares = f.sandbox.pooled();
    let session = f.sandbox.sibling();
    let runner = ToolRunner::new(session.clone()).with_timeout(Duration::from_secs(60));
    f.call_with(&runner, "python_repl", json!({"code": "x = 'mine'"}))
        .await
        .unwrap();
    let taken = session.container_id().await.unwrap();
    assert!(spares.contains(&taken), "{taken} is not one of {spares:?}");
    assert_eq!(
        f.call_with(&runner, "python_repl", json!({"code": "x"}))
            .await
            .unwrap()
            .text
            .trim(),
        "mine"
    );
    // Neither the first session nor a third one sees it.
    for other in [f.runner.clone(), ToolRunner::new(f.sandbox.sibling())] {
        let seen = f
            .call_with(&other, "python_repl", json!({"code": "x"}))
            .await;
        assert!(
            message(seen).contains("NameError"),
            "another session sees the state"
        );
    }
    eventually("the pool refilling", async || {
        let now = f.sandbox.pooled();
        now.len() == 2 && !now.contains(&taken)
    })
    .await;
    // Closing a session removes its container only.
    session.close().await;
    eventually("the session's container going", async || gone(&taken).await).await;
    assert_eq!(f.sandbox.pooled().len(), 2);
    let left = f.sandbox.pooled();
    f.sandbox.shutdown().await;
    for id in left {
        eventually("a spare going", async || gone(&id).await).await;
    }
}

/// An engine without the runtime asked for: the error names it and says how to fix it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_the_engine_lacks_is_named() {
    let f = fixture(DockerSettings {
        runtime: Some("jianmu-no-such-runtime".into()),
        ..settings()
    });
    let err = message(f.call("calculator", json!("1+1")).await);
    assert!(
        err.contains("the Docker engine has no runtime `jianmu-no-such-runtime`: register it in the engine's daemon.json"),
        "{err}"
    );
    let bad = DockerSandbox::new(
        &f.ws,
        DockerSettings {
            runtime: Some("runsc; rm -rf /".into()),
            ..settings()
        },
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(bad.contains("is not a runtime name"), "{bad}");
}

/// What a locked-down container must show, asked through the sandbox's own `bash`.
async fn escape_probes(f: &Fixture, gvisor: bool) {
    let status = f
        .sh("grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status")
        .await;
    // gVisor writes `Key:value` without a tab and has no `NoNewPrivs` line.
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(str::trim)
    };
    for cap in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(field(cap), Some("0000000000000000"), "{status}");
    }
    let no_new_privs = match field("NoNewPrivs") {
        Some(v) => v.to_owned(),
        None => f
            .call(
                "python_repl",
                json!({"code": "import ctypes; ctypes.CDLL(None).prctl(39, 0, 0, 0, 0)"}),
            )
            .await
            .unwrap()
            .text
            .trim()
            .to_owned(),
    };
    assert_eq!(no_new_privs, "1", "{status}");
    let uid = f.sh("id -u").await;
    assert_ne!(uid.trim(), "0");
    assert_eq!(uid.trim(), sandbox_uid(&f.ws));
    let root = message(f.call("bash", json!({"command": "touch /probe"})).await);
    // gVisor checks the permission before the read-only mount.
    assert!(
        root.contains("Read-only file system") || (gvisor && root.contains("Permission denied")),
        "{root}"
    );
    assert_eq!(f.sh("echo ok > /tmp/probe && cat /tmp/probe").await, "ok\n");
    let sock = f
        .sh("for s in /var/run/docker.sock /run/docker.sock; do test -e $s && echo $s; done; echo end")
        .await;
    assert_eq!(sock, "end\n");
    // Only the loopback interface exists.
    let ifaces = f
        .sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        .await;
    assert_eq!(ifaces, "lo\n");
    // A file of the host, outside the workspace, is not there.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let seen = message(
        f.call(
            "bash",
            json!({"command": format!("cat {}", secret.display())}),
        )
        .await,
    );
    assert!(seen.contains("No such file or directory"), "{seen}");
    let passwd = f.sh("cat /etc/passwd").await;
    assert!(!passwd.contains(&std::fs::read_to_string("/etc/passwd").unwrap()));
    // The same path is the workspace inside and out.
    assert_eq!(f.sh("pwd").await.trim(), f.ws.to_str().unwrap());
}

fn sandbox_uid(ws: &Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(ws).unwrap().uid().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calculator_read_file_and_bash_answer_as_they_do_locally() {
    let f = fixture(settings());
    std::fs::write(f.ws.join("notes.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    // Big enough that its reply crosses the attach stream in many frames.
    let line = "0123456789abcdefghijklmnopqrstuvwxyz ".repeat(8);
    std::fs::write(f.ws.join("big.txt"), format!("{line}\n").repeat(3000)).unwrap();
    let cases = [
        ("calculator", json!("2**100 // 3 + 7 % 4")),
        ("calculator", json!("1/0")),
        (
            "read_file",
            json!({"path": "notes.txt", "offset": 2, "limit": 2}),
        ),
        ("read_file", json!({"path": "../escape.txt"})),
        (
            "read_file",
            json!({"path": "big.txt", "offset": 10, "limit": 2500}),
        ),
        (
            "bash",
            json!({"command": "printf 'a\\nb\\n' | wc -l; echo $((6*7))"}),
        ),
        ("bash", json!({"command": "echo oops >&2; exit 3"})),
        ("list_dir", json!({"path": "."})),
    ];
    for (tool, args) in cases {
        let local = f.local(tool, args.clone()).await;
        let docker = f.call(tool, args.clone()).await;
        match (local, docker) {
            (Ok(l), Ok(d)) => assert_eq!(l.text, d.text, "{tool} {args}"),
            (Err(l), Err(d)) => assert_eq!(l.to_string(), d.to_string(), "{tool} {args}"),
            (l, d) => panic!("{tool} {args}: local {l:?}, docker {d:?}"),
        }
    }
    // A write inside shows up on the host, and the other way round.
    f.call(
        "write_file",
        json!({"path": "out/made.txt", "content": "from the sandbox"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("out/made.txt")).unwrap(),
        "from the sandbox"
    );
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_repl_runs_inside_keeps_state_and_sees_only_the_container() {
    let f = fixture(settings());
    let py = |code: &str| json!({ "code": code });
    let local = f
        .local("python_repl", py("print(sum(i*i for i in range(10**4)))"))
        .await;
    let inside = f
        .call("python_repl", py("print(sum(i*i for i in range(10**4)))"))
        .await;
    assert_eq!(local.unwrap().text, inside.unwrap().text);
    f.call("python_repl", py("kept = 'from the first call'"))
        .await
        .unwrap();
    let state = f.call("python_repl", py("print(kept)")).await.unwrap();
    assert_eq!(state.text.trim(), "from the first call");
    let probe = f
        .call(
            "python_repl",
            py("import os, json; print(json.dumps([os.getuid(), open('/etc/passwd').read().count(chr(10))]))"),
        )
        .await
        .unwrap();
    let [uid, lines]: [u64; 2] = serde_json::from_str(probe.text.trim()).unwrap();
    assert_eq!(uid.to_string(), sandbox_uid(&f.ws));
    assert_eq!(lines, 2, "the image's passwd, not the host's");
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_container_serves_calls_concurrently_and_is_removed_on_shutdown() {
    let f = fixture(settings());
    // The first call waits for a file the second one writes: they can only both
    // finish if the container runs them at the same time.
    let waiter = f.call(
        "bash",
        json!({"command": "while [ ! -e go ]; do sleep 0.02; done; echo released"}),
    );
    let writer = async {
        f.sandbox.warm_up().await.unwrap();
        f.call("write_file", json!({"path": "go", "content": ""}))
            .await
    };
    let (waited, wrote) = tokio::join!(waiter, writer);
    assert_eq!(waited.unwrap().text, "released\n");
    wrote.unwrap();
    let id = f.sandbox.container_id().await.expect("a container is up");
    f.sandbox.shutdown().await;
    let gone = docker().await.inspect_container(&id, None).await;
    assert!(gone.is_err(), "the container is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_hits_the_pids_limit() {
    let f = fixture(DockerSettings {
        pids_limit: 64,
        ..settings()
    });
    let out = f
        .call(
            "bash",
            json!({"command": "i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done"}),
        )
        .await;
    // busybox's shell cannot fork the rest and the command fails.
    let err = message(out);
    assert!(
        err.contains("can't fork: Resource temporarily unavailable"),
        "{err}"
    );
    // What the command left behind was killed, and the container still works.
    let left = f.sh("ps -o args | grep -c '^sleep 30' || true").await;
    assert_eq!(left.trim(), "0");
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_memory_is_reported_as_the_memory_limit() {
    let f = fixture(DockerSettings {
        memory_mib: 64,
        ..settings()
    });
    let err = message(
        f.call(
            "bash",
            json!({"command": "head -c 300000000 /dev/zero | tr '\\0' x | sort > /dev/null"}),
        )
        .await,
    );
    assert!(err.contains("memory limit of 64 MiB"), "{err}");
    assert_eq!(f.sh("echo still here").await, "still here\n");
    f.sandbox.shutdown().await;
}

/// A call so big that the runner itself goes over the limit: the kernel kills it, the
/// call says why, and the next call gets a fresh container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_for_memory_is_reported_and_replaced() {
    let f = fixture(DockerSettings {
        memory_mib: 32,
        ..settings()
    });
    f.sandbox.warm_up().await.unwrap();
    let first = f.sandbox.container_id().await;
    let huge = "x".repeat(96 * 1024 * 1024);
    let err = message(
        f.call("write_file", json!({"path": "huge.txt", "content": huge}))
            .await,
    );
    assert!(
        err.contains("killed for exceeding its memory limit of 32 MiB"),
        "{err}"
    );
    assert!(!f.ws.join("huge.txt").exists());
    assert_eq!(f.sh("echo fresh").await, "fresh\n");
    assert_ne!(f.sandbox.container_id().await, first);
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_work_and_the_container_stays_usable() {
    let f = fixture(settings());
    f.sandbox.warm_up().await.unwrap();
    let id = f.sandbox.container_id().await;
    let short = ToolRunner::new(f.sandbox.clone()).with_timeout(Duration::from_millis(500));
    let err = f
        .call_with(&short, "bash", json!({"command": "sleep 120 & sleep 121"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::Timeout { .. }), "{err}");
    // The cancel reaches the container: the sleeps go.
    let mut left = String::new();
    for _ in 0..100 {
        left = f.sh("ps -o args | grep -c '^sleep 12' || true").await;
        if left.trim() == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left.trim(), "0", "the timed-out work still runs");
    assert_eq!(
        f.sandbox.container_id().await,
        id,
        "the same container serves on"
    );
    // A shell session lives in the container: its directory and exports carry over.
    f.call(
        "bash",
        json!({"command": "mkdir -p d && cd d && export Q=7", "session": "s"}),
    )
    .await
    .unwrap();
    let out = f
        .call("bash", json!({"command": "pwd; echo $Q", "session": "s"}))
        .await
        .unwrap();
    assert!(out.text.ends_with("/d\n7\n"), "{}", out.text);
    // A call past its limit ends the session's shell (`ash` here); the next starts
    // from the state it reported (`export -p`, read as data).
    f.call(
        "bash",
        json!({"command": "export R='it'\\''s $(x)'; sleep 30", "session": "s", "timeout": 0.5}),
    )
    .await
    .unwrap_err();
    let out = f
        .call(
            "bash",
            json!({"command": "pwd; echo \"$Q|$R\"", "session": "s"}),
        )
        .await
        .unwrap();
    assert!(out.text.ends_with("/d\n7|\n"), "{}", out.text);
    // bash's own limit inside the container answers with the output so far.
    let err = f
        .call(
            "bash",
            json!({"command": "echo early; sleep 30", "timeout": 1}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Timeout { partial: Some(p), .. } if p == "early\n"),
        "{err}"
    );
    f.sandbox.shutdown().await;
}

/// A background job lives in the container: a server there is reachable from later
/// calls, `bash_output` reads it, progress reports cross the wire, and `bash_kill`
/// leaves no process of it, on the host's view of the container either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_and_progress_live_in_the_container() {
    let f = fixture(settings());
    let marker = "4343";
    let started = f
        .call(
            "bash",
            json!({"command": format!("exec python3 -u -m http.server {marker} --bind 127.0.0.1"), "background": true, "yield_ms": 300}),
        )
        .await
        .unwrap();
    let data = started.structured.unwrap();
    let job = data["job"].as_u64().unwrap();
    assert_eq!(data["running"], true);
    let mut said = data["output"].as_str().unwrap().to_owned();
    for _ in 0..100 {
        if said.contains("Serving HTTP") {
            break;
        }
        let out = f
            .call("bash_output", json!({"job": job, "wait_ms": 100}))
            .await
            .unwrap();
        said.push_str(out.structured.unwrap()["output"].as_str().unwrap());
    }
    assert!(said.contains("Serving HTTP"), "{said}");
    let fetched = f
        .sh(&format!(
            "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{marker}/').status)\""
        ))
        .await;
    assert_eq!(fetched, "200\n");
    let on_host = jianmu_test_support::running_with(&format!("http.server {marker}"));
    assert_eq!(on_host.len(), 1, "{on_host:?}");
    let listed = f.call("bash_jobs", json!({})).await.unwrap();
    assert!(listed.text.contains("http.server"), "{}", listed.text);

    let killed = f.call("bash_kill", json!({ "job": job })).await.unwrap();
    assert_eq!(killed.structured.unwrap()["running"], false);
    assert!(!std::path::Path::new(&format!("/proc/{}", on_host[0])).exists());
    assert_eq!(
        f.sh(&format!(
            "ps -o args | grep -c '^python3 -u -m http.server {marker}' || true"
        ))
        .await
        .trim(),
        "0"
    );

    // A call that asks for progress hears from bash inside the container.
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let sink: jianmu_tool_core::ProgressSink = Arc::new(move |p: &jianmu_tool_core::Progress| {
        seen.lock().unwrap().push(*p);
    });
    let tool = f.provider.build("bash").unwrap();
    let out = tool
        .execute(
            json!({"command": "echo one; sleep 2.5; echo two"}),
            ExecuteOptions::default().runner(&f.runner).progress(&sink),
        )
        .await
        .unwrap();
    assert_eq!(out.text, "one\ntwo\n");
    let reports = reports.lock().unwrap().clone();
    assert!(reports.len() >= 2, "{reports:?}");
    assert!(
        reports.iter().all(|p| p.bytes == 4 && p.lines == 1),
        "{reports:?}"
    );
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_dies_mid_call_fails_the_call_and_is_replaced() {
    let f = Arc::new(fixture(settings()));
    f.sandbox.warm_up().await.unwrap();
    let id = f.sandbox.container_id().await.unwrap();
    let call = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            f.call("bash", json!({"command": "touch started; sleep 60"}))
                .await
        })
    };
    while !f.ws.join("started").exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    docker().await.kill_container(&id, None).await.unwrap();
    let err = message(call.await.unwrap());
    assert!(err.contains("was killed"), "{err}");
    assert!(err.contains("next call starts a fresh one"), "{err}");
    assert_eq!(f.sh("echo back").await, "back\n");
    let fresh = f.sandbox.container_id().await.unwrap();
    assert_ne!(fresh, id);
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_daemon_means_sandbox_unavailable_not_a_local_run() {
    let f = fixture(DockerSettings {
        docker_host: Some("unix:///nonexistent/docker.sock".into()),
        ..settings()
    });
    let marker = f.ws.join("ran-locally");
    let err = message(
        f.call(
            "bash",
            json!({"command": format!("touch {}", marker.display())}),
        )
        .await,
    );
    assert!(err.contains("sandbox unavailable"), "{err}");
    assert!(err.contains("/nonexistent/docker.sock"), "{err}");
    assert!(!marker.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_says_how_to_build_it() {
    let f = fixture(DockerSettings {
        image: "jianmu-sandbox:no-such-tag".into(),
        ..settings()
    });
    let err = message(f.call("calculator", json!("1+1")).await);
    assert!(err.contains("jianmu sandbox build-image"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_of_a_dead_owner_are_swept_at_start() {
    use bollard::models::ContainerCreateBody;
    let docker = docker().await;
    let me = jianmu_runtime::docker::owner_label();
    let machine = me.rsplitn(3, ':').nth(2).unwrap().to_owned();
    // A pid that cannot exist (above pid_max) stands for a crashed owner.
    let stale = docker
        .create_container(
            None,
            ContainerCreateBody {
                image: Some(test_image().to_owned()),
                labels: Some(
                    [(
                        jianmu_runtime::docker::LABEL.to_owned(),
                        format!("{machine}:4294967295:1"),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let f = fixture(settings());
    f.sandbox.warm_up().await.unwrap();
    assert!(docker.inspect_container(&stale.id, None).await.is_err());
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_is_opt_in() {
    let f = fixture(DockerSettings {
        network: true,
        ..settings()
    });
    let ifaces = f
        .sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort")
        .await;
    assert_eq!(ifaces, "eth0\nlo\n");
    f.sandbox.shutdown().await;
}

/// A project folder whose `jianmu.toml` runs calls in Docker, with its workspace `ws`
/// given to the sandbox user.
fn docker_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    give_to_sandbox_user(&ws);
    std::fs::write(
        dir.path().join("jianmu.toml"),
        format!(
            "workspace = \"ws\"\n[execution]\ntool_runner = \"docker\"\n[execution.docker]\nimage = \"{}\"\n",
            test_image()
        ),
    )
    .unwrap();
    (dir, ws)
}

#[test]
fn the_command_runs_calls_in_docker_when_asked() {
    let (dir, ws) = docker_project();
    let out = crate::jianmu(
        &["call", "bash", r#"{"command": "id -u; echo $((1+1))"}"#],
        dir.path(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let uid = sandbox_uid(&ws);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{uid}\n2\n"));
    // The flag picks local over the file: the host's uid.
    let out = crate::jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "id -u"}"#,
            "--sandbox",
            "local",
        ],
        dir.path(),
    );
    use std::os::unix::fs::MetadataExt as _;
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{me}\n"));
}

/// `jianmu call` with a copied workspace: a change that cannot come back (over
/// `copy_limit_mib`) is named on stderr and the command exits 3 after printing the
/// call's answer; the rest comes back; a file the sandbox's user could not read here is
/// not copied in, and is named.
#[test]
fn a_call_names_what_did_not_come_back_and_exits_3() {
    let (dir, ws) = docker_project();
    let toml = dir.path().join("jianmu.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("workspace_mode = \"copy\"\ncopy_limit_mib = 1\n");
    std::fs::write(&toml, text).unwrap();
    std::fs::write(ws.join("secret"), "root only").unwrap();
    std::fs::set_permissions(
        ws.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = crate::jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "test -e secret || echo no-secret; head -c 1100000 /dev/zero > big.bin; echo ok > small.txt; echo done"}"#,
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no-secret\ndone\n");
    assert!(
        stderr.contains("big.bin: 1100000 bytes would pass copy_limit_mib (1 MiB)")
            && stderr.contains("secret: the sandbox's user cannot read it here")
            && stderr.contains("1 of the sandbox's changes did not come back here"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("small.txt")).unwrap(),
        "ok\n"
    );
    assert!(!ws.join("big.bin").exists());
}

#[test]
fn a_signal_mid_call_removes_the_container() {
    let (dir, _ws) = docker_project();
    let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["call", "bash", r#"{"command": "sleep 300"}"#])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let owner = format!(":{}:", child.id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The containers this jianmu owns (its pid is in the owner label).
    let mine = || {
        rt.block_on(async {
            let list = docker()
                .await
                .list_containers(Some(
                    bollard::query_parameters::ListContainersOptionsBuilder::default()
                        .all(true)
                        .build(),
                ))
                .await
                .unwrap();
            list.into_iter()
                .filter(|c| {
                    c.labels
                        .as_ref()
                        .and_then(|l| l.get(jianmu_runtime::docker::LABEL))
                        .is_some_and(|v| v.contains(&owner))
                })
                .count()
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while mine() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(mine(), 1, "the call's container did not start");
    // Give the call a moment to be running inside it.
    std::thread::sleep(Duration::from_millis(500));
    let killed = jianmu_process::std_command("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "SIGTERM is exit code 128 + 15");
    assert_eq!(mine(), 0, "the container outlived the command");
}

/// The containers whose owner label names process `pid`, by full id.
fn containers_of(pid: u32) -> Vec<String> {
    let out = jianmu_process::std_command("docker")
        .args([
            "ps",
            "--no-trunc",
            "--format",
            "{{.ID}} {{.Label \"io.jianmu.sandbox.owner\"}}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, owner) = l.split_once(' ')?;
            (owner.split(':').nth(1) == Some(&pid.to_string())).then(|| id.to_owned())
        })
        .collect()
}

/// `jianmu mcp` on stdio with `pool_size = 1` takes its container when it starts, before
/// any call, and a spare for later: the first call runs in the container taken then.
#[cfg(feature = "mcp")]
#[test]
fn a_stdio_server_with_a_pool_takes_its_container_before_the_first_call() {
    use std::io::{BufRead as _, Write as _};
    let (dir, _ws) = docker_project();
    let toml = dir.path().join("jianmu.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("pool_size = 1\n");
    std::fs::write(&toml, text).unwrap();
    let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .arg("mcp")
        .current_dir(dir.path())
        .env_remove("JIANMU_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    assert!(lines.next().unwrap().unwrap().contains("\"id\":0"));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Its own container and a spare, with no call made.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while containers_of(pid).len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = containers_of(pid);
    assert_eq!(before.len(), 2, "{before:?}");
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": "hostname"}}}));
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let host = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(
        !host.is_empty() && before.iter().any(|id| id.starts_with(&host)),
        "{answer} ran in none of {before:?}"
    );
    // Still the two: the call started none.
    let after = containers_of(pid);
    assert_eq!(after.len(), 2, "{after:?}");
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !containers_of(pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "containers outlived the server"
    );
}

/// A session opened with tool settings of its own gets them inside its container too
/// (the pool's containers have the runtime's): `bash` with `nonzero_exit = "result"`,
/// as `jianmu native` opens it, answers an exit code instead of an error there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_settings_of_its_own_has_them_in_its_container() {
    use jianmu_runtime::Opening;
    let f = fixture(settings());
    let runtime = f.docker_runtime();
    let plain = runtime.open().unwrap();
    let failed = plain
        .call("bash", json!({"command": "echo out; exit 3"}))
        .await
        .unwrap_err();
    assert!(failed.to_string().starts_with("Error (3):"), "{failed}");
    let own = runtime
        .open_with(Opening::new().with_setting("bash", "nonzero_exit", "result".into()))
        .unwrap();
    let out = own
        .call("bash", json!({"command": "echo out; exit 3"}))
        .await
        .unwrap();
    assert_eq!(out.text, "out\nExit code: 3");
    assert_eq!(out.structured.unwrap()["exit_code"], 3);
    plain.close().await;
    own.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_call_into_the_container_and_terminal_jobs_run_there() {
    let f = fixture(settings());
    let runtime = f.docker_runtime();
    let session = runtime.open().unwrap();
    // The script runs here; the calls it makes run in the container.
    let out = session
        .call(
            "run_script",
            json!({"code": r#"let r = bash(#{command: "test -f /.dockerenv && echo in-the-container"}); r.stdout"#}),
        )
        .await
        .unwrap();
    assert!(out.text.contains("value: in-the-container"), "{}", out.text);

    let started = session
        .call(
            "bash",
            json!({"command": "python3 -i -q", "background": true, "tty": true, "yield_ms": 0}),
        )
        .await
        .unwrap();
    let job = started.structured.unwrap()["job"].as_u64().unwrap();
    let mut screen = String::new();
    let mut input =
        Some("import os, sys; print(sys.stdin.isatty(), os.path.exists('/.dockerenv'))\n");
    for _ in 0..100 {
        let mut args = json!({"job": job, "wait_ms": 100});
        if screen.contains(">>>")
            && let Some(text) = input.take()
        {
            args["input"] = json!(text);
        }
        let out = session.call("bash_output", args).await.unwrap();
        screen = out.structured.unwrap()["output"]
            .as_str()
            .unwrap()
            .to_owned();
        if screen.contains("True True") {
            break;
        }
    }
    assert!(screen.contains("True True\n>>>"), "{screen}");
    let out = session
        .call(
            "bash_output",
            json!({"job": job, "input": "import time; time.sleep(60)\n\u{3}", "wait_ms": 1000}),
        )
        .await
        .unwrap();
    let data = out.structured.unwrap();
    assert!(
        data["output"]
            .as_str()
            .unwrap()
            .contains("KeyboardInterrupt"),
        "{data}"
    );
    let killed = session
        .call("bash_kill", json!({"job": job}))
        .await
        .unwrap();
    assert_eq!(killed.structured.unwrap()["running"], false);
    session.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    f.sandbox.shutdown().await;
}

/// A swiftide agent's commands, given a session of a Docker runtime as its executor,
/// run in that session's container: the shell, file writes and reads, failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swiftide_executor_over_a_docker_session_runs_commands_in_its_container() {
    use jianmu_adapters::swiftide::SessionExecutor;
    use jianmu_adapters::swiftide::swiftide_core::{Command, CommandError, ToolExecutor};
    let f = fixture(settings());
    let runtime = f.docker_runtime();
    let executor = SessionExecutor::open(&runtime).unwrap();

    let out = executor
        .exec_cmd(&Command::shell(
            "test -f /.dockerenv && echo in-the-container; id -u",
        ))
        .await
        .unwrap();
    assert_eq!(
        out.output,
        format!("in-the-container\n{}", sandbox_uid(&f.ws))
    );
    executor
        .exec_cmd(&Command::write_file("made/here.txt", "from swiftide\n"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("made/here.txt")).unwrap(),
        "from swiftide\n"
    );
    let read = executor
        .exec_cmd(&Command::read_file("here.txt").with_current_dir("made"))
        .await
        .unwrap();
    assert_eq!(read.output, "from swiftide\n");
    match executor
        .exec_cmd(&Command::shell("echo not yet; exit 4"))
        .await
    {
        Err(CommandError::NonZeroExit(out)) => assert_eq!(out.output, "not yet"),
        other => panic!("{other:?}"),
    }
    assert!(executor.close().await.is_complete());
    runtime.shutdown(Duration::from_secs(10)).await;
    f.sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_policy_holds_in_the_container_whose_only_way_out_is_the_host() {
    let f = fixture(settings());
    // On 127.0.0.2 on the host: outside, as the container sees it.
    let (allowed, heads) =
        jianmu_test_support::http_upstream("127.0.0.2", "reached through the host");
    let (other, other_heads) = jianmu_test_support::http_upstream("127.0.0.2", "not for you");
    let secret = format!("s3cret-{}", std::process::id());
    let egress = json!({
        "allow": [format!("127.0.0.2:{allowed}")],
        "credentials": {
            format!("127.0.0.2:{allowed}"): {"header": "Authorization", "value": format!("Bearer {secret}")}
        }
    });
    let tools = ToolConfig::new(&f.ws).with_setting("bash", "egress", egress);
    let mut session_settings = jianmu_runtime::SessionSettings::new(tools);
    session_settings.backend = jianmu_runtime::Backend::Docker(Box::new(settings()));
    let runtime = jianmu_runtime::Runtime::new(session_settings).unwrap();
    let session = runtime.open().unwrap();
    let sh = async |command: &str| {
        session
            .call("bash", json!({ "command": command }))
            .await
            .map(|o| o.text)
            .unwrap_or_else(|e| jianmu_tool_core::error_chain(&e))
    };
    // The container has loopback only: the proxy inside is the server's, its far end
    // the host's.
    assert_eq!(
        sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await,
        "lo\n"
    );
    let got = sh(&format!(
        "wget -q -O - --header 'Authorization: placeholder' http://127.0.0.2:{allowed}/x"
    ))
    .await;
    assert_eq!(got, "reached through the host");
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(
        head.contains(&format!("Authorization: Bearer {secret}\r\n")),
        "{head}"
    );
    assert!(!head.contains("placeholder"), "{head}");
    // The refused host is never reached, and every refused request is answered with
    // the 403 (twenty in a row: the answer can come back before the stream's entry
    // was in the container's table, which once left wget waiting for ever).
    let refused = sh(&format!(
        "for i in $(seq 20); do timeout 20 wget -q -O - http://127.0.0.2:{other}/ 2>&1; echo; done; true"
    ))
    .await;
    assert_eq!(refused.matches("403").count(), 20, "{refused}");
    assert!(other_heads.lock().unwrap().is_empty());
    // The secret never entered the container.
    let env = sh("env; cat /proc/self/environ; echo").await;
    assert!(!env.contains(&secret), "{env}");
    assert!(env.contains("http_proxy=http://127.0.0.1:"), "{env}");
    // A container's servers stay inside it.
    let exposed = session
        .call("expose_port", json!({"port": 8000}))
        .await
        .unwrap_err();
    assert!(
        jianmu_tool_core::error_chain(&exposed)
            .contains("expose_port is not available in the Docker sandbox"),
        "{exposed}"
    );
    session.close().await;
    runtime.shutdown(Duration::from_secs(10)).await;
    f.sandbox.shutdown().await;
}

/// Checkpoints of a Docker session, with its workspace mounted and copied. The
/// checkpoint tools run on the host (the container has no store). With a copy, what
/// `bash` changed in the container is brought here before the next turn's checkpoint,
/// and a restore reaches the container: files made since are removed there, changed
/// ones come back, and the restore itself can be undone there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_cover_what_the_sandbox_changed_mounted_or_copied() {
    for mode in [WorkspaceMode::Mount, WorkspaceMode::Copy] {
        let f = fixture(settings());
        std::fs::write(f.ws.join("keep.txt"), "v1\n").unwrap();
        give_to_sandbox_user(&f.ws.join("keep.txt"));
        let store = tempfile::tempdir().unwrap();
        let mut session_settings = jianmu_runtime::SessionSettings::new(ToolConfig::new(&f.ws));
        session_settings.backend = jianmu_runtime::Backend::Docker(Box::new(DockerSettings {
            workspace_mode: mode,
            ..settings()
        }));
        session_settings.checkpoints.dir = Some(store.path().to_owned());
        let runtime = jianmu_runtime::Runtime::new(session_settings).unwrap();
        let session = runtime.open().unwrap();
        let call = async |tool: &str, args: Value| match session.call(tool, args).await {
            Ok(out) => out,
            Err(e) => panic!(
                "{tool} failed ({mode:?}): {}",
                jianmu_tool_core::error_chain(&e)
            ),
        };
        let sh = async |command: &str| call("bash", json!({ "command": command })).await.text;
        sh("echo v2 > keep.txt; echo made > new.txt").await;
        assert_eq!(
            f.ws.join("new.txt").exists(),
            mode == WorkspaceMode::Mount,
            "{mode:?}"
        );
        session.begin_turn();
        sh("echo v3 > keep.txt; mkdir d; echo late > d/late.txt").await;
        let listed = call("checkpoint_list", json!({})).await;
        let ids: Vec<String> = listed.structured.as_ref().unwrap()["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), 2, "{mode:?}: {}", listed.text);
        // The second turn's checkpoint holds what the first turn's bash made.
        let diff = call("checkpoint_diff", json!({"id": ids[1], "to": ids[0]})).await;
        assert!(
            diff.text.contains("+v2") && diff.text.contains("new.txt"),
            "{mode:?}: {}",
            diff.text
        );
        // Back to before the first turn, in the container too.
        let restored = call("checkpoint_restore", json!({"id": ids[1]})).await;
        let undo = restored.structured.as_ref().unwrap()["undo"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            sh("cat keep.txt; ls | sort | tr '\\n' ' '").await,
            "v1\nkeep.txt ",
            "{mode:?}: {}",
            restored.text
        );
        assert_eq!(
            std::fs::read_to_string(f.ws.join("keep.txt")).unwrap(),
            "v1\n"
        );
        assert!(!f.ws.join("new.txt").exists(), "{mode:?}");
        // And the restore undone: the container has the last turn's files again.
        call("checkpoint_restore", json!({"id": undo})).await;
        assert_eq!(
            sh("cat keep.txt d/late.txt new.txt").await,
            "v3\nlate\nmade\n",
            "{mode:?}"
        );
        session.close().await;
        runtime.shutdown(Duration::from_secs(15)).await;
        f.sandbox.shutdown().await;
    }
}

/// A Docker session with a copied workspace, suspended and resumed: the changes made
/// in the container come back first, and the resumed session, in a new container,
/// has them and its shell session's folder and exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_sandbox_session_suspends_and_resumes_in_a_new_container() {
    let f = fixture(settings());
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    give_to_sandbox_user(&f.ws.join("sub"));
    let mut session_settings = jianmu_runtime::SessionSettings::new(ToolConfig::new(&f.ws));
    session_settings.backend = jianmu_runtime::Backend::Docker(Box::new(DockerSettings {
        workspace_mode: WorkspaceMode::Copy,
        ..settings()
    }));
    let runtime = jianmu_runtime::Runtime::new(session_settings).unwrap();
    let sh = async |session: &jianmu_runtime::Session, command: &str| match session
        .call("bash", json!({"command": command, "session": "dev"}))
        .await
    {
        Ok(out) => out.text,
        Err(e) => panic!("{command}: {}", jianmu_tool_core::error_chain(&e)),
    };
    let session = runtime.open().unwrap();
    let first = sh(
        &session,
        "cd sub && export A=7 && echo made > made.txt && hostname",
    )
    .await;
    assert!(!f.ws.join("sub/made.txt").exists());
    let file = f._dir.path().join("suspended.json");
    let suspended = session.suspend(&file).await.unwrap();
    assert_eq!(suspended.shells, ["dev"], "{suspended}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("sub/made.txt")).unwrap(),
        "made\n"
    );
    let (resumed, report) = runtime.resume(&file).unwrap();
    assert_eq!(report.shells, ["dev"]);
    let back = sh(&resumed, "pwd; echo $A; cat made.txt; hostname").await;
    let back = back
        .strip_prefix(&format!("[{report}]\n"))
        .unwrap_or_else(|| panic!("no report first: {back}"));
    let lines: Vec<&str> = back.lines().collect();
    assert_eq!(
        lines[..3],
        [f.ws.join("sub").to_str().unwrap(), "7", "made"],
        "{back}"
    );
    assert_ne!(lines[3], first.trim(), "the same container");
    resumed.close().await;
    runtime.shutdown(Duration::from_secs(15)).await;
    f.sandbox.shutdown().await;
}
