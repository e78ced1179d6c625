//! Sandboxes placed by Docker Swarm (`orchestrator = "swarm"`) on a swarm the test
//! makes for itself: `tests/swarm/swarm.sh` starts three engines, each in a network
//! namespace of its own on a test bridge (own data root, exec root, pidfile, socket),
//! and joins them into one swarm. Sessions spread over the nodes, a node is killed
//! mid-call, the next session and the pool land on the survivors, a session sleeps on
//! one node and wakes on another, and everything the test made is gone after it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::models::NodeSpecAvailabilityEnum;
use bollard::query_parameters::{ListServicesOptionsBuilder, ListTasksOptionsBuilder};
use jianmu_provider::BuiltinToolProvider;
use jianmu_runtime::docker::image::{self, ImageSources};
use jianmu_runtime::docker::{EngineAddress, LABEL, Orchestrator};
use jianmu_runtime::{DockerSandbox, DockerSettings, ToolRunner};
use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolError, ToolOutput};
use serde_json::json;

const TAG: &str = "jianmu-sandbox:swarm-test";
const BASE: &str = "/tmp/jianmu-swarm";
const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/swarm/swarm.sh")
}

fn swarm_sh(args: &[&str]) -> std::process::Output {
    jianmu_process::std_command("bash")
        .arg(script())
        .args(args)
        .env("JMSW_BASE", BASE)
        .output()
        .expect("swarm.sh runs")
}

fn socket(node: &str) -> String {
    format!("unix://{BASE}/{node}/docker.sock")
}

/// Takes the swarm down when the test ends, however it ends.
struct Swarm;

impl Drop for Swarm {
    fn drop(&mut self) {
        let _ = swarm_sh(&["down"]);
    }
}

async fn node_engine(node: &str) -> bollard::Docker {
    image::connect(Some(&socket(node))).await.unwrap()
}

/// The swarm node id of each test node, by name.
async fn node_ids() -> Vec<(String, String)> {
    let mut ids = Vec::new();
    for node in NODES {
        if let Ok(info) = node_engine(node).await.info().await {
            let id = info.swarm.and_then(|s| s.node_id).unwrap_or_default();
            ids.push((node.to_owned(), id));
        }
    }
    ids
}

/// The test node running `container`, and the id of its service, asked of the
/// manager.
async fn placement(
    manager: &bollard::Docker,
    ids: &[(String, String)],
    container: &str,
) -> (String, String) {
    let tasks = manager.list_tasks(None).await.unwrap();
    let task = tasks
        .iter()
        .find(|t| {
            t.status
                .as_ref()
                .and_then(|s| s.container_status.as_ref())
                .and_then(|c| c.container_id.as_deref())
                == Some(container)
        })
        .unwrap_or_else(|| panic!("no task runs container {container}"));
    let id = task.node_id.clone().unwrap();
    let node = ids
        .iter()
        .find(|(_, n)| *n == id)
        .map(|(name, _)| name.clone())
        .unwrap();
    (node, task.service_id.clone().unwrap())
}

/// The test node of the container whose host name (its short id) is `host`.
async fn node_of_host(manager: &bollard::Docker, ids: &[(String, String)], host: &str) -> String {
    let tasks = manager.list_tasks(None).await.unwrap();
    let container = tasks
        .iter()
        .filter_map(|t| {
            t.status
                .as_ref()?
                .container_status
                .as_ref()?
                .container_id
                .clone()
        })
        .find(|c| c.starts_with(host))
        .unwrap_or_else(|| panic!("no task runs a container named {host}"));
    node_of(manager, ids, &container).await
}

/// Sets the availability of test node `node` (`drain`: Swarm runs nothing there).
async fn set_availability(
    manager: &bollard::Docker,
    ids: &[(String, String)],
    node: &str,
    availability: NodeSpecAvailabilityEnum,
) {
    let id = &ids.iter().find(|(n, _)| n == node).unwrap().1;
    let current = manager.inspect_node(id).await.unwrap();
    let mut spec = current.spec.unwrap();
    spec.availability = Some(availability);
    let options = bollard::query_parameters::UpdateNodeOptionsBuilder::default()
        .version(i64::try_from(current.version.unwrap().index.unwrap()).unwrap())
        .build();
    manager.update_node(id, spec, options).await.unwrap();
}

async fn node_of(manager: &bollard::Docker, ids: &[(String, String)], container: &str) -> String {
    placement(manager, ids, container).await.0
}

