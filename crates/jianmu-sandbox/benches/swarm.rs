//! Sandboxes placed by Docker Swarm, in one run, each against its reference in the
//! same run: the first call of a new session whose sandbox is a task of Swarm's warm
//! replicated pool, against the same through the one-engine pool (on the swarm's first
//! node, an engine of the same kind); and a cold placement (a one-replica service: the
//! first answer of a session with no pool) against a plain engine's create, start and
//! wait of `true` with the same settings on that node.
//!
//! Needs `JIANMU_BENCH_RUNNER` (a release `jianmu`) and `JIANMU_BENCH_SWARM`, the folder
//! of a swarm made by `tests/swarm/swarm.sh up` (its node `nX` answers on
//! `FOLDER/nX/docker.sock`); `cargo xtask bench --docker-only` provides both. Prints
//! `docker-bench NAME P50_US P99_US` lines for the summary.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::query_parameters::{ListServicesOptionsBuilder, ListTasksOptionsBuilder};
use jianmu_sandbox::image::{self, ImageSources};
use jianmu_sandbox::{DockerSandbox, DockerSettings, EngineAddress, LABEL, Orchestrator};
use jianmu_test_support::{block_on_bench, report_bench};
use jianmu_tool_core::{ExecuteOptions, FunctionTool, ToolHandle, ToolSpec};
use serde_json::json;

const TAG: &str = "jianmu-sandbox:bench";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const ROUNDS: usize = 15;

fn main() {
    let (Ok(runner), Ok(base)) = (
        std::env::var("JIANMU_BENCH_RUNNER"),
        std::env::var("JIANMU_BENCH_SWARM"),
    ) else {
        eprintln!("swarm bench skipped: set JIANMU_BENCH_RUNNER and JIANMU_BENCH_SWARM");
        return;
    };
    block_on_bench(bench(runner, base));
}

/// Running tasks of the pool service.
async fn pool_running(manager: &bollard::Docker) -> usize {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let options = ListServicesOptionsBuilder::default()
        .filters(&filters)
        .build();
    let services = manager
        .list_services(Some(options))
        .await
        .unwrap_or_default();
    let Some(pool) = services.into_iter().find(|s| {
        s.spec
            .as_ref()
            .and_then(|s| s.name.as_deref())
            .is_some_and(|n| n.starts_with("jianmu-pool-"))
    }) else {
        return 0;
    };
    let id = pool.id.unwrap_or_default();
    let filters = HashMap::from([
        ("service", vec![id.as_str()]),
        ("desired-state", vec!["running"]),
    ]);
    let options = ListTasksOptionsBuilder::default().filters(&filters).build();
    let tasks = manager.list_tasks(Some(options)).await.unwrap_or_default();
    tasks
        .iter()
        .filter(|t| {
            t.status.as_ref().and_then(|s| s.state) == Some(bollard::models::TaskState::RUNNING)
        })
        .count()
}

async fn bench(runner: String, base: String) {
    let socket = |n: &str| format!("unix://{base}/{n}/docker.sock");
    let sources = ImageSources::debian(runner.into());
    for node in NODES {
        let docker = image::connect(Some(&socket(node)))
            .await
            .expect("node engine");
        image::ensure_image(&docker, TAG, &sources)
            .await
            .expect("the image builds");
    }
    let manager = image::connect(Some(&socket("n1"))).await.unwrap();
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).ok();
    let calculator = ToolHandle::new(FunctionTool::from_sync(
        ToolSpec::new("calculator", "Evaluates."),
        |_| Ok("unused".into()),
    ))
    .unwrap();
    let args = json!("(12+34)*5-67//8");
    let first_call = async |sandbox: &DockerSandbox| {
        let session = sandbox.sibling();
        let start = Instant::now();
        let out = calculator
            .execute(args.clone(), ExecuteOptions::default().runner(&session))
            .await
            .unwrap();
        let took = start.elapsed();
        assert_eq!(out.text, "222");
        session.close().await;
        took
    };
    let plain = DockerSettings {
        image: TAG.into(),
        hosts: vec![EngineAddress::Url(socket("n1"))],
        workspace_mode: jianmu_sandbox::WorkspaceMode::Copy,
        ..DockerSettings::default()
    };
    let swarm = DockerSettings {
        hosts: NODES
            .iter()
            .map(|n| EngineAddress::Url(socket(n)))
            .collect(),
        orchestrator: Orchestrator::Swarm,
        ..plain.clone()
    };

    // Warm pools of two, interleaved: Swarm's replicated service, and the one-engine
    // pool on node n1. Each round waits (untimed) until its pool is full again.
    let swarm_pool = DockerSandbox::new(
        &ws,
        DockerSettings {
            pool_size: 2,
            ..swarm.clone()
        },
    )
    .unwrap();
    let engine_pool = DockerSandbox::new(
        &ws,
        DockerSettings {
            pool_size: 2,
            ..plain.clone()
        },
    )
    .unwrap();
    swarm_pool.fill_pool();
    engine_pool.warm_up().await.unwrap();
    let (mut from_swarm, mut from_engine) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let filled = Instant::now();
        while pool_running(&manager).await < 2 && filled.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        from_swarm.push(first_call(&swarm_pool).await);
        let filled = Instant::now();
        while engine_pool.pooled().len() < 2 && filled.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        from_engine.push(first_call(&engine_pool).await);
    }
    report_bench("swarm_pool_first_call", from_swarm);
    report_bench("engine_pool_first_call", from_engine);
    swarm_pool.shutdown().await;
    engine_pool.shutdown().await;

    // Cold: a one-replica service per session, against raw create + start + wait of
    // `true` on node n1's engine with the same container settings.
    let cold = DockerSandbox::new(&ws, swarm).unwrap();
    let reference = DockerSandbox::new(&ws, plain).unwrap();
    let body = reference.container_body();
    let n1 = image::connect(Some(&socket("n1"))).await.unwrap();
    let (mut placed, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        placed.push(first_call(&cold).await);
        let mut body = body.clone();
        body.entrypoint = Some(vec!["/bin/true".into()]);
        body.open_stdin = Some(false);
        body.stdin_once = Some(false);
        body.attach_stdin = Some(false);
        let start = Instant::now();
        let id = n1.create_container(None, body).await.unwrap().id;
        n1.start_container(&id, None).await.unwrap();
        let mut wait = n1.wait_container(&id, None);
        use futures::StreamExt as _;
        while wait.next().await.is_some() {}
        raw.push(start.elapsed());
        let options = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        n1.remove_container(&id, Some(options)).await.ok();
    }
    report_bench("swarm_cold_first_call", placed);
    report_bench("raw_create_start_wait", raw);
    cold.shutdown().await;
}
