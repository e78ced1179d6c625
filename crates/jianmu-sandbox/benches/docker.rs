//! The Docker sandbox, in one run: a warm call through `DockerSandbox` (calculator)
//! against a raw bollard `exec` of `true` into the same running container, and a cold
//! call (create, start, call, remove) against a raw bollard `create + start + wait +
//! remove` of `true` with the same container settings, and the first call of a new
//! session taken from a warm pool against the same raw reference, and 100 sessions
//! opened 10 at a time (sessions per second, memory per idle container), on one engine
//! and, with `JIANMU_BENCH_SECOND_ENGINE` (set by `cargo xtask bench`), on two; and a
//! copied workspace of 10,000 and 100,000 small files: copy-in, and bringing every file
//! back (`pull`) against the same archive streamed from the engine into `tar -x`.
//!
//! Needs `JIANMU_BENCH_RUNNER`, a release `jianmu` binary, and a running Docker
//! engine; `cargo xtask bench` provides both. Prints `docker-bench NAME P50_US P99_US`
//! lines for the summary.

use std::time::{Duration, Instant};

use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use bollard::query_parameters::RemoveContainerOptionsBuilder;
use futures::StreamExt as _;
use jianmu_sandbox::image::{self, ImageSources};
use jianmu_sandbox::{DockerSandbox, DockerSettings};
use jianmu_sandbox::{EngineAddress, WorkspaceMode};
use jianmu_test_support::{block_on_bench, report_bench};
use jianmu_tool_core::{ExecuteOptions, FunctionTool, ToolHandle, ToolSpec};
use serde_json::json;

const TAG: &str = "jianmu-sandbox:bench";

fn main() {
    let Ok(runner) = std::env::var("JIANMU_BENCH_RUNNER") else {
        eprintln!("docker bench skipped: set JIANMU_BENCH_RUNNER to a release jianmu binary");
        return;
    };
    block_on_bench(bench(runner));
}

