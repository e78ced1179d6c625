//! `read_file` of a 2,000-line window from a 700 KB file. `cargo xtask bench` times
//! Python's `read_text().splitlines()` window on the same file.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_fs::{ReadArgs, ReadFile, ReadSettings};
use jianmu_workspace::Workspace;

/// Where the file is written, so the Python reference reads the very same bytes.
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data")
}

fn bench(c: &mut Criterion) {
    let dir = data_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = (0..20_000)
        .map(|i| format!("{i:06}: the quick brown fox jumps!\n"))
        .collect();
    assert!((690_000..=720_000).contains(&text.len()), "{}", text.len());
    std::fs::write(dir.join("read-700k.txt"), &text).unwrap();
    let ws = Arc::new(Workspace::open(&dir).unwrap());
    let tool = ReadFile::new(ws, ReadSettings::default());
    let args = ReadArgs {
        path: "read-700k.txt".into(),
        offset: Some(9001),
        limit: Some(2000),
        // Plain lines, as the reference returns them.
        line_numbers: Some(false),
        pages: None,
    };
    let out = tool.read(&args).unwrap();
    assert!(out.text.starts_with("009000: "), "{}", &out.text[..20]);
    let mut group = c.benchmark_group("read_file");
    group.bench_function("window_2000_of_700k", |b| {
        b.iter(|| tool.read(&args).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
