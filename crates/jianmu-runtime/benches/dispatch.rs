//! Dispatch overhead: a no-op tool called through `ToolSet`, with and without
//! `ToolRunner` and an event subscriber.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_runtime::ToolRunner;
use jianmu_tool_core::{FunctionTool, ToolCall, ToolHandle, ToolOutput, ToolSet, ToolSpec};
use serde_json::{Value, json};

fn bench(c: &mut Criterion) {
    let noop = FunctionTool::from_sync(
        ToolSpec::new("noop", "Does nothing.")
            .with_input_schema(json!({"type": "object", "properties": {}})),
        |_| Ok(ToolOutput::default()),
    );
    let set = ToolSet::from_tools([ToolHandle::new(noop).unwrap()]);
    let runner = ToolRunner::local();
    let events = Arc::new(AtomicU64::new(0));
    let counter = events.clone();
    runner.events().subscribe(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut group = c.benchmark_group("dispatch");
    group.bench_function("toolset_runner_events", |b| {
        b.to_async(&rt).iter(|| async {
            set.execute("noop", Value::Object(Default::default()), Some(&runner))
                .await
                .unwrap()
        })
    });
    group.bench_function("toolset_direct", |b| {
        b.to_async(&rt).iter(|| async {
            set.execute("noop", Value::Object(Default::default()), None)
                .await
                .unwrap()
        })
    });
    group.finish();
    assert!(events.load(Ordering::Relaxed) > 0);

    // Eight calls of a tool that waits 1 ms on I/O: one by one, then as one batch.
    let io = FunctionTool::new(ToolSpec::new("io", "Waits 1 ms."), |_| async {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        Ok(ToolOutput::default())
    });
    let set = ToolSet::from_tools([ToolHandle::new(io).unwrap()]);
    let calls: Vec<ToolCall> = (0..8).map(|_| ToolCall::new("io", json!("x"))).collect();
    let mut group = c.benchmark_group("batch");
    group.bench_function("8_one_by_one", |b| {
        b.to_async(&rt).iter(|| async {
            for call in &calls {
                set.execute(&call.name, call.args.clone(), Some(&runner))
                    .await
                    .unwrap();
            }
        })
    });
    group.bench_function("8_as_batch", |b| {
        b.to_async(&rt).iter(|| async {
            for r in set.execute_batch(&calls, Some(&runner)).await {
                r.unwrap();
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
