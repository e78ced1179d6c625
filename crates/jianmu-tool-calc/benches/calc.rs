//! The calculator: parse and evaluate a 10-operator expression, alone and as a tool
//! call in process (through the runner's stack: the runtime's `dispatch` bench).

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_calc::{Calculator, evaluate};
use jianmu_tool_core::{InProcess, ToolHandle, ToolSet};
use serde_json::Value;

/// 10 operators: + * - // + % ** / - *. `cargo xtask bench` times Python on the same.
const EXPR: &str = "(12+34)*5-67//8+9%4**2/3-1.5*2";

fn bench(c: &mut Criterion) {
    assert_eq!(evaluate(EXPR).unwrap(), "222.0");
    let mut group = c.benchmark_group("calculator");
    group.bench_function("evaluate_10_ops", |b| {
        b.iter(|| evaluate(std::hint::black_box(EXPR)).unwrap())
    });
    let set = ToolSet::from_tools([ToolHandle::new(Calculator).unwrap()]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    group.bench_function("tool_call_10_ops", |b| {
        b.to_async(&rt).iter(|| async {
            set.execute(
                "calculator",
                Value::String(EXPR.to_owned()),
                Some(&InProcess),
            )
            .await
            .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
