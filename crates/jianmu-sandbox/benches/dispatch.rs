//! Dispatch overhead: a no-op tool called through `ToolSet`, with and without
//! `ToolRunner` and an event subscriber.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_sandbox::ToolRunner;
use jianmu_tool_core::{FunctionTool, ToolHandle, ToolOutput, ToolSet, ToolSpec};
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
