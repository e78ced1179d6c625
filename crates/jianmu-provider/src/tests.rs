//! The provider per feature set: exactly the enabled tools are registered, and every
//! other name fails with an error that says what to do.

use jianmu_tool_core::{ToolConfig, ToolError, ToolProvider, ToolSet};

use super::*;

/// The names each feature must register; the test is built once per feature set.
// Each feature adds a name, so the list is built by pushes.
#[allow(unused_mut, clippy::vec_init_then_push)]
fn expected() -> Vec<&'static str> {
    let mut names = Vec::new();
    #[cfg(feature = "calculator")]
    names.push("calculator");
    #[cfg(feature = "code")]
    names.extend([
        "apply_patch",
        "edit_file",
        "file_info",
        "glob_search",
        "grep_search",
        "str_replace",
    ]);
    #[cfg(feature = "fs")]
    names.extend(["list_dir", "notebook_edit", "read_file", "write_file"]);
    #[cfg(feature = "git")]
    names.extend([
        "git_add",
        "git_blame",
        "git_branch",
        "git_checkout",
        "git_commit",
        "git_diff",
        "git_log",
        "git_show",
        "git_status",
    ]);
    #[cfg(feature = "http")]
    names.extend(["http_request", "web_fetch"]);
    #[cfg(feature = "lsp")]
    names.extend([
        "definition",
        "diagnostics",
        "hover",
        "references",
        "symbols",
    ]);
    #[cfg(feature = "script")]
    names.extend(["python_repl", "rhai_repl", "run_script"]);
    #[cfg(feature = "search")]
    names.push("duckduckgo_search");
    #[cfg(feature = "checkpoint")]
    names.extend(["checkpoint_diff", "checkpoint_list", "checkpoint_restore"]);
    #[cfg(feature = "shell")]
    names.extend([
        "bash",
        "bash_jobs",
        "bash_kill",
        "bash_output",
        "expose_port",
    ]);
    names.sort_unstable();
    names
}

#[test]
fn exactly_the_enabled_tools_are_registered() {
    assert_eq!(available_tools(), expected());
    let provider = BuiltinToolProvider::default();
    let names: Vec<String> = provider
        .tools()
        .unwrap()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, expected());
}

#[test]
fn every_builtin_names_a_feature_and_aliases_point_at_builtins() {
    for (alias, canonical) in ALIASES {
        assert_eq!(canonical_tool_name(alias), *canonical);
        assert!(feature_for(alias).is_some(), "{alias}");
    }
    assert_eq!(canonical_tool_name("calculator"), "calculator");
    for name in available_tools() {
        assert!(feature_for(name).is_some(), "{name} has no feature");
    }
    let mut sorted = BUILTIN_TOOLS.to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, BUILTIN_TOOLS, "keep BUILTIN_TOOLS sorted");
}

#[test]
fn missing_tools_name_their_feature_and_unknown_ones_list_the_known() {
    let provider = BuiltinToolProvider::new(ToolConfig::new("."));
    for (name, feature) in [
        ("read_file", "fs"),
        ("web_search", "search"),
        ("python_eval", "script"),
    ] {
        let canonical = canonical_tool_name(name);
        match provider.resolve_named_tools(&[name]) {
            Ok(tools) => {
                assert!(
                    expected().contains(&canonical),
                    "{name} resolved without its feature"
                );
                assert_eq!(tools[0].name(), canonical);
            }
            Err(ToolError::NotCompiled {
                name: n,
                feature: f,
            }) => {
                assert!(!expected().contains(&canonical), "{name} is compiled in");
                assert_eq!((f.as_str(), n.as_str()), (feature, canonical));
            }
            Err(other) => panic!("{name}: {other}"),
        }
    }
    let err = provider.resolve_named_tools(&["nope"]).unwrap_err();
    let known = expected().join(", ");
    assert_eq!(
        err.to_string(),
        format!("unknown tool `nope`; known tools: {known}")
    );
}

#[cfg(feature = "calculator")]
#[tokio::test]
async fn resolve_keeps_order_and_runs_through_the_set() {
    let provider = BuiltinToolProvider::default();
    let tools = provider
        .resolve_named_tools(&["calculator", "calculator"])
        .unwrap();
    assert_eq!(tools.len(), 2);
    let set = ToolSet::resolve(&provider, &["calculator"]).unwrap();
    let out = set
        .execute("calculator", serde_json::json!({"input": "-7//2"}), None)
        .await
        .unwrap();
    assert_eq!(out.text, "-4");
}

#[cfg(not(feature = "calculator"))]
#[test]
fn without_features_nothing_resolves() {
    let err = ToolSet::resolve(&BuiltinToolProvider::default(), &["calculator"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `calculator` is not compiled in; enable the `calculator` Cargo feature of jianmu-provider"
    );
}
