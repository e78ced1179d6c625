//! Properties of what a model controls, over generated input: any JSON value as the
//! arguments of any tool ends in an answer (never a panic, never a hang); a path never
//! maps outside the workspace; file names never reach a listing as raw control
//! characters.

use std::time::Duration;

use jianmu_provider::BuiltinToolProvider;
use jianmu_tool_core::{ToolConfig, ToolSet};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Argument names the tools know, so generated objects reach past schema checks.
const KEYS: &[&str] = &[
    "path",
    "content",
    "old",
    "new",
    "regex",
    "count",
    "expected_count",
    "pattern",
    "query",
    "glob",
    "limit",
    "offset",
    "expression",
    "code",
    "command",
    "timeout",
    "append",
    "create_dirs",
    "include_hidden",
    "case_sensitive",
    "recursive",
    "edits",
    "patch",
    "line_numbers",
    "dry_run",
    "replace_all",
    "session",
    "reset",
];

/// Pieces of patches, so generated patches reach past the parser.
const PATCH_LINES: &[&str] = &[
    "*** Begin Patch",
    "*** End Patch",
    "*** Add File: new.txt",
    "*** Add File: ../outside.txt",
    "*** Update File: a.txt",
    "*** Update File: /etc/hostname",
    "*** Delete File: a.txt",
    "*** Move to: b.txt",
    "*** Move to: ../moved.txt",
    "*** End of File",
    "@@",
    "@@ alpha",
    " alpha",
    " beta",
    "-alpha",
    "-beta",
    "+gamma",
    "+",
    "",
    "junk",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "\\PC{0,40}".prop_map(Value::String),
        prop_oneof![
            Just(".."),
            Just("/"),
            Just("a/"),
            Just("../x"),
            Just("*"),
            Just("\n"),
            Just("(")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// Every tool but those that would reach the network.
fn local_tools(dir: &std::path::Path) -> (ToolSet, Vec<String>) {
    let config = ToolConfig::new(dir)
        .with_settings("bash", serde_json::json!({"timeout_secs": 5.0}))
        .with_settings("python_repl", serde_json::json!({"timeout_secs": 5.0}));
    let set = ToolSet::from_providers(&[&BuiltinToolProvider::new(config)]).unwrap();
    let names = set
        .iter()
        .map(|t| t.spec().name.clone())
        .filter(|n| n != "http_request" && n != "web_fetch" && n != "duckduckgo_search")
        .collect();
    (set, names)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_json_arguments_end_in_an_answer(pick in any::<prop::sample::Index>(), args in json_value()) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\nbeta\n").unwrap();
        let (tools, names) = local_tools(dir.path());
        let name = pick.get(&names).clone();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(30), tools.execute(&name, args.clone(), None)).await
        });
        let Ok(outcome) = outcome else {
            panic!("`{name}` did not answer {args} within 30 s");
        };
        if let Err(e) = outcome {
            let chain = jianmu_tool_core::error_chain(&e);
            prop_assert!(!chain.contains("panicked"), "`{}` panicked on {}: {}", name, args, chain);
            prop_assert!(chain.len() < 4096, "`{}`: an error of {} bytes", name, chain.len());
        }
    }

    #[test]
    fn any_patch_ends_in_an_answer_and_stays_inside(lines in prop::collection::vec(prop::sample::select(PATCH_LINES), 0..24)) {
        let top = tempfile::tempdir().unwrap();
        let ws = top.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\nbeta\n").unwrap();
        let (tools, _) = local_tools(&ws);
        // Framed, so most generated patches reach the placing and writing code.
        let patch = format!("*** Begin Patch\n{}\n*** End Patch", lines.join("\n"));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(tools.execute("apply_patch", Value::String(patch.clone()), None));
        if let Err(e) = &outcome {
            prop_assert!(e.is_model_facing(), "{:?}: {}", patch, e);
        }
        let outside: Vec<_> = std::fs::read_dir(top.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        prop_assert_eq!(outside, vec![std::ffi::OsString::from("ws")], "{:?}", patch);
    }

    #[test]
    fn a_path_never_maps_outside_the_workspace(path in "(/|\\.\\.|\\.|a|b/|/tmp|\\x00|\\PC){0,12}") {
        let dir = tempfile::tempdir().unwrap();
        let ws = jianmu_workspace::Workspace::open(dir.path()).unwrap();
        if let Ok(rel) = ws.relative(&path) {
            prop_assert!(rel.components().all(|c| matches!(c, std::path::Component::Normal(_))), "{:?} -> {:?}", path, rel);
            prop_assert!(dir.path().join(&rel).starts_with(dir.path()));
        }
    }

    #[test]
    fn listings_never_carry_raw_control_characters(name in "[^/\\x00]{1,40}") {
        prop_assume!(name != "." && name != "..");
        let dir = tempfile::tempdir().unwrap();
        prop_assume!(std::fs::write(dir.path().join(&name), "needle\u{1b}[31m\n").is_ok());
        let (tools, _) = local_tools(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for (tool, args) in [
            ("list_dir", serde_json::json!({"path": "."})),
            ("glob_search", serde_json::json!({"pattern": "*", "include_hidden": true})),
            ("grep_search", serde_json::json!({"query": "needle", "include_hidden": true})),
        ] {
            let text = match rt.block_on(tools.execute(tool, args, None)) {
                Ok(out) => out.text,
                Err(e) => jianmu_tool_core::error_chain(&e),
            };
            prop_assert!(
                !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
                "{}: {:?}", tool, text
            );
        }
    }
}
