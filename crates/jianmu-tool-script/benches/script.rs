//! Per-call costs of the script tools on a warm instance: `rhai_repl` (engine built
//! once) and `python_repl` (interpreter started once). `cargo xtask bench` adds the
//! references: Python `exec` with captured stdout, and `python3 -c` per call.

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_script::{
    PythonArgs, PythonRepl, PythonSettings, RhaiArgs, RhaiRepl, RhaiSettings,
};

fn bench(c: &mut Criterion) {
    let rhai = RhaiRepl::new(RhaiSettings::default());
    let args = RhaiArgs {
        code: "x + 1".into(),
        reset: false,
    };
    rhai.run(&RhaiArgs {
        code: "let x = 41;".into(),
        reset: false,
    })
    .unwrap();
    assert_eq!(rhai.run(&args).unwrap().text, "42");
    let mut group = c.benchmark_group("script");
    group.bench_function("rhai_warm_call", |b| b.iter(|| rhai.run(&args).unwrap()));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let python = PythonRepl::new(PythonSettings::default(), std::env::temp_dir()).unwrap();
    let args = PythonArgs {
        code: "x + 1".into(),
        timeout: None,
        session: None,
        reset: false,
    };
    rt.block_on(python.run(&PythonArgs {
        code: "x = 41".into(),
        timeout: None,
        session: None,
        reset: false,
    }))
    .unwrap();
    assert_eq!(rt.block_on(python.run(&args)).unwrap().text, "42");
    group.bench_function("python_warm_round_trip", |b| {
        b.to_async(&rt)
            .iter(|| async { python.run(&args).await.unwrap() })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
