//! Dispatch overhead: a no-op tool called through `ToolSet`, with and without
//! `ToolRunner` and an event subscriber, and the calculator called through both.

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
    // The same call under ask rules it does not match: what a call that needs no
    // approval pays for them.
    let asking = ToolRunner::local().with_policy(jianmu_tool_core::Policy {
        ask: vec![
            "bash".into(),
            "command:git push".into(),
            "path:deploy/**".into(),
        ],
        ..jianmu_tool_core::Policy::default()
    });
    group.bench_function("toolset_runner_ask_rules", |b| {
        b.to_async(&rt).iter(|| async {
            set.execute("noop", Value::Object(Default::default()), Some(&asking))
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
    // The calculator, as the provider builds it, through the runner's stack.
    let calc = ToolSet::lazy(jianmu_provider::BuiltinToolProvider::new(
        jianmu_tool_core::ToolConfig::new(std::env::temp_dir()),
    ))
    .unwrap();
    let expr = Value::String("(12+34)*5-67//8+9%4**2/3-1.5*2".to_owned());
    group.bench_function("calculator_10_ops", |b| {
        b.to_async(&rt).iter(|| async {
            calc.execute("calculator", expr.clone(), Some(&runner))
                .await
                .unwrap()
        })
    });
    group.finish();
    // The subscriber heard the calls (none when a filter skipped the group).
    if events.load(Ordering::Relaxed) == 0 {
        eprintln!("dispatch: no event was emitted");
    }

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
    nested(c);
}

/// A call a script makes against the same call made directly: a session's
/// `calculator`, 200 calls of it from one `run_script`, and the same loop without the
/// calls. The overhead of a nested call is
/// `(nested_200 - loop_200) / 200 - session_calculator`.
fn nested(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = {
        let _enter = rt.enter();
        jianmu_runtime::Session::open(jianmu_runtime::SessionSettings::new(
            jianmu_tool_core::ToolConfig::new(dir.path()),
        ))
        .unwrap()
    };
    let script = |code: &str| json!({ "code": code });
    let calls = script(r#"for i in 0..200 { calculator("1+1"); }"#);
    let bare = script(r#"for i in 0..200 { "1+1".len(); }"#);
    let mut group = c.benchmark_group("nested");
    group.bench_function("session_calculator", |b| {
        b.to_async(&rt)
            .iter(|| async { session.call("calculator", json!("1+1")).await.unwrap() })
    });
    group.bench_function("script_200_calculator", |b| {
        b.to_async(&rt)
            .iter(|| async { session.call("run_script", calls.clone()).await.unwrap() })
    });
    group.bench_function("script_200_loop_only", |b| {
        b.to_async(&rt)
            .iter(|| async { session.call("run_script", bare.clone()).await.unwrap() })
    });
    group.finish();
    rt.block_on(session.close());
}

criterion_group!(benches, bench);
criterion_main!(benches);