async fn call(
    provider: &BuiltinToolProvider,
    sandbox: &DockerSandbox,
    command: &str,
) -> Result<ToolOutput, ToolError> {
    let runner = ToolRunner::new(sandbox.clone()).with_timeout(Duration::from_secs(120));
    let tool = provider.build("bash").unwrap();
    tool.execute(
        json!({ "command": command, "timeout": 100 }),
        ExecuteOptions::default().runner(&runner),
    )
    .await
}

async fn sh(provider: &BuiltinToolProvider, sandbox: &DockerSandbox, command: &str) -> String {
    match call(provider, sandbox, command).await {
        Ok(out) => out.text,
        Err(e) => panic!("`{command}` failed: {}", jianmu_tool_core::error_chain(&e)),
    }
}

async fn services(manager: &bollard::Docker) -> Vec<bollard::models::Service> {
    let filters = std::collections::HashMap::from([("label", vec![LABEL])]);
    let options = ListServicesOptionsBuilder::default()
        .filters(&filters)
        .build();
    manager.list_services(Some(options)).await.unwrap()
}

/// The pool's service id, once it exists.
async fn pool_service(manager: &bollard::Docker) -> Option<String> {
    services(manager).await.into_iter().find_map(|s| {
        let name = s.spec.as_ref()?.name.as_deref()?;
        name.starts_with("jianmu-pool-").then(|| s.id.clone())?
    })
}

