//! Suspend and resume of a session whose workspace holds 10 MB, its sandbox placed by
//! Docker Swarm (the workspace copied), each against its reference in the same run:
//! suspending (changes brought back, shells saved, the task removed) against closing
//! the same kind of session; resuming to its first answer (a new task, the workspace
//! copied in again, shells given back) against a new session's first answer.
//!
//! Needs `JIANMU_BENCH_SWARM`, the folder of a swarm made by `tests/swarm/swarm.sh up`,
//! with the image `jianmu-sandbox:bench` built on its nodes (the `swarm` bench of
//! `jianmu-sandbox` builds it); `cargo xtask bench --docker-only` runs both. Prints
//! `docker-bench NAME P50_US P99_US` lines.

use std::time::{Duration, Instant};

use jianmu_runtime::docker::{EngineAddress, Orchestrator, WorkspaceMode};
use jianmu_runtime::{Backend, DockerSettings, Runtime, Session, SessionSettings};
use jianmu_test_support::{block_on_bench, report_bench};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

const ROUNDS: usize = 8;

fn main() {
    let Ok(base) = std::env::var("JIANMU_BENCH_SWARM") else {
        eprintln!("suspend bench skipped: set JIANMU_BENCH_SWARM");
        return;
    };
    block_on_bench(bench(base));
}

async fn first_answer(session: &Session) {
    let out = session
        .call(
            "bash",
            json!({"command": "echo $A; ls | wc -l", "session": "dev"}),
        )
        .await
        .unwrap();
    assert!(out.text.contains("11"), "{}", out.text);
}

async fn bench(base: String) {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // 10 files of 1 MiB that do not compress.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..10 {
        let mut bytes = Vec::with_capacity(1 << 20);
        while bytes.len() < 1 << 20 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.extend_from_slice(&seed.to_le_bytes());
        }
        std::fs::write(ws.join(format!("data-{i}.bin")), bytes).unwrap();
    }
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).ok();
    for entry in std::fs::read_dir(&ws).unwrap() {
        std::os::unix::fs::chown(entry.unwrap().path(), Some(65534), Some(65534)).ok();
    }
    let mut settings = SessionSettings::new(ToolConfig::new(&ws));
    settings.backend = Backend::Docker(Box::new(DockerSettings {
        image: "jianmu-sandbox:bench".into(),
        orchestrator: Orchestrator::Swarm,
        workspace_mode: WorkspaceMode::Copy,
        hosts: ["n1", "n2", "n3"]
            .iter()
            .map(|n| EngineAddress::Url(format!("unix://{base}/{n}/docker.sock")))
            .collect(),
        ..DockerSettings::default()
    }));
    let runtime = Runtime::new(settings).unwrap();
    let file = parent.path().join("suspended.json");
    let (mut suspend, mut close, mut resume, mut fresh) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        // Reference: a new session to its first answer, then closed.
        let session = runtime.open().unwrap();
        session
            .call("bash", json!({"command": "export A=7", "session": "dev"}))
            .await
            .unwrap();
        let start = Instant::now();
        session.close().await;
        close.push(start.elapsed());

        let session = runtime.open().unwrap();
        let start = Instant::now();
        session
            .call(
                "bash",
                json!({"command": "export A=7; echo 7", "session": "dev"}),
            )
            .await
            .unwrap();
        fresh.push(start.elapsed());
        let start = Instant::now();
        session.suspend(&file).await.unwrap();
        suspend.push(start.elapsed());
        let start = Instant::now();
        let (resumed, _) = runtime.resume(&file).unwrap();
        first_answer(&resumed).await;
        resume.push(start.elapsed());
        resumed.close().await;
    }
    report_bench("suspend_10mb", suspend);
    report_bench("close_10mb", close);
    report_bench("resume_10mb_first_answer", resume);
    report_bench("new_session_10mb_first_answer", fresh);
    runtime.shutdown(Duration::from_secs(15)).await;
}