async fn bench(runner: String) {
    let docker = image::connect(None).await.expect("a Docker engine");
    let sources = ImageSources::debian(runner.into());
    image::ensure_image(&docker, TAG, &sources)
        .await
        .expect("the image builds");
    let ws = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(ws.path(), Some(65534), Some(65534)).ok();
    let settings = DockerSettings {
        image: TAG.into(),
        ..DockerSettings::default()
    };
    // The host only names the tool; the container runs the real calculator.
    let calculator = ToolHandle::new(FunctionTool::from_sync(
        ToolSpec::new("calculator", "Evaluates."),
        |_| Ok("unused".into()),
    ))
    .unwrap();
    let args = json!("(12+34)*5-67//8");

    // Warm: one long-lived container.
    let sandbox = DockerSandbox::new(ws.path(), settings.clone()).unwrap();
    let tools = sandbox.clone();
    let mut warm = Vec::new();
    for i in 0..2000 {
        let start = Instant::now();
        let out = calculator
            .execute(args.clone(), ExecuteOptions::default().runner(&tools))
            .await
            .unwrap();
        if i >= 200 {
            warm.push(start.elapsed());
        }
        assert_eq!(out.text, "222");
    }
    report_bench("warm_call", warm);

    // Raw exec of `true` into the same container.
    let id = sandbox.container_id().await.unwrap();
    let mut exec = Vec::new();
    for _ in 0..40 {
        let start = Instant::now();
        let created = docker
            .create_exec(
                &id,
                ExecConfig {
                    cmd: Some(vec!["/bin/true".into()]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&created.id, None).await.unwrap()
        {
            while output.next().await.is_some() {}
        }
        exec.push(start.elapsed());
    }
    report_bench("raw_exec", exec);
    sandbox.shutdown().await;

    // Cold: a call that has to start a container (the sandbox and its daemon
    // connection live on, as in a long-running agent), ours against raw bollard
    // with the same container settings, interleaved.
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    // Phases, to show where the time goes.
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let (mut r_create, mut r_start, mut r_wait, mut r_remove) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..25 {
        let start = Instant::now();
        sandbox.warm_up().await.unwrap();
        let warmed = start.elapsed();
        calculator
            .execute(args.clone(), ExecuteOptions::default().runner(&tools))
            .await
            .unwrap();
        let called = start.elapsed();
        sandbox.shutdown().await;
        ours.push(start.elapsed());
        up.push(warmed);
        down.push(start.elapsed() - called);

        let start = Instant::now();
        let mut body = sandbox.container_body();
        body.entrypoint = Some(vec!["/bin/true".into()]);
        body.open_stdin = Some(false);
        body.stdin_once = Some(false);
        body.attach_stdin = Some(false);
        let created = docker.create_container(None, body).await.unwrap();
        let t1 = start.elapsed();
        docker.start_container(&created.id, None).await.unwrap();
        let t2 = start.elapsed();
        let mut wait = docker.wait_container(&created.id, None);
        while wait.next().await.is_some() {}
        let t3 = start.elapsed();
        docker
            .remove_container(
                &created.id,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
            .unwrap();
        raw.push(start.elapsed());
        r_create.push(t1);
        r_start.push(t2 - t1);
        r_wait.push(t3 - t2);
        r_remove.push(start.elapsed() - t3);
    }
    report_bench("cold_call", ours);
    report_bench("raw_cold", raw);
    report_bench("cold_phase_up", up);
    report_bench("cold_phase_down", down);
    report_bench("raw_phase_create", r_create);
    report_bench("raw_phase_start", r_start);
    report_bench("raw_phase_wait", r_wait);
    report_bench("raw_phase_remove", r_remove);

    // A warm pool: the first call of each new session takes a ready spare. The session
    // is closed and the pool refilled between rounds, untimed.
    let pooled = DockerSandbox::new(
        ws.path(),
        DockerSettings {
            pool_size: 2,
            ..settings.clone()
        },
    )
    .unwrap();
    pooled.warm_up().await.unwrap();
    let mut first = Vec::new();
    for _ in 0..25 {
        let filled = Instant::now();
        while pooled.pooled().len() < 2 && filled.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let session = pooled.sibling();
        let runner = session.clone();
        let start = Instant::now();
        let out = calculator
            .execute(args.clone(), ExecuteOptions::default().runner(&runner))
            .await
            .unwrap();
        first.push(start.elapsed());
        assert_eq!(out.text, "222");
        session.close().await;
    }
    report_bench("pool_first_call", first);
    pooled.shutdown().await;

    // Many sessions at once: 100 sessions opened 10 at a time (each one's first call
    // starts its container), then the memory each idle container uses.
    let many = DockerSandbox::new(ws.path(), settings.clone()).unwrap();
    let (rate, mib) = many_sessions(&many, &calculator, &args, std::slice::from_ref(&docker)).await;
    println!("docker-bench-many {SESSIONS} {rate:.1} {mib:.1}");
    many.shutdown().await;

    // The same across two engines, when `cargo xtask bench` started a second one.
    if let Ok(second) = std::env::var("JIANMU_BENCH_SECOND_ENGINE") {
        let other = image::connect(Some(&second))
            .await
            .expect("the second engine");
        image::ensure_image(&other, TAG, &sources)
            .await
            .expect("the image builds on the second engine");
        let first = std::env::var("DOCKER_HOST")
            .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_owned());
        let spread = DockerSandbox::new(
            ws.path(),
            DockerSettings {
                hosts: vec![EngineAddress::Url(first), EngineAddress::Url(second)],
                ..settings.clone()
            },
        )
        .unwrap();
        let (rate, mib) =
            many_sessions(&spread, &calculator, &args, &[docker.clone(), other]).await;
        println!("docker-bench-many2 {SESSIONS} {rate:.1} {mib:.1}");
        spread.shutdown().await;
    }

    for n in [10_000, 100_000] {
        copies(&docker, &settings, n).await;
    }
}

/// `workspace_mode = "copy"` with `n` one-byte files: the copy-in (a session's first
/// container start with the files, less one without), and bringing `n` changed files
/// back (`pull`) against the same archive streamed from the engine into `tar -x`.
/// Prints `docker-bench-copy N COPY_IN_MS TAR_C_MS PULL_MS TAR_X_MS`.
async fn copies(docker: &bollard::Docker, settings: &DockerSettings, n: usize) {
    use tokio::io::AsyncWriteExt as _;
    let parent = tempfile::tempdir().unwrap();
    let make = |name: &str, files: usize| {
        let ws = parent.path().join(name);
        std::fs::create_dir_all(ws.join("d")).unwrap();
        for i in 0..files {
            std::fs::write(ws.join(format!("d/f{i}")), "x").unwrap();
        }
        ws
    };
    let (empty, full) = (make("empty", 0), make("full", n));
    let settings = DockerSettings {
        workspace_mode: WorkspaceMode::Copy,
        copy_limit_files: 1_000_000,
        ..settings.clone()
    };
    let base = DockerSandbox::new(&empty, settings.clone()).unwrap();
    let start = Instant::now();
    base.warm_up().await.unwrap();
    let without = start.elapsed();
    base.shutdown().await;
    let sandbox = DockerSandbox::new(&full, settings).unwrap();
    let start = Instant::now();
    sandbox.warm_up().await.unwrap();
    let copy_in = start.elapsed().saturating_sub(without);
    let start = Instant::now();
    let packed = jianmu_process::command("sh")
        .arg("-c")
        .arg(format!(
            "tar -cf - -C '{}' full | wc -c",
            parent.path().display()
        ))
        .output()
        .await
        .unwrap();
    let tar_c = start.elapsed();
    assert!(packed.status.success());
    // Every file changed in the sandbox.
    let bash = ToolHandle::new(FunctionTool::from_sync(
        ToolSpec::new("bash", "Runs.").with_input_schema(json!({"type": "object"})),
        |_| Ok("unused".into()),
    ))
    .unwrap();
    let runner = sandbox.clone();
    bash.execute(
        json!({"command": "cd d && for f in *; do echo y > $f; done", "timeout": 900}),
        ExecuteOptions::default().runner(&runner),
    )
    .await
    .unwrap();
    // The reference: the same archive from the engine, unpacked by `tar -x`.
    let id = sandbox.container_id().await.unwrap();
    let into = parent.path().join("tar-x");
    std::fs::create_dir(&into).unwrap();
    let start = Instant::now();
    let mut tar = jianmu_process::command("tar")
        .arg("-xf")
        .arg("-")
        .arg("-C")
        .arg(&into)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = tar.stdin.take().unwrap();
    let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
        .path(&full.to_string_lossy())
        .build();
    let mut stream = docker.download_from_container(&id, Some(options));
    while let Some(chunk) = stream.next().await {
        stdin.write_all(&chunk.unwrap()).await.unwrap();
    }
    drop(stdin);
    assert!(tar.wait().await.unwrap().success());
    let tar_x = start.elapsed();
    let start = Instant::now();
    let pulled = sandbox.pull().await.unwrap();
    let pull = start.elapsed();
    assert_eq!((pulled.files, pulled.dropped()), (n, 0), "{pulled}");
    sandbox.shutdown().await;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "docker-bench-copy {n} {:.0} {:.0} {:.0} {:.0}",
        ms(copy_in),
        ms(tar_c),
        ms(pull),
        ms(tar_x)
    );
}

/// Opens [`SESSIONS`] sessions of `sandbox`, 10 at a time, each with one call; the
/// sessions per second and the median memory (MiB) of 10 idle containers per engine.
async fn many_sessions(
    sandbox: &DockerSandbox,
    calculator: &ToolHandle,
    args: &serde_json::Value,
    engines: &[bollard::Docker],
) -> (f64, f64) {
    let sessions: Vec<DockerSandbox> = (0..SESSIONS).map(|_| sandbox.sibling()).collect();
    let start = Instant::now();
    futures::stream::iter(&sessions)
        .for_each_concurrent(10, |session| {
            let runner = session.clone();
            let args = args.clone();
            async move {
                let out = calculator
                    .execute(args, ExecuteOptions::default().runner(&runner))
                    .await
                    .unwrap();
                assert_eq!(out.text, "222");
            }
        })
        .await;
    let rate = SESSIONS as f64 / start.elapsed().as_secs_f64();
    let mut memory = Vec::new();
    let filters = std::collections::HashMap::from([("label", vec![jianmu_sandbox::LABEL])]);
    for engine in engines {
        let listed = engine
            .list_containers(Some(
                bollard::query_parameters::ListContainersOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .unwrap();
        for c in listed.iter().take(10) {
            let Some(id) = c.id.as_deref() else { continue };
            let options = bollard::query_parameters::StatsOptionsBuilder::default()
                .stream(false)
                .one_shot(true)
                .build();
            if let Some(Ok(stats)) = engine.stats(id, Some(options)).next().await
                && let Some(usage) = stats.memory_stats.and_then(|m| m.usage)
            {
                memory.push(usage);
            }
        }
    }
    memory.sort_unstable();
    let median = memory.get(memory.len() / 2).copied().unwrap_or(0);
    for session in &sessions {
        session.close().await;
    }
    (rate, median as f64 / (1024.0 * 1024.0))
}

/// Sessions opened by the many-sessions run.
const SESSIONS: usize = 100;