/// The nodes of the pool's running tasks.
async fn pool_nodes(manager: &bollard::Docker, ids: &[(String, String)]) -> Vec<String> {
    let Some(pool) = pool_service(manager).await else {
        return Vec::new();
    };
    let filters = std::collections::HashMap::from([
        ("service", vec![pool.as_str()]),
        ("desired-state", vec!["running"]),
    ]);
    let options = ListTasksOptionsBuilder::default().filters(&filters).build();
    let tasks = manager.list_tasks(Some(options)).await.unwrap_or_default();
    tasks
        .iter()
        .filter(|t| {
            t.status.as_ref().and_then(|s| s.state) == Some(bollard::models::TaskState::RUNNING)
        })
        .filter_map(|t| {
            let id = t.node_id.as_deref()?;
            ids.iter()
                .find(|(_, n)| n == id)
                .map(|(name, _)| name.clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_places_sessions_on_nodes_and_replaces_a_lost_one() {
    let _ = swarm_sh(&["down"]);
    let up = swarm_sh(&["up"]);
    let swarm = Swarm;
    assert!(
        up.status.success(),
        "swarm.sh up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let sources = ImageSources::debian(env!("CARGO_BIN_EXE_jianmu").into());
    let builds = NODES.map(|node| {
        let sources = sources.clone();
        tokio::spawn(async move {
            let docker = node_engine(node).await;
            image::ensure_image(&docker, TAG, &sources).await.unwrap();
        })
    });
    for build in builds {
        build.await.unwrap();
    }
    let manager = node_engine("n1").await;
    let ids = node_ids().await;

    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "from the host\n").unwrap();
    crate::docker::give_to_sandbox_user(&ws);
    let ws = ws.canonicalize().unwrap();
    let settings = DockerSettings {
        image: TAG.into(),
        orchestrator: Orchestrator::Swarm,
        hosts: NODES
            .iter()
            .map(|n| EngineAddress::Url(socket(n)))
            .collect(),
        pool_size: 2,
        ..DockerSettings::default()
    };
    // A service of a process of this host that is gone: swept at the first placement.
    let me = jianmu_runtime::docker::owner_label();
    let machine = me.rsplitn(3, ':').nth(2).unwrap().to_owned();
    let stale = bollard::models::ServiceSpec {
        name: Some("jianmu-session-stale".into()),
        labels: Some(std::collections::HashMap::from([(
            LABEL.to_owned(),
            format!("{machine}:999999999:1"),
        )])),
        task_template: Some(bollard::models::TaskSpec {
            container_spec: Some(bollard::models::TaskSpecContainerSpec {
                image: Some(TAG.into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    manager.create_service(stale, None).await.unwrap();
    let provider = BuiltinToolProvider::new(ToolConfig::new(&ws));
    let sandbox = DockerSandbox::new(&ws, settings.clone()).unwrap();
    // A session sleeps on one node and wakes on another: its node is drained (Swarm
    // runs nothing there) before the resume.
    let mut resumable = jianmu_runtime::SessionSettings::new(ToolConfig::new(&ws));
    resumable.backend = jianmu_runtime::Backend::Docker(Box::new(DockerSettings {
        pool_size: 0,
        ..settings.clone()
    }));
    let runtime = jianmu_runtime::Runtime::new(resumable).unwrap();
    let session = runtime.open().unwrap();
    let bash = async |session: &jianmu_runtime::Session, command: &str| match session
        .call("bash", json!({"command": command, "session": "dev"}))
        .await
    {
        Ok(out) => out.text,
        Err(e) => panic!("{command}: {}", jianmu_tool_core::error_chain(&e)),
    };
    let slept = bash(
        &session,
        "mkdir -p sub && cd sub && export A=7 && echo made > made.txt && hostname",
    )
    .await;
    let slept_on = node_of_host(&manager, &ids, slept.trim()).await;
    let file = dir.path().join("suspended.json");
    session.suspend(&file).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/made.txt")).unwrap(),
        "made\n"
    );
    set_availability(&manager, &ids, &slept_on, NodeSpecAvailabilityEnum::DRAIN).await;
    let (resumed, report) = runtime.resume(&file).unwrap();
    let woke = bash(&resumed, "pwd; echo $A; cat made.txt; hostname").await;
    let woke = woke
        .strip_prefix(&format!("[{report}]\n"))
        .unwrap_or(&woke)
        .to_owned();
    let lines: Vec<&str> = woke.lines().collect();
    assert_eq!(
        lines[..3],
        [ws.join("sub").to_str().unwrap(), "7", "made"],
        "{woke}"
    );
    let woke_on = node_of_host(&manager, &ids, lines[3]).await;
    assert_ne!(woke_on, slept_on, "woke on the node it slept on");
    resumed.close().await;
    runtime.shutdown(Duration::from_secs(15)).await;
    set_availability(&manager, &ids, &slept_on, NodeSpecAvailabilityEnum::ACTIVE).await;

    sandbox.fill_pool();
    crate::docker::eventually("the pool's two tasks running", async || {
        pool_nodes(&manager, &ids).await.len() == 2
    })
    .await;
    let pool = pool_service(&manager).await.unwrap();

    // Four sessions: the pool's two tasks, then services of their own, spread by Swarm.
    let sessions: Vec<DockerSandbox> = (0..4).map(|_| sandbox.sibling()).collect();
    let (mut nodes, mut services_of) = (Vec::new(), Vec::new());
    for s in &sessions {
        let out = sh(&provider, s, "cat notes.txt; echo changed > mine.txt").await;
        assert!(out.contains("from the host"), "{out}");
        let container = s.container_id().await.unwrap();
        let (node, service) = placement(&manager, &ids, &container).await;
        nodes.push(node);
        services_of.push(service);
    }
    assert_eq!(
        services_of[..2],
        [pool.clone(), pool.clone()],
        "the pool's tasks first"
    );
    assert!(
        services_of[2..].iter().all(|s| *s != pool),
        "{services_of:?}"
    );
    let names: Vec<String> = services(&manager)
        .await
        .into_iter()
        .filter_map(|s| s.spec?.name)
        .collect();
    assert!(
        !names.iter().any(|n| n == "jianmu-session-stale"),
        "{names:?}"
    );
    let distinct: std::collections::BTreeSet<&String> = nodes.iter().collect();
    assert!(distinct.len() >= 2, "all sessions on one node: {nodes:?}");

    // The closed network: the manager's own address is out of reach; loopback works.
    let out = sh(
        &provider,
        &sessions[0],
        "if nc -w 2 10.251.0.11 2377 </dev/null; then echo reached; else echo closed; fi; \
         (nc -l -p 8099 > /tmp/got &); sleep 0.5; echo local | nc -w 1 127.0.0.1 8099; \
         sleep 0.5; cat /tmp/got",
    )
    .await;
    assert!(out.contains("closed") && !out.contains("reached"), "{out}");
    assert!(out.contains("local"), "{out}");
    // Nor does a session reach another's server on the same node (four sessions,
    // three nodes: two share one).
    let (a, b) = (0..4)
        .flat_map(|i| (i + 1..4).map(move |j| (i, j)))
        .find(|&(i, j)| nodes[i] == nodes[j])
        .unwrap();
    // Servers as background jobs: what a call starts ends with it, a job does not.
    for port in [8097, 8098] {
        let runner = ToolRunner::new(sessions[a].clone()).with_timeout(Duration::from_secs(60));
        provider
            .build("bash")
            .unwrap()
            .execute(
                json!({"command": format!("nc -l -p {port} > /tmp/got-{port}"), "background": true}),
                ExecuteOptions::default().runner(&runner),
            )
            .await
            .unwrap();
    }
    let ip = sh(&provider, &sessions[a], "sleep 0.3; hostname -i").await;
    let ip = ip.trim().to_owned();
    assert!(
        ip.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| !a.is_loopback()),
        "{ip}"
    );
    // The session reaches its own server at that address: the address is right.
    let own = sh(
        &provider,
        &sessions[a],
        &format!("echo self | nc -w 2 {ip} 8097; sleep 0.3; cat /tmp/got-8097"),
    )
    .await;
    assert!(own.contains("self"), "{own}");
    let out = sh(
        &provider,
        &sessions[b],
        &format!("if echo hi | nc -w 2 {ip} 8098; then echo reached; else echo closed; fi"),
    )
    .await;
    assert!(
        out.contains("closed") && !out.contains("reached"),
        "{ip}: {out}"
    );
    let got = sh(&provider, &sessions[a], "cat /tmp/got-8098; echo end").await;
    assert_eq!(got, "end\n", "session {b} reached session {a}'s server");

    // A node killed mid-call: that call says the sandbox was lost.
    // The victim runs one of the pool's tasks, so the pool has one to replace.
    let (victim, lost_node) = (0..2)
        .find(|&i| nodes[i] != "n1")
        .map(|i| (sessions[i].clone(), nodes[i].clone()))
        .expect("a pool task on a worker node");
    let provider = Arc::new(provider);
    let pending = {
        let provider = Arc::clone(&provider);
        let victim = victim.clone();
        tokio::spawn(async move { call(&provider, &victim, "sleep 60; echo survived").await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed = swarm_sh(&["kill-node", &lost_node]);
    assert!(killed.status.success(), "kill-node {lost_node}");
    let lost = pending.await.unwrap();
    let message = match lost {
        Ok(out) => panic!("the call survived its node: {}", out.text),
        Err(e) => jianmu_tool_core::error_chain(&e),
    };
    assert!(message.contains("the sandbox was lost"), "{message}");
    assert!(message.contains(&format!("jmsw-{lost_node}")), "{message}");

    // The next session runs, on a live node.
    let next = sandbox.sibling();
    let out = sh(&provider, &next, "cat notes.txt").await;
    assert!(out.contains("from the host"), "{out}");
    let container = next.container_id().await.unwrap();
    let placed = node_of(&manager, &ids, &container).await;
    assert_ne!(placed, lost_node);

    // The pool refills on the survivors.
    crate::docker::eventually("the pool back to two tasks on live nodes", async || {
        let on = pool_nodes(&manager, &ids).await;
        on.len() == 2 && !on.contains(&lost_node)
    })
    .await;

    // A node cut off from the swarm (its engine still answering here): Swarm marks
    // it down, and the call running there ends saying so.
    let other = ["n2", "n3"].into_iter().find(|n| *n != lost_node).unwrap();
    // Sessions kept open fill the nodes, so Swarm's spread reaches the other worker.
    let (mut cut, mut held) = (None, Vec::new());
    for _ in 0..8 {
        let s = sandbox.sibling();
        sh(&provider, &s, "true").await;
        let container = s.container_id().await.unwrap();
        if node_of(&manager, &ids, &container).await == other {
            cut = Some(s);
            break;
        }
        held.push(s);
    }
    let cut = cut.expect("a session on the other worker");
    let pending = {
        let provider = Arc::clone(&provider);
        let cut = cut.clone();
        tokio::spawn(async move { call(&provider, &cut, "sleep 60; echo survived").await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(swarm_sh(&["cut-node", other]).status.success());
    let message = match pending.await.unwrap() {
        Ok(out) => panic!("the call survived its node's cut: {}", out.text),
        Err(e) => jianmu_tool_core::error_chain(&e),
    };
    assert!(
        message.contains(&format!("Swarm reports its node jmsw-{other} down")),
        "{message}"
    );

    // A session's changes come back when it closes.
    let _ = sessions[2].close().await;
    for s in sessions.iter().chain([&next]).chain(&held) {
        let _ = s.close().await;
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("mine.txt")).unwrap(),
        "changed\n"
    );
    sandbox.shutdown().await;
    crate::docker::eventually("every sandbox service removed", async || {
        services(&manager).await.is_empty()
    })
    .await;

    std::mem::forget(swarm);
    let down = swarm_sh(&["down"]);
    assert!(
        down.status.success(),
        "swarm.sh down left things: {}",
        String::from_utf8_lossy(&down.stderr)
    );
}
