//! A calculator call through the rig adapter against the same call made natively on
//! the same session, in one run.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = {
        let _enter = rt.enter();
        Arc::new(
            jianmu_runtime::Session::open(jianmu_runtime::SessionSettings::new(
                jianmu_tool_core::ToolConfig::new(dir.path()),
            ))
            .unwrap(),
        )
    };
    let tool = jianmu_adapters::rig::session_tool(&session, "calculator").unwrap();
    let mut group = c.benchmark_group("adapters");
    group.bench_function("session_calculator", |b| {
        b.to_async(&rt).iter(|| async {
            session
                .call("calculator", json!({"input": "2**100"}))
                .await
                .unwrap()
        })
    });
    group.bench_function("rig_calculator", |b| {
        b.to_async(&rt)
            .iter(|| async { tool.execute(json!({"input": "2**100"})).await.unwrap() })
    });
    group.finish();
    rt.block_on(session.close());
}

criterion_group!(benches, bench);
criterion_main!(benches);
