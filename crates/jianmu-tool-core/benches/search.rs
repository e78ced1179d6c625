//! `ToolIndex::search` over every built-in tool's definition (the MCP export
//! snapshot), against a plain scan of every description for the query's words.

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_core::{ToolIndex, ToolSpec};
use serde_json::Value;

/// Every built-in tool as `tools/list` gives it.
const TOOLS: &str = include_str!("../../../tests/it/snapshots/mcp.json");

fn bench(c: &mut Criterion) {
    let tools: Vec<Value> = serde_json::from_str(TOOLS).unwrap();
    let specs: Vec<ToolSpec> = tools
        .iter()
        .map(|t| {
            ToolSpec::new(
                t["name"].as_str().unwrap(),
                t["description"].as_str().unwrap(),
            )
            .with_input_schema(t["inputSchema"].clone())
        })
        .collect();
    assert!(specs.len() > 30, "the snapshot lists {} tools", specs.len());
    let index = ToolIndex::new(&specs);
    let query = "show the commit history of a file";
    assert_eq!(index.search("commit history", 1), ["git_log"]);
    let mut group = c.benchmark_group("search");
    group.bench_function("tool_index_all", |b| b.iter(|| index.search(query, 5)));
    // The reference: each query word looked for in every lowercased description.
    let lowered: Vec<String> = specs.iter().map(|s| s.description.to_lowercase()).collect();
    let words: Vec<&str> = query.split(' ').collect();
    group.bench_function("substring_scan_all", |b| {
        b.iter(|| {
            lowered
                .iter()
                .filter(|d| words.iter().any(|w| d.contains(w)))
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
