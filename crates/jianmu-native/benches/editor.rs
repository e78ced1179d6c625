//! The text editor's `str_replace` when `old_str` occurs 20,000 times in a 1 MB file
//! (answered with every line it is on), against one `str::replace` over the text.

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_native::{Native, NativeOptions};
use jianmu_runtime::{Runtime, SessionSettings};
use jianmu_tool_core::ToolConfig;
use serde_json::json;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // 20,000 lines of 50 bytes, each holding `needle` once: 1 MB.
    let line = format!("{:<43}needle\n", "some text before the match,");
    let text = line.repeat(20_000);
    assert_eq!(text.matches("needle").count(), 20_000);
    std::fs::write(dir.path().join("big.txt"), &text).unwrap();
    let native = {
        let _enter = rt.enter();
        let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(dir.path()))).unwrap();
        Native::open(&runtime, NativeOptions::new().with_root("/repo")).unwrap()
    };
    let call = json!({"type": "tool_use", "id": "toolu_1", "name": "str_replace_based_edit_tool", "input": {
        "command": "str_replace", "path": "/repo/big.txt", "old_str": "needle", "new_str": "pin",
    }});
    let mut group = c.benchmark_group("editor");
    group.sample_size(20);
    group.bench_function("str_replace_20000_matches_1mb", |b| {
        b.to_async(&rt).iter(|| async {
            let out = native.anthropic(&call).await.unwrap();
            assert_eq!(out["is_error"], true);
        })
    });
    group.bench_function("str_replace_reference", |b| {
        b.iter(|| text.replace("needle", "pin"))
    });
    group.finish();
    rt.block_on(native.close());
}

criterion_group!(benches, bench);
criterion_main!(benches);
