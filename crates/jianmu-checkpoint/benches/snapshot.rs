//! Checkpoint snapshots of a 10,000-file workspace: after one file changed (what each
//! turn pays), and the first one (a new store).

use std::path::Path;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use jianmu_checkpoint::{Settings, Store};

/// 10,000 files of about 1 KB in 100 folders.
fn workspace(root: &Path) {
    for d in 0..100 {
        let dir = root.join(format!("dir{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            let text = format!("file {d}/{f}\n").repeat(80);
            std::fs::write(dir.join(format!("f{f:03}.txt")), text).unwrap();
        }
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    workspace(&ws);
    let store = Store::open(&tmp.path().join("store"), &ws, &[], Settings::default()).unwrap();
    store.snapshot("first").unwrap();
    let mut group = c.benchmark_group("checkpoint");
    group.sample_size(30);
    let mut n = 0u64;
    group.bench_function("snapshot_10k_one_change", |b| {
        b.iter(|| {
            n += 1;
            std::fs::write(ws.join("dir050/f050.txt"), format!("change {n}\n")).unwrap();
            store.snapshot("turn").unwrap()
        })
    });
    group.sample_size(10);
    let mut k = 0u64;
    group.bench_function("snapshot_10k_first", |b| {
        b.iter_batched(
            || {
                k += 1;
                tmp.path().join(format!("fresh{k}"))
            },
            |dir| {
                let fresh = Store::open(&dir, &ws, &[], Settings::default()).unwrap();
                fresh.snapshot("first").unwrap()
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
