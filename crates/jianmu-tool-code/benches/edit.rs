//! `edit_file` (10 edits, 5 MB file) and `apply_patch` (50 hunks, 10 files) in
//! process, on the files and arguments `cargo xtask bench` prepares (it times `git
//! apply` of the same change on the same files). Each iteration starts from the
//! original files, restored untimed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use jianmu_tool_code::{ApplyPatch, EditArgs, EditFile, PatchArgs};
use jianmu_workspace::Workspace;

fn data() -> PathBuf {
    std::env::var_os("JIANMU_EDIT_BENCH_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data/edit"),
        PathBuf::from,
    )
}

/// Copies every file of `from` into `to`.
fn restore(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn args<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; `cargo xtask bench` prepares the editing data",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn bench(c: &mut Criterion) {
    let data = data();
    let mut group = c.benchmark_group("edit");
    group.sample_size(20);

    let one = data.join("one-bench");
    std::fs::create_dir_all(&one).unwrap();
    let edit = EditFile::new(Arc::new(Workspace::open(&one).unwrap()), Default::default());
    let edit_args: EditArgs = args(&data.join("one.json"));
    group.bench_function("edit_file_10_edits_5mb", |b| {
        b.iter_batched(
            || restore(&data.join("one-orig"), &one),
            |()| edit.edit(&edit_args).unwrap(),
            BatchSize::PerIteration,
        )
    });

    let many = data.join("many-bench");
    std::fs::create_dir_all(&many).unwrap();
    let patch = ApplyPatch::new(
        Arc::new(Workspace::open(&many).unwrap()),
        Default::default(),
    );
    let patch_args: PatchArgs = args(&data.join("many.json"));
    group.bench_function("apply_patch_50_hunks_10_files", |b| {
        b.iter_batched(
            || restore(&data.join("many-orig"), &many),
            |()| patch.apply(&patch_args).unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
