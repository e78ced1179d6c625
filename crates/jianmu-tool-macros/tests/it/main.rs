//! Behaviour of `#[tool]`-made tools through the real call path.

use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_macros::tool;
use serde_json::json;

/// Adds two integers.
///
/// Both must fit in i64.
#[tool]
fn add(
    /// The left operand.
    a: i64,
    b: i64,
) -> i64 {
    a + b
}

#[tool(name = "greet", description = "Greets.", parallel_safe = false, effects = ["net", "log"])]
async fn greet_fn(name: String, times: Option<u32>) -> String {
    tokio::task::yield_now().await;
    format!("hello {name}").repeat(times.unwrap_or(1) as usize)
}

/// Fails on odd numbers.
#[tool]
fn even(n: u64) -> Result<String, String> {
    if n.is_multiple_of(2) {
        Ok(format!("{n} is even"))
    } else {
        Err(format!("{n} is odd"))
    }
}

/// Takes nothing.
#[tool]
fn nothing() -> &'static str {
    "done"
}

/// A point.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Point {
    /// Across.
    x: i64,
    /// Down.
    y: i64,
}

/// Finds the point.
#[tool]
fn locate(x: i64) -> Result<jianmu_tool_core::Json<Point>, String> {
    Ok(jianmu_tool_core::Json(Point { x, y: 2 * x }))
}

/// Returns something that can answer.
#[tool]
fn opaque() -> impl jianmu_tool_core::IntoToolOutput {
    "opaque"
}

async fn call(tool: jianmu_tool_core::FunctionTool, args: serde_json::Value) -> String {
    let handle = ToolHandle::new(tool).unwrap();
    match handle.execute(args, ExecuteOptions::default()).await {
        Ok(out) => out.text,
        Err(e) => format!("error: {e}"),
    }
}

#[tokio::test]
async fn sync_fn_with_doc_comments() {
    let spec = add_tool().spec().clone();
    assert_eq!(spec.name, "add");
    assert_eq!(
        spec.description,
        "Adds two integers.\n\nBoth must fit in i64."
    );
    assert!(spec.parallel_safe);
    assert!(spec.effect_tags.is_empty());
    assert_eq!(
        spec.input_schema,
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "format": "int64", "description": "The left operand."},
                "b": {"type": "integer", "format": "int64"},
            },
            "required": ["a", "b"],
            "additionalProperties": false,
        })
    );
    assert_eq!(call(add_tool(), json!({"a": 2, "b": 40})).await, "42");
    assert_eq!(add(2, 2), 4);
    assert_eq!(
        call(add_tool(), json!({"a": 2})).await,
        r#"error: invalid arguments for `add`: at /: "b" is a required property"#
    );
}

#[tokio::test]
async fn async_fn_with_attribute_keys() {
    let spec = greet_fn_tool().spec().clone();
    assert_eq!(spec.name, "greet");
    assert_eq!(spec.description, "Greets.");
    assert!(!spec.parallel_safe);
    assert_eq!(spec.effect_tags, ["net", "log"]);
    assert_eq!(spec.input_schema["required"], json!(["name"]));
    assert_eq!(call(greet_fn_tool(), json!({"name": "x"})).await, "hello x");
    assert_eq!(
        call(greet_fn_tool(), json!({"name": "y", "times": 2})).await,
        "hello yhello y"
    );
}

#[tokio::test]
async fn err_becomes_a_tool_failure() {
    assert_eq!(call(even_tool(), json!({"n": 4})).await, "4 is even");
    assert_eq!(call(even_tool(), json!({"n": 3})).await, "error: 3 is odd");
}

#[tokio::test]
async fn no_arguments() {
    assert_eq!(call(nothing_tool(), json!({})).await, "done");
    assert_eq!(call(nothing_tool(), json!(null)).await, "done");
    assert!(
        call(nothing_tool(), json!({"x": 1}))
            .await
            .starts_with("error: invalid arguments")
    );
}

#[test]
fn misuse_fails_to_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

/// A function that returns a typed value declares its shape: the output schema is
/// derived from the type, and the structured output it gives matches it.
#[tokio::test]
async fn a_typed_return_declares_its_output_schema() {
    let spec = locate_tool().spec().clone();
    let schema = spec.structured_output_schema().expect("an object schema");
    assert_eq!(schema["properties"]["x"]["type"], "integer");
    assert_eq!(schema["properties"]["y"]["description"], "Down.");
    let handle = ToolHandle::new(locate_tool()).unwrap();
    let out = handle
        .execute(json!({"x": 3}), ExecuteOptions::default())
        .await
        .unwrap();
    assert_eq!(out.structured, Some(json!({"x": 3, "y": 6})));
    // An `impl Trait` return cannot be named: the text schema.
    assert_eq!(opaque_tool().spec().output_schema["type"], "string");
    assert_eq!(call(opaque_tool(), json!({})).await, "opaque");
    // A function that returns text keeps the text schema.
    let text = nothing_tool().spec().clone();
    assert!(text.structured_output_schema().is_none());
    assert_eq!(text.output_schema["type"], "string");
}
