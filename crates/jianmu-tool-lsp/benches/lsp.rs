//! `diagnostics` latency with a real `pylsp`: the first call (the server starts,
//! opens the file and lints it), a warm call on an unchanged file, and a warm call
//! after the file changed (the server lints it again).

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_core::{ExecuteOptions, ToolConfig, ToolHandle};
use serde_json::json;

fn tool(dir: &Path) -> ToolHandle {
    let pylsp = jianmu_test_support::pylsp();
    let config = ToolConfig::new(dir).with_settings(
        jianmu_tool_lsp::SETTINGS,
        json!({"servers": {"python": {"command": [pylsp.to_string_lossy()], "extensions": ["py"]}}}),
    );
    let registration = jianmu_tool_core::registrations()
        .find(|r| r.name == "diagnostics")
        .expect("registered");
    (registration.build)(&config).unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.py");
    std::fs::write(&file, "import os\n\nprint(undefined_name)\n").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let args = json!({"paths": ["app.py"]});
    let check = |t: &ToolHandle| {
        let out = rt
            .block_on(t.execute(args.clone(), ExecuteOptions::default()))
            .unwrap();
        assert!(out.text.contains("undefined name"), "{}", out.text);
    };
    let mut group = c.benchmark_group("lsp");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("diagnostics_first", |b| {
        b.iter_custom(|n| {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                let t = tool(dir.path());
                let start = Instant::now();
                check(&t);
                total += start.elapsed();
                // The server ends with the last handle on its scope.
                drop(t);
            }
            total
        });
    });
    let warm = tool(dir.path());
    check(&warm);
    group.bench_function("diagnostics_warm_unchanged", |b| b.iter(|| check(&warm)));
    let mut k = 0u64;
    group.bench_function("diagnostics_warm_changed", |b| {
        b.iter_custom(|n| {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                k += 1;
                std::fs::write(&file, format!("import os\n\nprint(undefined_name, {k})\n"))
                    .unwrap();
                let start = Instant::now();
                check(&warm);
                total += start.elapsed();
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
